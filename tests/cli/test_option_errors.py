"""Option errors carry their option: the library raises ``OptionError(option, message)`` for every
message that starts with an option's name, and the command line turns one into a usage error (exit 2)
by its fields, never by reading the text; any other GnnprepError stays a failure (exit 1)."""

import ast
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from fixtures import run, write_features

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.sizes import parse_size
from gnnprep.train.config import TrainConfig
from gnnprep.train.tune.config import TuneConfig

ROOT = Path(__file__).resolve().parents[2]


def test_an_option_error_carries_its_option_and_reads_as_before():
    e = OptionError("--blocks", "'x': expected auto")
    assert isinstance(e, GnnprepError)
    assert (e.option, e.message, str(e)) == ("--blocks", "'x': expected auto", "--blocks 'x': expected auto")
    e = OptionError("--grid", "expected at least one key=v1,v2", sep=": ")
    assert str(e) == "--grid: expected at least one key=v1,v2"
    # a tune trial's error comes back from its worker process pickled: the fields survive
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), back.option, back.message, str(back)) == (OptionError, e.option, e.message, str(e))


def test_library_checks_raise_option_errors_naming_the_option():
    with pytest.raises(OptionError) as e:
        parse_size("abc", "--memory-budget")
    assert e.value.option == "--memory-budget"
    assert str(e.value) == "--memory-budget: cannot read size 'abc'; expected e.g. 512MiB, 8GiB or 2G"
    with pytest.raises(OptionError) as e:
        TrainConfig(model="sgc", lr=-1.0).check()
    assert (e.value.option, e.value.message) == ("--lr", "-1.0: expected a finite learning rate > 0")
    with pytest.raises(OptionError) as e:
        TuneConfig(model="sgc", grid=()).check()
    assert (e.value.option, str(e.value)) == ("--grid", "--grid: expected at least one key=v1,v2")
    with pytest.raises(GnnprepError) as e:   # not an option's value: a plain GnnprepError
        TrainConfig(model="nosuchmodel").check()
    assert not isinstance(e.value, OptionError)


def _calls_with_option_text(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "GnnprepError" and node.args:
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values:
                first = first.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and re.match(r"--\w", first.value):
                yield node.lineno


def test_no_library_message_names_an_option_without_carrying_it():
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in sorted((ROOT / "gnnprep").rglob("*.py"))
           for line in _calls_with_option_text(ast.parse(p.read_text()))]
    assert not bad, f"GnnprepError('--option ...') should be OptionError('--option', '...'): {bad}"


@pytest.mark.parametrize("name", ["common.py", "train.py", "tune.py"])
def test_the_cli_does_not_read_option_names_out_of_error_text(name):
    text = (ROOT / "gnnprep" / "cli" / name).read_text()
    assert not re.search(r"^import re$|\bre\.(match|sub|search|fullmatch)\(", text, re.M)


@pytest.fixture
def features(tmp_path):
    path = tmp_path / "f.h5"
    write_features(path, np.random.default_rng(0))
    return path


def test_train_maps_errors_by_type(tmp_path, features, monkeypatch):
    r = run(["train", "sgc", features, "-o", tmp_path / "run", "--lr", "-1"])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1] == "Error: Invalid value for '--lr': -1.0: expected a finite learning rate > 0"
    r = run(["train", "nosuchmodel", features, "-o", tmp_path / "run"])
    assert r.exit_code == 1
    assert r.stderr.strip() == "Error: model 'nosuchmodel': expected one of sgc, lc-gcn, lc-jknet, lc-gprgnn, sign, mlp"

    # the type decides, not the text: an OptionError whose message looks like nothing in particular is a
    # usage error about its option, and a plain GnnprepError that starts with "--" stays a failure
    def refuse(error):
        def check(self):
            raise error
        monkeypatch.setattr(TrainConfig, "check", check)

    refuse(OptionError("--patience", "no good"))
    r = run(["train", "sgc", features, "-o", tmp_path / "run"])
    assert (r.exit_code, r.stderr.strip()) == (2, "Error: Invalid value for '--patience': no good")
    refuse(GnnprepError("--patience in a message that is not about the option's value"))
    r = run(["train", "sgc", features, "-o", tmp_path / "run"])
    assert (r.exit_code, r.stderr.strip()) == (1, "Error: --patience in a message that is not about the option's value")
    assert not (tmp_path / "run").exists()


def test_tune_maps_a_config_check_option_error_to_a_usage_error(tmp_path, features):
    r = run(["tune", "sgc", features, "-o", tmp_path / "t", "--grid", "lr=-1,0.1"])
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: Invalid value for '--grid': lr=-1: expected a finite learning rate > 0"
    r = run(["tune", "nosuchmodel", features, "-o", tmp_path / "t", "--grid", "lr=0.1"])
    assert r.exit_code == 1
    assert r.stderr.strip().startswith("Error: model 'nosuchmodel'")
