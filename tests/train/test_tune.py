"""gnnprep tune: grid syntax, selection on validation only, resume, the tune folder, the command."""

import json
from pathlib import Path

import pytest
from fixtures import run, write_features

from gnnprep.core.errors import GnnprepError
from gnnprep.train.trainer import TrainConfig, train
from gnnprep.train.tune import (
    SELECTION_SEED_OFFSET,
    TORCH_ALLOWANCE,
    TuneConfig,
    choose,
    make_trial,
    parse_grid,
    plan_jobs,
    read_facts,
    run_trial,
    trial_bytes,
    tune,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def feats(tmp_path, rng):
    return write_features(tmp_path / "f.h5", rng, n=48, d=8, K=2)


class Watched(dict):
    """A train summary that records which keys are read (and whether it came from a grid trial)."""

    reads: list = []

    def __init__(self, grid: bool, **kw):
        super().__init__(**kw)
        self.grid = grid

    def __getitem__(self, key):
        Watched.reads.append((self.grid, key))
        return super().__getitem__(key)

    def get(self, key, default=None):
        Watched.reads.append((self.grid, key))
        return super().get(key, default)


class FakeRunner:
    """Stands in for training: valid and test accuracy looked up from the trial's lr; counts calls."""

    def __init__(self, valid: dict, test: dict):
        self.valid, self.test, self.calls = valid, test, []

    def __call__(self, features, run_dir, config):
        self.calls.append(config)
        grid = config.seed >= SELECTION_SEED_OFFSET
        return Watched(grid, runs=config.runs, valid_acc=self.valid[config.lr], valid_acc_std=0.01,
                       test_acc=self.test[config.lr], test_acc_std=0.02, epochs_run=7 * config.runs, seconds=0.1,
                       best_epoch=3, device="cpu", evaluator="plain", run_dir=run_dir,
                       per_run=[{"seed": config.seed + r, "valid_acc": self.valid[config.lr],
                                 "test_acc": self.test[config.lr]} for r in range(config.runs)])


PLANTED = dict(valid={0.1: 0.5, 0.2: 0.9, 0.3: 0.7}, test={0.1: 0.95, 0.2: 0.1, 0.3: 0.6})


def planted_config(**kw):
    base = dict(model="sgc", grid=(("lr", (0.1, 0.2, 0.3)),), fixed={"epochs": 5}, seeds=2, report_seeds=3)
    base.update(kw)
    return TuneConfig(**base)


# --------------------------------------------------------------------------------------- grid syntax


def test_grid_keys_are_train_options_and_values_take_the_fields_type():
    grid = parse_grid(" lr=0.2, 5e-2 ; weight-decay=1e-5,0;hidden=64,128;normalize-features=row,none;operators=sym+rw")
    assert grid == (("lr", (0.2, 0.05)), ("weight_decay", (1e-5, 0.0)), ("hidden", (64, 128)),
                    ("normalize_features", ("row", "none")), ("operators", (("sym", "rw"),)))
    assert isinstance(grid[2][1][0], int) and isinstance(grid[1][1][1], float)
    assert TuneConfig("sgc", grid=grid).points()[:2] == [
        {"lr": 0.2, "weight_decay": 1e-5, "hidden": 64, "normalize_features": "row", "operators": ("sym", "rw")},
        {"lr": 0.2, "weight_decay": 1e-5, "hidden": 64, "normalize_features": "none", "operators": ("sym", "rw")}]


BAD_GRIDS = [
    (["--grid", "foo=1"], "unknown key"),
    (["--grid", "lr="], "empty value"),
    (["--grid", "lr=0.1,,0.2"], "empty value"),
    (["--grid", "lr"], "expected key=v1,v2"),
    (["--grid", ";"], "expected key=v1,v2"),
    (["--grid", "hidden=1.5"], "expected an int"),
    (["--grid", "lr=0.1;lr=0.2"], "given twice"),
    (["--grid", "lr=0.1,0.1"], "repeated"),
    (["--grid", "seed=1,2"], "unknown key"),
    (["--grid", "lr=-1"], "lr=-1"),                     # TrainConfig.check refuses it
    (["--grid", "dropout=0.5,1"], "dropout=1"),
    (["--grid", "layers=0"], "layers=0"),
    (["--grid", "lr=0.1", "--lr", "0.2"], "also given as --lr"),
    (["--grid", "weight-decay=0,1e-4", "--weight-decay", "0"], "also given as --weight-decay"),
    (["--grid", "lr=0.1", "--jobs", "-1"], "--jobs"),
]


@pytest.mark.parametrize("args,why", BAD_GRIDS, ids=[" ".join(a) for a, _ in BAD_GRIDS])
def test_a_bad_grid_is_a_usage_error_before_anything_is_read(tmp_path, args, why):
    out = tmp_path / "tune"
    r = run(["tune", "sgc", tmp_path / "missing.h5", "-o", out, *args])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and why in lines[0], r.stderr
    assert r.stdout == "" and not out.exists()


def test_the_library_refuses_what_the_command_line_would(feats, tmp_path):
    with pytest.raises(GnnprepError, match="also given as --lr"):
        tune(feats, tmp_path / "t", planted_config(fixed={"lr": 0.1}), runner=FakeRunner(**PLANTED))
    with pytest.raises(GnnprepError, match="not a tunable"):
        tune(feats, tmp_path / "t", planted_config(fixed={"seed": 3}), runner=FakeRunner(**PLANTED))
    assert not (tmp_path / "t").exists()


# --------------------------------------------------------------------------------------- selection


def test_selection_uses_validation_only_and_reports_fresh_seeds(feats, tmp_path):
    runner = FakeRunner(**PLANTED)
    Watched.reads.clear()
    report = tune(feats, tmp_path / "t", planted_config(), runner=runner)
    # lr=0.2 is best on validation and worst on test: it is chosen
    assert report.chosen_params == {"lr": 0.2}
    assert [t.valid_acc for t in report.trials] == [0.5, 0.9, 0.7]
    assert not [key for grid, key in Watched.reads if grid and "test" in key]  # never looked at
    assert any(grid and key == "valid_acc" for grid, key in Watched.reads)
    # grid trials: seeds far from the reported ones; the report: the base seed, report_seeds runs
    grid_calls, final = runner.calls[:3], runner.calls[3:]
    assert [(c.lr, c.seed, c.runs, c.epochs) for c in grid_calls] == [
        (lr, SELECTION_SEED_OFFSET, 2, 5) for lr in (0.1, 0.2, 0.3)]
    assert [(c.lr, c.seed, c.runs) for c in final] == [(0.2, 0, 1), (0.2, 1, 1), (0.2, 2, 1)]
    assert report.report["test_acc"] == pytest.approx(0.1) and report.to_dict()["report"]["runs"] == 3


def test_ties_go_to_the_earlier_grid_point(feats, tmp_path):
    assert choose([0.5, 0.7, 0.7, 0.6]) == 1 and choose([0.3]) == 0
    runner = FakeRunner(valid={0.1: 0.8, 0.2: 0.8, 0.3: 0.7}, test=PLANTED["test"])
    assert tune(feats, tmp_path / "t", planted_config(), runner=runner).chosen_params == {"lr": 0.1}


# --------------------------------------------------------------------------------------- resume, folder


def test_a_rerun_redoes_only_unfinished_trials(feats, tmp_path):
    out = tmp_path / "t"
    first = FakeRunner(**PLANTED)
    tune(feats, out, planted_config(), runner=first)
    assert len(first.calls) == 6
    redo = make_trial("sgc", {"epochs": 5}, {"lr": 0.3}, SELECTION_SEED_OFFSET, 2)
    (out / "trials" / f"{redo.key}.json").unlink()
    (out / "trials" / redo.key).mkdir(exist_ok=True)
    (out / "trials" / redo.key / "junk").write_text("a partial run")   # left by a killed trial
    seen = []

    def runner(features, run_dir, config):
        seen.append(sorted(p.name for p in (tmp_path / run_dir).glob("*")))  # started from scratch
        return first(features, run_dir, config)

    again = tune(feats, out, planted_config(), runner=runner)
    assert len(first.calls) == 7 and first.calls[-1].lr == 0.3 and seen == [[]]
    assert again.resumed_trials == 5 and [t.resumed for t in again.trials] == [True, True, False]
    assert again.chosen_params == {"lr": 0.2}
    third = FakeRunner(**PLANTED)
    assert tune(feats, out, planted_config(), runner=third).resumed_trials == 6 and third.calls == []


def test_an_interrupted_tune_keeps_its_finished_trials(feats, tmp_path):
    out, inner = tmp_path / "t", FakeRunner(**PLANTED)

    def dies_on_the_third(features, run_dir, config):
        if len(inner.calls) == 2:
            raise KeyboardInterrupt
        return inner(features, run_dir, config)

    with pytest.raises(KeyboardInterrupt):
        tune(feats, out, planted_config(), runner=dies_on_the_third)
    assert len(list((out / "trials").glob("*.json"))) == 2
    rest = FakeRunner(**PLANTED)
    assert tune(feats, out, planted_config(), runner=rest).resumed_trials == 2 and len(rest.calls) == 4


def test_a_folder_of_another_tune_is_refused(feats, tmp_path, rng):
    out = tmp_path / "t"
    tune(feats, out, planted_config(), runner=FakeRunner(**PLANTED))
    other = write_features(tmp_path / "g.h5", rng, n=40, d=8, K=2)
    r = run(["tune", "sgc", other, "-o", out, "--grid", "lr=0.1,0.2"])
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {out}: holds a tune of sgc on {feats}"), r.stderr
    with pytest.raises(GnnprepError, match="holds a tune of sgc"):
        tune(feats, out, planted_config(model="mlp"), runner=FakeRunner(**PLANTED))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(GnnprepError, match="holds no tune.json"):
        tune(feats, tmp_path / "busy", planted_config(), runner=FakeRunner(**PLANTED))
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]


def test_trial_keys_are_stable_and_cover_what_the_trial_computes():
    a = make_trial("sgc", {"epochs": 5}, {"lr": 0.05}, 1000, 2)
    assert a.key == make_trial("sgc", {"epochs": 5}, {"lr": 5e-2}, 1000, 2).key and len(a.key) == 16
    others = [make_trial("mlp", {"epochs": 5}, {"lr": 0.05}, 1000, 2), make_trial("sgc", {"epochs": 6}, {"lr": 0.05}, 1000, 2),
              make_trial("sgc", {"epochs": 5}, {"lr": 0.05}, 0, 2), make_trial("sgc", {"epochs": 5}, {"lr": 0.05}, 1000, 3)]
    assert len({a.key, *(t.key for t in others)}) == 5


def test_jobs_fit_the_memory_budget_and_the_cpus(feats):
    facts = read_facts(feats)
    assert (facts.held_rows, facts.width, facts.itemsize, facts.hops) == (48, 8, 4, 2)
    assert trial_bytes(facts, "lc-gprgnn", {}) == 48 * 3 * 8 * 4 + TORCH_ALLOWANCE
    assert trial_bytes(facts, "lc-gprgnn", {"hops": 1}) == 48 * 2 * 8 * 4 + TORCH_ALLOWANCE
    assert trial_bytes(facts, "sgc", {}) == 48 * 8 * 4 + TORCH_ALLOWANCE
    gib = 1024**3
    assert plan_jobs(4, gib, 3 * gib, pending=10, cpus=8) == (3, [plan_jobs(4, gib, 3 * gib, 10, 8)[1][0]])
    assert plan_jobs(4, gib, 3 * gib, 10, 8)[1][0].startswith("--jobs 4: 3 trial(s)")
    assert plan_jobs(0, gib, 64 * gib, pending=10, cpus=8)[0] == 8
    assert plan_jobs(0, gib, 64 * gib, pending=2, cpus=8)[0] == 2
    assert plan_jobs(2, 10 * gib, gib, pending=5, cpus=8)[0] == 1


# --------------------------------------------------------------------------------------- end to end


TINY = ["--epochs", "12", "--patience", "0", "--hidden", "16", "--batch-size", "16", "--dropout", "0",
        "--seeds", "1", "--report-seeds", "2", "--threads", "1"]


def test_the_command_trains_every_point_in_workers_and_prints_one_json_object(feats, tmp_path):
    r = run(["tune", "lc-gcn", feats, "-o", tmp_path / "t2", "--grid", "lr=0.05,0.01;weight-decay=0,1e-3", *TINY,
             "--jobs", "2", "--json", "--quiet"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= {"model", "chosen", "trials", "report", "seconds", "resumed_trials"}
    assert d["model"] == "lc-gcn" and d["jobs"] == 2 and d["resumed_trials"] == 0 and len(d["trials"]) == 4
    assert [t["params"] for t in d["trials"]][:2] == [{"lr": 0.05, "weight-decay": 0.0}, {"lr": 0.05, "weight-decay": 0.001}]
    for t in d["trials"]:
        assert 0 <= t["valid_acc"] <= 1 and t["epochs"] == 12 and "test_acc" not in t
    best = max(range(4), key=lambda i: (d["trials"][i]["valid_acc"], -i))
    assert d["chosen"] == d["trials"][best]["params"] and d["chosen_index"] == best
    rep = d["report"]
    assert rep["runs"] == 2 and [p["seed"] for p in rep["per_run"]] == [0, 1]
    assert 0 <= rep["test_acc"] <= 1 and rep["test_acc_std"] >= 0 and rep["valid_acc_std"] >= 0
    record = json.loads((tmp_path / "t2" / "tune.json").read_text())
    assert record["features"]["file"] and record["result"]["chosen"] == d["chosen"]
    assert rep["run_dir"] in rep["run_dirs"] and len(rep["run_dirs"]) == 2
    assert all((Path(d) / "model.pt").exists() for d in rep["run_dirs"])

    # one job gives the same numbers (trials are seeded; same thread count), and the table marks the choice
    r1 = run(["tune", "lc-gcn", feats, "-o", tmp_path / "t1", "--grid", "lr=0.05,0.01;weight-decay=0,1e-3", *TINY])
    assert r1.exit_code == 0, r1.stderr
    rows = r1.stdout.splitlines()
    assert rows[0].startswith("lc-gcn: 4 grid points × 1 seeds") and len(rows) == 8
    assert [row[0] for row in rows[2:6]] == [" *"[i == best] for i in range(4)]
    assert f"test {100 * rep['test_acc']:.2f} ± {100 * rep['test_acc_std']:.2f}" in rows[6]
    again = run(["tune", "lc-gcn", feats, "-o", tmp_path / "t1", "--grid", "lr=0.05,0.01;weight-decay=0,1e-3", *TINY,
                 "--json"])
    d1 = json.loads(again.stdout)
    assert d1["resumed_trials"] == 6 and d1["jobs"] == 1
    assert [t["valid_acc"] for t in d1["trials"]] == [t["valid_acc"] for t in d["trials"]]
    assert d1["report"]["test_acc"] == rep["test_acc"]


def test_a_trial_that_fails_is_one_error_line(feats, tmp_path):
    r = run(["tune", "sgc", feats, "-o", tmp_path / "t", "--grid", "lr=0.1", "--hops", "5", *TINY])
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --hops 5:"), r.stderr
    assert not list((tmp_path / "t" / "trials").glob("*.json"))


def test_the_report_equals_one_train_call_over_the_report_seeds(feats, tmp_path):
    fixed = dict(hidden=16, dropout=0.3, dprate=0.2, batch_size=16, epochs=8, patience=0)
    config = TuneConfig("lc-gprgnn", grid=(("lr", (0.05,)),), fixed=fixed, seed=7, seeds=1, report_seeds=3, threads=1)
    report = tune(feats, tmp_path / "t", config, runner=run_trial)
    whole = train(feats, tmp_path / "whole", TrainConfig(model="lc-gprgnn", lr=0.05, seed=7, runs=3, threads=1, **fixed))
    expect = whole.summary()
    drop = {"seconds"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in report.report["per_run"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in expect["per_run"]]
    for key in ("valid_acc", "valid_acc_std", "test_acc", "test_acc_std", "epochs_run", "runs"):
        assert report.report[key] == pytest.approx(expect[key], rel=1e-12), key
