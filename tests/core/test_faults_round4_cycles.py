"""HDF5 hard-link cycles (issue 32, item 9): a group hard linked into itself, into its own subgroup,
two groups into each other, the root into a subgroup. Every artifact kind, through ``gnnprep info``,
the commands that read it and ``gnnprep.open``: refused within a second with one line naming the
link, no traceback, nothing written, the input intact (these never returned before). A deep chain
of groups each linked twice into the next (2^depth paths, no cycle) is walked once per group."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import make_artifacts, make_store, run

import gnnprep
from gnnprep.core.errors import GnnprepError


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    t = tmp_path_factory.mktemp("cycles")
    store, *_ = make_store(t, np.random.default_rng(2), n=30, m=80, d=4)
    return make_artifacts(t, store)


@pytest.fixture(autouse=True)
def deadline():
    """A hang fails the case after 30 s instead of stalling the suite."""
    def expire(*_):
        raise TimeoutError("no answer within 30 s (a cycle walked for ever?)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _group(f: h5py.File) -> str:
    """The first top-level group of the artifact (its data lives under it)."""
    return sorted(n for n in f if isinstance(f[n], h5py.Group))[0]


def _self(f):
    g = _group(f)
    f[f"{g}/loop"] = f[g]
    return f"/{g}/loop", f"/{g}"


def _child(f):
    g = _group(f)
    f.create_group(f"{g}/inner")
    f[f"{g}/inner/up"] = f[g]
    return f"/{g}/inner/up", f"/{g}"


def _siblings(f):
    f.create_group("a")
    f.create_group("b")
    f["a/b"] = f["b"]
    f["b/a"] = f["a"]
    return "/a/b/a", "/a"


def _root(f):
    g = _group(f)
    f[f"{g}/root"] = f["/"]
    return f"/{g}/root", "/"


TRICKS = {"self": _self, "child": _child, "siblings": _siblings, "root": _root}


def _uses(kind, made, out):
    store = str(made["graph"])
    o = ["-o", str(out / "x.h5")]
    return {
        "graph": [["precompute", store, "--hops", "1", "--device", "cpu", *o]],
        "features": [["train", "sgc", str(made["features"]), "-o", str(out / "run"), "--epochs", "1",
                      "--device", "cpu"]],
        "hag": [["precompute", store, "--hops", "1", "--device", "cpu", "--hag", str(made["hag"]), *o]],
        "hdg": [["precompute", store, "--hops", "1", "--device", "cpu", "--hdg", str(made["hdg"]), *o]],
    }[kind]


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("trick", sorted(TRICKS))
@pytest.mark.parametrize("kind", ["graph", "features", "hag", "hdg"])
def test_a_hard_link_cycle_is_refused_at_once(tmp_path, artifacts, kind, trick):
    made = {k: tmp_path / p.name for k, p in artifacts.items()}
    for k, p in artifacts.items():
        shutil.copy(p, made[k])
    path = made[kind]
    with h5py.File(path, "a") as f:
        link, target = TRICKS[trick](f)
    expected = f"{path}: {link} is a hard link to the group {target} that holds it (a cycle)"
    before = _digest(path)
    out = tmp_path / "out"
    out.mkdir()
    for args in [["info", str(path)]] + _uses(kind, made, out):
        t0 = time.monotonic()
        r = run(args)
        assert time.monotonic() - t0 < 5, args
        assert r.exit_code == 1, (args, r.stdout, r.stderr)
        assert r.stdout == "" and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len([ln for ln in lines if ln.startswith("Error:")]) == 1, r.stderr
        assert lines[-1].startswith(f"Error: {expected}"), (args, r.stderr)
        assert list(out.iterdir()) == [], args
    t0 = time.monotonic()
    with pytest.raises(GnnprepError) as e:
        gnnprep.open(path)
    assert time.monotonic() - t0 < 1
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)
    assert _digest(path) == before


def test_a_deep_chain_of_shared_groups_is_walked_once_per_group(tmp_path, artifacts):
    """No cycle, 2^40 paths: the file opens at once (each group checked once), ``info`` reads it."""
    path = tmp_path / "g.h5"
    shutil.copy(artifacts["graph"], path)
    want = run(["info", str(path), "--json"]).stdout
    with h5py.File(path, "a") as f:
        groups = [f.create_group(f"chain/{i}") for i in range(41)]
        for a, b in zip(groups, groups[1:]):
            a["left"] = b
            a["right"] = b
    t0 = time.monotonic()
    with gnnprep.open(path) as g:
        assert g.num_nodes == 30
    assert time.monotonic() - t0 < 1
    r = run(["info", str(path), "--json"])
    assert r.exit_code == 0
    same = ("num_nodes", "num_edges", "splits", "format", "format_version")
    assert {k: json.loads(r.stdout).get(k) for k in same} == {k: json.loads(want).get(k) for k in same}
