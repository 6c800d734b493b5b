"""X read from a cold page cache, with and without the tile hints (issue 34, build 1:
``gnnprep.graph.store._TileHints``): ``precompute --hops K --rows all`` on ``--graph`` as the user runs
it (its own process under benchmarks/launcher.py), the store evicted from the page cache before every
run (posix_fadvise DONTNEED: as after a reboot, or at a size the cache does not hold), runs with the
hints (the default) and without (``FEATURE_READ_AHEAD = 0``) alternating.

Printed per variant: hop 0's reads (X from the disk, as the command reports them), the bytes read
from the disk in hop 0, and the command's wall, each as median and span; then the ratios of the
medians (without / with). A VM's host may still cache what the guest evicted, so the disk is not
always as cold as after a reboot: compare the two variants, not the figures to a disk's speed.

    python benchmarks/bench_cold_x.py --graph G.h5 [--rounds 4] [--budget 8GiB] [--hops 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H

WITHOUT = ("import sys\nimport gnnprep.graph.store as G\nG.FEATURE_READ_AHEAD = 0\n"
           "from gnnprep.cli import main\nsys.argv = ['gnnprep'] + sys.argv[1:]\nmain()\n")


def once(graph: Path, out: Path, budget: str, hops: int, hints: bool) -> dict:
    H.clear_output(out)
    H.evict(graph)
    args = ["precompute", graph, "-o", out, "--hops", hops, "--rows", "all", "--device", "cpu",
            "--memory-budget", budget, "--json", "--quiet"]
    cmd = H.gnnprep_cmd(*args) if hints else [sys.executable, "-c", WITHOUT, *[str(a) for a in args]]
    r = H.run_json(cmd)
    d = r["report"]
    return {"wall_s": round(r["seconds"], 3), "hop0_reads_s": d["hop_breakdown"][0]["reads"],
            "hop0_disk_bytes": d["hop_disk_read_bytes"][0], "peak_rss": r["peak_rss"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gnnprep-bench-cold-x"))
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    runs = {"with": [], "without": []}
    for i in range(a.rounds):
        for name in (("with", "without") if i % 2 == 0 else ("without", "with")):
            r = once(a.graph, a.workdir / "feats.h5", a.budget, a.hops, name == "with")
            runs[name].append(r)
            print(f"round {i + 1} {name:8s} hop 0 reads {r['hop0_reads_s']:.2f} s, "
                  f"{r['hop0_disk_bytes'] / 1e9:.2f} GB from the disk, wall {r['wall_s']:.2f} s", flush=True)
    H.clear_output(a.workdir / "feats.h5")
    print(H.machine_line())
    for name, rs in runs.items():
        print(f"  {name:8s} hop 0 reads {H.med_span([r['hop0_reads_s'] for r in rs])} s, wall "
              f"{H.med_span([r['wall_s'] for r in rs])} s, peak RSS {H.gib(max(r['peak_rss'] for r in rs))}")
    ratio = {k: H.median([r[k] for r in runs["without"]]) / max(1e-9, H.median([r[k] for r in runs["with"]]))
             for k in ("hop0_reads_s", "wall_s")}
    print(f"  without / with (medians): hop 0 reads {ratio['hop0_reads_s']:.2f}x, wall {ratio['wall_s']:.2f}x")
    print(json.dumps({"graph": str(a.graph), "budget": a.budget, "hops": a.hops, "runs": runs, "ratio": ratio}))


if __name__ == "__main__":
    main()
