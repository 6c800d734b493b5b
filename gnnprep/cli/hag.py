"""``gnnprep hag DATASET -o hag.h5``."""

from __future__ import annotations

import math
import os
import sys

import click

from gnnprep.core.errors import OptionError

from .common import Progress, budget_option, emit, json_option, parsed_by, quiet_option, size, warn

MAX_WINDOW = 1024  # candidate keys per round grow with window x entries: far beyond 16 only costs time


def _count(text: str, option: str) -> int:
    from gnnprep.precompute.sizing import parse_count  # 15M, 1.5e7, 15000000

    return parse_count(text, option)


def parse_capacity(text: str) -> int | float | str:
    """``--capacity``: a count (int), a fraction of |V| (float, converted once |V| is known), or all
    (:attr:`gnnprep.hag.builder.HagConfig.capacity`)."""
    if text == "all":
        return "all"
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if 0 < value <= 1 and "." in text:
        return value
    if math.isfinite(value) and value >= 0 and value == int(value):
        return int(value)
    raise OptionError("--capacity", f"{text!r}: expected a count, a fraction of |V| in (0, 1], or all")


@click.command()
@click.argument("dataset")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="HAG artifact to write (and beside it the HAG relabelled to the store's node order, "
                   "OUTPUT.order-<kind>.h5, within the budget, so that precompute --hag does not relabel it).")
@click.option("--capacity", default="0.25", show_default=True, callback=parsed_by(parse_capacity),
              help="Aggregation nodes allowed: N, a fraction of |V|, or all.")
@click.option("--method", type=click.Choice(["stream", "rounds", "exact"]), default="stream", show_default=True,
              help="stream: lazy greedy over S in row blocks within the budget (resumable); exact: Jia et al.'s "
                   "Algorithm 3 (small graphs); rounds: the earlier in-memory approximation.")
@click.option("--aggregate", type=click.Choice(["set", "sequential"]), default="set", show_default=True,
              help="set (sum, mean, max: any order) or sequential (prefix sharing in the stored neighbour order).")
@click.option("--window", type=click.IntRange(min=1, max=MAX_WINDOW), default=None,
              help=f"stream, rounds: candidate window (default 16; at most {MAX_WINDOW}, and never more "
                   "than the largest in-degree).")
@click.option("--max-depth", type=click.IntRange(min=1), default=16, show_default=True, help="stream, rounds: deepest aggregation level.")
@click.option("--min-share", type=click.IntRange(min=2), default=2, show_default=True,
              help="stream, rounds: destinations a pair must be shared by (2 as in the paper; 3-4 make fewer aggregation "
                   "nodes that each save more memory traffic, which is what precompute --hag feels).")
@click.option("--block-entries", default=None, callback=parsed_by(lambda t: _count(t, "--block-entries")),
              help="stream: stored entries per block at most, e.g. 15M (default: as many as the budget holds, fewer "
                   "where that search is predicted over 2 min). Smaller blocks search faster per entry and find "
                   "fewer savings (pairs shared across blocks).")
@budget_option("Memory for the search (default: half the free RAM).")
@click.option("--cache-dir", default=None, help="Where a dataset spec is ingested to (default: beside the source).")
@click.option("--dry-run", is_flag=True, help="Print the streamed search's blocks, peak memory and predicted time "
                                             "from the store's sizes; search nothing.")
@json_option
@quiet_option
def hag(dataset, output, capacity, method, aggregate, window, max_depth, min_share, block_entries, memory_budget,
        cache_dir, dry_run, as_json, quiet):
    """Build a redundancy-free aggregation graph (HAG) for DATASET."""
    from gnnprep.core.output import refuse_input_as_output
    from gnnprep.graph.ingest import IngestConfig, ensure_graph_store
    from gnnprep.graph.sources import SourceOptions
    from gnnprep.hag.builder import HagConfig, build
    from gnnprep.precompute.profile import Profile, load_profile

    refuse_input_as_output(output, [dataset] if os.path.exists(dataset) else [])  # before any long work
    config = HagConfig(method=method, aggregate=aggregate, capacity=capacity, window=window, max_depth=max_depth,
                       min_share=min_share, memory_budget=memory_budget or None, block_entries=block_entries)
    progress = Progress(quiet)
    profile = load_profile("cpu", warn=lambda message: warn(quiet, message))
    try:
        store_path = ensure_graph_store(dataset, IngestConfig(source=SourceOptions()), cache_dir, progress)
        if dry_run:
            from gnnprep.hag.builder import dry_run as plan

            d = plan(store_path, config, profile.hag_search_scale)
            progress.close()
            machine = ("on the 2-core reference machine" if profile.measured == Profile().measured else
                       f"at this machine's calibrated speed ({profile.hag_search_scale:g}x the reference)")
            emit(as_json, d, [
                f"{store_path}: {d['num_nodes']:,} nodes, {d['entries']:,} stored entries, capacity {d['capacity']:,}",
                f"streamed search: {d['blocks']} block(s) of up to {d['block_entries']:,} entries, window "
                f"{d['window']}; predicted peak {size(d['predicted_peak_bytes'])} (budget "
                f"{size(d['memory_budget'])}), {d['predicted_seconds']:.0f} s {machine} (the search "
                f"{d['predicted_search_seconds']:.0f} s, " + (
                    f"the HAG kept relabelled to the node order {d['predicted_relabel_seconds']:.0f} s, "
                    f"where it saves 1% or more of the transfers)"
                    if d["keeps_relabelled"] else "the HAG not kept relabelled: precompute --hag relabels it)")]
                + ([f"in the budget's blocks of up to {d['budget_blocks']['block_entries']:,} entries (--block-entries "
                    f"{d['budget_blocks']['block_entries']}): the search {d['budget_blocks']['predicted_search_seconds']:.0f}"
                    " s, finding more savings (pairs shared across blocks are merged once)"]
                   if d["budget_blocks"]["block_entries"] > d["block_entries"] else [])
                + ([_pilot_line(d)] if d["pilot"] else []))
            return
        s = build(store_path, output, config, progress=progress, command=" ".join(["gnnprep"] + sys.argv[1:]),
                  search_scale=profile.hag_search_scale, warn=None if quiet else lambda text: warn(quiet, text))
    finally:
        progress.close()
    peak = s.peak_bytes
    emit(as_json, s.to_dict(), [
        f"{output}: {s.num_agg:,} aggregation nodes in {s.levels} levels ({s.method}, "
        f"{s.search_seconds:.2f} s, peak {size(peak) if peak is not None else 'n/a'})",
        f"aggregations {s.aggregations_graph:,} -> {s.aggregations_hag:,} ({s.aggregation_ratio:.2f}x fewer); "
        f"transfers {s.transfers_graph:,} -> {s.transfers_hag:,} ({s.transfer_ratio:.2f}x)",
    ] + _low_savings(s) + (["resumed the interrupted search's partial output (the blocks it had finished were kept)"]
         if (s.stream or {}).get("resumed") else []) + ([] if s.kept_copy is None else [
        f"relabelled to the store's node order for precompute: {s.kept_copy['path']} ({s.kept_copy['how']}, "
        f"{s.kept_copy['seconds']:.2f} s)" if s.kept_copy.get("path") else
        f"not relabelled to the store's node order ({s.kept_copy['why']}): precompute --hag relabels it"]) + (
        [f"first run: the search's kernels compiled in {s.compile_seconds:.1f} s before it (kept in numba's cache)"]
        if (s.compile_seconds or 0) >= 1.0 else []))   # (loading them from the cache: 0.3-0.4 s)


def _low_savings(s) -> list[str]:
    """A line where the HAG saves under 1% of the transfers (:func:`gnnprep.hag.stream.saves_little`):
    a hop through it gains at most half of that, so ``precompute --hag auto`` will not take it (papers100M's
    shape at 1/10: 0.18%, in a 1.3 GB file)."""
    from gnnprep.hag.stream import saved_share, saves_little

    if not saves_little(s.transfers_graph, s.transfers_hag):
        return []
    if (s.kept_copy or {}).get("saves_little"):
        return []   # (the line of the copy not kept says it already)
    return [f"this HAG saves {100 * saved_share(s.transfers_graph, s.transfers_hag):.2f}% of the transfers (a graph "
            "with little shared between its in-lists): a hop through it gains at most half of that, and precompute "
            "--hag auto runs without it where it does not pay"]


def _pilot_line(d: dict) -> str:
    """What ``--dry-run`` says of the pilot block (:func:`gnnprep.hag.stream.pilots`): where the plan's
    blocks are larger than the reference's, the rest cut by its measured time; where the rest may be
    halved, its blocks and time then."""
    from gnnprep.hag.stream import SEARCH_BLOCK_REF_ENTRIES

    timed = d["block_entries"] > SEARCH_BLOCK_REF_ENTRIES
    line = ("a first block of the reference size is searched before the rest, which is cut by its measured time "
            "(this machine, this graph)" if timed else "the first block is searched alone before the rest")
    h = d["halved"]
    if h is None:
        return line
    return (f"{line}: where it saves under 1% of its transfers, the rest goes in blocks of up to "
            f"{h['block_entries']:,} entries, {h['workers']} at once (the search then ~{h['predicted_search_seconds']:.0f} s)")
