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
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gnnprep.core import device as devices
from gnnprep.core.errors import GnnprepError, Interrupted
from gnnprep.core.memory import keep_freed_memory
from gnnprep.core.output import says_no_room, write_json
from gnnprep.train.batches import Data, global_batches, normalize_rows, open_data, rank_slice, take_rows  # noqa: F401 (re-exported)
from gnnprep.train.config import NORMALIZE, RESUMABLE_CHANGES, TrainConfig  # noqa: F401 (re-exported)
from gnnprep.train.ddp import evaluate_shared, rank_rng, rank_seed, set_rank_rng, train_epoch_shared
from gnnprep.train.models import ModelSpec, build_model
from gnnprep.train.run_folder import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    check_resumable,
    check_run_dir,
    config_dict,
    cpu_state,
    load_checkpoint,
    make_run_dir,
    plot_curves,
    rng_state,
    save_torch,
    set_rng_state,
)


@dataclass(frozen=True)
class RunResult:
    seed: int
    best_epoch: int
    valid_loss: float
    valid_acc: float
    test_acc: float | None
    epochs_run: int
    seconds: float      # the run's own seconds over every invocation that trained it (resumed: its earlier part too)
    history: list = field(default_factory=list, repr=False)

    def to_dict(self, history: bool = True) -> dict:
        d = dataclasses.asdict(self)
        if not history:
            d.pop("history")
        return d


@dataclass(frozen=True)
class TrainReport:
    """What ``gnnprep train`` reports (``summary()``: its ``--json`` object and metrics.json's
    ``summary``). Two clocks, named apart: ``seconds`` is this invocation's wall time (opening the
    data, training, writing the run folder); each run's ``seconds`` (``per_run``) is that run's own
    training time across invocations: with ``resumed``, the epochs trained before the interruption
    (up to its last checkpoint) count too, so a resumed run's own seconds may exceed ``seconds``."""

    run_dir: str
    model: str
    runs: tuple[RunResult, ...]
    device: str
    streaming: bool
    evaluator: str
    seconds: float
    saved_run: int                          # the run whose best state is in model.pt
    regime: str = "large"                   # gnnprep.train.regimes: small | large
    defaults: dict = field(default_factory=dict)   # the settings the regime filled in
    world_size: int = 1                     # processes (torchrun ranks) that trained it
    resumed: bool = False                   # continued a checkpoint (--resume), as hdg's and hag's "resumed"

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
            "seconds": round(self.seconds, 3), "resumed": self.resumed, "device": self.device, "streaming": self.streaming,
            "evaluator": self.evaluator, "regime": self.regime, "defaults": self.defaults,
            "world_size": self.world_size, "per_run": [r.to_dict(history=False) for r in self.runs],
        }


# ---------------------------------------------------------------------------------------------------
# accuracy (the data and its loader: gnnprep.train.batches.open_data)


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


def plain_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float((y_true == y_pred).mean()) if len(y_true) else float("nan")


# ---------------------------------------------------------------------------------------------------
# one epoch, evaluation


def train_epoch(model, optimizer, data: Data, config: TrainConfig, rng: np.random.Generator) -> float:
    """One pass over the training rows in a fresh random order; the mean training loss."""
    model.train()
    if next(model.parameters()).device.type == "cpu":
        keep_freed_memory()
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


@torch.inference_mode()
def evaluate(model, data: Data, config: TrainConfig, accuracy) -> dict:
    """Validation loss and accuracy, test accuracy (None without a test split), in eval mode.

    Under ``torch.inference_mode`` (no autograd bookkeeping at all); in eval mode the hidden layers'
    ReLU runs in place on each fresh layer output (``gnnprep.train.models.relu_dropout``)."""
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
# the loop


def _better(ev: dict, best: dict | None, select: str) -> bool:
    if best is None:
        return True
    if select == "acc":
        return (ev["valid_acc"], -ev["valid_loss"]) > (best["valid_acc"], -best["valid_loss"])
    return ev["valid_loss"] < best["valid_loss"]


def train(features, run_dir, config: TrainConfig, progress=None, resume: bool = False, dist=None) -> TrainReport:
    """Train ``config.runs`` seeded runs of ``config.model`` on ``features``; write the run folder.

    ``progress(stage, done, total)`` is called after every epoch. With ``resume``, the checkpoint in
    ``run_dir`` is continued (same settings and artifact required); the continued run is identical
    to an uninterrupted one (model, optimizer and RNG states are restored). Finished runs continue
    to a larger ``epochs`` from their end state (unless early stopping ended them).

    ``dist`` (:class:`gnnprep.core.distributed.Dist`, under torchrun): train as one rank of a
    DistributedDataParallel job (:func:`_train_shared`).
    """
    if dist is not None:
        return _train_shared(features, run_dir, config, progress, resume, dist)
    t_start = time.perf_counter()
    config.check()
    run_dir = Path(run_dir)
    check_run_dir(run_dir, features, resume)
    ck = load_checkpoint(run_dir / "checkpoint.pt") if resume else None
    if config.threads:
        torch.set_num_threads(config.threads)
    data = open_data(features, config, progress)
    config = data.config   # every setting left unset is filled from the artifact's regime
    if ck is not None:
        check_resumable(ck, config, data, run_dir)
    created = not run_dir.exists()
    make_run_dir(run_dir)
    try:
        return _train_runs(run_dir, data, config, ck, progress, t_start)
    except GnnprepError as e:
        if created and not any(run_dir.iterdir()):
            run_dir.rmdir()  # nothing was written (a full disk, say): leave no empty folder behind
        raise _checkpoint_kept(e, run_dir) from None
    except (KeyboardInterrupt, Interrupted) as e:
        _say_checkpoint_kept(e, run_dir)
        raise


def _train_shared(features, run_dir, config: TrainConfig, progress, resume: bool, dist) -> TrainReport:
    """:func:`train` as one rank of a torchrun job: DistributedDataParallel over ``dist.world``
    processes (gloo on the CPU, nccl on ``cuda:<LOCAL_RANK>``), ``batch_size`` rows per rank.

    Every rank checks the run folder and the artifact, opens the data (in memory: every split row;
    streaming: each epoch it reads only its own rows) and, with ``resume``, reads rank 0's
    ``checkpoint.pt`` (a shared filesystem). A failure of any rank in a phase is one error on every
    rank (:meth:`Dist.step`). Rank 0 alone writes the run folder."""
    t_start = time.perf_counter()
    config.check()
    run_dir = Path(run_dir)
    device = devices.torch_device(config.device)
    if device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)
    dist.start("nccl" if device.type == "cuda" else "gloo")

    def prepare():
        check_run_dir(run_dir, features, resume)
        ck = load_checkpoint(run_dir / "checkpoint.pt") if resume else None
        if config.threads:
            torch.set_num_threads(config.threads)
        data = open_data(features, config, progress, device=device, budget_share=dist.local_world,
                         world=dist.world)
        if ck is not None:
            check_resumable(ck, data.config, data, run_dir, dist.world)
        return ck, data

    ck, data = dist.step(prepare)
    config = data.config
    created = dist.step(lambda: (not run_dir.exists(), make_run_dir(run_dir))[0] if dist.is_root else None)
    try:
        return _train_runs(run_dir, data, config, ck, progress, t_start, dist, device)
    except GnnprepError as e:
        if dist.is_root and created and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
        raise _checkpoint_kept(e, run_dir) from None
    except (KeyboardInterrupt, Interrupted) as e:
        _say_checkpoint_kept(e, run_dir)
        raise


def _say_checkpoint_kept(e: BaseException, run_dir: Path) -> None:
    """An interrupted run whose folder has a checkpoint says so in its one line (gnnprep.cli): the
    checkpoint is kept and ``--resume`` continues from it (it said "no output was written")."""
    if (run_dir / "checkpoint.pt").is_file():
        try:
            e.kept_checkpoint = str(run_dir)
        except AttributeError:
            pass


def _checkpoint_kept(e: GnnprepError, run_dir: Path) -> GnnprepError:
    """``e``, saying where a full disk (or a file-size limit) stopped a run that has a checkpoint: it
    is kept, and ``--resume`` continues from it once there is room."""
    if not says_no_room(e) or not (run_dir / "checkpoint.pt").is_file():
        return e
    return GnnprepError(f"{e}; the checkpoint in {run_dir} is kept: with room again, run the same command "
                        "with --resume")


def _train_runs(run_dir: Path, data, config: TrainConfig, ck, progress, t_start: float, dist=None,
                device=None) -> TrainReport:
    """Every run (continuing the checkpoint ``ck``), then model.pt and metrics.json (under torchrun:
    written by rank 0, every rank waiting for the outcome)."""
    accuracy = plain_accuracy
    if data.evaluator != "plain" and dist is None:
        accuracy = _ogb_accuracy(data.evaluator) or plain_accuracy
    device = devices.torch_device(config.device) if device is None else device
    world = 1 if dist is None else dist.world

    def on_root(fn, *args):  # rank 0 writes; a failure there fails every rank alike
        if dist is None:
            return fn(*args)
        dist.step(fn if dist.is_root else (lambda *a: None), *args)

    done = Finished.from_checkpoint(ck)
    for r in range(config.runs):
        cur = ck["current"] if ck and ck["current"] and ck["current"]["run"] == r else None
        if cur is None and r < len(done.results):
            if done.results[r].epochs_run >= config.epochs:
                continue  # trained to --epochs already
            cur = {**done.ends[r], "best_state": done.best_states[r]}  # continue to the new --epochs
        done.put(r, *_train_run(r, data, config, device, accuracy, run_dir, done, cur, progress, dist))
        on_root(_checkpoint, run_dir, config, data, done, None, world)
    finished = done.results
    # the best-validation run's best state goes to model.pt
    key = (lambda i: finished[i].valid_loss) if config.select == "loss" else (lambda i: -finished[i].valid_acc)
    saved = min(range(config.runs), key=key)
    report = TrainReport(run_dir=str(run_dir), model=config.model, runs=tuple(finished[:config.runs]),
                         device=str(device), streaming=data.loader.streaming, evaluator=data.evaluator,
                         seconds=time.perf_counter() - t_start, saved_run=saved, regime=data.regime,
                         defaults=data.defaults, world_size=world, resumed=ck is not None)
    best = finished[saved]
    on_root(_write_outputs, run_dir, config, data, done, report, saved, best)
    return report


def _write_outputs(run_dir: Path, config: TrainConfig, data, done, report: TrainReport, saved: int, best) -> None:
    save_torch({"format": "gnnprep.model", "format_version": 1, "state_dict": done.best_states[saved],
           "config": config_dict(config), "spec": dataclasses.asdict(data.spec), "views": data.views,
           "features": data.fingerprint, "seed": best.seed, "best_epoch": best.best_epoch,
           "valid_acc": best.valid_acc, "test_acc": best.test_acc}, run_dir / "model.pt")
    write_json({"config": config_dict(config), "features": data.fingerprint, "spec": dataclasses.asdict(data.spec),
                 "feature_bytes": data.feature_bytes, "memory_budget": data.budget, "world_size": report.world_size,
                 "summary": report.summary(), "runs": [r.to_dict() for r in report.runs]}, run_dir / "metrics.json")
    plot_curves(report, run_dir)


@dataclass
class Finished:
    """The finished runs: results, best states (model.pt saves one) and end states (model, optimizer,
    RNG, patience counter after the last epoch: what continues a run to more epochs on resume)."""

    results: list = field(default_factory=list)
    best_states: list = field(default_factory=list)
    ends: list = field(default_factory=list)

    @classmethod
    def from_checkpoint(cls, ck: dict | None) -> "Finished":
        if ck is None:
            return cls()
        return cls([RunResult(**r) for r in ck["finished"]], list(ck["best_states"]), list(ck["ends"]))

    def put(self, r: int, result: RunResult, best_state: dict, end: dict) -> None:
        if r < len(self.results):
            self.results[r], self.best_states[r], self.ends[r] = result, best_state, end
        else:
            self.results.append(result)
            self.best_states.append(best_state)
            self.ends.append(end)


def _checkpoint(run_dir, config, data, done: Finished, current, world: int = 1) -> None:
    ck = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_VERSION, "config": config_dict(config),
          "fingerprint": data.fingerprint, "finished": [r.to_dict() for r in done.results],
          "best_states": done.best_states, "ends": done.ends, "current": current}
    if world > 1:
        ck["world_size"] = world
    save_torch(ck, run_dir / "checkpoint.pt")


def _to_cpu(obj):
    """A copy of a (nested) state with every tensor on the CPU (end states outlive their run)."""
    if torch.is_tensor(obj):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _train_run(r, data: Data, config: TrainConfig, device, accuracy, run_dir, done: Finished, cur, progress,
               dist=None):
    """Run r from its start, or from ``cur`` (a saved state): (result, best state, end state).

    Under torchrun (``dist``): every rank builds the same model (same seed) and draws the same
    permutations; rank r ≥ 1 then reseeds torch (:func:`rank_seed`: its own dropout masks). The
    model is wrapped in DistributedDataParallel; states saved are the unwrapped model's."""
    seed = config.seed + r
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    net = build_model(data.spec).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history: list[dict] = []
    best, best_state, bad, start, elapsed = None, None, 0, 0, 0.0
    if cur is not None:
        net.load_state_dict(cur["model"])
        optimizer.load_state_dict(cur["optimizer"])
        history, best, best_state, bad, start, elapsed = (cur["history"], cur["best"], cur["best_state"], cur["bad"],
                                                          cur["epoch"], cur["elapsed"])
        set_rng_state(cur["rng"], rng)
    model = net
    if dist is not None:
        from torch.nn.parallel import DistributedDataParallel

        if cur is not None:
            set_rank_rng(cur["rank_rng"][dist.rank], device)
        elif dist.rank:
            torch.manual_seed(rank_seed(seed, dist.rank))
        model = DistributedDataParallel(net, device_ids=[device] if device.type == "cuda" else None)
    comm = device if device.type == "cuda" else None    # nccl reduces CUDA tensors, gloo CPU ones
    t0 = time.perf_counter() - elapsed

    def state(with_best: bool = True) -> dict:
        out = {"run": r, "epoch": len(history), "model": cpu_state(net),
               "optimizer": _to_cpu(optimizer.state_dict()), "history": history, "best": best,
               "best_state": best_state if with_best else None, "bad": bad,
               "elapsed": time.perf_counter() - t0, "rng": rng_state(rng)}
        if dist is not None:  # every rank's own torch (dropout) stream; the shuffle stream is shared
            out["rank_rng"] = dist.gather(rank_rng(device))
        return out

    last_ck = time.perf_counter()
    stage = f"train run {r + 1}/{config.runs}" if config.runs > 1 else "train"
    for epoch in range(start, config.epochs):
        if best is not None and 0 < config.patience <= bad:
            break  # patience 0 turns early stopping off
        te = time.perf_counter()
        if dist is None:
            loss = train_epoch(model, optimizer, data, config, rng)
            steps = -(-len(data.splits["train"]) // config.batch_size)
        else:
            total, n, steps = train_epoch_shared(model, optimizer, data, config, rng, dist, device)
        row = {"epoch": epoch, "train_loss": None if dist is not None else loss, "valid_loss": None,
               "valid_acc": None, "test_acc": None, "steps": steps}
        if (epoch + 1) % config.eval_every == 0 or epoch + 1 == config.epochs:
            ev = (evaluate(model, data, config, accuracy) if dist is None
                  else evaluate_shared(net, data, config, dist, comm))
            row.update(ev)
            if _better(ev, best, config.select):
                best = {"epoch": epoch, **ev}
                best_state = cpu_state(net)
                bad = 0
            else:
                bad += config.eval_every
        due = time.perf_counter() - last_ck >= config.checkpoint_every
        if dist is not None:  # rank 0's clock decides, so every rank joins the same checkpoints
            total, n, due = dist.all_sum([total, n, float(due and dist.is_root)], comm)
            row["train_loss"] = total / max(n, 1)
        row["seconds"] = time.perf_counter() - te
        history.append(row)
        if due:
            current = state()
            if dist is None:
                _checkpoint(run_dir, config, data, done, current)
            else:
                dist.step(_checkpoint if dist.is_root else (lambda *a: None), run_dir, config, data, done, current,
                          dist.world)
            last_ck = time.perf_counter()
        if progress is not None:
            progress(stage, epoch + 1, config.epochs)
    # the best validation state is what is kept; its test score is the one measured with it
    result = RunResult(seed=seed, best_epoch=int(best["epoch"]), valid_loss=float(best["valid_loss"]),
                       valid_acc=float(best["valid_acc"]),
                       test_acc=None if best.get("test_acc") is None else float(best["test_acc"]),
                       epochs_run=len(history), seconds=round(time.perf_counter() - t0, 3), history=history)
    return result, copy.deepcopy(best_state), state(with_best=False)


def load_model(path) -> tuple[torch.nn.Module, dict]:
    """The best model of a run (``model.pt``), ready for inference, and everything saved with it.

    Read with ``torch.load(weights_only=True)``: tensors and plain containers only, so a crafted file
    (a pickle that calls a function) is refused, never run; run folders are shared between people."""
    path = Path(path)
    if not path.is_file():
        raise GnnprepError(f"{path}: no such file; expected a model.pt from gnnprep train")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a truncated, foreign or crafted file fails in many ways inside torch.load
        saved = None
    if not isinstance(saved, dict) or saved.get("format") != "gnnprep.model":
        raise GnnprepError(f"{path}: not a gnnprep model (expected format 'gnnprep.model', tensors and plain "
                           "values only; nothing in the file was run)")
    spec = ModelSpec(**{**saved["spec"], "operators": tuple(saved["spec"]["operators"])})
    model = build_model(spec)
    model.load_state_dict(saved["state_dict"])
    return model.eval(), saved
