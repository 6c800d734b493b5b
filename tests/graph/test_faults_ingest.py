"""Issue 12 for ``gnnprep ingest``: nothing lost, no tracebacks, no crashes.

Every fault in CASES runs through the CLI and must exit 1 (2 for usage errors) with exactly one
``Error:`` line on stderr that matches its pattern, no traceback, nothing on stdout, and leave every
file under tmp_path byte-identical (no output, temporary or work file appears; no input changes).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess

import h5py
import numpy as np
import pytest
from fixtures import run
from ogb_layouts import make_arxiv_like, make_mag_like

from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import SourceOptions

# ------------------------------------------------------------------------------------------------
# tiny inputs (all under tmp_path / "in")
# ------------------------------------------------------------------------------------------------

def _in(t):
    d = t / "in"
    d.mkdir(exist_ok=True)
    return d


def txt(t, text="0 1\n1 2\n2 3\n", name="e.txt"):
    p = _in(t) / name
    p.write_text(text)
    return p


def npy(t, name, arr):
    p = _in(t) / name
    np.save(p, arr)
    return p


def gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(text.encode())


def splits_dir(t, **files):
    d = _in(t) / "splits"
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / f"{name}.txt").write_text(text)
    return d


def store(t, name="s.h5", mutate=None, n=6):
    """A small valid graph store (features, labels, splits), then ``mutate(h5py.File)`` on it."""
    src = np.array([0, 1, 2, 3, 4, 0])
    dst = np.array([1, 2, 3, 4, 5, 5])
    d = t / "build"
    d.mkdir(exist_ok=True)
    np.save(d / "e.npy", np.stack([src, dst]))
    np.save(d / "x.npy", np.arange(n * 2, dtype=np.float32).reshape(n, 2))
    np.save(d / "y.npy", np.array([0, 1, 0, 1, -1, 2]))
    (d / "sp").mkdir(exist_ok=True)
    (d / "sp" / "train.txt").write_text("0\n1\n")
    (d / "sp" / "valid.txt").write_text("2\n")
    out = _in(t) / name
    ingest(str(d / "e.npy"), out, IngestConfig(source=SourceOptions(
        num_nodes=n, features=str(d / "x.npy"), labels=str(d / "y.npy"), splits=str(d / "sp"))))
    if mutate is not None:
        with h5py.File(out, "r+") as f:
            mutate(f)
    return out


def _set(path, value):
    def mutate(f):
        ds = f[path]
        data = ds[:]
        for i, v in value.items():
            data[i] = v
        ds[...] = data
    return mutate


def _attr(name, value):
    def mutate(f):
        f.attrs[name] = value
    return mutate


def arxiv(t, edit=None):
    truth = make_arxiv_like(_in(t), n=12, m=20, d=3)
    if edit:
        edit(truth.path)
    return truth.path


def mag(t, edit=None):
    truth = make_mag_like(_in(t), n_paper=8, n_author=6, n_institution=2, n_field_of_study=4, d=3)
    if edit:
        edit(truth.path)
    return truth.path


def _link(t, target, name, hard=False):
    """A symbolic (or hard) link ``name`` to ``target`` in the inputs folder."""
    link = _in(t) / name
    os.link(target, link) if hard else link.symlink_to(target)
    return link


def _npz(t, name, **arrays):
    p = _in(t) / name
    np.savez(p, **arrays)
    return p


# ------------------------------------------------------------------------------------------------
# the table: id -> (setup(tmp_path) -> args (an "-o" in them replaces the default output), exit, regex)
# ------------------------------------------------------------------------------------------------

INPUT = r"is also an input of this command"
CASES = {
    # 1. an output that is one of the files the source reads
    "f1_out_is_edge_file": (lambda t: [p := txt(t), "-o", p], 1, INPUT),
    "f1_out_is_features": (lambda t: [txt(t), "--features", p := npy(t, "x.npy", np.ones((4, 2))), "-o", p], 1, INPUT),
    "f1_out_is_labels": (lambda t: [txt(t), "--labels", p := npy(t, "y.npy", np.zeros(4)), "-o", p], 1, INPUT),
    "f1_out_is_split_file": (lambda t: [txt(t), "--splits", d := splits_dir(t, train="0\n"), "-o", d / "train.txt"],
                             1, INPUT),
    "f1_out_is_ogb_member": (lambda t: [p := arxiv(t), "-o", p / "raw" / "edge.csv.gz"], 1, INPUT),
    "f1_out_is_store_source": (lambda t: [p := store(t), "-o", p], 1, INPUT),
    "f1_out_symlink_to_input": (lambda t: [p := txt(t), "-o", _link(t, p, "link.h5")], 1, INPUT),
    "f1_out_hardlink_to_input": (lambda t: [p := txt(t), "-o", _link(t, p, "hard.h5", hard=True)], 1, INPUT),
    "f1_out_hardlink_to_store": (lambda t: [p := store(t), "-o", _link(t, p, "hard.h5", hard=True)], 1, INPUT),
    # 3. sparse huge ids: a clear error before anything of that size is allocated
    "f3_sparse_huge_id": (lambda t: [txt(t, "0 1\n1 2147483653\n"), "--memory-budget", "1GiB"], 1,
                          r"e\.txt: the largest node id 2147483653 implies 2,147,483,654 nodes .*needs 16\.0 GiB"
                          r" of memory, more than the memory budget 1\.0 GiB; renumber the ids"),
    # 4. a corrupt graph store as the source
    "f4_store_index_out_of_range": (lambda t: [store(t, mutate=_set("adj/indices", {0: 99}))], 1,
                                    r"s\.h5: /adj/indices\[0\] = 99; expected a node id in \[0, 6\)"),
    "f4_store_indptr_decreases": (lambda t: [store(t, mutate=_set("adj/indptr", {2: 0}))], 1,
                                  r"s\.h5: /adj/indptr decreases at row 1"),
    "f4_store_indptr_end": (lambda t: [store(t, mutate=_set("adj/indptr", {6: 11}))], 1,
                            r"s\.h5: /adj/indptr ends at 11; expected 12, the number of stored entries"),
    "f4_store_indptr_start": (lambda t: [store(t, mutate=_set("adj/indptr", {0: 1}))], 1,
                              r"s\.h5: /adj/indptr\[0\] = 1; expected 0"),
    "f4_store_self_loop": (lambda t: [store(t, mutate=_set("adj/indices", {0: 0}))], 1,
                           r"s\.h5: /adj/indices\[0\] = 0 is a self-loop of row 0"),
    "f4_store_unsorted_row": (lambda t: [store(t, mutate=_set("adj/indices", {2: 5, 3: 3}))], 1,
                              r"s\.h5: row 1 of /adj/indices is not sorted or has a duplicate at entry 3"),
    "f4_store_bad_label": (lambda t: [store(t, mutate=_set("nodes/labels", {3: 2**40}))], 1,
                           r"s\.h5: /nodes/labels\[3\] = 1099511627776; expected a class id in \[0, 1000000\)"),
    "f4_store_split_out_of_range": (lambda t: [store(t, mutate=lambda f: f["splits/train"].__setitem__(1, 60))], 1,
                                    r"s\.h5: /splits/train\[1\] = 60: expected a node id in \[0, 6\)"),
    # 6. tracebacks for fixable input
    "f6_million_digit_id": (lambda t: [txt(t, "0 1\n1 " + "9" * 1_000_000 + "\n")], 1,
                            r"e\.txt line 2: node id 9{24}\.\.\. \(1,000,000 characters\) is too large"),
    "f6_string_labels_npy": (lambda t: [txt(t), "--labels", npy(t, "y.npy", np.array(["a", "b", "c", "d"]))], 1,
                             r"y\.npy: <U1 array of shape \(4,\); expected \[num_nodes\] integer class ids"),
    "f6_text_labels": (lambda t: [txt(t), "--labels", txt(t, "cat\ndog\ncat\ndog\n", "y.txt")], 1,
                       r"y\.txt: --labels must be a \.npy or \.npz array"),
    "f6_store_format_version_string": (lambda t: [store(t, mutate=_attr("format_version", "1"))], 1,
                                       r"s\.h5: root attribute 'format_version' is '1'; expected a positive integer"),
    "f6_label_2_pow_40": (lambda t: [txt(t), "--labels", npy(t, "y.npy", np.array([0, 1, 2**40, 1]))], 1,
                          r"y\.npy entry 2: label 1099511627776 is too large; expected a class id below 1000000"),
    "f6_label_float_1e300": (lambda t: [txt(t), "--labels", npy(t, "y.npy", np.array([0, np.nan, 1e300, 1]))], 1,
                             r"y\.npy entry 2: label 1e\+300 is too large"),
    "f6_ogb_label_too_large": (lambda t: [arxiv(t, lambda p: gz(p / "raw" / "node-label.csv.gz",
                                                                   "1\n" * 5 + "5000000\n" + "0\n" * 6))], 1,
                               r"node-label\.csv\.gz line 6: label 5000000 is too large"),
    # 9. values that overflow the stored dtype
    "f9_features_1e300": (lambda t: [txt(t), "--features", npy(t, "x.npy", np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 1e300],
                                                                                      [0.0, 0.0]]))], 1,
                          r"x\.npy row 2: feature value 1e\+300 in column 1 does not fit float32 \(it would be inf\)"),
    "f9_ogb_csv_features_overflow": (lambda t: [arxiv(t, lambda p: gz(p / "raw" / "node-feat.csv.gz",
                                                                         "1,2,3\n" * 4 + "1,1e39,3\n" + "0,0,0\n" * 7))], 1,
                                     r"node-feat\.csv\.gz line 5: feature value 1e\+39 in column 1 does not fit float32"),
    "f9_nan_names_the_column": (lambda t: [txt(t), "--features", npy(t, "x.npy", np.array([[1.0, 2.0], [3.0, np.nan],
                                                                                            [0.0, 0.0], [1.0, 1.0]]))], 1,
                                r"x\.npy row 1: non-finite feature value nan in column 1; expected finite numbers"),
    # 11. options that would be ignored: usage errors
    "f11_store_with_features": (lambda t: [store(t), "--features", npy(t, "x.npy", np.ones((6, 2)))], 2,
                                r"Invalid value for '--features': not used: SOURCE .*s\.h5 is a graph store"),
    "f11_store_with_labels": (lambda t: [store(t), "--labels", npy(t, "y.npy", np.zeros(6))], 2,
                              r"Invalid value for '--labels': not used: .*graph store"),
    "f11_store_with_num_nodes": (lambda t: [store(t), "--num-nodes", "10"], 2,
                                 r"Invalid value for '--num-nodes': not used: .*graph store"),
    "f11_store_directed": (lambda t: [store(t), "--directed"], 2, r"Invalid value for '--directed'"),
    "f11_ogb_with_features": (lambda t: [arxiv(t), "--features", npy(t, "x.npy", np.ones((12, 2)))], 2,
                              r"Invalid value for '--features': not used: .*an OGB folder"),
    "f11_edges_with_split": (lambda t: [txt(t), "--split", "time"], 2, r"Invalid value for '--split': not used"),
    # 12. misleading messages
    "f12_uint64_max_id_npy": (lambda t: [npy(t, "e.npy", np.array([[0, 1], [1, 2**64 - 1]], dtype=np.uint64))], 1,
                              r"e\.npy edge 1: node id 18446744073709551615 is too large; expected ids below 2\*\*63"),
    "f12_uint64_max_id_npz": (lambda t: [_npz(t, "e.npz", edge_index=np.array([[0, 1], [1, 2**64 - 1]],
                                                                                 dtype=np.uint64))], 1,
                              r"e\.npz edge_index edge 1: node id 18446744073709551615 is too large"),
    "f12_budget_1KiB": (lambda t: [txt(t), "--memory-budget", "1KiB"], 2,
                        r"Invalid value for '--memory-budget': 1\.0 KiB is too small; ingest needs at least 4\.0 MiB"),
    "f12_hetero_negative_count": (lambda t: [mag(t, lambda p: gz(p / "raw" / "num-node-dict.csv.gz",
                                                                    "author,field_of_study,institution,paper\n6,4,2,-3\n"))],
                                  1, r"num-node-dict\.csv\.gz: node type 'paper' has count -3; expected a non-negative"),
    "f12_text_id_above_2_63": (lambda t: [txt(t, "0 1\n1 9223372036854775808\n")], 1,
                               r"e\.txt line 2: node id 9223372036854775808 is too large; expected integers within int64"),
    # 13. silent acceptance
    "f13_overlapping_splits": (lambda t: [txt(t), "--splits", splits_dir(t, train="0\n1\n", valid="1\n2\n")], 1,
                               r"splits: node 1 is in both train and valid .*expected disjoint splits"),
    "f13_hetero_unknown_split_type": (lambda t: [mag(t, lambda p: gz(p / "split" / "time" / "venue" / "train.csv.gz",
                                                                        "0\n"))], 1,
                                      r"split/time/venue: node type 'venue' is not in .*num-node-dict"),
    "f13_hetero_unknown_feature_type": (lambda t: [mag(t, lambda p: gz(p / "raw" / "node-feat" / "venue" /
                                                                          "node-feat.csv.gz", "1,2,3\n"))], 1,
                                        r"node-feat/venue: node type 'venue' is not in"),
    "f13_hetero_unlisted_relation": (lambda t: [mag(t, lambda p: gz(p / "raw" / "relations" / "paper___x___paper" /
                                                                       "edge.csv.gz", "0,1\n"))], 1,
                                     r"paper___x___paper: relation not listed in .*triplet-type-list"),
    "f13_wrong_num_edge_list": (lambda t: [arxiv(t, lambda p: gz(p / "raw" / "num-edge-list.csv.gz", "25\n"))], 1,
                                r"num-edge-list\.csv\.gz: declares 25 edges, but .*edge\.csv\.gz holds 20"),
    "f13_npz_two_arrays": (lambda t: [_npz(t, "e.npz", a=np.array([[0, 1], [1, 2]]), b=np.array([[1, 2], [2, 3]]))], 1,
                           r"e\.npz: 2 arrays \(a, b\); expected one array, or one named edge_index"),
    "f13_npz_two_feature_arrays": (lambda t: [txt(t), "--features", _npz(t, "x.npz", a=np.ones((4, 2)),
                                                                          b=np.zeros((4, 2)))], 1,
                                   r"x\.npz: 2 arrays \(a, b\); expected one array, or one named node_feat"),
    # 14. -1 is "unknown", anything below is not
    "f14_label_minus_two": (lambda t: [arxiv(t, lambda p: gz(p / "raw" / "node-label.csv.gz",
                                                                "1\n-1\n-2\n" + "0\n" * 9))], 1,
                            r"node-label\.csv\.gz line 3: negative label -2; expected a class id >= 0"),
}


def snapshot(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()} | \
           {str(p.relative_to(root)): "link -> " + os.readlink(p) for p in root.rglob("*") if p.is_symlink()}


def assert_contract(result, code, pattern):
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert re.search(pattern, errors[0]), errors[0]


@pytest.mark.parametrize("case", list(CASES))
def test_fault(tmp_path, case):
    setup, code, pattern = CASES[case]
    args = [str(a) for a in setup(tmp_path)]
    (tmp_path / "out").mkdir()
    if "-o" not in args:
        args += ["-o", str(tmp_path / "out" / "g.h5")]
    before = snapshot(tmp_path)
    assert_contract(run(["ingest", *args]), code, pattern)
    assert snapshot(tmp_path) == before, "no output, temporary or work file may appear; inputs stay as they were"


# ------------------------------------------------------------------------------------------------
# what does not fit a row
# ------------------------------------------------------------------------------------------------

def test_minus_one_label_means_unknown(tmp_path):
    """14. OGB CSV labels with -1 ingest; -1 is stored as unknown."""
    p = arxiv(tmp_path, lambda p: gz(p / "raw" / "node-label.csv.gz", "1\n-1\n2\n" + "0\n" * 9))
    r = run(["ingest", p, "-o", tmp_path / "g.h5", "--json"])
    assert r.exit_code == 0, r.stderr
    with h5py.File(tmp_path / "g.h5") as f:
        assert f["nodes/labels"][:3].tolist() == [1, -1, 2]
        assert f.attrs["num_labeled"] == 11 and f.attrs["num_classes"] == 3


def _fps(path):
    with h5py.File(path) as f:
        return {k: f.attrs[k] for k in ("features_fingerprint", "labels_fingerprint", "splits_fingerprint")}


def test_fingerprints_present_and_follow_the_content(tmp_path):
    """2. features/labels/splits fingerprints: 16 hex digits, "none" when absent, changing exactly
    when their content changes; a store given as source keeps them, and gets them when it lacks them."""
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "e.npy", np.array([[0, 1, 2, 3], [1, 2, 3, 4]]))
    np.save(d / "x.npy", np.arange(10, dtype=np.float64).reshape(5, 2))
    np.save(d / "y.npy", np.array([0, 1, 1, -1, 0]))
    (d / "sp").mkdir()
    (d / "sp" / "train.txt").write_text("0\n1\n")

    def build(name, **opts):
        out = tmp_path / name
        ingest(str(d / "e.npy"), out, IngestConfig(source=SourceOptions(**opts)))
        return _fps(out)

    full = dict(features=str(d / "x.npy"), labels=str(d / "y.npy"), splits=str(d / "sp"))
    a = build("a.h5", **full)
    assert all(re.fullmatch(r"[0-9a-f]{16}", v) for v in a.values())
    assert build("bare.h5") == {k: "none" for k in a}
    assert build("again.h5", **full) == a                       # deterministic
    np.save(d / "x.npy", np.arange(10, dtype=np.float64).reshape(5, 2) + 1)
    b = build("b.h5", **full)
    assert b["features_fingerprint"] != a["features_fingerprint"] and b["labels_fingerprint"] == a["labels_fingerprint"]
    np.save(d / "y.npy", np.array([0, 1, 1, 1, 0]))
    (d / "sp" / "train.txt").write_text("0\n2\n")
    c = build("c.h5", **full)
    assert c["labels_fingerprint"] != b["labels_fingerprint"] and c["splits_fingerprint"] != b["splits_fingerprint"]
    np.save(d / "e.npy", np.array([[0, 1], [1, 2]]))
    assert build("d.h5", **full) == c                           # edges are the graph fingerprint's business
    # a store as the source keeps its fingerprints; one without them gets the same values computed
    assert run(["ingest", tmp_path / "c.h5", "-o", tmp_path / "copy.h5"]).exit_code == 0
    assert _fps(tmp_path / "copy.h5") == c
    with h5py.File(tmp_path / "c.h5", "r+") as f:
        for k in c:
            del f.attrs[k]
    assert run(["ingest", tmp_path / "c.h5", "-o", tmp_path / "copy2.h5"]).exit_code == 0
    assert _fps(tmp_path / "copy2.h5") == c


def test_fingerprint_of_a_cast_value_is_of_the_stored_bytes(tmp_path):
    """2. float64 input and the same values in float32 store the same bytes, so the same fingerprint."""
    txt(tmp_path)
    x = np.arange(8, dtype=np.float64).reshape(4, 2) / 4
    fps = []
    for dtype in (np.float64, np.float32):
        p = npy(tmp_path, f"x{np.dtype(dtype).name}.npy", x.astype(dtype))
        out = tmp_path / f"{np.dtype(dtype).name}.h5"
        ingest(str(tmp_path / "in" / "e.txt"), out, IngestConfig(source=SourceOptions(features=str(p))))
        fps.append(_fps(out)["features_fingerprint"])
    assert fps[0] == fps[1]


def test_declared_huge_node_count_builds_in_bounded_memory(tmp_path):
    """3. The CSR row pointer is written in budget-sized slabs: 8M mostly empty rows with a 4 MiB budget
    used to allocate three n-sized arrays (~190 MB) at once."""
    from gnnprep.core.memory import PeakMeter

    p = txt(tmp_path, "0 1\n5 7999999\n")
    meter = PeakMeter().start()
    if not meter.ok:
        pytest.skip("the kernel's peak-RSS counter cannot be reset here")
    ingest(str(p), tmp_path / "g.h5", IngestConfig(memory_budget=4 << 20, source=SourceOptions(num_nodes=8_000_000)))
    peak = meter.above()
    with h5py.File(tmp_path / "g.h5") as f:
        ip = f["adj/indptr"]
        assert ip.shape == (8_000_001,) and ip[1] == 1 and ip[2] == 2 and ip[5] == 2 and ip[6] == 3 and ip[-1] == 4
    assert peak is not None and peak < 48 << 20, peak


def test_graph_fingerprint_does_not_depend_on_the_budget(tmp_path, rng):
    """The CSR fingerprint hashes column ids and row pointers as two streams: the bucket layout (which
    follows the memory budget) no longer changes it."""
    from fixtures import random_edges

    src, dst = random_edges(rng, 5000, 60_000)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    prints = set()
    for budget in (4 << 20, 64 << 20):
        out = tmp_path / f"g{budget}.h5"
        ingest(str(tmp_path / "e.npy"), out, IngestConfig(memory_budget=budget))
        with h5py.File(out) as f:
            prints.add(f.attrs["fingerprint"])
    assert len(prints) == 1


def test_warnings_are_printed_and_recorded(tmp_path):
    """13. A choice ingest makes on the user's behalf is said on stderr and kept in provenance."""
    p = mag(tmp_path)
    out = tmp_path / "g.h5"
    r = run(["ingest", p, "-o", out])
    assert r.exit_code == 0, r.stderr
    assert "Warning: " in r.stderr and "get zero rows" in r.stderr
    with h5py.File(out) as f:
        assert any("get zero rows" in w for w in json.loads(f.attrs["provenance"])["warnings"])


def test_cached_ingest_of_a_folder_is_reused(tmp_path):
    """A folder's cached store lists only raw/ and split/ files as inputs (not its own temporary file,
    which made the cache look stale every time)."""
    from gnnprep.graph.ingest import ensure_graph_store

    p = arxiv(tmp_path)
    first = ensure_graph_store(str(p))
    stamp = first.stat().st_mtime_ns
    assert ensure_graph_store(str(p)) == first and first.stat().st_mtime_ns == stamp
    with h5py.File(first) as f:
        inputs = [i["path"] for i in json.loads(f.attrs["provenance"])["inputs"]]
    assert inputs and all("/raw/" in i or "/split/" in i for i in inputs)


# ------------------------------------------------------------------------------------------------
# 5. a full disk (a 3 MiB tmpfs)
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a 3 MiB tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


def _disk_inputs(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    rng = np.random.default_rng(0)
    np.save(d / "e.npy", rng.integers(0, 1000, (2, 300_000)))
    np.save(d / "x.npy", np.ones((1000, 1000), dtype=np.float32))
    np.save(d / "small.npy", rng.integers(0, 1000, (2, 2000)))
    return d


def _store_of(tmp_path, d):
    s = tmp_path / "big.h5"
    ingest(str(d / "small.npy"), s, IngestConfig(source=SourceOptions(features=str(d / "x.npy"))))
    return s


DISK_CASES = {
    # (args(d), patch the up-front check away?, pattern)
    "upfront_features": (lambda d, s: [d / "small.npy", "--features", d / "x.npy"], False,
                         r"g\.h5: no space left on device \(needed ~\d\.\d MiB, free 3\.0 MiB\)"),
    "upfront_edges": (lambda d, s: [d / "e.npy"], False, r"g\.h5: no space left on device \(needed ~\d\.\d MiB, free"),
    "upfront_store_copy": (lambda d, s: [s], False, r"g\.h5: no space left on device \(needed ~\d\.\d MiB, free"),
    "midway_spill_files": (lambda d, s: [d / "e.npy"], True, r"g\.h5: no space left on device \(free"),
    "midway_hdf5_features": (lambda d, s: [d / "small.npy", "--features", d / "x.npy"], True,
                             r"g\.h5: no space left on device \(free"),
    "midway_store_copy": (lambda d, s: [s], True, r"g\.h5: no space left on device \(free"),
}


@pytest.mark.parametrize("case", list(DISK_CASES))
def test_disk_full(tmp_path, tiny_disk, monkeypatch, case):
    make, patch, pattern = DISK_CASES[case]
    d = _disk_inputs(tmp_path)
    s = _store_of(tmp_path, d)
    if patch:  # the estimate said it fits, the disk disagrees: the writer's own failure is reported
        monkeypatch.setattr("gnnprep.graph.ingest.check_free_space", lambda *a, **k: None)
    before = snapshot(tmp_path / "src") | {"big.h5": hashlib.sha256(s.read_bytes()).hexdigest()}
    r = run(["ingest", *[str(a) for a in make(d, s)], "-o", tiny_disk / "g.h5"])
    assert_contract(r, 1, pattern)
    assert list(tiny_disk.iterdir()) == [], "temporary and work files are removed"
    assert snapshot(tmp_path / "src") | {"big.h5": hashlib.sha256(s.read_bytes()).hexdigest()} == before
