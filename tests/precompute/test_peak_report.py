"""precompute's peaks: the run's above its baseline (as the plan predicts it) and the process's peak
RSS over the whole command (what ``time -v`` reports, planning and loading included)."""

import sys

import pytest
from fixtures import make_store

from gnnprep.core.memory import PeakMeter, peak_rss, reset_peak
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")


@linux
def test_the_process_peak_covers_what_came_before_the_meter():
    import mmap

    reset_peak()
    big = mmap.mmap(-1, 64 << 20)   # 64 MiB resident before the meter starts, unmapped after (a heap
    big[::4096] = b"\1" * (16 << 10)   # block could stay mapped where glibc keeps freed memory)
    big.close()
    meter = PeakMeter().start()
    assert meter.process_peak() >= meter.baseline + (64 << 20) - (8 << 20)
    assert meter.process_peak() >= peak_rss()


@linux
def test_the_report_gives_both_peaks(tmp_path, rng):
    path, *_ = make_store(tmp_path, rng, n=2000, m=10000, d=16)
    r = precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2))
    assert r.peak_rss_bytes is not None and r.measured_peak_bytes is not None
    assert r.peak_rss_bytes >= r.measured_peak_bytes + r.baseline_rss_bytes - (1 << 20)
