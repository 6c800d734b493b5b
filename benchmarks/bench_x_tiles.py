"""X read per column block (issue 24, build item 3): column-tiled ``/nodes/features`` (what ingest
writes now: chunks of 16 columns) against row chunks spanning every column (what it wrote before),
on the same store, in the same run.

precompute loads X one column block at a time (c blocks of d / c columns). With row chunks each
block reads every chunk whole, so c blocks read c × X from disk; with tiles a block reads about its
own bytes and the c blocks together read X about once. The page cache would hide the difference on a
store smaller than RAM, so each pass first drops the store's pages from the cache
(``posix_fadvise(DONTNEED)``, no root needed): what is timed is a cold read, as at papers100M's size
(57 GB of X on a 24 GiB machine). Printed per c: bytes read from the chunks, seconds (median of
``--rounds``), and the ratio row-chunked / tiled.

    python benchmarks/bench_x_tiles.py [--nodes 1000000] [--dim 128] [--blocks 2,4,8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import (
    MiB,
    evict,
    ingest_arrays,
    load_avg,
    machine_line,
    med_span,
    median,
    write_normal_features,
)
from gnnprep.graph.store import GraphStore


def row_chunked_copy(path: Path, out: Path) -> Path:
    """The same store with X in row chunks spanning every column (~1 MiB), as ingest wrote it before."""
    shutil.copy(path, out)
    with h5py.File(out, "a") as f:
        n, d = f["nodes/features"].shape
        rows = max(1, MiB // (4 * d))
        x = f["nodes/features"]
        f.create_dataset("nodes/features_rows", shape=(n, d), dtype=np.float32, chunks=(min(n, rows), d))
        for s in range(0, n, 1 << 18):
            f["nodes/features_rows"][s:s + (1 << 18)] = x[s:s + (1 << 18)]
        del f["nodes/features"]
        f.move("nodes/features_rows", "nodes/features")
    return out


class CountingFeatures:
    """The store's features dataset with its raw chunk reads counted (bytes)."""

    def __init__(self, ds):
        self._ds, self.bytes = ds, 0
        outer = self

        class _Id:
            def read_direct_chunk(self, offsets):
                mask, data = ds.id.read_direct_chunk(offsets)
                outer.bytes += len(data)
                return mask, data

        self.id = _Id()

    def __getattr__(self, name):
        return getattr(self._ds, name)

    def __getitem__(self, key):
        return self._ds[key]


def read_blocks(path: Path, c: int) -> tuple[float, int]:
    """Seconds and chunk bytes to read X as c column blocks, each from a cold cache (X larger than
    RAM: what one block read is gone by the next)."""
    with GraphStore(path) as g:
        counting = CountingFeatures(g.features)
        g.__class__ = type("Counted", (GraphStore,), {"features": property(lambda self: counting)})
        d = counting.shape[1]
        width = -(-d // c)
        seconds = 0.0
        for c0 in range(0, d, width):
            evict(path)
            t0 = time.perf_counter()
            g.feature_columns(c0, min(d, c0 + width))
            seconds += time.perf_counter() - t0
        return seconds, counting.bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--blocks", default="2,4,8", help="column block counts c to read X in")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-xtiles")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    tiled = work / f"tiled-{args.nodes}-{args.dim}.h5"
    if not tiled.exists():
        rng = np.random.default_rng(0)
        edges, feats = work / "e.npy", work / "x.npy"
        np.save(edges, rng.integers(0, args.nodes, (2, 4 * args.nodes)).astype(np.int32))
        write_normal_features(feats, args.nodes, args.dim, rng)
        ingest_arrays(edges, tiled, args.nodes, feats)
        edges.unlink()
        feats.unlink()
    rows = row_chunked_copy(tiled, work / "rows.h5")
    with h5py.File(tiled, "r") as f, h5py.File(rows, "r") as g:
        print(f"X: {args.nodes:,} x {args.dim} float32 = {args.nodes * args.dim * 4 / MiB:.0f} MiB; chunks "
              f"tiled {f['nodes/features'].chunks}, row-chunked {g['nodes/features'].chunks}")
    print(machine_line(), "| load", load_avg())
    x_bytes = args.nodes * args.dim * 4
    for c in (int(v) for v in args.blocks.split(",")):
        times = {"tiled": [], "rows": []}
        read = {}
        for _ in range(args.rounds):          # alternating, so load drifts hit both alike
            for name, path in (("rows", rows), ("tiled", tiled)):
                s, b = read_blocks(path, c)
                times[name].append(s)
                read[name] = b
        ratio = median(times["rows"]) / median(times["tiled"])
        print(f"c={c}: read rows {read['rows'] / x_bytes:.2f} X in {med_span(times['rows'])} s | "
              f"tiled {read['tiled'] / x_bytes:.2f} X in {med_span(times['tiled'])} s | "
              f"row-chunked / tiled {ratio:.2f}x")
    print("load", load_avg())
    rows.unlink()


if __name__ == "__main__":
    main()
