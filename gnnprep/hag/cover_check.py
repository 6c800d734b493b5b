"""Checking a HAG against the graph it is applied to: cover(v) = N(v) for every v (issue 32).

Jia et al., "Redundancy-Free Computation for Graph Neural Networks" (KDD 2020): a HAG is equivalent
to the graph iff every node's cover (its in-list N̂(v) expanded through the aggregation nodes) is
its neighbour multiset N(v). A file built for another graph, or edited, must not be applied: this
checks it in O(|Ê| + |VA|) with a salted multiset hash, numba kernels (kept apart from
:mod:`gnnprep.hag.structure`, so reading a HAG does not import numba).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit, prange

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.structure import Hag

if TYPE_CHECKING:
    from gnnprep.graph.store import GraphStore


# -- checking cover(v) = N(v) against a graph, in O(|Ê| + |VA|) (issue 32) ---------------------------------
# A multiset hash: leaf u ↦ mix(u ⊕ salt) (splitmix64's finaliser, uint64 wrap-around); a cover's hash
# is the sum of its leaves', so an aggregation node's is the sum of its two inputs' and cover(v)'s is
# the sum over N̂(v). With |cover(v)| = deg(v) and equal hashes, the multisets are equal but for a
# 2⁻⁶⁴-ish collision; the salt is drawn per check, so a file cannot be made to collide in advance.
@njit(inline="always")
def _leaf(u, salt):
    z = np.uint64(u) ^ salt
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def _cover(x, n, salt, count, hsum):
    """(|cover(x)|, its hash) of an input x: a graph node (one leaf) or an aggregation node."""
    if x < n:
        return 1, _leaf(x, salt)
    return count[x - n], hsum[x - n]


@njit(nogil=True, cache=True)
def _agg_covers(n, inputs, salt, count, hsum):
    """|cover(a)| and the hash of cover(a) for every aggregation node, bottom-up (topological ids)."""
    for i in range(len(inputs)):
        c0, s0 = _cover(inputs[i, 0], n, salt, count, hsum)
        c1, s1 = _cover(inputs[i, 1], n, salt, count, hsum)
        count[i] = c0 + c1
        hsum[i] = s0 + s1


@njit(parallel=True, nogil=True, cache=True)
def _row_covers(indptr, indices, n, count, hsum, salt, r0, out_c, out_s):
    """|cover(v)| and its hash for rows v = r0 .. r0 + len(out_c) - 1 of the HAG."""
    for i in prange(len(out_c)):
        v = r0 + i
        c = 0
        s = np.uint64(0)
        for p in range(indptr[v], indptr[v + 1]):
            cx, sx = _cover(indices[p], n, salt, count, hsum)
            c += cx
            s += sx
        out_c[i] = c
        out_s[i] = s


@njit(parallel=True, nogil=True, cache=True)
def _row_leaves(ip, idx, salt, out_s):
    """The hash of each graph row of a CSR block (``ip`` absolute, ``idx`` from ip[0] on)."""
    base = ip[0]
    for i in prange(len(ip) - 1):
        s = np.uint64(0)
        for p in range(ip[i] - base, ip[i + 1] - base):
            s += _leaf(idx[p], salt)
        out_s[i] = s


@njit(parallel=True, nogil=True, cache=True)
def _row_leaves_through(ip, idx, inv, salt, out_s):
    """:func:`_row_leaves` with each id u read as inv[u] (no relabelled copy of the block's ids)."""
    base = ip[0]
    for i in prange(len(ip) - 1):
        s = np.uint64(0)
        for p in range(ip[i] - base, ip[i + 1] - base):
            s += _leaf(inv[idx[p]], salt)
        out_s[i] = s


class CoverCheck:
    """cover(v) of a HAG, row block by row block, as (count, hash) to compare with a graph's rows
    (:meth:`mismatch`); the aggregation nodes' counts and hashes are computed once, bottom-up."""

    def __init__(self, h: Hag, salt: int | None = None):
        import os

        self.h = h
        self.salt = np.uint64(int.from_bytes(os.urandom(8), "little") if salt is None else salt)
        self.count = np.empty(h.num_agg, dtype=np.int64)
        self.hsum = np.empty(h.num_agg, dtype=np.uint64)
        _agg_covers(h.num_nodes, h.inputs, self.salt, self.count, self.hsum)

    def mismatch(self, r0: int, ip: np.ndarray, idx: np.ndarray) -> tuple[int, int, int] | None:
        """The first row v of the graph block (rows r0.., pointers ``ip`` absolute, ids ``idx``)
        whose cover differs, as (v, |cover(v)|, deg(v)); None when every row matches."""
        rows = len(ip) - 1
        c = np.empty(rows, dtype=np.int64)
        hs = np.empty(rows, dtype=np.uint64)
        gs = np.empty(rows, dtype=np.uint64)
        _row_covers(self.h.indptr, self.h.indices, self.h.num_nodes, self.count, self.hsum, self.salt, r0, c, hs)
        _row_leaves(ip, idx, self.salt, gs)
        deg = np.diff(ip)
        bad = np.flatnonzero((c != deg) | (hs != gs))
        if not len(bad):
            return None
        i = int(bad[0])
        return r0 + i, int(c[i]), int(deg[i])

    def relabelled_mismatch(self, inv: np.ndarray, r0: int, ip: np.ndarray, idx: np.ndarray,
                            rows: tuple[np.ndarray, np.ndarray]) -> tuple[int, int, int] | None:
        """:meth:`mismatch` for a HAG relabelled to a node order (:func:`gnnprep.hag.order.in_order`;
        ``inv`` maps a stored id to its computation row): stored row v of the graph block (ids
        ``idx``) must be covered by the HAG's row inv[v] in computation ids, cover'(inv[v]) =
        inv[N(v)]. ``rows``: (|cover|, hash) of every HAG row, from :meth:`all_rows`."""
        count, hs = rows
        gs = np.empty(len(ip) - 1, dtype=np.uint64)
        _row_leaves_through(ip, idx, inv, self.salt, gs)
        at = inv[r0:r0 + len(ip) - 1]
        deg = np.diff(ip)
        bad = np.flatnonzero((count[at] != deg) | (hs[at] != gs))
        if not len(bad):
            return None
        i = int(bad[0])
        return r0 + i, int(count[at[i]]), int(deg[i])

    def all_rows(self, read=None, block_entries: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(|cover(v)|, the hash of cover(v)) of every row of the HAG; with ``read(p0, p1)`` its
        in-lists are read a block of rows at a time (a HAG not held: :class:`gnnprep.hag.file.HagRows`)."""
        from gnnprep.sparse.order import row_blocks

        n = self.h.num_nodes
        c = np.empty(n, dtype=np.int64)
        hs = np.empty(n, dtype=np.uint64)
        if read is None:
            _row_covers(self.h.indptr, self.h.indices, n, self.count, self.hsum, self.salt, 0, c, hs)
            return c, hs
        for r0, r1 in row_blocks(self.h.indptr, 0, n, max(1, block_entries or CHECK_ENTRIES)):
            ip = self.h.indptr[r0:r1 + 1]
            _row_covers(ip - ip[0], read(int(ip[0]), int(ip[-1])), n, self.count, self.hsum, self.salt, 0, c[r0:r1],
                        hs[r0:r1])
        return c, hs


CHECK_ENTRIES = 1 << 22  # stored entries read at a time while a HAG is checked against the graph


def check_covers(h: Hag, store: GraphStore, path, block_entries: int = CHECK_ENTRIES,
                 inv: np.ndarray | None = None, read=None) -> None:
    """GnnprepError naming the first row v where cover(v) ≠ N(v) (Jia et al.'s equivalence), checked
    as |cover(v)| = deg(v) and a salted multiset hash per row (:class:`gnnprep.hag.cover_check.CoverCheck`):
    O(|Ê| + |VA|) over the HAG, one pass over the stored ids in row blocks of ``block_entries``
    (never all of S in memory). ``inv``: ``h`` is relabelled to a node order (stored id v is its
    row inv[v]), and cover(inv[v]) = inv[N(v)] is checked instead; ``read(p0, p1)``: ``h``'s
    in-lists are not held but read a block at a time (with ``inv``)."""
    from gnnprep.sparse.order import row_blocks

    if len(h.indptr) != store.num_nodes + 1:
        raise GnnprepError(f"{path}: /adj/indptr has {len(h.indptr)} entries; expected {store.num_nodes + 1}, one per "
                           f"node of {store.path} and one more")
    check = CoverCheck(h)
    rows = check.all_rows(read) if inv is not None else None
    indptr = store.indptr()
    blocks = row_blocks(indptr, 0, store.num_nodes, max(1, block_entries))
    longest = max((int(indptr[r1] - indptr[r0]) for r0, r1 in blocks), default=0)
    buf = np.empty(longest, dtype=store.index_dtype)
    for r0, r1 in blocks:
        idx = store.read_indices(int(indptr[r0]), int(indptr[r1]), buf)
        ip = indptr[r0:r1 + 1]
        bad = check.mismatch(r0, ip, idx) if inv is None else check.relabelled_mismatch(inv, r0, ip, idx, rows)
        if bad is not None:
            v, got, deg = bad
            what = f"{got} nodes; expected its {deg} neighbours" if got != deg else \
                f"{got} nodes, not the {deg} neighbours it has"
            raise GnnprepError(f"{path}: node {v}'s in-list covers {what} in {store.path} (cover(v) = N(v) fails: "
                               "the HAG was built for another graph, or edited)")
