"""Dogfood pass 25 of ``gnnprep train`` and ``gnnprep tune``: settings a model ignores were taken
without a word, a resume of another model named a default instead of the model, the least memory
budget named was more than the run needs, and an interrupted tune said no output was written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixtures import assert_one_error, run, write_features

from gnnprep.cli import _interrupted_line
from gnnprep.core.errors import OptionError
from gnnprep.train.batches import window_rows_for
from gnnprep.train.tune import TuneConfig, tune

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def feats(tmp_path, rng):
    return write_features(tmp_path / "f.h5", rng, n=40, d=6, K=3, operators=("sym", "rw"))


@pytest.mark.parametrize("model, args, option, says", [
    ("mlp", ["--alpha", "0.5"], "--alpha", r"not used by mlp \(it sets lc-gprgnn's initial γ_k\); it applies to lc-gprgnn"),
    ("lc-gcn", ["--dprate", "0.1"], "--dprate", r"not used by lc-gcn .*; it applies to lc-gprgnn"),
    ("lc-gprgnn", ["--pool", "max"], "--pool", r"not used by lc-gprgnn .*; it applies to lc-jknet"),
    ("lc-gcn", ["--operator", "sym,rw"], "--operator", r"sym,rw: lc-gcn reads one channel \(the first\)"),
])
def test_train_refuses_a_setting_the_model_ignores(tmp_path, feats, model, args, option, says):
    # before: exit 0, the setting silently without effect (lc-gcn trained on sym alone)
    r = run(["train", model, feats, "-o", tmp_path / "run", "--epochs", "1", *args])
    assert_one_error(r, 2, rf"Invalid value for '{option}': {says}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("model, args", [
    ("lc-gprgnn", ["--alpha", "0.2", "--dprate", "0.1"]),
    ("lc-jknet", ["--pool", "max", "--hidden", "8"]),
    ("sign", ["--operator", "sym,rw", "--dropout", "0.1"]),
    ("lc-gcn", ["--operator", "rw"]),
    ("sgc", ["--hidden", "8", "--dropout", "0"]),   # one set of flags for every model: sgc ignores these two
])
def test_train_takes_the_settings_the_model_uses(tmp_path, feats, model, args):
    r = run(["train", model, feats, "-o", tmp_path / "run", "--epochs", "1", "--json", *args])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["model"] == model


def test_tune_refuses_a_grid_key_or_fixed_option_the_model_ignores(tmp_path, feats):
    # before: a grid over alpha for mlp trained the same model once per value, and chose the first
    r = run(["tune", "mlp", feats, "-o", tmp_path / "t", "--grid", "alpha=0.1,0.5"])
    assert_one_error(r, 2, r"Invalid value for '--grid': alpha: not used by mlp .*it applies to lc-gprgnn")
    r = run(["tune", "lc-gcn", feats, "-o", tmp_path / "t", "--grid", "lr=0.1", "--pool", "max"])
    assert_one_error(r, 2, r"Invalid value for '--pool': not used by lc-gcn")
    r = run(["tune", "lc-gcn", feats, "-o", tmp_path / "t", "--grid", "operators=sym,sym+rw"])
    assert_one_error(r, 2, r"Invalid value for '--grid': operators: sym,rw: lc-gcn reads one channel")
    assert not (tmp_path / "t").exists()


def test_resuming_another_model_names_the_model(tmp_path, feats):
    # before: "was trained with hops=3, now 2" (the first changed setting in name order)
    args = ["--epochs", "2", "--checkpoint-every", "0"]
    assert run(["train", "lc-gprgnn", feats, "-o", tmp_path / "run", *args]).exit_code == 0
    r = run(["train", "lc-gcn", feats, "-o", tmp_path / "run", "--resume", *args])
    assert_one_error(r, 1, r"checkpoint\.pt: was trained with model='lc-gprgnn', now 'lc-gcn'")


def test_the_least_budget_named_is_what_holding_every_row_takes(tmp_path, feats):
    # before: "need at least 6144 bytes" when 4 x 40 rows x 24 bytes = 3840 bytes in memory would do
    r = run(["train", "lc-gprgnn", feats, "-o", tmp_path / "run", "--epochs", "1", "--memory-budget", "2KiB"])
    assert_one_error(r, 1, r"--memory-budget 2048 bytes cannot hold the features the splits need .*need at least "
                           r"3840 bytes \(every row in memory\)")
    r = run(["train", "lc-gprgnn", feats, "-o", tmp_path / "run", "--epochs", "1", "--memory-budget", "3840",
             "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["streaming"] is False
    with pytest.raises(OptionError, match=r"need at least 6144 bytes"):   # many rows: the windows are the least
        window_rows_for(2048, 96, 16, 2, held_bytes=10**6)


class _Stop:
    """A trial runner that finishes ``ok`` trials and is then interrupted (Ctrl-C)."""

    def __init__(self, ok: int):
        self.ok = ok

    def __call__(self, features, run_dir, config):
        if self.ok == 0:
            raise KeyboardInterrupt
        self.ok -= 1
        return dict(runs=config.runs, valid_acc=0.5, valid_acc_std=0.0, test_acc=0.5, test_acc_std=0.0,
                    epochs_run=1, seconds=0.1, best_epoch=0, device="cpu", evaluator="plain", run_dir=run_dir,
                    per_run=[{"seed": config.seed, "valid_acc": 0.5, "test_acc": 0.5}])


def test_an_interrupted_tune_names_the_folder_it_keeps(tmp_path, feats):
    # before: "Error: interrupted; no output was written" though finished trials were kept to resume
    config = TuneConfig(model="sgc", grid=(("lr", (0.1, 0.2, 0.3)),), fixed={"epochs": 1}, seeds=1, report_seeds=1)
    with pytest.raises(KeyboardInterrupt) as e:
        tune(feats, tmp_path / "t", config, runner=_Stop(ok=1))
    assert e.value.kept_partial == str(tmp_path / "t")
    assert len(list((tmp_path / "t" / "trials").glob("*.json"))) == 1
    assert _interrupted_line(e.value) == (f"Error: interrupted; no output was written (the finished part is kept in "
                                          f"{tmp_path / 't'}: run the same command again to resume)")


def test_an_interrupted_tune_that_finished_nothing_leaves_nothing(tmp_path, feats):
    config = TuneConfig(model="sgc", grid=(("lr", (0.1, 0.2)),), fixed={"epochs": 1}, seeds=1, report_seeds=1)
    with pytest.raises(KeyboardInterrupt) as e:
        tune(feats, tmp_path / "t", config, runner=_Stop(ok=0))
    assert getattr(e.value, "kept_partial", None) is None
    assert not (tmp_path / "t").exists()
    assert _interrupted_line(e.value) == "Error: interrupted; no output was written"
    np.testing.assert_equal(sorted(p.name for p in tmp_path.iterdir()), ["f.h5"])


def test_an_empty_split_is_named_alone(tmp_path, feats):
    """train on features whose valid split is empty names that split (it said "/splits/train and
    /splits/valid must not be empty" whichever was)."""
    import h5py

    with h5py.File(feats, "r+") as f:
        del f["splits/valid"]
        f.create_dataset("splits/valid", data=np.zeros(0, dtype=f["splits/train"].dtype))
    r = run(["train", "mlp", feats, "-o", tmp_path / "run", "--epochs", "1"])
    assert_one_error(r, 1, r"/splits/valid is empty; training needs train and valid node ids")
