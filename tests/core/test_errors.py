"""Malformed inputs: each exits 1 with one ``Error:`` line naming the file and line/field, and leaves
no output (and no temporary file) behind."""

import gzip

import h5py
import numpy as np
import pytest
from fixtures import run


def gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def ogb_folder(root, n=6, feat=None, labels=None, edges="0,1\n1,2\n2,3\n"):
    raw = root / "raw"
    gz(raw / "edge.csv.gz", edges)
    gz(raw / "num-node-list.csv.gz", f"{n}\n")
    gz(raw / "num-edge-list.csv.gz", f"{edges.count(chr(10))}\n")
    gz(raw / "node-feat.csv.gz", feat if feat is not None else "".join(f"{i}.0,1.5\n" for i in range(n)))
    gz(raw / "node-label.csv.gz", labels if labels is not None else "".join(f"{i % 2}\n" for i in range(n)))
    gz(root / "split" / "s" / "train.csv.gz", "0\n1\n")
    return root


def edge_file(tmp_path, text, name="e.txt"):
    p = tmp_path / name
    p.write_text(text)
    return p


CASES = {
    "non_numeric": (lambda t: [edge_file(t, "0 1\n1 2\n2 abc\n")], r"e\.txt line 3: 'abc' is not an integer node id"),
    "column_count": (lambda t: [edge_file(t, "0 1\n1 2 3\n")], r"e\.txt line 2: expected 2 columns, found 3"),
    "negative_id": (lambda t: [edge_file(t, "0 1\n-4 2\n")], r"e\.txt line 2: negative node id -4"),
    "beyond_node_count": (lambda t: [edge_file(t, "0 1\n\n3 12\n"), "--num-nodes", "10"],
                          r"e\.txt line 3: node id 12 is beyond the node count 10 \(from --num-nodes\)"),
    "index_base_one_with_zero": (lambda t: [edge_file(t, "1 2\n0 2\n"), "--index-base", "1"],
                                 r"e\.txt line 2: negative node id"),
    "nan_features_npy": (lambda t: [edge_file(t, "0 1\n"), "--features", _npy(t, "x.npy", _nan_feats())],
                         r"x\.npy row 1: non-finite feature value nan"),
    "inf_features_ogb_csv": (lambda t: [ogb_folder(t / "d", feat="1,2\n3,4\n5,inf\n1,1\n1,1\n1,1\n")],
                             r"node-feat\.csv\.gz line 3: non-finite feature value 'inf'"),
    "feature_rows_npy": (lambda t: [edge_file(t, "0 1\n"), "--num-nodes", "4", "--features",
                                    _npy(t, "x.npy", np.ones((3, 2)))], r"x\.npy: 3 feature rows; expected 4"),
    "feature_rows_ogb_csv": (lambda t: [ogb_folder(t / "d", feat="1,2\n" * 5)],
                             r"node-feat\.csv\.gz: 5 feature rows; expected 6 \(from .*num-node-list"),
    "labels_length": (lambda t: [edge_file(t, "0 1\n"), "--num-nodes", "4", "--labels", _npy(t, "y.npy", np.zeros(5))],
                      r"y\.npy: 5 labels; expected 4"),
    "labels_ogb_csv_length": (lambda t: [ogb_folder(t / "d", labels="1\n" * 7)],
                              r"node-label\.csv\.gz: more than 6 labels rows; expected 6"),
    "split_out_of_range": (lambda t: [edge_file(t, "0 1\n1 2\n"), "--splits", _split(t, "0\n7\n")],
                           r"train\.txt line 2: node id 7 is beyond the node count 3"),
    "empty_file": (lambda t: [edge_file(t, "")], r"e\.txt: empty file"),
    "truncated_gzip": (lambda t: [_truncated_gz(t)], r"e\.csv\.gz: truncated or corrupt gzip"),
    "bad_npy_shape": (lambda t: [_npy(t, "e.npy", np.zeros((3, 4), dtype=np.int64))],
                      r"e\.npy: edge array of shape \(3, 4\); expected \[2, m\] or \[m, 2\]"),
    "missing_ogbn": (lambda t: ["ogbn-arxiv", "--root", t / "nodata"], r"ogbn-arxiv: not found; looked in .*nodata/ogbn_arxiv"),
    "missing_file": (lambda t: [t / "nope.txt"], r"nope\.txt: no such file or folder"),
}


def _nan_feats():
    x = np.ones((2, 3), dtype=np.float32)
    x[1, 2] = np.nan
    return x


def _npy(t, name, arr):
    p = t / name
    np.save(p, arr)
    return p


def _split(t, text):
    d = t / "splits"
    d.mkdir()
    (d / "train.txt").write_text(text)
    return d


def _truncated_gz(t):
    p = t / "e.csv.gz"
    gz(p, "".join(f"{i},{i + 1}\n" for i in range(20000)))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


def assert_one_error_line(result, pattern):
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr
    import re

    assert re.search(pattern, lines[0]), lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_input_exits_1_with_one_line(tmp_path, case):
    make, pattern = CASES[case]
    args = make(tmp_path)
    out = tmp_path / "out" / "g.h5"
    out.parent.mkdir()
    result = run(["ingest", *args, "-o", out])
    assert_one_error_line(result, pattern)
    assert list(out.parent.iterdir()) == [], "no output or temporary file may be left behind"


def test_corrupt_hdf5_given_to_info(tmp_path):
    p = tmp_path / "g.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.arange(100000))
        f.attrs["format"] = "gnnprep.graph"
    p.write_bytes(p.read_bytes()[:3000])
    assert_one_error_line(run(["info", p]), r"g\.h5: (cannot open HDF5 file|not an HDF5 file)")
    q = tmp_path / "junk.h5"
    q.write_bytes(b"\x00" * 100)
    assert_one_error_line(run(["info", q]), r"junk\.h5: not an HDF5 file")


def test_non_gnnprep_hdf5_given_to_info(tmp_path):
    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.arange(3))
    assert_one_error_line(run(["info", p]), r"other\.h5: root attribute 'format' is None; expected one of gnnprep\.graph")


def test_usage_error_exits_2(tmp_path):
    assert run(["ingest", "sample"]).exit_code == 2  # missing -o
    assert run(["frobnicate"]).exit_code == 2
