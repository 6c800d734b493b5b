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
2-core machine are noisy: the run prints how idle the CPU was just before it started.

Both modes end with one JSON line holding every figure.

    .venv/bin/python scripts/bench_precompute.py                   # speed, 1M nodes, >= 20M nnz
    .venv/bin/python scripts/bench_precompute.py --mode budget     # 256MiB budget, ~1.1 GB S + X
    .venv/bin/python scripts/bench_precompute.py --quick           # smoke run (100k nodes), < 1 min
    .venv/bin/python scripts/bench_precompute.py --mode budget --quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import measure  # scripts/measure.py: the launcher that reports a command's own peak RSS

ROOT = Path(__file__).resolve().parents[1]
MiB, GiB = 1024**2, 1024**3

# -- subprocess bodies -----------------------------------------------------------------------------
# Each prints one JSON line on stdout. argv: graph store, K, where to save hop K (or "-").
_LOAD_AND_BUILD_S = r"""
import sys, json, time, numpy as np, h5py, scipy.sparse as sp
graph, K, save = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t_load = time.perf_counter()
with h5py.File(graph, "r") as f:
    indptr = f["adj/indptr"][:]
    indices = f["adj/indices"][:]
    x = f["nodes/features"][:].astype(np.float32, copy=False)
n = len(indptr) - 1
t0 = time.perf_counter()
load = t0 - t_load
# as OGB's papers100M sgc.py: adj.set_diag(); deg = row sums; D^-1/2 adj D^-1/2; to scipy CSR
adj = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(n, n))
adj = (adj + sp.identity(n, dtype=np.float32, format="csr")).tocsr()
deg = np.asarray(adj.sum(axis=1), dtype=np.float32).ravel()
dis = np.zeros_like(deg)
dis[deg > 0] = deg[deg > 0] ** -0.5
S = (sp.diags(dis) @ adj @ sp.diags(dis)).tocsr().astype(np.float32)
del adj
build = time.perf_counter() - t0
"""

SCIPY = _LOAD_AND_BUILD_S + r"""
hops = [x]
hop_s = []
t0 = time.perf_counter()
for _ in range(K):
    t1 = time.perf_counter()
    x = S @ x
    hops.append(x)
    hop_s.append(time.perf_counter() - t1)
products = time.perf_counter() - t0
assert x.dtype == np.float32, x.dtype
t_save = time.perf_counter()
if save != "-":
    np.save(save, hops[-1])
print(json.dumps({"load_seconds": load, "build_seconds": build, "products_seconds": products, "hop_seconds": hop_s,
                  "save_seconds": time.perf_counter() - t_save, "nnz_S": int(S.nnz),
                  "index_dtype": str(S.indices.dtype)}))
"""

TORCH = _LOAD_AND_BUILD_S + r"""
import warnings, torch
if len(sys.argv) > 4:  # argv[4]: repo root -> S and X in gnnprep's community order (order not timed)
    sys.path.insert(0, sys.argv[4])
    from gnnprep.sparse.order import community_order
    order = community_order(indptr, indices)
    S = S[order][:, order].tocsr()
    S.sort_indices()
    x = np.ascontiguousarray(x[order])
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    St = torch.sparse_csr_tensor(torch.from_numpy(S.indptr.astype(np.int64)), torch.from_numpy(S.indices.astype(np.int64)),
                                 torch.from_numpy(S.data), size=(n, n))
    del S
    small = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.ones(2), size=(2, 2))
    torch.sparse.mm(small, torch.ones(2, 4))  # library initialisation outside the timed loop
build += time.perf_counter() - t0
h = torch.from_numpy(x)
hops = [h]
hop_s = []
t0 = time.perf_counter()
for _ in range(K):
    t1 = time.perf_counter()
    h = torch.sparse.mm(St, h)
    hops.append(h)
    hop_s.append(time.perf_counter() - t1)
products = time.perf_counter() - t0
if save != "-":
    np.save(save, hops[-1].numpy())
print(json.dumps({"build_seconds": build, "products_seconds": products, "hop_seconds": hop_s,
                  "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "mkl": bool(torch.backends.mkl.is_available())}))
"""

# argv: graph store, output, K, budget bytes (0: gnnprep's default), repo root, reorder ('': default)
GNNPREP = r"""
import sys, json, time
sys.path.insert(0, sys.argv[5])
from gnnprep.precompute.run import precompute
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.sparse import kernels
from gnnprep.graph import order as kept_order
from gnnprep.sparse import order as node_order
graph, out, K, budget, reorder = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[6]
extra = {"reorder": reorder} if reorder else {}
# numba's JIT (loaded from its on-disk cache) outside the timed call, as torch's initialisation is
kernels.warm_up()
node_order.warm_up()
# an order kept beside the store by an earlier run would be loaded instead of found: time the finding
for kind in ("community", "bfs"):
    kept_order.cache_path(graph, kind).unlink(missing_ok=True)
t0 = time.perf_counter()
rep = precompute(graph, out, PrecomputeConfig(hops=K, device="cpu", memory_budget=budget or None, **extra))
wall = time.perf_counter() - t0
print(json.dumps({"wall_seconds": wall, "report": rep.to_dict()}))
"""

BANDWIDTH = measure.COPY_BANDWIDTH  # numpy copy of 1 GiB, best of 3, in its own process

# argv: repo root
BASELINE = r"""
import sys, json, psutil
sys.path.insert(0, sys.argv[1])
import torch, numpy, h5py
import gnnprep.precompute.run
rss_imports = psutil.Process().memory_info().rss
from gnnprep.sparse.kernels import warm_up
warm_up()
print(json.dumps({"rss_imports": rss_imports, "rss_after_warm_up": psutil.Process().memory_info().rss}))
"""

BASELINE_NO_TORCH = r"""
import sys, json, psutil
sys.path.insert(0, sys.argv[1])
import numpy, h5py
import gnnprep.precompute.run
from gnnprep.sparse.kernels import warm_up
warm_up()
print(json.dumps({"rss": psutil.Process().memory_info().rss, "torch_loaded": "torch" in sys.modules}))
"""


def run_measured(args: list[str], log: Path) -> dict:
    """Run ``python -c BODY args...`` under :mod:`measure`'s launcher (its own peak RSS, not this
    large process's); wall time, peak RSS and the JSON the body printed last on stdout."""
    r = measure.run_measured([sys.executable, "-c", *args], log)
    return {"wall": r["seconds"], "peak_rss": r["peak_rss"], **json.loads(r["stdout"].splitlines()[-1])}


# -- graph generation ------------------------------------------------------------------------------
def _stored_nnz(src: np.ndarray, dst: np.ndarray, n: int) -> int:
    """Stored entries after symmetrising, deduplicating and dropping self-loops."""
    keep = src != dst
    lo, hi = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    return 2 * len(np.unique(lo * n + hi))


def gen_edges(n: int, target_nnz: int, *, community: int, p_in: float, alpha: float, seed: int):
    """Directed edge list (before permutation ids are community-contiguous) with >= target_nnz
    stored entries once symmetrised and deduplicated; returns (src, dst, stored_nnz), ids permuted."""
    rng = np.random.default_rng(seed)
    w = rng.pareto(alpha, n) + 1.0          # node weights: Pareto tail -> power-law degrees
    cum = np.cumsum(w)
    total = cum[-1]

    def draw(m):
        src = np.minimum(np.searchsorted(cum, rng.random(m) * total, side="right"), n - 1)
        lo = (src // community) * community
        hi = np.minimum(lo + community, n)
        base = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
        top = cum[hi - 1]
        inside = np.minimum(np.searchsorted(cum, base + rng.random(m) * (top - base), side="right"), hi - 1)
        outside = np.minimum(np.searchsorted(cum, rng.random(m) * total, side="right"), n - 1)
        dst = np.where(rng.random(m) < p_in, inside, outside)
        return src, dst

    src, dst = draw(int(target_nnz / 2 * 1.1) + 1)
    nnz = _stored_nnz(src, dst, n)
    while nnz < target_nnz:
        missing = target_nnz - nnz
        s2, d2 = draw(int(missing / 2 * 1.5) + 1000)
        src, dst = np.concatenate([src, s2]), np.concatenate([dst, d2])
        nnz = _stored_nnz(src, dst, n)
    perm = rng.permutation(n)
    return perm[src], perm[dst], nnz


def ensure_graph(work: Path, n: int, nnz: int, d: int, args) -> tuple[Path, dict]:
    """The cached graph store for these sizes (generated and ingested on first use)."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.core.sizes import parse_size
    from gnnprep.graph.sources import SourceOptions

    tag = f"plaw_n{n}_nnz{nnz}_d{d}_c{args.community}_p{args.p_in}_a{args.alpha}_s{args.seed}"
    folder = work / tag
    graph = folder / "graph.h5"
    info_path = folder / "info.json"
    if graph.exists() and info_path.exists():
        return graph, json.loads(info_path.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"generating {folder} ...", file=sys.stderr, flush=True)
    src, dst, stored = gen_edges(n, nnz, community=args.community, p_in=args.p_in, alpha=args.alpha, seed=args.seed)
    dtype = np.int32 if n < 2**31 else np.int64
    np.save(folder / "edges.npy", np.stack([src.astype(dtype), dst.astype(dtype)]))
    m = len(src)
    del src, dst
    rng = np.random.default_rng(args.seed + 1)
    x = np.lib.format.open_memmap(folder / "x.npy", mode="w+", dtype=np.float32, shape=(n, d))
    for s in range(0, n, 1 << 18):
        x[s:s + (1 << 18)] = rng.standard_normal((min(1 << 18, n - s), d), dtype=np.float32)
    x.flush()
    del x
    gen_s = time.perf_counter() - t0
    print(f"ingesting ({m:,} directed edges) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rep = ingest(str(folder / "edges.npy"), graph.with_suffix(".h5.tmp"),
                 IngestConfig(memory_budget=parse_size(args.ingest_budget),
                              source=SourceOptions(num_nodes=n, features=str(folder / "x.npy"))))
    os.replace(graph.with_suffix(".h5.tmp"), graph)
    ingest_s = time.perf_counter() - t0
    assert rep.num_edges == stored, (rep.num_edges, stored)
    info = {"nodes": n, "stored_nnz": int(rep.num_edges), "directed_edges": m, "dim": d,
            "generate_seconds": round(gen_s, 2), "ingest_seconds": round(ingest_s, 2)}
    info_path.write_text(json.dumps(info))
    (folder / "edges.npy").unlink()
    (folder / "x.npy").unlink()
    print(f"generated in {gen_s:.1f} s, ingested in {ingest_s:.1f} s", file=sys.stderr, flush=True)
    return graph, info


def degree_summary(graph: Path) -> dict:
    import h5py

    with h5py.File(graph, "r") as f:
        deg = np.diff(f["adj/indptr"][:])
    return {"max": int(deg.max()), "median": float(np.median(deg)), "p99": float(np.percentile(deg, 99)),
            "isolated": int((deg == 0).sum())}


def clear_output(out: Path) -> None:
    for suffix in ("", ".partial", ".partial.json", ".partial.lock"):
        p = out.with_name(out.name + suffix)
        if p.exists():
            p.unlink()


def rel_errors(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max |got - ref| / max |ref|, max over rows of ||got_v - ref_v|| / ||ref_v||)."""
    diff = np.abs(got - ref).max()
    scale = np.abs(ref).max()
    norm_ref = np.linalg.norm(ref, axis=1)
    norm_diff = np.linalg.norm(got - ref, axis=1)
    ok = norm_ref > 0
    row = float((norm_diff[ok] / norm_ref[ok]).max()) if ok.any() else 0.0
    return float(diff / scale) if scale > 0 else float(diff), row


def read_hop(out: Path, k: int) -> np.ndarray:
    import h5py

    with h5py.File(out, "r") as f:  # the features artifact's layout: /hops/<k> [rows, d]
        return f[f"hops/{k}"][:].astype(np.float32, copy=False)


def cpu_idle(seconds: float = 1.0) -> float | None:
    """Share of all cores' time that was idle over ``seconds`` (from /proc/stat); None off Linux."""
    def read():
        with open("/proc/stat") as f:
            v = [int(t) for t in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    try:
        i0, t0 = read()
        time.sleep(seconds)
        i1, t1 = read()
    except (OSError, ValueError, IndexError):
        return None
    return round((i1 - i0) / max(1, t1 - t0), 3)


def gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


# -- modes -----------------------------------------------------------------------------------------
def speed(args, work: Path) -> dict:
    n, nnz_target, d, K = args.nodes, args.nnz, args.dim, args.hops
    graph, info = ensure_graph(work, n, nnz_target, d, args)
    nnz = info["stored_nnz"]
    degs = degree_summary(graph)
    print(f"graph: {n:,} nodes, {nnz:,} stored nonzeros (after symmetrisation/dedup; {info['directed_edges']:,} "
          f"generated edges), d={d}, K={K}; degree max {degs['max']:,}, p99 {degs['p99']:.0f}, "
          f"median {degs['median']:.0f}, isolated {degs['isolated']:,}")
    print(f"  S + X = {gib(nnz * 4 + n * d * 4)} (int32 indices + float32 X); cached store {graph}")
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    ref_path, torch_path, out = work / "ref_scipy.npy", work / "hop_torch.npy", work / "feats_speed.h5"

    bw = run_measured([BANDWIDTH], logs / "bandwidth.err")
    print(f"memory copy bandwidth (numpy, 1 GiB float32, best of 3): {bw['bytes_per_s'] / 1e9:.2f} GB/s read+written")
    sc = run_measured([SCIPY, str(graph), str(K), str(ref_path)], logs / "scipy.err")
    print(f"(i) scipy done: products {sc['products_seconds']:.2f} s", file=sys.stderr, flush=True)
    tc = to = None
    if not args.no_torch:
        tc = run_measured([TORCH, str(graph), str(K), str(torch_path)], logs / "torch.err")
        print(f"(ii) torch done: products {tc['products_seconds']:.2f} s", file=sys.stderr, flush=True)
        if not args.no_torch_ordered:
            to = run_measured([TORCH, str(graph), str(K), "-", str(ROOT)], logs / "torch_ordered.err")
            print(f"(ii') torch, community order: products {to['products_seconds']:.2f} s", file=sys.stderr, flush=True)
    clear_output(out)
    budget = 0 if args.memory_budget is None else parse_budget(args.memory_budget)
    gp = run_measured([GNNPREP, str(graph), str(out), str(K), str(budget), str(ROOT), args.reorder or ""], logs / "gnnprep.err")
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
        clear_output(out)
        for p_ in (ref_path, torch_path):
            if p_.exists():
                p_.unlink()
    return result


def parse_budget(text: str) -> int:
    from gnnprep.core.sizes import parse_size

    return parse_size(text)


def budget_mode(args, work: Path) -> dict:
    budget = parse_budget(args.memory_budget or ("32MiB" if args.quick else "256MiB"))
    d, K = args.dim, args.budget_hops
    deg = args.budget_degree
    n = args.budget_nodes or math.ceil(args.budget_factor * budget / (4 * d + 4 * deg))
    graph, info = ensure_graph(work, n, n * deg, d, args)
    nnz = info["stored_nnz"]
    sx = nnz * 4 + n * d * 4
    print(f"graph: {n:,} nodes, {nnz:,} stored nonzeros, d={d}, K={K}; S + X = {sx / MiB:.0f} MiB "
          f"= {sx / budget:.2f}x the {budget / MiB:.0f} MiB budget {verdict(sx >= 4 * budget)} (>= 4x)")
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    base = run_measured([BASELINE, str(ROOT)], logs / "baseline.err")
    base_nt = run_measured([BASELINE_NO_TORCH, str(ROOT)], logs / "baseline_nt.err")
    out = work / "feats_budget.h5"
    clear_output(out)
    gp = run_measured([GNNPREP, str(graph), str(out), str(K), str(budget), str(ROOT), args.reorder or ""], logs / "gnnprep_budget.err")
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
        run_measured([SCIPY, str(graph), str(K), str(ref_path)], logs / "scipy_budget.err")
        ref = np.load(ref_path, mmap_mode="r")
        err, row_err = rel_errors(read_hop(out, K), np.asarray(ref))
        del ref
        ref_path.unlink()
        print(f"max relative error, gnnprep hop {K} vs scipy: {err:.2e}; worst row {row_err:.2e}")
    if not args.keep:
        clear_output(out)
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


def quick_defaults(args) -> None:
    """The 1M-node bench graph's size and 3 rounds, or with ``--quick`` a 100k-node smoke run of 1."""
    args.nodes = args.nodes or (100_000 if args.quick else 1_000_000)
    args.nnz = args.nnz or (2_000_000 if args.quick else 20_000_000)
    args.rounds = args.rounds or (1 if args.quick else 3)


def add_generator_args(ap) -> None:
    """The bench graph generator's options (shared by the other bench scripts that make this graph)."""
    ap.add_argument("--community", type=int, default=2000, help="nodes per community")
    ap.add_argument("--p-in", type=float, default=0.85, help="share of edges inside the community")
    ap.add_argument("--alpha", type=float, default=1.5, help="Pareto shape of the node weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ingest-budget", default="2GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["speed", "budget"], default="speed")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-pre")
    ap.add_argument("--quick", action="store_true", help="small smoke run (100k nodes; 32MiB budget)")
    ap.add_argument("--nodes", type=int, default=None, help="speed: nodes (default 1,000,000; quick 100,000)")
    ap.add_argument("--nnz", type=int, default=None,
                    help="speed: at least this many stored nonzeros (default 20,000,000; quick 2,000,000)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hops", type=int, default=3, help="speed: K")
    ap.add_argument("--memory-budget", default=None,
                    help="budget: the budget under test (default 256MiB; quick 32MiB); speed: passed to "
                         "precompute (default: gnnprep's own default)")
    ap.add_argument("--budget-hops", type=int, default=2, help="budget: K")
    ap.add_argument("--budget-nodes", type=int, default=None,
                    help="budget: nodes (default: so that S + X = --budget-factor x the budget)")
    ap.add_argument("--budget-factor", type=float, default=4.2)
    ap.add_argument("--budget-degree", type=int, default=12, help="budget: stored nonzeros per node")
    add_generator_args(ap)
    ap.add_argument("--reorder", choices=["auto", "none", "bfs"], default=None,
                    help="passed to PrecomputeConfig(reorder=...) (default: the library's default)")
    ap.add_argument("--no-torch", action="store_true", help="speed: skip (ii)")
    ap.add_argument("--no-torch-ordered", action="store_true",
                    help="speed: skip (ii'), torch on S and X in community order (information only)")
    ap.add_argument("--no-verify", action="store_true", help="budget: skip the scipy reference")
    ap.add_argument("--keep", action="store_true", help="keep the artifacts and reference arrays")
    args = ap.parse_args()
    if args.nodes is None:
        args.nodes = 100_000 if args.quick else 1_000_000
    if args.nnz is None:
        args.nnz = 2_000_000 if args.quick else 20_000_000

    sys.path.insert(0, str(ROOT))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    idle0 = cpu_idle()
    t0 = time.perf_counter()
    result = speed(args, work) if args.mode == "speed" else budget_mode(args, work)
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    result["cpu_idle_before"] = idle0
    note = " (another process was using the CPU: timings are noisy)" if idle0 is not None and idle0 < 0.9 else ""
    print(f"total {result['total_seconds']} s; CPU idle over 1 s before the run: "
          f"{'n/a' if idle0 is None else f'{idle0 * 100:.0f}%'}{note}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
