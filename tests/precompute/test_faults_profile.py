"""Issue 23 item 7: a calibration profile (``gnnprep calibrate`` writes
``$GNNPREP_CONFIG/profile-<device>.json``) that is malformed JSON, nested too deeply, not an object,
of the wrong types, NaN, infinite, negative or zero where it divides, without a kernel table, a
named pipe, a folder or too large never fails a run and never changes a result: it is advisory,
like a cache (it only steers which plan is chosen), so it is said once and the built-in defaults
are used. A profile that merely lacks a coefficient (an older gnnprep's) keeps its measured ones
and takes the default for that one, said once too.

Each case: ``load_profile`` gives the built-in defaults and says exactly one thing naming the file;
``gnnprep precompute --dry-run`` exits 0 with no traceback and no error, its plan the defaults'
plan, the message given once, and the profile left as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from fixtures import make_store, run

from gnnprep.precompute.profile import Profile, ProfileWarning, load_profile, profile_path


def good() -> dict:
    d = json.loads(Profile(measured="gnnprep calibrate, test").to_json())
    d["spmm_ns_per_nnz"] = {"8": 3e5, "128": 9e5}   # slow enough to show in a plan's predicted seconds
    d["read_bytes_per_s"] = 5e8
    return d


def edited(**changes):
    def text():
        d = good()
        for k, v in changes.items():
            if v is DROP:
                d.pop(k)
            else:
                d[k] = v
        return json.dumps(d)
    return text


DROP = object()
DEEP = "[" * 100_000 + "]" * 100_000

CASES = [
    # (id, the file's text (or a kind of file), what the message says)
    ("malformed-json", lambda: '{"device": "cpu", ', r"unusable calibration profile \(Expecting property name"),
    ("empty", lambda: "", r"unusable calibration profile \(Expecting value"),
    ("deep-nesting", lambda: DEEP, r"unusable calibration profile \(nested too deeply\)"),
    ("a-list", lambda: "[1, 2]", r"unusable calibration profile \(not a JSON object\)"),
    ("a-string", lambda: '"fast"', r"unusable calibration profile \(not a JSON object\)"),
    ("nan-rate", edited(read_bytes_per_s=float("nan")), r"'read_bytes_per_s' is nan; expected a finite number > 0"),
    ("infinite-overhead", edited(block_overhead_s=float("inf")), r"'block_overhead_s' is inf; expected a finite number >= 0"),
    ("negative-row-cost", edited(row_ns_per_col=-0.4), r"'row_ns_per_col' is -0\.4; expected a finite number >= 0"),
    ("zero-rate", edited(write_bytes_per_s=0), r"'write_bytes_per_s' is 0; expected a finite number > 0"),
    ("rate-a-string", edited(copy_bytes_per_s="fast"), r"'copy_bytes_per_s' is 'fast'; expected a finite number"),
    ("rate-a-bool", edited(read_bytes_per_s=True), r"'read_bytes_per_s' is True; expected a finite number"),
    ("rate-400-digits", edited(read_bytes_per_s=10**400), r"'read_bytes_per_s' is 1000000000.*; expected a finite number"),
    ("growth-a-list", edited(kernel_growth=[0.27]), r"'kernel_growth' is \[0\.27\]; expected a finite number >= 0"),
    ("table-empty", edited(spmm_ns_per_nnz={}), r"'spmm_ns_per_nnz' is not a non-empty object"),
    ("table-a-list", edited(spmm_ns_per_nnz=[15.6]), r"'spmm_ns_per_nnz' is not a non-empty object"),
    ("table-width-word", edited(spmm_ns_per_nnz={"eight": 15.6}), r"'spmm_ns_per_nnz' has width 'eight'"),
    ("table-width-0", edited(spmm_ns_per_nnz={"0": 15.6}), r"'spmm_ns_per_nnz' has width '0'"),
    ("table-ns-nan", edited(spmm_ns_per_nnz={"8": float("nan")}), r"'spmm_ns_per_nnz' width 8 is nan"),
    ("table-ns-negative", edited(spmm_ns_per_nnz={"8": -1}), r"'spmm_ns_per_nnz' width 8 is -1"),
    ("device-a-number", edited(device=7), r"'device' is 7; expected a string"),
    ("not-utf8", lambda: b"\xff\xfe{}", r"unusable calibration profile \(not UTF-8 text\)"),
    ("a-named-pipe", "fifo", r"unusable calibration profile \(not a regular file\)"),
    ("a-folder", "dir", r"unusable calibration profile \(not a regular file\)"),
    ("larger-than-1-mib", lambda: " " * (2 << 20) + "{}", r"unusable calibration profile \(larger than 1048576 bytes\)"),
]


def place(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "fifo":
        os.mkfifo(path)
    elif content == "dir":
        path.mkdir()
    else:
        data = content()
        path.write_bytes(data if isinstance(data, bytes) else data.encode())


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): ("fifo" if p.is_fifo() else hashlib.sha256(p.read_bytes()).hexdigest()
                                       if p.is_file() else "dir") for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile_store")
    path, *_ = make_store(root, np.random.default_rng(2), n=60, m=240, d=4)
    return path


def steering(plan: dict) -> dict:
    """What a profile steers: the plan less the free memory and the RSS measured as it was made."""
    return {k: v for k, v in plan.items() if k not in ("budget", "baseline_rss", "predicted_peak")}


def dry_run(store: Path, out: Path):
    """precompute --dry-run; (result, messages given as ProfileWarning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProfileWarning)
        r = run(["precompute", store, "-o", out, "--hops", "2", "--device", "cpu", "--dry-run", "--json"])
    return r, [str(w.message) for w in caught if issubclass(w.category, ProfileWarning)]


@pytest.fixture(scope="module")
def default_plan(store, tmp_path_factory):
    config = tmp_path_factory.mktemp("no_profile")
    old = os.environ.get("GNNPREP_CONFIG")
    os.environ["GNNPREP_CONFIG"] = str(config)
    try:
        r, said = dry_run(store, config / "f.h5")
    finally:
        if old is None:
            del os.environ["GNNPREP_CONFIG"]
        else:
            os.environ["GNNPREP_CONFIG"] = old
    assert r.exit_code == 0 and not said, r.stderr
    return json.loads(r.stdout)["plan"]


@pytest.mark.parametrize("content,says", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_damaged_profile_is_said_once_and_the_defaults_are_used(store, default_plan, tmp_path, monkeypatch,
                                                                 content, says):
    monkeypatch.setenv("GNNPREP_CONFIG", str(tmp_path / "config"))
    path = profile_path("cpu")
    place(path, content)
    pattern = rf"{re.escape(str(path))}: .*{says}.*; using the built-in defaults \(rerun gnnprep calibrate\)"
    said = []
    assert load_profile("cpu", warn=said.append) == Profile()
    assert len(said) == 1 and re.fullmatch(pattern, said[0]), said
    before = snapshot(tmp_path)
    r, warned = dry_run(store, tmp_path / "f.h5")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Error" not in r.stderr
    assert steering(json.loads(r.stdout)["plan"]) == steering(default_plan)
    # said exactly once, through the command's warning channel (a Warning line on stderr and the --json
    # report's warnings), never as a Python ProfileWarning (issue 23: prepare_job passes its warn)
    lines = [line[len("Warning: "):] for line in r.stderr.splitlines() if line.startswith("Warning: ")]
    assert warned == [] and len(lines) == 1 and re.fullmatch(pattern, lines[0]), (warned, r.stderr)
    assert json.loads(r.stdout)["warnings"] == lines
    assert snapshot(tmp_path) == before


def test_a_valid_profile_is_used_silently(store, default_plan, tmp_path, monkeypatch):
    # the other side of the table: the same file undamaged steers the plan (so the cases above show
    # that the defaults were used, not that a profile makes no difference)
    monkeypatch.setenv("GNNPREP_CONFIG", str(tmp_path))
    profile_path("cpu").write_text(json.dumps(good()))
    said = []
    prof = load_profile("cpu", warn=said.append)
    assert said == [] and prof.spmm_ns_per_nnz == {8: 3e5, 128: 9e5} and prof.read_bytes_per_s == 5e8
    assert prof.measured == "gnnprep calibrate, test"
    r, warned = dry_run(store, tmp_path / "f.h5")
    assert r.exit_code == 0 and not warned and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["plan"]["predicted_seconds"] > 10 * max(default_plan["predicted_seconds"], 0.001)


def test_a_missing_coefficient_takes_its_default_and_keeps_the_measured_ones(tmp_path, monkeypatch):
    # a profile from an older gnnprep, written before a coefficient existed
    monkeypatch.setenv("GNNPREP_CONFIG", str(tmp_path))
    profile_path("cpu").write_text(edited(fault_bytes_per_s=DROP, kernel_growth=DROP)())
    said = []
    prof = load_profile("cpu", warn=said.append)
    assert prof.spmm_ns_per_nnz == {8: 3e5, 128: 9e5} and prof.read_bytes_per_s == 5e8
    assert prof.fault_bytes_per_s == Profile().fault_bytes_per_s and prof.kernel_growth == Profile().kernel_growth
    assert len(said) == 1 and re.fullmatch(
        rf"{re.escape(str(profile_path('cpu')))}: calibration profile has no kernel_growth, fault_bytes_per_s; "
        r"using the built-in default for them \(rerun gnnprep calibrate\)", said[0]), said


def test_no_profile_is_the_defaults_without_a_word(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNPREP_CONFIG", str(tmp_path / "nowhere"))
    said = []
    assert load_profile("cpu", warn=said.append) == Profile() and said == []
    cuda = load_profile("cuda", warn=said.append)
    assert cuda.device == "cuda" and said == []
