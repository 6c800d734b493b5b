"""Child of bench_precompute_command.py: the OGB recipe in scipy (papers100M's ``sgc.py``), everything
in memory: load the CSR and X from the graph store, build S = D̃^-1/2 (A + I) D̃^-1/2 (float32), then
``x = S @ x`` K times keeping every hop. Prints one JSON line {"load": s, "build": s, "products": s,
"total": s} (nothing written: the peer's whole job is in memory).

    python benchmarks/child_scipy_recipe.py graph.h5 [--hops 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph")
    ap.add_argument("--hops", type=int, default=3)
    args = ap.parse_args()
    import scipy.sparse as sp

    from gnnprep.graph.store import GraphStore

    t0 = time.perf_counter()
    with GraphStore(args.graph) as g:
        ip = g.indptr().astype(np.int64)
        ix = g.read_indices(0, int(ip[-1]))
        x = g.features[:]
    n = len(ip) - 1
    t1 = time.perf_counter()
    a = sp.csr_matrix((np.ones(len(ix), np.float32), ix, ip), shape=(n, n)) + sp.identity(n, np.float32, format="csr")
    s = sp.diags(np.asarray(a.sum(axis=1)).ravel() ** -0.5)
    S = (s @ a @ s).astype(np.float32).tocsr()
    t2 = time.perf_counter()
    hops = [x]
    for _ in range(args.hops):
        hops.append(S @ hops[-1])
    t3 = time.perf_counter()
    print(json.dumps({"load": round(t1 - t0, 3), "build": round(t2 - t1, 3), "products": round(t3 - t2, 3),
                      "total": round(t3 - t0, 3)}))


if __name__ == "__main__":
    main()
