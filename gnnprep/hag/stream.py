"""The streamed HAG search: S read in row blocks under a memory budget, the lazy greedy of
:mod:`gnnprep.hag.greedy` run on each block, the blocks' results kept in a resumable partial file
and assembled into ``hag.h5`` (Jia et al., KDD 2020; the structure in :mod:`gnnprep.hag.structure`).

1. One pass over the stored ids counts every id's in-list frequency (ids in more in-lists first:
   the order the window candidates are taken in, as in the rounds search).
2. Rows are cut into contiguous blocks of at most ``block_entries`` stored entries
   (:func:`search_plan`: as many as the budget holds, unless that search is predicted to take more
   than a few minutes). Each block runs the lazy greedy on its own
   in-lists with its share of the capacity (about capacity left × block entries / entries left), so its
   aggregation nodes serve only its rows: cover(v) = N(v) holds block by block, and a pair shared
   by rows of two blocks is merged in each (the price of bounded memory; one block when S fits).
   Where the budget holds several blocks, up to numba's threads search side by side
   (:func:`searched_blocks`; the same HAG as one at a time, :func:`block_caps`).
3. Aggregation nodes are numbered by level across all blocks, the in-lists rewritten in those ids.

The memory model and the search time (:func:`stream_plan`) come from sizes alone, for
``gnnprep plan``-style questions and ``--dry-run``; the time is in seconds of the 2-core reference
machine, times ``scale`` (``gnnprep calibrate`` measures this machine's: ``hag_search_scale``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np

from gnnprep.core.errors import ArgumentError, OptionError
from gnnprep.core.sizes import format_size, format_size_up
from gnnprep.hag.greedy import (
    count_ids,
    local_ids,
    order_by_count,
    relabel_sort_rows,
    rewire_rows,
    row_parts,
    search_block,
    side_by_side,
    window_pairs,
)
from gnnprep.hag.structure import Hag

READ_ENTRIES = 1 << 22        # stored ids read at a time while counting frequencies
BLOCK_ENTRY_BYTES = 112       # bytes per stored entry of a block: its ids and preparation, the greedy's
                              # arrays, the candidate heap and the counting table (measured, see stream_plan)
COUNT_ENTRY_BYTES = 24        # of those, the counting table's share
DEFAULT_WINDOW = 16           # the smallest default window
MAX_DEFAULT_WINDOW = 256      # the largest
PAIRS_PER_ENTRY = 16          # the default window is the largest whose pair occurrences stay within this many per entry
WIDE_MAX_ENTRIES = 1 << 21    # ... on graphs up to this many stored entries (a merge's cost grows with the window)
COUNTED_PAIRS_PER_ENTRY = 2   # beyond that size, pairs are counted on a sample of rows: about this many per entry
SEARCH_NS_PER_PAIR = 25.0     # predicted seconds: per counted window pair occurrence (sizing, scattering and
SEARCH_NS_PER_ENTRY = 160.0   # counting its bucket), and per stored entry (reading, local ids, sorting, the users'
SEARCH_SECONDS_FIXED = 1.0    # index, the greedy, the partial file, the assembly), plus start-up. The papers100M
                              # shape at 1/10 (2-core machine, quiet): 64 s measured, 68 s predicted. The greedy
                              # also costs ~1 us per stored entry it saves (each merged row: its window pairs'
                              # counts, and the pops): on graphs of much overlap (8M entries, aggregation ratio
                              # 1.09-1.39) 1.5-2x the prediction, a term that sizes cannot give (the savings are
                              # what the search finds)
SEARCH_BLOCK_REF_ENTRIES = 15_000_000   # the block size those constants were measured at (the 1/10 shape at 2 GiB)
SEARCH_BLOCK_GROWTH = 0.35    # above it, the time per entry grows as (block entries / ref)^0.35 (search_growth)
MIN_BLOCK_ENTRIES = 1 << 16
SEARCH_LAG = 4                # a block's capacity share counts on what the blocks this many before it made
                              # (block_caps): up to this many blocks search at once, the same HAG for any number
PARALLEL_GAIN = 0.8           # each worker beyond the first adds this share of one to the search's speed
                              # (search_workers): two searched 1.79x one (the 1/10 shape's 15M-entry blocks, 2-core
                              # Xeon VM, 2026-11-28: 4 blocks 14.2 s on one thread, 7.95 s on two)
LONG_SEARCH_S = 120.0         # the default blocks keep a search predicted longer than this within it (time_bounded_block)
PILOT_FROM = 0.1              # ... and one predicted over this share of it, in blocks larger than the reference,
                              # searches a reference-size block first and cuts the rest by its measured time (after_pilot)
HALVE_FROM_BLOCKS = 4         # a search of this many blocks, one at a time, searches its first block alone too: where
                              # that saves little (saves_little), the rest goes in blocks half as large, two at once
LOW_SAVINGS_RATIO = 1.01      # a search whose blocks so far save less than 1% of the transfers says so (low_savings_note)
LOW_SAVINGS_AFTER_SHARE = 0.05  # ... once it has searched this share of the entries
LOW_SAVINGS_LONG_S = 120.0    # ... where its pace so far puts the whole search at this long or more


@dataclass(frozen=True)
class StreamPlan:
    """How a streamed search runs: ``block_entries`` stored entries per block, the candidate
    ``window``, the bytes it holds at most (``peak_bytes``), its predicted ``seconds`` and the blocks
    searched at once (``workers``, :func:`search_workers`)."""

    block_entries: int
    blocks: int
    window: int
    stride: int
    fixed_bytes: int
    peak_bytes: int
    seconds: float
    workers: int = 1


def default_window(deg: np.ndarray) -> int:
    """The window when none is given: the largest w in [16, 256] (and below the longest in-list)
    whose window pairs stay within 16 per stored entry — 16 on a graph with long in-lists, wider
    (up to every pair: the greedy is then Jia et al.'s Algorithm 3) where in-lists are short — on
    graphs of up to 2M stored entries; 16 beyond (each merge updates the counts of 2w neighbours
    per in-list, so a wide window costs time where the graph is large). On the oracle's small graphs
    (tests/hag) this keeps ≥ 95% of the exact greedy's savings; 16 alone kept 94.5% on one of them."""
    if int(deg.sum()) > WIDE_MAX_ENTRIES:
        return DEFAULT_WINDOW
    longest = int(deg.max(initial=0))
    lo, hi = DEFAULT_WINDOW, max(DEFAULT_WINDOW, min(MAX_DEFAULT_WINDOW, longest - 1))
    limit = PAIRS_PER_ENTRY * int(deg.sum())
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if window_pairs(deg, mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def fixed_bytes(n: int, cap: int) -> int:
    """What the search holds besides a block: indptr (8 B a row), the frequency rank and its inverse
    (8 B a node, 16 while they are computed; 28 allowed), and at assembly the aggregation nodes
    (inputs, levels, new ids)."""
    return 8 * (n + 1) + max(28 * n, 32 * cap) + (64 << 20)


def stream_plan(n: int, m: int, longest: int, cap: int, budget: int | None, window: int | None = None,
                pairs: int | None = None, scale: float = 1.0, max_block: int | None = None,
                threads: int = 1) -> StreamPlan:
    """Block size, window and predicted peak and time for a streamed search of n nodes, m stored
    entries (the longest in-list ``longest``) with capacity ``cap`` under ``budget`` bytes (None: one
    block), in blocks of at most ``max_block`` entries when given (``--block-entries``: smaller blocks
    search faster and find fewer savings, :func:`search_growth`). ``pairs``: the window pair
    occurrences when known (else bounded by window · m).

    seconds = scale · g(block) · (SEARCH_NS_PER_PAIR · counted pairs + SEARCH_NS_PER_ENTRY · m) / s(w)
              + SEARCH_SECONDS_FIXED,
    ``scale`` being this machine's search time against the reference machine's (1: the reference), g
    the growth of the time per entry with the block's size (:func:`search_growth`) and s(w) = 1 +
    PARALLEL_GAIN · (w − 1) the speed of w blocks searched at once (:func:`search_workers`, of at most
    ``threads``); the peak holds w blocks."""
    w = DEFAULT_WINDOW if window is None else int(window)
    w = max(1, min(w, max(1, longest - 1)))
    fixed = fixed_bytes(n, cap)
    if budget is None:
        block = max(1, m)
    else:
        room = budget - fixed
        block = room // BLOCK_ENTRY_BYTES - longest  # a block may run one in-list past its entries
        if block < MIN_BLOCK_ENTRIES and block < m:
            need = fixed + BLOCK_ENTRY_BYTES * (min(m, MIN_BLOCK_ENTRIES) + longest)   # the least that passes this test
            raise OptionError("--memory-budget", f"{format_size(budget)} is too small for a HAG search over {n:,} "
                                                 f"nodes (needs at least {format_size_up(need)})")
        block = int(max(1, min(block, m)))
    if max_block is not None:
        block = int(max(1, min(block, max_block)))
    blocks = max(1, math.ceil(m / block))
    occ = w * m if pairs is None else pairs
    stride = sample_stride(m, occ)
    per_block = BLOCK_ENTRY_BYTES * min(block + longest, max(m, 1))
    workers = search_workers(threads, blocks, None if budget is None else budget - fixed, per_block)
    seconds = (scale * search_growth(block) * (SEARCH_NS_PER_PAIR * 1e-9 * occ / stride + SEARCH_NS_PER_ENTRY * 1e-9 * m)
               / (1.0 + PARALLEL_GAIN * (workers - 1)) + SEARCH_SECONDS_FIXED)
    return StreamPlan(block, blocks, w, stride, fixed, fixed + workers * per_block, round(seconds, 3), workers)


def search_workers(threads: int, blocks: int, room: int | None, per_block: int) -> int:
    """How many blocks a search searches at once, each on its own thread: as many as ``threads``
    (numba's), the blocks, :data:`SEARCH_LAG` and the ``room`` beside the fixed part (None: no budget)
    hold at ``per_block`` bytes each — at least one. Each block's search is one thread's (a chain of
    cache misses, numba kernels without the GIL), so two blocks at once use both cores of a 2-core
    machine: 1.79x one on the 1/10 shape (:data:`PARALLEL_GAIN`). The budget's own blocks fill the
    budget, so blocks are searched side by side where the time bound (:func:`time_bounded_block`)
    or ``--block-entries`` made them smaller than it holds."""
    w = max(1, min(int(threads), SEARCH_LAG, blocks))
    if room is not None:
        w = max(1, min(w, room // max(1, per_block)))
    return w


def search_growth(block_entries: int) -> float:
    """How much more a stored entry costs the search in blocks of ``block_entries`` than in blocks of
    :data:`SEARCH_BLOCK_REF_ENTRIES` (1 at or below it): g = (block / ref)^SEARCH_BLOCK_GROWTH.

    A larger block holds more rows that share a pair, so the greedy finds more (each merge rewrites
    more rows), its candidates grow faster than its entries (a pair counted twice is more likely),
    and the tables it reads at random outgrow the caches. Measured on the papers100M shape at 1/10
    (308M entries, one 2-core VM, 2026-11-27): blocks of 15.0M / 72.5M / 149M entries (budgets 2 / 8 /
    16 GiB) searched in 58.9 / 98.2 / 126.9 s (aggregation ratio 1.0098 / 1.0262 / 1.0371), an
    exponent of 0.33 on both steps; at 1/40 (77M entries) 17.7M- and 56M-entry blocks 16.7 and 30.0 s
    (0.50). With 0.35 the predictions of those five runs are 0.84-1.11x the measured times (the
    linear model's 0.59-1.15x). Graphs of much overlap grow faster (a power-law R-MAT graph's greedy
    took 10x for 4x the entries: its hubs' user lists grow with the block) and stay under-predicted."""
    return max(1.0, block_entries / SEARCH_BLOCK_REF_ENTRIES) ** SEARCH_BLOCK_GROWTH


def sample_stride(m: int, pairs: int) -> int:
    """Rows per counted row: 1 (every row's pairs counted) up to 2M stored entries; beyond, about
    :data:`COUNTED_PAIRS_PER_ENTRY` window pairs per entry are counted, on a hashed sample of rows
    (:func:`gnnprep.hag.greedy._sampled`). The counts — and the greedy's order — are then those of
    the sample (a pair in c in-lists is counted about c / stride times): pairs shared by many
    in-lists are still found, the rarest ones are not; every merge still rewrites all the rows
    that hold the pair."""
    if m <= WIDE_MAX_ENTRIES:
        return 1
    return max(1, int(pairs // max(1, COUNTED_PAIRS_PER_ENTRY * m)))


def plan_for(indptr: np.ndarray, cap: int, budget: int | None, window: int | None, scale: float = 1.0,
             max_block: int | None = None) -> StreamPlan:
    """:func:`stream_plan` for a CSR's row pointer (sizes only, no ids read, :func:`search_sizes`), in
    blocks as large as the budget holds (at most ``max_block``)."""
    n, m, longest, w, pairs = search_sizes(indptr, window)
    return stream_plan(n, m, longest, cap, budget, w, pairs=pairs, scale=scale, max_block=max_block)


def search_sizes(indptr: np.ndarray, window: int | None) -> tuple[int, int, int, int, int]:
    """What the search's plan needs of a CSR's row pointer: (nodes, stored entries, the longest
    in-list, the window — the one given, clipped to the longest in-list, or :func:`default_window` —
    and its window pair occurrences)."""
    deg = np.diff(indptr)
    longest = int(deg.max(initial=0))
    w = default_window(deg) if window is None else max(1, min(int(window), max(1, longest - 1)))
    return len(indptr) - 1, int(indptr[-1]), longest, w, window_pairs(deg, w)


def search_plan(sizes: tuple[int, int, int, int, int], cap: int, budget: int | None, scale: float,
                max_block: int | None, threads: int = 1) -> tuple[StreamPlan, StreamPlan]:
    """(the plan the search runs, the plan in the largest blocks the budget holds) for
    :func:`search_sizes`' ``sizes``, with up to ``threads`` blocks at once (:func:`search_workers`).
    With ``max_block`` (``--block-entries``) the blocks hold at most that many entries; without, they
    are the budget's unless that search is predicted longer than :data:`LONG_SEARCH_S` on one thread,
    where they are the largest whose search on one thread is predicted within it — and no smaller
    than :data:`SEARCH_BLOCK_REF_ENTRIES` (:func:`time_bounded_block`); more threads then shorten it."""
    n, m, longest, w, pairs = sizes

    def plan(bound: int | None, t: int = threads) -> StreamPlan:
        return stream_plan(n, m, longest, cap, budget, w, pairs=pairs, scale=scale, max_block=bound, threads=t)

    widest = plan(None)
    if max_block is not None:
        return plan(max_block), widest
    return plan(time_bounded_block(plan(None, 1), plan(SEARCH_BLOCK_REF_ENTRIES, 1))), widest


def time_bounded_block(widest: StreamPlan, ref: StreamPlan) -> int | None:
    """The block bound of the default search: None (the budget's blocks, ``widest``) where that search
    is predicted within :data:`LONG_SEARCH_S` or its blocks are no larger than the reference's
    (``ref``, blocks of :data:`SEARCH_BLOCK_REF_ENTRIES`); else the largest b whose predicted time
    F + g(b) · (T_ref − F) stays within max(LONG_SEARCH_S, T_ref), g being :func:`search_growth`:
    b = ref · ((max(L, T_ref) − F) / (T_ref − F))^(1 / SEARCH_BLOCK_GROWTH).

    Larger blocks find more savings at a higher price per entry, and on a graph of papers100M's shape
    the savings are small: at 1/10, blocks of 15M / 149M entries searched in 58.9 / 126.9 s for an
    aggregation ratio of 1.0098 / 1.0371 (:func:`search_growth`); at the real size under 20 GiB the
    budget's 155M-entry blocks are predicted at 25 min, 15M-entry ones at 11 min. So by default the
    search is held to minutes, and ``--block-entries`` buys the savings of larger blocks."""
    if widest.seconds <= LONG_SEARCH_S or widest.block_entries <= ref.block_entries:
        return None
    if ref.seconds >= LONG_SEARCH_S:
        return ref.block_entries
    growth = (LONG_SEARCH_S - SEARCH_SECONDS_FIXED) / max(1e-9, ref.seconds - SEARCH_SECONDS_FIXED)
    return min(widest.block_entries, int(ref.block_entries * growth ** (1.0 / SEARCH_BLOCK_GROWTH)))


def pilots(plan: StreamPlan, max_block: int | None) -> bool:
    """Whether the default search runs a pilot block first: with no ``max_block`` (``--block-entries``),
    a plan predicted over :data:`PILOT_FROM` · :data:`LONG_SEARCH_S` in blocks larger than
    :data:`SEARCH_BLOCK_REF_ENTRIES` first searches the rows of one block of that size and cuts the
    rest by its measured time, and a plan of :data:`HALVE_FROM_BLOCKS` or more blocks searched one at
    a time first searches its first block and halves the rest's blocks where it saved little
    (:func:`after_pilot`)."""
    if max_block is not None:
        return False
    timed = plan.block_entries > SEARCH_BLOCK_REF_ENTRIES and plan.seconds > PILOT_FROM * LONG_SEARCH_S
    return timed or (plan.workers == 1 and plan.blocks >= HALVE_FROM_BLOCKS)


def pilot_end(indptr: np.ndarray, plan: StreamPlan, max_block: int | None) -> int | None:
    """The row the pilot block (:func:`pilots`) ends at, or None for no pilot."""
    from gnnprep.sparse.order import row_blocks

    if not pilots(plan, max_block):
        return None
    # the plan's own first block, or one of the reference size where the plan's are larger
    return row_blocks(indptr, 0, len(indptr) - 1, min(plan.block_entries, SEARCH_BLOCK_REF_ENTRIES))[0][1]


def after_pilot(sizes: tuple[int, int, int, int, int], cap: int, budget: int | None, scale: float, plan: StreamPlan,
                entries: int, seconds: float, threads: int = 1, little: bool = False) -> tuple[StreamPlan, StreamPlan, float]:
    """(the plan for the rows after the pilot block, the budget's, k) from the pilot's measured
    ``seconds`` for its ``entries``: k = seconds / the prediction for them (the reference-size blocks'
    time per entry on one thread, :func:`stream_plan`: the pilot's block is searched alone), and the
    rest planned by :func:`search_plan` with ``scale`` · k and ``threads``, in blocks no larger than
    ``plan``'s. The predictions come from a reference machine and the papers100M
    shape; the pilot measures this machine on this graph (on a 2-core Xeon VM the 1/10 shape searched in
    1.4x its prediction, the R-MAT graph at 1/40 measured 8.4x in its pilot and took 136 s against 139 s
    predicted after it), so the time bound holds where the sizes alone mislead, at the price of the
    pairs the pilot's block shares with the next.

    ``little``: the pilot's block saved less than 1% of its transfers (:func:`saves_little`), so
    larger blocks find little more and the rest is searched in blocks half as large, two at once
    where the budget holds two (:func:`search_workers`; one at a time it stays as planned). On the
    papers100M shape at 1/10 under 2 GiB (aggregation ratio 1.0098 in 15M-entry blocks, one at a
    time) the search took 50.5 s; see docs/internals.md for it halved."""
    n, m = sizes[0], sizes[1]
    ref = stream_plan(n, m, sizes[2], cap, budget, sizes[3], pairs=sizes[4], scale=scale,
                      max_block=SEARCH_BLOCK_REF_ENTRIES)
    k = max(seconds, 1e-6) / max(1e-9, (ref.seconds - SEARCH_SECONDS_FIXED) * entries / max(1, m))
    rest, widest = search_plan(sizes, cap, budget, scale * k, None, threads)
    if rest.block_entries > plan.block_entries:
        rest = search_plan(sizes, cap, budget, scale * k, plan.block_entries, threads)[0]
    if little:
        rest = halved_plan(sizes, cap, budget, scale * k, rest, threads) or rest
    return rest, widest, k


def halved_plan(sizes: tuple[int, int, int, int, int], cap: int, budget: int | None, scale: float, plan: StreamPlan,
                threads: int) -> StreamPlan | None:
    """``plan`` (one block at a time) in blocks of (its block − the longest in-list) / 2 entries — two
    of them, each with an in-list past its end, fit the room of one — where two then run at once;
    else None (:func:`after_pilot` with ``little``)."""
    if plan.workers != 1:
        return None
    half = max(MIN_BLOCK_ENTRIES, (plan.block_entries - sizes[2]) // 2)
    halved = search_plan(sizes, cap, budget, scale, half, threads)[0]
    return halved if halved.workers > 1 else None


def saves_little(entries: int, transfers: int) -> bool:
    """Whether keeping ``transfers`` of ``entries`` stored entries (aggregation nodes' inputs included)
    saves less than 1% (:data:`LOW_SAVINGS_RATIO`): too little for a hop through the HAG to be faster."""
    return transfers > 0 and entries < LOW_SAVINGS_RATIO * transfers


def saved_share(entries: int, transfers: int) -> float:
    """The share of ``entries`` stored entries a HAG that keeps ``transfers`` of them saves."""
    return 1 - transfers / max(1, entries)


def low_savings_note(entries: int, transfers: int, total: int, seconds: float) -> str | None:
    """What to tell a user whose search has kept ``transfers`` of the first ``entries`` stored entries
    (of ``total``) in ``seconds``, where that saves less than 1% (:data:`LOW_SAVINGS_RATIO`) after
    :data:`LOW_SAVINGS_AFTER_SHARE` of the entries, in a search whose pace so far puts it at
    :data:`LOW_SAVINGS_LONG_S` or more; else None (a short search is not worth interrupting: the 1/10
    shape's 94 s would have been told at 73% of it, 24 s before its end).

    The papers100M shape has little redundancy within the blocks a budget holds: at 1/4 (770M
    entries) under 2 GiB, 81 blocks searched in 273 s (and the HAG relabelled in 162 s more) for an
    aggregation ratio of 1.0028, where a hop through a HAG is faster by at most about half of what the
    ratio saves (issue 33) — not measurable, and the HAG's own load costs more. Said early, with the
    time left, so that the user can stop the search (it resumes if run again) rather than wait."""
    if entries <= 0 or transfers <= 0 or entries >= total or seconds * total / entries < LOW_SAVINGS_LONG_S \
            or entries < LOW_SAVINGS_AFTER_SHARE * total or not saves_little(entries, transfers):
        return None
    left = seconds * (total - entries) / entries
    took = f"~{left:.0f} s" if left < 600 else f"~{left / 60:.0f} min"
    return (f"the HAG saves {100 * saved_share(entries, transfers):.2f}% of the transfers in the {entries / total:.0%} of "
            f"the entries searched so far (aggregation nodes included): too little to make a hop faster (a hop "
            f"through a HAG gains at most about half of what it saves). {took} left; Ctrl-C stops the search "
            f"(run again, it resumes)")


def frequency_rank(indptr: np.ndarray, read: Callable[[int, int], np.ndarray], n: int,
                   progress=None) -> tuple[np.ndarray, np.ndarray]:
    """(rank, order): rank[x] = x's place when ids are ordered by in-list frequency (most first; ties
    by id), counted over the stored ids read ``READ_ENTRIES`` at a time; order = rank's inverse."""
    m = int(indptr[-1])
    dtype = np.int32 if n < 2**31 else np.int64
    freq = np.zeros(n, dtype=np.int32 if m < 2**31 else np.int64)
    for lo in range(0, m, READ_ENTRIES):
        hi = min(m, lo + READ_ENTRIES)
        count_ids(read(lo, hi), freq)
        if progress is not None:
            progress("hag frequencies", hi, m)
    order = np.empty(n, dtype=dtype)
    order_by_count(freq, order)  # argsort(-freq, stable), by counting
    del freq
    rank = np.empty(n, dtype=dtype)
    rank[order] = np.arange(n, dtype=dtype)
    return rank, order


def block_search(ids: np.ndarray, rp: np.ndarray, rank: np.ndarray, n: int, first_agg: int, cap: int,
                 window: int, min_share: int, max_depth: int, room: int, stride: int = 1,
                 order: np.ndarray | None = None, work: dict | None = None, threads: int = 1):
    """The lazy greedy on one block of in-lists (global ids ``ids``, row pointer ``rp`` from 0).
    Returns (lengths of the rewired in-lists, their ids — aggregation node j of this block is
    ``first_agg + j`` — inputs [k, 2] and levels [k] of the block's aggregation nodes).
    ``order``: rank's inverse (computed when not given; :func:`gnnprep.hag.greedy.local_ids`);
    ``work``: buffers reused across blocks; ``threads``: the rows sorted, the pairs counted
    (:func:`gnnprep.hag.greedy.search_block`) and the rows rewired on that many threads."""
    if order is None:
        order = np.empty(n, dtype=rank.dtype)
        order[rank] = np.arange(n, dtype=rank.dtype)
    ent, glob, u = local_ids(ids, rank, order, extra=cap)
    rp = np.ascontiguousarray(rp, dtype=np.int64)
    inputs, levels, ent, stats = search_block(rp, ent, u, cap, window, min_share, max_depth, room, stride=stride,
                                              work=work, threads=threads)
    k = len(inputs)
    glob[u:u + k] = first_agg + np.arange(k)
    lengths = np.empty(len(rp) - 1, dtype=np.int64)
    out = np.empty(len(ent), dtype=np.int32 if first_agg + k < 2**31 else np.int64)
    orig = stats.pop("orig")
    # row ranges rewired side by side, each into out from its first entry's place (a row never
    # grows), then moved down after the ranges before it
    parts = row_parts(rp, max(1, int(threads)))
    used = side_by_side(lambda r0, r1: rewire_rows(rp[r0:r1 + 1], ids, orig, ent, u, glob, first_agg,
                                                   out[rp[r0]:], lengths[r0:r1]), parts)
    at = used[0]
    for (r0, _), k_used in zip(parts[1:], used[1:]):
        out[at:at + k_used] = out[rp[r0]:rp[r0] + k_used]
        at += k_used
    return lengths, out[:at], glob[inputs], levels


def block_caps(indptr: np.ndarray, blocks: list[tuple[int, int]], cap: int,
               lag: int = SEARCH_LAG) -> Callable[[int, list[int]], int]:
    """The capacity shares of the blocks, asked in order (i = 0, 1, …): share(i, made_by) = (cap − what
    the blocks before i − lag + 1 made (``made_by``: each block's count, at least that many) − the
    shares of the lag − 1 blocks before i) × i's entries / the entries from i on. The blocks still
    searching when i starts (at most ``lag`` at once) are counted at their whole share, so the shares
    never sum past the capacity and do not depend on how many blocks run at once; with lag 1, the
    capacity left × the block's entries / the entries left."""
    m = int(indptr[-1])
    shares: list[int] = []

    def share(i: int, made_by: list[int]) -> int:
        if i < len(shares):
            return shares[i]
        assert i == len(shares), "shares are asked in block order"
        known = max(0, i - lag + 1)
        used = sum(made_by[:known]) + sum(shares[known:i])
        r0, r1 = blocks[i]
        left_entries = m - int(indptr[r0])
        mine = int(indptr[r1] - indptr[r0])
        shares.append(int((cap - used) * mine // max(1, left_entries)))
        return shares[-1]
    return share


class _Now:
    """A finished job's result, as a future gives it (one worker: no thread)."""

    def __init__(self, fn, *args):
        self.value = fn(*args)

    def result(self):
        return self.value


def searched_blocks(blocks: list[tuple[int, int]], start: int, end: int | None, indptr: np.ndarray,
                    read: Callable[[int, int], np.ndarray], rank: np.ndarray, order: np.ndarray, n: int,
                    share: Callable[[int, list[int]], int], made_by: list[int], plan: StreamPlan, min_share: int,
                    max_depth: int, room: int,
                    workers: int = 1) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]]:
    """Search ``blocks[start:end]`` (``end`` None: to the end of the list, which may grow while this
    runs) and yield, in block order, (i, what the blocks before i made, lengths, rows, inputs, levels,
    seconds): :func:`block_search`'s results, aggregation node j of block i numbered n + (what the
    blocks before it made) + j, and the seconds its search took;
    ``made_by`` (the counts of the blocks before ``start``) gets each block's count as it is yielded.
    Up to ``workers`` blocks are searched at once, each on its own thread with its own buffers and its
    share (:func:`block_caps`) set when it starts; a block's aggregation ids are shifted into place
    when it is yielded, so the HAG is the one a single worker finds. numba's threads beyond the
    workers sort and count a block's rows with them (one worker on two cores: its counting on both)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    for j in range(start):    # (a block's share depends on the shares before it)
        share(j, made_by)
    spare: list[dict] = [{} for _ in range(workers)]   # each running block's buffers, kept across blocks
    import numba

    inner = max(1, numba.get_num_threads() // max(1, workers))

    def job(i: int, cap_i: int, work: dict):
        t0 = time.perf_counter()
        r0, r1 = blocks[i]
        p0, p1 = int(indptr[r0]), int(indptr[r1])
        rp = (indptr[r0:r1 + 1] - p0).astype(np.int64)
        found = block_search(read(p0, p1), rp, rank, n, n, cap_i, plan.window, min_share, max_depth, room,
                             plan.stride, order, work, inner)
        return found, time.perf_counter() - t0, work

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hag-search") if workers > 1 else None
    pending: deque = deque()
    nxt = start
    try:
        while True:
            while len(pending) < workers and nxt < (len(blocks) if end is None else end):
                cap_i = share(nxt, made_by)
                pending.append((nxt, _Now(job, nxt, cap_i, spare.pop()) if pool is None
                                else pool.submit(job, nxt, cap_i, spare.pop())))
                nxt += 1
            if not pending:
                return
            i, future = pending.popleft()
            (lengths, rows, inputs, levels), seconds, work = future.result()
            spare.append(work)
            before = sum(made_by)
            if before:
                rows = _shift_aggregates(rows, n, before)
                inputs = _shift_aggregates(inputs, n, before)
            made_by.append(len(inputs))
            yield i, before, lengths, rows, inputs, levels, seconds
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _shift_aggregates(ids: np.ndarray, n: int, by: int) -> np.ndarray:
    """``ids`` with every aggregation id (≥ n) moved up by ``by`` (in a wider dtype where it must)."""
    if ids.dtype.itemsize < 8 and int(ids.max(initial=0)) + by >= np.iinfo(ids.dtype).max:
        ids = ids.astype(np.int64)
    ids[ids >= n] += by
    return ids


def renumber(n: int, inputs: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Aggregation nodes numbered by level (stable): (new id of each − n, inputs in new ids with
    each pair sorted, level_ptr), as :func:`gnnprep.hag.structure.number_by_level`."""
    made = len(inputs)
    order = np.argsort(levels, kind="stable")
    new = np.empty(made, dtype=np.int64)
    new[order] = np.arange(made)
    ins = inputs[order]
    agg = ins >= n
    ins[agg] = n + new[ins[agg] - n]
    ins.sort(axis=1)
    top = int(levels.max()) if made else 0
    level_ptr = np.concatenate([[0], np.cumsum(np.bincount(levels, minlength=top + 1)[1:])]).astype(np.int64)
    return new, ins, level_ptr


def relabel_rows(ids: np.ndarray, lengths: np.ndarray, n: int, new: np.ndarray) -> np.ndarray:
    """In-lists in final ids, each sorted (one pass: a row of :func:`block_search` is sorted already
    but for its aggregation nodes at the end, when the store's in-lists are sorted)."""
    out = np.empty(len(ids), dtype=np.int64)
    rp = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=rp[1:])
    relabel_sort_rows(rp, ids, n, np.asarray(new, dtype=np.int64), out)
    return out


def _check_csr(indptr: np.ndarray, indices: np.ndarray) -> None:
    """ArgumentError unless ``indptr`` is a row pointer from 0 to len(indices), non-decreasing, and
    every id lies in [0, n): the search's kernels index arrays of n entries with the ids (a stray
    id would write past them), as :meth:`gnnprep.graph.store.GraphStore.read_indices` checks a store's."""
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    if indptr.ndim != 1 or len(indptr) < 1 or indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise ArgumentError("indptr", f"{indptr.dtype} of shape {indptr.shape} with indices {indices.dtype}; "
                                      "expected an integer row pointer of n + 1 entries and integer ids")
    if indptr[0] != 0 or int(indptr[-1]) != len(indices) or (np.diff(indptr) < 0).any():
        raise ArgumentError("indptr", f"from {int(indptr[0])} to {int(indptr[-1])} for {len(indices)} ids; "
                                      "expected a non-decreasing row pointer from 0 to len(indices)")
    n = len(indptr) - 1
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= n):   # masks only to name the id
        p = int(np.argmax((indices < 0) | (indices >= n)))
        raise ArgumentError("indices", f"indices[{p}] is {int(indices[p])}; expected a node id in [0, {n})")


def search_arrays(indptr: np.ndarray, indices: np.ndarray, capacity: int | None = None, window: int | None = None,
                  max_depth: int = 16, min_share: int = 2, block_entries: int | None = None, workers: int = 1) -> Hag:
    """The streamed search on in-memory arrays (one block unless ``block_entries``; up to ``workers``
    blocks at once, the same HAG): for tests and the Python API. The arrays are checked first (the
    kernels index with the ids unchecked)."""
    _check_csr(indptr, indices)
    n = len(indptr) - 1
    m = int(indptr[-1])
    cap = n // 4 if capacity is None else min(int(capacity), m)
    plan = plan_for(indptr, cap, None, window)  # the window and stride a store of these arrays gets
    from gnnprep.sparse.order import row_blocks

    blocks = row_blocks(indptr, 0, n, block_entries or max(1, m))
    rank, order = frequency_rank(indptr, lambda lo, hi: indices[lo:hi], n)
    lens, ids, ins, levs = [], [], [], []
    read = lambda lo, hi: np.asarray(indices[lo:hi])  # noqa: E731
    for _, _, ln, out, inp, lev, _ in searched_blocks(blocks, 0, None, indptr, read, rank, order, n,
                                                   block_caps(indptr, blocks, cap), [], plan, min_share, max_depth,
                                                   1 << 26, max(1, min(int(workers), SEARCH_LAG))):
        lens.append(ln)
        ids.append(out)
        ins.append(inp)
        levs.append(lev)
    lengths = np.concatenate(lens) if lens else np.zeros(n, np.int64)
    inputs = np.concatenate(ins) if ins else np.empty((0, 2), np.int64)
    levels = np.concatenate(levs).astype(np.int64) if levs else np.empty(0, np.int64)
    new, inputs, level_ptr = renumber(n, inputs, levels)
    rows = relabel_rows(np.concatenate(ids) if ids else np.empty(0, np.int64), lengths, n, new)
    hp = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=hp[1:])
    return Hag(n, inputs, level_ptr, hp, rows)


def build_streamed(store, output, input_path, cap: int, budget: int | None, window: int | None, max_depth: int,
                   min_share: int, aggregate: str, provenance, progress=None,
                   scale: float = 1.0, max_block: int | None = None,
                   on_plan: Callable[[StreamPlan, StreamPlan, bool], None] | None = None,
                   threads: int | None = None,
                   warn: Callable[[str], None] | None = None) -> tuple[dict, StreamPlan, bool, dict | None]:
    """Search ``store`` (an open :class:`gnnprep.graph.store.GraphStore`) block by block and write
    ``hag.h5`` to ``output``. The blocks' results go to ``<output>.partial`` as each finishes
    (:class:`gnnprep.core.output.ResumableOutput`): an interrupted search run again with the same
    graph, parameters and budget continues from the last finished block. Returns (the summary
    written, the plan — with a pilot, the blocks searched and their peak —, whether it resumed, the
    pilot's figures or None). ``provenance()`` gives the provenance to write (called once the search
    is done, so it can hold the search's time); ``scale`` and ``max_block``: the plan's
    (:func:`search_plan`); ``on_plan(plan, in the budget's blocks, halved)`` is told the plan before the search
    starts — with a pilot block (:func:`pilot_end`), after it, the rest's plan as its time corrects it.
    ``threads``: the most blocks searched at once (None: numba's threads; the plan's ``workers``).
    ``warn``: told once, part way, where the blocks searched so far save almost nothing
    (:func:`low_savings_note`)."""
    import json

    import numba

    from gnnprep.core.output import ResumableOutput
    from gnnprep.hag.file import SearchWork, write_hag_rows
    from gnnprep.sparse.order import row_blocks

    progress = progress or (lambda *a: None)
    n = store.num_nodes
    indptr = store.indptr()
    m = int(indptr[-1])
    sizes = search_sizes(indptr, window)
    threads = numba.get_num_threads() if threads is None else max(1, int(threads))
    plan, widest = search_plan(sizes, cap, budget, scale, max_block, threads)
    pilot = pilot_end(indptr, plan, max_block)
    if on_plan is not None and pilot is None:
        on_plan(plan, widest, False)
    blocks = row_blocks(indptr, 0, n, plan.block_entries) if pilot is None else [(0, pilot)]
    told: dict = {}
    rest_plan = [plan]   # the plan of the blocks after a pilot's (its blocks, workers and peak)

    def rest_blocks(size: int) -> list[tuple[int, int]]:   # the plan's own where the pilot is its first block
        whole = row_blocks(indptr, 0, n, size)
        return whole[1:] if whole[0][1] == pilot else row_blocks(indptr, pilot, n, size)

    def rest_after_pilot(seconds: float | None) -> None:   # the blocks after the pilot's, cut by its time
        if seconds is None:   # (resumed after it: as cut then)
            rest_plan[0] = search_plan(sizes, cap, budget, scale, int(out.state["rest_block_entries"]), threads)[0]
            blocks.extend(rest_blocks(rest_plan[0].block_entries))
            return
        little = saves_little(kept["entries"], kept["transfers"])
        rest, wide, k = after_pilot(sizes, cap, budget, scale, plan, int(indptr[pilot]), seconds, threads, little)
        blocks.extend(rest_blocks(rest.block_entries))
        rest_plan[0] = rest
        out.state["rest_block_entries"] = rest.block_entries
        # predicted_seconds_after: the whole search predicted again with the pilot's measured pace (the
        # report's predicted_seconds is the plan's, from sizes alone)
        told.update(entries=int(indptr[pilot]), seconds=round(seconds, 3), measured_over_predicted=round(k, 3),
                    rest_block_entries=rest.block_entries, saved_little=little, rest_workers=rest.workers,
                    predicted_seconds_after=round(rest.seconds, 3))
        if on_plan is not None:
            on_plan(replace(rest, blocks=len(blocks)), wide, little and rest.workers > 1)

    key = json.dumps({"graph": store.fingerprint, "capacity": cap, "window": plan.window, "max_depth": max_depth,
                      "min_share": min_share, "block_entries": plan.block_entries, "aggregate": aggregate,
                      "stride": plan.stride, "pilot": pilot, "lag": SEARCH_LAG},
                     sort_keys=True)
    out = ResumableOutput(output, key, [input_path])
    if out.discarded and warn is not None:
        warn(out.discarded)
    ids_dtype = np.int32 if n + cap < 2**31 else np.int64
    needed = m * np.dtype(ids_dtype).itemsize * 2 + 16 * (n + cap)
    out.check_room(needed)
    with out.writing(needed):
        with SearchWork(out.partial, n, m, cap, ids_dtype, fresh=not out.resumed) as work:
            made_by = [int(c) for c in out.state.get("made_by", [])] if out.resumed else []
            rank, order = frequency_rank(indptr, lambda lo, hi: store.read_indices(lo, hi), n, progress)
            if pilot is not None and made_by:
                rest_after_pilot(None)
            share = block_caps(indptr, blocks, cap)
            # what this process searches (a resumed search: the blocks after the finished ones)
            first = int(indptr[blocks[len(made_by)][0]]) if len(made_by) < len(blocks) else m
            kept = {"entries": 0, "transfers": 0, "t0": time.perf_counter(), "told": warn is None}

            def tell(r0: int, r1: int, lengths: np.ndarray, inputs: np.ndarray) -> None:
                kept["entries"] += int(indptr[r1] - indptr[r0])
                kept["transfers"] += int(lengths.sum()) + int(inputs.size)
                if not kept["told"]:
                    note = low_savings_note(kept["entries"], kept["transfers"], m - first, time.perf_counter() - kept["t0"])
                    if note is not None:
                        kept["told"] = True
                        warn(note)

            def search(start: int, end: int | None, workers: int, rank: np.ndarray, order: np.ndarray) -> None:
                # (blocks are marked in order: the finished ones are the first len(made_by))
                for i, made, lengths, rows, ins, levels, seconds in searched_blocks(
                        blocks, start, end, indptr, store.read_indices, rank, order, n, share, made_by, plan,
                        min_share, max_depth, COUNT_ENTRY_BYTES * plan.block_entries, workers):
                    r0, r1 = blocks[i]
                    work.put(r0, r1, int(indptr[r0]), lengths, rows, made, ins, levels)
                    tell(r0, r1, lengths, ins)
                    del rows, ins, levels, lengths
                    if pilot is not None and i == 0:
                        rest_after_pilot(seconds)
                    out.state["made_by"] = made_by
                    out.mark((i,), work.f)
                    progress("hag search", int(indptr[r1]), m)

            if pilot is not None and not made_by:
                search(0, 1, 1, rank, order)   # the pilot's block alone: its time is one thread's, as predicted
            search(len(made_by), None, rest_plan[0].workers, rank, order)
            made = sum(made_by)
            del rank, order
            inputs, levels = work.aggregation_nodes(made)
            new, inputs, level_ptr = renumber(n, inputs, levels)
            del levels
            lengths = work.lengths()

            def pieces():
                at = 0
                for r0, r1 in blocks:
                    ln = lengths[r0:r1]
                    k = int(ln.sum())
                    yield at, relabel_rows(work.rows(int(indptr[r0]), k), ln, n, new)
                    at += k

            summary = write_hag_rows(output, n, inputs, level_ptr, lengths, pieces(), provenance(), aggregate, cap,
                                     store.fingerprint, indptr, inputs_files=[input_path])
    resumed = out.resumed
    out.close(keep=False)
    if pilot is not None:
        told = told or {"entries": int(indptr[pilot]), "resumed_after": True}
        plan = replace(rest_plan[0], blocks=len(blocks), seconds=plan.seconds)   # (the prediction made before the pilot)
    return summary, plan, resumed, told or None
