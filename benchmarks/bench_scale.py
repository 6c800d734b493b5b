"""Benchmark: gnnprep's whole pipeline on an ogbn-papers100M-shaped data set at a fraction of its size.

Generates (once per --fraction, --seed and --compressed; cached in --workdir) an OGB *binary* layout
shaped like ogbn-papers100M at fraction F of the real sizes:

  n = round(111,059,956 F) nodes, m = round(1,615,685,872 F) directed citation edges, 128 float32
  features, 172 classes. Communities of ~1,000 nodes; 80% of the edges stay inside the source's
  community; both endpoints are drawn in proportion to Pareto(2) node weights (degree skew); node
  ids are randomly permuted at the end. Each community has a class; a node's features are standard
  normal plus a small class-dependent mean (so the short training run has something to learn).
  Labels exist only on the split nodes (train/valid/test = 1.08% / 0.11% / 0.19% of n, disjoint);
  NaN elsewhere, as OGB ships ``node-label.npz``. Layout (as OGB ships papers100M):

    <root>/ogbn_papers100M/RELEASE_v1.txt
    <root>/ogbn_papers100M/raw/data.npz        edge_index [2, m] int64, node_feat [n, 128] float32,
                                               num_nodes_list [1], num_edges_list [1]
    <root>/ogbn_papers100M/raw/node-label.npz  node_label [n, 1] float64, NaN = unlabeled
    <root>/ogbn_papers100M/split/time/{train,valid,test}.csv.gz   one id per line

  ``--shape rmat``: the same sizes, features, labels and splits, but Graph500 R-MAT edges (no
  communities, heavy hubs, ids permuted; ``RmatShape``).

  data.npz is stored (np.savez-like) by default, DEFLATE (np.savez_compressed-like) with
  --compressed. Its members are written as streams (header, then chunks), so generation holds only
  O(n) ids and weights plus one chunk of edges or feature rows.

Then runs, each step in its own process (benchmarks/launcher.py: wall seconds and that process's peak RSS):

  ingest      gnnprep ingest <root>/ogbn_papers100M -o graph.h5 --memory-budget B --json
  precompute  gnnprep precompute graph.h5 --hops K --rows labeled --memory-budget B --json -o feats.h5
  train       gnnprep train sgc feats.h5 -o run --epochs 5 --memory-budget B --json
  peer        (unless --no-peer) the scipy recipe of OGB's papers100M sgc.py: np.load data.npz whole,
              build A, symmetrise, A + I, D^-1/2 (A + I) D^-1/2, K float32 sparse-dense products,
              keep the split rows (saved to a .npy)

and prints wall seconds and peak RSS per step, gnnprep's ingest + precompute time over the peer's,
each gnnprep process's peak RSS against 1.25 x budget, the max relative error of gnnprep's hop K
against the peer's (max|diff| / max|ref|), the precompute plan, its predicted vs measured seconds,
and its node-order report (where it was found: at ingest, kept in the store, or by this precompute; its
seconds vs hop 1's, which reads every entry, and vs the mean hop), hop 1's achieved bytes/s against
numpy's copy bandwidth; then one JSON line with every figure. A failed step is reported with its error (the remaining steps are skipped). The machine the
numbers come from may be shared: timings are noisy.

    .venv/bin/python benchmarks/bench_scale.py --fraction 0.002 --memory-budget 1GiB          # ~1 min
    .venv/bin/python benchmarks/bench_scale.py --fraction 0.002 --memory-budget 1GiB --compressed
    .venv/bin/python benchmarks/bench_scale.py --fraction 0.05 --memory-budget 4GiB           # 4 GB npz
    .venv/bin/python benchmarks/bench_scale.py --fraction 0.025 --memory-budget 4GiB --shape rmat
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import GiB, copy_bandwidth, run_json

FULL_NODES, FULL_EDGES = 111_059_956, 1_615_685_872
DIM, CLASSES, COMMUNITY, INTRA, PARETO_A = 128, 172, 1_000, 0.8, 2.0
SPLIT_SHARES = {"train": 0.0108, "valid": 0.0011, "test": 0.0019}
EDGE_CHUNK, ROW_CHUNK = 1 << 23, 1 << 18

# ------------------------------------------------------------------------------------------------
# Generation
# ------------------------------------------------------------------------------------------------

@contextmanager
def npy_member(zf: zipfile.ZipFile, key: str, shape: tuple, dtype):
    """Write one .npy member of an .npz as a stream; yields put(array) to append C-order chunks."""
    dtype, written = np.dtype(dtype), [0]
    with zf.open(key + ".npy", "w", force_zip64=True) as fh:
        npy_format.write_array_header_1_0(
            fh, {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})

        def put(a):
            a = np.ascontiguousarray(a, dtype=dtype)
            fh.write(memoryview(a).cast("B"))
            written[0] += a.size
        yield put
    if written[0] != int(np.prod(shape)):
        raise RuntimeError(f"{key}: wrote {written[0]} values; expected {int(np.prod(shape))}")


class Shape:
    """Node weights, communities and the final id permutation of the synthetic graph."""

    def __init__(self, n: int, rng: np.random.Generator):
        self.n = n
        c = max(1, round(n / COMMUNITY))
        self.bounds = np.arange(c + 1, dtype=np.int64) * n // c   # community i: bounds[i] .. bounds[i+1]-1
        self.cum = np.concatenate([[0.0], np.cumsum(1.0 + rng.pareto(PARETO_A, n))])
        self.comm_class = rng.integers(0, CLASSES, len(self.bounds) - 1)
        self.perm = rng.permutation(n)   # old id -> published id

    def community(self, old: np.ndarray) -> np.ndarray:
        c = len(self.bounds) - 1   # bounds[i] = floor(i n / c), so i = floor(((v + 1) c - 1) / n)
        return ((old + 1) * c - 1) // self.n

    def draw(self, u: np.ndarray) -> np.ndarray:
        """Node (old id) whose weight interval holds u (u in [0, total)). Keys are searched in
        sorted order: numpy's binary search reuses the last position then (~8x faster)."""
        order = np.argsort(u)
        out = np.empty(len(u), np.int64)
        out[order] = np.searchsorted(self.cum, u[order], side="right") - 1
        return np.minimum(out, self.n - 1)

    def edges(self, rng: np.random.Generator, k: int):
        """k directed edges (published ids): 80% inside the source's community, weight-skewed ends."""
        total = self.cum[-1]
        src = self.draw(rng.random(k) * total)
        c = self.community(src)
        lo, hi = self.cum[self.bounds[c]], self.cum[self.bounds[c + 1]]
        u = np.where(rng.random(k) < INTRA, lo + rng.random(k) * (hi - lo), rng.random(k) * total)
        return self.perm[src], self.perm[self.draw(u)]


class RmatShape(Shape):
    """The R-MAT shape (``--shape rmat``): the same sizes, features, labels and splits, but the edges
    drawn by the Graph500 R-MAT initiator (``harness._rmat_draw``: no communities, heavy hubs; ends
    beyond n dropped and drawn again; self-loops and repeats kept, as ingest drops them) and ids
    permuted. Each node is its own "community" with a random class (a feature mean per class)."""

    def __init__(self, n: int, rng: np.random.Generator):
        self.n = n
        self.scale = max(1, int(np.ceil(np.log2(max(n, 2)))))
        self.comm_class = rng.integers(0, CLASSES, n)
        self.perm = rng.permutation(n)

    def community(self, old: np.ndarray) -> np.ndarray:
        return old

    def edges(self, rng: np.random.Generator, k: int):
        src, dst = np.empty(0, np.int64), np.empty(0, np.int64)
        while len(src) < k:
            s, d = H._rmat_draw(k, self.scale, H.RMAT_GRAPH500, rng)
            keep = (s < self.n) & (d < self.n)
            src = np.concatenate([src, s[keep].astype(np.int64)])
            dst = np.concatenate([dst, d[keep].astype(np.int64)])
        return self.perm[src[:k]], self.perm[dst[:k]]


def write_data_npz(path: Path, shape: Shape, m: int, rng: np.random.Generator, compressed: bool) -> None:
    n = shape.n
    how = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    dst_tmp = path.with_name("dst.tmp")
    with zipfile.ZipFile(path, "w", compression=how, allowZip64=True) as zf:
        with npy_member(zf, "edge_index", (2, m), np.int64) as put, open(dst_tmp, "wb") as spill:
            for s in range(0, m, EDGE_CHUNK):            # row 0 (sources) streams in; row 1 spills
                src, dst = shape.edges(rng, min(EDGE_CHUNK, m - s))
                put(src)
                spill.write(dst.tobytes())
                print(f"  edges {s + len(src):,} / {m:,}", end="\r", file=sys.stderr)
            with open(dst_tmp, "rb") as spill_in:
                while block := spill_in.read(EDGE_CHUNK * 8):
                    put(np.frombuffer(block, np.int64))
        dst_tmp.unlink()
        inverse = np.empty(n, np.int64)
        inverse[shape.perm] = np.arange(n)
        means = rng.standard_normal((CLASSES, DIM), dtype=np.float32) * 0.5
        with npy_member(zf, "node_feat", (n, DIM), np.float32) as put:
            for s in range(0, n, ROW_CHUNK):
                k = min(ROW_CHUNK, n - s)
                cls = shape.comm_class[shape.community(inverse[s:s + k])]
                put(rng.standard_normal((k, DIM), dtype=np.float32) + means[cls])
                print(f"  feature rows {s + k:,} / {n:,}   ", end="\r", file=sys.stderr)
        for key, value in (("num_nodes_list", n), ("num_edges_list", m)):
            with npy_member(zf, key, (1,), np.int64) as put:
                put(np.array([value]))
    print(file=sys.stderr)


def write_labels_and_splits(folder: Path, shape: Shape, rng: np.random.Generator, compressed: bool) -> None:
    n = shape.n
    counts = {k: max(1, round(v * n)) for k, v in SPLIT_SHARES.items()}
    chosen = rng.choice(n, sum(counts.values()), replace=False)      # old ids, in random order
    cls = shape.comm_class[shape.community(chosen)]
    cls = np.where(rng.random(len(chosen)) < 0.8, cls, rng.integers(0, CLASSES, len(chosen)))
    y = np.full((n, 1), np.nan)
    y[shape.perm[chosen], 0] = cls
    (np.savez_compressed if compressed else np.savez)(folder / "raw" / "node-label.npz", node_label=y)
    start = 0
    for name, k in counts.items():
        ids = np.sort(shape.perm[chosen[start:start + k]])
        start += k
        (folder / "split" / "time").mkdir(parents=True, exist_ok=True)
        with gzip.open(folder / "split" / "time" / f"{name}.csv.gz", "wt") as f:
            f.write("\n".join(map(str, ids.tolist())) + "\n")


def generate(workdir: Path, fraction: float, seed: int, compressed: bool,
             kind: str = "community") -> tuple[Path, dict]:
    """The cached data root (holding ogbn_papers100M/) and its meta (sizes, generation seconds)."""
    tag = "" if kind == "community" else f"-{kind}"
    root = workdir / f"data-f{fraction:g}-seed{seed}{tag}{'-deflate' if compressed else ''}"
    if (root / "meta.json").is_file():
        return root, json.loads((root / "meta.json").read_text())
    n, m = round(FULL_NODES * fraction), round(FULL_EDGES * fraction)
    tmp = root.with_name(root.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    folder = tmp / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    print(f"generating n={n:,} m={m:,} in {root} ...", file=sys.stderr)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    shape = (RmatShape if kind == "rmat" else Shape)(n, rng)
    write_labels_and_splits(folder, shape, rng, compressed)
    write_data_npz(folder / "raw" / "data.npz", shape, m, rng, compressed)
    (folder / "RELEASE_v1.txt").write_text("synthetic ogbn-papers100M-shaped data (benchmarks/bench_scale.py)\n")
    meta = {"nodes": n, "edges": m, "fraction": fraction, "seed": seed, "compressed": compressed, "shape": kind,
            "generate_seconds": round(time.perf_counter() - t0, 1),
            "data_npz_bytes": (folder / "raw" / "data.npz").stat().st_size}
    (tmp / "meta.json").write_text(json.dumps(meta))
    os.replace(tmp, root)
    return root, meta


# ------------------------------------------------------------------------------------------------
# Measured steps
# ------------------------------------------------------------------------------------------------

def step(name: str, cmd: list[str], out: Path) -> dict:
    """run_measured, with a failure kept as {"error": ...} instead of ending the benchmark."""
    print(f"running {name}: {' '.join(str(c) for c in cmd)}", file=sys.stderr)
    try:
        return run_json(cmd, log=out / f"{name}.log")
    except SystemExit as e:
        lines = str(e.code).strip().splitlines()
        return {"error": "\n".join(x for x in lines if not x.startswith("__peak_rss="))}


def run_steps(args, folder: Path, out: Path) -> dict:
    budget = ["--memory-budget", args.memory_budget]
    graph, feats, peer_npy = out / "graph.h5", out / "feats.h5", out / "peer-hop.npy"
    cmds = {
        "ingest": H.gnnprep_cmd("ingest", folder, "-o", graph, *budget, "--json"),
        "precompute": H.gnnprep_cmd("precompute", graph, "--hops", args.hops, "--rows", "labeled", *budget,
                                    "--json", "-o", feats),
        "train": H.gnnprep_cmd("train", "sgc", feats, "-o", out / "run", "--epochs", 5, *budget, "--json"),
    }
    if not args.no_peer:
        cmds["peer"] = H.child("child_scale", folder, args.hops, peer_npy)
    # what was written before the steps (the data set generated just now: ~2 GiB of npz at 1/40) is
    # written back to the disk first, not during whichever step runs first: measured on the 2-core VM,
    # ingest at 1/40 took 16-17 s in this benchmark against 9.5 s run by hand after `sync`
    os.sync()
    steps = {}
    for name, cmd in cmds.items():
        if name != "peer" and any("error" in s for s in steps.values()):
            steps[name] = {"error": "skipped: an earlier gnnprep step failed"}
            continue
        steps[name] = step(name, cmd, out)
    return steps


def relative_error(feats: Path, peer_npy: Path, hops: int) -> float | None:
    import h5py

    if not (feats.is_file() and peer_npy.is_file()):
        return None
    ref = np.load(peer_npy)
    ref_rows = np.load(str(peer_npy).replace(".npy", "-rows.npy"))
    with h5py.File(feats, "r") as f:
        rows, ours = f["rows"][:], f[f"hops/{hops}"][:]
    if not np.array_equal(rows.astype(np.int64), ref_rows):
        raise RuntimeError("feats.h5 /rows differ from the split rows the peer kept")
    return H.max_rel_error(ours, ref)


def extrapolate(res: dict) -> dict | None:
    """Full papers100M at the same budget: (a) every measured step scaled by 1 / fraction (time per
    stored entry held), and (b) the planner's plan and predicted precompute seconds for the full
    sizes from sizes alone (:func:`gnnprep.precompute.sizing.plan_for_sizes`: stored entries scaled
    from this graph's, the same labeled share, the order kept in the store, the ordered copy and
    pruning as the planner would choose them), on the profile this run's precompute used."""
    ing = (res.get("steps", {}).get("ingest") or {})
    pc = res.get("precompute")
    if not ing.get("seconds") or not pc:
        return None
    from gnnprep.precompute.sizing import plan_for_sizes

    f = res["fraction"]
    out = {"linear_ingest_seconds": ing["seconds"] / f,
           "linear_precompute_seconds": res["steps"]["precompute"]["seconds"] / f}
    full = plan_for_sizes(FULL_NODES, round(res["stored_entries"] / f), 128, res["hops"], res["budget"],
                          rows=round(res["labeled_rows"] / f))
    if full.get("plan") is None:   # the budget cannot hold even one column of the full graph
        return {**out, "planner": {"error": full.get("error")}}
    plan = full["plan"]
    return {**out, "planner": {**{k: plan.get(k) for k in ("a", "b", "c", "width", "s_resident", "reorder",
                                                          "predicted_seconds", "predicted_peak")},
                               "decisions": full["decisions"]}}


def summarise(args, meta: dict, budget: int, steps: dict, error: float | None) -> dict:
    res = {"fraction": args.fraction, "seed": args.seed, "compressed": args.compressed,
           "hops": args.hops, "budget": budget, "rss_limit": int(1.25 * budget), **meta,
           "steps": {k: {x: v.get(x) for x in ("seconds", "peak_rss", "error")} for k, v in steps.items()},
           "max_rel_error": error}
    for name in ("ingest", "precompute", "train"):
        if "peak_rss" in steps.get(name, {}):
            res["steps"][name]["within_1.25x_budget"] = steps[name]["peak_rss"] <= 1.25 * budget
    ok = [steps.get(k, {}).get("seconds") for k in ("ingest", "precompute", "peer")]
    if None not in ok:
        res["gnnprep_ingest_precompute_seconds"] = ok[0] + ok[1]
        res["peer_over_gnnprep"] = ok[2] / (ok[0] + ok[1])
    if steps.get("peer", {}).get("report"):
        res["peer"] = steps["peer"]["report"]
        ing = steps.get("ingest", {}).get("report")
        if ing:   # S has the stored entries of A plus the diagonal: the same graph on both sides?
            res["same_nnz"] = ing["num_edges"] + ing["num_nodes"] == res["peer"]["nnz"]
    rep = steps.get("precompute", {}).get("report")
    if rep:
        hop = rep["hop_seconds"][1:] or [0.0]
        res["precompute"] = {
            "plan": rep["plan"], "predicted_seconds": rep["plan"].get("predicted_seconds"),
            "report_seconds": rep["seconds"], "hop_seconds": rep["hop_seconds"],
            "predicted_peak_bytes": rep["predicted_peak_bytes"],
            "measured_peak_bytes": rep["measured_peak_bytes"], "reorder": rep.get("reorder"),
            "mean_hop_seconds": sum(hop) / len(hop), "warnings": rep.get("warnings"),
            "hop_disk_read_bytes": rep.get("hop_disk_read_bytes"), "decisions": rep.get("decisions"),
            "ordered_copy": rep.get("ordered_copy")}
        pc = res["precompute"]
        ing_rep = steps.get("ingest", {}).get("report") or {}
        res["stored_entries"] = ing_rep.get("num_edges")
        res["labeled_rows"] = rep["rows"]
        res["hop_entries"] = rep.get("hop_entries")
        pc["predicted_within_25pct"] = abs(pc["predicted_seconds"] - rep["seconds"]) <= 0.25 * rep["seconds"]
        ro = rep.get("reorder") or {}
        ing_order = (steps.get("ingest", {}).get("report") or {}).get("order") or {}
        # the order's cost wherever it was paid: found at ingest (kept in the store), or in this run
        found = ro.get("found_seconds") if ro.get("found_in") == "store" else ro.get("seconds")
        if ro.get("found_in") == "store" and ing_order.get("cpu_seconds") is not None:
            found = ing_order["cpu_seconds"]   # the search thread's processor time (it also waits for rows)
            pc["order_thread_seconds"] = ing_order["seconds"]
        if ro.get("found_in") == "store" and ing_order.get("waited_seconds") is not None:
            pc["order_added_to_ingest_seconds"] = ing_order["waited_seconds"]
            pc["order_added_over_full_hop"] = ing_order["waited_seconds"] / rep["hop_seconds"][1]
        if found is not None and sum(hop):
            pc["order_seconds"] = found
            pc["order_found_in"] = "ingest" if ro.get("found_in") == "store" else "precompute"
            pc["reorder_over_hop"] = found / (sum(hop) / len(hop))
            pc["reorder_over_full_hop"] = found / rep["hop_seconds"][1]  # hop 1 reads every entry
        # hop 1 (every row, every entry) against the copy bandwidth: gathered rows, column ids, output
        ing = steps.get("ingest", {}).get("report") or {}
        if ing and rep["hop_seconds"][1] > 0:
            n, m, d, c = ing["num_nodes"], ing["num_edges"] + ing["num_nodes"], ing["num_features"], rep["plan"]["c"]
            moved = m * (d * 4 + c * 4) + n * d * 4
            pc["hop1_bytes"] = moved
            pc["hop1_bytes_per_s"] = moved / rep["hop_seconds"][1]
            pc["copy_bytes_per_s"] = copy_bandwidth()
    if res.get("stored_entries"):
        res["full_papers100M"] = extrapolate(res)
    tr = steps.get("train", {}).get("report")
    if tr:
        res["train"] = {k: tr.get(k) for k in ("valid_acc", "test_acc", "epochs_run", "seconds", "streaming")}
    return res


def print_table(res: dict) -> None:
    g = lambda b: f"{b / GiB:6.2f} GiB" if b is not None else "   -"  # noqa: E731
    print(f"\nogbn-papers100M shape at fraction {res['fraction']:g}: n={res['nodes']:,}, m={res['edges']:,}, "
          f"data.npz {res['data_npz_bytes'] / GiB:.2f} GiB ({'deflate' if res['compressed'] else 'stored'}), "
          f"generated in {res['generate_seconds']:.0f} s; budget {g(res['budget']).strip()}, "
          f"1.25 x budget = {g(res['rss_limit']).strip()}")
    print(f"  {'step':<11} {'wall s':>8} {'peak RSS':>11}  vs 1.25 x budget")
    for name, s in res["steps"].items():
        if s.get("error"):
            print(f"  {name:<11} FAILED: {s['error'][:2000]}")
            continue
        within = s.get("within_1.25x_budget")
        verdict = "" if within is None else ("within" if within else "OVER")
        print(f"  {name:<11} {s['seconds']:8.1f} {g(s['peak_rss']):>11}  {verdict}")
    if "peer_over_gnnprep" in res:
        print(f"  gnnprep ingest + precompute {res['gnnprep_ingest_precompute_seconds']:.1f} s vs peer "
              f"{res['steps']['peer']['seconds']:.1f} s: peer / gnnprep = {res['peer_over_gnnprep']:.2f}x")
    if "peer" in res:
        p = res["peer"]
        print(f"  peer parts: load {p['load_seconds']:.1f} s, build S {p['build_seconds']:.1f} s, "
              f"hops {', '.join(f'{h:.1f}' for h in p['hop_seconds'])} s")
    if res["max_rel_error"] is not None:
        print(f"  max relative error of hop {res['hops']} vs peer: {res['max_rel_error']:.2e} "
              f"(same nnz of S: {res.get('same_nnz')})")
    pc = res.get("precompute")
    if pc:
        plan = pc["plan"]
        print(f"  plan: a={plan['a']} b={plan['b']} c={plan['c']} width={plan['width']} "
              f"S resident={plan.get('s_resident')} device={plan['device']} reorder={plan.get('reorder')}; "
              f"predicted peak {g(pc['predicted_peak_bytes']).strip()}, measured "
              f"{g(pc['measured_peak_bytes']).strip() if pc['measured_peak_bytes'] else '-'} (above baseline)")
        print(f"  predicted {pc['predicted_seconds']} s vs measured {pc['report_seconds']:.1f} s (report), "
              f"{res['steps']['precompute']['seconds']:.1f} s (process); hop seconds "
              f"{', '.join(f'{h:.2f}' for h in pc['hop_seconds'])}")
        print(f"  predicted within 25% of measured (report): {pc['predicted_within_25pct']}")
        if pc.get("hop_disk_read_bytes"):
            print("  read from the disk per hop (page-cache misses; hop 0 = X): "
                  + ", ".join(g(b).strip() for b in pc["hop_disk_read_bytes"]))
        for what, why in (pc.get("decisions") or {}).items():
            print(f"  {what}: {why}")
        ro = pc["reorder"]
        if ro:
            print(f"  node order: kind={ro.get('kind')} used={ro.get('used')} loaded/relabelled in "
                  f"{ro.get('seconds')} s; found at {pc.get('order_found_in')} in {pc.get('order_seconds')} s of CPU"
                  f"{' (thread lived ' + str(pc['order_thread_seconds']) + ' s)' if 'order_thread_seconds' in pc else ''}; "
                  f"near_share {ro.get('near_share_before')} -> {ro.get('near_share_after')}; order / hop 1 (full) = "
                  f"{pc.get('reorder_over_full_hop', float('nan')):.2f}, order / mean hop = "
                  f"{pc.get('reorder_over_hop', float('nan')):.2f}")
            if "order_added_to_ingest_seconds" in pc:
                print(f"  node order: found in a background thread during ingest's node-data copy; wall time it "
                      f"added to ingest {pc['order_added_to_ingest_seconds']:.2f} s = "
                      f"{pc['order_added_over_full_hop']:.2f} x hop 1")
        else:
            print(f"  node order: not used (plan reorder={pc['plan'].get('reorder')}; no reorder entry in the report)")
    if pc and pc.get("hop1_bytes_per_s"):
        print(f"  hop 1 (all rows and entries): {pc['hop1_bytes'] / 1e9:.1f} GB moved (entries x (d x 4 + c x 4) + "
              f"n x d x 4) in {pc['hop_seconds'][1]:.2f} s = {pc['hop1_bytes_per_s'] / 1e9:.2f} GB/s, "
              f"{pc['hop1_bytes_per_s'] / pc['copy_bytes_per_s']:.2f}x the copy bandwidth "
              f"({pc['copy_bytes_per_s'] / 1e9:.2f} GB/s read + written, numpy, 1 GiB)")
    ex = res.get("full_papers100M")
    if ex:
        pl = ex["planner"]
        planner = (f"the planner: {pl['error']}" if "error" in pl else
                   f"the planner: c={pl['c']} width={pl['width']} S resident={pl['s_resident']} "
                   f"reorder={pl['reorder']}, predicted {pl['predicted_seconds'] / 60:.1f} min, "
                   f"peak {pl['predicted_peak'] / GiB:.1f} GiB")
        print(f"  full papers100M at this budget: measured steps x 1/fraction = ingest "
              f"{ex['linear_ingest_seconds'] / 60:.1f} min, precompute {ex['linear_precompute_seconds'] / 60:.1f} min; "
              + planner)
    if res.get("train"):
        t = res["train"]
        print(f"  train sgc, {t['epochs_run']} epochs: valid acc {t['valid_acc']}, test acc {t['test_acc']}, "
              f"streaming={t['streaming']}")
    print("  (shared machine: timings are noisy)")
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fraction", type=float, required=True)
    ap.add_argument("--memory-budget", required=True)
    ap.add_argument("--compressed", action="store_true", help="data.npz with DEFLATE members")
    ap.add_argument("--shape", choices=("community", "rmat"), default="community",
                    help="the edges: communities with Pareto-skewed ends (default), or Graph500 R-MAT")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-scale")
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep graph.h5, feats.h5 and the peer's .npy")
    ap.add_argument("--generate-only", action="store_true", help="generate (or find) the data set, run nothing")
    args = ap.parse_args()
    budget = H.parse_size(args.memory_budget)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    root, meta = generate(workdir, args.fraction, args.seed, args.compressed, args.shape)
    if args.generate_only:
        print(f"data set in {root} ({meta})")
        return
    out = workdir / f"run-{root.name}-{args.memory_budget}-{os.getpid()}"
    out.mkdir()
    try:
        steps = run_steps(args, root / "ogbn_papers100M", out)
        error = relative_error(out / "feats.h5", out / "peer-hop.npy", args.hops)
        print_table(summarise(args, meta, budget, steps, error))
    finally:
        if not args.keep:
            for p in ("graph.h5", "feats.h5", "peer-hop.npy", "peer-hop-rows.npy"):
                (out / p).unlink(missing_ok=True)
            print(f"logs in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
