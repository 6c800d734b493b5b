"""Issue 23 item 7: the ``format`` root attribute (and ``format_version``) of any artifact stored as
an array, a number, a compound, an empty attribute, bytes that are not UTF-8 or a 100,000-character
string is one ``Error:`` line naming the file and the attribute, for ``info`` and for the command
that reads the artifact: exit 1, no traceback, empty stdout, nothing written, inputs intact."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import make_store, run

FORMATS = r"expected one of gnnprep\.graph, gnnprep\.hag, gnnprep\.hdg, gnnprep\.features \(not a gnnprep artifact\)"


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One artifact of each kind: g.h5 (graph), hag.h5, hdg.h5, f.h5 (features)."""
    from gnnprep import hag as hags
    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import parse_select, select, select_spec
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    root = tmp_path_factory.mktemp("format_attr")
    (root / "src").mkdir()
    store, *_ = make_store(root / "src", np.random.default_rng(5), n=60, m=240, d=4)
    shutil.copy2(store, root / "g.h5")
    with GraphStore(root / "g.h5") as g:
        indptr, indices, fp = g.indptr(), g.indices(), g.fingerprint
    hags.build(root / "g.h5", root / "hag.h5", hags.HagConfig(capacity=10))
    sel = parse_select("hop-shells:2")
    write_hdg(select(indptr, indices, sel, seed=1), root / "hdg.h5", {"command": "test"}, sel.name, select_spec(sel),
              1, fp, 0, 0)
    precompute(root / "g.h5", root / "f.h5", PrecomputeConfig(hops=1, device="cpu"))
    return root


def _compound():
    return np.array((1, 2.0), dtype=[("a", "i4"), ("b", "f8")])[()]


# what the attribute is set to, and how the Error line describes it
VALUES = {
    "array-of-strings": (lambda: np.array([b"gnnprep.graph", b"gnnprep.hag"]), r"an array of shape \(2,\) \(\|S13\)"),
    "array-of-one": (lambda: np.array([b"gnnprep.graph"]), r"an array of shape \(1,\) \(\|S13\)"),
    "array-of-ints": (lambda: np.arange(3), r"an array of shape \(3,\) \(int64\)"),
    "2d-array": (lambda: np.zeros((2, 2)), r"an array of shape \(2, 2\) \(float64\)"),
    "an-int": (lambda: 5, r"np\.int64\(5\)"),
    "a-float": (lambda: 1.5, r"np\.float64\(1\.5\)"),
    "a-bool": (lambda: True, r"np\.True_"),
    "empty": (lambda: h5py.Empty("S1"), r"Empty\(dtype=dtype\('S1'\)\)"),
    "compound": (_compound, r"np\.void\(\(1, 2\.0\), dtype=.*\)"),
    "opaque-bytes": (lambda: np.void(b"\xff\xfe"), r"np\.void\(b'\\xFF\\xFE'\)"),
    "bytes-not-utf8": (lambda: np.bytes_(b"\xff\xfegnnprep.graph"), r"'\\\\xff\\\\xfegnnprep\.graph'"),
    "100k-characters": (lambda: "g" * 100_000, r"'g{56}\.\.\."),
}


def set_attr(path: Path, name: str, value) -> None:
    with h5py.File(path, "r+") as f:
        if name in f.attrs:
            del f.attrs[name]
        f.attrs[name] = value


def reference(path: Path) -> None:
    with h5py.File(path, "r+") as f:
        del f.attrs["format"]
        f.attrs["format"] = f.ref   # an object reference


# commands that read an artifact: (artifact name, args given the folder)
def info(name):
    return name, lambda t: ["info", t / name]


READERS = {
    "info-graph": info("g.h5"),
    "info-hag": info("hag.h5"),
    "info-hdg": info("hdg.h5"),
    "info-features": info("f.h5"),
    "precompute-graph": ("g.h5", lambda t: ["precompute", t / "g.h5", "-o", t / "out.h5", "--hops", "1", "--device", "cpu"]),
    "precompute-hag": ("hag.h5", lambda t: ["precompute", t / "g.h5", "--hag", t / "hag.h5", "-o", t / "out.h5",
                                            "--hops", "1", "--device", "cpu"]),
    "precompute-hdg": ("hdg.h5", lambda t: ["precompute", t / "g.h5", "--hdg", t / "hdg.h5", "-o", t / "out.h5",
                                            "--hops", "1", "--device", "cpu"]),
    "train-features": ("f.h5", lambda t: ["train", "sgc", t / "f.h5", "-o", t / "run", "--epochs", "1"]),
    "hag-graph": ("g.h5", lambda t: ["hag", t / "g.h5", "-o", t / "out.h5"]),
    "hdg-graph": ("g.h5", lambda t: ["hdg", t / "g.h5", "--select", "hop-shells:1", "-o", t / "out.h5"]),
}

CASES = (
    # every odd value through ``info`` of a graph store
    [(f"format-{v}-info-graph", "format", v, "info-graph") for v in VALUES]
    # the array (the reported crash) and the one-element array through every reader
    + [(f"format-{v}-{r}", "format", v, r) for v in ("array-of-strings", "array-of-one") for r in READERS
       if r != "info-graph"]
    + [("format-reference-info-graph", "format", "reference", "info-graph")]
    # format_version of odd types
    + [(f"format_version-{v}-{r}", "format_version", v, r) for v in ("array-of-one", "a-float", "empty", "a-bool")
       for r in ("info-hag", "precompute-graph")]
)


@pytest.mark.parametrize("attr,value,reader", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_odd_format_attribute_is_one_error(base, tmp_path, attr, value, reader):
    for name in ("g.h5", "hag.h5", "hdg.h5", "f.h5"):
        shutil.copy2(base / name, tmp_path / name)
    target, args = READERS[reader]
    if value == "reference":
        reference(tmp_path / target)
        says = r"<HDF5 object reference>"
    elif attr == "format":
        set_attr(tmp_path / target, attr, VALUES[value][0]())
        says = VALUES[value][1]
    else:
        make = {"array-of-one": lambda: np.array([1]), "a-float": lambda: 1.0, "empty": lambda: h5py.Empty("i8"),
                "a-bool": lambda: True}[value]
        set_attr(tmp_path / target, attr, make())
        says = {"array-of-one": r"an array of shape \(1,\) \(int64\)", "a-float": r"np\.float64\(1\.0\)",
                "empty": r"Empty\(dtype=dtype\('int64'\)\)", "a-bool": r"np\.True_"}[value]
    before = snapshot(tmp_path)
    r = run(args(tmp_path))
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    expected = FORMATS if attr == "format" else r"expected a positive integer"
    assert re.fullmatch(rf"Error: {re.escape(str(tmp_path / target))}: root attribute '{attr}' is {says}; {expected}",
                        lines[0]), lines[0]
    assert len(lines[0]) < 400
    assert snapshot(tmp_path) == before
