"""Issue 33, item 5: where a HAG shrinks the stored entries, a streamed plan reads fewer bytes of S.

Runs ``gnnprep precompute --hops K --rows all`` on one store twice per round, in turn: S streamed in
b row blocks (``--blocks 1,b,c``: from the store, or its ordered copy in the node order) and the
HAG's in-lists streamed in b row blocks from its kept relabelled copy (``--hag FILE --blocks
1,b,c``). Before each run the store, its ordered copy, the HAG and its copy are evicted from the page
cache (``posix_fadvise(DONTNEED)``), and with ``--cgroup-mib`` each run is put in a memory cgroup of
that size (page cache included, cgroup v1), so that a file the page cache cannot keep between
passes is read from the disk again, as at papers100M's size. Prints per variant: the bytes read
from the disk in hops 1..K (the command's own ``hop_disk_read_bytes``), the bytes of S (or of the
HAG's in-lists) one pass reads, hops 1..K's seconds, wall and peak RSS; their ratios; and the
largest relative difference between the two variants' hops (the HAG regroups sums: float tolerance).

    python benchmarks/bench_hag_streamed.py --graph G.h5 --hag G.hag.h5 --blocks 8 --columns 2 --cgroup-mib 600
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import harness as H

CGROUP = Path("/sys/fs/cgroup/memory/gnnprep-bench-hag-streamed")


def evict(paths) -> None:
    for p in paths:
        if Path(p).is_file():
            H.evict(p)


def in_cgroup(cmd: list, mib: int | None) -> list:
    """``cmd`` run in a memory cgroup of ``mib`` MiB (page cache included), or as is."""
    if not mib:
        return cmd
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "memory.limit_in_bytes").write_text(str(mib << 20))
    return ["sh", "-c", f'echo $$ > {CGROUP / "cgroup.procs"} && exec "$@"', "sh", *[str(c) for c in cmd]]


def run(graph: Path, out: Path, hops: int, blocks: str, mib: int | None, files, *extra) -> dict:
    H.clear_output(out)
    evict(files)
    r = H.run_json(in_cgroup(H.gnnprep_cmd("precompute", graph, "-o", out, "--hops", hops, "--rows", "all",
                                           "--device", "cpu", "--blocks", blocks, "--json", *extra), mib))
    d = r["report"]
    disk = d.get("hop_disk_read_bytes") or []
    hop_s = d.get("hop_seconds") or []
    return {"wall_s": round(r["seconds"], 3), "peak_rss": r["peak_rss"], "seconds": d.get("seconds"),
            "hops_1_K_s": round(sum(hop_s[1:]), 3), "disk_1_K": int(sum(disk[1:])) if disk else None,
            "disk_hops": disk, "plan": d.get("plan"), "order": (d.get("decisions") or {}).get("order")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", type=Path, required=True)
    ap.add_argument("--hag", type=Path, required=True, help="its HAG (gnnprep hag), the relabelled copy kept beside it")
    ap.add_argument("--blocks", type=int, default=8, help="row blocks b the in-lists are streamed in")
    ap.add_argument("--columns", type=int, default=1, help="column blocks c (each reads S once per hop)")
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cgroup-mib", type=int, default=None, help="run each command in a memory cgroup of this size")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gnnprep-bench-hag-streamed"))
    args = ap.parse_args()
    import h5py

    args.work.mkdir(parents=True, exist_ok=True)
    blocks = f"1,{args.blocks},{args.columns}"
    stem = args.graph.with_suffix("")
    files = [args.graph, *args.graph.parent.glob(stem.name + ".ordered-*.h5"), args.hag,
             *args.hag.parent.glob(args.hag.with_suffix("").name + ".order-*.h5")]
    with h5py.File(args.graph, "r") as f:
        s_bytes = f["adj/indices"].size * f["adj/indices"].dtype.itemsize if "adj/indices" in f else None
    copies = sorted(args.hag.parent.glob(args.hag.with_suffix("").name + ".order-*.h5"))
    hag_bytes = None
    if copies:
        with h5py.File(copies[0], "r") as f:
            hag_bytes = f["adj/indices"].size * f["adj/indices"].dtype.itemsize
    print(H.machine_line())
    print(f"{args.graph}: one pass over S {H.gib(s_bytes)}; over the HAG's in-lists {H.gib(hag_bytes)}; "
          f"--blocks {blocks}, K = {args.hops}" + (f", each run in a {args.cgroup_mib} MiB cgroup" if args.cgroup_mib
                                                   else ""))
    # warm-up (not measured): the ordered copy of S and the HAG's relabelled copy written if missing
    run(args.graph, args.work / "p.h5", args.hops, blocks, None, [])
    run(args.graph, args.work / "h.h5", args.hops, blocks, None, [], "--hag", args.hag)
    runs: dict = {"plain": [], "hag": []}
    for i in range(args.rounds):
        order = ("plain", "hag") if i % 2 == 0 else ("hag", "plain")
        for v in order:
            extra = ("--hag", args.hag) if v == "hag" else ()
            r = run(args.graph, args.work / f"{v}.h5", args.hops, blocks, args.cgroup_mib, files, *extra)
            runs[v].append(r)
            print(f"  round {i + 1} {v:<5}: wall {r['wall_s']:.2f} s, hops 1..K {r['hops_1_K_s']:.2f} s, disk read in "
                  f"hops 1..K {H.gib(r['disk_1_K'])}, peak {H.gib(r['peak_rss'])}; plan b={r['plan']['b']} "
                  f"c={r['plan']['c']} resident={r['plan']['s_resident']}")
    worst = max(H.max_rel_error(H.read_hop(args.work / "hag.h5", k), H.read_hop(args.work / "plain.h5", k))
                for k in range(1, args.hops + 1))
    res = {}
    for v in runs:
        res[v] = {k: H.median([r[k] for r in runs[v]]) for k in ("wall_s", "hops_1_K_s", "disk_1_K", "peak_rss")}
    ratio = {k: round(res["plain"][k] / res["hag"][k], 3) if res["hag"][k] else None
             for k in ("wall_s", "hops_1_K_s", "disk_1_K")}
    print(f"medians plain / HAG: disk read in hops 1..K {H.gib(res['plain']['disk_1_K'])} / "
          f"{H.gib(res['hag']['disk_1_K'])} ({ratio['disk_1_K']}x fewer bytes); one pass {H.gib(s_bytes)} / "
          f"{H.gib(hag_bytes)}; hops 1..K {res['plain']['hops_1_K_s']:.2f} / {res['hag']['hops_1_K_s']:.2f} s "
          f"({ratio['hops_1_K_s']}x); wall {res['plain']['wall_s']:.2f} / {res['hag']['wall_s']:.2f} s "
          f"({ratio['wall_s']}x); peak {H.gib(res['plain']['peak_rss'])} / {H.gib(res['hag']['peak_rss'])}; "
          f"hops equal to float tolerance: max rel diff {worst:.2e}")
    print(json.dumps({"graph": str(args.graph), "blocks": blocks, "cgroup_mib": args.cgroup_mib, "s_pass_bytes": s_bytes,
                      "hag_pass_bytes": hag_bytes, "runs": runs, "medians": res, "ratios": ratio, "max_rel_diff": worst}))


if __name__ == "__main__":
    sys.exit(main())
