"""Faults a careful or hostile user meets in ``gnnprep precompute`` (issue 12): an output that is an
input, corrupt graph stores, artifacts from a newer gnnprep, values that overflow the output dtype,
a full disk, a re-ingested store under a partial output, a late SIGTERM. Each case: exit 1 (2 for
usage), one ``Error:`` line naming what is wrong, no traceback, no file left behind, inputs intact."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import interrupted_precompute, make_store, run

from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import SourceOptions
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.run import precompute


def _store(t: Path, **kw) -> Path:
    (t / "in").mkdir(exist_ok=True)
    g, *_ = make_store(t / "in", np.random.default_rng(3), **kw)
    return g


def _edit(g: Path, fn) -> Path:
    with h5py.File(g, "r+") as f:
        fn(f)
    return g


def _replace(f, name, data):
    del f[name]
    f.create_dataset(name, data=data)


def _hub_store(t: Path, value: float) -> Path:
    """A star (node 0 with 40 leaves) whose features all equal ``value``."""
    (t / "in").mkdir(exist_ok=True)
    n = 41
    np.save(t / "in" / "e.npy", np.stack([np.arange(1, n), np.zeros(n - 1, dtype=np.int64)]))
    np.save(t / "in" / "x.npy", np.full((n, 3), value, dtype=np.float32))
    g = t / "in" / "hub.h5"
    ingest(str(t / "in" / "e.npy"), g, IngestConfig(source=SourceOptions(num_nodes=n, features=str(t / "in" / "x.npy"))))
    return g


def _with_hag(t: Path) -> tuple[Path, Path]:
    g = _store(t)
    h = t / "in" / "g.hag.h5"
    assert run(["hag", g, "-o", h, "--capacity", "all"]).exit_code == 0
    return g, h


def _with_hdg(t: Path) -> tuple[Path, Path]:
    g = _store(t)
    h = t / "in" / "h.h5"
    assert run(["hdg", g, "--select", "hop-shells:2", "-o", h]).exit_code == 0
    return g, h


def _junk(t: Path) -> Path:
    (t / "in").mkdir()
    (t / "in" / "x.h5").write_bytes(b"junk" * 10)
    return t / "in" / "x.h5"


def _newer(path: Path, version) -> Path:
    return _edit(path, lambda f: f.attrs.__setitem__("format_version", version))


def _other_graph_hag(t: Path):
    g = _store(t)
    other = t / "in" / "other"
    other.mkdir()
    g2 = _store(other, n=50, name="g2.h5")
    h = t / "in" / "g2.hag.h5"
    assert run(["hag", g2, "-o", h]).exit_code == 0
    return [g, "--hag", h]


OUT = "{out}"
# id: (setup(tmp) -> args before -o, output (OUT: a fresh path in out/), exit code, stderr regex)
CASES = {
    "out_is_the_store": (lambda t: [_store(t)], "in/g.h5", 1, r"g\.h5: is also an input"),
    "out_symlinks_to_the_store": (lambda t: [_store(t)], "link", 1, r"is also an input"),
    "out_hardlinks_to_the_store": (lambda t: [_store(t)], "hardlink", 1, r"is also an input"),
    "out_is_the_hag": (lambda t: [(gh := _with_hag(t))[0], "--hag", gh[1]], "in/g.hag.h5", 1, r"is also an input"),
    "out_is_the_auto_hag_cache": (lambda t: [_store(t), "--hag", "auto"], "in/g.hag.h5", 1, r"is also an input"),
    "out_is_the_hdg": (lambda t: [(gh := _with_hdg(t))[0], "--hdg", gh[1]], "in/h.h5", 1, r"is also an input"),
    "out_is_a_folder": (lambda t: [_store(t)], "in", 2, r"Invalid value for '-o' / '--output': .* is a directory"),
    "out_folder_missing": (lambda t: [_store(t)], "nowhere/f.h5", 1, r"output folder .* does not exist"),
    "store_missing": (lambda t: [t / "in" / "nope.h5"], OUT, 1, r"nope\.h5"),
    "store_not_hdf5": (lambda t: [_junk(t)], OUT, 1, r"x\.h5: (not an HDF5 file|unknown input type)"),
    "indices_out_of_range": (lambda t: [_edit(_store(t), lambda f: f["adj/indices"].__setitem__(5, 10**6))],
                             OUT, 1, r"/adj/indices\[5\] = 1000000: expected a node id in \[0, 90\)"),
    "indices_negative": (lambda t: [_edit(_store(t), lambda f: f["adj/indices"].__setitem__(0, -7))],
                         OUT, 1, r"/adj/indices\[0\] = -7"),
    "indptr_decreasing": (lambda t: [_edit(_store(t), lambda f: f["adj/indptr"].__setitem__(3, 10**4))],
                          OUT, 1, r"/adj/indptr decreases at row"),
    "indptr_wrong_end": (lambda t: [_edit(_store(t), lambda f: f["adj/indptr"].__setitem__(-1, 3))],
                         OUT, 1, r"/adj/indptr runs from 0 to 3"),
    "indptr_short": (lambda t: [_edit(_store(t), lambda f: _replace(f, "adj/indptr", f["adj/indptr"][:-5]))],
                     OUT, 1, r"/adj/indptr and /adj/indices have shapes"),
    "num_nodes_a_string": (lambda t: [_edit(_store(t), lambda f: f.attrs.__setitem__("num_nodes", "ninety"))],
                           OUT, 1, r"root attribute 'num_nodes' is 'ninety'; expected a count"),
    "features_short": (lambda t: [_edit(_store(t), lambda f: _replace(f, "nodes/features", f["nodes/features"][:-1]))],
                       OUT, 1, r"/nodes/features is float32 of shape \(89, 7\); expected floats of shape \[90, d\]"),
    "features_integers": (lambda t: [_edit(_store(t), lambda f: _replace(f, "nodes/features", np.ones((90, 7), np.int64)))],
                          OUT, 1, r"/nodes/features is int64"),
    "features_nan": (lambda t: [_edit(_store(t), lambda f: f["nodes/features"].__setitem__((4, 2), np.nan))],
                     OUT, 1, r"/nodes/features has non-finite values in rows"),
    "labels_short": (lambda t: [_edit(_store(t), lambda f: _replace(f, "nodes/labels", np.zeros(10, np.int64)))],
                     OUT, 1, r"/nodes/labels is int64 of shape \(10,\)"),
    "split_id_out_of_range": (lambda t: [_edit(_store(t), lambda f: f["splits/train"].__setitem__(0, 999))],
                              OUT, 1, r"/splits/train\[0\] = 999: expected a node id in \[0, 90\)"),
    "store_format_newer": (lambda t: [_newer(_store(t), 99)], OUT, 1, r"format_version 99 is newer than this gnnprep"),
    "store_format_a_string": (lambda t: [_newer(_store(t), "one")], OUT, 1, r"'format_version' is 'one'; expected a positive"),
    "store_is_a_hag": (lambda t: [_with_hag(t)[1]], OUT, 1, r"is a gnnprep\.hag artifact; expected gnnprep\.graph"),
    "hag_format_newer": (lambda t: [(gh := _with_hag(t))[0], "--hag", _newer(gh[1], 7)], OUT, 1, r"format_version 7 is newer"),
    "hag_for_another_graph": (_other_graph_hag, OUT, 1, r"graph_fingerprint does not match"),
    "hdg_format_newer": (lambda t: [(gh := _with_hdg(t))[0], "--hdg", _newer(gh[1], 3)], OUT, 1, r"format_version 3 is newer"),
    "hdg_with_labeled_rows": (lambda t: [(gh := _with_hdg(t))[0], "--hdg", gh[1], "--rows", "labeled"],
                              OUT, 2, r"'--hdg': needs --rows all"),   # a conflict of options: before any work
    "labeled_rows_without_splits": (lambda t: [_store(t, splits=False), "--rows", "labeled"], OUT, 1,
                                    r"--rows labeled needs splits"),
    "float16_overflow": (lambda t: [_edit(_store(t), lambda f: f["nodes/features"].__setitem__((7, 3), 1e6)), "--dtype",
                                    "float16"], OUT, 1, r"hop 0: row 7, column 3 is inf in float16 \(the value overflowed"),
    "float32_overflow_sym_noloop": (lambda t: [_hub_store(t, 3e38), "--operator", "sym-noloop"], OUT, 1,
                                    r"hop 1 of sym-noloop: row 0, column 0 is inf in float32 \(the value overflowed"),
    "float16_overflow_of_x": (lambda t: [_hub_store(t, 1e5), "--dtype", "float16"], OUT, 1,
                              r"hop 0: row 0, column 0 is inf in float16"),
    "budget_too_small": (lambda t: [_store(t), "--memory-budget", "1KiB"], OUT, 1, r"--memory-budget .* too small"),
    "hag_on_a_weighted_store": (lambda t: [_edit((gh := _with_hag(t))[0],
                                                 lambda f: f.create_dataset("adj/weights", data=np.ones(len(f["adj/indices"]), np.float32))),
                                           "--hag", gh[1]], OUT, 1, r"weighted"),
    "weights_negative": (lambda t: [_edit(_store(t), lambda f: f.create_dataset(
        "adj/weights", data=-np.ones(len(f["adj/indices"]), np.float32)))], OUT, 1, r"/adj/weights\[0\] = -1\.0"),
}


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else
                                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_1_with_one_line_and_leaves_nothing(tmp_path, case):
    setup, out, code, pattern = CASES[case]
    args = setup(tmp_path)
    (tmp_path / "out").mkdir()
    if out == OUT:
        out = tmp_path / "out" / "f.h5"
    elif out == "link":
        out = tmp_path / "out" / "link.h5"
        out.symlink_to(args[0])
    elif out == "hardlink":
        out = tmp_path / "out" / "hard.h5"
        os.link(args[0], out)
    else:
        out = tmp_path / out
    before = _snapshot(tmp_path)
    r = run(["precompute", *args, "-o", out, "--hops", "2", "--device", "cpu"])
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    if pattern:
        assert re.search(pattern, lines[0]), lines[0]
    assert _snapshot(tmp_path) == before  # inputs byte-identical, nothing left behind


def test_table_is_large():
    assert len(CASES) >= 30


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_disk_full_says_so_and_leaves_no_partial(tmp_path, monkeypatch):
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "3m"):
        pytest.skip("needs root and a mountable tmpfs to fill a disk")
    try:
        n = 20_000
        (tmp_path / "in").mkdir()
        rng = np.random.default_rng(0)
        np.save(tmp_path / "in" / "e.npy", rng.integers(0, n, (2, 60_000)))
        np.save(tmp_path / "in" / "x.npy", rng.standard_normal((n, 16)).astype(np.float32))
        g = tmp_path / "in" / "g.h5"
        ingest(str(tmp_path / "in" / "e.npy"), g,
               IngestConfig(source=SourceOptions(num_nodes=n, features=str(tmp_path / "in" / "x.npy"))))
        # known up front: 4 hops x 20,000 x 16 x 4 B = 5 MB do not fit 3 MiB
        r = run(["precompute", g, "-o", small / "f.h5", "--hops", "3", "--device", "cpu"])
        assert r.exit_code == 1 and "Traceback" not in r.stderr
        assert re.fullmatch(r"Error: .*f\.h5: no space left on device \(needed ~[\d.]+ MiB, free [\d.]+ [KM]iB\)",
                            r.stderr.strip()), r.stderr
        assert list(small.iterdir()) == []
        # found while writing (as when another process fills the disk meanwhile)
        import gnnprep.core.output as output

        monkeypatch.setattr(output, "check_free_space", lambda path, needed: None)
        with pytest.raises(Exception) as e:
            precompute(g, small / "f.h5", PrecomputeConfig(hops=3, device="cpu"))
        assert type(e.value).__name__ == "GnnprepError" and "no space left on device" in str(e.value)
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)  # lazy: even if a handle is open


def test_reingested_features_never_mix_with_a_partial_output(tmp_path, monkeypatch):
    # finding 2: interrupted, the store re-ingested with the same graph and new X, rerun: every hop
    # must come from the new X (the old partial output is not resumed)
    rng = np.random.default_rng(5)
    g, src, dst, x = make_store(tmp_path, rng, d=6)
    out = tmp_path / "f.h5"
    interrupted_precompute(monkeypatch, g, out, hops=2, device="cpu", blocks=(1, 1, 3))
    x2 = (x * 2 + 1).astype(np.float32)
    np.save(tmp_path / "x.npy", x2)
    g2 = tmp_path / "g2.h5"
    ingest(str(tmp_path / "e.npy"), g2, IngestConfig(source=SourceOptions(
        num_nodes=90, features=str(tmp_path / "x.npy"), labels=str(tmp_path / "y.npy"), splits=str(tmp_path / "splits"))))
    os.replace(g2, g)
    report = precompute(g, out, PrecomputeConfig(hops=2, device="cpu", blocks=(1, 1, 3)))
    assert report.resumed_units == 0
    fresh = tmp_path / "fresh.h5"
    precompute(g, fresh, PrecomputeConfig(hops=2, device="cpu", blocks=(1, 1, 3)))
    with FeatureStore(out) as a, FeatureStore(fresh) as b:
        np.testing.assert_array_equal(a.hop(0)[:], x2)
        for k in range(3):
            assert a.hop(k)[:].tobytes() == b.hop(k)[:].tobytes(), k


LATE_SIGTERM = r"""
import os, signal, sys
import gnnprep.cli as c
original = c.cli.main
def late(*a, **k):
    try:
        original(*a, **k)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives as the finished command exits
c.cli.main = late
sys.argv = ["gnnprep", "precompute", sys.argv[1], "-o", sys.argv[2], "--hops", "1", "--device", "cpu", "--quiet"]
c.main()
"""


def test_sigterm_as_the_command_finishes_exits_130_not_by_the_signal(tmp_path):
    g = _store(tmp_path)
    out = tmp_path / "f.h5"
    p = subprocess.run([sys.executable, "-c", LATE_SIGTERM, str(g), str(out)], capture_output=True, text=True)
    assert p.returncode == 130, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.strip().splitlines()[-1].startswith("Error: interrupted")
    assert out.exists() and json.loads(FeatureStore(out).f.attrs["plan"])  # it had finished: complete output


def _fill(folder: Path) -> None:
    """Fill the file system of ``folder`` up to the last byte."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for size in (64 << 10, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def test_every_writer_says_disk_full_in_one_line(tmp_path):
    # finding 5 for the other writers: hag, hdg, and train's run folder on a full disk
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "1m"):
        pytest.skip("needs root and a mountable tmpfs to fill a disk")
    try:
        g = _store(tmp_path)
        feats = tmp_path / "f.h5"  # the sample has train and valid splits
        assert run(["precompute", "sample", "--cache-dir", tmp_path, "-o", feats, "--hops", "1"]).exit_code == 0
        _fill(small)
        for args in (["hag", g, "-o", small / "h.h5"], ["hdg", g, "--select", "hop-shells:2", "-o", small / "d.h5"],
                     ["train", "sgc", feats, "-o", small / "run", "--epochs", "2"]):
            r = run(args)
            assert r.exit_code == 1, (args, r.stdout, r.stderr)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and "no space left on device" in lines[0] and "Traceback" not in r.stderr, r.stderr
            assert sorted(p.name for p in small.iterdir()) == ["filler"], args
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)  # lazy: even if a handle is open
