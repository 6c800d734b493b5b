"""Late signals (issue 23, item 6): SIGTERM or SIGINT near the end of a run, or while the exiting
interpreter shuts down, ends the command with exit 0 (its output complete) or 130 (no output, or a
complete one), never by the signal itself, and leaves no partial output and no temporary file.
(``benchmarks/late_signals.py`` runs the 50-trial version at random times.)"""

import shutil
import signal
import subprocess
import sys
import time

import h5py
import pytest
from fixtures import make_store

# A signal sent to this very process from the interpreter's module teardown, the moment the old code
# lost: by then the interpreter has put SIG_DFL back for every signal it had a Python handler for,
# and a process-directed signal may go to any thread (the daemon thread below blocks nothing, like
# OpenBLAS's and numba's), so it killed the process (-15, -2) although the command had succeeded.
SHUTDOWN = r"""
import os, signal, sys, threading, time
import gnnprep.cli as c
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
SIG = getattr(signal, sys.argv[1])
class Late:
    def __del__(self):  # runs in the module teardown, after the atexit handlers
        os.kill(os.getpid(), SIG)
        time.sleep(0.2)
late = Late()
sys.argv = ["gnnprep", *sys.argv[2:]]
c.main()
"""


def _state(out):
    """complete | absent | partial, and the temporary files beside ``out``."""
    tmp = sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name + ".tmp-"))
    if not out.exists():
        return "absent", tmp
    try:
        with h5py.File(out, "r") as f:
            if "format" not in f.attrs:
                return "partial", tmp
            names = []
            f.visit(lambda name: names.append(name) if isinstance(f[name], h5py.Dataset) else None)
            for name in names:
                f[name][()]
    except Exception:  # noqa: BLE001 (anything that does not read back is not a complete artifact)
        return "partial", tmp
    return "complete", tmp


def _clear(out):
    for p in out.parent.iterdir():
        if p.name.startswith(out.name):   # (hdg's partial output has a folder, <out>.partial.d)
            shutil.rmtree(p) if p.is_dir() else p.unlink()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_while_the_interpreter_shuts_down_is_ignored(tmp_path, rng, sig):
    g = make_store(tmp_path, rng)[0]
    out = tmp_path / "f.h5"
    p = subprocess.run([sys.executable, "-c", SHUTDOWN, sig, "precompute", str(g), "-o", str(out), "--hops", "1",
                        "--device", "cpu", "--quiet"], capture_output=True, text=True, timeout=120)
    # the exit status was settled (0) before the signal came: it stands, the signal is ignored
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    assert _state(out) == ("complete", [])


def _args(command, g):
    if command == "precompute":
        return ["precompute", str(g), "--hops", "2", "--device", "cpu", "--quiet"]
    return ["hdg", str(g), "--select", "hop-shells:2,cap=10", "--quiet"]


@pytest.mark.parametrize("command", ["precompute", "hdg"])
def test_a_signal_in_the_last_fifth_of_a_run_exits_0_or_130(tmp_path, rng, command):
    g = make_store(tmp_path, rng, n=2000, m=20000, d=16)[0]
    out = tmp_path / "out.h5"
    cmd = [sys.executable, "-m", "gnnprep", *_args(command, g), "-o", str(out)]
    t0 = time.perf_counter()
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, (command, "undisturbed", first.returncode, first.stderr[-1000:])
    d = time.perf_counter() - t0  # an undisturbed run, start to exit (mostly imports and shutdown)
    for fraction, sig in ((0.8, signal.SIGTERM), (0.9, signal.SIGINT), (0.96, signal.SIGTERM), (1.0, signal.SIGTERM)):
        _clear(out)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(max(0.0, fraction * d - (time.perf_counter() - t0)))
        if p.poll() is None:
            p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            pytest.fail(f"{command}: still running 120 s after {sig.name} at {fraction:.0%} of {d:.2f} s: {err[-1000:]}")
        state, tmp = _state(out)
        where = (command, fraction, sig.name, p.returncode, state, err.strip()[-300:])
        assert p.returncode in (0, 130), where  # never the signal itself (-15, -2)
        assert "Traceback" not in err, where
        assert not tmp, (where, tmp)
        assert state == "complete" if p.returncode == 0 else state in ("absent", "complete"), where
