"""Memory probes for reports and benchmarks: resident set size now, and the peak since a reset.

The peak is the kernel's high-water mark (``VmHWM`` in ``/proc/self/status``), reset by writing
``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0); where either is missing the peak is unknown
(``None``), never guessed.
"""

from __future__ import annotations

import sys

HUGE_MIN_BYTES = 64 << 20    # smaller buffers gain nothing measurable
MADV_HUGEPAGE = 14           # Linux <asm-generic/mman-common.h>
FAULT_PARALLEL_FROM = 32 << 20   # fresh arrays from this size are faulted in by several threads
FAULT_THREADS = 4                # at most (and no more than the cores this process may run on)


def empty_pages(shape, dtype=None, huge_from: int = HUGE_MIN_BYTES):
    """``np.empty(shape, dtype)`` (float32 by default) backed by transparent huge pages where Linux
    offers them (an anonymous mapping advised ``MADV_HUGEPAGE``), for the hop buffers: measured on
    the papers100M-shaped bench graph (5.55M rows, 2.8 GB), faulting a fresh buffer in took 0.7 s
    instead of 1.6 s, and the row gathers of an unordered hop at 43 columns 7.3 s instead of 11.3 s
    (512 times fewer TLB entries). Arrays under ``huge_from`` bytes are plain ones (a caller whose
    smaller array is read at random passes a lower bound). Elsewhere, or when that fails, a plain
    array."""
    import numpy as np

    dtype = np.dtype(np.float32 if dtype is None else dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < huge_from or not sys.platform.startswith("linux"):
        return np.empty(shape, dtype=dtype)
    try:
        import ctypes
        import mmap

        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        a = np.frombuffer(buf, dtype=dtype).reshape(shape)   # keeps the mapping alive
        ctypes.CDLL(None).madvise(ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(nbytes), MADV_HUGEPAGE)
        return a
    except (OSError, ValueError, AttributeError):
        return np.empty(shape, dtype=dtype)


def fault_in(a) -> None:
    """Map every page of the fresh array ``a`` now, from several threads at once: one write of zero
    per 4 KiB page (so only for an array whose values are still to be written).

    A fresh page's first touch is a page fault in which the kernel zeroes it, and on a VM whose host
    takes freed pages back, a trap to the host as well; a single thread then maps them at a fraction
    of the memory's speed, and whatever touches the array first waits for it (an HDF5 read into it,
    one thread's memcpy). Measured on a 2-core Xeon VM (2026-11-29, 1.4 GiB advised huge pages,
    fresh processes, alternating, 4 runs each): one thread 0.52-0.68 GB/s, two 0.99-1.12 GB/s; a
    ``precompute`` of the papers100M shape at 1/40 spent 38% of its CPU samples zeroing fresh pages
    (``clear_page_erms`` under ``perf``). Arrays under :data:`FAULT_PARALLEL_FROM` bytes, or not
    C-contiguous, are touched by this thread alone (the latter not at all)."""
    import os
    import threading

    import numpy as np

    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or a.nbytes == 0:
        return
    flat = a.reshape(-1).view(np.uint8)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    threads = max(1, min(FAULT_THREADS, cores, a.nbytes // FAULT_PARALLEL_FROM))
    if threads == 1:
        flat[::4096] = 0
        return
    per = -(-flat.size // threads)                   # bytes a thread, rounded up ...
    step = -(-per // (2 << 20)) * (2 << 20)          # ... to whole 2 MiB (huge) pages

    def touch(lo: int) -> None:
        flat[lo:lo + step:4096] = 0   # numpy leaves the GIL for the fill: the threads fault at once

    workers = [threading.Thread(target=touch, args=(lo,), name="fault-in", daemon=True)
               for lo in range(step, flat.size, step)]
    for w in workers:
        w.start()
    touch(0)
    for w in workers:
        w.join()


def rss() -> int:
    """Resident set size of this process now, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def disk_read_bytes() -> int | None:
    """Bytes this process (all its threads) has caused to be read from storage so far: the
    ``read_bytes`` line of ``/proc/self/io`` (page-cache hits are not counted, so this is what came
    from the disk). None where the kernel does not say (not Linux, or I/O accounting off)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def machine_memory() -> int | None:
    """Bytes of memory this process can have in all, page cache included: the machine's MemTotal,
    or the memory limit of the process's cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``)
    where that is smaller. None where neither can be read."""
    total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    for limit in _cgroup_limits():
        total = limit if total is None else min(total, limit)
    return total


def _cgroup_limits():
    """The memory limits of this process's cgroups (v1 and v2), in bytes."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            name = f"/sys/fs/cgroup{path.rstrip('/')}/memory.max"
        elif "memory" in controllers.split(","):
            name = f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.limit_in_bytes"
        else:
            continue
        try:
            with open(name) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            yield int(text)


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter to the current RSS; False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss(pid: int | str = "self") -> int | None:
    """Peak resident set size (VmHWM) of process ``pid`` (default: this one) since its start or the
    last :func:`reset_peak`, in bytes (None: unknown, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class PeakMeter:
    """Peak memory above the RSS at :meth:`start`: ``m = PeakMeter().start(); ...; m.above()``;
    :meth:`process_peak`: the process's peak RSS over its whole life (what ``time -v`` reports),
    the part before :meth:`start` included."""

    def __init__(self) -> None:
        self.ok = False
        self.baseline = 0
        self.before: int | None = None

    def start(self) -> "PeakMeter":
        self.before = peak_rss()   # (the reset below forgets it)
        self.ok = reset_peak()
        self.baseline = rss()
        return self

    def above(self) -> int | None:
        peak = peak_rss() if self.ok else None
        return None if peak is None else peak - self.baseline

    def process_peak(self) -> int | None:
        now = peak_rss()
        if now is None:
            return None
        return max(now, self.before or 0)


_ALLOCATOR_TUNED = False


def keep_freed_memory() -> None:
    """Let glibc keep freed activation buffers for the next batch instead of unmapping them.

    One batch's layer outputs and gradients are tens of MiB each (4,096 rows × 5 hops × 256 floats:
    21 MiB); glibc returns blocks above its mmap threshold (at most 32 MiB) and a heap top above the
    trim threshold to the OS at once, so every batch page-faults its buffers in again: ~70,000-200,000
    minor faults (0.3-1 GiB zeroed by the kernel) per epoch of the large regime. Raising both
    thresholds (once per process, Linux/glibc only) keeps the memory mapped: peak memory is unchanged,
    the resident size just stays at the peak. Nothing else changes.
    """
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED:
        return
    _ALLOCATOR_TUNED = True
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)      # M_MMAP_THRESHOLD: blocks below 1 GiB come from the heap
        libc.mallopt(-1, 1 << 30)      # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap top
    except (OSError, AttributeError):  # not glibc (musl, ...): its allocator, as it is
        pass


def check_thread_count_env() -> None:
    """GnnprepError when ``NUMBA_NUM_THREADS`` is set to anything but a positive integer: numba
    refuses a number below 1 with a ValueError as it is imported (a traceback from the first command
    that computes anything), and warns of any other value with the text of a traceback before it
    takes its default."""
    import os

    text = os.environ.get("NUMBA_NUM_THREADS")
    if text is None:
        return
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        from gnnprep.core.errors import GnnprepError

        raise GnnprepError(f"the environment variable NUMBA_NUM_THREADS is {text!r}; expected a positive number "
                           "of threads (or unset it for one per core)")


MIN_ADDRESS_SPACE = 1 << 30   # bytes of virtual address space a command needs at the least


def check_address_space(minimum: int = MIN_ADDRESS_SPACE) -> None:
    """GnnprepError when the process may map less than ``minimum`` bytes (``ulimit -v``,
    ``prlimit --as``): numba, torch, OpenMP and their threads reserve address space up front, and
    under a smaller limit thread creation fails inside them (measured: under 0.4 GiB precompute spun
    until killed and hdg printed a libgomp line; under 0.75 GiB the sample ran)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no such limit
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < minimum:
        from gnnprep.core.errors import GnnprepError
        from gnnprep.core.sizes import format_size

        raise GnnprepError(f"the address space is limited to {format_size(soft)} (ulimit -v, prlimit --as); gnnprep "
                           f"needs at least {format_size(minimum)} (its libraries and threads reserve it up front)")
