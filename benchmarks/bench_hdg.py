"""HDG aggregation: gnnprep's hybrid bottom-up plan against materialised per-edge messages + scatter.

FlexGraph (Wang et al., EuroSys 2021) aggregates an HDG bottom-up with sparse operations at the
instance level instead of materialising one message per (instance, vertex) entry and scattering it
(the index_add / scatter_add execution of PyG-style message passing). On a generated graph the
script builds a two-level HDG (``hop-shells:2,cap=C``: node → shell → members, ≥ 5M bottom-level
entries by default) and runs, each in its own process on the same HDG and features:

  ours:    ``gnnprep.hdg.structure.aggregate`` (vertex level = one CSR product M·X, mean by M's row sums;
           the fixed-fanout shell level a reshape);
  scatter: the straightforward execution: destination (shell) ids materialised from the offsets,
           messages x[ids] · w gathered into an [entries, d] tensor, ``torch.index_add_`` into the
           shells, divided by the weight sums, reshaped to the slots.

Prints seconds and peak memory above the loaded inputs (VmHWM after a reset) for both, their
ratios (acceptance: ≥ 3× faster, ≥ 5× less memory), the largest difference between the outputs,
and the HDG's bytes relative to the graph store.

    python benchmarks/bench_hdg.py [--nodes 400000] [--degree 12] [--dim 64] [--cap 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=400_000)
    ap.add_argument("--degree", type=int, default=12, help="edges per node before symmetrisation")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--cap", type=int, default=8, help="members kept per shell")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the scatter peer")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-hdg")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    n = args.nodes
    graph = H.uniform_random_store(work / f"g_{n}_{args.degree}_d{args.dim}.h5", n, args.degree, args.dim)
    hdg = work / f"{graph.stem}.shells{args.cap}.hdg.h5"
    t0 = time.perf_counter()
    r = subprocess.run(H.gnnprep_cmd("hdg", graph, "--select", f"hop-shells:2,cap={args.cap}", "-o", hdg, "--json",
                                     "--quiet"), capture_output=True, text=True, check=True)
    sel = json.loads(r.stdout)
    print(f"graph {n:,} nodes; HDG hop-shells:2,cap={args.cap} built in {time.perf_counter() - t0:.1f} s; "
          f"HDG arrays {sel['hdg_bytes'] / 2**20:.1f} MiB = {sel['size_vs_graph_store']:.3f}x the graph store")
    runs = {"ours": [], "scatter": []}
    for _ in range(args.reps):
        for which in runs:
            out = subprocess.run(H.child("child_hdg", which, graph, hdg, args.threads, work / f"{which}.npy"),
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(out.stderr[-2000:])
            runs[which].append(H.last_json(out.stdout))
    a, b = H.best(runs["ours"]), H.best(runs["scatter"])
    diff = float(np.abs(np.load(work / "ours.npy") - np.load(work / "scatter.npy")).max())
    print(f"bottom-level entries: {a['entries']:,}; d = {args.dim}")
    print(f"ours (sparse, hybrid):        {a['seconds']:.3f} s, peak {a['peak_above_inputs'] / 2**20:.0f} MiB above the inputs")
    print(f"scatter (messages+index_add): {b['seconds']:.3f} s, peak {b['peak_above_inputs'] / 2**20:.0f} MiB above the inputs "
          f"({args.threads} torch threads)")
    print(f"speed-up {b['seconds'] / a['seconds']:.2f}x (target >= 3), memory {b['peak_above_inputs'] / max(1, a['peak_above_inputs']):.2f}x "
          f"less (target >= 5); max |diff| {diff:.1e}")
    print(json.dumps({"entries": a["entries"], "ours": a, "scatter": b, "speedup": b["seconds"] / a["seconds"],
                      "memory_ratio": b["peak_above_inputs"] / max(1, a["peak_above_inputs"]), "max_abs_diff": diff,
                      "hdg_bytes": sel["hdg_bytes"], "size_vs_graph_store": sel["size_vs_graph_store"]}))


if __name__ == "__main__":
    main()
