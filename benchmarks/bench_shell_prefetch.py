"""``gnnprep hdg`` with a breadth-first selector (hop shells; anchors search from their anchors the
same way) as the user runs it: the shell searches prefetching the stamps of the in-list entries
they check and the rows of the frontier ahead (the default, since 2026-11-29) against the same
kernel without the prefetches (``walks.SHELL_AHEAD = 0``), rounds alternating, each run in its own
process.

Prints per variant the wall seconds and peak RSS (best and median over the rounds), without / with
as ratios, and whether the two HDG files hold the same arrays (they must: a prefetch changes no
value).

    python benchmarks/bench_shell_prefetch.py GRAPH [--select hop-shells:2,cap=16] [--budget 2GiB] [--rounds 3]

The child mode (``--child with|without ARGS``) runs ``gnnprep ARGS`` with the prefetch chosen.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def child(mode: str) -> None:
    """The child mode's patch (:func:`harness.patched_child`); ``without``: no prefetch (an argument of
    the kernel, so numba's cached code is the same)."""
    if mode == "without":
        from gnnprep.hdg import walks

        walks.SHELL_AHEAD = 0


def same_arrays(a: Path, b: Path) -> bool:
    """Whether every dataset of two HDG files is the same, byte for byte."""
    import h5py

    names: list[str] = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        fa.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        return bool(names) and all(name in fb and np.array_equal(fa[name][...], fb[name][...]) for name in names)


def main() -> None:
    if H.patched_child(child):
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--select", default="hop-shells:2,cap=16")
    ap.add_argument("--budget", default="2GiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    graph = Path(args.graph)
    print(H.machine_line())
    modes = ("with", "without")
    res: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=graph.parent) as tmp:
        for i in range(args.rounds):
            for m in (modes if i % 2 == 0 else modes[::-1]):
                out = Path(tmp) / f"{m}.h5"
                H.clear_output(out)
                got = H.run_measured([sys.executable, __file__, "--child", m, "hdg", str(graph), "--select", args.select,
                                      "--memory-budget", args.budget, "-o", str(out), "--quiet"])
                res[m].append({"wall": got["seconds"], "peak_rss": got["peak_rss"]})
        same = same_arrays(Path(tmp) / "with.h5", Path(tmp) / "without.h5")
    summary = {m: {"wall": {"best": round(min(r["wall"] for r in res[m]), 3),
                            "median": round(H.median([r["wall"] for r in res[m]]), 3)},
                   "peak_rss": max(r["peak_rss"] for r in res[m])} for m in modes}
    for m in modes:
        s = summary[m]
        print(f"{m:8s} prefetch: wall {s['wall']['best']:.2f} s best, {s['wall']['median']:.2f} median; "
              f"peak {H.gib(s['peak_rss'])}")
    ratios = {q: round(summary["without"]["wall"][q] / max(summary["with"]["wall"][q], 1e-9), 3) for q in ("best", "median")}
    print(f"without / with: {ratios['best']:.2f}x best, {ratios['median']:.2f}x median; same output: {same}")
    print(json.dumps({"graph": str(graph), "select": args.select, "budget": args.budget, "rounds": args.rounds,
                      "summary": summary, "ratios": ratios, "same": same}))


if __name__ == "__main__":
    main()
