"""SIGKILL mid-ingest leaves nothing at the output path; a rerun succeeds and sweeps the leftovers."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
from fixtures import assert_same_graph, reference_csr


def test_sigkill_midway_then_rerun(tmp_path, rng):
    # a run of a few seconds, still running 0.1 s after its first spill file (with 3M edges and a 0.3 s
    # wait, one clean-clone CI run saw the ingest finish before the kill)
    n, m = 200_000, 6_000_000
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "g.h5"
    cmd = [sys.executable, "-m", "gnnprep", "ingest", str(tmp_path / "e.npy"), "-o", str(out),
           "--num-nodes", str(n), "--memory-budget", "4MiB", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    # wait until the run has started writing spill files, then kill it hard
    while time.time() < deadline and proc.poll() is None:
        # the buckets' spill files: beside the output, kept for a rerun to resume from
        work = [p for p in out_dir.iterdir() if p.name.startswith(".g.h5.work-") or p.name == "g.h5.partial.d"]
        if any(any(w.iterdir()) for w in work if w.is_dir()):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "ingest finished before it could be killed; make the input larger"
    time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    assert any(p.name.startswith(".g.h5.work-") for p in out_dir.iterdir())  # the kill left debris
    assert (out_dir / "g.h5.partial").exists()   # ... and the partial store a rerun may resume

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["g.h5"], "stale temp files must be swept"
    assert_same_graph(out, reference_csr(src, dst, n, True))


def test_sigterm_cleans_up(tmp_path, rng):
    n, m = 200_000, 6_000_000  # a run of ~2 s, so the signal lands mid-run even on a loaded machine
    np.save(tmp_path / "e.npy", rng.integers(0, n, (2, m)))
    out = tmp_path / "g.h5"
    proc = subprocess.Popen([sys.executable, "-m", "gnnprep", "ingest", str(tmp_path / "e.npy"), "-o", str(out),
                             "--memory-budget", "4MiB", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        work = [p for p in tmp_path.iterdir() if p.name.startswith(".g.h5.work-")]
        if work and any(work[0].iterdir()):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "ingest finished before it could be interrupted; make the input larger"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    if "is kept in" in err:   # the signal came after the edges were bucketed: kept for a rerun, and said
        assert len(err.strip().splitlines()) == 1 and err.startswith("Error: interrupted; no output was written")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npy", "g.h5.partial", "g.h5.partial.d",
                                                              "g.h5.partial.json"]
        return
    assert err.strip().splitlines() == ["Error: interrupted; no output was written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npy"]


def test_an_interrupt_right_after_the_work_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    """A signal's exception raised the moment mkdir returns (SIGTERM 0.2 s into an ingest, once in a
    CI run, left ``.out.h5.work-<pid>`` behind): the folder is still removed."""
    from pathlib import Path

    import pytest

    from gnnprep.core.output import work_folder

    real = Path.mkdir

    def mkdir_then_interrupt(self, *a, **k):
        real(self, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "mkdir", mkdir_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with work_folder(tmp_path / "out.h5"):
            pass
    assert list(tmp_path.iterdir()) == []
