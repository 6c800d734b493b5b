"""X in column tiles (issue 24, build item 3): ingest writes ``/nodes/features`` in chunks of 16
columns, so precompute's column block of X reads about its own bytes instead of all of X. The
values read are the same for any block, aligned or not, on tiled and on row-chunked (older) stores."""

import h5py
import numpy as np
import pytest
from fixtures import make_store

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.store import FEATURE_TILE_COLUMNS, GraphStore, feature_chunk_shape


@pytest.mark.parametrize("d", [7, 32, 70, 128])
def test_ingest_writes_column_tiles(tmp_path, rng, d):
    path, *_ = make_store(tmp_path, rng, n=300, d=d)
    with h5py.File(path, "r") as f:
        chunks = f["nodes/features"].chunks
    assert chunks == (min(300, feature_chunk_shape(d, 4)[0]), min(d, FEATURE_TILE_COLUMNS))


def _rechunk(path, out, chunks):
    """A copy of the store whose features have other chunks (an older store's row chunks)."""
    import shutil

    shutil.copy(path, out)
    with h5py.File(out, "a") as f:
        x = f["nodes/features"][()]
        del f["nodes/features"]
        f.create_dataset("nodes/features", data=x, chunks=chunks)
    return out


@pytest.mark.parametrize("block", [(0, 70), (0, 32), (5, 37), (31, 33), (64, 70), (40, 41)])
def test_any_column_block_reads_the_same_values_from_any_layout(tmp_path, rng, block):
    path, *_ = make_store(tmp_path, rng, n=5000, d=70)
    c0, c1 = block
    with GraphStore(path) as g:
        want = g.f["nodes/features"][()][:, c0:c1]
        tiled = g.feature_columns(c0, c1)
    rows = _rechunk(path, tmp_path / "rows.h5", (512, 70))
    odd = _rechunk(path, tmp_path / "odd.h5", (777, 9))
    for p in (rows, odd):
        with GraphStore(p) as g:
            np.testing.assert_array_equal(g.feature_columns(c0, c1), want)
    np.testing.assert_array_equal(tiled, want)


class _Counting:
    """A features dataset whose raw chunk reads are counted (bytes)."""

    def __init__(self, ds, read):
        self._ds, self.read = ds, read
        outer = self

        class _Id:
            def read_direct_chunk(self, offsets, out=None):
                mask, data = ds.id.read_direct_chunk(offsets, out=out)
                outer.read.append(len(data))
                return mask, data

        self.id = _Id()

    def __getattr__(self, name):
        return getattr(self._ds, name)

    def __getitem__(self, key):
        return self._ds[key]


def test_a_column_block_reads_only_its_tiles(tmp_path, rng, monkeypatch):
    n = 5 * feature_chunk_shape(128, 4)[0]    # whole chunks (a last partial chunk is stored whole)
    path, *_ = make_store(tmp_path, rng, n=n, d=128)
    read = []
    with GraphStore(path) as g:
        ds = g.features
        monkeypatch.setattr(GraphStore, "features", property(lambda self: _Counting(ds, read)))
        got = g.feature_columns(32, 64)
        np.testing.assert_array_equal(got, ds[()][:, 32:64])
    assert sum(read) == n * 128 * 4 // 4      # a quarter of the columns: a quarter of X, read once


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("col", [0, 17, 47, 69])
def test_a_non_finite_value_is_found_in_its_column_block_only(tmp_path, rng, bad, col):
    """The tile assembly's check (folded into the copy) finds a NaN or ±inf in any column of the
    block read, in the row block that holds it, and nothing in the blocks without it."""
    path, *_ = make_store(tmp_path, rng, n=5000, d=70)
    row = 4321    # in the last, partial row block of 16-column tiles at d = 70
    with h5py.File(path, "r+") as f:
        f["nodes/features"][row, col] = bad
        step = f["nodes/features"].chunks[0]
    lo = row - row % step
    with GraphStore(path) as g:
        for c0, c1 in [(0, 70), (col - col % 16, col - col % 16 + 16), (max(0, col - 3), col + 1), (col, 70)]:
            with pytest.raises(GnnprepError, match=rf"non-finite values in rows {lo}\.\.{min(5000, lo + step) - 1}"):
                g.feature_columns(c0, c1)
        other = (col + 1, 70) if col < 69 else (0, col)
        assert np.isfinite(g.feature_columns(*other)).all()


def test_tile_assembly_equals_numpy_slicing(rng):
    """tiles_into_finite against numpy on random tile spans, offsets and row counts."""
    from gnnprep.sparse.kernels import tiles_into_finite

    for _ in range(50):
        k, ch, cw = int(rng.integers(1, 5)), int(rng.integers(1, 40)), int(rng.integers(1, 17))
        tiles = rng.standard_normal((k, ch, cw)).astype(np.float32)
        lo = int(rng.integers(0, cw))
        w = int(rng.integers(1, k * cw - lo + 1))
        rows = int(rng.integers(0, ch + 1))
        out = np.full((rows, w), -7.0, dtype=np.float32)
        assert tiles_into_finite(tiles, lo, out)
        side = np.concatenate(list(tiles), axis=1)    # the span's columns side by side
        np.testing.assert_array_equal(out, side[:rows, lo:lo + w])
