"""Checking a HAG against the graph it is applied to: cover(v) = N(v) for every v (issue 32).

Jia et al., "Redundancy-Free Computation for Graph Neural Networks" (KDD 2020): a HAG is equivalent
to the graph iff every node's cover (its in-list N̂(v) expanded through the aggregation nodes) is
its neighbour multiset N(v). A file built for another graph, or edited, must not be applied: this
checks it in O(|Ê| + |VA|) with a salted multiset hash, numba kernels (kept apart from
:mod:`gnnprep.hag.structure`, so reading a HAG does not import numba).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gnnprep.hag.structure import Hag


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
