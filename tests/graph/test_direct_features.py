"""Features written straight to their chunks (issue 34, ingest's node-data copy): a 2-D node dataset
has its chunks allocated when created, and blocks of whole chunk rows go to those byte ranges past
the page cache (:class:`gnnprep.core.directio.ChunkRows`); other blocks through HDF5. What is read
back is the source's features exactly, whatever the width, the row count, the block sizes and
their mix, and the content fingerprint is the one the bytes give."""

import h5py
import numpy as np
import pytest

from gnnprep.core import directio
from gnnprep.core.directio import ChunkRows, early_chunks
from gnnprep.graph import from_arrays
from gnnprep.graph.sources.arrays import ArraySource
from gnnprep.graph.store import GraphStore, feature_chunk_shape


def _edges(rng, n, m=3000):
    return np.stack([rng.integers(0, n, m), rng.integers(0, n, m)])


def _spy(monkeypatch):
    """Rows that went through ChunkRows.write, per call."""
    seen = []
    real = ChunkRows.write

    def write(self, row0, block):
        seen.append((row0, len(block)))
        return real(self, row0, block)
    monkeypatch.setattr(ChunkRows, "write", write)
    return seen


@pytest.mark.parametrize("d, n, budget", [(16, 40_000, 16 << 20), (7, 80_000, 16 << 20), (70, 40_001, 128 << 20),
                                          (128, 40_000, 128 << 20)])
def test_whole_chunk_rows_go_direct_and_read_back_exactly(tmp_path, rng, monkeypatch, d, n, budget):
    x = rng.standard_normal((n, d)).astype(np.float32)
    seen = _spy(monkeypatch)
    from_arrays(_edges(rng, n), x=x, output=tmp_path / "g.h5", memory_budget=budget)
    with GraphStore(tmp_path / "g.h5") as g:
        np.testing.assert_array_equal(g.features[()], x)
        fingerprint = g.f.attrs["features_fingerprint"]
    assert sum(rows for _, rows in seen) == n and len(seen) >= 1
    # the same store through HDF5 alone: same bytes, same fingerprint
    monkeypatch.setattr(ChunkRows, "open", classmethod(lambda cls, ds: None))
    from_arrays(_edges(rng, n), x=x, output=tmp_path / "h.h5", memory_budget=budget)
    with GraphStore(tmp_path / "h.h5") as h:
        assert h.f.attrs["features_fingerprint"] == fingerprint
        np.testing.assert_array_equal(h.features[()], x)


def test_blocks_smaller_than_a_chunk_row_go_through_hdf5(tmp_path, rng, monkeypatch):
    n, d = 30_000, 16
    x = rng.standard_normal((n, d)).astype(np.float32)
    seen = _spy(monkeypatch)
    from_arrays(_edges(rng, n), x=x, output=tmp_path / "g.h5", memory_budget=4 << 20)  # 4096-row blocks
    assert seen == []
    with GraphStore(tmp_path / "g.h5") as g:
        np.testing.assert_array_equal(g.features[()], x)


def test_a_mix_of_aligned_and_unaligned_blocks(tmp_path, rng, monkeypatch):
    """Direct, then HDF5 into chunks the direct writes border, then direct again: every row as given."""
    n, d = 90_000, 20
    R = feature_chunk_shape(d, 4)[0]
    cuts = [0, R, R + 1000, 2 * R, 3 * R, 3 * R + 5, 4 * R, n]   # direct, hdf5 x2, direct, hdf5 x2, direct
    x = rng.standard_normal((n, d)).astype(np.float32)

    def features(self, chunk_rows):
        for a, b in zip(cuts[:-1], cuts[1:]):
            yield x[a:b]
    monkeypatch.setattr(ArraySource, "features", features)
    seen = _spy(monkeypatch)
    from_arrays(_edges(rng, n), x=x, output=tmp_path / "g.h5", memory_budget=64 << 20)
    assert seen == [(0, R), (2 * R, R), (4 * R, n - 4 * R)]
    with GraphStore(tmp_path / "g.h5") as g:
        np.testing.assert_array_equal(g.features[()], x)


def test_open_says_none_where_chunks_have_no_fixed_place(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        contiguous = f.create_dataset("a", shape=(100, 8), dtype="f4")
        compressed = f.create_dataset("b", shape=(100, 8), dtype="f4", chunks=(10, 8), compression="gzip")
        late = f.create_dataset("c", shape=(100, 8), dtype="f4", chunks=(10, 8))  # allocated as written
        one_d = f.create_dataset("d", shape=(100,), dtype="f4", chunks=(10,), dcpl=early_chunks())
        early = f.create_dataset("e", shape=(100, 8), dtype="f4", chunks=(10, 8), dcpl=early_chunks())
        assert [ChunkRows.open(ds) for ds in (contiguous, compressed, late, one_d)] == [None] * 4
        w = ChunkRows.open(early)
        assert w is not None
        assert w.fits(0, 10) and w.fits(90, 10) and w.fits(30, 70) and not w.fits(5, 10) and not w.fits(0, 15)
        with pytest.raises(ValueError, match="not whole chunk rows"):
            w.write(5, np.zeros((10, 8), np.float32))
        w.write(0, np.ones((100, 8), np.float32))
        w.drain()
        w.close()
        np.testing.assert_array_equal(early[()], np.ones((100, 8), np.float32))


def test_a_write_error_surfaces(tmp_path, monkeypatch):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        ds = f.create_dataset("e", shape=(100, 8), dtype="f4", chunks=(10, 8), dcpl=early_chunks())
        w = ChunkRows.open(ds)

        def fail(self, stage, offset, nbytes):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(directio.RawWriter, "_write", fail)
        w.write(0, np.ones((100, 8), np.float32))
        with pytest.raises(OSError, match="No space"):
            w.drain()
        w.close()
