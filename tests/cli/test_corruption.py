"""Issue 12, acceptance 4: randomized corruption of every artifact's index arrays.

Each trial copies one artifact, rewrites one of its index arrays at random (out-of-range or negative
entries, flipped bits, shifted or permuted runs, a shorter or longer array) and runs every command
that consumes it: ``info``, ``hag``, ``hdg``, ``precompute`` (plain, ``--hag``, ``--hdg``),
``ingest`` of the store, ``train sgc --epochs 1``. Every command must exit 0 or 1 without an
uncaught exception; a crash by a signal (a segfault in a compiled kernel) kills the process, so the
trials run in child processes, each printing one JSON line per trial (and one before it starts),
and the parent names the trial a child died in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

TRIALS = 221           # at least 200, spread over the targets below
CHILDREN = 2           # processes, each running every CHILDREN-th trial (2 cores; each child of a fresh
                       # clone compiles every kernel it runs: 4 children took 121 s of a cold run)
TARGETS = [            # (artifact, dataset)
    ("g.h5", "adj/indptr"), ("g.h5", "adj/indices"), ("mag.h5", "nodes/type"), ("mag.h5", "adj/indices"),
    ("hag.h5", "agg/inputs"), ("hag.h5", "agg/level_ptr"), ("hag.h5", "adj/indptr"), ("hag.h5", "adj/indices"),
    ("shells.h5", "levels/shell_members/ids"), ("shells.h5", "levels/shell_members/offsets"),
    ("walk.h5", "levels/topk/ids"), ("walk.h5", "levels/topk/offsets"),
    ("f.h5", "rows"), ("f.h5", "labels"), ("f.h5", "splits/train"), ("f.h5", "splits/valid"), ("f.h5", "splits/test"),
]
SPECS = ["hop-shells:2,cap=3", "random-walk:walks=3,length=3,topk=3", "anchors:sets=2,size=3"]
N = 50


# -- building the artifacts (parent) --------------------------------------------------------------------
def build(tmp: Path) -> None:
    from fixtures import build_artifacts

    build_artifacts(tmp, N, 160, 3, seed=3, hag_capacity=15, specs=(("shells", SPECS[0]), ("walk", SPECS[1])),
                    hops=2, mag={"n_paper": 20, "n_author": 15})


# -- one trial (child) ----------------------------------------------------------------------------------
def mutate(path: Path, name: str, rng: np.random.Generator) -> str:
    """Rewrite dataset ``name`` of ``path`` at random; return what was done."""
    with h5py.File(path, "r+") as f:
        a = f[name][:]
        info = np.iinfo(a.dtype)
        flat = a.reshape(-1)
        mode = int(rng.integers(0, 7))
        if mode == 0 and len(flat):      # a few entries set to edge values
            k = int(rng.integers(1, 4))
            pos = rng.integers(0, len(flat), k)
            vals = rng.choice([-1, -2, N, N + 1, 10**6, info.max, info.min, 0, int(flat.max()) + 1], k)
            flat[pos] = np.clip(vals, info.min, info.max).astype(a.dtype)
            desc = f"set {pos.tolist()} to {vals.tolist()}"
        elif mode == 1 and len(flat):    # a flipped bit
            pos, bit = int(rng.integers(0, len(flat))), int(rng.integers(0, 8 * a.dtype.itemsize - 1))
            flat[pos] = (flat[pos:pos + 1].view(f"u{a.dtype.itemsize}") ^ (1 << bit)).view(a.dtype)[0]
            desc = f"flipped bit {bit} of [{pos}]"
        elif mode == 2 and len(flat) > 2:  # a run permuted (breaks sorting / monotonicity)
            i0 = int(rng.integers(0, len(flat) - 2))
            i1 = min(len(flat), i0 + int(rng.integers(2, 8)))
            flat[i0:i1] = rng.permutation(flat[i0:i1])[::-1]
            desc = f"permuted [{i0}:{i1}]"
        elif mode == 3:                  # every entry shifted
            shift = int(rng.choice([-1, 1, 7]))
            a = np.clip(a.astype(np.int64) + shift, info.min, info.max).astype(a.dtype)
            desc = f"shifted by {shift}"
        elif mode == 4:                  # random values in and beyond range
            a = rng.integers(-2, N + 3, a.shape).astype(a.dtype)
            desc = "random values in [-2, N+3)"
        else:                            # shorter or longer
            k = len(a) + int(rng.choice([-2, -1, 1, 3]))
            a = np.resize(a, (max(0, k),) + a.shape[1:])
            desc = f"resized to {len(a)}"
        del f[name]
        f.create_dataset(name, data=a)
    return desc


def commands(artifact: str, folder: Path, i: int) -> dict[str, list]:
    """The commands that consume ``artifact`` (a corrupt copy in ``folder``; the others pristine)."""
    g, out = folder / "g.h5", folder / "out.h5"
    pre = ["precompute", g, "-o", out, "--hops", "2", "--device", "cpu", "--quiet"]
    if artifact == "g.h5":
        return {"info": ["info", g], "hag": ["hag", g, "-o", out], "hdg": ["hdg", g, "--select", SPECS[i % 3], "-o", out],
                "precompute": pre, "precompute_hag": pre + ["--hag", folder / "hag.h5"],
                "precompute_hdg": pre + ["--hdg", folder / "shells.h5"], "ingest": ["ingest", g, "-o", out]}
    if artifact == "mag.h5":
        m = folder / "mag.h5"
        return {"info": ["info", m], "hdg": ["hdg", m, "--select", "metapath:PAP=paper-author-paper,cap=3", "-o", out],
                "hag": ["hag", m, "-o", out], "precompute": ["precompute", m, "-o", out, "--hops", "1", "--device", "cpu"],
                "ingest": ["ingest", m, "-o", out]}
    if artifact == "hag.h5":
        return {"info": ["info", folder / artifact], "precompute_hag": pre + ["--hag", folder / artifact]}
    if artifact in ("shells.h5", "walk.h5"):
        return {"info": ["info", folder / artifact], "precompute_hdg": pre + ["--hdg", folder / artifact]}
    return {"info": ["info", folder / "f.h5"],
            "train": ["train", "sgc", folder / "f.h5", "-o", folder / "run", "--epochs", "1", "--device", "cpu",
                      "--quiet"]}


def trial(base: Path, work: Path, i: int) -> dict:
    from click.testing import CliRunner

    from gnnprep.cli import cli

    artifact, name = TARGETS[i % len(TARGETS)]
    folder = work / f"t{i}"
    folder.mkdir()
    for p in {"g.h5", "hag.h5", "shells.h5", artifact}:
        shutil.copy(base / p, folder / p)
    desc = mutate(folder / artifact, name, np.random.default_rng(1000 + i))
    results = {}
    for cmd, args in commands(artifact, folder, i).items():
        r = CliRunner().invoke(cli, [str(a) for a in args])
        exc = r.exception if not isinstance(r.exception, SystemExit) else None
        results[cmd] = {"exit": r.exit_code, "exception": None if exc is None else f"{type(exc).__name__}: {exc}"[:300],
                        "stderr": r.stderr.strip()[:300]}
        for p in (folder / "out.h5", folder / "run"):
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    shutil.rmtree(folder)
    return {"trial": i, "artifact": artifact, "dataset": name, "mutation": desc, "results": results}


def child_main(base: str, work: str, first: int, step: int, total: int) -> None:
    for i in range(first, total, step):
        print(json.dumps({"start": i}), flush=True)
        print(json.dumps(trial(Path(base), Path(work), i)), flush=True)


# -- the test (parent) ----------------------------------------------------------------------------------
def test_random_corruption_never_crashes(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    build(base)
    here, tests = Path(__file__).parent, Path(__file__).parents[1]  # this file; conftest.py and fixtures.py
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    for c in range(CHILDREN):
        work = tmp_path / f"work{c}"
        work.mkdir()
        code = (f"import sys; sys.path[:0] = [{str(here)!r}, {str(tests)!r}]; import conftest, test_corruption as t; "
                f"t.child_main({str(base)!r}, {str(work)!r}, {c}, {CHILDREN}, {TRIALS})")
        procs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=tmp_path))
    problems, done = [], 0
    for c, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        started = [x["start"] for x in lines if "start" in x]
        for t in (x for x in lines if "trial" in x):
            done += 1
            for cmd, r in t["results"].items():
                if r["exit"] not in (0, 1) or r["exception"]:
                    problems.append(f"trial {t['trial']} {t['artifact']}:{t['dataset']} ({t['mutation']}): {cmd} "
                                    f"exit {r['exit']} {r['exception'] or r['stderr']}")
        if p.returncode != 0:
            last = started[-1] if started else None
            t = TARGETS[last % len(TARGETS)] if last is not None else None
            problems.append(f"child {c} died with {p.returncode} in trial {last} {t}: {err.strip()[-500:]}")
    assert not problems, "\n".join(problems)
    assert done == TRIALS
