"""Late signals (issue 23, item 6): SIGTERM (or SIGINT) in the last part of a short run must end the
command with exit 0 (its output complete) or 130 (no output, or a complete one when the signal came
as the command finished), never by the signal itself, and never leave a partial output or a
temporary file.

Makes a small graph store (uniformly random edges, float32 features), times a few undisturbed runs
of each command (``python -m gnnprep ...``, from process start to exit), then runs ``--trials``
trials per command: start it, send the signal at ``D * (1 - tail * u)`` seconds (D: the median of
the last 5 undisturbed durations, so that it follows the load of a shared machine; an undisturbed
run every 5th attempt, and an attempt that ended before its signal counts as one, not as a trial;
u uniform in [0, 1)), wait, and record the exit status and what is at the
output path: ``complete`` (an artifact that opens, with its ``format`` attribute and every dataset
readable), ``absent``, or ``partial`` (anything else), plus leftovers beside it (``.tmp-<pid>``
files: never allowed; precompute's resumable ``.partial`` files: allowed after an interrupt).
Prints one line per trial with ``--verbose``, and per command a histogram of exit codes and output
states; exits 1 when any trial broke the contract.

    python benchmarks/late_signals.py [--trials 50] [--commands precompute,hdg] [--tail 0.2]
        [--signal TERM] [--source DIR] [--workdir DIR]

``--source DIR``: the gnnprep checkout the commands run from (default: this one), e.g. a
``git worktree`` of an older commit, to measure before and after a change.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness as H


def commands(store: Path, edges: Path, n: int) -> dict[str, list]:
    """Each command's arguments before ``-o OUT`` (short runs: about 1.5-4 s on a quiet machine)."""
    return {
        "precompute": ["precompute", store, "--hops", "3", "--device", "cpu", "--quiet"],
        "hdg": ["hdg", store, "--select", "hop-shells:2,cap=10", "--quiet"],
        "hag": ["hag", store, "--quiet"],
        "ingest": ["ingest", edges, "--num-nodes", n, "--quiet"],
    }


def inputs(work: Path, n: int, degree: int, dim: int) -> tuple[Path, Path]:
    store = H.uniform_random_store(work / f"g_{n}_{degree}_{dim}.h5", n, degree, dim)
    edges = work / f"e_{n}_{degree}.npy"
    if not edges.exists():
        import numpy as np

        np.save(edges, np.random.default_rng(3).integers(0, n, (2, n * degree // 2)).astype(np.int32))
    return store, edges


def output_state(out: Path) -> tuple[str, list[str], list[str]]:
    """(complete | absent | partial, temporary leftovers, resumable leftovers) for ``out``."""
    import h5py

    tmp, resumable = [], []
    for p in out.parent.iterdir():
        if p.name.startswith(out.name) and p != out or p.name.startswith(f".{out.name}"):
            (resumable if ".partial" in p.name else tmp).append(p.name)
    if not out.exists():
        return "absent", sorted(tmp), sorted(resumable)
    try:
        with h5py.File(out, "r") as f:
            if "format" not in f.attrs:
                return "partial", sorted(tmp), sorted(resumable)
            names = []
            f.visit(lambda name: names.append(name) if isinstance(f[name], h5py.Dataset) else None)
            for name in names:
                ds = f[name]
                if ds.shape and ds.shape[0]:
                    ds[ds.shape[0] - 1]  # the last row: a truncated file fails here
                else:
                    ds[()]
    except Exception:  # noqa: BLE001 (any failure to read it back: not a complete artifact)
        return "partial", sorted(tmp), sorted(resumable)
    return "complete", sorted(tmp), sorted(resumable)


def clear(out: Path) -> None:
    for p in out.parent.iterdir():
        if p.name.startswith(out.name) or p.name.startswith(f".{out.name}"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def start(args: list, out: Path, env: dict, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(H.gnnprep_cmd(*args, "-o", out), cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def undisturbed(args: list, out: Path, env: dict, cwd: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        clear(out)
        t0 = time.perf_counter()
        p = start(args, out, env, cwd)
        _, err = p.communicate(timeout=600)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"an undisturbed run failed (exit {p.returncode}): {err.strip()[-500:]}")
    return times


def trial(args: list, out: Path, env: dict, cwd: Path, at: float, signum: int) -> dict:
    clear(out)
    t0 = time.perf_counter()
    p = start(args, out, env, cwd)
    time.sleep(max(0.0, at - (time.perf_counter() - t0)))
    running = p.poll() is None
    sent = time.perf_counter() - t0
    if running:
        p.send_signal(signum)
    try:
        _, err = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    state, tmp, resumable = output_state(out)
    return {"at": round(sent, 3), "running": running, "exit": p.returncode, "seconds": round(time.perf_counter() - t0, 3),
            "output": state, "tmp": tmp, "resumable": resumable,
            "stderr": err.strip().splitlines()[-1] if err.strip() else ""}


def ok(r: dict) -> bool:
    if r["tmp"] or r["output"] == "partial":
        return False
    return (r["exit"] == 0 and r["output"] == "complete") or r["exit"] == 130


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=50, help="trials per command")
    ap.add_argument("--commands", default="precompute,hdg", help="comma-separated: precompute, hdg, hag, ingest")
    ap.add_argument("--tail", type=float, default=0.2, help="the signal lands in the last TAIL of the run")
    ap.add_argument("--signal", default="TERM", choices=["TERM", "INT"])
    ap.add_argument("--calibrate", type=int, default=5, help="undisturbed runs per command for D")
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--degree", type=int, default=10)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source", default=str(H.ROOT), help="the gnnprep checkout to run (default: this one)")
    ap.add_argument("--workdir", default="/tmp/gnnprep-late-signals")
    ap.add_argument("--json", default=None, help="write every trial here")
    ap.add_argument("--verbose", action="store_true", help="one line per trial")
    args = ap.parse_args()
    work = Path(args.workdir)
    (work / "out").mkdir(parents=True, exist_ok=True)
    source = Path(args.source).resolve()
    # the children import gnnprep from --source: cwd is the work folder (``python -m`` puts the cwd first)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    signum = getattr(signal, f"SIG{args.signal}")
    store, edges = inputs(work, args.nodes, args.degree, args.dim)
    table = commands(store, edges, args.nodes)
    rng = random.Random(args.seed)
    print(f"{H.machine_line()}; gnnprep from {source}; SIG{args.signal} in the last "
          f"{args.tail:.0%}", flush=True)
    everything, failed = {}, 0
    for name in args.commands.split(","):
        cmd = table[name]
        out = work / "out" / f"{name}.h5"
        times = undisturbed(cmd, out, env, work, args.calibrate)
        print(f"{name}: undisturbed {H.span(times)} s, D = {H.median(times):.2f} s", flush=True)
        recent = list(times)  # undisturbed durations: D is the median of the last 5 (the load drifts)
        results, attempts = [], 0
        while len(results) < args.trials and attempts < 3 * args.trials:
            attempts += 1
            if attempts % 5 == 0:
                recent += undisturbed(cmd, out, env, work, 1)
            d = H.median(recent[-5:])
            r = trial(cmd, out, env, work, d * (1 - args.tail * rng.random()), signum)
            r["D"] = round(d, 3)
            if not r["running"]:  # it ended before the signal: an undisturbed run, not a trial
                recent.append(r["seconds"])
                continue
            results.append(r)
            if args.verbose or not ok(r):
                print(f"  {name} #{len(results) - 1:2d}: signal at {r['at']:6.3f} s ({r['at'] / d:4.0%} of D = {d:.2f} s), "
                      f"exit {r['exit']:4d} after {r['seconds']:6.3f} s, output {r['output']}"
                      f"{', tmp ' + str(r['tmp']) if r['tmp'] else ''}"
                      f"{', resumable ' + str(r['resumable']) if r['resumable'] else ''}"
                      f"  {'ok' if ok(r) else 'FAIL'}  ({r['stderr'][:90]})", flush=True)
        clear(out)
        codes = collections.Counter(r["exit"] for r in results)
        states = collections.Counter((r["exit"], r["output"]) for r in results)
        bad = sum(not ok(r) for r in results)
        failed += bad
        print(f"{name}: {len(results)} trials with the signal sent while it ran ({attempts - len(results)} more "
              f"ended before it: undisturbed runs); "
              f"exit codes {dict(sorted(codes.items()))}; exit/output "
              f"{ {f'{c}/{s}': k for (c, s), k in sorted(states.items())} }; "
              f"tmp leftovers {sum(bool(r['tmp']) for r in results)}; "
              f"resumable kept {sum(bool(r['resumable']) for r in results)}; broke the contract: {bad}", flush=True)
        everything[name] = {"undisturbed": recent, "trials": results}
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))
    print(f"{H.verdict(failed == 0)}: {failed} trial(s) broke the contract; load {H.load_avg()}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
