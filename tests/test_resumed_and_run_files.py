"""Dogfood findings on train and info: a resumed train says so in --json (and which seconds are
whose), a resumed precompute's hops keep their seconds in the artifact, and ``gnnprep info`` knows
the run files gnnprep train writes (model.pt, checkpoint.pt)."""

import json

import pytest
import torch
from fixtures import interrupted_slowly, make_store, run, run_json, write_features

from gnnprep.train.trainer import TrainConfig, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small(**kw):
    base = dict(model="lc-gcn", hidden=16, dropout=0.0, input_dropout=0.0, lr=0.02, weight_decay=0.0, batch_size=16,
                epochs=8, patience=0, normalize_features="none", checkpoint_every=0)
    base.update(kw)
    return TrainConfig(**base)


def _interrupted(tmp_path, rng, at=4, **kw):
    """A training run stopped (as by Ctrl-C) after epoch ``at``; (features, run folder, config)."""
    path = write_features(tmp_path / "f.h5", rng)
    cfg = small(**kw)

    def die(stage, done, total):
        if done == at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(path, tmp_path / "run", cfg, progress=die)
    return path, tmp_path / "run", cfg


# ------------------------------------------------------------------ 1. train --json: resumed, seconds


def test_train_summary_says_it_resumed_and_per_run_seconds_count_the_interrupted_part(tmp_path, rng):
    path, run_dir, cfg = _interrupted(tmp_path, rng)
    before = torch.load(run_dir / "checkpoint.pt", weights_only=False)["current"]["elapsed"]
    s = train(path, run_dir, cfg, resume=True).summary()
    assert s["resumed"] is True
    # the run's own seconds: the epochs trained before the interruption count too
    assert s["per_run"][0]["seconds"] >= before > 0 and s["epochs_run"] == 8
    assert json.loads((run_dir / "metrics.json").read_text())["summary"]["resumed"] is True
    assert train(path, tmp_path / "fresh", cfg).summary()["resumed"] is False


def test_train_cli_json_and_summary_say_resumed(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng)
    args = ["train", "lc-gcn", path, "-o", tmp_path / "run", "--hidden", "16", "--batch-size", "8", "--quiet"]
    first = run_json(args + ["--epochs", "3"])
    assert first["resumed"] is False
    more = run_json(args + ["--epochs", "5", "--resume"])   # a finished run continued to more epochs
    assert more["resumed"] is True and more["epochs_run"] == 5
    assert more["per_run"][0]["seconds"] >= first["per_run"][0]["seconds"]
    r = run(args + ["--epochs", "6", "--resume"])
    assert r.exit_code == 0, r.stderr
    line = r.stdout.splitlines()[1]
    assert "6 epochs, resumed: " in line and " s this time, " in line and " s of training in all on " in line
    fresh = run(["train", "lc-gcn", path, "-o", tmp_path / "other", "--hidden", "16", "--epochs", "2", "--quiet"])
    assert "resumed" not in fresh.stdout


# ------------------------------------------------------------------ 2. a resumed precompute's hop seconds


def test_a_resumed_precompute_keeps_the_interrupted_runs_hop_seconds(tmp_path, rng, monkeypatch):
    from gnnprep.info import describe
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    graph = make_store(tmp_path, rng)[0]
    out = tmp_path / "f.h5"
    cfg = PrecomputeConfig(hops=3, device="cpu")
    with monkeypatch.context() as mp:
        interrupted_slowly(mp)   # Ctrl-C once hop 2 of the first column block is finished, each hop >= 1 s
        with pytest.raises(KeyboardInterrupt):
            precompute(graph, out, cfg)
    report = precompute(graph, out, cfg)
    assert report.resumed_units >= 3 and all(s < 1.0 for s in report.hop_seconds)   # the report: this run's
    seconds = describe(out)["hop_seconds"]
    assert len(seconds) == 4 and all(s >= 1.0 for s in seconds[:3]), seconds   # not 0.00: the interrupted run's
    assert run_json(["info", out])["hop_seconds"] == seconds


# ------------------------------------------------------------------ 3. gnnprep info on model.pt, checkpoint.pt


def test_info_describes_a_runs_model_and_checkpoint(tmp_path, rng):
    path, run_dir, cfg = _interrupted(tmp_path, rng, at=3)
    r = run(["info", run_dir / "checkpoint.pt"])
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{run_dir / 'checkpoint.pt'}: gnnprep training checkpoint (format gnnprep.checkpoint")
    assert f"-o {run_dir} --resume" in lines[0]
    assert any(line.split() == ["progress", "0", "run(s)", "finished;", "run", "1", "at", "epoch", "3"] for line in lines)
    ck = run_json(["info", run_dir / "checkpoint.pt"])
    assert (ck["model"], ck["finished_runs"], ck["current"], ck["config"]["epochs"]) == ("lc-gcn", 0,
                                                                                         {"run": 0, "epoch": 3}, 8)
    assert ck["features"] == str(path.absolute()) and ck["graph_fingerprint"] == "g0"
    assert run_json(["info", run_dir])["file"] == str(run_dir / "checkpoint.pt")   # the folder: its checkpoint

    train(path, run_dir, cfg, resume=True)
    m = run_json(["info", run_dir / "model.pt"])
    saved = torch.load(run_dir / "model.pt", weights_only=True)
    assert (m["format"], m["model"], m["best_epoch"], m["seed"]) == ("gnnprep.model", "lc-gcn", saved["best_epoch"], 0)
    assert m["parameters"] == sum(t.numel() for t in saved["state_dict"].values())
    r = run(["info", run_dir / "model.pt"])
    assert r.exit_code == 0 and r.stdout.startswith(f"{run_dir / 'model.pt'}: gnnprep trained model"), r.stderr
    assert f"best epoch {saved['best_epoch']}: valid " in r.stdout and "settings       hops " in r.stdout
    assert run_json(["info", run_dir])["file"] == str(run_dir / "model.pt")   # once trained, its model
    (tmp_path / "empty").mkdir()
    r = run(["info", tmp_path / "empty"])   # a folder without a run's files: as before
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {tmp_path / 'empty'}: is a folder without model.pt, "
                                                    "checkpoint.pt or tune.json; expected a gnnprep artifact")
    # given where an artifact goes, it is named for what it is
    r = run(["train", "sgc", run_dir / "model.pt", "-o", tmp_path / "other"])
    assert r.exit_code == 1 and "not an HDF5 file (a PyTorch file, such as a training run's model.pt" in r.stderr


class _Planted:
    """A pickle that would write a file when loaded unsafely."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_info_on_other_torch_files_is_one_error_line_and_runs_nothing(tmp_path):
    torch.save({"a": torch.zeros(2)}, tmp_path / "other.pt")
    r = run(["info", tmp_path / "other.pt"])
    assert r.exit_code == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert "a PyTorch file gnnprep train did not write" in r.stderr
    marker = tmp_path / "ran"
    torch.save({"format": "gnnprep.model", "x": _Planted(marker)}, tmp_path / "crafted.pt")
    r = run(["info", tmp_path / "crafted.pt"])
    assert r.exit_code == 1 and "cannot be read as tensors and plain values" in r.stderr and not marker.exists()
    # the right format with fields of the wrong kinds: described as they are, no traceback
    torch.save({"format": "gnnprep.checkpoint", "format_version": torch.ones(2), "config": {"model": 3, "epochs": None},
                "finished": [{"seed": torch.zeros(1)}], "current": "x"}, tmp_path / "odd.pt")
    r = run(["info", tmp_path / "odd.pt"])
    assert r.exit_code == 0 and "Traceback" not in r.stderr and "float32 tensor of shape [2]" in r.stdout, r.stdout
    assert run_json(["info", tmp_path / "odd.pt"])["finished"] == [{"seed": "a float32 tensor of shape [1]", "epochs_run": None,
                                                                      "best_epoch": None, "valid_acc": None,
                                                                      "test_acc": None, "seconds": None}]


def test_a_discarded_partial_precompute_names_the_settings_that_differ(tmp_path, rng, monkeypatch):
    """A rerun with other settings removes the interrupted run's partial output and says which ones
    differ (it said "other settings or inputs": the key was a hash)."""
    from gnnprep.core.output import ResumableOutput
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    graph = make_store(tmp_path, rng)[0]
    out = tmp_path / "f.h5"
    mark = ResumableOutput.mark

    def mark_then_stop(self, unit, h5file=None):
        mark(self, unit, h5file)
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(ResumableOutput, "mark", mark_then_stop)
        with pytest.raises(KeyboardInterrupt):
            precompute(graph, out, PrecomputeConfig(hops=2, device="cpu"))
    said = []
    precompute(graph, out, PrecomputeConfig(hops=3, dtype="float16", device="cpu"), warn=said.append)
    assert len(said) == 1 and "made with other settings (dtype float32, now float16; hops 2, now 3)" in said[0], said
    assert "starting afresh" in said[0]
