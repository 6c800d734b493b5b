import gzip
import json

import h5py
import numpy as np
import pytest
from fixtures import assert_same_graph, random_edges, reference_csr, run, run_json

from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import SourceOptions


def write_text(path, src, dst, sep=" ", header=None, base=0):
    lines = ([header] if header else []) + [f"{s + base}{sep}{d + base}" for s, d in zip(src, dst)]
    data = "# generated\n" + "\n".join(lines) + "\n"
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(data)
    else:
        path.write_text(data)


@pytest.mark.parametrize("fmt", ["txt", "csv.gz", "tsv", "npy2m", "npym2", "npz"])
def test_edge_list_formats_match_reference(tmp_path, rng, fmt):
    n, m = 400, 3000
    src, dst = random_edges(rng, n, m)
    if fmt.startswith("npy"):
        p = tmp_path / "edges.npy"
        np.save(p, np.stack([src, dst]) if fmt == "npy2m" else np.stack([src, dst], 1))
    elif fmt == "npz":
        p = tmp_path / "edges.npz"
        np.savez_compressed(p, edge_index=np.stack([src, dst]))
    else:
        p = tmp_path / f"edges.{fmt}"
        write_text(p, src, dst, sep={"txt": " ", "csv.gz": ",", "tsv": "\t"}[fmt], header="src dst" if fmt == "txt" else None)
    report = ingest(str(p), tmp_path / "g.h5", IngestConfig(memory_budget=8 << 20,
                                                            source=SourceOptions(num_nodes=n)))
    ref = reference_csr(src, dst, n, True)
    assert_same_graph(tmp_path / "g.h5", ref)
    assert report.num_edges == ref.nnz and report.num_nodes == n


def test_directed_and_index_base_one(tmp_path, rng):
    n, m = 300, 2000
    src, dst = random_edges(rng, n, m, isolated=0)
    p = tmp_path / "e.txt"
    write_text(p, src, dst, base=1)
    report = ingest(str(p), tmp_path / "g.h5", IngestConfig(directed=True, source=SourceOptions(index_base=1)))
    assert report.num_nodes == max(src.max(), dst.max()) + 1  # inferred from the largest id
    assert_same_graph(tmp_path / "g.h5", reference_csr(src, dst, report.num_nodes, symmetric=False))
    with h5py.File(tmp_path / "g.h5") as f:
        assert not f["adj"].attrs["symmetric"]


def test_budget_smaller_than_data(tmp_path, rng):
    # 400k edges -> 800k symmetrised int64 keys = 6.4 MB of keys, ingested with a 4 MiB budget
    n, m = 50_000, 400_000
    src, dst = random_edges(rng, n, m)
    p = tmp_path / "e.npy"
    np.save(p, np.stack([src, dst]))
    ingest(str(p), tmp_path / "g.h5", IngestConfig(memory_budget=4 << 20, source=SourceOptions(num_nodes=n)))
    assert_same_graph(tmp_path / "g.h5", reference_csr(src, dst, n, True))


def test_features_labels_splits_and_store_layout(tmp_path, rng):
    n, d = 120, 7
    src, dst = random_edges(rng, n, 500)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    x = rng.standard_normal((n, d)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    y = rng.integers(0, 4, n).astype(np.float64)
    y[::5] = np.nan
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "split").mkdir()
    (tmp_path / "split" / "train.txt").write_text("5\n3\n1\n")
    np.save(tmp_path / "split" / "test.npy", np.array([10, 11]))
    out = tmp_path / "g.h5"
    r = run(["ingest", tmp_path / "e.npy", "-o", out, "--features", tmp_path / "x.npy", "--labels",
             tmp_path / "y.npy", "--splits", tmp_path / "split", "--json"])
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["num_nodes"] == n and report["num_features"] == d
    with h5py.File(out) as f:
        assert f.attrs["format"] == "gnnprep.graph" and f.attrs["format_version"] == 1
        assert json.loads(f.attrs["provenance"])["parameters"]["symmetrized"] is True
        np.testing.assert_array_equal(f["nodes/features"][:], x)
        assert f["nodes/features"].chunks is not None
        lab = f["nodes/labels"][:]
        np.testing.assert_array_equal(lab[::5], -1)
        np.testing.assert_array_equal(lab[1::5], y[1::5].astype(int))
        np.testing.assert_array_equal(f["splits/train"][:], [1, 3, 5])
        np.testing.assert_array_equal(f["splits/test"][:], [10, 11])
        assert "valid" not in f["splits"]
    info = run_json(["info", out])
    assert info["splits"] == {"train": 3, "test": 2}
    assert info["labeled_nodes"] == int((~np.isnan(y)).sum())
    assert info["num_classes"] == 4


def test_store_input_is_used_as_is(tmp_path, rng):
    src, dst = random_edges(rng, 50, 100)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    ingest(str(tmp_path / "e.npy"), tmp_path / "a.h5", IngestConfig(source=SourceOptions(num_nodes=50)))
    r = run(["ingest", tmp_path / "a.h5", "-o", tmp_path / "b.h5", "--json"])
    assert r.exit_code == 0
    assert_same_graph(tmp_path / "b.h5", reference_csr(src, dst, 50))


def test_sample_ingests_and_info(tmp_path):
    r = run(["ingest", "sample", "-o", tmp_path / "s.h5", "--json"])
    assert r.exit_code == 0, r.stderr
    info = run_json(["info", tmp_path / "s.h5"])
    assert info["num_nodes"] > 1000 and info["symmetric"] and info["num_classes"] >= 2
    assert set(info["splits"]) == {"train", "valid", "test"}


def test_node_rows_are_copied_in_blocks_bounded_whatever_the_budget(tmp_path, rng, monkeypatch):
    """A large budget does not make large node blocks (NODE_BLOCK_BYTES, counted as float64)."""
    from gnnprep.graph import from_arrays
    from gnnprep.graph import ingest as ingest_module
    from gnnprep.graph.sources.arrays import ArraySource
    from gnnprep.graph.store import GraphStore

    monkeypatch.setattr(ingest_module, "NODE_BLOCK_BYTES", 64 << 10)
    asked = []
    real = ArraySource.features

    def features(self, chunk_rows):
        asked.append(chunk_rows)
        return real(self, chunk_rows)
    monkeypatch.setattr(ArraySource, "features", features)
    n, d = 3000, 16
    x = rng.standard_normal((n, d)).astype(np.float32)
    from_arrays(np.stack([rng.integers(0, n, 5000), rng.integers(0, n, 5000)]), x=x, output=tmp_path / "g.h5",
                memory_budget=1 << 30)
    assert asked == [(64 << 10) // (d * 8)]
    with GraphStore(tmp_path / "g.h5") as g:
        np.testing.assert_array_equal(g.features[()], x)
