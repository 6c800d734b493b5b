"""HAG search and executor: cover(v) = N(v) exactly, Algorithm 3 on hand-checked cases."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import clique_store, random_edges, reference_csr

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.search import exact_search, rounds_search
from gnnprep.hag.structure import covers, execute, graph_cost


def csr_from_lists(lists):
    """CSR of in-lists, padded with empty rows so that every id is a node."""
    n = max([len(lists)] + [x + 1 for l in lists for x in l])
    lists = list(lists) + [[]] * (n - len(lists))
    indptr = np.concatenate([[0], np.cumsum([len(l) for l in lists])]).astype(np.int64)
    indices = np.array([x for l in lists for x in sorted(l)], dtype=np.int64)
    return indptr, indices


def clique_csr(rng, n, groups, size):
    """In-lists of overlapping groups (cliques), so there is redundancy to find."""
    lists = [set() for _ in range(n)]
    for _ in range(groups):
        g = rng.choice(n, size, replace=False)
        for v in g:
            lists[v].update(int(u) for u in g if u != v)
    return csr_from_lists([sorted(l) for l in lists])


def assert_equivalent(h, indptr, indices):
    cov = covers(h)
    for v in range(len(indptr) - 1):
        np.testing.assert_array_equal(cov[v], np.sort(indices[indptr[v]:indptr[v + 1]]))
    # inputs come before the aggregation node that uses them
    assert all(max(a, b) < h.num_nodes + i for i, (a, b) in enumerate(h.inputs))


def _clique_graph(tmp_path, n=120, d=6, seed=3):
    return clique_store(tmp_path, seed, n, 50, d, among=n - 2)


def _shared_lists_graph(tmp_path, hubs=20, n=120, d=6, seed=3):
    """Every non-hub linked to every hub (both ways): n - hubs in-lists that are the same hubs, and
    hubs in-lists that are the same non-hubs; a HAG shares nearly all of them."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(hubs, n), hubs)
    dst = np.tile(np.arange(hubs), n - hubs)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, d)).astype(np.float32))
    ingest(str(tmp_path / "e.npy"), tmp_path / "g.h5",
           IngestConfig(source=SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"))))
    return tmp_path / "g.h5"


def test_paper_style_example_by_hand():
    # three destinations share {0, 1}, two of them also {2}: merge (0, 1) first (shared 3 times),
    # then ({0, 1}, 2) (shared twice); node 4 (in-list {}) pads the id range
    lists = [[0, 1, 2], [0, 1, 2], [0, 1, 3], [4]]
    indptr, indices = csr_from_lists(lists)
    h = exact_search(indptr, indices, capacity=10)
    np.testing.assert_array_equal(h.inputs, [[0, 1], [2, 5]])
    assert h.level_ptr.tolist() == [0, 1, 2]
    rows = [h.indices[h.indptr[v]:h.indptr[v + 1]].tolist() for v in range(5)]
    assert rows == [[6], [6], [3, 5], [4], []]
    assert graph_cost(indptr) == (2 + 2 + 2 + 0, 10)
    assert h.aggregations() == 0 + 0 + 1 + 0 + 2  # destinations + one per aggregation node
    assert h.transfers() == 5 + 4
    assert_equivalent(h, indptr, indices)


def test_ties_take_the_smallest_pair_and_capacity_stops():
    # pairs (0,1) and (2,3) are each shared by two destinations: (0,1) wins the tie; capacity 1 stops
    lists = [[0, 1, 2, 3], [0, 1, 2, 3]]
    indptr, indices = csr_from_lists(lists)
    h = exact_search(indptr, indices, capacity=1)
    np.testing.assert_array_equal(h.inputs, [[0, 1]])
    assert_equivalent(h, indptr, indices)
    h2 = exact_search(indptr, indices, capacity=10)
    assert h2.num_agg == 3  # (0,1), then (2,3), then (agg, agg)
    assert h2.aggregations() == 3 and h2.transfers() == 2 + 6
    assert_equivalent(h2, indptr, indices)


def test_pairs_shared_once_are_not_merged():
    indptr, indices = csr_from_lists([[0, 1], [1, 2], [0, 2]])
    assert exact_search(indptr, indices, capacity=10).num_agg == 0


@pytest.mark.parametrize("seed", range(5))
def test_random_graphs_cover_and_executor_match(seed):
    rng = np.random.default_rng(seed)
    n = 60
    src, dst = random_edges(rng, n, 500)
    a = reference_csr(src, dst, n, True)
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    h = exact_search(indptr, indices, capacity=n)  # capacity |V|
    assert_equivalent(h, indptr, indices)
    assert h.aggregations() < graph_cost(indptr)[0]
    x = rng.standard_normal((n, 5))
    np.testing.assert_allclose(execute(h, x), a @ x, rtol=1e-12, atol=1e-12)


def test_exact_refuses_when_pairs_exceed_the_budget():
    indptr, indices = csr_from_lists([list(range(50))] * 3)
    with pytest.raises(GnnprepError, match="use --method rounds"):
        exact_search(indptr, indices, memory_budget=1000)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [5, None, 10**6])
def test_rounds_is_equivalent_and_saves(seed, capacity):
    rng = np.random.default_rng(seed)
    n = 80
    indptr, indices = clique_csr(rng, n, groups=40, size=6)
    h = rounds_search(indptr, indices, capacity=capacity)
    assert_equivalent(h, indptr, indices)
    assert h.num_agg <= (n // 4 if capacity is None else capacity)
    x = rng.standard_normal((n, 3))
    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n))
    np.testing.assert_allclose(execute(h, x), a @ x, rtol=1e-12, atol=1e-12)
    if capacity != 5:
        assert h.aggregations() < graph_cost(indptr)[0]


def test_rounds_depth_bound():
    lists = [list(range(12))] * 3
    indptr, indices = csr_from_lists(lists)
    h = rounds_search(indptr, indices, capacity=100, max_depth=2)
    assert len(h.level_ptr) - 1 <= 2
    assert_equivalent(h, indptr, indices)


def test_precompute_through_a_hag_equals_plain(tmp_path):
    from fixtures import run

    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute

    _clique_graph(tmp_path)  # cliques over 118 nodes; 2 isolated nodes
    r = run(["hag", tmp_path / "g.h5", "-o", tmp_path / "hag.h5", "--capacity", "all", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["aggregations_hag"] < json.loads(r.stdout)["aggregations_graph"]
    ops = ("sym", "rw", "sym-noloop")
    precompute(tmp_path / "g.h5", tmp_path / "plain.h5", PrecomputeConfig(hops=3, operators=ops, device="cpu"))
    precompute(tmp_path / "g.h5", tmp_path / "hag_f.h5",
               PrecomputeConfig(hops=3, operators=ops, device="cpu", hag=str(tmp_path / "hag.h5"), blocks=(1, 1, 4)))
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "hag_f.h5") as b:
        for op in ops:
            for k in range(4):
                ref = a.hop(k, op)[:]
                np.testing.assert_allclose(b.hop(k, op)[:], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    info = json.loads(run(["info", tmp_path / "hag.h5", "--json"]).stdout)
    assert info["format"] == "gnnprep.hag" and info["num_agg"] > 0


def test_hag_of_another_graph_is_refused(tmp_path):
    from fixtures import run

    from gnnprep.graph.ingest import ingest
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    r = run(["ingest", "sample", "-o", tmp_path / "s.h5"])
    assert r.exit_code == 0
    np.save(tmp_path / "e.npy", np.array([[0, 1], [1, 2]]))
    ingest(str(tmp_path / "e.npy"), tmp_path / "other.h5")
    assert run(["hag", tmp_path / "other.h5", "-o", tmp_path / "hag.h5"]).exit_code == 0
    with pytest.raises(GnnprepError, match="another graph"):
        precompute(tmp_path / "s.h5", tmp_path / "f.h5", PrecomputeConfig(hops=1, device="cpu", hag=str(tmp_path / "hag.h5")))


def test_sequential_shares_prefixes_by_hand():
    from gnnprep.hag.search import sequential_search

    lists = [[0, 1, 2, 5], [0, 1, 2, 6], [0, 1, 3], [1, 4]]
    indptr, indices = csr_from_lists(lists)
    h = sequential_search(indptr, indices, capacity=10)
    # prefixes (0,1) shared 3x and (0,1,2) shared 2x become nodes: in-lists start with them
    np.testing.assert_array_equal(h.inputs, [[0, 1], [7, 2]])
    rows = [h.indices[h.indptr[v]:h.indptr[v + 1]].tolist() for v in range(4)]
    assert rows == [[8, 5], [8, 6], [7, 3], [1, 4]]  # csr_from_lists stores sorted rows
    for v, cov in enumerate(covers(h, ordered=True)):
        np.testing.assert_array_equal(cov, indices[indptr[v]:indptr[v + 1]])


@pytest.mark.parametrize("seed", range(3))
def test_sequential_random_sequences_cover_in_order(seed):
    from gnnprep.hag.search import sequential_search

    rng = np.random.default_rng(seed)
    n = 70
    base = [rng.permutation(n)[:8] for _ in range(6)]
    lists = [list(base[rng.integers(6)][: rng.integers(1, 9)]) + list(rng.integers(0, n, rng.integers(0, 3)))
             for _ in range(n)]
    indptr = np.concatenate([[0], np.cumsum([len(l) for l in lists])]).astype(np.int64)
    indices = np.array([x for l in lists for x in l], dtype=np.int64)  # order as given, not sorted
    for cap in (3, None, 10**6):
        h = sequential_search(indptr, indices, capacity=cap)
        for v, cov in enumerate(covers(h, ordered=True)):
            np.testing.assert_array_equal(cov, indices[indptr[v]:indptr[v + 1]])
        assert all(max(a, b) < n + i for i, (a, b) in enumerate(h.inputs))


def test_partitioned_candidate_counting_equals_one_pass():
    from gnnprep.hag.search import _count_candidates

    rng = np.random.default_rng(5)
    src = rng.integers(0, 50, 3000).astype(np.int64)
    follow = np.tile(np.arange(9, -1, -1), 300)  # in-lists of 10 entries
    big = np.int64(100)
    u1, c1 = _count_candidates(src, follow, 4, big, 1, 2)
    u3, c3 = _count_candidates(src, follow, 4, big, 3, 2, chunk=257)
    order = np.argsort(u3)
    np.testing.assert_array_equal(u1, u3[order])
    np.testing.assert_array_equal(c1, c3[order])


def test_hag_auto_skips_a_search_that_cannot_pay_and_uses_a_cached_hag_that_does(tmp_path):
    from fixtures import run

    from gnnprep.hag.builder import cache_path as hag_cache_path
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute

    g = _shared_lists_graph(tmp_path)
    plain = precompute(g, tmp_path / "plain.h5", PrecomputeConfig(hops=3, device="cpu"))
    auto = precompute(g, tmp_path / "auto.h5", PrecomputeConfig(hops=3, device="cpu", hag="auto"))
    assert plain.hag is None and auto.hag["used"] is False and "search" in auto.hag["reason"]
    assert not hag_cache_path(g).exists()  # nothing searched, nothing written beside the store
    assert run(["hag", g, "-o", hag_cache_path(g), "--capacity", "all"]).exit_code == 0
    # a free kernel second per entry makes any saving worth it; the result must not change
    import gnnprep.precompute.run as prop
    from gnnprep.precompute.profile import Profile

    slow = Profile(spmm_ns_per_nnz={8: 1e6, 128: 1.6e7})
    orig = prop.load_profile
    prop.load_profile = lambda device, warn=None: slow
    try:
        used = precompute(g, tmp_path / "used.h5", PrecomputeConfig(hops=3, device="cpu", hag="auto"))
    finally:
        prop.load_profile = orig
    assert used.hag["used"] is True and used.hag["path"] == str(hag_cache_path(g))
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "used.h5") as b:
        for k in range(4):
            ref = a.hop(k)[:]
            np.testing.assert_allclose(b.hop(k)[:], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_choose_hag_rules():
    from gnnprep.precompute.plan import Problem, choose_hag, choose_plan
    from gnnprep.precompute.profile import Profile

    p = Problem(num_nodes=1000, num_entries=100_000, num_features=64, hops=3, operators=1, out_rows=1000,
                index_bytes=4, weighted=False, out_itemsize=4, in_itemsize=4, device="cpu")
    prof = Profile()
    plan = choose_plan(p, 1 << 30, prof)
    assert not choose_hag(plan, p, prof, None, 1 << 30).build  # 3 hops never repay a search
    many = Problem(**{**p.__dict__, "hops": 10_000})
    assert choose_hag(choose_plan(many, 1 << 30, prof), many, prof, None, 1 << 30).build
    good = {"transfers_hag": 20_000, "num_agg": 5_000}
    ten = Problem(**{**p.__dict__, "hops": 10})   # (at 3 hops the HAG's extra memory, faulted in, eats the saving)
    plan10 = choose_plan(ten, 1 << 30, prof)
    assert choose_hag(plan10, ten, prof, good, 1 << 30).use
    assert not choose_hag(plan10, ten, prof, {"transfers_hag": 99_000, "num_agg": 500}, 1 << 30).use
    assert not choose_hag(plan10, ten, prof, good, plan10.predicted_peak + 1000).use  # does not fit
    weighted = Problem(**{**ten.__dict__, "weighted": True})
    assert not choose_hag(plan10, weighted, prof, good, 1 << 30).use


@pytest.mark.parametrize("min_share", [3, 4])
def test_rounds_min_share_keeps_only_widely_shared_pairs(min_share):
    rng = np.random.default_rng(7)
    n = 120
    indptr, indices = clique_csr(rng, n, groups=60, size=8)
    loose = rounds_search(indptr, indices, capacity=10**6)
    tight = rounds_search(indptr, indices, capacity=10**6, min_share=min_share)
    assert_equivalent(tight, indptr, indices)
    assert 0 < tight.num_agg < loose.num_agg
    uses = np.bincount(np.concatenate([tight.indices, tight.inputs.ravel()]), minlength=n + tight.num_agg)[n:]
    assert uses.min() >= 1  # every aggregation node is read (by in-lists or as a later node's input)


def test_choose_hag_a_search_is_judged_by_the_pruned_hops_kernel_time():
    """What a perfect HAG could save is the plain run's kernel time over the entries its hops read:
    with ``--rows labeled`` hops K and K-1 read a fraction (on papers100M's shape at 1/10 the bound
    was 49.6 s of kernels counted over every entry, on a run predicted at 22 s in all)."""
    from gnnprep.precompute.plan import Problem, choose_hag, choose_plan
    from gnnprep.precompute.profile import Profile

    prof = Profile()
    full = Problem(num_nodes=100_000, num_entries=4_000_000, num_features=128, hops=20, out_rows=100_000)
    pruned = Problem(**{**full.__dict__, "hop_entries": (4_000_000,) + (40_000,) * 19, "out_rows": 1_000})
    search = None
    for p in (full, pruned):
        plan = choose_plan(p, 1 << 33, prof)
        v = choose_hag(plan, p, prof, None, 1 << 33, search_s=1e-9)
        assert v.build
        search = v.predicted_saving_s if search is None else search
    # a search costing between the two bounds repays the full run's kernels, not the pruned run's
    mid = search * 0.5
    assert choose_hag(choose_plan(full, 1 << 33, prof), full, prof, None, 1 << 33, search_s=mid).build
    assert not choose_hag(choose_plan(pruned, 1 << 33, prof), pruned, prof, None, 1 << 33, search_s=mid).build
