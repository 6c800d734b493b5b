"""Benchmark: a user operator compiled by ``gnnprep precompute --operator-file`` against the same
operator run the way a message UDF runs in torch (DGL / PyG: gather, per-edge multiply, scatter),
and against the built-in ``sym`` kernel (issue 16, acceptance 2).

The graph is the 1M-node bench graph of ``benchmarks/bench_precompute.py`` (same generator, from
benchmarks/harness.py; power-law with communities, >= 20M stored entries, d = 128 standard-normal float32
features): an ingested copy cached by an earlier bench run is reused (--graph, else
/tmp/bw/<tag>/graph.h5 or /tmp/gnnprep-bench-pre/<tag>/graph.h5 when present), else it is generated
and ingested once into --workdir. The store is unweighted, so the script copies it into --workdir
(never touching the original) and adds ``/adj/weights`` to the copy: float32, one per stored entry,
aligned with /adj/indices, symmetric by construction, w(u, v) = w(v, u) = 0.5 + 1.5 * h(min, max) in
[0.5, 2), h a splitmix64 hash of the pair mapped to [0, 1). The store's ``fingerprint`` hashes the
CSR pattern only (indptr, indices), so it stays valid and is left as is; a node-order cache kept
beside the original store (same fingerprint) is copied beside the copy.

The user operator, in benchmarks/udf_ops.py (a source, a destination and an edge factor):

    def weighted_gcn(src_deg, dst_deg, w):
        return w * src_deg ** -0.5 * dst_deg ** -0.5
    weighted_gcn.loop = 1.0

Each variant runs in its own process, on the weighted copy, with the same --hops K:

  (a) compiled:  gnnprep precompute W.h5 -o A.h5 --hops K --device cpu --memory-budget B
                 --operator-file udf_ops.py:weighted_gcn --json
  (e) edge values: the same with udf_ops.py:sqrt_weight_gcn, sqrt(w) / sqrt(d̃_u d̃_v): its edge factor
                 is not the stored weight, so the planner computes CSR values e(w) once (weighted_gcn's
                 edge factor is w itself: the kernel reads the stored weights, nothing is computed)
  (h) high budget: (a) with --high-budget (default 4GiB: one column block of 128; faster, and
                 holds two full n x d buffers: what the memory ratio gives up for it)
  (b) built-in:  the same with --operator sym instead (on a weighted store sym reads the weights too:
                 S = D̃^-1/2 (W + I) D̃^-1/2, the same operator and the same kernel variant)
  (c) naive:     torch, the way a UDF runs: load the CSR, the weights and X; weighted degrees + loop;
                 the coefficient of every entry from the same Python function (evaluated once, before
                 the timed hops, its time reported apart: a UDF would pay it every hop); then per hop
                     msg = h.index_select(0, src); msg *= coef[:, None]        (|E| x d float32)
                     out = zeros; out.index_add_(0, dst, msg); out += loop_coef[:, None] * h
                 hop K is saved and compared with (a)'s.

One untimed warm-up run of (a) first (page cache, numba's cache). Then --rounds rounds of (a), (e), (h)
and (b), the order rotated each round, then (c) once (--naive-rounds). B = --memory-budget (default 1GiB:
S resident, X in two column blocks of 64, so the plan holds two n x 64 buffers where (c) holds an
|E| x 128 one; the memory target is a statement about a budget, and (h) shows the other side of it).
(c) materialises an |E| x d float32 message tensor (~10 GB at 20M entries): it is skipped,
with a message, when MemAvailable is below its estimated peak + 1 GiB.

Printed: per variant the hop seconds (for (a), (b): the JSON's hop_seconds[1:] summed, i.e. without
reading X / writing hop 0; for (c): the timed hop loop), the whole command's wall seconds, and the
process's peak RSS (ru_maxrss of the process itself, through benchmarks/launcher.py; for (a),
(b) also the JSON's measured_peak_bytes); median and range over the rounds. Ratios: naive/compiled
time (target >= 5) and peak memory (target >= 10) for (a) and for (h), compiled/sym time for (a) and
(e) (target <= 1.2), using medians (and for the memory ratio also the peak above a process that only
imported torch, numpy and h5py; for compiled/sym also over hops 2..K only, since (e) computes its CSR
values e(w) inside hop 1). Per-hop medians and each command's time outside the hops are printed too.
Max relative error (max |diff| / max |ref|) of hop K: naive vs compiled, compiled vs sym (the same
formula). The load average before and after (a shared 2-core machine: other jobs add noise).

    .venv/bin/python benchmarks/bench_udf.py                 # K = 3, 3 rounds: ~4-5 min (+10 s to make the copy)
    .venv/bin/python benchmarks/bench_udf.py --hops 2 --rounds 5
    .venv/bin/python benchmarks/bench_udf.py --no-naive      # (a) and (b) only
    .venv/bin/python benchmarks/bench_udf.py --quick         # 100k nodes, 1 round: smoke run (< 1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import GiB, load_avg, verdict
from benchmarks.harness import median as med

NAME = "weighted_gcn"
EDGE = "sqrt_weight_gcn"
OPS = H.HERE / "udf_ops.py"   # the user operators (weighted_gcn, sqrt_weight_gcn)
VARIANTS = ("a", "e", "h", "b")
LABELS = {"a": f"(a) compiled --operator-file udf_ops.py:{NAME}", "e": f"(e) compiled udf_ops.py:{EDGE} (CSR values e(w))",
          "h": "(h) (a) at --high-budget", "b": "(b) built-in --operator sym"}

# -- the weighted copy ----------------------------------------------------------------------------
def splitmix_unit(keys: np.ndarray) -> np.ndarray:
    """splitmix64 of uint64 keys mapped to [0, 1) (float64)."""
    z = keys + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def find_graph(args, work: Path) -> Path:
    if args.graph:
        return Path(args.graph).absolute()
    return H.find_graph(args, work) or H.ensure_graph(work, args)[0]


def weighted_copy(src: Path, work: Path) -> Path:
    """``src`` copied to work/<parent>-weighted.h5 with /adj/weights added (cached by the source's
    size and mtime)."""
    import h5py

    dst = work / f"{src.parent.name}-weighted.h5"
    st = src.stat()
    stamp = f"{src.absolute()}|{st.st_size}|{st.st_mtime_ns}"
    if dst.exists():
        with h5py.File(dst, "r") as f:
            if f.attrs.get("bench_udf_source") == stamp and "adj/weights" in f:
                return dst
    t0 = time.perf_counter()
    tmp = dst.with_suffix(".h5.tmp")
    shutil.copyfile(src, tmp)
    with h5py.File(tmp, "r+") as f:
        indptr = f["adj/indptr"][:]
        n, m = len(indptr) - 1, int(indptr[-1])
        chunks = f["adj/indices"].chunks or (min(m, 1 << 18),)
        ds = f["adj"].create_dataset("weights", shape=(m,), dtype=np.float32, chunks=chunks)
        rows_all = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))  # the row of every entry
        step = 1 << 21  # entries per block
        for p0 in range(0, m, step):
            p1 = min(m, p0 + step)
            rows = rows_all[p0:p1]
            cols = f["adj/indices"][p0:p1].astype(np.int64)
            lo, hi = np.minimum(rows, cols), np.maximum(rows, cols)
            ds[p0:p1] = (0.5 + 1.5 * splitmix_unit((lo * n + hi).astype(np.uint64))).astype(np.float32)
        del rows_all
        f.attrs["bench_udf_source"] = stamp
        # the weights are symmetric by construction; spot-check entries against their reverse
        rng = np.random.default_rng(0)
        w = ds[:]
        idx = f["adj/indices"][:]
        for p in rng.integers(0, m, 2000):
            v = int(np.searchsorted(indptr, p, side="right") - 1)
            u = int(idx[p])
            q = int(indptr[u]) + int(np.searchsorted(idx[indptr[u]:indptr[u + 1]], v))
            assert idx[q] == v and w[q] == w[p], (p, q)
    os.replace(tmp, dst)
    for order in src.parent.glob(src.name.removesuffix(".h5") + ".order-*.npz"):  # node-order caches
        shutil.copyfile(order, work / (dst.name.removesuffix(".h5") + order.name[len(src.name) - 3:]))
    print(f"weighted copy {dst} made in {time.perf_counter() - t0:.1f} s", flush=True)
    return dst


# -- running ----------------------------------------------------------------------------------------
def run_gnnprep(v: str, graph: Path, work: Path, args, tag: str) -> dict:
    out = work / f"{v.upper()}.h5"
    H.clear_output(out)
    op = {"a": ["--operator-file", f"{OPS}:{NAME}"], "h": ["--operator-file", f"{OPS}:{NAME}"],
          "e": ["--operator-file", f"{OPS}:{EDGE}"], "b": ["--operator", "sym"]}[v]
    budget = args.high_budget if v == "h" else args.memory_budget
    cmd = H.gnnprep_cmd("precompute", graph, "-o", out, "--hops", args.hops, "--device", "cpu", "--memory-budget",
                        budget, "--json", "--quiet", *op)
    r = H.run_json(cmd, work / "logs" / f"{tag}.err")
    rep = r["report"]
    return {"wall": r["seconds"], "peak_rss": r["peak_rss"], "hops": sum(rep["hop_seconds"][1:]),
            "hop_seconds": rep["hop_seconds"], "seconds": rep["seconds"],
            "measured_peak": rep.get("measured_peak_bytes"), "report": rep}


def naive_estimate(n: int, m: int, d: int) -> int:
    """Peak bytes of (c): the message tensor, two n x d tensors, src/dst int64 + coef, libraries."""
    return m * d * 4 + 2 * n * d * 4 + m * (8 + 8 + 4) + 1 * GiB


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def rng(xs, fmt="{:.2f}"):
    return H.span(xs, fmt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-udf")
    ap.add_argument("--graph", default=None, help="an existing (unweighted) graph store to copy and weight")
    H.add_size_args(ap)
    ap.add_argument("--hops", type=int, default=3, help="K (default 3, precompute's default)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of (a) and (b) (default 3; quick 1)")
    ap.add_argument("--naive-rounds", type=int, default=1, help="runs of (c) (default 1)")
    ap.add_argument("--memory-budget", default="1GiB",
                    help="--memory-budget of (a), (e) and (b) (default 1GiB: S resident, two column blocks of 64)")
    ap.add_argument("--high-budget", default="4GiB", help="--memory-budget of (h) (default 4GiB: one column block)")
    ap.add_argument("--no-naive", action="store_true", help="skip (c)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of (a)")
    ap.add_argument("--keep", action="store_true", help="keep the outputs")
    H.add_generator_args(ap)  # the bench graph's generator parameters
    args = ap.parse_args()
    H.quick_defaults(args)

    import h5py

    work = Path(args.workdir).absolute()
    (work / "logs").mkdir(parents=True, exist_ok=True)
    t_total = time.perf_counter()
    la0 = load_avg()
    print(f"at the start: {H.machine_line()}", flush=True)
    src = find_graph(args, work)
    graph = weighted_copy(src, work)
    with h5py.File(graph, "r") as f:
        n, d = f["nodes/features"].shape
        m = int(f["adj/indptr"][-1])
        w = f["adj/weights"][:]
        fp = f.attrs.get("fingerprint")
    print(f"graph: {graph} (copy of {src})\n  {n:,} nodes, {m:,} stored entries, d={d}, K={args.hops}; "
          f"weights in [{w.min():.3f}, {w.max():.3f}], mean {w.mean():.3f}; fingerprint {fp} (CSR only)")
    del w
    print(f"  operator: {OPS}:{NAME} (w / sqrt(d̃_u d̃_v), loop 1); --memory-budget {args.memory_budget}",
          flush=True)

    if not args.no_warmup:
        t0 = time.perf_counter()
        r = run_gnnprep("a", graph, work, args, "warmup")
        print(f"warm-up run of (a), untimed: {time.perf_counter() - t0:.1f} s; plan: "
              f"{json.dumps(r['report'].get('plan', {}))[:400]}", flush=True)

    res = {v: [] for v in VARIANTS}
    print(f"\n{'round':>5} {'load avg before':>16}  " + "  ".join(f"({v}) hops ({v}) wall" for v in VARIANTS)
          + f"  {'a/b hops':>8} {'e/b hops':>8}")
    for i in range(args.rounds):
        la = load_avg()
        order = list(VARIANTS[i % len(VARIANTS):] + VARIANTS[:i % len(VARIANTS)])  # rotated each round
        got = {}
        for v in order:
            got[v] = run_gnnprep(v, graph, work, args, f"r{i + 1}_{v}")
            res[v].append(got[v])
        print(f"{i + 1:>5} {la:>16}  " + "  ".join(f"{got[v]['hops']:8.2f} {got[v]['wall']:8.2f}" for v in VARIANTS)
              + f"  {got['a']['hops'] / got['b']['hops']:8.3f} {got['e']['hops'] / got['b']['hops']:8.3f}"
              f"   (order {','.join(order)})", flush=True)

    naive = []
    naive_note = None
    if not args.no_naive:
        need, avail = naive_estimate(n, m, d), mem_available()
        if avail < need + GiB:
            naive_note = (f"(c) skipped: it needs ~{need / GiB:.1f} GiB (an |E| x d message tensor of "
                          f"{m * d * 4 / GiB:.1f} GiB) and only {avail / GiB:.1f} GiB is available")
            print(naive_note)
        else:
            print(f"\n(c) naive: ~{need / GiB:.1f} GiB estimated peak, {avail / GiB:.1f} GiB available; "
                  f"load average {load_avg()}", flush=True)
            for j in range(args.naive_rounds):
                save = work / "naive_hopK.npy"
                r = H.run_json(H.child("child_udf", "naive", graph, OPS, NAME, args.hops, save),
                               work / "logs" / f"naive{j + 1}.err")
                rep = r["report"]
                naive.append({"wall": r["seconds"], "peak_rss": r["peak_rss"], "hops": rep["hops_seconds"], **rep})
                print(f"  run {j + 1}: hops {rep['hops_seconds']:.2f} s (per hop "
                      f"{[round(s, 2) for s in rep['hop_seconds']]}), load {rep['load_seconds']:.2f} s, "
                      f"coefficients {rep['coef_seconds']:.2f} s, wall {r['seconds']:.2f} s, peak RSS "
                      f"{r['peak_rss'] / GiB:.2f} GiB; torch {rep['torch']} with {rep['threads']} threads", flush=True)
    la1 = load_avg()
    imports = H.run_json(H.child("child_udf", "imports"))["report"]["vmhwm"]

    # -- errors ---------------------------------------------------------------------------------------
    K = args.hops
    hop_a = H.read_hop(work / "A.h5", f"channels/{NAME}/{K}")
    hop_b = H.read_hop(work / "B.h5", f"channels/sym/{K}")
    err_ab = H.max_rel_error(hop_a, hop_b)
    err_la = H.max_rel_error(H.read_hop(work / "H.h5", f"channels/{NAME}/{K}"), hop_a)
    del hop_b
    print(f"max rel. error hop {K}, (h) vs (a): {err_la:.2e}")
    err_ca = None
    if naive:
        hop_c = np.load(work / "naive_hopK.npy")
        err_ca = H.max_rel_error(hop_c, hop_a)
        del hop_c
    del hop_a

    # -- table ------------------------------------------------------------------------------------------
    A, B, E, L = res["a"], res["b"], res["e"], res["h"]
    print(f"\nK = {K} hops, d = {d}, {n:,} nodes, {m:,} stored entries; median [range] over "
          f"{args.rounds} rounds for (a), (b); {len(naive)} run(s) of (c)")
    print(f"{'variant':<50} {'hop s':>16} {'whole s':>16} {'peak RSS':>20} {'self-reported':>14}")
    rows = [(LABELS[v], res[v]) for v in VARIANTS]
    for label, rs in rows:
        hs, ws, ps = [r["hops"] for r in rs], [r["wall"] for r in rs], [r["peak_rss"] / GiB for r in rs]
        mp = [r["measured_peak"] for r in rs if r["measured_peak"]]
        print(f"{label:<50} {med(hs):6.2f} [{rng(hs)}] {med(ws):6.2f} [{rng(ws)}] "
              f"{med(ps):6.2f} GiB [{rng(ps)}] {(med(mp) / GiB if mp else float('nan')):10.2f} GiB")
    if naive:
        hs, ws, ps = [r["hops"] for r in naive], [r["wall"] for r in naive], [r["peak_rss"] / GiB for r in naive]
        print(f"{'(c) naive torch UDF (index_select/mul/index_add_)':<50} {med(hs):6.2f} [{rng(hs)}] "
              f"{med(ws):6.2f} [{rng(ws)}] {med(ps):6.2f} GiB [{rng(ps)}]")
        print(f"    (c) outside the hops: load {med([r['load_seconds'] for r in naive]):.2f} s, coefficients "
              f"once {med([r['coef_seconds'] for r in naive]):.2f} s (not in its hop s; a UDF would pay it per hop)")
    elif naive_note:
        print(f"(c) {naive_note}")
    for label, rs in ((f"({v})", res[v]) for v in VARIANTS):
        per = [med([r["hop_seconds"][k] for r in rs]) for k in range(K + 1)]
        setup = med([r["seconds"] - sum(r["hop_seconds"]) for r in rs])
        print(f"    {label} per hop (median; index 0 = reading X / writing hop 0): {[round(x, 2) for x in per]}; "
              f"outside the hops {setup:.2f} s; predicted peak {rs[-1]['report'].get('predicted_peak_bytes', 0) / GiB:.2f} GiB")
    if naive:
        print(f"    (c) per hop: {[round(x, 2) for x in naive[0]['hop_seconds']]}")
    print(f"  hop s: (a), (b) sum of hop_seconds[1:] (hop 0 = reading X / writing it excluded); (c) the timed loop."
          f"\n  whole s: the command's wall time (process start to exit). peak RSS: the process's own ru_maxrss; "
          f"self-reported: the JSON's measured_peak_bytes (above its baseline).\n  a process that only imports "
          f"numpy, h5py and torch peaks at {imports / GiB:.2f} GiB.")

    a_h, b_h, a_p = med([r["hops"] for r in A]), med([r["hops"] for r in B]), med([r["peak_rss"] for r in A])
    print("\nratios (medians):")
    figures = {"compiled_over_sym_time": a_h / b_h, "compiled_over_sym_whole": med([r["wall"] for r in A]) / med([r["wall"] for r in B]),
               "err_compiled_vs_sym": err_ab}
    if naive:
        c_h, c_p = med([r["hops"] for r in naive]), med([r["peak_rss"] for r in naive])
        t_ratio, p_ratio = c_h / a_h, c_p / a_p
        p_above = (c_p - imports) / max(1, a_p - imports)
        print(f"  naive/compiled time (hops):          {t_ratio:7.2f}x  (target >= 5: {verdict(t_ratio >= 5)}); "
              f"with the coefficients in (c)'s hops {(c_h + med([r['coef_seconds'] for r in naive])) / a_h:.2f}x; "
              f"whole commands {med([r['wall'] for r in naive]) / med([r['wall'] for r in A]):.2f}x")
        print(f"  naive/compiled peak RSS:             {p_ratio:7.2f}x  (target >= 10: {verdict(p_ratio >= 10)}); "
              f"above the imports-only process: {p_above:.2f}x")
        l_h, l_p = med([r["hops"] for r in L]), med([r["peak_rss"] for r in L])
        print(f"  at --high-budget {args.high_budget} (h): naive/compiled time {c_h / l_h:.2f}x "
              f"(>= 5: {verdict(c_h / l_h >= 5)}), peak RSS {c_p / l_p:.2f}x (>= 10: {verdict(c_p / l_p >= 10)})")
        figures.update(high_budget_naive_over_compiled_time=c_h / l_h, high_budget_naive_over_compiled_peak=c_p / l_p)
        figures.update(naive_over_compiled_time=t_ratio, naive_over_compiled_peak=p_ratio,
                       naive_over_compiled_peak_above_imports=p_above, err_naive_vs_compiled=err_ca)
    if K >= 2:  # hops 2..K: without hop 1, where the compiled plan also computes its CSR values e(w)
        steady = med([sum(r["hop_seconds"][2:]) for r in A]) / med([sum(r["hop_seconds"][2:]) for r in B])
        figures["compiled_over_sym_hops_2_to_K"] = steady
    e_h = med([r["hops"] for r in E])
    figures["edge_values_over_sym_time"] = e_h / b_h
    print(f"  (e) CSR values e(w)/sym time (hops): {e_h / b_h:7.3f}x  (target <= 1.2: {verdict(e_h / b_h <= 1.2)}); "
          f"whole commands {med([r['wall'] for r in E]) / med([r['wall'] for r in B]):.3f}x")
    print(f"  compiled/sym time (hops):            {a_h / b_h:7.3f}x  (target <= 1.2: {verdict(a_h / b_h <= 1.2)}); "
          f"whole commands {figures['compiled_over_sym_whole']:.3f}x"
          + (f"; hops 2..K only {figures['compiled_over_sym_hops_2_to_K']:.3f}x" if K >= 2 else ""))
    if naive:
        print(f"  max rel. error hop {K}, naive vs compiled: {err_ca:.2e}  (tolerance 1e-5: {verdict(err_ca <= 1e-5)})")
    print(f"  max rel. error hop {K}, compiled vs sym:   {err_ab:.2e}  (same formula: w / sqrt(d̃_u d̃_v) over W + I)")
    print(f"\nload average (1/5/15 min): before {la0}, after {la1}; total {time.perf_counter() - t_total:.0f} s")
    print(json.dumps({"hops": K, "nodes": n, "entries": m, "dim": d, **figures,
                      "compiled": {"hops": [r["hops"] for r in A], "hop_seconds": [r["hop_seconds"] for r in A], "wall": [r["wall"] for r in A],
                                   "peak_rss": [r["peak_rss"] for r in A]},
                      **{key: {"hops": [r["hops"] for r in res[v]], "wall": [r["wall"] for r in res[v]],
                               "peak_rss": [r["peak_rss"] for r in res[v]]} for key, v in (("edge_values", "e"),
                                                                                           ("high_budget", "h"))},
                      "sym": {"hops": [r["hops"] for r in B], "hop_seconds": [r["hop_seconds"] for r in B], "wall": [r["wall"] for r in B],
                              "peak_rss": [r["peak_rss"] for r in B]},
                      "naive": [{k: r[k] for k in ("hops", "hop_seconds", "wall", "peak_rss", "coef_seconds", "load_seconds")}
                                for r in naive], "load_before": la0, "load_after": la1}))
    if not args.keep:
        for p in ("A.h5", "B.h5", "E.h5", "H.h5", "naive_hopK.npy"):
            H.clear_output(work / p)


if __name__ == "__main__":
    main()
