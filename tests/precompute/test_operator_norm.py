"""Issue 16 (first step): the degree-exponent operator norm:a,b,loop, parsed from --operator and run
in the fused kernels, against a naive reference that materialises per-edge messages (float64)."""

import h5py
import numpy as np
import pytest
from fixtures import make_store, run, run_json

from gnnprep.core.errors import GnnprepError
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.operators import parse_operators, split_operators
from gnnprep.precompute.run import precompute


def message_reference(store_path, a, b, loop, hops):
    """S^k X the way a message-passing UDF runs it: per stored edge u -> v (and per self-loop) a
    message x_u · d̃_v^-a · d̃_u^-b, then a scatter-add into v; d̃ = in-degree + loop."""
    with h5py.File(store_path) as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:].astype(np.int64)
        x = f["nodes/features"][:].astype(np.float64)
    n = len(indptr) - 1
    dst = np.repeat(np.arange(n), np.diff(indptr))
    src = indices
    if loop:
        src, dst = np.concatenate([src, np.arange(n)]), np.concatenate([dst, np.arange(n)])
    w = np.concatenate([np.ones(len(indices)), np.full(n, loop)]) if loop else np.ones(len(indices))
    deg = np.diff(indptr).astype(np.float64) + loop

    def inv(p):
        out = np.zeros(n)
        out[deg > 0] = deg[deg > 0] ** (-p)
        return out

    coef = w * inv(a)[dst] * inv(b)[src]
    out = [x]
    for _ in range(hops):
        messages = out[-1][src] * coef[:, None]          # |E| x d, as a UDF materialises it
        h = np.zeros_like(x)
        np.add.at(h, dst, messages)
        out.append(h)
    return out


@pytest.mark.parametrize("spec,abl", [("norm:a=0.5,b=0.5,loop=1", (0.5, 0.5, 1.0)),
                                      ("norm:a=1,b=0", (1.0, 0.0, 1.0)),
                                      ("norm:a=0,b=1,loop=0", (0.0, 1.0, 0.0)),
                                      ("norm:a=0.3,b=0.9,loop=2", (0.3, 0.9, 2.0))])
@pytest.mark.parametrize("directed", [False, True])
def test_norm_matches_the_per_edge_message_reference(tmp_path, rng, spec, abl, directed):
    store = make_store(tmp_path, rng, n=80, d=7, directed=directed)[0]   # isolated nodes, loops, duplicates
    out = tmp_path / "f.h5"
    (name,) = parse_operators(spec)
    precompute(store, out, PrecomputeConfig(hops=3, operators=(name,), blocks=(1, 2, 3), device="cpu"))
    ref = message_reference(store, *abl, hops=3)
    with FeatureStore(out) as fs:
        for k in range(4):
            np.testing.assert_allclose(fs.hop(k, name)[:], ref[k], rtol=2e-5, atol=1e-6)


def test_norm_with_a_half_and_a_loop_is_sym_bitwise(tmp_path, rng):
    store = make_store(tmp_path, rng)[0]
    out = tmp_path / "f.h5"
    precompute(store, out, PrecomputeConfig(hops=2, operators=("sym", "norm:a=0.5,b=0.5,loop=1")))
    with FeatureStore(out) as fs:
        for k in range(3):
            np.testing.assert_array_equal(fs.hop(k, "sym")[:], fs.hop(k, "norm:a=0.5,b=0.5,loop=1")[:])


def test_operator_lists_keep_a_norm_specs_items_together():
    assert split_operators("sym, norm:a=1,b=0 ,rw,APA") == ["sym", "norm:a=1,b=0,loop=1", "rw", "APA"]
    assert parse_operators("norm:loop=0,a=0.25") == ("norm:a=0.25,b=0.5,loop=0",)
    for bad, what in [("norm:c=1", "expected a=, b= or loop="), ("norm:a=x", "expected a number"),
                      ("norm:a=nan", "finite"), ("norm:loop=-1", "expected >= 0"),
                      ("norm:a=1,norm:a=1.0", "named twice"), ("bogus", "unknown")]:
        with pytest.raises(GnnprepError, match=what):
            parse_operators(bad)


def test_cli_precomputes_a_norm_channel_and_trains_on_it(tmp_path, rng):
    from fixtures import write_features

    store = make_store(tmp_path, rng)[0]
    out = tmp_path / "f.h5"
    d = run_json(["precompute", store, "-o", out, "--hops", "2", "--operator", "sym,norm:a=1,b=0"])
    assert d["operators"] == ["sym", "norm:a=1,b=0,loop=1"]
    info = run_json(["info", out])
    assert "norm:a=1,b=0,loop=1" in str(info)
    bad = run(["precompute", store, "-o", tmp_path / "bad.h5", "--operator", "norm:z=1"])
    assert bad.exit_code == 2 and "expected a=, b= or loop=" in bad.stderr and not (tmp_path / "bad.h5").exists()
    feats = write_features(tmp_path / "t.h5", rng, n=60, K=2, operators=("sym", "norm:a=1,b=0,loop=1"))
    trained = run_json(["train", "sign", feats, "-o", tmp_path / "run", "--operator", "sym,norm:a=1,b=0",
                        "--epochs", "2"])
    assert trained["runs"] == 1


def ppr_reference(store_path, alpha, k, hops):
    """P^j X with P = Σ_{i<K} α(1-α)^i Ŝ^i + (1-α)^K Ŝ^K built densely (float64), Ŝ = D̃^-1/2 (A + I) D̃^-1/2."""
    with h5py.File(store_path) as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:].astype(np.int64)
        x = f["nodes/features"][:].astype(np.float64)
    n = len(indptr) - 1
    a = np.zeros((n, n))
    a[np.repeat(np.arange(n), np.diff(indptr)), indices] = 1.0
    s = (a + np.eye(n)) / np.sqrt(a.sum(1) + 1)[:, None] / np.sqrt(a.sum(1) + 1)[None, :]
    p = sum(alpha * (1 - alpha) ** i * np.linalg.matrix_power(s, i) for i in range(k))
    p = p + (1 - alpha) ** k * np.linalg.matrix_power(s, k)
    out = [x]
    for _ in range(hops):
        out.append(p @ out[-1])
    return out


@pytest.mark.parametrize("spec,alpha,k", [("ppr:", 0.1, 10), ("ppr:alpha=0.25,k=3", 0.25, 3),
                                          ("ppr:k=1,alpha=1", 1.0, 1), ("ppr:k=2", 0.1, 2)])
@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 3, 3)])
def test_ppr_matches_the_dense_truncated_diffusion(tmp_path, rng, spec, alpha, k, blocks):
    store = make_store(tmp_path, rng, n=70, d=5)[0]   # isolated nodes, loops and duplicates in the input
    out = tmp_path / "f.h5"
    (name,) = parse_operators(spec)
    precompute(store, out, PrecomputeConfig(hops=3, operators=("sym", name), blocks=blocks, device="cpu"))
    ref = ppr_reference(store, alpha, k, 3)
    with FeatureStore(out) as fs:
        for h in range(4):
            np.testing.assert_allclose(fs.hop(h, name)[:], ref[h], rtol=2e-5, atol=2e-6)


def test_ppr_rows_labeled_and_the_torch_path_agree(tmp_path, rng):
    store = make_store(tmp_path, rng, n=60, d=4)[0]
    a, b, c = tmp_path / "a.h5", tmp_path / "b.h5", tmp_path / "c.h5"
    cfg = dict(hops=2, operators=("ppr:alpha=0.2,k=4",), device="cpu")
    precompute(store, a, PrecomputeConfig(**cfg))
    precompute(store, b, PrecomputeConfig(rows="labeled", **cfg))
    precompute(store, c, PrecomputeConfig(backend="torch", **cfg))
    with FeatureStore(a) as fa_, FeatureStore(b) as fb, FeatureStore(c) as fc:
        rows = fb.f["rows"][:]
        for h in range(3):
            np.testing.assert_array_equal(fb.hop(h)[:], fa_.hop(h)[:][rows])
            np.testing.assert_allclose(fc.hop(h)[:], fa_.hop(h)[:], rtol=1e-5, atol=1e-6)


def test_ppr_specs_are_checked():
    assert parse_operators("ppr:alpha=0.2") == ("ppr:alpha=0.2,k=10",)
    for bad, what in [("ppr:alpha=0", "restart probability"), ("ppr:k=0.5", "whole number"),
                      ("ppr:beta=1", "expected alpha= or k=")]:
        with pytest.raises(GnnprepError, match=what):
            parse_operators(bad)
