"""Issue 32, lines 17 and 10 (part): sizing from sizes alone is a ``gnnprep plan`` command under the
command contract (stdout only the result, ``--json`` one object, exit 0/1/2, one ``Error:`` line, no
traceback), every size is bounded so that no input makes it run long, and the library's
``plan_for_sizes`` refuses bad arguments with an ArgumentError naming the argument.
``python -m gnnprep.precompute.sizing`` is its alias, under the same contract."""

from __future__ import annotations

import json
import time

import pytest
from fixtures import run

from gnnprep.core.errors import ArgumentError, GnnprepError, OptionError
from gnnprep.precompute import sizing

BASE = ["plan", "--nodes", "2.7M", "--entries", "83M", "--features", "128"]
OK_BUDGET = ["--memory-budget", "1GiB", "--machine-memory", "2GiB"]


def one_error(r, code: int, pattern: str | None = None) -> str:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    assert r.stdout == "", r.stdout
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, r.stderr
    if pattern is not None:
        assert pattern in errors[0], errors[0]
    return errors[0]


# (extra arguments, the option the one Error line names): each a usage error, exit 2
USAGE_CASES = {
    "budget_zero": (["--memory-budget", "0"], "--memory-budget"),
    "budget_unit": (["--memory-budget", "20XiB"], "--memory-budget"),
    "budget_nan": (["--memory-budget", "nan"], "--memory-budget"),
    "budget_inf": (["--memory-budget", "inf"], "--memory-budget"),
    "budget_negative": (["--memory-budget", "-1GiB"], "--memory-budget"),
    "budget_empty": (["--memory-budget", ""], "--memory-budget"),
    "budget_huge": (["--memory-budget", "99999999TiB"], "--memory-budget"),
    "device_tpu": (["--device", "tpu"], "--device"),
    "device_cuda_index": (["--device", "cuda:0"], "--device"),
    "cuda_without_budget": (["--device", "cuda"], "--memory-budget"),
    "nodes_negative": (["--nodes", "-5"], "--nodes"),
    "nodes_zero": (["--nodes", "0"], "--nodes"),
    "nodes_nan": (["--nodes", "nan"], "--nodes"),
    "nodes_inf": (["--nodes", "inf"], "--nodes"),
    "nodes_fraction": (["--nodes", "1.5"], "--nodes"),
    "nodes_huge_exponent": (["--nodes", "1e999"], "--nodes"),
    "nodes_beyond_limit": (["--nodes", str(2**40 + 1)], "--nodes"),
    "nodes_text": (["--nodes", "many"], "--nodes"),
    "entries_negative": (["--entries", "-1"], "--entries"),
    "entries_beyond_n_n_minus_1": (["--nodes", "10", "--entries", "91"], "--entries"),
    "features_zero": (["--features", "0"], "--features"),
    "features_1e9": (["--features", "1e9"], "--features"),
    "features_10_9": (["--features", str(10**9)], "--features"),
    "features_fraction": (["--features", "2.5"], "--features"),
    "hops_negative": (["--hops", "-1"], "--hops"),
    "hops_10_6": (["--hops", str(10**6)], "--hops"),
    "hops_fraction": (["--hops", "1.5"], "--hops"),
    "rows_zero": (["--rows", "0"], "--rows"),
    "rows_beyond_nodes": (["--rows", "3M"], "--rows"),
    "rows_nan": (["--rows", "nan"], "--rows"),
    "rows_labeled_word": (["--rows", "labeled"], "--rows"),
    "operators_zero": (["--operators", "0"], "--operators"),
    "operators_many": (["--operators", "1000"], "--operators"),
    "machine_memory_zero": (["--machine-memory", "0"], "--machine-memory"),
    "machine_memory_nan": (["--machine-memory", "nan"], "--machine-memory"),
    "dtype": (["--dtype", "float64"], "--dtype"),
    "order": (["--order", "bogus"], "--order"),
}


@pytest.mark.parametrize("case", list(USAGE_CASES))
def test_a_refused_value_is_a_usage_error_naming_its_option(case):
    extra, option = USAGE_CASES[case]
    budget = [] if any(a.startswith("--memory-budget") for a in extra) or "cuda" in extra else OK_BUDGET
    line = one_error(run(BASE + budget + extra), 2)
    assert f"'{option}'" in line, line


@pytest.mark.parametrize("args", [["plan"], BASE[:3], BASE + ["--bogus"], BASE + ["--hops"]])
def test_missing_or_unknown_options_are_usage_errors(args):
    one_error(run(args), 2)


@pytest.mark.parametrize("as_json", [False, True])
def test_no_plan_possible_is_exit_1_naming_the_least_budget(as_json):
    r = run(BASE + ["--memory-budget", "1KiB"] + (["--json"] if as_json else []))
    line = one_error(r, 1, "--memory-budget 1.0 KiB is too small for this graph: the least budget with a plan is about")
    least = line.rsplit("about ", 1)[1]
    # the budget named is enough, as printed
    assert run(BASE + ["--memory-budget", least.replace(" ", "")]).exit_code == 0


def test_the_least_budget_is_about_the_least():
    res = sizing.plan_for_sizes(2_700_000, 83_000_000, 128, 3, 1024, machine_memory=2 << 30)
    least = res["least_budget"]
    assert res["plan"] is None and least > 1024
    assert sizing.plan_for_sizes(2_700_000, 83_000_000, 128, 3, least, machine_memory=2 << 30)["plan"]
    assert sizing.plan_for_sizes(2_700_000, 83_000_000, 128, 3, int(least * 0.97), machine_memory=2 << 30)["plan"] is None


def test_a_plan_is_one_json_object_or_a_short_summary():
    r = run(BASE + OK_BUDGET + ["--rows", "38k", "--json"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["plan"]["b"] >= 1 and d["memory_budget"] == 1 << 30 and d["decisions"]["pruning"].startswith("used")
    r = run(BASE + OK_BUDGET)
    assert r.exit_code == 0 and r.stdout.startswith("plan: b=") and len(r.stdout.splitlines()) == 4


def test_the_default_budget_is_this_machines():
    r = run(BASE + ["--machine-memory", "2GiB", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["memory_budget"] >= 256 << 20


@pytest.mark.parametrize("extra", [
    ["--features", "65536", "--hops", "1024", "--rows", "5k"],        # the largest sizes at once
    ["--features", "55440", "--hops", "3"],                           # 120 divisors: the most column counts
    ["--nodes", str(2**40), "--entries", str(2**44), "--features", "65536", "--hops", "1024"],
])
def test_no_input_runs_long(extra):
    t = time.monotonic()
    r = run(BASE + ["--memory-budget", "8GiB", "--machine-memory", "16GiB"] + extra)
    assert r.exit_code in (0, 1), r.stderr
    assert time.monotonic() - t < 10


# -- the library ------------------------------------------------------------------------------------

LIBRARY_CASES = {
    "nodes_float": ({"nodes": 5.9}, "nodes"),
    "nodes_bool": ({"nodes": True}, "nodes"),
    "nodes_str": ({"nodes": "5"}, "nodes"),
    "nodes_zero": ({"nodes": 0}, "nodes"),
    "entries_negative": ({"entries": -1}, "entries"),
    "features_huge": ({"features": 10**9}, "features"),
    "hops_huge": ({"hops": 10**6}, "hops"),
    "hops_float": ({"hops": 1.5}, "hops"),
    "budget_zero": ({"memory_budget": 0}, "memory_budget"),
    "budget_float": ({"memory_budget": float("inf")}, "memory_budget"),
    "rows_beyond_nodes": ({"rows": 10**9}, "rows"),
    "device": ({"device": "tpu"}, "device"),
    "order": ({"order": "bogus"}, "order"),
    "operators": ({"operators": 0}, "operators"),
    "machine_memory": ({"machine_memory": -5}, "machine_memory"),
}


@pytest.mark.parametrize("case", list(LIBRARY_CASES))
def test_plan_for_sizes_refuses_a_bad_argument_naming_it(case):
    change, name = LIBRARY_CASES[case]
    args = dict(nodes=1000, entries=10_000, features=16, hops=2, memory_budget=1 << 30, machine_memory=2 << 30) | change
    with pytest.raises(ArgumentError) as e:
        sizing.plan_for_sizes(**args)
    assert e.value.argument == name and isinstance(e.value, (ValueError, GnnprepError))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text,value", [("111059956", 111059956), ("3.2e9", 3_200_000_000), ("1.6M", 1_600_000),
                                        ("38k", 38_000), ("2B", 2 * 10**9), ("1_000", 1000), ("1,000", 1000)])
def test_parse_count_reads_what_the_shell_gives(text, value):
    assert sizing.parse_count(text) == value


@pytest.mark.parametrize("text", ["", "-1", "nan", "inf", "1.5", "1e999", "1e-3", "12XB", "0x10", "1" * 50])
def test_parse_count_refuses_with_an_option_error(text):
    with pytest.raises(OptionError) as e:
        sizing.parse_count(text, "--features")
    assert e.value.option == "--features"


# -- the alias --------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,code", [
    (["--memory-budget", "0"], 2), (["--memory-budget", "nan"], 2), (["--device", "tpu"], 2),
    (["--features", "1e9", "--memory-budget", "1GiB"], 2), (["--bogus"], 2),
    (["--memory-budget", "1KiB", "--json"], 1),
])
def test_the_module_alias_keeps_the_contract(capsys, extra, code):
    with pytest.raises(SystemExit) as e:
        sizing.main(BASE[1:] + extra)
    assert e.value.code == code
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("Error: ")


def test_the_module_alias_prints_the_plan(capsys):
    sizing.main(BASE[1:] + OK_BUDGET + ["--json"])
    assert json.loads(capsys.readouterr().out)["plan"]["b"] >= 1
