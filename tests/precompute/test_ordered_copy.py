"""Issue 24: the node order survives streaming (an ordered copy of the CSR beside the store) and so
does the pruning of ``--rows labeled``: same bytes as the stored-order computation, resumable,
rebuilt when stale or damaged, and every id users see is an original id."""

import h5py
import numpy as np
import pytest
from fixtures import interrupted_precompute, make_store, run_json, weigh_store

from gnnprep.graph.store import GraphStore
from gnnprep.precompute import ordered, plan
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.profile import Profile
from gnnprep.precompute.run import precompute
from gnnprep.sparse.order import community_order, permute_csr, permute_values


def _same(a_path, b_path, operators=("sym",), hops=3, rows_of_a=True):
    """b's hops equal a's (restricted to b's rows when a stores every row), bit for bit."""
    with FeatureStore(a_path) as a, FeatureStore(b_path) as b:
        rows = b.rows
        for op in operators:
            for k in range(hops + 1):
                want = a.f[f"channels/{op}/{k}"][:]
                want = want[rows] if rows_of_a and len(want) != len(rows) else want
                assert want.tobytes() == b.f[f"channels/{op}/{k}"][:].tobytes(), (op, k)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_copy_is_the_relabelled_csr_written_out_of_core(tmp_path, rng, weighted):
    path, *_ = make_store(tmp_path, rng, n=300, m=2500, d=3)
    if weighted:
        weigh_store(path)
    with GraphStore(path) as store:
        ip, idx = store.indptr(), store.stored_indices()
        order = community_order(ip, idx)
        # a room of 64 KiB: several output buckets, each one pass over the stored entries
        copy, done = ordered.build_copy(store, "community", order, {"near_share_before": 0.1,
                                                                      "near_share_after": 0.5}, room=1 << 16)
        assert copy is not None and done["written"]
        new_ip, new_idx, _ = permute_csr(ip, idx, order)
        np.testing.assert_array_equal(copy.indptr, new_ip)
        np.testing.assert_array_equal(copy.read_indices(0, copy.m), new_idx)
        if weighted:
            w = permute_values(ip, store.stored_weights(), order, new_ip)
            np.testing.assert_array_equal(copy.read_weights(0, copy.m), w)
        np.testing.assert_array_equal(copy.order(), order)
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        ids = np.array([5, 0, 299, 5, 17])
        np.testing.assert_array_equal(copy.new_ids(ids), inv[ids])
        np.testing.assert_array_equal(copy.new_ids(np.arange(300)), inv)
        copy.close()
        # more passes with a small room; the same file
        copy2, done2 = ordered.build_copy(store, "community", order, {}, room=1 << 14)
        assert done2["passes"] > 1
        np.testing.assert_array_equal(copy2.read_indices(0, copy2.m), new_idx)
        copy2.close()


@pytest.mark.parametrize("rows", ["all", "labeled"])
@pytest.mark.parametrize("weighted", [False, True])
def test_streamed_ordered_runs_are_bitwise_the_stored_order_ones(tmp_path, rng, rows, weighted):
    """S streamed in row blocks of its ordered copy (written by the first run, read by the next),
    the last two hops pruned: the bytes of the plain resident stored-order run."""
    path, *_ = make_store(tmp_path, rng, n=240, m=1500, d=7)
    if weighted:
        weigh_store(path)
    base = dict(hops=3, device="cpu", operators=("sym", "rw"), rows=rows)
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(reorder="none", blocks=(1, 1, 1), **base))
    copy = ordered.copy_path(path, "community")
    for i, blocks in enumerate([(1, 5, 3), (1, 3, 1), (1, 1, 2)]):
        out = tmp_path / f"o{i}.h5"
        rep = precompute(path, out, PrecomputeConfig(reorder="community", blocks=blocks, **base))
        assert rep.plan["reorder"] and rep.plan["ordered_copy"] and rep.reorder["used"]
        assert rep.ordered_copy["used"] and rep.ordered_copy["built"] is (i == 0) and copy.exists()
        assert rep.plan["s_resident"] is (blocks[1] == 1)
        assert rep.decisions["pruning"].startswith("used" if rows == "labeled" else "not used")
        _same(tmp_path / "ref.h5", out, ("sym", "rw"))


def test_streamed_pruning_without_an_order_is_bitwise(tmp_path, rng, monkeypatch):
    """--rows labeled with S streamed in the stored order: hop K from the stored rows' sub-CSR,
    hop K-1 only the rows it needs from each block; and it really computes fewer rows."""
    from gnnprep.sparse import row_kernels

    path, *_ = make_store(tmp_path, rng, n=400, m=500, d=5)
    base = dict(hops=3, device="cpu", reorder="none", operators=("sym", "rw"))
    precompute(path, tmp_path / "all.h5", PrecomputeConfig(rows="all", blocks=(1, 1, 1), **base))
    seen = []
    original = row_kernels.spmm_listed

    def spy(ip, idx, w, r0, rows, *args):
        seen.append(len(rows))
        return original(ip, idx, w, r0, rows, *args)

    monkeypatch.setattr(row_kernels, "spmm_listed", spy)
    rep = precompute(path, tmp_path / "lab.h5", PrecomputeConfig(rows="labeled", blocks=(1, 4, 2), **base))
    assert not rep.plan["s_resident"] and rep.decisions["pruning"].startswith("used (S streamed")
    assert seen and sum(seen) < 2 * 2 * 400  # hop K-1 of both operators and column blocks: fewer than n rows each
    _same(tmp_path / "all.h5", tmp_path / "lab.h5", ("sym", "rw"))


def test_a_budget_smaller_than_s_streams_the_ordered_copy_pruned(tmp_path, rng, monkeypatch):
    """A budget below S's own bytes: the planner streams the ordered copy, written within the
    budget from the order ingest kept, keeps the pruning, and the bytes are the resident
    stored-order run's."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    n, m, d = 20_000, 600_000, 4
    groups = rng.integers(0, 60, n)
    src = rng.integers(0, n, m)
    members = np.argsort(groups, kind="stable")
    starts = np.searchsorted(groups[members], np.arange(61))
    g = groups[src]
    dst = members[starts[g] + (rng.random(m) * (starts[g + 1] - starts[g])).astype(np.int64)]
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, d)).astype(np.float32))
    (tmp_path / "splits").mkdir()
    np.save(tmp_path / "splits" / "train.npy", rng.choice(n, 300, replace=False))
    path = tmp_path / "g.h5"
    ingest(str(tmp_path / "e.npy"), path, IngestConfig(source=SourceOptions(
        num_nodes=n, features=str(tmp_path / "x.npy"), splits=str(tmp_path / "splits"))))
    with GraphStore(path) as store:
        s_bytes = store.num_edges * store.index_dtype.itemsize
        assert store.kept_order("community") is not None  # found at ingest
    monkeypatch.setattr(plan, "FIXED", 0)
    monkeypatch.setattr(plan, "REORDER_MIN_BLOCK_BYTES", 0)
    monkeypatch.setattr(plan, "MIN_COPY_ROOM", 1 << 18)
    budget = s_bytes // 2
    base = dict(hops=3, device="cpu", rows="labeled")
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(reorder="none", blocks=(1, 1, 1), **base))
    # (the order forced: on a graph this small the planner would rather skip writing the copy)
    rep = precompute(path, tmp_path / "f.h5", PrecomputeConfig(memory_budget=budget, reorder="community", **base))
    p = rep.plan
    assert rep.decisions["order"].startswith("used"), (rep.decisions, p)
    assert not p["s_resident"] and p["reorder"] and p["ordered_copy"] and p["predicted_peak"] <= budget
    assert rep.reorder["used"] and rep.ordered_copy["built"] and rep.decisions["order"].startswith("used")
    assert rep.decisions["pruning"].startswith("used (S streamed")
    _same(tmp_path / "ref.h5", tmp_path / "f.h5")


@pytest.mark.parametrize("damage", ["other_graph", "not_a_permutation", "truncated", "garbage"])
def test_a_stale_or_damaged_copy_is_ignored_and_rewritten(tmp_path, rng, damage):
    path, *_ = make_store(tmp_path, rng, n=200, m=1200, d=4)
    base = dict(hops=2, device="cpu", reorder="community", blocks=(1, 3, 2), rows="labeled")
    first = precompute(path, tmp_path / "a.h5", PrecomputeConfig(**base))
    assert first.ordered_copy["built"]
    copy = ordered.copy_path(path, "community")
    if damage == "garbage":
        copy.write_bytes(b"\x89HDF junk" * 50)
    elif damage == "truncated":
        copy.write_bytes(copy.read_bytes()[:3000])
    else:
        with h5py.File(copy, "r+") as f:
            if damage == "other_graph":
                f.attrs["graph_fingerprint"] = "another graph"
            else:
                o = f["order"][:]
                o[1] = o[0]
                f["order"][:] = o
    with GraphStore(path) as store:
        assert ordered.open_copy(store, "community") is None
    again = precompute(path, tmp_path / "b.h5", PrecomputeConfig(**base))
    assert again.ordered_copy["built"] and again.ordered_copy["used"]
    with GraphStore(path) as store:
        assert ordered.open_copy(store, "community") is not None
    _same(tmp_path / "a.h5", tmp_path / "b.h5", hops=2, rows_of_a=False)


def test_no_room_for_the_copy_falls_back_to_the_stored_order(tmp_path, rng, monkeypatch):
    path, *_ = make_store(tmp_path, rng, n=200, m=1200, d=4)
    base = dict(hops=2, device="cpu", blocks=(1, 3, 2), rows="labeled")
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(reorder="none", **base))
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    # room for the output (~1 MiB), not for the copy beside it (which wants 64 MiB to spare)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 30, 32 << 20))
    rep = precompute(path, tmp_path / "f.h5", PrecomputeConfig(reorder="community", **base))
    assert not rep.plan["reorder"] and "no ordered copy" in rep.decisions["order"]
    assert not ordered.copy_path(path, "community").exists()
    _same(tmp_path / "ref.h5", tmp_path / "f.h5", hops=2, rows_of_a=False)


@pytest.mark.parametrize("rows,reorder", [("all", "community"), ("labeled", "community"), ("labeled", "none")])
def test_an_interrupted_streamed_run_resumes_bitwise(tmp_path, rng, monkeypatch, rows, reorder):
    """Streamed from the ordered copy, and streamed pruned in the stored order: a run stopped after
    its first unit resumes to the bytes of an uninterrupted one (the copy written by the first)."""
    path, *_ = make_store(tmp_path, rng, n=240, m=1500, d=6)
    base = dict(hops=3, device="cpu", reorder=reorder, blocks=(1, 4, 3), rows=rows, operators=("sym", "rw"))
    out = tmp_path / "f.h5"
    interrupted_precompute(monkeypatch, path, out, **base)
    rep = precompute(path, out, PrecomputeConfig(**base))
    assert rep.resumed_units >= 1 and rep.plan["ordered_copy"] is (reorder == "community")
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(**{**base, "reorder": "none", "blocks": (1, 1, 1)}))
    _same(tmp_path / "ref.h5", out, ("sym", "rw"), rows_of_a=False)


def test_every_id_users_see_is_the_original_id(tmp_path, rng):
    """rows, labels, splits of the artifact (the train/valid/test positions the trainer takes from
    it) and `gnnprep info` are in the store's ids, whatever the node order of the computation (here
    streamed from the ordered copy)."""
    path, src, dst, x = make_store(tmp_path, rng, n=300, m=2000, d=6, splits=False)
    splits = {"train": np.arange(0, 300, 5), "valid": np.arange(2, 300, 11), "test": np.arange(3, 300, 13)}
    with h5py.File(path, "r+") as f:
        for k, v in splits.items():
            f[f"splits/{k}"] = v
    out = tmp_path / "f.h5"
    rep = precompute(path, out, PrecomputeConfig(hops=2, device="cpu", reorder="community", blocks=(1, 3, 2),
                                                 rows="labeled"))
    assert rep.plan["ordered_copy"] and rep.reorder["used"]
    with GraphStore(path) as store:
        labels, store_splits = store.labels(), store.splits()
        with h5py.File(ordered.copy_path(path, "community")) as c:
            assert not np.array_equal(c["order"][:], np.arange(300))  # the computation really was reordered
    want_rows = np.unique(np.concatenate(list(splits.values())))
    with FeatureStore(out) as fs:
        np.testing.assert_array_equal(fs.rows, want_rows)
        np.testing.assert_array_equal(fs.labels()[:], labels[want_rows])
        for k, v in store_splits.items():
            np.testing.assert_array_equal(fs.f[f"splits/{k}"][:], v)
            pos = fs.split_positions(fs.rows)[k]
            np.testing.assert_array_equal(fs.rows[pos], v)
        np.testing.assert_array_equal(fs.hop(0)[:], x[want_rows])  # hop 0 row i is X's row rows[i]
    info = run_json(["info", out])
    assert info["rows"] == len(want_rows)


def test_the_planner_streams_the_ordered_copy_and_prunes_at_papers100m_shape():
    """1/10 of papers100M under 2 GiB (S does not fit): the plan streams S from the ordered copy,
    pruned; the order and pruning are predicted to pay, and the dry-run reasons say so."""
    from gnnprep.precompute.sizing import plan_for_sizes, sizes_problem

    p = sizes_problem(11_105_996, 314_000_000, 128, 3, 155_000)
    assert len(p.hop_entries) == 3 and p.hop_entries[-1] < 0.03 * p.num_entries < p.hop_entries[-2]
    prof = Profile()
    plain = plan.choose_plan(p, 2 << 30, prof)
    assert not plain.s_resident
    chosen, why = plan.decide_order(plain, p, prof, 1 / 3, "auto", 2 << 30)
    assert chosen.reorder and chosen.ordered_copy and not chosen.s_resident and why.startswith("used")
    assert chosen.predicted_peak <= 2 << 30 and chosen.predicted_seconds < plain.predicted_seconds
    # streamed reads: hop K from the resident sub-CSR; pruned entries are predicted for the streamed plan
    assert plan.s_reads(p, chosen.b, chosen.c) == chosen.c * 2 + 1
    res = plan_for_sizes(111_059_956, 3_140_000_000, 128, 3, 8 << 30, rows=1_550_000)
    assert res["plan"]["reorder"] and res["decisions"]["order"].startswith("used")
    assert res["decisions"]["pruning"].startswith("used (S streamed")
    assert plan_for_sizes(111_059_956, 3_140_000_000, 128, 3, 1 << 30, rows=1_550_000)["plan"] is None
    # no copy possible and S streamed: no order, and the reason says why
    none = plan.decide_order(plain, plan.Problem(**{**p.__dict__, "ordered_copy": ""}), prof, 1 / 3, "auto",
                             2 << 30)
    assert not none[0].reorder and "no ordered copy of S can be had" in none[1]


def test_dry_run_says_why(tmp_path, rng):
    path, *_ = make_store(tmp_path, rng, n=120, m=600, d=5)
    d = run_json(["precompute", path, "-o", tmp_path / "f.h5", "--dry-run", "--json", "--device", "cpu",
                  "--rows", "labeled", "--hops", "2"])
    assert set(d["decisions"]) == {"order", "pruning"}
    assert d["decisions"]["pruning"].startswith("used (S resident)")
    assert d["decisions"]["order"].startswith("not used")
    assert not ordered.copy_path(path, "community").exists()
    from fixtures import run

    text = run(["precompute", path, "-o", tmp_path / "f.h5", "--dry-run", "--device", "cpu", "--rows", "labeled",
                "--hops", "2"]).output
    assert "\nnode order not used: " in text and "\npruning used (S resident)" in text


# int64 ids (graphs of 2^31 nodes and more) once, weighted: each further signature of the parallel
# kernels costs 5-7 s of compilation on a fresh clone, and the unweighted path is the int32 one's
@pytest.mark.parametrize("dtype,weighted", [(np.int32, False), (np.int32, True), (np.int64, True)])
def test_prefetching_row_kernels_are_bitwise_the_row_kernel(rng, weighted, dtype):
    """Every kernel of gnnprep.sparse.row_kernels gives the bytes of the plain row kernel."""
    import scipy.sparse as sp

    from gnnprep.precompute import pruned
    from gnnprep.sparse import reference, row_kernels

    n, d = 400, 37
    a = sp.random(n, n, density=0.04, random_state=5, format="csr")
    a.sort_indices()
    ip, idx = a.indptr.astype(np.int64), a.indices.astype(dtype)
    w = rng.random(len(idx)).astype(np.float32) if weighted else None
    x = rng.standard_normal((n, d)).astype(np.float32)
    left, right = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    full = np.empty_like(x)
    reference.reference_spmm_rows(ip, idx, w, 0, left, right, 1.0, x, full)
    for ahead in (1, 7, 64):
        got = np.empty_like(x)
        for r0, r1 in ((0, 150), (150, 151), (151, n)):
            p0, p1 = ip[r0], ip[r1]
            row_kernels.spmm_rows(ip[r0:r1 + 1], idx[p0:p1], None if w is None else w[p0:p1], r0, left, right, 1.0, x,
                                  got[r0:r1], ahead=ahead)
        assert got.tobytes() == full.tobytes()
    rows = np.sort(rng.choice(n, 91, replace=False))
    listed = np.zeros_like(x)
    in_block = rows[(rows >= 100) & (rows < 300)]
    row_kernels.spmm_listed(ip[100:301], idx[ip[100]:ip[300]], None if w is None else w[ip[100]:ip[300]], 100,
                            in_block, left, right, 1.0, x, listed)
    assert listed[in_block].tobytes() == full[in_block].tobytes() and not listed[rows[rows < 100]].any()
    sub_ip, sub_idx, sub_w = pruned.extract_rows(ip, [(0, n, ip, idx, w)], rows, dtype, weighted)
    pick = rng.permutation(len(rows))
    out = np.empty((len(rows), d), dtype=np.float32)
    row_kernels.spmm_sub(sub_ip, sub_idx, sub_w, rows, pick, left, right, 1.0, x, out)
    assert out.tobytes() == full[rows[pick]].tobytes()
    row_kernels.spmm_selected(ip, idx, w, rows[pick], left, right, 1.0, x, out)
    assert out.tobytes() == full[rows[pick]].tobytes()
    inplace = np.zeros_like(x)
    row_kernels.spmm_rows_in_place(ip, idx, w, rows, left, right, 1.0, x, inplace)
    assert inplace[rows].tobytes() == full[rows].tobytes()


def test_prefetching_hag_rows_are_bitwise_the_hag_kernel(rng):
    from gnnprep.sparse import kernels, reference, row_kernels

    n, agg, d = 60, 12, 9
    inputs = rng.integers(0, n, (agg, 2)).astype(np.int64)
    level_ptr = np.array([0, agg], dtype=np.int64)
    deg = rng.integers(0, 6, n)
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    indices = rng.integers(0, n + agg, int(deg.sum())).astype(np.int64)
    x = rng.standard_normal((n, d)).astype(np.float32)
    left, right = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    h = np.empty((agg, d), dtype=np.float32)
    kernels.hag_prepare(x, right, inputs, level_ptr, h)
    want, got = np.empty_like(x), np.empty_like(x)
    reference.reference_hag_rows(indptr, indices, 0, left, right, 1.0, x, h, want)
    for ahead in (1, 64):
        row_kernels.hag_rows(indptr, indices, 0, left, right, 1.0, x, h, got, ahead=ahead)
        assert got.tobytes() == want.tobytes()
    # the pruned hops' kernels (listed rows, a cursor prefetching along them): each row's bytes the same
    rows = np.sort(rng.choice(n, 23, replace=False)).astype(np.int64)
    for ids in (np.int64, np.int32):
        for ahead in (1, 5, 64):
            got = np.zeros_like(x)
            row_kernels.hag_rows_in_place(indptr, indices.astype(ids), rows, left, right, 1.0, x, h, got, ahead=ahead)
            assert got[rows].tobytes() == want[rows].tobytes() and not got[np.setdiff1d(np.arange(n), rows)].any()
            shuffled = rng.permutation(rows)
            out = np.empty((len(rows), d), dtype=np.float32)
            row_kernels.hag_selected(indptr, indices.astype(ids), shuffled, left, right, 1.0, x, h, out, ahead=ahead)
            assert out.tobytes() == want[shuffled].tobytes()


def test_the_aggregation_rows_prefetching_ahead_are_the_same_bytes(rng):
    """kernels.hag_prepare prefetches the input rows of the nodes ahead: any distance (none too)
    gives the same bytes, which are y(a) + y(b) level by level (y(u) = r[u] x[u], or an earlier
    aggregation row)."""
    from gnnprep.sparse import kernels

    n, d = 500, 37
    sizes = [90, 40, 11, 1]   # levels: each node's inputs from the graph or lower levels
    inputs, level_ptr, made = [], [0], 0
    for size in sizes:
        inputs.append(rng.integers(0, n + made, (size, 2)))
        made += size
        level_ptr.append(made)
    inputs = np.concatenate(inputs).astype(np.int32)
    level_ptr = np.array(level_ptr, dtype=np.int64)
    x = rng.standard_normal((n, d)).astype(np.float32)
    right = rng.random(n).astype(np.float32)
    want = np.zeros((made, d), dtype=np.float32)
    for a, (u, v) in enumerate(inputs):
        y = [right[w] * x[w] if w < n else want[w - n] for w in (u, v)]
        want[a] = (np.zeros(d, np.float32) + y[0]) + y[1]
    for ahead in (None, 0, 1, 3, 64, 1000):
        h = np.full((made, d), np.nan, dtype=np.float32)
        kernels.hag_prepare(x, right, inputs, level_ptr, h, ahead=ahead)
        np.testing.assert_allclose(h, want, rtol=1e-6, atol=1e-6)
        if ahead is None:
            first = h.tobytes()
        assert h.tobytes() == first
