"""The training run's configuration: a plain dataclass, importable without torch (the command line
builds its options from the defaults here without paying for torch's import)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from gnnprep.core.errors import GnnprepError, OptionError

MODELS = ("sgc", "lc-gcn", "lc-jknet", "lc-gprgnn", "sign", "mlp")
NORMALIZE = ("none", "row", "l2")
# settings a resumed run may change: they do not alter what is computed
RESUMABLE_CHANGES = {"epochs", "patience", "checkpoint_every", "device", "memory_budget", "prefetch", "runs",
                     "eval_batch_size", "threads"}

# sane limits on option values (beyond them a run cannot be meant: refused before anything is read)
MAX_SEED = 2**63 - 1            # run r seeds torch, numpy and random with seed + r: one int64
MAX_LAYERS = 64
MAX_HIDDEN = 1 << 20            # wider models are refused by the memory estimate long before this
MAX_THREADS = 1024
MAX_CLASSES = 1_000_000         # the same cap as ingest: num_classes sizes the output layer


def number_check(option: str, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                 hi_open: bool = False, what: str = "number"):
    """A checker of one option's value: finite (no nan/inf) and within lo..hi; returns the value or
    raises ``OptionError(option, "<value>: expected ...")``. Used by :meth:`TrainConfig.check` and,
    through ``parsed_by``, by the command line (where a refused value is a usage error)."""
    lo_text = "" if lo is None else f"{'>' if lo_open else '>='} {lo:g}"
    hi_text = "" if hi is None else f"{'<' if hi_open else '<='} {hi:g}"
    bounds = " and ".join(t for t in (lo_text, hi_text) if t)

    def check(value):
        v = float(value)
        bad = not math.isfinite(v)
        bad = bad or (lo is not None and (v <= lo if lo_open else v < lo))
        bad = bad or (hi is not None and (v >= hi if hi_open else v > hi))
        if bad:
            raise OptionError(option, f"{value}: expected a finite {what}{' ' + bounds if bounds else ''}")
        return value

    return check


def int_check(option: str, lo: int, hi: int):
    """Like :func:`number_check` for integers in lo..hi (inclusive)."""

    def check(value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
            raise OptionError(option, f"{value}: expected an integer in {lo}..{hi}")
        return value

    return check


CHECKS = {
    "lr": number_check("--lr", 0, lo_open=True, what="learning rate"),
    "weight_decay": number_check("--weight-decay", 0),
    "dropout": number_check("--dropout", 0, 1, hi_open=True, what="probability"),
    "input_dropout": number_check("--input-dropout", 0, 1, hi_open=True, what="probability"),
    "dprate": number_check("--dprate", 0, 1, hi_open=True, what="probability"),
    "alpha": number_check("--alpha", 0, 1, what="value"),
    "checkpoint_every": number_check("--checkpoint-every", 0, what="number of seconds"),
    "seed": int_check("--seed", 0, MAX_SEED),
    "hidden": int_check("--hidden", 1, MAX_HIDDEN),
    "threads": int_check("--threads", 0, MAX_THREADS),
}


# settings only some models use: TrainConfig field -> (option, the models that use it, what it is). A
# user who sets one for another model would get a run that silently ignores it (``train mlp --alpha
# 0.5``, a ``tune`` grid over ``alpha`` for lc-gcn: identical trials), so the command line refuses it
# (:func:`unused_options`). The library stays lenient: a dict of settings shared across models
# (``dprate=0`` for every model of a sweep) is a fair use of TrainConfig.
MODEL_SETTINGS = {
    "alpha": ("--alpha", ("lc-gprgnn",), "it sets lc-gprgnn's initial γ_k"),
    "dprate": ("--dprate", ("lc-gprgnn",), "it is lc-gprgnn's dropout on each hop's MLP output"),
    "pool": ("--pool", ("lc-jknet",), "it is lc-jknet's pooling of its hops"),
}
# (--hidden and --dropout, which sgc ignores, stay accepted for it: scripts pass one set of them to every
# model, and the summary's defaults already leave them out for sgc)


def layers_problem(model: str, layers: int | None, hops: int | None) -> str | None:
    """Why ``model`` cannot have ``layers`` MLP layers (None when it can, or when ``layers`` is not
    set): sgc is one linear layer, and lc-jknet has one layer per hop, so its depth is ``--hops``
    (``layers`` equal to a given ``hops`` is accepted; without ``hops`` the artifact's hop count decides,
    known only once it is read). Known before anything is read, so the command line refuses it as a
    usage error (:func:`unused_options`); the library refuses it when the model is built
    (:func:`gnnprep.train.models.build_model`), where the regime has filled ``hops``."""
    if layers is None:
        return None
    if model == "sgc" and layers != 1:
        return "sgc is one linear layer (leave --layers out)"
    if model == "lc-jknet" and hops is not None and layers != hops:
        return f"lc-jknet has one layer per hop, so --hops {hops} gives it {hops}; leave --layers out"
    return None


def unused_options(model: str, given) -> list[tuple[str, str]]:
    """(option, why) for each ``(field, value)`` in ``given`` (settings the user set explicitly, as
    TrainConfig field names) that ``model`` would ignore or cannot have: the model-specific settings
    above, more than one ``operators`` channel for a model that reads only the first (every model but
    sign), and ``layers`` the model cannot have (:func:`layers_problem`, given ``hops`` when ``given``
    holds it). Empty for an unknown model (refused elsewhere)."""
    if model not in MODELS:
        return []
    given = list(given)
    hops = dict(given).get("hops")
    out = []
    for name, value in given:
        if name == "layers" and layers_problem(model, value, hops):
            out.append(("--layers", f"{value}: {layers_problem(model, value, hops)}"))
        elif name in MODEL_SETTINGS:
            option, users, what = MODEL_SETTINGS[name]
            if model not in users:
                out.append((option, f"not used by {model} ({what}); it applies to {', '.join(users)}"))
        elif name == "operators" and value is not None and len(value) > 1 and model != "sign":
            out.append(("--operator", f"{','.join(value)}: {model} reads one channel (the first); sign reads "
                                      "several (or train one model per channel)"))
    return out


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run. A setting left ``None`` is filled from the artifact's
    label regime when training starts (:mod:`gnnprep.train.regimes`: each model's paper settings for few
    training rows; the LC paper's large-graph ones — Adam, batch 4096, hidden 256, up to 2000
    epochs, patience 300 on validation loss — otherwise)."""

    model: str = "lc-gprgnn"
    hops: int | None = None                 # K; None: the regime's (small: the model's paper K; large: all)
    operators: tuple[str, ...] | None = None  # channels; None: the artifact's first (sign: all)
    hidden: int | None = None
    layers: int | None = None               # None: the regime's, else the model's (lc-gprgnn 4, lc-gcn/sign/mlp 2)
    dropout: float | None = None
    input_dropout: float | None = None
    alpha: float = 0.1
    dprate: float = 0.5
    pool: str = "concat"
    lr: float | None = None
    weight_decay: float | None = None
    batch_size: int | None = None           # None: the regime's (small: every training row at once)
    eval_batch_size: int = 16384
    epochs: int | None = None
    patience: int | None = None
    select: str = "loss"                    # best epoch by validation loss or accuracy
    normalize_features: str | None = None   # none | row (L1) | l2: each stored row of each hop
    recompute: bool = False
    memory_budget: int | None = None        # bytes; None: half the free RAM
    device: str = "auto"
    seed: int = 0
    runs: int = 1
    eval_every: int = 1
    checkpoint_every: float = 60.0          # seconds between checkpoints; 0: every epoch
    prefetch: int = 2
    evaluator: str = "auto"                 # auto | ogb | plain
    threads: int = 0                        # torch intra-op CPU threads; 0: torch's default

    def check(self) -> None:
        """Every setting on its own (no file is read): a GnnprepError naming the option otherwise."""
        if self.model not in MODELS:
            raise GnnprepError(f"model {self.model!r}: expected one of {', '.join(MODELS)}")
        positive = {"--batch-size": self.batch_size, "--eval-batch-size": self.eval_batch_size,
                    "--epochs": self.epochs, "--runs": self.runs, "--eval-every": self.eval_every}
        for name, v in positive.items():
            if v is not None and v < 1:
                raise OptionError(name, f"{v}: expected a positive integer")
        if self.hops is not None and self.hops < 0:
            raise OptionError("--hops", f"{self.hops}: expected >= 0")
        if self.patience is not None and self.patience < 0:
            raise OptionError("--patience", f"{self.patience}: expected >= 0")
        for key, check in CHECKS.items():
            if getattr(self, key) is not None:   # None: filled from the regime
                check(getattr(self, key))
        if self.seed + self.runs - 1 > MAX_SEED:
            raise OptionError("--seed", f"{self.seed}: run {self.runs} would use seed {self.seed + self.runs - 1}; "
                                        f"expected seed + runs - 1 <= {MAX_SEED}")
        if self.layers is not None:
            int_check("--layers", 1, MAX_LAYERS)(self.layers)
        if self.pool not in ("concat", "max"):
            raise OptionError("--pool", f"{self.pool!r}: expected concat or max")
        if self.select not in ("loss", "acc"):
            raise OptionError("--select", f"{self.select!r}: expected loss or acc")
        if self.normalize_features is not None and self.normalize_features not in NORMALIZE:
            raise OptionError("--normalize-features", f"{self.normalize_features!r}: expected one of {', '.join(NORMALIZE)}")
        if self.evaluator not in ("auto", "ogb", "plain"):
            raise OptionError("--evaluator", f"{self.evaluator!r}: expected auto, ogb or plain")
        from gnnprep.core.device import check_name

        check_name(self.device)   # a device spec at all (no hardware is looked at)
