"""The max reduce (issue 16): the fused max-reduce row kernel equals a naive reference that
materialises every per-edge message and scatters it with a max (float64), and HDG aggregation with
``reduce="max"`` equals a plain-Python reference, also end to end through ``precompute --hdg-reduce max``.

Tolerances: each kernel candidate is rounded like the sum kernel's term ((w r[u]) · x[u], float32),
the max adds no rounding, then one product by l[v]; so against float64 the relative error is at
most 3·2^-24 (rtol 1e-6 below), and against a reference that forms the same float32 candidates
the result is bit-for-bit equal.
"""

import json

import numpy as np
import pytest
from fixtures import assert_close, handmade_hdg, make_store, reference_hops, run

from gnnprep.core.errors import GnnprepError
from gnnprep.hdg.file import read_hdg
from gnnprep.hdg.select import AnchorsSelect, HopShellsSelect, RandomWalkSelect, select
from gnnprep.hdg.structure import Hdg, aggregate
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.sparse.kernels import spmm_rows_max
from gnnprep.sparse.reference import reference_spmm_rows


# -- the kernel -------------------------------------------------------------------------------------------
def _random_csr(rng, n, isolated=6, max_len=9):
    """Sorted, duplicate-free rows of 0..max_len entries; ``isolated`` random rows are empty."""
    lens = rng.integers(0, max_len + 1, n)
    lens[rng.choice(n, isolated, replace=False)] = 0
    rows = [np.sort(rng.choice(n, k, replace=False)) for k in lens]
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return indptr, np.concatenate(rows).astype(np.int64)


def naive_max(indptr, indices, weights, left, right, loop, x, rows):
    """float64: materialise the message w·r[u]·x[u] of every edge (v ← u) and the self-loop's
    λ·r[v]·x[v], scatter them per destination with a max (empty → 0), times l[v]."""
    n, d = x.shape
    x = x.astype(np.float64)
    dst = np.repeat(np.arange(n), np.diff(indptr))
    w = np.ones(len(indices)) if weights is None else weights.astype(np.float64)
    msg = (w * right.astype(np.float64)[indices])[:, None] * x[indices]            # [m, d]
    if loop != 0:
        dst = np.concatenate([dst, np.arange(n)])
        msg = np.concatenate([msg, loop * right.astype(np.float64)[:, None] * x])
    out = np.full((n, d), -np.inf)
    np.maximum.at(out, dst, msg)
    has = np.zeros(n, bool)
    has[dst] = True
    out[~has] = 0.0
    out *= left.astype(np.float64)[:, None]
    return out[rows]


def float32_max(indptr, indices, weights, left, right, loop, x, rows):
    """The kernel's float32 candidates ((w·r[u])·x[u], (λ·r[v])·x[v]), max, then · l[v], row by row."""
    out = np.zeros((len(rows), x.shape[1]), np.float32)
    for i, v in enumerate(rows):
        p0, p1 = indptr[v], indptr[v + 1]
        cands = []
        if loop != 0:
            cands.append((np.float32(loop) * right[v]) * x[v])
        for p in range(p0, p1):
            u = indices[p]
            wr = right[u] if weights is None else weights[p] * right[u]
            cands.append(wr * x[u])
        if cands:
            out[i] = np.max(np.stack(cands), axis=0) * left[v]
    return out


def _case(rng, n=70, d=11):
    indptr, indices = _random_csr(rng, n)
    x = rng.standard_normal((n, d)).astype(np.float32)            # negative features
    left = rng.uniform(0.0, 2.0, n).astype(np.float32)            # l ≥ 0 (the caller's guarantee)
    left[:3] = 0.0
    right = rng.uniform(-1.5, 1.5, n).astype(np.float32)          # r of either sign
    weights = rng.uniform(-1.0, 2.0, len(indices)).astype(np.float32)
    return indptr, indices, weights, left, right, x


@pytest.mark.parametrize("loop", [0.0, 1.0, 0.5])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("block", [(0, 70), (13, 58)], ids=["all-rows", "r0>0"])
def test_kernel_equals_naive_scatter_max(rng, loop, weighted, idx_dtype, block):
    indptr, indices, weights, left, right, x = _case(rng)
    assert (np.diff(indptr) == 0).sum() >= 6 and np.diff(indptr).max() > 2
    weights = weights if weighted else None
    r0, r1 = block
    p0, p1 = indptr[r0], indptr[r1]
    out = np.full((r1 - r0, x.shape[1]), np.nan, np.float32)
    spmm_rows_max(indptr[r0:r1 + 1], indices[p0:p1].astype(idx_dtype), None if weights is None else weights[p0:p1],
                  r0, left, right, loop, x, out)
    rows = np.arange(r0, r1)
    ref = naive_max(indptr, indices, weights, left, right, loop, x, rows)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-30)
    np.testing.assert_array_equal(out, float32_max(indptr, indices, weights, left, right, loop, x, rows))
    empty = (np.diff(indptr)[r0:r1] == 0) & (loop == 0)
    assert empty.any() == (loop == 0) and (out[empty] == 0).all()


def test_kernel_edge_cases():
    """Empty rows give 0 even with all-negative candidates elsewhere; NaN is skipped like np.fmax
    (NaN only where every candidate of the column is), -inf is an ordinary value; a block of zero
    rows and a d = 0 block are no-ops; sum and max agree on rows of one entry."""
    indptr = np.array([0, 0, 2, 3, 3], np.int64)
    indices = np.array([0, 3, 1], np.int32)
    x = np.array([[-1, -2], [-3, np.nan], [5, 6], [-7, -0.5]], np.float32)
    one = np.ones(4, np.float32)
    out = np.empty((4, 2), np.float32)
    spmm_rows_max(indptr, indices, None, 0, one, one, 0.0, x, out)
    np.testing.assert_array_equal(out, [[0, 0], [-1, -0.5], [-3, np.nan], [0, 0]])
    spmm_rows_max(indptr, indices, None, 0, one, one, 1.0, x, out)
    np.testing.assert_array_equal(out, [[-1, -2], [-1, -0.5], [5, 6], [-7, -0.5]])
    xi = np.array([[-np.inf, np.nan, np.nan], [np.nan, -np.inf, np.nan], [np.nan, np.nan, np.nan]], np.float32)
    ip = np.array([0, 2, 3, 3], np.int64)
    o3 = np.empty((3, 3), np.float32)
    for loop in (0.0, 1.0):
        spmm_rows_max(ip, np.array([0, 1, 2], np.int64), None, 0, one, one, loop, xi, o3)
        np.testing.assert_array_equal(o3[:2], [[-np.inf, -np.inf, np.nan], [np.nan, -np.inf, np.nan]]
                                      if loop else [[-np.inf, -np.inf, np.nan], [np.nan, np.nan, np.nan]])
    spmm_rows_max(indptr[2:2 + 1], indices[:0], None, 2, one, one, 1.0, x, out[:0])
    spmm_rows_max(indptr, indices, None, 0, one, one, 1.0, x[:, :0], np.empty((4, 0), np.float32))
    # rows with one entry and no loop: max = sum, bit for bit
    ip1 = np.array([0, 1, 2, 3, 4], np.int64)
    idx1 = np.array([2, 0, 3, 2], np.int64)
    a, b = np.empty((4, 2), np.float32), np.empty((4, 2), np.float32)
    xf = np.nan_to_num(x)
    spmm_rows_max(ip1, idx1, None, 0, one * 0.5, one * 3, 0.0, xf, a)
    reference_spmm_rows(ip1, idx1, None, 0, one * 0.5, one * 3, 0.0, xf, b)
    np.testing.assert_array_equal(a, b)


# -- HDG aggregation --------------------------------------------------------------------------------------
def _children(lvl, p):
    if lvl.fanout:
        return range(p * lvl.fanout, (p + 1) * lvl.fanout)
    return range(int(lvl.offsets[p]), int(lvl.offsets[p + 1]))


def _fmax(a, b):
    """Elementwise max of two lists, a NaN skipped unless both are (np.fmax)."""
    return [b_ if a_ != a_ or b_ > a_ else a_ for a_, b_ in zip(a, b)]


def _naive_max(lvl, p, x):
    """Instance p of ``lvl`` in plain Python: a vertex level's elementwise max of w·x[id] over its
    members; an inner level's list of its instances (reduced by the caller); None for an instance
    with no member below it (it takes no part in a max above it)."""
    if lvl.kind == "vertices":
        best = None
        for c in _children(lvl, p):
            w = 1.0 if lvl.weights is None else float(lvl.weights[c])
            row = [w * float(t) for t in x[int(lvl.ids[c])]]
            best = row if best is None else _fmax(best, row)
        return best
    insts = [_naive_max(lvl.child, c, x) for c in _children(lvl, p)]
    if lvl.combine == "slots":
        return insts
    best = None
    for inst in insts:
        if inst is not None:
            best = inst if best is None else _fmax(best, inst)
    return best


def naive_aggregate_max(h, x):
    out = {}
    zero = [0.0] * x.shape[1]   # a node with no member at all gives 0
    for r in h.roots:
        for v in range(h.num_nodes):
            got = _naive_max(r, v, x)
            if r.kind == "instances" and r.combine == "slots":
                for name, inst in zip(r.slots, got):
                    out.setdefault(name, []).append(zero if inst is None else inst)
            else:
                out.setdefault(r.name, []).append(zero if got is None else got)
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("which", ["walks", "shells", "anchors", "handmade"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hdg_max_equals_python_reference(rng, which, dtype):
    n = 50
    indptr, indices = _random_csr(rng, n, isolated=5, max_len=5)
    x = rng.standard_normal((n, 4)).astype(dtype)
    h = {"walks": lambda: select(indptr, indices, RandomWalkSelect(6, 3, 4), seed=2),
         "shells": lambda: select(indptr, indices, HopShellsSelect(2, cap=2), seed=2),
         "anchors": lambda: select(indptr, indices, AnchorsSelect(3, 4), seed=2),
         "handmade": lambda: handmade_hdg(rng, n)}[which]()
    got = aggregate(h, x, "max")
    ref = naive_aggregate_max(h, x.astype(np.float64))
    assert list(got) == h.channels() and set(got) == set(ref)
    for k in ref:
        assert got[k].shape == x.shape and got[k].dtype == dtype
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12 if dtype == np.float64 else 1e-6, atol=0)


def test_hdg_max_skips_nan_like_fmax(rng):
    n = 30
    h = handmade_hdg(rng, n)
    x = rng.standard_normal((n, 3))
    x[rng.choice(n, 12, replace=False), rng.integers(0, 3, 12)] = np.nan
    x[5] = np.nan
    got = aggregate(h, x, "max")
    ref = naive_aggregate_max(h, x)
    for k in ref:   # NaN positions must match too
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=0)


def test_hdg_max_empty_parents_give_zero_and_empty_instances_take_no_part(rng):
    n = 20
    h = handmade_hdg(rng, n)
    x = -1.0 - rng.random((n, 3))                    # every feature negative: 0 only from "empty"
    got = aggregate(h, x, "max")["var"]
    assert (got[:3] == 0).all() and (got[3:][np.diff(h.roots[0].offsets)[3:] > 0] != 0).any()
    # a node whose instances are partly empty: the max of its non-empty ones, negative with positive
    # weights (it was 0: the empty instances' 0 won every max)
    import dataclasses

    var, members = h.roots[0], h.roots[0].child
    var = dataclasses.replace(var, child=dataclasses.replace(members, weights=np.abs(members.weights) + 0.1))
    got = aggregate(Hdg(n, (var,)), x, "max")["var"]
    sizes = np.diff(members.offsets)
    mixed = [v for v in range(n) if (sizes[var.offsets[v]:var.offsets[v + 1]] == 0).any()
             and (sizes[var.offsets[v]:var.offsets[v + 1]] > 0).any()]
    assert mixed and (got[mixed] < 0).all()


def test_reduce_names_are_checked(tmp_path):
    with pytest.raises(GnnprepError, match="expected mean, sum or max"):
        aggregate(Hdg(1, ()), np.zeros((1, 1)), "median")
    with pytest.raises(GnnprepError, match="expected mean, sum or max"):
        PrecomputeConfig(hdg="h.h5", hdg_reduce="median").check()
    PrecomputeConfig(hdg="h.h5", hdg_reduce="max").check()


# -- end to end -------------------------------------------------------------------------------------------
def test_precompute_hdg_reduce_max_cli(tmp_path, rng):
    path, src, dst, x = make_store(tmp_path, rng, n=60, m=250, d=5)
    r = run(["hdg", path, "--select", "anchors:sets=3,size=4", "-o", tmp_path / "h.h5"])
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "f.h5"
    r = run(["precompute", path, "--hops", "2", "--hdg", tmp_path / "h.h5", "--hdg-reduce", "max", "-o", out,
             "--json"])
    assert r.exit_code == 0, r.stderr
    h, _ = read_hdg(tmp_path / "h.h5")
    ref = reference_hops(src, dst, x, len(x), "sym", 2)
    with FeatureStore(out) as f:
        channels = json.loads(f.f.attrs["hdg_channels"])
        assert channels == ["anchor_set"]
        for k in range(3):
            want = naive_aggregate_max(h, ref[k])["anchor_set"]
            assert_close(f.hop(k, "anchor_set")[:], want)
            # exactly the HDG max of the hop as written
            np.testing.assert_array_equal(f.hop(k, "anchor_set")[:], aggregate(h, f.hop(k)[:], "max")["anchor_set"])
    r = run(["precompute", path, "--hdg", tmp_path / "h.h5", "--hdg-reduce", "median", "-o", tmp_path / "g.h5"])
    assert r.exit_code == 2
