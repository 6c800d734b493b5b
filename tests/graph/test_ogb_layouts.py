"""The fixtures in ogb_layouts.py are read back by the real ogb exactly as written, offline."""

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ogb_layouts import (
    MAG_RELATIONS,
    load_with_ogb,
    make_arxiv_like,
    make_mag_like,
    make_papers100m_like,
    make_products_like,
)


def _assert_split(got, truth):
    assert set(got) == {"train", "valid", "test"}
    for k in ("train", "valid", "test"):
        np.testing.assert_array_equal(np.asarray(got[k]).astype(np.int64), truth[k])
    all_ids = np.concatenate([truth[k] for k in ("train", "valid", "test")])
    assert len(np.unique(all_ids)) == len(all_ids)          # disjoint
    assert all(len(truth[k]) > 0 for k in truth)


def _assert_feat(got, truth):
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, truth)


def test_arxiv_like(tmp_path):
    t = make_arxiv_like(tmp_path, seed=1)
    assert t.path == tmp_path / "ogbn_arxiv" and (t.path / "RELEASE_v1.txt").is_file()
    graph, labels, split = load_with_ogb(tmp_path, "ogbn-arxiv")
    assert graph["num_nodes"] == t.num_nodes
    np.testing.assert_array_equal(graph["edge_index"], t.edge_index)   # stored once, as written
    assert graph["edge_index"].dtype == np.int64
    _assert_feat(graph["node_feat"], t.node_feat)
    np.testing.assert_array_equal(graph["node_year"][:, 0], t.node_year)
    np.testing.assert_array_equal(labels[:, 0], t.labels)
    _assert_split(split, t.split)
    # the split follows the years, as the real 'time' split does
    assert (t.node_year[t.split["train"]] <= 2017).all()
    assert (t.node_year[t.split["valid"]] == 2018).all()
    assert (t.node_year[t.split["test"]] == 2019).all()
    # the quirks are really there
    ei = t.edge_index
    assert (ei[0] == ei[1]).sum() == 1
    cols = [tuple(c) for c in ei.T]
    assert len(set(cols)) < len(cols)
    assert any((v, u) in set(cols) for (u, v) in cols if u != v)
    iso = t.quirks["isolated"][0]
    assert not (ei == iso).any()
    assert not (t.path / "processed").exists()     # ogb ran on a copy


def test_products_like(tmp_path):
    t = make_products_like(tmp_path, seed=2)
    graph, labels, split = load_with_ogb(tmp_path, "ogbn-products")
    assert graph["num_nodes"] == t.num_nodes
    got = graph["edge_index"]
    assert got.shape == (2, 2 * t.num_edges)
    # ogb interleaves each stored (u, v) with its inverse (v, u)
    np.testing.assert_array_equal(got[:, 0::2], t.edge_index)
    np.testing.assert_array_equal(got[:, 1::2], t.edge_index[::-1])
    want = {tuple(c) for c in t.edge_index.T} | {tuple(c) for c in t.edge_index[::-1].T}
    assert {tuple(c) for c in got.T} == want
    # each undirected pair is stored exactly once, without self-loops
    pairs = {(min(u, v), max(u, v)) for u, v in t.edge_index.T}
    assert len(pairs) == t.num_edges and (t.edge_index[0] != t.edge_index[1]).all()
    _assert_feat(graph["node_feat"], t.node_feat)
    np.testing.assert_array_equal(labels[:, 0], t.labels)
    _assert_split(split, t.split)
    assert "node_year" not in graph


def test_papers100m_like(tmp_path):
    t = make_papers100m_like(tmp_path, seed=3)
    with np.load(t.path / "raw" / "data.npz") as z:
        assert set(z.files) == {"edge_index", "node_feat", "num_nodes_list", "num_edges_list", "node_year"}
    import zipfile
    with zipfile.ZipFile(t.path / "raw" / "data.npz") as zf:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())
    graph, labels, split = load_with_ogb(tmp_path, "ogbn-papers100M")
    assert graph["num_nodes"] == t.num_nodes
    np.testing.assert_array_equal(graph["edge_index"], t.edge_index)
    _assert_feat(graph["node_feat"], t.node_feat)
    np.testing.assert_array_equal(graph["node_year"][:, 0], t.node_year)
    assert labels.shape == (t.num_nodes, 1) and labels.dtype.kind == "f"
    unknown = t.labels == -1
    assert unknown.any() and (~unknown).any()
    assert np.isnan(labels[unknown, 0]).all()
    assert not np.isnan(labels[~unknown, 0]).any()
    np.testing.assert_array_equal(labels[~unknown, 0].astype(np.int64), t.labels[~unknown])
    _assert_split(split, t.split)
    all_split = np.concatenate(list(t.split.values()))
    assert (t.labels[all_split] >= 0).all()           # only labeled nodes are in a split


def test_mag_like(tmp_path):
    t = make_mag_like(tmp_path, seed=4)
    assert (t.path / "RELEASE_v2.txt").is_file()
    graph, labels, split = load_with_ogb(tmp_path, "ogbn-mag")
    assert graph["num_nodes_dict"] == t.num_nodes_dict
    assert sorted(graph["edge_index_dict"]) == sorted(MAG_RELATIONS) == t.relations
    for rel in MAG_RELATIONS:
        np.testing.assert_array_equal(graph["edge_index_dict"][rel], t.edge_index_dict[rel])
        np.testing.assert_array_equal(graph["edge_reltype"][rel][:, 0], t.edge_reltype_dict[rel])
        ei = t.edge_index_dict[rel]
        assert ei.shape[1] > 0
        assert ei[0].max() < t.num_nodes_dict[rel[0]] and ei[1].max() < t.num_nodes_dict[rel[2]]
    assert set(graph["node_feat_dict"]) == {"paper"}
    _assert_feat(graph["node_feat_dict"]["paper"], t.node_feat)
    np.testing.assert_array_equal(graph["node_year"]["paper"][:, 0], t.node_year)
    assert set(labels) == {"paper"}
    np.testing.assert_array_equal(labels["paper"][:, 0], t.labels)
    assert {k: set(v) for k, v in split.items()} == {k: {"paper"} for k in ("train", "valid", "test")}
    _assert_split({k: v["paper"] for k, v in split.items()}, t.split)
    # homogeneous view helpers
    off = t.offsets
    assert off == {"author": 0, "field_of_study": 30, "institution": 50, "paper": 56}
    g = t.global_edge_index()
    assert g.shape[1] == sum(e.shape[1] for e in t.edge_index_dict.values()) and g.max() < t.num_nodes
    assert (t.global_labels() >= 0).sum() == t.num_nodes_dict["paper"]


def test_fixtures_are_deterministic(tmp_path):
    a = make_arxiv_like(tmp_path / "a", seed=7)
    b = make_arxiv_like(tmp_path / "b", seed=7)
    for name in ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz"):
        assert (a.path / "raw" / name).read_bytes() == (b.path / "raw" / name).read_bytes()
    c = make_arxiv_like(tmp_path / "c", seed=8)
    assert not np.array_equal(a.edge_index, c.edge_index)


def test_layout_mistake_fails_loudly_instead_of_downloading(tmp_path):
    t = make_arxiv_like(tmp_path)
    (t.path / "raw" / "edge.csv.gz").unlink()
    with pytest.raises(RuntimeError, match="download"):
        load_with_ogb(tmp_path, "ogbn-arxiv")


def test_missing_release_file_never_prompts(tmp_path):
    t = make_products_like(tmp_path)
    (t.path / "RELEASE_v1.txt").unlink()
    with pytest.raises(RuntimeError, match="input"):
        load_with_ogb(tmp_path, "ogbn-products")


def test_loads_open_no_socket(tmp_path, monkeypatch):
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"network connection attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for make, name in ((make_arxiv_like, "ogbn-arxiv"), (make_products_like, "ogbn-products"),
                       (make_papers100m_like, "ogbn-papers100M"), (make_mag_like, "ogbn-mag")):
        make(tmp_path)
        load_with_ogb(tmp_path, name)
    assert calls == []


def test_importing_ogb_after_helper_starts_no_version_check():
    code = ("import threading, ogb_layouts, ogb.nodeproppred; "
            "assert ogb.version.check_outdated is None, 'outdated check enabled'; "
            "assert threading.active_count() == 1, threading.enumerate()")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
