"""The training run's configuration: a plain dataclass, importable without torch (the command line
builds its options from the defaults here without paying for torch's import)."""

from __future__ import annotations

from dataclasses import dataclass

from gnnprep.errors import GnnprepError

MODELS = ("sgc", "lc-gcn", "lc-jknet", "lc-gprgnn", "sign", "mlp")
NORMALIZE = ("none", "row", "l2")
# settings a resumed run may change: they do not alter what is computed
RESUMABLE_CHANGES = {"epochs", "patience", "checkpoint_every", "device", "memory_budget", "prefetch", "runs",
                     "eval_batch_size", "threads"}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run. Defaults follow the LC paper's appendix (Adam,
    batch 4096, hidden 256, up to 2000 epochs, patience 300 on validation loss)."""

    model: str = "lc-gprgnn"
    hops: int | None = None                 # K; None: every hop in the artifact
    operators: tuple[str, ...] | None = None  # channels; None: the artifact's first (sign: all)
    hidden: int = 256
    layers: int | None = None               # None: the model's default (lc-gprgnn 4, lc-gcn/sign/mlp 2)
    dropout: float = 0.5
    input_dropout: float = 0.0
    alpha: float = 0.1
    dprate: float = 0.5
    pool: str = "concat"
    lr: float = 0.01
    weight_decay: float = 0.0
    batch_size: int = 4096
    eval_batch_size: int = 16384
    epochs: int = 2000
    patience: int = 300
    select: str = "loss"                    # best epoch by validation loss or accuracy
    normalize_features: str = "none"        # none | row (L1) | l2: each stored row of each hop
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
        if self.model not in MODELS:
            raise GnnprepError(f"model {self.model!r}: expected one of {', '.join(MODELS)}")
        positive = {"--batch-size": self.batch_size, "--eval-batch-size": self.eval_batch_size,
                    "--epochs": self.epochs, "--runs": self.runs, "--eval-every": self.eval_every}
        for name, v in positive.items():
            if v < 1:
                raise GnnprepError(f"{name} {v}: expected a positive integer")
        if self.threads < 0:
            raise GnnprepError(f"--threads {self.threads}: expected >= 0")
        if self.patience < 0:
            raise GnnprepError(f"--patience {self.patience}: expected >= 0")
        if self.lr <= 0:
            raise GnnprepError(f"--lr {self.lr}: expected a positive learning rate")
        if self.weight_decay < 0:
            raise GnnprepError(f"--weight-decay {self.weight_decay}: expected >= 0")
        if self.select not in ("loss", "acc"):
            raise GnnprepError(f"--select {self.select!r}: expected loss or acc")
        if self.normalize_features not in NORMALIZE:
            raise GnnprepError(f"--normalize-features {self.normalize_features!r}: expected one of {', '.join(NORMALIZE)}")
        if self.evaluator not in ("auto", "ogb", "plain"):
            raise GnnprepError(f"--evaluator {self.evaluator!r}: expected auto, ogb or plain")
