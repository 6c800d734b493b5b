"""Issue 24 (build item 5): locality orders for graphs without communities (hubs first), on small
R-MAT graphs from the benchmark generator. Each order is a permutation, deterministic, puts isolated
nodes last, and a hop computed in it and gathered back is the stored-order hop byte for byte."""

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gnnprep.sparse import kernels, reference
from gnnprep.sparse import order as node_order

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # benchmarks/ beside gnnprep/
    sys.path.insert(0, str(ROOT))
from benchmarks.harness import rmat_edges, symmetric_csr  # noqa: E402


def _rmat(n=3000, nnz=60_000, seed=0):
    u, v, stored = rmat_edges(n, nnz, seed=seed, chunk=1 << 14, progress=False)
    indptr, indices = symmetric_csr(u, v, n)
    assert int(indptr[-1]) == stored >= nnz
    return indptr, indices


def _orders(indptr, indices):
    return {
        "degree": node_order.degree_order(indptr),
        "degree-bucket": node_order.degree_bucket_order(indptr),
        "degree-bucket in community": node_order.degree_bucket_order(indptr, node_order.community_order(indptr, indices)),
    }


def _hop(indptr, indices, weights, left, right, loop, x):
    out = np.empty_like(x)
    reference.reference_spmm_rows(indptr, indices, weights, 0, left, right, loop, x, out)
    return out


def _same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_rmat_generator_gives_a_simple_symmetric_graph():
    n = 2000
    u, v, stored = rmat_edges(n, 30_000, seed=3, chunk=1 << 13, progress=False)
    assert stored == 2 * len(u) >= 30_000
    assert (u != v).all() and u.min() >= 0 and v.min() >= 0 and max(u.max(), v.max()) < n
    keys = np.minimum(u, v) * n + np.maximum(u, v)
    assert len(np.unique(keys)) == len(keys)                  # each undirected pair once
    u2, v2, _ = rmat_edges(n, 30_000, seed=3, chunk=1 << 13, progress=False)
    assert np.array_equal(u, u2) and np.array_equal(v, v2)    # the seed decides the graph
    indptr, indices = symmetric_csr(u, v, n)
    a = sp.coo_matrix((np.ones(len(u)), (u, v)), shape=(n, n)).tocsr()
    a = (a + a.T).tocsr()
    a.sort_indices()
    assert np.array_equal(indptr, a.indptr) and np.array_equal(indices, a.indices)
    deg = np.diff(indptr)
    assert deg.max() > 20 * max(1.0, np.median(deg))         # R-MAT's skew: hubs


@pytest.mark.parametrize("seed", [0, 1])
def test_a_hop_in_each_order_is_the_stored_hop_bit_for_bit(seed):
    indptr, indices = _rmat(seed=seed)
    n = len(indptr) - 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 24), dtype=np.float32)
    deg = np.diff(indptr).astype(np.float64)
    s = (1.0 / np.sqrt(deg + 1.0)).astype(np.float32)       # the sym operator: l = r = (deg + 1)^-1/2, λ = 1
    w = rng.uniform(0.5, 2.0, len(indices)).astype(np.float32)
    for weights in (None, w):
        ref = _hop(indptr, indices, weights, s, s, 1.0, x)
        for name, order in _orders(indptr, indices).items():
            ip, idx, inv = node_order.permute_csr(indptr, indices, order)
            wo = None if weights is None else node_order.permute_values(indptr, weights, order, ip)
            got = _hop(ip, idx, wo, s[order], s[order], 1.0, kernels.take_rows(x, order))
            assert _same_bytes(got[inv], ref), (name, weights is None)


def test_the_orders_are_deterministic_permutations_with_hubs_first():
    indptr, indices = _rmat()
    n = len(indptr) - 1
    deg = np.diff(indptr)
    for name, order in _orders(indptr, indices).items():
        assert order.dtype == np.int64 and np.array_equal(np.sort(order), np.arange(n)), name
        assert np.array_equal(order, _orders(indptr, indices)[name]), name
        assert (deg[order][-int((deg == 0).sum()):] == 0).all(), name           # isolated nodes last
    order = node_order.degree_order(indptr)
    assert np.array_equal(order, np.argsort(-deg, kind="stable"))
    assert (np.diff(deg[order]) <= 0).all()


def test_degree_buckets_are_powers_of_two():
    deg = np.array([0, 1, 2, 3, 4, 7, 8, 1023, 1024, 2**40 - 1, 2**40])
    indptr = np.concatenate([[0], np.cumsum(deg)])
    assert node_order.degree_buckets(indptr).tolist() == [int(d).bit_length() for d in deg]


def test_degree_bucket_order_keeps_the_given_order_inside_a_bucket(rng):
    deg = rng.integers(0, 40, 500)
    indptr = np.concatenate([[0], np.cumsum(deg)])
    bucket = node_order.degree_buckets(indptr)
    within = rng.permutation(500)
    got = node_order.degree_bucket_order(indptr, within)
    assert np.array_equal(got, within[np.argsort(-bucket[within], kind="stable")])
    assert np.array_equal(node_order.degree_bucket_order(indptr), np.argsort(-bucket, kind="stable"))
    with pytest.raises(ValueError):
        node_order.degree_bucket_order(indptr, within[:-1])


@pytest.mark.parametrize("n", [0, 1, 7])
def test_graphs_without_entries(n):
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(0, dtype=np.int32)
    for order in (node_order.degree_order(indptr), node_order.degree_bucket_order(indptr),
                  node_order.degree_bucket_order(indptr, np.arange(n)[::-1].copy())):
        assert order.dtype == np.int64 and sorted(order.tolist()) == list(range(n))
    assert node_order.degree_order(indptr).tolist() == list(range(n))
    assert node_order.prefix_share(indices, 1) == 1.0
    if n:
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        s = np.ones(n, np.float32)
        order = node_order.degree_order(indptr)
        ip, idx, inv = node_order.permute_csr(indptr, indices, order)
        assert _same_bytes(_hop(ip, idx, None, s, s, 1.0, kernels.take_rows(x, order))[inv],
                           _hop(indptr, indices, None, s, s, 1.0, x))


def test_isolated_nodes_go_last_and_a_star_puts_its_centre_first():
    # a star 4 - {0, 1, 2} plus isolated 3 and 5
    a = sp.coo_matrix((np.ones(6), ([4, 4, 4, 0, 1, 2], [0, 1, 2, 4, 4, 4])), shape=(6, 6)).tocsr()
    indptr = a.indptr.astype(np.int64)
    assert node_order.degree_order(indptr).tolist() == [4, 0, 1, 2, 3, 5]
    assert node_order.degree_bucket_order(indptr).tolist() == [4, 0, 1, 2, 3, 5]


def test_prefix_share_counts_gathers_of_the_first_rows():
    indptr, indices = _rmat()
    n = len(indptr) - 1
    assert node_order.prefix_share(indices, n) == 1.0
    assert node_order.prefix_share(indices, 0) == 0.0
    order = node_order.degree_order(indptr)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    rows = n // 20
    exact_after = float(np.mean(inv[indices] < rows))
    after = node_order.prefix_share(indices, rows, inv)
    assert abs(after - exact_after) < 0.02
    # hubs first: the top 5% of the nodes take far more than 5% of the gathers
    assert after > 3 * node_order.prefix_share(indices, rows)


@pytest.mark.parametrize("ahead", [None, 1, 16, 64, 256])
def test_precompute_row_kernel_in_row_blocks_is_the_plain_hop_in_every_order(ahead):
    """The hop as precompute's CPU path runs it (row blocks, :func:`row_kernels.spmm_rows` with its
    prefetch ``ahead`` entries on) in each order, gathered back, against a float64 scipy reference
    and bit for bit against the plain kernel in stored order."""
    from gnnprep.precompute.hop_graph import balanced_rows
    from gnnprep.sparse import row_kernels

    indptr, indices = _rmat(n=2500, nnz=40_000, seed=2)
    n = len(indptr) - 1
    rng = np.random.default_rng(ahead or 0)
    x = rng.standard_normal((n, 20), dtype=np.float32)
    s = (1.0 / np.sqrt(np.diff(indptr) + 1.0)).astype(np.float32)
    ref = _hop(indptr, indices, None, s, s, 1.0, x)
    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n)) + sp.identity(n)
    exact = sp.diags(s.astype(np.float64)) @ a @ sp.diags(s.astype(np.float64)) @ x.astype(np.float64)
    np.testing.assert_allclose(ref, exact, rtol=1e-4, atol=1e-5)
    orders = {"none": np.arange(n), **_orders(indptr, indices), "bfs": node_order.find_order("bfs", indptr, indices)}
    for name, order in orders.items():
        ip, idx, inv = node_order.permute_csr(indptr, indices, order)
        xo = kernels.take_rows(x, order)
        out = np.full_like(x, np.nan)
        bounds = balanced_rows(ip, 5)
        for r0, r1 in zip(bounds[:-1], bounds[1:]):
            row_kernels.spmm_rows(ip[r0:r1 + 1], idx[ip[r0]:ip[r1]], None, int(r0), s[order], s[order], 1.0, xo,
                                  out[r0:r1], ahead)
        assert _same_bytes(out[inv], ref), name


def test_find_order_names_every_kind():
    indptr, indices = _rmat(n=800, nnz=8000)
    assert np.array_equal(node_order.find_order("degree", indptr, indices), node_order.degree_order(indptr))
    assert np.array_equal(node_order.find_order("degree-bucket", indptr, indices),
                          node_order.degree_bucket_order(indptr))
    assert np.array_equal(node_order.find_order("community", indptr, indices),
                          node_order.community_order(indptr, indices))
    with pytest.raises(ValueError):
        node_order.find_order("rabbit", indptr, indices)


def test_the_prefetch_distance_shrinks_as_rows_widen():
    from gnnprep.sparse.row_kernels import prefetch_distance

    assert [prefetch_distance(w) for w in (1, 16, 32, 64, 128, 256, 4096)] == [128, 128, 64, 32, 16, 16, 16]
