"""``gnnprep hag`` on the papers100M shape at a larger fraction than ``bench_scale.py``'s disk allows:
the graph alone (no features), as the command runs it, against its ``--dry-run`` prediction.

    python benchmarks/bench_hag_scale.py --fraction 0.25 [--memory-budget 2GiB] [--workdir DIR] [--keep]

The edges are those of ``bench_scale.py``'s community shape (``Shape``: communities of ~1,000 nodes,
80% of the edges inside, Pareto(2)-skewed ends, ids permuted) at fraction F of papers100M's
111,059,956 nodes and 1,615,685,872 edges, drawn in memory (int32 ids: 8 B an edge) and ingested with
``gnnprep.graph.from_arrays`` at ``--ingest-budget`` (default 4 GiB); the store then holds only the
graph (at F = 0.25: 27.8M nodes, ~0.8G stored entries, 3.2 GB), so fractions beyond 1/10 fit the
disk. Then, each in its own process (wall seconds and peak RSS): ``gnnprep hag graph.h5 --dry-run``
and ``gnnprep hag graph.h5 -o hag.h5`` at ``--memory-budget``. Prints the search's entries per second,
its peak RSS against 1.25 x budget, the prediction against the measured wall, and the real size's
time from this run's rate (a linear extrapolation: the search's blocks are of a fixed size, so its
time per entry does not grow with the graph).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_scale import EDGE_CHUNK, FULL_EDGES, FULL_NODES, Shape
from benchmarks.harness import gib, gnnprep_cmd, machine_line, parse_size, run_json


def edges(n: int, m: int, seed: int) -> np.ndarray:
    """[2, m] int32 edges of the community shape (published ids), drawn in chunks."""
    rng = np.random.default_rng(seed)
    shape = Shape(n, rng)
    out = np.empty((2, m), dtype=np.int32)
    for s in range(0, m, EDGE_CHUNK):
        src, dst = shape.edges(rng, min(EDGE_CHUNK, m - s))
        out[0, s:s + len(src)], out[1, s:s + len(dst)] = src, dst
        print(f"  edges {s + len(src):,} / {m:,}", end="\r", file=sys.stderr)
    print(file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fraction", type=float, required=True)
    ap.add_argument("--memory-budget", default="2GiB")
    ap.add_argument("--ingest-budget", default="4GiB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep graph.h5 and hag.h5")
    args = ap.parse_args()
    n, m = round(FULL_NODES * args.fraction), round(FULL_EDGES * args.fraction)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gnnprep-bench-hag-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    graph = work / f"graph-f{args.fraction}-s{args.seed}.h5"
    print(machine_line())
    if not graph.exists():
        from gnnprep.graph.ingest import from_arrays

        t0 = time.perf_counter()
        e = edges(n, m, args.seed)
        t1 = time.perf_counter()
        from_arrays(e, num_nodes=n, output=graph, memory_budget=parse_size(args.ingest_budget))
        del e
        print(f"graph: {n:,} nodes, {m:,} edges drawn in {t1 - t0:.0f} s, ingested in {time.perf_counter() - t1:.0f} s")
    dry = run_json(gnnprep_cmd("hag", graph, "-o", work / "hag.h5", "--memory-budget", args.memory_budget,
                               "--dry-run", "--json"))["report"]
    hag = work / "hag.h5"
    for p in work.glob("hag.*"):
        (shutil.rmtree if p.is_dir() else Path.unlink)(p)
    r = run_json(gnnprep_cmd("hag", graph, "-o", hag, "--memory-budget", args.memory_budget, "--json"))
    rep, budget = r["report"], parse_size(args.memory_budget)
    entries = int(dry["entries"])
    print(f"store: {int(dry['num_nodes']):,} nodes, {entries:,} stored entries; budget {args.memory_budget}")
    print(f"hag --dry-run: {dry['blocks']} blocks of {dry['block_entries']:,} entries, search "
          f"{dry['predicted_search_seconds']:.0f} s + relabel {dry['predicted_relabel_seconds']:.0f} s predicted, "
          f"peak {gib(dry['predicted_peak_bytes'])}")
    print(f"hag: {r['seconds']:.1f} s wall (search {rep.get('search_seconds')} s), peak {gib(r['peak_rss'])} "
          f"({'within' if r['peak_rss'] <= 1.25 * budget else 'OVER'} 1.25 x budget = {gib(1.25 * budget)}); "
          f"{entries / r['seconds'] / 1e6:.2f} M entries/s of wall; aggregation ratio {rep.get('aggregation_ratio')}")
    print(f"measured / predicted: {r['seconds'] / max(1e-9, dry['predicted_seconds']):.2f}")
    real = 3_083_403_700   # papers100M's stored entries (symmetrised, deduplicated, no self-loops)
    print(f"real size at this rate and budget: ~{real / (entries / r['seconds']) / 60:.0f} min")
    print(json.dumps({"fraction": args.fraction, "entries": entries, "dry_run": dry, "wall_s": r["seconds"],
                      "peak_rss": r["peak_rss"], "report": rep}))
    if not args.keep:
        graph.unlink(missing_ok=True)
        for p in work.glob("hag.*"):
            (shutil.rmtree if p.is_dir() else Path.unlink)(p)


if __name__ == "__main__":
    main()
