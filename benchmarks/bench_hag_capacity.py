"""Capacity-limited HAG search against the exact greedy (issue 26, item 3).

For each graph — a generated ego-network-like graph (hubs joined to their whole network, members in
a few hundred dense, overlapping circles; ~4k nodes, ~180k stored entries), a generated
citation-like graph (preferential attachment with triad closure, Cora's size) and Cora itself when
``--cora`` exists (OGB layout) — and each capacity (|V|/4 and uncapped), the script runs, each in its
own process under benchmarks/launcher.py (wall seconds and peak RSS from wait4):

- ``exact``: Algorithm 3 of Jia et al. (KDD 2020), gnnprep.hag.search.exact_search (the oracle);
- ``old``: the rounds search as of ``--old-commit`` (``git show COMMIT:gnnprep/hag/search.py``, run
  against this checkout's structure module);
- ``new``: this checkout's rounds search.

and prints the savings (aggregations removed) each keeps as a share of the exact greedy's.

    python benchmarks/bench_hag_capacity.py [--old-commit c44a6fc] [--cora ../shared/data/cora]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def _sym_csr(u, v, n):
    a = sp.coo_matrix((np.ones(len(u)), (u, v)), shape=(n, n)).tocsr()
    a = (a + a.T).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return a.indptr.astype(np.int64), a.indices.astype(np.int64)


def ego_graph(n=4000, egos=10, circles=300, p_in=0.8, p_bg=0.01, median=15, seed=0):
    """Ego networks: 10 hubs joined to all members of their network (Dirichlet sizes, a little overlap),
    sparse background edges in each network, and ``circles`` dense circles (lognormal sizes) inside."""
    rng = np.random.default_rng(seed)
    sizes = np.maximum((rng.dirichlet(np.ones(egos) * 0.8) * (n - egos)).astype(int), 30)
    perm = rng.permutation(np.arange(egos, n))
    us, vs, nets, start = [], [], [], 0
    for e in range(egos):
        s = sizes[e]
        mem = perm[start:start + s] if start + s <= len(perm) else rng.choice(perm, s, replace=False)
        start += s
        mem = np.unique(np.concatenate([mem, rng.choice(perm, max(1, s // 20), replace=False)]))
        nets.append(mem)
        us.append(np.full(len(mem), e))
        vs.append(mem)
        k = int(p_bg * len(mem) ** 2 / 2)
        us.append(rng.choice(mem, k))
        vs.append(rng.choice(mem, k))
    weight = np.array([len(m) for m in nets], dtype=float)
    for _ in range(circles):
        mem = nets[rng.choice(egos, p=weight / weight.sum())]
        g = rng.choice(mem, int(min(len(mem), max(3, rng.lognormal(np.log(median), 0.8)))), replace=False)
        i, j = np.triu_indices(len(g), 1)
        keep = rng.random(len(i)) < p_in
        us.append(g[i[keep]])
        vs.append(g[j[keep]])
    u, v = np.concatenate(us), np.concatenate(vs)
    return _sym_csr(u[u != v], v[u != v], n)


def citation_graph(n=2708, m=2, triad=0.3, seed=0):
    """Preferential attachment with triad closure (Holme & Kim 2002), symmetrised."""
    rng = np.random.default_rng(seed)
    ends, nbrs, us, vs = [], [set() for _ in range(n)], [], []
    for v in range(1, n):
        chosen = set()
        while len(chosen) < min(m, v):
            if chosen and rng.random() < triad:
                cand = sorted(nbrs[next(iter(chosen))] - chosen - {v})
                if cand:
                    chosen.add(cand[rng.integers(len(cand))])
                    continue
            chosen.add(int(ends[rng.integers(len(ends))]) if ends and rng.random() < 0.8 else int(rng.integers(v)))
        for u in chosen:
            us.append(u)
            vs.append(v)
            nbrs[u].add(v)
            nbrs[v].add(u)
            ends += [u, v]
    return _sym_csr(np.array(us), np.array(vs), n)


def cora_graph(root: Path):
    e = np.loadtxt(root / "raw" / "edge.csv.gz", delimiter=",", dtype=np.int64)
    return _sym_csr(e[:, 0], e[:, 1], int(e.max()) + 1)


def child(method: str, graph: str, capacity: int, old: str) -> None:
    """Run one search on the saved graph; print its JSON (savings, agg nodes, search seconds)."""
    from gnnprep.hag.structure import graph_cost
    if method == "old":
        import importlib.util
        spec = importlib.util.spec_from_file_location("old_search", old)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        search = mod.rounds_search
    else:
        from gnnprep.hag import search as mod
        search = mod.exact_search if method == "exact" else mod.rounds_search
    z = np.load(graph)
    ip, ix = z["indptr"], z["indices"]
    t = time.perf_counter()
    h = search(ip, ix, capacity=capacity)
    sec = time.perf_counter() - t
    print(json.dumps({"saved": graph_cost(ip)[0] - h.aggregations(), "num_agg": h.num_agg, "seconds": sec}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-commit", default="c44a6fc")
    ap.add_argument("--cora", default=str(H.CORA))
    ap.add_argument("--graphs", default="ego,citation,cora")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-hag-capacity")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        m, g, c, o = args.child
        return child(m, g, int(c), o)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    old = work / "old_search.py"
    old.write_bytes(subprocess.run(["git", "-C", str(H.ROOT), "show", f"{args.old_commit}:gnnprep/hag/search.py"],
                                   check=True, capture_output=True).stdout)
    makers = {"ego": ego_graph, "citation": citation_graph, "cora": lambda: cora_graph(Path(args.cora))}
    rows = []
    print(H.machine_line())
    for name in args.graphs.split(","):
        if name == "cora" and not Path(args.cora).exists():
            print(f"cora: {args.cora} not found, skipped")
            continue
        ip, ix = makers[name]()
        path = work / f"{name}.npz"
        np.savez(path, indptr=ip, indices=ix)
        n = len(ip) - 1
        print(f"{name}: {n:,} nodes, {int(ip[-1]):,} stored entries, max in-degree {int(np.diff(ip).max())}")
        for label, cap in (("|V|/4", n // 4), ("uncapped", 10**12)):
            res = {}
            for method in ("exact", "old", "new"):
                r = H.run_measured([sys.executable, __file__, "--child", method, path, cap, old])
                res[method] = {**json.loads(r["stdout"].splitlines()[-1]), "peak_rss": r["peak_rss"]}
            for method in ("exact", "old", "new"):
                x = res[method]
                kept = x["saved"] / max(1, res["exact"]["saved"])
                rows.append({"graph": name, "capacity": label, "method": method, "kept": round(kept, 4), **x})
                print(f"  {label:9s} {method:5s}: saved {x['saved']:>8,} ({100 * kept:5.1f}% of exact), "
                      f"{x['num_agg']:>7,} agg nodes, search {x['seconds']:7.2f} s, peak RSS {x['peak_rss'] / 2**20:6.0f} MiB",
                      flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
