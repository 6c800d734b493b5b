"""Child of bench_precompute_command.py: the peer, ``torch.sparse.mm`` on a CSR tensor of
S = D̃^-1/2 (A + I) D̃^-1/2 (gnnprep's ``sym``) of a graph store, times X. One warm-up call (its
first calls fault in fresh output memory, which is not the library's speed), then --reps timed
calls; prints one JSON line {"calls": [...], "best": s, "threads": t}.

    python benchmarks/child_torch_spmm.py graph.h5 [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import torch

    from gnnprep.graph.store import GraphStore

    with GraphStore(args.graph) as g:
        ip = g.indptr().astype(np.int64)
        ix = g.read_indices(0, int(ip[-1])).astype(np.int64)
        x = g.features[:]
    n = len(ip) - 1
    s = (np.diff(ip).astype(np.float32) + 1) ** -0.5
    rows = np.repeat(np.arange(n), np.diff(ip))
    keys = np.concatenate([rows * n + ix, np.arange(n) * n + np.arange(n)])
    del rows, ix
    keys.sort()
    r, c = keys // n, keys % n
    del keys
    vals = (s[r] * s[c]).astype(np.float32)
    crow = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=crow[1:])
    del r
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "sparse CSR support is in beta"
        S = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(c), torch.from_numpy(vals), size=(n, n))
    h = torch.from_numpy(x)
    calls = []
    for _ in range(1 + args.reps):
        t = time.perf_counter()
        y = torch.sparse.mm(S, h)
        calls.append(time.perf_counter() - t)
        del y
    print(json.dumps({"calls": [round(t, 3) for t in calls], "best": round(min(calls[1:]), 3),
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
