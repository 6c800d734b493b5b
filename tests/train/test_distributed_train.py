"""``gnnprep train`` under ``torchrun --nproc-per-node 2`` (DistributedDataParallel, gloo, CPU).

Two ranks with per-rank batch B take the steps of one process with batch 2B and, with no dropout,
the same gradients: the trained weights equal the one-process run's to float tolerance (the
strongest check of the sharding and loss weighting; batch 17 of 35 training rows also makes rank 1's
slice of the last global batch empty). Rank 0 alone writes the run folder and prints; ``--resume``
continues a 2-rank run; a failure is one ``Error:`` line. Each launch imports torch in three
processes (~5 s), so there are four."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures import run, torchrun, write_features

from gnnprep.train.batches import InMemoryBatches, global_batches, rank_slice, rank_take
from gnnprep.train.trainer import TrainConfig, load_model, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SETTINGS = ["--normalize-features", "none", "--dropout", "0", "--lr", "0.2", "--weight-decay", "0"]


def one_process(features, run_dir, epochs, batch_size):
    cfg = TrainConfig(model="sgc", normalize_features="none", dropout=0.0, lr=0.2, weight_decay=0.0,
                      batch_size=batch_size, epochs=epochs, device="cpu")
    return train(features, run_dir, cfg)


def assert_same_training(one: Path, two: Path) -> None:
    a, b = load_model(one / "model.pt")[0].state_dict(), load_model(two / "model.pt")[0].state_dict()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    ha = json.loads((one / "metrics.json").read_text())["runs"][0]["history"]
    hb = json.loads((two / "metrics.json").read_text())["runs"][0]["history"]
    assert [h["steps"] for h in ha] == [h["steps"] for h in hb]
    for x, y in zip(ha, hb):
        for key in ("train_loss", "valid_loss", "valid_acc", "test_acc"):
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-6), key


def test_two_ranks_take_the_steps_and_gradients_of_one_process_with_twice_the_batch(tmp_path):
    features = write_features(tmp_path / "f.h5", np.random.default_rng(3), n=70, d=16, K=2)  # 35 training rows
    run_dir = tmp_path / "run"
    args = ["train", "sgc", features, "-o", run_dir, "--batch-size", 17, "--device", "cpu", *SETTINGS]
    r = torchrun(args + ["--epochs", 3, "--json", "--checkpoint-every", 0])
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # rank 0 alone prints: exactly one JSON object
    assert report["world_size"] == 2 and report["epochs_run"] == 3
    # rank 0 alone wrote the folder: the run's files, no temporaries or per-rank copies
    assert sorted(p.name for p in run_dir.iterdir()) in (["checkpoint.pt", "metrics.json", "model.pt"],
                                                        ["checkpoint.pt", "curves.png", "metrics.json", "model.pt"])
    ck = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert ck["world_size"] == 2 and len(ck["ends"][0]["rank_rng"]) == 2
    assert json.loads((run_dir / "metrics.json").read_text())["world_size"] == 2

    ref = tmp_path / "one"
    one_process(features, ref, 3, 34)
    history = json.loads((ref / "metrics.json").read_text())["runs"][0]["history"]
    assert [h["steps"] for h in history] == [2, 2, 2] == [len(global_batches(35, 17, 2))] * 3
    assert_same_training(ref, run_dir)

    # --resume continues the 2-rank run to more epochs, as one process continues its own
    r = torchrun(args + ["--epochs", 5, "--json", "--resume"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["epochs_run"] == 5
    ref5 = tmp_path / "one5"
    one_process(features, ref5, 5, 34)
    assert_same_training(ref5, run_dir)

    # one process cannot resume a 2-rank run: one Error line
    r = run(["train", "sgc", features, "-o", run_dir, "--batch-size", 17, "--device", "cpu", *SETTINGS,
             "--epochs", 6, "--resume"])
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith(f"Error: {run_dir / 'checkpoint.pt'}: was trained by 2 process(es), now 1")


def test_a_failure_is_one_error_from_rank_0(tmp_path):
    features = write_features(tmp_path / "f.h5", np.random.default_rng(4), n=40, d=8, K=2)
    r = torchrun(["train", "sgc", features, "-o", tmp_path / "run", "--hops", 9, "--device", "cpu"])
    assert r.returncode != 0 and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [f"Error: --hops 9: {features} holds hops 0..2 (rank 0 of 2)"]
    assert not (tmp_path / "run").exists()
    # a usage error (an option value click refuses) is printed by rank 0 alone too
    r = torchrun(["train", "sgc", features, "-o", tmp_path / "run", "--lr", "-1", "--device", "cpu"])
    assert r.returncode != 0 and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "--lr" in errors[0], r.stderr
    assert not (tmp_path / "run").exists()


# -- without a launch ------------------------------------------------------------------------------
def test_rank_slices_cut_every_global_batch_into_the_one_process_batches():
    for n, world in [(35, 2), (1, 2), (7, 3), (100, 4)]:
        parts = [rank_slice(n, r, world) for r in range(world)]
        assert parts[0][0] == 0 and parts[-1][1] == n
        assert all(parts[i][1] == parts[i + 1][0] for i in range(world - 1))
        assert max(h - lo for lo, h in parts) - min(h - lo for lo, h in parts) <= 1
        assert all(rank_take(n, r, world)[1] > rank_take(n, r, world)[0] for r in range(world))
    assert global_batches(35, 8, 2) == [16, 16, 3] and global_batches(32, 8, 2) == [16, 16]
    # in memory: the ranks' batches, concatenated per step, are the one-process batches of 2B
    data = torch.arange(40, dtype=torch.float32).reshape(40, 1, 1)
    loader = InMemoryBatches(data, torch.arange(40), torch.device("cpu"))
    split = np.arange(3, 40)
    one = [y.tolist() for _, y in loader.batches(split, 10, True, np.random.default_rng(7))]
    ranks = [[y.tolist() for _, y in loader.batches(split, 5, True, np.random.default_rng(7), share=(r, 2))]
             for r in range(2)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 4
    assert [a + b for a, b in zip(*ranks)] == one
