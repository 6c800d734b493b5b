"""Issue 23 item 7 for ``gnnprep tune``: a tune folder someone has edited, and a full disk.

- A damaged ``tune.json`` (not JSON, not an object, too deep, NaN, wrong types, missing keys, a
  named pipe, a folder, a link to nothing, too large) is one ``Error:`` line naming it; the folder is
  left exactly as it was (it is the record of an earlier tune, which a fresh start would overwrite).
- A damaged trial record (``trials/<key>.json``) is a trial not finished: it is run again, its record
  replaced, one ``Warning:`` line names it; the other records are not touched.
- A full disk, wherever it strikes, is one ``no space left on device`` line and leaves nothing this
  run wrote (a fresh folder removed whole; an earlier folder as it was).

Each case: exit code, the one stderr line, no traceback, empty stdout on errors, the folder
snapshot before/after, the features file intact. Trials run in this process (``runner=run_trial``,
the same ``train`` call a worker makes) so the table stays fast: the worker pool is not what is
tested here.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fixtures import run, write_features

from gnnprep.core.output import atomic_output
from gnnprep.train.tune import folder as tune_folder
from gnnprep.train.tune import run_trial
from gnnprep.train.tune import tune as library_tune

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GRID = "lr=0.1,0.2"
ARGS = ["--epochs", "2", "--hidden", "8", "--batch-size", "16", "--seeds", "1", "--report-seeds", "1"]


def snapshot(root: Path) -> dict:
    """Every path under ``root`` (links and pipes as what they are) and a hash of every file."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = "link:" + os.readlink(p)
        elif p.is_fifo():
            out[str(p.relative_to(root))] = "fifo"
        elif p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(root))] = "dir"
    return out


@pytest.fixture
def in_process(monkeypatch):
    """``gnnprep tune`` with its trials in this process."""
    cli_tune = importlib.import_module("gnnprep.cli.tune")
    monkeypatch.setattr(cli_tune, "run_tune", functools.partial(library_tune, runner=run_trial))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Features and a finished tune of them (2 grid trials + 1 report trial), built once."""
    root = tmp_path_factory.mktemp("tune_base")
    write_features(root / "f.h5", np.random.default_rng(3), n=40, d=8, K=2)
    cli_tune = importlib.import_module("gnnprep.cli.tune")
    saved = cli_tune.run_tune
    cli_tune.run_tune = functools.partial(library_tune, runner=run_trial)
    try:
        r = run(["tune", "sgc", root / "f.h5", "-o", root / "tune", "--grid", GRID, *ARGS, "--json"])
    finally:
        cli_tune.run_tune = saved
    assert r.exit_code == 0, r.stderr
    return root


def tune_args(root: Path, grid: str = GRID) -> list:
    return ["tune", "sgc", root / "f.h5", "-o", root / "tune", "--grid", grid, *ARGS, "--json"]


def copy_base(base: Path, root: Path) -> None:
    shutil.copy2(base / "f.h5", root / "f.h5")
    shutil.copytree(base / "tune", root / "tune", symlinks=True)


def records(root: Path) -> list[Path]:
    return sorted((root / "tune" / "trials").glob("*.json"))


# --------------------------------------------------------------------------------------- tune.json

def text(data: str | bytes):
    def damage(path: Path):
        path.unlink()
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return damage


def edited(fn):
    def damage(path: Path):
        record = json.loads(path.read_text())
        fn(record)
        path.write_text(json.dumps(record))
    return damage


def fifo(path: Path):
    path.unlink()
    os.mkfifo(path)


def folder_instead(path: Path):
    path.unlink()
    path.mkdir()


def dangling(path: Path):
    path.unlink()
    path.symlink_to(path.parent / "nowhere.json")


def huge(path: Path):
    with open(path, "r+b") as fh:       # sparse: no disk used, nothing read
        fh.truncate((64 << 20) + 1)


DEEP = "[" * 100_000 + "]" * 100_000
WHY = r"; expected the record of an earlier tune \(delete it to resume the finished trials, or delete the folder"

TUNE_JSON_CASES = [
    # (id, damage(path of tune.json), what the Error line says after "tune.json: ")
    ("a-string", text('"tune"'), r"holds a string, not a JSON object"),
    ("a-list", text("[1, 2]"), r"holds an array, not a JSON object"),
    ("nan", text("NaN"), r"holds a number, not a JSON object"),
    ("null", text("null"), r"holds null, not a JSON object"),
    ("deep-nesting", text(DEEP), r"is not valid JSON"),
    ("empty", text(""), r"is not valid JSON"),
    ("truncated", lambda p: p.write_bytes(p.read_bytes()[:40]), r"is not valid JSON"),
    ("not-utf8", text(b"\xff\xfe{}"), r"is not valid JSON"),
    ("features-a-string", edited(lambda r: r.__setitem__("features", "f.h5")), r"has no valid 'features' fingerprint"),
    ("features-missing", edited(lambda r: r.pop("features")), r"has no valid 'features' fingerprint"),
    ("features-file-nan", edited(lambda r: r["features"].__setitem__("file", float("nan"))),
     r"has no valid 'features' fingerprint"),
    ("graph-fingerprint-a-list", edited(lambda r: r["features"].__setitem__("graph_fingerprint", [1])),
     r"has no valid 'features' fingerprint"),
    ("config-a-list", edited(lambda r: r.__setitem__("config", [1])), r"has no valid 'config' with the model"),
    ("config-missing", edited(lambda r: r.pop("config")), r"has no valid 'config' with the model"),
    ("model-a-number", edited(lambda r: r["config"].__setitem__("model", 7)), r"has no valid 'config' with the model"),
    ("a-named-pipe", fifo, r"is not a regular file"),
    ("a-folder", folder_instead, r"is not a regular file"),
    ("a-link-to-nothing", dangling, r"is a link to nothing"),
    ("larger-than-a-record", huge, r"is 67108865 bytes, more than a record can be"),
]


@pytest.mark.parametrize("damage,says", [c[1:] for c in TUNE_JSON_CASES], ids=[c[0] for c in TUNE_JSON_CASES])
def test_damaged_tune_json_is_one_error_and_touches_nothing(base, tmp_path, in_process, damage, says):
    copy_base(base, tmp_path)
    damage(tmp_path / "tune" / "tune.json")
    before = snapshot(tmp_path)
    r = run(tune_args(tmp_path))
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert re.fullmatch(rf"Error: .*tune/tune\.json: {says}[^;]*{WHY}.*", lines[0]), lines[0]
    assert snapshot(tmp_path) == before


def test_deleting_a_damaged_tune_json_resumes_the_finished_trials(base, tmp_path, in_process):
    # what the message advises: the trial records stand on their own
    copy_base(base, tmp_path)
    (tmp_path / "tune" / "tune.json").write_text("[")
    assert run(tune_args(tmp_path)).exit_code == 1
    (tmp_path / "tune" / "tune.json").unlink()
    r = run(tune_args(tmp_path))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["resumed_trials"] == 3


# --------------------------------------------------------------------------------------- trial records

def summary_edit(fn):
    def damage(path: Path):
        record = json.loads(path.read_text())
        fn(record["summary"])
        path.write_text(json.dumps(record))
    return damage


def record_edit(fn):
    def damage(path: Path):
        record = json.loads(path.read_text())
        fn(record)
        path.write_text(json.dumps(record))
    return damage


def link_to_garbage(path: Path):
    garbage = path.parent.parent / "garbage.txt"   # outside trials/: must stay as it is
    garbage.write_text("garbage")
    path.unlink()
    path.symlink_to(garbage)


TRIAL_CASES = [
    # (id, damage(path of one trial record), what the Warning line says after "<key>.json: ")
    ("a-string", text('"done"'), r"holds a string, not a JSON object"),
    ("a-list", text("[]"), r"holds an array, not a JSON object"),
    ("deep-nesting", text(DEEP), r"is not valid JSON"),
    ("empty", text(""), r"is not valid JSON"),
    ("truncated", lambda p: p.write_bytes(p.read_bytes()[:100]), r"is not valid JSON"),
    ("another-key", record_edit(lambda r: r.__setitem__("key", "0123456789abcdef")),
     r"is the record of trial '0123456789abcdef', not of [0-9a-f]{16}"),
    ("features-a-string", record_edit(lambda r: r.__setitem__("features", "f.h5")), r"is of another features artifact"),
    ("another-artifact", record_edit(lambda r: r["features"].__setitem__("file", "size=1,mtime_ns=2")),
     r"is of another features artifact"),
    ("summary-missing", record_edit(lambda r: r.pop("summary")), r"has no summary object"),
    ("summary-a-list", record_edit(lambda r: r.__setitem__("summary", [0.9])), r"has no summary object"),
    ("valid-acc-missing", summary_edit(lambda s: s.pop("valid_acc")), r"summary 'valid_acc' is None; expected a finite"),
    ("valid-acc-nan", summary_edit(lambda s: s.__setitem__("valid_acc", float("nan"))), r"summary 'valid_acc' is nan"),
    ("valid-acc-a-string", summary_edit(lambda s: s.__setitem__("valid_acc", "0.9")), r"summary 'valid_acc' is '0\.9'"),
    ("seconds-infinite", summary_edit(lambda s: s.__setitem__("seconds", float("inf"))), r"summary 'seconds' is inf"),
    ("runs-a-string", summary_edit(lambda s: s.__setitem__("runs", "x")), r"summary 'runs' is 'x'; expected a count >= 1"),
    ("runs-0", summary_edit(lambda s: s.__setitem__("runs", 0)), r"summary 'runs' is 0"),
    ("epochs-negative", summary_edit(lambda s: s.__setitem__("epochs_run", -1)), r"summary 'epochs_run' is -1"),
    ("run-dir-a-number", summary_edit(lambda s: s.__setitem__("run_dir", 5)), r"summary 'run_dir' is 5"),
    ("per-run-a-number", summary_edit(lambda s: s.__setitem__("per_run", 3)), r"summary 'per_run' is not a list of 1"),
    ("per-run-test-nan", summary_edit(lambda s: s["per_run"][0].__setitem__("test_acc", float("nan"))),
     r"summary 'per_run' holds a run without"),
    ("a-named-pipe", fifo, r"is not a regular file"),
    ("a-folder", folder_instead, r"is not a regular file"),
    ("a-link-to-garbage", link_to_garbage, r"is not valid JSON"),
]


@pytest.mark.parametrize("damage,says", [c[1:] for c in TRIAL_CASES], ids=[c[0] for c in TRIAL_CASES])
def test_damaged_trial_record_is_run_again_with_one_warning(base, tmp_path, in_process, damage, says):
    copy_base(base, tmp_path)
    target = records(tmp_path)[0]   # a grid or the report trial (the order of their keys is the hash's)
    others = {p.name: p.read_bytes() for p in records(tmp_path) if p != target}
    features = (tmp_path / "f.h5").read_bytes()
    damage(target)
    r = run(tune_args(tmp_path))
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert re.fullmatch(rf"Warning: .*trials/{target.name}: {says}.*; the trial is run again", lines[0]), lines[0]
    d = json.loads(r.stdout)
    assert d["resumed_trials"] == 2 and d["warnings"] == [lines[0][len("Warning: "):]]
    # run again and recorded anew; the others and the features untouched
    assert target.is_file() and not target.is_symlink()
    assert json.loads(target.read_text())["key"] == target.stem
    assert {p.name: p.read_bytes() for p in records(tmp_path) if p != target} == others
    assert (tmp_path / "f.h5").read_bytes() == features
    if (tmp_path / "tune" / "garbage.txt").exists():
        assert (tmp_path / "tune" / "garbage.txt").read_text() == "garbage"


def test_every_damaged_record_is_named_once_and_the_next_run_resumes_all(base, tmp_path, in_process):
    copy_base(base, tmp_path)
    for path, damage in zip(records(tmp_path), (text("{"), fifo, summary_edit(lambda s: s.pop("per_run")))):
        damage(path)
    r = run(tune_args(tmp_path))
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("Warning: ") for line in lines), r.stderr
    assert sorted(re.search(r"trials/(\w+)\.json", line).group(1) for line in lines) == \
        [p.stem for p in records(tmp_path)]
    assert json.loads(r.stdout)["resumed_trials"] == 0
    again = run(tune_args(tmp_path))
    assert again.exit_code == 0 and again.stderr == "" and json.loads(again.stdout)["resumed_trials"] == 3


# --------------------------------------------------------------------------------------- a full disk

def enospc(path):
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def writer_failing(monkeypatch, match: str, through_atomic: bool, after: int = 0):
    """The tune folder's JSON writer hits a full disk on the ``after``+1-th write to a path ending in
    ``match``: raised as the OSError a plain write gives, or from inside the atomic writer (which
    turns it into the one-line error and removes its temporary file)."""
    real = tune_folder.write_json
    seen = []

    def write(obj, path):
        if str(path).endswith(match):
            seen.append(path)
            if len(seen) > after:
                if through_atomic:
                    with atomic_output(path) as tmp:
                        tmp.write_text("{")
                        raise enospc(tmp)
                raise enospc(path)
        real(obj, path)

    monkeypatch.setattr(tune_folder, "write_json", write)


def runner_failing(monkeypatch, after: int):
    """A trial's train hits a full disk (as a worker reports it: the one-line error) after ``after``
    trials have run."""
    from gnnprep.core.output import disk_full_error

    calls = []

    def runner(features, run_dir, config):
        calls.append(run_dir)
        if len(calls) > after:
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            raise disk_full_error(Path(run_dir) / "checkpoint.pt")
        return run_trial(features, run_dir, config)

    cli_tune = importlib.import_module("gnnprep.cli.tune")
    monkeypatch.setattr(cli_tune, "run_tune", functools.partial(library_tune, runner=runner))


DISK_CASES = [
    # (id, fresh folder?, grid, how the disk fills(monkeypatch))
    ("fresh-tune-json-plain-write", True, GRID, lambda mp: writer_failing(mp, "tune.json", False)),
    ("fresh-tune-json-atomic", True, GRID, lambda mp: writer_failing(mp, "tune.json", True)),
    ("fresh-second-trial-record", True, GRID, lambda mp: writer_failing(mp, ".json", False, after=2)),
    ("fresh-result", True, GRID, lambda mp: writer_failing(mp, "tune.json", True, after=1)),
    ("fresh-trial-run-folder", True, GRID, lambda mp: runner_failing(mp, after=1)),
    ("earlier-new-trial-record", False, "lr=0.1,0.2,0.3", lambda mp: writer_failing(mp, ".json", True, after=1)),
    ("earlier-new-trial-run", False, "lr=0.1,0.2,0.3", lambda mp: runner_failing(mp, after=0)),
    ("earlier-result", False, "lr=0.1,0.2,0.3", lambda mp: writer_failing(mp, "tune.json", False, after=1)),
]


@pytest.mark.parametrize("fresh,grid,fill", [c[1:] for c in DISK_CASES], ids=[c[0] for c in DISK_CASES])
def test_full_disk_is_one_line_and_leaves_nothing(base, tmp_path, in_process, monkeypatch, fresh, grid, fill):
    if fresh:
        shutil.copy(base / "f.h5", tmp_path / "f.h5")
    else:
        copy_base(base, tmp_path)
    before = snapshot(tmp_path)
    fill(monkeypatch)
    r = run(tune_args(tmp_path, grid))
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"Error: .*: no space left on device \(free .*\)", lines[0]), r.stderr
    assert snapshot(tmp_path) == before


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("room_kib", [0, 40])   # nothing fits; a trial fits, the next one does not
def test_tune_onto_a_real_full_disk(base, tmp_path, in_process, room_kib):
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "1m"):
        pytest.skip("needs root and a mountable tmpfs to fill a disk")
    try:
        with open(small / "filler", "wb") as fh:
            fh.write(b"\0" * ((1 << 20) - (room_kib << 10)))
        r = run(["tune", "sgc", base / "f.h5", "-o", small / "tune", "--grid", GRID, *ARGS])
        assert r.exit_code == 1, (r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "no space left on device" in lines[0] and "Traceback" not in r.stderr, r.stderr
        assert sorted(p.name for p in small.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)
