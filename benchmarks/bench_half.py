"""``precompute --dtype float16`` as the user runs it: the float16 conversions of :mod:`gnnprep.sparse.half`
(fused with the writer's gather and overflow check; the HDG channels' read-back widened in pieces)
against numpy's (``astype``, and HDF5's own float16 → float32 read conversion: what ran before
2026-11-29), rounds alternating, each run in its own process; the same command with ``--dtype
float32`` beside them (what float16 should not cost more than).

Prints per variant the wall seconds, hops 1..K seconds, the HDG channels' seconds (with ``--hdg``),
peak RSS (best and median over the rounds), ours against numpy's as ratios, and whether the two
float16 outputs are byte for byte the same (they must be).

    python benchmarks/bench_half.py GRAPH [--hdg HDG] [--rounds 4] [--hops 2] [--rows all] [--budget 8GiB]

The child mode (``--child ours|numpy ARGS``) runs ``gnnprep ARGS`` with the conversion chosen.
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
    """The child mode's patches (:func:`harness.patched_child`); ``numpy``: numpy's and HDF5's float16 conversions, as before."""
    if mode == "numpy":
        from gnnprep.precompute import features
        from gnnprep.sparse import half

        half.converts = lambda src, dst: False   # every conversion through numpy's cast

        def read_by_hdf5(ds, c0, c1):
            out = np.empty((ds.shape[0], c1 - c0), dtype=np.float32)
            ds.read_direct(out, np.s_[:, c0:c1])
            return out

        features.read_columns_float32 = read_by_hdf5


def run(mode: str, dtype: str, graph: Path, out: Path, args) -> dict:
    H.clear_output(out)
    cmd = [sys.executable, __file__, "--child", mode, "precompute", str(graph), "--hops", str(args.hops),
           "--rows", args.rows, "--device", "cpu", "--dtype", dtype, "--memory-budget", args.budget,
           "-o", str(out), "--json"]
    if args.hdg:
        cmd += ["--hdg", args.hdg]
    got = H.run_json(cmd)
    r = got["report"]
    return {"wall": got["seconds"], "hops": sum(r["hop_seconds"][1:]),
            "hdg": r.get("hdg_seconds") or 0.0, "peak_rss": got["peak_rss"]}


def main() -> None:
    if H.patched_child(child):
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--hdg", default=None, help="an HDG of the graph: its channels too (--rows all)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--hops", type=int, default=2)
    ap.add_argument("--rows", default="all")
    ap.add_argument("--budget", default="8GiB")
    args = ap.parse_args()
    graph = Path(args.graph)
    print(H.machine_line())
    variants = [("ours", "float16"), ("numpy", "float16"), ("ours", "float32")]
    res = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(dir=graph.parent) as tmp:
        for i in range(args.rounds):
            for v in (variants if i % 2 == 0 else variants[::-1]):
                res[v].append(run(v[0], v[1], graph, Path(tmp) / f"{v[0]}-{v[1]}.h5", args))
        same = H.same_hops(Path(tmp) / "ours-float16.h5", Path(tmp) / "numpy-float16.h5", args.hops)["equal"]
    summary = {}
    for v in variants:
        rows = res[v]
        summary[f"{v[0]}-{v[1]}"] = {k: {"best": round(min(r[k] for r in rows), 3),
                                         "median": round(H.median([r[k] for r in rows]), 3)}
                                     for k in ("wall", "hops", "hdg")}
        summary[f"{v[0]}-{v[1]}"]["peak_rss"] = max(r["peak_rss"] for r in rows)
    ours, peer, f32 = (summary[k] for k in ("ours-float16", "numpy-float16", "ours-float32"))
    for name, s in summary.items():
        print(f"{name:14s} wall {s['wall']['best']:.2f} s best, {s['wall']['median']:.2f} median; hops 1..{args.hops} "
              f"{s['hops']['best']:.3f} / {s['hops']['median']:.3f} s"
              + (f"; HDG channels {s['hdg']['best']:.2f} / {s['hdg']['median']:.2f} s" if args.hdg else "")
              + f"; peak {H.gib(s['peak_rss'])}")
    ratios = {f"{k}_{q}": round(peer[k][q] / max(ours[k][q], 1e-9), 3) for k in ("wall", "hops", "hdg")
              for q in ("best", "median") if peer[k][q]}
    print("float16, numpy's conversions / ours: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
          + f"; float32 / float16 (ours) wall {f32['wall']['median'] / ours['wall']['median']:.2f}x median; "
          f"same float16 output: {same}")
    print(json.dumps({"graph": str(graph), "hdg": args.hdg, "rounds": args.rounds, "summary": summary,
                      "ratios": ratios, "same": same}))


if __name__ == "__main__":
    main()
