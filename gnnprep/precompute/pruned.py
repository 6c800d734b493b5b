"""Pruned hops of ``--rows labeled`` whatever the plan (issue 24): kernels over row blocks and over a
small resident sub-CSR, so the pruning survives streaming S.

Hop K stores only the stored rows R0, so it computes only them; hop K−1 only what hop K reads,
R1 = R0 ∪ in-neighbours(R0). With S resident both run on the whole CSR
(:func:`gnnprep.sparse.row_kernels.spmm_selected`, :func:`~gnnprep.sparse.row_kernels.spmm_rows_in_place`).
With S streamed (from the store, or from its ordered copy, :mod:`gnnprep.precompute.ordered`):

- R0's in-lists are extracted once per run into a resident sub-CSR (:func:`extract_rows`: one pass
  over S; at papers100M's split sizes ~1.5M rows and 1.4% of the entries); R1 is read off it, and
  hop K runs on it (:func:`gnnprep.sparse.row_kernels.spmm_sub`);
- hop K−1 streams S's row blocks as every hop does and computes only R1's rows of each block
  (:func:`gnnprep.sparse.row_kernels.spmm_listed`).

Every kernel (:mod:`gnnprep.sparse.row_kernels`) computes a row with the one sequence of float
operations of the row kernel, so the bytes equal the unpruned hop's rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, nogil=True, cache=True)
def _gather_rows(ip_block, idx_block, w_block, r0, rows, sub_ip, first, sub_idx, sub_w):
    base = ip_block[0]
    weighted = len(sub_w) > 0
    for i in prange(len(rows)):
        v = rows[i]
        q = sub_ip[first + i]
        for p in range(ip_block[v - r0] - base, ip_block[v - r0 + 1] - base):
            sub_idx[q] = idx_block[p]
            if weighted:
                sub_w[q] = w_block[p]
            q += 1


def extract_rows(indptr: np.ndarray, blocks, rows: np.ndarray, index_dtype, valued: bool):
    """The sub-CSR of ``rows`` (sorted, unique): (sub_ip, sub_idx, sub_w or None), from one pass over
    ``blocks``: (r0, r1, ip_block, idx_block, values_block or None) in row order, covering every row."""
    rows = np.asarray(rows, dtype=np.int64)
    deg = indptr[rows + 1] - indptr[rows]
    sub_ip = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(deg, out=sub_ip[1:])
    sub_idx = np.empty(int(sub_ip[-1]), dtype=index_dtype)
    sub_w = np.empty(int(sub_ip[-1]) if valued else 0, dtype=np.float32)
    for r0, r1, ip, idx, w in blocks:
        a, z = (int(t) for t in np.searchsorted(rows, [r0, r1]))
        if z > a:
            wb = w if (valued and w is not None) else np.empty(0, dtype=np.float32)
            _gather_rows(ip, idx, wb, np.int64(r0), rows[a:z], sub_ip, np.int64(a), sub_idx, sub_w)
    return sub_ip, sub_idx, (sub_w if valued else None)


def warm_up(index_dtypes, weights=(False,)) -> None:
    """Compile (or load from numba's cache) the extraction for these variants."""
    ip = np.array([0, 1, 1], dtype=np.int64)
    rows = np.array([0], dtype=np.int64)
    for dtype in index_dtypes:
        idx = np.array([1], dtype=dtype)
        for weighted in weights:
            w = np.ones(1, np.float32) if weighted else None
            extract_rows(ip, [(0, 2, ip, idx, w)], rows, dtype, weighted)
