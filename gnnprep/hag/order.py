"""A HAG in the computation's node order, and the graph rows a pruned hop reads through it.

A hop gathers one row of X per stored entry; in arbitrary ids those gathers miss the cache, and a
node order that groups neighbours (the community order precompute uses, :mod:`gnnprep.precompute.order_setup`)
makes them hits. A HAG (Jia et al., KDD 2020) only changes *which* rows are summed, so it runs in
the same order: with ``order[i]`` the stored id of computation row i and ``inv`` its inverse,

    N̂'(i) = { inv[u] : u ∈ N̂(order[i]) ∩ V } ∪ { σ(a) : a ∈ N̂(order[i]) ∩ VA },

where σ renumbers the aggregation nodes *within each level* (so both inputs of an aggregation node
still come before it) by the first computation row that reads them, directly or through a higher
aggregation node: the aggregation rows a row block reads, and the rows they are built from, are
then near each other too. Within each in-list the graph ids come first and the aggregation ids
last (each in their stored order): the row kernel's test "graph row or aggregation row?" is then
one switch per row, not a branch mispredicted at random (with the order and this, the ego graph's
hop went from 0.99x to 1.16x of the plain one). cover'(i) = inv[cover(order[i])], so the HAG stays
equivalent to the relabelled graph (the sums are regrouped: equal to float tolerance). :func:`in_order`
builds it in O(|Ê| + |VA|) with no copy of S.

:func:`rows_read` gives the graph rows that a set of rows' in-lists cover, ∪_v cover(v) (plus the
rows themselves, for the self-loop term): what the last hop of ``--rows labeled`` reads, so that
the hop before it computes only those (as the plain hops do, :mod:`gnnprep.precompute.pruned`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.structure import Hag


@njit(nogil=True, cache=True)
def _first_reader(indptr, indices, order, n, num_agg):
    """key[a] = the first computation row whose in-list holds aggregation node a (n when none)."""
    key = np.full(num_agg, n, dtype=np.int64)
    for i in range(n):
        v = order[i]
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if u >= n and i < key[u - n]:
                key[u - n] = i
    return key


@njit(nogil=True, cache=True)
def _down_levels(inputs, level_ptr, key, n):
    """Aggregation nodes read only through higher ones inherit their readers' first row (top level
    down: a node's readers are all in higher levels)."""
    for lv in range(len(level_ptr) - 2, -1, -1):
        for a in range(level_ptr[lv], level_ptr[lv + 1]):
            for s in range(2):
                x = inputs[a, s]
                if x >= n and key[a] < key[x - n]:
                    key[x - n] = key[a]


@njit(parallel=True, nogil=True, cache=True)
def _rewrite(indptr, indices, order, inv, agg_new, n, out_indptr, out_indices):
    """The in-lists in computation order (``out_indptr`` given): row i = stored row order[i], graph
    ids through ``inv`` first, then the aggregation ids through ``agg_new``, each in their stored
    order. (Sorting each row's graph ids cost 25-70% of the relabelling — ego 0.16 s against 0.07 s,
    cliques64 at 32M entries 0.50 s against 0.38 s — and bought 0-2.6% of a hop, 2 cores.)"""
    for i in prange(n):
        v = order[i]
        q = out_indptr[i]
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if u < n:
                out_indices[q] = inv[u]
                q += 1
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if u >= n:
                out_indices[q] = n + agg_new[u - n]
                q += 1


@njit(nogil=True, cache=True)
def _rewrite_inputs(inputs, inv, agg_new, n, out):
    for a in range(inputs.shape[0]):
        b = agg_new[a]
        for s in range(2):
            x = inputs[a, s]
            out[b, s] = inv[x] if x < n else n + agg_new[x - n]


def _numbering(inputs: np.ndarray, level_ptr: np.ndarray, key: np.ndarray, n: int) -> np.ndarray:
    """σ: the aggregation nodes' new ids (− n), within each level by first reader (``key``: the first
    computation row reading each directly; consumed), readers through higher levels included."""
    _down_levels(inputs, level_ptr, key, n)
    agg_new = np.empty(len(key), dtype=np.int64)
    for lv in range(len(level_ptr) - 1):
        a0, a1 = int(level_ptr[lv]), int(level_ptr[lv + 1])
        agg_new[a0 + np.argsort(key[a0:a1], kind="stable")] = np.arange(a0, a1, dtype=np.int64)
    return agg_new


def in_order(h: Hag, order: np.ndarray, inv: np.ndarray | None = None) -> Hag:
    """``h`` in the computation order ``order`` (computation row i = stored row order[i]; ``inv`` its
    inverse, computed when not given); aggregation nodes renumbered within each level by their first
    reader (the module docstring). Same aggregation count, same levels, equivalent to the graph
    relabelled by ``order``; ids int32 where |V| + |VA| < 2^31 (the HAG as read is int64)."""
    n = h.num_nodes
    order = np.ascontiguousarray(order, dtype=np.int64)
    if inv is None:
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.arange(n, dtype=np.int64)
    num_agg = h.num_agg
    level_ptr = np.ascontiguousarray(h.level_ptr, dtype=np.int64)
    key = _first_reader(h.indptr, h.indices, order, n, num_agg)
    agg_new = _numbering(h.inputs, level_ptr, key, n)
    del key
    ids = np.int32 if n + num_agg < 2**31 else np.int64  # half the bytes the kernels read, and hold
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.diff(h.indptr)[order], out=indptr[1:])
    indices = np.empty(len(h.indices), dtype=ids)
    _rewrite(h.indptr, h.indices, order, np.asarray(inv, dtype=np.int64), agg_new, n, indptr, indices)
    inputs = np.empty((num_agg, 2), dtype=ids)
    _rewrite_inputs(h.inputs, np.asarray(inv, dtype=np.int64), agg_new, n, inputs)
    return Hag(num_nodes=n, inputs=inputs, level_ptr=level_ptr, indptr=indptr, indices=indices)


# -- the same out of core: the HAG's in-lists read in row blocks, the relabelled ones written in buckets
RELABEL_ROOM = 256 << 20      # bytes of a streamed relabelling's read block and output bucket together
# Seconds of a relabelling, per stored entry of the HAG: in memory (in_order and the copy written; 8M-entry
# graphs 0.15-0.25 s), and out of core per pass over the in-lists (one for the first readers, one per
# bucket: each reads the int32 in-lists from the page cache and scatters the bucket's rows; papers100M's
# shape at 1/10, 304M entries, 2 GiB: 5 passes in ~9.5 s, 2-core VM, 2026-11-27).
IN_MEMORY_NS_PER_ENTRY = 25.0
STREAMED_NS_PER_ENTRY_PASS = 6.0


def keeps_in_memory(n: int, transfers: int, num_agg: int, budget: int) -> bool:
    """Whether ``gnnprep hag`` relabels the HAG it wrote in memory under ``budget`` (else out of core)."""
    return 1.25 * (in_order_bytes(n, transfers, num_agg) + (64 << 20)) <= budget


def streamed_passes(entries: int, room: int) -> int:
    """Passes :func:`write_in_order` makes over ``entries`` in-list entries with ``room``: one, and
    one per bucket of room / 8 int32 ids."""
    return 1 + max(1, -(-4 * entries // max(1, room // 2)))


def relabel_seconds(n: int, transfers: int, num_agg: int, budget: int) -> float:
    """Predicted seconds (2-core reference machine) of keeping a HAG of ``transfers`` relabelled to
    the node order, as ``gnnprep hag`` does after its search: in memory where that fits ``budget``
    (:func:`keeps_in_memory`), else out of core (:func:`write_in_order`, :func:`streamed_passes`)."""
    if keeps_in_memory(n, transfers, num_agg, budget):
        return transfers * IN_MEMORY_NS_PER_ENTRY * 1e-9
    return transfers * streamed_passes(transfers, relabel_room(budget, n, num_agg)) * STREAMED_NS_PER_ENTRY_PASS * 1e-9


def in_order_bytes(n: int, transfers: int, num_agg: int) -> int:
    """What :func:`in_order` holds, the HAG read whole (int64) and relabelled (int32 ids): 12 bytes a
    transfer (an in-list entry, or an input of an aggregation node), ~40 a node (the row pointers,
    the order and its inverse) and ~56 an aggregation node."""
    return 12 * transfers + 40 * n + 56 * num_agg


def relabel_room(budget: int, n: int, num_agg: int) -> int:
    """The room a streamed relabelling under ``budget`` bytes gets: half the budget less what it holds
    besides (:func:`streamed_bytes`), between 16 MiB and 4 GiB (fewer buckets, fewer passes)."""
    return int(max(16 << 20, min(4 << 30, budget // 2 - streamed_bytes(n, num_agg, 0))))


def streamed_bytes(n: int, num_agg: int, room: int = RELABEL_ROOM) -> int:
    """What :func:`write_in_order` holds: the stored and the new row pointers, the order and its
    inverse (32 bytes a node), the first readers, σ and the inputs as read and rewritten (48 bytes an
    aggregation node), and ``room`` for a block of in-lists read and a bucket of them relabelled."""
    return 32 * (n + 1) + 48 * num_agg + room


@njit(nogil=True, cache=True)
def _first_reader_rows(ip, idx, r0, inv, n, key):
    """:func:`_first_reader` over stored rows r0, r0+1, ... (``ip``: their pointer into the HAG's
    in-lists, ``idx`` those from entry ip[0] on): key[a] = the least computation row inv[v] reading a."""
    base = ip[0]
    for j in range(len(ip) - 1):
        i = inv[r0 + j]
        for p in range(ip[j] - base, ip[j + 1] - base):
            u = idx[p]
            if u >= n and i < key[u - n]:
                key[u - n] = i


@njit(parallel=True, nogil=True, cache=True)
def _scatter_rows(ip, idx, r0, inv, agg_new, n, new_indptr, t0, t1, out):
    """:func:`_rewrite` for those of the stored rows r0, r0+1, ... whose computation row inv[v] lies
    in [t0, t1): each written at new_indptr[inv[v]] − new_indptr[t0] of ``out`` (that bucket)."""
    base = ip[0]
    q0 = new_indptr[t0]
    for j in prange(len(ip) - 1):
        i = inv[r0 + j]
        if i < t0 or i >= t1:
            continue
        q = new_indptr[i] - q0
        for p in range(ip[j] - base, ip[j + 1] - base):
            u = idx[p]
            if u < n:
                out[q] = inv[u]
                q += 1
        for p in range(ip[j] - base, ip[j + 1] - base):
            u = idx[p]
            if u >= n:
                out[q] = n + agg_new[u - n]
                q += 1


def write_in_order(hag_path, out_path, order: np.ndarray, inv: np.ndarray, attrs: dict, room: int = RELABEL_ROOM,
                   inputs=(), progress=None) -> int:
    """:func:`in_order` of the HAG file at ``hag_path`` written to ``out_path`` (atomically, in the
    layout :func:`gnnprep.hag.file.write_relabelled` writes, ``attrs`` at its root) without holding
    either: :func:`streamed_bytes` with ``room``. One pass over the HAG's in-lists finds each
    aggregation node's first reader, then one pass per bucket of computation rows (as many rows as
    ``room`` holds) scatters the relabelled in-lists of the stored rows it reads into the bucket,
    written as it fills; the same arrays, byte for byte, as :func:`in_order`. The HAG's arrays are
    checked as :func:`gnnprep.hag.file.check_hag` checks them, its in-lists a block at a time; its
    covers are the reader's to check. Returns the passes made over the in-lists."""
    from gnnprep.hag.file import HagRows, write_relabelled_rows
    from gnnprep.sparse.order import row_blocks

    progress = progress or (lambda *a: None)
    inv = np.ascontiguousarray(inv, dtype=np.int64)
    with HagRows(hag_path) as hag:
        n, ins, level_ptr, indptr, read_ids = hag.num_nodes, hag.inputs, hag.level_ptr, hag.indptr, hag.read
        num_agg, m = len(ins), int(indptr[-1])
        if len(inv) != n:
            raise GnnprepError(f"{hag_path}: a HAG of {n:,} nodes; the node order has {len(inv):,}")
        blocks = row_blocks(indptr, 0, n, max(1, room // 16))   # (ids read as stored: int32, or int64)
        key = np.full(num_agg, n, dtype=np.int64)
        for r0, r1 in blocks:
            _first_reader_rows(indptr[r0:r1 + 1], read_ids(int(indptr[r0]), int(indptr[r1])), r0, inv, n, key)
            progress("hag relabel", int(indptr[r1]), 2 * m)
        agg_new = _numbering(ins, level_ptr, key, n)
        del key
        ids = np.int32 if n + num_agg < 2**31 else np.int64
        new_indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.diff(indptr)[np.asarray(order, dtype=np.int64)], out=new_indptr[1:])
        new_inputs = np.empty((num_agg, 2), dtype=ids)
        _rewrite_inputs(ins, inv, agg_new, n, new_inputs)
        buckets = row_blocks(new_indptr, 0, n, max(1, room // (2 * np.dtype(ids).itemsize)))

        def pieces():
            for t0, t1 in buckets:
                q0, q1 = int(new_indptr[t0]), int(new_indptr[t1])
                bucket = np.empty(q1 - q0, dtype=ids)
                for r0, r1 in blocks:
                    _scatter_rows(indptr[r0:r1 + 1], read_ids(int(indptr[r0]), int(indptr[r1])), r0, inv, agg_new, n,
                                  new_indptr, t0, t1, bucket)
                yield q0, bucket
                progress("hag relabel", m + q1, 2 * m)

        write_relabelled_rows(out_path, new_inputs, level_ptr, new_indptr, m, ids, pieces(), attrs, inputs)
    return 1 + len(buckets)


@njit(nogil=True, cache=True)
def _mark_reads(indptr, indices, inputs, level_ptr, rows, n, mark):
    used = np.zeros(inputs.shape[0], dtype=np.bool_)
    for v in rows:
        mark[v] = True
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if u < n:
                mark[u] = True
            else:
                used[u - n] = True
    _mark_inputs(inputs, level_ptr, n, used, mark)


@njit(nogil=True, cache=True)
def _mark_ids(ids, n, used, mark):
    for u in ids:
        if u < n:
            mark[u] = True
        else:
            used[u - n] = True


@njit(nogil=True, cache=True)
def _mark_inputs(inputs, level_ptr, n, used, mark):
    """The graph rows the used aggregation nodes are built from, top level down."""
    for lv in range(len(level_ptr) - 2, -1, -1):
        for a in range(level_ptr[lv], level_ptr[lv + 1]):
            if used[a]:
                for s in range(2):
                    x = inputs[a, s]
                    if x < n:
                        mark[x] = True
                    else:
                        used[x - n] = True


def rows_read_listed(n: int, inputs: np.ndarray, level_ptr: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """:func:`rows_read` where ``ids`` are the in-list entries of ``rows`` (extracted from streamed
    in-lists), ``inputs`` and ``level_ptr`` the HAG's."""
    mark = np.zeros(n, dtype=np.bool_)
    mark[np.asarray(rows, dtype=np.int64)] = True
    used = np.zeros(len(inputs), dtype=np.bool_)
    _mark_ids(ids, n, used, mark)
    _mark_inputs(inputs, np.asarray(level_ptr, dtype=np.int64), n, used, mark)
    return np.flatnonzero(mark)


def rows_read(h: Hag, rows: np.ndarray) -> np.ndarray:
    """The graph rows (sorted) that computing ``rows`` through ``h`` reads: the rows themselves and
    ∪_{v ∈ rows} cover(v) = ∪ N(v), found through the aggregation nodes' inputs, top level down."""
    mark = np.zeros(h.num_nodes, dtype=np.bool_)
    _mark_reads(h.indptr, h.indices, h.inputs, np.asarray(h.level_ptr, dtype=np.int64),
                np.asarray(rows, dtype=np.int64), h.num_nodes, mark)
    return np.flatnonzero(mark)
