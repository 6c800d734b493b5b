"""Dogfood pass 25b of ``gnnprep ingest``: an OGB folder without its labels, features or splits was
ingested into a store without them and not a word said; a GraphSAINT ``class_map.json`` fault showed
a literal ``\\n`` in the text it quoted."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import assert_one_error, run
from ogb_layouts import make_arxiv_like, make_mag_like, make_papers100m_like


def _ingest(tmp_path, folder):
    r = run(["ingest", folder, "-o", tmp_path / "g.h5", "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("missing, lacks, field", [
    ("raw/node-label.csv.gz", "labels (train needs them)", "num_classes"),
    ("raw/node-feat.csv.gz", "node features (precompute needs them)", "num_features"),
    ("split", "splits (train needs a train and a validation split)", None),
])
def test_an_ogb_folder_without_labels_features_or_splits_says_so(tmp_path, missing, lacks, field):
    # before: exit 0, num_classes 0 (or no features, no splits), warnings []
    t = make_arxiv_like(tmp_path / "data")
    p = t.path / missing
    shutil.rmtree(p) if p.is_dir() else p.unlink()
    d, stderr = _ingest(tmp_path, t.path)
    said = f"{p}: not there; the store has no {lacks}"
    assert d["warnings"] == [said]
    assert stderr == f"Warning: {said}\n"
    if field:
        assert d[field] == 0


def test_an_ogb_split_folder_without_split_files_says_so(tmp_path):
    t = make_arxiv_like(tmp_path / "data")
    shutil.rmtree(t.path / "split" / "time")
    (t.path / "split" / "time").mkdir()
    d, _ = _ingest(tmp_path, t.path)
    assert d["warnings"] == [f"{t.path / 'split'}: holds no train, valid or test file; the store has no splits "
                             "(train needs a train and a validation split)"]


def test_a_papers100m_folder_without_labels_or_features_says_so(tmp_path):
    t = make_papers100m_like(tmp_path / "data")
    assert _ingest(tmp_path, t.path)[0]["warnings"] == []   # intact: nothing to say
    (t.path / "raw" / "node-label.npz").unlink()
    data = t.path / "raw" / "data.npz"
    with np.load(data) as z:
        arrays = {k: z[k] for k in z.files if k != "node_feat"}
    np.savez(data, **arrays)
    (tmp_path / "g.h5").unlink()
    d, stderr = _ingest(tmp_path, t.path)
    assert d["warnings"] == [f"{data}: holds no node_feat; the store has no node features (precompute needs them)",
                             f"{t.path / 'raw' / 'node-label.npz'}: not there; the store has no labels "
                             "(train needs them)"]
    assert (d["num_features"], d["num_classes"]) == (0, 0)
    assert stderr.count("Warning: ") == 2


def test_a_mag_folder_without_labels_says_so(tmp_path):
    t = make_mag_like(tmp_path / "data")
    shutil.rmtree(t.path / "raw" / "node-label")
    d, _ = _ingest(tmp_path, t.path)
    assert f"{t.path / 'raw' / 'node-label'}: no node type's node-label.csv.gz there; the store has no labels " \
           "(train needs them)" in d["warnings"]


def test_a_class_map_fault_quotes_the_text_without_a_newline(tmp_path):
    # before: ... found '"1": "x"}\n' (a literal backslash-n from the file's last line)
    d = tmp_path / "saint"
    d.mkdir()
    sp.save_npz(d / "adj_full.npz", sp.csr_matrix(np.array([[0, 1], [1, 0]])))
    (d / "class_map.json").write_text('{"0": 1, "1": "x"}\n')
    r = run(["ingest", d, "-o", tmp_path / "g.h5"])
    assert_one_error(r, 1, r"""class_map\.json line 1 column 10: expected .*, found '"1": "x"}'$""")
    assert "\\n" not in r.stderr
    (d / "class_map.json").write_text('{"0": 1,\n "1": "x",\n "2": 0}\n')   # the fragment ends at its line
    r = run(["ingest", d, "-o", tmp_path / "g.h5"])
    assert_one_error(r, 1, r"""class_map\.json line 2 column 2: expected .*, found '"1": "x",'$""")
