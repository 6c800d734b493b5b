"""Trials and what comes of them: a trial (one ``train`` call, keyed by what it computes), the
validation-only result that selection sees, the choice of a point, and the report of the chosen
point's reruns on fresh seeds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gnnprep import __version__
from gnnprep.train.config import TrainConfig
from gnnprep.train.tune.grid import option_name

EXECUTION_FIELDS = ("memory_budget", "threads")   # how a trial runs, not what it computes


@dataclass(frozen=True)
class Trial:
    """One train call: the grid point it evaluates, its seeds, where it lives."""

    params: dict
    overrides: dict            # fixed + params: every train setting the trial changes
    seed: int
    runs: int
    key: str


def make_trial(model: str, fixed: dict, params: dict, seed: int, runs: int) -> Trial:
    """A trial keyed by a short stable hash of what it computes: the model, its overrides, first
    seed and run count, as the full TrainConfig they make (so a changed TrainConfig default is
    another trial) less EXECUTION_FIELDS, with the gnnprep version."""
    overrides = {**fixed, **params}
    config = dataclasses.asdict(TrainConfig(model=model, **overrides, seed=seed, runs=runs))
    what = {k: v for k, v in config.items() if k not in EXECUTION_FIELDS}
    text = json.dumps({"version": __version__, "config": what}, sort_keys=True, default=list)
    return Trial(params=dict(params), overrides=overrides, seed=seed, runs=runs,
                 key=hashlib.sha256(text.encode()).hexdigest()[:16])


@dataclass(frozen=True)
class TrialResult:
    """A grid trial as selection sees it: validation only (no test score is kept)."""

    params: dict
    key: str
    valid_acc: float
    valid_acc_std: float
    epochs: float              # mean epochs per run
    seconds: float
    resumed: bool

    def to_dict(self) -> dict:
        return {"params": {option_name(k): v for k, v in self.params.items()}, **{
            k: v for k, v in dataclasses.asdict(self).items() if k != "params"}}


def selection_result(trial: Trial, summary, resumed: bool) -> TrialResult:
    """What selection may know of a finished grid trial: its validation accuracy (mean and std over
    its runs), epochs and time. The summary's test accuracy is deliberately not read."""
    runs = max(1, int(summary["runs"]))
    return TrialResult(params=trial.params, key=trial.key, valid_acc=float(summary["valid_acc"]),
                       valid_acc_std=float(summary["valid_acc_std"]), epochs=summary["epochs_run"] / runs,
                       seconds=float(summary["seconds"]), resumed=resumed)


def choose(valid_accs: Sequence[float]) -> int:
    """The index of the best mean validation accuracy; the earliest wins ties."""
    best = 0
    for i, v in enumerate(valid_accs):
        if v > valid_accs[best]:
            best = i
    return best


def combine_runs(summaries: Sequence[dict]) -> dict:
    """One summary of the report's one-run trials (seeds seed..seed+R-1), as ``train`` with runs=R
    would give it: run r of a train call is seeded ``seed + r`` afresh, so its numbers do not depend
    on the runs before it. Mean and sample std of the accuracies; the run folder of the best
    validation accuracy (first on ties)."""
    runs = [run for s in summaries for run in s["per_run"]]
    ddof = 1 if len(runs) > 1 else 0

    def stats(key):
        values = [r[key] for r in runs]
        if any(v is None for v in values):
            return None, None
        return float(np.mean(values)), float(np.std(values, ddof=ddof))

    (valid, valid_std), (test, test_std) = stats("valid_acc"), stats("test_acc")
    best = choose([s["valid_acc"] for s in summaries])
    return {"runs": len(runs), "valid_acc": valid, "valid_acc_std": valid_std, "test_acc": test,
            "test_acc_std": test_std, "epochs_run": int(sum(s["epochs_run"] for s in summaries)),
            "seconds": round(sum(s["seconds"] for s in summaries), 3), "device": summaries[0]["device"],
            "evaluator": summaries[0]["evaluator"], "run_dir": summaries[best]["run_dir"],
            "run_dirs": [s["run_dir"] for s in summaries], "per_run": runs}


@dataclass(frozen=True)
class TuneReport:
    """The outcome of a tune: every grid trial as selection saw it, the chosen one, and the chosen
    point's report over the report seeds."""

    model: str
    tune_dir: str
    trials: tuple[TrialResult, ...]
    chosen: int
    report: dict               # the chosen point over the report seeds (with test): combine_runs
    seconds: float
    resumed_trials: int
    jobs: int
    threads: int
    warnings: tuple[str, ...] = ()

    @property
    def chosen_params(self) -> dict:
        return self.trials[self.chosen].params

    def to_dict(self) -> dict:
        report = dict(self.report, epochs=self.report["epochs_run"] / max(1, self.report["runs"]))
        return {"model": self.model, "chosen": {option_name(k): v for k, v in self.chosen_params.items()},
                "chosen_index": self.chosen, "trials": [t.to_dict() for t in self.trials], "report": report,
                "seconds": round(self.seconds, 3), "resumed_trials": self.resumed_trials, "jobs": self.jobs,
                "threads": self.threads, "tune_dir": self.tune_dir, "warnings": list(self.warnings)}
