"""``gnnprep hag DATASET -o hag.h5``."""

from __future__ import annotations

import sys
import time

import click

from gnnprep.errors import GnnprepError

from .common import Progress, budget_option, emit, json_option, parse_budget, quiet_option, size


def parse_capacity(text: str, n: int) -> int:
    if text == "all":
        return 10**15
    try:
        value = float(text)
    except ValueError:
        raise GnnprepError(f"--capacity {text!r}: expected a count, a fraction of |V| in (0, 1], or all") from None
    if 0 < value <= 1 and "." in text:
        return int(value * n)
    if value >= 0 and value == int(value):
        return int(value)
    raise GnnprepError(f"--capacity {text!r}: expected a count, a fraction of |V| in (0, 1], or all")


@click.command()
@click.argument("dataset")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="HAG artifact to write.")
@click.option("--capacity", default="0.25", show_default=True, help="Aggregation nodes allowed: N, a fraction of |V|, or all.")
@click.option("--method", type=click.Choice(["rounds", "exact"]), default="rounds", show_default=True)
@click.option("--aggregate", type=click.Choice(["set", "sequential"]), default="set", show_default=True,
              help="set (sum, mean, max: any order) or sequential (prefix sharing in the stored neighbour order).")
@click.option("--window", type=click.IntRange(min=1), default=None, help="rounds: candidate window (default 16, fitted to the budget).")
@click.option("--max-depth", type=click.IntRange(min=1), default=16, show_default=True, help="rounds: deepest aggregation level.")
@click.option("--min-share", type=click.IntRange(min=2), default=2, show_default=True,
              help="rounds: destinations a pair must be shared by (2 as in the paper; 3-4 make fewer aggregation "
                   "nodes that each save more memory traffic, which is what precompute --hag feels).")
@budget_option("Memory for the search (default: half the free RAM).")
@click.option("--cache-dir", default=None, help="Where a dataset spec is ingested to (default: beside the source).")
@json_option
@quiet_option
def hag(dataset, output, capacity, method, aggregate, window, max_depth, min_share, memory_budget, cache_dir, as_json,
        quiet):
    """Build a redundancy-free aggregation graph (HAG) for DATASET."""
    from gnnprep.hag import exact_search, rounds_search, sequential_search, write_hag
    from gnnprep.ingest import IngestConfig, ensure_graph_store
    from gnnprep.sizes import default_host_budget
    from gnnprep.sources import SourceOptions
    from gnnprep.store import GraphStore

    from gnnprep.propagate import _peak_rss, _reset_peak, _rss

    progress = Progress(quiet)
    try:
        store_path = ensure_graph_store(dataset, IngestConfig(source=SourceOptions()), cache_dir, progress)
    finally:
        progress.close()
    budget = parse_budget(memory_budget) or default_host_budget()
    with GraphStore(store_path) as g:
        indptr, indices, fp = g.indptr(), g.indices(), g.fingerprint
    n = len(indptr) - 1
    cap = min(parse_capacity(capacity, n), int(indptr[-1]))  # m bounds any useful capacity
    peak_ok = _reset_peak()
    base = _rss()
    t0 = time.perf_counter()
    if aggregate == "sequential":
        method = "prefix"
        h = sequential_search(indptr, indices, capacity=cap)
    elif method == "exact":
        h = exact_search(indptr, indices, capacity=cap, memory_budget=budget)
    else:
        h = rounds_search(indptr, indices, capacity=cap, window=window, max_depth=max_depth, memory_budget=budget,
                          min_share=min_share)
    seconds = time.perf_counter() - t0
    peak = (_peak_rss() - base) if peak_ok and _peak_rss() else None
    prov = {"command": " ".join(["gnnprep"] + sys.argv[1:]),
            "parameters": {"method": method, "capacity": cap, "window": window, "max_depth": max_depth,
                           "min_share": min_share,
                           "memory_budget": budget},
            "inputs": [{"path": str(store_path), "graph_fingerprint": fp}],
            "timings": {"search_seconds": round(seconds, 4)}, "peak_bytes": peak}
    s = write_hag(h, output, prov, aggregate, cap, fp, indptr)
    s.update(output=str(output), method=method, search_seconds=round(seconds, 3), peak_bytes=peak,
             aggregation_ratio=round(s["aggregations_graph"] / max(1, s["aggregations_hag"]), 4),
             transfer_ratio=round(s["transfers_graph"] / max(1, s["transfers_hag"]), 4))
    emit(as_json, s, [
        f"{output}: {s['num_agg']:,} aggregation nodes in {s['levels']} levels ({method}, {s['search_seconds']:.2f} s, "
        f"peak {size(peak) if peak is not None else 'n/a'})",
        f"aggregations {s['aggregations_graph']:,} -> {s['aggregations_hag']:,} ({s['aggregation_ratio']:.2f}x fewer); "
        f"transfers {s['transfers_graph']:,} -> {s['transfers_hag']:,} ({s['transfer_ratio']:.2f}x)",
    ])
