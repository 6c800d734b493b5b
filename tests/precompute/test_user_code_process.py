"""User code that acts on the process itself (issue 23, item 5), run as the command really runs (a
child process: an ``os._exit`` that escaped would end pytest with status 0): ``os._exit`` in an
``--operator-file`` / ``--hdg-weight`` function, at the file's import or in the worker threads that
compute per-entry values is one ``Error:`` line and exit 1; a non-daemon thread started at import
does not keep gnnprep from exiting; a function hanging in those worker threads honours the first
SIGTERM/SIGINT (exit 130 at once); coefficients beyond float32 are one line without numpy's
RuntimeWarnings. Each case of the table checks the exit code, one ``Error:`` line last, no
traceback, an empty stdout under ``--json``, the folder byte for byte before and after (nothing
left), and the inputs intact."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fixtures import make_store

# not a product of per-node factors, so the per-entry values are computed in worker threads; the
# planner's probes are small (len(w) <= 5000 on this graph), the entries' chunks are not
ENTRY = "w / (s * d + (s > 3))"

EXITS = [
    # (file text, what the Error line says)
    ("import os\ndef f(s, d, w):\n    os._exit(0)\n", "f(src_deg, dst_deg, w) called os._exit(0) (line 3)"),
    ("import os\nos._exit(0)\ndef f(s, d, w):\n    return w\n", "running the operator file called os._exit(0) (line 2)"),
    ("import posix\ndef f(s, d, w):\n    posix._exit(0)\n", "called os._exit(0) (line 3)"),
    ("from os import _exit\ndef f(s, d, w):\n    _exit(0)\n", "called os._exit(0) (line 3)"),
    (f"import os\ndef f(s, d, w):\n    if len(w) > 5000:\n        os._exit(0)\n    return {ENTRY}\n",
     "called os._exit(0) (line 4)"),
    # float64-finite coefficients that float32 (the kernels' precision) cannot hold
    ("def f(s, d, w):\n    return w * 1e300\n", "gives coefficients up to 1e+300, beyond float32's range"),
    (f"def f(s, d, w):\n    return 1e300 * {ENTRY}\n", "beyond float32's range"),
]


def _snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _cmd(store, out, ops, *extra):
    return [sys.executable, "-m", "gnnprep", "precompute", str(store), "-o", str(out), "--hops", "1",
            "--device", "cpu", "--json", *extra, "--operator-file" if not extra else "--hdg-weight", f"{ops}:f"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    import numpy as np

    folder = tmp_path_factory.mktemp("graph")
    return make_store(folder, np.random.default_rng(3), n=200, m=6000)[0]


def _fails_with_one_line(p, message, before, folder):
    where = (p.returncode, p.stdout[-300:], p.stderr[-1500:])
    assert p.returncode == 1 and p.stdout == "", where
    lines = p.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: ") and "ops.py" in lines[-1] and message in lines[-1], where
    assert "Traceback" not in p.stderr and "Warning" not in p.stderr, where
    assert _snapshot(folder) == before, where    # nothing written, nothing changed (inputs intact)


@pytest.mark.parametrize("text,message", EXITS)
def test_user_code_that_ends_the_process_or_overflows_is_one_error_line(tmp_path, graph, text, message):
    ops = tmp_path / "ops.py"
    ops.write_text(text)
    before = _snapshot(graph.parent)
    p = subprocess.run(_cmd(graph, tmp_path / "f.h5", ops), capture_output=True, text=True, timeout=300)
    _fails_with_one_line(p, message, before, graph.parent)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ops.py"] and ops.read_text() == text


def test_os_exit_in_an_hdg_weight_is_one_error_line(tmp_path, graph):
    hdg = tmp_path / "h.h5"
    subprocess.run([sys.executable, "-m", "gnnprep", "hdg", str(graph), "--select", "hop-shells:2,cap=10", "-o",
                    str(hdg), "--quiet"], check=True, capture_output=True, timeout=300)
    ops = tmp_path / "ops.py"
    ops.write_text("import os\ndef f(s, d, w):\n    os._exit(0)\n")
    before = _snapshot(tmp_path)
    p = subprocess.run(_cmd(graph, tmp_path / "f.h5", ops, "--hdg", str(hdg)), capture_output=True, text=True,
                       timeout=300)
    _fails_with_one_line(p, "called os._exit(0) (line 3)", before, tmp_path)


def test_a_thread_started_at_import_does_not_keep_gnnprep_running(tmp_path, graph):
    ops = tmp_path / "ops.py"
    ops.write_text("import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n"
                   "def f(s, d, w):\n    return w\n")
    out = tmp_path / "f.h5"
    t0 = time.perf_counter()
    p = subprocess.run(_cmd(graph, out, ops), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    assert time.perf_counter() - t0 < 250
    assert json.loads(p.stdout)["operators"] == ["f"] and out.exists()   # the output complete, stdout whole
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_function_hanging_in_the_worker_threads_honours_the_first_signal(tmp_path, graph, sig):
    entered = tmp_path / "entered"
    ops = tmp_path / "ops.py"
    ops.write_text(f"import time\ndef f(s, d, w):\n    if len(w) > 5000:\n        open({str(entered)!r}, 'a').close()\n"
                   f"        time.sleep(3600)\n    return {ENTRY}\n")
    out = tmp_path / "f.h5"
    before = _snapshot(graph.parent)
    p = subprocess.Popen(_cmd(graph, out, ops), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not entered.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert entered.exists(), p.communicate(timeout=60)
        time.sleep(0.2)
        t0 = time.monotonic()
        p.send_signal(sig)    # once
        stdout, stderr = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    where = (p.returncode, round(took, 2), stderr[-1500:])
    assert p.returncode == 130 and stdout == "" and took < 10, where
    assert stderr.strip().splitlines()[-1].startswith("Error: interrupted"), where
    assert "Traceback" not in stderr, where
    assert _snapshot(graph.parent) == before
    # no output; what an interrupted precompute keeps to resume from is its .partial pair only
    left = sorted(x.name for x in tmp_path.iterdir() if x.name not in ("ops.py", "entered"))
    assert all(name.startswith("f.h5.partial") for name in left), left
    assert not out.exists()
