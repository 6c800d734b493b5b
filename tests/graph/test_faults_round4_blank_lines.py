"""Issue 32, acceptance 4: a small text file that inflates to a huge run of blank lines (a gzip time
bomb) is read in seconds: blank runs are skipped in C, not line by line in Python; the lines that
do hold data keep their numbers (errors name them)."""

import gzip
import time

import numpy as np
from fixtures import run

from gnnprep.graph.store import GraphStore


def _bomb(path, blank_mib: int, tail: bytes = b"1 2\n"):
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b"# an edge list\n0 1\n")
        for _ in range(blank_mib):
            f.write(b"\n" * (1 << 20))
        f.write(b"  \t\r\n" * 1000 + tail)
    return path


def test_a_gzip_of_blank_lines_is_read_in_seconds(tmp_path):
    src = _bomb(tmp_path / "e.txt.gz", 256)
    assert src.stat().st_size < 1 << 20
    t0 = time.perf_counter()
    r = run(["ingest", src, "-o", tmp_path / "g.h5", "--memory-budget", "64MiB"])
    assert r.exit_code == 0, r.output
    assert time.perf_counter() - t0 < 10
    with GraphStore(tmp_path / "g.h5") as g:
        np.testing.assert_array_equal(g.indptr(), [0, 1, 3, 4])
        np.testing.assert_array_equal(g.stored_indices(), [1, 0, 2, 1])


def test_a_bad_line_after_the_blank_run_is_named_by_its_number(tmp_path):
    src = _bomb(tmp_path / "e.txt.gz", 40, tail=b"1 x\n")
    r = run(["ingest", src, "-o", tmp_path / "g.h5"])
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr
    line = 2 + 40 * (1 << 20) + 1000 + 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{line:,}" in r.stderr or str(line) in r.stderr, r.stderr
    assert not (tmp_path / "g.h5").exists()
