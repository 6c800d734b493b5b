"""Random walks with restart over the graph store's CSR, counting visits (PinSage importance).

Ying et al., "Graph Convolutional Neural Networks for Web-Scale Recommender Systems" (PinSage, KDD
2018): the neighbourhood of v is the top-k nodes by visit count of short random walks started at v,
and the normalised counts weight its pooling. From every start node v, ``walks`` walks of ``length``
steps each; one step from node c is

    with probability ``restart``            → back to v
    else, if c has in-neighbours            → u ~ Uniform(N(c))   (N(c): row c of the CSR, the
                                                                    sources c aggregates from)
    else (dead end)                         → back to v

Every step that lands on a node u ≠ v is one visit of u; visits(v, u) counts them. The kernel keeps
the ``topk`` nodes with the most visits (ties: smaller id first).

Reproducibility: step t (t = w·length + step + 1, one draw per step, restarts included) of start v
uses the t-th output of v's own splitmix64 stream, ``mix(base_v + t·φ)`` with ``base_v =
mix(seed ⊕ mix(v + φ))``, so the result does not depend on the thread count, on how start nodes are
split among threads, or on the order in which walkers advance.

Speed: the walkers of a chunk of start nodes advance together, one step at a time, so that their
independent cache misses overlap; ``scripts/bench_walks.py`` (1M nodes, 10M entries, 10 walks of
5 steps, restart 0.2) measured about 14-15M visits/s per core on 2 cores (target ≥ 2M).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_CHUNK = 256  # start nodes per parallel work item (at most; one visit buffer of ≤ 8 MiB per item)


@njit(inline="always")
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True)
def _count_topk(vis, topk, uniq, counts, out_ids, out_cnt):
    """Sort ``vis`` in place, run-length count it into ``uniq``/``counts`` and write the ``topk``
    most frequent (ties: smaller id) into out_ids/out_cnt; return how many were written."""
    cnt = len(vis)
    if cnt == 0:
        return 0
    vis.sort()
    r = 0
    for j in range(cnt):
        if j == 0 or vis[j] != vis[j - 1]:
            uniq[r] = vis[j]
            counts[r] = 1
            r += 1
        else:
            counts[r - 1] += 1
    k = min(topk, r)
    if k * r <= 4096:  # selection: k passes, the first maximum is the smallest id (uniq ascending)
        for j in range(k):
            best = 0
            for q in range(1, r):
                if counts[q] > counts[best]:
                    best = q
            out_ids[j] = uniq[best]
            out_cnt[j] = counts[best]
            counts[best] = -1
    else:  # stable sort by -count keeps ascending ids within a count
        order = np.argsort(-counts[:r], kind="mergesort")
        for j in range(k):
            out_ids[j] = uniq[order[j]]
            out_cnt[j] = counts[order[j]]
    return k


@njit(parallel=True, nogil=True, cache=True)
def _walk_topk(indptr, indices, starts, walks, length, topk, restart_bits, seed, chunk, out_ids, out_cnt, out_len):
    steps = walks * length
    n_chunks = (len(starts) + chunk - 1) // chunk
    for c in prange(n_chunks):
        i0 = c * chunk
        nb = min(len(starts), i0 + chunk) - i0
        buf = np.empty((nb, steps), dtype=np.int64)
        fill = np.zeros(nb, dtype=np.int64)
        base = np.empty(nb, dtype=np.uint64)
        cur = np.empty(nb * walks, dtype=np.int64)
        uniq = np.empty(steps, dtype=np.int64)
        counts = np.empty(steps, dtype=np.int64)
        for j in range(nb):
            v = starts[i0 + j]
            base[j] = _mix(seed ^ _mix(np.uint64(v) + _GOLDEN))
            for w in range(walks):
                cur[j * walks + w] = v
        lo = np.empty(nb * walks, dtype=np.int64)
        deg = np.empty(nb * walks, dtype=np.int64)
        # all walkers of the chunk advance one step at a time, in two gather passes (the first
        # branch-free), so that many independent cache misses are in flight at once.
        # Draw t of start v is splitmix64's t-th output of v's stream, t = w·length + step
        for step in range(length):
            for x in range(nb * walks):
                at = cur[x]
                lo[x] = indptr[at]
                deg[x] = indptr[at + 1] - lo[x]
            for j in range(nb):
                v = starts[i0 + j]
                for w in range(walks):
                    x = j * walks + w
                    z = _mix(base[j] + np.uint64(w * length + step + 1) * _GOLDEN)
                    # multiply-shift on 32 random bits: a uniform pick without a division
                    r = np.int64(((z & np.uint64(0xFFFFFFFF)) * np.uint64(deg[x])) >> np.uint64(32))
                    move = deg[x] > 0 and not (restart_bits > 0 and (z >> np.uint64(11)) < restart_bits)
                    at = indices[lo[x] + r] if move else v
                    cur[x] = at
                    buf[j, fill[j]] = at
                    fill[j] += at != v
        for j in range(nb):
            out_len[i0 + j] = _count_topk(buf[j, :fill[j]], topk, uniq, counts, out_ids[i0 + j], out_cnt[i0 + j])


def walk_topk(indptr: np.ndarray, indices: np.ndarray, walks: int, length: int, topk: int, restart: float = 0.0,
              seed: int = 0, starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k visited nodes of every start node (default: all nodes).

    Returns (offsets [s+1], ids, counts): start i's neighbours are ids[offsets[i]:offsets[i+1]], most
    visited first, with their visit counts (int64).
    """
    n = len(indptr) - 1
    starts = np.arange(n, dtype=np.int64) if starts is None else np.ascontiguousarray(starts, dtype=np.int64)
    s = len(starts)
    out_ids = np.empty((s, topk), dtype=np.int64)
    out_cnt = np.empty((s, topk), dtype=np.int64)
    out_len = np.zeros(s, dtype=np.int64)
    restart_bits = np.uint64(min(2**53, int(round(float(restart) * 2**53))))
    seed64 = np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    chunk = int(max(1, min(_CHUNK, (1 << 20) // max(1, walks * length))))
    if s:
        _walk_topk(np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(indices), starts,
                   int(walks), int(length), int(topk), restart_bits, seed64, chunk, out_ids, out_cnt, out_len)
    offsets = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(out_len, out=offsets[1:])
    keep = np.arange(topk)[None, :] < out_len[:, None]
    return offsets, out_ids[keep], out_cnt[keep]
