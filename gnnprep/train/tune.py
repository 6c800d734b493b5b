"""Hyperparameter search over :func:`gnnprep.train.trainer.train`: a grid, chosen on validation accuracy only.

Every grid point is one *trial*: one ``train`` call with ``seeds`` seeded runs starting at
``seed + SELECTION_SEED_OFFSET`` (far from the reported seeds, so the final runs are fresh). Points
are scored by their mean validation accuracy and the first best one wins ties; the test split of a
grid trial is never read while choosing (:func:`selection_result` keeps no test score). The chosen
point is then trained again with ``report_seeds`` fresh runs, seeds ``seed .. seed + report_seeds -
1``, whose test accuracy (at each run's best validation epoch) is the reported mean ± sample std.
They run as one trial per seed, so they run in parallel like the grid; the numbers equal one
``train`` call with ``runs = report_seeds`` (run r of a call is seeded ``seed + r`` afresh).

Layout of the tune folder: ``tune.json`` (the features artifact's fingerprint, the config and, once
finished, the result); ``trials/<key>/`` (a trial's run folder, as ``gnnprep train`` writes it);
``trials/<key>.json`` (its train summary, written atomically once the trial has finished). The key
hashes the model, the trial's full set of train overrides, its first seed and its run count (as
the TrainConfig they make, defaults included), so a rerun of the same command (or one whose grid
overlaps) skips finished trials and redoes unfinished ones from scratch; a folder tuned on another
artifact or for another model is refused. Settings left to the artifact's regime (None) are
resolved inside ``train``; a trial's summary records what they became (``defaults``).

Execution: trials run in a ``concurrent.futures.ProcessPoolExecutor`` of ``jobs`` workers started
with the ``spawn`` method. A worker is a fresh interpreter that imports torch once and then runs
trial after trial by calling the library's ``train`` directly, so a trial pays neither an
interpreter start nor torch's import (about 2 s, the length of a whole small trial) nor a round trip
through command-line text and JSON, and its errors come back as exceptions (a ``GnnprepError`` stays
one). ``spawn`` rather than ``fork``: the parent may hold threads and HDF5/OpenMP state that a
forked child must not inherit, and every worker sets its own torch thread count. Workers ignore
SIGINT (the parent ends them when it is interrupted) and exit on their own when the parent dies
(they poll their parent id), so a tune killed with SIGKILL leaves no trial running behind it.
Each trial gets ``threads`` torch threads (default: cpu_count // jobs) and ``memory_budget // jobs``
bytes; ``jobs`` is capped so that jobs × the per-trial estimate (the rows the splits need × the
hops it reads × d × itemsize, plus ``TORCH_ALLOWANCE``) fits the budget, and by the CPU count.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import itertools
import json
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from gnnprep import __version__
from gnnprep.core.output import atomic_output
from gnnprep.core.errors import GnnprepError
from gnnprep.core.artifact import file_fingerprint
from gnnprep.core.progress import no_progress
from gnnprep.core.sizes import default_host_budget
from gnnprep.train.config import MAX_THREADS, TrainConfig, int_check

SELECTION_SEED_OFFSET = 1000          # grid trials start here above the base seed (at least report_seeds)
TORCH_ALLOWANCE = 300 * 1024**2       # per trial: the interpreter, torch, the model and its optimizer
MAX_POINTS = 10_000
# TrainConfig fields a tune sets itself (or that only decide where and how fast a trial runs)
NOT_TUNABLE = ("model", "seed", "runs", "memory_budget", "threads")
EXECUTION_FIELDS = ("memory_budget", "threads")   # how a trial runs, not what it computes
Runner = Callable[[str, str, TrainConfig], dict]


# --------------------------------------------------------------------------------------- the grid


def _annotation(f: dataclasses.Field) -> str:
    t = f.type
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


@functools.lru_cache(maxsize=None)
def tunable_fields() -> dict[str, str]:
    """TrainConfig field name → its type's name without ``None`` (``int``, ``float``, ``str``,
    ``bool``, ``tuple``) for every field a grid or a fixed override may set."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in NOT_TUNABLE:
            continue
        base = _annotation(f).replace("| None", "").replace("None |", "").strip()
        out[f.name] = "tuple" if base.startswith("tuple") else base
    return out


def _optional(name: str) -> bool:
    return "None" in _annotation(next(f for f in dataclasses.fields(TrainConfig) if f.name == name))


def option_name(name: str) -> str:
    """``weight_decay`` → ``weight-decay`` (the train option's name without its dashes)."""
    return name.replace("_", "-")


def parse_value(name: str, text: str):
    """One grid value of field ``name``, read as the field's type. ``auto`` is None (chosen at train
    time) for fields whose default may be None and that are not text; a tuple is ``a+b``."""
    kind, text = tunable_fields()[name], text.strip()
    if text == "auto" and _optional(name) and kind != "str":
        return None
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            return {"true": True, "1": True, "false": False, "0": False}[text.lower()]
        if kind == "tuple":
            return tuple(text.split("+"))
        return text
    except (ValueError, KeyError):
        raise GnnprepError(f"--grid {option_name(name)}={text}: expected a{'n' if kind == 'int' else ''} {kind}") from None


def _field_for(key: str) -> str:
    name = key.strip().replace("-", "_")
    if name not in tunable_fields():
        keys = ", ".join(option_name(k) for k in tunable_fields())
        raise GnnprepError(f"--grid {key.strip()!r}: unknown key; expected one of {keys}")
    return name


def parse_grid(text: str) -> tuple[tuple[str, tuple], ...]:
    """``lr=0.2,0.05;weight-decay=1e-5,1e-4`` → ``(("lr", (0.2, 0.05)), ("weight_decay", (1e-5, 1e-4)))``.

    Keys are train option names (dashes or underscores) mapped to TrainConfig fields; values are read
    as the field's type. An unknown or repeated key, an empty or repeated value: GnnprepError."""
    entries = [e for e in str(text).split(";") if e.strip()]
    if not entries:
        raise GnnprepError(f"--grid {text!r}: expected key=v1,v2;key2=v3")
    grid: dict[str, tuple] = {}
    for entry in entries:
        key, eq, values = entry.partition("=")
        if not eq or not key.strip():
            raise GnnprepError(f"--grid {entry.strip()!r}: expected key=v1,v2")
        name = _field_for(key)
        if name in grid:
            raise GnnprepError(f"--grid {option_name(name)}: given twice; expected each key once")
        texts = values.split(",")
        if any(not t.strip() for t in texts):
            raise GnnprepError(f"--grid {option_name(name)}={values.strip()}: empty value; expected v1,v2,...")
        parsed = tuple(parse_value(name, t) for t in texts)
        if len(set(parsed)) != len(parsed):
            raise GnnprepError(f"--grid {option_name(name)}={values.strip()}: a value is repeated")
        grid[name] = parsed
    return tuple(grid.items())


def format_value(v) -> str:
    if v is None:
        return "auto"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "+".join(v)
    return str(v)


def format_params(params: dict) -> str:
    return ", ".join(f"{option_name(k)}={format_value(v)}" for k, v in params.items())


# --------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class TuneConfig:
    """A grid search: ``grid`` is ((field, values), ...) in TrainConfig field names, ``fixed`` the
    train overrides shared by every trial (only what the user set; the rest stays TrainConfig's
    default). ``seed`` is the base seed, ``seeds`` the runs per grid point, ``report_seeds`` the runs
    of the chosen point; ``jobs`` parallel trials (0: as many as fit), ``threads`` torch threads per
    trial (None: cpu_count // jobs), ``memory_budget`` bytes for all trials together (None: half the
    free RAM)."""

    model: str
    grid: tuple[tuple[str, tuple], ...] = ()
    fixed: dict = field(default_factory=dict)
    seed: int = 0
    seeds: int = 2
    report_seeds: int = 10
    jobs: int = 1
    memory_budget: int | None = None
    threads: int | None = None

    def points(self) -> list[dict]:
        """Every grid point, the first key outermost (the order of the table and of tie-breaking)."""
        keys = [k for k, _ in self.grid]
        return [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in self.grid))]

    @property
    def selection_seed(self) -> int:
        return self.seed + max(SELECTION_SEED_OFFSET, self.report_seeds)

    def train_config(self, params: dict, seed: int, runs: int, **execution) -> TrainConfig:
        """The TrainConfig of one trial: the fixed overrides, the point's values, seeds, and
        ``execution`` (threads, memory_budget: how it runs, not what it computes)."""
        return TrainConfig(model=self.model, **self.fixed, **params, seed=seed, runs=runs, **execution)

    def check(self) -> None:
        """Every setting, before anything is read: GnnprepError naming the option at fault."""
        for name, v in (("--seeds", self.seeds), ("--report-seeds", self.report_seeds)):
            int_check(name, 1, 1 << 30)(v)
        int_check("--jobs", 0, MAX_THREADS)(self.jobs)
        if self.threads is not None:
            int_check("--threads", 1, MAX_THREADS)(self.threads)
        if self.memory_budget is not None and self.memory_budget <= 0:
            raise GnnprepError(f"--memory-budget {self.memory_budget}: expected a positive size")
        fields = tunable_fields()
        for key in self.fixed:
            if key not in fields:
                raise GnnprepError(f"fixed train option {key!r}: not a tunable TrainConfig field")
        self.train_config({}, self.seed, self.report_seeds).check()
        self.train_config({}, self.selection_seed, self.seeds).check()
        self._check_grid(fields)

    def _check_grid(self, fields: dict) -> None:
        if not self.grid:
            raise GnnprepError("--grid: expected at least one key=v1,v2")
        seen = set()
        for name, values in self.grid:
            if name not in fields:
                raise GnnprepError(f"--grid {option_name(name)!r}: unknown key")
            if name in seen or not values:
                raise GnnprepError(f"--grid {option_name(name)}: given twice or without values")
            seen.add(name)
            if name in self.fixed:
                raise GnnprepError(f"--grid {option_name(name)}: also given as --{option_name(name)}; "
                                   "give it either in the grid or as a fixed option")
            for v in values:
                try:
                    self.train_config({name: v}, self.seed, 1).check()
                except GnnprepError as e:
                    raise GnnprepError(f"--grid {option_name(name)}={format_value(v)}: {_what(e)}") from None
        points = 1
        for _, values in self.grid:
            points *= len(values)
        if points > MAX_POINTS:
            raise GnnprepError(f"--grid: {points} points; expected at most {MAX_POINTS}")
        for p in self.points():
            for seed, runs in ((self.selection_seed, self.seeds), (self.seed, self.report_seeds)):
                try:
                    self.train_config(p, seed, runs).check()
                except GnnprepError as e:
                    raise GnnprepError(f"--grid {format_params(p)}: {e}") from None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["grid"] = [[k, list(v)] for k, v in self.grid]
        return d


def _what(e: GnnprepError) -> str:
    """The reason of a TrainConfig refusal without its leading ``--option value:``."""
    text = str(e)
    head, sep, rest = text.partition(": ")
    return rest if sep and head.startswith("--") else text


# --------------------------------------------------------------------------------------- trials


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


# --------------------------------------------------------------------------------------- the artifact


def features_fingerprint(path: Path, store) -> dict:
    """What train records as the features' identity: path, size/mtime, the graph's fingerprint."""
    return {"path": str(path.absolute()), "file": file_fingerprint(path), "graph_fingerprint": store.graph_fingerprint}


def _same_features(a: dict, b: dict) -> bool:
    return a.get("file") == b.get("file") and a.get("graph_fingerprint") == b.get("graph_fingerprint")


@dataclass(frozen=True)
class ArtifactFacts:
    """What the memory estimate needs from the features artifact (read from shapes, no data)."""

    fingerprint: dict
    held_rows: int             # rows the splits need
    width: int                 # d
    itemsize: int
    hops: int                  # K of the artifact
    operators: int             # operator channels the artifact holds


def read_facts(path) -> ArtifactFacts:
    from gnnprep.precompute.features import FeatureStore

    path = Path(path)
    with FeatureStore(path) as store:
        positions = store.split_positions(store.rows)
        held = len(np.unique(np.concatenate(list(positions.values()))))
        hop0 = store.hop(0)
        if hop0.ndim != 2:
            raise GnnprepError(f"{path}: /hops/0 has shape {hop0.shape}; expected [rows, d]")
        return ArtifactFacts(fingerprint=features_fingerprint(path, store), held_rows=held, width=int(hop0.shape[1]),
                             itemsize=hop0.dtype.itemsize, hops=store.hops, operators=len(store.operators()))


def trial_bytes(facts: ArtifactFacts, model: str, overrides: dict) -> int:
    """Host memory of one trial: rows × views × d × itemsize + TORCH_ALLOWANCE, where views bounds
    the hop datasets the model reads, (K+1) × channels (exact for lc-gprgnn and sign, generous for
    sgc/lc-gcn/mlp, which read one)."""
    hops = overrides.get("hops")
    k = facts.hops if hops is None else hops
    ops = overrides.get("operators")
    channels = len(ops) if ops else (facts.operators if model == "sign" else 1)
    views = 1 if model in ("sgc", "lc-gcn", "mlp") else (k + 1) * channels
    return facts.held_rows * views * facts.width * facts.itemsize + TORCH_ALLOWANCE


def plan_jobs(requested: int, per_trial: int, budget: int, pending: int, cpus: int) -> tuple[int, list[str]]:
    """Parallel trials: ``requested`` (0: as many as fit), capped by the budget, the CPUs and the
    pending trials (at least 1). Returns (jobs, why it was capped)."""
    want = cpus if requested == 0 else requested
    fit = max(1, budget // max(1, per_trial))
    jobs = max(1, min(want, fit, cpus, max(1, pending)))
    notes = []
    if requested and jobs < requested:
        if fit < requested:
            notes.append(f"--jobs {requested}: {fit} trial(s) of ~{per_trial / 1024**2:.0f} MiB fit the memory budget")
        if cpus < requested:
            notes.append(f"--jobs {requested}: {cpus} CPU(s)")
    return jobs, notes


# --------------------------------------------------------------------------------------- the tune folder


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(obj, path: Path) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, default=list))


@contextmanager
def _locked(tune_dir: Path) -> Iterator[None]:
    """Create the tune folder and hold its lock: two tunes must not run the same trials."""
    if tune_dir.exists() and not tune_dir.is_dir():
        raise GnnprepError(f"{tune_dir}: exists and is not a folder; expected a tune folder")
    try:
        (tune_dir / "trials").mkdir(parents=True, exist_ok=True)
        lock = open(tune_dir / "tune.lock", "w")
    except OSError as e:
        raise GnnprepError(f"{tune_dir}: cannot create the tune folder ({e.strerror or e}); expected a writable place") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GnnprepError(f"{tune_dir}: another gnnprep tune is running in this folder") from None
        yield
    finally:
        lock.close()


def _check_folder(tune_dir: Path) -> dict | None:
    """The folder's earlier ``tune.json`` (None for a new folder); refuses a folder that holds
    something else."""
    record_path = tune_dir / "tune.json"
    if record_path.exists():
        record = _read_json(record_path)
        if not isinstance(record, dict) or "features" not in record:
            raise GnnprepError(f"{record_path}: unreadable; expected the record of an earlier tune (delete the folder to start over)")
        return record
    if tune_dir.exists() and any(p.name not in ("trials", "tune.lock") for p in tune_dir.iterdir()):
        raise GnnprepError(f"{tune_dir}: is not empty and holds no tune.json; expected a new or an earlier tune folder")
    return None


def _refuse_other_tune(record: dict, facts: ArtifactFacts, config: TuneConfig, tune_dir: Path) -> None:
    old_fp, old_model = record.get("features", {}), record.get("config", {}).get("model")
    if not _same_features(old_fp, facts.fingerprint) or old_model != config.model:
        raise GnnprepError(f"{tune_dir}: holds a tune of {old_model} on {old_fp.get('path')} ({old_fp.get('file')}); "
                           f"this one is {config.model} on {facts.fingerprint['path']} ({facts.fingerprint['file']}); "
                           "expected the same model and features, or another -o folder")


def _finished(tune_dir: Path, trial: Trial, facts: ArtifactFacts) -> dict | None:
    """A trial's summary when its result file is complete and belongs to this artifact."""
    record = _read_json(tune_dir / "trials" / f"{trial.key}.json")
    if not isinstance(record, dict) or record.get("key") != trial.key:
        return None
    if not _same_features(record.get("features", {}), facts.fingerprint):
        return None
    return record.get("summary")


def _record(tune_dir: Path, trial: Trial, model: str, facts: ArtifactFacts, summary: dict) -> None:
    _write_json({"key": trial.key, "model": model, "overrides": trial.overrides, "seed": trial.seed,
                 "runs": trial.runs, "features": facts.fingerprint, "summary": summary},
                tune_dir / "trials" / f"{trial.key}.json")


# --------------------------------------------------------------------------------------- running trials


def run_trial(features: str, run_dir: str, config: TrainConfig) -> dict:
    """The default runner (in a worker process): one ``train`` call; its summary."""
    from gnnprep.train.trainer import train

    return train(features, run_dir, config).summary()


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)  # the tune died (SIGKILL): its trials are redone by the next run
        time.sleep(0.5)


def _worker_init(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends its workers when interrupted
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


class _InProcess:
    """Trials one after another in this process, through ``runner`` (tests, embedding)."""

    def __init__(self, runner: Runner):
        self.runner = runner

    def run(self, jobs: list[tuple[Trial, str, TrainConfig]], features: str) -> Iterator[tuple[Trial, dict]]:
        for trial, run_dir, cfg in jobs:
            yield trial, self.runner(features, run_dir, cfg)

    def close(self, failed: bool) -> None:
        pass


class _Pool:
    """Trials in ``jobs`` spawned worker processes, yielded as they finish."""

    def __init__(self, jobs: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.executor = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_worker_init, initargs=(os.getpid(),))

    def run(self, jobs: list[tuple[Trial, str, TrainConfig]], features: str) -> Iterator[tuple[Trial, dict]]:
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        futures = {self.executor.submit(run_trial, features, run_dir, cfg): trial for trial, run_dir, cfg in jobs}
        for future in as_completed(futures):
            trial = futures[future]
            try:
                summary = future.result()
            except BrokenProcessPool:
                raise GnnprepError(f"trial {trial.key} ({format_params(trial.params)}): its worker process died "
                                   "(out of memory? lower --jobs or --memory-budget)") from None
            yield trial, summary

    def close(self, failed: bool) -> None:
        if not failed:
            self.executor.shutdown(wait=True)
            return
        # an error or an interrupt: stop now, not after the running trials (unfinished ones are
        # redone by the next run). The stdlib of Python < 3.14 has no public way to end the workers.
        processes = list(getattr(self.executor, "_processes", {}).values())
        self.executor.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.kill()
        for p in processes:
            p.join()


@contextmanager
def _executor(runner: Runner | None, jobs: int):
    ex = _InProcess(runner) if runner is not None else _Pool(jobs)
    try:
        yield ex
    except BaseException:
        ex.close(failed=True)
        raise
    ex.close(failed=False)


class _Trials:
    """Runs trials of one tune: skips finished ones, redoes unfinished ones from scratch, records
    each result as it arrives, reports progress over every trial of the tune."""

    def __init__(self, features: Path, tune_dir: Path, config: TuneConfig, facts: ArtifactFacts, executor,
                 progress, total: int):
        self.features, self.tune_dir, self.config, self.facts = features, tune_dir, config, facts
        self.executor, self.progress, self.total = executor, progress, total
        self.done = self.resumed = 0

    def run(self, trials: list[Trial], execution: dict) -> list[tuple[dict, bool]]:
        """(summary, resumed) for every trial, in the order given."""
        out: dict[str, tuple[dict, bool]] = {}
        pending = []
        for t in trials:
            summary = _finished(self.tune_dir, t, self.facts)
            if summary is not None:
                out[t.key] = (summary, True)
                self._count(resumed=True)
                continue
            run_dir = self.tune_dir / "trials" / t.key
            shutil.rmtree(run_dir, ignore_errors=True)  # a partial run of a killed tune
            pending.append((t, str(run_dir), self.config.train_config(t.params, t.seed, t.runs, **execution)))
        for t, summary in self.executor.run(pending, str(self.features)):
            _record(self.tune_dir, t, self.config.model, self.facts, summary)
            out[t.key] = (summary, False)
            self._count(resumed=False)
        return [out[t.key] for t in trials]

    def _count(self, resumed: bool) -> None:
        self.done += 1
        self.resumed += resumed
        self.progress("trials", self.done, self.total)


def tune(features, tune_dir, config: TuneConfig, progress=None, runner: Runner | None = None) -> TuneReport:
    """Grid-search ``config.model`` on ``features``; resumable in ``tune_dir``.

    ``progress(stage, done, total)`` is called after every trial. ``runner(features, run_dir,
    train_config) -> summary`` replaces the worker processes with calls in this process, one trial
    at a time (for tests and embedding); by default trials run in ``jobs`` spawned workers.
    """
    t0 = time.perf_counter()
    config.check()
    progress = progress or no_progress
    features, tune_dir = Path(features), Path(tune_dir)
    facts = read_facts(features)
    points = config.points()
    grid = [make_trial(config.model, config.fixed, p, config.selection_seed, config.seeds) for p in points]
    budget = config.memory_budget or default_host_budget()
    cpus = os.cpu_count() or 1
    record = _check_folder(tune_dir)  # before anything is created there
    with _locked(tune_dir):
        if record is not None:
            _refuse_other_tune(record, facts, config, tune_dir)
        started = {"format": "gnnprep.tune", "format_version": 1, "gnnprep_version": __version__,
                   "features": facts.fingerprint, "config": config.to_dict()}
        _write_json(started, tune_dir / "tune.json")
        per_trial = max(trial_bytes(facts, config.model, t.overrides) for t in grid)
        jobs, notes = plan_jobs(config.jobs, per_trial, budget, max(len(grid), config.report_seeds), cpus)
        if runner is not None:
            jobs = 1
        threads = config.threads or max(1, cpus // jobs)
        with _executor(runner, jobs) as ex:
            trials = _Trials(features, tune_dir, config, facts, ex, progress, total=len(grid) + config.report_seeds)
            execution = {"threads": threads, "memory_budget": max(1, budget // jobs)}
            ran = trials.run(grid, execution)
            results = [selection_result(t, s, resumed) for t, (s, resumed) in zip(grid, ran)]
            chosen = choose([r.valid_acc for r in results])
            # the report: one trial per seed, so that they run in parallel too (same numbers)
            final = [make_trial(config.model, config.fixed, points[chosen], config.seed + r, 1)
                     for r in range(config.report_seeds)]
            summaries = [s for s, _ in trials.run(final, execution)]
        report = TuneReport(model=config.model, tune_dir=str(tune_dir), trials=tuple(results), chosen=chosen,
                            report=combine_runs(summaries), seconds=time.perf_counter() - t0,
                            resumed_trials=trials.resumed, jobs=jobs, threads=threads, warnings=tuple(notes))
        _write_json({**started, "result": report.to_dict()}, tune_dir / "tune.json")
    return report
