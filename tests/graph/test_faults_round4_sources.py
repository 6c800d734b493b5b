"""Issue 32 (round 4), lines 7, 10 (declared node counts), 11 (zip and gzip bombs) and 15 (graph
stores, text digits, zero-byte arrays, gzip by magic bytes), as table cases.

A CLI case runs ``gnnprep ingest`` (or ``info``) and must exit 1 with exactly one ``Error:`` line
matching its pattern, no traceback, nothing on stdout, and every file under tmp_path byte-identical
(no output, no ``.work-``/``.tmp-`` file, inputs intact), within 10 s. Bombs run in a subprocess
whose peak RSS (``RUSAGE_CHILDREN`` of a fresh parent) must stay within the memory budget above the
interpreter's own peak on an input refused at once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
import zlib

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import assert_one_error, make_store, run

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.store import GraphStore

P = "%%MatrixMarket matrix coordinate pattern general\n"
HUGE = 3_000_000_000


def _in(t):
    d = t / "in"
    d.mkdir(exist_ok=True)
    return d


def mtx(t, body, name="m.mtx"):
    p = _in(t) / name
    p.write_text(P + body, encoding="utf-8")
    return p


def coo_npz(t, n, name="a.npz", folder=None):
    p = (folder or _in(t)) / name
    np.savez(p, format=np.array(b"coo"), shape=np.array([n, n]), row=np.array([0]), col=np.array([1]),
             data=np.ones(1))
    return p


def saint(t, feats="ok", class_map='{"0": 0, "1": 1, "2": 0}', role='{"tr": [0], "va": [1], "te": [2]}', n=None):
    d = _in(t) / "saint"
    d.mkdir()
    if n is None:
        sp.save_npz(d / "adj_full.npz", sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])))
    else:
        coo_npz(t, n, "adj_full.npz", d)
    f = d / "feats.npy"
    if feats == "ok":
        np.save(f, np.ones((3, 2)))
    elif feats == "fifo":
        os.mkfifo(f)
    elif feats == "dir":
        f.mkdir()
    elif feats == "devzero":
        f.symlink_to("/dev/zero")
    elif feats == "dangling":
        f.symlink_to(d / "nowhere.npy")
    elif feats == "empty":
        f.write_bytes(b"")
    if class_map == "fifo":
        os.mkfifo(d / "class_map.json")
    elif class_map is not None:
        (d / "class_map.json").write_text(class_map, encoding="utf-8")
    if role == "dir":
        (d / "role.json").mkdir()
    elif role is not None:
        (d / "role.json").write_text(role, encoding="utf-8")
    return d


def text_edges(t, body="0 1\n1 2\n", name="e.txt"):
    p = _in(t) / name
    p.write_text(body)
    return p


def gz_edges(t, body: bytes, name="e.txt.gz"):
    p = _in(t) / name
    p.write_bytes(gzip.compress(body, compresslevel=1, mtime=0))
    return p


def npy_empty(t):
    text_edges(t)
    (_in(t) / "x.npy").write_bytes(b"")
    return [_in(t) / "e.txt", "--features", _in(t) / "x.npy"]


def split_empty(t):
    text_edges(t)
    (_in(t) / "splits").mkdir()
    (_in(t) / "splits" / "train.npy").write_bytes(b"")
    return [_in(t) / "e.txt", "--splits", _in(t) / "splits"]


SAINT = r"in/saint/"
CASES = {
    # 7: a GraphSAINT feats.npy (or JSON file) that is there but is not a readable regular file
    "saint_feats_fifo": (lambda t: [saint(t, feats="fifo")], SAINT + r"feats\.npy: not a regular file"),
    "saint_feats_dir": (lambda t: [saint(t, feats="dir")], SAINT + r"feats\.npy: not a regular file"),
    "saint_feats_dev_zero": (lambda t: [saint(t, feats="devzero")], SAINT + r"feats\.npy: not a regular file"),
    "saint_feats_dangling_link": (lambda t: [saint(t, feats="dangling")], SAINT + r"feats\.npy: no such file"),
    "saint_feats_zero_bytes": (lambda t: [saint(t, feats="empty")], SAINT + r"feats\.npy: empty file \(0 bytes\)"),
    "saint_class_map_fifo": (lambda t: [saint(t, class_map="fifo")], SAINT + r"class_map\.json: not a regular file"),
    "saint_role_dir": (lambda t: [saint(t, role="dir")], SAINT + r"role\.json: not a regular file"),
    # 15: digits are ASCII digits
    "saint_class_key_superscript": (lambda t: [saint(t, class_map='{"0": 0, "\u00b2": 1}')],
                                    SAINT + r"class_map\.json: key '\u00b2' is not a node id"),
    "saint_class_key_fullwidth": (lambda t: [saint(t, class_map='{"\uff11": 0}')],
                                  SAINT + r"class_map\.json: key '\uff11' is not a node id"),
    "mtx_size_fullwidth": (lambda t: [mtx(t, "\uff13 \uff13 1\n1 2\n")],
                           r"m\.mtx line 2: expected the size line 'rows cols nnz'"),
    "mtx_size_superscript": (lambda t: [mtx(t, "3 3 \u00b9\n1 2\n")],
                             r"m\.mtx line 2: expected the size line 'rows cols nnz'"),
    "mtx_size_5000_digits": (lambda t: [mtx(t, "9" * 5000 + " 3 1\n1 2\n")],
                             r"m\.mtx line 2: expected the size line 'rows cols nnz'"),
    "mtx_entry_fullwidth": (lambda t: [mtx(t, "3 3 1\n\uff11 2\n")], r"m\.mtx line 3: '\uff11' is not an integer"),
    "edge_list_superscript": (lambda t: [text_edges(t, "0 1\n1 \u00b2\n")], r"e\.txt line 2: '\u00b2' is not an integer"),
    "features_npy_zero_bytes": (npy_empty, r"x\.npy: empty file \(0 bytes\); --features must be a \.npy array"),
    "split_npy_zero_bytes": (split_empty, r"splits/train\.npy: empty file \(0 bytes\)"),
    # 10: a node count declared far beyond the entries and the budget
    "mtx_declares_3e9_nodes": (lambda t: [mtx(t, f"{HUGE} {HUGE} 1\n1 2\n"), "--memory-budget", "64MiB"],
                               r"the size line of .*m\.mtx \(line 2\) declares 3,000,000,000 nodes for 1 entry "
                               r".*22\.4 GiB .*the memory budget 64\.0 MiB"),
    "npz_declares_3e9_nodes": (lambda t: [coo_npz(t, HUGE), "--memory-budget", "64MiB"],
                               r"member 'shape' of .*a\.npz declares 3,000,000,000 nodes .*memory budget 64\.0 MiB"),
    "saint_declares_3e9_nodes": (lambda t: [saint(t, feats=None, n=HUGE), "--memory-budget", "64MiB"],
                                 r"member 'shape' of .*adj_full\.npz declares 3,000,000,000 nodes"),
    "num_nodes_option_3e9": (lambda t: [text_edges(t), "--num-nodes", str(HUGE), "--memory-budget", "64MiB"],
                             r"--num-nodes declares 3,000,000,000 nodes for 2 entries"),
    # 11: a line too long to hold (read across blocks)
    "edge_list_endless_line": (lambda t: [gz_edges(t, b"0 1\n1 " + b" " * (40 << 20) + b"2\n")],
                               r"e\.txt\.gz line 2: a line longer than 1 MiB"),
    "mtx_header_endless": (lambda t: [mtx(t, "%" + "x" * (2 << 20))],  # header ok, the comment is skipped
                           r"m\.mtx line 3: end of file; expected the size line"),
}


def snapshot(root):
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink()
                                       else os.readlink(p) if p.is_symlink() else "special")
            for p in sorted(root.rglob("*"))}


def _check_cli(tmp_path, args, pattern, command="ingest", code=1):
    (tmp_path / "out").mkdir(exist_ok=True)
    if command == "ingest":
        args = [*args, "-o", tmp_path / "out" / "g.h5"]
    before = snapshot(tmp_path)
    t0 = time.perf_counter()
    r = run([command, *args])
    seconds = time.perf_counter() - t0
    assert_one_error(r, code, pattern)
    assert snapshot(tmp_path) == before, "no output, temporary or work file may appear; inputs stay as they were"
    assert seconds < 10, seconds


@pytest.mark.parametrize("case", list(CASES))
def test_fault(tmp_path, case):
    setup, pattern = CASES[case]
    _check_cli(tmp_path, setup(tmp_path), pattern)


@pytest.mark.parametrize("name,data", [
    ("gz.mtx", gzip.compress((P + "3 3 2\n1 2\n2 3\n").encode(), mtime=0)),   # gzip named .mtx
    ("plain.mtx.gz", (P + "3 3 2\n1 2\n2 3\n").encode()),                      # plain text named .mtx.gz
], ids=["gzip_named_mtx", "plain_named_mtx_gz"])
def test_gzip_is_told_by_its_magic_bytes_not_its_name(tmp_path, name, data):
    from fixtures import store_csr

    p = _in(tmp_path) / name
    p.write_bytes(data)
    r = run(["ingest", p, "-o", tmp_path / "g.h5", "--quiet"])
    assert r.exit_code == 0, r.stderr
    a = store_csr(tmp_path / "g.h5").toarray()
    np.testing.assert_array_equal(a, np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]]))


def test_a_class_map_is_held_by_its_entries_not_the_node_count(tmp_path):
    """The labels of a GraphSAINT map are kept sparse: nodes absent from the map are unknown (-1)."""
    d = saint(tmp_path, class_map='{"2": 1, "0": 0}')
    r = run(["ingest", d, "-o", tmp_path / "g.h5", "--quiet"])
    assert r.exit_code == 0, r.stderr
    with h5py.File(tmp_path / "g.h5") as f:
        np.testing.assert_array_equal(f["nodes/labels"][:], [0, -1, 1])


def test_an_interrupt_leaves_nothing(tmp_path):
    """10: a large declared node count still allowed (2**25, the floor) is interrupted mid-way: nothing is
    left but what a rerun resumes from (once /adj is written), which the error line names."""
    p = mtx(tmp_path, f"{1 << 25} {1 << 25} 1\n1 2\n")
    (tmp_path / "out").mkdir()
    before = snapshot(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gnnprep", "ingest", str(p), "-o", str(tmp_path / "out" / "g.h5"),
                             "--memory-budget", "64MiB", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    after = snapshot(tmp_path)
    if proc.returncode == 0:   # finished before the signal (a fast machine): the output is whole
        assert set(after) - set(before) == {"out/g.h5"}
        return
    assert proc.returncode == 130 and err.decode().startswith("Error:"), (proc.returncode, err)
    if "is kept in" in err.decode():   # interrupted once /adj was marked: kept for a rerun to resume, and said
        assert set(after) - set(before) == {"out/g.h5.partial", "out/g.h5.partial.json"}
        return
    assert after == before


# -- 11: bombs, peak RSS ---------------------------------------------------------------------------------
INFLATE = 256 << 20   # bytes a bomb inflates to (the were 0.5-1 GiB: the old code held 1-6x this)


def _deflated_member(zf: zipfile.ZipFile, name: str, head: bytes, payload: int, fill: bytes = b"\0") -> None:
    with zf.open(name, "w", force_zip64=True) as f:
        f.write(head)
        block = fill * (1 << 22)
        for s in range(0, payload, len(block)):
            f.write(block[:min(len(block), payload - s)])


def _npy_header(shape, dtype) -> bytes:
    from numpy.lib import format as npy

    b = io.BytesIO()
    npy.write_array_header_1_0(b, {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                   "shape": shape})
    return b.getvalue()


def _bomb_npz(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, head, payload, fill in members:
            _deflated_member(zf, name, head, payload, fill)
    assert path.stat().st_size < 1 << 20


def _header_bomb(t):
    p = _in(t) / "hdr.npz"
    _bomb_npz(p, [("edge_index.npy", b"\x93NUMPY\x02\x00" + INFLATE.to_bytes(4, "little"), INFLATE, b" ")])
    return [p], r"member 'edge_index' has a \.npy header of 268,435,456 bytes; expected at most 65,536"


def _features_bomb(t):
    p = _in(t) / "x.npz"
    rows = INFLATE // 8 + (1 << 19)   # just above the node count always allowed (2**25)
    _bomb_npz(p, [("node_feat.npy", _npy_header((rows, 1), "<f8"), 8 * rows, b"\0")])
    text_edges(t)
    return [_in(t) / "e.txt", "--features", p], r"rows of .*x\.npz declares 34,078,720 nodes for 2 entries"


def _format_bomb(t):
    p = _in(t) / "m.npz"
    small = []
    for k, v in dict(shape=np.array([3, 3]), indptr=np.array([0, 1, 1, 1]), indices=np.array([1]),
                     data=np.ones(1)).items():
        b = io.BytesIO()
        np.save(b, v)
        small.append((k + ".npy", b.getvalue(), 0, b"\0"))
    _bomb_npz(p, [("format.npy", _npy_header((), f"|S{INFLATE}"), INFLATE, b"c")] + small)
    return [p], r"member 'format' is a \|S268435456 array .*expected a small array"


def _gzip_line_bomb(t):
    p = _in(t) / "m.mtx.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [c.compress((P + "3 3 1\n1 2").encode())]
    block = b" " * (1 << 22)
    parts += [c.compress(block) for _ in range(INFLATE // len(block))]
    parts += [c.compress(b"\n"), c.flush()]
    p.write_bytes(b"".join(parts))
    assert p.stat().st_size < 1 << 20
    return [p], r"m\.mtx\.gz line 3: a line longer than 1 MiB"


def _peak(args, cwd) -> tuple[int, str, float]:
    """(peak RSS in bytes, stderr, seconds) of ``gnnprep ARGS`` in a fresh parent process."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode, time.perf_counter() - t); "
            "sys.stderr.write(r.stderr + r.stdout)")
    r = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "gnnprep", *map(str, args)],
                       capture_output=True, text=True, cwd=cwd, timeout=120)
    kib, rc, seconds = r.stdout.split()
    assert rc == "1", r.stderr
    return int(kib) * 1024, r.stderr, float(seconds)


BOMBS = {"npz_header_length": _header_bomb, "npz_features_member": _features_bomb,
         "npz_format_member": _format_bomb, "mtx_gz_line": _gzip_line_bomb}


def test_bombs_stay_within_the_budget(tmp_path):
    budget = 64 << 20
    empty = _in(tmp_path) / "empty.mtx"
    empty.write_text("")
    # the base: what a command that fails at its source's first bad entry maps, with the libraries a
    # bomb's path imports (the text reader's pandas: 82 MiB here against 48 for an empty file, and
    # more where pyarrow is installed). The output folder exists before these runs: without it they
    # failed before reading their source, and on a GPU machine's image the features bomb (120 MiB)
    # was judged against a base of 52 MiB that had never loaded pandas
    bad = text_edges(tmp_path, "0 1\nx y\n", "bad.txt")
    bad_gz = _in(tmp_path) / "bad.mtx.gz"
    bad_gz.write_bytes(gzip.compress((P + "3 3 2\n1 2\n1 x\n").encode()))
    (tmp_path / "out").mkdir()
    bases = [_peak(["ingest", src, "-o", tmp_path / "out" / "e.h5", "--memory-budget", "64MiB"], tmp_path)
             for src in (empty, bad, bad_gz)]
    assert all(str(src) in err for src, (_, err, _) in zip((empty, bad, bad_gz), bases)), bases
    base = max(peak for peak, _, _ in bases)
    for name, make in BOMBS.items():
        args, pattern = make(tmp_path)
        before = snapshot(tmp_path)
        peak, err, seconds = _peak(["ingest", *args, "-o", tmp_path / "out" / "g.h5", "--memory-budget", "64MiB",
                                    "--quiet"], tmp_path)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:") and re.search(pattern, lines[0]), (name, err)
        assert peak <= base + budget, (name, peak >> 20, base >> 20)
        assert seconds < 10, (name, seconds)
        assert snapshot(tmp_path) == before, name


# -- 15: graph stores checked on open ---------------------------------------------------------------------
def _replace(path, name, make):
    with h5py.File(path, "r+") as f:
        del f[name]
        make(f, name)


def _float_ids(f, name):
    f.create_dataset(name, data=np.full(int(f.attrs["num_edges"]), np.nan))


def _complex_ids(f, name):
    f.create_dataset(name, data=np.zeros(int(f.attrs["num_edges"]), np.complex64))


def _object_refs(f, name):
    ds = f.create_dataset(name, (int(f.attrs["num_edges"]),), dtype=h5py.ref_dtype)
    ds[0] = f["adj/indptr"].ref


def _group(f, name):
    f.create_group(name)


def _missing_filter(f, name):
    n, d = f.attrs["num_nodes"], int(f.attrs["num_features"])
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((int(n), d))
    dcpl.set_filter(32015, h5py.h5z.FLAG_OPTIONAL)   # zstd: not in this HDF5; a chunk written as if applied
    space = h5py.h5s.create_simple((int(n), d))
    ds = h5py.Dataset(h5py.h5d.create(f.id, name.encode(), h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl))
    ds.id.write_direct_chunk((0, 0), np.ones((int(n), d), np.float32).tobytes(), filter_mask=0)


STORE_CASES = {
    "indices_float_nan": ("adj/indices", _float_ids, r"/adj/indices is float64 of shape .*; expected integer node ids"),
    "indices_complex": ("adj/indices", _complex_ids, r"/adj/indices is complex64 of shape .*; expected integer node ids"),
    "indices_object_refs": ("adj/indices", _object_refs, r"/adj/indices is object of shape .*; expected integer node ids"),
    "indices_a_group": ("adj/indices", _group, r"/adj/indices is a group; expected a dataset of integer node ids"),
    "features_complex": ("nodes/features", lambda f, n: f.create_dataset(n, data=np.zeros((90, 7), np.complex64)),
                         r"/nodes/features is complex64 of shape .*; expected float features"),
    "features_missing_filter": ("nodes/features", _missing_filter,
                                r"/nodes/features needs the HDF5 filter .*\(id 32015\), which this HDF5 does not have"),
}


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    t = tmp_path_factory.mktemp("store")
    path, *_ = make_store(t, np.random.default_rng(0))
    return path.read_bytes()


@pytest.mark.parametrize("case", list(STORE_CASES))
def test_store_checked_on_open(tmp_path, good_store, case):
    name, make, pattern = STORE_CASES[case]
    p = _in(tmp_path) / "g.h5"
    p.write_bytes(good_store)
    _replace(p, name, make)
    with pytest.raises(GnnprepError, match=pattern) as e:   # the Python API: one library error
        GraphStore(p)
    assert "\n" not in str(e.value)
    _check_cli(tmp_path, [p, "-o", tmp_path / "out" / "f.h5", "--hops", "1", "--device", "cpu"], pattern,
               command="precompute")


def test_a_node_count_far_beyond_the_edges_is_named_whatever_the_free_disk(tmp_path, monkeypatch):
    """--num-nodes 3e9 for 2 edges of a text file is refused for what it is, not as a full disk,
    when the disk could not hold its 24 GB row pointer (the row pointer's disk check waits until
    the edges are counted)."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 40, 1 << 40, 1 << 30))
    setup, pattern = CASES["num_nodes_option_3e9"]
    _check_cli(tmp_path, setup(tmp_path), pattern)
