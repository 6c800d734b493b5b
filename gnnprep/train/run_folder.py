"""A training run's folder: checkpoints, model and metrics files written atomically, the checks
that a folder can hold a run or be resumed, and the curves plot (:mod:`gnnprep.train.trainer` runs the
epochs). Every file is written to a temporary name and renamed, so it exists only when complete."""

from __future__ import annotations

import dataclasses
import io
import math
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


# ---------------------------------------------------------------------------------------------------
# gnnprep info on a run file

MODEL_FORMAT = "gnnprep.model"
RUN_FILE_KINDS = {MODEL_FORMAT: "gnnprep trained model", CHECKPOINT_FORMAT: "gnnprep training checkpoint"}


def _plain(v):
    """A value as ``gnnprep info`` shows it: a plain value (text, number, true/false, None, a list of
    text) as it is, anything else (a tensor where a number belongs, say) described in a few words."""
    if isinstance(v, _SCALARS) and not (_is_int(v) and v.bit_length() > 128):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return list(v)
    return _shown(v)


def describe_run_file(path) -> dict:
    """What ``gnnprep info`` shows of a run folder's ``model.pt`` or ``checkpoint.pt`` (a file in
    ``torch.save``'s layout, :func:`gnnprep.core.artifact.is_torch_file`): what it is, the model, the
    features artifact it was trained on, its settings; a model's best epoch and accuracies, a
    checkpoint's finished runs and the epoch of the run in progress. Read with
    ``torch.load(weights_only=True, mmap=True)``: tensors and plain containers only (a pickle that
    would run code is refused, never run), tensor data mapped, not read. A PyTorch file gnnprep train
    did not write, or one that cannot be read so, is one GnnprepError."""
    path = Path(path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - a truncated, foreign or crafted file fails in many ways inside torch.load
        raise GnnprepError(f"{path}: a PyTorch file that cannot be read as tensors and plain values (corrupt, or "
                           "it holds code: refused, nothing in it was run); expected gnnprep train's model.pt or "
                           "checkpoint.pt") from None
    fmt = saved.get("format") if isinstance(saved, dict) else None
    if not isinstance(fmt, str) or fmt not in RUN_FILE_KINDS:
        raise GnnprepError(f"{path}: a PyTorch file gnnprep train did not write (no format {MODEL_FORMAT!r} or "
                           f"{CHECKPOINT_FORMAT!r}); gnnprep info describes gnnprep's artifacts and run files")
    config = saved.get("config") if isinstance(saved.get("config"), dict) else {}
    fp = saved.get("features" if fmt == MODEL_FORMAT else "fingerprint")
    fp = fp if isinstance(fp, dict) else {}
    d = {"file": str(path), "format": fmt, "format_version": _plain(saved.get("format_version")),
         "what": RUN_FILE_KINDS[fmt], "model": _plain(config.get("model")), "features": _plain(fp.get("path")),
         "graph_fingerprint": _plain(fp.get("graph_fingerprint")),
         "config": {k: _plain(v) for k, v in config.items() if isinstance(k, str)}}
    if fmt == MODEL_FORMAT:
        state = saved.get("state_dict") if isinstance(saved.get("state_dict"), dict) else {}
        tensors = [t for t in state.values() if torch.is_tensor(t)]
        d.update({k: _plain(saved.get(k)) for k in ("seed", "best_epoch", "valid_acc", "test_acc")})
        d.update(parameters=int(sum(t.numel() for t in tensors)), tensors=len(tensors))
    else:
        finished = saved.get("finished") if isinstance(saved.get("finished"), list) else []
        cur = saved.get("current")
        d.update(world_size=_plain(saved.get("world_size", 1)), finished_runs=len(finished),
                 finished=[{k: _plain(r.get(k)) for k in ("seed", "epochs_run", "best_epoch", "valid_acc", "test_acc",
                                                           "seconds")} for r in finished if isinstance(r, dict)],
                 current={"run": _plain(cur.get("run")), "epoch": _plain(cur.get("epoch"))}
                 if isinstance(cur, dict) else None)
    d["size_bytes"] = path.stat().st_size
    return d


# ---------------------------------------------------------------------------------------------------
# a loaded checkpoint, checked field by field before any of it is used (issue 32, items 8 and 14)

_HISTORY_KEYS = ("epoch", "train_loss", "valid_loss", "valid_acc", "test_acc")
_HISTORY_LATER = ("steps", "seconds")   # added to each row after checkpoint version 1 was first written
_RESULT_KEYS = ("seed", "best_epoch", "valid_loss", "valid_acc", "test_acc", "epochs_run", "seconds", "history")
_BEST_KEYS = ("epoch", "valid_acc", "valid_loss", "test_acc")
_STATE_KEYS = ("run", "epoch", "model", "optimizer", "history", "best", "best_state", "bad", "elapsed", "rng")
_ADAM_REQUIRED = ("lr", "betas", "eps", "weight_decay", "params")   # Adam.step reads these, no defaults
_SCALARS = (type(None), bool, int, float, str)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v) -> bool:
    return _is_number(v) and (not isinstance(v, float) or math.isfinite(v))


def _same_plain(a, b) -> bool:
    """``a == b`` for plain values of the same kind (a bool is not a number, a tuple may be a list)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_plain(x, y) for x, y in zip(a, b))
    if not isinstance(a, _SCALARS) or isinstance(a, bool) != isinstance(b, bool) or _is_number(a) != _is_number(b):
        return False
    return a == b


def _shown(v) -> str:
    """A value as an error line shows it: short, on one line."""
    if torch.is_tensor(v):
        kind = "" if v.layout == torch.strided else f"{str(v.layout).removeprefix('torch.')} "
        where = "" if v.device.type == "cpu" else f" on {v.device.type}"
        return f"a {kind}{str(v.dtype).removeprefix('torch.')} tensor of shape {list(v.shape)}{where}"
    if _is_int(v) and v.bit_length() > 128:    # ascii() of a huge int is slow, or refused past 4300 digits
        return f"an integer of {v.bit_length()} bits"
    if isinstance(v, _SCALARS):
        text = ascii(v)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(v, dict):
        return f"a dict of {len(v)} entries"
    if isinstance(v, (list, tuple)):
        return f"a {type(v).__name__} of {len(v)} items"
    return f"a {type(v).__name__}"


class CheckpointCheck:
    """Every field of a loaded ``checkpoint.pt`` checked against the run it is to continue, before
    any of it is used: types, ranges and lengths; every tensor's dtype and shape against the model
    ``spec`` builds (on torch's ``meta`` device: nothing allocated) and Adam's state for it; every
    weight and moment finite (a NaN weight is refused, never trained on); the RNG states of the
    kinds and sizes ``set_rng_state`` restores. A failure is one GnnprepError
    ``"<checkpoint>: <field> is <what>; expected <what>"``."""

    def __init__(self, path: Path, config: TrainConfig, spec, world: int = 1):
        self.path, self.config, self.spec, self.world = path, config, spec, world
        self._shapes = None

    def fail(self, field: str, value, expected: str, shown: str | None = None):
        raise GnnprepError(f"{self.path}: {field} is {shown or _shown(value)}; expected {expected}")

    def keys(self, field: str, v, keys, optional=()) -> dict:
        if not isinstance(v, dict):
            self.fail(field, v, f"a dict of {', '.join(keys)}")
        for k in keys:
            if k not in v:
                self.fail(f"{field}.{k}", None, f"a dict of {', '.join(keys)}", shown="missing")
        for k in v:
            if k not in keys and k not in optional:
                self.fail(field, v, f"only the keys {', '.join(keys)}", shown=f"a dict with the unexpected key {_shown(k)}")
        return v

    def integer(self, field: str, v, lo: int = 0, hi: int | None = None, hi_text: str | None = None) -> int:
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            self.fail(field, v, f"an integer in {lo}..{hi_text or hi}" if hi is not None else f"an integer >= {lo}")
        return v

    def number(self, field: str, v, lo: float = 0.0, hi: float | None = None, nan: bool = False, none: bool = False):
        if v is None and none:
            return v
        if nan and isinstance(v, float) and math.isnan(v):
            return v
        if not _finite(v) or v < lo or (hi is not None and v > hi):
            bounds = f"in {lo:g}..{hi:g}" if hi is not None else f">= {lo:g}"
            self.fail(field, v, f"a finite number {bounds}{' or None' if none else ''}")
        return v

    # -- the header: world size, artifact, settings ---------------------------------------------
    def header(self, ck: dict) -> None:
        if "world_size" in ck:
            self.integer("world_size", ck["world_size"], 1)
        fp = self.keys("fingerprint", ck["fingerprint"], ("path", "file", "graph_fingerprint"))
        for k in ("path", "file", "graph_fingerprint"):
            if not isinstance(fp[k], str):
                self.fail(f"fingerprint.{k}", fp[k], "text (the features artifact's identity)")
        expected = config_dict(self.config)
        old = ck["config"]
        if not isinstance(old, dict):
            self.fail("config", old, "a dict of the run's settings")
        for k, v in old.items():
            if k not in expected:
                self.fail("config", old, "only settings of gnnprep train", shown=f"a dict with the unknown setting {_shown(k)}")
            plain = isinstance(v, _SCALARS) or (isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v))
            if not plain or (_is_int(v) and v.bit_length() > 64):
                self.fail(f"config.{k}", v, f"a setting's value (a number, text, true/false or None; now {expected[k]!r})")

    # -- the runs: finished, best_states, ends, current ------------------------------------------
    def runs(self, ck: dict) -> None:
        finished = ck["finished"]
        if not isinstance(finished, list):
            self.fail("finished", finished, "a list of the finished runs' results")
        for i, r in enumerate(finished):
            self.result(f"finished[{i}]", r, i)
        for name in ("best_states", "ends"):
            if not isinstance(ck[name], list) or len(ck[name]) != len(finished):
                self.fail(name, ck[name], f"a list of {len(finished)} item(s), one per finished run")
        for i, sd in enumerate(ck["best_states"]):
            self.model_state(f"best_states[{i}]", sd)
        for i, end in enumerate(ck["ends"]):
            self.state(f"ends[{i}]", end, i, len(finished), end=True)
            if end["epoch"] != finished[i]["epochs_run"]:
                self.fail(f"ends[{i}].epoch", end["epoch"], f"{finished[i]['epochs_run']} (finished[{i}].epochs_run)")
        if ck["current"] is not None:
            self.state("current", ck["current"], None, len(finished))

    def result(self, field: str, r, i: int) -> None:
        self.keys(field, r, _RESULT_KEYS)
        seed = self.config.seed + i
        if not _is_int(r["seed"]) or r["seed"] != seed:
            self.fail(f"{field}.seed", r["seed"], f"{seed} (--seed {self.config.seed} + run {i})")
        history = self.history(f"{field}.history", r["history"])
        if not _is_int(r["epochs_run"]) or r["epochs_run"] != len(history) or not history:
            self.fail(f"{field}.epochs_run", r["epochs_run"], f"{len(history) or 'a positive count'} "
                                                              f"(the epochs in {field}.history)")
        self.integer(f"{field}.best_epoch", r["best_epoch"], 0, len(history) - 1)
        self.number(f"{field}.valid_loss", r["valid_loss"])
        self.number(f"{field}.valid_acc", r["valid_acc"], 0, 1)
        self.number(f"{field}.test_acc", r["test_acc"], 0, 1, nan=True, none=True)
        self.number(f"{field}.seconds", r["seconds"])

    def history(self, field: str, h) -> list:
        if not isinstance(h, list):
            self.fail(field, h, "a list of one dict per epoch")
        for e, row in enumerate(h):
            f = f"{field}[{e}]"
            self.keys(f, row, _HISTORY_KEYS, optional=_HISTORY_LATER)
            if not _is_int(row["epoch"]) or row["epoch"] != e:
                self.fail(f"{f}.epoch", row["epoch"], f"{e} (its place in the history)")
            self.number(f"{f}.train_loss", row["train_loss"])
            self.number(f"{f}.valid_loss", row["valid_loss"], none=True)
            self.number(f"{f}.valid_acc", row["valid_acc"], 0, 1, none=True)
            self.number(f"{f}.test_acc", row["test_acc"], 0, 1, nan=True, none=True)
            if "steps" in row:
                self.integer(f"{f}.steps", row["steps"])
            if "seconds" in row:
                self.number(f"{f}.seconds", row["seconds"])
        return h

    def best(self, field: str, b, epochs: int):
        if b is None:
            return None
        self.keys(field, b, _BEST_KEYS)
        if epochs == 0:
            self.fail(field, b, "None (no epoch has been trained)")
        self.integer(f"{field}.epoch", b["epoch"], 0, epochs - 1)
        self.number(f"{field}.valid_loss", b["valid_loss"])
        self.number(f"{field}.valid_acc", b["valid_acc"], 0, 1)
        self.number(f"{field}.test_acc", b["test_acc"], 0, 1, nan=True, none=True)
        return b

    def state(self, field: str, s, run: int | None, finished: int, end: bool = False) -> None:
        """A run's state: ``current`` (the run in progress) or ``ends[run]`` (a finished run's end)."""
        self.keys(field, s, _STATE_KEYS + (("rank_rng",) if self.world > 1 else ()))
        if run is not None:
            if not _is_int(s["run"]) or s["run"] != run:
                self.fail(f"{field}.run", s["run"], f"{run} (its place in the list)")
        else:   # run r starts after runs 0..r-1 are finished
            self.integer(f"{field}.run", s["run"], 0, finished)
        history = self.history(f"{field}.history", s["history"])
        if not _is_int(s["epoch"]) or s["epoch"] != len(history):
            self.fail(f"{field}.epoch", s["epoch"], f"{len(history)} (the epochs in {field}.history)")
        best = self.best(f"{field}.best", s["best"], len(history))
        if end and best is None:
            self.fail(f"{field}.best", None, "the best epoch of a finished run")
        if best is None and s["best_state"] is not None:   # an end state keeps its best state in best_states
            self.fail(f"{field}.best_state", s["best_state"], f"None ({field}.best is None)")
        if (best is not None and not end) or s["best_state"] is not None:
            self.model_state(f"{field}.best_state", s["best_state"])
        self.integer(f"{field}.bad", s["bad"])
        self.number(f"{field}.elapsed", s["elapsed"])
        self.model_state(f"{field}.model", s["model"])
        self.optimizer_state(f"{field}.optimizer", s["optimizer"])
        self.rng_state(f"{field}.rng", s["rng"])
        if self.world > 1:
            ranks = s["rank_rng"]
            if not isinstance(ranks, list) or len(ranks) != self.world:
                self.fail(f"{field}.rank_rng", ranks, f"a list of {self.world} RNG states, one per rank")
            for i, r in enumerate(ranks):
                self.keys(f"{field}.rank_rng[{i}]", r, ("torch",), optional=("cuda",))
                self.torch_rng(f"{field}.rank_rng[{i}].torch", r["torch"])
                if "cuda" in r:
                    self.byte_tensor(f"{field}.rank_rng[{i}].cuda", r["cuda"])

    # -- tensors: weights, Adam's state, RNG states ---------------------------------------------
    def shapes(self) -> tuple[dict, list]:
        """The model's state (name -> dtype, shape) and its parameters in Adam's order."""
        if self._shapes is None:
            from gnnprep.train.models import build_model

            with torch.device("meta"):
                net = build_model(self.spec)
            state = {k: (v.dtype, tuple(v.shape)) for k, v in net.state_dict().items()}
            params = [(k, p.dtype, tuple(p.shape)) for k, p in net.named_parameters()]
            self._shapes = state, params
        return self._shapes

    def tensor(self, field: str, t, dtype, shape, what: str, nonnegative: bool = False) -> None:
        want = f"a {str(dtype).removeprefix('torch.')} tensor of shape {list(shape)} ({what})"
        if not torch.is_tensor(t) or t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
            self.fail(field, t, want)
        if t.dtype != dtype or tuple(t.shape) != tuple(shape):
            self.fail(field, t, want)
        if t.is_floating_point() or t.is_complex():
            nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
            if nan or inf:
                self.fail(field, t, f"finite values ({what}; a run whose values diverged cannot be continued: "
                                    "start a new run folder)",
                          shown=f"{_shown(t)} holding {nan} NaN and {inf} infinite value(s)")
            if nonnegative and t.numel() and float(t.min()) < 0:
                self.fail(field, t, f"{what} >= 0", shown=f"{_shown(t)} holding a negative value")

    def model_state(self, field: str, sd) -> None:
        state, _ = self.shapes()
        if not isinstance(sd, dict):
            self.fail(field, sd, f"the {self.spec.name} model's weights (a dict of {len(state)} tensors)")
        for k, (dtype, shape) in state.items():
            if k not in sd:
                self.fail(f"{field}[{ascii(k)}]", None, f"a {str(dtype).removeprefix('torch.')} tensor of shape "
                                                        f"{list(shape)} (a weight of the {self.spec.name} model)",
                          shown="missing")
            self.tensor(f"{field}[{ascii(k)}]", sd[k], dtype, shape, f"a weight of the {self.spec.name} model")
        for k in sd:
            if k not in state:
                self.fail(field, sd, f"only the {self.spec.name} model's weights",
                          shown=f"a dict with the unexpected key {_shown(k)}")

    def optimizer_state(self, field: str, o) -> None:
        _, params = self.shapes()
        self.keys(field, o, ("state", "param_groups"))
        fresh = torch.optim.Adam([torch.zeros(1)], lr=self.config.lr,
                                 weight_decay=self.config.weight_decay).state_dict()["param_groups"][0]
        groups = o["param_groups"]
        if not isinstance(groups, list) or len(groups) != 1:
            self.fail(f"{field}.param_groups", groups, "a list of one parameter group (Adam's)")
        group = groups[0]
        self.keys(f"{field}.param_groups[0]", group, _ADAM_REQUIRED, optional=tuple(group) if isinstance(group, dict) else ())
        for k, v in group.items():
            f = f"{field}.param_groups[0].{k}"
            if k == "params":
                if not isinstance(v, list) or not all(_is_int(i) for i in v) or v != list(range(len(params))):
                    self.fail(f, v, f"the parameter ids 0..{len(params) - 1}")
            elif k in fresh and not _same_plain(v, fresh[k]):
                self.fail(f, v, f"{fresh[k]!r} (Adam's setting for this run)")
            elif not isinstance(v, _SCALARS) and not (isinstance(v, (list, tuple)) and all(_finite(x) for x in v)):
                self.fail(f, v, "a plain value")
        state = o["state"]
        if not isinstance(state, dict):
            self.fail(f"{field}.state", state, "a dict of Adam's state per parameter id")
        moments = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if fresh.get("amsgrad") else ())
        for i, s in state.items():
            if not _is_int(i) or not 0 <= i < len(params):
                self.fail(f"{field}.state", state, f"parameter ids in 0..{len(params) - 1}",
                          shown=f"a dict with the key {_shown(i)}")
            name, dtype, shape = params[i]
            f = f"{field}.state[{i}]"
            self.keys(f, s, moments)
            step = s["step"]
            if torch.is_tensor(step):
                if step.dim() != 0 or not step.is_floating_point() or step.device.type != "cpu" \
                        or step.layout != torch.strided \
                        or not math.isfinite(float(step)) or float(step) < 0:
                    self.fail(f"{f}.step", step, "a finite count >= 0 (a scalar float tensor)",
                              shown=_shown(step) + (f" holding {float(step)}" if step.numel() == 1 and step.layout == torch.strided
                                                    and step.device.type == "cpu" else ""))
            else:
                self.number(f"{f}.step", step)
            for m in moments[1:]:
                self.tensor(f"{f}.{m}", s[m], dtype, shape, f"Adam's moment of {name}", nonnegative=m != "exp_avg")

    def byte_tensor(self, field: str, t, size: int | None = None) -> None:
        if not torch.is_tensor(t) or t.dtype != torch.uint8 or t.dim() != 1 or t.layout != torch.strided \
                or t.device.type != "cpu" or (size is not None and t.numel() != size):
            self.fail(field, t, f"a uint8 tensor of shape [{size if size is not None else 'n'}] (an RNG state)")

    def torch_rng(self, field: str, t) -> None:
        self.byte_tensor(field, t, torch.get_rng_state().numel())
        try:
            torch.Generator().set_state(t)
        except Exception:  # noqa: BLE001 - torch refuses a state it cannot restore in its own words
            self.fail(field, t, "a state torch's CPU generator can restore", shown=f"{_shown(t)} that torch cannot restore")

    def rng_state(self, field: str, r) -> None:
        self.keys(field, r, ("torch", "numpy", "python"), optional=("cuda",))
        self.torch_rng(f"{field}.torch", r["torch"])
        self.numpy_rng(f"{field}.numpy", r["numpy"])
        self.python_rng(f"{field}.python", r["python"])
        if "cuda" in r:
            cuda = r["cuda"]
            devices = torch.cuda.device_count() if torch.cuda.is_available() else None
            if not isinstance(cuda, (list, tuple)) or (devices is not None and len(cuda) > devices):
                self.fail(f"{field}.cuda", cuda, f"a list of CUDA RNG states{f', at most {devices}' if devices else ''}")
            for i, t in enumerate(cuda):
                self.byte_tensor(f"{field}.cuda[{i}]", t)

    def numpy_rng(self, field: str, v) -> None:
        self.keys(field, v, ("bit_generator", "state", "has_uint32", "uinteger"))
        if not isinstance(v["bit_generator"], str) or v["bit_generator"] != "PCG64":
            self.fail(f"{field}.bit_generator", v["bit_generator"], "'PCG64' (numpy's default_rng)")
        self.keys(f"{field}.state", v["state"], ("state", "inc"))
        for k in ("state", "inc"):
            self.integer(f"{field}.state.{k}", v["state"][k], 0, 2**128 - 1, "2**128-1")
        self.integer(f"{field}.has_uint32", v["has_uint32"], 0, 1)
        self.integer(f"{field}.uinteger", v["uinteger"], 0, 2**32 - 1, "2**32-1")
        try:
            np.random.PCG64().state = v
        except Exception:  # noqa: BLE001 - numpy's own refusal, in its words
            self.fail(field, v, "a state numpy's PCG64 can restore", shown="a state numpy cannot restore")

    def python_rng(self, field: str, v) -> None:
        want = "Python's random state (3, a tuple of 625 integers, None or a number)"
        if not isinstance(v, tuple) or len(v) != 3 or not _is_int(v[0]) or v[0] != 3:
            self.fail(field, v, want)
        mt, gauss = v[1], v[2]
        if not isinstance(mt, tuple) or len(mt) != 625 or not all(_is_int(x) and 0 <= x < 2**32 for x in mt) \
                or mt[-1] > 624:
            self.fail(f"{field}[1]", mt, "a tuple of 624 integers in 0..2**32-1 and a position in 0..624")
        if gauss is not None and not (isinstance(gauss, float) and math.isfinite(gauss)):
            self.fail(f"{field}[2]", gauss, "None or a finite float")
        try:
            random.Random().setstate(v)
        except Exception:  # noqa: BLE001 - Python's own refusal, in its words
            self.fail(field, v, want, shown="a state Python's random cannot restore")


def check_resumable(ck: dict, config: TrainConfig, data, run_dir: Path, world: int = 1) -> None:
    """Refuse a checkpoint that cannot continue this run: every field checked
    (:class:`CheckpointCheck`), then the same world size, artifact and settings."""
    ck_path = run_dir / "checkpoint.pt"
    check = CheckpointCheck(ck_path, config, data.spec, world)
    check.header(ck)
    if ck.get("world_size", 1) != world:
        raise GnnprepError(f"{ck_path}: was trained by {ck.get('world_size', 1)} process(es), now {world}; resume "
                           f"with the same number of torchrun processes ({ck.get('world_size', 1)}), or use a new run folder")
    if ck["fingerprint"]["file"] != data.fingerprint["file"] or \
            ck["fingerprint"]["graph_fingerprint"] != data.fingerprint["graph_fingerprint"]:
        raise GnnprepError(f"{ck_path}: was trained on another features artifact "
                           f"({ck['fingerprint']['path']}, {ck['fingerprint']['file']}); cannot resume on this one")
    old, new = ck["config"], config_dict(config)
    # the model first: another model's run differs in its defaults too (hops, layers), which would be named instead
    changed = sorted((k for k in new if k not in RESUMABLE_CHANGES and old.get(k) != new[k]), key=lambda k: (k != "model", k))
    if changed:
        k = changed[0]
        raise GnnprepError(f"{ck_path}: was trained with {k}={old.get(k)!r}, now {new[k]!r}; "
                           "resume with the same settings or use a new run folder")
    check.runs(ck)
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
