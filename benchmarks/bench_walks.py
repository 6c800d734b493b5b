"""Random-walk visits per second per core (gnnprep.hdg.walks, the PinSage selector of ``gnnprep hdg``).

Generated graph: n nodes, m stored entries, power-law-ish in-degrees (rows), uniform sources.
Measures the numba kernel (walks + visit counting + top-k) on 1 thread and on all threads, and a
vectorised numpy peer that advances every walker one step at a time (walks only, no counting).
Target: ≥ 2M visits/s per core.

    python benchmarks/bench_walks.py [--nodes 1000000] [--edges 10000000] [--walks 10] [--length 5]
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from gnnprep.hdg.walks import walk_topk


def make_graph(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    weight = rng.pareto(1.5, n) + 1.0
    rows = np.sort(rng.choice(n, m, p=weight / weight.sum()))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, rng.integers(0, n, m).astype(np.int32)


def numpy_peer(indptr, indices, walks, length, count: bool, seed=0) -> float:
    """Seconds for the same walks (no restart) advanced with vectorised numpy steps; with ``count``
    also the visit counts (np.unique over start·n + visited keys, as a vectorised top-k would need)."""
    rng = np.random.default_rng(seed)
    n = len(indptr) - 1
    keys = []
    t0 = time.perf_counter()
    for _ in range(walks):
        start = np.arange(n)
        cur = start.copy()
        for _ in range(length):
            deg = indptr[cur + 1] - indptr[cur]
            pick = (rng.random(n) * deg).astype(np.int64)
            nxt = np.where(deg > 0, indices[np.minimum(indptr[cur] + pick, len(indices) - 1)], start)
            cur = nxt
            if count:
                keys.append(start[nxt != start] * n + nxt[nxt != start])
    if count:
        np.unique(np.concatenate(keys), return_counts=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=10_000_000)
    ap.add_argument("--walks", type=int, default=10)
    ap.add_argument("--length", type=int, default=5)
    ap.add_argument("--topk", type=int, default=10)
    ap.add_argument("--restart", type=float, default=0.2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    indptr, indices = make_graph(args.nodes, args.edges)
    print(f"graph: {args.nodes:,} nodes, {len(indices):,} entries, max in-degree {int(np.diff(indptr).max()):,} "
          f"({time.perf_counter() - t0:.1f} s to generate)")
    visits = args.nodes * args.walks * args.length
    walk_topk(indptr[:2] * 0, indices[:0], 1, 1, 1)  # compile (or load the cache) outside the timing
    threads = numba.get_num_threads()
    results = {}
    for t in sorted({1, threads}):
        numba.set_num_threads(t)
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            walk_topk(indptr, indices, args.walks, args.length, args.topk, args.restart, seed=1)
            best = min(best, time.perf_counter() - t0)
        results[t] = best
        print(f"numba walks, {t} thread(s): {best:.2f} s, {visits / best / 1e6:.2f}M visits/s, "
              f"{visits / best / t / 1e6:.2f}M visits/s per core")
    numba.set_num_threads(threads)
    for count in (False, True):
        peer = numpy_peer(indptr, indices, args.walks, args.length, count)
        what = "walks + visit counts" if count else "walks only, no counting"
        print(f"numpy peer (1 thread, {what}): {peer:.2f} s, {visits / peer / 1e6:.2f}M visits/s; "
              f"numba on 1 thread (walks + counts + top-k) takes {results[1] / peer:.2f}x its time")
    print(f"visits/s per core: {visits / results[threads] / threads / 1e6:.2f}M (target >= 2M)")


if __name__ == "__main__":
    main()
