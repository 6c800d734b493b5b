"""The planner's column-block choice against what measures faster (issue 34, build 3): ``precompute
--hops K --rows all`` on each ``--graph`` as the planner plans it and with ``--blocks 1,1,c`` for each
``--columns`` c, each as the user runs it (its own process under benchmarks/launcher.py), rotated each
round so that each variant follows each other equally often.

Printed per graph and variant: the median wall and its span, the command's own seconds, hops 1..K
(the sum), their kernels' seconds, peak RSS, the plan's c and whether it used the node order, and the
planner's predicted seconds; then which c measured fastest by median wall and by median hops 1..K,
and auto over the fastest. Then one JSON line with every figure.

A diagnostic for the planner's model (:func:`gnnprep.precompute.plan.predict_seconds`). Run back to
back, each run reuses the memory the one before freed; on a VM that returns free pages to the host, a
run after idle (``--idle``, as between a user's commands) faults its buffers in at a fraction of that
speed, and the fastest c can differ (docs/internals.md, the column-block choice). With the built-in
profile, 2026-11-27: cliques graph, planner c = 2 against c = 1 1.47 / 1.28 s back to back, 1.57 /
1.57 s after 8 s idle; power-law graph, planner c = 4 against c = 2 2.50 / 2.39 s and 3.56 / 3.04 s.

    python benchmarks/bench_column_blocks.py --graph G.h5 [--graph G2.h5 ...] [--columns 1,2,4]
        [--budget 8GiB] [--rounds 3] [--hops 3] [--idle 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def precompute(graph: Path, out: Path, budget: str, hops: int, blocks: str | None) -> dict:
    H.clear_output(out)
    extra = ("--blocks", blocks) if blocks else ()
    r = H.run_json(H.gnnprep_cmd("precompute", graph, "-o", out, "--hops", hops, "--rows", "all", "--device", "cpu",
                                 "--memory-budget", budget, *extra, "--json", "--quiet"))
    d, plan = r["report"], r["report"].get("plan") or {}
    hops_s = list(d.get("hop_seconds") or [])
    return {"wall_s": round(r["seconds"], 3), "peak_rss": r["peak_rss"], "seconds": d.get("seconds"),
            "hops_1_K_s": round(sum(hops_s[1:]), 4),
            "kernels_s": round(sum(b.get("kernel", 0.0) for b in d.get("hop_breakdown") or []), 4),
            "c": plan.get("c"), "reorder": plan.get("reorder"), "predicted_s": plan.get("predicted_seconds")}


def summary(runs: list[dict]) -> dict:
    return {"median_wall_s": round(H.median([r["wall_s"] for r in runs]), 3), "walls": [r["wall_s"] for r in runs],
            "median_seconds": round(H.median([r["seconds"] for r in runs]), 3),
            "median_hops_1_K_s": round(H.median([r["hops_1_K_s"] for r in runs]), 4),
            "median_kernels_s": round(H.median([r["kernels_s"] for r in runs]), 4),
            "peak_rss": max(r["peak_rss"] for r in runs), "c": runs[-1]["c"], "reorder": runs[-1]["reorder"],
            "predicted_s": runs[-1]["predicted_s"]}


def bench_graph(graph: Path, columns: list[int], budget: str, hops: int, rounds: int, idle: float = 0.0) -> dict:
    variants = ["auto"] + [f"c{c}" for c in columns]
    blocks = {"auto": None, **{f"c{c}": f"1,1,{c}" for c in columns}}
    out = graph.parent / "bench-column-blocks.h5"
    runs: dict = {v: [] for v in variants}
    for rnd in range(rounds):
        for v in variants[rnd % len(variants):] + variants[:rnd % len(variants)]:
            time.sleep(idle)   # the memory the last run freed goes back to the host, as between a user's commands
            runs[v].append(precompute(graph, out, budget, hops, blocks[v]))
    H.clear_output(out)
    res = {"graph": str(graph), "variants": {v: summary(runs[v]) for v in variants}}
    fixed = {v: s for v, s in res["variants"].items() if v != "auto"}
    res["fastest_by_wall"] = min(fixed, key=lambda v: fixed[v]["median_wall_s"])
    res["fastest_by_hops"] = min(fixed, key=lambda v: fixed[v]["median_hops_1_K_s"])
    res["auto_over_fastest"] = round(res["variants"]["auto"]["median_wall_s"]
                                     / fixed[res["fastest_by_wall"]]["median_wall_s"], 3)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", type=Path, action="append", required=True, help="a graph store (repeatable)")
    ap.add_argument("--columns", default="1,2,4", help="column-block counts to run besides the planner's")
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to wait before each run (on a VM that returns free pages to the host, a run "
                         "right after another reuses the memory it freed: fresh buffers then cost little)")
    args = ap.parse_args()
    columns = [int(c) for c in args.columns.split(",") if c]
    print(H.machine_line())
    results = []
    for graph in args.graph:
        res = bench_graph(graph.resolve(), columns, args.budget, args.hops, args.rounds, args.idle)
        results.append(res)
        print(f"\n{graph}: precompute --hops {args.hops} --rows all --memory-budget {args.budget}, "
              f"{args.rounds} rounds rotated" + (f", {args.idle:g} s idle before each run" if args.idle else ""))
        for v, s in res["variants"].items():
            print(f"  {v:<5} c = {s['c']} order {'yes' if s['reorder'] else 'no '} wall {s['median_wall_s']:.2f} s "
                  f"({H.span(s['walls'])}), its own {s['median_seconds']:.2f} s, hops 1..K {s['median_hops_1_K_s']:.3f} s "
                  f"(kernels {s['median_kernels_s']:.3f} s), peak {H.gib(s['peak_rss'])}, predicted {s['predicted_s']} s")
        print(f"  fastest by median wall: {res['fastest_by_wall']}; by hops: {res['fastest_by_hops']}; "
              f"auto (c = {res['variants']['auto']['c']}) / the fastest {res['auto_over_fastest']:.2f}")
    print(json.dumps({"budget": args.budget, "hops": args.hops, "rounds": args.rounds, "idle_s": args.idle, "load_avg": H.load_avg(),
                      "results": results}))


if __name__ == "__main__":
    main()
