"""HAG search at scale: ``rounds`` on a generated graph with heavy neighbourhood overlap.

The graph is a union of overlapping groups (like collaboration ego-networks): each group is a
clique over members drawn with power-law activity, so many destinations share many neighbours.
Prints the graph size, the pair count the exact method would need (Σ_v d_v(d_v−1)/2), and for
``rounds`` the search time, peak RSS, aggregation and transfer ratios. Each search runs in its own
process (peak RSS from wait4 through a launcher, so the generator's memory is not counted).

    python scripts/bench_hag.py [--nodes 1000000] [--groups 600000] [--group-size 6] [--budget 3GiB]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import run_measured  # noqa: E402

def generate(path: Path, n: int, groups: int, size: int, seed: int = 0) -> None:
    from gnnprep.ingest import IngestConfig, ingest
    from gnnprep.sources import SourceOptions

    rng = np.random.default_rng(seed)
    w = rng.pareto(1.2, n) + 1
    w /= w.sum()
    members = rng.choice(n, (groups, size), p=w)
    src = np.repeat(members, size, axis=1).reshape(-1)
    dst = np.tile(members, (1, size)).reshape(-1)
    np.save(path.with_suffix(".npy"), np.stack([src, dst]))
    ingest(str(path.with_suffix(".npy")), path, IngestConfig(source=SourceOptions(num_nodes=n)))
    path.with_suffix(".npy").unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=800_000)
    ap.add_argument("--group-size", type=int, default=6)
    ap.add_argument("--budget", default="3GiB")
    ap.add_argument("--capacity", default="0.25")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-hag")
    args = ap.parse_args()
    from gnnprep.hag import exact_pair_count
    from gnnprep.store import GraphStore

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    graph = work / f"groups_{args.nodes}_{args.groups}_{args.group_size}.h5"
    if not graph.exists():
        t = time.perf_counter()
        generate(graph, args.nodes, args.groups, args.group_size)
        print(f"generated in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    with GraphStore(graph) as g:
        ip = g.indptr()
    print(f"graph: {len(ip) - 1:,} nodes, {int(ip[-1]):,} stored edges; exact would keep "
          f"{exact_pair_count(ip):,} pair occurrences")
    out = work / "hag.h5"
    r = run_measured([sys.executable, "-m", "gnnprep", "hag", str(graph), "-o", str(out),
                      "--memory-budget", args.budget, "--capacity", args.capacity, "--json", "--quiet"])
    wall, peak = r["seconds"], r["peak_rss"]
    d = json.loads(r["stdout"])
    print(f"rounds: {wall:.1f} s wall ({d['search_seconds']:.1f} s search), peak RSS {peak / 2**30:.2f} GiB; "
          f"{d['num_agg']:,} aggregation nodes in {d['levels']} levels; aggregations {d['aggregations_graph']:,} -> "
          f"{d['aggregations_hag']:,} ({d['aggregation_ratio']:.2f}x), transfers {d['transfers_graph']:,} -> "
          f"{d['transfers_hag']:,} ({d['transfer_ratio']:.2f}x)")
    print(json.dumps({**d, "wall_seconds": wall, "peak_rss": peak}))


if __name__ == "__main__":
    main()
