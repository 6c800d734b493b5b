"""Hops through a HAG on the torch backend (gnnprep.precompute.torch_backends), CPU and CUDA: equal to the
plain hops to float tolerance on random graphs with isolated nodes, self-loops, duplicate and
directed edges, for every operator a HAG runs (norm family, ppr)."""

import json

import numpy as np
import pytest
from fixtures import assert_close, clique_store, make_store, random_edges, run

torch = pytest.importorskip("torch")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the CUDA variant needs a CUDA device (torch.cuda.is_available() is False)"))]
OPERATORS = ("sym", "rw", "sym-noloop", "norm:a=0.3,b=0.9,loop=2", "ppr:alpha=0.15,k=3")


def _overlapping_edges(rng, n, groups=10, size=16, pool=30, noise=150):
    """Random directed edges (self-loops, duplicates, the last 3 nodes isolated) plus dense
    overlapping groups, so a HAG finds shared sums."""
    src, dst = random_edges(rng, n, noise)
    g = [rng.choice(pool, size, replace=False) for _ in range(groups)]
    gs = np.concatenate([np.repeat(x, size) for x in g])
    gd = np.concatenate([np.tile(x, size) for x in g])
    return np.concatenate([src, gs]), np.concatenate([dst, gd])


def _clique_store(tmp_path, rng, n=120, d=5):
    """A symmetric store of 40 overlapping 10-cliques over the first n - 2 nodes (2 isolated): pairs
    shared by many in-lists, where a HAG pays even on the torch executor's cost terms."""
    return clique_store(tmp_path, rng, n, 40, d, size=10, among=n - 2, name="c.h5")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loop", [0.0, 1.0, 2.5])
def test_executor_equals_dense_reference(rng, device, loop):
    """TorchHagBackend's rows of diag(l)(A + λI)diag(r)·x, in several row blocks, against the dense
    product, with d not divisible by anything."""
    import scipy.sparse as sp

    from gnnprep.hag.search import sequential_search
    from gnnprep.precompute.operators import Operator
    from gnnprep.precompute.torch_backends import TorchHagBackend

    n, d = 70, 7
    src, dst = _overlapping_edges(rng, n)
    a = sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
    a.sort_indices()
    # the in-lists as stored: duplicates kept (a multiset), self-loops kept
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    indices = src[order].astype(np.int64)
    hag = sequential_search(indptr, indices, capacity=None)
    assert hag.num_agg > 0 and len(hag.level_ptr) > 2  # several levels
    left = rng.uniform(0.2, 2.0, n).astype(np.float32)
    right = rng.uniform(0.2, 2.0, n).astype(np.float32)
    op = Operator("t", left, right, loop)
    be = TorchHagBackend(None, op, hag, device)
    x = rng.standard_normal((n, d)).astype(np.float32)
    cur = be.prepare(x)
    nxt = be.empty_like(cur)
    be.begin_hop(cur)
    for r0, r1 in ((0, 13), (13, 40), (40, 40), (40, n)):
        be.hop_block(r0, r1, cur, nxt)
    be.sync()
    dense = a.toarray() + loop * np.eye(n)
    ref = left.astype(np.float64)[:, None] * (dense @ (right.astype(np.float64)[:, None] * x))
    assert_close(nxt.cpu().numpy(), ref)
    # a narrower column block after a wider one (the last block of a column split)
    x2 = rng.standard_normal((n, 3)).astype(np.float32)
    cur2 = be.prepare(x2)
    nxt2 = be.empty_like(cur2)
    be.begin_hop(cur2)
    be.hop_block(0, n, cur2, nxt2)
    assert_close(nxt2.cpu().numpy(), left[:, None] * (dense @ (right[:, None] * x2.astype(np.float64))))


@pytest.mark.parametrize("device", DEVICES)
def test_aggregation_rows_are_the_exact_pairwise_sums(rng, device):
    """Each level's sparse product (two entries of 1 per row) gives Y[n + a] = Y[in0(a)] + Y[in1(a)]
    bit for bit — the float32 sums the CPU executor computes — level after level."""
    from gnnprep.hag.search import rounds_search
    from gnnprep.precompute.operators import Operator
    from gnnprep.precompute.torch_backends import TorchHagBackend

    n, d = 400, 9
    src, dst = _overlapping_edges(rng, n, groups=40, size=20, pool=120)
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    hag = rounds_search(indptr, src[order].astype(np.int64), capacity=10 ** 6)
    assert len(hag.level_ptr) >= 3  # two levels at least: the second reads the first
    ones = np.ones(n, dtype=np.float32)
    be = TorchHagBackend(None, Operator("t", ones, rng.uniform(0.5, 2, n).astype(np.float32), 1.0), hag, device)
    x = rng.standard_normal((n, d)).astype(np.float32)
    cur = be.prepare(x)
    be.begin_hop(cur)
    be.sync()
    y = be.y.cpu().numpy()
    want = np.empty_like(y)
    want[:n] = x * be.right.cpu().numpy()
    for a, (i0, i1) in enumerate(np.asarray(hag.inputs)):
        want[n + a] = want[i0] + want[i1]
    assert np.array_equal(y, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("directed", [True, False])
def test_precompute_torch_hag_equals_plain(tmp_path, rng, device, directed):
    """``precompute --backend torch --hag FILE`` (column blocks of 3, 3 and 1) equals the plain hops of
    the CPU kernel, for every operator a HAG runs."""
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute

    store = make_store(tmp_path, rng, n=90, m=700, d=7, directed=directed, splits=False)[0]
    r = run(["hag", store, "-o", tmp_path / "hag.h5", "--capacity", "all", "--json"])
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["num_agg"] > 0 and summary["levels"] >= 2  # shared sums, in several levels
    ops = tuple(o for o in OPERATORS if not (directed and o[:3] in ("sym", "ppr")))  # these need a symmetric store
    precompute(store, tmp_path / "plain.h5", PrecomputeConfig(hops=3, operators=ops, device="cpu"))
    rep = precompute(store, tmp_path / "hag_t.h5",
                     PrecomputeConfig(hops=3, operators=ops, device=device, backend="torch",
                                      hag=str(tmp_path / "hag.h5"), blocks=(1, 1, 3)))
    assert rep.hag["used"] is True
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "hag_t.h5") as b:
        assert b.operators() == a.operators()
        for op in a.operators():
            for k in range(4):
                assert_close(b.hop(k, op)[:], a.hop(k, op)[:])


def test_hag_auto_decides_for_the_torch_backend(tmp_path, rng, monkeypatch):
    """``--hag auto`` on the torch backend is no longer refused: it weighs the cached HAG with the
    torch executor's cost terms (a slow kernel makes it pay; the result does not change)."""
    from gnnprep.hag.builder import cache_path
    from gnnprep.precompute import run as prop
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.profile import Profile
    from gnnprep.precompute.run import precompute

    store = _clique_store(tmp_path, rng)
    cfg = dict(hops=2, device="cpu", backend="torch")
    plain = precompute(store, tmp_path / "plain.h5", PrecomputeConfig(**cfg))
    none = precompute(store, tmp_path / "none.h5", PrecomputeConfig(**cfg, hag="auto"))
    assert none.hag["used"] is False and "CPU kernel" not in none.hag["reason"]
    # capped: the uncapped HAG's many aggregation nodes shared by two in-lists cost the torch
    # executor about what they save (TORCH_HAG_ROW_ENTRIES); |V|/2 of them keeps the shared sums
    assert run(["hag", store, "-o", cache_path(store), "--capacity", "0.5"]).exit_code == 0
    slow = Profile(spmm_ns_per_nnz={8: 1e6, 128: 1.6e7})
    monkeypatch.setattr(prop, "load_profile", lambda device, *a, **k: slow)
    used = precompute(store, tmp_path / "used.h5", PrecomputeConfig(**cfg, hag="auto"))
    assert used.hag["used"] is True, used.hag
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "used.h5") as b:
        for k in range(3):
            assert_close(b.hop(k)[:], a.hop(k)[:])
    assert plain.hag is None


def test_torch_hag_plan_has_its_own_terms():
    """The torch executor's plan holds Y's graph rows and the CSR tensor and pays per level."""
    from gnnprep.precompute.plan import TORCH_HAG_LEVEL_S, Problem, plan_with_hag
    from gnnprep.precompute.profile import Profile

    p = Problem(num_nodes=100_000, num_entries=2_000_000, num_features=64, hops=3)
    prof = Profile()
    # as many aggregation nodes as graph nodes: the executors' per-row terms (plan.HAG_ROW_ENTRIES
    # against TORCH_HAG_ROW_ENTRIES) differ by more than the plans' rounding to milliseconds
    numba = plan_with_hag(p, prof, 1 << 34, 0, 100_000, 1_000_000)
    t0 = plan_with_hag(p, prof, 1 << 34, 0, 100_000, 1_000_000, backend="torch", levels=0)
    t8 = plan_with_hag(p, prof, 1 << 34, 0, 100_000, 1_000_000, backend="torch", levels=8)
    assert t0.predicted_peak > numba.predicted_peak + 4 * 100_000 * 64
    assert t0.predicted_seconds != numba.predicted_seconds  # each executor's own terms (the CPU kernel's: plan.HAG_*)
    assert t8.predicted_seconds == pytest.approx(t0.predicted_seconds + 3 * 8 * TORCH_HAG_LEVEL_S, abs=2e-3)
