"""Runs of several processes started by ``torchrun`` (``torch.distributed``): who this process is,
and the few collective steps a sharded precompute needs.

``torchrun --nproc-per-node P [--nnodes N ...] -m gnnprep precompute ...`` starts P·N copies of the
command with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` in their environment. :meth:`Dist.from_env` reads them and returns None for a plain
run (no ``WORLD_SIZE``, or 1), so the one-process path is unchanged and never imports torch (about
2 s per command).

Design choices (issue 15):

- Only ``torch.distributed`` is used: no launcher, RPC or sockets of our own. The process group
  carries only small Python objects (plans, outcomes, shard names; ``all_gather_object``), never
  features: every rank writes its own shard file and rank 0 publishes the artifact over them
  (:mod:`gnnprep.precompute.run`). So the group is always ``gloo``, also when the hop kernels run on a
  GPU: NCCL would need a CUDA tensor per exchange and a current device per rank, and gains nothing
  for a few hundred bytes (the GPU ranks still compute on ``cuda:<LOCAL_RANK>``).
- Timeout: ranks wait for each other at the end of their shards, and shards need not take equally
  long, so the group's timeout is long (7 days; ``GNNPREP_DIST_TIMEOUT`` seconds overrides it).
  Joining the group is bounded apart (60 s; ``GNNPREP_DIST_INIT_TIMEOUT``): the ranks start within
  seconds of each other, and a peer killed at start-up would otherwise keep the others waiting in
  the handshake for the 7 days. On success the ranks say goodbye before leaving
  (:meth:`Dist.close`), so an agent never waits in torch's exit barrier for an agent whose rank
  was killed at the end. A
  rank that dies is noticed by torchrun's agent, which stops the others (SIGTERM, then SIGKILL) and
  exits nonzero; gloo also reports a closed peer connection at once.
- A node that dies: torchrun's agent notices its own ranks only. When a whole node's agent is
  killed (SIGKILL, a machine lost), its ranks would live on as orphans, holding their TCP
  connections open, so the other nodes' ranks would wait on them for the group's timeout (7 days)
  while a rank still computing could even finish and publish without the lost node's agent. So a
  rank asks the kernel (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, :func:`die_with_parent`) to
  kill it when its agent dies: its peers then see the connection close at once, fail with one
  error line, exit 1, and their agents exit nonzero; nothing is published, and the killed rank's
  partial shard is resumed by the rerun. (SIGKILL, not SIGTERM: a rank blocked inside a gloo
  collective runs no Python signal handler until the collective returns.)
- Errors: :meth:`Dist.step` runs one phase on every rank and then exchanges the outcomes, so a
  rank's ``GnnprepError`` becomes the same one-line error on every rank (:class:`RankFailed`:
  the message, then ``(rank r of P)``); every rank exits 1 and only rank 0 prints it (the command
  line silences :class:`RankFailed` on the other ranks). A bug (any other exception) is re-raised
  with its traceback on the rank where it happened and is one ``Error: ... failed`` line on the
  others. An interrupt (SIGINT/SIGTERM, e.g. torchrun stopping the job) is not exchanged: the
  rank keeps its partial shard and exits 130 like a one-process run.
- Exit: a Python interpreter that has imported torch spends 0.3-1 s tearing it down at exit (the
  finalizer's garbage collection over torch's ~170k objects), and torchrun waits for the slowest
  rank's exit before it can exit itself. A rank that left its group cleanly (:meth:`Dist.close`)
  therefore ends with :func:`exit_now` (the ``gnnprep`` command's last step): stdout/stderr flushed,
  the ``atexit`` handlers run, then ``os._exit`` with the command's exit status, but only when
  nothing is left that a normal exit would still have to finish: no HDF5 file open, no live
  non-daemon thread or child process, no unflushed writable file object. Otherwise (and in every
  one-process run) the interpreter exits normally.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from gnnprep.core.errors import GnnprepError, Interrupted

TIMEOUT_ENV = "GNNPREP_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 7 * 24 * 3600
INIT_TIMEOUT_ENV = "GNNPREP_DIST_INIT_TIMEOUT"
DEFAULT_INIT_TIMEOUT_S = 60   # joining the group: every rank starts within seconds of the others
_left_cleanly = False  # set once this process destroyed its process group without an error


class RankFailed(GnnprepError):
    """A phase failed on some rank; every rank raises this with the same message."""


def _int_env(environ, name: str, default: int | None = None) -> int:
    text = environ.get(name)
    if text is None:
        if default is None:
            raise GnnprepError(f"{name} is not set; torchrun sets RANK, WORLD_SIZE and LOCAL_RANK for every process")
        return default
    try:
        value = int(text)
    except ValueError:
        raise GnnprepError(f"{name}={text!r}: expected a non-negative integer (set by torchrun)") from None
    if value < 0:
        raise GnnprepError(f"{name}={text!r}: expected a non-negative integer (set by torchrun)")
    return value


def _timeout_s(environ, name: str = TIMEOUT_ENV, default: int = DEFAULT_TIMEOUT_S) -> int:
    text = environ.get(name)
    if text is None:
        return default
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        value = 0
    if value <= 0:
        raise GnnprepError(f"{name}={text!r}: expected a positive number of seconds")
    return value


def _describe(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    if isinstance(error, GnnprepError):
        return text or "failed"
    return f"failed: {type(error).__name__}" + (f": {text}" if text else "")



def speaks(environ=os.environ) -> bool:
    """False in a torchrun process other than rank 0 (``RANK`` a nonzero integer, ``WORLD_SIZE``
    set): rank 0 alone speaks for the job, its interrupts included (torchrun stops the other ranks
    with SIGTERM as soon as one exits, and a rank stopped while it started up used to print a
    second line). Read from the environment alone, so it holds from the process's first instant."""
    rank = environ.get("RANK", "").strip()
    return "WORLD_SIZE" not in environ or not rank.isdigit() or int(rank) == 0

@dataclass
class Dist:
    """This process's place in a torchrun job; :meth:`start` joins the process group."""

    rank: int
    world: int
    local_rank: int = 0
    local_world: int = 1
    timeout_s: int = DEFAULT_TIMEOUT_S
    init_timeout_s: int = DEFAULT_INIT_TIMEOUT_S

    @staticmethod
    def from_env(environ=None) -> "Dist | None":
        """The job this process belongs to, from torchrun's environment; None for a plain run."""
        environ = os.environ if environ is None else environ
        if environ.get("WORLD_SIZE") is None:
            return None
        world = _int_env(environ, "WORLD_SIZE")
        if world <= 1:
            return None
        rank = _int_env(environ, "RANK")
        if rank >= world:
            raise GnnprepError(f"RANK={rank} with WORLD_SIZE={world}: expected a rank below the world size")
        local_rank = _int_env(environ, "LOCAL_RANK", 0)
        local_world = max(1, _int_env(environ, "LOCAL_WORLD_SIZE", 1))
        return Dist(rank, world, local_rank, local_world, _timeout_s(environ),
                    _timeout_s(environ, INIT_TIMEOUT_ENV, DEFAULT_INIT_TIMEOUT_S))

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def start(self, backend: str = "gloo") -> None:
        """Join the process group (``env://``: torchrun's MASTER_ADDR and MASTER_PORT), once; this
        process dies with its torchrun agent from then on (:func:`die_with_parent`).

        ``backend``: ``gloo`` (precompute; training on the CPU) or ``nccl`` (training on GPUs: the
        caller has made ``cuda:<LOCAL_RANK>`` this process's current device first)."""
        import torch.distributed as td

        if td.is_initialized():
            return
        die_with_parent()
        joining = min(self.init_timeout_s, self.timeout_s)
        try:
            # the handshake waits at most `joining`: a peer killed at start-up (its agent then exits
            # without it) left this rank waiting in it for the group's timeout (7 days; issue 32)
            td.init_process_group(backend, rank=self.rank, world_size=self.world,
                                  timeout=timedelta(seconds=joining))
        except Exception as e:  # noqa: BLE001 (the rendezvous reports many kinds)
            raise GnnprepError(f"rank {self.rank} of {self.world}: could not join the torch.distributed process "
                               f"group within {joining} s ({_describe(e)}; {INIT_TIMEOUT_ENV} sets the limit); "
                               "another rank failed or was stopped, or start the job with torchrun") from None
        _lengthen(td, self.timeout_s)

    def close(self) -> None:
        """Leave the process group (once; a no-op when it was never joined).

        On success (no exception being handled) every rank first says goodbye to the others (one
        small exchange): a rank that exits 0 makes its torchrun agent wait in torch's exit barrier
        for the other agents (up to 300 s, not settable through torchrun), and an agent whose rank
        was killed never comes. So a peer lost this late is an error here (exit 1: the agent then
        skips the barrier and exits at once), and once the goodbye has passed every rank is at its
        last step, so the agents reach the barrier together (issue 32, line 12)."""
        global _left_cleanly
        import sys

        import torch.distributed as td

        if td.is_initialized():
            if sys.exc_info()[0] is None:
                try:
                    td.all_gather_object([None] * self.world, "bye")
                except Exception as e:  # noqa: BLE001 (a peer gone: gloo reports the closed connection)
                    raise GnnprepError(f"rank {self.rank} of {self.world}: lost contact with the other ranks as the "
                                       f"job ended ({_describe(e)}); another rank failed or was stopped") from None
            try:
                td.destroy_process_group()
            except Exception:  # noqa: BLE001 (a peer already gone: nothing left to release)
                return
            _left_cleanly = True

    def gather(self, obj) -> list:
        """``obj`` of every rank, in rank order (a small picklable object)."""
        import torch.distributed as td

        out = [None] * self.world
        try:
            td.all_gather_object(out, obj)
        except Exception as e:  # noqa: BLE001 (gloo: a peer that died or hung)
            raise GnnprepError(f"rank {self.rank} of {self.world}: lost contact with the other ranks "
                               f"({_describe(e)}); another rank failed or was stopped") from None
        return out

    def barrier(self) -> None:
        self.gather(None)

    def all_sum(self, values, device=None) -> list[float]:
        """Element-wise sums of ``values`` (a few floats) over every rank, the same on every rank
        (float64; ``device``: where the backend's tensors live, ``cuda:<LOCAL_RANK>`` for nccl)."""
        import torch
        import torch.distributed as td

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
        try:
            td.all_reduce(t)
        except Exception as e:  # noqa: BLE001 (a peer that died or hung)
            raise GnnprepError(f"rank {self.rank} of {self.world}: lost contact with the other ranks "
                               f"({_describe(e)}); another rank failed or was stopped") from None
        return t.cpu().tolist()

    def step(self, fn: Callable, *args, share: bool = False, **kwargs):
        """``fn(*args, **kwargs)`` on this rank, then the outcome of every rank: its value when all
        succeeded (with ``share``: every rank's value, in rank order; they must be small and
        picklable), else :class:`RankFailed` with the first failure's message on every rank."""
        error = None
        try:
            value = fn(*args, **kwargs)
        except (KeyboardInterrupt, Interrupted):
            raise  # torchrun stops the job; the others are interrupted too (not exchanged)
        except BaseException as e:  # noqa: BLE001 (exchanged below, then raised)
            error, value = e, None
        sent = None if error is None else _describe(error)
        outcomes = self.gather((sent, value) if share else sent)
        if not share:
            return self.settle(outcomes, error, value)
        self.settle([o[0] for o in outcomes], error)
        return [o[1] for o in outcomes]

    def root_first(self, fn: Callable):
        """``fn()`` on rank 0, then (when it succeeded) on the other ranks: e.g. an ingest into a
        shared cache, which the other ranks then find there."""
        first = self.step(fn) if self.is_root else self.step(lambda: None)
        later = self.step(fn) if not self.is_root else self.step(lambda: None)
        return first if self.is_root else later

    def settle(self, outcomes: list, error: BaseException | None, value=None):
        """Raise the first failure among ``outcomes`` (None: a rank succeeded) the same way on every
        rank; ``error`` is this rank's own exception (re-raised as is when it is a bug)."""
        failed = [(r, text) for r, text in enumerate(outcomes) if text is not None]
        if not failed:
            return value
        if error is not None and not isinstance(error, GnnprepError):
            raise error  # a bug: its traceback on the rank where it happened
        r, text = failed[0]
        raise RankFailed(f"{text} (rank {r} of {self.world})") from None


def _lengthen(td, seconds: int) -> None:
    """The group's collectives (and its store) wait ``seconds`` from now on; the handshake had a
    shorter limit. Best effort (a private torch function): where it is missing, the collectives keep
    the handshake's limit, which then also bounds how long a rank waits for the slowest one."""
    try:
        td.distributed_c10d._set_pg_timeout(timedelta(seconds=seconds))
    except Exception:  # noqa: BLE001 (another torch version)
        pass
    try:
        td.distributed_c10d._get_default_store().set_timeout(timedelta(seconds=seconds))
    except Exception:  # noqa: BLE001
        pass


def die_with_parent() -> bool:
    """Have the kernel SIGKILL this process when its parent (the torchrun agent) dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``); if the parent is already gone, die now. Only for a worker of
    torchrun's elastic agent (``TORCHELASTIC_RUN_ID`` set: the parent is the agent, which lives as
    long as the job); another launcher's parent may exit early. False where not asked (the rank
    then outlives a killed parent, as before)."""
    import signal
    import sys

    if not sys.platform.startswith("linux") or not os.environ.get("TORCHELASTIC_RUN_ID"):
        return False
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG = 1
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent or parent == 1:  # the agent died before the request was made
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def _running() -> str | None:
    """What a normal exit would wait for before its exit handlers (None: nothing)."""
    import sys
    import threading

    main = threading.main_thread()
    if any(t.is_alive() and not t.daemon and t is not main for t in threading.enumerate()):
        return "a thread"
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.active_children():
        return "a child process"
    return None


def _unfinished() -> str | None:
    """What the interpreter's teardown would still have to flush or close (None: nothing)."""
    import sys

    h5py = sys.modules.get("h5py")
    if h5py is not None and h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE):
        return "an HDF5 file"  # (HDF5 flushes and closes open files only in its own exit handler)
    import gc
    import io

    writable = (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper, io.FileIO)
    for obj in gc.get_objects():
        if type(obj) in writable:
            try:
                if obj.closed or not obj.writable():
                    continue
                if obj.fileno() not in (1, 2):
                    return f"a file open for writing ({getattr(obj, 'name', '?')})"
                obj.flush()  # stdout and stderr, and wrappers over them
            except (ValueError, OSError):
                continue
    return None


def exit_now(code) -> None:
    """End this process at once with exit status ``code`` when it is a rank that left its process
    group cleanly and nothing remains for a normal exit to finish (see the module notes); otherwise
    return, and the caller exits normally."""
    import atexit
    import sys

    if not _left_cleanly or not isinstance(code, int):
        return
    try:
        if _running() is not None:
            return
        for f in (sys.stdout, sys.stderr):
            if f is not None:
                f.flush()
        atexit._run_exitfuncs()  # what a normal exit runs next (logging, h5py, ...); each runs once
        if _unfinished() is not None:
            return  # (the normal exit then finalizes the rest; the handlers above are not run twice)
        for f in (sys.stdout, sys.stderr):
            if f is not None:
                f.flush()
    except Exception:  # noqa: BLE001 (anything odd: leave it to the normal exit)
        return
    os._exit(code)
