"""Issue 34, acceptance 4: SIGN's operators over one store, in one run against one run each.

SIGN (Frasca et al., "SIGN: Scalable Inception Graph Neural Networks", 2020) feeds a model several
diffusions of X at once; here ``sym`` (GCN's D̃^-1/2 Ã D̃^-1/2), ``rw`` (D̃^-1 Ã) and a
personalised-PageRank series (``ppr:alpha=0.1,k=K``). The graph is the power-law community graph of
the other benches (``harness.ensure_graph``; default 1M nodes, 20M stored entries, d = 128).

For each ``--budgets`` entry (a large one keeps S resident, a small one streams it from the store),
interleaved for ``--rounds`` rounds, each run started with the page cache dropped where this
process may (``/proc/sys/vm/drop_caches``; otherwise the runs after the first read from the page
cache and the bytes read say little):

  together: ``gnnprep precompute graph.h5 --operator sym,rw,ppr:... --hops K --rows all``;
  apart:    the same command once per operator, each its own output.

Prints wall, bytes read from the disk (the launcher's ru_inblock) and peak RSS of each, the ratios
apart/together, and whether the three channels of the run together equal the runs apart bit for bit.

Why the run together computes the operators one after another (S resident: built once for all; X and
a streamed S re-read per operator, from the page cache when it holds them) rather than every operator
in each pass over S: under a memory budget B a pass over S serves one column block, and an operator
with b column buffers and p kernel passes per hop reads S about b·p·K·(n d 4 / B) times. One pass for
all the operators needs Σb buffers at once, so it reads S Σb·max p·K·(n d 4 / B) times against
Σ(b·p)·K·(n d 4 / B) one after another: the same for single-pass operators (sym and rw: 4 = 4),
more as soon as a diffusion is among them (sym, rw, ppr with k = 3: 2 + 2 + 3 = 7 buffers × 3 passes
= 21 against 2 + 2 + 9 = 13). What it would save is the re-reads of X, one per extra operator.

    python benchmarks/bench_operators_pass.py [--nodes 1000000 --nnz 20000000] [--budgets 8GiB,1GiB]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def drop_caches() -> bool:
    """Empty the page cache (root only); False when this process may not."""
    import os

    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def run(graph: Path, out: Path, ops: str, hops: int, budget: str) -> dict:
    H.clear_output(out)
    cold = drop_caches()
    r = H.run_json(H.gnnprep_cmd("precompute", graph, "--operator", ops, "--hops", hops, "--rows", "all",
                                 "--memory-budget", budget, "--json", "--quiet", "-o", out))
    r["cold"] = cold
    return r


def same_channels(together: Path, apart: dict[str, Path], hops: int) -> bool:
    """Whether hops 1..K of each operator's channel in the run together equal its run apart, bit for bit."""
    with h5py.File(together, "r") as t:
        for name, path in apart.items():
            with h5py.File(path, "r") as a:
                for k in range(1, hops + 1):
                    key = f"channels/{name}/{k}"
                    if H.first_difference(t[key], a[key]) is not None:
                        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--nnz", type=int, default=20_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--ppr-k", type=int, default=3, help="power-iteration passes per hop of the ppr series")
    ap.add_argument("--budgets", default="8GiB,1GiB")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-command")
    H.add_generator_args(ap)
    args = ap.parse_args()
    work = Path(args.workdir)
    graph, info = H.ensure_graph(work, args)
    ops = ["sym", "rw", f"ppr:alpha=0.1,k={args.ppr_k}"]
    print(H.machine_line())
    print(f"graph {graph}: {info['nodes']:,} nodes, {info['stored_nnz']:,} stored entries, d = {args.dim}; "
          f"operators {', '.join(ops)}, K = {args.hops}")
    for budget in args.budgets.split(","):
        best_t, best_a = None, None
        for i in range(args.rounds):
            out_t = work / "ops-together.h5"
            t = run(graph, out_t, ",".join(ops), args.hops, budget)
            outs, apart = {}, []
            for j, op in enumerate(ops):
                outs[t["report"]["operators"][j]] = work / f"ops-apart-{j}.h5"
                apart.append(run(graph, outs[t["report"]["operators"][j]], op, args.hops, budget))
            wall_a = sum(a["seconds"] for a in apart)
            read_a = sum(a["read_bytes"] for a in apart)
            same = same_channels(out_t, outs, args.hops)
            walls = " + ".join(f"{a['seconds']:.1f}" for a in apart)
            plan = t["report"]["plan"]
            print(f"budget {budget} round {i + 1} (load {H.load_avg()}; cache dropped: {t['cold']}; S resident: "
                  f"{plan.get('s_resident')}, c = {plan.get('c')}): together {t['seconds']:.1f} s, read "
                  f"{H.gib(t['read_bytes'])}, peak {H.gib(t['peak_rss'])}; apart "
                  f"{walls} = {wall_a:.1f} s, read {H.gib(read_a)}, "
                  f"peak {H.gib(max(a['peak_rss'] for a in apart))}; apart/together: wall "
                  f"{wall_a / t['seconds']:.2f}x, bytes read {read_a / max(1, t['read_bytes']):.2f}x; "
                  f"channels bit-identical: {same}", flush=True)
            if best_t is None or t["seconds"] < best_t["seconds"]:
                best_t = t
            if best_a is None or wall_a < best_a:
                best_a = wall_a
            for p in (out_t, *outs.values()):
                H.clear_output(p)
        print(f"budget {budget}: best together {best_t['seconds']:.1f} s against best apart {best_a:.1f} s: "
              f"{best_a / best_t['seconds']:.2f}x")


if __name__ == "__main__":
    main()
