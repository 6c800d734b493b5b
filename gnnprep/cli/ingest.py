"""``gnnprep ingest SOURCE -o graph.h5``."""

from __future__ import annotations

import sys

import click

from .common import Progress, emit, json_option, parsed_by, quiet_option, warn


def _budget(text: str) -> int:
    from gnnprep.graph.ingest import parse_budget

    return parse_budget(text)


@click.command()
@click.argument("source")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Graph store to write (.h5).")
@click.option("--directed", is_flag=True, help="Keep edge direction (default: symmetrise).")
@click.option("--memory-budget", "memory_budget", default=None, metavar="SIZE", callback=parsed_by(_budget),
              help="Host memory ingest may hold (default: half the free RAM; at least 4MiB). e.g. 512MiB, 8GiB, 2G.")
@click.option("--root", default=None, help="Folder holding ogbn_<name>/ data sets (default: $GNNPREP_DATA or ./data).")
@click.option("--download", is_flag=True, help="Download a missing ogbn-* data set with the ogb package.")
@click.option("--split", default=None, help="Split folder name under split/ when there are several (OGB folders).")
@click.option("--index-base", type=click.Choice(["0", "1"]), default="0", help="Edge-list ids start at 0 or 1.")
@click.option("--num-nodes", type=click.IntRange(min=1), default=None, help="Node count of an edge list.")
@click.option("--features", type=click.Path(dir_okay=False), default=None, help="Node features of an edge list or matrix (.npy [n, d]).")
@click.option("--labels", type=click.Path(dir_okay=False), default=None,
              help="Node labels of an edge list or matrix (.npy [n], class ids below 1,000,000; NaN or -1 = unknown).")
@click.option("--splits", type=click.Path(file_okay=False), default=None, help="Folder with train/valid/test id files (edge lists, matrices).")
@click.option("--tmp-dir", type=click.Path(file_okay=False), default=None, help="Where spill files go (default: next to the output).")
@click.option("--order", "--reorder", "order", type=click.Choice(["auto", "community", "degree", "degree-bucket", "none"]),
              default="auto", show_default=True,
              help="Node order kept in the store for every later precompute: community (label propagation, found "
                   "while the node data is copied), degree (hubs first) or degree-bucket (DBG), or auto: the "
                   "community order where it brings neighbours near, else hubs first where that packs the "
                   "gathers into a cache-sized prefix (graphs without communities), else none. The choice and "
                   "why are recorded in the store (gnnprep info).")
@json_option
@quiet_option
def ingest(source, output, directed, memory_budget, root, download, split, index_base, num_nodes, features,
           labels, splits, tmp_dir, order, as_json, quiet):
    """Turn SOURCE (sample, ogbn-<name>, an OGB or GraphSAINT folder, an edge list, a scipy .npz or Matrix
    Market .mtx[.gz] matrix, a graph store) into a graph store."""
    from gnnprep.graph.ingest import IngestConfig, unused_options
    from gnnprep.graph.ingest import ingest as run_ingest
    from gnnprep.graph.sources import SourceOptions

    opts = SourceOptions(root=root, download=download, split=split, index_base=int(index_base),
                         num_nodes=num_nodes, features=features, labels=labels, splits=splits)
    config = IngestConfig(directed=directed, memory_budget=memory_budget, tmp_dir=tmp_dir, order=order,
                          source=opts)
    for option, why in unused_options(source, config):
        # an option this kind of source would ignore is a usage error, not a silent no-op
        raise click.BadParameter(why, param_hint=f"'{option}'")
    progress = Progress(quiet)
    try:
        report = run_ingest(source, output, config, progress, command=" ".join(["gnnprep"] + sys.argv[1:]))
    finally:
        progress.close()
    for w in report.warnings:
        warn(quiet, w)
    r = report
    emit(as_json, r.to_dict(), [
        f"{r.output}: {r.num_nodes:,} nodes, {r.num_edges:,} stored edges "
        f"({'symmetric' if r.symmetric else 'directed'}), {r.num_features} features, {r.num_classes} classes",
        f"read {r.edges_read:,} edges; dropped {r.self_loops_dropped:,} self-loops and "
        f"{r.duplicates_dropped:,} duplicates; {r.seconds:.1f} s"
        + (f" (resumed after the interrupted run's {_RESUMED[r.resumed]})" if r.resumed else ""),
    ] + _order_lines(r.order))


_RESUMED = {"buckets": "bucketed edges", "sort": "sorted buckets", "adjacency": "adjacency",
            "features": "adjacency and features"}


def _order_lines(o: dict | None) -> list[str]:
    """The node order line of the human report: which order precompute will use and why."""
    if not o:
        return []
    if o.get("kind") == "none":
        return [f"node order: none ({o.get('why', '')})"]
    line = f"node order: {o['kind']}"
    if "prefix_share_after" in o:
        line += (f", entries gathering X's first 65,536 rows {o['prefix_share_before']:.0%} -> "
                 f"{o['prefix_share_after']:.0%}")
    else:
        line += (f", entries within 4,096 ids of their row {o['near_share_before']:.0%} -> "
                 f"{o['near_share_after']:.0%}")
    if "cpu_seconds" in o:
        line += f" (found beside the rest in {o['cpu_seconds']:.1f} s of CPU; {o.get('waited_seconds', 0):.1f} s waited)"
    elif "seconds" in o:
        line += f" (found in {o['seconds']:.1f} s)"
    return [line] + ([f"  why: {o['why']}"] if o.get("why") else [])
