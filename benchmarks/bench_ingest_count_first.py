"""Benchmark: ingest's counting-first path (``CSRBuilder.count`` then keys placed by row as they are
read) against the straightforward one it replaced (the held bucket's keys sorted into a second
array), on papers100M-shaped ``data.npz`` data sets (``bench_scale.generate``) whose symmetrised
keys stay under the bucket cap (``MAX_BUCKET_ENTRIES``, 24M), where the counting-first path runs.

Each run is ``gnnprep ingest ROOT/ogbn_papers100M -o g.h5 --memory-budget B --order none --json`` in
its own process (wall time and that process's peak RSS, ``harness.run_measured``); the peer is the
same command with ``CSRBuilder.counts_first`` switched off in that process. Interleaved for
--rounds rounds; both stores' fingerprints are compared (the CSR must not change).

    python benchmarks/bench_ingest_count_first.py [--fractions 0.003,0.007] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H
from benchmarks.bench_scale import generate


def child(mode: str, argv: list[str]) -> None:
    """Run the gnnprep command line ``argv`` with counting first on or off (``mode``)."""
    from gnnprep.cli import main
    from gnnprep.sparse import csr_builder

    if mode == "off":
        csr_builder.CSRBuilder.counts_first = property(lambda self: False)
    sys.argv = ["gnnprep", *argv]
    main()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fractions", default="0.003,0.007", help="of papers100M (0.007: ~22.6M keys)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memory-budget", default="4GiB")
    ap.add_argument("--workdir", default="/tmp/gnnprep-bench-scale")
    args = ap.parse_args()
    work = Path(args.workdir)
    print(H.machine_line())
    for fraction in (float(f) for f in args.fractions.split(",")):
        root, meta = generate(work, fraction, 0, False)
        runs = {"on": [], "off": []}
        prints = set()
        for r in range(args.rounds):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                out = work / f"count-first-{mode}.h5"
                H.clear_output(out)
                cmd = [sys.executable, __file__, "--child", mode, "ingest", root / "ogbn_papers100M", "-o", out,
                       "--memory-budget", args.memory_budget, "--order", "none", "--json"]
                res = H.run_measured(cmd)
                runs[mode].append(res)
                with h5py.File(out, "r") as f:
                    prints.add(str(f.attrs["fingerprint"]))
                out.unlink()
        keys = 2 * meta["edges"]
        print(f"fraction {fraction:g}: {meta['nodes']:,} nodes, {meta['edges']:,} edges (~{keys / 1e6:.1f}M keys); "
              f"{'same CSR' if len(prints) == 1 else 'CSR DIFFERS'}")
        for mode, label in (("on", "counting first"), ("off", "sorted held bucket (peer)")):
            secs = [x["seconds"] for x in runs[mode]]
            peaks = [x["peak_rss"] / 2**20 for x in runs[mode]]
            print(f"  {label:26s} wall {H.med_span(secs)} s, peak RSS {H.med_span(peaks, '{:.0f}')} MiB")
        on, off = runs["on"], runs["off"]
        print(f"  peak off / on {H.median([x['peak_rss'] for x in off]) / H.median([x['peak_rss'] for x in on]):.2f}x; "
              f"wall off / on {H.median([x['seconds'] for x in off]) / H.median([x['seconds'] for x in on]):.2f}x")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
    else:
        main()
