"""The numba kernels of the HDG selectors: random walks with restart counting visits (PinSage
importance), and breadth-first hop shells (:func:`hop_shells`, at the end of this module).

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
independent cache misses overlap; ``benchmarks/bench_walks.py`` (1M nodes, 10M entries, 10 walks of
5 steps, restart 0.2) measured about 14-15M visits/s per core on 2 cores (target ≥ 2M).
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit, prange

from gnnprep.sparse.csr_kernels import PLACE_CHUNK
from gnnprep.sparse.prefetch import prefetch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_CHUNK = 256  # start nodes per parallel work item (at most; one visit buffer of ≤ 8 MiB per item)
_VISITS_PER_CALL = 1 << 20  # steps one kernel call takes (≈ 0.15 s): signals are handled between calls


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
    steps = int(walks) * int(length)
    topk = min(int(topk), steps)  # no start has more distinct visits than steps
    out_ids = np.empty((s, topk), dtype=np.int64)
    out_cnt = np.empty((s, topk), dtype=np.int64)
    out_len = np.zeros(s, dtype=np.int64)
    restart_bits = np.uint64(min(2**53, int(round(float(restart) * 2**53))))
    seed64 = np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    chunk = int(max(1, min(_CHUNK, (1 << 20) // max(1, steps))))
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices)
    # start v's draws depend on v alone, so calls over slices of the starts give the same result
    per_call = max(1, _VISITS_PER_CALL // max(1, steps))
    for i0 in range(0, s, per_call):
        i1 = min(s, i0 + per_call)
        _walk_topk(indptr, indices, starts[i0:i1], int(walks), int(length), topk, restart_bits, seed64, chunk,
                   out_ids[i0:i1], out_cnt[i0:i1], out_len[i0:i1])
    offsets = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(out_len, out=offsets[1:])
    keep = np.arange(topk)[None, :] < out_len[:, None]
    return offsets, out_ids[keep], out_cnt[keep]


# -- hop shells ---------------------------------------------------------------------------------------
_G2 = np.uint64(0xD1B54A32D192ED03)
_G3 = np.uint64(0x8CB92BA72F3D8DD7)
_SECONDS_PER_CALL = 0.2  # hop-shell calls are sized to about this (signals are handled between calls)


@njit(inline="always")
def _shell_key(seed, a, b, c):
    """splitmix64 of (a, b, c): :func:`gnnprep.hdg.select._hash_keys` for one entry."""
    return _mix(seed + np.uint64(a) * _GOLDEN + np.uint64(b) * _G2 + np.uint64(c) * _G3)


@njit(inline="always")
def _before(k1, u1, k2, u2):
    return k1 < k2 or (k1 == k2 and u1 < u2)


@njit(nogil=True, cache=True)
def _smallest_keys(members, c, seed, v, hop, hk, hu):
    """The ``c`` members with the smallest (key, id), key = splitmix64 of (v, member, hop): a max-heap
    of c entries in hk/hu over one pass (O(len · log c), no sort of the whole shell)."""
    size = 0
    for u in members:
        key = _shell_key(seed, v, u, hop)
        if size < c:  # sift up
            x = size
            size += 1
            while x > 0 and _before(hk[(x - 1) // 2], hu[(x - 1) // 2], key, u):
                hk[x], hu[x] = hk[(x - 1) // 2], hu[(x - 1) // 2]
                x = (x - 1) // 2
            hk[x], hu[x] = key, u
        elif _before(key, u, hk[0], hu[0]):  # replace the largest, sift down
            x = 0
            while True:
                y = 2 * x + 1
                if y >= c:
                    break
                if y + 1 < c and _before(hk[y], hu[y], hk[y + 1], hu[y + 1]):
                    y += 1
                if not _before(key, u, hk[y], hu[y]):
                    break
                hk[x], hu[x] = hk[y], hu[y]
                x = y
            hk[x], hu[x] = key, u
    return hu[:c].copy()


SHELL_PIECE = 4096       # in-list entries a shell search copies, then checks against its stamps (_shells)
SHELL_AHEAD = 16         # ... prefetching the stamp of the entry this many on (0: none; passed per call)
SHELL_ROWS_AHEAD = 8     # ... and the row pointer (and, half as far, the in-list) of the frontier node this many on


@njit(parallel=True, nogil=True, cache=True)
def _shells(indptr, indices, starts, k, cap, seed, stamp, bufs, counts, ids, offsets, fill, tag0, ahead):
    """Breadth-first shells 1..k of every start along the in-lists: counts[j·k + i] = |shell i+1 of
    starts[j]| (at most ``cap`` when cap ≥ 0); with ``fill`` the members go to ids[offsets[j·k + i]:]
    sorted by id — with a cap, the ``cap`` smallest keys of (start, member, hop) (ties: smaller id).
    ``stamp[p]`` marks the nodes seen from a start with a tag unique to (start, pass), ``tag0 + 2·v
    + 1 + fill`` (each start runs once per pass and ``tag0`` moves on between repeated runs, so
    stamps never need clearing); ``bufs[p]`` holds the current and next frontier (int32 or int64,
    like ``ids``)."""
    parts, s = stamp.shape[0], len(starts)
    per = (s + parts - 1) // parts
    for p in prange(parts):
        st = stamp[p]
        hk = np.empty(max(cap, 1), dtype=np.uint64)
        hu = np.empty(max(cap, 1), dtype=bufs.dtype)
        piece = np.empty(SHELL_PIECE, dtype=indices.dtype)
        for j in range(p * per, min(s, (p + 1) * per)):
            v = starts[j]
            tag = tag0 + 2 * v + 1 + fill  # unique per (start, pass): the count and fill passes each start afresh
            cur, nxt = bufs[p, 0], bufs[p, 1]
            st[v] = tag
            cur[0] = v
            nc = 1
            for i in range(k):
                nn = 0
                x, e, e_end = 0, 0, 0
                while True:
                    # the frontier's in-list entries SHELL_PIECE at a time, copied in order, then
                    # their stamps checked with the stamp ``ahead`` on prefetched (random reads
                    # that waited one at a time; the same members in the same order)
                    got = 0
                    while got < SHELL_PIECE:
                        if e == e_end:
                            if x == nc:
                                break
                            if ahead and x + SHELL_ROWS_AHEAD < nc:
                                prefetch(indptr, cur[x + SHELL_ROWS_AHEAD])
                            if ahead and x + SHELL_ROWS_AHEAD // 2 < nc:   # (its row pointer prefetched before)
                                prefetch(indices, indptr[cur[x + SHELL_ROWS_AHEAD // 2]])
                            w = cur[x]
                            x += 1
                            e, e_end = indptr[w], indptr[w + 1]
                            continue
                        take = min(e_end - e, SHELL_PIECE - got)
                        piece[got:got + take] = indices[e:e + take]
                        got += take
                        e += take
                    for t in range(got):
                        if ahead and t + ahead < got:
                            prefetch(st, piece[t + ahead])
                        u = piece[t]
                        if st[u] != tag:
                            st[u] = tag
                            nxt[nn] = u
                            nn += 1
                    if got < SHELL_PIECE:
                        break
                c = nn if cap < 0 else min(nn, cap)
                counts[j * k + i] = c
                if fill and c > 0:
                    o = offsets[j * k + i]
                    if c == nn:
                        ids[o:o + c] = np.sort(nxt[:nn])
                    else:
                        ids[o:o + c] = np.sort(_smallest_keys(nxt[:nn], c, seed, v, i + 1, hk, hu))
                cur, nxt = nxt, cur
                nc = nn


@njit(nogil=True, cache=True)
def _count_ids(indices, out_ptr):
    for e in range(len(indices)):
        out_ptr[indices[e] + 1] += 1
    for u in range(1, len(out_ptr)):
        out_ptr[u] += out_ptr[u - 1]


@njit(nogil=True, cache=True)
def _transpose(indptr, indices, out_ptr, out_idx):
    """out_idx[pos[u]] = v for each entry u of row v, pos[u] advanced from out_ptr[u]. The places of
    PLACE_CHUNK entries are found before their rows are written: a write whose address waits on a
    read of pos that misses the cache holds the next reads behind it (one miss at a time), as in
    :func:`gnnprep.sparse.csr_kernels.place_keys`."""
    pos = out_ptr[:-1].copy()
    where = np.empty(PLACE_CHUNK, dtype=np.int64)
    m = len(indices)
    v = 0
    for c0 in range(0, m, PLACE_CHUNK):
        c1 = min(m, c0 + PLACE_CHUNK)
        for e in range(c0, c1):
            u = indices[e]
            where[e - c0] = pos[u]
            pos[u] += 1
        for e in range(c0, c1):
            while indptr[v + 1] <= e:
                v += 1
            out_idx[where[e - c0]] = v


def transpose_csr(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The transposed CSR (row u lists the rows that hold u, ascending), indices in ``indices``'
    dtype: the out-lists of a store's in-lists. Holds one more indptr and indices."""
    n = len(indptr) - 1
    indices = np.ascontiguousarray(indices)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    _count_ids(indices, out_ptr)
    out_idx = np.empty(len(indices), dtype=indices.dtype)
    _transpose(np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(indices), out_ptr, out_idx)
    return out_ptr, out_idx


class ShellSearch:
    """Per-thread scratch of the breadth-first shell kernel over one CSR, reused across calls:
    ``stamp`` [threads, n] (int32 where the tags fit, else int64) and ``bufs`` [threads, 2, n] (node
    ids, int32 below 2^31 nodes). :meth:`run` gives the shells of any list of starts; repeated runs
    from the same start (anchors, once per node block) move the tags on, clearing the stamps only
    when they would overflow. Bytes held: :func:`shell_scratch_bytes`."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, threads: int | None = None):
        import numba

        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices)
        n = self.n = len(self.indptr) - 1
        self.parts = max(1, min(threads or numba.get_num_threads(), max(n, 1)))
        self.stamp = np.zeros((self.parts, max(n, 1)), dtype=stamp_dtype(n))
        self.bufs = np.empty((self.parts, 2, max(n, 1)), dtype=id_dtype(n))
        self.tag0 = 0

    def _tags(self) -> int:
        """The tag base of the next pass (each pass takes 2n + 2 tags)."""
        limit = np.iinfo(self.stamp.dtype).max
        if self.tag0 + 2 * self.n + 3 >= limit:
            self.stamp[:] = 0
            self.tag0 = 0
        t = self.tag0
        self.tag0 += 2 * self.n + 2
        return t

    def count(self, starts: np.ndarray, hops: int, cap: int, seed64) -> np.ndarray:
        """|shell i| (at most ``cap`` when cap ≥ 0) of each start: [len(starts)·hops]."""
        counts = np.empty(len(starts) * hops, dtype=np.int64)
        _shells(self.indptr, self.indices, starts, hops, cap, seed64, self.stamp, self.bufs, counts,
                self.bufs[0, 0, :0], counts, False, self._tags(), SHELL_AHEAD)
        return counts

    def fill(self, starts: np.ndarray, hops: int, cap: int, seed64, counts: np.ndarray) -> np.ndarray:
        """The members of every shell (``counts`` from :meth:`count`), shell after shell, each by id."""
        offsets = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=offsets[1:])
        ids = np.empty(int(counts.sum()), dtype=self.bufs.dtype)
        _shells(self.indptr, self.indices, starts, hops, cap, seed64, self.stamp, self.bufs, counts, ids, offsets,
                True, self._tags(), SHELL_AHEAD)
        return ids

    def capped(self, starts: np.ndarray, hops: int, cap: int, seed64) -> tuple[np.ndarray, np.ndarray]:
        """One pass for a cap: (counts, members), the members written at cap-sized slots, then packed."""
        counts = np.empty(len(starts) * hops, dtype=np.int64)
        ids = np.empty(len(counts) * cap, dtype=self.bufs.dtype)
        _shells(self.indptr, self.indices, starts, hops, cap, seed64, self.stamp, self.bufs, counts, ids,
                np.arange(len(counts), dtype=np.int64) * cap, True, self._tags(), SHELL_AHEAD)
        return counts, ids.reshape(-1, cap)[np.arange(cap)[None, :] < counts[:, None]]


def id_dtype(n: int) -> np.dtype:
    """Node ids below 2^31 are held as int32."""
    return np.dtype(np.int32 if n < 2**31 else np.int64)


def stamp_dtype(n: int) -> np.dtype:
    """int32 stamps while one pass's tags (2n + 2 of them) fit, else int64."""
    return np.dtype(np.int32 if 2 * n + 3 < 2**31 - 1 else np.int64)


def shell_scratch_bytes(n: int, threads: int) -> int:
    """Bytes of :class:`ShellSearch`'s scratch: per thread a stamp and two frontier buffers of n."""
    return threads * max(n, 1) * (stamp_dtype(n).itemsize + 2 * id_dtype(n).itemsize)


def hop_shell_blocks(indptr: np.ndarray, indices: np.ndarray, hops: int, cap: int | None, seed: int = 0,
                     max_starts: int = 1 << 14, room: int | None = None, search: ShellSearch | None = None,
                     start: int = 0, stop: int | None = None):
    """Yield (v0, v1, counts, ids) over consecutive blocks of nodes from ``start`` up to ``stop``
    (None: n): the shells 1..``hops`` of nodes v0..v1-1 as :func:`hop_shells` returns them for all
    nodes (counts [(v1−v0)·hops], ids by shell).
    Calls take about ``_SECONDS_PER_CALL`` (their number of start nodes adapts, up to
    ``max_starts``); with ``room`` (bytes) a block's arrays stay within it: without a cap a block
    whose counted members would not fit is halved before its members are filled (one node always
    runs: its members are at most n). Blocks do not change the result."""
    n = len(indptr) - 1
    search = search or ShellSearch(indptr, indices)
    item = search.bufs.dtype.itemsize
    seed64 = np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    c = -1 if cap is None else int(cap)
    if c >= 0 and room is not None:  # counts, slots, their mask and the packed copy
        max_starts = max(1, min(max_starts, room // max(1, hops * (16 + c * (2 * item + 1)))))
    end = n if stop is None else min(n, int(stop))
    i0, size = int(start), min(256, max_starts)
    while i0 < end:
        t0 = time.perf_counter()
        starts = np.arange(i0, min(end, i0 + size), dtype=np.int64)
        if c >= 0:
            counts, ids = search.capped(starts, hops, c, seed64)
        else:
            counts = search.count(starts, hops, c, seed64)
            if room is not None and len(starts) > 1 and int(counts.sum()) * item + 16 * len(counts) > room:
                size = max(1, len(starts) // 2)
                continue
            ids = search.fill(starts, hops, c, seed64, counts)
        yield i0, i0 + len(starts), counts, ids
        i0 += len(starts)
        took = time.perf_counter() - t0
        size = int(min(max_starts, 2 * size, max(1, size * _SECONDS_PER_CALL / max(took, 1e-4))))


def hop_shells(indptr: np.ndarray, indices: np.ndarray, hops: int, cap: int | None, seed: int = 0,
               max_starts: int = 1 << 14, progress=None) -> tuple[np.ndarray, np.ndarray]:
    """Exact-distance shells 1..``hops`` of every node along the in-lists, at most ``cap`` members
    each (the smallest splitmix64 keys of (node, member, hop)), members sorted by id.

    Returns (counts [n·hops], ids int64): shell (v, i) holds the next counts[v·hops + i] ids. Each
    node is a breadth-first search with a per-thread stamp array, so the work is Σ_v the in-degrees
    of v's (hops−1)-ball — the cap bounds what is kept, not that search. Calls take about
    ``_SECONDS_PER_CALL`` (:func:`hop_shell_blocks`); without a cap each call counts first, then
    fills. Results do not depend on the threads or the split."""
    n = len(indptr) - 1
    out_counts, out_ids = [], []
    for _, v1, counts, ids in hop_shell_blocks(indptr, indices, hops, cap, seed, max_starts):
        out_counts.append(counts)
        out_ids.append(ids.astype(np.int64))
        if progress is not None:
            progress("hop shells", v1, n)

    def cat(parts_):
        return np.concatenate(parts_) if parts_ else np.empty(0, np.int64)

    return cat(out_counts), cat(out_ids)
