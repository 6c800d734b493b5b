"""A HAG in the computation's node order (gnnprep.hag.order) and the CPU hops through it: the
relabelled HAG is equivalent to the relabelled graph, the pruned hops of --rows labeled read what
the plain ones read, and every hop equals the plain one to float tolerance."""

import numpy as np
import pytest
from fixtures import make_store, random_edges, reference_csr

from gnnprep.hag.order import in_order, rows_read
from gnnprep.hag.stream import search_arrays
from gnnprep.hag.structure import covers


def _random_hag(rng, n=160, m=1400, capacity=None):
    src, dst = random_edges(rng, n, m)
    a = reference_csr(src, dst, n)
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    return indptr, indices, search_arrays(indptr, indices, capacity=capacity if capacity else n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_order_is_the_relabelled_graphs_hag(seed):
    rng = np.random.default_rng(seed)
    indptr, indices, h = _random_hag(rng)
    n = h.num_nodes
    assert h.num_agg > 0
    order = rng.permutation(n)
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    ho = in_order(h, order)
    assert ho.num_agg == h.num_agg and ho.aggregations() == h.aggregations() and ho.transfers() == h.transfers()
    np.testing.assert_array_equal(ho.level_ptr, h.level_ptr)
    # both inputs of every aggregation node come from a lower level
    for lv in range(len(ho.level_ptr) - 1):
        a0 = int(ho.level_ptr[lv])
        assert (ho.inputs[a0:int(ho.level_ptr[lv + 1])] < n + a0).all()
    want = covers(h)
    got = covers(ho)
    for i in range(n):
        np.testing.assert_array_equal(got[i], np.sort(inv[want[order[i]]]))
        np.testing.assert_array_equal(got[i], np.sort(inv[indices[indptr[order[i]]:indptr[order[i] + 1]]]))
        row = ho.indices[ho.indptr[i]:ho.indptr[i + 1]]
        agg = row >= n
        assert not (agg[:-1] & ~agg[1:]).any()  # aggregation references last


def test_rows_read_is_the_union_of_the_in_lists():
    rng = np.random.default_rng(5)
    indptr, indices, h = _random_hag(rng)
    for rows in (np.array([], np.int64), np.array([3]), rng.choice(h.num_nodes, 17, replace=False)):
        want = set(rows.tolist())
        for v in rows:
            want |= set(indices[indptr[v]:indptr[v + 1]].tolist())
        np.testing.assert_array_equal(rows_read(h, rows), np.array(sorted(want), dtype=np.int64))


def test_listed_hag_rows_are_bitwise_the_block_kernel():
    from gnnprep.sparse import kernels, row_kernels

    rng = np.random.default_rng(7)
    _, _, h = _random_hag(rng)
    h = in_order(h, np.arange(h.num_nodes))
    n, d = h.num_nodes, 13
    x = rng.standard_normal((n, d)).astype(np.float32)
    left, right = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    agg = np.empty((h.num_agg, d), np.float32)
    kernels.hag_prepare(x, right, h.inputs, h.level_ptr, agg)
    full = np.empty_like(x)
    row_kernels.hag_rows(h.indptr, h.indices, 0, left, right, 0.5, x, agg, full)
    rows = np.sort(rng.choice(n, 40, replace=False))
    some = np.zeros_like(x)
    row_kernels.hag_rows_in_place(h.indptr, h.indices, rows, left, right, 0.5, x, agg, some)
    np.testing.assert_array_equal(some[rows], full[rows])
    assert not some[np.setdiff1d(np.arange(n), rows)].any()
    shuffled = rng.permutation(rows)
    out = np.empty((len(rows), d), np.float32)
    row_kernels.hag_selected(h.indptr, h.indices, shuffled, left, right, 0.5, x, agg, out)
    np.testing.assert_array_equal(out, full[shuffled])


@pytest.mark.parametrize("rows,reorder", [("labeled", "community"), ("all", "community"), ("labeled", "none")])
def test_hops_through_a_hag_in_the_node_order_equal_the_plain_hops(tmp_path, rows, reorder):
    from fixtures import run

    from gnnprep.graph import order as kept_order
    from gnnprep.graph.store import GraphStore
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute

    rng = np.random.default_rng(11)
    kept, *_ = make_store(tmp_path, rng, n=300, m=2500, d=9)
    with GraphStore(kept) as g:  # a community order kept beside the store (any permutation will do)
        assert kept_order.save_cached(kept, "community", g.fingerprint, rng.permutation(300),
                                      {"near_share_before": 0.1, "near_share_after": 0.9, "seconds": 0.0})
    assert run(["hag", str(kept), "-o", str(tmp_path / "hag.h5"), "--capacity", "all"]).exit_code == 0
    precompute(kept, tmp_path / "plain.h5", PrecomputeConfig(hops=3, rows=rows, device="cpu", reorder="none"))
    through = precompute(kept, tmp_path / "hag_out.h5", PrecomputeConfig(hops=3, rows=rows, device="cpu",
                                                                         reorder=reorder, hag=str(tmp_path / "hag.h5")))
    assert through.hag["used"] is True
    if reorder == "community":
        assert through.decisions["order"].startswith("used with the HAG")
    if rows == "labeled":
        assert through.decisions["pruning"].startswith("used (through the HAG")
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "hag_out.h5") as b:
        for k in range(4):
            ref = a.hop(k)[:]
            np.testing.assert_allclose(b.hop(k)[:], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_joined_hag_rows_are_bitwise_the_two_array_kernel():
    """y = [x; h] with right = [r; 1 … 1] through the plain row kernel gives hag_rows' bytes."""
    from gnnprep.sparse import kernels, row_kernels

    rng = np.random.default_rng(8)
    _, _, h = _random_hag(rng)
    h = in_order(h, rng.permutation(h.num_nodes))
    n, d = h.num_nodes, 11
    y = rng.standard_normal((n + h.num_agg, d)).astype(np.float32)
    x, agg = y[:n], y[n:]
    left, right = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    kernels.hag_prepare(x, right, h.inputs, h.level_ptr, agg)
    want, got = np.empty_like(x), np.empty_like(x)
    row_kernels.hag_rows(h.indptr, h.indices, 0, left, right, 0.5, x, agg.copy(), want)
    joined = np.concatenate([right, np.ones(h.num_agg, np.float32)])
    for r0, r1 in ((0, n), (0, 37), (37, n)):   # whole and in row blocks
        ip = h.indptr[r0:r1 + 1]
        row_kernels.hag_rows_joined(ip, h.indices[ip[0]:ip[-1]], r0, left, joined, 0.5, y, got[r0:r1])
    np.testing.assert_array_equal(got, want)


def test_hop_buffers_have_room_for_the_aggregation_rows(tmp_path):
    from gnnprep.graph.store import GraphStore
    from gnnprep.precompute.hop_graph import HopGraph
    from gnnprep.precompute.plan import Plan

    path, *_ = make_store(tmp_path, np.random.default_rng(3), n=50, m=300, d=4)
    plan = Plan(a=1, b=1, c=1, width=4, s_resident=True, device="cpu", budget=1 << 30, predicted_peak=0,
                predicted_seconds=0.0, baseline_rss=0, source="auto")
    with GraphStore(path) as g:
        plain = HopGraph(g, plan, hag_order=(None, None))
        assert plain.extended(plain.buffer((50, 4))) is None
        graph = HopGraph(g, plan, hag_order=(None, None), extra_rows=7)
        buf = graph.buffer((50, 4))
        y = graph.extended(buf)
        assert buf.shape == (50, 4) and y.shape == (57, 4) and y.ctypes.data == buf.ctypes.data
        y[50:] = 1.0                          # the room is the buffer's own
        assert graph.extended(buf.copy()) is None and graph.extended(np.empty((50, 4), np.float32)) is None
        assert graph.extended(graph.spare((50, 4))) is not None


def test_a_hag_hop_runs_over_one_array_and_writes_the_same_bytes_as_over_two(tmp_path, monkeypatch):
    from fixtures import run

    from gnnprep.precompute import hop_graph
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute
    from gnnprep.sparse import row_kernels

    path, *_ = make_store(tmp_path, np.random.default_rng(12), n=240, m=2000, d=10)
    assert run(["hag", str(path), "-o", str(tmp_path / "hag.h5"), "--capacity", "all"]).exit_code == 0
    calls = []
    joined = row_kernels.hag_rows_joined
    # (the warm-up's calls on its 3-row array are not hops)
    monkeypatch.setattr(row_kernels, "hag_rows_joined",
                        lambda *a, **k: (len(a[6]) > 3 and calls.append(1)) or joined(*a, **k))
    config = PrecomputeConfig(hops=3, rows="all", device="cpu", hag=str(tmp_path / "hag.h5"), blocks=(1, 1, 3))
    precompute(path, tmp_path / "one.h5", config)
    assert calls   # every column block's hops through [X; H]
    monkeypatch.setattr(hop_graph.HopGraph, "extended", lambda self, buf: None)
    calls.clear()
    precompute(path, tmp_path / "two.h5", config)
    assert not calls
    with FeatureStore(tmp_path / "one.h5") as a, FeatureStore(tmp_path / "two.h5") as b:
        for k in range(4):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes()
