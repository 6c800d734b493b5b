"""The ``gnnprep`` command line: parse, call the library, render. Nothing else lives here.

Contract: stdout carries only the result (a short summary, or one JSON object with ``--json``);
progress and warnings go to stderr; exit 0 on success, 1 with one ``Error: ...`` line for failures
the user can fix, 2 for usage errors.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

import click

from gnnprep import __version__
from gnnprep.core.distributed import speaks
from gnnprep.core.errors import GnnprepError, Interrupted, clear_interrupts, interrupt_noted, note_interrupt


class _Group(click.Group):
    def make_context(self, info_name, args, parent=None, **extra):
        # a signal while the command line is parsed: exit 130 like one during the command (click would
        # turn a KeyboardInterrupt here into "Aborted!" and exit 1)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except (KeyboardInterrupt, Interrupted):
            if speaks():
                click.echo("Error: interrupted; no output was written", err=True)
            raise click.exceptions.Exit(130) from None

    def invoke(self, ctx):
        clear_interrupts()  # a command starts: only a signal from now on ends it
        try:
            return self._invoke(ctx)
        finally:
            clear_interrupts()  # (nothing of it stays with the process: CliRunner runs many commands in one)

    def _invoke(self, ctx):
        try:
            try:
                return super().invoke(ctx)
            finally:
                _command_returned()
        except click.BadParameter as e:
            # a bad option value: exit 2 with one "Error: Invalid value for ..." line (no usage block,
            # which stays for missing options and unknown commands)
            if not isinstance(e, click.MissingParameter):
                e.ctx = None
            raise
        except GnnprepError as e:
            if interrupt_noted():  # what a signal's interrupt became on its way (see below)
                _end_interrupted(ctx, e)
            click.echo(f"Error: {str(e).splitlines()[0] if str(e) else 'failed'}", err=True)
            ctx.exit(1)
        except MemoryError:
            click.echo("Error: out of memory; lower --memory-budget or free RAM", err=True)
            ctx.exit(1)
        except (KeyboardInterrupt, Interrupted) as e:
            _end_interrupted(ctx, e)
        except Exception as e:
            line = "" if interrupt_noted() else (_stdout_failed(e) or _no_room(e))
            if line:
                click.echo(f"Error: {line}", err=True)
                ctx.exit(1)
            # a signal's interrupt that code on its way replaced with another exception (numba's
            # compiled import turns it into an ImportError): the signal is what ended the command
            if not interrupt_noted() or isinstance(e, click.exceptions.Exit):
                raise
            _end_interrupted(ctx, e)


def _stdout_failed(e: BaseException) -> str:
    """The one line for a result that could not be printed: click's ``echo`` failed writing to
    standard output (``> /dev/full``, a full disk or a quota under a redirect); '' for any other
    failure, and for a closed pipe (``| head``: exit 1 in silence, as click does). Standard output is
    then pointed at /dev/null, so no later flush (the interpreter's at exit) can fail again."""
    if not isinstance(e, OSError) or not e.errno or e.errno == errno.EPIPE or getattr(e, "filename", None):
        return ""
    tb, out = e.__traceback__, None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "echo" and "click" in frame.f_code.co_filename:
            out = frame.f_locals.get("file")
        tb = tb.tb_next
    try:
        if out is None or out.fileno() != 1:
            return ""
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
        finally:
            os.close(null)
    except Exception:  # noqa: BLE001 - a stand-in for standard output (tests): no descriptor
        return ""
    text = os.strerror(e.errno)
    return f"could not print the result to standard output: {text[:1].lower()}{text[1:]}"


def _no_room(e: BaseException) -> str:
    """The one line for a write the disk had no room for that reached the command line without one
    (the writers' own say which output: :func:`gnnprep.core.output.disk_full_error`); '' for others."""
    from pathlib import Path

    from gnnprep.core.output import disk_full_error, is_disk_full

    if not is_disk_full(e):
        return ""
    where = getattr(e, "filename", None)
    return str(disk_full_error(Path(where) if where else Path.cwd() / "(a file being written)", e=e))


def _end_interrupted(ctx, e: BaseException):
    """Exit 130 with the interrupted line (rank 0 alone speaks)."""
    if speaks():
        click.echo(_interrupted_line(e), err=True)
    ctx.exit(130)


def _interrupted_line(e: BaseException) -> str:
    """The one line of an interrupted command: no output was written, and where a resumable run
    had finished some of its work (``kept_partial``, set by gnnprep.core.output.ResumableOutput),
    where that work is kept and how to resume it."""
    kept = getattr(e, "kept_partial", None)
    if getattr(e, "as_finished", False):   # raised again before the result was printed (cli.common.emit)
        return "Error: interrupted as the command finished (its output, if any, is complete)"
    line = "Error: interrupted; no output was written"
    checkpoint = getattr(e, "kept_checkpoint", None)
    if checkpoint:   # train: model.pt and metrics.json not written, the checkpoint kept
        return (f"Error: interrupted; the run's results were not written (the checkpoint in {checkpoint} is kept: "
                "run the same command with --resume to continue)")
    return line if not kept else f"{line} (the finished part is kept in {kept}: run the same command again to resume)"


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gnnprep")
def cli() -> None:
    """Prepare graphs for GNN training: ingest, HAG, HDG, precompute, train."""
    from gnnprep.core.memory import check_address_space, check_thread_count_env

    check_thread_count_env()
    check_address_space()   # before any library starts threads it could not create


_finished = False   # True once the command has returned: a signal is then only recorded
_late: list[int] = []  # signals recorded after that


def _command_returned() -> None:
    """The command has returned (or raised): from now on a signal is only recorded, so one that
    arrives while click finishes (its error report, its exit) cannot turn into click's "Aborted!"
    and exit 1; :func:`main` settles the status (a success becomes 130)."""
    global _finished
    _finished = True


WAIT_S = 2.0   # how long a signal waits, in all, for code that cannot take it (see _cannot_take_it)
_waiting: list[float] = []   # when the current signal first waited
_FRAGILE = (f"{os.sep}numba{os.sep}", f"{os.sep}llvmlite{os.sep}")   # libraries whose state an exception can break


def _cannot_take_it(frame) -> bool:
    """Whether the handler runs where an exception raised now would do harm, so the signal waits a
    moment. Two places, each seen about 1 run in 20 with SIGTERM 0.1 s after start (a command
    imports its libraries then):

    - inside an import (a frame of importlib's bootstrap on the stack): a library's compiled import
      code that calls back into Python dropped the exception (numpy.random's ``abc.register``; the
      command ran on and exited 0), replaced it (numba's dispatcher: "ImportError:
      numba._devicearray failed to import") or printed its traceback (numpy's ``import_array``);
    - inside numba or llvmlite: an LLVM module the exception left half made crashed the process
      when it was freed (exit -11 after the interrupted line).

    It waits at most WAIT_S in all, so code that hangs there (a user's operator file importing)
    still ends at the signal."""
    import time

    if _waiting and time.monotonic() - _waiting[0] > WAIT_S:
        return False
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or any(part in name for part in _FRAGILE):
            if not _waiting:
                _waiting.append(time.monotonic())
            return True
        frame = frame.f_back
    return False


def _on_signal(signum, frame):
    """SIGTERM raises Interrupted and SIGINT KeyboardInterrupt while the command runs (exit 130,
    temporary files removed, resumable outputs kept); after it, the signal is only recorded. Where
    an exception would do harm it is delivered again a moment later instead (:func:`_cannot_take_it`),
    and recorded, so a command that ends meanwhile still exits 130."""
    if _finished:
        _late.append(signum)
        return
    note_interrupt(signum)  # raised again where outputs are made or results printed, should it not end the command
    if _cannot_take_it(frame):
        _late.append(signum)
        _deliver_again(signum, 0.01)
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted()


def _interrupts_recorded(previous):
    """A ``sys.unraisablehook``: an Interrupted or KeyboardInterrupt raised by the signal handler where
    Python cannot propagate it (inside a weakref callback or a ``__del__`` run by the garbage
    collector) is recorded as a signal that arrived, not printed as "Exception ignored ... Traceback":
    the command exits 130 at its end like any signal there. While the command runs it is also
    delivered again a moment later (:func:`_deliver_again`), outside the callback, so the first
    signal is honoured at once: recorded only, a command waiting on a hanging user function would
    never reach its end (issue 32, line 13). Anything else goes to ``previous``."""
    def hook(unraisable):
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, Interrupted)):
            signum = signal.SIGINT if isinstance(unraisable.exc_value, KeyboardInterrupt) else signal.SIGTERM
            _late.append(signum)
            if not _finished and signal.getsignal(signum) is _on_signal:
                _deliver_again(signum)
            return
        previous(unraisable)

    return hook


def _deliver_again(signum, delay: float = 0.02) -> None:
    """Send ``signum`` to the main thread again in ``delay`` seconds (from a daemon thread: sent from
    here, its handler would run inside the callback still under way; a real signal, so a blocking
    call the main thread is in returns for it). Should it land in another callback, that one
    delivers it again in turn."""
    import threading
    import time

    main = threading.main_thread().ident

    def later():
        time.sleep(delay)
        if not _finished:
            signal.pthread_kill(main, signum)

    threading.Thread(target=later, daemon=True, name="gnnprep-redeliver").start()


def _ignore_from_now() -> bool:
    """Ignore SIGTERM and SIGINT for the rest of this process; whether one arrived after the command.

    Ignored as the process's disposition, not blocked in this thread's mask: a process-directed signal
    goes to any thread that does not block it (OpenBLAS, numba/OpenMP, torch and gloo threads never
    do), and the interpreter's shutdown puts SIG_DFL back for every signal with a Python handler, so
    from then on a signal delivered to any thread would kill the process by the signal itself. SIG_IGN
    is left as it is at shutdown. A signal that arrives while the handler is swapped is seen through
    the wakeup fd, which the C-level handler writes whichever thread receives it."""
    global _finished
    _finished = True
    wanted = (signal.SIGTERM, signal.SIGINT)
    r, w = os.pipe()
    try:
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        try:
            pending = bool(set(wanted) & signal.sigpending())  # (blocked by whoever started us)
            for s in wanted:
                if signal.getsignal(s) is _on_signal:
                    signal.signal(s, signal.SIG_IGN)  # (runs the pending Python handlers first)
        finally:
            signal.set_wakeup_fd(old)
        try:
            woke = os.read(r, 512)
        except BlockingIOError:
            woke = b""
    finally:
        os.close(r)
        os.close(w)
    return bool(_late) or pending or any(b in wanted for b in woke)


def main() -> None:
    """The ``gnnprep`` entry point. While the command runs, SIGTERM raises Interrupted and SIGINT
    KeyboardInterrupt (exit 130, temporary files removed, resumable outputs kept). Once it has
    returned, both are ignored for the rest of the process, so a late signal cannot kill the exiting
    interpreter (see :func:`_ignore_from_now`); one that arrived before the exit status is settled
    turns a success into 130 (its output is complete)."""
    global _finished
    _finished = False
    _late.clear()
    _waiting.clear()
    sys.unraisablehook = _interrupts_recorded(sys.unraisablehook)
    from gnnprep.core.h5file import record_dealloc_failures

    record_dealloc_failures()   # h5py's failed flushes while it frees objects: the writer reports them
    signal.signal(signal.SIGTERM, _on_signal)
    # SIGINT: not when started with it ignored; the entry point's start-up handler (gnnprep.__main__,
    # which covers the imports) is replaced like Python's own
    current = signal.getsignal(signal.SIGINT)
    if current is signal.default_int_handler or getattr(current, "gnnprep_start_handler", False):
        signal.signal(signal.SIGINT, _on_signal)
    code, late = 1, False
    try:
        try:
            try:
                cli.main(prog_name="gnnprep")
            finally:
                _finished = True
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except (KeyboardInterrupt, Interrupted):  # after the command, in click's own exit path
            code, late = 130, True
    finally:  # also for a bug's traceback: the exiting interpreter must not die of a late signal
        arrived = _ignore_from_now()
    if code == 0 and arrived:
        code, late = 130, True
    if sys.stdout is not None:   # (None where the shell closed it: `gnnprep ... >&-`)
        try:
            sys.stdout.flush()
        except OSError:
            pass   # the command's own write said it (_stdout_failed), or click's closed-pipe exit
    if late and speaks():
        click.echo("Error: interrupted as the command finished (its output, if any, is complete)", err=True)
    from gnnprep.core.distributed import exit_now

    _forget_interrupted_exec()
    exit_now(code)  # a torchrun rank that left its group cleanly ends here, without torch's teardown
    _exit_past_threads(code)
    sys.exit(code)


def _forget_interrupted_exec() -> None:
    """Clear CPython's record that a KeyboardInterrupt left a string of code run by ``exec``.

    The interpreter keeps one flag, set when a KeyboardInterrupt leaves code it runs from a string
    (``exec("...")``: ``run_eval_code_obj`` in Python/pythonrun.c) and never cleared when a caller
    catches it; at exit a set flag makes ``python -m`` (how torchrun starts every rank) kill itself
    by SIGINT (so a shell sees an uncaught Ctrl-C), whatever status ``sys.exit`` gave. Libraries
    exec strings while they import (scipy's array_api_compat runs ``exec(f"from {mod} import *")``),
    so a SIGINT that landed there was handled like any other (the ``Error: interrupted`` line) and
    the process still died by SIGINT (-2) instead of exiting 130. Each such run clears the flag as
    it starts and leaves it clear when its code returns, so running one empty string resets it; the
    command's status has been settled by now, and a KeyboardInterrupt that escapes :func:`main`
    still sets it again."""
    exec("None")  # (a constant string: see above)


def _exit_past_threads(code) -> None:
    """End the process now with ``code`` when a thread that is not a daemon is still running once the
    command has returned: the interpreter's exit would wait for it without end. Such a thread is
    user code's (a thread an ``--operator-file`` started at import, or a worker still inside a user
    function that hangs): the command's outputs are settled (renamed into place or removed), so
    only the standard streams are flushed and the ``atexit`` handlers run, as a normal exit would,
    and the thread is not waited for (issue 23, item 5). Likewise after a failed HDF5 write that left
    an object HDF5 could not close: its library's exit handler would crash on it
    (:func:`gnnprep.core.h5file.left_broken`). Returns when there is neither."""
    import threading

    from gnnprep.core.h5file import left_broken

    if not isinstance(code, int) or not left_broken() and not any(
            t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    import atexit

    for f in (sys.stdout, sys.stderr):
        if f is not None:
            f.flush()
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        if f is not None:
            f.flush()
    os._exit(code)


from .calibrate import calibrate  # noqa: E402
from .hag import hag  # noqa: E402
from .hdg import hdg  # noqa: E402
from .info import info  # noqa: E402
from .ingest import ingest  # noqa: E402
from .plan import plan  # noqa: E402
from .precompute import precompute  # noqa: E402
from .train import train  # noqa: E402
from .tune import tune  # noqa: E402

cli.add_command(ingest)
cli.add_command(info)
cli.add_command(precompute)
cli.add_command(plan)
cli.add_command(calibrate)
cli.add_command(hag)
cli.add_command(hdg)
cli.add_command(train)
cli.add_command(tune)
