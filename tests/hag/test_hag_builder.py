"""The HAG builder (:func:`gnnprep.hag.builder.build` under a :class:`HagConfig`): the library call
writes what ``gnnprep hag`` writes and reports what it prints, and ``precompute --hag auto`` builds
its cached HAG through it."""

import json

import h5py
import numpy as np
import pytest
from fixtures import clique_store, run

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.builder import HagConfig, HagReport, build, cache_path

ARRAYS = ("agg/inputs", "agg/level_ptr", "adj/indptr", "adj/indices")
MEASURED = ("search_seconds", "compile_seconds", "peak_bytes", "output", "kept_copy")  # differ between two runs of the same search (its copy: path and seconds)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A graph store of 40 overlapping 7-cliques over 100 nodes (2 isolated), 4 features: redundancy
    to find."""
    return clique_store(tmp_path_factory.mktemp("hag_builder"), 5, 100, 40, 4, among=98)


def contents(path):
    """The arrays (values and dtypes), the root attributes but the creation time, and the provenance
    but its timings, peak and command line."""
    with h5py.File(path, "r") as f:
        arrays = {k: (f[k][:], f[k].dtype) for k in ARRAYS}
        attrs = {k: v for k, v in f.attrs.items() if k not in ("created_utc", "provenance")}
        prov = json.loads(f.attrs["provenance"])
    for k in ("timings", "peak_bytes", "command"):
        prov.pop(k)
    return arrays, attrs, prov


def assert_same_hag(a, b):
    (arr_a, attrs_a, prov_a), (arr_b, attrs_b, prov_b) = contents(a), contents(b)
    for k in ARRAYS:
        np.testing.assert_array_equal(arr_a[k][0], arr_b[k][0])
        assert arr_a[k][1] == arr_b[k][1], k
    assert attrs_a.keys() == attrs_b.keys()
    assert all(np.array_equal(attrs_a[k], attrs_b[k]) for k in attrs_a)
    assert prov_a == prov_b


@pytest.mark.parametrize("options, config", [
    ([], HagConfig(capacity=0.25)),
    (["--capacity", "all"], HagConfig(capacity="all")),
    (["--capacity", "9", "--method", "exact"], HagConfig(capacity=9, method="exact")),
    (["--capacity", "0.1", "--window", "3", "--max-depth", "2", "--min-share", "3"],
     HagConfig(capacity=0.1, window=3, max_depth=2, min_share=3)),
    (["--aggregate", "sequential", "--capacity", "all"], HagConfig(aggregate="sequential", capacity="all")),
])
def test_library_build_equals_the_cli(graph, tmp_path, options, config):
    budget = ["--memory-budget", "1G"]
    r = run(["hag", graph, "-o", tmp_path / "cli.h5", "--json", *options, *budget])
    assert r.exit_code == 0, r.stderr
    printed = json.loads(r.stdout)
    report = build(graph, tmp_path / "lib.h5", HagConfig(**{**config.__dict__, "memory_budget": 1 << 30}))
    assert isinstance(report, HagReport) and report.output == str(tmp_path / "lib.h5")
    mine = report.to_dict()
    assert list(mine) == list(printed)  # the same keys in the same order
    assert {k: v for k, v in mine.items() if k not in MEASURED} == {k: v for k, v in printed.items() if k not in MEASURED}
    assert report["num_agg"] == report.num_agg > 0  # read like the dict it replaced
    assert_same_hag(tmp_path / "cli.h5", tmp_path / "lib.h5")


def test_build_takes_an_open_store_and_refuses_it_as_output(graph, tmp_path):
    from gnnprep.graph.store import GraphStore

    build(graph, tmp_path / "a.h5", HagConfig(memory_budget=1 << 30))
    with GraphStore(graph) as g:
        build(g, tmp_path / "b.h5", HagConfig(memory_budget=1 << 30))
        with pytest.raises(GnnprepError, match="is also an input"):
            build(g, graph, HagConfig())
    assert_same_hag(tmp_path / "a.h5", tmp_path / "b.h5")
    with pytest.raises(GnnprepError, match="is also an input"):
        build(graph, graph, HagConfig())


def test_config_capacity_and_check():
    # n = 100 nodes, m = 50 stored entries: every count is clipped to m
    assert [HagConfig(capacity=c).capacity_for(100, 50) for c in (None, 0.1, 1.0, "all", 7, 80, 0)] == \
        [25, 10, 50, 50, 7, 50, 0]
    HagConfig().check()
    HagConfig(capacity=np.int64(7)).check()
    for bad, match in ((dict(method="greedy"), "--method"), (dict(aggregate="max"), "--aggregate"),
                       (dict(capacity=1.5), "--capacity"), (dict(capacity=-1), "--capacity"),
                       (dict(capacity=True), "--capacity"), (dict(capacity="most"), "--capacity"),
                       (dict(window=0), "--window"), (dict(max_depth=0), "--max-depth"),
                       (dict(min_share=1), "--min-share")):
        with pytest.raises(GnnprepError, match=match):
            HagConfig(**bad).check()


def test_hag_auto_builds_its_cache_with_the_builder(graph, tmp_path, monkeypatch):
    import shutil

    from gnnprep.hag import builder
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    g = tmp_path / "g.h5"
    shutil.copy2(graph, g)
    # a free search always repays itself (auto asks the streamed search's own prediction)
    monkeypatch.setattr(builder, "dry_run", lambda *a, **k: {"predicted_seconds": 0.0})
    precompute(g, tmp_path / "f.h5", PrecomputeConfig(hops=2, device="cpu", hag="auto"))
    with h5py.File(cache_path(g), "r") as f:
        prov = json.loads(f.attrs["provenance"])
    assert prov["command"] == "gnnprep precompute --hag auto"
    build(g, tmp_path / "lib.h5", HagConfig(memory_budget=prov["parameters"]["memory_budget"]))
    assert_same_hag(cache_path(g), tmp_path / "lib.h5")
