"""An HDG vertex level's sum (:func:`gnnprep.sparse.kernels.segment_sum`): the values of scipy's CSR
product (rows summed in the same order) and the weights' sums, whatever the prefetch distance."""

import numpy as np
import pytest
import scipy.sparse as sp

from gnnprep.sparse.kernels import segment_sum


@pytest.mark.parametrize("ahead", [None, 0, 1, 7, 64, 10_000])
@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64])
def test_segment_sum_is_scipys_product_for_any_prefetch_distance(ahead, ids_dtype):
    rng = np.random.default_rng(7)
    n, segments, d = 500, 300, 33
    sizes = rng.integers(0, 12, segments)
    sizes[[0, 5, -1]] = 0   # empty segments: rows of 0, a divisor of 0
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = rng.integers(0, n, offsets[-1]).astype(ids_dtype)
    w = rng.random(offsets[-1]).astype(np.float32)
    x = rng.standard_normal((n, d)).astype(np.float32)
    out, den = segment_sum(offsets, ids, w, x, ahead=ahead)
    m = sp.csr_matrix((w, ids, offsets), shape=(segments, n))
    assert out.tobytes() == np.asarray(m @ x).tobytes()
    np.testing.assert_allclose(den, np.add.reduceat(np.r_[w.astype(np.float64), 0], offsets[:-1]) * (sizes > 0),
                               rtol=1e-12)
