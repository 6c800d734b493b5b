"""The memory-copy roofline, in its own process: numpy copying a 1 GiB float32 array, best of 3;
prints {"copy_seconds", "bytes_per_s" (read + written)} as one JSON line.

    python benchmarks/child_bandwidth.py
"""
import json
import time

import numpy as np


def main() -> None:
    a = np.ones(256 * 1024**2, dtype=np.float32)   # 1 GiB
    b = np.zeros_like(a)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"copy_seconds": best, "bytes_per_s": 2 * a.nbytes / best}))


if __name__ == "__main__":
    main()
