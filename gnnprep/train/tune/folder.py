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
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gnnprep import __version__
from gnnprep.core.errors import GnnprepError
from gnnprep.core.output import write_json
from gnnprep.train.tune.artifact import ArtifactFacts, same_features
from gnnprep.train.tune.config import TuneConfig
from gnnprep.train.tune.trials import Trial, TuneReport


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@contextmanager
def locked(tune_dir: Path) -> Iterator[None]:
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


def check_folder(tune_dir: Path) -> dict | None:
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


def refuse_other_tune(record: dict, facts: ArtifactFacts, config: TuneConfig, tune_dir: Path) -> None:
    """Refuses a folder whose earlier tune (``record``) was of another model or artifact."""
    old_fp, old_model = record.get("features", {}), record.get("config", {}).get("model")
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


def trial_dir(tune_dir: Path, trial: Trial) -> Path:
    """The run folder of a trial (``gnnprep train``'s output)."""
    return tune_dir / "trials" / trial.key


def finished(tune_dir: Path, trial: Trial, facts: ArtifactFacts) -> dict | None:
    """A trial's summary when its result file is complete and belongs to this artifact."""
    record = _read_json(tune_dir / "trials" / f"{trial.key}.json")
    if not isinstance(record, dict) or record.get("key") != trial.key:
        return None
    if not same_features(record.get("features", {}), facts.fingerprint):
        return None
    return record.get("summary")


def record_trial(tune_dir: Path, trial: Trial, model: str, facts: ArtifactFacts, summary: dict) -> None:
    """Writes a finished trial's result file (atomically: a killed tune leaves none or a whole one)."""
    write_json({"key": trial.key, "model": model, "overrides": trial.overrides, "seed": trial.seed,
                 "runs": trial.runs, "features": facts.fingerprint, "summary": summary},
                tune_dir / "trials" / f"{trial.key}.json")
