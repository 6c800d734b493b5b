"""Issue 23 item 7: a damaged node order never fails a run. The order cache beside a graph store
(``<store>.order-<kind>.npz``: empty, truncated, a bad CRC, a named pipe, a folder, a declared shape
of 10^15 ids, metadata nested 100,000 deep or of the wrong types) and the order kept inside the
store (``/order/community``: wrong shape or dtype, not a permutation, its near shares missing, of
the wrong type, NaN or out of [0, 1]) are ignored, said (one warning naming the file), and the
order is found again; the cache is rewritten.

Each case: the reader gives None and exactly one warning naming the file and the damage (a pipe is
never opened for reading, a huge shape never allocated); then ``gnnprep precompute --reorder
community`` exits 0 with no traceback and no error, says the same once (a DamagedOrderWarning, or
a ``Warning:`` line once the run hands the loaders its own ``warn``), its hops are byte-identical
to the undamaged run's, the store is untouched, nothing but the output (and the rebuilt cache) is
left beside it, and the cache loads again, silently.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import warnings
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import make_store, run

from gnnprep.graph import order as kept_order
from gnnprep.graph.store import GraphStore
from gnnprep.precompute.features import FeatureStore

N = 120
HOPS = 2


def snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        name = str(p.relative_to(root))
        if p.is_symlink():
            out[name] = "link"
        elif p.is_fifo():
            out[name] = "fifo"
        elif p.is_file():
            out[name] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[name] = "dir"
    return out


def precompute_args(store: Path, out: Path) -> list:
    return ["precompute", store, "-o", out, "--hops", str(HOPS), "--device", "cpu", "--reorder", "community", "--json"]


def precompute(store: Path, out: Path):
    """The command; (result, what it said of damaged orders). Said through the command's warning
    channel only (the run passes its own ``warn`` to the loaders): its Warning lines on stderr, the
    same in the --json report's warnings, and never a Python DamagedOrderWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", kept_order.DamagedOrderWarning)
        r = run(precompute_args(store, out))
    lines = [line[len("Warning: "):] for line in r.stderr.splitlines() if line.startswith("Warning: ")]
    assert not [w for w in caught if issubclass(w.category, kept_order.DamagedOrderWarning)], r.stderr
    if r.exit_code == 0:
        assert json.loads(r.stdout)["warnings"] == lines, (r.stdout, r.stderr)
    return r, lines


@pytest.fixture(autouse=True, scope="module")
def one_numba_thread():
    """Graphs of 120 nodes: one kernel thread is ten times faster than two on a busy machine."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


@pytest.fixture(scope="module")
def base(tmp_path_factory, one_numba_thread):
    """A store, its order cache (as precompute keeps it), the same store with the order kept inside
    (as ingest keeps it for larger graphs), and the reference output."""
    root = tmp_path_factory.mktemp("order_base")
    (root / "src").mkdir()
    store, *_ = make_store(root / "src", np.random.default_rng(11), n=N, m=600, d=5)
    shutil.copy2(store, root / "g.h5")
    r = run(precompute_args(root / "g.h5", root / "ref.h5"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["reorder"]["cached"] is False
    cache = kept_order.cache_path(root / "g.h5", "community")
    with np.load(cache) as z:
        order, meta = z["order"].astype(np.int64), json.loads(str(z["meta"]))
    shutil.copy2(store, root / "kept.h5")
    with h5py.File(root / "kept.h5", "r+") as f:
        kept_order.write_to_store(f, "community", order, meta)
    with FeatureStore(root / "ref.h5") as fs:
        hops = [fs.hop(k)[:].tobytes() for k in range(HOPS + 1)]
    return {"root": root, "cache": cache.read_bytes(), "order": order, "meta": meta, "hops": hops}


# --------------------------------------------------------------------------------------- damaged caches

def npz(order, meta_text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        with z.open("order.npy", "w") as m:
            np.lib.format.write_array(m, np.asarray(order))
        with z.open("meta.npy", "w") as m:
            np.lib.format.write_array(m, np.array(meta_text))
    return buf.getvalue()


def declared_shape(shape) -> bytes:
    """An npz whose order.npy declares ``shape`` of int64 and holds 64 bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": shape})
        z.writestr("order.npy", header.getvalue() + b"\0" * 64)
        z.writestr("meta.npy", b"")
    return buf.getvalue()


def bad_crc(good: bytes) -> bytes:
    data = bytearray(good)
    data[good.index(b"order.npy") + 200] ^= 0xFF   # inside order.npy's data (stored, not compressed)
    return bytes(data)


def meta_with(base, **changes) -> bytes:
    meta = {**base["meta"], **changes}
    return npz(base["order"], json.dumps(meta))


def swapped(base) -> bytes:
    order = base["order"].copy()
    order[1] = order[0]
    return npz(order, json.dumps(base["meta"]))


CACHE_CASES = [
    # (id, the cache's bytes from base (None: see kind), kind of file, what the warning says)
    ("empty", lambda b: b"", "file", r"damaged node order cache \(File is not a zip file\)"),
    ("truncated", lambda b: b["cache"][: len(b["cache"]) // 2], "file", r"damaged node order cache \(File is not a zip file\)"),
    ("bad-crc", lambda b: bad_crc(b["cache"]), "file", r"damaged node order cache \(Bad CRC-32 for file 'order\.npy'\)"),
    ("junk", lambda b: b"\x00junk" * 40, "file", r"damaged node order cache \(File is not a zip file\)"),
    ("shape-10^15", lambda b: declared_shape((10**15,)), "file",
     r"its order is int64 of shape \(1000000000000000,\); expected 120 integer node ids"),
    ("shape-2d", lambda b: declared_shape((N, 10**12)), "file", r"its order is int64 of shape \(120, 1000000000000\)"),
    ("data-short", lambda b: declared_shape((N,)), "file", r"its order\.npy holds other than the 960 bytes its header declares"),
    ("order-float", lambda b: npz(b["order"].astype(np.float64), json.dumps(b["meta"])), "file",
     r"its order is float64 of shape \(120,\)"),
    ("not-a-permutation", swapped, "file", r"it is not a permutation \(an id repeats\)"),
    ("id-out-of-range", lambda b: npz(np.r_[b["order"][:-1], 10**6], json.dumps(b["meta"])), "file",
     r"it holds ids outside \[0, 120\)"),
    ("meta-deep-nesting", lambda b: npz(b["order"], "[" * 100_000 + "]" * 100_000), "file", r"its meta is not valid JSON"),
    ("meta-a-list", lambda b: npz(b["order"], "[1, 2]"), "file", r"its meta is not a JSON object"),
    ("meta-share-a-string", lambda b: meta_with(b, near_share_before="x"), "file",
     r"its meta 'near_share_before' is 'x'; expected a share in \[0, 1\]"),
    ("meta-share-nan", lambda b: meta_with(b, near_share_after=float("nan")), "file", r"its meta 'near_share_after' is nan"),
    ("meta-share-missing", lambda b: npz(b["order"], json.dumps({k: v for k, v in b["meta"].items()
                                                                if k != "near_share_after"})), "file",
     r"its meta 'near_share_after' is None"),
    ("meta-seconds-negative", lambda b: meta_with(b, seconds=-1), "file", r"its meta 'seconds' is -1; expected seconds >= 0"),
    ("a-named-pipe", None, "fifo", r"damaged node order cache \(it is not a regular file\)"),
    ("a-folder", None, "dir", r"damaged node order cache \(it is not a regular file\)"),
]


def place(cache: Path, data, kind: str, base) -> None:
    if kind == "fifo":
        os.mkfifo(cache)
    elif kind == "dir":
        cache.mkdir()
    else:
        cache.write_bytes(data(base))


@pytest.mark.parametrize("data,kind,says", [c[1:] for c in CACHE_CASES], ids=[c[0] for c in CACHE_CASES])
def test_damaged_cache_is_ignored_said_and_rebuilt(base, tmp_path, data, kind, says):
    store = tmp_path / "g.h5"
    shutil.copy2(base["root"] / "g.h5", store)
    cache = kept_order.cache_path(store, "community")
    place(cache, data, kind, base)
    with GraphStore(store) as s:
        fingerprint, n = s.fingerprint, s.num_nodes
    said = []
    assert kept_order.load_cached(store, "community", fingerprint, n, warn=said.append) is None
    assert len(said) == 1 and re.fullmatch(rf"{re.escape(str(cache))}: .*{says}.*; ignored, the order is found again",
                                           said[0]), said
    before = snapshot(tmp_path)
    r, told = precompute(store, tmp_path / "f.h5")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Error" not in r.stderr
    assert told == said                                          # said once, by the run too
    assert json.loads(r.stdout)["reorder"]["cached"] is False   # found again
    with FeatureStore(tmp_path / "f.h5") as fs:
        assert [fs.hop(k)[:].tobytes() for k in range(HOPS + 1)] == base["hops"]
    after = snapshot(tmp_path)
    assert after["g.h5"] == before["g.h5"]                       # the input untouched
    if kind == "dir":                                            # a folder is never removed: nothing kept
        assert set(after) == set(before) | {"f.h5"} and after[cache.name] == "dir"
        return
    assert set(after) == set(before) | {"f.h5"}                  # nothing else left beside it
    said.clear()                                                 # rebuilt: it loads again, silently
    got = kept_order.load_cached(store, "community", fingerprint, n, warn=said.append)
    assert got is not None and not said and np.array_equal(got[0], base["order"])


def test_a_stale_cache_is_replaced_without_a_word(base, tmp_path):
    store = tmp_path / "g.h5"
    shutil.copy2(base["root"] / "g.h5", store)
    cache = kept_order.cache_path(store, "community")
    cache.write_bytes(meta_with(base, graph_fingerprint="another graph"))
    said = []
    with GraphStore(store) as s:
        assert kept_order.load_cached(store, "community", s.fingerprint, s.num_nodes, warn=said.append) is None
    assert said == []


def test_known_never_opens_the_cache(base, tmp_path):
    # a named pipe is not a known order (planning must not count on it) and stat-ing it does not block
    store = tmp_path / "g.h5"
    shutil.copy2(base["root"] / "g.h5", store)
    os.mkfifo(kept_order.cache_path(store, "community"))
    with GraphStore(store) as s:
        assert kept_order.known(s, "community") is False


# --------------------------------------------------------------------------------------- damaged kept orders

def replace_order(data):
    def edit(f):
        attrs, new = dict(f["order/community"].attrs), data(f)
        del f["order/community"]
        ds = f["order"].create_dataset("community", data=new)
        for k, v in attrs.items():
            ds.attrs[k] = v
    return edit


def set_attr(name, value):
    def edit(f):
        f["order/community"].attrs[name] = value
    return edit


def del_attr(name):
    def edit(f):
        del f["order/community"].attrs[name]
    return edit


def not_permutation(f):
    order = f["order/community"][:]
    order[1] = order[0]
    f["order/community"][...] = order


STORE_CASES = [
    # (id, edit(h5 file), what the warning says)
    ("short", replace_order(lambda f: f["order/community"][:-1]), r"it is int32 of shape \(119,\); expected 120 integer node ids"),
    ("float", replace_order(lambda f: f["order/community"][:].astype(np.float32)), r"it is float32 of shape \(120,\)"),
    ("2d", replace_order(lambda f: np.stack([f["order/community"][:]] * 2)), r"it is int32 of shape \(2, 120\)"),
    ("not-a-permutation", not_permutation, r"it is not a permutation \(an id repeats\)"),
    ("id-out-of-range", lambda f: f["order/community"].__setitem__(3, 10**6), r"it holds ids outside \[0, 120\)"),
    ("id-negative", lambda f: f["order/community"].__setitem__(0, -1), r"it holds ids outside \[0, 120\)"),
    ("share-missing", del_attr("near_share_after"), r"it has no attribute 'near_share_after'"),
    ("share-a-string", set_attr("near_share_before", "high"), r"its attribute 'near_share_before' is 'high'; expected a share"),
    ("share-an-array", set_attr("near_share_before", np.array([0.1, 0.2])), r"its attribute 'near_share_before' is array"),
    ("share-nan", set_attr("near_share_after", np.nan), r"its attribute 'near_share_after' is np\.float64\(nan\)"),
    ("share-2", set_attr("near_share_after", 2.0), r"its attribute 'near_share_after' is np\.float64\(2\.0\)"),
    ("share-empty", set_attr("near_share_after", h5py.Empty("f8")), r"its attribute 'near_share_after' is Empty"),
    ("seconds-inf", set_attr("seconds", np.inf), r"its attribute 'seconds' is np\.float64\(inf\); expected seconds >= 0"),
]


@pytest.mark.parametrize("edit,says", [c[1:] for c in STORE_CASES], ids=[c[0] for c in STORE_CASES])
def test_damaged_kept_order_is_ignored_said_and_found_again(base, tmp_path, edit, says):
    store = tmp_path / "g.h5"
    shutil.copy2(base["root"] / "kept.h5", store)
    with h5py.File(store, "r+") as f:
        edit(f)
    said = []
    with GraphStore(store) as s:
        assert kept_order.load_from_store(s, "community", warn=said.append) is None
        gain = kept_order.stored_gain(s, "community")
        kept_order.known(s, "community")                          # looks, never raises
    assert len(said) == 1 and re.fullmatch(rf"{re.escape(str(store))}: /order/community is damaged \(.*{says}.*\); "
                                           r"ignored, the order is found again", said[0]), said
    assert gain is None or np.isfinite(gain)
    before = snapshot(tmp_path)
    r, told = precompute(store, tmp_path / "f.h5")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Error" not in r.stderr
    assert told == said
    assert json.loads(r.stdout)["reorder"]["cached"] is False
    with FeatureStore(tmp_path / "f.h5") as fs:
        assert [fs.hop(k)[:].tobytes() for k in range(HOPS + 1)] == base["hops"]
    after = snapshot(tmp_path)
    assert after["g.h5"] == before["g.h5"]
    assert set(after) == set(before) | {"f.h5", kept_order.cache_path(store, "community").name}


def test_an_intact_kept_order_is_used_silently(base, tmp_path):
    store = tmp_path / "g.h5"
    shutil.copy2(base["root"] / "kept.h5", store)
    said = []
    with GraphStore(store) as s:
        got = kept_order.load_from_store(s, "community", warn=said.append)
        assert got is not None and not said and np.array_equal(got[0], base["order"])
        assert kept_order.known(s, "community") and kept_order.stored_gain(s, "community") is not None
    r, told = precompute(store, tmp_path / "f.h5")
    assert r.exit_code == 0 and json.loads(r.stdout)["reorder"]["found_in"] == "store", r.stderr
    assert told == [] and r.stderr == ""
