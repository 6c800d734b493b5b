"""The grid search itself, :func:`tune`: every grid point as a trial, the best on validation
chosen, then rerun on the report seeds; finished trials of an earlier run of the same tune are
taken from the tune folder rather than run again."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from gnnprep.core.errors import GnnprepError, Interrupted
from gnnprep.core.output import disk_full_error
from gnnprep.core.progress import no_progress
from gnnprep.core.sizes import default_host_budget
from gnnprep.train.tune import folder
from gnnprep.train.tune.artifact import ArtifactFacts, read_facts
from gnnprep.train.tune.config import TuneConfig
from gnnprep.train.tune.grid import format_params
from gnnprep.train.tune.trials import Trial, TuneReport, choose, combine_runs, make_trial, selection_result
from gnnprep.train.tune.workers import Runner, plan_jobs, trial_bytes, trial_executor


class _Trials:
    """Runs trials of one tune: skips finished ones, redoes unfinished ones from scratch, records
    each result as it arrives, reports progress over every trial of the tune."""

    def __init__(self, features: Path, tune_dir: Path, config: TuneConfig, facts: ArtifactFacts, executor,
                 progress, total: int):
        self.features, self.tune_dir, self.config, self.facts = features, tune_dir, config, facts
        self.executor, self.progress, self.total = executor, progress, total
        self.done = self.resumed = 0
        self.notes: list[str] = []   # damaged trial records (run again), for the report's warnings

    def run(self, trials: list[Trial], execution: dict) -> list[tuple[dict, bool]]:
        """(summary, resumed) for every trial, in the order given."""
        out: dict[str, tuple[dict, bool]] = {}
        pending = []
        for t in trials:
            summary = folder.finished(self.tune_dir, t, self.facts, warn=self.notes.append)
            if summary is not None:
                out[t.key] = (summary, True)
                self._count(resumed=True)
                continue
            run_dir = folder.trial_dir(self.tune_dir, t)
            shutil.rmtree(run_dir, ignore_errors=True)  # a partial run of a killed tune
            folder.clear_record(self.tune_dir, t)
            pending.append((t, str(run_dir), self.config.train_config(t.params, t.seed, t.runs, **execution)))
        for t, summary in self.executor.run(pending, str(self.features)):
            folder.record_trial(self.tune_dir, t, self.config.model, self.facts, summary)
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

    A failure leaves a folder this run made only when a trial had finished (a rerun resumes it);
    a full disk leaves nothing this run wrote (:class:`gnnprep.train.tune.folder.Undo`) and is one
    ``no space left on device`` error. Damaged trial records are run again and named in the
    report's warnings.
    """
    t0 = time.perf_counter()
    config.check()
    progress = progress or no_progress
    features, tune_dir = Path(features), Path(tune_dir)
    facts = read_facts(features)
    points = config.points()
    for p in points:  # what the artifact cannot give is refused before the tune folder exists
        facts.check_fits(config.train_config(p, config.seed, 1), f"--grid {format_params(p)}")
    grid = [make_trial(config.model, config.fixed, p, config.selection_seed, config.seeds) for p in points]
    budget = config.memory_budget or default_host_budget()
    cpus = os.cpu_count() or 1
    per_trial = max(trial_bytes(facts, config.model, t.overrides) for t in grid)
    jobs, notes = plan_jobs(config.jobs, per_trial, budget, max(len(grid), config.report_seeds), cpus)
    record = folder.check_folder(tune_dir)  # before anything is created there
    fresh = not tune_dir.exists()
    undo = folder.Undo(tune_dir)
    try:
        with folder.locked(tune_dir):
            if record is not None:
                folder.refuse_other_tune(record, facts, config, tune_dir)
            started = folder.write_started(tune_dir, facts, config)
            if runner is not None:
                jobs = 1
            threads = config.threads or max(1, cpus // jobs)
            with trial_executor(runner, jobs) as ex:
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
                                resumed_trials=trials.resumed, jobs=jobs, threads=threads,
                                warnings=tuple(notes + trials.notes))
            folder.write_result(tune_dir, started, report)
    except (GnnprepError, OSError) as e:
        if folder.disk_full(e):
            # a full disk leaves nothing behind (what was written would keep it full): one line
            error = e if isinstance(e, GnnprepError) else disk_full_error(
                Path(e.filename) if isinstance(e.filename, str) else tune_dir / "tune.json")
            undo.undo()
            raise error from None
        # a tune that finished no trial in a folder it made leaves nothing behind (nothing to resume)
        if isinstance(e, GnnprepError) and fresh and not any((tune_dir / "trials").glob("*.json")):
            shutil.rmtree(tune_dir, ignore_errors=True)
        raise
    except (KeyboardInterrupt, Interrupted) as e:
        # the command line's one line says "no output was written": true of a folder this run made
        # and finished no trial in (removed, as on a failure); otherwise it names the folder kept
        if fresh and not any((tune_dir / "trials").glob("*.json")):
            shutil.rmtree(tune_dir, ignore_errors=True)
        elif (tune_dir / "tune.json").is_file():
            e.kept_partial = str(tune_dir)
        raise
    return report
