"""The tune folder, which makes a tune resumable one trial at a time.

Layout: ``tune.json`` (the features artifact's fingerprint, the config and, once finished, the
result); ``trials/<key>/`` (a trial's run folder, as ``gnnprep train`` writes it);
``trials/<key>.json`` (its train summary, written atomically once the trial has finished). The key
hashes the model, the trial's full set of train overrides, its first seed and its run count (as
the TrainConfig they make, defaults included: :func:`gnnprep.train.tune.trials.make_trial`), so a
rerun of the same command (or one whose grid overlaps) skips finished trials and redoes unfinished
ones from scratch; a folder tuned on another artifact or for another model is refused. Settings
left to the artifact's regime (None) are resolved inside ``train``; a trial's summary records what
they became (``defaults``). A lock file keeps two tunes out of one folder.

Both files are read as untrusted (someone may have edited them): bounded, never through a blocking
open (a FIFO), any JSON accepted by the parser but nothing used before its type is checked.

- A damaged trial record (not JSON, not an object, another key or artifact, a summary without the
  fields a tune reads, or with a non-finite or out-of-range one) is a trial not finished: it is run
  again and replaces the record, and the tune warns once per record (:func:`finished`).
- A damaged ``tune.json`` is one error naming it (:func:`check_folder`), not a fresh start: it is
  the folder's identity (which artifact and model its trials are of, checked before anything is
  written there) and, for a finished tune, its only record of the result; starting afresh would
  overwrite it and might mix another tune's trials into this folder. Deleting the file is the
  fix the message names: the trial records stand on their own (each carries its key and the
  artifact's fingerprint), so a rerun then resumes every finished trial that matches.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gnnprep import __version__
from gnnprep.core.errors import GnnprepError
from gnnprep.core.files import NotRegularFile, TooLarge, read_regular
from gnnprep.core.output import disk_full_error, is_disk_full, says_no_room, write_json
from gnnprep.train.tune.artifact import ArtifactFacts, same_features
from gnnprep.train.tune.config import TuneConfig
from gnnprep.train.tune.grid import option_name
from gnnprep.train.tune.trials import Trial, TuneReport, choose, make_trial

MAX_RECORD_BYTES = 64 << 20   # far above any tune.json or trial record gnnprep writes


class Damaged(ValueError):
    """A record of the tune folder that cannot be used; the message says why."""


MISSING = object()   # what :func:`_read_json` gives for a path with no file


def _json_kind(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def _read_json(path: Path):
    """The JSON value in ``path``; MISSING when there is no such file; Damaged for anything that is not
    a regular file of at most MAX_RECORD_BYTES holding one JSON value (too deep a nesting included)."""
    try:
        data = read_regular(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return MISSING
    except NotRegularFile:
        raise Damaged("is not a regular file") from None
    except TooLarge as e:
        raise Damaged(f"is {e.size} bytes, more than a record can be") from None
    except OSError as e:
        raise Damaged(f"cannot be read ({e.strerror or e})") from None
    try:
        return json.loads(data.decode())
    except (ValueError, RecursionError):   # UnicodeDecodeError is a ValueError
        raise Damaged("is not valid JSON") from None


# --------------------------------------------------------------------------------------- the folder


@contextmanager
def locked(tune_dir: Path) -> Iterator[None]:
    """Create the tune folder and hold its lock: two tunes must not run the same trials."""
    if tune_dir.exists() and not tune_dir.is_dir():
        raise GnnprepError(f"{tune_dir}: exists and is not a folder; expected a tune folder")
    try:
        (tune_dir / "trials").mkdir(parents=True, exist_ok=True)
        lock = open(tune_dir / "tune.lock", "w")
    except OSError as e:
        if is_disk_full(e):
            raise disk_full_error(tune_dir / "tune.lock") from None
        raise GnnprepError(f"{tune_dir}: cannot create the tune folder ({e.strerror or e}); expected a writable place") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GnnprepError(f"{tune_dir}: another gnnprep tune is running in this folder") from None
        yield
    finally:
        lock.close()


def _is_text(v) -> bool:
    return isinstance(v, str)


def _check_record(record) -> None:
    """Damaged unless ``record`` has what :func:`refuse_other_tune` reads: the artifact's
    fingerprint and the config's model."""
    if not isinstance(record, dict):
        raise Damaged(f"holds {_json_kind(record)}, not a JSON object")
    features, config = record.get("features"), record.get("config")
    if not isinstance(features, dict) or not all(_is_text(features.get(k)) for k in ("path", "file")) or \
            not (features.get("graph_fingerprint") is None or _is_text(features.get("graph_fingerprint"))):
        raise Damaged("has no valid 'features' fingerprint (path, file, graph_fingerprint)")
    if not isinstance(config, dict) or not _is_text(config.get("model")):
        raise Damaged("has no valid 'config' with the model")


def check_folder(tune_dir: Path) -> dict | None:
    """The folder's earlier ``tune.json`` (None for a new folder); refuses a folder that holds
    something else, or whose ``tune.json`` is damaged (one error naming it: see the module)."""
    record_path = tune_dir / "tune.json"
    if os.path.lexists(record_path):
        try:
            record = _read_json(record_path)
            if record is MISSING:   # a dangling symlink
                raise Damaged("is a link to nothing")
            _check_record(record)
        except Damaged as e:
            raise GnnprepError(f"{record_path}: {e}; expected the record of an earlier tune (delete it to "
                               "resume the finished trials, or delete the folder to start over)") from None
        return record
    if tune_dir.exists() and any(p.name not in ("trials", "tune.lock") for p in tune_dir.iterdir()):
        raise GnnprepError(f"{tune_dir}: is not empty and holds no tune.json; expected a new or an earlier tune folder")
    return None


def refuse_other_tune(record: dict, facts: ArtifactFacts, config: TuneConfig, tune_dir: Path) -> None:
    """Refuses a folder whose earlier tune (``record``, checked by :func:`check_folder`) was of
    another model or artifact."""
    old_fp, old_model = record["features"], record["config"]["model"]
    if not same_features(old_fp, facts.fingerprint) or old_model != config.model:
        raise GnnprepError(f"{tune_dir}: holds a tune of {old_model} on {old_fp.get('path')} ({old_fp.get('file')}); "
                           f"this one is {config.model} on {facts.fingerprint['path']} ({facts.fingerprint['file']}); "
                           "expected the same model and features, or another -o folder")


def write_started(tune_dir: Path, facts: ArtifactFacts, config: TuneConfig) -> dict:
    """Writes ``tune.json`` as a tune starts (the artifact and the config, no result); returns it."""
    started = {"format": "gnnprep.tune", "format_version": 1, "gnnprep_version": __version__,
               "features": facts.fingerprint, "config": config.to_dict()}
    write_json(started, tune_dir / "tune.json")
    return started


def write_result(tune_dir: Path, started: dict, report: TuneReport) -> None:
    """Writes ``tune.json`` once the tune has finished: the started record with the result."""
    write_json({**started, "result": report.to_dict()}, tune_dir / "tune.json")


# --------------------------------------------------------------------------------------- the trials


def trial_dir(tune_dir: Path, trial: Trial) -> Path:
    """The run folder of a trial (``gnnprep train``'s output)."""
    return tune_dir / "trials" / trial.key


def record_path(tune_dir: Path, trial: Trial) -> Path:
    """A trial's result file."""
    return tune_dir / "trials" / f"{trial.key}.json"


def _number(v, lo: float = 0.0, hi: float = math.inf) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi


def _count(v, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def check_summary(summary) -> None:
    """Damaged unless a trial's train summary has every field a tune reads, of its type and range:
    selection (:func:`~gnnprep.train.tune.trials.selection_result`) and the report
    (:func:`~gnnprep.train.tune.trials.combine_runs`)."""
    if not isinstance(summary, dict):
        raise Damaged("has no summary object")
    if not _count(summary.get("runs"), 1):
        raise Damaged(f"summary 'runs' is {summary.get('runs')!r}; expected a count >= 1")
    for key, hi in (("valid_acc", 1.0), ("valid_acc_std", math.inf), ("seconds", math.inf)):
        if not _number(summary.get(key), 0.0, hi):
            raise Damaged(f"summary {key!r} is {summary.get(key)!r}; expected a finite number in [0, {hi}]")
    if not _count(summary.get("epochs_run")):
        raise Damaged(f"summary 'epochs_run' is {summary.get('epochs_run')!r}; expected a count")
    for key in ("device", "evaluator", "run_dir"):
        if not _is_text(summary.get(key)):
            raise Damaged(f"summary {key!r} is {summary.get(key)!r}; expected a string")
    runs = summary.get("per_run")
    if not isinstance(runs, list) or len(runs) != summary["runs"]:
        raise Damaged(f"summary 'per_run' is not a list of {summary['runs']} run(s)")
    for r in runs:
        if not isinstance(r, dict) or not _number(r.get("valid_acc"), 0.0, 1.0) or \
                not (r.get("test_acc") is None or _number(r.get("test_acc"), 0.0, 1.0)):
            raise Damaged("summary 'per_run' holds a run without a valid_acc (and test_acc or null) in [0, 1]")


def finished(tune_dir: Path, trial: Trial, facts: ArtifactFacts, warn=None) -> dict | None:
    """A trial's summary when its result file is complete, belongs to this artifact and has what a
    tune reads; otherwise None (the trial is run again). A damaged file (anything but an absent
    one) is said through ``warn(message)``."""
    return finished_of(tune_dir, trial, facts.fingerprint, warn)


def finished_of(tune_dir: Path, trial: Trial, fingerprint: dict, warn=None) -> dict | None:
    """:func:`finished` given the features artifact's fingerprint (as ``tune.json`` records it)."""
    path = record_path(tune_dir, trial)
    try:
        record = _read_json(path)
        if record is MISSING:
            return None
        if not isinstance(record, dict):
            raise Damaged(f"holds {_json_kind(record)}, not a JSON object")
        if record.get("key") != trial.key:
            raise Damaged(f"is the record of trial {str(record.get('key'))[:40]!r}, not of {trial.key}")
        features = record.get("features")
        if not isinstance(features, dict) or not same_features(features, fingerprint):
            raise Damaged("is of another features artifact")
        check_summary(record.get("summary"))
    except Damaged as e:
        if warn is not None:
            warn(f"{path}: {e}; the trial is run again")
        return None
    return record["summary"]


def clear_record(tune_dir: Path, trial: Trial) -> None:
    """Before a trial is run again: remove whatever stands at its record's name that is not a
    regular file (a named pipe, a folder, a link: damage, which the atomic writer would refuse
    to replace). The name is the tune's own; a regular file is replaced by the new record."""
    path = record_path(tune_dir, trial)
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def record_trial(tune_dir: Path, trial: Trial, model: str, facts: ArtifactFacts, summary: dict) -> None:
    """Writes a finished trial's result file (atomically: a killed tune leaves none or a whole one)."""
    write_json({"key": trial.key, "model": model, "overrides": trial.overrides, "seed": trial.seed,
                 "runs": trial.runs, "features": facts.fingerprint, "summary": summary},
                record_path(tune_dir, trial))


# --------------------------------------------------------------------------------------- a full disk


def disk_full(e: BaseException) -> bool:
    """Whether a tune failed for a full disk: an ENOSPC OSError, or the one-line error that
    :func:`gnnprep.core.output.disk_full_error` makes of one (here, or in a trial's worker)."""
    return is_disk_full(e) or says_no_room(e)


class Undo:
    """What a tune added to its folder, so that a full disk leaves nothing behind: a folder this run
    made is removed whole (finished trials included: a rerun needs the space first, and partial
    outputs would keep the disk full, as for every writer); in an earlier folder, the trial files
    this run added are removed and ``tune.json`` is put back as it was."""

    def __init__(self, tune_dir: Path):
        self.tune_dir = tune_dir
        self.fresh = not tune_dir.exists()
        trials = tune_dir / "trials"
        self.had_trials = trials.is_dir()
        self.trials = set(os.listdir(trials)) if self.had_trials else set()
        self.had_lock = os.path.lexists(tune_dir / "tune.lock")
        self.had_record = os.path.lexists(tune_dir / "tune.json")
        try:   # check_folder has read it already: a regular file of a bounded size
            self.record = (tune_dir / "tune.json").read_bytes() if self.had_record else None
        except OSError:
            self.record = None

    def undo(self) -> None:
        import shutil

        if self.fresh:
            shutil.rmtree(self.tune_dir, ignore_errors=True)
            return
        trials = self.tune_dir / "trials"
        if trials.is_dir():
            for name in os.listdir(trials):
                if name not in self.trials:
                    p = trials / name
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
            if not self.had_trials:
                try:
                    trials.rmdir()
                except OSError:
                    pass
        if not self.had_lock:
            (self.tune_dir / "tune.lock").unlink(missing_ok=True)
        if not self.had_record:
            (self.tune_dir / "tune.json").unlink(missing_ok=True)
        elif self.record is not None:
            tmp = self.tune_dir / f".tune.json.restore-{os.getpid()}"
            try:
                tmp.write_bytes(self.record)
                os.replace(tmp, self.tune_dir / "tune.json")
            except OSError:
                tmp.unlink(missing_ok=True)   # the started record stays: the same artifact and model


# --------------------------------------------------------------------------------------- gnnprep info

TUNE_FORMAT = "gnnprep.tune"


def _number_or_none(v):
    """A finite number as it is; anything else (an edited record's text, a NaN) as None."""
    return v if _number(v, -math.inf) else None


def _grid_of(config: dict) -> list[tuple[str, list]]:
    grid = config.get("grid")
    if not isinstance(grid, list) or not all(isinstance(g, list) and len(g) == 2 and _is_text(g[0])
                                             and isinstance(g[1], list) for g in grid):
        raise Damaged("has no valid 'config' grid (a list of [key, values])")
    return [(k, v) for k, v in grid]


def _progress(tune_dir: Path, record: dict, grid: list[tuple[str, list]]) -> tuple[int | None, int | None, dict | None]:
    """(trials finished, trials in all, the best grid trial so far) of a tune that has not finished,
    from its trial records (:func:`finished`'s checks): the grid's trials by their keys, then, once
    every one has finished, the report's of the chosen point. (None, None, None) when the recorded
    config cannot make its trials (an edited ``tune.json``)."""
    config = record["config"]
    try:
        tc = TuneConfig(model=config["model"], grid=tuple((k, tuple(v)) for k, v in grid),
                        fixed=dict(config.get("fixed") or {}), seed=int(config.get("seed", 0)),
                        seeds=int(config.get("seeds", 2)), report_seeds=int(config.get("report_seeds", 10)))
        tc.check()   # (an edited record's values: refused here, as tune refuses them)
        points = tc.points()
        trials = [make_trial(tc.model, tc.fixed, p, tc.selection_seed, tc.seeds) for p in points]
    except (TypeError, ValueError, GnnprepError):
        return None, None, None
    fp = record["features"]
    done = [finished_of(tune_dir, t, fp) for t in trials]
    count = sum(s is not None for s in done)
    best = None
    scored = [i for i, s in enumerate(done) if s is not None]
    if scored:
        i = scored[choose([done[j]["valid_acc"] for j in scored])]
        best = {"params": {option_name(k): v for k, v in points[i].items()}, "valid_acc": done[i]["valid_acc"],
                "valid_acc_std": done[i]["valid_acc_std"], "test_acc": None, "test_acc_std": None,
                "runs": done[i]["runs"], "run_dir": done[i]["run_dir"], "chosen": False}
    if count == len(trials) and trials:   # the grid is done: the report's trials of its choice
        report = [make_trial(tc.model, tc.fixed, points[choose([s["valid_acc"] for s in done])], tc.seed + r, 1)
                  for r in range(tc.report_seeds)]
        count += sum(finished_of(tune_dir, t, fp) is not None for t in report)
    return count, len(trials) + tc.report_seeds, best


def describe(tune_dir) -> dict:
    """What ``gnnprep info`` shows of a tune folder (its ``tune.json``, read as untrusted, and its
    trial records): the model, the features artifact, the grid and the fixed options, how many
    trials have finished of how many, and the best point: once the tune has finished, the chosen
    one with its report's validation and test accuracy (mean and std over the report seeds);
    before, the best grid trial so far (validation only, as selection sees it). A damaged
    ``tune.json`` is one GnnprepError naming it."""
    tune_dir = Path(tune_dir)
    record_path = tune_dir / "tune.json"
    try:
        record = _read_json(record_path)
        if record is MISSING:
            raise Damaged("is not there" if not os.path.lexists(record_path) else "is a link to nothing")
        _check_record(record)
        grid = _grid_of(record["config"])
    except Damaged as e:
        raise GnnprepError(f"{record_path}: {e}; expected the record gnnprep tune writes") from None
    config, fp = record["config"], record["features"]
    fixed = config.get("fixed") if isinstance(config.get("fixed"), dict) else {}
    result = record.get("result") if isinstance(record.get("result"), dict) else None
    d = {"file": str(tune_dir), "format": TUNE_FORMAT, "format_version": _number_or_none(record.get("format_version")),
         "what": "gnnprep tune folder", "gnnprep_version": record.get("gnnprep_version"), "model": config["model"],
         "features": fp["path"], "graph_fingerprint": fp.get("graph_fingerprint"),
         "grid": {option_name(k): v for k, v in grid}, "fixed": {option_name(str(k)): v for k, v in fixed.items()},
         **{k: _number_or_none(config.get(k)) for k in ("seed", "seeds", "report_seeds")},
         "finished": result is not None}
    report = result.get("report") if result is not None and isinstance(result.get("report"), dict) else None
    if result is not None and report is not None and isinstance(result.get("chosen"), dict):
        trials = result.get("trials") if isinstance(result.get("trials"), list) else []
        runs = report.get("runs") if _count(report.get("runs")) else 0
        d.update(trials_finished=len(trials) + runs, trials_total=len(trials) + runs, best={
            "params": result["chosen"], **{k: _number_or_none(report.get(k)) for k in (
                "valid_acc", "valid_acc_std", "test_acc", "test_acc_std")},
            "runs": runs, "run_dir": report.get("run_dir") if _is_text(report.get("run_dir")) else None,
            "chosen": True})
    else:
        count, total, best = _progress(tune_dir, record, grid)
        d.update(trials_finished=count, trials_total=total, best=best)
    return d
