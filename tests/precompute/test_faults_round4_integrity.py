"""Issue 32, lines 2 and 5 (reliability round 4): the ordered copy of the CSR that ``precompute``
keeps beside its input (``<store>.ordered-<kind>.h5``) is checked — self-contained, and against its
checksums — before any hop is written (line 4, the HAG: tests/hag/test_faults_round4_hag.py).

One table per surface; each case asserts the contract: exit code, exactly one ``Error:`` (or
``Warning:``) line on stderr matching the message, no traceback, empty stdout on failure (the
summary on success), the folder's files before/after, inputs byte-identical. A copy found damaged before any hop is written
is ignored with one warning and rewritten, and the hops are the bytes of the stored-order run; one
found damaged as S is streamed fails the run with the copy removed, and a rerun rewrites it."""

from __future__ import annotations

import hashlib
import re
import shutil

import h5py
import numpy as np
import pytest
from fixtures import make_store, run, weigh_store

from gnnprep.graph.store import GraphStore
from gnnprep.precompute import ordered
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute

N, M = 160, 1200
COPY = "g.ordered-community.h5"
STREAMED = ["--blocks", "1,3,2"]   # S streamed from the copy
RESIDENT = ["--blocks", "1,1,2"]   # S read whole from the copy (checked whole before any hop)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """g.h5 and gw.h5 (weighted), each with its ordered copy and its stored-order hops (the
    reference bytes)."""
    tmp = tmp_path_factory.mktemp("round4_integrity")
    make_store(tmp, np.random.default_rng(11), n=N, m=M, d=3)
    (tmp / "w").mkdir()
    gw, *_ = make_store(tmp / "w", np.random.default_rng(12), n=N, m=M, d=3, name="gw.h5")
    weigh_store(gw)
    shutil.move(gw, tmp / "gw.h5")
    for g in ("g.h5", "gw.h5"):
        ref = tmp / f"ref-{g}"
        precompute(tmp / g, ref, PrecomputeConfig(hops=2, device="cpu", reorder="none", blocks=(1, 1, 1)))
        rep = precompute(tmp / g, tmp / "scratch.h5", PrecomputeConfig(hops=2, device="cpu", reorder="community",
                                                                      blocks=(1, 3, 2)))
        assert rep.ordered_copy["built"] and rep.ordered_copy["used"]
        (tmp / "scratch.h5").unlink()
    return tmp


# -- tampering ------------------------------------------------------------------------------------------
def _rows(f):
    return f["indptr"][:]


def _swap_between_rows(f):
    """Two column ids of different rows swapped (ids in range, degrees kept)."""
    ip, idx = _rows(f), f["indices"][:]
    a = int(ip[np.flatnonzero(np.diff(ip) > 0)[0]])
    b = next(p for p in range(int(ip[-1]) - 1, a, -1) if idx[p] != idx[a])
    idx[a], idx[b] = idx[b], idx[a]
    f["indices"][...] = idx


def _swap_within_row(f):
    ip, idx = _rows(f), f["indices"][:]
    r = int(np.flatnonzero(np.diff(ip) >= 2)[0])
    a = int(ip[r])
    idx[a], idx[a + 1] = idx[a + 1], idx[a]
    f["indices"][...] = idx


def _flip_low_bit(f):
    idx = f["indices"][:]
    p = int(np.flatnonzero((idx ^ 1) < N)[len(idx) // 2])
    idx[p] ^= 1
    f["indices"][...] = idx


def _id_beyond_n(f):
    idx = f["indices"][:]
    idx[7] = N + 3
    f["indices"][...] = idx


def _weight_changed(f):
    w = f["weights"][:]
    w[11] = np.float32(w[11] * 1.5)
    f["weights"][...] = w


def _checksum_edited(f):
    s = f["checksums/indices"][:]
    s[len(s) // 2:] += np.uint64(1)   # the rows' checksums stay but one: the one at the middle
    f["checksums/indices"][...] = s


def _swap_order_equal_degree(f):
    """Two /order entries of equal degree swapped: a permutation with the store's degrees still."""
    order, ip = f["order"][:], _rows(f)
    deg = np.diff(ip)
    for d in np.unique(deg):
        at = np.flatnonzero(deg == d)
        if len(at) >= 2:
            i, j = int(at[0]), int(at[1])
            order[i], order[j] = order[j], order[i]
            f["order"][...] = order
            return
    raise AssertionError("no two rows of equal degree")


def _attr(name, value):
    def fn(f):
        f.attrs[name] = value
    return fn


def _delete(name):
    def fn(f):
        if name in f.attrs:
            del f.attrs[name]
        else:
            del f[name]
    return fn


def _external_storage(work):
    """/indices moved to external raw storage: a file beside it (here holding other ids)."""
    def fn(f):
        idx = f["indices"][:]
        raw = work / "raw.bin"
        np.roll(idx, 1).tofile(raw)
        del f["indices"]
        f.create_dataset("indices", shape=idx.shape, dtype=idx.dtype, external=[(str(raw), 0, idx.nbytes)])
    return fn


def _virtual(work):
    """/indices a virtual dataset over another file's (a copy with rolled ids)."""
    def fn(f):
        idx = f["indices"][:]
        with h5py.File(work / "src.h5", "w") as s:
            s["indices"] = np.roll(idx, 1)
        layout = h5py.VirtualLayout(shape=idx.shape, dtype=idx.dtype)
        layout[:] = h5py.VirtualSource(str(work / "src.h5"), "indices", shape=idx.shape)
        del f["indices"]
        f.create_virtual_dataset("indices", layout)
    return fn


def _external_link(work):
    def fn(f):
        idx = f["indices"][:]
        with h5py.File(work / "src.h5", "w") as s:
            s["indices"] = np.roll(idx, 1)
        del f["indices"]
        f["indices"] = h5py.ExternalLink(str(work / "src.h5"), "/indices")
    return fn


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _same_hops(ref, out):
    with h5py.File(ref) as a, h5py.File(out) as b:
        for k in range(3):
            assert a[f"hops/{k}"][:].tobytes() == b[f"hops/{k}"][:].tobytes(), k


def _one_line(stderr, kind, message):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{kind}: "), stderr
    assert re.search(message, lines[0]), lines[0]


# -- line 2 and 5: the ordered copy ----------------------------------------------------------------------
# (id, store, edit(work) -> fn(f), blocks, outcome, stderr regex; None: no stderr at all)
# outcome "rewritten": exit 0, the copy rewritten (and valid), the hops the stored-order run's bytes;
# "dropped": exit 0, the copy removed (S resident: relabelled in memory, no copy wanted), the same bytes;
# "removed": exit 1, the copy removed, nothing else written or changed.
SELF = r"g\.ordered-community\.h5: damaged ordered copy \(/indices is "
CASES = [
    # line 2: reads outside the copy, refused when it is opened (before any data is read)
    ("l2_external_storage", "g.h5", _external_storage, STREAMED, "rewritten", SELF + r"stored outside the file"),
    ("l2_external_storage_resident", "g.h5", _external_storage, RESIDENT, "dropped", SELF + r"stored outside"),
    ("l2_virtual_dataset", "g.h5", _virtual, STREAMED, "rewritten", SELF + r"a virtual dataset reading '.*src\.h5'"),
    ("l2_external_link", "g.h5", _external_link, RESIDENT, "dropped", SELF + r"an external link to .*src\.h5"),
    ("l2_external_link_streamed", "g.h5", _external_link, STREAMED, "rewritten", SELF + r"an external link"),
    # line 5: /order and the attributes, checked when the copy is opened
    ("l5_order_equal_degree_swap", "g.h5", lambda w: _swap_order_equal_degree, STREAMED, "rewritten",
     r"damaged ordered copy \(/order does not match its checksum\); removed, a run that reads S from it writes it "
     r"again"),
    ("l5_order_equal_degree_swap_resident", "g.h5", lambda w: _swap_order_equal_degree, RESIDENT, "dropped",
     r"/order does not match its checksum"),
    ("l5_order_checksum_missing", "g.h5", lambda w: _delete("order_checksum"), STREAMED, "rewritten",
     r"root attribute 'order_checksum' is missing"),
    ("l5_checksums_missing", "g.h5", lambda w: _delete("checksums/indices"), STREAMED, "rewritten",
     r"/checksums/indices is missing or not of shape \[161\]"),
    ("l5_old_version_is_stale", "g.h5", lambda w: _attr("format_version", 1), STREAMED, "rewritten", None),
    ("l5_other_graph_is_stale", "g.h5", lambda w: _attr("graph_fingerprint", "another"), STREAMED, "rewritten", None),
    ("l5_num_edges_wrong", "g.h5", lambda w: _attr("num_edges", 5), RESIDENT, "dropped",
     r"root attribute 'num_edges' is 5; expected \d+"),
    # line 5: the entries, S read whole (resident): checked before any hop, ignored and rewritten
    ("l5_swap_between_rows_resident", "g.h5", lambda w: _swap_between_rows, RESIDENT, "rewritten",
     r"damaged ordered copy \(/indices entries 0\.\.\d+ \(rows 0\.\.\d+\) do not match their checksum\); ignored"),
    ("l5_swap_within_row_resident", "g.h5", lambda w: _swap_within_row, RESIDENT, "rewritten",
     r"/indices entries .* do not match their checksum"),
    ("l5_low_bit_flip_resident", "g.h5", lambda w: _flip_low_bit, RESIDENT, "rewritten",
     r"/indices entries .* do not match their checksum"),
    ("l5_id_beyond_n_resident", "g.h5", lambda w: _id_beyond_n, RESIDENT, "rewritten",
     r"damaged ordered copy \(/indices\[7\] = 163, not a node id in \[0, 160\)\); ignored, it is written again"),
    ("l5_weight_changed_resident", "gw.h5", lambda w: _weight_changed, RESIDENT, "rewritten",
     r"gw\.ordered-community\.h5: damaged ordered copy \(/weights entries .* do not match their checksum"),
    ("l5_checksum_edited_resident", "g.h5", lambda w: _checksum_edited, RESIDENT, "rewritten",
     r"/indices entries .* do not match their checksum"),
    # line 5: the entries, S streamed: found as the first hop reads them (no hop row written yet):
    # the run fails, the copy removed, so a rerun writes it again
    ("l5_swap_between_rows_streamed", "g.h5", lambda w: _swap_between_rows, STREAMED, "removed",
     r"g\.ordered-community\.h5: the ordered copy of the graph is damaged \(/indices entries \d+\.\.\d+ \(rows "
     r"\d+\.\.\d+\) do not match their checksum\); it was removed, so a rerun writes it again"),
    ("l5_swap_within_row_streamed", "g.h5", lambda w: _swap_within_row, STREAMED, "removed",
     r"damaged \(/indices entries .* do not match their checksum\); it was removed"),
    ("l5_low_bit_flip_streamed", "g.h5", lambda w: _flip_low_bit, STREAMED, "removed",
     r"damaged \(/indices entries .* do not match their checksum\); it was removed"),
    ("l5_id_beyond_n_streamed", "g.h5", lambda w: _id_beyond_n, STREAMED, "removed",
     r"damaged \(/indices\[7\] = 163, not a node id in \[0, 160\)\); it was removed, so a rerun writes it again"),
    ("l5_weight_changed_streamed", "gw.h5", lambda w: _weight_changed, STREAMED, "removed",
     r"gw\.ordered-community\.h5: the ordered copy of the graph is damaged \(/weights entries"),
    ("l5_checksum_edited_streamed", "g.h5", lambda w: _checksum_edited, STREAMED, "removed",
     r"do not match their checksum\); it was removed"),
]


def _setup_copy(base, work, store, edit):
    copy = store.replace(".h5", ".ordered-community.h5")
    for p in base.glob(store.replace(".h5", ".*")):  # the store, its copy and its order cache
        shutil.copy(p, work / p.name)
    with h5py.File(work / copy, "r+") as f:
        edit(work)(f)
    return work / store, work / copy


@pytest.mark.parametrize("store, edit, blocks, outcome, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ordered_copy_fault(base, tmp_path, request, store, edit, blocks, outcome, message):
    work = tmp_path / "w"
    work.mkdir()
    g, copy = _setup_copy(base, work, store, edit)
    before = _digest(work)
    r = run(["precompute", g, "-o", work / "f.h5", "--hops", "2", "--device", "cpu", "--reorder", "community",
             *blocks])
    assert "Traceback" not in r.stderr + r.stdout
    after = _digest(work)
    assert not [n for n in after if ".tmp-" in n or ".work-" in n or ".partial" in n]
    if outcome == "removed":
        assert r.exit_code == 1, (r.stderr, r.stdout)
        assert r.stdout == ""
        _one_line(r.stderr, "Error", message)
        assert after == {k: v for k, v in before.items() if k != copy.name}  # the copy gone, nothing else touched
        if "between_rows" not in request.node.name:  # (one rerun is enough to show it)
            return
        # a rerun writes the copy again and computes the stored-order run's bytes
        again = run(["precompute", g, "-o", work / "f.h5", "--hops", "2", "--device", "cpu", "--reorder",
                     "community", *blocks])
        assert again.exit_code == 0 and again.stderr == "", again.stderr
        _same_hops(base / f"ref-{store}", work / "f.h5")
        return
    assert r.exit_code == 0, (r.stderr, r.stdout)
    if message is None:
        assert r.stderr == ""
    else:
        _one_line(r.stderr, "Warning", message)
    assert set(after) - {copy.name} == set(before) - {copy.name} | {"f.h5"}
    assert {k: v for k, v in after.items() if k not in (copy.name, "f.h5")} == \
        {k: v for k, v in before.items() if k != copy.name}  # inputs (and raw.bin, src.h5) intact
    if outcome == "dropped":  # S resident: relabelled in memory, no copy needed (one is written when S streams)
        assert copy.name not in after
        _same_hops(base / f"ref-{store}", work / "f.h5")
        return
    assert after[copy.name] != before[copy.name]  # rewritten...
    with GraphStore(g) as s:
        c = ordered.open_copy(s, "community")
        assert c is not None  # ...and valid
        c.read_indices(0, c.m)
        c.close()
    _same_hops(base / f"ref-{store}", work / "f.h5")


def test_the_copy_table_is_large_enough():
    assert len(CASES) >= 20 and len({c[0] for c in CASES}) == len(CASES)
