"""Row writes into contiguous HDF5 datasets that bypass the page cache (``O_DIRECT``).

A features artifact is written once and read later, so caching its pages while it is written only
costs: every byte is first copied into a freshly allocated page-cache page, then written back. On
virtual machines that hand free memory back to the host (free page reporting), a fresh page costs
~2.4 s/GiB to fault in — more than the disk write itself — and it takes a core from the kernels.
With ``O_DIRECT`` the disk reads the rows straight from a small, reused staging buffer.

A contiguous dataset with early allocation has a fixed byte range in the file
(``Dataset.id.get_offset()``), so rows p0..p1 of a full-width write are one byte range. HDF5 keeps
no cached copy of a contiguous dataset's raw data that it has not read or written itself, so
writing that range behind its back is safe as long as HDF5 does not touch those rows meanwhile.
``O_DIRECT`` needs the file offset, length and memory address aligned to the block size; the
artifact is created with 4 KiB alignment (:data:`ALIGN`), the aligned middle of a range goes direct
and an unaligned head or tail (a write starting mid-page) is written through the page cache. Where
the file system refuses ``O_DIRECT`` (tmpfs, some network file systems) every write is buffered.
"""

from __future__ import annotations

import os
import queue
import threading

import h5py
import numpy as np

ALIGN = 4096
STAGE_BYTES = 32 << 20


def contiguous_offset(ds: h5py.Dataset) -> int | None:
    """Byte offset of a contiguous, allocated dataset in its file, else None."""
    if ds.chunks is not None or ds.compression is not None:
        return None
    off = ds.id.get_offset()
    return None if off is None else int(off)


class RawWriter:
    """pwrite of byte ranges into one file: aligned middles with O_DIRECT, the rest buffered.

    Two staging buffers: the caller fills one (:meth:`stage`) while an I/O thread writes the other
    (:meth:`write_staged`), so gathering rows and the disk overlap. ``done`` callbacks run in the
    I/O thread in submission order, after the bytes are written (or the write failed: then
    :attr:`error` is set and re-raised by the next :meth:`stage` or :meth:`drain`).
    """

    def __init__(self, path: str | os.PathLike, buffers: int = 2, fault_bytes: int = 0):
        """``fault_bytes``: bytes of each staging buffer the I/O thread touches before the first
        write (the most one write stages; see :meth:`_fault_in`)."""
        self.fd = os.open(path, os.O_WRONLY)
        self.fault_bytes = min(STAGE_BYTES, int(fault_bytes)) + ALIGN if fault_bytes > 0 else 0
        self.fd_direct = None
        if hasattr(os, "O_DIRECT"):
            try:
                self.fd_direct = os.open(path, os.O_WRONLY | os.O_DIRECT)
            except OSError:
                self.fd_direct = None
        self.direct_bytes = 0
        self.buffered_bytes = 0
        self.error: BaseException | None = None
        self._free: queue.Queue = queue.Queue()
        for _ in range(buffers):
            self._free.put(_aligned(STAGE_BYTES + ALIGN))
        self._current: np.ndarray | None = None
        self._q: queue.Queue = queue.Queue()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def stage(self, offset: int, nbytes: int) -> np.ndarray:
        """A byte view of a free staging buffer to fill with the ``nbytes`` that go to ``offset``."""
        if self.error is not None:
            raise self.error
        buf = self._free.get()
        pad = offset % ALIGN
        if pad + nbytes > len(buf):
            buf = _aligned(pad + nbytes + ALIGN)
        self._current = buf
        return buf[pad:pad + nbytes]

    def unstage(self) -> None:
        """Give back the buffer :meth:`stage` returned without writing it (its rows failed a check)."""
        buf, self._current = self._current, None
        if buf is not None:
            self._free.put(buf if len(buf) == STAGE_BYTES + ALIGN else _aligned(STAGE_BYTES + ALIGN))

    def write_staged(self, offset: int, nbytes: int, done=None) -> None:
        """Queue the write of what :meth:`stage` returned for (offset, nbytes)."""
        buf, self._current = self._current, None
        self._q.put((buf, offset, nbytes, done))

    def drain(self) -> None:
        """Wait until every queued write is done."""
        self._q.join()
        if self.error is not None:
            raise self.error

    def _fault_in(self) -> None:
        """Touch the first :attr:`fault_bytes` of each free staging buffer once, a write per page
        (the I/O thread's first work, while the caller still prepares its first rows), so that the
        first writes do not fault them in: on VMs that return free pages to the host 32 MiB of
        fresh memory take ~65 ms to fault in. cliques64 (8M entries, d = 64, 32 MB a hop), four runs
        each way: hop 1's rows waited for 0 / 65 / 26 / 69 ms before (their first writes faulted the
        second buffer in), 0-4.5 ms after."""
        if not self.fault_bytes:
            return
        bufs = []
        while True:
            try:
                bufs.append(self._free.get_nowait())
            except queue.Empty:
                break
        for buf in bufs:
            buf[:self.fault_bytes:ALIGN] = 0
            self._free.put(buf)

    def _run(self) -> None:
        self._fault_in()
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                buf, offset, nbytes, done = item
                try:
                    if self.error is None:
                        self._write(buf, offset, nbytes)
                except BaseException as e:  # noqa: BLE001 - surfaced in the caller by the next write or close
                    self.error = e
                finally:
                    self._free.put(buf if len(buf) == STAGE_BYTES + ALIGN else _aligned(STAGE_BYTES + ALIGN))
                    if done is not None:
                        done()
            finally:
                self._q.task_done()

    def _write(self, stage: np.ndarray, offset: int, nbytes: int) -> None:
        pad = offset % ALIGN
        buf = memoryview(stage)
        lo = offset + (-offset) % ALIGN          # first aligned byte
        hi = (offset + nbytes) // ALIGN * ALIGN  # end of the last whole aligned block
        if self.fd_direct is not None and hi > lo:
            s = lo - offset + pad  # = ALIGN or 0: an aligned address in the staging buffer
            try:
                self._pwrite(self.fd_direct, buf[s:s + hi - lo], lo)
            except OSError:
                os.close(self.fd_direct)  # refused (alignment rules of this device): buffered from now on
                self.fd_direct = None
            else:
                self.direct_bytes += hi - lo
                self._pwrite(self.fd, buf[pad:pad + lo - offset], offset)
                self._pwrite(self.fd, buf[pad + hi - offset:pad + nbytes], hi)
                self.buffered_bytes += nbytes - (hi - lo)
                return
        self._pwrite(self.fd, buf[pad:pad + nbytes], offset)
        self.buffered_bytes += nbytes

    @staticmethod
    def _pwrite(fd: int, data: memoryview, offset: int) -> None:
        while len(data):
            k = os.pwrite(fd, data, offset)
            data, offset = data[k:], offset + k

    def close(self) -> None:
        """Finish the queued writes and close the file descriptors."""
        self._q.put(None)
        self._t.join()
        for fd in (self.fd, self.fd_direct):
            if fd is not None:
                os.close(fd)
        self.fd = self.fd_direct = None


def _aligned(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes]
