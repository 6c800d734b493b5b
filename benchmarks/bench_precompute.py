"""Benchmark: ``gnnprep precompute`` (hop features S^k X, k = 0..K) on the CPU.

S = D̃^-1/2 (A + I) D̃^-1/2 (operator ``sym``). Inputs are generated once and cached in --workdir
(default /tmp/gnnprep-bench-pre): a power-law graph with community structure — Pareto node weights,
communities of --community nodes (contiguous ids), a share --p-in of the edges inside the source's
community, both endpoints drawn in proportion to the node weights (degree-weighted), and finally a
random permutation of the node ids, since real data sets number their nodes arbitrarily. Edges are
added until the symmetrised, deduplicated, loop-free graph has at least --nnz stored nonzeros, then
the graph store is built with ``gnnprep.graph.ingest.ingest`` (features: standard normal float32).

--mode speed (default): one run, every tool in its own subprocess (wall time, and that process's
peak RSS from os.wait4's ru_maxrss; each is started by a tiny launcher process, because Linux
carries a parent's own peak RSS into its child's ru_maxrss across fork + exec):
  (i)   scipy, the way OGB's papers100M ``sgc.py`` does it: load the CSR from the graph store, build
        S (float32, self-loops, sym normalisation; build time reported separately), then
        ``x = S @ x`` K times keeping every hop in memory (nothing written); only the K products
        are timed;
  (ii)  ``torch.sparse.mm`` with the whole S as a torch CSR tensor (float32, torch's default
        threads); only the K products are timed; (ii') for information, the same with S and X in
        gnnprep's community order (found outside the timing): how much of (iii)'s gain the order
        alone would give a peer;
  (iii) ``gnnprep.precompute.run.precompute`` through its library entry: graph store in, features
        artifact (all hops, all rows) out; the whole call is timed, ``report.hop_seconds`` printed.
        numba's compiled kernels are loaded from its cache before the timed call, as torch's
        library initialisation is done before (ii)'s. With the default ``--reorder auto`` the call
        finds a community node order itself (inside the timed call: an order kept beside the store by an
        earlier run is deleted first); the peers run in stored order.
  Speed-ups (i)/(iii) (target >= 2.0x) and (ii)/(iii) (target >= 1.2x), max relative error of
  gnnprep's hop K (read back from the artifact) against scipy's, and gnnprep's achieved bytes/s in
  the hop products — per hop nnz*d*4 (gathered rows) + nnz*4 (indices) + n*d*4 (output) — against
  the memory-copy bandwidth (numpy copy of a 1 GiB float32 array, best of 3, read + written bytes).
--mode budget: budget honesty. A graph whose S + X is >= 4x --memory-budget; precompute runs in a
  subprocess with that budget; prints the plan, predicted and measured peak (VmHWM above the
  baseline RSS, ``report.measured_peak_bytes``), the process's peak RSS (wait4) and checks
  measured <= 1.25 x budget, |predicted - measured| / measured <= 25%, and process peak RSS <=
  1.25 x budget + the RSS of a process that has imported torch, numpy, h5py and gnnprep.precompute.run.

--reorder auto|none|bfs is passed to PrecomputeConfig (default: the library's). Timings on a shared
2-core machine are noisy: the run prints how idle the CPU was just before it started, and the load
average before and after. The tools run as the child programs of benchmarks/child_precompute.py; the
graph, the launcher and the figures' helpers are benchmarks/harness.py's.

Both modes end with one JSON line holding every figure.

    .venv/bin/python benchmarks/bench_precompute.py                   # speed, 1M nodes, >= 20M nnz
    .venv/bin/python benchmarks/bench_precompute.py --mode budget     # 256MiB budget, ~1.1 GB S + X
    .venv/bin/python benchmarks/bench_precompute.py --quick           # smoke run (100k nodes), < 1 min
    .venv/bin/python benchmarks/bench_precompute.py --mode budget --quick
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import MiB, gib, verdict

# the child programs (benchmarks/child_precompute.py); each prints one JSON line
SCIPY, TORCH, GNNPREP = "scipy", "torch", "gnnprep"


def run_child(program: str, *args, log: Path) -> dict:
    """``child_precompute.py PROGRAM ARGS...`` under the launcher (its own peak RSS, not this large
    process's): wall time, peak RSS and the JSON the program printed."""
    r = H.run_json(H.child("child_precompute", program, *args), log)
    return {"wall": r["seconds"], "peak_rss": r["peak_rss"], **r["report"]}


def run_gnnprep(graph: Path, out: Path, K: int, budget: int, args, log: Path) -> dict:
    return run_child(GNNPREP, graph, out, K, budget, args.reorder or "", log=log)


def rel_errors(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max |got - ref| / max |ref|, max over rows of ||got_v - ref_v|| / ||ref_v||)."""
    return H.max_rel_error(got, ref), H.row_rel_error(got, ref)


def read_hop(out: Path, k: int) -> np.ndarray:
    return H.read_hop(out, k).astype(np.float32, copy=False)  # the features artifact: /hops/<k> [rows, d]


# -- modes -----------------------------------------------------------------------------------------
def speed(args, work: Path) -> dict:
    n, d, K = args.nodes, args.dim, args.hops
    graph, info = H.ensure_graph(work, args)
    nnz = info["stored_nnz"]
    degs = H.degree_summary(graph)
    print(f"graph: {n:,} nodes, {nnz:,} stored nonzeros (after symmetrisation/dedup; {info['directed_edges']:,} "
          f"generated edges), d={d}, K={K}; degree max {degs['max']:,}, p99 {degs['p99']:.0f}, "
          f"median {degs['median']:.0f}, isolated {degs['isolated']:,}")
    print(f"  S + X = {gib(nnz * 4 + n * d * 4)} (int32 indices + float32 X); cached store {graph}")
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    ref_path, torch_path, out = work / "ref_scipy.npy", work / "hop_torch.npy", work / "feats_speed.h5"

    bw = H.run_json(H.child("child_bandwidth"), logs / "bandwidth.err")["report"]
    print(f"memory copy bandwidth (numpy, 1 GiB float32, best of 3): {bw['bytes_per_s'] / 1e9:.2f} GB/s read+written")
    sc = run_child(SCIPY, graph, K, ref_path, log=logs / "scipy.err")
    print(f"(i) scipy done: products {sc['products_seconds']:.2f} s", file=sys.stderr, flush=True)
    tc = to = None
    if not args.no_torch:
        tc = run_child(TORCH, graph, K, torch_path, log=logs / "torch.err")
        print(f"(ii) torch done: products {tc['products_seconds']:.2f} s", file=sys.stderr, flush=True)
        if not args.no_torch_ordered:
            to = run_child(TORCH, graph, K, "-", "ordered", log=logs / "torch_ordered.err")
            print(f"(ii') torch, community order: products {to['products_seconds']:.2f} s", file=sys.stderr, flush=True)
    H.clear_output(out)
    budget = 0 if args.memory_budget is None else H.parse_size(args.memory_budget)
    gp = run_gnnprep(graph, out, K, budget, args, logs / "gnnprep.err")
    rep = gp["report"]
    ours = gp["wall_seconds"]

    ref = np.load(ref_path, mmap_mode="r")
    got = read_hop(out, K)
    err, row_err = rel_errors(got, np.asarray(ref))
    torch_err = None
    if tc is not None:
        torch_err = rel_errors(np.load(torch_path), np.asarray(ref))[0]
    del got, ref

    hop_products = sum(rep["hop_seconds"][1:])
    bytes_per_hop = nnz * d * 4 + nnz * 4 + n * d * 4
    achieved = K * bytes_per_hop / hop_products if hop_products > 0 else float("nan")

    print()
    print(f"{'tool':<44} {'seconds':>9} {'peak RSS':>10}  notes")
    print(f"{'(i)   scipy S @ x (OGB sgc.py), K products':<44} {sc['products_seconds']:9.2f} {gib(sc['peak_rss']):>10}  "
          f"+ {sc['build_seconds']:.2f} s building S; per hop {[round(s, 2) for s in sc['hop_seconds']]}")
    if tc is not None:
        print(f"{'(ii)  torch.sparse.mm (CSR), K products':<44} {tc['products_seconds']:9.2f} {gib(tc['peak_rss']):>10}  "
              f"+ {tc['build_seconds']:.2f} s building S; {tc['threads']} threads, torch {tc['torch']}, "
              f"mkl {tc['mkl']}; per hop {[round(s, 2) for s in tc['hop_seconds']]}")
    if to is not None:
        label = "(ii') the same on S, X in community order"
        print(f"{label:<44} {to['products_seconds']:9.2f} {gib(to['peak_rss']):>10}  "
              f"for information (no target): what the node order alone gives torch; order found untimed; "
              f"per hop {[round(s, 2) for s in to['hop_seconds']]}")
    p = rep["plan"]
    print(f"{'(iii) gnnprep precompute (whole call)':<44} {ours:9.2f} {gib(gp['peak_rss']):>10}  "
          f"hop_seconds {list(rep['hop_seconds'])}; plan a={p['a']} b={p['b']} c={p['c']} width={p['width']} "
          f"S {'resident' if p['s_resident'] else 'streamed'}, reorder {p.get('reorder')}, predicted {p['predicted_seconds']} s")
    r1 = sc["products_seconds"] / ours
    print(f"speed-up (i)/(iii)  = {r1:5.2f}x  (target >= 2.0x)  {verdict(r1 >= 2.0)}")
    r2 = None
    if tc is not None:
        r2 = tc["products_seconds"] / ours
        print(f"speed-up (ii)/(iii) = {r2:5.2f}x  (target >= 1.2x)  {verdict(r2 >= 1.2)}")
    print(f"max relative error, gnnprep hop {K} vs scipy: {err:.2e} (max|diff| / max|ref|); "
          f"worst row ||diff|| / ||ref||: {row_err:.2e}"
          + (f"; torch vs scipy: {torch_err:.2e}" if torch_err is not None else ""))
    print(f"gnnprep hop products: {hop_products:.2f} s for {K} hops, {K * bytes_per_hop / 1e9:.1f} GB moved "
          f"(per hop nnz*d*4 + nnz*4 + n*d*4 = {bytes_per_hop / 1e9:.2f} GB) -> {achieved / 1e9:.2f} GB/s, "
          f"{achieved / bw['bytes_per_s']:.2f}x the copy bandwidth ({bw['bytes_per_s'] / 1e9:.2f} GB/s)")
    print(f"gnnprep memory: predicted peak {gib(rep['predicted_peak_bytes'])} above baseline "
          f"{gib(rep['baseline_rss_bytes'])}, measured {gib(rep['measured_peak_bytes'] or 0)}")
    result = {
        "mode": "speed", "nodes": n, "stored_nnz": nnz, "dim": d, "hops": K, "degrees": degs, "graph": info,
        "copy_bytes_per_s": bw["bytes_per_s"],
        "scipy": {k: sc[k] for k in ("products_seconds", "build_seconds", "hop_seconds", "peak_rss", "wall")},
        "torch": None if tc is None else {k: tc[k] for k in ("products_seconds", "build_seconds", "hop_seconds",
                                                              "peak_rss", "wall", "threads")},
        "torch_community_order": None if to is None else {k: to[k] for k in ("products_seconds", "hop_seconds",
                                                                             "peak_rss")},
        "gnnprep": {"seconds": ours, "peak_rss": gp["peak_rss"], "hop_seconds": rep["hop_seconds"],
                    "plan": p, "predicted_peak_bytes": rep["predicted_peak_bytes"],
                    "measured_peak_bytes": rep["measured_peak_bytes"], "baseline_rss_bytes": rep["baseline_rss_bytes"],
                    "achieved_bytes_per_s": achieved, "achieved_vs_copy": achieved / bw["bytes_per_s"]},
        "speedup_scipy": r1, "speedup_torch": r2, "target_scipy_ok": r1 >= 2.0,
        "target_torch_ok": None if r2 is None else r2 >= 1.2,
        "max_rel_err": err, "max_row_rel_err": row_err, "torch_vs_scipy_rel_err": torch_err,
    }
    if not args.keep:
        H.clear_output(out)
        for p_ in (ref_path, torch_path):
            if p_.exists():
                p_.unlink()
    return result


def budget_mode(args, work: Path) -> dict:
    budget = H.parse_size(args.memory_budget or ("32MiB" if args.quick else "256MiB"))
    d, K = args.dim, args.budget_hops
    deg = args.budget_degree
    n = args.budget_nodes or math.ceil(args.budget_factor * budget / (4 * d + 4 * deg))
    graph, info = H.ensure_graph(work, args, nodes=n, nnz=n * deg)
    nnz = info["stored_nnz"]
    sx = nnz * 4 + n * d * 4
    print(f"graph: {n:,} nodes, {nnz:,} stored nonzeros, d={d}, K={K}; S + X = {sx / MiB:.0f} MiB "
          f"= {sx / budget:.2f}x the {budget / MiB:.0f} MiB budget {verdict(sx >= 4 * budget)} (>= 4x)")
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    base = run_child("baseline", log=logs / "baseline.err")
    base_nt = run_child("baseline-no-torch", log=logs / "baseline_nt.err")
    out = work / "feats_budget.h5"
    H.clear_output(out)
    gp = run_gnnprep(graph, out, K, budget, args, logs / "gnnprep_budget.err")
    rep = gp["report"]
    p = rep["plan"]
    pred, meas = rep["predicted_peak_bytes"], rep["measured_peak_bytes"]
    print(f"plan: a={p['a']} b={p['b']} c={p['c']} width={p['width']} S {'resident' if p['s_resident'] else 'streamed'}"
          f", reorder {p.get('reorder')}"
          f"; predicted {p['predicted_seconds']} s, took {gp['wall_seconds']:.2f} s (hop_seconds {list(rep['hop_seconds'])})")
    print(f"baseline RSS (in precompute, after imports + JIT warm-up): {rep['baseline_rss_bytes'] / MiB:.0f} MiB")
    print(f"baseline RSS of a process with torch, numpy, h5py, gnnprep.precompute.run imported: "
          f"{base['rss_imports'] / MiB:.0f} MiB ({base['rss_after_warm_up'] / MiB:.0f} MiB after the numba warm-up; "
          f"{base_nt['rss'] / MiB:.0f} MiB without torch, after warm-up)")
    print(f"predicted peak above baseline: {pred / MiB:.1f} MiB ({'within' if pred <= budget else 'OVER'} the "
          f"{budget / MiB:.0f} MiB budget the plan was chosen for)")
    ok1 = ok2 = False
    ratio = None
    if meas is None:
        print("measured peak: unavailable (/proc/self/clear_refs not writable)  MISS")
    else:
        ratio = pred / meas if meas else float("inf")
        print(f"measured peak above baseline (VmHWM): {meas / MiB:.1f} MiB; predicted/measured = {ratio:.2f}")
        ok1 = meas <= 1.25 * budget
        ok2 = abs(pred - meas) / meas <= 0.25 if meas else False
        print(f"measured peak {meas / MiB:.1f} MiB <= 1.25 x budget ({1.25 * budget / MiB:.0f} MiB): {verdict(ok1)}")
        print(f"|predicted - measured| / measured = {abs(pred - meas) / meas * 100:.1f}% <= 25%: {verdict(ok2)}")
    limit = 1.25 * budget + base["rss_imports"]
    ok3 = gp["peak_rss"] <= limit
    print(f"process peak RSS (wait4) {gp['peak_rss'] / MiB:.0f} MiB <= 1.25 x budget + torch-imported baseline "
          f"({limit / MiB:.0f} MiB): {verdict(ok3)}")
    err = row_err = None
    if not args.no_verify:
        ref_path = work / "ref_budget.npy"
        run_child(SCIPY, graph, K, ref_path, log=logs / "scipy_budget.err")
        ref = np.load(ref_path, mmap_mode="r")
        err, row_err = rel_errors(read_hop(out, K), np.asarray(ref))
        del ref
        ref_path.unlink()
        print(f"max relative error, gnnprep hop {K} vs scipy: {err:.2e}; worst row {row_err:.2e}")
    if not args.keep:
        H.clear_output(out)
    return {
        "mode": "budget", "budget": budget, "nodes": n, "stored_nnz": nnz, "dim": d, "hops": K, "graph": info,
        "s_plus_x_bytes": sx, "s_plus_x_over_budget": sx / budget, "plan": p,
        "seconds": gp["wall_seconds"], "hop_seconds": rep["hop_seconds"],
        "predicted_peak_bytes": pred, "measured_peak_bytes": meas, "predicted_over_measured": ratio,
        "baseline_rss_bytes": rep["baseline_rss_bytes"], "process_peak_rss": gp["peak_rss"],
        "torch_baseline_rss": base["rss_imports"], "torch_baseline_rss_after_warm_up": base["rss_after_warm_up"],
        "baseline_rss_no_torch": base_nt["rss"],
        "measured_within_1_25_budget": ok1, "prediction_within_25pct": ok2, "process_rss_within_limit": ok3,
        "max_rel_err": err, "max_row_rel_err": row_err,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["speed", "budget"], default="speed")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-pre")
    H.add_size_args(ap, quick_help="small smoke run (100k nodes; 32MiB budget)")
    ap.add_argument("--hops", type=int, default=3, help="speed: K")
    ap.add_argument("--memory-budget", default=None,
                    help="budget: the budget under test (default 256MiB; quick 32MiB); speed: passed to "
                         "precompute (default: gnnprep's own default)")
    ap.add_argument("--budget-hops", type=int, default=2, help="budget: K")
    ap.add_argument("--budget-nodes", type=int, default=None,
                    help="budget: nodes (default: so that S + X = --budget-factor x the budget)")
    ap.add_argument("--budget-factor", type=float, default=4.2)
    ap.add_argument("--budget-degree", type=int, default=12, help="budget: stored nonzeros per node")
    H.add_generator_args(ap)
    ap.add_argument("--reorder", choices=["auto", "none", "bfs"], default=None,
                    help="passed to PrecomputeConfig(reorder=...) (default: the library's default)")
    ap.add_argument("--no-torch", action="store_true", help="speed: skip (ii)")
    ap.add_argument("--no-torch-ordered", action="store_true",
                    help="speed: skip (ii'), torch on S and X in community order (information only)")
    ap.add_argument("--no-verify", action="store_true", help="budget: skip the scipy reference")
    ap.add_argument("--keep", action="store_true", help="keep the artifacts and reference arrays")
    args = ap.parse_args()
    H.quick_defaults(args)

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    load0 = H.load_avg()
    idle0 = H.cpu_idle()
    t0 = time.perf_counter()
    result = speed(args, work) if args.mode == "speed" else budget_mode(args, work)
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    result["cpu_idle_before"] = idle0
    result["load_avg_before"], result["load_avg_after"] = load0, H.load_avg()
    note = " (another process was using the CPU: timings are noisy)" if idle0 is not None and idle0 < 0.9 else ""
    print(f"total {result['total_seconds']} s; CPU idle over 1 s before the run: "
          f"{'n/a' if idle0 is None else f'{idle0 * 100:.0f}%'}{note}; load average (1/5/15 min) before "
          f"{load0}, after {result['load_avg_after']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
