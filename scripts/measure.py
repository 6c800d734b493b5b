"""Run a command and measure its wall time and peak RSS, for the benchmark scripts.

Linux carries a parent's peak RSS into a forked child's ru_maxrss across fork + exec, so a child of
a large benchmark process (one that generated data) would report at least the parent's peak. Each
command is therefore started by a tiny launcher process that reaps it with wait4 and reports the
child's own ru_maxrss on its last stderr line.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

LAUNCHER = r"""
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(proc.pid, 0)
sys.stderr.write(f"__peak_rss={usage.ru_maxrss * 1024}\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


# the memory-copy roofline the benchmarks compare a hop's achieved bytes/s with: numpy copying a
# 1 GiB float32 array, best of 3, bytes read + written; run as its own process (``python -c``)
COPY_BANDWIDTH = r"""
import json, time, numpy as np
a = np.ones(256 * 1024**2, dtype=np.float32)   # 1 GiB
b = np.zeros_like(a)
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    np.copyto(b, a)
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"copy_seconds": best, "bytes_per_s": 2 * a.nbytes / best}))
"""


def copy_bandwidth() -> float:
    """Bytes/s of :data:`COPY_BANDWIDTH`, measured in a fresh process."""
    import json

    out = subprocess.run([sys.executable, "-c", COPY_BANDWIDTH], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["bytes_per_s"])


def run_measured(cmd: list[str], log: Path | None = None) -> dict:
    """{"seconds", "peak_rss" (bytes), "stdout"}; the command's stderr goes to ``log`` when given.
    Exits with the command's stderr if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], capture_output=True)
    wall = time.perf_counter() - t0
    err = proc.stderr.decode()
    body, _, tail = err.rpartition("__peak_rss=")
    if log is not None:
        log.write_text(body)
    if proc.returncode != 0 or not tail:
        where = f"; stderr in {log}" if log is not None else ""
        sys.exit(f"command failed ({proc.returncode}){where}: {' '.join(map(str, cmd))}\n{err[-3000:]}")
    return {"seconds": wall, "peak_rss": int(tail.split()[0]), "stdout": proc.stdout.decode().strip()}
