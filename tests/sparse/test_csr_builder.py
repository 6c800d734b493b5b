import h5py
import numpy as np
import pytest
from fixtures import random_edges, reference_csr

from gnnprep.sparse.csr_builder import CSRBuilder


def build(tmp_path, src, dst, n, budget, symmetric, expected=None, chunk=None):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    b = CSRBuilder(n, work, budget, symmetric, expected)
    step = chunk or len(src)
    for s in range(0, len(src), step):
        b.add(src[s:s + step], dst[s:s + step])
    with h5py.File(tmp_path / "g.h5", "w") as f:
        stats = b.write(f.create_group("adj"))
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:]
    assert not any(work.iterdir()), "spill files must be removed"
    return indptr, indices, stats


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("budget", [10_000, 200_000, 50_000_000])
def test_matches_scipy_reference(tmp_path, rng, symmetric, budget):
    n, m = 700, 6000
    src, dst = random_edges(rng, n, m)
    indptr, indices, stats = build(tmp_path, src, dst, n, budget, symmetric, expected=m, chunk=997)
    ref = reference_csr(src, dst, n, symmetric)
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)
    assert stats["stored_entries"] == ref.nnz
    assert stats["self_loops_dropped"] >= 5
    assert indices.dtype == np.int32


def test_skewed_hub_and_unknown_edge_count_split_buckets(tmp_path, rng):
    # one hub receives most edges and the edge count is not announced: buckets overflow and are
    # split again; the result must not change
    n = 2000
    src = rng.integers(0, n, 40_000)
    dst = np.where(rng.random(40_000) < 0.7, 5, rng.integers(0, n, 40_000))
    indptr, indices, _ = build(tmp_path, src, dst, n, 20_000, True, expected=None, chunk=3000)
    ref = reference_csr(src, dst, n, True)
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)


def test_empty_and_isolated_only(tmp_path):
    indptr, indices, stats = build(tmp_path, np.array([3]), np.array([3]), 5, 1 << 20, True)
    np.testing.assert_array_equal(indptr, np.zeros(6))
    assert len(indices) == 0 and stats["self_loops_dropped"] == 1


def test_fingerprint_is_order_independent(tmp_path, rng):
    n, m = 300, 2000
    src, dst = random_edges(rng, n, m)
    perm = rng.permutation(len(src))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, _, a = build(tmp_path / "a", src, dst, n, 1 << 20, True)
    _, _, b = build(tmp_path / "b", src[perm], dst[perm], n, 30_000, True)
    assert a["fingerprint"] == b["fingerprint"]


def _spills_and_csr(tmp_path, src, dst, n, budget, symmetric, expected, chunk, kernels):
    """Spill files (bytes, by name) after adding, then the CSR and stats after writing."""
    from gnnprep.sparse.csr_builder import CSRBuilder as B

    work = tmp_path / "work"
    work.mkdir()
    b = B(n, work, budget, symmetric, expected, kernels=kernels)
    for s in range(0, len(src), chunk):
        b.add(src[s:s + chunk], dst[s:s + chunk])
    b.close_spills()
    spills = {p.name: p.read_bytes() for p in sorted(work.iterdir())}
    with h5py.File(tmp_path / "g.h5", "w") as f:
        stats = b.write(f.create_group("adj"))
        return spills, f["adj/indptr"][:], f["adj/indices"][:], stats


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("budget,expected", [(10_000, 6000), (200_000, 6000), (20_000, None), (1 << 30, 6000)])
def test_compiled_kernels_match_numpy_byte_for_byte(tmp_path, rng, symmetric, budget, expected):
    """The fused kernels write the same keys in the same order to the same spill files, and the
    same CSR and stats (fingerprint included), as the numpy steps; overflowing buckets included."""
    n = 700
    src, dst = random_edges(rng, n, 6000)
    dst[:3000:7] = 5  # a hub, so buckets overflow and are split when the edge count is unknown
    (tmp_path / "np").mkdir()
    (tmp_path / "nb").mkdir()
    a = _spills_and_csr(tmp_path / "np", src, dst, n, budget, symmetric, expected, 997, False)
    b = _spills_and_csr(tmp_path / "nb", src, dst, n, budget, symmetric, expected, 997, True)
    assert a[0] == b[0] and len(a[0]) >= 1
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])
    assert a[3] == b[3]
    ref = reference_csr(src, dst, n, symmetric)
    np.testing.assert_array_equal(b[1], ref.indptr)
    np.testing.assert_array_equal(b[2], ref.indices)


def test_kernels_chosen_by_size_mix_with_numpy(tmp_path, rng, monkeypatch):
    """With a large budget, chunks and buckets above the size threshold take the kernels and the
    rest numpy, in one build: the result is the reference either way."""
    from gnnprep.sparse import csr_builder

    monkeypatch.setattr(csr_builder, "KERNEL_MIN_ITEMS", 1500)
    n = 3000
    src, dst = random_edges(rng, n, 20_000)
    sizes = [2000, 500, 3000, 100]  # chunks above and below the threshold, alternating
    work = tmp_path / "work"
    work.mkdir()
    b = CSRBuilder(n, work, 1 << 30, True, None)
    assert b.kernels is None
    s = 0
    while s < len(src):
        for k in sizes:
            b.add(src[s:s + k], dst[s:s + k])
            s += k
    with h5py.File(tmp_path / "g.h5", "w") as f:
        b.write(f.create_group("adj"))
        ref = reference_csr(src, dst, n, True)
        np.testing.assert_array_equal(f["adj/indptr"][:], ref.indptr)
        np.testing.assert_array_equal(f["adj/indices"][:], ref.indices)
    assert CSRBuilder(n, work, 64 << 20, True).kernels is False  # small budgets: numpy only


def test_close_spills_after_an_error_leaves_no_writer(tmp_path, rng):
    import threading

    n = 500
    src, dst = random_edges(rng, n, 5000)
    work = tmp_path / "work"
    work.mkdir()
    b = CSRBuilder(n, work, 1 << 20, True, 5000, kernels=True)
    b.add(src, dst)
    b.close_spills(check=False)
    assert not [t for t in threading.enumerate() if t.name.startswith("csr-spill")]
    assert not b._files


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,lo,rows", [(700, 0, 700), (700, 300, 11), (3_037_000_499, 3_037_000_399, 100),
                                       (2**31 + 11, 5, 40), (60_000, 1_000, 9_001), (5_000, 0, 4_096),
                                       (3_037_000_499, 3_037_000_499 - 4_097, 4_097)])
def test_sort_keys_equals_numpy_sort(rng, threads, n, lo, rows):
    """The counting sort by row gives numpy's sorted keys: power-law rows (a hub, empty rows,
    duplicates, rows longer and shorter than the insertion limit), ids near the largest node count
    the int64 keys allow (where the float quotient needs its correction), rows in one bucket each
    and more rows than RADIX_BUCKETS (buckets of several rows, the last one partial), 1 and 2 threads."""
    from gnnprep.sparse import csr_kernels

    m = 20 * rows
    weights = rng.pareto(1.5, rows) + 1
    weights[rows // 3] = 0                      # an empty row
    row = lo + rng.choice(rows, m, p=weights / weights.sum())
    row[: m // 10] = lo + rows // 2             # a hub far beyond the insertion limit
    col = np.concatenate([rng.integers(0, n, m - 50), np.full(50, n - 1)])   # duplicates, the last column
    keys = (row.astype(np.int64) * n + col).astype(np.int64)
    keys[-5:] = keys[:5]
    out = np.full_like(keys, -1)
    want = np.sort(keys)
    csr_kernels.sort_keys(keys, lo, rows, n, out, threads)   # (keys: its scratch)
    np.testing.assert_array_equal(out, want)
    empty = np.empty(0, dtype=np.int64)
    csr_kernels.sort_keys(empty, lo, rows, n, empty, threads)


def _assert_reference_csr(b, tmp_path, src, dst, n, work):
    """What builder ``b`` writes is the symmetric reference CSR, and its spill folder is left empty."""
    with h5py.File(tmp_path / "g.h5", "w") as f:
        b.write(f.create_group("adj"))
        ref = reference_csr(src, dst, n, True)
        np.testing.assert_array_equal(f["adj/indptr"][:], ref.indptr)
        np.testing.assert_array_equal(f["adj/indices"][:], ref.indices)
    assert not any(work.iterdir())


@pytest.mark.parametrize("kernels", [False, True])
@pytest.mark.parametrize("announced", ["exact", "fewer"])
def test_one_bucket_is_held_in_memory_until_the_edges_outnumber_it(tmp_path, rng, kernels, announced):
    """A graph whose announced edges fit one bucket keeps its keys in memory (no spill file); when
    more edges arrive than announced, the keys held so far go to the spill file and the rest follow.
    The CSR is the reference either way."""
    n = 700
    src, dst = random_edges(rng, n, 6000)
    m = len(src) if announced == "exact" else len(src) // 2
    work = tmp_path / "work"
    work.mkdir()
    b = CSRBuilder(n, work, 1 << 30, True, m, kernels=kernels)
    for s in range(0, len(src), 997):
        b.add(src[s:s + 997], dst[s:s + 997])
    b.close_spills()
    assert (not any(work.iterdir())) == (announced == "exact")
    _assert_reference_csr(b, tmp_path, src, dst, n, work)


@pytest.mark.parametrize("symmetric", [True, False])
def test_counting_first_places_keys_by_row_and_gives_the_same_csr(tmp_path, rng, symmetric, monkeypatch):
    """With a first pass of count() over the edges, add() places each key by row as it comes and the
    bucket is sorted row by row in place: the same CSR and stats (fingerprint included) as the
    held bucket sorted by the counting sort, and as the reference; hub, self-loops, duplicates."""
    from gnnprep.sparse import csr_builder

    monkeypatch.setattr(csr_builder, "KERNEL_MIN_ITEMS", 1000)
    n = 700
    src, dst = random_edges(rng, n, 6000)
    dst[:3000:7] = 5
    runs = []
    for counted in (False, True):
        work = tmp_path / f"w{counted}"
        work.mkdir()
        b = CSRBuilder(n, work, 1 << 30, symmetric, len(src))
        assert b.counts_first
        if counted:
            for s in range(0, len(src), 997):
                b.count(src[s:s + 997], dst[s:s + 997])
        for s in range(0, len(src), 997):
            b.add(src[s:s + 997], dst[s:s + 997])
        with h5py.File(tmp_path / f"g{counted}.h5", "w") as f:
            stats = b.write(f.create_group("adj"))
            runs.append((f["adj/indptr"][:], f["adj/indices"][:], stats))
        assert not any(work.iterdir())
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]
    ref = reference_csr(src, dst, n, symmetric)
    np.testing.assert_array_equal(runs[1][0], ref.indptr)
    np.testing.assert_array_equal(runs[1][1], ref.indices)


@pytest.mark.parametrize("change", ["more", "fewer"])
def test_edges_that_change_between_the_count_and_the_adding_are_one_error(tmp_path, rng, change, monkeypatch):
    from gnnprep.core.errors import GnnprepError
    from gnnprep.sparse import csr_builder

    monkeypatch.setattr(csr_builder, "KERNEL_MIN_ITEMS", 1000)
    n = 700
    src, dst = random_edges(rng, n, 6000)
    b = CSRBuilder(n, tmp_path, 1 << 30, True, len(src))
    b.count(src[:-100], dst[:-100]) if change == "more" else b.count(src, dst)
    with pytest.raises(GnnprepError, match="the edges changed between ingest's two reads"):
        b.add(src, dst) if change == "more" else b.add(src[:-100], dst[:-100])
        with h5py.File(tmp_path / "g.h5", "w") as f:
            b.write(f.create_group("adj"))


@pytest.mark.parametrize("kernels", [False, True])
def test_buckets_stay_small_whatever_the_budget(tmp_path, rng, kernels, monkeypatch):
    """A budget that could hold every key in one bucket still cuts buckets of at most
    MAX_BUCKET_ENTRIES keys (spilled and sorted one at a time): the same CSR as the reference."""
    from gnnprep.sparse import csr_builder

    monkeypatch.setattr(csr_builder, "MAX_BUCKET_ENTRIES", 2000)
    n = 700
    src, dst = random_edges(rng, n, 6000)
    work = tmp_path / "work"
    work.mkdir()
    b = CSRBuilder(n, work, 1 << 30, True, len(src), kernels=kernels)
    assert b.bucket_entries == 2000 and b.num_buckets >= 2 * len(src) // 2000 and not b.counts_first
    for s in range(0, len(src), 997):
        b.add(src[s:s + 997], dst[s:s + 997])
    b.close_spills()
    _assert_reference_csr(b, tmp_path, src, dst, n, work)


def test_incoming_chunks_stay_small_whatever_the_budget():
    from gnnprep.sparse import csr_builder

    assert csr_builder.incoming_chunk_edges(1 << 40) == csr_builder.MAX_CHUNK_EDGES
    assert csr_builder.incoming_chunk_edges(64 << 20) == int((64 << 20) * 0.3) // csr_builder.BYTES_PER_INCOMING_EDGE
