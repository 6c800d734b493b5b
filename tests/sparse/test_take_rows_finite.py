"""The hop writer's gather back to the stored order with its overflow check folded in
(:func:`gnnprep.sparse.kernels.take_rows_finite`): the bytes of ``x[idx]`` and ``np.isfinite(x[idx]).all()``."""

import numpy as np
import pytest

from gnnprep.sparse.kernels import take_rows_finite


@pytest.mark.parametrize("d", [1, 7, 16, 33, 128])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_the_rows_gathered_are_x_idx_and_finite(d, index_dtype):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((50, d)).astype(np.float32)
    x[3] = -0.0
    x[4] = np.finfo(np.float32).max
    idx = rng.integers(0, 50, 80).astype(index_dtype)  # repeats, and more rows than x has
    out = np.full((80, d), np.nan, dtype=np.float32)
    assert take_rows_finite(x, idx, out) is True
    assert out.tobytes() == x[idx].tobytes()


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("where", [(0, 0), (17, 5), (49, 32)])
def test_an_inf_or_nan_anywhere_is_found(bad, where):
    x = np.ones((50, 33), dtype=np.float32)
    x[where] = bad
    idx = np.arange(49, -1, -1)
    out = np.empty((50, 33), dtype=np.float32)
    assert take_rows_finite(x, idx, out) is False
    assert out.tobytes() == x[idx].tobytes()
    # a row gathered elsewhere is not looked at
    assert take_rows_finite(x, idx[idx != where[0]], out[:49]) is True


def test_no_rows():
    x = np.full((3, 4), np.inf, dtype=np.float32)
    assert take_rows_finite(x, np.empty(0, np.int64), np.empty((0, 4), np.float32)) is True


def test_the_hop_writer_names_the_stored_row_and_column_of_an_overflow_it_gathered(tmp_path):
    """A hop computed in a node order goes back to the stored order through the writer's gather
    (full-width rows of a contiguous dataset: the direct path); an inf found there is reported at
    its stored row and column, and finite rows are written as gathered."""
    import h5py

    from gnnprep.core.errors import GnnprepError
    from gnnprep.precompute.hop_writer import Gather, HopWriter

    path = tmp_path / "out.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("channels/sym/1", data=np.zeros((50, 33), np.float32))  # contiguous, allocated
    computed = np.arange(50 * 33, dtype=np.float32).reshape(50, 33)
    to_stored = np.arange(49, -1, -1)
    with h5py.File(path, "r+") as f:
        ds = f["channels/sym/1"]
        w = HopWriter(np.float32, path)
        try:
            w.put(ds, 0, 50, 0, 33, Gather(computed, to_stored))
            w.wait()
            assert w.raw.direct_bytes + w.raw.buffered_bytes == 50 * 33 * 4
            computed[2, 4] = np.inf  # stored row 47
            w.put(ds, 0, 50, 0, 33, Gather(computed, to_stored))
            with pytest.raises(GnnprepError, match=r"hop 1 of sym: row 47, column 4 is inf in float32"):
                w.wait()
        finally:
            w.close()
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["channels/sym/1"][:40], computed[to_stored][:40])
