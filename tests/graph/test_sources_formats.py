"""Issue 25, acceptance 2-3: the formats people already have.

Each fixture is written in the exact layout its tools write (a GraphSAINT folder; ``save_npz`` in
csr/csc/coo; Matrix Market in all four field/symmetry combinations, plain and gzipped; PyG-style
arrays) from a random graph with isolated nodes, self-loops, duplicate edges and directed input, and
must ingest to the same store (CSR, features, labels, splits) as the same graph given as an edge list.
"""

from __future__ import annotations

import gzip
import json

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from fixtures import random_edges, run

from gnnprep.graph import from_arrays
from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import SourceOptions
from gnnprep.graph.sources import graphsaint as saint

N, M, D = 40, 150, 5


def content(path):
    """What a store holds, for comparing two stores."""
    with h5py.File(path, "r") as f:
        out = {k: f[k][:] for k in ("adj/indptr", "adj/indices")}
        out["shape"] = f["adj"].attrs["shape"].tolist()
        out["symmetric"] = bool(f["adj"].attrs["symmetric"])
        for k in ("nodes/features", "nodes/labels"):
            if k in f:
                out[k] = f[k][:]
                out[k + ".dtype"] = str(f[k].dtype)
        for k in f.get("splits", {}):
            out["splits/" + k] = f["splits"][k][:]
        for a in ("num_nodes", "num_edges", "num_features", "num_classes"):
            out[a] = int(f.attrs[a])
    return out


def assert_same_store(a, b):
    ca, cb = content(a), content(b)
    assert sorted(ca) == sorted(cb)
    for k in ca:
        np.testing.assert_array_equal(ca[k], cb[k], err_msg=k)


def do_ingest(spec, out, directed=False, budget=None, **opts):
    ingest(str(spec), out, IngestConfig(directed=directed, memory_budget=budget, order="none",
                                        source=SourceOptions(**opts)))
    return out


@pytest.fixture
def graph(tmp_path):
    rng = np.random.default_rng(25)
    src, dst = random_edges(rng, N, M)            # self-loops, duplicates, the last 3 nodes isolated
    d = tmp_path / "ref"
    d.mkdir()
    x = rng.standard_normal((N, D))
    y = rng.integers(0, 4, N)
    y[5] = -1
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    perm = rng.permutation(N)
    splits = {"train": np.sort(perm[:20]), "valid": np.sort(perm[20:28]), "test": np.sort(perm[28:35])}
    (d / "sp").mkdir()
    for k, ids in splits.items():
        (d / "sp" / f"{k}.txt").write_text("".join(f"{i}\n" for i in ids))
    return {"src": src, "dst": dst, "x": x, "y": y, "splits": splits, "dir": d, "tmp": tmp_path}


def edge_file(g, src, dst, name="e.txt"):
    p = g["tmp"] / "ref" / name
    p.write_text("".join(f"{u} {v}\n" for u, v in zip(src, dst)))
    return p


def reference(g, src=None, dst=None, directed=False, node_data=False, name="ref.h5"):
    src = g["src"] if src is None else src
    dst = g["dst"] if dst is None else dst
    d = g["dir"]
    opts = dict(features=str(d / "x.npy"), labels=str(d / "y.npy"), splits=str(d / "sp")) if node_data else {}
    return do_ingest(edge_file(g, src, dst, name + ".txt"), g["tmp"] / name, directed=directed, num_nodes=N, **opts)


# ------------------------------------------------------------------------------------------------
# Matrix Market
# ------------------------------------------------------------------------------------------------

def write_mtx(path, src, dst, field, symmetry, rng, comments=True):
    """Entry (u+1, v+1) per edge u -> v; symmetric files keep only the lower triangle (row >= column)."""
    if symmetry == "symmetric":
        src, dst = np.maximum(src, dst), np.minimum(src, dst)
    lines = [f"%%MatrixMarket matrix coordinate {field} {symmetry}"]
    if comments:
        lines += ["% written by the gnnprep tests", "%", ""]
    lines.append(f"{N} {N} {len(src)}")
    for k, (u, v) in enumerate(zip(src, dst)):
        if k == 7 and comments:
            lines.append("% a comment among the entries")
        value = {"pattern": "", "integer": f" {rng.integers(-5, 6)}", "real": f" {rng.standard_normal():.6e}"}[field]
        if field == "real" and k == 3:
            value = " 0.0"        # an explicit zero is still an entry, hence an edge
        lines.append(f"{u + 1}\t{v + 1}{value}" if k % 5 == 0 else f"{u + 1} {v + 1}{value}")
    text = "\n".join(lines) + "\n"
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("field", ["pattern", "integer", "real"])
@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
@pytest.mark.parametrize("directed", [False, True])
def test_mtx_equals_edge_list(graph, field, symmetry, directed):
    g = graph
    rng = np.random.default_rng(1)
    p = write_mtx(g["tmp"] / f"m-{field}-{symmetry}.mtx", g["src"], g["dst"], field, symmetry, rng)
    got = do_ingest(p, g["tmp"] / "got.h5", directed=directed)
    # symmetric: one triangle stored, the graph is its symmetric closure, stored as symmetric even
    # with --directed (both directions are the data's own)
    assert_same_store(got, reference(g, directed=directed and symmetry == "general"))


def test_mtx_gz_with_node_data_equals_edge_list(graph):
    g = graph
    d = g["dir"]
    p = write_mtx(g["tmp"] / "m.mtx.gz", g["src"], g["dst"], "real", "general", np.random.default_rng(2))
    got = do_ingest(p, g["tmp"] / "got.h5", features=str(d / "x.npy"), labels=str(d / "y.npy"),
                    splits=str(d / "sp"))
    assert_same_store(got, reference(g, node_data=True))


def test_mtx_written_by_scipy(graph):
    """scipy.io.mmwrite's own layout (its header, its comment, its number format)."""
    g = graph
    a = sp.coo_matrix((np.arange(1, len(g["src"]) + 1, dtype=np.float64), (g["src"], g["dst"])), shape=(N, N))
    scipy.io.mmwrite(g["tmp"] / "s.mtx", a, comment="scipy")
    assert_same_store(do_ingest(g["tmp"] / "s.mtx", g["tmp"] / "got.h5", directed=True),
                      reference(g, directed=True))
    b = sp.coo_matrix((np.ones(len(g["src"]), dtype=np.int64), (g["src"], g["dst"])), shape=(N, N))
    b = (b + b.T).tocoo()
    scipy.io.mmwrite(g["tmp"] / "sym.mtx", b, symmetry="symmetric", field="integer")
    with open(g["tmp"] / "sym.mtx") as f:
        assert "symmetric" in f.readline()
    assert_same_store(do_ingest(g["tmp"] / "sym.mtx", g["tmp"] / "got2.h5", directed=True),
                      reference(g, name="ref2.h5"))


# ------------------------------------------------------------------------------------------------
# scipy save_npz
# ------------------------------------------------------------------------------------------------

def raw_csr(src, dst, n):
    """A CSR with duplicate entries, unsorted rows and an explicit zero, as scipy may hold one."""
    order = np.argsort(src, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    data = np.ones(len(src))
    data[0] = 0.0
    return sp.csr_matrix((data, dst[order], indptr), shape=(n, n))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("compressed", [False, True])
def test_npz_equals_edge_list(graph, fmt, compressed):
    g = graph
    a = raw_csr(g["src"], g["dst"], N) if fmt == "csr" else \
        sp.coo_matrix((np.ones(len(g["src"]), dtype=bool), (g["src"], g["dst"])), shape=(N, N)).asformat(fmt)
    if fmt == "csc":
        a.indices = a.indices.astype(np.int64)
        a.indptr = a.indptr.astype(np.int64)
    p = g["tmp"] / f"a-{fmt}.npz"
    sp.save_npz(p, a, compressed=compressed)
    for directed in (False, True):
        got = do_ingest(p, g["tmp"] / f"got-{directed}.h5", directed=directed)
        assert_same_store(got, reference(g, directed=directed, name=f"ref-{directed}.h5"))
    d = g["dir"]
    got = do_ingest(p, g["tmp"] / "nodes.h5", features=str(d / "x.npy"), labels=str(d / "y.npy"),
                    splits=str(d / "sp"))
    assert_same_store(got, reference(g, node_data=True, name="refn.h5"))


def test_plain_npz_edge_array_still_an_edge_list(graph):
    g = graph
    p = g["tmp"] / "e.npz"
    np.savez(p, edge_index=np.stack([g["src"], g["dst"]]))
    assert_same_store(do_ingest(p, g["tmp"] / "got.h5", num_nodes=N), reference(g))


# ------------------------------------------------------------------------------------------------
# GraphSAINT
# ------------------------------------------------------------------------------------------------

def write_saint(folder, g, multi_hot=False, indent=None):
    folder.mkdir(parents=True)
    sp.save_npz(folder / "adj_full.npz", raw_csr(g["src"], g["dst"], N))
    sp.save_npz(folder / "adj_train.npz", raw_csr(g["src"][:10], g["dst"][:10], N))   # not read
    np.save(folder / "feats.npy", g["x"])
    if multi_hot:
        cmap = {str(i): [int(c == k) for k in range(4)] for i, c in enumerate(g["y"])}
    else:
        cmap = {str(i): int(c) for i, c in enumerate(g["y"]) if c >= 0}   # an absent node: unknown
    keys = list(cmap)
    np.random.default_rng(3).shuffle(keys)
    (folder / "class_map.json").write_text(json.dumps({k: cmap[k] for k in keys}, indent=indent))
    role = {"tr": g["splits"]["train"].tolist()[::-1], "va": g["splits"]["valid"].tolist(),
            "te": g["splits"]["test"].tolist()}
    (folder / "role.json").write_text(json.dumps(role, indent=indent))
    return folder


@pytest.mark.parametrize("layout", ["flat", "pyg_raw", "multi_hot_one_class", "indented_small_blocks"])
def test_graphsaint_equals_edge_list(graph, layout, monkeypatch):
    g = graph
    folder = g["tmp"] / "Flickr"
    write_saint(folder / "raw" if layout == "pyg_raw" else folder, g, multi_hot=layout == "multi_hot_one_class",
                indent=1 if layout.startswith("indented") else None)
    if layout == "indented_small_blocks":
        monkeypatch.setattr(saint, "BLOCK", 7)   # every item cut across reads
    got = do_ingest(folder, g["tmp"] / "got.h5")
    assert_same_store(got, reference(g, node_data=True))


def test_graphsaint_without_labels_and_splits(graph):
    g = graph
    folder = write_saint(g["tmp"] / "Reddit", g)
    (folder / "class_map.json").unlink()
    (folder / "role.json").unlink()
    got = do_ingest(folder, g["tmp"] / "got.h5")
    d = g["dir"]
    ref = do_ingest(edge_file(g, g["src"], g["dst"]), g["tmp"] / "ref.h5", num_nodes=N, features=str(d / "x.npy"))
    assert_same_store(got, ref)


def test_graphsaint_multi_label_refused(graph, tmp_path):
    g = graph
    folder = write_saint(g["tmp"] / "Yelp", g, multi_hot=True)
    cmap = json.loads((folder / "class_map.json").read_text())
    cmap["9"] = [1, 0, 1, 1]
    (folder / "class_map.json").write_text(json.dumps(cmap))
    r = run(["ingest", folder, "-o", tmp_path / "out.h5"])
    assert r.exit_code == 1
    assert r.stderr.strip().count("\n") == 0
    assert "class_map.json: entry for node 9: 3 classes set; multi-label class maps" in r.stderr
    assert not (tmp_path / "out.h5").exists()


# ------------------------------------------------------------------------------------------------
# a memory budget smaller than the data
# ------------------------------------------------------------------------------------------------

def test_budget_smaller_than_the_data(tmp_path):
    rng = np.random.default_rng(7)
    n, m = 6000, 400_000                         # 6.4 MB of int64 pairs against a 4 MiB budget
    src, dst = random_edges(rng, n, m)
    np.savetxt(tmp_path / "e.txt", np.stack([src, dst], 1), fmt="%d")
    ref = do_ingest(tmp_path / "e.txt", tmp_path / "ref.h5", num_nodes=n, budget=4 << 20)
    sp.save_npz(tmp_path / "a.npz", raw_csr(src, dst, n), compressed=True)
    assert_same_store(do_ingest(tmp_path / "a.npz", tmp_path / "npz.h5", budget=4 << 20), ref)
    with open(tmp_path / "a.mtx", "w") as f:
        f.write(f"%%MatrixMarket matrix coordinate pattern general\n{n} {n} {len(src)}\n")
        np.savetxt(f, np.stack([src + 1, dst + 1], 1), fmt="%d")
    assert_same_store(do_ingest(tmp_path / "a.mtx", tmp_path / "mtx.h5", budget=4 << 20), ref)


# ------------------------------------------------------------------------------------------------
# from_arrays
# ------------------------------------------------------------------------------------------------

class TensorLike:
    """Duck-typed like a torch tensor on a device: .detach().cpu().numpy()."""

    def __init__(self, a):
        self.a = a

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a


def test_from_arrays_pyg_edge_index_equals_edge_list(graph):
    g = graph
    edge_index = np.stack([g["src"], g["dst"]]).astype(np.int64)
    got = from_arrays(edge_index, output=g["tmp"] / "a.h5", num_nodes=N, order="none")
    assert got.num_nodes == N
    assert_same_store(g["tmp"] / "a.h5", reference(g))
    masks = {f"{k if k != 'valid' else 'val'}_mask": np.isin(np.arange(N), ids) for k, ids in g["splits"].items()}
    from_arrays(TensorLike(edge_index), x=TensorLike(g["x"]), y=g["y"], splits=masks,
                output=g["tmp"] / "b.h5", order="none")
    assert_same_store(g["tmp"] / "b.h5", reference(g, node_data=True, name="refn.h5"))
    from_arrays((g["src"], g["dst"]), x=g["x"], y=list(g["y"]), splits=g["splits"], directed=True,
                memory_budget="4MiB", output=g["tmp"] / "c.h5", order="none")
    assert_same_store(g["tmp"] / "c.h5", reference(g, directed=True, node_data=True, name="refd.h5"))


def test_from_arrays_torch_tensors(graph):
    torch = pytest.importorskip("torch")
    g = graph
    edge_index = torch.as_tensor(np.stack([g["src"], g["dst"]]), dtype=torch.int64)
    from_arrays(edge_index, x=torch.as_tensor(g["x"]), y=torch.as_tensor(g["y"]), num_nodes=N,
                splits={k: torch.as_tensor(v) for k, v in g["splits"].items()}, output=g["tmp"] / "t.h5",
                order="none")
    assert_same_store(g["tmp"] / "t.h5", reference(g, node_data=True))


def test_from_arrays_public_names():
    import warnings

    import gnnprep
    import gnnprep.graph

    assert gnnprep.graph.from_arrays is from_arrays
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import gnnprep.ingest as old  # the name still works, through the moved-module alias
    assert old.from_arrays is from_arrays
    assert gnnprep.from_arrays is from_arrays
