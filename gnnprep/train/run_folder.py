"""A training run's folder: checkpoints, model and metrics files written atomically, the checks
that a folder can hold a run or be resumed, and the curves plot (:mod:`gnnprep.train.trainer` runs the
epochs). Every file is written to a temporary name and renamed, so it exists only when complete."""

from __future__ import annotations

import dataclasses
import io
import os
import random
from pathlib import Path

import numpy as np
import torch

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.output import atomic_output, refuse_input_as_output
from gnnprep.train.config import RESUMABLE_CHANGES, TrainConfig


def save_torch(obj, path: Path) -> None:
    # serialised in memory first: torch's file writer turns a full disk into an opaque RuntimeError,
    # a plain write raises ENOSPC, which atomic_output reports as "no space left on device"
    buf = io.BytesIO()
    torch.save(obj, buf)
    with atomic_output(path) as tmp:
        tmp.write_bytes(buf.getbuffer())


def rng_state(rng: np.random.Generator) -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": rng.bit_generator.state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, rng: np.random.Generator) -> None:
    torch.set_rng_state(state["torch"])
    rng.bit_generator.state = state["numpy"]
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def cpu_state(model) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def config_dict(config: TrainConfig) -> dict:
    d = dataclasses.asdict(config)
    d["operators"] = list(config.operators) if config.operators else None
    return d


CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "gnnprep.checkpoint", 1
RUN_FILES = ("metrics.json", "model.pt", "checkpoint.pt", "curves.png")
CHECKPOINT_KEYS = ("config", "fingerprint", "finished", "best_states", "ends", "current")


def load_checkpoint(path: Path) -> dict:
    """``checkpoint.pt``, read safely: tensors and plain containers only, never code from the file."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a truncated or foreign file fails in many ways inside torch.load and pickle
        ck = None
    if not (isinstance(ck, dict) and ck.get("format") == CHECKPOINT_FORMAT
            and ck.get("format_version") == CHECKPOINT_VERSION and all(k in ck for k in CHECKPOINT_KEYS)):
        raise GnnprepError(f"{path}: cannot be read (corrupt or from another version); expected a checkpoint "
                           f"written by this gnnprep train ({CHECKPOINT_FORMAT} version {CHECKPOINT_VERSION})")
    return ck


def check_resumable(ck: dict, config: TrainConfig, data, run_dir: Path, world: int = 1) -> None:
    ck_path = run_dir / "checkpoint.pt"
    if ck.get("world_size", 1) != world:
        raise GnnprepError(f"{ck_path}: was trained by {ck.get('world_size', 1)} process(es), now {world}; resume "
                           f"with the same number of torchrun processes ({ck.get('world_size', 1)}), or use a new run folder")
    if ck["fingerprint"]["file"] != data.fingerprint["file"] or \
            ck["fingerprint"]["graph_fingerprint"] != data.fingerprint["graph_fingerprint"]:
        raise GnnprepError(f"{ck_path}: was trained on another features artifact "
                           f"({ck['fingerprint']['path']}, {ck['fingerprint']['file']}); cannot resume on this one")
    old, new = ck["config"], config_dict(config)
    changed = sorted(k for k in new if k not in RESUMABLE_CHANGES and old.get(k) != new[k])
    if changed:
        k = changed[0]
        raise GnnprepError(f"{ck_path}: was trained with {k}={old.get(k)!r}, now {new[k]!r}; "
                           "resume with the same settings or use a new run folder")
    trained = [r["epochs_run"] for r in ck["finished"][:config.runs]]
    if ck["current"] is not None and ck["current"]["run"] < config.runs:
        trained.append(ck["current"]["epoch"])
    if max(trained, default=0) > config.epochs:
        raise OptionError("--epochs", f"{config.epochs}: the run in {run_dir} has trained {max(trained)} epochs "
                                      f"already; expected --epochs >= {max(trained)} (a run cannot be shortened)")


def check_run_dir(run_dir: Path, features, resume: bool) -> None:
    """Refuse a run folder that cannot be one (the features file itself, a file, an unwritable
    place, a missing checkpoint to resume) before any features are read."""
    for target in (run_dir, *(run_dir / name for name in RUN_FILES)):
        refuse_input_as_output(target, [features])
    if run_dir.exists() and not run_dir.is_dir():
        raise GnnprepError(f"{run_dir}: exists and is not a folder; expected a run folder")
    ck_path = run_dir / "checkpoint.pt"
    if resume and not ck_path.is_file():
        raise GnnprepError(f"{run_dir}: no checkpoint to resume (no {ck_path.name}); "
                           "expected the folder of an earlier run, or run without --resume")
    if not resume and (ck_path.exists() or (run_dir / "model.pt").exists()):
        raise GnnprepError(f"{run_dir}: holds a previous run; pass --resume to continue it or choose another folder")
    existing = run_dir.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise GnnprepError(f"{run_dir}: {existing} is not a folder; expected a folder to hold the run")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise GnnprepError(f"{run_dir}: folder {existing} is not writable; expected a writable run folder")


def make_run_dir(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GnnprepError(f"{run_dir}: cannot create the run folder ({e.strerror or e}); "
                           "expected a writable place") from None


def plot_curves(report, run_dir: Path) -> None:
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
