"""The streamed HAG search (issue 33): the lazy greedy on window candidates keeps the exact greedy's
savings on the oracle's small graphs (Jia et al., Algorithm 3), every HAG it builds is exact
(cover(v) = N(v), checked by expanding covers and against a scipy product) at any block size and on
the edge cases real data has, its incremental window counts equal a recount, it stays within its
memory budget, and an interrupted search resumes to the same file."""

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import make_store, run_json
from test_hag_search import _check_exact, citation_like, ego_like

from gnnprep.hag.search import exact_search
from gnnprep.hag.stream import default_window, search_arrays, stream_plan
from gnnprep.hag.structure import covers, execute, graph_cost


def _savings(h, indptr):
    return graph_cost(indptr)[0] - h.aggregations()


@pytest.mark.parametrize("make,seed", [(ego_like, 0), (ego_like, 1), (citation_like, 0), (citation_like, 1)])
def test_the_stream_search_keeps_the_greedy_savings_capped_and_uncapped(make, seed):
    indptr, indices = make(seed)
    n = len(indptr) - 1
    for cap, need in ((n // 4, 0.9), (10**9, 0.95)):
        oracle = _savings(exact_search(indptr, indices, capacity=cap), indptr)
        h = search_arrays(indptr, indices, capacity=cap)
        assert h.num_agg <= cap
        assert _savings(h, indptr) >= need * oracle, (cap, _savings(h, indptr), oracle)
        _check_exact(h, indptr, indices, np.random.default_rng(seed))


def _random_csr(rng, n, m, directed=False):
    """Random edges with self-loops, duplicate edges (kept: a multiset in-list), isolated nodes and
    a few hubs (overlap to find)."""
    hubs = rng.integers(0, n // 4, m // 3)
    src = np.concatenate([rng.integers(0, n - 3, m - len(hubs)), hubs])
    dst = rng.integers(0, n - 3, m)
    src[:4] = dst[:4]                        # self-loops
    src = np.concatenate([src, src[:6]])     # duplicate edges
    dst = np.concatenate([dst, dst[:6]])
    if not directed:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    a = sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
    a.sum_duplicates()
    counts = a.data.astype(np.int64)  # a duplicate stays as a repeated id
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    rows, ids = np.repeat(rows, counts), np.repeat(a.indices, counts)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)
    return indptr, ids.astype(np.int64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block_entries", [None, 97, 400])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_every_streamed_hag_is_exact(seed, block_entries, window):
    rng = np.random.default_rng(seed)
    indptr, indices = _random_csr(rng, 70, 500, directed=seed % 2 == 1)
    h = search_arrays(indptr, indices, capacity=10**6 if seed < 2 else 5, window=window, block_entries=block_entries)
    n = len(indptr) - 1
    cov = covers(h)
    for v in range(n):
        np.testing.assert_array_equal(cov[v], np.sort(indices[indptr[v]:indptr[v + 1]]))
    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n))
    a.sum_duplicates()
    x = rng.standard_normal((n, 5))
    np.testing.assert_allclose(execute(h, x), a @ x, rtol=1e-12, atol=1e-12)
    assert h.num_agg <= (10**6 if seed < 2 else 5)
    assert (h.inputs[:, 0] < h.inputs[:, 1]).all()
    assert h.aggregations() <= graph_cost(indptr)[0]


def test_a_full_window_is_algorithm_3():
    """With the window past the longest in-list every pair is a candidate and the counts are exact:
    the same savings as the exact greedy (ties may differ)."""
    indptr, indices = ego_like(3, n=300, circles=30)
    longest = int(np.diff(indptr).max())
    for cap in (40, 10**9):
        oracle = _savings(exact_search(indptr, indices, capacity=cap), indptr)
        got = _savings(search_arrays(indptr, indices, capacity=cap, window=longest), indptr)
        assert got >= 0.99 * oracle, (cap, got, oracle)


@pytest.mark.parametrize("stride", [1, 3])
def test_the_window_counts_stay_exact_as_merges_happen(stride):
    """The greedy's map holds each pair's window count after every merge: equal to a recount over
    the merged in-lists (pairs at most w slots apart, both still there; with ``stride`` > 1 over the
    sampled rows only)."""
    import gnnprep.hag.greedy as G

    indptr, indices = citation_like(2, n=300)
    n = len(indptr) - 1
    freq = np.bincount(indices, minlength=n)
    rank = np.empty(n, np.int64)
    rank[np.argsort(-freq, kind="stable")] = np.arange(n)
    uniq, inv = np.unique(rank[indices], return_inverse=True)
    u, w, cap = len(uniq), 3, 25
    seen = {}
    real = G.greedy_steps

    def spy(rp, orig, ent, u_, uptr, urow, uslot, aptr, prow, pslot, level, inputs, hc, hk, pkeys, pvals, *rest):
        real(rp, orig, ent, u_, uptr, urow, uslot, aptr, prow, pslot, level, inputs, hc, hk, pkeys, pvals, *rest)
        big = rest[-3]
        counts = {}
        for v in range(len(rp) - 1):
            if not G._sampled(v, stride):
                continue
            row = ent[rp[v]:rp[v + 1]]
            for i in range(len(row)):
                for j in range(i + 1, min(len(row), i + w + 1)):
                    if row[i] >= 0 and row[j] >= 0 and row[i] != row[j]:
                        a, b = sorted((int(row[i]), int(row[j])))
                        counts[a * big + b] = counts.get(a * big + b, 0) + 1
        live = pkeys >= 0
        for k, c in zip(pkeys[live].tolist(), pvals[live].tolist()):
            assert c == counts.get(k, 0), (k, c, counts.get(k, 0))
        seen["calls"] = seen.get("calls", 0) + 1

    old_ops = G.STEP_OPS
    G.greedy_steps, G.STEP_OPS = spy, 40  # many short calls: a check after every few merges
    try:
        G.search_block(indptr.copy(), inv.astype(np.int32), u, cap, w, stride=stride)
    finally:
        G.greedy_steps, G.STEP_OPS = real, old_ops
    assert seen["calls"] > 3


def test_the_default_window_widens_where_in_lists_are_short():
    assert default_window(np.full(100, 1000)) == 16
    assert default_window(np.full(100, 5)) == 16
    assert 16 < default_window(np.full(100, 40)) <= 39


def test_the_plan_fits_the_budget_and_refuses_a_budget_too_small():
    from gnnprep.core.errors import OptionError

    p = stream_plan(10**6, 3 * 10**7, 5000, 250_000, 2**30)
    assert p.peak_bytes <= 2**30 and p.blocks == -(-3 * 10**7 // p.block_entries)
    assert stream_plan(10**6, 3 * 10**7, 5000, 250_000, None).blocks == 1
    with pytest.raises(OptionError, match="too small"):
        stream_plan(10**7, 3 * 10**8, 5000, 2_500_000, 100 * 2**20)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hag_stream")
    return make_store(tmp, np.random.default_rng(7), n=400, m=6000, d=3)[0]


def _arrays(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][:] for k in ("agg/inputs", "agg/level_ptr", "adj/indptr", "adj/indices")}


def test_the_command_streams_in_blocks_and_leaves_no_partial_file(store, tmp_path, monkeypatch):
    """A budget that holds only part of S: several blocks, an exact HAG (precompute --hag equals the
    plain hops), the same file as the library's in-memory search with the same blocks."""
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    with GraphStore(store) as g:
        m, n = g.num_edges, g.num_nodes
        fixed = S.fixed_bytes(n, n // 4)
    budget = fixed + S.BLOCK_ENTRY_BYTES * (m // 5)
    from gnnprep.hag.builder import HagConfig, build

    rep = build(store, tmp_path / "h.h5", HagConfig(memory_budget=budget))
    assert rep.method == "stream" and rep.num_agg > 0
    assert not list(tmp_path.glob("*.partial*"))
    with GraphStore(store) as g:
        want = S.search_arrays(g.indptr(), g.indices(), block_entries=S.stream_plan(
            n, m, int(np.diff(g.indptr()).max()), n // 4, budget,
            S.default_window(np.diff(g.indptr()))).block_entries)
    got = _arrays(tmp_path / "h.h5")
    np.testing.assert_array_equal(got["adj/indptr"], want.indptr)
    np.testing.assert_array_equal(got["adj/indices"], want.indices)
    np.testing.assert_array_equal(got["agg/inputs"], want.inputs)
    run_json(["precompute", store, "-o", tmp_path / "p.h5", "--hops", "2", "--device", "cpu"])
    run_json(["precompute", store, "-o", tmp_path / "q.h5", "--hops", "2", "--device", "cpu", "--hag", tmp_path / "h.h5"])
    from gnnprep.precompute.features import hop_path

    with h5py.File(tmp_path / "p.h5") as a, h5py.File(tmp_path / "q.h5") as b:
        for k in (1, 2):
            np.testing.assert_allclose(a[hop_path(k)][:], b[hop_path(k)][:], rtol=1e-5, atol=1e-6)


def test_an_interrupted_search_resumes_to_the_same_file(store, tmp_path, monkeypatch):
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.builder import HagConfig, build

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    with GraphStore(store) as g:
        budget = S.fixed_bytes(g.num_nodes, g.num_nodes // 4) + S.BLOCK_ENTRY_BYTES * (g.num_edges // 6)
    config = HagConfig(memory_budget=budget)
    real, calls, total = S.block_search, [], []

    def count_all(*a, **k):
        total.append(1)
        return real(*a, **k)

    monkeypatch.setattr(S, "block_search", count_all)
    build(store, tmp_path / "whole.h5", config)
    assert len(total) >= 4

    def stop_after_two(*a, **k):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(S, "block_search", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        build(store, tmp_path / "h.h5", config)
    assert not (tmp_path / "h.h5").exists() and list(tmp_path.glob("h.h5.partial*"))
    done, calls[:] = [], []

    def count(*a, **k):
        done.append(1)
        return real(*a, **k)

    monkeypatch.setattr(S, "block_search", count)
    build(store, tmp_path / "h.h5", config)
    whole, resumed = _arrays(tmp_path / "whole.h5"), _arrays(tmp_path / "h.h5")
    for k in whole:
        np.testing.assert_array_equal(whole[k], resumed[k])
    assert len(done) == len(total) - 2 and not list(tmp_path.glob("h.h5.partial*"))
