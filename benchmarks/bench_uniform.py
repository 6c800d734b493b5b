"""Benchmark (issue 13): the whole ``gnnprep precompute --hops 3`` process, warm and cold, against
the scipy recipe, on a power-law graph with uniform random destinations (no communities).

Acceptance line measured:
  "On a 1M-node, 20M-entry power-law graph with uniform random destinations (no communities), the
  whole `gnnprep precompute --hops 3` process (warm) is >= 2.0x faster than the scipy recipe's
  products plus normalisation; and its first run with an empty numba cache is <= 5 s slower than
  its warm run."

Graph (generated once per size/seed, cached in --workdir, default /tmp/gnnprep-bench-uniform):
  --nodes n (default 1,000,000). Directed edges (src, dst): src drawn in proportion to node weights
  1 + Pareto(--alpha 1.5) (Lomax + 1: a power-law degree skew), dst uniform over all n nodes; no
  community structure, no id permutation needed (ids carry no locality). Edge batches are added
  until the symmetrised, deduplicated, self-loop-free graph has >= --nnz (default 20,000,000)
  stored entries (checked with a numpy unique of min(u,v)*n + max(u,v)). Features: --dim (128)
  standard normal float32. Labels (10 classes, -1 = unknown) on 2% of the nodes, which are the
  splits (train 1.5%, valid 0.25%, test 0.25%; .npy id files), so ``--rows labeled`` works.
  edge_index [2, m] int64 and the features are written as .npy and the graph store is built once
  with the CLI:  gnnprep ingest edges.npy --num-nodes n --features x.npy --labels y.npy
  --splits splits/ -o graph.h5 --json  (whatever ingest puts in the store, e.g. a node order
  /order/community, is part of the store and is used by precompute). graph.h5 is rebuilt from the
  cached .npy files with --reingest, or by itself when gnnprep's ingest sources (ingest.py,
  reorder.py, csr_builder.py, sources/*.py) changed since it was built; ingest's wall seconds, peak
  RSS and report are printed, not part of the targets.

Measured, each command in its own process (benchmarks/launcher.py: wall seconds of the whole process,
from spawn to exit, and that process's own peak RSS via wait4):
  one untimed  gnnprep precompute  run first, with NUMBA_CACHE_DIR = <workdir>/numba-warm, to
  populate that cache (and to reveal a kernel edit since the last benchmark). Then --rounds R
  (default 3) rounds, each running in this order:
  (a) warm:  python -m gnnprep precompute graph.h5 --hops 3 -o out.h5 --json [--rows] [--memory-budget]
             with NUMBA_CACHE_DIR = <workdir>/numba-warm (populated);
  (b) cold:  the same command with NUMBA_CACHE_DIR = a fresh empty temporary folder (deleted after),
             so every numba kernel is compiled inside the process;
  (c) peer:  the scipy recipe (python -c, inline below): reads /adj/indptr, /adj/indices and
             /nodes/features from graph.h5 with h5py ("load", NOT counted), then times
             (i) normalisation: S = D^-1/2 (A + I) D^-1/2 as a float32 scipy CSR (A unit weights,
                 A + I via scipy, deg = row sums of A + I = row counts + 1, diag @ (A + I) @ diag),
             (ii) products: x = S @ x three times (float32), every hop kept in memory.
             The peer's acceptance figure is normalise + products seconds. Its whole-process wall
             is reported too ("peer process": the launcher's wall minus the seconds it spent saving
             hop 3 to a .npy in round 1, which the comparison needs; raw wall in the JSON).
  Before every gnnprep run a node order kept *beside* the store by an earlier run
  (<store>.order-<kind>.npz) is deleted, so each run finds (or reads from the store) its order
  itself; --keep-order-cache keeps it. out.h5 is deleted after every run (round 1's warm output
  only after the max relative error of its hop 3 against the peer's, max|ours - ref| / max|ref|,
  over the artifact's /rows, has been taken).

Printed: per round warm s, cold s, cold - warm, peer normalise + products s, peer process s,
peer(norm+products) / gnnprep warm process, peak RSS of each process; medians over rounds; the
verdicts (ratio of the medians >= 2.0; median cold - warm <= 5 s); gnnprep's plan, hop_seconds and
reorder report (the JSON on the last line of its stdout, from the last warm run); the max relative
error; the CPU idle share before each round (the machine may be shared: timings are noisy); then
one JSON line with every figure.

    .venv/bin/python benchmarks/bench_uniform.py                 # 1M nodes, >= 20M entries, 3 rounds
    .venv/bin/python benchmarks/bench_uniform.py --quick         # 100k nodes, >= 2M entries, 1 round
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import ROOT, GiB, cpu_idle, run_json, verdict

HOPS = 3
CLASSES = 10
SPLIT_SHARES = {"train": 0.015, "valid": 0.0025, "test": 0.0025}
ROW_CHUNK = 1 << 18
TARGET_RATIO, TARGET_COLD_EXTRA = 2.0, 5.0



# -- generation ------------------------------------------------------------------------------------
def ensure_inputs(folder: Path, args) -> dict:
    """edges.npy, x.npy, y.npy and splits/ in ``folder`` (generated once); their meta."""
    meta_path = folder / "inputs.json"
    if meta_path.is_file():
        return json.loads(meta_path.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    n = args.nodes
    print(f"generating {folder} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    src, dst, nnz = H.uniform_destination_edges(n, args.nnz, args.alpha, rng)
    np.save(folder / "edges.npy", np.stack([src, dst]))
    m = len(src)
    del src, dst
    H.write_normal_features(folder / "x.npy", n, args.dim, rng, ROW_CHUNK)
    counts = {k: max(1, round(v * n)) for k, v in SPLIT_SHARES.items()}
    chosen = rng.choice(n, sum(counts.values()), replace=False)
    y = np.full(n, -1, np.int64)
    y[chosen] = rng.integers(0, CLASSES, len(chosen))
    np.save(folder / "y.npy", y)
    (folder / "splits").mkdir(exist_ok=True)
    start = 0
    for name, k in counts.items():
        np.save(folder / "splits" / f"{name}.npy", np.sort(chosen[start:start + k]))
        start += k
    meta = {"nodes": n, "directed_edges": m, "stored_nnz": nnz, "dim": args.dim, "alpha": args.alpha,
            "seed": args.seed, "labeled": int(len(chosen)), "generate_seconds": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta))
    return meta


def ingest_code_hash() -> str:
    """sha256 of the sources that decide what ingest stores (a stale cached store is rebuilt)."""
    h = hashlib.sha256()
    for p in sorted([*ROOT.glob("gnnprep/graph/ingest.py"), *ROOT.glob("gnnprep/graph/order.py"),
                     *ROOT.glob("gnnprep/sparse/order.py"), *ROOT.glob("gnnprep/sparse/csr_builder.py"),
                     *ROOT.glob("gnnprep/graph/sources/*.py")]):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def ensure_graph(folder: Path, meta: dict, args) -> dict:
    """graph.h5 built with ``gnnprep ingest`` (once; again with --reingest, or when ingest's sources
    changed since); its ingest figures."""
    graph, info_path = folder / "graph.h5", folder / "ingest.json"
    code = ingest_code_hash()
    if graph.is_file() and info_path.is_file() and not args.reingest:
        info = json.loads(info_path.read_text())
        if info.get("ingest_code") == code:
            return info
        print("ingest's sources changed since the cached store was built: rebuilding it", file=sys.stderr)
    graph.unlink(missing_ok=True)
    for p in folder.glob("graph.order-*.npz"):
        p.unlink()
    print(f"ingesting {meta['directed_edges']:,} directed edges ...", file=sys.stderr, flush=True)
    cmd = H.gnnprep_cmd("ingest", folder / "edges.npy", "--num-nodes", meta["nodes"], "--features", folder / "x.npy",
                        "--labels", folder / "y.npy", "--splits", folder / "splits", "-o", graph, "--json")
    r = run_json(cmd, log=folder / "ingest.log")
    rep = r["report"]
    if rep.get("num_edges") is not None and rep["num_edges"] != meta["stored_nnz"]:
        sys.exit(f"ingest stored {rep['num_edges']:,} entries; generation counted {meta['stored_nnz']:,}")
    info = {"ingest_seconds": round(r["seconds"], 2), "ingest_peak_rss": r["peak_rss"], "ingest_code": code,
            "ingest_report": {k: v for k, v in rep.items() if k not in ("output", "source")}}
    info_path.write_text(json.dumps(info))
    return info


def store_facts(graph: Path) -> dict:
    import h5py

    deg = H.degree_summary(graph)
    with h5py.File(graph, "r") as f:
        orders = sorted(f["order"].keys()) if "order" in f else []
    return {"degree_max": deg["max"], "degree_p99": deg["p99"], "degree_median": deg["median"],
            "isolated": deg["isolated"], "orders_in_store": orders}


# -- measured runs ---------------------------------------------------------------------------------
@contextmanager
def numba_cache(path: Path):
    old = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("NUMBA_CACHE_DIR", None)
        else:
            os.environ["NUMBA_CACHE_DIR"] = old


def clear_side_orders(graph: Path) -> None:
    for p in graph.parent.glob(graph.stem + ".order-*.npz"):
        p.unlink(missing_ok=True)


def precompute(graph: Path, out: Path, cache: Path, log: Path, args) -> dict:
    if not args.keep_order_cache:
        clear_side_orders(graph)
    H.clear_output(out)
    cmd = H.gnnprep_cmd("precompute", graph, "--hops", HOPS, "-o", out, "--json", "--rows", args.rows)
    if args.memory_budget:
        cmd += ["--memory-budget", args.memory_budget]
    with numba_cache(cache):
        return run_json(cmd, log=log)


def peer(graph: Path, save: Path | None, log: Path) -> dict:
    r = run_json(H.child("child_precompute", "scipy", graph, HOPS, save if save else "-"), log=log)
    rep = r.pop("report")
    return {"seconds": r["seconds"], "peak_rss": r["peak_rss"], **rep,
            "norm_products_seconds": rep["build_seconds"] + rep["products_seconds"],
            "process_seconds": r["seconds"] - rep["save_seconds"]}


def relative_error(out: Path, ref_npy: Path) -> float:
    import h5py

    ref = np.load(ref_npy, mmap_mode="r")
    with h5py.File(out, "r") as f:
        rows = f["rows"][:].astype(np.int64)
        ours = f[f"hops/{HOPS}"][:].astype(np.float64)
    return H.max_rel_error(ours, np.asarray(ref[rows], dtype=np.float64))


def gib(b) -> str:
    return f"{b / GiB:.2f}" if b is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_size_args(ap, quick_help="smoke run: 100k nodes, 2M entries, 1 round")
    ap.add_argument("--alpha", type=float, default=1.5, help="Pareto shape of the source weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (quick 1)")
    ap.add_argument("--rows", choices=("all", "labeled"), default="all")
    ap.add_argument("--memory-budget", default=None, help="passed to precompute (default: gnnprep chooses)")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-uniform")
    ap.add_argument("--reingest", action="store_true", help="rebuild graph.h5 from the cached inputs")
    ap.add_argument("--keep-order-cache", action="store_true",
                    help="keep a node order saved beside the store between runs (default: deleted before each)")
    ap.add_argument("--keep", action="store_true", help="keep the peer's hop .npy")
    args = ap.parse_args()
    H.quick_defaults(args)
    os.chdir(ROOT)   # python -m gnnprep resolves to this checkout

    work = Path(args.workdir)
    folder = work / f"uniform_n{args.nodes}_nnz{args.nnz}_a{args.alpha}_d{args.dim}_s{args.seed}"
    meta = ensure_inputs(folder, args)
    ingest_info = ensure_graph(folder, meta, args)
    graph = folder / "graph.h5"
    facts = store_facts(graph)
    run_dir = folder / f"run-{os.getpid()}"
    run_dir.mkdir()
    out, ref_npy, warm_cache = run_dir / "out.h5", run_dir / "peer-hop3.npy", work / "numba-warm"
    warm_cache.mkdir(parents=True, exist_ok=True)
    n, nnz = meta["nodes"], meta["stored_nnz"]
    print(f"graph: {n:,} nodes, {nnz:,} stored entries ({meta['directed_edges']:,} generated edges; src Pareto("
          f"{args.alpha}) weights, dst uniform), d={args.dim}; degree max {facts['degree_max']:,}, p99 "
          f"{facts['degree_p99']:.0f}, median {facts['degree_median']:.0f}, isolated {facts['isolated']:,}; "
          f"orders in store: {facts['orders_in_store'] or 'none'}; store {graph}", flush=True)
    print(f"  generated in {meta['generate_seconds']} s; ingest (CLI, not part of the targets) "
          f"{ingest_info['ingest_seconds']} s, peak RSS {gib(ingest_info['ingest_peak_rss'])} GiB", flush=True)

    rounds, error, populate = [], None, None
    try:
        print("populating the warm numba cache (untimed run) ...", file=sys.stderr, flush=True)
        populate = precompute(graph, out, warm_cache, run_dir / "populate.log", args)
        H.clear_output(out)
        for i in range(args.rounds):
            idle = cpu_idle()
            print(f"round {i + 1}/{args.rounds} (cpu idle {idle}) ...", file=sys.stderr, flush=True)
            warm = precompute(graph, out, warm_cache, run_dir / f"warm{i}.log", args)
            first = i == 0
            if not first:
                H.clear_output(out)
            cold_dir = Path(tempfile.mkdtemp(prefix="numba-cold-", dir=work))
            try:
                cold_out = run_dir / "out-cold.h5"
                cold = precompute(graph, cold_out, cold_dir, run_dir / f"cold{i}.log", args)
                H.clear_output(cold_out)
            finally:
                shutil.rmtree(cold_dir, ignore_errors=True)
            pr = peer(graph, ref_npy if first else None, run_dir / f"peer{i}.log")
            if first:
                error = relative_error(out, ref_npy)
                H.clear_output(out)
            rounds.append({"cpu_idle": idle, "warm": warm, "cold": cold, "peer": pr,
                           "cold_minus_warm": cold["seconds"] - warm["seconds"],
                           "ratio": pr["norm_products_seconds"] / warm["seconds"]})
            print(f"  warm {warm['seconds']:.2f} s, cold {cold['seconds']:.2f} s, peer norm+products "
                  f"{pr['norm_products_seconds']:.2f} s", file=sys.stderr, flush=True)
    finally:
        H.clear_output(out)
        if not args.keep:
            ref_npy.unlink(missing_ok=True)

    med = lambda key: H.median(key(r) for r in rounds)  # noqa: E731
    warm_med, cold_med = med(lambda r: r["warm"]["seconds"]), med(lambda r: r["cold"]["seconds"])
    peer_np_med = med(lambda r: r["peer"]["norm_products_seconds"])
    peer_proc_med = med(lambda r: r["peer"]["process_seconds"])
    extra_med = med(lambda r: r["cold_minus_warm"])
    ratio = peer_np_med / warm_med
    ok_ratio, ok_cold = ratio >= TARGET_RATIO, extra_med <= TARGET_COLD_EXTRA

    print()
    print(f"{'round':<7}{'warm s':>9}{'cold s':>9}{'cold-warm':>11}{'peer n+p s':>12}{'peer proc s':>13}"
          f"{'ratio':>8}   peak RSS GiB warm/cold/peer   cpu idle")
    for i, r in enumerate(rounds):
        print(f"{i + 1:<7}{r['warm']['seconds']:9.2f}{r['cold']['seconds']:9.2f}{r['cold_minus_warm']:11.2f}"
              f"{r['peer']['norm_products_seconds']:12.2f}{r['peer']['process_seconds']:13.2f}{r['ratio']:8.2f}   "
              f"{gib(r['warm']['peak_rss'])} / {gib(r['cold']['peak_rss'])} / {gib(r['peer']['peak_rss'])}"
              f"{'':>14}{r['cpu_idle']}")
    print(f"{'median':<7}{warm_med:9.2f}{cold_med:9.2f}{extra_med:11.2f}{peer_np_med:12.2f}{peer_proc_med:13.2f}"
          f"{ratio:8.2f}   (ratio = median peer n+p / median warm)")
    for i, r in enumerate(rounds):
        p = r["peer"]
        print(f"  peer round {i + 1}: load {p['load_seconds']:.2f} s (not counted), normalise "
              f"{p['build_seconds']:.2f} s, products {p['products_seconds']:.2f} s (hops "
              f"{', '.join(f'{h:.2f}' for h in p['hop_seconds'])}), process wall {p['seconds']:.2f} s"
              + (f" incl. {p['save_seconds']:.2f} s saving hop 3" if p["save_seconds"] else ""))
    print(f"target: warm process >= {TARGET_RATIO}x faster than peer normalise + products: {ratio:.2f}x -> "
          f"{verdict(ok_ratio)}")
    print(f"target: cold - warm <= {TARGET_COLD_EXTRA} s: {extra_med:.2f} s -> {verdict(ok_cold)}")
    rep = rounds[-1]["warm"]["report"]
    plan = rep.get("plan") or {}
    print(f"gnnprep (last warm run) report: seconds {rep.get('seconds')}, hop_seconds {rep.get('hop_seconds')}")
    print(f"  plan: {json.dumps(plan)}")
    print(f"  reorder: {json.dumps(rep.get('reorder'))}")
    for i, r in enumerate(rounds):
        w, c = r["warm"]["report"], r["cold"]["report"]
        ro = lambda x: (x.get("reorder") or {}).get("seconds")  # noqa: E731
        print(f"  round {i + 1}: report seconds warm {w.get('seconds')} (process {r['warm']['seconds']:.2f}), cold "
              f"{c.get('seconds')} (process {r['cold']['seconds']:.2f}); order-finding seconds warm {ro(w)}, cold {ro(c)}")
    if rep.get("warnings"):
        print(f"  warnings: {rep.get('warnings')}")
    cold_rep = rounds[-1]["cold"]["report"]
    print(f"  cold run report: seconds {cold_rep.get('seconds')}, hop_seconds {cold_rep.get('hop_seconds')}")
    print(f"  untimed populate run (warm cache filled): {populate['seconds']:.2f} s")
    print(f"max relative error of gnnprep's hop {HOPS} vs the peer's (round 1 warm output): {error:.2e}")
    print(f"nnz of S: peer {rounds[0]['peer']['nnz_S']:,} = stored {nnz:,} + n {n:,}: "
          f"{rounds[0]['peer']['nnz_S'] == nnz + n}")
    print("(shared machine: timings are noisy)")

    def slim(r):
        return {k: v for k, v in r.items() if k != "report"}
    res = {"nodes": n, "stored_nnz": nnz, "directed_edges": meta["directed_edges"], "dim": args.dim,
           "alpha": args.alpha, "seed": args.seed, "hops": HOPS, "rows": args.rows, "memory_budget": args.memory_budget,
           "generate_seconds": meta["generate_seconds"], **ingest_info, **facts,
           "populate_seconds": populate["seconds"] if populate else None,
           "rounds": [{"cpu_idle": r["cpu_idle"], "warm": slim(r["warm"]), "cold": slim(r["cold"]),
                       "peer": {k: v for k, v in r["peer"].items()},
                       "cold_minus_warm": r["cold_minus_warm"], "ratio": r["ratio"],
                       "warm_hop_seconds": r["warm"]["report"].get("hop_seconds"),
                       "cold_hop_seconds": r["cold"]["report"].get("hop_seconds"),
                       "warm_reorder": r["warm"]["report"].get("reorder"),
                       "cold_reorder": r["cold"]["report"].get("reorder"),
                       "warm_report_seconds": r["warm"]["report"].get("seconds"),
                       "cold_report_seconds": r["cold"]["report"].get("seconds")} for r in rounds],
           "median": {"warm_seconds": warm_med, "cold_seconds": cold_med, "cold_minus_warm": extra_med,
                      "peer_norm_products_seconds": peer_np_med, "peer_process_seconds": peer_proc_med,
                      "ratio": ratio},
           "target_ratio": TARGET_RATIO, "ratio_ok": ok_ratio,
           "target_cold_extra_seconds": TARGET_COLD_EXTRA, "cold_ok": ok_cold,
           "plan": plan, "hop_seconds": rep.get("hop_seconds"), "reorder": rep.get("reorder"),
           "report_seconds": rep.get("seconds"), "warnings": rep.get("warnings"),
           "max_rel_error": error, "logs": str(run_dir)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
