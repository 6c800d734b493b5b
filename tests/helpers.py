"""Shared test helpers: a dense/scipy reference for what a graph store must hold."""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp
from click.testing import CliRunner


def reference_csr(src, dst, n, symmetric=True):
    """Row v lists the sources v aggregates from; binarised, no self-loops, sorted (scipy)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    a = sp.coo_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)).tocsr()
    if symmetric:
        a = a + a.T
    a = a.tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.data[:] = 1
    a.sort_indices()
    return a


def store_csr(path):
    from gnnprep.store import GraphStore

    with GraphStore(path) as g:
        return g.csr()


def assert_same_graph(path, ref):
    got = store_csr(path)
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)


def random_edges(rng, n, m, self_loops=5, duplicates=20, isolated=3):
    """Random directed edges with self-loops, duplicates, and the last `isolated` nodes unused."""
    hi = n - isolated
    src = rng.integers(0, hi, m)
    dst = rng.integers(0, hi, m)
    src[:self_loops] = dst[:self_loops]
    dup = rng.integers(0, m, duplicates)
    return np.concatenate([src, src[dup]]), np.concatenate([dst, dst[dup]])


def run(args, **kw):
    from gnnprep.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


def run_json(args):
    r = run(list(args) + ["--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)
