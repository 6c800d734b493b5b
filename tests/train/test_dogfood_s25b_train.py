"""Dogfood pass 25b of ``gnnprep train`` and ``gnnprep tune``: layers a model cannot have (sgc is one
linear layer, lc-jknet one layer per hop) were refused only once the data was read (exit 1, from
build_model); now they are usage errors before anything is read, and the library still refuses them."""

from __future__ import annotations

import json

import pytest
from fixtures import assert_one_error, run, write_features

from gnnprep.core.errors import OptionError
from gnnprep.train.models import ModelSpec, build_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def feats(tmp_path, rng):
    return write_features(tmp_path / "f.h5", rng, n=40, d=6, K=3)


@pytest.mark.parametrize("model, args, says", [
    ("sgc", ["--layers", "3"], r"3: sgc is one linear layer \(leave --layers out\)"),
    ("lc-jknet", ["--layers", "2", "--hops", "3"], r"2: lc-jknet has one layer per hop, so --hops 3 gives it 3"),
])
def test_train_refuses_layers_the_model_cannot_have_before_reading(tmp_path, model, args, says):
    # before: exit 1 once the features were read ("Error: --layers 3: sgc is one linear layer")
    r = run(["train", model, tmp_path / "not-there.h5", "-o", tmp_path / "run", *args])
    assert_one_error(r, 2, rf"Invalid value for '--layers': {says}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("model, args", [
    ("sgc", ["--layers", "1"]),
    ("lc-jknet", ["--layers", "2", "--hops", "2"]),
    ("lc-jknet", ["--layers", "3"]),   # the artifact's 3 hops: decided once it is read, as before
    ("lc-gcn", ["--layers", "3"]),
])
def test_train_takes_layers_the_model_can_have(tmp_path, feats, model, args):
    r = run(["train", model, feats, "-o", tmp_path / "run", "--epochs", "1", "--json", *args])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["model"] == model


@pytest.mark.parametrize("model, args, option, says", [
    ("sgc", ["--grid", "layers=1,2"], "--grid", r"layers=2: sgc is one linear layer"),
    ("sgc", ["--grid", "lr=0.1", "--layers", "2"], "--layers", r"2: sgc is one linear layer"),
    ("lc-jknet", ["--grid", "layers=2,3", "--hops", "2"], "--grid", r"layers=3: lc-jknet has one layer per hop, so "
                                                                     r"--hops 2 gives it 2"),
    ("lc-jknet", ["--grid", "hops=2,3", "--layers", "2"], "--grid", r"hops=3 with --layers 2: lc-jknet has one layer"),
    ("lc-jknet", ["--grid", "hops=2,3;layers=2,3"], "--grid", r"hops=2, layers=3: lc-jknet has one layer per hop"),
])
def test_tune_refuses_layers_the_model_cannot_have_before_reading(tmp_path, model, args, option, says):
    # before: the tune read the artifact and failed in its first trial
    r = run(["tune", model, tmp_path / "not-there.h5", "-o", tmp_path / "t", *args])
    assert_one_error(r, 2, rf"Invalid value for '{option}': {says}")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("args", [["--grid", "lr=0.1,0.2", "--hops", "2", "--layers", "2"],
                                  ["--grid", "hops=2,3"], ["--grid", "lr=0.1", "--layers", "3", "--hops", "3"]])
def test_tune_takes_lc_jknet_layers_equal_to_its_hops(tmp_path, args):
    # past the checks: the missing file is what stops it (exit 1)
    r = run(["tune", "lc-jknet", tmp_path / "not-there.h5", "-o", tmp_path / "t", *args])
    assert_one_error(r, 1, r"not-there\.h5: no such file")


def test_the_library_still_refuses_them_when_the_model_is_built():
    for name, layers, hops in (("sgc", 3, 2), ("lc-jknet", 2, 3)):
        with pytest.raises(OptionError, match="--layers"):
            build_model(ModelSpec(name=name, in_dim=4, num_classes=2, hops=hops, layers=layers))
