"""The trainer: models against per-hop references, honest model selection, loaders, resume, CLI."""

import dataclasses
import json

import h5py
import numpy as np
import pytest
import torch
from fixtures import run, run_json, write_features

from gnnprep.core.errors import GnnprepError
from gnnprep.train.batches import InMemoryBatches, StreamingBatches
from gnnprep.train.batches import take_rows as _take
from gnnprep.train.models import MODELS, RECOMPUTE_SEGMENTS, ModelSpec, build_model, gpr_init, views
from gnnprep.train.trainer import TrainConfig, load_model, open_data, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small(**kw):
    # every regime setting given (weight decay 0, features as stored, ...): these tests check the
    # mechanics, not gnnprep.train.regimes (tests/train/test_regimes.py)
    base = dict(hidden=32, dropout=0.0, input_dropout=0.0, dprate=0.0, lr=0.02, weight_decay=0.0, batch_size=16,
                epochs=20, patience=0, normalize_features="none", checkpoint_every=1e9)
    base.update(kw)
    return TrainConfig(**base)


def spec(name, **kw):
    base = dict(name=name, in_dim=6, num_classes=3, hops=3, hidden=8, dropout=0.0, dprate=0.0)
    base.update(kw)
    return ModelSpec(**base)


# --------------------------------------------------------------------------------------- models


@pytest.mark.parametrize("model", MODELS)
def test_every_model_overfits_a_tiny_dataset(tmp_path, rng, model):
    path = write_features(tmp_path / "f.h5", rng, n=40, d=48, K=2, operators=("sym", "rw"))
    with h5py.File(path, "a") as f:  # train on every row
        del f["splits/train"]
        f["splits/train"] = np.arange(40)
    cfg = small(model=model, epochs=200, lr=0.1 if model == "sgc" else 0.02, eval_every=200, batch_size=40)
    report = train(path, tmp_path / "run", cfg)
    assert report.runs[0].history[-1]["train_loss"] < 0.05


def test_gamma_is_initialised_to_personalised_pagerank():
    g = gpr_init(0.1, 3)
    np.testing.assert_allclose(g.numpy(), [0.1, 0.09, 0.081, 0.729], rtol=1e-6)
    assert abs(float(g.sum()) - 1.0) < 1e-6
    m = build_model(spec("lc-gprgnn", alpha=0.2, hops=4))
    np.testing.assert_allclose(m.gamma.detach().numpy(), [0.2, 0.16, 0.128, 0.1024, 0.4096], rtol=1e-6)
    assert m.gamma.requires_grad


def _jk_reference(m, x):
    """Hop k (x[:, k-1]) through layers 1..k one at a time, in a plain loop."""
    states = []
    for k in range(1, m.K + 1):
        h = x[:, k - 1]
        for i in range(k):
            h = torch.relu(m.layers[i](h))
        states.append(h)
    return states


@pytest.mark.parametrize("pool", ["concat", "max"])
def test_jknet_hop_k_goes_through_k_shared_layers_then_pools(pool):
    torch.manual_seed(0)
    m = build_model(spec("lc-jknet", pool=pool)).eval()
    x = torch.randn(5, 3, 6)
    states = _jk_reference(m, x)
    got = m.hop_states(x)
    for a, b in zip(got, states):
        torch.testing.assert_close(a, b)
    pooled = torch.cat(states, 1) if pool == "concat" else torch.stack(states, 1).max(1).values
    torch.testing.assert_close(m(x), m.out(pooled))
    assert m.out.in_features == (3 * 8 if pool == "concat" else 8)
    assert len(m.layers) == 3 and views(spec("lc-jknet")) == [("sym", 1), ("sym", 2), ("sym", 3)]


def test_gprgnn_batched_hops_equal_a_loop_over_hops():
    torch.manual_seed(0)
    m = build_model(spec("lc-gprgnn", layers=3)).eval()
    with torch.no_grad():
        m.gamma.copy_(torch.tensor([0.5, -0.2, 0.3, 0.1]))
    x = torch.randn(7, 4, 6)
    ref = sum(m.gamma[k] * m.mlp(x[:, k]) for k in range(4))
    torch.testing.assert_close(m(x), ref)


def test_sign_maps_every_view_separately():
    torch.manual_seed(0)
    s = spec("sign", operators=("sym", "rw"), hops=2)
    assert views(s) == [("sym", 0), ("sym", 1), ("sym", 2), ("rw", 1), ("rw", 2)]
    m = build_model(s).eval()
    x = torch.randn(4, 5, 6)
    h = torch.cat([torch.relu(x[:, v] @ m.weight[v] + m.bias[v]) for v in range(5)], 1)
    torch.testing.assert_close(m(x), m.mlp(h))


def test_sgc_and_mlp_read_one_hop():
    assert views(spec("sgc", hops=2)) == [("sym", 2)]
    assert views(spec("lc-gcn", hops=2)) == [("sym", 2)]
    assert views(spec("mlp", hops=2)) == [("sym", 0)]
    m = build_model(spec("sgc"))
    assert sum(p.numel() for p in m.parameters()) == 6 * 3 + 3


@pytest.mark.parametrize("model", MODELS)
def test_recompute_gives_the_same_gradients(model):
    x = torch.randn(10, len(views(spec(model))), 6)
    y = torch.randint(0, 3, (10,))
    grads = []
    for recompute in (False, True):
        torch.manual_seed(1)
        m = build_model(spec(model, recompute=recompute, layers=None)).train()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    # with dropout, the recomputation replays each segment's masks: the gradients are those of the
    # same segments run without checkpointing
    runs = []
    for recompute in (True, False):
        torch.manual_seed(1)
        m = build_model(spec(model, recompute=recompute, dropout=0.4, layers=None)).train()
        out = m(x) if recompute else torch.cat([m.body(part) for part in x.chunk(RECOMPUTE_SEGMENTS)])
        torch.nn.functional.cross_entropy(out, y).backward()
        runs.append([p.grad.clone() for p in m.parameters()])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b)


def test_fused_relu_dropout_matches_its_definition():
    from gnnprep.train.models import _keep_mask, dropout, relu_dropout

    h = torch.randn(300, 64, requires_grad=True)
    torch.manual_seed(5)
    out = relu_dropout(h, 0.3, True)
    torch.manual_seed(5)
    keep, scale = _keep_mask(h.shape, 0.3, h.device)
    ref_h = h.detach().clone().requires_grad_(True)
    ref = torch.relu(ref_h) * keep * scale
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(h.grad, ref_h.grad)
    assert scale == pytest.approx(1 / 0.7, rel=1e-4)
    assert abs(float(keep.float().mean()) - 0.7) < 0.01           # 19,200 draws
    torch.testing.assert_close(relu_dropout(h, 0.3, False), torch.relu(h))
    big = torch.ones(200_000)
    assert float(dropout(big, 0.5, True).mean()) == pytest.approx(1.0, abs=0.01)   # unbiased
    assert torch.equal(dropout(big, 0.5, False), big)


# --------------------------------------------------------------------------------------- selection


def test_reported_test_score_is_from_the_best_validation_epoch(tmp_path, rng, monkeypatch):
    import gnnprep.train.trainer as tr

    path = write_features(tmp_path / "f.h5", rng)
    # validation loss is best at epoch 3; epoch 6 has a better *test* score but worse validation
    script = [(1.0, 0.5, 0.50), (0.9, 0.6, 0.55), (0.8, 0.6, 0.60), (0.5, 0.7, 0.61), (0.7, 0.6, 0.70),
              (0.9, 0.65, 0.80), (0.6, 0.69, 0.95), (1.2, 0.5, 0.99)]
    states = []

    def planted(model, data, config, accuracy):
        vl, va, ta = script[len(states)]
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"valid_loss": vl, "valid_acc": va, "test_acc": ta}

    monkeypatch.setattr(tr, "evaluate", planted)
    report = train(path, tmp_path / "run", small(model="lc-gcn", epochs=len(script)))
    s = report.summary()
    assert (s["best_epoch"], s["test_acc"], s["valid_acc"]) == (3, 0.61, 0.7)
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=False)
    for k, v in states[3].items():
        torch.testing.assert_close(saved["state_dict"][k], v.cpu())  # model.pt holds CPU tensors on every device
    assert any(not torch.equal(saved["state_dict"][k], v.cpu()) for k, v in states[-1].items())
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [h["test_acc"] for h in metrics["runs"][0]["history"]] == [t for _, _, t in script]
    assert metrics["summary"]["test_acc"] == 0.61

    # selection by accuracy picks epoch 3 too (0.7 is the top validation accuracy)
    states.clear()
    report = train(path, tmp_path / "run2", small(model="lc-gcn", epochs=len(script), select="acc"))
    assert report.summary()["best_epoch"] == 3


def test_patience_stops_early(tmp_path, rng, monkeypatch):
    import gnnprep.train.trainer as tr

    calls = []

    def planted(model, data, config, accuracy):
        calls.append(1)
        return {"valid_loss": 1.0 if len(calls) > 2 else 2.0 - len(calls), "valid_acc": 0.5, "test_acc": 0.5}

    monkeypatch.setattr(tr, "evaluate", planted)
    path = write_features(tmp_path / "f.h5", rng)
    r = train(path, tmp_path / "run", small(model="mlp", epochs=100, patience=5)).runs[0]
    assert r.best_epoch == 1 and r.epochs_run == 7


def test_seed_repeats_a_run_and_runs_report_mean_and_std(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng)
    cfg = small(model="lc-gprgnn", dropout=0.3, dprate=0.3, epochs=6, seed=7)
    a = train(path, tmp_path / "a", cfg).runs[0]
    b = train(path, tmp_path / "b", cfg).runs[0]
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    c = train(path, tmp_path / "c", small(model="lc-gprgnn", dropout=0.3, dprate=0.3, epochs=6, seed=8)).runs[0]
    assert [h["train_loss"] for h in a.history] != [h["train_loss"] for h in c.history]
    rep = train(path, tmp_path / "r", small(model="lc-gprgnn", dropout=0.3, epochs=6, seed=7, runs=3))
    s = rep.summary()
    tests = [r["test_acc"] for r in s["per_run"]]
    assert [r["seed"] for r in s["per_run"]] == [7, 8, 9]
    assert s["test_acc"] == pytest.approx(np.mean(tests)) and s["test_acc_std"] == pytest.approx(np.std(tests, ddof=1))


# --------------------------------------------------------------------------------------- loaders


def test_streaming_visits_every_row_once_in_a_new_order_each_epoch(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng, n=300, d=5, K=1, chunk_rows=16)
    with h5py.File(path) as f:
        x0 = f["hops/0"][:]
        y = f["labels"][:]
    held = np.arange(3, 300, 2)                      # every other row of the file
    split = np.arange(0, len(held), 1)[5:140]
    loader = StreamingBatches(path, ["hops/0", "hops/1"], held, y[held], torch.device("cpu"), window_rows=40)
    gen = np.random.default_rng(0)
    orders = []
    for _ in range(2):
        xs, ys = zip(*loader.batches(split, 32, True, gen))
        assert [len(b) for b in ys] == [32, 32, 32, 32, 7]
        x = torch.cat(xs).numpy()
        order = np.array([np.flatnonzero((x0 == row[0]).all(1))[0] for row in x])
        np.testing.assert_array_equal(np.sort(order), held[split])
        np.testing.assert_array_equal(torch.cat(ys).numpy(), y[order])
        orders.append(order)
    assert not np.array_equal(orders[0], orders[1])
    # unshuffled: file order, both views stacked
    x, _ = next(loader.batches(split, 1000, False))
    with h5py.File(path) as f:
        np.testing.assert_array_equal(x[:, 1].numpy(), f["hops/1"][:][held[split]])


def test_streaming_and_in_memory_training_agree_on_evaluation(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng, n=200, d=8, K=2, chunk_rows=8, dtype=np.float16)
    mem = train(path, tmp_path / "m", small(model="lc-gprgnn", epochs=3, batch_size=1000))
    stream = train(path, tmp_path / "s", small(model="lc-gprgnn", epochs=3, batch_size=1000, memory_budget=4000))
    assert not mem.streaming and stream.streaming
    # one batch holds every training row, so the gradient and every metric agree up to float sums
    for a, b in zip(mem.runs[0].history, stream.runs[0].history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["valid_acc"] == b["valid_acc"] and a["test_acc"] == b["test_acc"]


@pytest.mark.parametrize("density", [1.0, 0.3, 0.01])
def test_read_rows_matches_direct_indexing(tmp_path, rng, density):
    from gnnprep.train.batches import read_rows

    with h5py.File(tmp_path / "a.h5", "w") as f:
        a = f.create_dataset("a", data=rng.standard_normal((3000, 4)).astype(np.float32), chunks=(64, 4))
        b = f.create_dataset("b", data=rng.standard_normal((3000, 4)).astype(np.float32))
        pos = np.flatnonzero(rng.random(3000) < density)
        out = np.empty((len(pos), 2, 4), dtype=np.float32)
        read_rows([a, b], pos, out, 64)
        np.testing.assert_array_equal(out[:, 0], a[:][pos])
        np.testing.assert_array_equal(out[:, 1], b[:][pos])


def test_take_reads_sorted_positions_in_blocks(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["a"] = np.arange(1000) * 3
        pos = np.array([0, 5, 6, 63, 64, 65, 700, 999])
        np.testing.assert_array_equal(_take(f["a"], pos, step=64), pos * 3)
        assert len(_take(f["a"], pos[:0])) == 0


def test_in_memory_loader_holds_only_the_split_rows(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng, n=60)
    with h5py.File(path, "a") as f:
        del f["splits/test"]
    data = open_data(path, small(model="lc-gprgnn"))
    assert isinstance(data.loader, InMemoryBatches)
    assert data.loader.data.shape == (45, 4, 24) and "test" not in data.splits


# --------------------------------------------------------------------------------------- resume


def test_resume_continues_exactly(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng)
    cfg = small(model="lc-jknet", dropout=0.3, epochs=10, checkpoint_every=0, runs=2)
    full = train(path, tmp_path / "full", cfg)

    def die(stage, done, total):
        if stage.startswith("train run 2") and done == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(path, tmp_path / "cut", cfg, progress=die)
    assert (tmp_path / "cut" / "checkpoint.pt").exists() and not (tmp_path / "cut" / "model.pt").exists()
    with pytest.raises(Exception, match="--resume"):
        train(path, tmp_path / "cut", cfg)
    resumed = train(path, tmp_path / "cut", cfg, resume=True)
    for a, b in zip(full.runs, resumed.runs):
        assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
        assert (a.best_epoch, a.test_acc) == (b.best_epoch, b.test_acc)
    sa = torch.load(tmp_path / "full" / "model.pt", weights_only=False)["state_dict"]
    sb = torch.load(tmp_path / "cut" / "model.pt", weights_only=False)["state_dict"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # a different setting cannot resume
    with pytest.raises(GnnprepError, match="lr=0.02, now 0.5"):
        train(path, tmp_path / "cut", dataclasses.replace(cfg, lr=0.5), resume=True)


# --------------------------------------------------------------------------------------- CLI


def test_cli_json_and_run_folder(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng)
    out = run_json(["train", "lc-gprgnn", path, "-o", tmp_path / "run", "--epochs", "5", "--hidden", "16",
                    "--batch-size", "8", "--quiet"])
    for key in ("best_epoch", "valid_acc", "test_acc", "epochs_run", "seconds"):
        assert key in out
    assert out["epochs_run"] == 5 and 0 <= out["best_epoch"] < 5
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert len(metrics["runs"][0]["history"]) == 5 and metrics["summary"]["test_acc"] == out["test_acc"]
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=False)
    assert saved["config"]["model"] == "lc-gprgnn" and saved["features"]["graph_fingerprint"] == "g0"
    model, meta = load_model(tmp_path / "run" / "model.pt")
    assert meta["best_epoch"] == out["best_epoch"] and not model.training
    assert not list(tmp_path.joinpath("run").glob("*.tmp-*"))
    r = run(["train", "lc-gprgnn", path, "-o", tmp_path / "run", "--epochs", "5"])
    assert r.exit_code == 1 and "--resume" in r.stderr


@pytest.mark.parametrize("what", ["labels", "splits", "model", "hops"])
def test_cli_errors_are_one_line(tmp_path, rng, what):
    path = write_features(tmp_path / "f.h5", rng, labels=what != "labels", splits=what != "splits")
    args = ["train", "gcn" if what == "model" else "sgc", path, "-o", tmp_path / "run", "--epochs", "2"]
    if what == "hops":
        args += ["--hops", "7"]
    r = run(args)
    assert r.exit_code == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.stderr
    expected = {"labels": "/labels", "splits": "/splits", "model": "'gcn'", "hops": "--hops 7"}[what]
    assert expected in lines[0]


def test_ogb_evaluator_for_ogbn_artifacts(tmp_path, rng):
    path = write_features(tmp_path / "f.h5", rng, provenance={"command": "gnnprep precompute ogbn-arxiv"})
    out = run_json(["train", "sgc", path, "-o", tmp_path / "run", "--epochs", "3", "--quiet"])
    assert out["evaluator"] == "ogbn-arxiv"
    plain = run_json(["train", "sgc", path, "-o", tmp_path / "run2", "--epochs", "3", "--evaluator", "plain"])
    assert plain["evaluator"] == "plain" and plain["test_acc"] == out["test_acc"]


def test_train_on_precomputed_graph(tmp_path, rng):
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    n = 60
    src, dst = rng.integers(0, n, 200), rng.integers(0, n, 200)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 5)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, n))
    (tmp_path / "splits").mkdir()
    for name, ids in (("train", np.arange(0, 30)), ("valid", np.arange(30, 45)), ("test", np.arange(45, 60))):
        np.save(tmp_path / "splits" / f"{name}.npy", ids)
    ingest(str(tmp_path / "e.npy"), tmp_path / "g.h5",
           IngestConfig(source=SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"),
                                             labels=str(tmp_path / "y.npy"), splits=str(tmp_path / "splits"))))
    precompute(tmp_path / "g.h5", tmp_path / "f.h5", PrecomputeConfig(hops=2, operators=("sym", "rw"), rows="labeled"))
    out = run_json(["train", "sign", tmp_path / "f.h5", "-o", tmp_path / "run", "--epochs", "3", "--hidden", "8"])
    assert out["epochs_run"] == 3 and 0 <= out["test_acc"] <= 1


def test_ogb_evaluator_from_the_stores_source_whatever_the_paths(tmp_path):
    """A store ingested from papers100M's folder, precomputed and trained under paths that name no
    data set: the artifact's provenance carries the store's source, and train scores by ogb's
    evaluator (it fell back to the plain one)."""
    from ogb_layouts import make_papers100m_like

    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    spec = str(make_papers100m_like(tmp_path / "data", n=400, m=1500, d=6, seed=1).path)
    ingest(spec, tmp_path / "g.h5", IngestConfig())
    precompute(tmp_path / "g.h5", tmp_path / "f.h5", PrecomputeConfig(hops=2, rows="labeled"))
    out = run_json(["train", "sgc", tmp_path / "f.h5", "-o", tmp_path / "run", "--epochs", "2", "--quiet"])
    assert out["evaluator"] == "ogbn-papers100M"
