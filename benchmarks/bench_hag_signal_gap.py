"""How long the HAG search keeps a signal waiting (issue 26, item 3): the longest single numpy call.

CPython runs a signal's handler (SIGTERM, Ctrl-C) between bytecodes, so a signal that arrives during
one long numpy call waits for it to return. The script runs the rounds search of an old commit
(``git show COMMIT:gnnprep/hag/search.py`` and ``structure.py``, in a scratch package beside this
checkout's) and this checkout's on the same generated graph of overlapping groups (the bench_hag
shape), each in its own process, with ``sys.setprofile`` timing every gap between Python-level
events: the longest gap is the longest a signal could wait. Prints seconds, the longest gap, where
it ended and whether both HAGs are the same bytes.

    python benchmarks/bench_hag_signal_gap.py [--old-commit 91e2182] [--nodes 200000] [--groups 23000]
                                              [--capacity 50000|all]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def child(tree: str, nodes: int, groups: int, size: int, capacity: int | None, seed: int) -> None:
    import scipy.sparse as sp

    sys.path.insert(0, tree)
    from gnnprep.hag.search import rounds_search

    rng = np.random.default_rng(seed)
    members = rng.integers(0, nodes, (groups, size))
    src = np.repeat(members, size, axis=1).reshape(-1)
    dst = np.tile(members, (1, size)).reshape(-1)
    a = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(nodes, nodes)).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    del a, src, dst, members
    gap, where, last, prev = [0.0], [None], [time.perf_counter()], [None]

    def tracer(frame, event, arg):
        t = time.perf_counter()
        here = (event, getattr(arg, "__name__", None) or frame.f_code.co_name, frame.f_code.co_filename.split("/")[-1],
                frame.f_lineno)
        if t - last[0] > gap[0]:
            gap[0], where[0] = t - last[0], (prev[0], here)
        last[0], prev[0] = t, here

    t0 = time.perf_counter()
    sys.setprofile(tracer)
    h = rounds_search(indptr, indices, capacity=capacity)
    sys.setprofile(None)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(getattr(h, k)).tobytes()
                                     for k in ("indptr", "indices", "inputs", "level_ptr"))).hexdigest()[:16]
    print(json.dumps({"entries": len(indices), "num_agg": int(h.num_agg), "seconds": round(seconds, 2),
                      "longest_gap": round(gap[0], 3), "between": where[0], "digest": digest}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-commit", default="91e2182")
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=23_000)
    ap.add_argument("--size", type=int, default=20)
    ap.add_argument("--capacity", default="50000", help="aggregation nodes at most, or all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        tree, nodes, groups, size, cap, seed = args.child
        child(tree, int(nodes), int(groups), int(size), None if cap == "none" else int(cap), int(seed))
        return
    cap = str(10 ** 12) if args.capacity == "all" else args.capacity
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(H.ROOT), "archive", args.old_commit, "gnnprep"], check=True,
                       stdout=open(Path(tmp) / "old.tar", "wb"))
        old.mkdir()
        subprocess.run(["tar", "-xf", str(Path(tmp) / "old.tar"), "-C", str(old)], check=True)
        res = {}
        for name, tree in (("old", str(old)), ("new", str(H.ROOT))):
            r = H.run_measured([sys.executable, __file__, "--child", tree, str(args.nodes), str(args.groups),
                                str(args.size), cap, str(args.seed)])
            res[name] = {**json.loads(r["stdout"].strip().splitlines()[-1]), "peak_rss": r.get("peak_rss")}
            print(f"{name} ({args.old_commit if name == 'old' else 'this checkout'}): {json.dumps(res[name])}")
    o, n = res["old"], res["new"]
    print(f"{n['entries']:,} entries, {n['num_agg']:,} aggregation nodes: longest wait for a signal "
          f"{o['longest_gap']:.3f} s -> {n['longest_gap']:.3f} s; search {o['seconds']:.1f} s -> {n['seconds']:.1f} s; "
          f"same HAG: {o['digest'] == n['digest']}")


if __name__ == "__main__":
    main()
