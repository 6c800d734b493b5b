"""Issue 13: the node order found fast and once, X's columns read raw, and no torch import on
machines without a GPU driver. Each fast path is checked against the plain one."""

import subprocess
import sys

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from gnnprep import reorder
from gnnprep.store import GraphStore
from test_propagate import make_store


def _random_csr(rng, n, density):
    a = sp.random(n, n, density=density, random_state=int(rng.integers(1 << 30)), format="csr")
    a = ((a + a.T) > 0).astype(np.float32).tocsr()
    a.sort_indices()
    return a.indptr.astype(np.int64), a.indices.astype(np.int32)


def _reference_order(indptr, indices, sweeps=2):
    """Label propagation exactly as specified, in plain Python: asynchronous, id order, the most
    frequent neighbour label (ties to the smallest), then nodes stably sorted by label."""
    n = len(indptr) - 1
    label = list(range(n))
    for _ in range(sweeps):
        for v in range(n):
            counts = {}
            for u in indices[indptr[v]:indptr[v + 1]]:
                counts[label[u]] = counts.get(label[u], 0) + 1
            if counts:
                top = max(counts.values())
                label[v] = min(lab for lab, c in counts.items() if c == top)
    return np.argsort(np.array(label), kind="stable")


@pytest.mark.parametrize("trial", range(6))
def test_community_order_matches_the_plain_definition(rng, trial):
    n = int(rng.integers(1, 200))
    indptr, indices = _random_csr(rng, n, float(rng.uniform(0, 0.1)))
    np.testing.assert_array_equal(reorder.community_order(indptr, indices), _reference_order(indptr, indices))


@pytest.mark.parametrize("block", [1, 7, 64, 10**6])
def test_streamed_order_equals_the_in_memory_one(tmp_path, rng, block):
    """Out of core (row blocks read from an HDF5 dataset) gives the same order as in memory."""
    indptr, indices = _random_csr(rng, 500, 0.02)
    with h5py.File(tmp_path / "i.h5", "w") as f:
        f.create_dataset("indices", data=indices, chunks=(16,))
    with h5py.File(tmp_path / "i.h5") as f:
        streamed = reorder.streamed_community_order(indptr, f["indices"], block)
    np.testing.assert_array_equal(streamed, reorder.community_order(indptr, indices))


def test_group_by_label_is_a_stable_argsort(rng):
    label = rng.integers(0, 50, 1000).astype(np.int32)
    np.testing.assert_array_equal(reorder._group_by_label(label), np.argsort(label, kind="stable"))


def test_window_near_share_estimates_the_sampled_one(rng):
    indptr, indices = _random_csr(rng, 2000, 0.01)
    order = reorder.community_order(indptr, indices)
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.arange(len(order))
    for w in (50, 500):
        for iv in (None, inv):
            assert reorder.near_share_windows(indptr, indices, w, iv, windows=400, width=100) == pytest.approx(
                reorder.near_share(indptr, indices, w, iv, samples=10**6), abs=0.03)


@pytest.mark.parametrize("layout", ["raw", "gzip", "narrow_chunks", "float64"])
def test_feature_columns_read_raw_or_through_hdf5_agree(tmp_path, rng, layout):
    """The raw-chunk fast path and HDF5's hyperslab reads give the same columns, for every block."""
    path, *_ = make_store(tmp_path, rng, n=5000, m=20000, d=13)
    with h5py.File(path, "r+") as f:
        x = f["nodes/features"][:]
        del f["nodes/features"]
        kw = {"raw": dict(chunks=(512, 13)), "gzip": dict(chunks=(512, 13), compression="gzip"),
              "narrow_chunks": dict(chunks=(512, 5))}.get(layout, dict(chunks=(512, 13)))
        f.create_dataset("nodes/features", data=x.astype(np.float64) if layout == "float64" else x, **kw)
    with GraphStore(path) as g:
        for c0, c1 in [(0, 13), (0, 5), (5, 9), (12, 13)]:
            np.testing.assert_array_equal(g.feature_columns(c0, c1), x[:, c0:c1])


def test_nonfinite_features_are_refused_on_the_raw_path(tmp_path, rng):
    from gnnprep.errors import GnnprepError

    path, *_ = make_store(tmp_path, rng, n=3000, m=9000, d=4)
    with h5py.File(path, "r+") as f:
        f["nodes/features"][2100, 2] = np.nan
    with GraphStore(path) as g, pytest.raises(GnnprepError, match="non-finite values in rows"):
        g.feature_columns(1, 3)


def test_auto_device_does_not_import_torch_without_a_gpu_driver(monkeypatch):
    from gnnprep import device

    monkeypatch.setattr(device, "GPU_DRIVER_FILES", ("/nonexistent/nvidiactl",))
    if not sys.platform.startswith("linux"):
        pytest.skip("the driver check is Linux-only")
    assert device.resolve("auto") == "cpu"
    code = ("import sys; from gnnprep import device; device.GPU_DRIVER_FILES = ('/nonexistent',); "
            "print(device.resolve('auto'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["cpu", "False"]


def test_pruned_hop_entries_match_the_rows_the_last_hops_read(rng):
    """Hop K reads exactly the stored rows' entries; hop K-1's estimate (stored rows placed at
    random) is close to the exact count of the stored rows' and their neighbours' entries."""
    from gnnprep.plan import pruned_hop_entries

    n, m = 20000, 160000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    a = sp.csr_matrix((np.ones(2 * m), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    a.sum_duplicates()
    indptr, indices = a.indptr, a.indices
    deg = np.diff(indptr)
    stored = np.sort(rng.choice(20000, 400, replace=False))
    est = pruned_hop_entries(deg, stored, 3)
    mark = np.zeros(20000, dtype=bool)
    mark[stored] = True
    for v in stored:
        mark[indices[indptr[v]:indptr[v + 1]]] = True
    assert est[0] == len(indices) and est[2] == int(deg[stored].sum())
    assert est[1] == pytest.approx(int(deg[mark].sum()), rel=0.1)
    assert pruned_hop_entries(deg, stored, 1) == (int(deg[stored].sum()),)
