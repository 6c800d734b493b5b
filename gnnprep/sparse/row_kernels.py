"""The CPU row kernel of the hops with software prefetch (issue 24).

``out[v - r0] = l[v] · (λ r[v] X[v] + Σ_{p ∈ row v} w_p r[u_p] X[u_p])`` exactly as
:func:`gnnprep.sparse.reference.reference_spmm_rows` (the test-only reference) computes it (the
same sequence of float operations per row, :func:`gnnprep.sparse.reference._row`'s), plus a
prefetch of the row of X and the scaling r[u] of the entry :func:`prefetch_distance` entries ahead (fewer for wider rows). In a locality order most gathers hit the
cache and the rest (the entries between communities, ~22% on the papers100M-shaped graph) are
misses whose latency, not bandwidth, bounds a hop; a narrow column block (an X row of 64 bytes)
pays that latency once per block, so a tight budget's many narrow blocks pay it many times. A
prefetch changes no value (:mod:`gnnprep.sparse.prefetch`): the bytes are those of the plain kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gnnprep.sparse.kernels import PARTS_PER_BLOCK, balanced_bounds, prefetch_y


@njit(inline="always", nogil=True, cache=True)
def _term(p, u, weights, right, x, h):
    """(weight, row) of entry p = (v, u), as :mod:`gnnprep.sparse.reference` takes it: (w_p r[u], x[u]);
    through a HAG (``h`` given) u ≥ n is aggregation node u − n: (1, h[u − n])."""
    if h is None:
        if weights is None:
            return right[u], x[u]
        return weights[p] * right[u], x[u]
    if u < x.shape[0]:
        return right[u], x[u]
    return np.float32(1.0), h[u - x.shape[0]]


PREFETCH_AHEAD = 64   # entries ahead at an X row of 32 floats (measured: 24 too short, 64-128 alike)
PREFETCH_FLOATS = 2048   # X values the prefetch runs ahead: PREFETCH_FLOATS / width entries


def prefetch_distance(width: int) -> int:
    """Entries the prefetch runs ahead for X rows of ``width`` values: about PREFETCH_FLOATS values
    of gathers (the work that hides one miss's latency grows with the row), 16 to 128 entries.
    Measured on the 2.8M-node R-MAT graph of benchmarks/bench_rmat.py, 2 threads, CPU seconds per
    hop, interleaved rounds: at d = 128, 16 entries 1.89 s vs 64 entries 2.16 s in the degree order
    and 2.06 vs 2.54 s in random ids (and 1.60 vs 1.77 s on the papers100M-shaped graph in the
    community order); at d = 32, 64 entries 0.71 s vs 16 entries 1.05 s (random ids: 0.87 vs 1.19 s).
    A prefetch changes no value: any distance gives the same bytes."""
    return int(min(128, max(16, PREFETCH_FLOATS // max(1, int(width)))))


def _ahead(ahead, x) -> np.int64:
    return np.int64(prefetch_distance(x.shape[1]) if ahead is None else ahead)


@njit(inline="always", nogil=True, cache=True)
def _row_ahead(v, p, end, indices, weights, left, right, loop, x, xf, h, hf, acc, o, ahead):
    """:func:`gnnprep.sparse.reference._row` (the same float operations in the same order), with what
    entry p + ``ahead`` gathers prefetched (``xf``: x flattened; never past the block); through a
    HAG's rewired in-lists when ``h`` (the aggregation rows) is given."""
    d = x.shape[1]
    n = x.shape[0]
    last = len(indices)
    xv = x[v]
    rv = loop * right[v]
    for j in range(d):
        acc[j] = rv * xv[j]
    while p + 1 < end:
        q = p + ahead
        if q + 1 < last:
            prefetch_y(indices[q], xf, hf, right, d, n)
            prefetch_y(indices[q + 1], xf, hf, right, d, n)
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


@njit(parallel=True, fastmath=False, nogil=True, cache=True)
def _rows(indptr, indices, weights, base, bounds, left, right, loop, x, h, hf, out, ahead):
    r0 = bounds[0]
    xf = x.reshape(x.size)
    for c in prange(len(bounds) - 1):
        acc = np.empty(x.shape[1], dtype=x.dtype)
        for v in range(bounds[c], bounds[c + 1]):
            _row_ahead(v, indptr[v - r0] - base, indptr[v - r0 + 1] - base, indices, weights, left, right, loop, x,
                       xf, h, hf, acc, out[v - r0], ahead)


def spmm_rows(indptr_block, indices_block, weights_block, r0, left, right, loop, x, out,
              ahead: int | None = None) -> None:
    """out[:] = rows r0 .. r0+len(out)-1 of S·x (:func:`gnnprep.sparse.reference.reference_spmm_rows`'s
    arguments and bytes), prefetching ``ahead`` entries ahead (default: :func:`prefetch_distance`)."""
    bounds = balanced_bounds(indptr_block, r0, PARTS_PER_BLOCK)
    _rows(indptr_block, indices_block, weights_block, np.int64(indptr_block[0]), bounds, left, right,
          np.float32(loop), x, None, None, out, _ahead(ahead, x))


def hag_rows(indptr_block, indices_block, r0, left, right, loop, x, h, out, ahead: int | None = None) -> None:
    """:func:`gnnprep.sparse.reference.reference_hag_rows` (rows of Â·(r ⊙ x) through a HAG's rewired in-lists,
    the aggregation rows ``h`` prepared), prefetching as :func:`spmm_rows`; the same bytes."""
    bounds = balanced_bounds(indptr_block, r0, PARTS_PER_BLOCK)
    _rows(indptr_block, indices_block, None, np.int64(indptr_block[0]), bounds, left, right, np.float32(loop), x, h,
          h.reshape(-1), out, _ahead(ahead, x))


def hag_rows_joined(indptr_block, indices_block, r0, left, right_joined, loop, y, out, ahead: int | None = None) -> None:
    """:func:`hag_rows` with the aggregation rows right after X's in one array, y = [x; h], and
    ``right_joined`` = [r; 1 … 1]: then the plain row kernel (no weights) over y, the same bytes
    (each aggregation term is 1 · h[a], as :func:`hag_rows` forms it). One array for both kinds of
    row: on cliques64 (8M entries, d = 64, community order) the hop alone ran 1.28x the plain hop's
    speed against 1.16x with two (d = 128: 1.25x against 1.18x; 2 cores, best of 9)."""
    bounds = balanced_bounds(indptr_block, r0, PARTS_PER_BLOCK)
    _rows(indptr_block, indices_block, None, np.int64(indptr_block[0]), bounds, left, right_joined,
          np.float32(loop), y, None, None, out, _ahead(ahead, y))


@njit(inline="always", nogil=True, cache=True)
def _advance(ip, idx, base, slots, t_end, pt, pp, pend, right, xf, hf, d, n):
    """Move the prefetch cursor one entry on along the listed rows (slots[pt]'s entries pp..pend-1,
    then the next listed row's) and prefetch that entry's X row and r (through a HAG, ``hf`` given:
    its aggregation row for ids ≥ n): the new (pt, pp, pend)."""
    while pp >= pend and pt + 1 < t_end:
        pt += 1
        s = slots[pt]
        pp = ip[s] - base
        pend = ip[s + 1] - base
    if pp < pend:
        prefetch_y(idx[pp], xf, hf, right, d, n)
        pp += 1
    return pt, pp, pend


@njit(parallel=True, fastmath=False, nogil=True, cache=True)
def _gathered(ip, idx, weights, base, rows, slots, targets, parts, left, right, loop, x, h, hf, out, ahead):
    """out[targets[t]] = row rows[t] of S·x, its entries ip[slots[t]]-base .. ip[slots[t]+1]-base-1
    of ``idx``, for t in each part parts[c]..parts[c+1]-1 (in order); through a HAG's rewired
    in-lists when ``h`` (its aggregation rows, ``hf`` flattened) is given. The float operations of a
    row are :func:`gnnprep.sparse.reference._row`'s (:func:`_row_ahead`'s), in its order; a cursor
    ``ahead`` entries ahead along the listed rows (not the rows between them) prefetches what is
    gathered next."""
    d = x.shape[1]
    n = x.shape[0]
    xf = x.reshape(x.size)
    for c in prange(len(parts) - 1):
        t0, t1 = parts[c], parts[c + 1]
        acc = np.empty(d, dtype=x.dtype)
        pt = t0
        pp = ip[slots[t0]] - base
        pend = ip[slots[t0] + 1] - base
        for _ in range(ahead):
            pt, pp, pend = _advance(ip, idx, base, slots, t1, pt, pp, pend, right, xf, hf, d, n)
        for t in range(t0, t1):
            v = rows[t]
            s = slots[t]
            p = ip[s] - base
            end = ip[s + 1] - base
            o = out[targets[t]]
            xv = x[v]
            rv = loop * right[v]
            for j in range(d):
                acc[j] = rv * xv[j]
            while p + 1 < end:
                pt, pp, pend = _advance(ip, idx, base, slots, t1, pt, pp, pend, right, xf, hf, d, n)
                pt, pp, pend = _advance(ip, idx, base, slots, t1, pt, pp, pend, right, xf, hf, d, n)
                w1, x1 = _term(p, idx[p], weights, right, x, h)
                w2, x2 = _term(p + 1, idx[p + 1], weights, right, x, h)
                for j in range(d):
                    acc[j] = (acc[j] + w1 * x1[j]) + w2 * x2[j]
                p += 2
            if p < end:
                pt, pp, pend = _advance(ip, idx, base, slots, t1, pt, pp, pend, right, xf, hf, d, n)
                w1, x1 = _term(p, idx[p], weights, right, x, h)
                for j in range(d):
                    acc[j] += w1 * x1[j]
            lv = left[v]
            for j in range(d):
                o[j] = acc[j] * lv


PARTS = 256   # parts of about equal entries a listed-rows call is cut into (threads take them in turn)


def _parts(ip, slots) -> np.ndarray:
    """Bounds of the PARTS runs of about equal entries + rows that the listed rows (row ``slots[t]``
    of the row pointer ``ip``, t in order) are cut into."""
    cost = np.cumsum(ip[slots + 1] - ip[slots] + 1)
    return np.unique(np.concatenate([[0], np.searchsorted(cost, np.linspace(0, cost[-1], PARTS + 1)[1:-1]),
                                     [len(slots)]])).astype(np.int64)


def _run(ip, idx, weights, base, rows, slots, targets, left, right, loop, x, out, ahead) -> None:
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return
    slots = np.asarray(slots, dtype=np.int64)
    _gathered(ip, idx, weights, np.int64(base), rows, slots, np.asarray(targets, dtype=np.int64), _parts(ip, slots),
              left, right, np.float32(loop), x, None, None, out, _ahead(ahead, x))


def spmm_listed(ip_block, idx_block, w_block, r0, rows, left, right, loop, x, out,
                ahead: int | None = None) -> None:
    """out[v] = row v of S·x for every v in ``rows`` (sorted, inside the block r0..; entries
    ``idx_block`` from offset ``ip_block[0]``), other rows untouched."""
    rows = np.asarray(rows, dtype=np.int64)
    _run(ip_block, idx_block, w_block, int(ip_block[0]), rows, rows - r0, rows, left, right, loop, x, out, ahead)


def spmm_sub(sub_ip, sub_idx, sub_w, rows, pick, left, right, loop, x, out, ahead: int | None = None) -> None:
    """out[i] = row rows[pick[i]] of S·x from the sub-CSR (sub_ip, sub_idx, sub_w) of ``rows``
    (row j's entries sub_ip[j]..sub_ip[j+1]-1), computed in the sub-CSR's order."""
    pick = np.asarray(pick, dtype=np.int64)
    seq = np.argsort(pick, kind="stable")
    slots = pick[seq]
    _run(sub_ip, sub_idx, sub_w, 0, rows[slots], slots, seq, left, right, loop, x, out, ahead)


def _hag_run(indptr, indices, rows, targets, left, right, loop, x, h, out, ahead) -> None:
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return
    _gathered(indptr, indices, None, np.int64(0), rows, rows, np.asarray(targets, dtype=np.int64), _parts(indptr, rows),
              left, right, np.float32(loop), x, h, h.reshape(h.size), out, _ahead(ahead, x))


def hag_listed(ip_block, idx_block, r0, rows, left, right, loop, x, h, out, ahead: int | None = None) -> None:
    """:func:`hag_rows_in_place` over one row block of streamed in-lists (rows r0..; entries
    ``idx_block`` from offset ``ip_block[0]``): out[v] for v in ``rows`` (sorted, in the block)."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return
    slots = rows - r0
    _gathered(ip_block, idx_block, None, np.int64(ip_block[0]), rows, slots, rows, _parts(ip_block, slots), left, right,
              np.float32(loop), x, h, h.reshape(h.size), out, _ahead(ahead, x))


def hag_sub(sub_ip, sub_idx, rows, pick, left, right, loop, x, h, out, ahead: int | None = None) -> None:
    """:func:`hag_selected` from the sub-CSR (sub_ip, sub_idx) of ``rows`` (streamed in-lists):
    out[i] = row rows[pick[i]], computed in the sub-CSR's order; each row's bytes are :func:`hag_rows`'s."""
    pick = np.asarray(pick, dtype=np.int64)
    if not len(pick):
        return
    seq = np.argsort(pick, kind="stable")
    slots = pick[seq]
    _gathered(sub_ip, sub_idx, None, np.int64(0), np.asarray(rows, dtype=np.int64)[slots], slots, seq,
              _parts(sub_ip, slots), left, right, np.float32(loop), x, h, h.reshape(h.size), out, _ahead(ahead, x))


def hag_selected(indptr, indices, rows, left, right, loop, x, h, out, ahead: int | None = None) -> None:
    """out[i] = row rows[i] of Â·(r ⊙ x) through the HAG (``h``: its aggregation rows, prepared),
    computed in row order: each row's bytes are :func:`hag_rows`'s."""
    rows = np.asarray(rows, dtype=np.int64)
    seq = np.argsort(rows, kind="stable")
    _hag_run(indptr, indices, rows[seq], seq, left, right, loop, x, h, out, ahead)


def hag_rows_in_place(indptr, indices, rows, left, right, loop, x, h, out, ahead: int | None = None) -> None:
    """out[v] = row v of Â·(r ⊙ x) through the HAG for v in ``rows`` (sorted), others untouched: the
    listed rows' kernel with its cursor prefetching along them (a prefetch along the rewired CSR,
    into rows not listed, made the pruned hops of the papers100M shape at 1/10 1.7x slower, w = 32)."""
    rows = np.asarray(rows, dtype=np.int64)
    _hag_run(indptr, indices, rows, rows, left, right, loop, x, h, out, ahead)


def spmm_selected(indptr, indices, weights, rows, left, right, loop, x, out, ahead: int | None = None) -> None:
    """out[i] = row rows[i] of S·x (the whole CSR resident), computed in row order:
    :func:`gnnprep.sparse.reference.reference_spmm_selected`'s bytes."""
    rows = np.asarray(rows, dtype=np.int64)
    seq = np.argsort(rows, kind="stable")
    _run(indptr, indices, weights, 0, rows[seq], rows[seq], seq, left, right, loop, x, out, ahead)


def spmm_rows_in_place(indptr, indices, weights, rows, left, right, loop, x, out, ahead: int | None = None) -> None:
    """out[v] = row v of S·x for v in ``rows`` (sorted), others untouched (the whole CSR resident):
    :func:`gnnprep.sparse.reference.reference_spmm_rows_in_place`'s bytes."""
    rows = np.asarray(rows, dtype=np.int64)
    _run(indptr, indices, weights, 0, rows, rows, rows, left, right, loop, x, out, ahead)


def warm_up(index_dtypes, weights=(False,), selected: bool = False, hag: bool = False) -> None:
    """Compile (or load from numba's cache) these variants (``selected``: the kernels of the pruned
    hops too; ``hag``: the HAG rows, int64 in-lists as read and int32 as relabelled, over two arrays
    and over one, :func:`hag_rows_joined`)."""
    ip = np.array([0, 1, 1], dtype=np.int64)
    x = np.ones((2, 2), dtype=np.float32)
    out = np.empty_like(x)
    one = np.ones(2, dtype=np.float32)
    rows = np.array([0], dtype=np.int64)
    for dtype in index_dtypes:
        idx = np.array([1], dtype=dtype)
        for weighted in weights:
            w = np.ones(1, np.float32) if weighted else None
            spmm_rows(ip, idx, w, 0, one, one, 1.0, x, out)
            if selected:
                spmm_listed(ip, idx, w, 0, rows, one, one, 1.0, x, out)
                spmm_sub(ip[:2], idx, w, rows, rows, one, one, 1.0, x, out[:1])
                spmm_selected(ip, idx, w, rows, one, one, 1.0, x, out[:1])
                spmm_rows_in_place(ip, idx, w, rows, one, one, 1.0, x, out)
    if hag:  # int64 ids as read (the torch path's), int32 as relabelled (gnnprep.hag.order.in_order)
        h = np.ones((1, 2), np.float32)
        y = np.ones((3, 2), np.float32)   # [x; h] as one array, and r extended by ones
        for ids in (np.int64, np.int32):
            hag_rows(ip, np.array([2], dtype=ids), 0, one, one, 1.0, x, h, out)
            hag_rows_joined(ip, np.array([2], dtype=ids), 0, one, np.ones(3, np.float32), 1.0, y, out)
            if selected:
                hag_selected(ip, np.array([2], dtype=ids), rows, one, one, 1.0, x, h, out[:1])
                hag_rows_in_place(ip, np.array([2], dtype=ids), rows, one, one, 1.0, x, h, out)
