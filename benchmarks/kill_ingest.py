"""Kill an ingest outright at random moments and let the same command finish: the store must be the
one an uninterrupted run writes (its fingerprints and community order), and the resumed run faster.

    python benchmarks/kill_ingest.py SOURCE [--rounds 6] [--seed 0] [--kills 2] [--workdir DIR]

Each round SIGKILLs ``gnnprep ingest SOURCE`` ``--kills`` times, at a moment drawn uniformly from
[0.5 s, 0.9 × the uninterrupted run's wall], at a budget drawn from 2 GiB and 4 GiB (a resumed run
may use another), then runs it to the end and compares. SIGKILL, not SIGINT: nothing of the killed
process's own clean-up runs, so this is the case where HDF5's metadata may be caught mid-update
(the resumed run must notice, by its checks against the marks, and start afresh rather than carry
it). Prints, per round, the last mark each kill left, where the final run resumed, its seconds
against the uninterrupted run's, its warnings, and SAME or DIFFERENT.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

KEYS = ("fingerprint", "features_fingerprint", "labels_fingerprint", "splits_fingerprint")


def ingest(source: str, out: Path, budget: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gnnprep", "ingest", source, "-o", str(out), "--memory-budget",
                             budget, "--quiet", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def identity(path: Path) -> tuple:
    with h5py.File(path, "r") as f:
        order = f["order/community"][:] if "order/community" in f else None
        return tuple(str(f.attrs[k]) for k in KEYS), order


def last_mark(out: Path) -> str:
    try:
        done = json.loads(out.with_name(out.name + ".partial.json").read_text())["done"]
    except (OSError, ValueError, KeyError):
        return "-"
    return "".join(str(x) for x in done[-1]) if done else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gnnprep-kill-ingest-"))
    work.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(args.seed)
    whole = work / "whole.h5"
    t0 = time.perf_counter()
    p = ingest(args.source, whole, "4GiB", "--json")
    _, err = p.communicate()
    if p.returncode:
        sys.exit(f"the uninterrupted run failed: {err}")
    full_s = time.perf_counter() - t0
    want = identity(whole)
    print(f"uninterrupted run: {full_s:.1f} s")
    out = work / "g.h5"
    bad = 0
    for r in range(args.rounds):
        for p in work.glob("g.h5*"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        kills = []
        for _ in range(args.kills):
            delay = rnd.uniform(0.5, 0.9 * full_s)
            p = ingest(args.source, out, rnd.choice(["2GiB", "4GiB"]))
            time.sleep(delay)
            finished = p.poll() is not None
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills.append(f"{delay:.1f}s:{'finished' if finished else last_mark(out)}")
        t = time.perf_counter()
        p = ingest(args.source, out, "4GiB", "--json")
        stdout, err = p.communicate()
        seconds = time.perf_counter() - t
        if p.returncode:
            print(f"round {r}: kills {kills}; the final run failed: {err.strip()}")
            bad += 1
            continue
        report = json.loads(stdout)
        got = identity(out)
        same = got[0] == want[0] and (got[1] is None) == (want[1] is None) and \
            (got[1] is None or np.array_equal(got[1], want[1]))
        bad += not same
        left = sorted(p.name for p in work.iterdir() if p.name.startswith(("g.h5", ".g.h5")))
        print(f"round {r}: kills {kills}; resumed after {report['resumed']} in {seconds:.1f} s "
              f"({seconds / full_s:.2f} x uninterrupted); warnings {report['warnings']}; "
              f"{'SAME' if same else 'DIFFERENT'}; left {left}")
    print(f"{args.rounds - bad} of {args.rounds} rounds gave the uninterrupted store")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
