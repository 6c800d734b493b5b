"""The hop writes' pieces (``hop_loop.write_step``): ``precompute`` as the user runs it, with a column
block's hop written in about four pieces (the default) against one piece of up to 32 MiB (as before
2026-11-29), with and without a HAG, rounds alternating, each run in its own process.

The writer gathers a piece of the hop back to the stored order (or copies it) into a staging
buffer while the disk writes the piece before; a block written in one piece leaves the disk idle
during its gather, and the last hop waits for both. Prints per variant the hops 1..K seconds (best
and median over the rounds), the runs' peak RSS, and pieces-against-one as ratios; the hops are
compared byte for byte (they must be the same whatever the pieces).

    python benchmarks/bench_write_pieces.py GRAPH [--hag HAG] [--rounds 6] [--hops 3] [--rows all]

GRAPH: a graph store (``benchmarks/bench_hag_stream.py`` caches its graphs as
``<workdir>/<kind>_e<entries>_d<dim>_s0/graph.h5``, with ``hag.h5`` beside them). The child mode
(``--child one|pieces ARGS``) runs ``gnnprep ARGS`` with the pieces chosen.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def child(mode: str) -> None:
    """The child mode's patches (:func:`harness.patched_child`); ``one``: a block's hop in one write of up to 32 MiB."""
    from gnnprep.precompute import hop_loop

    if mode == "one":
        hop_loop.WRITE_MIN_BYTES = hop_loop.WRITE_BYTES   # every piece as large as a block allows


def run(mode: str, graph: Path, out: Path, args, hag: str | None) -> dict:
    H.clear_output(out)
    cmd = [sys.executable, __file__, "--child", mode, "precompute", str(graph), "--hops", str(args.hops),
           "--rows", args.rows, "--device", "cpu", "-o", str(out), "--json"]
    if hag:
        cmd += ["--hag", hag]
    got = H.run_json(cmd)
    r = got["report"]
    return {"hops": sum(r["hop_seconds"][1:]), "seconds": r["seconds"], "peak_rss": got["peak_rss"]}


def main() -> None:
    if H.patched_child(child):
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--hag", default=None, help="a HAG of the graph: its runs too")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--rows", default="all")
    args = ap.parse_args()
    graph = Path(args.graph)
    print(H.machine_line())
    variants = [("plain", None)] + ([("hag", args.hag)] if args.hag else [])
    res = {(v, m): [] for v, _ in variants for m in ("one", "pieces")}
    with tempfile.TemporaryDirectory(dir=graph.parent) as tmp:
        outs = {}
        for i in range(args.rounds):
            for v, hag in variants:
                for m in (("one", "pieces") if i % 2 == 0 else ("pieces", "one")):
                    out = Path(tmp) / f"{v}-{m}.h5"
                    res[(v, m)].append(run(m, graph, out, args, hag))
                    outs[(v, m)] = out
        same = {v: H.same_hops(outs[(v, "one")], outs[(v, "pieces")], args.hops)["equal"] for v, _ in variants}
    summary = {}
    for v, _ in variants:
        one = [r["hops"] for r in res[(v, "one")]]
        pieces = [r["hops"] for r in res[(v, "pieces")]]
        summary[v] = {"one_best": min(one), "one_median": H.median(one), "pieces_best": min(pieces),
                      "pieces_median": H.median(pieces), "best_ratio": round(min(one) / min(pieces), 3),
                      "median_ratio": round(H.median(one) / H.median(pieces), 3),
                      "peak_rss_one": max(r["peak_rss"] for r in res[(v, "one")]),
                      "peak_rss_pieces": max(r["peak_rss"] for r in res[(v, "pieces")]), "same_hops": same[v]}
        s = summary[v]
        print(f"{v:5s} hops 1..{args.hops}: one piece {s['one_best']:.4f} s best, {s['one_median']:.4f} median "
              f"({H.span(one, '{:.4f}')}); pieces {s['pieces_best']:.4f} / {s['pieces_median']:.4f} "
              f"({H.span(pieces, '{:.4f}')}); one / pieces {s['best_ratio']:.2f}x best, {s['median_ratio']:.2f}x "
              f"median; peak {H.gib(s['peak_rss_one'])} / {H.gib(s['peak_rss_pieces'])}; same hops: {same[v]}")
    print(json.dumps({"graph": str(graph), "rounds": args.rounds, "summary": summary}))


if __name__ == "__main__":
    main()
