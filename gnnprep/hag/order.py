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
    _down_levels(h.inputs, level_ptr, key, n)
    agg_new = np.empty(num_agg, dtype=np.int64)
    for lv in range(len(level_ptr) - 1):
        a0, a1 = int(level_ptr[lv]), int(level_ptr[lv + 1])
        agg_new[a0 + np.argsort(key[a0:a1], kind="stable")] = np.arange(a0, a1, dtype=np.int64)
    del key
    ids = np.int32 if n + num_agg < 2**31 else np.int64  # half the bytes the kernels read, and hold
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.diff(h.indptr)[order], out=indptr[1:])
    indices = np.empty(len(h.indices), dtype=ids)
    _rewrite(h.indptr, h.indices, order, np.asarray(inv, dtype=np.int64), agg_new, n, indptr, indices)
    inputs = np.empty((num_agg, 2), dtype=ids)
    _rewrite_inputs(h.inputs, np.asarray(inv, dtype=np.int64), agg_new, n, inputs)
    return Hag(num_nodes=n, inputs=inputs, level_ptr=level_ptr, indptr=indptr, indices=indices)


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
    for lv in range(len(level_ptr) - 2, -1, -1):
        for a in range(level_ptr[lv], level_ptr[lv + 1]):
            if used[a]:
                for s in range(2):
                    x = inputs[a, s]
                    if x < n:
                        mark[x] = True
                    else:
                        used[x - n] = True


def rows_read(h: Hag, rows: np.ndarray) -> np.ndarray:
    """The graph rows (sorted) that computing ``rows`` through ``h`` reads: the rows themselves and
    ∪_{v ∈ rows} cover(v) = ∪ N(v), found through the aggregation nodes' inputs, top level down."""
    mark = np.zeros(h.num_nodes, dtype=np.bool_)
    _mark_reads(h.indptr, h.indices, h.inputs, np.asarray(h.level_ptr, dtype=np.int64),
                np.asarray(rows, dtype=np.int64), h.num_nodes, mark)
    return np.flatnonzero(mark)
