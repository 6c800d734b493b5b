"""``gnnprep hdg --memory-budget`` (issue 33, item 6): the selectors in node blocks under a budget
against the unbudgeted in-memory path, on the same input, each in its own process.

  ours:  ``gnnprep hdg STORE --select SPEC --memory-budget B`` (the CSR held, rows selected and
         written block by block: :mod:`gnnprep.hdg.stream`);
  peer:  the whole HDG in memory, then written: ``select()`` + ``write_hdg()`` of the current tree
         (``--peer library``, the default), or the command of a copy of the code from before this
         change (``--peer before --before-path DIR``: ``PYTHONPATH=DIR python -m gnnprep hdg``).

For each SPEC it prints wall seconds and peak RSS (VmHWM of the process) of both, their ratios,
whether the two files hold the same datasets with the same values, ours' dry-run prediction
(peak, seconds) and the load average. ``--predict-nodes N --predict-entries M`` adds the dry-run
model at another size (the papers100M shape: 111,059,956 and 3.08e9), with Σ deg² scaled from the
store (same degree distribution, N/n times the nodes).

    python benchmarks/bench_hdg_budget.py [--nodes 1000000] [--degree 20] [--budget 1GiB]
        [--store PATH] [--specs SPEC ...] [--peer library|before --before-path DIR]
        [--predict-nodes 111059956 --predict-entries 3080000000 --predict-budget 20GiB]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H

SPECS = ["random-walk:walks=10,length=3,topk=8", "hop-shells:2,cap=16", "anchors:sets=16,size=128"]


def in_memory(store: str, spec: str, out: str) -> None:
    """The peer, in this process: read the CSR, select the whole HDG in memory, write it."""
    from gnnprep.hdg.builder import read_graph
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import parse_select, select, select_spec

    sel = parse_select(spec)
    g = read_graph(store, typed=sel.name == "metapath")
    h = select(g.indptr, g.indices, sel, seed=0, node_type=g.node_type, type_names=g.type_names)
    write_hdg(h, out, {"command": "bench peer"}, sel.name, select_spec(sel), 0, g.fingerprint, 0, 0)
    print(json.dumps({"ok": True}))


def same_datasets(a: Path, b: Path) -> bool:
    """Whether two hdg.h5 files hold the same datasets (dtype, shape, values), read in pieces."""
    import h5py
    import numpy as np

    with h5py.File(a) as fa, h5py.File(b) as fb:
        names_a, names_b = [], []
        fa.visititems(lambda k, v: names_a.append(k) if isinstance(v, h5py.Dataset) else None)
        fb.visititems(lambda k, v: names_b.append(k) if isinstance(v, h5py.Dataset) else None)
        if sorted(names_a) != sorted(names_b):
            return False
        for k in names_a:
            x, y = fa[k], fb[k]
            if x.dtype != y.dtype or x.shape != y.shape:
                return False
            for i in range(0, len(x), 1 << 24):
                if not np.array_equal(x[i:i + (1 << 24)], y[i:i + (1 << 24)]):
                    return False
        for k in ("schema", "channels"):
            if fa.attrs[k] != fb.attrs[k]:
                return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--degree", type=int, default=20, help="edges per node before symmetrisation")
    ap.add_argument("--store", default=None, help="an existing graph store instead of a generated one")
    ap.add_argument("--budget", default="1GiB", help="ours' --memory-budget")
    ap.add_argument("--specs", nargs="+", default=SPECS)
    ap.add_argument("--peer", choices=["library", "before", "none"], default="library")
    ap.add_argument("--before-path", default="/tmp/hdgbase", help="a copy of the package before this change")
    ap.add_argument("--predict-nodes", type=int, default=None)
    ap.add_argument("--predict-entries", type=float, default=None)
    ap.add_argument("--predict-budget", default="20GiB")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-hdg-budget")
    ap.add_argument("--child", nargs=3, metavar=("STORE", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        in_memory(*args.child)
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = Path(args.store) if args.store else H.uniform_random_store(
        work / f"g_{args.nodes}_{args.degree}.h5", args.nodes, args.degree)
    print(f"store {store}; budget {args.budget}; peer {args.peer}")
    for spec in args.specs:
        ours_out, peer_out = work / "ours.hdg.h5", work / "peer.hdg.h5"
        dry = H.run_json(H.gnnprep_cmd("hdg", store, "--select", spec, "--memory-budget", args.budget, "-o", ours_out,
                                       "--dry-run", "--json"))["report"]
        load0 = H.load_avg()
        ours = H.run_json(H.gnnprep_cmd("hdg", store, "--select", spec, "--memory-budget", args.budget, "-o",
                                        ours_out, "--json", "--quiet"))
        line = (f"{spec}: ours {ours['seconds']:.1f} s, peak {H.gib(ours['peak_rss'])} "
                f"(budget {args.budget}: {ours['peak_rss'] / H.parse_size(args.budget):.2f}x; predicted "
                f"{H.gib(dry['predicted_peak_bytes'])}, {dry['predicted_seconds']:.0f} s; {ours['report']['blocks']} "
                f"blocks) [load {load0}]")
        if args.peer != "none":
            load1 = H.load_avg()
            if args.peer == "library":
                peer = H.run_json([sys.executable, __file__, "--child", store, spec, peer_out])
            else:
                env = {**os.environ, "PYTHONPATH": args.before_path}
                cmd = [str(c) for c in H.gnnprep_cmd("hdg", store, "--select", spec, "-o", peer_out, "--json", "--quiet")]
                t0 = time.perf_counter()
                proc = subprocess.run([sys.executable, str(H.HERE / "launcher.py"), *cmd], capture_output=True,
                                      env=env)
                tail = proc.stderr.decode().rpartition("__peak_rss=")[2]
                if proc.returncode != 0 or not tail:
                    sys.exit(proc.stderr.decode()[-3000:])
                peer = {"peak_rss": int(tail.split()[0]), "seconds": time.perf_counter() - t0}
            same = same_datasets(ours_out, peer_out)
            line += (f"; peer ({args.peer}) {peer['seconds']:.1f} s, peak {H.gib(peer['peak_rss'])} [load {load1}]; "
                     f"time ours/peer {ours['seconds'] / peer['seconds']:.2f}x, peak peer/ours "
                     f"{peer['peak_rss'] / ours['peak_rss']:.2f}x; same datasets: {same}")
        print(line, flush=True)
        if args.predict_nodes:
            predict(store, spec, args)


def predict(store: Path, spec: str, args) -> None:
    """The dry-run model at ``--predict-nodes`` / ``--predict-entries``, Σ deg² scaled from the store."""
    import numpy as np

    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg.select import parse_select
    from gnnprep.hdg.stream import plan_hdg

    with GraphStore(store) as g:
        deg = np.diff(g.indptr()).astype(np.float64)
        n = g.num_nodes
        symmetric = g.symmetric
    scale = args.predict_nodes / n
    p = plan_hdg(parse_select(spec), args.predict_nodes, int(args.predict_entries), H.parse_size(args.predict_budget),
                 deg2=float((deg ** 2).sum()) * scale, symmetric=symmetric, threads=2)
    print(f"  at n = {args.predict_nodes:,}, {int(args.predict_entries):,} entries, {args.predict_budget}: "
          f"{p.blocks} blocks of {p.block_nodes:,} nodes, CSR {H.gib(p.graph_bytes)}, predicted peak "
          f"{H.gib(p.predicted_peak_bytes)}, {p.predicted_seconds:.0f} s, HDG ~{H.gib(p.predicted_hdg_bytes)}", flush=True)


if __name__ == "__main__":
    main()
