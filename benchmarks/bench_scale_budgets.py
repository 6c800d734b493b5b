"""Benchmark: one papers100M-shaped store precomputed under several memory budgets, in one run (issue 24).

Generates (or finds) the data set of ``bench_scale.py`` at ``--fraction`` (same generator, same cache
folder layout), ingests it once, then runs ``gnnprep precompute graph.h5 --hops K --rows labeled
--memory-budget B --json`` for every budget in ``--budgets``, each in its own process, ``--rounds``
times, alternating the budgets' order from round to round (the machine may be shared: ours against
ours, interleaved). Before the first round the ordered copy of the CSR kept beside the store
(``<graph>.ordered-*.h5``, see docs/internals.md "How precompute works") is deleted, so the first run that
needs it pays for writing it; that run is reported apart ("first") and left out of the medians.

Prints per budget: wall seconds and peak RSS of the process (median [range]), the report's
seconds, hop seconds, plan, predicted seconds, node order and pruning as used, the dry run's
reasons; the ratio of the medians (each budget over the first one); each process's peak RSS
against 1.25 x its budget; whether every output is bitwise equal to the first one (hops 0..K and
rows); load average before and after each run; then one JSON line with every figure.

    .venv/bin/python benchmarks/bench_scale_budgets.py --fraction 0.1 --budgets 8GiB,2GiB --rounds 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.bench_scale import generate


def precompute_run(graph: Path, out: Path, budget: str, hops: int, log: Path, dry: bool = False) -> dict:
    H.clear_output(out)
    cmd = H.gnnprep_cmd("precompute", graph, "--hops", hops, "--rows", "labeled", "--memory-budget", budget,
                        "--json", "-o", out, *(["--dry-run"] if dry else []))
    load0 = H.load_avg()
    r = H.run_json(cmd, log=log)
    rep = r["report"] or {}
    return {"budget": budget, "seconds": round(r["seconds"], 2), "peak_rss": r["peak_rss"],
            "load_before": load0, "load_after": H.load_avg(), "report_seconds": rep.get("seconds"),
            "hop_seconds": rep.get("hop_seconds"), "plan": rep.get("plan"), "reorder": rep.get("reorder"),
            "decisions": rep.get("decisions"), "hop_entries": rep.get("hop_entries"),
            "measured_peak_bytes": rep.get("measured_peak_bytes"), "baseline_rss_bytes": rep.get("baseline_rss_bytes"),
            "copy": rep.get("ordered_copy")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fraction", type=float, required=True)
    ap.add_argument("--budgets", default="8GiB,2GiB", help="comma-separated; the first is the reference")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-scale")
    ap.add_argument("--ingest-budget", default=None, help="default: the largest of --budgets")
    ap.add_argument("--keep-copy", action="store_true", help="do not delete an existing ordered copy first")
    ap.add_argument("--keep", action="store_true", help="keep the features files")
    args = ap.parse_args()
    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    root, meta = generate(workdir, args.fraction, args.seed, False)
    graph = workdir / f"graph-{root.name}.h5"
    print(H.machine_line(), file=sys.stderr)
    ingest = None
    if not graph.is_file():
        ib = args.ingest_budget or max(budgets, key=H.parse_size)
        print(f"ingest into {graph} at {ib} ...", file=sys.stderr)
        tmp = graph.with_name(graph.name + ".tmp.h5")
        H.clear_output(tmp)
        r = H.run_json(H.gnnprep_cmd("ingest", root / "ogbn_papers100M", "-o", tmp, "--memory-budget", ib, "--json"),
                       log=workdir / "ingest.log")
        tmp.rename(graph)
        ingest = {"seconds": round(r["seconds"], 1), "peak_rss": r["peak_rss"], "order": (r["report"] or {}).get("order")}
    if not args.keep_copy:
        for p in graph.parent.glob(graph.stem + ".ordered-*"):
            p.unlink()
    out = workdir / f"budgets-{int(time.time())}"
    out.mkdir()
    dry = {b: precompute_run(graph, out / f"dry-{b}.h5", b, args.hops, out / f"dry-{b}.log", dry=True)
           for b in budgets}
    runs: list[dict] = []
    for r in range(args.rounds):
        for b in (budgets if r % 2 == 0 else budgets[::-1]):
            print(f"round {r}: precompute at {b} ...", file=sys.stderr)
            res = precompute_run(graph, out / f"feats-{b}-{r}.h5", b, args.hops, out / f"pre-{b}-{r}.log")
            res["round"] = r
            res["first"] = bool((res.get("copy") or {}).get("built"))   # this run wrote the ordered copy
            runs.append(res)
            print(f"  {res['seconds']:.1f} s, peak RSS {H.gib(res['peak_rss'])}, hops {res['hop_seconds']}, "
                  f"load {res['load_before']} -> {res['load_after']}", file=sys.stderr)
    # bitwise: every output against the first one
    ref = out / f"feats-{runs[0]['budget']}-0.h5"
    for res in runs:
        f = out / f"feats-{res['budget']}-{res['round']}.h5"
        res["same_as_first"] = H.same_hops(ref, f, args.hops)["equal"]
    summary = {"fraction": args.fraction, "nodes": meta["nodes"], "edges": meta["edges"], "hops": args.hops,
               "budgets": budgets, "ingest": ingest, "dry_run": dry, "runs": runs, "per_budget": {}}
    print(f"\npapers100M shape at fraction {args.fraction:g}: n={meta['nodes']:,}, m={meta['edges']:,} edges; "
          f"{H.machine_line()}")
    for b in budgets:
        mine = [x for x in runs if x["budget"] == b]
        steady = [x for x in mine if not x.get("first")] or mine
        limit = 1.25 * H.parse_size(b)
        d = dry[b]
        plan = (mine[-1]["plan"] or {})
        pb = {"seconds": [x["seconds"] for x in steady], "median_seconds": H.median(x["seconds"] for x in steady),
              "first_seconds": [x["seconds"] for x in mine if x.get("first")],
              "peak_rss": [x["peak_rss"] for x in mine], "rss_ok": all(x["peak_rss"] <= limit for x in mine),
              "predicted_seconds": plan.get("predicted_seconds"),
              "dry_predicted_seconds": (d.get("plan") or {}).get("predicted_seconds")}
        summary["per_budget"][b] = pb
        print(f"  {b}: wall {H.med_span(pb['seconds'], '{:.1f}')} s (steady runs), first run(s) "
              f"{pb['first_seconds']}; peak RSS {H.span([x / H.GiB for x in pb['peak_rss']])} GiB "
              f"(<= 1.25 x budget: {pb['rss_ok']}); predicted {pb['predicted_seconds']} s")
        print(f"     plan a={plan.get('a')} b={plan.get('b')} c={plan.get('c')} width={plan.get('width')} "
              f"S resident={plan.get('s_resident')} reorder={plan.get('reorder')}; hop seconds "
              + "; ".join(str(x["hop_seconds"]) for x in mine))
        print(f"     order: {[(x['reorder'] or {}).get('used') for x in mine]}; dry-run decisions: {d.get('decisions')}")
    b0 = budgets[0]
    for b in budgets[1:]:
        ratio = summary["per_budget"][b]["median_seconds"] / summary["per_budget"][b0]["median_seconds"]
        summary["per_budget"][b]["ratio_to_" + b0] = ratio
        print(f"  {b} / {b0}: {ratio:.2f}x (medians of the steady runs)")
    print(f"  every output bitwise equal to the first: {all(x['same_as_first'] for x in runs)}")
    print("  (shared machine: timings are noisy)")
    print(json.dumps(summary))
    if not args.keep:
        for p in out.glob("feats-*.h5"):
            p.unlink()


if __name__ == "__main__":
    main()
