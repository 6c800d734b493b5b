"""Hierarchically aggregated computation graphs (HAG), Jia et al., "Redundancy-Free Computation
Graphs for Graph Neural Networks" (KDD 2020).

Neighbour sets overlap, so Σ_{u∈N(v)} h_u recomputes the same partial sums for many v. A HAG adds
aggregation nodes VA, each the sum of exactly two inputs, and rewires every destination v to an
in-list N̂(v) over V ∪ VA whose *cover* is N(v):

    cover(x) = {x}                          for x ∈ V
    cover(a) = cover(in₀(a)) ⊎ cover(in₁(a))  for a ∈ VA
    equivalent  ⇔  ⊎_{x∈N̂(v)} cover(x) = N(v)  for every v ∈ V   (multisets, set aggregation)

Cost (binary aggregations) = Σ_{v∈V∪VA} (|N̂(v)| − 1); transfers = |Ê| = Σ_{v∈V∪VA} |N̂(v)|.
Because S = diag(l)(A + λI)diag(r) factorises, S·X = diag(l)(Â·(diag(r)X) + λ·diag(r)X) runs on the
HAG exactly: :func:`execute` computes the aggregation nodes level by level, then one sparse product
over the rewired in-lists.

Ids: 0..n−1 are graph nodes, n+i is aggregation node i; aggregation nodes are numbered by level
(1 + the max level of their inputs; graph nodes are level 0), so both inputs of n+i are < n+i.

This module holds the structure, its cost and :func:`execute`; the searches are in
:mod:`gnnprep.hag.search`, the ``hag.h5`` format in :mod:`gnnprep.hag.file` and
:func:`gnnprep.hag.builder.build` (search, measure, write under a ``HagConfig``: what ``gnnprep hag``
and ``precompute --hag auto`` run) in :mod:`gnnprep.hag.builder`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Hag:
    num_nodes: int
    inputs: np.ndarray      # [|VA|, 2] int64, topological (sorted by level)
    level_ptr: np.ndarray   # [L+1]: level l holds aggregation nodes level_ptr[l] .. level_ptr[l+1]-1
    indptr: np.ndarray      # [n+1] rewired in-lists of the graph nodes
    indices: np.ndarray     # ids in V ∪ VA

    @property
    def num_agg(self) -> int:
        return len(self.inputs)

    def aggregations(self) -> int:
        deg = np.diff(self.indptr)
        return int(np.maximum(deg - 1, 0).sum()) + self.num_agg

    def transfers(self) -> int:
        return int(len(self.indices)) + 2 * self.num_agg


def graph_cost(indptr: np.ndarray) -> tuple[int, int]:
    """(aggregations, transfers) of plain neighbour aggregation over a CSR."""
    deg = np.diff(indptr)
    return int(np.maximum(deg - 1, 0).sum()), int(indptr[-1])


def covers(h: Hag, ordered: bool = False) -> list[np.ndarray]:
    """cover(v) for every graph node: sorted arrays (multisets), or with ``ordered`` the sequences
    (concatenation in input order, for sequential aggregation) — for checking equivalence."""
    n = h.num_nodes
    finish = (lambda a: a) if ordered else np.sort
    memo: list[np.ndarray | None] = [None] * h.num_agg
    for i, (a, b) in enumerate(h.inputs):  # topological order: inputs are already known
        parts = [np.array([x]) if x < n else memo[x - n] for x in (int(a), int(b))]
        memo[i] = finish(np.concatenate(parts))
    out = []
    for v in range(n):
        row = h.indices[h.indptr[v]:h.indptr[v + 1]]
        parts = [np.array([x]) if x < n else memo[x - n] for x in row.tolist()]
        out.append(finish(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64))
    return out


def number_by_level(n: int, inputs: np.ndarray, agg_level: np.ndarray, ordered: bool = False):
    """Renumber aggregation nodes by level (stable): (id map over V ∪ VA, their [|VA|, 2] inputs in
    new ids — each pair sorted unless ``ordered`` — and level_ptr, where level_ptr[l] ..
    level_ptr[l+1]−1 are the aggregation nodes of level l+1; graph nodes are level 0)."""
    na = len(inputs)
    order = np.argsort(agg_level, kind="stable")
    new_id = np.arange(n + na, dtype=np.int64)
    new_id[n + order] = n + np.arange(na)
    ins = new_id[inputs[order]] if na else inputs.reshape(-1, 2)
    if not ordered:
        ins.sort(axis=1)
    levels = int(agg_level.max()) if na else 0
    level_ptr = np.concatenate([[0], np.cumsum(np.bincount(agg_level, minlength=levels + 1)[1:])]).astype(np.int64)
    return new_id, ins, level_ptr


SORT_ITEMS = 1 << 20  # entries one numpy sort call takes in order_by_rows (a signal is acted on between calls)
MAX_RUNS = 64         # ascending runs of dst order_by_rows takes block by block (more: one sort)


def order_by_rows(dst: np.ndarray, src: np.ndarray, rowptr: np.ndarray, rank: np.ndarray | None = None,
                  items: int | None = None) -> np.ndarray:
    """The permutation that sorts entries by (dst, rank[src]) (rank None: by (dst, src)), stable —
    ``np.lexsort((rank[src], dst))`` — in blocks of rows of about ``items`` (default
    :data:`SORT_ITEMS`) entries each, so no numpy call sorts all m entries at once. ``rowptr``: the
    rows' entry counts as a CSR pointer (``cumsum(bincount(dst))``). ``dst`` is made of a few
    ascending runs (the HAG search keeps it so: sorted, then rewired entries appended in row
    order); each block takes its rows' slice of every run and sorts only those. With more than
    :data:`MAX_RUNS` runs it sorts in one call."""
    items = SORT_ITEMS if items is None else items
    m = len(dst)

    def key(idx):
        return src[idx] if rank is None else rank[src[idx]]

    breaks = np.flatnonzero(dst[1:] < dst[:-1]) + 1
    if len(breaks) > MAX_RUNS:
        every = np.arange(m)
        return np.lexsort((key(every), dst))
    runs = np.concatenate([[0], breaks, [m]]).astype(np.int64)
    rows = len(rowptr) - 1
    cuts = np.unique(np.concatenate([[0], np.searchsorted(rowptr, np.arange(items, m, items), side="left"), [rows]]))
    order = np.empty(m, dtype=np.int64)
    out = 0
    for r0, r1 in zip(cuts[:-1], cuts[1:]):
        parts = []
        for a, b in zip(runs[:-1], runs[1:]):
            lo, hi = a + np.searchsorted(dst[a:b], [r0, r1], side="left")
            if hi > lo:
                parts.append(np.arange(lo, hi, dtype=np.int64))
        if not parts:
            continue
        idx = parts[0] if len(parts) == 1 else np.concatenate(parts)
        idx = idx[np.lexsort((key(idx), dst[idx]))]
        order[out:out + len(idx)] = idx
        out += len(idx)
    return order


def finish_csr(n: int, dst: np.ndarray, src: np.ndarray, inputs: np.ndarray, agg_level: np.ndarray) -> Hag:
    """:func:`finish_lists` for in-lists given as (destination, source) arrays and aggregation nodes as an
    [|VA|, 2] array with their levels: vectorised, no Python lists (a million in-lists or input
    pairs as Python ints would cost far more memory than the arrays)."""
    new_id, ins, level_ptr = number_by_level(n, inputs, agg_level)
    src = new_id[src]
    del new_id
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    order = order_by_rows(dst, src, indptr)
    return Hag(n, ins, level_ptr, indptr, src[order])


def finish_lists(n: int, lists: list[list[int]], inputs: list[tuple[int, int]], ordered: bool = False) -> Hag:
    """Number aggregation nodes by level (stable), rewrite ids, pack in-lists as CSR (kept in
    order with ``ordered``, else sorted)."""
    na = len(inputs)
    level = np.zeros(n + na, dtype=np.int64)
    for i, (a, b) in enumerate(inputs):
        level[n + i] = 1 + max(level[a], level[b])
    new_id, ins, level_ptr = number_by_level(n, np.array(inputs, dtype=np.int64).reshape(-1, 2), level[n:], ordered)
    arrange = (lambda a: a) if ordered else np.sort
    rows = [arrange(new_id[np.asarray(l, dtype=np.int64)]) if l else np.empty(0, np.int64) for l in lists]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    return Hag(n, ins, level_ptr, indptr, indices.astype(np.int64))


def execute(h: Hag, x: np.ndarray) -> np.ndarray:
    """Â·x through the HAG: aggregation nodes level by level, then one sparse product."""
    import scipy.sparse as sp  # (here: a run that only reads a HAG need not import scipy, ~80 ms)

    n, d = x.shape
    hbuf = np.empty((n + h.num_agg, d), dtype=x.dtype)
    hbuf[:n] = x
    for l in range(len(h.level_ptr) - 1):
        a0, a1 = int(h.level_ptr[l]), int(h.level_ptr[l + 1])
        ins = h.inputs[a0:a1]
        np.add(hbuf[ins[:, 0]], hbuf[ins[:, 1]], out=hbuf[n + a0:n + a1])
    a = sp.csr_matrix((np.ones(len(h.indices), dtype=x.dtype), h.indices, h.indptr), shape=(n, n + h.num_agg))
    return a @ hbuf
