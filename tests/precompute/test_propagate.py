"""Precompute equals a float64 scipy reference for every operator and block plan."""

import time

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import assert_close, make_store, reference_hops

from gnnprep.graph.ingest import ingest
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.operators import OPERATORS, make_operator
from gnnprep.precompute.run import precompute


def _has_cuda():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


BACKENDS = ["numba", "torch", pytest.param("cuda", marks=pytest.mark.skipif(not _has_cuda(), reason="no CUDA device here; run on the lent GPU machine"))]
GRID = [(1, 1, 1), (1, 2, 3), (2, 3, 2), (3, 7, 7), (1, 1, 4), (5, 200, 1), (200, 500, 9)]  # b, c beyond rows/cols


@pytest.mark.parametrize("blocks", GRID)
@pytest.mark.parametrize("backend", BACKENDS)
def test_all_operators_match_reference_for_block_grid(tmp_path, rng, blocks, backend):
    n, d, K = 90, 7, 3
    path, src, dst, x = make_store(tmp_path, rng, n=n, d=d)
    out = tmp_path / "f.h5"
    device = "cuda" if backend == "cuda" else "cpu"
    cfg = PrecomputeConfig(hops=K, operators=OPERATORS, blocks=blocks, backend="torch" if backend == "cuda" else backend,
                           device=device, reorder="bfs" if backend == "numba" and blocks[1] <= 3 else "auto")
    report = precompute(path, out, cfg)
    assert report.plan["b"] == min(blocks[1], n) and report.plan["c"] == min(blocks[2], d)
    with FeatureStore(out) as fs:
        np.testing.assert_array_equal(fs.rows, np.arange(n))
        for op in OPERATORS:
            ref = reference_hops(src, dst, x, n, op, K)
            for k in range(K + 1):
                assert_close(fs.hop(k, op)[:], ref[k])
        for k in range(K + 1):
            np.testing.assert_array_equal(fs.hop(k)[:], fs.hop(k, "sym")[:])


def test_rw_on_directed_store_and_sym_refused(tmp_path, rng):
    n, K = 60, 2
    path, src, dst, x = make_store(tmp_path, rng, n=n, d=5, directed=True)
    precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=K, operators=("rw",), device="cpu"))
    ref = reference_hops(src, dst, x, n, "rw", K, directed=True)
    with FeatureStore(tmp_path / "f.h5") as fs:
        for k in range(K + 1):
            assert_close(fs.hop(k)[:], ref[k])
    from gnnprep.core.errors import GnnprepError

    with pytest.raises(GnnprepError, match="needs a symmetric graph store"):
        precompute(path, tmp_path / "bad.h5", PrecomputeConfig(hops=K, operators=("sym",), device="cpu"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("bad.h5")]


def test_rows_labeled_and_float16(tmp_path, rng):
    n, K = 90, 3
    path, src, dst, x = make_store(tmp_path, rng, n=n, d=6)
    precompute(path, tmp_path / "all.h5", PrecomputeConfig(hops=K, device="cpu"))
    precompute(path, tmp_path / "lab.h5", PrecomputeConfig(hops=K, rows="labeled", device="cpu", blocks=(1, 4, 2)))
    precompute(path, tmp_path / "half.h5", PrecomputeConfig(hops=K, dtype="float16", device="cpu"))
    want = np.union1d(np.arange(0, n, 3), np.arange(1, n, 7))
    with FeatureStore(tmp_path / "all.h5") as a, FeatureStore(tmp_path / "lab.h5") as b, \
            FeatureStore(tmp_path / "half.h5") as h:
        np.testing.assert_array_equal(b.rows, want)
        np.testing.assert_array_equal(b.f["labels"][:], a.f["labels"][:][want])
        for k in range(K + 1):
            np.testing.assert_allclose(b.hop(k)[:], a.hop(k)[:][want], rtol=1e-6, atol=1e-6)
            assert h.hop(k).dtype == np.float16
            assert_close(h.hop(k)[:].astype(np.float32), a.hop(k)[:], rtol=1e-3)
        np.testing.assert_array_equal(b.f["splits/train"][:], np.arange(0, n, 3))


def test_weighted_store_matches_reference(tmp_path, rng):
    n, K = 50, 2
    path, src, dst, x = make_store(tmp_path, rng, n=n, d=4, splits=False)
    with h5py.File(path, "r+") as f:
        m = f["adj/indices"].shape[0]
        w = rng.random(m).astype(np.float32) + 0.5
        ip, ix = f["adj/indptr"][:], f["adj/indices"][:]
        a = sp.csr_matrix((w, ix, ip), shape=(n, n))
        a = (a + a.T) / 2  # keep it symmetric
        a.sort_indices()
        np.testing.assert_array_equal(a.indices, ix)
        f["adj/weights"] = a.data.astype(np.float32)
    dense = a.toarray().astype(np.float64)
    deg = dense.sum(1)
    s = (dense + np.eye(n)) / np.sqrt(deg + 1)[:, None] / np.sqrt(deg + 1)[None, :]
    for backend in ("numba", "torch"):
        out = tmp_path / f"{backend}.h5"
        precompute(path, out, PrecomputeConfig(hops=K, backend=backend, device="cpu", blocks=(2, 3, 2)))
        with FeatureStore(out) as fs:
            assert_close(fs.hop(2)[:], s @ (s @ x.astype(np.float64)))


def test_operator_scalings_definition():
    deg = np.array([0.0, 1.0, 3.0])
    op = make_operator("sym-noloop", deg, True)
    np.testing.assert_array_equal(op.left, [0.0, 1.0, np.float32(3 ** -0.5)])
    assert make_operator("sym", deg, True).loop == 1.0


def test_rows_labeled_on_papers100m_fixture_and_float16_halves_the_file(tmp_path):
    from ogb_layouts import make_papers100m_like

    truth = make_papers100m_like(tmp_path / "data", n=400, m=2000, d=64)
    graph = tmp_path / "g.h5"
    ingest(str(truth.path), graph)
    want = np.unique(np.concatenate([truth.split[k] for k in ("train", "valid", "test")]))
    sizes = {}
    for dtype in ("float32", "float16"):
        out = tmp_path / f"{dtype}.h5"
        precompute(graph, out, PrecomputeConfig(hops=2, rows="labeled", dtype=dtype, device="cpu"))
        sizes[dtype] = out.stat().st_size
        with FeatureStore(out) as fs:
            np.testing.assert_array_equal(fs.rows, want)
            assert fs.hop(2).shape == (len(want), 64)
            np.testing.assert_array_equal(fs.f["labels"][:], truth.labels[want])
    with FeatureStore(tmp_path / "float32.h5") as a, FeatureStore(tmp_path / "float16.h5") as h:
        for k in range(3):
            assert_close(h.hop(k)[:].astype(np.float32), a.hop(k)[:], rtol=1e-3)
    data32 = 3 * len(want) * 64 * 4
    assert sizes["float16"] - (sizes["float32"] - data32 / 2) < 0.1 * data32, sizes  # the hop data halves


@pytest.mark.parametrize("rows", ["all", "labeled"])
def test_reordered_computation_writes_original_order(tmp_path, rng, rows):
    n, K = 90, 3
    path, src, dst, x = make_store(tmp_path, rng, n=n, d=5)
    precompute(path, tmp_path / "plain.h5", PrecomputeConfig(hops=K, device="cpu", reorder="none", rows=rows))
    rep = precompute(path, tmp_path / "bfs.h5", PrecomputeConfig(hops=K, device="cpu", reorder="bfs", rows=rows,
                                                                 blocks=(1, 1, 2)))
    assert rep.plan["reorder"] is True
    with FeatureStore(tmp_path / "plain.h5") as a, FeatureStore(tmp_path / "bfs.h5") as b:
        np.testing.assert_array_equal(a.rows, b.rows)
        for k in range(K + 1):
            assert_close(b.hop(k)[:], a.hop(k)[:], rtol=1e-6)


@pytest.mark.parametrize("blocks", [(1, 1, 2), (1, 3, 2)])   # S resident; S streamed in 3 row blocks
@pytest.mark.parametrize("backend", ["torch", pytest.param("cuda", marks=pytest.mark.skipif(not _has_cuda(), reason="no CUDA device here; run on the lent GPU machine"))])
def test_torch_blocks_are_loaded_while_x_is_read(tmp_path, rng, monkeypatch, backend, blocks):
    """With no node order to find, the torch backend builds (and moves) S's row blocks in a thread
    while hop 0 reads X, where S is resident (a streamed S is read per hop, so nothing is built
    ahead): the hops then find them built, and equal the reference; a failure there is the run's."""
    pytest.importorskip("torch")
    from gnnprep.core.errors import GnnprepError
    from gnnprep.precompute.torch_backends import TorchBackend

    n, d, K = 80, 5, 2
    path, src, dst, x = make_store(tmp_path, rng, n=n, d=d)
    device = "cuda" if backend == "cuda" else "cpu"
    seen = {}
    load, block = TorchBackend.load, TorchBackend._block

    def watched_load(self, blocks, stop=None):
        seen["blocks"] = list(blocks)
        load(self, blocks, stop)
        seen["cached"] = set(self.cache)

    def watched_block(self, r0, r1):
        if "cached" in seen and seen["cached"]:
            assert (r0, r1) in seen["cached"]   # no block built in the hops any more
        return block(self, r0, r1)

    monkeypatch.setattr(TorchBackend, "load", watched_load)
    monkeypatch.setattr(TorchBackend, "_block", watched_block)
    rep = precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=K, backend="torch", device=device, blocks=blocks))
    assert rep.plan["s_resident"] == (blocks[1] == 1) and seen["blocks"]
    assert seen["cached"] == (set(seen["blocks"]) if blocks[1] == 1 else set())
    ref = reference_hops(src, dst, x, n, "sym", K)
    with FeatureStore(tmp_path / "f.h5") as fs:
        for k in range(K + 1):
            assert_close(fs.hop(k)[:], ref[k])

    def failing(self, blocks, stop=None):
        raise GnnprepError("the device is gone")

    monkeypatch.setattr(TorchBackend, "load", failing)
    with pytest.raises(GnnprepError, match="the device is gone"):
        precompute(path, tmp_path / "bad.h5", PrecomputeConfig(hops=K, backend="torch", device=device, blocks=blocks))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("bad.h5")]


def test_torch_loading_stops_when_hop_0_fails(tmp_path, rng, monkeypatch):
    """A failure while hop 0 reads X stops the thread that moves S's blocks to the device at its
    next block (the run does not wait for all of S before it exits), and is the run's error, with no
    output left."""
    pytest.importorskip("torch")
    from gnnprep.core.errors import GnnprepError
    from gnnprep.precompute import hop_loop
    from gnnprep.precompute.torch_backends import TorchBackend

    path, *_ = make_store(tmp_path, rng, n=80, d=5)
    built = []
    block = TorchBackend._block

    def slow_block(self, r0, r1):
        built.append((r0, r1))
        time.sleep(0.05)
        return block(self, r0, r1)

    def failing(self, j, c0, c1):
        time.sleep(0.02)
        raise GnnprepError("X is unreadable")

    monkeypatch.setattr(TorchBackend, "_block", slow_block)
    monkeypatch.setattr(hop_loop.HopRun, "_hop0", failing)
    with pytest.raises(GnnprepError, match="X is unreadable"):
        precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2, backend="torch", device="cpu", blocks=(1, 1, 1)))
    time.sleep(0.6)          # (a thread left running would have built all 8 by now)
    assert len(built) < 8   # the resident S is walked in 8 row blocks: it stopped after one or two
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("f.h5")]
