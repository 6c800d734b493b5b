"""Benchmark: ``gnnprep precompute`` under torchrun (2 ranks x 1 thread) against one process
(1 x 2 threads, and 1 x 1 thread) on one machine, plus a scaling model checked against them.

The graph is the 1M-node bench graph of ``benchmarks/bench_precompute.py`` (same generator, imported
from it; power-law with communities, >= 20M stored entries, d = 128 standard-normal float32
features), generated and ingested once and cached in --workdir (or given with --graph). Then
--rounds rounds, each command in its own process (the order of (a) and (b) alternates per round):

  (a) 1 process x 2 threads:  gnnprep precompute graph.h5 -o A.h5 --hops K --memory-budget B
                              with NUMBA_NUM_THREADS=2 OMP_NUM_THREADS=2
  (b) 2 ranks x 1 thread:     torchrun --standalone --nproc-per-node 2 -m gnnprep precompute graph.h5
                              -o B.h5 --hops K --memory-budget B/2   (the budget is per rank)
                              with NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1
  (c) 1 process x 1 thread:   as (a) with 1 thread (the model's single-worker figure)
  (L) the launcher alone:     torchrun --standalone --nproc-per-node 2 on a script that only joins the
                              gloo group, passes a barrier and leaves the way a gnnprep rank does
                              (gnnprep.core.distributed.exit_now): what torchrun itself costs

The job: K = --hops 5 on d = 128 columns, the shape our users' target has (ogbn-papers100M:
d = 128, and the mission precomputes 5 hops), on the issue's 1M-node bench graph. Each round also
runs (a) and (b) with --also-hops 3 (the figure measured before) and prints their overhead, so that
the default is not chosen for its ratio: the launcher's cost is fixed (torchrun's agent imports torch,
the ranks import torch, the agent tears torch down at exit: ~3 s here), so the overhead is that
cost over the job's length, and it shrinks as the job grows (more hops, more columns, more nodes).
Of that launcher cost gnnprep controls only its ranks: they import torch (all of it: 1.3 s, the two
ranks in parallel) only to join the group, and leave without the interpreter's teardown of torch
(gnnprep.core.distributed.exit_now: ~0.9 s less per job here). torchrun's --monitor-interval already
defaults to 0.1 s in this torch (2.13), so there is nothing to gain from passing a smaller one.

B = --memory-budget (default 2GiB: S resident, one column block of width 128 for (a) and (c); each
rank of (b) gets 1GiB, which plans one block of width 64, i.e. exactly its half). Every output is
deleted before its command runs (a sharded rerun would otherwise reuse its complete shards). One
untimed run of (a) first warms the page cache, numba's cache and the store's node-order cache.

X read per rank: every variant's report gives the bytes of X it read, per rank for (b): the
reader's count (``x_bytes_read``: whole HDF5 chunks of /nodes/features, which ingest writes as
16-column tiles; a chunk re-read by a second column block or operator counts again) and the disk's
(``x_disk_read_bytes``: /proc/self/io read_bytes while hop 0 loads X, i.e. what missed the page
cache). With --cold-x the graph store is evicted from the page cache (posix_fadvise DONTNEED)
before every timed command, so the disk figure is the real file I/O; each rank's is printed
against its columns' share of X, n*(C1-C0)*4 bytes (before issue 26, every rank's column block
read chunks spanning every column: all of X per rank).

Printed: wall seconds per variant per round, the overhead of the distributed path (b)/(a) - 1
(median and range over the rounds; the target is <= 15%), the same for the time inside the command
(the JSON's ``seconds``, i.e. without process start and imports), each variant's phases, peak RSS
(the process tree sampled every 0.1 s with psutil: the largest summed RSS; and each process's own
VmHWM summed over the ranks), and whether B.h5's hops equal A.h5's bit for bit (round 1, read
with h5py through B.h5's virtual datasets).

Scaling model (P ranks of 1 thread, P = 2N on N machines of 2 cores; n nodes, m stored entries,
d columns, K hops, w = d/P columns per rank, r output rows):

  each rank, once:      reads S = (n+1)*8 + m*4 bytes (indptr int64 + indices int32; resident when its
                        budget holds it, else streamed once per hop and column block), and its slice of
                        X, n*w*4 bytes (the store's X chunks are 16-column tiles and the ranks' column
                        ranges start on tiles where they can: the file I/O is about n*w*4 too)
  each rank, per hop:   writes r*w*4 bytes (its shard's columns of hop k); in memory it streams S's
                        index arrays once per column block, m*4 + (n+1)*8, and gathers m*w*4 bytes of
                        the previous hop (at least one 64-byte cache line per entry once w*4 < 64)
  compute per hop:      proportional to m*w = m*d/P

  T(N) = T_fixed + T_hops(1) / N
      T_fixed  = launcher start (torchrun, torch import, gloo rendezvous)
                 + per-rank setup that every rank repeats (open the store, load S, load/permute the
                   node order, plan) + publish (rank 0 writes the virtual layout, a few MB)
      T_hops(1) = the column-proportional time on one 2-core machine (2 ranks): loading X's slice,
                  the K hop products and writing the shard, slowest rank (sum of its hop_seconds)

The model's terms are first predicted from the 1-worker run (c) and the launcher probe (L) only,
each with two bounds for the hops of W = 2 workers on one machine: cores-bound (H/W: the compute
splits) and bytes-bound (H times the machine's bytes per hop at that layout over one worker's:
the workers share one memory bus; 2 ranks of w = 64 move the same bytes as 1 process of w = 128):
  (c) 1 x 1:  t_start(c) + t_setup(c) + H(c)                 (H: summed hop_seconds, all d columns)
  (a) 1 x 2:  t_start(c) + t_setup(c) + H(c)/2 .. H(c)       (setup taken as not sped up by threads)
  (b) 2 x 1:  t_launch(L) + t_start(c) + t_setup(c) + H(c)/2 .. H(c)*2*bytes(2)/bytes(1)
and printed against the measured walls with where each falls between its bounds. Measured on these
machines: 2 workers' hops take 0.9-1.1x one worker's, i.e. the hops are bound by memory traffic
(10.6 GiB moved per hop at d = 128, 9.6 GiB of it gathered rows: ~8 GiB/s), not by cores, so (a) and (b) gain nothing over (c)
in the hops on one machine. N machines divide that traffic (each machine's 2 ranks gather
m*(d/N)*4 bytes per hop), so the N-machine projection uses (b)'s measured phases (T_fixed = wall(b) - H(b),
T_hops(1) = H(b)) for N = 1, 2, 4, 8, 16 machines, with the speed-up against (b) and against (a); a
second column keeps the cache-line floor (per-rank gathered bytes no longer halve once a rank's row
slice is narrower than 64 bytes) and S's per-hop index stream, which every rank repeats.

Timings on a shared 2-core machine are noisy (other jobs): the load average before and after each
round is printed, and every figure is given as a median with the range over the rounds.

    .venv/bin/python benchmarks/bench_distributed.py                   # 3 rounds, ~3-5 min (+1 min to generate the graph once)
    .venv/bin/python benchmarks/bench_distributed.py --rounds 5
    .venv/bin/python benchmarks/bench_distributed.py --graph /tmp/bw/plaw_n1000000_nnz20000000_d128_c2000_p0.85_a1.5_s0/graph.h5
    .venv/bin/python benchmarks/bench_distributed.py --quick           # 100k nodes, 1 round: smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import ROOT, GiB, MiB, load_avg
from benchmarks.harness import median as med
from benchmarks.harness import span as rng

CACHE_LINE = 64
PROBE = H.HERE / "probe_distributed.py"   # the launcher probe, run by torchrun

VARIANTS = {
    "a": "1 process x 2 threads",
    "b": "2 ranks x 1 thread (torchrun)",
    "c": "1 process x 1 thread",
    "L": "torchrun alone (2 ranks, no work)",
}


# -- running one command ---------------------------------------------------------------------------
def thread_env(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(NUMBA_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join(
                   [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    return env


def clear(work: Path, name: str) -> None:
    """Remove an output, its shards and any partial files (a rerun must not resume or reuse them)."""
    H.clear_output(work / name)


def run_variant(v: str, graph: Path, work: Path, args, logs: Path, tag: str, hops: int | None = None) -> dict:
    """Run variant ``v`` once (``hops``: another number of hops than --hops, outputs named apart)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks)]
    hops = args.hops if hops is None else hops
    common = ["--hops", str(hops), "--json", "--quiet"]
    if v == "L":
        stamps = logs / f"{tag}.stamps"
        for old in logs.glob(stamps.name + ".rank*.json"):
            old.unlink()
        cmd, env, name = torchrun + [str(PROBE), str(stamps)], thread_env(1), None
    else:
        name = {"a": "A", "b": "B", "c": "C"}[v] + ("" if hops == args.hops else f"{hops}") + ".h5"
        clear(work, name)
        budget = args.budget if v != "b" else max(1, args.budget // args.ranks)
        tail = [str(graph), "-o", str(work / name), "--memory-budget", str(budget)] + common
        if v == "b":
            cmd, env = torchrun + ["-m", "gnnprep", "precompute"] + tail, thread_env(1)
        else:
            cmd, env = H.gnnprep_cmd("precompute", *tail), thread_env(args.threads if v == "a" else 1)
    if getattr(args, "cold_x", False):
        H.evict(graph)
    r = H.run_tree(cmd, env, logs / f"{tag}.out", logs / f"{tag}.err")
    if r["rc"] != 0:
        sys.exit(f"({v}) failed with exit status {r['rc']}: {' '.join(cmd)}\n"
                 f"{(logs / f'{tag}.err').read_text()[-3000:]}")
    if v == "L":
        ts = [json.loads(p.read_text()) for p in logs.glob(f"{tag}.stamps.rank*.json")]
        if ts:  # where the launcher's time goes (epoch seconds printed by the ranks)
            r["agent_start"] = min(t["start"] for t in ts) - r["epoch0"]
            r["rank_import"] = max(t["import"] - t["start"] for t in ts)
            r["rendezvous"] = max(t["join"] for t in ts) - max(t["import"] for t in ts)
            r["teardown"] = r["epoch1"] - max(t["done"] for t in ts)
    else:
        rep = json.loads((logs / f"{tag}.out").read_text().strip().splitlines()[-1])
        r["report"] = rep
        r.update(phases(rep))
    return r


def x_reads(rep: dict, n: int, d: int) -> list[dict]:
    """X read per rank (one row for a one-process report): columns, the reader's count, the disk's
    count, and its columns' share of X (n * columns * 4 bytes)."""
    shards = rep.get("shards") or []
    if not shards:
        disk = rep.get("hop_disk_read_bytes")
        return [{"rank": None, "columns": [0, d], "share": n * d * 4, "counted": None,
                 "disk": None if disk is None else disk[0]}]
    return [{"rank": s["rank"], "columns": s["columns"], "share": n * (s["columns"][1] - s["columns"][0]) * 4,
             "counted": s.get("x_bytes_read"), "disk": s.get("x_disk_read_bytes")} for s in shards if s.get("file")]


def phases(rep: dict) -> dict:
    """The command's own seconds split into setup and column work (H: summed hop_seconds of the
    slowest rank; hop 0 is loading X's slice and writing it)."""
    seconds = rep["seconds"]
    shards = rep.get("shards") or []
    if shards:
        hops = max(sum(s["hop_seconds"]) for s in shards if s.get("file"))
        busy = max(s["seconds"] for s in shards if s.get("file"))
        ranks_hwm = sum((s["measured_peak_bytes"] or 0) for s in shards) + len(shards) * rep["baseline_rss_bytes"]
    else:
        hops, busy = sum(rep["hop_seconds"]), seconds
        ranks_hwm = (rep["measured_peak_bytes"] or 0) + rep["baseline_rss_bytes"]
    return {"seconds": seconds, "hops": hops, "setup": seconds - hops, "after_shards": max(0.0, seconds - busy),
            "self_peak": ranks_hwm}


# -- the model -------------------------------------------------------------------------------------
def bytes_per_rank(n: int, m: int, d: int, rows: int, P: int, itemsize: int = 4) -> dict:
    w = d / P
    s_bytes = (n + 1) * 8 + m * 4
    return {"P": P, "w": w, "S_once": s_bytes, "X_slice_once": n * w * itemsize,
            "X_file_io_once": n * math.ceil(w / 16) * 16 * itemsize,
            "written_per_hop": rows * w * itemsize, "S_stream_per_hop": s_bytes,
            "gathered_per_hop": m * w * itemsize, "gathered_line_floor_per_hop": m * max(w * itemsize, CACHE_LINE)}


def hop_bytes(n: int, m: int, d: int, rows: int, P: int) -> float:
    """Bytes one of P ranks moves per hop: S's index stream, the gathered rows of the previous hop
    (cache-line floor), the hop's rows written and read back as the next hop's input."""
    b = bytes_per_rank(n, m, d, rows, P)
    return b["S_stream_per_hop"] + b["gathered_line_floor_per_hop"] + 2 * b["written_per_hop"]


def line_factor(n: int, m: int, d: int, rows: int, P: int, P_ref: int) -> float:
    """Per-rank hop bytes at P ranks over those at P_ref, with the cache-line floor and S's index
    stream (both repeated by every rank): how much less than 1/P the hop time may shrink."""
    return hop_bytes(n, m, d, rows, P) / hop_bytes(n, m, d, rows, P_ref)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-dist")
    ap.add_argument("--graph", default=None, help="an existing graph store to use instead of the generated one")
    ap.add_argument("--no-generate", action="store_true", help="fail when the cached graph store is missing")
    H.add_size_args(ap)
    ap.add_argument("--hops", type=int, default=5, help="the job's hops (default 5: the papers100M mission's)")
    ap.add_argument("--also-hops", default="3",
                    help="comma-separated other hop counts whose (a) and (b) also run in every round, for their "
                         "overhead alone (default 3; '' for none)")
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (quick 1)")
    ap.add_argument("--memory-budget", default="2GiB",
                    help="budget of (a) and (c); each rank of (b) gets it divided by the ranks")
    ap.add_argument("--threads", type=int, default=2, help="threads of (a)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks of (b)")
    ap.add_argument("--no-single", action="store_true", help="skip (c), 1 process x 1 thread (no model check then)")
    ap.add_argument("--no-probe", action="store_true", help="skip (L), the launcher alone")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of (a)")
    ap.add_argument("--no-verify", action="store_true", help="skip the bit-for-bit check of B.h5 against A.h5")
    ap.add_argument("--keep", action="store_true", help="keep the last round's outputs")
    ap.add_argument("--cold-x", action="store_true",
                    help="evict the graph store from the page cache before every timed command (posix_fadvise), "
                         "so that the X bytes each rank reads from the disk are measured")
    H.add_generator_args(ap)  # the bench graph's generator parameters
    args = ap.parse_args()
    H.quick_defaults(args)
    args.also = [int(h) for h in args.also_hops.split(",") if h.strip() and int(h) != args.hops]

    args.budget = H.parse_size(args.memory_budget)
    work = Path(args.workdir).absolute()
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    t_total = time.perf_counter()

    if args.graph:
        graph = Path(args.graph).absolute()
    else:
        tag = H.graph_tag(args)
        if args.no_generate and not (work / tag / "graph.h5").exists():
            sys.exit(f"--no-generate: {work / tag / 'graph.h5'} is missing")
        graph, _ = H.ensure_graph(work, args)
    import h5py

    with h5py.File(graph, "r") as f:
        n, d = f["nodes/features"].shape
        m = int(f["adj/indptr"][-1])
    K, P = args.hops, args.ranks
    print(f"graph: {graph}\n  {n:,} nodes, {m:,} stored entries, d={d}, K={K}; S = {((n + 1) * 8 + m * 4) / MiB:.0f} MiB "
          f"(int64 indptr + int32 indices), X = {n * d * 4 / MiB:.0f} MiB; each output {(K + 1) * n * d * 4 / GiB:.2f} GiB")
    print(f"budget: (a), (c) --memory-budget {args.budget / GiB:g} GiB; (b) {args.budget // P / GiB:g} GiB per rank "
          f"({P} ranks); {os.cpu_count()} CPUs; load average (1/5/15 min) {load_avg()}")

    if not args.no_warmup:
        t0 = time.perf_counter()
        run_variant("a", graph, work, args, logs, "warmup")
        clear(work, "A.h5")
        print(f"warm-up run of (a), untimed: {time.perf_counter() - t0:.1f} s")

    order = ["a", "b"] + ([] if args.no_single else ["c"]) + ([] if args.no_probe else ["L"])
    results = {v: [] for v in order}
    also = {h: {"a": [], "b": []} for h in args.also}  # the other hop counts: (a) and (b) only
    verify = None
    print()
    print(f"{'round':>5} {'load avg':>14}  " + "  ".join(f"({v}) wall" for v in order) + f"   overhead b/a-1 (K={K})"
          + "".join(f"   K={h}: (a), (b) wall, overhead" for h in args.also))
    for i in range(args.rounds):
        la = load_avg()
        pair = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        seq = pair + order[2:]
        got = {}
        for v in seq:
            got[v] = run_variant(v, graph, work, args, logs, f"r{i + 1}_{v}")
            results[v].append(got[v])
            if v == "c" and not args.keep:
                clear(work, "C.h5")
        if i == 0 and not args.no_verify:
            verify = H.same_hops(work / "A.h5", work / "B.h5", K)
        if not args.keep or i < args.rounds - 1:
            clear(work, "A.h5")
            clear(work, "B.h5")
        cols = ""
        for h in args.also:
            for v in pair:
                also[h][v].append(run_variant(v, graph, work, args, logs, f"r{i + 1}_{v}{h}", hops=h))
                clear(work, f"{v.upper()}{h}.h5")
            wa, wb = also[h]["a"][-1]["wall"], also[h]["b"][-1]["wall"]
            cols += f"   {wa:6.2f} {wb:6.2f} {(wb / wa - 1) * 100:+6.1f}%"
        ov = got["b"]["wall"] / got["a"]["wall"] - 1
        print(f"{i + 1:>5} {la:>14}  " + "  ".join(f"{got[v]['wall']:9.2f}" for v in order)
              + f"   {ov * 100:+6.1f}%" + cols + f"   (order {','.join(pair)} first)", flush=True)
    print(f"load average after the rounds: {load_avg()}")

    A, B = results["a"], results["b"]
    C, L = results.get("c"), results.get("L")
    ov = [b["wall"] / a["wall"] - 1 for a, b in zip(A, B)]
    ov_in = [b["seconds"] / a["seconds"] - 1 for a, b in zip(A, B)]
    print()
    print("per variant (median over rounds, range in brackets); start = wall - the command's own seconds "
          "(process start, imports, exit; for (b) also torchrun, torch, rendezvous); setup = own seconds - hops "
          "(store, S, node order, plan, publish); hops = summed hop_seconds, slowest rank")
    print(f"{'variant':<34} {'wall s':>16} {'start s':>7} {'setup s':>7} {'hops s':>7} "
          f"{'peak RSS tree':>13} {'sum VmHWM':>10} {'self-reported':>13}")
    for v in order:
        rs = results[v]
        walls = [r["wall"] for r in rs]
        if v == "L":
            cols = f"{'':>7} {'':>7} {'':>7}"
        else:
            cols = (f"{med([r['wall'] - r['seconds'] for r in rs]):7.2f} {med([r['setup'] for r in rs]):7.2f} "
                    f"{med([r['hops'] for r in rs]):7.2f}")
        selfp = f"{med([r['self_peak'] for r in rs]) / GiB:10.2f} GiB" if v != "L" else ""
        print(f"({v}) {VARIANTS[v]:<30} {med(walls):6.2f} [{rng(walls)}] {cols} "
              f"{med([r['peak_tree_rss'] for r in rs]) / GiB:9.2f} GiB {med([r['workers_hwm_sum'] for r in rs]) / GiB:6.2f} GiB"
              f" {selfp}")
    print("  peak RSS tree: largest summed RSS of the process tree (for (b) the ranks + torchrun's agent, "
          f"agent VmHWM {med([r['agent_hwm'] for r in B]) / MiB:.0f} MiB); sum VmHWM: each rank's own peak, summed; "
          "self-reported: the JSON's measured peak above baseline + baseline, summed over ranks")
    b_after = [r["after_shards"] for r in B]
    print(f"  (b) after the slowest shard (gather of outcomes + rank 0 publishing the virtual layout): "
          f"{med(b_after):.2f} s [{rng(b_after)}]")
    print()
    print(f"overhead of the distributed path, wall (b)/(a) - 1: median {med(ov) * 100:+.1f}% "
          f"[{rng([x * 100 for x in ov], '{:+.1f}')}%] over {len(ov)} round(s); target <= 15%: "
          f"{'PASS' if med(ov) <= 0.15 else 'MISS'}")
    print(f"  inside the command (JSON seconds, without process start and imports): median {med(ov_in) * 100:+.1f}% "
          f"[{rng([x * 100 for x in ov_in], '{:+.1f}')}%]")
    also_summary = {}
    for h in args.also:
        Ah, Bh = also[h]["a"], also[h]["b"]
        ovh = [b["wall"] / a["wall"] - 1 for a, b in zip(Ah, Bh)]
        ovh_in = [b["seconds"] / a["seconds"] - 1 for a, b in zip(Ah, Bh)]
        print(f"  the same job with --hops {h}: (a) {med([r['wall'] for r in Ah]):.2f} s, (b) "
              f"{med([r['wall'] for r in Bh]):.2f} s; wall overhead median {med(ovh) * 100:+.1f}% "
              f"[{rng([x * 100 for x in ovh], '{:+.1f}')}%], inside the command {med(ovh_in) * 100:+.1f}% "
              f"[{rng([x * 100 for x in ovh_in], '{:+.1f}')}%]")
        also_summary[h] = {"walls": {v: [round(r["wall"], 3) for r in also[h][v]] for v in "ab"},
                           "overhead_median": med(ovh), "overhead_rounds": ovh, "overhead_inside_median": med(ovh_in)}
    if L:
        lw = [r["wall"] for r in L]
        start_b = [r["wall"] - r["seconds"] for r in B]
        start_a = [r["wall"] - r["seconds"] for r in A]
        print(f"  the launcher alone (L) takes {med(lw):.2f} s [{rng(lw)}]"
              + (f": torchrun's agent starting (python, torch) {med([r['agent_start'] for r in L]):.2f} s, ranks "
                 f"importing torch {med([r['rank_import'] for r in L]):.2f} s, gloo rendezvous "
                 f"{med([r['rendezvous'] for r in L]):.2f} s, ranks' and agent's exit "
                 f"{med([r['teardown'] for r in L]):.2f} s" if all("teardown" in r for r in L) else ""))
        no_start = [(b["wall"] - (sb - sa)) / a["wall"] - 1 for a, b, sb, sa in zip(A, B, start_b, start_a)]
        print(f"  (b)'s start {med(start_b):.2f} s vs (a)'s {med(start_a):.2f} s; wall overhead with (b)'s start "
              f"replaced by (a)'s: median {med(no_start) * 100:+.1f}% [{rng([x * 100 for x in no_start], '{:+.1f}')}%]")
    print()
    print(f"X read per rank (round 1; X = {n * d * 4 / MiB:.1f} MiB, {len(A[0]['report']['operators'])} operator(s)"
          f"{'; the store evicted from the page cache before each command' if args.cold_x else ''}):")
    for v, rs in (("a", A), ("b", B)):
        for x in x_reads(rs[0]["report"], n, d):
            who = "1 process" if x["rank"] is None else f"rank {x['rank']}"
            counted = "" if x["counted"] is None else \
                f"reader {x['counted'] / MiB:8.1f} MiB ({x['counted'] / x['share']:.2f}x share)"
            disk = "" if x["disk"] is None else f"disk {x['disk'] / MiB:8.1f} MiB ({x['disk'] / x['share']:.2f}x share)"
            print(f"  ({v}) {who:<9} columns {x['columns'][0]:>4}..{x['columns'][1]:<4} share "
                  f"{x['share'] / MiB:8.1f} MiB  {counted}  {disk}")
    if verify is not None:
        print(f"B.h5 vs A.h5 (round 1): hops 0..{K} and /rows bit for bit equal: {verify['equal']}"
              + (f" (first difference {verify['first_difference']})" if verify["first_difference"] else "")
              + f"; B's hops are virtual datasets: {verify['virtual']} ({verify['virtual_sources']} sources per hop)")

    # -- scaling model --
    rows = A[0]["report"]["rows"]
    print()
    print("scaling model, per rank (P ranks x 1 thread, w = d/P columns, r rows):")
    print("  reads once: S = (n+1)*8 + m*4 (resident; streamed per hop and column block when the budget can't hold it)"
          " + X's slice n*w*4 (file I/O about the same: X's chunks are 16-column tiles)")
    print("  per hop: writes r*w*4; streams S's indices m*4 + (n+1)*8; gathers m*w*4 (>= m*64 once w*4 < 64); "
          "compute ~ m*d/P")
    print("  T(N machines) = T_fixed + T_hops(1)/N,  T_fixed = launch + per-rank setup (repeated) + publish")
    print(f"{'P':>4} {'w':>5} {'S once':>9} {'X slice':>9} {'X file I/O':>10} {'write/hop':>10} {'S/hop':>8} "
          f"{'gather/hop':>11}")
    for p in (1, 2, 4, 8, 16, 32):
        b = bytes_per_rank(n, m, d, rows, p)
        print(f"{p:>4} {b['w']:>5g} {b['S_once'] / MiB:7.0f}MB {b['X_slice_once'] / MiB:7.0f}MB "
              f"{b['X_file_io_once'] / MiB:8.0f}MB {b['written_per_hop'] / MiB:8.0f}MB {b['S_stream_per_hop'] / MiB:6.0f}MB "
              f"{b['gathered_per_hop'] / MiB:7.0f}MB" + (f" (line floor {b['gathered_line_floor_per_hop'] / MiB:.0f}MB)"
                                                         if b["w"] * 4 < CACHE_LINE else ""))
    model = {}
    if C:
        start_c = med([r["wall"] - r["seconds"] for r in C])
        setup_c = med([r["setup"] for r in C])
        h_c = med([r["hops"] for r in C])
        launch = med([r["wall"] for r in L]) if L else None
        print()
        print(f"terms from (c) alone: t_start {start_c:.2f} s, t_setup {setup_c:.2f} s, H {h_c:.2f} s (one worker, "
              f"all {d} columns)" + (f"; t_launch from (L) {launch:.2f} s" if launch is not None else ""))
        # two bounds for the hops of W workers on one machine: cores-bound (H/W: the compute splits) and
        # bytes-bound (H * the machine's bytes per hop at that layout / at one worker: the workers share one
        # memory bus, and one process's W threads move the same bytes as one thread)
        one = hop_bytes(n, m, d, rows, 1)
        bw = one * K / h_c
        print(f"  bytes moved per hop by one worker (all columns): {one / GiB:.1f} GiB; at H(c) that is {bw / GiB:.1f} "
              f"GiB/s ({K} hops)")
        preds = [("c", "(c) 1 x 1  = t_start + t_setup + H", h_c, h_c, 0.0),
                 ("a", f"(a) 1 x {args.threads}  = t_start + t_setup + H/{args.threads} .. H", h_c / args.threads, h_c, 0.0)]
        if launch is not None:
            preds.append(("b", f"(b) {P} x 1  = t_launch + t_start + t_setup + H/{P} .. H*{P}b({P})/b(1)",
                          h_c / P, h_c * P * hop_bytes(n, m, d, rows, P) / one, launch))
        print(f"{'prediction (hops: cores-bound .. bytes-bound)':<64} {'cores s':>7} {'bytes s':>7} "
              f"{'measured s (range)':>22} {'where':>6}")
        for v, label, h_cores, h_bytes, extra in preds:
            meas = [r["wall"] for r in results[v]]
            lo, hi = extra + start_c + setup_c + h_cores, extra + start_c + setup_c + h_bytes
            where = (med(meas) - lo) / (hi - lo) if hi > lo else float("nan")
            print(f"{label:<64} {lo:7.2f} {hi:7.2f} {med(meas):9.2f} [{rng(meas)}] {where * 100:5.0f}%")
            model[f"predicted_{v}"] = [lo, hi]
        print("  where: 0% = at the cores-bound prediction, 100% = at the bytes-bound one")
        ha, hb = [r["hops"] for r in A], [r["hops"] for r in B]
        print(f"  hops: (c) 1 worker {h_c:.2f} s, (a) {args.threads} threads {med(ha):.2f} s [{rng(ha)}], (b) slowest of "
              f"{P} ranks {med(hb):.2f} s [{rng(hb)}]: {args.threads} workers on one machine are "
              f"{h_c / med(ha):.2f}x (threads) and {h_c / med(hb):.2f}x (ranks) one worker, so the hops are bound by "
              "the machine's memory traffic, not its cores; N machines divide that traffic (2 ranks of d/2N columns "
              "each), until a rank's rows are narrower than a cache line")
        model.update(t_start=start_c, t_setup=setup_c, H=h_c, t_launch=launch)
    t_fixed = med([r["wall"] - r["hops"] for r in B])
    t_hops1 = med([r["hops"] for r in B])
    wall_a, wall_b = med([r["wall"] for r in A]), med([r["wall"] for r in B])
    print()
    print(f"projection on N machines of 2 cores ({P} ranks x 1 thread each), from (b): T_fixed = wall(b) - H(b) = "
          f"{t_fixed:.2f} s, T_hops(1) = H(b) = {t_hops1:.2f} s")
    print("  T(N) = T_fixed + T_hops(1)/N;  with floor: T_fixed + T_hops(1) * bytes(P=2N)/bytes(P=2) "
          "(cache-line floor + S's repeated index stream)")
    print(f"{'N':>4} {'ranks':>5} {'w':>5} {'T(N) s':>8} {'vs (b)':>7} {'vs (a)':>7} {'floor T s':>9} {'vs (a)':>7}")
    proj = []
    for N in (1, 2, 4, 8, 16):
        p = P * N
        t = t_fixed + t_hops1 / N
        tf = t_fixed + t_hops1 * line_factor(n, m, d, rows, p, P)
        proj.append({"N": N, "T": t, "T_floor": tf, "speedup_vs_b": wall_b / t, "speedup_vs_a": wall_a / t,
                     "speedup_floor_vs_a": wall_a / tf})
        print(f"{N:>4} {p:>5} {d / p:>5g} {t:8.2f} {wall_b / t:6.2f}x {wall_a / t:6.2f}x {tf:9.2f} {wall_a / tf:6.2f}x")
    print(f"  limit N -> inf: T_fixed = {t_fixed:.2f} s, speed-up over (a) at most {wall_a / t_fixed:.2f}x "
          "(the fixed part does not shrink: every rank loads S and the node order, and torchrun starts torch)")
    f_a = med([r["wall"] - r["hops"] for r in A])
    rho = t_hops1 / med([r["hops"] for r in A])
    print(f"  break-even against (a) (T_fixed(a) = {f_a:.2f} s, H(b)/H(a) = {rho:.2f}): N machines win once "
          "H(a) > (T_fixed(b) - T_fixed(a)) / (1 - (H(b)/H(a))/N), i.e. H(a) >= "
          + ", ".join(f"{(t_fixed - f_a) / (1 - rho / N):.1f} s (N={N})" for N in (2, 4, 8, 16) if rho / N < 1)
          + f"; here H(a) = {med([r['hops'] for r in A]):.2f} s (hop time grows with m*d)")
    total = time.perf_counter() - t_total
    print(f"\ntotal {total:.0f} s; timings on a shared 2-core machine: other jobs add noise (see the load averages "
          "and the ranges)")
    summary = {
        "graph": str(graph), "nodes": n, "stored_entries": m, "dim": d, "hops": K, "ranks": P, "threads": args.threads,
        "budget": args.budget, "rounds": args.rounds,
        "walls": {v: [round(r["wall"], 3) for r in results[v]] for v in order},
        "overhead_median": med(ov), "overhead_rounds": ov, "overhead_inside_median": med(ov_in),
        "overhead_ok": med(ov) <= 0.15, "also_hops": also_summary, "verify": verify, "model": model,
        "T_fixed": t_fixed, "T_hops_1": t_hops1, "projection": proj, "total_seconds": round(total, 1),
        "x_reads": {v: x_reads(results[v][0]["report"], n, d) for v in ("a", "b")},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
