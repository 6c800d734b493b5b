"""``gnnprep hdg DATASET --select SPEC -o hdg.h5``."""

from __future__ import annotations

import os
import sys

import click

from .common import Progress, budget_option, emit, json_option, parsed_by, quiet_option, size, warn


def parse_select(spec: str):
    """``--select SPEC`` as a selector config (:func:`gnnprep.hdg.select.parse_select`, imported when
    used): a bad SPEC is a usage error, before any ingest."""
    from gnnprep.hdg.select import parse_select as parse

    return parse(spec)


@click.command()
@click.argument("dataset")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="HDG artifact to write.")
@click.option("--select", "sel", required=True, metavar="SPEC", callback=parsed_by(parse_select),
              help="random-walk:walks=W,length=L,topk=K[,restart=P] | hop-shells:K[,cap=C] | "
                   "anchors:sets=S,size=Z[,hops=Q] | metapath:...")
@click.option("--seed", type=click.IntRange(min=0, max=2**64 - 1), default=0, show_default=True,
              help="Seed of the walks, samples and anchor sets (0 .. 2^64-1).")
@budget_option("Memory for the whole run: the graph's CSR is held, the HDG is selected and written in node "
               "blocks that fit what is left (default: half the free RAM).")
@click.option("--cache-dir", default=None, help="Where a dataset spec is ingested to (default: beside the source).")
@click.option("--dry-run", is_flag=True, help="Print the node blocks, peak memory and predicted time from the "
                                             "store's sizes; select nothing.")
@json_option
@quiet_option
def hdg(dataset, output, sel, seed, memory_budget, cache_dir, dry_run, as_json, quiet):
    """Build a hierarchical dependency graph (HDG, FlexGraph's NeighborSelection) for DATASET."""
    from gnnprep.core.output import refuse_input_as_output
    from gnnprep.graph.ingest import IngestConfig, ensure_graph_store
    from gnnprep.graph.sources import SourceOptions
    from gnnprep.hdg.builder import build

    refuse_input_as_output(output, [dataset] if os.path.exists(dataset) else [])  # before any long work
    progress = Progress(quiet)
    try:
        store_path = ensure_graph_store(dataset, IngestConfig(source=SourceOptions()), cache_dir, progress)
        if dry_run:
            from gnnprep.hdg.builder import dry_run as plan

            d = plan(store_path, sel, memory_budget)
            progress.close()
            emit(as_json, d, [
                f"{store_path}: {d['num_nodes']:,} nodes, {d['entries']:,} stored entries; {d['spec']}",
                f"{d['blocks']} node block(s) of up to {d['block_nodes']:,} nodes; CSR {size(d['graph_bytes'])} held; "
                f"predicted peak {size(d['predicted_peak_bytes'])} (budget {size(d['memory_budget'])}), "
                f"{d['predicted_seconds']:.0f} s on the 2-core reference machine, HDG ~{size(d['predicted_hdg_bytes'])} "
                f"(~{size(d['predicted_disk_bytes'])} of disk at the end: its levels' files, then their copy)"])
            return
        s = build(store_path, output, sel, seed=seed, memory_budget=memory_budget, progress=progress,
                  command=" ".join(["gnnprep"] + sys.argv[1:]), warn=lambda message: warn(quiet, message))
    finally:
        progress.close()
    emit(as_json, s, [
        f"{output}: HDG {s['spec']} (levels {s['levels']}, channels {', '.join(s['channels'])}; "
        f"{s['select_seconds']:.2f} s, {s['blocks']} node block(s) in {s['calls']} call(s), peak {size(s['peak_rss_bytes'] or 0)} of a "
        f"{size(s['memory_budget'])} budget" + ("; resumed from an interrupted run's blocks" if s["resumed"] else "") + ")",
        f"arrays {size(s['hdg_bytes'])} = {s['size_vs_graph_store']:.3f}x the graph store ({size(s['graph_store_bytes'])})",
    ])
