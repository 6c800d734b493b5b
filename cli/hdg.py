"""``gnnprep hdg DATASET --select SPEC -o hdg.h5``."""

from __future__ import annotations

import os
import sys
import time

import click

from .common import Progress, emit, json_option, parsed_by, quiet_option, size


def parse_select(spec: str):
    """``--select SPEC`` as a selector config (:func:`gnnprep.hdgselect.parse_select`, imported when
    used): a bad SPEC is a usage error, before any ingest."""
    from gnnprep.hdgselect import parse_select as parse

    return parse(spec)


@click.command()
@click.argument("dataset")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="HDG artifact to write.")
@click.option("--select", "sel", required=True, metavar="SPEC", callback=parsed_by(parse_select),
              help="random-walk:walks=W,length=L,topk=K[,restart=P] | hop-shells:K[,cap=C] | "
                   "anchors:sets=S,size=Z[,hops=Q] | metapath:...")
@click.option("--seed", type=click.IntRange(min=0, max=2**64 - 1), default=0, show_default=True,
              help="Seed of the walks, samples and anchor sets (0 .. 2^64-1).")
@click.option("--cache-dir", default=None, help="Where a dataset spec is ingested to (default: beside the source).")
@json_option
@quiet_option
def hdg(dataset, output, sel, seed, cache_dir, as_json, quiet):
    """Build a hierarchical dependency graph (HDG, FlexGraph's NeighborSelection) for DATASET."""
    from gnnprep.atomic import refuse_input_as_output
    from gnnprep.hdg import read_graph, write_hdg
    from gnnprep.hdgselect import select, select_spec
    from gnnprep.ingest import IngestConfig, ensure_graph_store
    from gnnprep.sources import SourceOptions

    refuse_input_as_output(output, [dataset] if os.path.exists(dataset) else [])  # before any long work
    progress = Progress(quiet)
    try:
        store_path = ensure_graph_store(dataset, IngestConfig(source=SourceOptions()), cache_dir, progress)
        refuse_input_as_output(output, [store_path])
        g = read_graph(store_path, typed=sel.name == "metapath")
        t0 = time.perf_counter()
        h = select(g.indptr, g.indices, sel, seed=seed, progress=progress, node_type=g.node_type,
                   type_names=g.type_names)
        seconds = time.perf_counter() - t0
    finally:
        progress.close()
    spec = select_spec(sel)
    prov = {"command": " ".join(["gnnprep"] + sys.argv[1:]),
            "parameters": {"select": spec, "seed": seed},
            "inputs": [{"path": str(store_path), "graph_fingerprint": g.fingerprint}],
            "timings": {"select_seconds": round(seconds, 4)}}
    s = write_hdg(h, output, prov, sel.name, spec, seed, g.fingerprint, store_path.stat().st_size, g.adj_bytes,
                  inputs=[store_path])
    s.update(output=str(output), select_seconds=round(seconds, 3),
             size_vs_graph_store=round(s["hdg_bytes"] / max(1, s["graph_store_bytes"]), 4))
    emit(as_json, s, [
        f"{output}: HDG {s['spec']} (levels {s['levels']}, channels {', '.join(s['channels'])}; "
        f"{s['select_seconds']:.2f} s)",
        f"arrays {size(s['hdg_bytes'])} = {s['size_vs_graph_store']:.3f}x the graph store ({size(s['graph_store_bytes'])})",
    ])
