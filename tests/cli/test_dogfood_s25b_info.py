"""Dogfood pass 25b of ``gnnprep info``: a tune folder (what ``gnnprep tune -o`` writes) was refused as
"is a folder; expected a gnnprep HDF5 file"; now it is described, and any other folder is refused
with what info accepts."""

from __future__ import annotations

import json

import pytest
from fixtures import assert_one_error, run, write_features

from gnnprep.train.tune import SELECTION_SEED_OFFSET, TuneConfig, tune

VALID = {0.1: 0.5, 0.2: 0.9}
TEST = {0.1: 0.95, 0.2: 0.25}


def _runner(features, run_dir, config):
    """Stands in for training: accuracies looked up from the trial's lr."""
    v, t = VALID[config.lr], TEST[config.lr]
    return {"runs": config.runs, "valid_acc": v, "valid_acc_std": 0.0, "test_acc": t, "test_acc_std": 0.0,
            "epochs_run": 4 * config.runs, "seconds": 0.1, "best_epoch": 2, "device": "cpu", "evaluator": "plain",
            "run_dir": run_dir, "per_run": [{"seed": config.seed + r, "valid_acc": v, "test_acc": t}
                                            for r in range(config.runs)]}


@pytest.fixture
def tuned(tmp_path, rng):
    feats = write_features(tmp_path / "f.h5", rng, n=40, d=6, K=2)
    config = TuneConfig(model="sgc", grid=(("lr", (0.1, 0.2)),), fixed={"epochs": 4}, seeds=2, report_seeds=3)
    tune(feats, tmp_path / "t", config, runner=_runner)
    return feats, tmp_path / "t"


def test_info_describes_a_finished_tune_folder(tuned):
    # before: Error: <t>: is a folder; expected a gnnprep HDF5 file (exit 1)
    feats, t = tuned
    r = run(["info", t, "--json"])
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    d = json.loads(r.stdout)
    assert (d["format"], d["model"], d["features"], d["finished"]) == ("gnnprep.tune", "sgc", str(feats.absolute()), True)
    assert d["grid"] == {"lr": [0.1, 0.2]} and d["fixed"] == {"epochs": 4}
    assert (d["trials_finished"], d["trials_total"]) == (2 + 3, 2 + 3)
    best = d["best"]
    assert best["params"] == {"lr": 0.2} and best["chosen"] is True and best["runs"] == 3
    assert (best["valid_acc"], best["test_acc"]) == (0.9, 0.25)
    r = run(["info", t])
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{t}: gnnprep tune folder (format gnnprep.tune version 1; finished)"
    assert "  grid           lr=0.1,0.2 (2 points x 2 seeds, then 3 report seeds)" in lines
    assert "  trials         5 of 5 finished" in lines
    assert "  chosen         lr=0.2: valid 90.00 ± 0.00, test 25.00 ± 0.00 (3 report seeds)" in lines


def test_info_describes_an_unfinished_tune_folder(tuned):
    _, t = tuned
    record = json.loads((t / "tune.json").read_text())
    del record["result"]   # as while it runs (or once interrupted): the started record
    (t / "tune.json").write_text(json.dumps(record))
    reports = [p for p in (t / "trials").glob("*.json") if json.loads(p.read_text())["seed"] < SELECTION_SEED_OFFSET]
    for p in reports:
        p.unlink()
    d = json.loads(run(["info", t, "--json"]).stdout)
    assert (d["finished"], d["trials_finished"], d["trials_total"]) == (False, 2, 5)
    assert d["best"]["params"] == {"lr": 0.2} and d["best"]["chosen"] is False and d["best"]["test_acc"] is None
    r = run(["info", t])
    assert r.exit_code == 0 and "not finished: the same gnnprep tune command with -o" in r.stdout.splitlines()[0]
    assert "  trials         2 of 5 finished" in r.stdout and "best so far    lr=0.2: valid 90.00" in r.stdout
    for p in (t / "trials").glob("*.json"):
        p.unlink()
    d = json.loads(run(["info", t, "--json"]).stdout)
    assert (d["trials_finished"], d["best"]) == (0, None)


def test_info_names_a_damaged_tune_json(tuned):
    _, t = tuned
    (t / "tune.json").write_text("[1, 2]")
    r = run(["info", t, "--json"])
    assert_one_error(r, 1, r"tune\.json: holds an array, not a JSON object; expected the record gnnprep tune writes")


def test_info_on_another_folder_lists_what_it_accepts(tmp_path):
    # before: "is a folder; expected a gnnprep HDF5 file", though info takes run folders too
    (tmp_path / "empty").mkdir()
    r = run(["info", tmp_path / "empty"])
    assert_one_error(r, 1, r"empty: is a folder without model\.pt, checkpoint\.pt or tune\.json; expected a gnnprep "
                           r"artifact \(graph store, features, HAG, HDG\), .*a training run's folder, model\.pt or "
                           r"checkpoint\.pt, or a tune folder")
