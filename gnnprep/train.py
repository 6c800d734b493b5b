"""Train an LC model on a features artifact: mini-batches of rows, honest model selection, resumable.

What makes the numbers trustworthy (the paper's notebook does none of it): training rows are
permuted every epoch; the model restored at the end — and the test score reported — is the one from
the best validation epoch (lowest validation loss by default, ``select="acc"`` for accuracy), never
the last; early stopping waits ``patience`` epochs without improvement; every run is seeded
(``seed + r`` for run r), so a run repeats exactly, and ``runs > 1`` reports mean ± sample std.

Outputs in the run folder: ``metrics.json`` (per-epoch curves of every run and a summary),
``model.pt`` (best state of the best-validation run, its config and the features' fingerprint),
``checkpoint.pt`` (everything needed to continue: model, optimizer, epoch, best state, patience
counter, RNG states, finished runs), ``curves.png`` when matplotlib is importable. Every file is
written atomically (temporary file, then ``os.replace``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gnnprep import device as devices
from gnnprep.atomic import atomic_output
from gnnprep.batches import InMemoryBatches, StreamingBatches, window_rows_for
from gnnprep.errors import GnnprepError
from gnnprep.features import FeatureStore
from gnnprep.meta import file_fingerprint
from gnnprep.models import ModelSpec, build_model, views
from gnnprep.trainconfig import NORMALIZE, RESUMABLE_CHANGES, TrainConfig  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class RunResult:
    seed: int
    best_epoch: int
    valid_loss: float
    valid_acc: float
    test_acc: float | None
    epochs_run: int
    seconds: float
    history: list = field(default_factory=list, repr=False)

    def to_dict(self, history: bool = True) -> dict:
        d = dataclasses.asdict(self)
        if not history:
            d.pop("history")
        return d


@dataclass(frozen=True)
class TrainReport:
    run_dir: str
    model: str
    runs: tuple[RunResult, ...]
    device: str
    streaming: bool
    evaluator: str
    seconds: float
    saved_run: int                          # the run whose best state is in model.pt

    def summary(self) -> dict:
        va = np.array([r.valid_acc for r in self.runs])
        te = np.array([r.test_acc if r.test_acc is not None else np.nan for r in self.runs])
        ddof = 1 if len(self.runs) > 1 else 0
        saved = self.runs[self.saved_run]
        return {
            "model": self.model, "run_dir": self.run_dir, "runs": len(self.runs),
            "best_epoch": saved.best_epoch,
            "valid_acc": float(va.mean()), "valid_acc_std": float(va.std(ddof=ddof)),
            "test_acc": None if np.isnan(te).any() else float(te.mean()),
            "test_acc_std": None if np.isnan(te).any() else float(te.std(ddof=ddof)),
            "epochs_run": int(sum(r.epochs_run for r in self.runs)),
            "seconds": round(self.seconds, 3), "device": self.device, "streaming": self.streaming,
            "evaluator": self.evaluator,
            "per_run": [r.to_dict(history=False) for r in self.runs],
        }


# ---------------------------------------------------------------------------------------------------
# the data: splits, labels, views, loader


@dataclass
class Data:
    loader: object
    splits: dict                            # name -> indices into the loader's held rows
    spec: ModelSpec
    views: list
    fingerprint: dict
    evaluator: str
    feature_bytes: int
    budget: int


def _evaluator_name(store: FeatureStore, choice: str) -> str:
    """``ogbn-<name>`` when the artifact came from an OGB node-property data set (its provenance
    names it) and the data set is scored by accuracy; ``plain`` otherwise."""
    if choice == "plain":
        return "plain"
    text = store.provenance_text
    m = re.search(r"ogbn[-_]([a-z0-9]+)", text, flags=re.IGNORECASE)
    if m is None:
        if choice == "ogb":
            raise GnnprepError(f"{store.path}: --evaluator ogb, but the provenance names no ogbn-* data set")
        return "plain"
    name = "ogbn-" + m.group(1)
    if name.lower() == "ogbn-papers100m":
        name = "ogbn-papers100M"
    return name


def _ogb_accuracy(name: str):
    """ogb's Evaluator for ``name`` (imported lazily; never lets ogb reach the network)."""
    os.environ.setdefault("OUTDATED_IGNORE", "1")
    sys.modules.setdefault("outdated", None)   # ogb's import-time PyPI version check needs it
    from ogb.nodeproppred import Evaluator

    try:
        ev = Evaluator(name)
    except ValueError:
        return None
    if ev.eval_metric != "acc":
        return None

    def acc(y_true: np.ndarray, y_pred: np.ndarray) -> float:
        return float(ev.eval({"y_true": y_true.reshape(-1, 1), "y_pred": y_pred.reshape(-1, 1)})["acc"])

    return acc


def _plain_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float((y_true == y_pred).mean()) if len(y_true) else float("nan")


def _take(dset, positions: np.ndarray, step: int = 1 << 22) -> np.ndarray:
    """dset[positions] for sorted positions, reading ``step`` entries at a time (never the whole array)."""
    out = np.empty(len(positions), dtype=dset.dtype)
    for lo in range(0, int(positions[-1]) + 1 if len(positions) else 0, step):
        a, b = np.searchsorted(positions, [lo, lo + step])
        if a < b:
            block = dset[lo:min(lo + step, int(positions[b - 1]) + 1)]
            out[a:b] = block[positions[a:b] - lo]
    return out


def open_data(path, config: TrainConfig, progress=None) -> Data:
    """Validate the artifact against the config and build the batch loader (in memory or streaming)."""
    path = Path(path)
    with FeatureStore(path) as store:
        rows = store.rows
        labels_all = store.labels()
        K_file = store.hops
        K = K_file if config.hops is None else config.hops
        if not 0 <= K <= K_file:
            raise GnnprepError(f"--hops {K}: {path} holds hops 0..{K_file}")
        file_ops = store.operators()
        if config.operators:
            for op in config.operators:
                if op not in file_ops:
                    raise GnnprepError(f"--operator {op}: {path} holds operators {', '.join(file_ops)}")
            ops = tuple(config.operators)
        else:
            ops = tuple(file_ops) if config.model == "sign" else (file_ops[0],)
        positions = store.split_positions(rows)
        held = np.unique(np.concatenate(list(positions.values())))
        labels = _take(labels_all, held).astype(np.int64)
        num_classes = store.num_classes or int(labels.max()) + 1
        bad = int(((labels < 0) | (labels >= num_classes)).sum())
        if bad:
            raise GnnprepError(f"{path}: /labels has {bad} split rows without a class in 0..{num_classes - 1} "
                               "(unlabeled rows in a split)")

        model_views = views(ModelSpec(name=config.model, in_dim=1, num_classes=num_classes, hops=K, operators=ops))
        datasets = [store.hop_name(k, op) for op, k in model_views]
        d, dtype = store.hop_shape(datasets, len(rows))
        itemsize = dtype.itemsize
        fingerprint = {"path": str(path.absolute()), "file": file_fingerprint(path),
                       "graph_fingerprint": store.graph_fingerprint}
        evaluator = _evaluator_name(store, config.evaluator)

    spec = ModelSpec(name=config.model, in_dim=d, num_classes=num_classes, hops=K, operators=ops,
                     hidden=config.hidden, layers=config.layers, dropout=config.dropout,
                     input_dropout=config.input_dropout, alpha=config.alpha, dprate=config.dprate,
                     pool=config.pool, recompute=config.recompute)
    build_model(spec)  # validate hyperparameters before reading any features
    device = devices.torch_device(config.device)
    budget = config.memory_budget or devices.default_budget("cpu")  # rows are held in host memory first
    row_bytes = len(datasets) * d * itemsize
    feature_bytes = len(held) * row_bytes
    splits = {name: np.searchsorted(held, pos) for name, pos in positions.items()}
    if feature_bytes <= budget:
        loader = InMemoryBatches.load(path, datasets, held, labels, device, progress)
    else:
        window = window_rows_for(budget, row_bytes, config.batch_size, config.prefetch)
        loader = StreamingBatches(path, datasets, held, labels, device, window, config.prefetch)
    return Data(loader=loader, splits=splits, spec=spec, views=model_views, fingerprint=fingerprint,
                evaluator=evaluator, feature_bytes=feature_bytes, budget=budget)


# ---------------------------------------------------------------------------------------------------
# one epoch, evaluation


def normalize_rows(x: torch.Tensor, how: str) -> torch.Tensor:
    """Scale each row of each hop: ``row`` to unit L1 norm, ``l2`` to unit L2 norm (zero rows stay
    zero). Applied after propagation, row by row, so it needs no graph."""
    if how == "row":
        return x / x.abs().sum(-1, keepdim=True).clamp_min(1e-12)
    if how == "l2":
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return x


def train_epoch(model, optimizer, data: Data, config: TrainConfig, rng: np.random.Generator) -> float:
    """One pass over the training rows in a fresh random order; the mean training loss."""
    model.train()
    total, n = 0.0, 0
    for x, y in data.loader.batches(data.splits["train"], config.batch_size, True, rng):
        x = normalize_rows(x, config.normalize_features)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += float(loss.detach()) * len(y)
        n += len(y)
    return total / max(n, 1)


@torch.no_grad()
def _evaluate(model, data: Data, config: TrainConfig, accuracy) -> dict:
    """Validation loss and accuracy, test accuracy (None without a test split), in eval mode."""
    model.eval()
    out = {}
    for name in ("valid", "test"):
        if name not in data.splits:
            out[f"{name}_acc"] = None
            continue
        loss_sum, preds, trues = 0.0, [], []
        for x, y in data.loader.batches(data.splits[name], config.eval_batch_size, False):
            logits = model(normalize_rows(x, config.normalize_features))
            loss_sum += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
            preds.append(logits.argmax(1).cpu().numpy())
            trues.append(y.cpu().numpy())
        y_true, y_pred = np.concatenate(trues), np.concatenate(preds)
        out[f"{name}_acc"] = accuracy(y_true, y_pred)
        if name == "valid":
            out["valid_loss"] = loss_sum / max(len(y_true), 1)
    return out


# ---------------------------------------------------------------------------------------------------
# checkpoints and outputs


def _save(obj, path: Path) -> None:
    with atomic_output(path) as tmp:
        torch.save(obj, tmp)


def _write_json(obj, path: Path) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, default=float))


def _rng_state(rng: np.random.Generator) -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": rng.bit_generator.state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict, rng: np.random.Generator) -> None:
    torch.set_rng_state(state["torch"])
    rng.bit_generator.state = state["numpy"]
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _cpu_state(model) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _config_dict(config: TrainConfig) -> dict:
    d = dataclasses.asdict(config)
    d["operators"] = list(config.operators) if config.operators else None
    return d


def _check_resumable(ck: dict, config: TrainConfig, data: Data, run_dir: Path) -> None:
    if ck["fingerprint"]["file"] != data.fingerprint["file"] or \
            ck["fingerprint"]["graph_fingerprint"] != data.fingerprint["graph_fingerprint"]:
        raise GnnprepError(f"{run_dir / 'checkpoint.pt'}: was trained on another features artifact "
                           f"({ck['fingerprint']['path']}, {ck['fingerprint']['file']}); cannot resume on this one")
    old, new = ck["config"], _config_dict(config)
    changed = sorted(k for k in new if k not in RESUMABLE_CHANGES and old.get(k) != new[k])
    if changed:
        k = changed[0]
        raise GnnprepError(f"{run_dir / 'checkpoint.pt'}: was trained with {k}={old.get(k)!r}, now {new[k]!r}; "
                           "resume with the same settings or use a new run folder")


def _plot(report: TrainReport, run_dir: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return  # optional: curves.png only when matplotlib is installed
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, r in enumerate(report.runs):
        ep = [h["epoch"] for h in r.history]
        a1.plot(ep, [h["train_loss"] for h in r.history], label=f"train (seed {r.seed})")
        ev = [h for h in r.history if h.get("valid_loss") is not None]
        a1.plot([h["epoch"] for h in ev], [h["valid_loss"] for h in ev], "--", label=f"valid (seed {r.seed})")
        a2.plot([h["epoch"] for h in ev], [h["valid_acc"] for h in ev], label=f"valid (seed {r.seed})")
        if ev and ev[0].get("test_acc") is not None:
            a2.plot([h["epoch"] for h in ev], [h["test_acc"] for h in ev], ":", label=f"test (seed {r.seed})")
        a2.axvline(r.best_epoch, color="grey", lw=0.5)
    a1.set_xlabel("epoch"), a1.set_ylabel("loss"), a1.legend(fontsize=6)
    a2.set_xlabel("epoch"), a2.set_ylabel("accuracy"), a2.legend(fontsize=6)
    fig.tight_layout()
    with atomic_output(run_dir / "curves.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------
# the loop


def _better(ev: dict, best: dict | None, select: str) -> bool:
    if best is None:
        return True
    if select == "acc":
        return (ev["valid_acc"], -ev["valid_loss"]) > (best["valid_acc"], -best["valid_loss"])
    return ev["valid_loss"] < best["valid_loss"]


def train(features, run_dir, config: TrainConfig, progress=None, resume: bool = False) -> TrainReport:
    """Train ``config.runs`` seeded runs of ``config.model`` on ``features``; write the run folder.

    ``progress(stage, done, total)`` is called after every epoch. With ``resume``, a checkpoint in
    ``run_dir`` is continued (same settings and artifact required); the continued run is identical
    to an uninterrupted one (model, optimizer and RNG states are restored).
    """
    t_start = time.perf_counter()
    config.check()
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise GnnprepError(f"{run_dir}: exists and is not a folder; expected a run folder")
    ck_path = run_dir / "checkpoint.pt"
    if not resume and (ck_path.exists() or (run_dir / "model.pt").exists()):
        raise GnnprepError(f"{run_dir}: holds a previous run; pass --resume to continue it or choose another folder")
    if config.threads:
        torch.set_num_threads(config.threads)
    data = open_data(features, config, progress)
    run_dir.mkdir(parents=True, exist_ok=True)
    ck = None
    if resume and ck_path.exists():
        ck = torch.load(ck_path, map_location="cpu", weights_only=False)
        _check_resumable(ck, config, data, run_dir)
    accuracy = _plain_accuracy
    if data.evaluator != "plain":
        accuracy = _ogb_accuracy(data.evaluator) or _plain_accuracy
    device = devices.torch_device(config.device)

    finished: list[RunResult] = [RunResult(**r) for r in ck["finished"]] if ck else []
    best_states: list[dict] = list(ck["best_states"]) if ck else []
    for r in range(len(finished), config.runs):
        result, state = _train_run(r, data, config, device, accuracy, run_dir, finished, best_states,
                                   ck if ck and ck.get("current") and ck["current"]["run"] == r else None, progress)
        finished.append(result)
        best_states.append(state)
        _checkpoint(run_dir, config, data, finished, best_states, None)
    # the best-validation run's best state goes to model.pt
    key = (lambda i: finished[i].valid_loss) if config.select == "loss" else (lambda i: -finished[i].valid_acc)
    saved = min(range(config.runs), key=key)
    report = TrainReport(run_dir=str(run_dir), model=config.model, runs=tuple(finished[:config.runs]),
                         device=str(device), streaming=data.loader.streaming, evaluator=data.evaluator,
                         seconds=time.perf_counter() - t_start, saved_run=saved)
    best = finished[saved]
    _save({"format": "gnnprep.model", "format_version": 1, "state_dict": best_states[saved],
           "config": _config_dict(config), "spec": dataclasses.asdict(data.spec), "views": data.views,
           "features": data.fingerprint, "seed": best.seed, "best_epoch": best.best_epoch,
           "valid_acc": best.valid_acc, "test_acc": best.test_acc}, run_dir / "model.pt")
    _write_json({"config": _config_dict(config), "features": data.fingerprint, "spec": dataclasses.asdict(data.spec),
                 "feature_bytes": data.feature_bytes, "memory_budget": data.budget,
                 "summary": report.summary(), "runs": [r.to_dict() for r in report.runs]}, run_dir / "metrics.json")
    _plot(report, run_dir)
    return report


def _checkpoint(run_dir, config, data, finished, best_states, current) -> None:
    _save({"config": _config_dict(config), "fingerprint": data.fingerprint,
           "finished": [r.to_dict() for r in finished], "best_states": best_states, "current": current},
          run_dir / "checkpoint.pt")


def _train_run(r, data: Data, config: TrainConfig, device, accuracy, run_dir, finished, best_states, ck, progress):
    seed = config.seed + r
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    model = build_model(data.spec).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history: list[dict] = []
    best, best_state, bad, start, elapsed = None, None, 0, 0, 0.0
    if ck is not None:
        cur = ck["current"]
        model.load_state_dict(cur["model"])
        optimizer.load_state_dict(cur["optimizer"])
        history, best, best_state, bad, start, elapsed = (cur["history"], cur["best"], cur["best_state"], cur["bad"],
                                                          cur["epoch"], cur["elapsed"])
        _set_rng_state(cur["rng"], rng)
    t0 = time.perf_counter() - elapsed
    last_ck = time.perf_counter()
    stage = f"train run {r + 1}/{config.runs}" if config.runs > 1 else "train"
    for epoch in range(start, config.epochs):
        if best is not None and 0 < config.patience <= bad:
            break  # patience 0 turns early stopping off
        te = time.perf_counter()
        loss = train_epoch(model, optimizer, data, config, rng)
        row = {"epoch": epoch, "train_loss": loss, "valid_loss": None, "valid_acc": None, "test_acc": None}
        if (epoch + 1) % config.eval_every == 0 or epoch + 1 == config.epochs:
            ev = _evaluate(model, data, config, accuracy)
            row.update(ev)
            if _better(ev, best, config.select):
                best = {"epoch": epoch, **ev}
                best_state = _cpu_state(model)
                bad = 0
            else:
                bad += config.eval_every
        row["seconds"] = time.perf_counter() - te
        history.append(row)
        if time.perf_counter() - last_ck >= config.checkpoint_every:
            _checkpoint(run_dir, config, data, finished, best_states, {
                "run": r, "epoch": epoch + 1, "model": _cpu_state(model), "optimizer": optimizer.state_dict(),
                "history": history, "best": best, "best_state": best_state, "bad": bad,
                "elapsed": time.perf_counter() - t0, "rng": _rng_state(rng)})
            last_ck = time.perf_counter()
        if progress is not None:
            progress(stage, epoch + 1, config.epochs)
    # the best validation state is what is kept; its test score is the one measured with it
    result = RunResult(seed=seed, best_epoch=int(best["epoch"]), valid_loss=float(best["valid_loss"]),
                       valid_acc=float(best["valid_acc"]),
                       test_acc=None if best.get("test_acc") is None else float(best["test_acc"]),
                       epochs_run=len(history), seconds=round(time.perf_counter() - t0, 3), history=history)
    return result, copy.deepcopy(best_state)


def load_model(path) -> tuple[torch.nn.Module, dict]:
    """The best model of a run (``model.pt``), ready for inference, and everything saved with it."""
    path = Path(path)
    if not path.is_file():
        raise GnnprepError(f"{path}: no such file; expected a model.pt from gnnprep train")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(saved, dict) or saved.get("format") != "gnnprep.model":
        raise GnnprepError(f"{path}: not a gnnprep model (expected format 'gnnprep.model')")
    spec = ModelSpec(**{**saved["spec"], "operators": tuple(saved["spec"]["operators"])})
    model = build_model(spec)
    model.load_state_dict(saved["state_dict"])
    return model.eval(), saved
