"""Signals from the first instant (issue 32, line 13): a SIGINT or SIGTERM that arrives while the
command line is still importing its modules (~0.15 s), while click parses the command line, or
inside a callback Python runs for the garbage collector, is honoured at once: exit 130, one
``Error: interrupted`` line last, no traceback, no output or temporary file left.

"Start" in the table is the moment the entry point (``gnnprep.__main__``) has installed its
start-up handlers, read from ``/proc/<pid>/status`` (SigCgt: SIGTERM caught); before it only the
interpreter's own start runs (see gnnprep/__main__.py), which no Python code can cover."""

import importlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures import make_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status: Linux")

DELAYS = (0.0, 0.02, 0.05, 0.1, 0.2)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import numpy as np

    folder = tmp_path_factory.mktemp("store")
    return make_store(folder, np.random.default_rng(5))[0]


def _caught(pid: int) -> int | None:
    """The process's mask of caught signals (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    except OSError:
        return None
    return 0


def _started(p: subprocess.Popen, timeout: float = 60) -> bool:
    """Wait until gnnprep's start-up handlers are installed (SIGTERM caught); False if it exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mask = _caught(p.pid)
        if mask is None or p.poll() is not None:
            return False
        if mask & (1 << (signal.SIGTERM - 1)):
            return True
        time.sleep(0.0005)
    raise AssertionError("the start-up handlers were never installed")


def _commands(store: Path, out: Path) -> dict:
    return {"info": ["info", str(store)],
            "ingest": ["ingest", str(store.parent / "e.npy"), "-o", str(out), "--num-nodes", "90", "--quiet"],
            "precompute": ["precompute", str(store), "-o", str(out), "--hops", "2", "--device", "cpu", "--quiet"]}


def _left(folder: Path, out: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(out.name) or ".work-" in p.name)


def _trial(argv, delay, sig, folder, out):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder)
    try:
        running = _started(p)
        if running:
            time.sleep(delay)
            p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return running, p.returncode, stdout, stderr


@pytest.mark.parametrize("command", ["info", "ingest", "precompute"])
def test_a_signal_in_the_first_fifth_of_a_second_exits_130(tmp_path, store, command):
    out = tmp_path / "out.h5"
    argv = [sys.executable, "-m", "gnnprep", *_commands(store, out)[command]]
    for delay in DELAYS:
        for sig in (signal.SIGINT, signal.SIGTERM):
            running, code, stdout, stderr = _trial(argv, delay, sig, tmp_path, out)
            where = (command, delay, sig.name, code, stderr.strip()[-500:])
            assert running, where
            assert "Traceback" not in stderr and "Aborted" not in stderr, where
            # the imports alone take longer than 0.1 s: the signal came while the command started
            assert code == 130 or (code == 0 and delay >= 0.2), where
            if code == 130:
                assert stderr.strip().splitlines()[-1].startswith("Error: interrupted"), where
                assert stdout == "", where
                assert _left(tmp_path, out) == [], where
            for p in tmp_path.iterdir():
                if p.name.startswith(out.name):
                    p.unlink()


def test_the_gnnprep_script_installs_the_handlers_first(tmp_path, store):
    script = Path(sys.executable).parent / "gnnprep"
    if not script.exists() or "gnnprep.__main__" not in script.read_text(errors="replace"):
        pytest.skip("the gnnprep script is not installed from this checkout's pyproject.toml (pip install -e .)")
    for delay in (0.0, 0.05):
        for sig in (signal.SIGINT, signal.SIGTERM):
            running, code, stdout, stderr = _trial([str(script), "info", str(store)], delay, sig, tmp_path,
                                                   tmp_path / "none")
            where = (delay, sig.name, code, stderr.strip()[-500:])
            assert running and code == 130 and stdout == "", where
            assert stderr.strip().splitlines() == ["Error: interrupted; no output was written"], where


def test_a_command_started_with_sigint_ignored_keeps_it_ignored(tmp_path, store):
    p = subprocess.Popen([sys.executable, "-m", "gnnprep", "info", str(store)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                                            signal.SIG_IGN))
    assert _started(p)
    p.send_signal(signal.SIGINT)   # ignored, as a shell's background job ignores it
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0 and "nodes" in stdout, stderr


# A signal whose handler runs inside a __del__ (the garbage collector's callback): Python cannot raise
# there, and the old code only recorded it, so a command that then waits (here 20 s; a hanging user
# function: for ever) ran on. Now it is delivered again outside the callback: exit 130 at once.
IN_DEL = r"""
import os, signal, sys, time
import gnnprep.cli as c
import gnnprep.core.memory as memory
SIG = getattr(signal, sys.argv[1])
real = memory.check_address_space
class Late:
    def __del__(self):
        os.kill(os.getpid(), SIG)
        t = time.monotonic()
        while time.monotonic() - t < 0.3:   # the handler runs in here
            pass
def check():
    real()
    Late()
    time.sleep(20)
memory.check_address_space = check
sys.argv = ["gnnprep", *sys.argv[2:]]
c.main()
"""

# A signal while click parses the command line (click turned a KeyboardInterrupt there into "Aborted!",
# exit 1).
IN_PARSE = r"""
import os, signal, sys, time
import gnnprep.cli as c
SIG = getattr(signal, sys.argv[1])
real = c.cli.parse_args
def parse_args(ctx, args):
    os.kill(os.getpid(), SIG)
    time.sleep(5)
    return real(ctx, args)
c.cli.parse_args = parse_args
sys.argv = ["gnnprep", *sys.argv[2:]]
c.main()
"""


@pytest.mark.parametrize("script", [IN_DEL, IN_PARSE], ids=["in-a-finalizer", "while-parsing"])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_in_the_commands_own_windows_exits_130_at_once(store, script, sig):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", script, sig, "info", str(store)], capture_output=True, text=True,
                       timeout=60)
    took = time.monotonic() - t0
    where = (sig, p.returncode, round(took, 2), p.stderr[-800:])
    assert p.returncode == 130 and p.stdout == "" and took < 10, where
    assert p.stderr.strip().splitlines() == ["Error: interrupted; no output was written"], where


def test_a_torchrun_rank_other_than_0_is_stopped_without_a_word(tmp_path, store):
    """torchrun stops the other ranks (SIGTERM) as soon as one exits: a rank other than 0 stopped
    while it starts up or parses exits 130 silently, since rank 0 alone speaks (seen under load: a
    usage error printed by rank 0, then "Error: interrupted" from rank 1)."""
    import os

    from gnnprep.core.distributed import speaks

    assert speaks({}) and speaks({"RANK": "0", "WORLD_SIZE": "2"}) and speaks({"RANK": "1"})
    assert not speaks({"RANK": "1", "WORLD_SIZE": "2"})
    out = tmp_path / "out.h5"
    argv = [sys.executable, "-m", "gnnprep", *_commands(store, out)["info"]]
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    for delay in (0.0, 0.05):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
        assert _started(p)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 130 and stdout == "" and "Error" not in stderr, (delay, p.returncode, stderr)


# A SIGINT that lands while a library runs a string of code (scipy's array_api_compat does
# exec(f"from {mod} import *") as it is imported) raises KeyboardInterrupt through that exec: the
# command handled it, and CPython's flag for an uncaught Ctrl-C, which the exec had set, then killed
# ``python -m gnnprep`` by SIGINT (-2) at exit instead of letting it exit 130 (37 times in 40 at
# 0.2 s). Only ``-m`` reads the flag at exit (a script's SystemExit ends the process before).
INTERRUPTED_EXEC = r"""
import sys
import gnnprep.cli as c
import gnnprep.info

def describe(path):
    exec("raise KeyboardInterrupt")  # the handler's KeyboardInterrupt, raised inside a string's code

gnnprep.info.describe = describe
sys.argv = ["gnnprep", "info", sys.argv[1]]
c.main()
"""


def test_an_interrupt_inside_a_string_run_by_exec_exits_130(tmp_path, store):
    (tmp_path / "interrupted_exec.py").write_text(INTERRUPTED_EXEC)
    r = subprocess.run([sys.executable, "-m", "interrupted_exec", str(store)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert (r.returncode, r.stderr.strip()) == (130, "Error: interrupted; no output was written")
    assert r.stdout == ""


# -- a signal's interrupt that other code drops or replaces ------------------------------------------------
def _noted_during(monkeypatch, module, name, replace_with=None):
    """``module.name`` (a step of a command) as if the command line's handler had raised an interrupt for
    SIGTERM just before it (gnnprep.core.errors.note_interrupt) and the exception never reached gnnprep:
    dropped inside a compiled module's import (numpy.random's ``abc.register``: the command then ran to
    the end and exited 0) or replaced there (``replace_with``: numba's dispatcher raised "ImportError:
    numba._devicearray failed to import", a traceback and exit 1); each about 1 run in 20 with SIGTERM
    0.1 s after start on a 2-core machine."""
    from gnnprep.core.errors import note_interrupt

    step = getattr(module, name)

    def noted(*a, **k):
        note_interrupt(signal.SIGTERM)
        if replace_with is not None:
            raise replace_with
        return step(*a, **k)

    monkeypatch.setattr(module, name, noted)


def test_a_dropped_interrupt_still_ends_the_command_before_its_output(tmp_path, store, monkeypatch):
    from fixtures import assert_one_error, run

    P = importlib.import_module("gnnprep.cli.precompute")  # (the package's name `precompute` is the command)
    import gnnprep.info as I

    _noted_during(monkeypatch, P, "_precompute")
    out = tmp_path / "out.h5"
    r = run(_commands(store, out)["precompute"])
    assert_one_error(r, 130, r"^Error: interrupted; no output was written$")
    assert _left(tmp_path, out) == []
    _noted_during(monkeypatch, I, "describe")
    r = run(_commands(store, out)["info"])
    assert_one_error(r, 130, r"^Error: interrupted")
    monkeypatch.undo()
    r = run(["info", store])  # the next command starts afresh
    assert r.exit_code == 0 and r.stdout


def test_an_interrupt_replaced_on_its_way_ends_the_command_as_interrupted(tmp_path, store, monkeypatch):
    from fixtures import assert_one_error, run

    P = importlib.import_module("gnnprep.cli.precompute")  # (the package's name `precompute` is the command)

    _noted_during(monkeypatch, P, "_precompute", ImportError("numba._devicearray failed to import"))
    out = tmp_path / "out.h5"
    r = run(_commands(store, out)["precompute"])
    assert_one_error(r, 130, r"^Error: interrupted; no output was written$")
    assert _left(tmp_path, out) == []


def test_without_a_signal_an_unexpected_exception_is_not_called_an_interrupt(tmp_path, store, monkeypatch):
    from fixtures import run

    P = importlib.import_module("gnnprep.cli.precompute")  # (the package's name `precompute` is the command)

    def broken(*a, **k):
        raise ImportError("a bug")

    monkeypatch.setattr(P, "_precompute", broken)
    with pytest.raises(ImportError, match="a bug"):
        run(_commands(store, tmp_path / "out.h5")["precompute"])


def test_a_dropped_interrupt_ends_a_long_run_at_its_next_progress_step():
    import threading

    from gnnprep.cli.common import Progress
    from gnnprep.core.errors import Interrupted, clear_interrupts, note_interrupt

    bars = Progress(quiet=True)
    bars("hops", 0, 3)
    note_interrupt(signal.SIGTERM)
    try:
        with pytest.raises(Interrupted):
            bars("hops", 1, 3)
        seen = []
        worker = threading.Thread(target=lambda: seen.append(bars("hops", 2, 3)))  # a worker's step: not there
        worker.start()
        worker.join()
        assert seen == [None]
    finally:
        clear_interrupts()


def test_a_signal_waits_while_an_import_runs_and_not_longer_than_its_limit(tmp_path, monkeypatch):
    import sys as _sys

    import gnnprep.cli as C

    (tmp_path / "probe_import.py").write_text(
        "import sys\nimport gnnprep.cli as C\nSEEN = C._cannot_take_it(sys._getframe())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(C, "_waiting", [])
    import probe_import

    assert probe_import.SEEN  # inside an import: the signal waits
    _sys.modules.pop("probe_import", None)
    assert not C._cannot_take_it(_sys._getframe())  # gnnprep's (and the tests') own code takes it
    monkeypatch.setattr(C, "_waiting", [0.0])  # waited since long ago: no longer
    (tmp_path / "probe_late.py").write_text(
        "import sys\nimport gnnprep.cli as C\nSEEN = C._cannot_take_it(sys._getframe())\n")
    import probe_late

    _sys.modules.pop("probe_late", None)
    assert not probe_late.SEEN


def test_a_sigint_while_the_handlers_are_installed_is_the_same_one_line():
    """Python's own SIGINT handler raises KeyboardInterrupt wherever the main thread is: during
    ``signal.signal`` itself it once gave a traceback (exit -2). Made to happen there every time."""
    code = ("import gnnprep.__main__ as m\n"
            "def install():\n    raise KeyboardInterrupt\n"
            "m.install_start_handlers = install\nm.main()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130 and p.stdout == "", (p.returncode, p.stderr[-500:])
    assert p.stderr.strip().splitlines() == ["Error: interrupted; no output was written"], p.stderr[-500:]
