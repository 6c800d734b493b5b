"""Compiled kernels of :mod:`gnnprep.sparse.csr_builder`: each fuses several numpy passes (and their
temporary arrays) into one or two loops, producing exactly what the numpy steps produce.

Imported only when a chunk or bucket is large enough to pay for loading numba (see
``csr_builder.KERNEL_MIN_ITEMS``). All release the GIL, so hashing and HDF5 writes of the previous
block can run beside them.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

SMALL_ROW = 16   # rows of at most this many keys are sorted by insertion, longer ones by quicksort
PLACE_CHUNK = 2048   # keys whose places are found before they are written (place_keys, sort_keys)
RADIX_BUCKETS = 2048   # sort_keys' first pass groups keys into at most this many buckets of rows (write streams
                       # that stay in a core's L2, and histograms in L1)


@njit(nogil=True, cache=True)
def scatter_keys(src, dst, n, rows_per_bucket, symmetrize, counts, out):
    """Keys ``dst * n + src`` of the edges that are not self-loops, and with ``symmetrize`` also
    ``src * n + dst``, grouped by bucket (``row // rows_per_bucket``) into ``out``; ``counts[b]``
    receives the size of bucket b. Within a bucket, keys keep the order of numpy's stable bucket
    sort of ``concatenate([forward, reverse])``: all forward keys in edge order, then the reverse
    ones. Returns (self-loops dropped, keys written)."""
    m = len(src)
    loops = 0
    for i in range(m):
        s, d = src[i], dst[i]
        if s == d:
            loops += 1
            continue
        counts[d // rows_per_bucket] += 1
        if symmetrize:
            counts[s // rows_per_bucket] += 1
    pos = np.empty(len(counts), dtype=np.int64)
    total = 0
    for b in range(len(counts)):
        pos[b] = total
        total += counts[b]
    for reverse in range(2 if symmetrize else 1):   # all forward keys, then all reverse ones
        for i in range(m):
            s, d = (dst[i], src[i]) if reverse else (src[i], dst[i])
            if s != d:
                b = d // rows_per_bucket
                out[pos[b]] = d * n + s
                pos[b] += 1
    return loops, total


@njit(nogil=True, cache=True)
def unique_sorted(keys):
    """Drop repeated keys of a sorted array in place; return how many remain (a prefix)."""
    if len(keys) == 0:
        return 0
    k = 1
    for i in range(1, len(keys)):
        if keys[i] != keys[k - 1]:
            keys[k] = keys[i]
            k += 1
    return k


@njit(nogil=True, cache=True)
def columns(keys, n, out):
    """``out[i] = keys[i] % n`` for sorted non-negative keys, dividing only where the row changes
    (an int64 division per entry was the bulk of the numpy version's time)."""
    if len(keys) == 0:
        return
    base = keys[0] // n * n
    for i in range(len(keys)):
        k = keys[i]
        if k - base >= n:
            base = k // n * n
        out[i] = k - base


@njit(nogil=True, cache=True)
def row_ends(keys, a, b, n, r0, out, offset):
    """``out[r - r0] = offset + j`` with j the first index in [a, b] of sorted ``keys`` whose row
    (key // n) exceeds r, for r in [r0, r0 + len(out)): the row pointers of rows r0.. by one merge
    of rows and keys, no division and no degree array."""
    j = a
    for r in range(r0, r0 + len(out)):
        limit = (r + 1) * n
        while j < b and keys[j] < limit:
            j += 1
        out[r - r0] = offset + j


@njit(inline="always", nogil=True, cache=True)
def insertion_sort(arr, a, b):
    """arr[a:b] sorted in place (linear on a nearly sorted run; the fastest for a few values)."""
    for i in range(a + 1, b):
        x = arr[i]
        j = i - 1
        while j >= a and arr[j] > x:
            arr[j + 1] = arr[j]
            j -= 1
        arr[j + 1] = x


@njit(inline="always", nogil=True, cache=True)
def _row_of(k, n, inv):
    """``k // n`` for 0 <= k < n * n through a float product and one correction step: the float
    estimate is within 1 of the quotient (relative error ~3 * 2**-53 of a quotient below 2**32), and an
    int64 division per key would cost more than the rest of the pass."""
    r = np.int64(k * inv)
    if r * n > k:
        r -= 1
    elif (r + 1) * n <= k:
        r += 1
    return r


@njit(parallel=True, nogil=True, cache=True)
def sort_keys(keys, lo, rows, n, out, threads):
    """``out[:] = np.sort(keys)`` for keys ``row * n + col`` of rows in [lo, lo + rows), ``keys`` used as
    scratch (overwritten). Linear in the keys plus the rows instead of numpy's O(m log m) sort: a
    counting sort by row in two passes of cache-sized fan-out (a most-significant-first radix
    partition, as cache-conscious radix sorts do, Satish et al., SIGMOD 2010): the keys grouped into at most RADIX_BUCKETS buckets of 2^s
    consecutive rows (per-thread histograms, a stable scatter into ``out``), then each bucket on its
    own — its keys counted and placed by row into ``keys`` and copied back, all within the bucket's
    span, which stays in cache — and each row's keys sorted in place (insertion for short rows,
    quicksort for long ones), buckets shared among threads by keys. A single pass straight to each
    key's row (the kernel this replaces) wrote to as many places as there are rows, each write a
    cache miss: 48.6 ns a key against 24.7 here (40M power-law keys over 2.78M rows, 2 threads,
    2-core Xeon VM; np.sort's result both), ingest of papers100M's shape at 1/40 13.9 / 11.8 s ->
    11.4 / 11.0 s. The scatter finds the places of PLACE_CHUNK keys before it writes them
    (:func:`place_keys`).
    ``threads``: numba's thread count (a cached kernel cannot read it)."""
    m = len(keys)
    inv = 1.0 / n
    shift = 0
    while rows > 0 and ((rows - 1) >> shift) >= RADIX_BUCKETS:
        shift += 1
    nb = ((rows - 1) >> shift) + 1 if rows > 0 else 1
    hist = np.zeros((threads, nb), dtype=np.int64)
    step = (m + threads - 1) // threads
    for t in prange(threads):
        h = hist[t]
        for i in range(t * step, min(m, (t + 1) * step)):
            h[(_row_of(keys[i], n, inv) - lo) >> shift] += 1
    starts = np.empty(nb + 1, dtype=np.int64)
    total = 0
    for b in range(nb):
        starts[b] = total
        for t in range(threads):
            c = hist[t, b]
            hist[t, b] = total
            total += c
    starts[nb] = total
    for t in prange(threads):   # pass 1: keys grouped by bucket into out (the places of a chunk, then the writes)
        h = hist[t]
        where = np.empty(PLACE_CHUNK, dtype=np.int64)
        end = min(m, (t + 1) * step)
        for c0 in range(t * step, end, PLACE_CHUNK):
            c1 = min(end, c0 + PLACE_CHUNK)
            for i in range(c0, c1):
                b = (_row_of(keys[i], n, inv) - lo) >> shift
                where[i - c0] = h[b]
                h[b] += 1
            for i in range(c0, c1):
                out[where[i - c0]] = keys[i]
    width = np.int64(1) << shift
    bounds = row_shares(starts, nb, threads)
    for t in prange(threads):   # pass 2: each bucket by row, in cache
        at = np.empty(width + 1, dtype=np.int64)
        for b in range(bounds[t], bounds[t + 1]):
            s, e = starts[b], starts[b + 1]
            if e == s:
                continue
            first = lo + b * width
            nr = min(width, rows - b * width)
            at[:nr + 1] = 0
            for i in range(s, e):
                at[_row_of(out[i], n, inv) - first + 1] += 1
            for r in range(nr):
                at[r + 1] += at[r]
            for i in range(s, e):
                r = _row_of(out[i], n, inv) - first
                keys[s + at[r]] = out[i]
                at[r] += 1
            out[s:e] = keys[s:e]
            a = s
            for r in range(nr):   # (at[r] is now the end of row r)
                _sort_span(out, a, s + at[r])
                a = s + at[r]


@njit(nogil=True, cache=True)
def row_shares(starts, rows, threads):
    """Row bounds cutting rows 0..rows-1 (keys starts[r]..starts[r+1]-1) into ``threads`` runs of
    about equal keys."""
    total = starts[rows]
    bounds = np.empty(threads + 1, dtype=np.int64)
    bounds[0] = 0
    r = 0
    for t in range(1, threads):
        target = total * t // threads
        while r < rows and starts[r] < target:
            r += 1
        bounds[t] = r
    bounds[threads] = rows
    return bounds


@njit(inline="always", nogil=True, cache=True)
def _sort_span(keys, a, b):
    """keys[a:b] (one row's keys) sorted in place: insertion for short rows, quicksort for long ones."""
    if b - a > SMALL_ROW:
        keys[a:b].sort()
    else:
        insertion_sort(keys, a, b)


@njit(inline="always", nogil=True, cache=True)
def _sort_each_row(keys, starts, r0, r1):
    """Each row's keys keys[starts[r]:starts[r+1]] sorted in place, for r in r0..r1-1."""
    for r in range(r0, r1):
        _sort_span(keys, starts[r], starts[r + 1])


@njit(parallel=True, nogil=True, cache=True)
def sort_rows(keys, starts, threads):
    """Each row's keys sorted in place (rows grouped already, row r at starts[r]..starts[r+1]-1):
    then ``keys`` is sorted, as :func:`sort_keys` leaves them, without a second array."""
    rows = len(starts) - 1
    bounds = row_shares(starts, rows, threads)
    for t in prange(threads):
        _sort_each_row(keys, starts, bounds[t], bounds[t + 1])


@njit(nogil=True, cache=True)
def count_rows(src, dst, symmetrize, counts):
    """counts[v] += the keys of row v that :func:`place_keys` will place for these edges: one per
    edge u -> v that is not a self-loop, and with ``symmetrize`` one more in row u."""
    for i in range(len(src)):
        s, d = src[i], dst[i]
        if s != d:
            counts[d] += 1
            if symmetrize:
                counts[s] += 1


@njit(inline="always", nogil=True, cache=True)
def _place(row, col, n, pos, ends, j, where, what):
    """where[j] = pos[row] and what[j] = row * n + col, pos[row] advanced; False (nothing kept) past
    ends[row]."""
    p = pos[row]
    if p >= ends[row]:
        return False
    where[j] = p
    what[j] = row * n + col
    pos[row] = p + 1
    return True


@njit(parallel=True, nogil=True, cache=True)
def place_keys(src, dst, n, symmetrize, pos, ends, out, bounds):
    """Each key ``v * n + u`` of the edges (and ``u * n + v`` with ``symmetrize``; self-loops
    dropped) written at out[pos[v]], pos[v] advanced: keys grouped by row as they arrive, a counting
    sort done while reading. Thread t places the keys of rows bounds[t]..bounds[t+1]-1 (each thread
    reads every edge; the writes, the random part, are shared). Returns (self-loops, keys placed),
    or (-1, 0) when a row would pass its end ends[v] (more keys than :func:`count_rows` counted: the
    edges changed between the two reads).

    The places of PLACE_CHUNK edges' keys are found first and the keys written after: a write whose
    address waits on a read of pos that misses the cache holds the next reads behind it, so one pass
    runs one miss at a time (104 ns a key at papers100M's shape at 1/40, 2-core Xeon VM; 44 ns so)."""
    parts = len(bounds) - 1
    placed = np.zeros(parts, dtype=np.int64)
    over = np.zeros(parts, dtype=np.int64)
    loops = np.zeros(parts, dtype=np.int64)
    for t in prange(parts):
        lo, hi = bounds[t], bounds[t + 1]
        where = np.empty(2 * PLACE_CHUNK, dtype=np.int64)
        what = np.empty(2 * PLACE_CHUNK, dtype=np.int64)
        k = 0
        for c0 in range(0, len(src), PLACE_CHUNK):
            j = 0
            for i in range(c0, min(len(src), c0 + PLACE_CHUNK)):
                s, d = src[i], dst[i]
                if s == d:
                    loops[t] += 1   # every thread sees every edge: thread 0's count is the one
                    continue
                if lo <= d < hi:
                    if not _place(d, s, n, pos, ends, j, where, what):
                        over[t] = 1
                        break
                    j += 1
                if symmetrize and lo <= s < hi:
                    if not _place(s, d, n, pos, ends, j, where, what):
                        over[t] = 1
                        break
                    j += 1
            for q in range(j):
                out[where[q]] = what[q]
            k += j
            if over[t]:
                break
        placed[t] = k
    if over.any():
        return -1, 0
    return loops[0], placed.sum()
