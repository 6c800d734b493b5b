"""The asynchronous hop writer: rows of finished hops go to the artifact in a thread, overlapping
the kernels that compute the next edge block or hop.

Full-width writes into contiguous datasets (one column block) bypass the page cache
(:mod:`gnnprep.core.directio`: O_DIRECT ``pwrite`` at the dataset's file offset, from two staging
buffers), and so do the whole chunks of a column block's write into a dataset chunked one column
block wide (several column blocks: each chunk is one contiguous, aligned byte range of the file,
allocated when the dataset was created, that HDF5 itself never touches); the rows of chunks a
write covers only in part, and every other write, go through h5py. ``put`` returns a sequence
number and ``wait(seq)`` blocks until every write up to it is on its way to disk, so the caller
knows when a buffer may be overwritten and when a unit may be marked finished.
"""

from __future__ import annotations

import os
import queue
import threading

import numpy as np

from gnnprep.core.directio import RawWriter, contiguous_offset
from gnnprep.core.errors import GnnprepError
from gnnprep.sparse import half, kernels  # numba: compiled on first use, loaded from its cache afterwards

# Owned items (``put(..., owned=True)``) held at most at once. The writer is done with an owned
# item's rows (copied to a staging buffer, or written) before it frees the item's slot, and it takes
# items in the order they were put: so once ``put`` of an owned item returns, the owned item put
# OWNED_SLOTS owned items before it (and every earlier one) is done with, and a ring of
# OWNED_SLOTS + 1 host buffers can be refilled in turn (:class:`gnnprep.precompute.torch_backends.HostRing`).
OWNED_SLOTS = 8


def check_finite(block: np.ndarray, ds, p0: int, c0: int) -> None:
    """GnnprepError naming the hop, row and column when ``block`` (rows p0.. and columns c0.. of
    ``ds``, already in the output dtype) holds inf or nan: a value overflowed the dtype (float16's
    largest is 65504) or the float32 products."""
    finite = np.isfinite(block)  # ~9 GB/s, in the writer thread
    if finite.all():
        return
    r, c = (int(v) for v in np.argwhere(~finite)[0])
    name = ds.name.strip("/").split("/")  # hops/<k> or channels/<operator>/<k>
    hop = f"hop {name[-1]}" + (f" of {name[-2]}" if len(name) == 3 else "")
    wider = " or use --dtype float32" if block.dtype.itemsize < 4 else ""   # float32 output: no wider choice
    raise GnnprepError(f"{hop}: row {p0 + r}, column {c0 + c} is {block[r, c]} in {block.dtype} (the value overflowed "
                       f"{block.dtype}); scale the features down{wider}")


class Gather:
    """Rows ``src[idx]``, gathered by the writer thread (off the compute thread), at most one
    gathered copy at a time; :meth:`into` gathers straight into a staging buffer."""

    def __init__(self, src: np.ndarray, idx: np.ndarray):
        self.src, self.idx = src, idx

    def __call__(self) -> np.ndarray:
        return self.src[self.idx]

    def part(self, s0: int, s1: int) -> "Gather":
        """Rows s0..s1 of this gather (a chunk of a column block's write)."""
        return Gather(self.src, self.idx[s0:s1])

    def into(self, out: np.ndarray) -> bool:
        """Gather into ``out`` (C-contiguous rows in the source's dtype, or float16 from float32: a hop
        or X buffer written with ``--dtype float16``) and check in the same pass; whether every value
        is finite (in ``out``'s dtype)."""
        if half.converts(self.src.dtype, out.dtype):
            return half.take_rows_half_finite(self.src, self.idx, out)
        return kernels.take_rows_finite(self.src, self.idx, out)


class HopWriter:
    """Writes (dataset, rows, columns, array) in a thread, overlapping the kernels.

    ``put`` returns a sequence number; ``wait(seq)`` blocks until every write up to it is done.
    Full-width writes into contiguous datasets go to the file directly (:mod:`gnnprep.core.directio`,
    page-cache free); others through h5py.
    """

    def __init__(self, dtype, path=None, piece_bytes: int = 0):
        """``path``: the artifact, written around the page cache (None: through HDF5);
        ``piece_bytes``: the most bytes one put writes (the staging buffers are faulted in to that
        size before the first write)."""
        self.dtype = np.dtype(dtype)
        # views and lazy gathers queue freely (a hop's worth of descriptors); owned copies (torch's
        # device-to-host rows) take one of OWNED_SLOTS slots, so at most OWNED_SLOTS × 32 MiB of them wait
        self.q: queue.Queue = queue.Queue()
        self.slots = threading.BoundedSemaphore(OWNED_SLOTS)
        self.error: BaseException | None = None
        self.cv = threading.Condition()
        self.issued = 0
        self.finished = 0
        self.synced = 0   # every write up to this seq was flushed and fdatasync'ed by a "sync" item
        self.raw = RawWriter(path, fault_bytes=piece_bytes) if path is not None else None
        self.offsets: dict = {}
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _direct(self, ds, p0, p1, c0, c1, arr) -> bool:
        """Stage a full-width write into a contiguous dataset, or the whole chunks of a write into a
        dataset chunked one column block wide, and queue them to the raw writer (which finishes the
        item once its last range is written); False when the item is neither."""
        if self.raw is None or p1 <= p0:
            return False
        if ds.chunks is not None:
            return self._direct_chunks(ds, p0, p1, c0, c1, arr)
        if c0 != 0 or c1 != ds.shape[1]:
            return False
        key = ds.id.id
        if key not in self.offsets:
            self.offsets[key] = contiguous_offset(ds)
        base = self.offsets[key]
        if base is None:
            return False
        row = ds.shape[1] * self.dtype.itemsize
        self._stage_rows(ds, p0, c0, c1, base + p0 * row, self._array_or_gather(arr), 0, p1 - p0, self._finish)
        return True

    def _direct_chunks(self, ds, p0, p1, c0, c1, arr) -> bool:
        """The whole chunks of rows p0..p1 written raw, one staged range each (a column block's
        chunks are not adjacent in the file); the rows of a chunk covered only in part go through
        h5py first (HDF5 merges them in its chunk cache), so no chunk is written both ways."""
        ch, cw = ds.chunks
        plain = ds.compression is None and not ds.shuffle and not ds.fletcher32 and ds.scaleoffset is None
        if not plain or c1 - c0 != cw or c0 % cw or ds.dtype != self.dtype:
            return False
        a = -(-p0 // ch) * ch                       # the first whole chunk's first row
        b = min(p1, ds.shape[0] // ch * ch) // ch * ch   # past the last whole chunk (an edge chunk is partial)
        if b <= a:
            return False
        offsets = []
        for i0 in range(a, b, ch):
            info = ds.id.get_chunk_info_by_coord((i0, c0))
            if info.byte_offset is None or info.size != ch * cw * self.dtype.itemsize:
                return False  # not allocated whole (never so in an artifact made here): all through h5py
            offsets.append(int(info.byte_offset))
        arr = self._array_or_gather(arr)
        for q0, q1 in ((p0, a), (b, p1)):
            if q1 > q0:
                self._h5py_rows(ds, q0, q1, c0, c1, arr, q0 - p0, q1 - p0)
        for j, i0 in enumerate(range(a, b, ch)):
            self._stage_rows(ds, i0, c0, c1, offsets[j], arr, i0 - p0, i0 - p0 + ch,
                             self._finish if i0 + ch >= b else None)
        return True

    def _array_or_gather(self, arr):
        """An item's rows as an array, or as a gather the staging does itself (same dtype, or float32
        into float16: :meth:`Gather.into`)."""
        if callable(arr) and not (isinstance(arr, Gather) and (arr.src.dtype == self.dtype
                                                              or half.converts(arr.src.dtype, self.dtype))):
            return arr()  # (a gather into another dtype: gathered once, converted while staged)
        return arr

    def _h5py_item(self, ds, p0, p1, c0, c1, arr) -> None:
        """A whole item through h5py (a gather runs here, off the compute thread). A method, so that
        no local of the writer's loop keeps the item's source buffer alive after it is written (a
        column block's X held that way stayed resident while the next block's was read)."""
        self._h5py_rows(ds, p0, p1, c0, c1, self._array_or_gather(arr), 0, p1 - p0)

    def _h5py_rows(self, ds, q0: int, q1: int, c0: int, c1: int, arr, s0: int, s1: int) -> None:
        """Rows s0..s1 of the item (output rows q0..q1; ``arr`` from :meth:`_array_or_gather`)
        converted to the output dtype, checked and written through h5py."""
        part = arr.part(s0, s1)() if isinstance(arr, Gather) else arr[s0:s1]
        if part.dtype == self.dtype:
            check_finite(part, ds, q0, c0)
        else:
            out = np.empty(part.shape, dtype=self.dtype)
            if not half.copy_finite(part, out):   # converted and checked in one pass
                check_finite(out, ds, q0, c0)      # (names the row and column)
            part = out
        ds[q0:q1, c0:c1] = part

    def _stage_rows(self, ds, r0: int, c0: int, c1: int, offset: int, arr, s0: int, s1: int, done) -> None:
        """Stage rows s0..s1 of the item (output rows r0.., columns c0..c1) for ``offset`` in the
        file, check them and queue their write (``done`` runs once they are written)."""
        rows = s1 - s0
        stage = self.raw.stage(offset, rows * (c1 - c0) * self.dtype.itemsize)
        stage = stage.view(self.dtype).reshape(rows, c1 - c0)
        try:
            if isinstance(arr, Gather):
                if not arr.part(s0, s1).into(stage):  # gathered and checked in one pass
                    check_finite(stage, ds, r0, c0)  # (names the row and column)
            elif not half.copy_finite(arr[s0:s1], stage):
                check_finite(stage, ds, r0, c0)   # (names the row and column)
        except BaseException:
            self.raw.unstage()  # the staging buffer goes back to the pool, unwritten
            raise
        self.raw.write_staged(offset, stage.nbytes, done)

    def _finish(self, synced: bool = False) -> None:
        if self.raw is not None and self.raw.error is not None and self.error is None:
            self.error = self.raw.error
        with self.cv:
            self.finished += 1
            if synced:
                self.synced = self.finished
            self.cv.notify_all()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            owned = len(item) == 7
            item = item[:6]
            queued = False  # a direct write: the raw writer's I/O thread finishes it
            synced = False
            try:
                if self.error is None and item[0] == "sync":
                    # write back what this hop wrote while the next hop computes, so the final
                    # fsync before the rename has little left to do
                    if self.raw is not None:
                        self.raw.drain()
                    item[1].flush()
                    os.fdatasync(item[1].id.get_vfd_handle())
                    synced = True   # (items finish in order: every earlier one is written)
                elif self.error is None:
                    queued = self._direct(*item)
                    if not queued:
                        if self.raw is not None:
                            self.raw.drain()  # items finish in order
                        self._h5py_item(*item)
            except BaseException as e:  # noqa: BLE001 - surfaced in the main thread by wait()
                self.error = e
            finally:
                if owned:
                    self.slots.release()
                if not queued:
                    self._finish(synced)

    def put(self, *item, owned: bool = False) -> int:
        if self.error is not None:
            raise self.error
        if owned:
            self.slots.acquire()
            item = item + (True,)
        self.issued += 1
        self.q.put(item)
        return self.issued

    def wait(self, seq: int | None = None):
        seq = self.issued if seq is None else seq
        with self.cv:
            while self.finished < seq and self.error is None:
                self.cv.wait()
        if self.error is not None:
            raise self.error

    def close(self):
        self.q.put(None)
        self.t.join()
        if self.raw is not None:
            self.raw.close()
