"""Issue 34, acceptances 1 and 2: precompute as the user runs it, against torch.sparse.mm and the
OGB recipe in scipy, in one run.

``--kind rmat`` (default): a Graph500 R-MAT graph (``harness.rmat_edges``: ids permuted,
symmetrised; default the 1/40 papers100M size, 2.78M nodes and ~80M stored entries).
``--kind powerlaw``: the power-law community graph of the other benches (``harness.ensure_graph``;
pass --nodes 1000000 --nnz 20000000 for acceptance 2). d = 128 standard-normal features; ingested
once into ``--workdir``. Then, interleaved for ``--rounds`` rounds:

  ours: ``gnnprep precompute graph.h5 --hops 3 --rows all --memory-budget 8GiB --json [--args]`` as a
        command (launcher: wall time and peak RSS), hops 1..K as the command reports them, with
        their breakdown (kernel, reads, writes waited for, other);
  peer: ``benchmarks/child_precompute.py torch ... warm`` — torch.sparse.mm on a CSR tensor of the
        same S, in its own process: one warm-up product, then 3 products of S and X, each output
        dropped before the next (a fresh output's page faults are not the library's speed); its
        best call;
  recipe: ``benchmarks/child_precompute.py scipy`` — OGB's sgc.py recipe: load, build S, K products
        in scipy, all in memory (the issue's 2.5x target is the command's wall against this total).

Prints each round, then the mean hop of the best round against the peer's best hop (the issue's
target: >= 2.5x), and that mean hop against max(kernel, disk write) from the breakdown (target:
within 1.2x; the disk write at the profile's write rate).

    python benchmarks/bench_precompute_command.py [--nodes 2776500] [--nnz 77500000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def ensure_rmat(work: Path, n: int, nnz: int, dim: int, seed: int) -> Path:
    folder = work / f"rmat_n{n}_e{nnz}_d{dim}_s{seed}"
    graph = folder / "graph.h5"
    if graph.exists():
        return graph
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    u, v, stored = H.rmat_edges(n, nnz, seed=seed, progress=False)
    np.save(folder / "edges.npy", np.stack([u, v]))
    del u, v
    H.write_normal_features(folder / "x.npy", n, dim, np.random.default_rng(seed + 1))
    H.ingest_arrays(folder / "edges.npy", graph, n, folder / "x.npy")
    (folder / "edges.npy").unlink()
    (folder / "x.npy").unlink()
    print(f"generated and ingested {graph} ({stored:,} stored entries) in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return graph


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2_776_500)
    ap.add_argument("--nnz", type=int, default=77_500_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kind", choices=["rmat", "powerlaw"], default="rmat")
    ap.add_argument("--no-recipe", action="store_true", help="skip the scipy recipe (slow on large graphs)")
    ap.add_argument("--args", default="", help="more precompute options, e.g. '--reorder degree-bucket'")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-command")
    H.add_generator_args(ap)  # --seed and the power-law generator's options
    args = ap.parse_args()
    work = Path(args.workdir)
    if args.kind == "rmat":
        graph = ensure_rmat(work, args.nodes, args.nnz, args.dim, args.seed)
    else:
        graph, _ = H.ensure_graph(work, args)
    out = work / "feats.h5"
    print(H.machine_line())
    ours, peers, recipes = [], [], []
    for i in range(args.rounds):
        H.clear_output(out)
        r = H.run_json(H.gnnprep_cmd("precompute", graph, "--hops", args.hops, "--rows", "all", "--memory-budget",
                                     args.budget, "--json", "-o", out, *args.args.split()))
        rep = r["report"]
        hops = rep["hop_seconds"][1:]
        ours.append((sum(hops) / len(hops), r, rep))
        p = H.last_json(H.run_measured(H.child("child_precompute", "torch", graph, 3, "-", "warm"))["stdout"])
        calls = [round(t, 3) for t in p["hop_seconds"]]
        peers.append(min(p["hop_seconds"]))
        sc = None
        if not args.no_recipe:
            q = H.last_json(H.run_measured(H.child("child_precompute", "scipy", graph, args.hops, "-"))["stdout"])
            sc = {"load": round(q["load_seconds"], 3), "build": round(q["build_seconds"], 3),
                  "products": round(q["products_seconds"], 3)}
            sc["total"] = round(sum(sc.values()), 3)
            recipes.append(sc["total"])
        print(f"round {i + 1} (load {H.load_avg()}): ours {r['seconds']:.1f} s wall, peak {H.gib(r['peak_rss'])}, plan "
              f"c={rep['plan']['c']} order={rep['plan']['reorder']}, hops {', '.join(f'{h:.2f}' for h in hops)} s; "
              f"torch.sparse.mm hops {calls} s ({p['threads']} threads); scipy recipe {sc}")
        for k, b in enumerate(rep["hop_breakdown"]):
            print(f"    hop {k}: " + ", ".join(f"{name} {v:.2f}" for name, v in b.items()))
    mean, r, rep = min(ours, key=lambda o: o[0])
    peer = min(peers)
    wall = min(o[1]["seconds"] for o in ours)
    if recipes:
        print(f"command wall (best) {wall:.2f} s; scipy recipe in memory (best) {min(recipes):.2f} s: "
              f"{min(recipes) / wall:.2f}x {H.target(min(recipes) / wall, 2.5)}")
    print(f"mean hop (best round) {mean:.2f} s; torch.sparse.mm best hop {peer:.2f} s: "
          f"{peer / mean:.2f}x {H.target(peer / mean, 2.5)}")
    from gnnprep.precompute.profile import load_profile

    prof = load_profile("cpu")
    n = rep["rows"]
    write = n * args.dim * 4 / prof.write_bytes_per_s
    kernel = sum(b["kernel"] for b in rep["hop_breakdown"][1:]) / args.hops
    bound = max(kernel, write)
    print(f"mean hop against max(kernel {kernel:.2f} s, disk write {write:.2f} s at the profile's "
          f"{prof.write_bytes_per_s / 1e9:.2f} GB/s): {mean / bound:.2f}x {H.target(mean / bound, 1.2, at_least=False)}")


if __name__ == "__main__":
    main()
