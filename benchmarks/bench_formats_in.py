"""Benchmark: `gnnprep ingest` of the same graph from each input layout of issue 25, under a memory
budget smaller than the data.

One random directed graph (--nodes, --edges; duplicates and self-loops included) is written as a TSV
edge list, a Matrix Market file (.mtx and .mtx.gz, pattern general), scipy save_npz matrices (csr
stored and compressed, coo) and a GraphSAINT folder (csr adj_full.npz, feats.npy [n, --dim] float32,
class_map.json, role.json). Each is ingested in its own process (``--order none``, ``--memory-budget``)
and its wall time and peak RSS (wait4) are reported, with the store's CSR fingerprint, which must be
the same for every layout.

    python benchmarks/bench_formats_in.py --workdir /tmp/gnnprep-formats            # 500k nodes, 5M edges
    python benchmarks/bench_formats_in.py --nodes 50000 --edges 400000 --budget 4MiB   # quick
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def write_inputs(d: Path, n: int, m: int, dim: int, seed: int = 0) -> dict[str, Path]:
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    pairs = np.stack([src, dst], 1)
    out["tsv"] = d / "e.tsv"
    np.savetxt(out["tsv"], pairs, fmt="%d", delimiter="\t")
    header = f"%%MatrixMarket matrix coordinate pattern general\n% bench\n{n} {n} {m}\n"
    out["mtx"] = d / "a.mtx"
    with open(out["mtx"], "w") as f:
        f.write(header)
        np.savetxt(f, pairs + 1, fmt="%d")
    out["mtx.gz"] = d / "a.mtx.gz"
    with open(out["mtx"], "rb") as f, gzip.open(out["mtx.gz"], "wb", compresslevel=1) as g:
        while chunk := f.read(1 << 24):
            g.write(chunk)
    coo = sp.coo_matrix((np.ones(m, dtype=np.float32), (src, dst)), shape=(n, n))
    out["npz csr"] = d / "a_csr.npz"
    sp.save_npz(out["npz csr"], coo.tocsr(), compressed=False)
    out["npz csr compressed"] = d / "a_csrz.npz"
    sp.save_npz(out["npz csr compressed"], coo.tocsr(), compressed=True)
    out["npz coo"] = d / "a_coo.npz"
    sp.save_npz(out["npz coo"], coo, compressed=False)
    saint = out["graphsaint"] = d / "saint"
    saint.mkdir(exist_ok=True)
    sp.save_npz(saint / "adj_full.npz", coo.tocsr(), compressed=False)
    np.save(saint / "feats.npy", rng.standard_normal((n, dim), dtype=np.float32))
    y = rng.integers(0, 40, n)
    (saint / "class_map.json").write_text(json.dumps({str(i): int(c) for i, c in enumerate(y)}))
    perm = rng.permutation(n).tolist()
    a, b = int(0.6 * n), int(0.8 * n)
    (saint / "role.json").write_text(json.dumps({"tr": perm[:a], "va": perm[a:b], "te": perm[b:]}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/gnnprep-formats")
    ap.add_argument("--nodes", type=int, default=500_000)
    ap.add_argument("--edges", type=int, default=5_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--budget", default="64MiB")
    args = ap.parse_args()
    d = Path(args.workdir)
    tag = f"n{args.nodes}-m{args.edges}-d{args.dim}"
    inputs = write_inputs(d / tag, args.nodes, args.edges, args.dim) if not (d / tag / "saint").is_dir() else {
        "tsv": d / tag / "e.tsv", "mtx": d / tag / "a.mtx", "mtx.gz": d / tag / "a.mtx.gz",
        "npz csr": d / tag / "a_csr.npz", "npz csr compressed": d / tag / "a_csrz.npz",
        "npz coo": d / tag / "a_coo.npz", "graphsaint": d / tag / "saint"}
    data_bytes = 16 * args.edges
    print(f"{args.nodes:,} nodes, {args.edges:,} directed edges ({H.gib(data_bytes)} of int64 pairs), "
          f"budget {args.budget}, load {H.load_avg()}")
    fps = {}
    for name, path in inputs.items():
        out = d / f"{tag}-{name.replace(' ', '_')}.h5"
        H.clear_output(out)
        extra = ["--num-nodes", args.nodes] if name == "tsv" else []
        r = H.run_json(H.gnnprep_cmd("ingest", path, "-o", out, "--memory-budget", args.budget, "--order", "none",
                                     "--json", "--quiet", *extra))
        import h5py

        with h5py.File(out, "r") as f:
            fps[name] = str(f.attrs["fingerprint"])
        rep = r["report"]
        print(f"  {name:20s} {r['seconds']:7.2f} s  peak RSS {r['peak_rss'] / H.MiB:7.1f} MiB  "
              f"{rep['num_edges']:,} stored entries  fingerprint {fps[name][:12]}")
    same = len(set(fps.values())) == 1
    print(f"same CSR from every layout: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
