"""precompute --hdg: HDG channels of every hop equal the HDG's aggregation of a float64 S^k X."""

import json

import numpy as np
import pytest
from fixtures import assert_close, make_store, reference_hops, run

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.store import GraphStore
from gnnprep.hdg.file import read_hdg, write_hdg
from gnnprep.hdg.select import HopShellsSelect, RandomWalkSelect, select, select_spec
from gnnprep.hdg.structure import aggregate
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.run import precompute


def _hdg(tmp_path, store_path, sel, name="h.h5"):
    with GraphStore(store_path) as g:
        h = select(g.indptr(), g.indices(), sel, seed=3)
        write_hdg(h, tmp_path / name, {"command": "test"}, sel.name, select_spec(sel), 3, g.fingerprint, 0, 0)
    return tmp_path / name


@pytest.mark.parametrize("sel", [HopShellsSelect(2, cap=3), RandomWalkSelect(6, 3, 4)], ids=["shells", "walks"])
@pytest.mark.parametrize("blocks", [None, (1, 2, 3)])   # d = 7 columns in 3 blocks: not divisible
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_hdg_channels_of_every_hop(tmp_path, rng, sel, blocks, reduce):
    path, src, dst, x = make_store(tmp_path, rng)
    hdg_path = _hdg(tmp_path, path, sel)
    precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=3, device="cpu", blocks=blocks, hdg=str(hdg_path),
                                                         hdg_reduce=reduce))
    h, _ = read_hdg(hdg_path)
    ref = reference_hops(src, dst, x, len(x), "sym", 3)
    with FeatureStore(tmp_path / "f.h5") as f:
        channels = json.loads(f.f.attrs["hdg_channels"])
        assert channels and f.operators() == ["sym"] + channels
        for k in range(4):
            want = aggregate(h, ref[k], reduce)
            assert sorted(want) == sorted(channels)
            for ch in channels:
                assert_close(f.hop(k, ch)[:], want[ch])
            assert_close(f.hop(k)[:], ref[k])


def test_hdg_needs_all_rows_and_the_same_graph(tmp_path, rng):
    path, *_ = make_store(tmp_path, rng)
    other, *_ = make_store(tmp_path, np.random.default_rng(99), name="other.h5")
    hdg_path = _hdg(tmp_path, path, HopShellsSelect(1))
    with pytest.raises(GnnprepError, match="--rows all"):
        precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=1, device="cpu", rows="labeled", hdg=str(hdg_path)))
    with pytest.raises(GnnprepError, match="another graph"):
        precompute(other, tmp_path / "f.h5", PrecomputeConfig(hops=1, device="cpu", hdg=str(hdg_path)))
    assert not (tmp_path / "f.h5").exists()


def test_sign_and_gprgnn_train_on_hdg_channels_end_to_end(tmp_path):
    assert run(["ingest", "sample", "-o", tmp_path / "s.h5"]).exit_code == 0
    r = run(["hdg", tmp_path / "s.h5", "--select", "random-walk:walks=10,length=3,topk=8", "-o", tmp_path / "h.h5"])
    assert r.exit_code == 0, r.stderr
    r = run(["precompute", tmp_path / "s.h5", "--hops", "2", "--hdg", tmp_path / "h.h5", "-o", tmp_path / "f.h5"])
    assert r.exit_code == 0, r.stderr
    r = run(["train", "sign", tmp_path / "f.h5", "-o", tmp_path / "run", "--operator", "sym,topk", "--epochs", "5",
             "--hidden", "16", "--threads", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    assert 0.0 <= json.loads(r.stdout)["test_acc"] <= 1.0
    # lc-gprgnn over the HDG channel's hops HDG(S^k X), k = 0..K
    r = run(["train", "lc-gprgnn", tmp_path / "f.h5", "-o", tmp_path / "run2", "--operator", "topk", "--epochs", "3",
             "--hidden", "16", "--threads", "1", "--json"])
    assert r.exit_code == 0, r.stderr
