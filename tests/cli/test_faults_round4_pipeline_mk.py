"""Issue 32, items 3 and 19: examples/pipeline.mk refuses values that would write or delete outside its
own files (one line, make exits non-zero, every byte of the folder unchanged), never deletes a finished
file it did not just write (no .DELETE_ON_ERROR), `clean` removes only the pipeline's files, and two
makes on one OUT take turns through OUT/.pipeline.lock. Most cases fail while make reads the file
(milliseconds); one small build (EPOCHS=3, one model) serves the rest."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MK = ROOT / "examples" / "pipeline.mk"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
HAS_FLOCK = shutil.which("flock") is not None


def _gnnprep() -> str:
    g = Path(sys.executable).with_name("gnnprep")
    return str(g) if g.exists() else "gnnprep"


def make(cwd: Path, *args: str, home: Path | None = None, wait: bool = True):
    cmd = ["make", "--no-print-directory", "-f", str(MK), "MODELS=sgc", "EPOCHS=3",
           f"PYTHON={sys.executable}", f"GNNPREP={_gnnprep()}", *args]
    env = dict(os.environ, HOME=str(home or cwd / "home"))
    env.pop("MAKEFLAGS", None)
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def snapshot(folder: Path) -> dict:
    """Every path under ``folder`` with its bytes' hash (folders: None)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = None if p.is_dir() and not p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def scratch(tmp_path):
    """A working folder inside a parent that holds victims: tmp/victim, tmp/work/{space,out,victim}."""
    work = tmp_path / "work"
    (work / "home").mkdir(parents=True)
    (tmp_path / "victim").write_text("outside\n")
    (work / "victim").write_text("beside\n")
    (work / "space").mkdir()
    (work / "space" / "keep.txt").write_text("mine\n")
    (work / "out").mkdir()
    (work / "out" / "keep.txt").write_text("mine\n")
    (work / "home" / "graph.h5").write_text("not the pipeline's\n")
    return tmp_path


# (variable values, what the one line names); each runs for real, from a scratch folder
BAD = [
    (["OUT="], "OUT is empty"),
    (["OUT=out space"], "OUT='out space' refused"),
    (["OUT=out;touch pwned"], "OUT="),
    (["OUT=a$$(touch pwned)"], "OUT="),
    (["OUT=out\nspace"], "OUT="),
    (["OUT=-rf"], "OUT='-rf' refused"),
    (["OUT=~/p"], "OUT='~/p' refused"),
    (["OUT=."], "OUT='.' refused"),
    (["OUT=.."], "OUT='..' refused"),
    (["OUT=out/.."], "OUT='out/..' refused"),
    (["OUT=home"], "OUT='home' refused"),              # $HOME is <work>/home in these runs
    (["OUT=/"], "OUT='/' refused"),
    (["OUT=//"], "OUT='//' refused"),
    (["MODELS=../../victim"], "MODELS: '../../victim' refused"),
    (["MODELS=sgc ../victim"], "MODELS: '../victim' refused"),
    (["MODELS=sgc/../../victim"], "refused"),
    (["MODELS="], "MODELS is empty"),
    (["MODELS=sgc sgc"], "named twice"),
    (["MODELS=-rf"], "MODELS: '-rf' refused"),
    (["MODELS=sgc;touch pwned"], "refused"),
    (["HOPS=0"], "HOPS='0' refused"),
    (["HOPS=-1"], "HOPS='-1' refused"),
    (["HOPS=2.5"], "HOPS='2.5' refused"),
    (["HOPS=3 --hops 9"], "HOPS="),
    (["HOPS="], "HOPS='' refused"),
    (["EPOCHS=0"], "EPOCHS='0' refused"),
    (["EPOCHS=x"], "EPOCHS='x' refused"),
    (["HOPS=3", "PRECOMPUTE_ARGS=--hops 2"], "PRECOMPUTE_ARGS='--hops 2' refused: it sets --hops"),
    (["PRECOMPUTE_ARGS=--blocks auto --hops=2"], "it sets --hops"),
    (["PRECOMPUTE_ARGS=-o ../victim"], "it sets -o"),
    (["PRECOMPUTE_ARGS=--hag other.h5"], "it sets --hag"),
    (["TRAIN_ARGS=--epochs 500"], "TRAIN_ARGS='--epochs 500' refused: it sets --epochs"),
    (["TRAIN_ARGS=--output=../victim"], "it sets --output"),
    (["TRAIN_ARGS=-qo ../victim"], "it sets -o"),
    (["TRAIN_ARGS=-o../victim"], "it sets -o"),
    (["INGEST_ARGS=--memory-budget 64GiB"], "INGEST_ARGS='--memory-budget 64GiB' refused: it sets --memory-budget"),
    (["HAG_ARGS=--output ../victim"], "HAG_ARGS='--output ../victim' refused"),
    (["TRAIN_ARGS=--hidden 8; touch pwned"], "TRAIN_ARGS="),
    (["TRAIN_ARGS=--hidden 8 `touch pwned`"], "TRAIN_ARGS="),
    (["SOURCE=sample; touch pwned"], "SOURCE="),
    (["SOURCE=$$(touch pwned)"], "SOURCE="),
    (["MEMORY_BUDGET=2GiB; touch pwned"], "MEMORY_BUDGET="),
    (["LOCK_WAIT=-5"], "LOCK_WAIT='-5' refused"),
    (["LOCKING=rm"], "LOCKING='rm' refused"),
]


@pytest.mark.parametrize("goal", ["all", "clean"])
@pytest.mark.parametrize("values,names", BAD, ids=[" ".join(v) for v, _ in BAD])
def test_a_bad_value_stops_make_with_one_line_and_touches_nothing(scratch, values, names, goal):
    work = scratch / "work"
    before = snapshot(scratch)
    # the root folder is refused before any recipe, so a real run is safe; should that ever break,
    # -n keeps this test from touching the machine's root
    extra = ["-n"] if any(v in ("OUT=/", "OUT=//") for v in values) else []
    r = make(work, *values, *extra, goal)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert names in lines[0] and ("refused" in lines[0] or "is empty" in lines[0]), lines[0]
    assert r.stdout == ""
    assert snapshot(scratch) == before


def test_a_goal_with_shell_characters_is_refused(scratch):
    before = snapshot(scratch)
    r = make(scratch / "work", "OUT=o", "all;touch pwned")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "refused" in r.stderr, r.stderr
    assert snapshot(scratch) == before


def test_a_goal_outside_the_model_list_has_no_rule(scratch):
    """The run rule is a static pattern over MODELS: a target such as OUT/runs/../../victim.json
    does not match it, so its rm -rf of the stem never runs."""
    work = scratch / "work"
    before = snapshot(scratch)
    r = make(work, "OUT=p/q", "LOCK_WAIT=0", "p/q/runs/../../victim.json")
    assert r.returncode != 0 and "No rule to make target" in r.stderr
    after = snapshot(scratch)
    assert {k: v for k, v in after.items() if not k.startswith("work/p")} == before
    assert set(after) - set(before) <= {"work/p", "work/p/q", "work/p/q/.pipeline.lock"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two makes started at once on one fresh OUT: the second waits for the first's lock, then finds
    everything up to date (before: it found runs/sgc.json missing, or deleted the other's files)."""
    work = tmp_path_factory.mktemp("built")
    (work / "home").mkdir()
    out = work / "o"
    a = make(work, "OUT=o", "-j2", wait=False)
    time.sleep(0.3)
    b = make(work, "OUT=./o", "-j2", wait=False)      # the same folder spelt another way: the same lock
    ra, rb = (p.communicate(timeout=300) + (p.returncode,) for p in (a, b))
    return work, out, ra, rb


STEPS = ["graph.h5", "hag.h5", "feats.h5", "runs/sgc.json", "results.md"]


def test_two_makes_on_one_out_take_turns_and_both_see_a_whole_pipeline(built):
    work, out, (oa, ea, ca), (ob, eb, cb) = built
    assert ca == 0 and cb == 0, ea + eb
    for s in STEPS:
        assert (out / s).is_file(), s
    assert not list(out.rglob("*.tmp")) and not list(out.rglob("*.tmp-*"))
    if HAS_FLOCK:
        assert "waiting" in ea + eb     # one of them waited: they did not run side by side
        assert sum(o.count("gnnprep train sgc") for o in (oa, ob)) == 1   # sgc trained once
    assert make(work, "OUT=o", "-q").returncode == 0


@pytest.mark.skipif(not HAS_FLOCK, reason="needs flock")
def test_a_held_lock_refuses_with_one_line_and_touches_nothing(built):
    work, out, *_ = built
    holder = open(out / ".pipeline.lock", "a")       # this process holds the lock, as a running make would
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        before = snapshot(work)
        for wait in ("LOCK_WAIT=0", "LOCK_WAIT=1"):
            r = make(work, "OUT=o", wait, "-B")
            assert r.returncode != 0
            errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
            assert len(errors) == 1 and "another make is running on OUT=o" in errors[0], r.stderr
            assert r.stdout == ""
        r = make(work, "OUT=o", "LOCK_WAIT=0", "clean")
        assert r.returncode != 0 and "another make is running" in r.stderr
        assert snapshot(work) == before
    finally:
        holder.close()


def test_the_mkdir_lock_refuses_a_second_make_and_is_released(built):
    work, out, *_ = built
    (out / ".pipeline.lock.d").mkdir()
    before = snapshot(work)
    r = make(work, "OUT=o", "LOCKING=mkdir", "-B")
    assert r.returncode != 0 and "Error: another make is running on OUT=o" in r.stderr
    assert snapshot(work) == before
    (out / ".pipeline.lock.d").rmdir()
    r = make(work, "OUT=o", "LOCKING=mkdir")         # up to date: nothing runs, the lock is released
    assert r.returncode == 0, r.stderr
    assert not (out / ".pipeline.lock.d").exists()


def test_a_refused_rerun_keeps_the_finished_files(built):
    """The round 4 break: a make whose precompute was refused deleted the finished feats.h5 (make's
    .DELETE_ON_ERROR). Now a failed step leaves every earlier output as it was."""
    work, out, *_ = built
    keep = {s: (out / s).read_bytes() for s in ("feats.h5", "runs/sgc.json", "results.md")}
    os.utime(out / "hag.h5")          # precompute, train and the table are out of date
    r = make(work, "OUT=o", "PRECOMPUTE_ARGS=--blocks bogus")
    assert r.returncode != 0 and "Error:" in r.stderr
    assert {s: (out / s).read_bytes() for s in keep} == keep
    assert not list(out.rglob("*.tmp")) and not list(out.rglob("*.tmp-*"))


def test_clean_removes_only_what_the_pipeline_writes(built):
    work, out, *_ = built
    (out / "notes.txt").write_text("mine\n")
    (out / "runs" / "mine").mkdir()
    (out / "runs" / "mine" / "x.txt").write_text("mine\n")
    (out / "graph.h5.tmp-999999").write_text("a killed writer's leftover\n")
    (out / "runs" / "sgc.json.tmp").write_text("{}")
    (work / "space").mkdir()
    (work / "space" / "keep.txt").write_text("mine\n")
    r = make(work, "OUT=o", "clean")
    assert r.returncode == 0, r.stderr
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left == [".pipeline.lock", "notes.txt", "runs", "runs/mine", "runs/mine/x.txt"]
    assert (work / "space" / "keep.txt").read_text() == "mine\n"
    assert make(work, "OUT=o", "clean").returncode == 0   # again: nothing left to remove, no error
