"""Issue 13: the node order found fast and once, X's columns read raw, and no torch import on
machines without a GPU driver. Each fast path is checked against the plain one."""

import mmap
import subprocess
import sys

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import make_store

from gnnprep.graph import order as kept_order
from gnnprep.graph.store import GraphStore
from gnnprep.sparse import order as node_order


def _random_csr(rng, n, density):
    a = sp.random(n, n, density=density, random_state=int(rng.integers(1 << 30)), format="csr")
    a = ((a + a.T) > 0).astype(np.float32).tocsr()
    a.sort_indices()
    return a.indptr.astype(np.int64), a.indices.astype(np.int32)


def _reference_order(indptr, indices, sweeps=2):
    """Label propagation exactly as specified, in plain Python: asynchronous, id order, the most
    frequent neighbour label (ties to the smallest), then nodes stably sorted by label."""
    n = len(indptr) - 1
    label = list(range(n))
    for _ in range(sweeps):
        for v in range(n):
            counts = {}
            for u in indices[indptr[v]:indptr[v + 1]]:
                counts[label[u]] = counts.get(label[u], 0) + 1
            if counts:
                top = max(counts.values())
                label[v] = min(lab for lab, c in counts.items() if c == top)
    return np.argsort(np.array(label), kind="stable")


@pytest.mark.parametrize("trial", range(6))
def test_community_order_matches_the_plain_definition(rng, trial):
    n = int(rng.integers(1, 200))
    indptr, indices = _random_csr(rng, n, float(rng.uniform(0, 0.1)))
    np.testing.assert_array_equal(node_order.community_order(indptr, indices), _reference_order(indptr, indices))


@pytest.mark.parametrize("block", [1, 7, 64, 10**6])
def test_row_blocks_cover_the_rows_in_blocks_of_about_the_entries(rng, block):
    """The row blocks every streamed pass uses (the ingest order's sweeps, the streamed relabel):
    contiguous, covering lo..hi-1, each at most ``block`` entries beyond its first row.
    (That a streamed order equals the in-memory one: test_the_ingest_order_follows_the_rows...)"""
    indptr, _ = _random_csr(rng, 500, 0.02)
    for lo, hi in [(0, 500), (37, 411), (100, 101)]:
        blocks = node_order.row_blocks(indptr, lo, hi, block)
        assert blocks[0][0] == lo and blocks[-1][1] == hi
        assert all(a1 == b0 for (_, a1), (b0, _) in zip(blocks, blocks[1:]))
        for r0, r1 in blocks:
            assert r1 > r0 and indptr[r1] - indptr[r0 + 1] <= block


def test_group_by_label_is_a_stable_argsort(rng):
    label = rng.integers(0, 50, 1000).astype(np.int32)
    np.testing.assert_array_equal(node_order.group_by_label(label), np.argsort(label, kind="stable"))


def test_window_near_share_estimates_the_sampled_one(rng):
    indptr, indices = _random_csr(rng, 2000, 0.01)
    order = node_order.community_order(indptr, indices)
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.arange(len(order))
    for w in (50, 500):
        for iv in (None, inv):
            assert node_order.near_share_windows(indptr, indices, w, iv, windows=400, width=100) == pytest.approx(
                node_order.near_share(indptr, indices, w, iv, samples=10**6), abs=0.03)


@pytest.mark.parametrize("layout", ["raw", "gzip", "narrow_chunks", "float64"])
def test_feature_columns_read_raw_or_through_hdf5_agree(tmp_path, rng, layout):
    """The raw-chunk fast path and HDF5's hyperslab reads give the same columns, for every block."""
    path, *_ = make_store(tmp_path, rng, n=5000, m=20000, d=13)
    with h5py.File(path, "r+") as f:
        x = f["nodes/features"][:]
        del f["nodes/features"]
        kw = {"raw": dict(chunks=(512, 13)), "gzip": dict(chunks=(512, 13), compression="gzip"),
              "narrow_chunks": dict(chunks=(512, 5))}.get(layout, dict(chunks=(512, 13)))
        f.create_dataset("nodes/features", data=x.astype(np.float64) if layout == "float64" else x, **kw)
    with GraphStore(path) as g:
        for c0, c1 in [(0, 13), (0, 5), (5, 9), (12, 13)]:
            np.testing.assert_array_equal(g.feature_columns(c0, c1), x[:, c0:c1])


def test_nonfinite_features_are_refused_on_the_raw_path(tmp_path, rng):
    from gnnprep.core.errors import GnnprepError

    path, *_ = make_store(tmp_path, rng, n=3000, m=9000, d=4)
    with h5py.File(path, "r+") as f:
        f["nodes/features"][2100, 2] = np.nan
    with GraphStore(path) as g, pytest.raises(GnnprepError, match="non-finite values in rows"):
        g.feature_columns(1, 3)


def test_auto_device_does_not_import_torch_without_a_gpu_driver(monkeypatch):
    from gnnprep.core import device

    if not sys.platform.startswith("linux"):
        pytest.skip("off Linux, auto always asks torch (the driver files are a Linux convention)")
    monkeypatch.setattr(device, "GPU_DRIVER_FILES", ("/nonexistent/nvidiactl",))
    assert device.resolve("auto") == "cpu"
    code = ("import sys; from gnnprep.core import device; device.GPU_DRIVER_FILES = ('/nonexistent',); "
            "print(device.resolve('auto'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["cpu", "False"]


def test_pruned_hop_entries_match_the_rows_the_last_hops_read(rng):
    """Hop K reads exactly the stored rows' entries; hop K-1's estimate (stored rows placed at
    random) is close to the exact count of the stored rows' and their neighbours' entries."""
    from gnnprep.precompute.plan import pruned_hop_entries

    n, m = 20000, 160000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    a = sp.csr_matrix((np.ones(2 * m), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    a.sum_duplicates()
    indptr, indices = a.indptr, a.indices
    deg = np.diff(indptr)
    stored = np.sort(rng.choice(20000, 400, replace=False))
    est = pruned_hop_entries(deg, stored, 3)
    mark = np.zeros(20000, dtype=bool)
    mark[stored] = True
    for v in stored:
        mark[indices[indptr[v]:indptr[v + 1]]] = True
    assert est[0] == len(indices) and est[2] == int(deg[stored].sum())
    assert est[1] == pytest.approx(int(deg[mark].sum()), rel=0.1)
    assert pruned_hop_entries(deg, stored, 1) == (int(deg[stored].sum()),)


def _planted_store(tmp_path, rng, order="community", name="planted.h5"):
    """A graph store of 6 planted groups (ids permuted) ingested with ``order``."""
    from fixtures import planted

    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    indptr, indices, _ = planted(rng, groups=6, size=30, cross=3)
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    np.save(tmp_path / "e.npy", np.stack([rows, indices]))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 6)).astype(np.float32))
    (tmp_path / "splits").mkdir(exist_ok=True)
    np.save(tmp_path / "splits" / "train.npy", np.arange(0, n, 5))
    rep = ingest(str(tmp_path / "e.npy"), tmp_path / name,
                 IngestConfig(order=order, source=SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"),
                                                                splits=str(tmp_path / "splits"))))
    return tmp_path / name, rep, indptr, indices


def test_ingest_keeps_the_order_and_precompute_uses_it_bitwise(tmp_path, rng, monkeypatch):
    """The order found at ingest is the community order of the stored CSR, kept in the store; a
    precompute loads it (nothing found again, nothing written beside the store) and its bytes equal
    the unordered computation's."""
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute

    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    path, rep, indptr, indices = _planted_store(tmp_path, rng)
    assert rep.order["kind"] == "community" and rep.order["near_share_after"] > rep.order["near_share_before"] + 0.2
    with GraphStore(path) as g:
        kept, info = kept_order.load_from_store(g, "community")
        np.testing.assert_array_equal(kept, node_order.community_order(g.indptr(), g.f["adj/indices"][:]))
        assert kept_order.stored_gain(g, "community") > 0.2
    cfg = dict(hops=3, device="cpu", rows="all", blocks=(1, 1, 2))
    plain = precompute(path, tmp_path / "plain.h5", PrecomputeConfig(reorder="none", **cfg))
    used = precompute(path, tmp_path / "used.h5", PrecomputeConfig(reorder="community", **cfg))
    assert plain.reorder is None
    assert used.reorder["used"] and used.reorder["cached"] and used.reorder["found_in"] == "store"
    assert not kept_order.cache_path(path, "community").exists()
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "used.h5") as b:
        for k in range(4):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


def test_no_order_is_kept_when_asked_or_when_the_graph_is_small(tmp_path, rng, monkeypatch):
    path, rep, *_ = _planted_store(tmp_path, rng)       # 180 nodes, under the 4096-id window
    assert rep.order is None
    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    path, rep, *_ = _planted_store(tmp_path, rng, order="none", name="none.h5")
    assert rep.order is None
    with GraphStore(path) as g:
        assert "order" not in g.f and kept_order.stored_gain(g, "community") is None


def test_a_damaged_stored_order_is_ignored(tmp_path, rng, monkeypatch):
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.run import precompute

    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    path, *_ = _planted_store(tmp_path, rng)
    ref = precompute(path, tmp_path / "ref.h5", PrecomputeConfig(hops=2, device="cpu", reorder="none"))
    with h5py.File(path, "r+") as f:
        f["order/community"][1] = f["order/community"][0]   # no longer a permutation
    with GraphStore(path) as g:
        assert kept_order.load_from_store(g, "community") is None
    rep = precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2, device="cpu", reorder="community"))
    assert rep.reorder["cached"] is False and ref.reorder is None   # found again
    with FeatureStore(tmp_path / "ref.h5") as a, FeatureStore(tmp_path / "f.h5") as b:
        for k in range(3):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


@pytest.mark.parametrize("fits", [True, False])
def test_the_ingest_order_follows_the_rows_as_they_are_written(tmp_path, rng, fits):
    """Sweep 1 runs bucket by bucket as rows are reported written, sweep 2 on the whole CSR (kept,
    or read again in row blocks when it does not fit): the order is the in-memory one."""
    n, m = 6000, 400_000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    a = sp.csr_matrix((np.ones(2 * m), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    a.sum_duplicates()
    room = 24 * n + (3 << 19) if not fits else 24 * n + (64 << 20)   # the indices are ~3 MiB
    with h5py.File(tmp_path / "g.h5", "w") as f:
        g = f.create_group("adj")
        finder = kept_order.IngestOrder(g, n, len(a.indices) + 1000, np.int32, memory_budget=int(room / 0.3) + 1)
        assert finder.active and finder.resident is fits
        g.create_dataset("indptr", data=np.zeros(n + 1, dtype=np.int64))
        g.create_dataset("indices", data=np.zeros(len(a.indices), dtype=np.int32), chunks=(4096,))
        for lo, hi in [(0, 1000), (1000, 1001), (1001, 4000), (4000, n)]:   # buckets, in row order
            g["indptr"][lo + 1:hi + 1] = a.indptr[lo + 1:hi + 1]
            g["indices"][a.indptr[lo]:a.indptr[hi]] = a.indices[a.indptr[lo]:a.indptr[hi]]
            finder.rows_ready(lo, hi)
        finder.csr_done()
        info = finder.finish(f)
        assert info["kind"] == "community" and "error" not in info and info["seconds"] >= 0
        np.testing.assert_array_equal(f["order/community"][:], node_order.community_order(a.indptr, a.indices))


def test_an_abandoned_order_search_stops(tmp_path):
    with h5py.File(tmp_path / "g.h5", "w") as f:
        finder = kept_order.IngestOrder(f.create_group("adj"), 10_000, 50_000, np.int32, memory_budget=1 << 30)
        finder.abandon()
        finder._thread.join(timeout=10)
        assert not finder._thread.is_alive()


def test_info_shows_the_stored_order(tmp_path, rng, monkeypatch):
    from fixtures import run, run_json

    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    path, rep, *_ = _planted_store(tmp_path, rng)
    d = run_json(["info", path])
    assert d["node_order"]["kind"] == "community"
    assert d["node_order"]["near_share_after"] == pytest.approx(rep.order["near_share_after"])
    assert "node order     community" in run(["info", path]).output
    plain, *_ = _planted_store(tmp_path, rng, order="none", name="none.h5")
    assert run_json(["info", plain])["node_order"] is None


@pytest.mark.parametrize("block", [1, 50, 10**9])
def test_streamed_relabel_equals_the_in_memory_one(rng, block):
    indptr, indices = _random_csr(rng, 400, 0.03)
    order = node_order.community_order(indptr, indices)
    want = node_order.permute_csr(indptr, indices, order)
    got = node_order.permute_csr_streamed(indptr, lambda p0, p1: indices[p0:p1], order, indices.dtype, block)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    assert got[1].dtype == indices.dtype


def test_a_known_order_relabels_without_loading_the_stored_ids(tmp_path, rng, monkeypatch):
    """With the order kept in the store the CSR is relabelled block by block from the store (no
    second copy of S); the output equals the unordered run's bytes, for rows all and labeled."""
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.features import FeatureStore
    from gnnprep.precompute.hop_graph import HopGraph
    from gnnprep.precompute.order_setup import OrderSetup
    from gnnprep.precompute.run import precompute

    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    path, *_ = _planted_store(tmp_path, rng)
    loads = []
    for cls in (HopGraph, OrderSetup):  # the two places that load the whole stored ids
        orig = cls._load_indices
        monkeypatch.setattr(cls, "_load_indices", lambda self, orig=orig: loads.append(1) or orig(self))
    for rows in ("all", "labeled"):
        cfg = dict(hops=3, device="cpu", rows=rows, blocks=(1, 1, 2))
        precompute(path, tmp_path / f"plain-{rows}.h5", PrecomputeConfig(reorder="none", **cfg))
        loads.clear()
        rep = precompute(path, tmp_path / f"used-{rows}.h5", PrecomputeConfig(reorder="community", **cfg))
        assert rep.reorder["used"] and rep.reorder["found_in"] == "store" and loads == []
        with FeatureStore(tmp_path / f"plain-{rows}.h5") as a, FeatureStore(tmp_path / f"used-{rows}.h5") as b:
            for k in range(4):
                assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), (rows, k)


def test_huge_page_buffers_are_plain_writable_arrays():
    from gnnprep.core.memory import HUGE_MIN_BYTES, empty_pages

    big = empty_pages((HUGE_MIN_BYTES // 4 // 8 + 1, 8))
    big[:] = 2.0
    assert big.dtype == np.float32 and big.flags["C_CONTIGUOUS"] and big.flags["WRITEABLE"]
    assert float(big[-1, -1]) == 2.0 and big.shape == (HUGE_MIN_BYTES // 32 + 1, 8)
    small = empty_pages((3, 2), np.float64)
    assert small.dtype == np.float64 and small.shape == (3, 2)
    # a lower bound puts a smaller array on the mapping too (a HAG's aggregation rows)
    low = empty_pages((1024, 8), huge_from=1)
    low[:] = 3.0
    assert low.flags["C_CONTIGUOUS"] and low.flags["WRITEABLE"] and float(low.sum()) == 3.0 * 1024 * 8
    if sys.platform.startswith("linux"):
        base = low
        while isinstance(base, (np.ndarray, memoryview)):
            base = base.base if isinstance(base, np.ndarray) else base.obj
        assert isinstance(base, mmap.mmap)


@pytest.mark.parametrize("size", [1, 3])
def test_rows_longer_than_the_gather_buffer_give_the_same_order(rng, monkeypatch, size):
    indptr, indices = _random_csr(rng, 150, 0.08)
    monkeypatch.setattr(node_order, "PROPAGATE_BUFFER", size)
    np.testing.assert_array_equal(node_order.community_order(indptr, indices), _reference_order(indptr, indices))


def test_ingest_summary_reports_the_order(tmp_path, rng, monkeypatch):
    from fixtures import run

    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    from fixtures import planted

    indptr, indices, _ = planted(rng, groups=6, size=30, cross=3)
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    np.save(tmp_path / "e.npy", np.stack([rows, indices]))
    res = run(["ingest", tmp_path / "e.npy", "--num-nodes", len(indptr) - 1, "-o", tmp_path / "g.h5"])
    assert res.exit_code == 0 and "node order: community" in res.output
    res = run(["ingest", tmp_path / "e.npy", "--num-nodes", len(indptr) - 1, "--order", "none", "-o", tmp_path / "n.h5"])
    assert res.exit_code == 0 and "node order" not in res.output
