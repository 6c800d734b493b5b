"""Run folders are shared between people: loading a model.pt or checkpoint.pt from one must never run
code from the file (issue 23, item 1). A crafted pickle that calls ``os.system`` is refused with one
``Error:`` line on every loading path, and its payload never runs."""

import os

import numpy as np
import pytest
import torch
from fixtures import run, write_features

from gnnprep.core.errors import GnnprepError
from gnnprep.train.trainer import load_model


class _Payload:
    """Unpickling this calls ``os.system(command)``: what an attacker puts in a shared model.pt."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _crafted(path, marker, wrap):
    """A torch file whose pickle runs ``touch marker`` when loaded without ``weights_only``."""
    obj = wrap(_Payload(f"touch {marker}"))
    torch.save(obj, path)
    return path


WRAPS = {
    "bare": lambda p: p,
    "inside-a-model-dict": lambda p: {"format": "gnnprep.model", "format_version": 1, "state_dict": {}, "spec": p},
    "inside-a-checkpoint-dict": lambda p: {"format": "gnnprep.checkpoint", "format_version": 1, "config": p},
}


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_load_model_refuses_a_code_payload(tmp_path, wrap):
    marker = tmp_path / "pwned"
    path = _crafted(tmp_path / "model.pt", marker, WRAPS[wrap])
    with pytest.raises(GnnprepError, match="not a gnnprep model"):
        load_model(path)
    assert not marker.exists()


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_train_resume_refuses_a_code_payload_in_the_checkpoint(tmp_path, rng, wrap):
    features = write_features(tmp_path / "f.h5", rng)
    run_dir = tmp_path / "run"
    r = run(["train", "sgc", str(features), "-o", str(run_dir), "--epochs", "2", "--quiet"])
    assert r.exit_code == 0, r.stderr
    marker = tmp_path / "pwned"
    _crafted(run_dir / "checkpoint.pt", marker, WRAPS[wrap])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    r = run(["train", "sgc", str(features), "-o", str(run_dir), "--epochs", "4", "--resume"])
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "checkpoint.pt" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not marker.exists()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before   # the run folder untouched


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("budget", [None, "64KiB"])   # in memory, and streamed from HDF5
def test_train_refuses_features_that_are_not_finite(tmp_path, rng, value, budget):
    import h5py

    features = write_features(tmp_path / "f.h5", rng)
    with h5py.File(features, "a") as f:   # a training row, in every hop (sgc reads S^K X)
        row = int(np.searchsorted(f["rows"][:], f["splits/train"][0]))
        for k in range(4):
            f[f"hops/{k}"][row, 3] = value
    args = ["train", "sgc", str(features), "-o", str(tmp_path / "run"), "--epochs", "2"]
    r = run(args + (["--memory-budget", budget] if budget else []))
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: {features}: /") and f"[{row}, 3] is " in last and "expected finite" in last, r.stderr
