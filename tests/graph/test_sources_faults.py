"""Issue 25, acceptance 2: malformed GraphSAINT folders, save_npz matrices and Matrix Market files.

Every case runs ``gnnprep ingest`` and must exit 1 (2 for an option the source would ignore) with
exactly one ``Error:`` line naming the file and the position (line, member entry, JSON line/column or
node), no traceback, nothing on stdout, and every file under tmp_path left byte-identical.
``from_arrays`` faults raise one GnnprepError naming the argument and position.
"""

from __future__ import annotations

import gzip
import hashlib
import json

import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import assert_one_error, run

from gnnprep.core.errors import GnnprepError
from gnnprep.graph import from_arrays


def _in(t):
    d = t / "in"
    d.mkdir(exist_ok=True)
    return d


def mtx(t, body, header="%%MatrixMarket matrix coordinate pattern general", name="m.mtx"):
    p = _in(t) / name
    p.write_text((header + "\n" if header else "") + body)
    return p


def mtx_gz_truncated(t):
    p = _in(t) / "m.mtx.gz"
    text = "%%MatrixMarket matrix coordinate pattern general\n3000 3000 3000\n" + \
        "".join(f"{i + 1} {(i * 7) % 3000 + 1}\n" for i in range(3000))
    data = gzip.compress(text.encode(), mtime=0)
    p.write_bytes(data[: len(data) // 2])
    return p


def npz(t, name="a.npz", **members):
    p = _in(t) / name
    np.savez(p, **members)
    return p


def csr_members(n=3, indptr=(0, 1, 2, 3), indices=(1, 2, 0), fmt=b"csr", shape=None):
    indices = np.asarray(indices)
    return dict(format=np.array(fmt), shape=np.array(shape or (n, n)), indptr=np.asarray(indptr),
                indices=indices, data=np.ones(len(indices)))


def saint(t, class_map=None, role=None, feats_rows=3, adj=None, raw_class_map=None, raw_role=None):
    d = _in(t) / "saint"
    d.mkdir()
    if adj is None:
        sp.save_npz(d / "adj_full.npz", sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])))
    else:
        np.savez(d / "adj_full.npz", **adj)
    np.save(d / "feats.npy", np.ones((feats_rows, 2)))
    (d / "class_map.json").write_text(raw_class_map if raw_class_map is not None else
                                      json.dumps(class_map or {"0": 0, "1": 1, "2": 0}))
    (d / "role.json").write_text(raw_role if raw_role is not None else
                                 json.dumps(role or {"tr": [0], "va": [1], "te": [2]}))
    return d


P = "%%MatrixMarket matrix coordinate pattern general\n"
CASES = {
    # Matrix Market: the header and size line
    "mtx_no_header": (lambda t: [mtx(t, "3 3 1\n1 2\n", header="")], 1,
                      r"m\.mtx line 1: expected the header '%%MatrixMarket matrix coordinate"),
    "mtx_array_format": (lambda t: [mtx(t, "3 3\n1\n", header="%%MatrixMarket matrix array real general")], 1,
                         r"m\.mtx line 1: format 'array' is not supported .*expected 'coordinate'"),
    "mtx_complex_field": (lambda t: [mtx(t, "3 3 1\n1 2 1 0\n",
                                         header="%%MatrixMarket matrix coordinate complex general")], 1,
                          r"m\.mtx line 1: field 'complex' is not supported; expected pattern, integer, real"),
    "mtx_skew_symmetric": (lambda t: [mtx(t, "3 3 1\n2 1 1\n",
                                          header="%%MatrixMarket matrix coordinate real skew-symmetric")], 1,
                           r"m\.mtx line 1: symmetry 'skew-symmetric' is not supported; expected general or symmetric"),
    "mtx_short_size_line": (lambda t: [mtx(t, "% c\n3 3\n1 2\n")], 1,
                            r"m\.mtx line 3: expected the size line 'rows cols nnz'.*found '3 3'"),
    "mtx_not_square": (lambda t: [mtx(t, "3 4 1\n1 2\n")], 1,
                       r"m\.mtx line 2: a 3 x 4 matrix; expected a square adjacency matrix"),
    "mtx_no_size_line": (lambda t: [mtx(t, "% only comments\n")], 1,
                         r"m\.mtx line 3: end of file; expected the size line"),
    # Matrix Market: the entries
    "mtx_index_zero": (lambda t: [mtx(t, "3 3 2\n1 2\n0 1\n")], 1, r"m\.mtx line 4: row index 0 is outside 1\.\.3"),
    "mtx_index_beyond_size": (lambda t: [mtx(t, "3 3 2\n1 2\n2 4\n")], 1,
                              r"m\.mtx line 4: column index 4 is outside 1\.\.3 \(the size line, line 2\); "
                              r"indices are 1-based"),
    "mtx_integer_negative_index": (lambda t: [mtx(t, "3 3 1\n-1 2 5\n",
                                                  header="%%MatrixMarket matrix coordinate integer general")], 1,
                                   r"m\.mtx line 3: row index -1 is outside 1\.\.3"),
    "mtx_fewer_entries": (lambda t: [mtx(t, "3 3 3\n1 2\n2 3\n")], 1,
                          r"m\.mtx: 2 entries, but the size line \(line 2\) declares 3"),
    "mtx_more_entries": (lambda t: [mtx(t, "3 3 2\n1 2\n2 3\n3 1\n")], 1,
                         r"m\.mtx line 5: more entries than the 2 declared on the size line \(line 2\)"),
    "mtx_value_not_a_number": (lambda t: [mtx(t, "3 3 2\n1 2 0.5\n2 3 abc\n",
                                              header="%%MatrixMarket matrix coordinate real general")], 1,
                               r"m\.mtx line 4: 'abc' is not a number"),
    "mtx_real_missing_value": (lambda t: [mtx(t, "3 3 2\n1 2 0.5\n2 3\n",
                                              header="%%MatrixMarket matrix coordinate real general")], 1,
                               r"m\.mtx line 4: expected 3 columns, found 2"),
    "mtx_real_fractional_index": (lambda t: [mtx(t, "3 3 1\n1.5 2 1.0\n",
                                                 header="%%MatrixMarket matrix coordinate real general")], 1,
                                  r"m\.mtx line 3: index 1\.5 is not an integer row/column index"),
    "mtx_gz_truncated": (lambda t: [mtx_gz_truncated(t)], 1, r"m\.mtx\.gz: truncated or corrupt gzip data (after line \d|within its first \d+ MiB of text)"),
    # save_npz matrices
    "npz_bsr": (lambda t: [npz(t, **csr_members(fmt=b"bsr"))], 1,
                r"a\.npz: member 'format' is 'bsr'; expected csr, csc or coo"),
    "npz_not_square": (lambda t: [npz(t, **csr_members(shape=(3, 4)))], 1,
                       r"a\.npz: member 'shape' is \(3, 4\); expected a square adjacency matrix"),
    "npz_indptr_decreases": (lambda t: [npz(t, **csr_members(indptr=(0, 2, 1, 3)))], 1,
                             r"a\.npz member 'indptr' entry 2: 1 after 2; expected a non-decreasing pointer"),
    "npz_indptr_length": (lambda t: [npz(t, **csr_members(indptr=(0, 1, 3)))], 1,
                          r"a\.npz: member 'indptr' has 3 entries; expected 4"),
    "npz_indptr_end": (lambda t: [npz(t, **csr_members(indptr=(0, 1, 2, 2)))], 1,
                       r"a\.npz member 'indptr' entry 3: 2; expected 3 \(the length of 'indices'\)"),
    "npz_indptr_start": (lambda t: [npz(t, **csr_members(indptr=(1, 1, 2, 3)))], 1,
                         r"a\.npz member 'indptr' entry 0: 1; expected 0"),
    "npz_index_beyond": (lambda t: [npz(t, **csr_members(indices=(1, 7, 0)))], 1,
                         r"a\.npz member 'indices' entry 1: index 7 is beyond the node count 3"),
    "npz_coo_negative": (lambda t: [npz(t, format=np.array(b"coo"), shape=np.array((3, 3)), row=np.array([0, -2]),
                                        col=np.array([1, 2]), data=np.ones(2))], 1,
                         r"a\.npz member 'row' entry 1: negative index -2"),
    "npz_coo_lengths": (lambda t: [npz(t, format=np.array(b"coo"), shape=np.array((3, 3)), row=np.array([0, 1, 2]),
                                       col=np.array([1, 2]), data=np.ones(2))], 1,
                        r"a\.npz: member 'row' has 3 entries and 'col' 2; expected the same length"),
    "npz_float_indices": (lambda t: [npz(t, **csr_members(indices=(1.0, 2.0, 0.0)))], 1,
                          r"a\.npz: member 'indices' has dtype float64; expected integers"),
    "npz_missing_member": (lambda t: [npz(t, **{k: v for k, v in csr_members().items() if k != "indptr"})], 1,
                           r"a\.npz: missing array 'indptr'"),
    # GraphSAINT folders
    "saint_multi_label": (lambda t: [saint(t, class_map={"0": [1, 0], "1": [1, 1], "2": [0, 1]})], 1,
                          r"class_map\.json: entry for node 1: 2 classes set; multi-label class maps .* are not "
                          r"supported"),
    "saint_class_map_string_value": (lambda t: [saint(t, raw_class_map='{"0": 1,\n "1": "a", "2": 0}')], 1,
                                     r"class_map\.json line 2 column 2: expected \"<node id>\": <class id>.*found "
                                     r"'\"1\": \"a\""),
    "saint_class_map_truncated": (lambda t: [saint(t, raw_class_map='{"0": 1, "1": 0')], 1,
                                  r"class_map\.json line 1 column 16: end of file; expected ',' or '}'"),
    "saint_class_map_key": (lambda t: [saint(t, class_map={"0": 0, "x1": 1})], 1,
                            r"class_map\.json: key 'x1' is not a node id"),
    "saint_class_map_node_beyond": (lambda t: [saint(t, class_map={"0": 0, "3": 1})], 1,
                                    r"class_map\.json: entry for node 3: node id 3 is beyond the node count 3"),
    "saint_class_map_twice": (lambda t: [saint(t, raw_class_map='{"0": 0, "1": 1, "0": 2}')], 1,
                              r"class_map\.json: entry for node 0: node 0 appears twice"),
    "saint_class_map_ragged": (lambda t: [saint(t, class_map={"0": [1, 0], "1": [0, 1, 0]})], 1,
                               r"class_map\.json: entry for node 1: a list of 3 entries; expected 2"),
    "saint_role_id_beyond": (lambda t: [saint(t, role={"tr": [0, 9], "va": [1]})], 1,
                             r"role\.json: list 'tr' entry 1: node id 9 is beyond the node count 3"),
    "saint_role_not_a_list": (lambda t: [saint(t, role={"tr": 0})], 1,
                              r"role\.json: key 'tr' holds 0; expected a list of node ids"),
    "saint_role_trailing": (lambda t: [saint(t, raw_role='{"tr": [0]} x')], 1,
                            r"role\.json line 1 column 13: expected nothing after the closing '}'"),
    "saint_role_overlap": (lambda t: [saint(t, role={"tr": [0, 1], "va": [1]})], 1,
                           r"role\.json: node 1 is in both train and valid"),
    "saint_feats_rows": (lambda t: [saint(t, feats_rows=5)], 1, r"feats\.npy: 5 feature rows; expected 3"),
    "saint_adj_bad_format": (lambda t: [saint(t, adj=csr_members(fmt=b"dia"))], 1,
                             r"adj_full\.npz: member 'format' is 'dia'"),
    # options the source would ignore
    "mtx_with_num_nodes": (lambda t: [mtx(t, "3 3 1\n1 2\n"), "--num-nodes", "3"], 2,
                           r"Invalid value for '--num-nodes': not used: SOURCE .*m\.mtx is a sparse matrix"),
    "npz_with_index_base": (lambda t: [npz(t, **csr_members()), "--index-base", "1"], 2,
                            r"Invalid value for '--index-base': not used: .*a sparse matrix"),
    "saint_with_features": (lambda t: [saint(t), "--features", _in(t) / "saint" / "feats.npy"], 2,
                            r"Invalid value for '--features': not used: .*a GraphSAINT folder"),
}


def snapshot(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_fault(tmp_path, case):
    setup, code, pattern = CASES[case]
    args = [str(a) for a in setup(tmp_path)]
    (tmp_path / "out").mkdir()
    args += ["-o", str(tmp_path / "out" / "g.h5")]
    before = snapshot(tmp_path)
    r = run(["ingest", *args])
    assert_one_error(r, code, pattern)
    assert snapshot(tmp_path) == before, "no output, temporary or work file may appear; inputs stay as they were"


E = np.array([[0, 1, 2], [1, 2, 0]])
ARRAY_CASES = {
    "edge_index_shape": (lambda o: from_arrays(np.zeros((3, 4), dtype=np.int64), output=o),
                         r"edge_index: shape \(3, 4\); expected \[2, m\]"),
    "edge_index_float": (lambda o: from_arrays(E.astype(np.float32), output=o),
                         r"edge_index\[0\]: dtype float32; expected integer node ids"),
    "edge_beyond_num_nodes": (lambda o: from_arrays(E, num_nodes=2, output=o),
                              r"edge_index\[0\] entry 2: node id 2 is beyond the node count 2 \(from num_nodes\)"),
    "negative_id": (lambda o: from_arrays(np.array([[0, -1], [1, 0]]), num_nodes=3, output=o),
                    r"edge_index\[0\] entry 1: negative node id -1"),
    "x_rows": (lambda o: from_arrays(E, x=np.ones((4, 2)), num_nodes=3, output=o),
               r"x: 4 rows; expected 3 \(from num_nodes\)"),
    "x_nan": (lambda o: from_arrays(E, x=np.array([[1.0], [np.nan], [0.0]]), output=o),
              r"x row 1: non-finite feature value nan"),
    "y_fraction": (lambda o: from_arrays(E, y=np.array([0, 1.5, 1]), output=o),
                   r"y entry 1: label 1\.5 is not a class id"),
    "mask_length": (lambda o: from_arrays(E, splits={"train_mask": np.array([True, False])}, num_nodes=3, output=o),
                    r"splits\['train'\]: a boolean mask of shape \(2,\); expected \[3\]"),
    "split_key": (lambda o: from_arrays(E, splits={"dev": np.array([0])}, output=o),
                  r"splits: key 'dev'; expected train, valid, test"),
    "split_overlap": (lambda o: from_arrays(E, splits={"train": np.array([0, 1]), "test": np.array([1])}, output=o),
                      r"splits: node 1 is in both train and test"),
}


@pytest.mark.parametrize("case", list(ARRAY_CASES))
def test_from_arrays_fault(tmp_path, case):
    call, pattern = ARRAY_CASES[case]
    with pytest.raises(GnnprepError, match=pattern) as e:
        call(tmp_path / "g.h5")
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []
