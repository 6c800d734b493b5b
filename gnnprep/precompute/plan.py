"""Block plan for precompute: how S and X are split so each piece fits the memory budget.

Following Maekawa et al. (LC transformation, block-wise precomputation), S is split into ``b``
nnz-balanced edge blocks (contiguous row ranges of the row-sorted CSR) and X into ``c`` column
blocks; normalisation runs over ``a`` edge blocks. The paper picks the smallest counts that satisfy

    (αA·BA + αS·BS)/a + αD·BD ≤ B        and        βS·BS/b + βX·BX/c ≤ B

with coefficients measured on small graphs. We keep those constraints (with α, β made concrete by
the memory model below), add host RAM and transfer costs, and choose among the feasible (b, c) the
plan with the smallest *predicted time* from a calibrated :class:`Profile`.

Column blocks are independent through all hops (S^k X[:, J] = S^k (X[:, J])), so each column block
is carried through hops 1..K while S stays resident when it fits (moved to the device once), or is
streamed block by block once per (hop, column block) when it does not.

Memory model (bytes), n nodes, m stored entries, w = ⌈d / c⌉ columns per block:
  vectors   = 16 n  (indptr int64, plus l and r in float32)
  S part    = s_idx·m / b  (+ 4m/b with edge weights; + 12m/b explicit values on torch)
  columns   = 2 · 4 n w  (the block's current hop and the next hop, float32)
  out buf   = rows_b · w · (4 if rows are selected + 2 if float16): the one write in flight
Predicted peak above the measured baseline RSS = 1.05 × the sum (allocator slack) + 40 MiB fixed
(HDF5 buffers, the writer thread's arena).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.record import Record
from gnnprep.core.sizes import format_size, format_size_up
from gnnprep.graph.order import ORDER_MIN_GAIN
from gnnprep.precompute.profile import Profile

SLACK = 1.05
FIXED = 40 << 20  # HDF5 buffers and chunk cache, the writer thread's arena, pages first touched late


# A column block of X at most this large stays in the cache, so the order cannot speed its gathers.
# Not the last-level cache's size: S, the output rows and other tenants share it. The cliques64 graph
# (125k nodes, 8M entries, d = 64; 2-core EPYC VM, 32 MiB L3; benchmarks/bench_hag_stream.py) ran its
# hop kernel in the community order 3x faster at a 32 MB block (0.10-0.13 s against 0.035-0.04 s),
# 1.3-1.5x at 8 and 16 MB, 1.2x at 4 MB. At 32 MiB, this bound's old value, the planner declined
# the order there.
REORDER_MIN_BLOCK_BYTES = 4 << 20


@dataclass(frozen=True)
class Problem:
    """What is to be computed: sizes only, so plans can be made (and tested) without data."""

    num_nodes: int
    num_entries: int
    num_features: int
    hops: int
    operators: int = 1
    out_rows: int = 0            # rows stored per hop (n for --rows all)
    index_bytes: int = 4
    weighted: bool = False
    out_itemsize: int = 4
    in_itemsize: int = 4
    device: str = "cpu"
    order_known: bool = False     # a node order is kept in or beside the store: only relabelling costs
    # stored entries each hop 1..K reads (empty: all of them, every hop); ``--rows labeled`` prunes
    # hops K and K-1 (see :func:`pruned_hop_entries`)
    hop_entries: tuple = ()
    passes: int = 0               # kernel passes per hop over all operators (0: one each; ppr: K)
    value_bytes: int = 0          # per entry, beside the stored weights: a user operator's CSR values
    buffers: int = 2              # column-block buffers of n rows (a diffusion operator needs 3)
    # the CSR in a node order on disk beside the store (gnnprep.precompute.ordered), which S is then
    # read from, resident or streamed: "present" (a valid copy), "build" (an order is known; the copy
    # can be written), "find" (the order is found out of core first), "" (none can be had)
    ordered_copy: str = ""
    x_tile: int = 0               # columns per chunk of X (0: chunks span every column)
    last_inputs: int = 0          # rows hop K-1 computes under --rows labeled (estimated; 0: not pruned)
    # bytes of memory the run has in all, page cache included (the machine's, or its cgroup's limit;
    # 0: unknown). What the plan's own peak and PAGE_CACHE_RESERVE leave of it is the page cache
    # that can keep S between its passes: a streamed S larger than that is read from the disk again
    # on every pass (see predict_seconds)
    machine_memory: int = 0
    # shares of X's, S's and the ordered copy's S's bytes the page cache holds when the run starts
    # (gnnprep.core.pagecache: mincore; None: unknown, taken as cached): the rest of their first
    # read comes from the disk (cold_read_seconds)
    x_cached: float | None = None
    s_cached: float | None = None
    copy_cached: float | None = None
    hag_cached: float | None = None   # ... and of the file a run through a HAG reads its in-lists from
    # precompute --hdg: the HDG's vertex-level members, its inner levels' instances and its channels
    # (hdg_seconds: the channels of every hop, aggregated after the hops)
    hdg_members: int = 0
    hdg_instances: int = 0
    hdg_channels: int = 0


@dataclass(frozen=True)
class Plan(Record):
    a: int                        # normalisation edge blocks
    b: int                        # propagation edge blocks
    c: int                        # column blocks
    width: int                    # columns per column block (last one may be narrower)
    s_resident: bool              # S held (on the device) for the whole run
    device: str
    budget: int
    predicted_peak: int           # bytes above the baseline
    predicted_seconds: float
    baseline_rss: int = 0
    source: str = "auto"          # auto | user
    reorder: bool = False         # compute in a locality node order (results in original order)
    ordered_copy: bool = False    # S read from its ordered copy beside the store (resident or streamed)

    def to_dict(self) -> dict:
        return asdict(self)


def _passes(p: Problem) -> int:
    """Kernel passes per hop over all operators."""
    return p.passes or p.operators


def _s_bytes(p: Problem) -> int:
    per = p.index_bytes + (4 if p.weighted else 0) + p.value_bytes + (12 if p.device.startswith("cuda") else 0)
    return per * p.num_entries


def memory(p: Problem, b: int, c: int) -> int:
    n, d = p.num_nodes, p.num_features
    w = math.ceil(d / c) if d else 0
    vectors = 16 * n
    s_part = math.ceil(_s_bytes(p) / b) + (8 * math.ceil(n / b) if b > 1 else 0)
    cols = p.buffers * 4 * n * w
    # one write in flight: a gathered copy (selected rows) and/or a float16 conversion of at most
    # one edge block's rows, capped at the writer's 32 MiB chunks
    rows_b = min(math.ceil(max(p.out_rows, 1) / b), max(1, (32 << 20) // max(1, 4 * w)))
    gathered = 4 * rows_b * w if p.out_rows < n else 0
    converted = p.out_itemsize * rows_b * w if p.out_itemsize != 4 else 0
    # one column block: contiguous hop datasets, written around the page cache from two staging buffers
    staging = 2 * p.out_itemsize * rows_b * w if c == 1 else 0
    return int(SLACK * (vectors + s_part + cols + gathered + converted + staging + _pruned_bytes(p, b)) + FIXED)


def _pruned_bytes(p: Problem, b: int) -> int:
    """What pruning ``--rows labeled`` holds: the rows hop K-1 computes (int64) and the mark that
    finds them (n bytes); with S streamed also the stored rows' in-lists (the resident sub-CSR of
    :mod:`gnnprep.precompute.pruned`: hop K's entries exactly) and their row pointers."""
    if not p.hop_entries:
        return 0
    held = 8 * p.last_inputs + p.num_nodes
    if b > 1:
        per = p.index_bytes + (4 if p.weighted else 0)
        held += per * p.hop_entries[-1] + 24 * p.out_rows
    return held


def column_blocks(d: int, width: int) -> list[tuple[int, int]]:
    """The column ranges [c0, c1) of blocks of ``width`` columns (the last one narrower)."""
    return [(c0, min(d, c0 + width)) for c0 in range(0, d, width)]


def _widths(d: int, w: int) -> list[int]:
    """Column-block widths for d columns in blocks of w (the last one narrower)."""
    return [w] * (d // w) + ([d % w] if d % w else []) if w else []


def pruned_hop_entries(degrees, stored_rows, hops: int) -> tuple:
    """Entries read by hops 1..K when only ``stored_rows`` are kept (``--rows labeled``): hop K reads
    the stored rows' entries (exact); hop K-1 the rows of the stored ones and of their neighbours,
    estimated as if the stored rows were placed at random: a row of degree d is needed with
    probability 1 - (1 - ρ)^(d + 1), ρ the stored share (exact counts would need all of the indices);
    earlier hops read everything."""
    degrees = np.asarray(degrees, dtype=np.float64)
    n, m = len(degrees), float(degrees.sum())
    if n == 0 or hops < 1:
        return ()
    rho = len(stored_rows) / n
    last = float(degrees[stored_rows].sum())
    before = float((degrees * -np.expm1((degrees + 1) * np.log1p(-min(rho, 1 - 1e-12)))).sum()) if rho < 1 else m
    entries = [m] * hops
    entries[-1] = last
    if hops >= 2:
        entries[-2] = max(before, last)
    return tuple(int(e) for e in entries)


def pruned_last_inputs(degrees, stored_rows) -> int:
    """Rows hop K-1 computes under ``--rows labeled`` (the stored rows and their in-neighbours),
    estimated as :func:`pruned_hop_entries` does: a row of degree d is needed with probability
    1 - (1 - ρ)^(d + 1)."""
    degrees = np.asarray(degrees, dtype=np.float64)
    n = len(degrees)
    if n == 0:
        return 0
    rho = len(stored_rows) / n
    if rho >= 1:
        return n
    return int(min(n, max(len(stored_rows), float(-np.expm1((degrees + 1) * np.log1p(-rho)).sum()))))


def _hop_entries(p: Problem, b: int) -> tuple:
    """Entries each hop's kernels read: pruned (``p.hop_entries``, set where the run prunes) with S
    resident or streamed (issue 24: streamed hops compute the same rows)."""
    return p.hop_entries if p.hop_entries else (p.num_entries,) * p.hops


# memory beside the plan's peak that is not page cache for S: the process's baseline, the
# interpreter, the OS and the hop writes' dirty pages
PAGE_CACHE_RESERVE = 1 << 30


def s_rereads_from_disk(p: Problem, b: int, c: int) -> bool:
    """Whether a streamed S's second and later passes come from the disk: S is larger than the page
    cache the plan leaves (``machine_memory`` - its peak - PAGE_CACHE_RESERVE). Measured on the
    papers100M-shaped graph at 1/4 in a 6 GiB cgroup (24 GiB scaled like the data) with a 5 GiB budget:
    each of 8 column blocks read the 3.2 GiB ordered copy again from the disk, per hop."""
    if b == 1 or not p.machine_memory:
        return False
    return _s_bytes(p) > p.machine_memory - memory(p, b, c) - PAGE_CACHE_RESERVE


def s_reads(p: Problem, b: int, c: int) -> int:
    """Passes over S from the file: one with S resident; streamed, one per (pass, hop, column block)
    for the hops that compute every block's rows (hop K of a pruned run reads its resident sub-CSR
    instead, extracted by one more pass)."""
    if b == 1:
        return 1
    full = p.hops - 1 if p.hop_entries else p.hops
    return _passes(p) * max(0, full) * c + (1 if p.hop_entries else 0)


def x_read_bytes(p: Problem, c: int) -> int:
    """Bytes of X read for c column blocks: with chunks of ``x_tile`` columns each block reads the
    tiles it overlaps; with chunks spanning every column each block reads all of X."""
    n, d = p.num_nodes, p.num_features
    w = math.ceil(d / c) if d else 0
    if not w:
        return 0
    if not p.x_tile or p.x_tile >= d:
        return len(_widths(d, w)) * n * d * p.in_itemsize
    cols = 0
    for c0 in range(0, d, w):
        c1 = min(d, c0 + w)
        cols += min(d, (c1 + p.x_tile - 1) // p.x_tile * p.x_tile) - c0 // p.x_tile * p.x_tile
    return n * cols * p.in_itemsize


def x_read_rate(p: Problem, prof: Profile, b: int, c: int) -> float:
    """Bytes per second at which the run reads X: tile by tile from the disk
    (``cold_tile_read_bytes_per_s``) where X is read in column tiles (``x_tile``, c > 1) and the page
    cache cannot hold it — S streamed and re-read from the disk (:func:`s_rereads_from_disk`), or X
    alone larger than the cache the plan leaves; else ``read_bytes_per_s``."""
    if not p.x_tile or c == 1 or not p.machine_memory:
        return prof.read_bytes_per_s
    x_bytes = p.num_nodes * p.num_features * p.in_itemsize
    cold = s_rereads_from_disk(p, b, c) or x_bytes > p.machine_memory - memory(p, b, c) - PAGE_CACHE_RESERVE
    return prof.cold_tile_read_bytes_per_s if cold else prof.read_bytes_per_s


def cold_read_seconds(nbytes: float, cached: float | None, prof: Profile) -> float:
    """What a first read of ``nbytes`` costs beyond the profile's ``read_bytes_per_s`` where only the
    share ``cached`` is in the page cache (None: unknown, nothing added): the rest at the disk's
    ``cold_tile_read_bytes_per_s``. The page cache's state is the largest term the sizes cannot give:
    on the papers100M shape at 1/10 (2 GiB, ``--rows labeled``, 2-core VM) X read from the disk took
    11.0 s of hop 0 (4.4 GB at 0.40 GB/s) where the model counted 1.3 s, and S's first pass 3 s more;
    the run measured 60.5 s cold against 39.4 s warm."""
    if cached is None:
        return 0.0
    extra = 1.0 / prof.cold_tile_read_bytes_per_s - 1.0 / prof.read_bytes_per_s
    return max(0.0, nbytes * (1.0 - min(1.0, max(0.0, cached))) * extra)


# precompute --hdg's channels, per (hop, column block) and column (2-core Xeon VM, papers100M's shape
# at 1/40, 2026-11-29, refitted after the float16 conversions, the vertex sums' prefetch and the
# channels' writer around the page cache): a hop read back (and to float32) per row, each channel
# converted and written per row, a vertex level's gather per member, an inner level's reduce per instance
HDG_READ_NS = 1.0
HDG_WRITE_NS = 0.65
HDG_MEMBER_NS = 0.85
HDG_INSTANCE_NS = 3.2


def hdg_seconds(p: Problem, width: int) -> float:
    """The HDG channels' seconds (``precompute --hdg``, :meth:`gnnprep.precompute.hop_loop.HopRun.
    _hdg_channels`): for each hop 0..K and column block of w columns, w · (n · (HDG_READ_NS + channels ·
    HDG_WRITE_NS) + members · HDG_MEMBER_NS + instances · HDG_INSTANCE_NS). Fitted at 1/40 of
    papers100M (2.8M nodes, 2-core VM, K = 2, 4 blocks of 32 columns, 2 GiB), random-walk top-8
    (22.2M members) and anchors (22.2M instances, 0.66M members), float16 and float32: 8.9 / 9.1 /
    29.5 / 29.7 s measured, 9.0 / 9.0 / 29.6 / 29.6 s predicted (the read and member terms from the
    kernels' own timings). Since anchors' mean or sum is folded into one vertex level as the HDG is
    loaded (:func:`gnnprep.hdg.structure.folded`) the instances term counts only what is not folded
    (a max, a reduce over another inner level): anchors' mean 3.3-3.7 s measured, 2.0 predicted (the
    folded level's 2.8M mostly empty rows are not counted). The channels are written around the page cache since 2026-11-29, as fast
    in either dtype; through h5py's buffered path the write term had been 2.1 ns a value in float16
    and 9.3 in float32. Left out of the plan before: 7.6 s predicted against 46 s measured. Added to
    the chosen plan's seconds, not weighed between plans: the same for every blocking, it would make
    every plan look within a few percent of the fastest."""
    if not p.hdg_channels:
        return 0.0
    n = p.num_nodes
    per_column = (n * (HDG_READ_NS + p.hdg_channels * HDG_WRITE_NS) + p.hdg_members * HDG_MEMBER_NS
                  + p.hdg_instances * HDG_INSTANCE_NS) * 1e-9
    return (p.hops + 1) * sum(_widths(p.num_features, width)) * per_column


LISTED_BLOCKS = 4096  # above this many column blocks the kernel term counts equal widths instead of listing them


def predict_seconds(p: Problem, prof: Profile, b: int, c: int) -> float:
    n, d, K = p.num_nodes, p.num_features, p.hops
    w = math.ceil(d / c) if d else 0
    blocks = (d // w + (1 if d % w else 0)) if w else 0
    if blocks * max(1, K) <= LISTED_BLOCKS:  # (terms: blocks per hop, K hops)
        widths = _widths(d, w)
        compute = _passes(p) * sum(prof.spmm_seconds(e, n, wj) for e in _hop_entries(p, b) for wj in widths)
    else:  # equal widths counted, not listed (a tiny file may declare millions of columns)
        widths = range(blocks)  # only its length is used below
        compute = _passes(p) * sum((d // w) * prof.spmm_seconds(e, n, w) + (prof.spmm_seconds(e, n, d % w) if d % w else 0)
                                   for e in _hop_entries(p, b))
    reads = s_reads(p, b, len(widths))
    reread = prof.read_bytes_per_s if s_rereads_from_disk(p, b, len(widths)) else prof.reread_bytes_per_s
    stream = (_s_bytes(p) / prof.read_bytes_per_s + max(0, reads - 1) * _s_bytes(p) / reread
              + cold_read_seconds(_s_bytes(p), p.s_cached, prof))
    if p.device.startswith("cuda"):
        stream += reads * _s_bytes(p) / prof.copy_bytes_per_s + p.operators * 2 * K * n * d * 4 / prof.copy_bytes_per_s
    rate = x_read_rate(p, prof, b, len(widths))
    io = x_read_bytes(p, len(widths)) / rate
    if rate == prof.read_bytes_per_s:   # (X's reads all counted at the disk's rate otherwise)
        io += cold_read_seconds(n * d * p.in_itemsize, p.x_cached, prof)
    written = (p.operators * K + 1) * p.out_rows * d * p.out_itemsize
    # every plan's writes go direct: a column block's whole chunks as one block's rows do
    # (gnnprep.precompute.hop_writer); the 3.5x dearer writes counted for c > 1 when they went through
    # h5py's hyperslab path (0.54 against 1.89 GB/s) kept c = 1 where c > 1 now measures faster
    # (docs/internals.md, the planner)
    io += written / prof.write_bytes_per_s
    overhead = _passes(p) * K * b * len(widths) * prof.block_overhead_s
    fresh = 0.0 if p.device.startswith("cuda") else 2 * n * w * 4 / prof.fault_bytes_per_s
    return compute + stream + io + overhead + fresh


def _make_plan(p: Problem, budget: int, prof: Profile, baseline_rss: int, b: int, c: int, source: str) -> Plan:
    """The plan of ``b`` edge blocks and ``c`` column blocks (as many as that width needs)."""
    n, d = p.num_nodes, max(p.num_features, 1)
    a = max(1, math.ceil((8 * n + _s_bytes(p)) / max(1, budget - 16 * n))) if budget > 16 * n else b
    w = math.ceil(d / c)
    c = math.ceil(d / w)  # the number of blocks of that width actually needed
    return Plan(a=min(a, max(1, n)), b=b, c=c, width=w, s_resident=(b == 1), device=p.device, budget=budget,
                predicted_peak=memory(p, b, c), predicted_seconds=round(predict_seconds(p, prof, b, c), 3),
                baseline_rss=baseline_rss, source=source)


def _auto_plans(p: Problem, budget: int, prof: Profile, baseline_rss: int) -> list[Plan]:
    """For each column-block count, the fewest edge blocks that fit ``budget`` (none where none do)."""
    n, d = p.num_nodes, max(p.num_features, 1)
    plans = []
    max_b = max(1, n)
    for c in _column_counts(d):
        fixed = memory(p, 10**18, c)  # everything but S
        if fixed >= budget:
            continue
        room = budget / SLACK - fixed / SLACK
        b = max(1, math.ceil(_s_bytes(p) / max(1.0, room - 8 * n)))
        if b > max_b:
            continue
        while b <= max_b and memory(p, b, c) > budget:
            b = b * 2 if b < 64 else b + max(1, b // 4)
        if b > max_b:
            continue
        plans.append(_make_plan(p, budget, prof, baseline_rss, b, c, "auto"))
    return plans


def choose_plan(p: Problem, budget: int, prof: Profile, baseline_rss: int = 0,
                blocks: tuple[int, int, int] | None = None) -> Plan:
    """The feasible (a, b, c) with the least predicted time, or the user's counts checked. Where no
    blocking fits ``budget``, an error naming the least budget that has a plan (:func:`least_budget`)."""
    n, d = p.num_nodes, max(p.num_features, 1)
    if blocks is not None:
        a_user, b, c = blocks
        if min(blocks) < 1:
            raise OptionError("--blocks", f"{a_user},{b},{c}: counts must be positive integers")
        b, c = min(b, max(1, n)), min(c, d)
        plan = _make_plan(p, budget, prof, baseline_rss, b, c, "user")
        return Plan(**{**plan.to_dict(), "a": min(a_user, max(1, n))})
    plans = _auto_plans(p, budget, prof, baseline_rss)
    if not plans:
        least = least_budget(p, prof, baseline_rss, budget)
        error = OptionError("--memory-budget", f"{format_size(budget)} is too small for this graph: " + (
            "no budget has a plan for it" if least is None else
            f"the least budget with a plan is about {format_size_up(least)}"))
        error.least_budget = least   # (for gnnprep plan's report: not found again)
        raise error
    return least_memory_of_fastest(aligned_first(plans, d))


def least_budget(p: Problem, prof: Profile, baseline_rss: int, floor: int) -> int | None:
    """About the least budget (within 1%, rounded up) under which :func:`choose_plan` finds a plan for
    ``p``, given that ``floor`` bytes is too little; None when even 2**62 bytes is. A bisection from
    the least memory any blocking needs (one column, row-sized edge blocks): that figure alone, which
    the error named until 2026-11-29, was below the least budget the search for blocks accepts (the
    papers100M shape at 1/10: "about 365.6 MiB", where 455 MiB was the first budget with a plan)."""
    def fits(budget: int) -> bool:
        return bool(_auto_plans(p, budget, prof, baseline_rss))

    lo = floor
    hi = max(floor + 1, memory(p, max(1, p.num_nodes), max(1, p.num_features)))
    while not fits(hi):
        lo, hi = hi, 2 * hi
        if hi > 2**62:
            return None
    while hi - lo > max(1, hi // 100):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


# column blocks are planned this many columns wide (an X tile: 64 bytes of a float32 row), or all d
ALIGN_COLUMNS = 16


def _aligned_width(w: int, d: int) -> bool:
    """Whether column blocks ``w`` wide are whole multiples of :data:`ALIGN_COLUMNS` (or one block of
    all d columns)."""
    return w >= d or w % ALIGN_COLUMNS == 0


def is_aligned(plan: Plan, d: int) -> bool:
    """Whether ``plan``'s column blocks are aligned (:func:`_aligned_width`)."""
    return _aligned_width(plan.width, d)


def aligned_first(plans: list[Plan], d: int) -> list[Plan]:
    """The plans whose column blocks are aligned (:func:`is_aligned`), or all of them where none is.

    A block of a width that is not a multiple of 16 columns gathers X rows that straddle cache lines
    and reads X tiles it uses in part, and the model prices neither. Measured (2026-11-29, 2-core
    Xeon VM, R-MAT at 1/40, d = 128, ``--rows all``, two rounds each): at ``--memory-budget 1500MiB``
    the planner took c = 3 (43 columns) and ran 16.95-17.38 s at a peak RSS of 1.92 GiB (~1.7 GiB
    above the interpreter's, over the budget; predicted 1.33), where c = 4 ran 10.30-10.37 s at
    1.41 GiB; at 8 GiB, c = 3 14.04-15.88 s against c = 2 9.31-11.37 s and c = 4 9.70-9.94 s."""
    aligned = [q for q in plans if is_aligned(q, d)]
    return aligned or plans


# plans predicted within this share of the fastest are a tie, taken by the smaller predicted peak
TIE_SHARE = 0.05


def least_memory_of_fastest(plans: list[Plan]) -> Plan:
    """The plan with the least predicted time, or, among those predicted within :data:`TIE_SHARE`
    of it, the one with the smallest predicted peak (then the fewest column blocks). A difference
    under 5% between two column blockings is below what the model resolves, and fewer fresh bytes
    are the safer side: on the CI-class VM, memory not touched recently faults in at 0.45-0.8 GB/s,
    below the profile's rate (pages freed by the process and reused: 11-15 GB/s), so the larger
    plan's first touches cost more than predicted. Measured (2026-11-27, ``benchmarks/bench_column_blocks.py``,
    medians of 3, 8 GiB, with the rotated width table of docs/internals.md): R-MAT at 1/40, d = 128,
    c = 1 predicted 12.504 s against c = 2 12.515 s, measured 9.71 against 8.41 s wall (peak 3.31
    against 1.92 GiB). At 1% the band missed (2026-11-29, 2-core Xeon VM, old and new alternating,
    3 rounds, back to back): the papers100M shape at 1/40 (``--rows labeled``, 4 GiB), c = 2 predicted
    4.166 s against c = 4 4.33 s (3.9%), measured 5.41-5.42 against 5.32-5.36 s, peak 2.06 against
    1.44 GiB; the 1M-node power-law graph (``--rows all``, 8 GiB), c = 2 3.731 against c = 4 3.856 s
    (3.3%), measured 3.21-3.70 against 3.24-3.27 s, peak 0.82 against 0.63 GiB. At 5% the 8M-entry
    graphs of d = 64 move from one column block to two at 4 GiB for ~20% less peak and a wall within
    the noise of these 1.2-1.8 s runs (ego 1.14-1.19 against 1.18-1.28 s, cliques 1.73-1.82 against
    1.78-1.82, citation 1.35-1.69 against 1.43-1.44); R-MAT at 1/40 (``--rows all``) keeps c = 2.

    On a CUDA device the tie goes to the fewest column blocks instead: no host pages are faulted per
    block there, and S's move to the device overlaps only the first column block's read of X (a
    narrower block leaves it on hop 1's path). Measured (2026-11-28, one H100, ``benchmarks/
    bench_precompute_gpu.py``, 2M nodes, 38.7M entries, d = 128, X in 32-column chunks, where c = 1,
    2, 4 are predicted within 0.8%): c = 1 3.52 / 3.66 s wall against c = 4 3.90 / 4.24 s, hop 1's
    kernel 0.03–0.20 against 0.64–0.85 s, peak GPU memory 2.62 against 1.01 GiB."""
    fastest = min(p.predicted_seconds for p in plans)
    near = [p for p in plans if p.predicted_seconds <= fastest * (1 + TIE_SHARE)]
    if all(p.device.startswith("cuda") for p in near):
        return min(near, key=lambda p: (p.c, p.predicted_peak))
    return min(near, key=lambda p: (p.predicted_peak, p.c))


def keep_columns(plan: Plan, p: Problem, prof: Profile, c: int, width: int) -> Plan:
    """``plan`` with another column blocking (a resumed run keeps the one its partial file was laid
    out with); the predicted peak moves by the difference of the two blockings' column buffers."""
    if (c, width) == (plan.c, plan.width):
        return plan
    peak = plan.predicted_peak - memory(p, plan.b, plan.c) + memory(p, plan.b, c)
    return Plan(**{**plan.to_dict(), "c": c, "width": width, "predicted_peak": peak,
                   "predicted_seconds": round(plan.predicted_seconds - predict_seconds(p, prof, plan.b, plan.c)
                                              + predict_seconds(p, prof, plan.b, c), 3)})


def _column_counts(d: int) -> list[int]:
    """The column-block counts the planners try (powers and small multiples, and every divisor)."""
    divisors = {q for w in range(1, math.isqrt(d) + 1) if d % w == 0 for q in (w, d // w)}  # O(√d)
    return sorted({c for c in {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, d} | divisors if c <= d})


ORDER_CHUNK = 1 << 20         # the order read in chunks of 1M ids (int64) to gather X's rows
MIN_COPY_ROOM = 16 << 20      # the least output bucket worth writing the ordered copy with


def copy_disk_bytes(p: Problem) -> int:
    """Bytes of the ordered copy of S on disk (:func:`gnnprep.precompute.ordered.copy_bytes`)."""
    return 8 * (p.num_nodes + 1) + (p.index_bytes + (4 if p.weighted else 0)) * p.num_entries + \
        (4 if p.num_nodes < 2**31 else 8) * p.num_nodes


def _copy_extra(p: Problem) -> int:
    """What reading S from the ordered copy holds beyond the unordered plan: the stored rows' new
    ids (every id's when every row is stored) and a chunk of the order."""
    n = p.num_nodes
    return 8 * p.out_rows + 8 * min(n, ORDER_CHUNK) + (8 * n if p.out_rows >= n else 0)


def copy_build_room(p: Problem, plan: Plan) -> int:
    """Bytes the ordered copy's writer may hold for its output bucket and read block: it runs while
    the first column block of X is read (one column buffer, the stored row pointers, the scalings),
    besides its own order, inverse and row pointers (:func:`gnnprep.precompute.ordered.build_memory`)."""
    n = p.num_nodes
    own = 8 * n + p.index_bytes * n + 8 * (n + 1)
    if p.ordered_copy == "find":
        own = max(own, 8 * n + 8 * n)  # labels and counts while the order is found, then the above
    held = 16 * n + 4 * n * min(plan.width, max(1, p.num_features)) + own
    return int((plan.budget - FIXED) / SLACK) - held


def copy_seconds(p: Problem, prof: Profile, room: int) -> float:
    """Predicted seconds to have the ordered copy: nothing when present; else one pass over the stored
    entries per output bucket (``room`` bytes), their scatter and the write (and, to find the order
    out of core first, two passes of label propagation)."""
    if p.ordered_copy == "present" or not p.ordered_copy:
        return 0.0
    per = p.index_bytes + (4 if p.weighted else 0)
    s_bytes = per * p.num_entries
    passes = max(1, math.ceil(s_bytes / max(1, room)))
    t = passes * s_bytes / prof.read_bytes_per_s + p.num_entries * prof.relabel_ns_per_entry * 1e-9
    t += copy_disk_bytes(p) / prof.write_bytes_per_s
    if p.ordered_copy == "find":
        t += 2 * p.index_bytes * p.num_entries / prof.read_bytes_per_s
        t += (p.num_entries + p.num_nodes) * prof.reorder_ns_per_entry * 1e-9
    return t


def kernel_seconds(p: Problem, prof: Profile, b: int, width: int) -> float:
    """The hops' kernel seconds of ``p`` in ``b`` edge blocks and column blocks of ``width``
    (predict_seconds' compute term)."""
    n, d = p.num_nodes, p.num_features
    widths = _widths(d, width)
    if len(widths) * max(1, p.hops) <= LISTED_BLOCKS:
        return _passes(p) * sum(prof.spmm_seconds(e, n, wj) for e in _hop_entries(p, b) for wj in widths)
    # equal widths counted, as in predict_seconds (many column blocks, many hops)
    return _passes(p) * sum((d // width) * prof.spmm_seconds(e, n, width) +
                            (prof.spmm_seconds(e, n, d % width) if d % width else 0) for e in _hop_entries(p, b))


def permute_seconds(p: Problem, prof: Profile, width: int) -> float:
    """X's column blocks gathered into a node order, once each, and each column block's last hop
    gathered back to the stored order after the hop's last row block (no kernel left to hide it
    under: the R-MAT graph at 1/40 waited 0.36-0.54 s for it, 1.42 GB at the profile's 3 GB/s
    predict 0.47 s)."""
    return sum(p.num_nodes * wj * 4 + max(p.out_rows, 1) * wj * 4
               for wj in _widths(p.num_features, width)) / prof.gather_bytes_per_s


def order_speedup(prof: Profile, kind: str) -> float:
    """Kernel seconds in a node order of ``kind`` / in arbitrary ids: the profile's
    ``reorder_speedup`` (measured with the community order); a degree order saves less
    (:data:`gnnprep.sparse.order.DEGREE_KERNEL_RATIO`)."""
    if kind in ("degree", "degree-bucket"):
        from gnnprep.sparse.order import DEGREE_KERNEL_RATIO

        return max(prof.reorder_speedup, DEGREE_KERNEL_RATIO)
    return prof.reorder_speedup


def _ordered(plan: Plan, p: Problem, prof: Profile) -> tuple[Plan, bool]:
    """``plan`` computed in a locality order, and whether the order is predicted to pay there: a
    column block of X larger than the last-level cache (else every gather hits it anyway) and a
    kernel saving (``reorder_speedup``) above the order's cost.

    S resident and no ordered copy: the order is relabelled in memory (found first if unknown),
    which costs ~32 bytes per node and a copy of the indices. Otherwise (S streamed, or an ordered
    copy present) S is read from the ordered copy beside the store, resident or in row blocks
    (:mod:`gnnprep.precompute.ordered`; written first when ``p.ordered_copy`` is build or find):
    no per-node bookkeeping beyond the stored rows' new ids."""
    n, d = p.num_nodes, p.num_features
    gain = kernel_seconds(p, prof, plan.b, plan.width) * (1 - prof.reorder_speedup)
    permute = permute_seconds(p, prof, plan.width)
    from_copy = bool(p.ordered_copy) and (not plan.s_resident or p.ordered_copy == "present")
    if from_copy:
        room = copy_build_room(p, plan)
        cost = copy_seconds(p, prof, room)
        if p.ordered_copy == "present":   # S's first pass from the copy's file, not the store's
            cost += cold_read_seconds(_s_bytes(p), p.copy_cached, prof) - cold_read_seconds(_s_bytes(p), p.s_cached, prof)
        # the stored rows' new ids, a chunk of the order; every id's when every row is stored
        extra = _copy_extra(p)
        peak = plan.predicted_peak + int(SLACK * extra)
        if p.ordered_copy != "present" and room < MIN_COPY_ROOM:
            peak = max(peak, plan.budget + 1)  # no room to write the copy under this plan
    else:
        cost = (p.num_entries + n) * (prof.relabel_ns_per_entry if p.order_known else prof.reorder_ns_per_entry) * 1e-9
        # found and relabelled in a background thread while the first column block of X is read
        # (whole row chunks: every column's bytes)
        cost = max(0.0, cost - n * d * p.in_itemsize / prof.read_bytes_per_s)
        # order, inverse, stored indptr kept, new indptr; then either (order to find) labels, counts and
        # the relabelled indices beside the old, or (order known) one block of the stored ids streamed
        # into the relabelled copy, which replaces S's
        extra = 8 * n * 4 + (p.index_bytes * (1 << 24) if p.order_known and not p.weighted else
                             (p.index_bytes + 4) * n + p.index_bytes * p.num_entries)
        if p.weighted:  # the stored weights moved with their entries: a copy beside the old while it is made
            extra += 4 * p.num_entries
        peak = plan.predicted_peak + int(SLACK * extra)
    large = n * 4 * min(plan.width, d) > REORDER_MIN_BLOCK_BYTES
    ordered = Plan(**{**plan.to_dict(), "reorder": True, "ordered_copy": from_copy, "predicted_peak": peak,
                      "predicted_seconds": round(plan.predicted_seconds + cost + permute - gain, 3)})
    return ordered, large and gain > cost + permute


def _streamed(p: Problem, prof: Profile, budget: int, baseline_rss: int, c: int, source: str,
              extra: int, b_min: int = 2) -> Plan | None:
    """The plan with S streamed in the fewest row blocks (at least ``b_min``) that fit ``budget`` at
    c column blocks with ``extra`` bytes more held (the order's), or None."""
    n = max(1, p.num_nodes)
    b = max(b_min, 2)
    while b <= n and memory(p, b, c) + int(SLACK * extra) > budget:
        b = b * 2 if b < 64 else b + max(1, b // 4)
    if b > n:
        return None
    plan = choose_plan(p, budget, prof, baseline_rss, (1, b, c))
    return Plan(**{**plan.to_dict(), "source": source,
                   "a": max(1, math.ceil((8 * n + _s_bytes(p)) / max(1, budget - 16 * n)))})


def decide_order(plan: Plan, p: Problem, prof: Profile, locality: float, mode: str = "auto",
                 budget: int | None = None) -> tuple[Plan, str]:
    """Decide the node order jointly with the column blocking (:mod:`gnnprep.sparse.order`), and say
    why. An order runs on the CPU kernel only when ids look arbitrary (mean |u - v| / n above 0.1),
    with S resident (relabelled in memory, or read from the ordered copy beside the store) or
    streamed from the ordered copy (issue 24). Under a tight budget more, narrower column blocks
    leave room for it, so every column count from ``plan``'s up is tried with the order, resident
    and streamed, and the plan with the least predicted time that fits wins, the unordered
    ``plan`` included. ``mode`` community or bfs forces an order (the fastest plan that fits with
    one); the column counts (and edge blocks) the user gave (``--blocks``) are kept.
    Returns (the plan, why the order is or is not used)."""
    if mode == "none":
        return plan, "not used: --reorder none"
    if p.device != "cpu":
        return plan, f"not used: the node order runs on the CPU kernel (device {p.device})"
    forced = mode in ("bfs", "community", "degree", "degree-bucket")
    if not forced and locality <= 0.1:
        return plan, f"not used: ids already local (mean |u - v| / n = {locality:.3f} <= 0.1)"
    budget = budget or plan.budget
    user = plan.source == "user"
    counts = [plan.c] if user else [c for c in _column_counts(max(1, p.num_features)) if c >= plan.c]
    extra = _copy_extra(p)
    fits, pays = [], []
    for c in counts:
        bases = []
        if plan.s_resident and c == plan.c:
            bases.append(plan)
        elif not user:
            bases.append(Plan(**{**choose_plan(p, budget, prof, plan.baseline_rss, (plan.a, 1, c)).to_dict(),
                                 "source": plan.source}))
        if p.ordered_copy:
            if user and not plan.s_resident:
                bases.append(plan)
            elif not user:
                streamed = _streamed(p, prof, budget, plan.baseline_rss, c, plan.source, extra)
                if streamed is not None:
                    bases.append(streamed)
        for base in bases:
            ordered, gain_ok = _ordered(base, p, prof)
            if ordered.predicted_peak <= budget:
                fits.append(ordered)
                if gain_ok:
                    pays.append(ordered)
    # aligned column blocks first (aligned_first): a forced order among the aligned plans that fit where
    # there are any, an order that pays only aligned where the plain plan or another ordered one is
    d = max(1, p.num_features)
    fits = aligned_first(fits, d)
    if is_aligned(plan, d) or any(is_aligned(q, d) for q in pays):
        pays = [q for q in pays if is_aligned(q, d)]
    where = {"present": "the ordered copy beside the store", "build": "an ordered copy written by this run",
             "find": "an ordered copy written by this run (the order found out of core first)"}
    if forced:
        if not fits:
            return plan, ("not used: no plan with the order fits the budget" +
                          ("" if p.ordered_copy or plan.s_resident else
                           " (S is streamed and no ordered copy can be had)"))
        best = least_memory_of_fastest(fits)
    else:
        best = min(pays + [plan], key=lambda q: q.predicted_seconds)
        if best.reorder:   # the column blocking among the ordered plans: a tie goes to the smaller peak
            best = least_memory_of_fastest(pays)
    if best.reorder:
        src = where.get(p.ordered_copy, "") if best.ordered_copy else "relabelled in memory"
        return best, (f"used{' (--reorder ' + mode + ')' if forced else ''}: S {'resident' if best.s_resident else f'streamed in {best.b} row blocks'} "
                      f"from {src}; predicted {best.predicted_seconds:.1f} s against {plan.predicted_seconds:.1f} s "
                      f"in the stored order")
    if not fits:
        why = "no plan with the order fits the budget"
        if not plan.s_resident and not p.ordered_copy:
            why = "S does not fit the budget and no ordered copy of S can be had (no order known, or no disk room)"
        return plan, f"not used: {why}"
    fastest = min(fits, key=lambda q: q.predicted_seconds)
    why = (f"not used: predicted {fastest.predicted_seconds:.1f} s with the order against "
           f"{plan.predicted_seconds:.1f} s without (or its column blocks fit the cache anyway)")
    if not plan.s_resident and not p.ordered_copy:
        why += "; S is streamed and no ordered copy of S can be had, so the order needs S resident"
    return plan, why


def with_reorder(plan: Plan, p: Problem, prof: Profile, locality: float, mode: str = "auto",
                 budget: int | None = None) -> Plan:
    """:func:`decide_order`'s plan (without the reason)."""
    return decide_order(plan, p, prof, locality, mode, budget)[0]


def plan_order(plan: Plan, p: Problem, prof: Profile, locality: float, *, kind: str, mode: str, requested: str,
               budget: int, chosen_none: str | None = None, gain: float | None = None,
               copy_why: str = "") -> tuple[Plan, str]:
    """The run's order decision: :func:`decide_order` for an order of ``kind`` in ``mode``
    (:func:`gnnprep.graph.order.order_mode`), with the reason the user reads (``--json``'s ``decisions.order``).
    A degree order saves less of the kernel than the community order the profile measured
    (``DEGREE_KERNEL_RATIO``); ``copy_why``: why no ordered copy of S can be had."""
    prof = replace(prof, reorder_speedup=order_speedup(prof, kind))
    plan, why = decide_order(plan, p, prof, locality, mode, budget)
    if chosen_none:
        why = chosen_none
    elif mode == "none" and requested == "auto":
        why = f"not used: the order kept with the store brings few neighbours closer (near share +{gain:.3f} < " \
              f"{ORDER_MIN_GAIN})"
    elif copy_why and not plan.reorder:
        why += f"; no ordered copy: {copy_why}"
    if plan.reorder and kind != "community":
        why += f" (order: {kind})"
    return plan, why


RESIDENT_ROW_BLOCKS = 8


def row_blocks(plan: Plan) -> int:
    """The edge blocks a hop walks: the plan's ``b``, and at least RESIDENT_ROW_BLOCKS with S
    resident — a resident S is still walked in several row blocks so that each block's rows are
    written while the next block computes (the last hop's writes would otherwise all come at the
    end). The memory model does not change: the blocks are views of the resident CSR."""
    return max(plan.b, RESIDENT_ROW_BLOCKS) if plan.s_resident else plan.b


# the default (streamed) search's seconds per stored entry, as gnnprep.hag.stream.stream_plan models it
# with its default window (16 pair occurrences an entry at most): 160 ns an entry, plus 25 ns a counted
# pair — all 16 on a graph up to 2M entries, about 2 beyond, where pairs are counted on a sample of
# rows. The papers100M shape at 1/10 (308M entries): 59-64 s measured at --memory-budget 2GiB (2-core
# machine, 2026-11-26, bucketed pair counting); the rounds search it replaced as the default took
# ≈ 8,000 ns an entry. Only a fallback: --hag auto asks the streamed search's own plan (sizes, window).
HAG_SEARCH_NS_PER_ENTRY = 160.0 + 25.0 * 16


# the torch executor (gnnprep.precompute.hag_torch) runs one sparse product per HAG level (two
# entries per aggregation node, written into Y's rows) and fills Y[:n] = r ⊙ X once per pass: its own
# terms beside the rewired product's. Per level: a launch at ~15-25 µs (CUDA, and torch's CPU
# dispatch), rounded up (derived, not calibrated: 10-20 levels cost ~1 ms a hop)
TORCH_HAG_LEVEL_S = 5e-5
# product entries an aggregation row costs the torch executor beyond its two input reads (the row
# written, the level matrix's own entries). Measured on the 200k-node bench graph
# (benchmarks/bench_hag_torch.py, d = 64, CPU, 19.9 ns per entry of the plain product): the level
# products took 3.3 entries per aggregation node in all with the uncapped HAG (921k nodes, 10
# levels), 3.45 with |VA| = 300k (3 levels), i.e. 1.3 and 1.45 beyond the two reads. (The gather of
# input pairs with a pairwise sum it replaced cost 0.6-4.4 beyond them, depending on |VA|.)
TORCH_HAG_ROW_ENTRIES = 1.4
# The CPU kernel through a HAG (in the computation's node order, aggregation references last in
# each in-list: gnnprep.hag.order.in_order), in entries of its own plain kernel. Measured with one
# thread on three 8M-entry graphs (benchmarks/bench_hag_stream.py's ego, cliques, citation; CPU
# seconds, best of 7): a rewired entry costs 1.03-1.16 plain ones (its aggregation rows miss the
# cache where the plain gathers in the order hit it), and an aggregation row 3-8 entries besides
# its two input reads (prepared level by level, a write per row). Loading a HAG (read as int64,
# its cover checked against S, relabelled) costs 16-56 + 7-23 ns a stored entry of it.
HAG_ENTRY_COST = 1.12
HAG_ROW_ENTRIES = 5.0
HAG_SETUP_NS_PER_ENTRY = 40.0
# Loading the HAG as an earlier run relabelled it (gnnprep.hag.ordered_copy: int32 as kept, its covers
# checked through the order, nothing relabelled), per stored entry of it. In one process, warm, 8-10 ns
# (cliques, 7.4M entries: 0.06-0.07 s); as the command runs it, what a run through the kept HAG spent
# before hop 1 beyond the plain run, plus the plain run's relabelling as predicted, less choose_hag's
# fresh-memory term, per HAG entry: ego 22, cliques 16, citation 5, cliques64 36 (8M entries, d = 64),
# cliques64 at 32M entries and d = 128 26 ns (benchmarks/bench_hag_stream.py, 2-core VM, 2026-11-27).
HAG_KEPT_SETUP_NS_PER_ENTRY = 20.0


def hag_relabel_room(p: Problem, budget: int, num_agg: int, hag_entries: int, streamed: bool = False) -> int | None:
    """None where a HAG that is not kept relabelled beside it is relabelled in memory under ``budget``
    (:func:`gnnprep.hag.order.in_order`: the HAG as read, int64, beside its int32 copy), else the room
    for relabelling it out of core (:func:`gnnprep.hag.order.write_in_order`) into that copy, which
    the run then reads; always the room for a plan that streams the copy's in-lists (``streamed``)."""
    from gnnprep.hag.order import relabel_room

    held = 8 * (p.num_nodes + 1) + 4 * hag_entries
    in_memory = FIXED + int(SLACK * (8 * (p.num_nodes + 1) + 8 * hag_entries + held + 16 * p.num_nodes))
    return None if in_memory <= budget and not streamed else relabel_room(budget, p.num_nodes, num_agg)


@dataclass(frozen=True)
class HagVerdict:
    """The planner's verdict on ``--hag auto`` (:func:`choose_hag`): ``use`` the cached HAG, or
    ``build`` one first (then judged again), or neither; why; and the predicted saving in seconds.
    What the run then reports is :class:`gnnprep.precompute.config.HagChoice`."""

    use: bool
    build: bool
    reason: str
    predicted_saving_s: float = 0.0


def choose_hag(plan: Plan, p: Problem, prof: Profile, cached: dict | None, budget: int,
               backend: str = "numba", search_s: float | None = None, speedup: float | None = None,
               kept: bool = False) -> HagVerdict:
    """``--hag auto``: use a HAG only when the predicted kernel saving pays for it.

    With a HAG the Â part of a hop costs like a sparse product over ``transfers_hag`` entries
    (its rewired in-lists plus two reads per aggregation node, Jia et al. 2020, §3.2) instead of m.
    A cached HAG (one written beside the graph store earlier) is used when its plan
    (:func:`plan_with_hag`, for ``backend``: the torch executor has its own terms) fits the budget
    and is predicted to save more than 5% of the run's time against ``plan`` (the same backend's
    plain plan); a new one is searched for only when even a perfect HAG (saving every kernel
    second) would repay the predicted search time (``search_s``: the streamed search's own
    prediction from the store's sizes, :func:`gnnprep.hag.stream.stream_plan`; None:
    :data:`HAG_SEARCH_NS_PER_ENTRY` an entry). ``plan`` is the plain run's plan after its own node
    order decision; ``speedup`` and ``kept``: the order the run through the HAG would use and
    whether the HAG relabelled to it is kept (:func:`plan_with_hag`).
    """
    if p.weighted:  # (the CPU-only rule is decided by the caller, gnnprep.precompute.run)
        return HagVerdict(False, False, "HAG aggregation shares sums over unweighted in-lists")
    # the plain run's kernel seconds over the entries its hops read (a pruned run's read fewer:
    # --rows labeled on papers100M's shape, hop 3 1.4% of them): all a perfect HAG saves
    plain = kernel_seconds(p, prof, plan.b, plan.width)
    if cached is None:
        search = p.num_entries * HAG_SEARCH_NS_PER_ENTRY * 1e-9 if search_s is None else search_s
        if plain > search:
            return HagVerdict(False, True, f"no cached HAG; a search (~{search:.1f} s) can repay at most {plain:.1f} s",
                              plain - search)
        return HagVerdict(False, False, f"no cached HAG; a search (~{search:.1f} s) would cost more than the "
                                        f"{plain:.2f} s of kernel time it could save")
    try:
        with_hag = plan_with_hag(p, prof, budget, plan.baseline_rss, int(cached["num_agg"]), int(cached["transfers_hag"]),
                                 backend=backend, levels=int(cached.get("levels", 0) or 0), speedup=speedup, kept=kept)
    except GnnprepError:
        return HagVerdict(False, False, "the cached HAG's aggregation rows do not fit the memory budget")
    # what the run through the HAG holds beyond the plain run (its larger column buffers, the HAG's
    # arrays against S's) is memory faulted in fresh, at the profile's rate as the column buffers in
    # predict_seconds: on cliques64 at 32M entries, d = 128, 0.34 GiB more, and a HAG run's hop 0
    # took 0.57-0.81 s after a plain run against 0.14-0.20 s after another HAG run (2-core VM)
    fresh = max(0, with_hag.predicted_peak - plan.predicted_peak) / prof.fault_bytes_per_s
    saving = plan.predicted_seconds - (with_hag.predicted_seconds + fresh)
    if saving > 0.05 * plan.predicted_seconds:
        return HagVerdict(True, False, f"cached HAG saves ~{saving:.2f} s of {plan.predicted_seconds:.2f} s", saving)
    return HagVerdict(False, False, f"cached HAG would save only ~{max(saving, 0.0):.3f} s of "
                                    f"{plan.predicted_seconds:.2f} s", saving)


def _hag_cpu_peak(p: Problem, c: int, w: int, b: int, num_agg: int, hag_entries: int, kept: bool,
                  room: int | None) -> int:
    """:func:`plan_with_hag`'s peak on the CPU kernel: the larger of the run's (the column buffers,
    each with a row of room per aggregation node after its n rows, :meth:`HopGraph.buffer`; the HAG
    held, int32 as relabelled, or with b > 1 its row pointers and inputs and one block of its ids;
    the order and its inverse) and the load's (the HAG as read, int64, and relabelled; only the
    relabelled copy with ``kept``, or out of core with ``room``; opening a streamed copy checks its
    covers: 16 bytes a node and an aggregation node, and a block of 4M ids of S and of the HAG)."""
    from gnnprep.hag.order import streamed_bytes

    n = p.num_nodes
    if b > 1:   # (blocks of ~equal entries and rows: 10% allowed for their spread)
        held = 8 * (n + 1) + 8 * num_agg
        block = int(1.1 * 4 * math.ceil((hag_entries - 2 * num_agg) / b))
        if p.hop_entries:  # pruned: the stored rows' in-lists extracted (their share of the HAG's)
            held += int(4 * (hag_entries - 2 * num_agg) * p.hop_entries[-1] / max(1, p.num_entries)) + 24 * p.out_rows
        load = FIXED + int(SLACK * (held + 32 * n + 16 * num_agg + (8 << 22)))
    else:
        held, block = 8 * (n + 1) + 4 * hag_entries, 0
        hag_index = 0 if kept or room is not None else 8 * (n + 1) + 8 * hag_entries
        load = FIXED + int(SLACK * (hag_index + held + 16 * n))
    run = memory(replace(p, num_entries=0), 1, c) + int(SLACK * (held + block + 4 * p.buffers * num_agg * w + 16 * n))
    if room is not None:
        load = max(load, FIXED + int(SLACK * streamed_bytes(n, num_agg, room)))
    return max(run, load)


def _hag_stream_seconds(p: Problem, prof: Profile, b: int, c: int, rewired: int) -> float:
    """Reading a HAG's in-lists streamed in b row blocks: each (pass, hop, column block) reads them
    (4 bytes a rewired entry), the first from the disk, later ones from the page cache where the
    copy fits beside the plan (:func:`s_rereads_from_disk`, as a streamed S), plus each block's launch."""
    ids = Problem(**{**asdict(p), "num_entries": rewired, "index_bytes": 4, "weighted": False, "value_bytes": 0,
                     "s_cached": None, "copy_cached": None})
    reads = s_reads(ids, b, c)   # (a pruned run's last hop reads the stored rows' in-lists, extracted once)
    reread = prof.read_bytes_per_s if s_rereads_from_disk(ids, b, c) else prof.reread_bytes_per_s
    return _s_bytes(ids) / prof.read_bytes_per_s + max(0, reads - 1) * _s_bytes(ids) / reread \
        + reads * b * prof.block_overhead_s


def plan_with_hag(p: Problem, prof: Profile, budget: int, baseline_rss: int, num_agg: int, hag_entries: int,
                  blocks: tuple[int, int, int] | None = None, backend: str = "numba", levels: int = 0,
                  speedup: float | None = None, kept: bool = False) -> Plan:
    """The plan for aggregating through a HAG: its arrays resident (b = 1: rewired in-lists and
    input pairs, int64 as read) plus a row per aggregation node for each column buffer, with
    the fewest column blocks that fit. On the CPU kernel S's pattern is not held (the HAG replaces
    it) but the HAG is, int64 as read and int32 once relabelled to the node order
    (:func:`gnnprep.hag.order.in_order`), both while it is relabelled; where both do not fit the
    budget (:func:`hag_relabel_room`), it is relabelled out of core into the copy kept beside it,
    then read as kept (plus :data:`gnnprep.hag.order.STREAMED_NS_PER_ENTRY_PASS` per entry and pass).
    Where the held HAG does not fit, on the CPU kernel, its in-lists may be streamed from that copy in b row blocks (:func:`_hag_cpu_peak`, :func:`_hag_stream_seconds`):
    the fewest predicted seconds among the held plan and the streamed ones at fewer column blocks
    (issue 33, item 5). ``blocks`` (the user's): b > 1 streams them.
    Time as a product over the HAG's entries: on the CPU kernel :data:`HAG_ENTRY_COST` per rewired
    entry and 2 + :data:`HAG_ROW_ENTRIES` per aggregation node (with ``--rows labeled``, the pruned
    hops' share of the rewired in-lists, as the plain plan's ``hop_entries``, plus every aggregation
    row); plus loading the HAG (:data:`HAG_SETUP_NS_PER_ENTRY`, or :data:`HAG_KEPT_SETUP_NS_PER_ENTRY`
    with ``kept``: relabelled by an earlier run). ``speedup``: the run is in a node order whose
    kernel seconds are that share of the stored order's (:func:`order_speedup`; the CPU kernel's
    terms above were measured in the order, as the plain kernel's table in arbitrary ids), where
    X's column blocks are larger than the cache, plus X gathered into the order and back
    (:func:`permute_seconds`), as the plain plan in an order (:func:`_ordered`).

    On the torch backend (:mod:`gnnprep.precompute.hag_torch`) the executor also holds Y's n graph
    rows (r ⊙ X, 4 n w bytes), the rewired CSR as a tensor (int64 ids and float32 values, 12 bytes
    per entry and per self-loop) and the levels' CSR matrices (32 bytes per aggregation node). Its
    time is a product over ``hag_entries`` + :data:`TORCH_HAG_ROW_ENTRIES` per aggregation node
    (the level products' cost beyond their two input reads, which ``hag_entries`` holds), plus per
    pass and column block the fill of Y[:n] (a scaling per row·column, ``row_ns_per_col``) and
    ``levels`` level-product launches
    (:data:`TORCH_HAG_LEVEL_S` each). In entries of the device's own kernel table, so the terms
    hold on the CPU and on a GPU alike."""
    from gnnprep.hag.order import STREAMED_NS_PER_ENTRY_PASS, streamed_passes

    hag_index = 8 * (p.num_nodes + 1) + 8 * hag_entries  # indptr, indices and the 2 inputs per node
    torch = backend == "torch"
    relabel = None if kept or torch else hag_relabel_room(p, budget, num_agg, hag_entries)

    def make(c: int, source: str, b: int = 1) -> Plan:
        room = relabel if b == 1 or kept else hag_relabel_room(p, budget, num_agg, hag_entries, streamed=True)
        w = math.ceil(p.num_features / c) if p.num_features else 0
        c = math.ceil(p.num_features / w) if w else 1
        extra = 0
        if torch:
            extra = 4 * p.num_nodes * w + 12 * (hag_entries + p.num_nodes) + 32 * num_agg
        if torch:
            peak = memory(p, 1, c) + int(SLACK * (hag_index + 4 * num_agg * w + extra))
        else:
            peak = _hag_cpu_peak(p, c, w, b, num_agg, hag_entries, kept, room)
        rewired = hag_entries - 2 * num_agg
        if torch:
            entries = hag_entries + round(TORCH_HAG_ROW_ENTRIES * num_agg)
        else:
            entries = round(HAG_ENTRY_COST * rewired + (2 + HAG_ROW_ENTRIES) * num_agg)
        # pruned hops (the CPU kernel, --rows labeled): their rows' share of the rewired in-lists,
        # plus every aggregation row (prepared whole each hop); the torch backend computes every row
        pruned = () if torch or not p.hop_entries else \
            tuple(round(HAG_ENTRY_COST * rewired * e / max(1, p.num_entries) + (2 + HAG_ROW_ENTRIES) * num_agg)
                  for e in p.hop_entries)
        q = Problem(**{**asdict(p), "num_entries": entries, "hop_entries": pruned,
                       "last_inputs": p.last_inputs if pruned else 0,
                       "s_cached": p.hag_cached, "copy_cached": None})   # (its in-lists are the HAG's, not S's)
        setup = HAG_KEPT_SETUP_NS_PER_ENTRY if (kept or room is not None) and not torch else HAG_SETUP_NS_PER_ENTRY
        seconds = predict_seconds(q, prof, 1, c) + hag_entries * setup * 1e-9
        if room is not None:  # the passes over the in-lists
            seconds += hag_entries * streamed_passes(hag_entries, room) * STREAMED_NS_PER_ENTRY_PASS * 1e-9
        if b > 1:
            seconds += _hag_stream_seconds(p, prof, b, c, rewired)
        if speedup is not None and not torch and p.num_nodes * 4 * min(w, p.num_features) > REORDER_MIN_BLOCK_BYTES:
            seconds += permute_seconds(p, prof, w) - kernel_seconds(q, prof, 1, w) * (1 - speedup)
        if torch:
            widths = _widths(p.num_features, w)
            seconds += _passes(p) * p.hops * sum(levels * TORCH_HAG_LEVEL_S + p.num_nodes * wj * prof.row_ns_per_col * 1e-9
                                                 for wj in widths)
        return Plan(a=1, b=b, c=c, width=w, s_resident=b == 1, device=p.device, budget=budget, predicted_peak=peak,
                    predicted_seconds=round(seconds, 3), baseline_rss=baseline_rss, source=source)

    streams = not torch   # the in-lists streamed (b > 1): on the CPU kernel
    if blocks is not None:
        return make(min(max(1, blocks[2]), max(1, p.num_features)), "user", max(1, blocks[1]) if streams else 1)
    aligned, every = _hag_counts(d := max(1, p.num_features))
    # column blocks in whole X tiles where such a plan fits
    best = _fewest_blocks(make, aligned, budget, streams) or _fewest_blocks(make, every, budget, streams)
    if best is not None:
        return best
    raise OptionError("--memory-budget", f"{format_size(budget)} is too small to aggregate through this HAG "
                                         f"({num_agg:,} aggregation nodes): even one column needs about "
                                         f"{format_size(make(d, 'auto').predicted_peak)}; run without --hag")


def _fewest_blocks(make, counts: list[int], budget: int, streams: bool) -> Plan | None:
    """:func:`plan_with_hag`'s choice among ``counts`` (ascending): the first count whose plan with the
    HAG held (``make(c, "auto")``) fits ``budget``, or the fastest plan with its in-lists streamed in b
    row blocks (``streams``) that fits at a smaller count; None where nothing fits."""
    best = None
    for c in counts:
        plan = make(c, "auto")
        if plan.predicted_peak <= budget:
            best = plan if best is None or plan.predicted_seconds <= best.predicted_seconds else best
            break
        for b in (2, 4, 8, 16, 32, 64, 128, 256) if streams else ():
            plan = make(c, "auto", b)
            if plan.predicted_peak <= budget:
                best = plan if best is None or plan.predicted_seconds < best.predicted_seconds else best
                break
    return best


def _hag_counts(d: int) -> tuple[list[int], list[int]]:
    """The column-block counts :func:`plan_with_hag` tries: those in whole X tiles (:func:`aligned_first`),
    then every one."""
    counts = sorted({c for c in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, d) if c <= d})
    return [c for c in counts if _aligned_width(math.ceil(d / c), d)], counts


# -- column blocks among the ranks of a torchrun job (gnnprep.precompute.sharded) --------------------------
def rank_ranges(d: int, width: int, ranks: int, tile: int = 1) -> list[tuple[int, int] | None]:
    """Every rank's contiguous share [C0, C1) of the column blocks of ``width`` (None: none).

    No rank gets more than ⌈c/P⌉ of the c blocks (the passes over S the slowest rank makes), and
    among the splits that keep that, each boundary between two ranks is put on a start of an X
    tile (``tile`` columns, one HDF5 chunk column of /nodes/features) where one is in reach, the
    nearest to the even split r·c/P: a rank then reads only its own tiles of X, none twice over
    the ranks. With fewer blocks than ranks, the even split (some ranks get none)."""
    blocks = column_blocks(d, width)
    c = len(blocks)
    if c < ranks:
        cuts = [r * c // ranks for r in range(ranks + 1)]
    else:
        cap = math.ceil(c / ranks)
        cuts = [0]
        for r in range(1, ranks):
            lo, hi = max(cuts[-1] + 1, c - (ranks - r) * cap), min(cuts[-1] + cap, c - (ranks - r))
            even = r * c // ranks
            aligned = [b for b in range(lo, hi + 1) if blocks[b][0] % max(1, tile) == 0]
            cuts.append(min(aligned, key=lambda b: (abs(b - even), b)) if aligned else min(hi, max(lo, even)))
        cuts.append(c)
    return [(blocks[lo][0], blocks[hi - 1][1]) if hi > lo else None for lo, hi in zip(cuts, cuts[1:])]


def rank_columns(d: int, width: int, rank: int, ranks: int, tile: int = 1) -> tuple[int, int] | None:
    """Rank ``rank``'s contiguous share [C0, C1) of the column blocks of ``width`` (None: none)."""
    return rank_ranges(d, width, ranks, tile)[rank]


def tile_width(width: int, d: int, ranks: int, tile: int) -> int:
    """``width`` rounded down to whole X tiles (a multiple of ``tile``) when that gives no rank more
    column blocks than ``width`` does (narrower blocks fit every rank's budget too), else ``width``:
    block boundaries on tile boundaries, so that no tile is read by two ranks or two blocks."""
    if tile <= 1 or width <= tile or width % tile == 0:
        return width
    w = width - width % tile
    per_rank = lambda v: math.ceil(math.ceil(d / v) / ranks)  # noqa: E731
    return w if per_rank(w) <= per_rank(width) else width


def agree_width(proposals: list[dict], d: int, ranks: int, tile: int = 1) -> int:
    """The column width every rank uses: a resumed job's (its shards were laid out with it), else
    the narrowest any rank's own plan chose (it fits every rank's budget), at most ⌈d/P⌉ so that
    every rank gets columns, on whole X tiles where that costs no rank a block (:func:`tile_width`)."""
    stored = [p["stored"] for p in proposals if p["stored"]]
    if stored:
        return int(stored[0])
    return tile_width(max(1, min([p["width"] for p in proposals] + [math.ceil(max(d, 1) / ranks)])), d, ranks, tile)
