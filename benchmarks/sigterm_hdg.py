"""How fast ``gnnprep hdg`` acts on SIGTERM, for every selector (issue 12, finding 7).

Generates a 200k-node graph store (random edges, symmetrised) and a typed copy (two node types,
``paper`` and ``author``, for metapaths), starts ``python -m gnnprep hdg`` with each selector at
settings that run well over 5 s, sends SIGTERM after ``--delay`` seconds and prints, per selector,
whether it was still running, the seconds from SIGTERM to exit, the exit code (130 expected), and
whether the output or a temporary file was left behind. Target: every reaction within 2 s.

    python benchmarks/sigterm_hdg.py [--nodes 200000] [--degree 12] [--delay 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.harness import ROOT

SELECTORS = {
    "random-walk": ("g", "random-walk:walks=100,length=10,topk=10"),
    "hop-shells": ("g", "hop-shells:3,cap=20"),
    "anchors": ("g", "anchors:sets=200,size=1000,hops=2"),
    "metapath": ("typed", "metapath:PAPAP=paper-author-paper-author-paper,cap=5"),
}


def make_stores(work: Path, n: int, degree: int) -> dict[str, Path]:
    """The graph store and its typed copy (``/nodes/type``, root attribute ``node_types``)."""
    import h5py
    import numpy as np

    g = H.uniform_random_store(work / f"g_{n}_{degree}.h5", n, degree)
    typed = work / f"typed_{n}_{degree}.h5"
    if not typed.exists():
        tmp = work / "typed.tmp.h5"
        tmp.write_bytes(g.read_bytes())
        with h5py.File(tmp, "r+") as f:
            f.create_dataset("nodes/type", data=np.random.default_rng(1).integers(0, 2, n).astype(np.int16))
            f.attrs["node_types"] = json.dumps(["author", "paper"])
        tmp.replace(typed)
    return {"g": g, "typed": typed}


def measure(store: Path, spec: str, out: Path, delay: float) -> dict:
    out.unlink(missing_ok=True)
    p = subprocess.Popen(H.gnnprep_cmd("hdg", store, "--select", spec, "-o", out, "--quiet"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    alive = p.poll() is None
    t0 = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    reaction = time.perf_counter() - t0
    left = sorted(x.name for x in out.parent.iterdir() if x.name.startswith(out.name))
    return {"running_at_sigterm": alive, "reaction_s": round(reaction, 3), "exit": p.returncode,
            "stderr": err.strip().splitlines()[-1] if err.strip() else "", "left_behind": left}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--degree", type=int, default=12, help="edges per node before symmetrisation")
    ap.add_argument("--delay", type=float, default=3.0, help="seconds before SIGTERM")
    ap.add_argument("--only", default=None, help="comma-separated selectors (default: all)")
    ap.add_argument("--workdir", default="/tmp/gnnprep-sigterm-hdg")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    stores = make_stores(work, args.nodes, args.degree)
    worst = 0.0
    for name, (store, spec) in SELECTORS.items():
        if args.only and name not in args.only.split(","):
            continue
        r = measure(stores[store], spec, work / f"{name}.hdg.h5", args.delay)
        worst = max(worst, r["reaction_s"])
        ok = r["running_at_sigterm"] and r["exit"] == 130 and r["reaction_s"] <= 2.0 and not r["left_behind"]
        print(f"{name:12s} {spec:58s} running at {args.delay:g} s: {r['running_at_sigterm']!s:5s}  "
              f"reaction {r['reaction_s']:6.3f} s  exit {r['exit']}  left {r['left_behind'] or 'nothing'}  "
              f"{'ok' if ok else 'FAIL'}  ({r['stderr']})", flush=True)
    print(f"worst reaction {worst:.3f} s (target <= 2 s)")


if __name__ == "__main__":
    main()
