"""The streamed HAG search (issue 33): the lazy greedy on window candidates keeps the exact greedy's
savings on the oracle's small graphs (Jia et al., Algorithm 3), every HAG it builds is exact
(cover(v) = N(v), checked by expanding covers and against a scipy product) at any block size and on
the edge cases real data has, its incremental window counts equal a recount, it stays within its
memory budget, and an interrupted search resumes to the same file."""

import json
import re

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import make_store, run, run_json
from test_hag_search import _check_exact, citation_like, ego_like

from gnnprep.core.errors import ArgumentError
from gnnprep.hag.file import read_hag
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

    def spy(rp, ent, u_, uptr, urow, uslot, aptr, uend, aend, dead, prow, pslot, level, inputs, hc, hk, pkeys, pvals,
            *rest):
        real(rp, ent, u_, uptr, urow, uslot, aptr, uend, aend, dead, prow, pslot, level, inputs, hc, hk, pkeys, pvals,
             *rest)
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


def test_the_predicted_seconds_scale_with_the_machines_search_speed_but_not_the_start_up():
    from gnnprep.hag.stream import SEARCH_SECONDS_FIXED

    one = stream_plan(10**6, 3 * 10**7, 5000, 250_000, 2**30)
    two = stream_plan(10**6, 3 * 10**7, 5000, 250_000, 2**30, scale=2.0)
    assert two.seconds - SEARCH_SECONDS_FIXED == pytest.approx(2 * (one.seconds - SEARCH_SECONDS_FIXED), abs=2e-3)
    assert (two.blocks, two.peak_bytes, two.window) == (one.blocks, one.peak_bytes, one.window)


def test_the_predicted_time_per_entry_grows_with_the_block_above_the_reference_size():
    """Larger blocks (a larger budget) find more savings and cost more per entry: the model's
    variable part times (block / ref)^growth above the reference block, 1 at or below it."""
    from gnnprep.hag.stream import (
        SEARCH_BLOCK_GROWTH,
        SEARCH_BLOCK_REF_ENTRIES,
        SEARCH_SECONDS_FIXED,
        search_growth,
    )

    assert search_growth(1000) == 1.0 and search_growth(SEARCH_BLOCK_REF_ENTRIES) == 1.0
    assert search_growth(4 * SEARCH_BLOCK_REF_ENTRIES) == pytest.approx(4 ** SEARCH_BLOCK_GROWTH)
    n, m = 10**7, 3 * 10**8
    small = stream_plan(n, m, 5000, n // 4, 3 << 29, 16, pairs=16 * m)
    big = stream_plan(n, m, 5000, n // 4, 16 << 30, 16, pairs=16 * m)
    assert small.block_entries <= SEARCH_BLOCK_REF_ENTRIES < 4 * SEARCH_BLOCK_REF_ENTRIES < big.block_entries
    assert big.seconds - SEARCH_SECONDS_FIXED == pytest.approx(
        search_growth(big.block_entries) * (small.seconds - SEARCH_SECONDS_FIXED), rel=1e-3)
    assert stream_plan(n, 10**6, 5000, n // 4, None, 16).seconds == stream_plan(n, 10**6, 5000, n // 4, 16 << 30, 16).seconds


def test_the_dry_run_predicts_at_the_calibrated_speed(store, tmp_path, monkeypatch):
    """``gnnprep hag --dry-run`` reads the CPU profile's hag_search_scale (gnnprep calibrate measures
    it) and says which speed its prediction is at."""
    import json

    from gnnprep.hag.stream import SEARCH_SECONDS_FIXED
    from gnnprep.precompute.profile import Profile, profile_path

    monkeypatch.setenv("GNNPREP_CONFIG", str(tmp_path))
    args = ["hag", store, "-o", tmp_path / "h.h5", "--dry-run"]
    ref = run_json(args)
    profile_path("cpu").write_text(json.dumps({**json.loads(Profile().to_json()), "hag_search_scale": 3.0,
                                               "measured": "gnnprep calibrate, a test"}))
    fast = run_json(args)
    assert fast["predicted_seconds"] - SEARCH_SECONDS_FIXED == pytest.approx(
        3 * (ref["predicted_seconds"] - SEARCH_SECONDS_FIXED), abs=5e-3)
    r = run(args)
    assert r.exit_code == 0 and "calibrated speed (3x the reference)" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "h.h5").exists()


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
    monkeypatch.setattr(S, "saves_little", lambda *a: False)   # (the blocks as the budget's: none halved)
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


def test_block_entries_cut_the_search_into_smaller_blocks_whatever_the_budget(store, tmp_path, monkeypatch):
    """``--block-entries N``: blocks of at most N entries (the library's search with those blocks, byte
    for byte); ``--dry-run`` names the smaller blocks' time where the budget's blocks are larger than
    the reference; a count below the floor, or not a count, is refused."""
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    with GraphStore(store) as g:
        indptr, indices = g.indptr(), g.indices()
    m = int(indptr[-1])
    k = m // 3
    rep = run_json(["hag", store, "-o", tmp_path / "h.h5", "--block-entries", str(k)])
    assert rep["stream"]["block_entries"] == k and rep["stream"]["blocks"] >= 3
    want = S.search_arrays(indptr, indices, block_entries=k)
    got = _arrays(tmp_path / "h.h5")
    np.testing.assert_array_equal(got["adj/indices"], want.indices)
    np.testing.assert_array_equal(got["agg/inputs"], want.inputs)
    dry = run_json(["hag", store, "-o", tmp_path / "d.h5", "--dry-run", "--block-entries", str(k)])
    assert dry["block_entries"] == k and dry["budget_blocks"]["block_entries"] == m
    assert dry["budget_blocks"]["predicted_search_seconds"] >= dry["predicted_search_seconds"]
    assert f"--block-entries {m}" in run(["hag", store, "-o", tmp_path / "d.h5", "--dry-run", "--block-entries",
                                          str(k)]).output
    dry = run_json(["hag", store, "-o", tmp_path / "d.h5", "--dry-run"])
    assert dry["block_entries"] == m and dry["budget_blocks"]["block_entries"] == m
    r = run(["hag", store, "-o", tmp_path / "x.h5", "--block-entries", "8"])
    assert r.exit_code == 1 and "--block-entries 8: expected at least 16" in r.output
    assert run(["hag", store, "-o", tmp_path / "x.h5", "--block-entries", "many"]).exit_code == 2
    assert not (tmp_path / "x.h5").exists()


def test_a_search_predicted_long_in_the_budgets_blocks_runs_in_smaller_ones_and_says_so(store, tmp_path,
                                                                                            monkeypatch):
    """Blocks as large as the budget holds can take far longer per entry (papers100M's shape at 1/10:
    126.9 s in 149M-entry blocks, 52.6 s in 15M): by default a search predicted over LONG_SEARCH_S runs
    in blocks no larger than keep it within it (never below the reference size), the same HAG as the
    library's search in those blocks, and a note names both times and --block-entries (none with -q);
    --block-entries restores the budget's blocks; a short search keeps them."""
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(S, "SEARCH_BLOCK_REF_ENTRIES", 64)
    monkeypatch.setattr(S, "SEARCH_SECONDS_FIXED", 0.0)   # (the start-up term dominates a graph this small)
    monkeypatch.setattr(S, "LONG_SEARCH_S", 0.0)
    with GraphStore(store) as g:
        indptr, indices = g.indptr(), g.indices()
    m = int(indptr[-1])
    r = run(["hag", store, "-o", tmp_path / "h.h5", "--json"])
    assert r.exit_code == 0 and f"(--block-entries {m})" in r.stderr and "more savings" in r.stderr, r.stderr
    rep = json.loads(r.stdout)
    assert rep["stream"]["block_entries"] == 64 and rep["stream"]["blocks"] > 1
    want = S.search_arrays(indptr, indices, block_entries=64)
    np.testing.assert_array_equal(_arrays(tmp_path / "h.h5")["agg/inputs"], want.inputs)
    r = run(["hag", store, "-o", tmp_path / "q.h5", "-q"])
    assert r.exit_code == 0 and "--block-entries" not in r.stderr
    assert run_json(["hag", store, "-o", tmp_path / "b.h5", "--block-entries", str(m)])["stream"]["blocks"] == 1
    monkeypatch.setattr(S, "LONG_SEARCH_S", 1e9)
    r = run(["hag", store, "-o", tmp_path / "l.h5", "--json"])
    assert "--block-entries" not in r.stderr and json.loads(r.stdout)["stream"]["blocks"] == 1


def test_the_time_bound_keeps_the_largest_blocks_predicted_within_it():
    """time_bounded_block: b = ref · ((L − F) / (T_ref − F))^(1 / growth), so the plan in blocks of b is
    predicted at L (to rounding); the reference size where even it takes longer; None where the
    budget's blocks are predicted within L or no larger than the reference."""
    import gnnprep.hag.stream as S

    n, m = 10**7, 10**9
    plan = lambda b: S.stream_plan(n, m, 5000, n // 4, 64 << 30, 16, pairs=16 * m, scale=0.3, max_block=b)  # noqa: E731
    widest, ref = plan(None), plan(S.SEARCH_BLOCK_REF_ENTRIES)
    assert ref.seconds < S.LONG_SEARCH_S < widest.seconds
    b = S.time_bounded_block(widest, ref)
    assert S.SEARCH_BLOCK_REF_ENTRIES < b < widest.block_entries
    assert plan(b).seconds == pytest.approx(S.LONG_SEARCH_S, rel=1e-3)
    assert plan(int(b * 1.01)).seconds > S.LONG_SEARCH_S
    slow = lambda b: S.stream_plan(n, m, 5000, n // 4, 64 << 30, 16, pairs=16 * m, max_block=b)  # noqa: E731
    assert S.time_bounded_block(slow(None), slow(S.SEARCH_BLOCK_REF_ENTRIES)) == S.SEARCH_BLOCK_REF_ENTRIES
    fast = lambda b: S.stream_plan(n, m, 5000, n // 4, 64 << 30, 16, pairs=16 * m, scale=1e-4, max_block=b)  # noqa: E731
    assert S.time_bounded_block(fast(None), fast(S.SEARCH_BLOCK_REF_ENTRIES)) is None


class _Clock:
    """A stand-in for the stream module's ``time``: each perf_counter call ``tick`` seconds later."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now


def _pilot_setup(monkeypatch, store, tick: float):
    """Constants under which the tiny store's default search (one block by the budget) runs a pilot block
    of 64 entries (no start-up term, the time bound twice the one-block prediction, a pilot from any
    time), its blocks timed by a clock ``tick`` seconds a call. Returns (stream module, indptr, indices)."""
    import gnnprep.hag.builder as B
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(S, "SEARCH_BLOCK_REF_ENTRIES", 64)
    monkeypatch.setattr(S, "SEARCH_SECONDS_FIXED", 0.0)
    monkeypatch.setattr(S, "PILOT_FROM", 0.0)
    monkeypatch.setattr(S, "saves_little", lambda *a: False)   # (the rest cut by time alone)
    monkeypatch.setattr(S, "time", _Clock(tick))
    monkeypatch.setattr(B, "warm_up", lambda index_dtype: None)
    with GraphStore(store) as g:
        indptr, indices = g.indptr(), g.indices()
    monkeypatch.setattr(S, "LONG_SEARCH_S", 2 * S.plan_for(indptr, len(indptr) // 4, None, None, 1e3).seconds)
    return S, indptr, indices


def test_a_pilot_block_measures_the_search_and_cuts_the_rest_by_its_time(store, tmp_path, monkeypatch):
    """A default search long enough to matter searches a reference-size block first: where it measures
    far over its prediction the rest is cut in blocks of the reference size (an exact HAG) and
    said; where it measures far under, the rest is one block as
    planned; none with --block-entries."""
    from gnnprep.hag.builder import HagConfig, build
    from gnnprep.sparse.order import row_blocks

    S, indptr, indices = _pilot_setup(monkeypatch, store, 1e4)
    told = []
    rep = build(store, tmp_path / "slow.h5", HagConfig(), search_scale=1e3, warn=told.append)
    pilot = rep.stream["pilot"]
    assert pilot["entries"] == int(indptr[row_blocks(indptr, 0, len(indptr) - 1, 64)[0][1]])
    assert pilot["measured_over_predicted"] > 1 and pilot["rest_block_entries"] == 64
    # the whole search predicted again at the pilot's pace: more than the plan's from sizes alone
    assert pilot["predicted_seconds_after"] > rep.stream["predicted_seconds"]
    assert rep.stream["blocks"] == len(row_blocks(indptr, 0, len(indptr) - 1, 64))
    _check_exact(read_hag(tmp_path / "slow.h5")[0], indptr, indices, np.random.default_rng(0))
    assert any("blocks of up to 64 entries" in t for t in told), told
    monkeypatch.setattr(S, "time", _Clock(1e-9))
    rep = build(store, tmp_path / "fast.h5", HagConfig(), search_scale=1e3)
    assert rep.stream["pilot"]["measured_over_predicted"] < 1 and rep.stream["blocks"] == 2
    assert rep.stream["pilot"]["rest_block_entries"] == int(indptr[-1])
    assert "pilot" not in build(store, tmp_path / "b.h5", HagConfig(block_entries=10**9), search_scale=1e3).stream


def test_a_first_block_that_saves_little_halves_the_rest_two_at_a_time(store, tmp_path, monkeypatch):
    """A budget of several blocks searched one at a time: the first block is searched alone, and where it
    saves under 1% the rest goes in blocks half as large, two at once (an exact HAG, resumable as
    before); where it saves more, the blocks stay the budget's."""
    import numba

    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.builder import HagConfig, build

    # two blocks at once on any machine: searched_blocks runs them on Python threads (numba's count only
    # sizes how many)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    with GraphStore(store) as g:
        m, n = g.num_edges, g.num_nodes
        indptr, indices = g.indptr(), g.indices()
        longest = int(np.diff(indptr).max())
    budget = S.fixed_bytes(n, n // 4) + S.BLOCK_ENTRY_BYTES * (m // 5 + longest)
    monkeypatch.setattr(S, "saves_little", lambda *a: True)
    told = []
    rep = build(store, tmp_path / "h.h5", HagConfig(memory_budget=budget), warn=told.append)
    assert any(t.startswith("the first block saved under 1% of its transfers, so the rest goes 2 blocks at once")
               for t in told), told
    pilot = rep.stream["pilot"]
    assert pilot["saved_little"] and pilot["rest_workers"] == 2
    assert pilot["rest_block_entries"] <= (m // 5) // 2 and rep.stream["workers"] == 2
    _check_exact(read_hag(tmp_path / "h.h5")[0], indptr, indices, np.random.default_rng(0))
    monkeypatch.setattr(S, "saves_little", lambda *a: False)
    rep = build(store, tmp_path / "k.h5", HagConfig(memory_budget=budget))
    assert not rep.stream["pilot"]["saved_little"] and rep.stream["workers"] == 1
    assert rep.stream["pilot"]["rest_block_entries"] == m // 5


def _stopping_after(blocks: int, real, calls: list):
    """A stand-in for block_search that searches blocks 0 .. ``blocks`` − 1 (counted in ``calls``) and
    raises KeyboardInterrupt for any later one. The block is known by its index in the caller
    (``i`` of searched_blocks' job), not by the order of the calls: with two blocks searched side by
    side, the third block's thread may call before the second's (seen once in CI: the second block
    interrupted, the third searched)."""
    import sys

    def search(*a, **k):
        i = sys._getframe(1).f_locals["i"]
        if i >= blocks:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*a, **k)
    return search


def test_a_search_interrupted_after_its_pilot_resumes_with_the_rest_cut_as_before(store, tmp_path, monkeypatch):
    from gnnprep.hag.builder import HagConfig, build

    S, indptr, indices = _pilot_setup(monkeypatch, store, 1e4)
    real, calls = S.block_search, []
    build(store, tmp_path / "whole.h5", HagConfig(), search_scale=1e3)

    monkeypatch.setattr(S, "block_search", _stopping_after(2, real, calls))
    with pytest.raises(KeyboardInterrupt):
        build(store, tmp_path / "h.h5", HagConfig(), search_scale=1e3)
    monkeypatch.setattr(S, "block_search", real)
    monkeypatch.setattr(S, "after_pilot", lambda *a, **k: pytest.fail("the pilot measured again"))
    rep = build(store, tmp_path / "h.h5", HagConfig(), search_scale=1e3)
    assert rep.stream["resumed"] and rep.stream["pilot"]["resumed_after"] and rep.stream["blocks"] > 2
    whole, resumed = _arrays(tmp_path / "whole.h5"), _arrays(tmp_path / "h.h5")
    for k in whole:
        np.testing.assert_array_equal(whole[k], resumed[k])


def test_the_dry_run_gives_the_halved_rest_and_its_time(store, tmp_path, monkeypatch):
    """``--dry-run`` of a search of several blocks one at a time says the first block is searched alone
    and, where it saves little, the rest's blocks, how many at once and the search's time then
    (below the plan's); none with ``--block-entries``."""
    import numba

    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    # two blocks at once on any machine: searched_blocks runs them on Python threads (numba's count only
    # sizes how many)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    with GraphStore(store) as g:
        m, n = g.num_edges, g.num_nodes
        longest = int(np.diff(g.indptr()).max())
    budget = str(S.fixed_bytes(n, n // 4) + S.BLOCK_ENTRY_BYTES * (m // 5 + longest))
    args = ["hag", store, "-o", tmp_path / "d.h5", "--dry-run", "--memory-budget", budget]
    dry = run_json(args)
    assert dry["pilot"] and dry["workers"] == 1 and dry["halved"]["workers"] == 2
    assert dry["halved"]["block_entries"] <= dry["block_entries"] // 2
    assert dry["halved"]["predicted_search_seconds"] < dry["predicted_search_seconds"]
    assert f"{dry['halved']['block_entries']:,} entries, 2 at once" in run(args).stdout
    assert run_json(args + ["--block-entries", str(m // 5)])["halved"] is None


def test_a_search_interrupted_after_its_rest_was_halved_resumes_to_the_same_file(store, tmp_path, monkeypatch):
    """The halved rest (a first block that saved little) is kept in the resumable state: a search
    stopped two blocks after its pilot resumes in the same half blocks, to the same file."""
    import numba

    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.builder import HagConfig, build

    # two blocks at once on any machine: searched_blocks runs them on Python threads (numba's count only
    # sizes how many)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(S, "saves_little", lambda *a: True)
    with GraphStore(store) as g:
        m, n = g.num_edges, g.num_nodes
        longest = int(np.diff(g.indptr()).max())
    config = HagConfig(memory_budget=S.fixed_bytes(n, n // 4) + S.BLOCK_ENTRY_BYTES * (m // 5 + longest))
    whole = build(store, tmp_path / "whole.h5", config)
    assert whole.stream["workers"] == 2
    real, calls = S.block_search, []
    monkeypatch.setattr(S, "block_search", _stopping_after(3, real, calls))
    with pytest.raises(KeyboardInterrupt):
        build(store, tmp_path / "h.h5", config)
    monkeypatch.setattr(S, "block_search", real)
    rep = build(store, tmp_path / "h.h5", config)
    assert rep.stream["resumed"] and rep.stream["blocks"] == whole.stream["blocks"]
    a, b = _arrays(tmp_path / "whole.h5"), _arrays(tmp_path / "h.h5")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_an_interrupted_search_resumes_to_the_same_file(store, tmp_path, monkeypatch):
    import gnnprep.hag.builder as B
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.builder import HagConfig, build

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(B, "warm_up", lambda index_dtype: None)   # its block_search calls are not the search's
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

    monkeypatch.setattr(S, "block_search", _stopping_after(2, real, calls))
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


def test_an_interrupted_command_says_where_the_finished_part_is_kept(store, tmp_path, monkeypatch):
    """`gnnprep hag` interrupted after two blocks: exit 130, one line saying that no output was
    written and where the finished blocks are kept for a rerun; before any block: the plain line."""
    from fixtures import assert_one_error, run

    import gnnprep.hag.builder as B
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(B, "warm_up", lambda index_dtype: None)   # its block_search calls are not the search's
    with GraphStore(store) as g:
        budget = S.fixed_bytes(g.num_nodes, g.num_nodes // 4) + S.BLOCK_ENTRY_BYTES * (g.num_edges // 6)
    real, calls = S.block_search, []
    out = tmp_path / "h.h5"
    monkeypatch.setattr(S, "block_search", _stopping_after(0, real, calls))
    r = run(["hag", store, "-o", out, "--memory-budget", budget])
    assert_one_error(r, 130, r"^Error: interrupted; no output was written$")
    monkeypatch.setattr(S, "block_search", _stopping_after(2, real, calls))
    r = run(["hag", store, "-o", out, "--memory-budget", budget])
    assert_one_error(r, 130, r"^Error: interrupted; no output was written \(the finished part is kept in .*h\.h5\.partial: "
                             r"run the same command again to resume\)$")
    assert not out.exists()


# -- the counting of window pairs (radix-partitioned, cache-sized buckets) ---------------------------------
from gnnprep.hag import greedy as G  # noqa: E402


def _random_block(rng, rows, u, longest, repeats=0.1):
    """A block as search_block sees it: rows of local ids (0..u−1) sorted, some ids repeated in a row,
    a few rows empty, a few heavy pairs (ids 0..3 in many rows)."""
    deg = rng.integers(0, longest + 1, rows)
    deg[:3] = 0
    rp = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    ent = rng.integers(0, u, int(rp[-1])).astype(np.int32)
    heavy = rng.random(len(ent)) < 0.05
    ent[heavy] = rng.integers(0, 4, int(heavy.sum()))
    rep = np.flatnonzero(rng.random(len(ent)) < repeats)
    rep = rep[rep > 0]
    ent[rep] = ent[rep - 1]  # a repeated id (a duplicate edge) where the previous entry is in the same row
    G.sort_rows(rp, ent)
    return rp, ent


def _plain_count(rp, ent, w, big, stride):
    counts = {}
    for v in range(len(rp) - 1):
        if not G._sampled(v, stride):
            continue
        row = ent[rp[v]:rp[v + 1]].tolist()
        for i in range(len(row)):
            for j in range(i + 1, min(len(row), i + 1 + w)):
                if row[i] != row[j]:
                    a, b = sorted((row[i], row[j]))
                    counts[a * big + b] = counts.get(a * big + b, 0) + 1
    return counts


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("stride", [1, 3])
def test_the_bucketed_count_equals_a_plain_count_of_window_pairs(seed, stride):
    rng = np.random.default_rng(seed)
    u = int(rng.choice([5, 60, 3000]))
    rp, ent = _random_block(rng, int(rng.integers(50, 400)), u, int(rng.choice([3, 12, 40])))
    w = int(rng.choice([1, 4, 16]))
    big = u + 7
    counts = _plain_count(rp, ent, w, big, stride)
    want = {k: c for k, c in counts.items() if c >= 2}
    for room in (1 << 30, 4096):  # one group of buckets; many, the smallest table
        for keep in (None, 10**9):
            keys, got = G.count_candidates(rp, ent, w, big, room, 2, keep=keep, stride=stride)
            assert dict(zip(keys.tolist(), got.tolist())) == want
            assert len(set(keys.tolist())) == len(keys)
        keys, got = G.count_candidates(rp, ent, w, big, room, 3, keep=10**9, stride=stride)
        assert dict(zip(keys.tolist(), got.tolist())) == {k: c for k, c in want.items() if c >= 3}


def _first_by_count_then_key(counts: dict, keep: int | None) -> dict:
    ranked = sorted(counts.items(), key=lambda kc: (-kc[1], kc[0]))
    return dict(ranked if keep is None else ranked[:keep])


@pytest.mark.parametrize("seed", range(6))
def test_keeps_cut_takes_the_pairs_counted_most_then_the_smallest(seed, monkeypatch):
    """``keep`` keeps the candidates the greedy's heap would pop first: by count, ties by the smaller
    pair (the cut falls inside a run of ties in these blocks)."""
    rng = np.random.default_rng(100 + seed)
    u = int(rng.choice([40, 400, 5000]))
    rp, ent = _random_block(rng, int(rng.integers(200, 2000)), u, int(rng.choice([8, 30])))
    w, big, stride = int(rng.choice([2, 8, 16])), u + 11, int(rng.choice([1, 2]))
    if seed % 2:
        monkeypatch.setattr(G, "BUCKET_PAIRS", 64)  # many buckets, a bucket's table grown
        monkeypatch.setattr(G, "STEP_OPS", 97)      # kernels stopping and resuming mid-block
    want = {k: c for k, c in _plain_count(rp, ent, w, big, stride).items() if c >= 2}
    ties = 0
    for room in (1 << 26, 20000, 3000):  # one group of buckets; many
        for keep in (max(1, len(want) // 3), max(1, len(want) - 1), len(want), None):
            keys, got = G.count_candidates(rp, ent, w, big, room, 2, keep=keep, stride=stride)
            assert dict(zip(keys.tolist(), got.tolist())) == _first_by_count_then_key(want, keep), (room, keep)
            if keep is not None and keep < len(want):
                cut = sorted(want.values(), reverse=True)[keep - 1]
                ties += sum(c == cut for c in got.tolist()) < sum(c == cut for c in want.values())
    assert ties  # some cut split a run of tied counts


@pytest.mark.parametrize("seed", range(4))
def test_the_counting_split_over_threads_finds_the_same_candidates(seed, monkeypatch):
    """Rows split over threads for the passes over the block, buckets for the counting: the same
    candidates (as a set) for 1, 2 and 3 threads, a room of one group of buckets and of many; also
    a block of fewer rows than threads and one without pairs."""
    rng = np.random.default_rng(300 + seed)
    u = int(rng.choice([60, 3000]))
    rp, ent = _random_block(rng, int(rng.integers(2, 1500)), u, int(rng.choice([3, 30])))
    w, big, stride = int(rng.choice([4, 16])), u + 5, int(rng.choice([1, 3]))
    if seed % 2:
        monkeypatch.setattr(G, "BUCKET_PAIRS", 64)
        monkeypatch.setattr(G, "STEP_OPS", 97)
    for room in (1 << 26, 3000):
        for keep in (None, 40):
            want = G.count_candidates(rp, ent, w, big, room, 2, keep=keep, stride=stride, threads=1)
            for threads in (2, 3):
                got = G.count_candidates(rp, ent, w, big, room, 2, keep=keep, stride=stride, threads=threads)
                assert dict(zip(*(a.tolist() for a in got))) == dict(zip(*(a.tolist() for a in want)))
    one = np.array([0, 2], np.int64), np.array([0, 1], np.int32)
    for threads in (1, 4):
        assert len(G.count_candidates(*one, 4, 10, 1 << 20, 2, threads=threads)[0]) == 0


def test_a_block_searched_with_its_counting_on_two_threads_is_the_same_hag():
    rng = np.random.default_rng(11)
    rp, ent = _random_block(rng, 3000, 2000, 24)
    cap = 300
    runs = [G.search_block(rp.copy(), ent.copy(), 2000, cap, 16, threads=t) for t in (1, 2)]
    for a, b in zip(runs[0][:3], runs[1][:3]):
        assert np.array_equal(a, b)
    assert len(runs[0][0]) > 50


def test_a_block_rewired_on_several_threads_is_the_same_block():
    """block_search's rows rewired in row ranges side by side (each moved down after the ones before):
    the same lengths, rows, inputs and levels as on one thread, rows with repeated ids among them."""
    from gnnprep.hag.stream import block_search

    rng = np.random.default_rng(5)
    n = 3000
    rp, ent = _random_block(rng, 2500, n, 20)
    rank = rng.permutation(n).astype(np.int32)
    runs = [block_search(ent.copy(), rp.copy(), rank, n, n + 7, 400, 16, 2, 16, 1 << 24, threads=t) for t in (1, 2, 3)]
    assert len(runs[0][2]) > 50
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert np.array_equal(a, b)


def test_local_ids_number_a_blocks_ids_by_frequency_rank():
    rng = np.random.default_rng(3)
    n = 1000
    rank = rng.permutation(n).astype(np.int32)
    order = np.empty(n, np.int32)
    order[rank] = np.arange(n, dtype=np.int32)
    for ids in (rng.integers(0, n, 5000), rng.integers(0, 64, 300), np.array([999, 0, 999, 5]), np.empty(0, np.int64)):
        ent, glob, u = G.local_ids(ids.astype(np.int32), rank, order, extra=7)
        ranks = np.unique(rank[ids])
        assert u == len(ranks) and len(glob) == u + 7
        assert np.array_equal(glob[:u], order[ranks])
        assert np.array_equal(ent, np.searchsorted(ranks, rank[ids]))


def test_the_frequency_rank_orders_ids_by_count_then_id():
    from gnnprep.hag.stream import frequency_rank
    rng = np.random.default_rng(4)
    n = 500
    ids = np.concatenate([rng.integers(0, n, 3000), np.full(40, 7)])
    indptr = np.array([0, len(ids)])
    rank, order = frequency_rank(indptr, lambda lo, hi: ids[lo:hi], n)
    want = np.argsort(-np.bincount(ids, minlength=n), kind="stable")
    assert np.array_equal(order, want) and np.array_equal(rank[order], np.arange(n))


def test_rewired_rows_relabel_to_the_sorted_rows_of_the_greedys_in_lists():
    """block_search's rows (stored ids less the merged ones, then the block's aggregation nodes), once
    relabelled, equal each row of the greedy's in-lists mapped to graph ids and sorted, also with
    repeated ids and in-lists the store did not sort."""
    from gnnprep.hag.stream import block_search, frequency_rank, relabel_rows
    for seed, directed in ((0, False), (1, True), (2, False)):
        rng = np.random.default_rng(seed)
        indptr, indices = _random_csr(rng, 300, 4000, directed=directed)
        if seed == 2:  # unsorted in-lists
            for v in range(len(indptr) - 1):
                rng.shuffle(indices[indptr[v]:indptr[v + 1]])
        n = len(indptr) - 1
        rank, order = frequency_rank(indptr, lambda lo, hi: indices[lo:hi], n)
        ids = indices.astype(np.int32)
        seen = {}
        real = G.search_block

        def spy(rp, ent, u, *a, **k):
            out = real(rp, ent, u, *a, **k)
            seen["ent"], seen["u"] = out[2].copy(), u
            return out

        G.search_block = spy
        import gnnprep.hag.stream as S
        S.search_block = spy
        try:
            lengths, rows, inputs, levels = block_search(ids, indptr.copy(), rank, n, n, 60, 3, 2, 16, 1 << 20, 1, order)
        finally:
            G.search_block = S.search_block = real
        assert len(inputs) > 5
        ent, u = seen["ent"], seen["u"]
        _, glob, _ = G.local_ids(ids, rank, order, extra=len(inputs))
        glob[u:] = n + np.arange(len(inputs))
        new = np.arange(len(inputs))[::-1].copy()  # any renumbering
        got = relabel_rows(rows, lengths, n, new)
        at = 0
        for v in range(n):
            row = ent[indptr[v]:indptr[v + 1]]
            want = glob[row[row >= 0]]
            want = np.where(want >= n, n + new[np.maximum(want - n, 0)], want)
            assert np.array_equal(got[at:at + lengths[v]], np.sort(want)), v
            at += lengths[v]
        assert at == len(got)


def test_the_bucketed_count_is_exact_with_a_saturated_filter():
    """A room so small that the filter is saturated (most pairs pass it as "twice"): the counts are
    still exact, and ``keep`` cuts them as with room to spare."""
    rng = np.random.default_rng(7)
    rp, ent = _random_block(rng, 1500, 20000, 40)
    want = {k: c for k, c in _plain_count(rp, ent, 16, 20011, 1).items() if c >= 2}
    for keep in (50, None):
        keys, got = G.count_candidates(rp, ent, 16, 20011, 3000, 2, keep=keep, stride=1)
        assert dict(zip(keys.tolist(), got.tolist())) == _first_by_count_then_key(want, keep)


@pytest.mark.parametrize("indptr, indices, field", [
    ([0, 2, 3], [1, 5, 0], "indices[1] is 5"),         # an id past n = 2 (the kernels would write past their arrays)
    ([0, 2, 3], [1, -1, 0], "indices[1] is -1"),
    ([0, 2, 4], [1, 0, 0], "from 0 to 4 for 3 ids"),    # the row pointer does not end at len(indices)
    ([0, 3, 2, 3], [1, 0, 1], "from 0 to 3 for 3 ids; expected a non-decreasing"),
])
def test_search_arrays_refuses_arrays_that_are_not_a_csr_of_n_nodes(indptr, indices, field):
    with pytest.raises(ArgumentError, match=re.escape(field)):
        search_arrays(np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int32))


def test_the_search_kernels_are_compiled_before_the_search_and_reported_apart(tmp_path, rng):
    from gnnprep.hag.builder import HagConfig, build, warm_up

    warm_up(np.int64)  # both index dtypes run (a store's ids are int32 or int64)
    path, *_ = make_store(tmp_path, rng, n=120, m=900, d=4)
    r = build(path, tmp_path / "hag.h5", HagConfig())
    assert r.compile_seconds is not None and 0 <= r.compile_seconds < 5   # cached by now: loaded, not compiled
    assert r.to_dict()["compile_seconds"] == r.compile_seconds            # in --json beside search_seconds


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_blocks_searched_at_once_give_the_hag_one_worker_finds(seed):
    """Up to SEARCH_LAG blocks search at once, each with its share set when it starts (block_caps): the
    same HAG byte for byte for 1, 2, 3 and 4 workers — a binding capacity, duplicate edges, self-loops,
    isolated nodes, blocks of a few rows — and an exact one (cover(v) = N(v), the dense product)."""
    import gnnprep.hag.stream as S

    rng = np.random.default_rng(seed)
    indptr, indices = _random_csr(rng, 300, 5000)
    m = int(indptr[-1])
    for cap, k in ((8, m // 7), (None, m // 5), (40, 64)):
        one = search_arrays(indptr, indices, capacity=cap, block_entries=k)
        assert one.num_agg > 0
        for w in (2, 3, S.SEARCH_LAG):
            many = search_arrays(indptr, indices, capacity=cap, block_entries=k, workers=w)
            for a in ("inputs", "level_ptr", "indptr", "indices"):
                np.testing.assert_array_equal(getattr(many, a), getattr(one, a), err_msg=f"{a}, {w} workers")
        _check_exact(one, indptr, indices, rng)
        assert one.num_agg <= (len(indptr) - 1) // 4 if cap is None else one.num_agg <= cap


def test_the_capacity_shares_never_sum_past_the_capacity_and_match_the_sequential_rule_at_lag_one():
    """block_caps: with lag 1 the capacity left × the block's entries / the entries left; with lag L the
    blocks still searching count at their whole share, so every share is at most what is left after
    them and the shares made in full never sum past the capacity."""
    import gnnprep.hag.stream as S
    from gnnprep.sparse.order import row_blocks

    indptr = np.concatenate([[0], np.cumsum(np.random.default_rng(3).integers(0, 9, 500))])
    blocks = row_blocks(indptr, 0, 500, 97)
    cap, m = 120, int(indptr[-1])
    seq, made = S.block_caps(indptr, blocks, cap, lag=1), []
    for i, (r0, r1) in enumerate(blocks):
        s = seq(i, made)
        assert s == (cap - sum(made)) * int(indptr[r1] - indptr[r0]) // (m - int(indptr[r0]))
        made.append(s // 2)
    share, made = S.block_caps(indptr, blocks, cap, lag=4), []
    for i in range(len(blocks)):
        made.append(share(i, made))   # every block uses all of its share
        assert sum(made) <= cap
    assert share(1, made) == made[1]  # (asked again: as given)


def test_the_command_searches_blocks_side_by_side_where_the_budget_holds_them(store, tmp_path, monkeypatch):
    """With blocks smaller than the budget holds (--block-entries), as many blocks as numba's threads
    (at most SEARCH_LAG, and as the budget holds) search at once: said in --json and --dry-run, the
    same file as the library's search on one worker; a budget that holds one block searches one."""
    import numba

    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 3)
    with GraphStore(store) as g:
        indptr, indices = g.indptr(), g.indices()
    m, n = int(indptr[-1]), len(indptr) - 1
    k = m // 6
    rep = run_json(["hag", store, "-o", tmp_path / "h.h5", "--block-entries", str(k)])
    assert rep["stream"]["workers"] == 3 and rep["stream"]["blocks"] >= 6
    assert run_json(["hag", store, "-o", tmp_path / "d.h5", "--dry-run", "--block-entries", str(k)])["workers"] == 3
    want = S.search_arrays(indptr, indices, block_entries=k)
    got = _arrays(tmp_path / "h.h5")
    np.testing.assert_array_equal(got["adj/indptr"], want.indptr)
    np.testing.assert_array_equal(got["adj/indices"], want.indices)
    np.testing.assert_array_equal(got["agg/inputs"], want.inputs)
    np.testing.assert_array_equal(got["agg/level_ptr"], want.level_ptr)
    longest = int(np.diff(indptr).max())
    one = S.fixed_bytes(n, n // 4) + S.BLOCK_ENTRY_BYTES * (k + longest)
    rep = run_json(["hag", store, "-o", tmp_path / "o.h5", "--block-entries", str(k), "--memory-budget", str(one)])
    assert rep["stream"]["workers"] == 1
    np.testing.assert_array_equal(_arrays(tmp_path / "o.h5")["adj/indices"], want.indices)


def test_a_search_interrupted_with_blocks_side_by_side_resumes_to_the_same_file(store, tmp_path, monkeypatch):
    """Two blocks at once, interrupted as the third starts: the two finished are kept (blocks are
    marked in order), the rerun searches the rest only and writes the uninterrupted run's file."""
    import numba

    import gnnprep.hag.builder as B
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.builder import HagConfig, build

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(B, "warm_up", lambda index_dtype: None)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    with GraphStore(store) as g:
        config = HagConfig(block_entries=g.num_edges // 6)
    real, calls = S.block_search, []
    whole = build(store, tmp_path / "whole.h5", config)
    assert whole.stream["workers"] == 2
    monkeypatch.setattr(S, "block_search", _stopping_after(2, real, calls))
    with pytest.raises(KeyboardInterrupt):
        build(store, tmp_path / "h.h5", config)
    assert not (tmp_path / "h.h5").exists()
    done = []

    def count(*a, **k):
        done.append(1)
        return real(*a, **k)

    monkeypatch.setattr(S, "block_search", count)
    rep = build(store, tmp_path / "h.h5", config)
    assert rep.stream["resumed"] and len(done) == whole.stream["blocks"] - 2
    a, b = _arrays(tmp_path / "whole.h5"), _arrays(tmp_path / "h.h5")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_the_search_kernels_are_serial_so_blocks_can_run_on_several_threads():
    """Blocks search on several Python threads at once (searched_blocks); a numba kernel with
    ``parallel=True`` launched from two threads at once aborts under numba's default (workqueue)
    threading layer, so the block search's kernels stay serial."""
    from numba.core.registry import CPUDispatcher

    import gnnprep.hag.greedy as G
    import gnnprep.hag.stream as S

    kernels = [f for mod in (G, S) for f in vars(mod).values() if isinstance(f, CPUDispatcher)]
    assert len(kernels) > 10
    assert not [f.__name__ for f in kernels if f.targetoptions.get("parallel")]


def test_a_search_that_saves_almost_nothing_says_so_once_part_way_and_keeps_no_relabelled_copy(tmp_path, monkeypatch):
    """A graph with little redundancy within its blocks (the papers100M shape: ratio 1.003 at 1/4 under
    2 GiB) is told, once and early, with the time left; one with much is not."""
    from fixtures import clique_store

    import gnnprep.hag.stream as stream
    from gnnprep.hag.builder import HagConfig, build

    assert stream.low_savings_note(10**6, 999_000, 10**7, 5.0) is None          # a search of ~50 s: not worth it
    assert stream.low_savings_note(10**5, 99_900, 10**7, 120.0) is None         # 1% of the entries only
    assert stream.low_savings_note(10**6, 980_000, 10**7, 120.0) is None        # 2% saved: worth it
    note = stream.low_savings_note(10**6, 999_000, 10**7, 120.0)
    assert note.startswith("the HAG saves 0.10% of the transfers in the 10% of the entries") and "~18 min left" in note

    monkeypatch.setattr(stream, "LOW_SAVINGS_LONG_S", 0.0)
    monkeypatch.setattr(stream, "MIN_BLOCK_ENTRIES", 1000)   # several blocks on a small graph
    rng = np.random.default_rng(5)
    n = 3000
    make_store(tmp_path, rng, n=n, m=12000, d=4, name="sparse.h5")   # uniform random: little to share
    told = []
    r = build(tmp_path / "sparse.h5", tmp_path / "sparse.hag.h5", HagConfig(block_entries=2000), warn=told.append)
    assert len([t for t in told if t.startswith("the HAG saves")]) == 1, told
    # nor is such a HAG kept relabelled to the node order (no faster hop would read it)
    assert r.kept_copy["path"] is None and "too little for a hop through it to be faster" in r.kept_copy["why"]
    clique_store(tmp_path, 1, 600, 240, 4)   # overlapping cliques: much to share
    told = []
    build(tmp_path / "g.h5", tmp_path / "g.hag.h5", HagConfig(block_entries=2000), warn=told.append)
    assert not [t for t in told if t.startswith("the HAG saves")], told


@pytest.mark.parametrize("longest", [1, 64, 5000])
def test_a_budget_too_small_names_a_budget_that_searches(longest):
    """The least budget the error names passes the same test (it left out a block's one in-list of
    overrun and rounded to the nearest 0.1 MiB: "needs at least 452.3 MiB", where 453 MiB was refused)."""
    import gnnprep.hag.stream as S
    from gnnprep.core.errors import OptionError
    from gnnprep.core.sizes import parse_size

    n, m = 11_105_996, 308_000_000
    with pytest.raises(OptionError) as e:
        S.stream_plan(n, m, longest, n // 4, 64 << 20)
    need = parse_size(re.search(r"needs at least (\S+ \S+)\)", str(e.value))[1].replace(" ", ""))
    S.stream_plan(n, m, longest, n // 4, need)   # a plan
    with pytest.raises(OptionError):
        S.stream_plan(n, m, longest, n // 4, need - (1 << 20) - S.BLOCK_ENTRY_BYTES * 1024)


def test_an_interrupted_search_rerun_with_other_settings_says_its_partial_is_dropped(store, tmp_path, monkeypatch):
    """Rerun with another --memory-budget (other blocks): the partial output cannot be continued; the
    run says so, naming what differed, and starts afresh (it was removed without a word)."""
    import gnnprep.hag.builder as B
    import gnnprep.hag.stream as S
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.builder import HagConfig, build

    monkeypatch.setattr(S, "MIN_BLOCK_ENTRIES", 16)
    monkeypatch.setattr(B, "warm_up", lambda index_dtype: None)
    with GraphStore(store) as g:
        budget = S.fixed_bytes(g.num_nodes, g.num_nodes // 4) + S.BLOCK_ENTRY_BYTES * (g.num_edges // 6)
    real, calls = S.block_search, []
    monkeypatch.setattr(S, "block_search", _stopping_after(2, real, calls))
    with pytest.raises(KeyboardInterrupt):
        build(store, tmp_path / "h.h5", HagConfig(memory_budget=budget))
    monkeypatch.setattr(S, "block_search", real)
    told = []
    build(store, tmp_path / "h.h5", HagConfig(memory_budget=2 * budget), warn=told.append)
    said = [t for t in told if "partial output" in t]
    assert len(said) == 1 and "block_entries" in said[0] and "starting afresh" in said[0], told
    told.clear()
    build(store, tmp_path / "h2.h5", HagConfig(memory_budget=budget), warn=told.append)
    assert not [t for t in told if "partial output" in t]   # nothing found: nothing said


def test_the_command_says_when_a_hag_saves_little(tmp_path, rng):
    """A graph with next to nothing shared between its in-lists (sparse random edges): the summary
    says the HAG saves under 1% and what that means; one that shares (cliques) says nothing of it."""
    from fixtures import clique_store

    sparse, *_ = make_store(tmp_path, rng, n=3000, m=3000, d=4)
    r = run(["hag", sparse, "-o", tmp_path / "h.h5"])
    assert r.exit_code == 0, r.stderr
    line = [t for t in r.stdout.splitlines() if "saves 0.00% of the transfers" in t]
    assert len(line) == 1, r.stdout   # said once (by the line of the relabelled copy not kept, or its own)
    cl = tmp_path / "cl"
    cl.mkdir()
    clique_store(cl, 2, 300, 120, 6)
    r = run(["hag", cl / "g.h5", "-o", tmp_path / "c.h5"])
    assert r.exit_code == 0 and "% of the transfers" not in r.stdout, r.stdout


def test_the_low_savings_line_where_no_relabelled_copy_says_it():
    from types import SimpleNamespace

    from gnnprep.cli.hag import _low_savings

    little = dict(transfers_graph=308_340_370, transfers_hag=307_779_436)
    (line,) = _low_savings(SimpleNamespace(**little, kept_copy=None))
    assert "saves 0.18% of the transfers" in line
    said = {"saves_little": True, "why": "the HAG saves 0.18% of the transfers, too little for a hop through it "
                                         "to be faster"}
    assert _low_savings(SimpleNamespace(**little, kept_copy=said)) == []
    assert _low_savings(SimpleNamespace(transfers_graph=100, transfers_hag=90, kept_copy=None)) == []
