"""Operator specs name what they compute (issue 23, item 4 and 8): two specs share a channel name
only when their values are the same float, a key given twice is a usage error, and each key's own
range applies (``ppr:k`` up to 1000)."""

import pytest
from fixtures import run

from gnnprep.core.errors import GnnprepError
from gnnprep.precompute.operators import parse_operators


def test_nearby_values_get_their_own_names():
    assert parse_operators("norm:a=0.4999999") != parse_operators("norm:a=0.5")
    assert parse_operators("norm:a=0.5") == ("norm:a=0.5,b=0.5,loop=1",)      # the usual names unchanged
    assert parse_operators("ppr:alpha=0.1") == ("ppr:alpha=0.1,k=10",)
    assert parse_operators("norm:a=1e-7") == ("norm:a=1e-07,b=0.5,loop=1",)


@pytest.mark.parametrize("spec", ["ppr:alpha=0.1,alpha=0.2", "norm:a=0.5,b=1,a=0.5", "ppr:k=2,k=2"])
def test_a_key_given_twice_is_refused(spec):
    with pytest.raises(GnnprepError, match="given twice"):
        parse_operators(spec)


@pytest.mark.parametrize("spec,ok", [("ppr:k=20", True), ("ppr:k=1000", True), ("ppr:k=1001", False),
                                     ("norm:a=17", False), ("norm:loop=16", True)])
def test_each_key_has_its_own_range(spec, ok):
    if ok:
        parse_operators(spec)
    else:
        with pytest.raises(GnnprepError):
            parse_operators(spec)


def test_the_command_line_refuses_a_repeated_key_before_reading(tmp_path):
    (tmp_path / "out").mkdir()
    r = run(["precompute", "sample", "--operator", "ppr:alpha=0.1,alpha=0.2", "-o", str(tmp_path / "out" / "f.h5")])
    assert r.exit_code == 2 and "given twice" in r.stderr.strip().splitlines()[-1]
    assert list((tmp_path / "out").iterdir()) == []
