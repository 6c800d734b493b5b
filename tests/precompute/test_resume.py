"""A precompute killed with SIGKILL after its first finished unit resumes to a bit-identical file."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import SourceOptions
from gnnprep.precompute.features import FeatureStore


def test_sigkill_after_first_unit_then_resume_is_bit_identical(tmp_path):
    rng = np.random.default_rng(7)
    n, m, d = 150_000, 1_500_000, 32
    np.save(tmp_path / "e.npy", rng.integers(0, n, (2, m)))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, d)).astype(np.float32))
    graph = tmp_path / "g.h5"
    ingest(str(tmp_path / "e.npy"), graph, IngestConfig(source=SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"))))
    args = ["precompute", str(graph), "--hops", "3", "--blocks", "1,8,8", "--device", "cpu", "--quiet", "--json",
            "--operator", "sym,rw"]
    ref = tmp_path / "ref.h5"
    subprocess.run([sys.executable, "-m", "gnnprep", *args, "-o", str(ref)], check=True, capture_output=True)

    out = tmp_path / "out.h5"
    progress = tmp_path / "out.h5.partial.json"
    proc = subprocess.Popen([sys.executable, "-m", "gnnprep", *args, "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(progress.read_text())["done"]:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.005)
    assert proc.poll() is None, "precompute finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    done_before = len(json.loads(progress.read_text())["done"])
    assert done_before >= 1

    rerun = subprocess.run([sys.executable, "-m", "gnnprep", *args, "-o", str(out)], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert report["resumed_units"] >= done_before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.h5")) == ["out.h5"]
    with FeatureStore(ref) as a, FeatureStore(out) as b:
        for op in ("sym", "rw"):
            for k in range(4):
                x, y = a.hop(k, op)[:], b.hop(k, op)[:]
                assert x.tobytes() == y.tobytes(), (op, k)
        np.testing.assert_array_equal(a.rows, b.rows)


def test_an_interrupt_before_the_first_unit_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C before any (operator, column block, hop) unit has finished: the partial output holds
    nothing a rerun could use, so nothing is left; after one unit it is kept for the rerun."""
    import pytest
    from fixtures import interrupted_precompute, make_store

    from gnnprep.core.output import ResumableOutput
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    g = make_store(tmp_path, np.random.default_rng(0))[0]
    out = tmp_path / "f.h5"

    def stop(self, unit, h5file=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(ResumableOutput, "mark", stop)
    with pytest.raises(KeyboardInterrupt):
        precompute(g, out, PrecomputeConfig(hops=2, device="cpu"))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("f.h5")) == []
    interrupted_precompute(monkeypatch, g, out, hops=2, device="cpu")   # one unit done: kept
