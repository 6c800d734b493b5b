"""Where trials run, and how many at once.

Trials run in a ``concurrent.futures.ProcessPoolExecutor`` of ``jobs`` workers started with the
``spawn`` method. A worker is a fresh interpreter that imports torch once and then runs trial after
trial by calling the library's ``train`` directly, so a trial pays neither an interpreter start nor
torch's import (about 2 s, the length of a whole small trial) nor a round trip through command-line
text and JSON, and its errors come back as exceptions (a ``GnnprepError`` stays one). ``spawn``
rather than ``fork``: the parent may hold threads and HDF5/OpenMP state that a forked child must
not inherit, and every worker sets its own torch thread count. Workers ignore SIGINT (the parent
ends them when it is interrupted) and exit on their own when the parent dies (they poll their
parent id), so a tune killed with SIGKILL leaves no trial running behind it. A worker finds
:func:`run_trial` by this module's path.

Each trial gets ``threads`` torch threads (default: cpu_count // jobs) and ``memory_budget // jobs``
bytes; ``jobs`` is capped so that jobs × the per-trial estimate (the rows the splits need × the
hops it reads × d × itemsize, plus ``TORCH_ALLOWANCE``) fits the budget, and by the CPU count.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from gnnprep.core.errors import GnnprepError
from gnnprep.train.config import TrainConfig
from gnnprep.train.tune.artifact import ArtifactFacts
from gnnprep.train.tune.grid import format_params
from gnnprep.train.tune.trials import Trial

TORCH_ALLOWANCE = 300 * 1024**2       # per trial: the interpreter, torch, the model and its optimizer
Runner = Callable[[str, str, TrainConfig], dict]
MANAGER_WAIT = 30.0                    # seconds a failed tune waits for the pool's manager thread to finish


# --------------------------------------------------------------------------------------- the memory budget


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


# --------------------------------------------------------------------------------------- the workers


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
        # The order matters: the executor's manager thread, once it sees the workers gone, closes the
        # call queue, its feeder thread and its wake-up pipe; the interpreter's exit hook for the pool
        # writes to that pipe without the executor's lock. Returning before the manager thread had
        # finished left the two free to race (an "Exception ignored on threading shutdown" traceback:
        # the likely source of the 3 in 10 of issue 23 item 8, not reproduced since), so this waits
        # for it: after it no thread of the pool is left, and the exit hook finds the pipe closed.
        manager = getattr(self.executor, "_executor_manager_thread", None)
        processes = list(getattr(self.executor, "_processes", {}).values())
        self.executor.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.kill()
        for p in processes:
            p.join()
        if manager is not None:
            manager.join(MANAGER_WAIT)


@contextmanager
def trial_executor(runner: Runner | None, jobs: int):
    """Where the trials of a tune run: through ``runner`` in this process when one is given, else in
    ``jobs`` spawned workers. Its ``run(jobs, features)`` yields (trial, summary) as trials finish;
    on an error or an interrupt the running trials are stopped at once."""
    ex = _InProcess(runner) if runner is not None else _Pool(jobs)
    try:
        yield ex
    except BaseException:
        ex.close(failed=True)
        raise
    ex.close(failed=False)
