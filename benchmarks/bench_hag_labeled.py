"""``precompute --rows labeled`` through a HAG on a graph store with splits (issue 33, acceptance 3
on the papers100M shape): without a HAG, with ``--hag hag.h5`` and with ``--hag auto``, each as the
user runs it (its own process under benchmarks/launcher.py), rotated each round so that each variant
follows each other equally often (on a VM a run pays for memory the run before it did not hold).

The store: ``--store`` (one of ``benchmarks/bench_scale.py``'s, e.g. the papers100M shape at 1/10).
The HAG: ``--hag`` if given, else ``<store>.hag.h5`` where it exists, else ``gnnprep hag`` is run
first at ``--search-budget`` (its wall and peak printed). One untimed ``--hag`` run first leaves the
HAG's relabelled copy beside it (``gnnprep.hag.ordered_copy``; its wall printed: it relabels only
where no copy was kept), and the HAG and its copies are linked at ``<store>.hag.h5`` for ``--hag
auto``, as ``gnnprep hag graph.h5 -o graph.hag.h5`` leaves them.

Printed per variant: walls (median and span over the rounds), the command's own seconds, hop seconds
(medians), peak RSS and the planner's predicted seconds; ``--hag auto``'s decision and why; which
variant measured faster by median wall, and auto / the better by medians (acceptance: auto picks
the faster). A variant the planner refuses at the budget (the HAG's rows do not fit) is said so and
left out. Then one JSON line with every figure.

    python benchmarks/bench_hag_labeled.py --store STORE [--hag HAG] [--budget 6GiB] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.bench_hag_stream import link_as_cache

VARIANTS = ("plain", "hag", "auto")


def precompute(store: Path, out: Path, budget: str, hops: int, extra: tuple) -> dict:
    H.clear_output(out)
    r = H.run_json(H.gnnprep_cmd("precompute", store, "-o", out, "--hops", hops, "--rows", "labeled",
                                 "--memory-budget", budget, *extra, "--json", "--quiet"))
    d = r["report"]
    return {"wall_s": round(r["seconds"], 3), "peak_rss": r["peak_rss"], "seconds": d.get("seconds"),
            "hop_seconds": list(d.get("hop_seconds") or []), "predicted_s": (d.get("plan") or {}).get("predicted_seconds"),
            "plan_c": (d.get("plan") or {}).get("c"), "hag": d.get("hag"), "order": (d.get("decisions") or {}).get("order")}


def refused(store: Path, out: Path, budget: str, hops: int, extra: tuple) -> str | None:
    """The planner's one-line refusal of this variant at ``budget`` (``--dry-run``), None when it plans."""
    p = subprocess.run(H.gnnprep_cmd("precompute", store, "-o", out, "--hops", hops, "--rows", "labeled",
                                     "--memory-budget", budget, *extra, "--dry-run", "--quiet"), capture_output=True)
    return None if p.returncode == 0 else p.stderr.decode().strip().splitlines()[-1]


def summary(runs: list[dict]) -> dict:
    walls = [r["wall_s"] for r in runs]
    hops = [H.median([r["hop_seconds"][k] for r in runs]) for k in range(len(runs[0]["hop_seconds"]))]
    return {"median_wall_s": round(H.median(walls), 3), "walls": walls,
            "median_seconds": round(H.median([r["seconds"] for r in runs]), 3),
            "median_hop_seconds": [round(h, 3) for h in hops], "peak_rss": max(r["peak_rss"] for r in runs),
            "predicted_s": runs[-1]["predicted_s"], "plan_c": runs[-1]["plan_c"], "hag": runs[-1]["hag"],
            "order": runs[-1]["order"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--hag", type=Path, default=None)
    ap.add_argument("--budget", default="6GiB")
    ap.add_argument("--search-budget", default="2GiB")
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="outputs (default: beside the store)")
    args = ap.parse_args()
    from gnnprep.hag.builder import cache_path

    store = args.store.resolve()
    work = (args.workdir or store.parent).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(H.machine_line())
    result: dict = {"store": str(store), "budget": args.budget, "hops": args.hops, "rounds": args.rounds}
    hag = args.hag.resolve() if args.hag else cache_path(store)
    if not hag.exists():
        hag = work / "bench-labeled.hag.h5"
        r = H.run_json(H.gnnprep_cmd("hag", store, "-o", hag, "--memory-budget", args.search_budget, "--json", "--quiet"))
        result["search"] = {"wall_s": round(r["seconds"], 2), "peak_rss": r["peak_rss"],
                            "aggregation_ratio": r["report"]["aggregation_ratio"]}
        print(f"gnnprep hag --memory-budget {args.search_budget}: {r['seconds']:.1f} s, peak {H.gib(r['peak_rss'])}, "
              f"aggregation ratio {r['report']['aggregation_ratio']:.3f}")
    extras = {"plain": (), "hag": ("--hag", hag), "auto": ("--hag", "auto")}
    outs = {v: work / f"bench-labeled-{v}.h5" for v in VARIANTS}
    why_not = {v: refused(store, outs[v], args.budget, args.hops, extras[v]) for v in VARIANTS}
    variants = [v for v in VARIANTS if why_not[v] is None]
    for v in VARIANTS:
        if why_not[v]:
            print(f"{v}: refused at {args.budget}: {why_not[v]}")
    if "hag" in variants:
        first = precompute(store, outs["hag"], args.budget, args.hops, extras["hag"])
        result["first_hag_run"] = first
        print(f"first --hag run (untimed in the medians; relabels where no copy is kept): {first['wall_s']:.1f} s "
              f"({first['order']})")
    if hag != cache_path(store):
        link_as_cache(store, hag)
    runs: dict = {v: [] for v in variants}
    for rnd in range(args.rounds):
        for v in variants[rnd % len(variants):] + variants[:rnd % len(variants)]:
            runs[v].append(precompute(store, outs[v], args.budget, args.hops, extras[v]))
    result["variants"] = {v: summary(runs[v]) for v in variants}
    result["refused"] = {v: why_not[v] for v in VARIANTS if why_not[v]}
    print(f"\nprecompute --hops {args.hops} --rows labeled --memory-budget {args.budget}, {args.rounds} rounds rotated")
    for v, s in result["variants"].items():
        print(f"  {v:<6} wall {s['median_wall_s']:.2f} s median ({H.span(s['walls'])}), its own {s['median_seconds']:.2f} s, "
              f"hops {', '.join(f'{h:.2f}' for h in s['median_hop_seconds'])}, peak {H.gib(s['peak_rss'])}, "
              f"c = {s['plan_c']}, predicted {s['predicted_s']} s")
    if "auto" in result["variants"]:
        a = result["variants"]["auto"]
        print(f"  auto decided: {'HAG' if (a['hag'] or {}).get('used') else 'plain'} ({(a['hag'] or {}).get('reason')})")
    timed = {v: s["median_wall_s"] for v, s in result["variants"].items() if v != "auto"}
    if timed:
        faster = min(timed, key=timed.get)
        result["faster"] = faster
        line = f"  faster by median wall: {faster}"
        if "auto" in result["variants"]:
            result["auto_over_better"] = round(result["variants"]["auto"]["median_wall_s"] / timed[faster], 3)
            used = bool((result["variants"]["auto"]["hag"] or {}).get("used"))
            result["auto_picked_faster"] = used == (faster == "hag")
            line += (f"; auto / the better {result['auto_over_better']:.2f} (medians); auto picked the faster: "
                     f"{result['auto_picked_faster']}")
        print(line)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
