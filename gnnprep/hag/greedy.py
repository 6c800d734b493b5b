"""The greedy HAG search on one row block held in memory (numba kernels; the streamed driver is
:mod:`gnnprep.hag.stream`).

Jia et al. ("Redundancy-Free Computation Graphs for Graph Neural Networks", KDD 2020), Algorithm 3,
merges the pair of ids shared by the most in-lists, one pair at a time, and keeps every pair's count
up to date. Counting every pair costs Σ_v d_v² / 2, so this search counts *window* pairs: each
in-list is sorted by global frequency (ids in more in-lists first, as the rounds search does) into
*slots*, and a pair's count is the number of in-lists where both ids sit at most w slots apart.

1. Candidates: the window pairs that occur at least twice, the ``KEEP_PER_NODE`` × capacity
   counted most (ties at the cut: the smallest pairs, as the heap breaks them). The pair
   occurrences are radix-partitioned by hash into cache-sized buckets (a sequential scatter) and
   each bucket is counted on its own — a one-hash filter over its range of bits, then a small table
   counting the pairs the filter marks "twice" — so no pass makes a random access to memory per
   pair (:func:`count_candidates`).
2. Greedy: a max-heap of candidates by count (ties: smallest pair). A merge of (a, b) writes the
   aggregation node x into the earlier of their two slots in every in-list holding both and empties
   the other; it takes 1 from the count of (a, y) and (b, y) for each live y within w slots there,
   and counts the new pairs (x, y) the same way — so every count stays exact, a candidate popped
   with a stale count is pushed back with its current one (lazy deletion, no recount), and with
   w ≥ the longest in-list this is Algorithm 3 itself (ties broken differently).
3. Large blocks count pairs on a hashed sample of rows (``stride``, :func:`_sampled`): the counts
   are those of the sample and stay exact for it; every merge still rewrites every row that holds
   the pair.

Memory for a block of E entries over u distinct ids with capacity c and K kept candidates: about
28·E + 25·(u + c) + 24·c + 48·K bytes, plus the counting pass within ``room`` (the scatter's buffer,
8 bytes a counted pair, reused across the blocks of a search). Every kernel works in bounded steps (``STEP_OPS``),
so a signal is acted on between calls.

Ids inside a block are *local*: 0..u−1 are the block's distinct graph ids in frequency order, u + j
is the block's j-th aggregation node.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from gnnprep.sparse.csr_kernels import insertion_sort

EMPTY = np.int64(-1)
STEP_OPS = 1 << 22   # work units (entries visited) one kernel call does before returning


# -- a counting hash table (open addressing, linear probing) ----------------------------------------------
@njit(inline="always")
def _mix(key):
    z = np.uint64(key)
    z = (z ^ (z >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    z = (z ^ (z >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
    return z ^ (z >> np.uint64(33))


@njit(inline="always")
def _sampled(v, stride):
    """Whether row v is one of the rows whose pairs are counted: all with stride 1, else about one
    in ``stride``, picked by a hash of v (deterministic; spread over the block)."""
    return stride == 1 or np.int64(_mix(v ^ 0x5DEECE66D) % np.uint64(stride)) == 0


@njit(inline="always")
def _row_span(rp, v, stride):
    """Row v's entries whose pairs are counted: all of them, or none when the row is not sampled."""
    a0 = rp[v]
    return a0, (rp[v + 1] if _sampled(v, stride) else a0)


@njit(inline="always")
def _pair_key(x, y, big):
    """min·big + max of a pair of ids; −1 for a repeated id (a duplicate edge), which is no pair."""
    if x == y:
        return np.int64(-1)
    return x * big + y if x < y else y * big + x


@njit(inline="always")
def _unmix(h):
    """The key whose :func:`_mix` is h (the mix is a bijection of 64-bit words)."""
    z = h ^ (h >> np.uint64(33))
    z = z * np.uint64(0x9CB4B2F8129337DB)
    z = z ^ (z >> np.uint64(33))
    z = z * np.uint64(0x4F74430C22A54005)
    return np.int64(z ^ (z >> np.uint64(33)))


@njit(nogil=True, cache=True)
def _pair_hist(rp, ent, r0, r1, w, big, stride, nmask, shift, hist, ops):
    """hist[b] += the window pairs of rows r0..r1−1 in bucket b (the top bits of the pair's filter
    bit, ``_mix(key) & nmask``, above ``shift``); returns the row reached (stops after about ``ops``
    pairs)."""
    done = 0
    for v in range(r0, r1):
        a0, a1 = _row_span(rp, v, stride)
        for i in range(a0, a1):
            x = np.int64(ent[i])
            for j in range(i + 1, min(a1, i + 1 + w)):
                key = _pair_key(x, np.int64(ent[j]), big)
                if key >= 0:
                    hist[np.int64((_mix(key) & nmask) >> np.uint64(shift))] += 1
        done += (a1 - a0) * w
        if done >= ops:
            return v + 1
    return r1


@njit(nogil=True, cache=True)
def _pair_scatter(rp, ent, r0, r1, w, big, stride, nmask, shift, b0, b1, pos, hashes, ops):
    """Write the hashes (``_mix(key)``) of the window pairs of rows r0..r1−1 whose bucket is in
    [b0, b1) to ``hashes`` at ``pos[bucket − b0]`` (advanced); returns the row reached (stops after
    about ``ops`` pairs)."""
    done = 0
    for v in range(r0, r1):
        a0, a1 = _row_span(rp, v, stride)
        for i in range(a0, a1):
            x = np.int64(ent[i])
            for j in range(i + 1, min(a1, i + 1 + w)):
                key = _pair_key(x, np.int64(ent[j]), big)
                if key < 0:
                    continue
                h = _mix(key)
                b = np.int64((h & nmask) >> np.uint64(shift))
                if b0 <= b < b1:
                    p = pos[b - b0]
                    hashes[p] = h
                    pos[b - b0] = p + 1
        done += (a1 - a0) * w
        if done >= ops:
            return v + 1
    return r1


@njit(nogil=True, cache=True)
def _count_buckets(hashes, starts, b0, b1, nmask, lowmask, bits, lkeys, lcnt, used, out_k, out_c, state, ops):
    """Buckets b0..b1−1 (bucket b's pair hashes are hashes[starts[b − b0]:starts[b − b0 + 1]], in scan
    order), each on its own: the one-hash filter of its range of bits (``bits``, word 2i "seen",
    2i + 1 "twice": as the search it replaces, a bit is "twice" once two pair occurrences hit it),
    then the pairs whose bit is "twice" — every pair occurring twice or more, and those sharing a
    bit with another — counted in the cache-sized table ``lkeys``/``lcnt`` and appended to out_k
    (keys) and out_c. ``state`` = [out used].
    Returns the bucket reached: it stops before a bucket that might not fit ``out_*`` or after
    about ``ops`` pairs; −1 − b when bucket b has more such pairs than ``lkeys`` holds (grow it and
    call again)."""
    lmask = np.int64(len(lkeys) - 1)
    limit = len(lkeys) // 2
    done = 0
    for b in range(b0, b1):
        s0, s1 = starts[b - b0], starts[b - b0 + 1]
        if state[0] + min(s1 - s0, limit) > len(out_k):
            return b
        for r in range(s0, s1):
            bit = hashes[r] & nmask & lowmask
            word = 2 * np.int64(bit >> np.uint64(6))
            mask = np.uint64(1) << (bit & np.uint64(63))
            if bits[word] & mask:
                bits[word + 1] |= mask
            else:
                bits[word] |= mask
        nu = 0
        for r in range(s0, s1):
            h = hashes[r]
            bit = h & nmask & lowmask
            if (bits[2 * np.int64(bit >> np.uint64(6)) + 1] & (np.uint64(1) << (bit & np.uint64(63)))) == 0:
                continue
            s = np.int64(h >> np.uint64(40)) & lmask
            while True:
                k = lkeys[s]
                if k == h:
                    lcnt[s] += 1
                    break
                if k == 0:
                    lkeys[s] = h
                    lcnt[s] = 1
                    used[nu] = s
                    nu += 1
                    break
                s = (s + 1) & lmask
            if nu > limit:
                break
        if nu > limit:
            for t in range(nu):
                lkeys[used[t]] = 0
            bits[:] = 0
            return -1 - b
        bits[:] = 0
        o = state[0]
        for t in range(nu):
            s = used[t]
            out_k[o] = _unmix(lkeys[s])
            out_c[o] = lcnt[s]
            lkeys[s] = 0
            o += 1
        state[0] = o
        done += s1 - s0
        if done >= ops:
            return b + 1
    return b1


def window_pairs(deg: np.ndarray, w: int) -> int:
    """Σ_v Σ_{k=1..w} max(0, d_v − k): the window pair occurrences of in-lists of lengths ``deg``."""
    d = deg.astype(np.int64)
    k = np.minimum(d - 1, w).clip(0)
    return int((k * d - k * (k + 1) // 2).sum())


def _pow2_at_most(x: int) -> int:
    return 1 << max(6, int(max(64, x)).bit_length() - 1)


def _top(keys: np.ndarray, counts: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` candidates first by (count descending, key ascending) — the heap's order
    (:func:`_above`), so the ties at the cut are the pairs the greedy would take first —, or all
    when fewer (``keys`` distinct); in no particular order."""
    if len(keys) <= keep:
        return keys, counts
    c = counts[np.argpartition(-counts, keep - 1)[keep - 1]]   # the count at the cut
    above = np.flatnonzero(counts > c)
    tied = np.flatnonzero(counts == c)
    tied = tied[np.argpartition(keys[tied], keep - len(above) - 1)[:keep - len(above)]]
    cut = np.concatenate([above, tied])
    return keys[cut], counts[cut]


BUCKET_PAIRS = 1 << 14   # pair occurrences per bucket aimed at (its filter bits, 32 KiB, stay in L1)
MAX_BUCKETS = 1 << 16
PASS_BYTES = 16          # a pair whose filter bit is "twice" once its bucket is counted (key, count)


def _buffer(work, name, size, dtype):
    """An array of ``size`` from ``work`` (a dict kept across blocks: its pages are not faulted in
    again), allocated there when it has none that large."""
    if work is None:
        return np.empty(size, dtype=dtype)
    a = work.get(name)
    if a is None or a.dtype != dtype or len(a) < size:
        work.pop(name, None)
        a = work[name] = np.empty(size, dtype=dtype)
    return a[:size]


def row_parts(rp: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges of the rows (or buckets) of a pointer array ``rp``, of about equal
    entries (fewer where the rows are fewer)."""
    nrows = len(rp) - 1
    cuts = np.searchsorted(rp, np.linspace(0, int(rp[-1]), parts + 1)[1:-1]).tolist()
    bounds = sorted({0, nrows, *(min(nrows, max(0, int(c))) for c in cuts)})
    return list(zip(bounds[:-1], bounds[1:]))


def side_by_side(fn, parts: list) -> list:
    """[fn(*part) for part in parts], the parts run at once on threads (the numba kernels release the
    GIL): the first on this thread, the others on their own; every part finishes before this returns."""
    if len(parts) <= 1:
        return [fn(*p) for p in parts]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(parts) - 1, thread_name_prefix="hag-block") as pool:
        futures = [pool.submit(fn, *p) for p in parts[1:]]
        try:
            first = fn(*parts[0])
        finally:
            done = [f.exception() for f in futures]   # (waits for each: none is left running)
        for f, e in zip(futures, done):
            if e is not None:
                raise e
        return [first] + [f.result() for f in futures]


def count_candidates(rp, ent, w, big, room, min_share=2, check=None, keep=None, stride=1, work=None, threads=1):
    """The window candidates of a block counted ≥ ``min_share`` (2 or more) times: (keys, counts),
    keys min·big + max, at most ``keep`` of them (None: all; else the first by count descending,
    then key ascending: :func:`_top`), in no particular order, within about ``room`` bytes. ``check``
    is called between kernel calls. ``stride`` > 1 counts only the rows :func:`_sampled` picks
    (about one in ``stride``). ``work``: a dict whose buffers are reused (the blocks of one search:
    their pages are not faulted in again). ``threads``: the passes split over that many threads (rows
    for the passes over the block, buckets for the counting); the same candidates for any number.

    The pair occurrences are radix-partitioned by hash into buckets of about ``BUCKET_PAIRS`` (one
    pass over the block counts each bucket's size, another writes each pair's hash into its bucket:
    sequential reads, one write a pair), as many buckets at a time as the room holds; each bucket is
    then counted on its own in structures that stay in cache: a one-hash filter of about 8 bits a
    pair marks the pairs that may occur twice, and a small table counts only those.

    ``keep``'s ties are cut by key, as the greedy's heap breaks them. Until 2026-11-29 they were cut
    where a block-wide hash table's layout put them, which took a second counting pass that recorded
    each pair's place in the scan: on 8M-entry graphs where ``keep`` cuts (ego-like, cliques of 64)
    the counting was 1.4-2.4 s of a 3.8-5.0 s search."""
    total = window_pairs(np.diff(rp), w) // stride + 1
    big = np.int64(big)
    nbits = min(_pow2_at_most(4 * total * 2), _pow2_at_most(room * 8 // 4))  # the filter's bits
    lg = nbits.bit_length() - 1
    nb = 1
    while nb < MAX_BUCKETS and nb * 2 * 64 <= nbits and nb * BUCKET_PAIRS < total:
        nb *= 2
    shift = lg - (nb.bit_length() - 1)
    nmask = np.uint64(nbits - 1)
    rows = row_parts(rp, max(1, int(threads)))
    between = check if len(rows) == 1 else None   # between kernel calls on one thread; after each pass on several

    def hist_of(r0: int, r1: int) -> np.ndarray:
        hist = np.zeros(nb, dtype=np.int64)
        while r0 < r1:
            r0 = _pair_hist(rp, ent, r0, r1, w, big, stride, nmask, shift, hist, STEP_OPS)
            if between is not None:
                between()
        return hist

    hists = side_by_side(hist_of, rows)
    if check is not None:
        check()
    pk, pc = _bucket_counts(rp, ent, w, big, stride, room, rows, hists, (nb, shift, nmask), check, between, work)
    good = pc >= min_share
    pk, pc = pk[good], pc[good]
    return (pk, pc) if keep is None else _top(pk, pc, keep)


def _bucket_counts(rp, ent, w, big, stride, room, rows, hists, geometry, check, between, work):
    """The pairs whose filter bit is "twice" (keys, counts): the buckets scattered as many at a time
    as the room holds (8 bytes a pair; an eighth of the room kept for the output), each counted on
    its own. ``rows``: the row ranges scattered side by side, ``hists`` their pairs per bucket (each
    range's pairs go after the ranges' before it in a bucket); the buckets of a group are counted
    side by side in as many ranges. ``check`` is called after each pass, ``between`` between kernel
    calls too (None: not inside the threads)."""
    nb, shift, nmask = geometry
    hist = np.sum(hists, axis=0) if len(hists) > 1 else hists[0]
    pairs = int(hist.sum())
    biggest = int(hist.max(initial=0))
    held = min(max(1, pairs), max(biggest, (room - room // 8) // 8))
    hashes = _buffer(work, "hashes", held, np.uint64)
    lowmask = np.uint64((1 << shift) - 1)
    out_len = max(1024, min(pairs, (room // 8) // PASS_BYTES) // len(rows))
    outs: list[list[np.ndarray]] = [[], []]
    b0 = 0
    while b0 < nb:  # a group of buckets that fits the scatter's room
        b1, got = b0, 0
        while b1 < nb and (b1 == b0 or got + hist[b1] <= held):
            got += int(hist[b1])
            b1 += 1
        starts = np.zeros(b1 - b0 + 1, dtype=np.int64)
        np.cumsum(hist[b0:b1], out=starts[1:])
        at = starts[:-1].copy()
        places = []
        for h in hists:   # each row range's place in each bucket
            places.append(at.copy())
            at += h[b0:b1]

        def scatter(r0: int, r1: int, pos: np.ndarray) -> None:
            while r0 < r1:
                r0 = _pair_scatter(rp, ent, r0, r1, w, big, stride, nmask, shift, b0, b1, pos, hashes, STEP_OPS)
                if between is not None:
                    between()

        side_by_side(scatter, [(r0, r1, pos) for (r0, r1), pos in zip(rows, places)])
        if check is not None:
            check()
        # the group's buckets in ranges of about equal pairs, one a thread (starts: the buckets' pointer)
        def count(c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
            return _count_range(hashes, starts, b0, b0 + c0, b0 + c1, nmask, lowmask, shift, biggest, out_len, between)

        for k, c in side_by_side(count, row_parts(starts, len(rows))):
            outs[0].append(k)
            outs[1].append(c)
        if check is not None:
            check()
        b0 = b1
    if not outs[0]:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(outs[0]), np.concatenate(outs[1])


def _count_range(hashes, starts, b0, c0, c1, nmask, lowmask, shift, biggest, out_len, check):
    """(keys, counts) of the pairs whose filter bit is "twice" in buckets c0..c1−1 of the group that
    starts at bucket b0 (bucket b's pair hashes are hashes[starts[b − b0]:starts[b − b0 + 1]]), in this
    call's own table and filter."""
    lslots = 1 << max(10, int(2 * min(BUCKET_PAIRS, max(1, biggest))).bit_length())
    lkeys = np.zeros(lslots, dtype=np.uint64)
    lcnt = np.zeros(lslots, dtype=np.int64)
    used = np.empty(lslots, dtype=np.int64)
    bits = np.zeros(2 * max(1, (1 << shift) // 64), dtype=np.uint64)
    out_k = np.empty(out_len, dtype=np.int64)
    out_c = np.empty(out_len, dtype=np.int64)
    state = np.zeros(1, dtype=np.int64)
    b = c0
    while b < c1:
        got = _count_buckets(hashes, starts[b - b0:], b, c1, nmask, lowmask, bits, lkeys, lcnt, used, out_k, out_c,
                             state, STEP_OPS)
        if got < 0:  # a bucket with more such pairs than the table holds
            lkeys = np.zeros(2 * len(lkeys), dtype=np.uint64)
            lcnt = np.zeros(len(lkeys), dtype=np.int64)
            used = np.empty(len(lkeys), dtype=np.int64)
            continue
        if got == b:  # out_* full
            grow = max(len(out_k), int(starts[b - b0 + 1] - starts[b - b0]))
            out_k = np.concatenate([out_k, np.empty(grow, np.int64)])
            out_c = np.concatenate([out_c, np.empty(grow, np.int64)])
        b = got
        if check is not None:
            check()
    fill = int(state[0])
    return out_k[:fill], out_c[:fill]


# -- the max-heap of candidates: (count desc, key asc) -------------------------------------------------------
@njit(inline="always")
def _above(hc, hk, i, j):
    return hc[i] > hc[j] or (hc[i] == hc[j] and hk[i] < hk[j])


@njit(inline="always")
def _sift_down(hc, hk, i, size):
    while True:
        l = 2 * i + 1
        if l >= size:
            return
        b = l
        if l + 1 < size and _above(hc, hk, l + 1, l):
            b = l + 1
        if not _above(hc, hk, b, i):
            return
        hc[i], hc[b] = hc[b], hc[i]
        hk[i], hk[b] = hk[b], hk[i]
        i = b


@njit(inline="always")
def _push(hc, hk, size, c, k):
    i = size
    hc[i], hk[i] = c, k
    while i > 0:
        p = (i - 1) // 2
        if not _above(hc, hk, i, p):
            break
        hc[i], hc[p] = hc[p], hc[i]
        hk[i], hk[p] = hk[p], hk[i]
        i = p
    return size + 1


@njit(nogil=True, cache=True)
def heapify(hc, hk, size):
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(hc, hk, i, size)


# -- the window counts of the candidates: an open-addressing map key -> count ---------------------------------
@njit(inline="always")
def _map_slot(pkeys, key):
    """The slot holding ``key``, or the empty slot it would take."""
    mask = np.int64(len(pkeys) - 1)
    s = np.int64(_mix(key) >> np.uint64(8)) & mask
    while True:
        k = pkeys[s]
        if k == key or k == EMPTY:
            return s
        s = (s + 1) & mask


@njit(nogil=True, cache=True)
def map_fill(pkeys, pvals, keys, counts):
    """Insert (keys, counts) into an empty map; returns how many slots are used."""
    for i in range(len(keys)):
        s = _map_slot(pkeys, keys[i])
        pkeys[s] = keys[i]
        pvals[s] = counts[i]
    return len(keys)


@njit(inline="always")
def _lose(ent, lo, hi, at, me, other, w, pkeys, pvals, big, step, tracked):
    """Add ``step`` (−1: a merge takes the row's pairs away; +1: an undone merge gives them back) to
    the count of (me, y) for every live y within w slots of ``at`` in row [lo, hi), but other.
    ``tracked[y]``: y is in some candidate of the map (the others need no lookup)."""
    if not tracked[me]:
        return
    for p in range(max(lo, at - w), min(hi, at + w + 1)):
        y = np.int64(ent[p])
        if p != at and y >= 0 and y != other and y != me and tracked[y]:
            key = me * big + y if me < y else y * big + me
            s = _map_slot(pkeys, key)
            if pkeys[s] == key:
                pvals[s] += step


# -- the block's in-lists and who uses each id ----------------------------------------------------------------
@njit(inline="always")
def _users(x, u, uptr, aptr, uend, aend):
    """The range of x's users still listed: from its first to ``uend[x]`` (an id of the block) or
    ``aend[x − u]`` (an aggregation node), the lists being compacted as they are scanned."""
    if x < u:
        return uptr[x], uend[x]
    return aptr[x - u], aend[x - u]


@njit(inline="always")
def _user_at(x, u, i, urow, uslot, prow, pslot):
    """(row, slot) of the i-th user of x (the slot x was written to; x is still there iff ent[slot] == x)."""
    if x < u:
        return urow[i], uslot[i]
    return prow[i], pslot[i]


@njit(inline="always")
def _move_user(x, u, i, k, urow, uslot, prow, pslot):
    """x's i-th user moved to place k of its list (k < i: the list compacted)."""
    if x < u:
        urow[k], uslot[k] = urow[i], uslot[i]
    else:
        prow[k], pslot[k] = prow[i], pslot[i]


@njit(inline="always")
def _row_at(x, u, k, urow, prow):
    """The row of x's k-th user."""
    if x < u:
        return urow[k]
    return prow[k]


@njit(inline="always")
def _gallop(x, u, urow, prow, lo, hi, v):
    """The first k in [lo, hi) whose user row of x is ≥ v (hi if none): steps of 1, 2, 4, ... from
    lo, then a binary search in the last step (x's users are ascending by row)."""
    if lo >= hi or _row_at(x, u, lo, urow, prow) >= v:
        return lo
    step = 1
    prev = lo
    k = lo + 1
    while k < hi and _row_at(x, u, k, urow, prow) < v:
        prev = k
        step *= 2
        k = prev + step
    end = min(k, hi)
    lo = prev + 1
    while lo < end:
        mid = (lo + end) >> 1
        if _row_at(x, u, mid, urow, prow) < v:
            lo = mid + 1
        else:
            end = mid
    return lo


@njit(inline="always")
def _live_slot(x, u, v, k, hi, ent, urow, uslot, prow, pslot):
    """The first slot of row v still holding x, from x's users k.. (those of row v), or −1 (a
    repeated id: its copies in slot order)."""
    while k < hi and _row_at(x, u, k, urow, prow) == v:
        s = uslot[k] if x < u else pslot[k]
        if ent[s] == x:
            return s
        k += 1
    return -1


@njit(nogil=True, cache=True)
def greedy_steps(rp, ent, u, uptr, urow, uslot, aptr, uend, aend, dead, prow, pslot, level, inputs, hc, hk, pkeys, pvals,
                 tracked, tmpc, touched, state, w, min_share, max_depth, cap, big, ops, stride):
    """Run the greedy for about ``ops`` work units.

    A pair's count is its *window count*: the in-lists where both ids sit at most w slots apart
    (slots are the positions of the frequency-sorted in-list; a merge writes x into one slot of
    the pair and empties the other). The counts are kept exact as merges happen — a merge of
    (a, b) in a row takes 1 from (a, y) and (b, y) for every live y within w slots of a's or b's
    slot and counts (x, y) for the live y within w slots of x's — so a candidate popped with a stale
    count is put back with its current one at no cost (lazy deletion); with w ≥ the longest
    in-list the counts are the full co-occurrence counts and this is Algorithm 3.

    ``state`` = [aggregation nodes made, heap size, pool entries used, status, map slots used, pops,
    merges refused for depth, rows merged]; status 0: finished (heap empty or capacity reached),
    1: more to do, 2: the heap or the map needs more room (grow them and call again)."""
    made, size, used, fill = state[0], state[1], state[2], state[4]
    work = 0
    hcap = len(hc)
    while size > 0 and made < cap:
        if work >= ops:
            break
        c0, key = hc[0], hk[0]
        if size + c0 * w + 1 > hcap or 2 * (fill + 2 * c0 * w + 1) > len(pkeys):
            state[0], state[1], state[2], state[3], state[4] = made, size, used, 2, fill
            return
        size -= 1
        hc[0], hk[0] = hc[size], hk[size]
        _sift_down(hc, hk, 0, size)
        state[5] += 1
        ks = _map_slot(pkeys, key)
        c = pvals[ks]
        if c != c0:
            if c >= min_share:
                size = _push(hc, hk, size, c, key)
            continue
        a, b = key // big, key % big
        if max(level[a], level[b]) + 1 > max_depth:
            state[6] += 1
            continue
        x = u + made
        la0, la1 = _users(a, u, uptr, aptr, uend, aend)
        lb0, lb1 = _users(b, u, uptr, aptr, uend, aend)
        r, o, i0, i1 = a, b, la0, la1
        if lb1 - lb0 < la1 - la0:
            r, o, i0, i1 = b, a, lb0, lb1
        aptr[made] = used
        nt = 0
        ra, ro, rdrop = np.int32(0), np.int32(0), np.int64(0)
        j, j1 = _users(o, u, uptr, aptr, uend, aend)
        # r's list is compacted as it is scanned where an eighth of it or more is users whose slot no
        # longer holds r (merged away: a hub's list is walked once per merge it takes part in)
        compact = 8 * dead[r] >= i1 - i0 > 0
        if compact:
            dead[r] = 0
        wpos = i0
        for i in range(i0, i1):
            v, sr = _user_at(r, u, i, urow, uslot, prow, pslot)
            if compact:
                if ent[sr] != r:
                    continue
                if wpos != i:
                    _move_user(r, u, i, wpos, urow, uslot, prow, pslot)
                wpos += 1
            # o's users are ascending by row as r's are: a galloping cursor finds row v among them
            # (sequential reads; row v's ids are touched only where both ids are listed)
            j = _gallop(o, u, urow, prow, j, j1, v)
            if j >= j1:
                if compact:   # no later row holds o: the rest of r's list kept, less its dead users
                    for t in range(i + 1, i1):
                        v, sr = _user_at(r, u, t, urow, uslot, prow, pslot)
                        if ent[sr] == r:
                            _move_user(r, u, t, wpos, urow, uslot, prow, pslot)
                            wpos += 1
                break
            if _row_at(o, u, j, urow, prow) != v or ent[sr] != r:
                continue
            so = _live_slot(o, u, v, j, j1, ent, urow, uslot, prow, pslot)
            if so < 0:
                continue
            lo, hi = rp[v], rp[v + 1]
            counted = _sampled(v, stride)
            if counted:  # the window pairs this row loses
                _lose(ent, lo, hi, np.int64(sr), r, o, w, pkeys, pvals, big, -1, tracked)
                _lose(ent, lo, hi, np.int64(so), o, r, w, pkeys, pvals, big, -1, tracked)
            keep, drop = (sr, so) if sr < so else (so, sr)
            ra, ro, rdrop = ent[keep], ent[drop], drop  # to undo a lone merge
            ent[keep] = x
            ent[drop] = -1
            dead[r] += 1
            dead[o] += 1
            prow[used] = v
            pslot[used] = keep
            used += 1
            for p in range(max(lo, keep - w), min(hi, keep + w + 1) if counted else lo):  # the pairs x gains
                y = ent[p]
                if p != keep and y >= 0 and y != x:  # x twice in a row (a repeated id) is no pair
                    if tmpc[y] == 0:
                        touched[nt] = y
                        nt += 1
                    tmpc[y] += 1
            work += 6 * w
        if compact:
            if r < u:
                uend[r] = wpos
            else:
                aend[r - u] = wpos
        work += i1 - i0 + 1
        pvals[ks] = 0
        if used - aptr[made] < 2:
            # in-lists with a repeated id: the window count counted occurrences, fewer than two in-lists
            # hold both; a node for one in-list saves nothing, so the row is put back as it was
            if used > aptr[made]:
                used -= 1
                v = prow[used]
                keep = pslot[used]
                lo, hi = rp[v], rp[v + 1]
                ent[keep] = ra
                ent[rdrop] = ro
                dead[r] -= 1
                dead[o] -= 1
                if _sampled(v, stride):
                    _lose(ent, lo, hi, np.int64(keep), np.int64(ra), np.int64(ro), w, pkeys, pvals, big, 1, tracked)
                    _lose(ent, lo, hi, np.int64(rdrop), np.int64(ro), np.int64(ra), w, pkeys, pvals, big, 1, tracked)
            for t in range(nt):
                tmpc[touched[t]] = 0
            continue
        aptr[made + 1] = used
        aend[made] = used
        state[7] += used - aptr[made]
        inputs[made, 0] = a
        inputs[made, 1] = b
        level[x] = max(level[a], level[b]) + 1
        made += 1
        for t in range(nt):
            y = touched[t]
            if tmpc[y] >= min_share:
                k2 = np.int64(y) * big + x  # y < x always
                s2 = _map_slot(pkeys, k2)
                pkeys[s2] = k2
                pvals[s2] = tmpc[y]
                tracked[y] = tracked[x] = 1
                fill += 1
                size = _push(hc, hk, size, np.int64(tmpc[y]), k2)
            tmpc[y] = 0
    state[0], state[1], state[2], state[4] = made, size, used, fill
    state[3] = 1 if (size > 0 and made < cap) else 0


@njit(nogil=True, cache=True)
def _rehash(pkeys, pvals, nkeys, nvals):
    for s in range(len(pkeys)):
        if pkeys[s] != EMPTY and pvals[s] > 0:
            t = _map_slot(nkeys, pkeys[s])
            nkeys[t] = pkeys[s]
            nvals[t] = pvals[s]


@njit(inline="always")
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(nogil=True, cache=True)
def _mark_ranks(ids, rank, bm, ent):
    """ent[i] = rank[ids[i]], and that rank's bit set in the bitmap ``bm``. Two passes, not one: in one,
    each bitmap store's address waits on a rank read that misses the cache, and the CPU holds the next
    rank reads behind it, one miss at a time (172 ns an entry on a 15M-entry block of the papers100M
    shape, 2-core Xeon VM); apart, the reads overlap (17 ns)."""
    for i in range(len(ids)):
        ent[i] = rank[ids[i]]
    for i in range(len(ent)):
        r = ent[i]
        bm[r >> 6] |= np.uint64(1) << np.uint64(r & 63)


@njit(nogil=True, cache=True)
def _number_ranks(bm, before):
    """before[k] = the bits set in the words of ``bm`` below k; returns the bits set."""
    j = 0
    for k in range(len(bm)):
        before[k] = j
        j += _popcount(bm[k])
    return j


@njit(nogil=True, cache=True)
def _glob_of(bm, order, glob):
    """glob[j] = order[r] for the j-th bit r set in ``bm`` (ranks ascending)."""
    j = 0
    for k in range(len(bm)):
        x = bm[k]
        while x:
            low = x & (~x + np.uint64(1))
            glob[j] = order[k * 64 + _popcount(low - np.uint64(1))]
            j += 1
            x ^= low


@njit(nogil=True, cache=True)
def _rank_to_local(ent, bm, before):
    """ent[i] (a rank) = its place among the bitmap's set bits."""
    for i in range(len(ent)):
        r = ent[i]
        k = r >> 6
        ent[i] = before[k] + _popcount(bm[k] & ((np.uint64(1) << np.uint64(r & 63)) - np.uint64(1)))


def local_ids(ids: np.ndarray, rank: np.ndarray, order: np.ndarray, extra: int = 0):
    """A block's local ids: (ent int32 — each entry's local id, local ids numbering the block's
    distinct graph ids by frequency rank — glob int64 [u + extra], glob[local] = graph id, u).
    ``order``: the graph id of each rank (rank's inverse). One random read an entry (its rank);
    the block's ranks are marked in a bitmap of n bits (cache-sized) and numbered by counting its
    set bits — no sort, no scratch array of n."""
    n = len(rank)
    bm = np.zeros((n + 63) // 64, dtype=np.uint64)
    ent = np.empty(len(ids), dtype=np.int32)
    _mark_ranks(ids, rank, bm, ent)
    before = np.empty(len(bm), dtype=np.int32 if n < 2**31 else np.int64)
    u = _number_ranks(bm, before)
    glob = np.empty(u + extra, dtype=np.int64)
    _glob_of(bm, order, glob)
    _rank_to_local(ent, bm, before)
    return ent, glob, u


@njit(nogil=True, cache=True)
def count_ids(ids, freq):
    """freq[x] += the occurrences of x in ``ids``."""
    for i in range(len(ids)):
        freq[ids[i]] += 1


@njit(nogil=True, cache=True)
def order_by_count(freq, order):
    """order = the ids by ``freq`` descending, ties by id (a counting sort: argsort(−freq, stable))."""
    top = 0
    for x in range(len(freq)):
        top = max(top, freq[x])
    start = np.zeros(top + 2, dtype=np.int64)
    for x in range(len(freq)):
        start[top - freq[x] + 1] += 1
    for f in range(1, top + 2):
        start[f] += start[f - 1]
    for x in range(len(freq)):
        k = top - freq[x]
        order[start[k]] = x
        start[k] += 1


@njit(nogil=True, cache=True)
def rewire_rows(rp, ids, orig, ent, u, glob, first_agg, out, lengths):
    """The rewired in-lists of a block in graph ids: each row's stored ids (``ids``, in their stored
    order) less those a merge took out (slots where ``ent`` no longer holds ``orig``, the sorted
    local ids before the greedy), then its aggregation nodes (local u + j → first_agg + j).
    Returns the entries written to ``out``; ``lengths`` gets each row's."""
    o = 0
    gone = np.empty(64, dtype=np.int64)
    for v in range(len(rp) - 1):
        a, b = rp[v], rp[v + 1]
        start = o
        ng = 0
        for s in range(a, b):
            if ent[s] != orig[s]:
                if ng == len(gone):
                    more = np.empty(2 * len(gone), dtype=np.int64)
                    more[:ng] = gone[:ng]
                    gone = more
                gone[ng] = glob[orig[s]]
                ng += 1
        for s in range(a, b):
            x = np.int64(ids[s])
            hit = -1
            for q in range(ng):
                if gone[q] == x:
                    hit = q
                    break
            if hit >= 0:
                ng -= 1
                gone[hit] = gone[ng]
            else:
                out[o] = x
                o += 1
        for s in range(a, b):
            y = np.int64(ent[s])
            if y >= u:
                out[o] = first_agg + (y - u)
                o += 1
        lengths[v] = o - start
    return o


@njit(nogil=True, cache=True)
def relabel_sort_rows(rp, ids, n, new, out):
    """out = each row of ``ids`` with aggregation ids (≥ n) renumbered (n + new[x − n]), sorted;
    insertion sort (linear on a row that is sorted already but for a short tail), np.sort for a long
    unsorted row."""
    for v in range(len(rp) - 1):
        a, b = rp[v], rp[v + 1]
        ok = True
        for i in range(a, b):
            x = np.int64(ids[i])
            if x >= n:
                x = n + new[x - n]
            out[i] = x
            if i > a and out[i - 1] > x:
                ok = False
        if ok:
            continue
        if b - a > 48:
            tail = a
            while tail + 1 < b and out[tail] <= out[tail + 1]:
                tail += 1
            if b - tail > 16:
                out[a:b] = np.sort(out[a:b])
                continue
        insertion_sort(out, a, b)


@njit(nogil=True, cache=True)
def sort_rows(rp, ent):
    """Each row of ent (row pointer rp) sorted in place (insertion sort for short rows)."""
    for v in range(len(rp) - 1):
        a, b = rp[v], rp[v + 1]
        if b - a > 48:
            ent[a:b] = np.sort(ent[a:b])
            continue
        insertion_sort(ent, a, b)


@njit(nogil=True, cache=True)
def _build_users(rp, ent, uptr, urow, uslot, cur, place):
    """urow[uptr[x]:uptr[x+1]]: the rows holding id x, ascending, and x's slot in each (uslot): a
    counting sort of the entries (``uptr`` all 0 on entry: filled here; ``cur`` [u] and ``place``
    [entries] scratch). Each entry's place is found in one pass and written to in another: written in
    one pass, each write's address waits on a read of cur that misses the cache and holds the next
    reads behind it (205 ns an entry on a 15M-entry block of the papers100M shape, 2-core Xeon VM)."""
    for i in range(len(ent)):
        uptr[ent[i] + 1] += 1
    for x in range(1, len(uptr)):
        uptr[x] += uptr[x - 1]
    for x in range(len(cur)):
        cur[x] = uptr[x]
    for i in range(len(ent)):
        x = ent[i]
        place[i] = cur[x]
        cur[x] += 1
    for v in range(len(rp) - 1):
        for i in range(rp[v], rp[v + 1]):
            urow[place[i]] = v
            uslot[place[i]] = i


def _pow2(x: int) -> int:
    return 1 << max(10, int(x - 1).bit_length())


KEEP_PER_NODE = 32  # candidates kept per aggregation node the capacity allows (the rest could never be merged)


def search_block(rp: np.ndarray, ent: np.ndarray, u: int, cap: int, window: int, min_share: int = 2,
                 max_depth: int = 16, room: int = 1 << 28, check=None, stride: int = 1, work=None, threads: int = 1):
    """The lazy greedy on one block: ``rp`` its row pointer (from 0), ``ent`` int32 local ids (0..u−1,
    local id order = frequency order) of each row, sorted here. Returns (inputs [k, 2] local ids,
    levels [k], ent, stats): aggregation node j is local id u + j, ``ent`` holds each row's in-list
    with the merged slots emptied (−1), ``stats`` the candidates, pops and rows merged (and ``orig``: the sorted
    ``ent`` before the greedy). ``room``: bytes for counting candidates;
    ``work``: buffers reused across blocks (:func:`count_candidates`); ``threads``: the rows sorted
    and the pairs counted on that many threads (the greedy runs on one)."""
    rp = np.ascontiguousarray(rp, dtype=np.int64)
    ent = np.ascontiguousarray(ent, dtype=np.int32)
    side_by_side(lambda r0, r1: sort_rows(rp[r0:r1 + 1], ent), row_parts(rp, max(1, int(threads))))
    big = np.int64(u + cap + 1)
    keys, counts = count_candidates(rp, ent, window, big, room, min_share, check, keep=KEEP_PER_NODE * max(cap, 128),
                                    stride=stride, work=work, threads=threads)
    if check is not None:
        check()
    size = len(keys)
    hc = np.empty(max(1024, size + size // 4), dtype=np.int64)
    hk = np.empty_like(hc)
    hc[:size], hk[:size] = counts, keys
    pkeys = np.full(_pow2(2 * size + 1024), -1, dtype=np.int64)
    pvals = np.zeros(len(pkeys), dtype=np.int64)
    fill = map_fill(pkeys, pvals, keys, counts)
    tracked = np.zeros(u + cap + 1, dtype=np.uint8)
    tracked[keys // big] = 1
    tracked[keys % big] = 1
    del keys, counts
    heapify(hc, hk, size)
    uptr = np.zeros(u + 1, dtype=np.int64)
    pslot = np.empty(max(1, len(ent)), dtype=np.int64 if len(ent) >= 2**31 else np.int32)
    users = np.empty((max(1, len(ent)), 2), dtype=pslot.dtype)  # a user's row and slot side by side: one cache line
    urow, uslot = users[:, 0], users[:, 1]
    _build_users(rp, ent, uptr, urow, uslot, np.empty(u, dtype=pslot.dtype), pslot)   # (pslot: scratch until the greedy)
    orig = ent.copy()
    aptr = np.zeros(cap + 1, dtype=np.int64)
    uend = uptr[1:].copy()   # the live ends of the users' lists (_users)
    aend = np.zeros(cap + 1, dtype=np.int64)
    dead = np.zeros(u + cap + 1, dtype=np.int32)   # users per id merged away and still listed
    prow = np.empty(max(1, len(ent)), dtype=np.int32)
    level = np.zeros(u + cap + 1, dtype=np.int32)
    inputs = np.empty((cap, 2), dtype=np.int64)
    tmpc = np.zeros(u + cap + 1, dtype=np.int32)
    touched = np.empty(u + cap + 1, dtype=np.int32)
    state = np.array([0, size, 0, 1, fill, 0, 0, 0], dtype=np.int64)
    t_greedy = time.perf_counter()
    while True:
        greedy_steps(rp, ent, u, uptr, urow, uslot, aptr, uend, aend, dead, prow, pslot, level, inputs, hc, hk, pkeys, pvals,
                     tracked, tmpc, touched, state, window, min_share, max_depth, cap, big, STEP_OPS, stride)
        if state[3] == 0:
            break
        if state[3] == 2:
            need = int(state[1]) + int(hc[0]) * window + 1
            if need > len(hc):
                grow = max(len(hc), need - len(hc))
                hc = np.concatenate([hc, np.empty(grow, dtype=np.int64)])
                hk = np.concatenate([hk, np.empty(grow, dtype=np.int64)])
            want = _pow2(2 * (int(state[4]) + 2 * int(hc[0]) * window + 1))
            if want > len(pkeys):
                nkeys = np.full(want, -1, dtype=np.int64)
                nvals = np.zeros(want, dtype=np.int64)
                _rehash(pkeys, pvals, nkeys, nvals)
                pkeys, pvals = nkeys, nvals
                state[4] = int((pkeys >= 0).sum())
        if check is not None:
            check()
    made = int(state[0])
    stats = {"candidates": size, "pops": int(state[5]), "rows_merged": int(state[7]), "too_deep": int(state[6]),
             "greedy_seconds": time.perf_counter() - t_greedy, "orig": orig}
    return inputs[:made].copy(), level[u:u + made].copy(), ent, stats
