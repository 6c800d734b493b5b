"""gnnprep.core.memory.fault_in: every page of a fresh array mapped, by one thread or several, with
one byte per 4 KiB page written (zero) and nothing else touched."""

import os
import threading

import numpy as np
import pytest

from gnnprep.core import memory
from gnnprep.core.memory import empty_pages, fault_in


def _marked(nbytes: int) -> np.ndarray:
    a = empty_pages((nbytes // 4,), huge_from=1 << 20)   # advised huge pages from 1 MiB, as the hop buffers
    a.view(np.uint8)[:] = 7
    return a


@pytest.mark.parametrize("nbytes", [0, 8, 4096, 4100, 5 * 4096 + 12, (3 << 20) + 4096 * 7 + 4, 9 << 20])
@pytest.mark.parametrize("parallel_from", [1 << 20, 64 << 20])
def test_one_byte_per_page_is_written_and_nothing_else(monkeypatch, nbytes, parallel_from):
    monkeypatch.setattr(memory, "FAULT_PARALLEL_FROM", parallel_from)   # several threads on small arrays too
    a = _marked(nbytes)
    fault_in(a)
    b = a.view(np.uint8)
    assert (b[::4096] == 0).all()
    assert int((b == 0).sum()) == len(b[::4096])   # the rest as it was


def test_several_threads_touch_an_array_over_the_threshold(monkeypatch):
    monkeypatch.setattr(memory, "FAULT_PARALLEL_FROM", 1 << 20)
    seen = []
    real = threading.Thread.start

    def start(self):
        seen.append(self.name)
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    a = _marked(8 << 20)
    fault_in(a)
    assert (a.view(np.uint8)[::4096] == 0).all()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert seen.count("fault-in") == min(memory.FAULT_THREADS, cores, 8) - 1


def test_a_view_that_is_not_contiguous_and_other_objects_are_left_alone():
    a = _marked(1 << 20).reshape(-1, 64)
    fault_in(a[:, :32])          # not C-contiguous: a copy would be touched, so nothing is
    fault_in([1, 2, 3])
    assert (a.view(np.uint8) == 7).all()


def test_a_two_dimensional_buffer_is_touched_through_its_rows():
    a = _marked(6 << 20).reshape(-1, 128)
    fault_in(a)
    assert int((a.view(np.uint8) == 0).sum()) == len(a.reshape(-1).view(np.uint8)[::4096])
