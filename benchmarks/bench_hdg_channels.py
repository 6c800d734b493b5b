"""``precompute --hdg`` as the user runs it, one of its HDG pass's choices with and without, rounds
alternating, each run in its own process (``--compare``):

- ``prefetch``: the vertex-level sums (:func:`gnnprep.sparse.kernels.segment_sum`) prefetching the
  rows of the members ahead (the default) against the same kernel without the prefetch
  (``ahead=0``, what ran before 2026-11-29);
- ``direct``: the channels written around the page cache by a writer thread in the hops' pieces
  (the default) against writing them through HDF5 (h5py's buffered path, what ran before
  2026-11-29; with, the hop writer of the run is the same either way);
- ``fold``: a reduce level over a vertex level (anchors) folded into one weighted vertex level of its
  members once, as the HDG is loaded (:func:`gnnprep.hdg.structure.folded`, the default), against
  the two levels aggregated in turn for every unit (an [instances, d] array, what ran before 2026-11-29).

Prints per variant the HDG channels' seconds, the wall seconds and peak RSS (best and median over
the rounds), without / with as ratios, and whether the two outputs are byte for byte the same
(hops and channels: they must be, where neither changes a value; ``fold`` sums in another order: the
largest relative difference of the channels is printed instead).

    python benchmarks/bench_hdg_channels.py GRAPH HDG [--compare prefetch] [--rounds 3] [--hops 2] [--budget 2GiB]
        [--dtype float16]

The child mode (``--child with-X|without-X ARGS``) runs ``gnnprep ARGS`` with choice X as chosen.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def child(mode: str) -> None:
    """The child mode's patches (:func:`harness.patched_child`); ``without-prefetch``: the vertex sums
    without the prefetch; ``without-direct``: every write of the run through HDF5 (an HDG run's hops
    already are)."""
    if mode == "without-prefetch":
        from gnnprep.sparse import kernels

        kernels.segment_sum = functools.partial(kernels.segment_sum, ahead=0)   # (imported by name at its call)
    elif mode == "without-fold":
        from gnnprep.hdg import structure

        structure.folded = lambda hdg, reduce: hdg   # (imported by name at its call)
    elif mode == "without-direct":
        from gnnprep.precompute import hop_loop

        real = hop_loop.HopWriter
        hop_loop.HopWriter = lambda dtype, path=None, piece_bytes=0: real(dtype, None, piece_bytes)


def main() -> None:
    if H.patched_child(child):
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("hdg")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hops", type=int, default=2)
    ap.add_argument("--budget", default="2GiB")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--compare", choices=("prefetch", "direct", "fold"), default="prefetch")
    args = ap.parse_args()
    graph = Path(args.graph)
    print(H.machine_line())

    def run(mode: str, out: Path) -> dict:
        got = H.run_json([sys.executable, __file__, "--child", f"{mode}-{args.compare}", "precompute", str(graph),
                          "--hdg", args.hdg, "--hops", str(args.hops), "--rows", "all", "--device", "cpu",
                          "--dtype", args.dtype, "--memory-budget", args.budget, "-o", str(out), "--json"])
        return {"hdg": got["report"]["hdg_seconds"], "wall": got["seconds"], "peak_rss": got["peak_rss"]}

    res, same = H.with_without(graph.parent, args.rounds, run)
    summary, ratios = H.with_without_summary(res, ("hdg", "wall"))
    modes = tuple(res)
    for m in modes:
        s = summary[m]
        print(f"{m:8s} {args.compare}: HDG channels {s['hdg']['best']:.2f} s best, {s['hdg']['median']:.2f} median; wall "
              f"{s['wall']['best']:.2f} / {s['wall']['median']:.2f} s; peak {H.gib(s['peak_rss'])}")
    print("without / with: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()) + f"; same output: {same}"
          + ("" if isinstance(same, bool) else " (largest relative difference)"))
    print(json.dumps({"graph": str(graph), "hdg": args.hdg, "compare": args.compare, "rounds": args.rounds, "summary": summary,
                      "ratios": ratios, "same": same}))


if __name__ == "__main__":
    main()
