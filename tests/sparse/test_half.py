"""float32 → float16 and back (:mod:`gnnprep.sparse.half`): numpy's bits for every finite value
(ties to even, subnormals, the overflow boundary), inf for what overflows, NaN kept NaN; the
writer's gather and check fused; ``--dtype float16`` runs (hops and HDG channels) byte for byte what
numpy's cast of the float32 results gives."""

import json

import numpy as np
import pytest
from fixtures import make_store

from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore, read_columns_float32
from gnnprep.precompute.run import precompute
from gnnprep.sparse import half


def _numpy_half(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16)


def _same_bits(ours, want):
    """Bit for bit, NaN for NaN (numpy keeps a NaN's payload, these kernels make it quiet)."""
    nan = np.isnan(want)
    assert (np.isnan(ours) == nan).all()
    assert (ours.view(np.uint16)[~nan] == want.view(np.uint16)[~nan]).all()


def _edge_values() -> np.ndarray:
    f16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    every_half = f16.astype(np.float32)
    finite = np.sort(np.unique(every_half[np.isfinite(every_half)]))
    mid = (finite[:-1].astype(np.float64) + finite[1:]) / 2          # ties: rounded to the even neighbour
    near = np.concatenate([np.nextafter(mid.astype(np.float32), np.float32(np.inf)),
                           np.nextafter(mid.astype(np.float32), np.float32(-np.inf))])
    special = np.array([0.0, -0.0, 65504, 65519.99, 65520, 65536, 1e6, np.inf, -np.inf, np.nan, 2.0**-24, 2.0**-25,
                        2.0**-25 * 1.0000001, 2.0**-26, 6.1e-5, 2.0**-14, 2.0**-14 * (1 - 2.0**-11), 1e-45, 1e-38,
                        np.finfo(np.float32).max], dtype=np.float64)
    return np.concatenate([every_half, mid.astype(np.float32), near, special.astype(np.float32),
                           -special.astype(np.float32)]).astype(np.float32)


def test_every_edge_value_rounds_as_numpy():
    x = _edge_values()
    x = np.resize(x, (len(x) + 63) // 64 * 64).reshape(-1, 64)
    out = np.empty(x.shape, np.float16)
    half.half_finite(x, out)
    _same_bits(out, _numpy_half(x))


@pytest.mark.parametrize("scale", [1e-7, 1e-3, 1.0, 300.0, 3e4])
def test_random_values_round_as_numpy_and_widen_back_exactly(scale):
    rng = np.random.default_rng(int(scale * 1e7) % 1000)
    x = (rng.standard_normal((300, 37)) * scale).astype(np.float32)
    out = np.empty(x.shape, np.float16)
    finite = half.half_finite(x, out)
    want = _numpy_half(x)
    _same_bits(out, want)
    assert finite == bool(np.isfinite(want).all())
    back = np.empty(x.shape, np.float32)
    half.widen_half(out, back)
    assert back.tobytes() == want.astype(np.float32).tobytes()


def test_every_half_widens_as_numpy():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    out = np.empty(h.shape, np.float32)
    half.widen_half(h, out)
    want = h.astype(np.float32)
    nan = np.isnan(want)
    assert (np.isnan(out) == nan).all()
    assert (out.view(np.uint32)[~nan] == want.view(np.uint32)[~nan]).all()


@pytest.mark.parametrize("d", [1, 7, 16, 33, 128])
def test_gathered_rows_are_x_idx_as_float16_and_their_check(d):
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((50, d)) * 100).astype(np.float32)
    x[3] = -0.0
    idx = rng.integers(0, 50, 80)
    out = np.full((80, d), np.nan, dtype=np.float16)
    assert half.take_rows_half_finite(x, idx, out) is True
    assert out.tobytes() == x[idx].astype(np.float16).tobytes()
    x[idx[5], d - 1] = 70000.0   # past float16's range: inf, and the check says so
    assert half.take_rows_half_finite(x, idx, out) is False
    assert np.isinf(out[5, d - 1])


def test_strided_rows_and_the_generic_paths():
    rng = np.random.default_rng(0)
    wide = rng.standard_normal((40, 12)).astype(np.float32)
    x = wide[:, 3:9]   # rows of a wider buffer
    out = np.empty(x.shape, np.float16)
    assert half.copy_finite(x, out) is True
    assert out.tobytes() == x.astype(np.float16).tobytes()
    y = np.empty(x.shape, np.float64)   # not a conversion of these kernels: numpy's
    assert half.copy_finite(x, y) is True and (y == x).all()


@pytest.mark.parametrize("blocks", [None, (1, 2, 3), (1, 1, 2)])   # contiguous, chunked, column blocks
@pytest.mark.parametrize("reorder", ["none", "degree"])              # written as is, gathered back
def test_float16_runs_write_numpys_cast_of_the_float32_hops(tmp_path, rng, blocks, reorder):
    path, *_ = make_store(tmp_path, rng, n=300, d=7)
    for dtype in ("float32", "float16"):
        precompute(path, tmp_path / f"{dtype}.h5", PrecomputeConfig(hops=2, device="cpu", dtype=dtype, blocks=blocks,
                                                                    reorder=reorder))
    with FeatureStore(tmp_path / "float32.h5") as a, FeatureStore(tmp_path / "float16.h5") as h:
        for k in range(3):
            assert h.hop(k).dtype == np.float16
            assert h.hop(k)[:].tobytes() == a.hop(k)[:].astype(np.float16).tobytes()
            # read back as the HDG channels read a hop: widened exactly, in pieces
            assert read_columns_float32(h.hop(k), 2, 6).tobytes() == h.hop(k)[:, 2:6].astype(np.float32).tobytes()


def test_float16_hdg_channels_are_the_cast_of_the_aggregated_float16_hops(tmp_path, rng, monkeypatch):
    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg.file import read_hdg, write_hdg
    from gnnprep.hdg.select import RandomWalkSelect, select, select_spec
    from gnnprep.hdg.structure import aggregate
    from gnnprep.precompute import features

    monkeypatch.setattr(features, "HALF_READ_BYTES", 64)   # the hops read back in many pieces
    path, *_ = make_store(tmp_path, rng, n=120, d=5)
    sel = RandomWalkSelect(6, 3, 4)
    with GraphStore(path) as g:
        write_hdg(select(g.indptr(), g.indices(), sel, seed=3), tmp_path / "h.h5", {"command": "test"}, sel.name,
                  select_spec(sel), 3, g.fingerprint, 0, 0)
    precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2, device="cpu", dtype="float16", blocks=(1, 1, 2),
                                                         hdg=str(tmp_path / "h.h5")))
    hdg, _ = read_hdg(tmp_path / "h.h5")
    with FeatureStore(tmp_path / "f.h5") as f:
        for k in range(3):
            want = aggregate(hdg, f.hop(k)[:].astype(np.float32), "mean")
            for ch in json.loads(f.f.attrs["hdg_channels"]):
                assert f.hop(k, ch)[:].tobytes() == want[ch].astype(np.float16).tobytes()
