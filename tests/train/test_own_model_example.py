"""examples/own_model.py (issue 25): a model gnnprep does not ship, trained through the Python API on
the embedded sample, with its rows held in memory and streamed (a budget below the data)."""

import importlib.util
from pathlib import Path

import pytest
from fixtures import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample_features(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own")
    assert run(["ingest", "sample", "-o", tmp / "g.h5", "--quiet"]).exit_code == 0
    assert run(["precompute", tmp / "g.h5", "--hops", "3", "-o", tmp / "f.h5", "--quiet"]).exit_code == 0
    return tmp / "f.h5"


def _example():
    spec = importlib.util.spec_from_file_location("own_model", ROOT / "examples" / "own_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_example_is_short():
    assert len((ROOT / "examples" / "own_model.py").read_text().splitlines()) <= 60


@pytest.mark.parametrize("budget", [None, "512KiB"])   # the sample's split rows: 1.7 MB of hops 0..3
def test_the_example_trains_on_the_sample(sample_features, budget):
    args = [str(sample_features), "--epochs", "15"] + (["--memory-budget", budget] if budget else [])
    result = _example().main(args)
    assert result["streaming"] == (budget is not None)
    assert result["valid_acc"] > 0.85 and result["test_acc"] > 0.85   # lc-gprgnn reaches 0.965 on it
