"""Each OGB layout ingests into the graph store that ogb's own loader implies (offline)."""

import numpy as np
import pytest
from fixtures import assert_same_graph, reference_csr
from ogb_layouts import load_with_ogb, make_arxiv_like, make_mag_like, make_papers100m_like, make_products_like

from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.store import GraphStore

HOMOGENEOUS = {
    "ogbn-arxiv": make_arxiv_like,
    "ogbn-products": make_products_like,
    "ogbn-papers100M": make_papers100m_like,
}


def ogb_labels(labels):
    lab = np.asarray(labels, dtype=np.float64).reshape(-1)
    return np.where(np.isnan(lab), -1, lab).astype(np.int64)


@pytest.mark.parametrize("name", sorted(HOMOGENEOUS))
@pytest.mark.parametrize("directed", [False, True])
def test_homogeneous_layout_matches_ogb(tmp_path, name, directed):
    truth = HOMOGENEOUS[name](tmp_path / "data")
    graph, labels, split = load_with_ogb(tmp_path / "data", name)
    out = tmp_path / "g.h5"
    # the ogbn-<name> spec under --root and the folder path must give the same store
    from gnnprep.graph.sources import SourceOptions

    ingest(name, out, IngestConfig(directed=directed, memory_budget=8 << 20,
                                   source=SourceOptions(root=str(tmp_path / "data"))))
    ei = graph["edge_index"]
    n = int(graph["num_nodes"])
    # ogb already added inverse edges for products; symmetrise the rest the same way unless --directed
    assert_same_graph(out, reference_csr(ei[0], ei[1], n, symmetric=not directed))
    with GraphStore(out) as g:
        np.testing.assert_array_equal(g.features[:], graph["node_feat"])
        np.testing.assert_array_equal(g.labels(), ogb_labels(labels))
        got = g.splits()
        for k in ("train", "valid", "test"):
            np.testing.assert_array_equal(got[k], np.unique(split[k]))
        assert g.attrs["num_nodes"] == truth.num_nodes


def test_heterogeneous_layout_matches_ogb(tmp_path):
    truth = make_mag_like(tmp_path / "data")
    graph, labels, split = load_with_ogb(tmp_path / "data", "ogbn-mag")
    out = tmp_path / "g.h5"
    ingest(str(truth.path), out, IngestConfig(memory_budget=8 << 20))
    types = sorted(graph["num_nodes_dict"])
    offsets = dict(zip(types, np.concatenate([[0], np.cumsum([graph["num_nodes_dict"][t] for t in types])])))
    n = sum(graph["num_nodes_dict"].values())
    src, dst = [], []
    for (h, _, t), ei in graph["edge_index_dict"].items():
        src.append(ei[0] + offsets[h])
        dst.append(ei[1] + offsets[t])
    assert_same_graph(out, reference_csr(np.concatenate(src), np.concatenate(dst), n, symmetric=True))
    with GraphStore(out) as g:
        assert g.node_types() == types
        t = g.f["nodes/type"][:]
        for i, ty in enumerate(types):
            assert (t == i).sum() == graph["num_nodes_dict"][ty]
        p0 = offsets["paper"]
        npaper = graph["num_nodes_dict"]["paper"]
        np.testing.assert_array_equal(g.features[p0:p0 + npaper], graph["node_feat_dict"]["paper"])
        assert not g.features[:p0].any()  # types without features get zero rows
        lab = g.labels()
        np.testing.assert_array_equal(lab[p0:p0 + npaper], ogb_labels(labels["paper"]))
        assert (lab[:p0] == -1).all()
        np.testing.assert_array_equal(g.splits()["train"], np.sort(split["train"]["paper"] + p0))


def test_split_folder_is_discovered_not_assumed(tmp_path):
    truth = make_arxiv_like(tmp_path / "data")
    (truth.path / "split" / "time").rename(truth.path / "split" / "my_split")
    out = tmp_path / "g.h5"
    ingest(str(truth.path), out)
    with GraphStore(out) as g:
        assert len(g.splits()["train"]) == len(truth.split["train"])
