"""Production kernels of the hops besides the sum row kernel, with the operator's scaling fused.

``out[v - r0] = l[v] · (λ r[v] X[v] + Σ_{p ∈ row v} w_p r[u_p] X[u_p])``, v ∈ [r0, r1)

The sum rows run in :mod:`gnnprep.sparse.row_kernels` (with software prefetch); their plain
formulation, the oracle tests compare against, is :mod:`gnnprep.sparse.reference` (test-only, never
run or warmed up by precompute). Here, on the CPU (numba, over nnz-balanced row chunks:
:func:`balanced_bounds`, since power-law rows would leave a core idle with a plain ``prange`` over
rows; no S values, implicit normalisation; int32 or int64 indices as stored; the GIL released so
HDF5 writes can overlap; each row reduced by one thread in a fixed order, so bit-for-bit
reproducible): :func:`spmm_rows_max`, the row kernel with max in place of Σ (a ``max`` reduce
operator); :func:`hag_prepare`, a HAG's aggregation rows level by level; :func:`take_rows`, the row
gather of a node order. Torch (CUDA, or CPU for testing the same path): :class:`TorchBlock`,
``torch.sparse.mm`` on a CSR block whose values are S's (explicit normalisation).
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import njit, prange

from gnnprep.sparse.prefetch import prefetch, prefetch_row

PARTS_PER_BLOCK = 64


@njit(inline="always", nogil=True, cache=True)
def _add_y(o, u, n, right, x, h):
    """o += y(u): r[u] x[u] for a graph node (u < n), h[u − n] for an aggregation node."""
    if u < n:
        ru = right[u]
        xu = x[u]
        for j in range(o.shape[0]):
            o[j] += ru * xu[j]
    else:
        hu = h[u - n]
        for j in range(o.shape[0]):
            o[j] += hu[j]


@njit(inline="always", nogil=True, cache=True)
def prefetch_y(u, xf, hf, right, d, n):
    """Prefetch what a gather of id u reads: row u of X and r[u] (``xf``: X flattened, rows of d), or
    through a HAG (``hf`` given: its aggregation rows flattened) aggregation row u − n for u ≥ n."""
    if hf is None or u < n:
        prefetch_row(xf, u * d, d)
        prefetch(right, u)
    else:
        prefetch_row(hf, (u - n) * d, d)


@njit(parallel=True, nogil=True, cache=True)
def _hag_level(inputs, right, x, h, first, ahead, parts):
    """h[first + i] = y(inputs[i, 0]) + y(inputs[i, 1]) for one level of aggregation nodes, where
    y(u) = r[u] x[u] for a graph node (u < n) and y(n + a) = h[a] for aggregation node a; in
    ``parts`` runs of consecutive nodes, each prefetching the input rows of the node ``ahead`` on
    (the inputs are rows at random: without it each read waited for memory)."""
    n = x.shape[0]
    d = x.shape[1]
    xf = x.reshape(x.size)
    hf = h.reshape(h.size)
    m = inputs.shape[0]
    for c in prange(parts):
        i0 = c * m // parts
        i1 = (c + 1) * m // parts
        for i in range(i0, min(i1, i0 + ahead)):
            prefetch_y(inputs[i, 0], xf, hf, right, d, n)
            prefetch_y(inputs[i, 1], xf, hf, right, d, n)
        for i in range(i0, i1):
            j = i + ahead
            if j < i1:
                prefetch_y(inputs[j, 0], xf, hf, right, d, n)
                prefetch_y(inputs[j, 1], xf, hf, right, d, n)
            o = h[first + i]
            for k in range(d):
                o[k] = 0.0
            _add_y(o, inputs[i, 0], n, right, x, h)
            _add_y(o, inputs[i, 1], n, right, x, h)


# aggregation nodes a run prefetches ahead: about this many values of their input rows (two rows a
# node). The cliques64 HAG at 8M entries (31k aggregation nodes, 8 levels; kept copy, 2-core VM,
# best of 30): d = 64 1.34 ms without, 0.56 / 0.46 / 0.43 / 0.44 ms at 4 / 8 / 16 / 32 nodes ahead;
# d = 128 1.89 ms without, 0.83 / 0.72 / 0.83 / 0.91 ms at 4 / 8 / 16 / 32
HAG_PREFETCH_FLOATS = 1024


def hag_prepare(x, right, inputs, level_ptr, h, ahead: int | None = None) -> None:
    """Every aggregation node's row of Â-aggregation over diag(r)x, level by level (``h`` has |VA|
    rows; graph nodes' rows r ⊙ x are read from ``x`` where needed, never copied). ``ahead``: nodes
    prefetched ahead (default from the width: :data:`HAG_PREFETCH_FLOATS`); it changes no value."""
    if ahead is None:
        ahead = max(4, min(64, HAG_PREFETCH_FLOATS // max(1, x.shape[1])))
    for l in range(len(level_ptr) - 1):
        a0, a1 = int(level_ptr[l]), int(level_ptr[l + 1])
        if a1 > a0:
            _hag_level(inputs[a0:a1], right, x, h, a0, np.int64(ahead), np.int64(min(PARTS_PER_BLOCK, a1 - a0)))


def balanced_bounds(indptr_block: np.ndarray, r0: int, parts: int) -> np.ndarray:
    """Split rows r0..r0+len-1 into ``parts`` chunks of about equal nnz + rows."""
    rows = len(indptr_block) - 1
    cost = indptr_block - indptr_block[0] + np.arange(rows + 1)
    targets = np.linspace(0, cost[-1], parts + 1)
    b = np.searchsorted(cost, targets)
    b[0], b[-1] = 0, rows
    return (np.unique(b) + r0).astype(np.int64)


@njit(inline="always", nogil=True, cache=True)
def _max_into(acc, c):
    """acc = max(acc, c), a NaN candidate skipped (``NaN > acc`` is false): one compare and a
    select, which LLVM vectorises as ``maxps``. A NaN-propagating select (``(c > acc) | (c != c)``)
    made the whole kernel 1.5x slower at d = 128; rows where every candidate of a column is NaN
    are found afterwards (:func:`_all_nan`), so the result is ``np.fmax``'s."""
    return c if c > acc else acc


@njit(nogil=True, cache=True)
def _all_nan(v, j, p, end, indices, weights, right, loop, x):
    """True when every candidate of row v, column j is NaN (the max kernel's rare slow path: only
    reached for an accumulator still at -inf, i.e. every candidate -inf or NaN)."""
    if loop != 0 and not np.isnan(loop * right[v] * x[v, j]):
        return False
    for q in range(p, end):
        u = indices[q]
        wr = right[u] if weights is None else weights[q] * right[u]
        if not np.isnan(wr * x[u, j]):
            return False
    return True


@njit(parallel=True, fastmath=False, nogil=True, cache=True)
def _spmm_rows_max(indptr, indices, weights, base, bounds, left, right, loop, x, out):
    """out[v - r0] = l[v] · max({λ r[v] x[v] if λ ≠ 0} ∪ {w_p r[u_p] x[u_p] : p ∈ row v}), 0 for a
    row with no candidate. Each candidate is formed by the same float operations as in the sum
    kernels' rows ((w_p r[u]) · x[u, j] and (λ r[v]) · x[v, j]); the max itself rounds nothing.
    Two entries per pass over ``acc``, as in :mod:`gnnprep.sparse.row_kernels`."""
    r0 = bounds[0]
    d = x.shape[1]
    for c in prange(len(bounds) - 1):
        acc = np.empty(d, dtype=x.dtype)
        for v in range(bounds[c], bounds[c + 1]):
            p0 = indptr[v - r0] - base
            end = indptr[v - r0 + 1] - base
            o = out[v - r0]
            if p0 == end and loop == 0:
                for j in range(d):
                    o[j] = 0.0
                continue
            for j in range(d):
                acc[j] = -np.inf
            if loop != 0:
                # x[v] is read only for the self-loop: a caller without one may have more rows than x
                rv = loop * right[v]
                xv = x[v]
                for j in range(d):
                    acc[j] = _max_into(acc[j], rv * xv[j])
            p = p0
            while p + 1 < end:
                u1, u2 = indices[p], indices[p + 1]
                if weights is None:
                    w1, w2 = right[u1], right[u2]
                else:
                    w1, w2 = weights[p] * right[u1], weights[p + 1] * right[u2]
                x1, x2 = x[u1], x[u2]
                for j in range(d):
                    acc[j] = _max_into(_max_into(acc[j], w1 * x1[j]), w2 * x2[j])
                p += 2
            if p < end:
                u1 = indices[p]
                w1 = right[u1] if weights is None else weights[p] * right[u1]
                x1 = x[u1]
                for j in range(d):
                    acc[j] = _max_into(acc[j], w1 * x1[j])
            lv = left[v]
            for j in range(d):
                a = acc[j]
                if a == -np.inf and _all_nan(v, j, p0, end, indices, weights, right, loop, x):
                    a = np.nan
                o[j] = a * lv


def spmm_rows_max(indptr_block, indices_block, weights_block, r0, left, right, loop, x, out) -> None:
    """Max-reduce counterpart of :func:`gnnprep.sparse.row_kernels.spmm_rows` (same arguments but the
    prefetch distance, same nnz-balanced chunks):
    for every row v in r0 .. r0+len(out)-1

    ``out[v - r0, j] = l[v] · max({λ r[v] x[v, j] if λ ≠ 0} ∪ {w_p r[u_p] x[u_p, j] : p ∈ row v})``

    (w_p = 1 when ``weights_block`` is None), and 0 for a row with no candidate (no entries, λ = 0).
    The caller guarantees l ≥ 0, so l[v] · max(...) = max(l[v] · ...) (rounding is monotone); r
    and w may have any sign. Each candidate is rounded exactly as the sum kernel rounds its term
    ((w_p r[u]) then · x[u, j], in x's dtype), the max adds no rounding, then one product by l[v]:
    so the result is within a relative 3·2^-24 of a float64 reference for float32 (barring
    underflow), and bit-for-bit reproducible whatever the thread count.

    NaN: skipped like ``np.fmax`` — a NaN candidate is ignored unless every candidate of that row
    and column is NaN (then NaN). This differs from the sum kernel, where a NaN term propagates;
    a propagating max cost 1.5x the time. ±inf are ordinary values (l[v] = 0 times an infinite max
    is NaN, as in the sum kernel). x[v] is read only for λ ≠ 0, so without a self-loop the rows
    may outnumber x's (an HDG level's parents)."""
    bounds = balanced_bounds(indptr_block, r0, PARTS_PER_BLOCK)
    base = np.int64(indptr_block[0])
    _spmm_rows_max(indptr_block, indices_block, weights_block, base, bounds, left, right, np.float32(loop), x, out)


def explicit_values(indptr_block, indices_block, weights_block, r0, left, right) -> np.ndarray:
    """S's values for a row block: w_p · l[v] · r[u] (explicit normalisation)."""
    rows = np.repeat(np.arange(r0, r0 + len(indptr_block) - 1), np.diff(indptr_block))
    vals = left[rows] * right[indices_block]
    if weights_block is not None:
        vals = vals * weights_block
    return vals.astype(np.float32)


class TorchBlock:
    """A row block of S (explicit values, self-loops included) as a torch CSR tensor on a device."""

    def __init__(self, indptr_block, indices_block, weights_block, r0, n, left, right, loop, device):
        import torch

        rows = len(indptr_block) - 1
        counts = np.diff(indptr_block)
        vals = explicit_values(indptr_block, indices_block, weights_block, r0, left, right)
        if loop:
            # insert the diagonal entry (v, v) with value λ l[v] r[v] at the end of each row
            idx = np.arange(r0, r0 + rows)
            diag = (loop * left[idx] * right[idx]).astype(np.float32)
            starts = np.concatenate([[0], np.cumsum(counts + 1)])
            pos = starts[1:] - 1
            new_idx = np.empty(starts[-1], dtype=np.int64)
            new_val = np.empty(starts[-1], dtype=np.float32)
            mask = np.ones(starts[-1], dtype=bool)
            mask[pos] = False
            new_idx[mask] = indices_block
            new_val[mask] = vals
            new_idx[pos] = idx
            new_val[pos] = diag
            crow = starts
            col, val = new_idx, new_val
        else:
            crow = indptr_block - indptr_block[0]
            col, val = indices_block.astype(np.int64), vals
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "beta" and invariant-check notices
            self.tensor = torch.sparse_csr_tensor(
                torch.from_numpy(np.ascontiguousarray(crow, dtype=np.int64)),
                torch.from_numpy(np.ascontiguousarray(col, dtype=np.int64)),
                torch.from_numpy(val), size=(rows, n)).to(device)
        self.nbytes = int(col.nbytes + val.nbytes + crow.nbytes)

    def matmul(self, x):
        import torch

        return torch.sparse.mm(self.tensor, x)


@njit(parallel=True, nogil=True, cache=True)
def _take_rows(x, order, out):
    # element loops, not ``out[i] = x[order[i]]``: the row-slice form took 3.5 s to compile on a
    # fresh install and ran 2x slower (0.19 vs 0.08 s for 1M x 128 float32)
    d = x.shape[1]
    for i in prange(len(order)):
        k = order[i]
        for j in range(d):
            out[i, j] = x[k, j]


GATHER_AHEAD = 8   # rows :func:`take_rows_finite` prefetches ahead (4-16 alike; 0: 1.4x slower)


@njit(nogil=True, cache=True)
def take_rows_finite(x, idx, out) -> bool:
    """out[i] = x[idx[i]] on one thread, and whether every value copied is finite: the hop writer's
    gather of rows back to the stored order fused with its overflow check (the output is read once,
    in cache, instead of gathered and then scanned again), prefetching the row
    :data:`GATHER_AHEAD` rows ahead. ``v - v`` is 0 for a finite v and NaN for inf or NaN, summed
    per column. Measured for 2.78M rows of 128 float32 in a random order, 32 MiB at a time:
    0.25 s against 0.68-0.80 s for ``np.take`` and ``np.isfinite`` (what it replaced); the
    contiguous copy and check of the stored order take 0.15 s."""
    d = x.shape[1]
    xf = x.reshape(x.size)
    acc = np.zeros(d, dtype=np.float32)
    n = len(idx)
    for i in range(n):
        if i + GATHER_AHEAD < n:
            start = idx[i + GATHER_AHEAD] * d
            for k in range(0, d, 16):  # a 64-byte line holds 16 float32
                prefetch(xf, start + k)
        src = x[idx[i]]
        dst = out[i]
        for j in range(d):
            v = src[j]
            dst[j] = v
            acc[j] += np.float32(v - v)
    for j in range(d):
        if acc[j] != acc[j]:
            return False
    return True


@njit(nogil=True, cache=True)
def tiles_into_finite(tiles, lo, out) -> bool:
    """out[i, j] = column lo + j of the row-block's column tiles side by side (``tiles`` [k, rows of
    a chunk, tile columns]: tile t holds columns t·cw .. t·cw + cw − 1 of the span; rows of ``out``
    ≤ rows of a chunk), on one thread, and whether every value copied is finite (the ``v - v`` sum of
    :func:`take_rows_finite`): X's column block assembled from raw chunks
    (:meth:`gnnprep.graph.store.GraphStore.feature_columns`) with its check in the same pass. Each
    row of ``out`` is written once, whole. Measured on 2.78M rows, 64 of 128 columns in 16-column
    tiles (2-core Xeon VM, pages already touched): 0.56 s for numpy's tile-by-tile strided copy and
    ``np.isfinite`` against 0.2 s here."""
    rows, w = out.shape
    cw = tiles.shape[2]
    acc = np.zeros(w, dtype=np.float32)
    for i in range(rows):
        o = out[i]
        for t in range(tiles.shape[0]):
            src = tiles[t, i]
            j0 = t * cw - lo          # out's column of the tile's first column
            a = max(0, -j0)
            b = min(cw, w - j0)
            for q in range(a, b):
                v = src[q]
                o[j0 + q] = v
                acc[j0 + q] += np.float32(v - v)
    for j in range(w):
        if acc[j] != acc[j]:
            return False
    return True


@njit(parallel=True, nogil=True, cache=True)
def _segment_sum(offsets, ids, w, x, bounds, out, den, ahead):
    d = x.shape[1]
    xf = x.reshape(x.size)
    for t in prange(len(bounds) - 1):
        last = offsets[bounds[t + 1]]
        for c in range(offsets[bounds[t]], min(last, offsets[bounds[t]] + ahead)):
            prefetch_row(xf, ids[c] * d, d)
        for p in range(bounds[t], bounds[t + 1]):
            o = out[p]
            for j in range(d):
                o[j] = 0.0
            total = 0.0
            for c in range(offsets[p], offsets[p + 1]):
                if c + ahead < last:   # the row a member ``ahead`` on gathers (no value changes)
                    prefetch_row(xf, ids[c + ahead] * d, d)
                wc = w[c]
                total += wc
                xr = x[ids[c]]
                for j in range(d):
                    o[j] += wc * xr[j]
            den[p] = total


SEGMENT_PREFETCH_FLOATS = 1024   # segment_sum prefetches the rows of this many values' worth of members ahead


def segment_sum(offsets: np.ndarray, ids: np.ndarray, w: np.ndarray, x: np.ndarray,
                ahead: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(out, den): out[p] = Σ_{c ∈ offsets[p] .. offsets[p+1]-1} w[c] · x[ids[c]] (0 for an empty
    segment) and den[p] = Σ w[c] in float64 (a mean's divisor): an HDG vertex level's sum
    (:mod:`gnnprep.hdg.structure`), rows summed in order by one thread each (the same float
    operations as scipy's CSR product, so the same values), over entry-balanced row chunks on all
    cores. On the random-walk HDG of papers100M's shape at 1/40 (22.2M members, 32 float32 columns,
    2 cores) 0.52 s against 1.2-2.2 s for scipy's single-threaded product. The rows of the members
    ``ahead`` on (default: :data:`SEGMENT_PREFETCH_FLOATS` values' worth, 4 to 64 members) are
    prefetched, as the hop kernels do theirs: 2.78M segments of 8 random members at d = 64, 0.65 s
    against 0.85 s without (4-64 ahead: 0.70-0.65 s); ``precompute --hdg`` (random walks, 1/40,
    float16, 2 GiB; ``benchmarks/bench_hdg_channels.py``) channels 9.05 against 15.1 s. No value
    changes."""
    p = len(offsets) - 1
    out = np.empty((p, x.shape[1]), dtype=x.dtype)
    den = np.empty(p, dtype=np.float64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if ahead is None:
        ahead = max(4, min(64, SEGMENT_PREFETCH_FLOATS // max(1, x.shape[1])))
    _segment_sum(offsets, np.ascontiguousarray(ids), np.ascontiguousarray(w, dtype=x.dtype), np.ascontiguousarray(x),
                 balanced_bounds(offsets, 0, PARTS_PER_BLOCK) if p else np.zeros(1, dtype=np.int64), out, den,
                 np.int64(ahead))
    return out, den


def take_rows(x: np.ndarray, order: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x[order] (rows), gathered on all cores (into ``out`` when given)."""
    if out is None:
        out = np.empty((len(order), x.shape[1]), dtype=x.dtype)
    _take_rows(x, order, out)
    return out


def warm_up(index_dtypes=(np.int32, np.int64), weights=(False, True), hag: bool = True, gather: bool = True,
            max_reduce: bool = False, segments=()) -> None:
    """Compile (or load from numba's cache) this module's CPU kernels before memory is measured: the
    HAG level kernel (int64 arrays, as :func:`gnnprep.hag.file.read_hag` returns them), the row
    gather of a node order, X's tile assembly (always), :func:`segment_sum` for each dtype in ``segments``, and with
    ``max_reduce`` the max-reduce row kernel (:func:`spmm_rows_max`)
    for each index dtype and with/without edge weights. The sum row kernels warm up in
    :func:`gnnprep.sparse.row_kernels.warm_up`. A run asks only for the variants it uses:
    compiling every one on a fresh install takes seconds each on 2 cores."""
    ip = np.array([0, 1, 1], dtype=np.int64)
    x = np.ones((2, 2), dtype=np.float32)
    out = np.empty_like(x)
    one = np.ones(2, dtype=np.float32)
    for dtype in segments:   # an HDG's vertex levels (precompute --hdg): their ids' dtypes
        segment_sum(ip, np.array([1], dtype=dtype), np.ones(1, np.float32), x)
    for dtype in index_dtypes if max_reduce else ():
        idx = np.array([1], dtype=dtype)
        for weighted in weights:
            spmm_rows_max(ip, idx, np.ones(1, np.float32) if weighted else None, 0, one, one, 1.0, x, out)
    if hag:
        h = np.ones((3, 2), dtype=np.float32)
        for ids in (np.int64, np.int32):  # as read, and as relabelled (gnnprep.hag.order.in_order)
            hag_prepare(x, one, np.array([[0, 1]], dtype=ids), np.array([0, 1], dtype=np.int64), h)
    if gather:
        take_rows(x, np.array([1, 0], dtype=np.int64))
        take_rows_finite(x, np.array([1, 0], dtype=np.int64), out)
    tiles_into_finite(np.ones((1, 2, 2), dtype=np.float32), 0, out)   # every run reads X (GraphStore.feature_columns)
