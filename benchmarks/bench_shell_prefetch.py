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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def child(mode: str) -> None:
    """The child mode's patch (:func:`harness.patched_child`); ``without``: no prefetch (an argument of
    the kernel, so numba's cached code is the same)."""
    if mode == "without":
        from gnnprep.hdg import walks

        walks.SHELL_AHEAD = 0


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

    def run(mode: str, out: Path) -> dict:
        got = H.run_measured([sys.executable, __file__, "--child", mode, "hdg", str(graph), "--select", args.select,
                              "--memory-budget", args.budget, "-o", str(out), "--quiet"])
        return {"wall": got["seconds"], "peak_rss": got["peak_rss"]}

    res, same = H.with_without(graph.parent, args.rounds, run)
    summary, ratios = H.with_without_summary(res, ("wall",))
    for m in res:
        s = summary[m]
        print(f"{m:8s} prefetch: wall {s['wall']['best']:.2f} s best, {s['wall']['median']:.2f} median; "
              f"peak {H.gib(s['peak_rss'])}")
    print(f"without / with: {ratios['wall_best']:.2f}x best, {ratios['wall_median']:.2f}x median; same output: {same}")
    print(json.dumps({"graph": str(graph), "select": args.select, "budget": args.budget, "rounds": args.rounds,
                      "summary": summary, "ratios": ratios, "same": same}))


if __name__ == "__main__":
    main()
