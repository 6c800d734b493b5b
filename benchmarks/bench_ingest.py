"""Benchmark: out-of-core ``gnnprep ingest`` against a plain in-memory scipy CSR build.

Cases (inputs are generated once and cached in --workdir):
  (a) a text edge list (TSV) of --edges directed edges (default 100M) over --nodes nodes, skewed
      destinations (a few hubs), symmetrised on ingest;
  (b) a papers100M-layout folder: raw/data.npz written with np.savez_compressed (DEFLATE) holding
      edge_index [2, m] (default 50M), node_feat [n, 128] float32 (default n = 1M), plus
      raw/node-label.npz with NaN for unlabeled nodes and split/time/*.csv.gz.

Each tool runs in its own subprocess; wall time and that process's peak RSS (wait4) are reported,
with the ratios ours/peer. The peer reads the whole input into memory (pandas / np.load) and builds
the same symmetrised, deduplicated, loop-free CSR with scipy. Both results are hashed and compared.

    python benchmarks/bench_ingest.py --workdir /tmp/gnnprep-bench            # full size
    python benchmarks/bench_ingest.py --edges 2000000 --npz-edges 1000000 --npz-nodes 100000  # quick
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import GiB, run_measured


def gen_text(path: Path, m: int, n: int, seed: int = 0) -> None:
    import pandas as pd

    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".partial")
    with open(tmp, "w") as f:
        f.write("# synthetic directed edge list: src<TAB>dst\n")
        step = 5_000_000
        for s in range(0, m, step):
            k = min(step, m - s)
            src = rng.integers(0, n, k)
            dst = (rng.random(k) ** 2 * n).astype(np.int64)  # skewed: low ids are hubs
            pd.DataFrame({"s": src, "d": dst}).to_csv(f, sep="\t", header=False, index=False)
            print(f"  wrote {s + k:,} / {m:,} edges", file=sys.stderr, end="\r")
    os.replace(tmp, path)
    print(file=sys.stderr)


def gen_npz(folder: Path, m: int, n: int, d: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    src = rng.integers(0, n, m)
    dst = (rng.random(m) ** 2 * n).astype(np.int64)
    x = rng.standard_normal((n, d), dtype=np.float32)
    np.savez_compressed(raw / "data.npz.partial.npz", edge_index=np.stack([src, dst]), node_feat=x,
                        num_nodes_list=np.array([n]), num_edges_list=np.array([m]),
                        node_year=rng.integers(1990, 2020, (n, 1)))
    del src, dst, x
    y = rng.integers(0, 172, n).astype(np.float64)
    y[rng.random(n) < 0.9] = np.nan
    np.savez_compressed(raw / "node-label.npz", node_label=y.reshape(-1, 1))
    labeled = np.flatnonzero(~np.isnan(y))
    parts = np.split(rng.permutation(labeled), [int(0.8 * len(labeled)), int(0.9 * len(labeled))])
    split = folder / "split" / "time"
    split.mkdir(parents=True, exist_ok=True)
    for name, ids in zip(("train", "valid", "test"), parts):
        with gzip.open(split / f"{name}.csv.gz", "wt") as f:
            f.write("\n".join(map(str, np.sort(ids))) + "\n")
    (folder / "RELEASE_v1.txt").write_text("synthetic papers100M-layout data for bench_ingest.py\n")
    os.replace(raw / "data.npz.partial.npz", raw / "data.npz")


def report(case: str, m: int, ours: dict, peer: dict | None, budget: int) -> dict:
    def row(tool, r):
        return f"  {tool:<22} {r['seconds']:8.1f} s  {m / r['seconds'] / 1e6:8.2f} M edges/s  peak RSS {r['peak_rss'] / GiB:6.2f} GiB"

    print(f"({case})")
    print(row("gnnprep ingest", ours))
    result = {"case": case, "edges": m, "ours_seconds": ours["seconds"], "ours_peak_rss": ours["peak_rss"],
              "budget": budget, "rss_limit": budget + GiB // 2,
              "rss_limit_ok": ours["peak_rss"] <= budget + GiB // 2}
    if peer:
        print(row("scipy in-memory CSR", peer))
        print(f"  ratio ours/peer: time {ours['seconds'] / peer['seconds']:.2f}x, "
              f"peak RSS {ours['peak_rss'] / peer['peak_rss']:.2f}x; same CSR: {peer['same']}")
        result.update(peer_seconds=peer["seconds"], peer_peak_rss=peer["peak_rss"], same_csr=peer["same"])
    print(f"  peak RSS {ours['peak_rss'] / GiB:.2f} GiB is {'within' if result['rss_limit_ok'] else 'OVER'} "
          f"budget + 0.5 GiB for the interpreter and libraries ({result['rss_limit'] / GiB:.2f} GiB)")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench")
    ap.add_argument("--edges", type=int, default=100_000_000)
    ap.add_argument("--nodes", type=int, default=10_000_000)
    ap.add_argument("--npz-edges", type=int, default=50_000_000)
    ap.add_argument("--npz-nodes", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--budget", default="2GiB")
    ap.add_argument("--only", choices=["a", "b"], default=None)
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()

    budget = H.parse_size(args.budget)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    if args.only in (None, "a"):
        text = work / f"edges_{args.edges}_{args.nodes}.tsv"
        if not text.exists():
            print(f"generating {text} ...", file=sys.stderr)
            gen_text(text, args.edges, args.nodes)
        out = work / "a.h5"
        ours = run_measured(H.gnnprep_cmd("ingest", text, "-o", out, "--num-nodes", args.nodes,
                                          "--memory-budget", args.budget, "--quiet", "--json"))
        peer = None
        if not args.no_peer:
            peer = run_measured(H.child("child_ingest", "text", text, args.nodes))
            peer["same"] = run_measured(H.child("child_ingest", "hash-store", out))["stdout"] == peer["stdout"]
        results.append(report("a: text edge list", args.edges, ours, peer, budget))
        out.unlink()
    if args.only in (None, "b"):
        folder = work / f"papers_like_{args.npz_edges}_{args.npz_nodes}_{args.dim}"
        if not (folder / "raw" / "data.npz").exists():
            print(f"generating {folder} ...", file=sys.stderr)
            gen_npz(folder, args.npz_edges, args.npz_nodes, args.dim)
        out = work / "b.h5"
        ours = run_measured(H.gnnprep_cmd("ingest", folder, "-o", out, "--memory-budget", args.budget, "--quiet",
                                          "--json"))
        peer = None
        if not args.no_peer:
            peer = run_measured(H.child("child_ingest", "npz", folder))
            peer["same"] = run_measured(H.child("child_ingest", "hash-store", out))["stdout"] == peer["stdout"]
        results.append(report("b: papers100M-layout data.npz", args.npz_edges, ours, peer, budget))
        out.unlink()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
