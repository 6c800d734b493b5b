"""``--hag auto`` with measured terms: runs record their seconds per variant and setting beside the
store (:mod:`gnnprep.precompute.measured`), and once the plain run and the cached HAG's are both
measured for the same settings, auto runs the faster."""

import json
import os
import shutil

import numpy as np
import pytest
from fixtures import clique_store

from gnnprep.hag.builder import HagConfig, build, cache_path
from gnnprep.precompute import measured
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute


@pytest.fixture(scope="module")
def cliques(tmp_path_factory):
    """Overlapping 7-cliques over 300 nodes, 6 features, and its cached HAG beside it."""
    tmp = tmp_path_factory.mktemp("measured")
    clique_store(tmp, 2, 300, 120, 6)
    build(tmp / "g.h5", cache_path(tmp / "g.h5"), HagConfig())
    return tmp


@pytest.fixture
def graph(cliques, tmp_path):
    shutil.copy2(cliques / "g.h5", tmp_path / "g.h5")
    for name in ("g.hag.h5", *(p.name for p in cliques.glob("g.hag.order-*.h5"))):
        os.link(cliques / name, tmp_path / name)   # the HAG with the relabelled copy its build kept (the same inode)
    return tmp_path / "g.h5"


def config(**kw):
    return PrecomputeConfig(**{"hops": 2, "device": "cpu", "memory_budget": 256 << 20, **kw})


def memo(graph) -> dict:
    return json.loads(measured.memo_path(graph).read_text())


def test_runs_record_their_best_seconds_per_variant_and_setting(graph, tmp_path):
    plain = precompute(graph, tmp_path / "a.h5", config())
    precompute(graph, tmp_path / "b.h5", config())
    through = precompute(graph, tmp_path / "c.h5", config(hag=str(cache_path(graph))))
    (runs,) = memo(graph).values()
    variants = sorted(runs)
    assert variants[1] == "plain" and variants[0].startswith("hag:")
    assert runs["plain"]["runs"] == 2 and runs["plain"]["best"] <= plain.seconds + 1e-3
    assert len(runs["plain"]["recent"]) == 2
    hag = runs[variants[0]]
    assert hag["best"] == round(through.seconds, 4) and hag["runs"] == 1 and hag["recent"][0][1] == hag["best"]
    # measured side by side: the pair of their bests of the last half hour
    assert hag["pair"]["plain"] == runs["plain"]["best"] and hag["pair"]["hag"] == hag["best"]
    precompute(graph, tmp_path / "d.h5", config(hag="auto", hops=3))   # another setting: a second key
    assert len(memo(graph)) == 2


@pytest.mark.parametrize("faster", ["hag", "plain"])
def test_auto_runs_the_variant_measured_faster(graph, tmp_path, faster):
    precompute(graph, tmp_path / "a.h5", config())
    precompute(graph, tmp_path / "b.h5", config(hag=str(cache_path(graph))))
    data = memo(graph)
    (key, runs), = data.items()
    for variant in runs:
        runs[variant]["best"] = 1.0 if (variant == "plain") == (faster == "plain") else 9.0
        if "pair" in runs[variant]:
            runs[variant]["pair"].update(plain=1.0 if faster == "plain" else 9.0, hag=1.0 if faster == "hag" else 9.0)
    measured.memo_path(graph).write_text(json.dumps(data))
    r = precompute(graph, tmp_path / "auto.h5", config(hag="auto"))
    assert r.hag.used == (faster == "hag")
    assert r.hag.reason.startswith("measured with these settings")
    # the choice changes no value
    from fixtures import feature_hops

    for got, want in zip(feature_hops(tmp_path / "auto.h5", 2), feature_hops(tmp_path / "a.h5", 2)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_until_both_are_measured_the_model_decides(graph, tmp_path):
    precompute(graph, tmp_path / "a.h5", config())
    r = precompute(graph, tmp_path / "auto.h5", config(hag="auto"))
    assert not r.hag.reason.startswith("measured")


@pytest.mark.parametrize("damage", [b"not json", b"[1, 2]", b'{"k": {"plain": {"best": "fast"}}}', b"\xff\xfe"])
def test_a_damaged_record_is_ignored_and_written_again(graph, tmp_path, damage):
    measured.memo_path(graph).write_bytes(damage)
    r = precompute(graph, tmp_path / "auto.h5", config(hag="auto"))
    assert not r.hag.reason.startswith("measured")
    assert len(memo(graph)) >= 1   # valid JSON again, with this run's setting


def test_nothing_is_recorded_without_a_hag_in_sight(cliques, tmp_path):
    shutil.copy2(cliques / "g.h5", tmp_path / "g.h5")
    precompute(tmp_path / "g.h5", tmp_path / "a.h5", config())
    assert not measured.memo_path(tmp_path / "g.h5").exists()


def test_an_unwritable_folder_does_not_fail_the_run(graph, tmp_path, monkeypatch):
    real = measured.os.replace

    def refuse(src, dst, **k):   # (root writes into a read-only folder: refuse the record's rename)
        if "hag-runs" in str(dst):
            raise PermissionError(13, "Permission denied")
        return real(src, dst, **k)

    monkeypatch.setattr(measured.os, "replace", refuse)
    precompute(graph, tmp_path / "a.h5", config())
    assert not measured.memo_path(graph).exists() and not list(tmp_path.glob(".*tmp-*"))


def test_runs_made_side_by_side_decide_over_older_bests(tmp_path):
    """A machine's speed drifts: plain's best of an earlier, faster evening is not compared with a
    HAG measured today; today's runs of both are."""
    store, key, hag = tmp_path / "g.h5", "k", "hag:x"
    day = 86400.0
    measured.record(store, key, "plain", 0.84, now=day)          # yesterday, a fast machine
    measured.record(store, key, "plain", 1.30, now=2 * day)      # today, side by side with the HAG
    measured.record(store, key, hag, 1.19, now=2 * day + 60)
    use, why = measured.measured_choice(store, key, hag)
    assert use and "within 30 min of each other" in why and "1.19 s through the cached HAG against 1.30 s" in why
    measured.record(store, key, "plain", 1.10, now=2 * day + 120)   # auto's own plain run: in the pair
    use, why = measured.measured_choice(store, key, hag)
    assert not use and "against 1.10 s" in why
    for i in range(20):   # later plain runs alone keep the pair of the last time both ran
        measured.record(store, key, "plain", 2.0, now=5 * day + i)
    assert measured.measured_choice(store, key, hag)[1].endswith("1.19 s through the cached HAG against 1.10 s "
                                                                 "without (best runs within 30 min of each other, "
                                                                 "g.hag-runs.json)")


def test_variants_measured_hours_apart_are_compared_by_their_bests(tmp_path):
    store, key, hag = tmp_path / "g.h5", "k", "hag:x"
    measured.record(store, key, "plain", 2.0, now=0.0)
    measured.record(store, key, hag, 1.5, now=4 * 3600.0)
    use, why = measured.measured_choice(store, key, hag)
    assert use and why.endswith("(best runs, g.hag-runs.json)")
    assert "pair" not in json.loads(measured.memo_path(store).read_text())[key][hag]


@pytest.mark.parametrize("hag", ["auto", "given"])
def test_nothing_is_written_beside_a_store_without_a_cached_hag(cliques, tmp_path, hag):
    """``--hag auto`` on a store with no cached HAG (it finds none and searches none), or ``--hag``
    naming a HAG elsewhere: the store's folder gets no runs file (auto takes only the cached HAG's)."""
    folder = tmp_path / "store"
    folder.mkdir()
    shutil.copy2(cliques / "g.h5", folder / "g.h5")
    given = tmp_path / "h.h5"
    shutil.copy2(cliques / "g.hag.h5", given)
    before = sorted(p.name for p in folder.iterdir())
    precompute(folder / "g.h5", tmp_path / "a.h5", config(hag="auto" if hag == "auto" else str(given)))
    assert sorted(p.name for p in folder.iterdir()) == before


def test_runs_that_relabel_the_hag_are_another_variant(graph, tmp_path):
    """A run that relabels the HAG (no relabelled copy beside it) pays for that and may plan otherwise:
    its time is kept apart from runs that read the kept copy, and auto judges a HAG by the runs of its
    own state (a HAG copied beside a store without its copy was taken by the original's times)."""
    kept = sorted(graph.parent.glob("g.hag.order-*.h5"))
    assert kept   # the fixture's build kept the relabelled copy beside the HAG
    for p in kept:
        p.unlink()
    precompute(graph, tmp_path / "a.h5", config())
    precompute(graph, tmp_path / "b.h5", config(hag=str(cache_path(graph))))   # relabels it (and keeps the copy)
    precompute(graph, tmp_path / "c.h5", config(hag=str(cache_path(graph))))   # reads the kept copy
    (runs,) = memo(graph).values()
    hags = sorted(v for v in runs if v.startswith("hag:"))
    assert len(hags) == 2 and hags[1] == hags[0] + ",relabelled by the run"
    assert runs[hags[0]]["runs"] == runs[hags[1]]["runs"] == 1
    # the kept copy's runs measured slower than plain, the relabelling runs faster: with the copy
    # gone again, auto goes by the relabelling runs
    def set_bests():   # (their recent runs dropped: no pair measured side by side)
        data = memo(graph)
        (key, runs), = data.items()
        for v, s in ((hags[0], 9.0), (hags[1], 1.0), ("plain", 5.0)):
            runs[v] = {"best": s, "runs": 1}
        measured.memo_path(graph).write_text(json.dumps(data))

    set_bests()
    r = precompute(graph, tmp_path / "auto.h5", config(hag="auto"))   # the copy is kept: its runs decide
    assert not r.hag.used and "9.00 s through the cached HAG" in r.hag.reason
    for p in graph.parent.glob("g.hag.order-*.h5"):
        p.unlink()
    set_bests()
    r = precompute(graph, tmp_path / "auto2.h5", config(hag="auto"))
    assert r.hag.used and "1.00 s through the cached HAG" in r.hag.reason
