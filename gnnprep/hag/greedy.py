"""The greedy HAG search on one row block held in memory (numba kernels; the streamed driver is
:mod:`gnnprep.hag.stream`).

Jia et al. ("Redundancy-Free Computation Graphs for Graph Neural Networks", KDD 2020), Algorithm 3,
merges the pair of ids shared by the most in-lists, one pair at a time, and keeps every pair's count
up to date. Counting every pair costs Σ_v d_v² / 2, so this search counts *window* pairs: each
in-list is sorted by global frequency (ids in more in-lists first, as the rounds search does) into
*slots*, and a pair's count is the number of in-lists where both ids sit at most w slots apart.

1. Candidates: the window pairs that occur at least twice (a Bloom filter finds them in one pass;
   a hash table counts only those), the ``KEEP_PER_NODE`` × capacity counted most.
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
20·E + 25·(u + c) + 24·c + 48·K bytes, plus the counting pass (the filter at ≤ 8 bits a counted
pair, the table at 16 bytes a slot), bounded by ``room``. Every kernel works in bounded steps
(``STEP_OPS``), so a signal is acted on between calls.

Ids inside a block are *local*: 0..u−1 are the block's distinct graph ids in frequency order, u + j
is the block's j-th aggregation node.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

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


@njit(nogil=True, cache=True)
def _mark_pairs(rp, ent, r0, r1, w, big, bits, ops, stride):
    """Mark the window pairs of rows r0..r1−1 in a one-hash Bloom filter (``bits``: word 2i holds
    "seen", word 2i + 1 "seen twice" for the same 64 hashes, one cache line for both), setting
    "twice" for those whose "seen" bit was already set: every pair that occurs twice is marked so.
    Returns the row reached (stops after about ``ops`` pairs)."""
    nbits = np.uint64(len(bits) * 32)
    done = 0
    for v in range(r0, r1):
        a0, a1 = _row_span(rp, v, stride)
        for i in range(a0, a1):
            x = np.int64(ent[i])
            for j in range(i + 1, min(a1, i + 1 + w)):
                key = _pair_key(x, np.int64(ent[j]), big)
                if key < 0:
                    continue
                h = _mix(key) % nbits
                word = 2 * np.int64(h >> np.uint64(6))
                bit = np.uint64(1) << (h & np.uint64(63))
                if bits[word] & bit:
                    bits[word + 1] |= bit
                else:
                    bits[word] |= bit
        done += (a1 - a0) * w
        if done >= ops:
            return v + 1
    return r1


@njit(nogil=True, cache=True)
def _count_pairs(rp, ent, r0, r1, w, big, parts, part, bits, tkeys, tvals, fill, ops, stride):
    """Add the window pairs of rows r0..r1−1 that the filter ``bits`` marks "twice" and whose key (min·big + max)
    hashes to partition ``part`` of ``parts`` into the table (``fill[0]`` slots used); returns the
    row reached (stops after about ``ops`` pairs), or −1 once the table is 3/4 full."""
    mask = np.int64(len(tkeys) - 1)
    nbits = np.uint64(len(bits) * 32)
    limit = 3 * len(tkeys) // 4
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
                if parts > 1 and np.int64((h >> np.uint64(40)) % np.uint64(parts)) != part:
                    continue  # another partition's (checked first: no memory touched)
                b = h % nbits
                if (bits[2 * np.int64(b >> np.uint64(6)) + 1] & (np.uint64(1) << (b & np.uint64(63)))) == 0:
                    continue
                s = np.int64(h >> np.uint64(8)) & mask
                while True:
                    k = tkeys[s]
                    if k == key:
                        tvals[s] += 1
                        break
                    if k == EMPTY:
                        tkeys[s] = key
                        tvals[s] = 1
                        fill[0] += 1
                        if fill[0] > limit:
                            return -1
                        break
                    s = (s + 1) & mask
        done += (a1 - a0) * w
        if done >= ops:
            return v + 1
    return r1


def window_pairs(deg: np.ndarray, w: int) -> int:
    """Σ_v Σ_{k=1..w} max(0, d_v − k): the window pair occurrences of in-lists of lengths ``deg``."""
    d = deg.astype(np.int64)
    k = np.minimum(d - 1, w).clip(0)
    return int((k * d - k * (k + 1) // 2).sum())


def _pow2_at_most(x: int) -> int:
    return 1 << max(6, int(max(64, x)).bit_length() - 1)


@njit(nogil=True, cache=True)
def _popcount_twice(bits):
    c = 0
    for i in range(1, len(bits), 2):
        x = bits[i]
        while x:
            x &= x - np.uint64(1)
            c += 1
    return c


def _top(keys: np.ndarray, counts: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` candidates with the largest counts (ties: any), or all when fewer."""
    if len(keys) <= keep:
        return keys, counts
    cut = np.argpartition(-counts, keep - 1)[:keep]
    return keys[cut], counts[cut]


def count_candidates(rp, ent, w, big, room, min_share=2, check=None, keep=None, stride=1):
    """The window candidates of a block counted ≥ ``min_share`` (2 or more) times: (keys, counts),
    keys min·big + max, at most ``keep`` of them (those counted most; None: all), within about
    ``room`` bytes.

    A first pass marks, in a Bloom filter of about 4 bits a pair (half the room at most), the pairs
    that may occur twice; its marks also estimate how many distinct pairs do. A second pass counts
    only those in a hash table sized for that estimate, one hash partition at a time when the table
    would not fit the room (a partition that fills the table is counted again in twice as many).
    Pairs that occur once — most of them in a graph without much overlap — never reach the table.
    ``check`` is called between kernel calls. ``stride`` > 1 counts only the rows :func:`_sampled`
    picks (about one in ``stride``)."""
    nrows = len(rp) - 1
    total = window_pairs(np.diff(rp), w) // stride + 1
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    nbits = min(_pow2_at_most(4 * total * 2), _pow2_at_most(room * 8 // 4))  # per filter: 2 filters in room/2
    bits = np.zeros(2 * (nbits // 64), dtype=np.uint64)
    r = 0
    while r < nrows:
        r = _mark_pairs(rp, ent, r, nrows, w, np.int64(big), bits, STEP_OPS, stride)
        if check is not None:
            check()
    repeated = _popcount_twice(bits) + 1024      # distinct pairs that may occur twice (an upper estimate)
    table_room = max(1 << 16, room - bits.nbytes)
    parts = max(1, math.ceil(2 * repeated * 16 / table_room))
    slots = max(1024, _pow2_at_most(max(1024, table_room // 16)))
    slots = min(slots, max(1024, 1 << int(2 * math.ceil(repeated / parts) * 4 // 3).bit_length()))
    tkeys = np.empty(slots, dtype=np.int64)
    tvals = np.empty(slots, dtype=np.int64)
    while True:
        out_k, out_c = np.empty(0, np.int64), np.empty(0, np.int64)
        fill = np.zeros(1, dtype=np.int64)
        for part in range(parts):
            tkeys.fill(-1)
            fill[0] = 0
            r = 0
            while 0 <= r < nrows:
                r = _count_pairs(rp, ent, r, nrows, w, np.int64(big), parts, part, bits, tkeys, tvals, fill, STEP_OPS,
                                 stride)
                if check is not None:
                    check()
            if r < 0:
                break
            good = (tkeys >= 0) & (tvals >= min_share)
            out_k, out_c = np.concatenate([out_k, tkeys[good]]), np.concatenate([out_c, tvals[good]])
            del good
            if keep is not None:
                out_k, out_c = _top(out_k, out_c, keep)
        else:
            return out_k, out_c
        parts *= 2


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
def _find(arr, lo, hi, x):
    """Index of x in the ascending arr[lo:hi], or −1."""
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if arr[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo < end and arr[lo] == x:
        return lo
    return -1


@njit(inline="always")
def _slot_in(x, v, rp, orig, ent, u, aptr, prow, pslot):
    """The slot of id x in row v, or −1 when x is not (or no longer) there."""
    if x < u:
        s = _find(orig, rp[v], rp[v + 1], x)
        if s < 0:
            return -1
        while s < rp[v + 1] and orig[s] == x:  # a repeated id: any copy still there
            if ent[s] == x:
                return s
            s += 1
        return -1
    j = x - u
    k = _find(prow, aptr[j], aptr[j + 1], v)
    if k >= 0:
        s = pslot[k]
        if ent[s] == x:
            return s
    return -1


@njit(inline="always")
def _users(x, u, uptr, aptr):
    if x < u:
        return uptr[x], uptr[x + 1]
    return aptr[x - u], aptr[x - u + 1]


@njit(inline="always")
def _user_at(x, u, i, urow, uslot, prow, pslot):
    """(row, slot) of the i-th user of x (the slot x was written to; x is still there iff ent[slot] == x)."""
    if x < u:
        return urow[i], uslot[i]
    return prow[i], pslot[i]


@njit(nogil=True, cache=True)
def greedy_steps(rp, orig, ent, u, uptr, urow, uslot, aptr, prow, pslot, level, inputs, hc, hk, pkeys, pvals,
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
        la0, la1 = _users(a, u, uptr, aptr)
        lb0, lb1 = _users(b, u, uptr, aptr)
        r, o, i0, i1 = a, b, la0, la1
        if lb1 - lb0 < la1 - la0:
            r, o, i0, i1 = b, a, lb0, lb1
        aptr[made] = used
        nt = 0
        ra, ro, rdrop = np.int32(0), np.int32(0), np.int64(0)
        for i in range(i0, i1):
            v, sr = _user_at(r, u, i, urow, uslot, prow, pslot)
            if ent[sr] != r:
                continue
            so = _slot_in(o, v, rp, orig, ent, u, aptr, prow, pslot)
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
                if _sampled(v, stride):
                    _lose(ent, lo, hi, np.int64(keep), np.int64(ra), np.int64(ro), w, pkeys, pvals, big, 1, tracked)
                    _lose(ent, lo, hi, np.int64(rdrop), np.int64(ro), np.int64(ra), w, pkeys, pvals, big, 1, tracked)
            for t in range(nt):
                tmpc[touched[t]] = 0
            continue
        aptr[made + 1] = used
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


@njit(nogil=True, cache=True)
def _distinct_ranks(ids, rank, scratch, out):
    """The distinct values of rank[ids] into out (first-seen order); marks them in ``scratch``."""
    u = 0
    for i in range(len(ids)):
        r = rank[ids[i]]
        if scratch[r] < 0:
            scratch[r] = 0
            out[u] = r
            u += 1
    return u


@njit(nogil=True, cache=True)
def _assign_local(ids, rank, scratch, ranks, ent, glob):
    """ent[i] = the place of rank[ids[i]] among the sorted ``ranks``; glob[local] = the graph id;
    ``scratch`` is left all −1 again."""
    for j in range(len(ranks)):
        scratch[ranks[j]] = j
    for i in range(len(ids)):
        loc = scratch[rank[ids[i]]]
        ent[i] = loc
        glob[loc] = ids[i]
    for j in range(len(ranks)):
        scratch[ranks[j]] = -1


def local_ids(ids: np.ndarray, rank: np.ndarray, scratch: np.ndarray, extra: int = 0):
    """A block's local ids: (ent int32 — each entry's local id, local ids numbering the block's
    distinct graph ids by frequency rank — glob int64 [u + extra], glob[local] = graph id, u).
    ``scratch``: int32 [n] all −1 (left so); O(E + u log u), no sort of the entries."""
    ranks = np.empty(len(ids), dtype=rank.dtype)
    u = _distinct_ranks(ids, rank, scratch, ranks)
    ranks = np.sort(ranks[:u])
    ent = np.empty(len(ids), dtype=np.int32)
    glob = np.empty(u + extra, dtype=np.int64)
    _assign_local(ids, rank, scratch, ranks, ent, glob)
    return ent, glob, u


@njit(nogil=True, cache=True)
def sort_rows(rp, ent):
    """Each row of ent (row pointer rp) sorted in place (insertion sort for short rows)."""
    for v in range(len(rp) - 1):
        a, b = rp[v], rp[v + 1]
        if b - a > 48:
            ent[a:b] = np.sort(ent[a:b])
            continue
        for i in range(a + 1, b):
            x = ent[i]
            j = i - 1
            while j >= a and ent[j] > x:
                ent[j + 1] = ent[j]
                j -= 1
            ent[j + 1] = x


@njit(nogil=True, cache=True)
def _build_users(rp, ent, uptr, urow, uslot):
    """urow[uptr[x]:uptr[x+1]]: the rows holding id x, ascending, and x's slot in each (uslot): a
    counting sort of the entries."""
    cur = uptr[:-1].copy()
    for v in range(len(rp) - 1):
        for i in range(rp[v], rp[v + 1]):
            x = ent[i]
            urow[cur[x]] = v
            uslot[cur[x]] = i
            cur[x] += 1


def _pow2(x: int) -> int:
    return 1 << max(10, int(x - 1).bit_length())


KEEP_PER_NODE = 32  # candidates kept per aggregation node the capacity allows (the rest could never be merged)


def search_block(rp: np.ndarray, ent: np.ndarray, u: int, cap: int, window: int, min_share: int = 2,
                 max_depth: int = 16, room: int = 1 << 28, check=None, stride: int = 1):
    """The lazy greedy on one block: ``rp`` its row pointer (from 0), ``ent`` int32 local ids (0..u−1,
    local id order = frequency order) of each row, sorted here. Returns (inputs [k, 2] local ids,
    levels [k], ent, stats): aggregation node j is local id u + j, ``ent`` holds each row's in-list
    with the merged slots emptied (−1), ``stats`` the candidates, pops and rows merged. ``room``: bytes for counting candidates."""
    rp = np.ascontiguousarray(rp, dtype=np.int64)
    ent = np.ascontiguousarray(ent, dtype=np.int32)
    sort_rows(rp, ent)
    big = np.int64(u + cap + 1)
    keys, counts = count_candidates(rp, ent, window, big, room, min_share, check, keep=KEEP_PER_NODE * max(cap, 128),
                                    stride=stride)
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
    np.cumsum(np.bincount(ent, minlength=u), out=uptr[1:])
    urow = np.empty(len(ent), dtype=np.int32)
    pslot = np.empty(max(1, len(ent)), dtype=np.int64 if len(ent) >= 2**31 else np.int32)
    uslot = np.empty_like(pslot)
    _build_users(rp, ent, uptr, urow, uslot)
    orig = ent.copy()
    aptr = np.zeros(cap + 1, dtype=np.int64)
    prow = np.empty(max(1, len(ent)), dtype=np.int32)
    level = np.zeros(u + cap + 1, dtype=np.int32)
    inputs = np.empty((cap, 2), dtype=np.int64)
    tmpc = np.zeros(u + cap + 1, dtype=np.int32)
    touched = np.empty(u + cap + 1, dtype=np.int32)
    state = np.array([0, size, 0, 1, fill, 0, 0, 0], dtype=np.int64)
    while True:
        greedy_steps(rp, orig, ent, u, uptr, urow, uslot, aptr, prow, pslot, level, inputs, hc, hk, pkeys, pvals,
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
    stats = {"candidates": size, "pops": int(state[5]), "rows_merged": int(state[7]), "too_deep": int(state[6])}
    return inputs[:made].copy(), level[u:u + made].copy(), ent, stats
