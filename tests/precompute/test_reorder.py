"""Locality orders (community / bfs) and page-cache-free hop writes: same bytes, other order."""

import os

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import make_store, planted

from gnnprep.core.directio import ALIGN, STAGE_BYTES, RawWriter, contiguous_offset
from gnnprep.graph.store import GraphStore
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.hop_graph import HopGraph
from gnnprep.precompute.plan import Plan
from gnnprep.precompute.run import precompute
from gnnprep.sparse import order as node_order
from gnnprep.sparse.order import community_order, near_share, permute_csr


def test_community_order_makes_planted_groups_contiguous(rng):
    indptr, indices, group = planted(rng)
    order = community_order(indptr, indices)
    assert sorted(order) == list(range(len(group)))
    runs = 1 + int(np.count_nonzero(np.diff(group[order])))
    assert runs == 4  # each group is one contiguous run of the order
    # deterministic: the same graph gives the same order
    np.testing.assert_array_equal(order, community_order(indptr, indices))


def test_near_share_counts_entries_within_the_window(rng):
    indptr, indices, _ = planted(rng)
    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr))
    coo = a.tocoo()
    assert near_share(indptr, indices, 5, samples=10**6) == pytest.approx(
        np.mean(np.abs(coo.row - coo.col) <= 5), abs=0.02)
    order = community_order(indptr, indices)
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.arange(len(order))
    p_indptr, p_indices, _ = permute_csr(indptr, indices, order)
    # measured through inv on the stored ids = measured on the relabelled graph
    assert near_share(indptr, indices, 40, inv, samples=10**6) == pytest.approx(
        near_share(p_indptr, p_indices, 40, samples=10**6), abs=0.02)
    assert near_share(indptr, indices, 40, inv) > near_share(indptr, indices, 40) + 0.3


def _store_from_csr(tmp_path, indptr, indices, rng, d=5):
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    np.save(tmp_path / "e.npy", np.stack([rows, indices]))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, d)).astype(np.float32))
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    path = tmp_path / "planted.h5"
    ingest(str(tmp_path / "e.npy"), path,
           IngestConfig(source=SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"))))
    return path


@pytest.mark.parametrize("communities", [True, False])
def test_auto_order_is_dropped_when_it_does_not_bring_neighbours_closer(tmp_path, rng, monkeypatch, communities):
    if communities:
        indptr, indices, _ = planted(rng, groups=6, size=30, cross=3)
    else:  # a random graph: no grouping helps
        a = sp.random(180, 180, density=0.05, random_state=1)
        a = ((a + a.T) > 0).astype(np.float32).tocsr()
        a.setdiag(0)
        a.eliminate_zeros()
        a.sort_indices()
        indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int32)
    path = _store_from_csr(tmp_path, indptr, indices, rng)
    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 15)
    with GraphStore(path) as store:
        g = HopGraph(store, Plan(a=1, b=1, c=1, width=5, s_resident=True, device="cpu", budget=1 << 30,
                               predicted_peak=0, predicted_seconds=0.0, reorder=True), "community",
                   force=False, spare=(store.num_nodes, 5))
        g.ready()
        assert g.reorder_info["used"] is communities
        assert (g.order is not None) is communities
        assert g.spare((store.num_nodes, 5)).shape == (store.num_nodes, 5)


@pytest.mark.parametrize("rows", ["all", "labeled"])
@pytest.mark.parametrize("blocks", [(1, 1, 1), (1, 1, 3)])
@pytest.mark.parametrize("kind", ["community", "bfs"])
def test_ordered_computation_is_bitwise_the_stored_order_one(tmp_path, rng, rows, blocks, kind):
    """Each row is summed in its stored order whatever the node order, so the bytes are equal."""
    path, *_ = make_store(tmp_path, rng, n=120, m=600, d=7)
    base = dict(hops=3, device="cpu", rows=rows, blocks=blocks, operators=("sym", "rw"))
    precompute(path, tmp_path / "plain.h5", PrecomputeConfig(reorder="none", **base))
    rep = precompute(path, tmp_path / "ordered.h5", PrecomputeConfig(reorder=kind, **base))
    assert rep.plan["reorder"] is True
    with h5py.File(tmp_path / "ordered.h5") as f:
        import json

        assert json.loads(f.attrs["provenance"])["reorder"]["used"] is True
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "ordered.h5") as b:
        np.testing.assert_array_equal(a.rows, b.rows)
        for op in ("sym", "rw"):
            for k in range(4):
                np.testing.assert_array_equal(b.f[f"channels/{op}/{k}"][:], a.f[f"channels/{op}/{k}"][:])


@pytest.mark.parametrize("fault", [0, 3 * ALIGN, 1 << 40])   # none, part of a buffer, more than one
@pytest.mark.parametrize("direct", [True, False])
def test_raw_writer_writes_unaligned_ranges_exactly(tmp_path, rng, direct, fault):
    """Every range lands as staged, with the staging buffers faulted in first by the I/O thread or
    not (the first stage may meet that thread holding them: it waits for them)."""
    path = tmp_path / "raw.bin"
    size = 5 * ALIGN + 123
    path.write_bytes(b"\0" * size)
    want = np.zeros(size, dtype=np.uint8)
    w = RawWriter(path, fault_bytes=fault)
    assert w.fault_bytes == (0 if not fault else min(fault + ALIGN, STAGE_BYTES + ALIGN))
    if not direct and w.fd_direct is not None:
        os.close(w.fd_direct)
        w.fd_direct = None
    # head and tail inside one block, aligned, spanning blocks with both ragged ends, to the end
    for offset, nbytes in [(10, 50), (ALIGN, 2 * ALIGN), (ALIGN - 7, 2 * ALIGN + 20), (size - 300, 300), (0, 1)]:
        data = rng.integers(0, 256, nbytes, dtype=np.uint8)
        w.stage(offset, nbytes)[:] = data
        w.write_staged(offset, nbytes)
        w.drain()  # ranges above overlap; the file must hold them in order
        want[offset:offset + nbytes] = data
    w.close()
    np.testing.assert_array_equal(np.frombuffer(path.read_bytes(), dtype=np.uint8), want)
    if not direct:
        assert w.direct_bytes == 0


def test_raw_writer_takes_back_a_stage_that_is_not_written(tmp_path):
    """A staged range whose rows fail a check is given back: both buffers stay usable."""
    path = tmp_path / "raw.bin"
    path.write_bytes(b"\0" * (4 * ALIGN))
    w = RawWriter(path)
    for _ in range(3):  # more than the two buffers: none is lost
        w.stage(0, ALIGN)
        w.unstage()
    w.stage(ALIGN, ALIGN)[:] = 7
    w.write_staged(ALIGN, ALIGN)
    w.close()
    assert np.frombuffer(path.read_bytes(), dtype=np.uint8)[ALIGN:2 * ALIGN].tolist() == [7] * ALIGN


def test_hop_rows_land_in_the_hdf5_datasets(tmp_path, rng):
    """The artifact's contiguous hop datasets are 4 KiB aligned and written around HDF5."""
    path, *_ = make_store(tmp_path, rng, n=300, m=1500, d=16)
    precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2, device="cpu", blocks=(1, 1, 1)))
    with h5py.File(tmp_path / "f.h5") as f:
        for k in range(3):
            off = contiguous_offset(f[f"hops/{k}"])
            assert off is not None and off % ALIGN == 0
        with GraphStore(path) as store:
            np.testing.assert_array_equal(f["hops/0"][:], store.features[:])


@pytest.mark.parametrize("blocks,reorder,dtype", [((1, 1, 2), "none", "float32"), ((1, 1, 2), "community", "float32"),
                                                   ((1, 1, 3), "community", "float32"), ((1, 1, 2), "none", "float16")])
def test_column_blocks_write_whole_chunks_around_hdf5(tmp_path, rng, monkeypatch, blocks, reorder, dtype):
    """With several column blocks the hops are chunked one block wide; a write's whole chunks go to
    the file raw (O_DIRECT where it may), the rows of chunks it covers in part through h5py, and
    every hop's bytes equal the one-block run's (which writes contiguous rows)."""
    from gnnprep.precompute import features as fa
    from gnnprep.precompute import hop_writer

    monkeypatch.setattr(fa, "feature_chunk_rows", lambda width, itemsize: 32)  # 300 rows: 9 whole chunks + an edge
    raw = []
    original = hop_writer.HopWriter._direct_chunks

    def spy(self, *item):
        took = original(self, *item)
        raw.append(took)
        return took

    monkeypatch.setattr(hop_writer.HopWriter, "_direct_chunks", spy)
    path, *_ = make_store(tmp_path, rng, n=300, m=1500, d=16)
    one = precompute(path, tmp_path / "one.h5", PrecomputeConfig(hops=3, device="cpu", blocks=(1, 1, 1),
                                                                  reorder=reorder, dtype=dtype))
    assert one.plan["c"] == 1 and not raw
    got = precompute(path, tmp_path / "cols.h5", PrecomputeConfig(hops=3, device="cpu", blocks=blocks,
                                                                   reorder=reorder, dtype=dtype))
    assert got.plan["c"] == blocks[2] and any(raw)
    if blocks[2] == 3:  # widths 6, 6, 4: the narrower last block is not one chunk wide (h5py only)
        assert not all(raw)
    with FeatureStore(tmp_path / "one.h5") as a, FeatureStore(tmp_path / "cols.h5") as b:
        for k in range(4):
            assert b.hop(k).chunks is not None or k == 0
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


@pytest.mark.parametrize("reorder", ["none", "community"])
def test_column_block_chunks_written_raw_resume_bitwise(tmp_path, rng, monkeypatch, reorder):
    """A run with raw-written chunks, stopped after its first finished unit, resumes into the bytes
    of a run never stopped."""
    from fixtures import interrupted_precompute

    from gnnprep.precompute import features as fa

    monkeypatch.setattr(fa, "feature_chunk_rows", lambda width, itemsize: 32)
    path, *_ = make_store(tmp_path, rng, n=300, m=1500, d=16)
    config = dict(hops=3, device="cpu", blocks=(1, 1, 2), reorder=reorder)
    out = tmp_path / "f.h5"
    interrupted_precompute(monkeypatch, path, out, **config)
    report = precompute(path, out, PrecomputeConfig(**config))
    assert report.resumed_units >= 1
    precompute(path, tmp_path / "fresh.h5", PrecomputeConfig(**config))
    with FeatureStore(out) as a, FeatureStore(tmp_path / "fresh.h5") as b:
        for k in range(4):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


@pytest.mark.parametrize("row", [3, 40, 299])   # in whole chunks written raw, and in the edge chunk (h5py)
def test_column_block_chunks_name_an_overflow_and_leave_no_output(tmp_path, rng, monkeypatch, row):
    from fixtures import run

    from gnnprep.precompute import features as fa

    monkeypatch.setattr(fa, "feature_chunk_rows", lambda width, itemsize: 32)
    path, *_ = make_store(tmp_path, rng, n=300, m=1500, d=16)
    with h5py.File(path, "r+") as f:
        f["nodes/features"][row, 11] = 1e6   # beyond float16
    res = run(["precompute", path, "--hops", "1", "--blocks", "1,1,2", "--dtype", "float16", "--reorder", "none",
               "--device", "cpu", "-o", tmp_path / "f.h5"])
    assert res.exit_code == 1, res.output
    assert f"hop 0: row {row}, column 11 is inf in float16 (the value overflowed" in res.output
    assert not list(tmp_path.glob("f.h5*"))


def test_cli_reports_the_node_order(tmp_path, rng):
    from fixtures import run, run_json

    path, *_ = make_store(tmp_path, rng, n=120, m=600, d=7)
    # the order runs on the CPU kernel: pinned, so a machine with a GPU (device auto) tests the same
    res = run(["precompute", path, "--hops", "2", "--reorder", "community", "--device", "cpu", "-o", tmp_path / "a.h5"])
    assert res.exit_code == 0 and "node order: community used" in res.output
    rep = run_json(["precompute", path, "--hops", "2", "--reorder", "none", "-o", tmp_path / "b.h5"])
    assert rep["reorder"] is None and rep["plan"]["reorder"] is False
    assert run_json(["info", tmp_path / "a.h5"])["node_order"]["used"] is True
    assert "node order community, used" in run(["info", tmp_path / "a.h5"]).output


def test_an_order_is_found_once_and_reused_bitwise(tmp_path, rng):
    """The first ordered run keeps the order beside the store; later runs (other hops, operators)
    load it instead of finding it, and every output equals the unordered computation's bytes."""
    from gnnprep.graph import order as kept_order

    path, *_ = make_store(tmp_path, rng, n=120, m=600, d=7)
    cache = kept_order.cache_path(path, "community")
    plain = precompute(path, tmp_path / "plain.h5", PrecomputeConfig(hops=3, device="cpu", reorder="none"))
    assert plain.reorder is None and not cache.exists()
    first = precompute(path, tmp_path / "first.h5", PrecomputeConfig(hops=3, device="cpu", reorder="community"))
    assert first.reorder["cached"] is False and cache.exists()
    again = precompute(path, tmp_path / "again.h5", PrecomputeConfig(hops=3, device="cpu", reorder="community"))
    assert again.reorder["cached"] is True and again.reorder["used"] is True
    assert {k: again.reorder[k] for k in ("near_share_before", "near_share_after")} == \
        {k: first.reorder[k] for k in ("near_share_before", "near_share_after")}
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "first.h5") as b, \
            FeatureStore(tmp_path / "again.h5") as c:
        for k in range(4):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes() == c.hop(k)[:].tobytes(), k


@pytest.mark.parametrize("damage", ["not_a_permutation", "out_of_range", "other_graph", "garbage"])
def test_a_bad_cached_order_is_ignored_and_replaced(tmp_path, rng, damage):
    import json

    from gnnprep.graph import order as kept_order

    path, *_ = make_store(tmp_path, rng, n=120, m=600, d=7)
    cache = kept_order.cache_path(path, "community")
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(hops=2, device="cpu", reorder="community"))
    with np.load(cache) as z:
        order, meta = z["order"].copy(), json.loads(str(z["meta"]))
    if damage == "not_a_permutation":
        order[1] = order[0]
    elif damage == "out_of_range":
        order[3] = 10**6
    elif damage == "other_graph":
        meta["graph_fingerprint"] = "another"
    if damage == "garbage":
        cache.write_bytes(b"\x00junk" * 40)
    else:
        with open(cache, "wb") as fh:
            np.savez(fh, order=order, meta=np.array(json.dumps(meta)))
    rep = precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2, device="cpu", reorder="community"))
    assert rep.reorder["cached"] is False  # found again, and kept again
    with GraphStore(path) as store:
        assert kept_order.load_cached(path, "community", store.fingerprint, store.num_nodes) is not None
    with FeatureStore(tmp_path / "ref.h5") as a, FeatureStore(tmp_path / "f.h5") as b:
        for k in range(3):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


@pytest.mark.parametrize("blocks", [(1, 1, 1), (1, 1, 3)])
@pytest.mark.parametrize("reorder", ["none", "community"])
def test_labeled_rows_are_bitwise_the_all_rows_output(tmp_path, rng, blocks, reorder):
    """--rows labeled computes only the stored rows in its last hop (same per-row arithmetic):
    its bytes equal --rows all restricted to those rows."""
    path, *_ = make_store(tmp_path, rng, n=120, m=600, d=7)
    base = dict(hops=3, device="cpu", blocks=blocks, operators=("sym", "rw"), reorder=reorder)
    precompute(path, tmp_path / "all.h5", PrecomputeConfig(rows="all", **base))
    precompute(path, tmp_path / "lab.h5", PrecomputeConfig(rows="labeled", **base))
    with FeatureStore(tmp_path / "all.h5") as a, FeatureStore(tmp_path / "lab.h5") as b:
        rows = b.rows
        for op in ("sym", "rw"):
            for k in range(4):
                assert a.f[f"channels/{op}/{k}"][:][rows].tobytes() == b.f[f"channels/{op}/{k}"][:].tobytes(), (op, k)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_selected_rows_kernel_is_bitwise_the_row_block_kernel(rng, weighted, dtype):
    from gnnprep.sparse import reference

    n, d = 300, 9
    a = sp.random(n, n, density=0.05, random_state=3, format="csr")
    a.sort_indices()
    ip, idx = a.indptr.astype(np.int64), a.indices.astype(dtype)
    w = rng.random(len(idx)).astype(np.float32) if weighted else None
    x = rng.standard_normal((n, d)).astype(np.float32)
    left, right = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    full = np.empty_like(x)
    reference.reference_spmm_rows(ip, idx, w, 0, left, right, 1.0, x, full)
    rows = np.sort(rng.choice(n, 57, replace=False))
    out = np.empty((len(rows), d), dtype=np.float32)
    reference.reference_spmm_selected(ip, idx, w, rows, left, right, 1.0, x, out)
    assert out.tobytes() == full[rows].tobytes()


def test_few_labeled_rows_prune_the_last_two_hops_bitwise(tmp_path, rng):
    """With a handful of stored rows in a sparse graph, hop K-1 computes only the stored rows and
    their in-neighbours and hop K only the stored rows: bytes equal --rows all on those rows."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions
    from gnnprep.precompute.hop_loop import HopRun

    n, d = 400, 5
    src, dst = rng.integers(0, n, 500), rng.integers(0, n, 500)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, d)).astype(np.float32))
    (tmp_path / "splits").mkdir()
    np.save(tmp_path / "splits" / "train.npy", np.array([3, 50, 77, 200, 311]))
    np.save(tmp_path / "splits" / "valid.npy", np.array([9, 120]))
    g = tmp_path / "g.h5"
    ingest(str(tmp_path / "e.npy"), g, IngestConfig(source=SourceOptions(
        num_nodes=n, features=str(tmp_path / "x.npy"), splits=str(tmp_path / "splits"))))
    seen = []
    original = HopRun._last_hop_inputs

    def spy(self):
        rows = original(self)
        seen.append(len(rows))
        return rows

    HopRun._last_hop_inputs = spy
    try:
        for kind in ("none", "community"):
            base = dict(hops=3, device="cpu", reorder=kind)
            precompute(g, tmp_path / f"all-{kind}.h5", PrecomputeConfig(rows="all", **base))
            precompute(g, tmp_path / f"lab-{kind}.h5", PrecomputeConfig(rows="labeled", **base))
            with FeatureStore(tmp_path / f"all-{kind}.h5") as a, FeatureStore(tmp_path / f"lab-{kind}.h5") as b:
                for k in range(4):
                    assert a.hop(k)[:][b.rows].tobytes() == b.hop(k)[:].tobytes(), (kind, k)
    finally:
        HopRun._last_hop_inputs = original
    assert seen and 7 <= min(seen) < n // 4  # hop K-1 really was a small part of the graph
