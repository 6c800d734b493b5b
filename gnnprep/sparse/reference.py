"""Reference kernels, used only by tests: the plain (no prefetch) numba formulation of one row block
of S·X with the operator's scaling fused, the oracle the production kernels of
:mod:`gnnprep.sparse.row_kernels` must match bit for bit.

``out[v - r0] = l[v] · (λ r[v] X[v] + Σ_{p ∈ row v} w_p r[u_p] X[u_p])``, v ∈ [r0, r1)

Over nnz-balanced row chunks (:func:`gnnprep.sparse.kernels.balanced_bounds`), no S values
(implicit normalisation), int32 or int64 indices as stored; each row summed by one thread in a
fixed order (:func:`_row`), so results are bit-for-bit reproducible. Nothing in the library imports
this module and no run compiles it: precompute runs :mod:`gnnprep.sparse.row_kernels` (the same
float operations per row, plus a software prefetch) and :mod:`gnnprep.sparse.kernels` (max reduce,
HAG levels, gathers, torch blocks).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gnnprep.sparse.kernels import PARTS_PER_BLOCK, balanced_bounds


@njit(inline="always", nogil=True, cache=True)
def _term(p, u, weights, right, x, h):
    """(weight, row) of entry p = (v, u): (w_p r[u], x[u]); through a HAG (``h`` given) u ≥ n is
    aggregation node u − n: (1, h[u − n]). numba prunes the ``is None`` branches per variant."""
    if h is None:
        if weights is None:
            return right[u], x[u]
        return weights[p] * right[u], x[u]
    if u < x.shape[0]:
        return right[u], x[u]
    return np.float32(1.0), h[u - x.shape[0]]


@njit(parallel=True, fastmath=False, nogil=True, cache=True)
def _spmm_rows(indptr, indices, weights, base, bounds, left, right, loop, x, h, out):
    """out[v - r0] = l[v] (λ r[v] x[v] + Σ_p w_p r[u_p] x[u_p]), or over a HAG's rewired in-lists
    (Σ over y(u) as in :func:`gnnprep.sparse.kernels.hag_prepare`). Rows accumulate in a per-thread buffer, two entries
    per pass over it: ``acc = (acc + w1 x1) + w2 x2`` is the same sequence of float operations as
    two passes (so bit-for-bit the one-entry loop; 1 · h is exact), with half the loads and
    stores of ``acc`` (~15-20% faster)."""
    r0 = bounds[0]
    for c in prange(len(bounds) - 1):
        acc = np.empty(x.shape[1], dtype=x.dtype)
        for v in range(bounds[c], bounds[c + 1]):
            _row(v, indptr[v - r0] - base, indptr[v - r0 + 1] - base, indices, weights, left, right, loop, x, h,
                 acc, out[v - r0])


@njit(inline="always", nogil=True, cache=True)
def _row(v, p, end, indices, weights, left, right, loop, x, h, acc, o):
    """o = row v of S·x from its entries p..end-1: the one sequence of float operations every
    kernel here uses for a row, so a row's bits do not depend on which kernel computed it."""
    d = x.shape[1]
    xv = x[v]
    rv = loop * right[v]
    for j in range(d):
        acc[j] = rv * xv[j]
    while p + 1 < end:
        w1, x1 = _term(p, indices[p], weights, right, x, h)
        w2, x2 = _term(p + 1, indices[p + 1], weights, right, x, h)
        for j in range(d):
            acc[j] = (acc[j] + w1 * x1[j]) + w2 * x2[j]
        p += 2
    if p < end:
        w1, x1 = _term(p, indices[p], weights, right, x, h)
        for j in range(d):
            acc[j] += w1 * x1[j]
    lv = left[v]
    for j in range(d):
        o[j] = acc[j] * lv


@njit(parallel=True, nogil=True, cache=True)
def _spmm_listed(indptr, indices, weights, rows, targets, left, right, loop, x, out):
    """out[targets[i]] = row rows[i] of S·x (whole-graph CSR arrays)."""
    for i in prange(len(rows)):
        acc = np.empty(x.shape[1], dtype=x.dtype)
        v = rows[i]
        _row(v, indptr[v], indptr[v + 1], indices, weights, left, right, loop, x, None, acc, out[targets[i]])


def reference_spmm_rows(indptr_block, indices_block, weights_block, r0, left, right, loop, x, out) -> None:
    """out[:] = rows r0 .. r0+len(out)-1 of S·x. ``indptr_block`` has len(out)+1 global offsets and
    ``indices_block`` starts at offset ``indptr_block[0]``. The reference of
    :func:`gnnprep.sparse.row_kernels.spmm_rows` (and, for the candidates, of the max kernel
    :func:`gnnprep.sparse.kernels.spmm_rows_max`)."""
    bounds = balanced_bounds(indptr_block, r0, PARTS_PER_BLOCK)
    base = np.int64(indptr_block[0])
    _spmm_rows(indptr_block, indices_block, weights_block, base, bounds, left, right, np.float32(loop), x, None, out)


def reference_spmm_selected(indptr, indices, weights, rows, left, right, loop, x, out) -> None:
    """out[i] = row rows[i] of S·x, bit-for-bit what :func:`reference_spmm_rows` gives for that row:
    the reference of :func:`gnnprep.sparse.row_kernels.spmm_selected` (the last hop of
    ``--rows labeled`` computes only the rows it stores)."""
    rows = np.asarray(rows, dtype=np.int64)
    _spmm_listed(indptr, indices, weights, rows, np.arange(len(rows)), left, right, np.float32(loop), x, out)


def reference_spmm_rows_in_place(indptr, indices, weights, rows, left, right, loop, x, out) -> None:
    """out[v] = row v of S·x for every v in ``rows``, other rows untouched (bit-for-bit
    :func:`reference_spmm_rows`'s row): the reference of
    :func:`gnnprep.sparse.row_kernels.spmm_rows_in_place` (hop K−1 of ``--rows labeled``)."""
    rows = np.asarray(rows, dtype=np.int64)
    _spmm_listed(indptr, indices, weights, rows, rows, left, right, np.float32(loop), x, out)


def reference_hag_rows(indptr_block, indices_block, r0, left, right, loop, x, h, out) -> None:
    """out[:] = rows r0 .. of Â·(r ⊙ x) through a HAG's rewired in-lists (ids ≥ n are aggregation
    nodes, whose rows ``h`` :func:`gnnprep.sparse.kernels.hag_prepare` computed). The reference of
    :func:`gnnprep.sparse.row_kernels.hag_rows`."""
    bounds = balanced_bounds(indptr_block, r0, PARTS_PER_BLOCK)
    _spmm_rows(indptr_block, indices_block, None, np.int64(indptr_block[0]), bounds, left, right, np.float32(loop),
               x, h, out)

