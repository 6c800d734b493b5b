"""The hop backend interface (gnnprep.precompute.backend.HopBackend): every backend states it, and
make_backend picks the implementation by backend name and HAG."""

import inspect

import numpy as np
import pytest
from fixtures import make_store

from gnnprep.precompute.backend import HopBackend, make_backend
from gnnprep.precompute.cpu_backends import HagBackend, NumbaBackend

torch = pytest.importorskip("torch")

from gnnprep.precompute.torch_backends import TorchBackend, TorchHagBackend  # noqa: E402 - needs torch

BACKENDS = (NumbaBackend, HagBackend, TorchBackend, TorchHagBackend)


def _protocol_methods():
    return {name: inspect.signature(fn) for name, fn in vars(HopBackend).items()
            if callable(fn) and not name.startswith("_")}


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda c: c.__name__)
def test_each_backend_has_the_interfaces_methods_with_its_parameters(cls):
    methods = _protocol_methods()
    assert set(methods) == {"prepare", "empty_like", "begin_hop", "hop_block", "to_host", "sync", "end_block"}
    for name, sig in methods.items():
        own = inspect.signature(getattr(cls, name))
        assert list(own.parameters) == list(sig.parameters), (cls.__name__, name)
    assert isinstance(cls.name, str) and isinstance(cls.selects_rows, (bool, property))


def test_a_backend_missing_a_method_is_not_one():
    class Partial:
        name, op, selects_rows = "x", None, False

        def prepare(self, cur):
            return cur

    assert not isinstance(Partial(), HopBackend)


def test_make_backend_picks_by_name_and_hag(tmp_path, rng):
    from gnnprep.graph.store import GraphStore
    from gnnprep.precompute.hop_graph import HopGraph
    from gnnprep.precompute.operators import make_operator
    from gnnprep.precompute.plan import Plan

    path, *_ = make_store(tmp_path, rng, n=40, m=160, d=3)

    class Hag:  # the arrays the executors read: no aggregation node, the in-lists as stored
        def __init__(self, store):
            self.num_nodes, self.num_agg = store.num_nodes, 0
            self.inputs = np.zeros((0, 2), dtype=np.int64)
            self.level_ptr = np.zeros(1, dtype=np.int64)
            self.indptr, self.indices = store.indptr(), store.stored_indices()

    with GraphStore(path) as store:
        plan = Plan(a=1, b=2, c=1, width=3, s_resident=True, device="cpu", budget=1 << 30, predicted_peak=0,
                    predicted_seconds=0.0)
        g = HopGraph(store, plan)
        op = make_operator("sym", store.in_degree(), store.symmetric)
        picked = {(name, hag is not None): make_backend(name, g, op, "cpu", hag)
                  for name in ("numba", "torch") for hag in (None, Hag(store))}
        assert {k: type(v) for k, v in picked.items()} == {
            ("numba", False): NumbaBackend, ("numba", True): HagBackend,
            ("torch", False): TorchBackend, ("torch", True): TorchHagBackend}
        assert all(isinstance(be, HopBackend) for be in picked.values())
        g.close()
