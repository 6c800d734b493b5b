"""Dogfood pass 25 of ``gnnprep ingest``: inputs that were taken without a word (a folder where a
file is expected, two files for one split, an empty split) and a message that named line 0."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest
from fixtures import assert_one_error, run
from ogb_layouts import make_arxiv_like, make_papers100m_like


@pytest.fixture
def edges(tmp_path):
    """A 12-node edge list with a splits folder of three text files."""
    rng = np.random.default_rng(0)
    e = tmp_path / "e.tsv"
    e.write_text("".join(f"{u}\t{v}\n" for u, v in rng.integers(0, 12, (40, 2))) + "0\t11\n")
    splits = tmp_path / "splits"
    splits.mkdir()
    for name, ids in (("train", range(0, 6)), ("valid", range(6, 9)), ("test", range(9, 12))):
        (splits / f"{name}.csv").write_text("".join(f"{i}\n" for i in ids))
    return e, splits


def _left(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_split_file_that_is_a_folder_is_refused(tmp_path, edges):
    # before: the train split was silently left out (exit 0, a store without /splits/train)
    e, splits = edges
    (splits / "train.csv").unlink()
    (splits / "train.csv").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    r = run(["ingest", e, "-o", out / "g.h5", "--splits", splits, "--json"])
    assert_one_error(r, 1, r"splits/train\.csv: is a folder; expected a file of train node ids")
    assert _left(out) == []


def test_two_files_for_one_split_are_refused(tmp_path, edges):
    # before: train.csv was read and train.npy ignored, whichever held the split meant
    e, splits = edges
    np.save(splits / "train.npy", np.arange(3))
    out = tmp_path / "out"
    out.mkdir()
    r = run(["ingest", e, "-o", out / "g.h5", "--splits", splits])
    assert_one_error(r, 1, r"splits: train\.csv and train\.npy both name the train split; expected one file per split")
    assert _left(out) == []


def test_an_empty_split_is_said(tmp_path, edges):
    # before: stored without a word; train then refused the artifact two commands later
    e, splits = edges
    (splits / "valid.csv").write_text("")
    r = run(["ingest", e, "-o", tmp_path / "g.h5", "--splits", splits, "--json"])
    assert r.exit_code == 0, r.stderr
    said = f"{splits}: the valid split is empty (no node ids)"
    assert json.loads(r.stdout)["warnings"] == [said]
    assert f"Warning: {said}" in r.stderr


@pytest.mark.parametrize("name", ["node-feat.csv.gz", "node-label.csv.gz", "edge.csv.gz"])
def test_an_ogb_table_that_is_a_folder_is_refused(tmp_path, name):
    # before: node-feat.csv.gz or node-label.csv.gz as a folder gave a store without features or
    # labels (exit 0); edge.csv.gz as a folder said "not an OGB raw layout"
    t = make_arxiv_like(tmp_path / "data")
    (t.path / "raw" / name).unlink()
    (t.path / "raw" / name).mkdir()
    out = tmp_path / "out"
    out.mkdir()
    r = run(["ingest", t.path, "-o", out / "g.h5"])
    assert_one_error(r, 1, rf"raw/{name}: is a folder; expected OGB's {name.split('.')[0]} table")
    assert _left(out) == []


def test_an_ogb_split_file_that_is_a_broken_link_is_refused(tmp_path):
    t = make_arxiv_like(tmp_path / "data")
    train = t.path / "split" / "time" / "train.csv.gz"
    train.unlink()
    train.symlink_to(tmp_path / "nowhere.csv.gz")
    r = run(["ingest", t.path, "-o", tmp_path / "g.h5"])
    assert_one_error(r, 1, r"split/time/train\.csv\.gz: is a broken link \(its target does not exist\); expected a file "
                           r"of train node ids")


def test_a_papers100m_label_file_that_is_a_folder_is_refused(tmp_path):
    # before: a store without labels, exit 0
    t = make_papers100m_like(tmp_path / "data")
    labels = t.path / "raw" / "node-label.npz"
    labels.unlink()
    labels.mkdir()
    r = run(["ingest", t.path, "-o", tmp_path / "g.h5"])
    assert_one_error(r, 1, r"raw/node-label\.npz: is a folder; expected the node labels")


def test_an_intact_ogb_folder_still_ingests(tmp_path):
    t = make_arxiv_like(tmp_path / "data")
    shutil.copy(t.path / "raw" / "edge.csv.gz", tmp_path / "unrelated.csv.gz")
    r = run(["ingest", t.path, "-o", tmp_path / "g.h5", "--json"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["num_features"] == t.node_feat.shape[1] and d["warnings"] == []


def test_a_gzip_mtx_cut_before_its_first_line_says_so(tmp_path):
    # before: "truncated or corrupt data after line 0"
    whole = gzip.compress(b"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3\n", mtime=0)
    path = tmp_path / "a.mtx.gz"
    path.write_bytes(whole[:30])
    r = run(["ingest", path, "-o", tmp_path / "g.h5"])
    assert_one_error(r, 1, r"a\.mtx\.gz: truncated or corrupt data before its first line was read")
