"""Issue 14: defaults that fit the data (gnnprep.train.regimes) and precompute's row normalisation of X."""

import json

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from fixtures import make_store, run, run_json, write_features

from gnnprep.graph.store import GraphStore
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute
from gnnprep.train.regimes import LARGE, SMALL_MODEL, SMALL_TRAIN_ROWS, choose_regime, resolve
from gnnprep.train.trainer import TrainConfig, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_regime_follows_the_training_rows():
    assert choose_regime(1) == choose_regime(SMALL_TRAIN_ROWS) == "small"
    assert choose_regime(SMALL_TRAIN_ROWS + 1) == choose_regime(60_000) == "large"


@pytest.mark.parametrize("model", ["sgc", "lc-gcn", "lc-jknet", "lc-gprgnn", "sign", "mlp"])
def test_small_regime_fills_the_papers_settings_and_given_values_win(model):
    cfg, regime, filled = resolve(TrainConfig(model=model), train_rows=140, hops_in_file=10)
    assert regime == "small" and cfg.batch_size == 140            # one full batch
    paper = SMALL_MODEL[model]
    assert cfg.hops == paper.get("hops", 10) and cfg.lr == paper.get("lr", 0.01)
    assert cfg.weight_decay == paper.get("weight_decay", 5e-4) and cfg.normalize_features == "row"
    assert all(getattr(cfg, k) is not None for k in filled) and "hops" in filled
    given, _, filled2 = resolve(TrainConfig(model=model, lr=0.5, hops=1, normalize_features="none"), 140, 10)
    assert (given.lr, given.hops, given.normalize_features) == (0.5, 1, "none")
    assert not {"lr", "hops", "normalize_features"} & set(filled2)
    few, _, _ = resolve(TrainConfig(model=model), 140, hops_in_file=1)
    assert few.hops <= 1                                           # never more hops than the artifact has


def test_large_regime_keeps_the_lc_papers_settings():
    cfg, regime, filled = resolve(TrainConfig(model="lc-gprgnn"), train_rows=60_000, hops_in_file=4)
    assert regime == "large" and cfg.hops == 4 and cfg.layers is None    # the model's own (4 layers)
    assert {k: getattr(cfg, k) for k in LARGE} == LARGE


def test_prenormalized_features_are_not_normalised_again():
    cfg, _, _ = resolve(TrainConfig(model="sgc"), 140, 3, prenormalized=True)
    assert cfg.normalize_features == "none"


def test_the_regime_and_its_values_are_recorded(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng, n=60, K=3)
    out = run_json(["train", "sgc", str(path), "-o", str(tmp_path / "run"), "--epochs", "5"])
    assert out["regime"] == "small" and out["defaults"]["hops"] == 2 and "epochs" not in out["defaults"]
    assert out["defaults"]["batch_size"] == 30                     # every training row in one batch
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["summary"]["regime"] == "small" and metrics["config"]["hops"] == 2
    assert metrics["config"]["lr"] == 0.2 and metrics["config"]["epochs"] == 5
    r = run(["train", "sgc", str(path), "-o", str(tmp_path / "run2"), "--epochs", "2"])
    assert r.exit_code == 0 and "small regime; defaults used: hops 2" in r.stdout


def test_a_resumed_run_resolves_the_same_defaults(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng, n=60, K=3)
    first = train(path, tmp_path / "run", TrainConfig(model="lc-gcn", epochs=3, checkpoint_every=0))
    again = train(path, tmp_path / "run", TrainConfig(model="lc-gcn", epochs=6, checkpoint_every=0), resume=True)
    assert again.regime == first.regime == "small" and again.runs[0].epochs_run == 6


def _row_normalised_hops(store_path, hops):
    with h5py.File(store_path) as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:]
        x = f["nodes/features"][:].astype(np.float64)
    n = len(indptr) - 1
    l1 = np.abs(x).sum(1, keepdims=True)
    x = np.divide(x, l1, out=np.zeros_like(x), where=l1 > 0)
    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n)) + sp.eye(n)
    dinv = sp.diags(1 / np.sqrt(np.asarray(a.sum(1)).ravel()))
    s = dinv @ a @ dinv
    out = [x]
    for _ in range(hops):
        out.append(s @ out[-1])
    return out


@pytest.mark.parametrize("blocks", [None, (1, 1, 3)])
def test_precompute_row_normalisation_matches_the_dense_reference(tmp_path, rng, blocks):
    store = make_store(tmp_path, rng, d=7)[0]                      # isolated nodes, loops, duplicates
    with h5py.File(store, "a") as f:                               # a zero row stays zero
        f["nodes/features"][3] = 0
    out = tmp_path / "f.h5"
    precompute(store, out, PrecomputeConfig(hops=3, normalize_features="row", blocks=blocks))  # 7 columns, 3 blocks
    ref = _row_normalised_hops(store, 3)
    with h5py.File(out) as f:
        assert f.attrs["normalize_features"] == "row"
        for k in range(4):
            np.testing.assert_allclose(f[f"hops/{k}"][:], ref[k], rtol=1e-5, atol=1e-6)
        assert not f["hops/0"][3].any()
    with GraphStore(store) as g:
        assert g.feature_row_l1()[3] == 0


def test_precompute_normalisation_is_a_different_output_and_is_read_by_train(tmp_path, rng):
    store = make_store(tmp_path, rng)[0]
    plain, normed = tmp_path / "plain.h5", tmp_path / "normed.h5"
    precompute(store, plain, PrecomputeConfig(hops=2))
    run_json(["precompute", str(store), "-o", str(normed), "--hops", "2", "--normalize-features", "row"])
    with h5py.File(plain) as a, h5py.File(normed) as b:
        assert a.attrs["normalize_features"] == "none" and b.attrs["normalize_features"] == "row"
        assert not np.allclose(a["hops/1"][:], b["hops/1"][:])
    feats = write_features(tmp_path / "t.h5", rng, n=60, K=2)
    with h5py.File(feats, "a") as f:
        f.attrs["normalize_features"] = "row"
    out = run_json(["train", "sgc", str(feats), "-o", str(tmp_path / "run"), "--epochs", "2"])
    assert out["defaults"]["normalize_features"] == "none"         # X was normalised already
    bad = run(["precompute", str(store), "-o", str(tmp_path / "x.h5"), "--normalize-features", "l3"])
    assert bad.exit_code == 2 and not (tmp_path / "x.h5").exists()


def test_defaults_list_only_what_the_model_uses():
    """SGC is one linear layer: its hidden width, layers and dropout are filled (the config stays
    whole) but not listed among the defaults used; an MLP-bodied model lists them."""
    cfg, _, shown = resolve(TrainConfig(model="sgc"), train_rows=60_000, hops_in_file=3)
    assert cfg.hidden == LARGE["hidden"] and "hidden" not in shown and "dropout" not in shown
    assert "input_dropout" in shown and "lr" in shown
    _, _, shown = resolve(TrainConfig(model="lc-gprgnn"), train_rows=60_000, hops_in_file=3)
    assert "hidden" in shown and "dropout" in shown
