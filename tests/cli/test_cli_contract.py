"""The command contract and the code's layering: every command answers --help, a bad option value
is a usage error (exit 2) before anything is read or written, the library never imports click and
the CLI only the library's public API; a resumed precompute says when its plan differs."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from fixtures import interrupted_precompute, make_store, run

from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.run import precompute

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    from gnnprep.cli import cli

    return sorted(cli.commands)


@pytest.mark.parametrize("name", _commands())
def test_every_command_answers_help(name):
    r = run([name, "--help"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("Usage: ") and "Options:" in r.stdout
    from gnnprep.cli import cli

    first = (cli.commands[name].help or "").strip().splitlines()[0]
    # the command's own description (wrapped by click), not just the option list
    assert first and " ".join(first.split()) in " ".join(r.stdout.split())
    assert run([name, "-h"]).stdout == r.stdout


def test_the_group_answers_help_and_lists_every_command():
    r = run(["--help"])
    assert r.exit_code == 0
    for name in _commands():
        assert name in r.stdout


BAD_OPTIONS = {
    "precompute": [["--blocks", "x"], ["--blocks", "1,0,2"], ["--blocks", "1,2"], ["--memory-budget", "lots"],
                   ["--memory-budget", "0"], ["--operator", "bogus"], ["--operator", "sym,sym"], ["--device", "tpu"],
                   ["--device", "cuda:x"], ["--hops", "-1"], ["--rows", "some"], ["--dtype", "float64"],
                   ["--reorder", "random"], ["--hdg-reduce", "median"]],
    "hag": [["--capacity", "abc"], ["--capacity", "inf"], ["--capacity", "nan"], ["--capacity", "-3"],
            ["--memory-budget", "lots"], ["--method", "greedy"], ["--min-share", "1"]],
    "hdg": [["--select", "bogus"], ["--select", "random-walk:walks=0,length=2,topk=3"], ["--seed", "-1"]],
    "train": [["--lr", "-1"], ["--weight-decay", "-0.5"], ["--device", "tpu"], ["--memory-budget", "lots"],
              ["--batch-size", "0"], ["--select", "f1"]],
    "ingest": [["--memory-budget", "lots"]],
}
CASES = [(cmd, opt) for cmd, opts in BAD_OPTIONS.items() for opt in opts]


def _args(cmd, tmp_path):
    out = ["-o", str(tmp_path / "out" / "x.h5")]
    if cmd == "train":
        return ["train", "sgc", str(tmp_path / "f.h5"), "-o", str(tmp_path / "out" / "run")]
    if cmd == "hdg":
        return ["hdg", "sample", *out, "--select", "hop-shells:2"]
    return [cmd, "sample", *out]


@pytest.mark.parametrize("cmd,opt", CASES, ids=[f"{c}{''.join(o)}" for c, o in CASES])
def test_bad_option_value_is_a_usage_error(tmp_path, cmd, opt):
    (tmp_path / "out").mkdir()
    r = run(_args(cmd, tmp_path) + opt)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and opt[0] in last, r.stderr
    assert list((tmp_path / "out").iterdir()) == []  # nothing read, nothing written


def _py_files(folder):
    """The Python files under ``folder``; ``gnnprep`` means the library (the CLI is ``gnnprep/cli``)."""
    files = sorted(p for p in (ROOT / folder).rglob("*.py"))
    return [p for p in files if "cli" not in p.relative_to(ROOT / "gnnprep").parts] if folder == "gnnprep" else files


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                yield node.module, a.name


def test_library_never_imports_click_or_the_cli():
    for path in _py_files("gnnprep"):
        if path.name == "__main__.py":  # `python -m gnnprep`: the entry point runs the CLI
            continue
        for module, _ in _imports(path):
            assert module.split(".")[0] != "click", f"{path.relative_to(ROOT)} imports click"
            assert not module.startswith("gnnprep.cli"), f"{path.relative_to(ROOT)} imports the CLI"


def test_cli_uses_only_the_public_library_api():
    for path in _py_files("gnnprep/cli"):
        for module, name in _imports(path):
            if not module.startswith("gnnprep"):
                continue
            where = f"{path.relative_to(ROOT)}: from {module} import {name}"
            assert not any(part.startswith("_") for part in module.split(".")), where
            private = name is not None and name.startswith("_") and not name.endswith("__")
            assert not private, where
            assert module != "gnnprep.propagate", where + " (deprecated alias)"


def test_nothing_imports_the_deprecated_propagate_alias():
    for folder in ("gnnprep", "gnnprep/cli", "benchmarks", "tests"):
        for path in _py_files(folder):
            for module, name in _imports(path):
                assert module != "gnnprep.propagate" and (module, name) != ("gnnprep", "propagate"), path


def test_resume_with_a_new_budget_says_it_keeps_the_column_blocks(tmp_path, rng, monkeypatch):
    g, *_ = make_store(tmp_path, rng, d=7)
    ref = tmp_path / "ref.h5"
    precompute(g, ref, PrecomputeConfig(hops=2, device="cpu", blocks=(1, 2, 3)))
    out = tmp_path / "out.h5"
    interrupted_precompute(monkeypatch, g, out, hops=2, device="cpu", blocks=(1, 2, 3))
    # a budget so large that a fresh plan would take one column block; the partial file has three
    r = run(["precompute", str(g), "-o", str(out), "--hops", "2", "--device", "cpu", "--memory-budget", "4GiB",
             "--json"])
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["resumed_units"] >= 1 and report["plan"]["c"] == 3
    assert "resuming out.h5 with the interrupted run's column blocks (c=3" in r.stderr
    assert "would choose c=1" in r.stderr and report["warnings"] and "c=3" in report["warnings"][0]
    with FeatureStore(ref) as a, FeatureStore(out) as b:
        for k in range(3):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


def test_resume_with_the_same_plan_says_nothing(tmp_path, rng, monkeypatch):
    g, *_ = make_store(tmp_path, rng, d=7)
    out = tmp_path / "out.h5"
    interrupted_precompute(monkeypatch, g, out, hops=2, device="cpu", blocks=(1, 2, 3))
    said = []
    report = precompute(g, out, PrecomputeConfig(hops=2, device="cpu", blocks=(2, 4, 3)), warn=said.append)
    assert said == [] and report.warnings == () and report.resumed_units >= 1
    assert np.isfinite(FeatureStore(out).hop(2)[:]).all()


def test_run_key_follows_the_hag_actually_used(tmp_path, rng, monkeypatch):
    # interrupted without a HAG; rerun with --hag auto, which declines on a graph this small: the
    # output depends on the same inputs, so the rerun resumes (the key hashed the literal "auto" before)
    g, *_ = make_store(tmp_path, rng, d=7)
    out = tmp_path / "out.h5"
    interrupted_precompute(monkeypatch, g, out, hops=2, device="cpu", blocks=(1, 2, 3))
    report = precompute(g, out, PrecomputeConfig(hops=2, device="cpu", blocks=(1, 2, 3), hag="auto"))
    assert report.hag["used"] is False and report.resumed_units >= 1
