"""Memory probes for reports and benchmarks: resident set size now, and the peak since a reset.

The peak is the kernel's high-water mark (``VmHWM`` in ``/proc/self/status``), reset by writing
``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0); where either is missing the peak is unknown
(``None``), never guessed.
"""

from __future__ import annotations


def rss() -> int:
    """Resident set size of this process now, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter to the current RSS; False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int | None:
    """Peak resident set size since start or the last :func:`reset_peak`, in bytes (None: unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class PeakMeter:
    """Peak memory above the RSS at :meth:`start`: ``m = PeakMeter().start(); ...; m.above()``."""

    def __init__(self) -> None:
        self.ok = False
        self.baseline = 0

    def start(self) -> "PeakMeter":
        self.ok = reset_peak()
        self.baseline = rss()
        return self

    def above(self) -> int | None:
        peak = peak_rss() if self.ok else None
        return None if peak is None else peak - self.baseline
