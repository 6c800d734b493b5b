"""``gnnprep hag``'s library side: search a HAG for a graph store under a :class:`HagConfig` and
write it (:func:`build`, which ``gnnprep hag`` and ``precompute --hag auto`` both call); find and load
the HAG that ``precompute --hag`` aggregates through (:func:`cache_path`, :func:`load_for`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.jit import compiling
from gnnprep.core.progress import Progress, no_progress
from gnnprep.core.record import Record
from gnnprep.hag.file import read_hag, write_hag
from gnnprep.hag.structure import Hag

if TYPE_CHECKING:
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.stream import StreamPlan

METHODS = ("stream", "rounds", "exact")
AGGREGATES = ("set", "sequential")


def cache_path(store_path) -> Path:
    """Where ``--hag auto`` looks for (and keeps) a graph store's HAG: ``<store>.hag.h5`` beside it."""
    return Path(store_path).with_suffix(".hag.h5")


@dataclass(frozen=True)
class HagConfig:
    """Everything that defines a HAG build (:func:`build`); its parameters are saved in the
    artifact's provenance.

    ``aggregate="sequential"`` (order-dependent aggregation) runs the prefix search (Jia et al.,
    Theorem 2) whatever ``method``; otherwise ``method`` is ``"stream"`` (the default: the lazy
    greedy on window candidates, S read in row blocks within ``memory_budget``, resumable;
    :mod:`gnnprep.hag.stream`), ``"exact"`` (their Algorithm 3, the oracle) or ``"rounds"`` (the
    earlier in-memory approximation, :func:`gnnprep.hag.search.rounds_search`); ``window``,
    ``max_depth`` and ``min_share`` shape stream and rounds. ``capacity`` bounds |VA|: None for ⌊|V|/4⌋ (the
    paper's default), a float in (0, 1] for that fraction of |V|, an int for a count, or ``"all"``
    (:meth:`capacity_for`). ``memory_budget`` None: :func:`gnnprep.core.device.default_budget` of
    the CPU."""

    method: str = "stream"                    # stream | rounds | exact (set aggregation)
    aggregate: str = "set"                    # set (sum, mean, max: any order) | sequential (prefix sharing)
    capacity: int | float | str | None = None  # count | fraction of |V| | "all" | None: ⌊|V|/4⌋
    window: int | None = None                 # stream, rounds: candidate window (None: 16)
    max_depth: int = 16                       # stream, rounds: deepest aggregation level
    min_share: int = 2                        # stream, rounds: destinations a merged pair must be shared by
    memory_budget: int | None = None          # bytes for the search
    block_entries: int | None = None          # stream: entries per block at most (None: as many as the budget holds)

    def check(self) -> None:
        """OptionError for a value no search can use (before anything is read)."""
        if self.method not in METHODS:
            raise OptionError("--method", f"{self.method!r}: expected stream, rounds or exact")
        if self.aggregate not in AGGREGATES:
            raise OptionError("--aggregate", f"{self.aggregate!r}: expected set or sequential")
        c = self.capacity
        ok = (c is None or c == "all" or (isinstance(c, float) and 0 < c <= 1)
              or (isinstance(c, Integral) and not isinstance(c, bool) and c >= 0))
        if not ok:
            raise OptionError("--capacity", f"{c!r}: expected a count, a fraction of |V| in (0, 1], or all")
        if self.window is not None and self.window < 1:
            raise OptionError("--window", f"{self.window}: expected at least 1")
        if self.max_depth < 1:
            raise OptionError("--max-depth", f"{self.max_depth}: expected at least 1")
        if self.min_share < 2:
            raise OptionError("--min-share", f"{self.min_share}: expected at least 2")
        from gnnprep.hag.stream import MIN_BLOCK_ENTRIES

        if self.block_entries is not None and self.block_entries < MIN_BLOCK_ENTRIES:
            raise OptionError("--block-entries", f"{self.block_entries}: expected at least {MIN_BLOCK_ENTRIES}")

    def capacity_for(self, n: int, m: int) -> int:
        """|VA| allowed for a graph of n nodes and m stored entries: the configured count (⌊c·n⌋ for a
        fraction, ⌊n/4⌋ for None), clipped to m, since every aggregation node removes at least one
        stored entry."""
        c = self.capacity
        count = n // 4 if c is None else m if c == "all" else int(c * n) if isinstance(c, float) else int(c)
        return min(count, m)


@dataclass(frozen=True)
class HagReport(Record):
    """What :func:`build` wrote: the summary in ``hag.h5``'s root attributes (:func:`write_hag`:
    |V|, |VA|, levels, aggregate, the capacity used, and Jia et al.'s cost terms — aggregations and
    transfers — of the graph and of the HAG), the output, the search's method, seconds and peak
    memory above its start (None where not measured), and the ratios graph / HAG of both costs;
    for the streamed search, ``stream``: its blocks, window, sample stride, predicted seconds and
    peak (from sizes, as ``--dry-run`` prints them) and whether it resumed a partial search."""

    num_nodes: int
    num_agg: int
    levels: int
    aggregate: str
    capacity: int
    aggregations_graph: int
    aggregations_hag: int
    transfers_graph: int
    transfers_hag: int
    output: str
    method: str
    search_seconds: float
    peak_bytes: int | None
    aggregation_ratio: float
    transfer_ratio: float
    stream: dict | None = field(default=None, metadata={"omit_none": True})  # the streamed search's plan
    # the HAG kept relabelled to the store's node order beside it: {"path", "how" (in memory / out of
    # core), "seconds"}, or {"path": None, "why"} where it was not kept
    kept_copy: dict | None = None
    # seconds spent compiling (or loading from numba's cache) the streamed search's kernels before
    # it, not in search_seconds: seconds on a fresh install, 0.3-0.4 s once numba loads them from its
    # cache (gnnprep.core.jit)
    compile_seconds: float | None = field(default=None, metadata={"omit_none": True})


def build(graph: str | Path | GraphStore, output, config: HagConfig = HagConfig(), *,
          progress: Progress = no_progress, command: str = "", search_scale: float = 1.0,
          warn: Callable[[str], None] | None = None) -> HagReport:
    """Search a HAG for the graph store ``graph`` (a path, or an open :class:`GraphStore`) under
    ``config`` and write it to ``output`` atomically (:func:`write_hag`; ``output`` must not be the
    store); return its :class:`HagReport`. ``progress`` gets stage ``"hag search"``, 0 then 1 of 1
    (the streamed search also reports its entries done). ``search_scale``: this machine's search time
    against the reference machine's, for the predicted seconds reported (``Profile.hag_search_scale``).
    ``warn``: told before a streamed search that runs in smaller blocks than the budget holds, to keep
    its time within minutes (:func:`block_note`), and part way through one whose blocks so far save
    almost nothing (:func:`gnnprep.hag.stream.low_savings_note`); None: not told."""
    from gnnprep.core.output import refuse_input_as_output
    from gnnprep.graph.store import GraphStore

    config.check()
    opened = isinstance(graph, GraphStore)
    input_path = graph.path if opened else graph
    refuse_input_as_output(output, [input_path])  # before the search: it may take minutes
    store = graph if opened else GraphStore(input_path)
    try:
        return _build(store, input_path, output, config, progress, command, search_scale, warn)
    finally:
        if not opened:
            store.close()


def _build(store: GraphStore, input_path, output, config: HagConfig, progress: Progress, command: str,
           search_scale: float, warn: Callable[[str], None] | None = None) -> HagReport:
    from gnnprep.core.device import default_budget
    from gnnprep.core.memory import PeakMeter
    from gnnprep.core.output import check_output_path
    from gnnprep.hag.search import exact_search, rounds_search, sequential_search

    check_output_path(Path(output).absolute())
    indptr, fingerprint = store.indptr(), store.fingerprint
    cap = config.capacity_for(len(indptr) - 1, int(indptr[-1]))
    budget = default_budget("cpu") if config.memory_budget is None else int(config.memory_budget)
    method, window, max_depth, min_share = config.method, config.window, config.max_depth, config.min_share
    if config.aggregate == "sequential":
        method = "prefix"
    jit = None
    if method == "stream":   # its kernels compiled before the search's clock starts, said if slow
        with compiling(progress, "the HAG search's kernels") as jit:
            warm_up(store.index_dtype)
    progress("hag search", 0, 1)
    meter = PeakMeter().start()
    t0 = time.perf_counter()
    timing: dict = {}

    def provenance() -> dict:
        seconds = timing.setdefault("search", time.perf_counter() - t0)
        return {"command": command or "gnnprep hag",
                "parameters": {"method": method, "capacity": cap, "window": window, "max_depth": max_depth,
                               "min_share": min_share, "memory_budget": budget, "block_entries": config.block_entries},
                "inputs": [{"path": str(input_path), "graph_fingerprint": fingerprint}],
                "timings": {"search_seconds": round(seconds, 4)}, "peak_bytes": meter.above()}

    if method == "stream":
        from gnnprep.hag.stream import build_streamed

        s, plan, resumed, pilot = build_streamed(store, output, input_path, cap, budget, window, max_depth, min_share,
                                          config.aggregate, provenance, progress, search_scale, config.block_entries,
                                          on_plan=_note_to(warn) if config.block_entries is None else None, warn=warn)
        stream = {"blocks": plan.blocks, "block_entries": plan.block_entries, "window": plan.window,
                  "sample_stride": plan.stride, "workers": plan.workers, "predicted_seconds": plan.seconds,
                  "predicted_peak_bytes": plan.peak_bytes, "resumed": resumed} | ({} if pilot is None else {"pilot": pilot})
    else:
        indices = store.indices()
        if method == "prefix":
            h = sequential_search(indptr, indices, capacity=cap)
        elif method == "exact":
            h = exact_search(indptr, indices, capacity=cap, memory_budget=budget)
        else:
            h = rounds_search(indptr, indices, capacity=cap, window=window, max_depth=max_depth, memory_budget=budget,
                              min_share=min_share)
        del indices
        s = write_hag(h, output, provenance(), config.aggregate, cap, fingerprint, indptr, inputs=[input_path])
        stream = None
    seconds = timing.get("search", time.perf_counter() - t0)
    peak = meter.above()
    kept = _keep_in_order(store, output, s, budget, progress, search_scale, seconds)
    progress("hag search", 1, 1)
    return HagReport(**s, output=str(output), method=method, search_seconds=round(seconds, 3), peak_bytes=peak,
                     aggregation_ratio=round(s["aggregations_graph"] / max(1, s["aggregations_hag"]), 4),
                     transfer_ratio=round(s["transfers_graph"] / max(1, s["transfers_hag"]), 4), stream=stream,
                     kept_copy=kept, compile_seconds=None if jit is None else round(jit["seconds"], 3))


def warm_up(index_dtype) -> None:
    """Run what ``gnnprep hag`` runs on a small graph of ``index_dtype`` ids — the streamed search,
    the relabelling to a node order and the cover checks, in the dtypes a HAG file and a graph
    store hold — so that numba compiles those kernels (or loads them from its cache: 0.3-0.4 s) here,
    not inside the timed search. 2,048 nodes in cliques of 32: more candidate pairs than the search
    keeps, so its table path runs too."""
    from gnnprep.hag.cover_check import CoverCheck
    from gnnprep.hag.order import in_order
    from gnnprep.hag.stream import search_arrays

    n, k = 2048, 32
    v = np.arange(n, dtype=np.int64)[:, None]
    others = v - v % k + (v % k + np.arange(1, k)) % k   # each node's k - 1 clique mates
    indptr = np.arange(n + 1, dtype=np.int64) * (k - 1)
    indices = np.sort(others, axis=1).reshape(-1).astype(index_dtype)
    h = search_arrays(indptr, indices)
    order = np.random.default_rng(0).permutation(n)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    relabelled = in_order(h, order, inv)
    for ids in (np.int32, np.int64):   # a HAG as read back from a file, and as relabelled in memory
        for g in (h, relabelled):
            check = CoverCheck(Hag(n, g.inputs.astype(ids), g.level_ptr, g.indptr, g.indices.astype(ids)))
            check.all_rows()
            check.mismatch(0, indptr, indices)


def _copy_pays(relabel_s: float, search_s: float) -> bool:
    """Whether the HAG is kept relabelled out of core after a search of ``search_s`` seconds when that is
    predicted to take ``relabel_s``: not when it would take longer than the search itself. With a small
    budget the relabelling's room is small and its passes many (at papers100M's size at 6 GiB,
    16 MiB of room: ~28,000 s predicted after a 750 s search); a later ``precompute --hag`` relabels
    the HAG at its own budget instead."""
    return relabel_s <= search_s


def _keep_in_order(store: GraphStore, output, summary: dict, budget: int, progress=None, search_scale: float = 1.0,
                   search_s: float = float("inf")) -> dict:
    """The HAG just written, relabelled to the node order a CPU precompute over ``store`` uses by
    default and kept beside it (:func:`load_in_order`), so that no run relabels it: where the
    store is unweighted (a HAG is for sums over unweighted in-lists); in memory where that fits
    ``budget`` (:func:`gnnprep.hag.order.in_order_bytes`), else out of core
    (:func:`gnnprep.hag.order.write_in_order`: papers100M's shape at 1/10 under 2 GiB). Never a
    reason for the build to fail, and not kept out of core where that is predicted to take longer
    than the search took (:func:`_copy_pays`), nor where the HAG saves under 1% of the transfers
    (:data:`gnnprep.hag.stream.LOW_SAVINGS_RATIO`: too little for a hop through it to be faster; the
    papers100M shape at 1/4 under 2 GiB, ratio 1.0028, relabelled it out of core in 162 s after a
    273 s search; a later ``precompute --hag`` relabels it if asked). Returns what the report says of
    it (:attr:`HagReport.kept_copy`)."""
    from gnnprep.hag import ordered_copy
    from gnnprep.hag.order import keeps_in_memory, relabel_room, relabel_seconds, streamed_bytes
    from gnnprep.hag.stream import saved_share, saves_little

    n, num_agg = store.num_nodes, int(summary["num_agg"])
    transfers, entries = int(summary["transfers_hag"]), int(summary["transfers_graph"])
    room = relabel_room(budget, n, num_agg)
    in_memory = keeps_in_memory(n, transfers, num_agg, budget)
    if store.weighted:
        return {"path": None, "why": "a weighted store: a HAG sums unweighted in-lists"}
    if saves_little(entries, transfers):
        return {"path": None, "saves_little": True,
                "why": f"the HAG saves {100 * saved_share(entries, transfers):.2f}% of the transfers, "
                       "too little for a hop through it to be faster"}
    if not in_memory and 1.25 * (streamed_bytes(n, num_agg, room) + (64 << 20)) > budget:
        return {"path": None, "why": "the budget does not hold even the relabelling out of core"}
    predicted = search_scale * relabel_seconds(n, transfers, num_agg, budget)
    if not _copy_pays(predicted, search_s):
        return {"path": None, "why": f"relabelling it at this budget is predicted to take {predicted:.0f} s, "
                                     f"longer than the search ({search_s:.0f} s)"}
    t0 = time.perf_counter()
    try:
        choice = ordered_copy.computation_order(store, "auto", warn=lambda message: None)
        path = ordered_copy.copy_path(output, ordered_copy.copy_kind(choice))
        if in_memory:
            load_in_order(output, store, choice, warn=lambda message: None)
        else:
            ordered_copy.save_streamed(output, ordered_copy.copy_kind(choice), store.fingerprint, choice[0], num_agg,
                                       _inverse(choice, n), room, progress)
    except (GnnprepError, OSError) as e:
        return {"path": None, "why": str(e).splitlines()[0] if str(e) else type(e).__name__}
    if not os.path.isfile(path):   # (False for a name too long to exist, too)
        return {"path": None, "why": f"{path} could not be written"}
    return {"path": str(path), "how": "in memory" if in_memory else "out of core",
            "seconds": round(time.perf_counter() - t0, 3)}


def dry_run(graph_path, config: HagConfig = HagConfig(), search_scale: float = 1.0) -> dict:
    """What :func:`build` would do for ``config`` on the store at ``graph_path``, from its sizes
    alone (nothing searched or written): :func:`predict` for its row pointer."""
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag.stream import search_sizes

    config.check()   # (before the store is opened)
    with GraphStore(graph_path) as g:
        sizes = search_sizes(g.indptr(), config.window)
        weighted = g.weighted
    return predict(sizes, weighted, config, search_scale)


def predict(sizes: tuple[int, int, int, int, int], weighted: bool, config: HagConfig = HagConfig(),
            search_scale: float = 1.0) -> dict:
    """:func:`dry_run` for a graph of :func:`gnnprep.hag.stream.search_sizes`' ``sizes`` (nodes, stored
    entries, longest in-list, window, window pairs): the streamed search's blocks, window, blocks
    searched at once (``workers``, up to numba's threads), peak bytes and predicted seconds
    (:func:`gnnprep.hag.stream.search_plan`, with ``search_scale``), and those of
    keeping the HAG relabelled to the node order after it (:func:`gnnprep.hag.order.relabel_seconds`,
    for a HAG of the most entries it can have: 0, and ``keeps_relabelled`` false, where that would take
    longer than the search, :func:`_copy_pays`); ``predicted_seconds`` is their sum. ``budget_blocks``:
    the search's prediction in the largest blocks the budget holds (slower per entry, finding more
    savings; the plan's own where its blocks are those). ``pilot``: whether the search measures a first
    block of the reference size and cuts the rest by its time, or searches its first block alone and
    halves the rest's blocks where that saves little (:func:`gnnprep.hag.stream.pilots`); ``halved``:
    then, the rest's blocks and the search's predicted seconds (None where no halving applies)."""
    import numba

    from gnnprep.core.device import default_budget
    from gnnprep.hag.order import relabel_seconds
    from gnnprep.hag.stream import SEARCH_SECONDS_FIXED, halved_plan, pilots, search_plan

    config.check()
    budget = default_budget("cpu") if config.memory_budget is None else int(config.memory_budget)
    n, m = sizes[0], sizes[1]
    cap = config.capacity_for(n, m)
    plan, widest = search_plan(sizes, cap, budget, search_scale, config.block_entries, numba.get_num_threads())
    # the HAG then kept relabelled to the node order (_keep_in_order), at most m + 2 cap entries
    relabel = 0.0 if weighted else round(search_scale * relabel_seconds(n, m + 2 * cap, cap, budget), 3)
    keeps = not weighted and _copy_pays(relabel, plan.seconds)
    relabel = relabel if keeps else 0.0
    pilot = pilots(plan, config.block_entries)
    halved = halved_plan(sizes, cap, budget, search_scale, plan, numba.get_num_threads()) if pilot else None
    if halved is not None:   # the first block's share at the plan's pace, the rest at the halved one's
        first = min(m, plan.block_entries) / max(1, m)
        variable = (plan.seconds - SEARCH_SECONDS_FIXED) * first + (halved.seconds - SEARCH_SECONDS_FIXED) * (1 - first)
        halved = {"block_entries": halved.block_entries, "workers": halved.workers,
                  "predicted_search_seconds": round(SEARCH_SECONDS_FIXED + variable, 3)}
    return {"dry_run": True, "num_nodes": n, "entries": m, "method": config.method, "capacity": cap,
            "memory_budget": budget, "blocks": plan.blocks, "block_entries": plan.block_entries,
            "window": plan.window, "sample_stride": plan.stride, "workers": plan.workers,
            "predicted_peak_bytes": plan.peak_bytes,
            "predicted_search_seconds": plan.seconds, "predicted_relabel_seconds": relabel, "keeps_relabelled": keeps,
            "predicted_seconds": round(plan.seconds + relabel, 3),
            "budget_blocks": {"block_entries": widest.block_entries, "predicted_search_seconds": widest.seconds},
            "pilot": pilot, "halved": halved}


def block_note(plan: StreamPlan, widest: StreamPlan, little: bool = False) -> str | None:
    """What to tell a user whose search runs in smaller blocks than the budget holds
    (:func:`gnnprep.hag.stream.time_bounded_block`, or ``little``: the rest halved after a first block
    that saved under 1%, :func:`gnnprep.hag.stream.after_pilot`): both predicted times and how to
    have the larger blocks' savings; None where the blocks are the budget's."""
    if plan.block_entries >= widest.block_entries:
        return None

    def took(s: float) -> str:
        return f"~{s:.0f} s" if s < 600 else f"~{s / 60:.0f} min"

    why = (f"the first block saved under 1% of its transfers, so the rest goes {plan.workers} blocks at once: "
           if little else "")
    return (f"{why}searching in {plan.blocks} blocks of up to {plan.block_entries:,} entries ({took(plan.seconds)} "
            f"predicted); the budget's blocks of {widest.block_entries:,} would find more savings in "
            f"{took(widest.seconds)} (--block-entries {widest.block_entries})")


def _note_to(warn: Callable[[str], None] | None):
    """An ``on_plan`` for :func:`gnnprep.hag.stream.build_streamed` that passes :func:`block_note`'s
    message to ``warn``; None when there is no one to tell."""
    if warn is None:
        return None

    def on_plan(plan: StreamPlan, widest: StreamPlan, little: bool = False) -> None:
        message = block_note(plan, widest, little)
        if message is not None:
            warn(message)
    return on_plan


def load_for(path, store: GraphStore) -> Hag:
    """The HAG at ``path`` for aggregating over ``store``: refused when it was built for another
    graph, when the store is weighted (a HAG sums unweighted neighbour rows), or when it is not
    equivalent to the store's graph (:func:`gnnprep.hag.cover_check.check_covers`: the fingerprint attribute alone can be
    forged or stale, and an edit that keeps every id in range would give silently wrong hops)."""
    from gnnprep.hag.cover_check import check_covers

    h, attrs = read_hag(path)
    store.check_built_for(path, "HAG", attrs.get("graph_fingerprint"), h.num_nodes)
    if store.weighted:
        raise GnnprepError(f"{path}: --hag needs an unweighted graph store")
    check_covers(h, store, path)
    return h


def plan_facts(path, store: GraphStore, choice=None) -> tuple[int, int, int, bool, str]:
    """What a plan through the HAG at ``path`` needs, from its root attributes alone (``--dry-run``
    reads none of its arrays: at papers100M's size they are gigabytes): (aggregation nodes, transfers,
    levels, whether a copy relabelled to ``choice``'s order is kept beside it, what the run would say
    of the order). Refused as :func:`load_for` refuses a HAG of another graph or a weighted store; the
    arrays and the covers are checked by the run that reads them."""
    from gnnprep.core.artifact import open_artifact, plain_attrs
    from gnnprep.hag import ordered_copy
    from gnnprep.hag.file import FORMAT

    with open_artifact(path, expect=FORMAT) as f:
        attrs = plain_attrs(f.attrs)
    facts = {}
    for name in ("num_nodes", "num_agg", "transfers_hag", "levels"):
        v = attrs.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GnnprepError(f"{path}: root attribute {name!r} is {v!r}; expected a count (the file is corrupt)")
        facts[name] = v
    store.check_built_for(path, "HAG", attrs.get("graph_fingerprint"), facts["num_nodes"])
    if store.weighted:
        raise GnnprepError(f"{path}: --hag needs an unweighted graph store")
    kept, why = False, ""
    if choice is not None:
        kept = ordered_copy.is_kept(path, ordered_copy.copy_kind(choice), store, choice[0])
        why = choice[3] + (" (the HAG as relabelled by an earlier run, kept beside it: read and checked by the run)"
                           if kept else " (the HAG relabelled to it by the run)" if choice[0] is not None else "")
    return facts["num_agg"], facts["transfers_hag"], facts["levels"], kept, why


def load_in_order(path, store: GraphStore, choice, warn=None, streamed_room: int | None = None,
                  stream: bool = False) -> tuple[Hag, bool, str]:
    """The HAG at ``path`` (:func:`load_for`'s checks) in a CPU run's node order: ``choice`` =
    (order, inv, kind, why) from :func:`gnnprep.hag.ordered_copy.computation_order` (order None:
    the stored order). Relabelled by :func:`gnnprep.hag.order.in_order` (which also puts each
    in-list's aggregation references last: a predictable branch in the row kernel), or read as an
    earlier run relabelled and kept it beside the HAG (:mod:`gnnprep.hag.ordered_copy`: made from
    this very file, which then passed :func:`load_for`, for this graph and order, and checked
    against the graph through the order); a run that relabels keeps it there. With
    ``streamed_room`` (bytes) a HAG that is not kept is relabelled out of core into the kept copy
    (:func:`gnnprep.hag.ordered_copy.save_streamed`), which is then read: the HAG is never held as
    read (int64) beside its relabelled copy, for a budget where both do not fit. With ``stream`` (a
    plan that streams the in-lists; ``streamed_room`` given) the kept copy is opened for reading a
    block of rows at a time instead (:class:`gnnprep.hag.file.HagRows`, checked against
    ``store`` as it is opened), relabelled out of core first where there is none. Returns (the HAG,
    whether it was the kept one, what the run reports)."""
    from gnnprep.hag import ordered_copy
    from gnnprep.hag.order import in_order

    order, inv, _, why = choice
    key = ordered_copy.copy_kind(choice)
    t0 = time.perf_counter()
    kept = ordered_copy.load(path, key, store, order, _inverse(choice, store.num_nodes) if stream else inv, warn,
                             stream=stream)
    streamed = " its in-lists streamed," if stream else ""
    if kept is not None:
        return kept, True, why + (f" (the HAG as relabelled by an earlier run, kept beside it:{streamed} read and "
                                  f"checked in {time.perf_counter() - t0:.2f} s)")
    if streamed_room is not None:
        seconds, passes, num_agg = _relabel_streamed(path, store, choice, streamed_room)
        h = _checked_copy(path, store, choice, num_agg, stream)
        return h, False, why + (f" (the HAG relabelled to it out of core in {seconds:.2f} s, {passes} passes over "
                                f"its in-lists, and kept beside it{' and streamed' if stream else ''})")
    h = load_for(path, store)
    t0 = time.perf_counter()
    identity = np.arange(store.num_nodes, dtype=np.int64) if order is None else None
    h = in_order(h, identity if order is None else order, identity if order is None else inv)
    seconds = time.perf_counter() - t0
    ordered_copy.save(path, key, h, store.fingerprint, order)
    return h, False, why + f" (the HAG relabelled to it in {seconds:.2f} s)" if order is not None else why


def _relabel_streamed(path, store: GraphStore, choice, room: int) -> tuple[float, int, int]:
    """The HAG at ``path`` relabelled out of core to ``choice``'s order into the kept copy
    (:func:`load_for`'s refusals of another graph or a weighted store first). Returns (seconds,
    passes over its in-lists, its aggregation nodes)."""
    from gnnprep.hag import ordered_copy

    num_agg = plan_facts(path, store)[0]
    key = ordered_copy.copy_kind(choice)
    t0 = time.perf_counter()
    try:
        passes = ordered_copy.save_streamed(path, key, store.fingerprint, choice[0], num_agg,
                                            _inverse(choice, store.num_nodes), room)
    except OSError as e:
        raise GnnprepError(f"{path}: its copy relabelled to the run's node order (to stream it, or for a budget too "
                           f"small to relabel it in memory) cannot be written beside it ({ordered_copy.copy_path(path, key)}: "
                           f"{e.strerror or e}); run `gnnprep hag` into a writable folder, or raise --memory-budget") \
            from None
    return time.perf_counter() - t0, passes, num_agg


def _checked_copy(path, store: GraphStore, choice, num_agg: int, stream: bool):
    """The copy :func:`_relabel_streamed` just wrote, read whole or opened for blocks
    (:func:`gnnprep.hag.ordered_copy.read_checked`): a cover that is not N(v) names the HAG at
    ``path`` (which the copy was made from), and the copy is removed."""
    from gnnprep.hag import ordered_copy

    copy = ordered_copy.copy_path(path, ordered_copy.copy_kind(choice))
    try:
        return ordered_copy.read_checked(copy, store, num_agg, _inverse(choice, store.num_nodes), stream, name=path)
    except BaseException:
        copy.unlink(missing_ok=True)
        raise


def _inverse(choice, n: int) -> np.ndarray:
    """The inverse of ``choice``'s order; the identity for the stored order."""
    return choice[1] if choice[0] is not None else np.arange(n, dtype=np.int64)
