"""examples/pipeline.mk on the embedded sample (issue 25, item 5): the whole pipeline runs with
``make -j2`` into a temporary folder, and touching graph.h5 reruns every step after ingest and not
ingest itself; a changed source file reruns ingest. Small epochs keep it to a few seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MK = ROOT / "examples" / "pipeline.mk"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(out: Path, *args: str) -> subprocess.CompletedProcess:
    gnnprep = Path(sys.executable).with_name("gnnprep")
    cmd = ["make", "--no-print-directory", "-f", str(MK), f"OUT={out}", "MODELS=sgc lc-gcn", "EPOCHS=5",
           f"PYTHON={sys.executable}", f"GNNPREP={gnnprep if gnnprep.exists() else 'gnnprep'}", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_pipeline_runs_and_reruns_only_what_changed(tmp_path):
    out = tmp_path / "p"
    r = make(out, "-j2")
    assert r.returncode == 0, r.stdout + r.stderr
    steps = ["graph.h5", "hag.h5", "feats.h5", "runs/sgc.json", "runs/lc-gcn.json", "results.md"]
    for s in steps:
        assert (out / s).is_file(), s
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| model |") and [row.split("|")[1].strip() for row in table[2:]] == ["sgc", "lc-gcn"]
    assert not list(out.rglob("*.tmp"))
    assert make(out, "-q").returncode == 0          # everything up to date

    # touching the graph store: every step after ingest is out of date, ingest is not
    before = {s: (out / s).stat().st_mtime_ns for s in steps}
    time.sleep(0.05)
    os.utime(out / "graph.h5")    # now: newer than everything built from it
    assert make(out, "-q").returncode == 1
    dry = make(out, "-n").stdout
    assert " ingest " not in dry
    for word in (" hag ", " precompute ", " train sgc ", " train lc-gcn ", "results_table.py"):
        assert word in dry, word
    r = make(out, "-j2")
    assert r.returncode == 0, r.stdout + r.stderr
    after = {s: (out / s).stat().st_mtime_ns for s in steps}
    assert after["graph.h5"] == (out / "graph.h5").stat().st_mtime_ns
    assert " ingest " not in r.stdout
    for s in steps[1:]:
        assert after[s] > before[s], s
    assert make(out, "-q").returncode == 0

    # a source file newer than the graph (make's what-if: nothing is touched) reruns ingest too
    dry = make(out, "-n", "-W", str(ROOT / "sample_data" / "raw" / "edge.csv.gz")).stdout
    assert " ingest sample " in dry and " hag " in dry


def test_a_failed_step_leaves_no_target(tmp_path):
    out = tmp_path / "p"
    r = make(out, "MODELS=sgc no-such-model")   # train refuses the model: no summary, no table
    assert r.returncode != 0 and "Error:" in r.stderr
    assert (out / "feats.h5").is_file() and (out / "runs" / "sgc.json").is_file()
    assert not (out / "runs" / "no-such-model.json").exists() and not (out / "results.md").exists()
    assert not list(out.rglob("*.tmp"))
