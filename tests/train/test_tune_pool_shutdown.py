"""A tune whose worker pool is stopped early (a trial failed, or SIGTERM) ends without a traceback from
the pool's own threads at exit (issue 23, item 8: 3 runs in 10 printed one). The pool is stopped the
way a failed tune stops it, several times, each in a fresh interpreter whose whole stderr must stay
empty; then the command itself, failing and interrupted, with ``--jobs 2``."""

import signal
import subprocess
import sys
import time

import pytest
from fixtures import write_features

# a failure comes back from one worker while the others run or still start (delay 0) or sit queued
STOP = r"""
import operator, sys, time
from concurrent.futures import as_completed
from gnnprep.train.tune.workers import _Pool
if __name__ == "__main__":
    pool = _Pool(2)
    time.sleep(float(sys.argv[2]))
    fs = [pool.executor.submit(operator.truediv, 1, 0)]
    fs += [pool.executor.submit(time.sleep, 2) for _ in range(int(sys.argv[1]))]
    try:
        for f in as_completed(fs):
            f.result()
    except ZeroDivisionError:
        pool.close(failed=True)
    if any(t.is_alive() and not t.daemon for t in __import__("threading").enumerate()[1:]):
        print("a pool thread outlived close()", file=sys.stderr)
"""


@pytest.mark.parametrize("queued,delay", [(0, 0.0), (3, 0.0), (6, 0.0), (1, 0.5), (6, 0.5), (9, 1.0)])
def test_a_pool_stopped_after_a_failure_exits_silently(queued, delay):
    p = subprocess.run([sys.executable, "-c", STOP, str(queued), str(delay)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def _tune(feats, out, *grid):
    return [sys.executable, "-m", "gnnprep", "tune", "sgc", str(feats), "-o", str(out), "--seeds", "1",
            "--report-seeds", "1", "--jobs", "2", "--json", *grid]


def test_a_failed_tune_with_two_jobs_ends_with_one_error_line(tmp_path, rng):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the failing trial is one on --device cuda where there is none")
    feats = write_features(tmp_path / "f.h5", rng)
    for i in range(2):
        p = subprocess.run(_tune(feats, tmp_path / f"t{i}", "--grid", "device=cpu,cuda;lr=0.1,0.01"),
                           capture_output=True, text=True, timeout=300)
        where = (i, p.returncode, p.stderr[-1500:])
        assert p.returncode == 1 and p.stdout == "", where
        assert p.stderr.strip().splitlines()[-1].startswith("Error: --device cuda"), where
        assert "Traceback" not in p.stderr and "Exception" not in p.stderr, where


def test_sigterm_during_a_tune_with_two_jobs_exits_130_silently(tmp_path, rng):
    feats = write_features(tmp_path / "f.h5", rng)
    for i, wait in enumerate((3.0, 6.0)):
        p = subprocess.Popen(_tune(feats, tmp_path / f"t{i}", "--epochs", "400", "--grid", "lr=0.1,0.01,0.05"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(wait)
        p.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail(f"tune still running 120 s after SIGTERM: {p.communicate()[1][-1500:]}")
        where = (i, p.returncode, stderr[-1500:])
        assert p.returncode in (0, 130) and "Traceback" not in stderr and "Exception" not in stderr, where
        if p.returncode == 130:
            assert stdout == "" and stderr.strip().splitlines()[-1].startswith("Error: interrupted"), where
