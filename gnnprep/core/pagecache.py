"""How much of a file's byte ranges the page cache holds now: mincore(2) over a read-only mapping.

A read the page cache serves runs at memory speed (several GB/s); one the disk serves runs at the
disk's rate (0.2-0.5 GB/s measured on the 2-core VM's disk for the papers100M shape's arrays at 1/10,
against 5-6 GB/s from the cache). So what a run will wait for its first reads depends on what is
cached when it starts, which the sizes cannot say: the planner asks (:func:`resident_share`).
Mapping a file and asking costs no read: mincore only looks at the page tables of the cache
(``vec[i] & 1``: page i is resident). Linux only; elsewhere, and on any failure, the answer is None
(unknown), never an error."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys

import numpy as np

_libc = None


def _lib():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        lib.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        lib.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
        _libc = lib
    return _libc


MAX_PAGES = 1 << 22   # pages asked about per range at most (16 GiB of 4 KiB pages): larger ranges are sampled


def resident_share(path, ranges) -> float | None:
    """The share of the bytes in ``ranges`` ((offset, length) pairs of the file at ``path``) that
    the page cache holds now, weighted by length; None where it cannot be told (not Linux, no such
    file, an empty set of ranges). A range of more than :data:`MAX_PAGES` pages is asked about in
    evenly spaced windows of that many pages in all."""
    if not sys.platform.startswith("linux") or not ranges:
        return None
    try:
        lib = _lib()
        page = mmap.PAGESIZE
        fd = os.open(os.fspath(path), os.O_RDONLY)
    except (OSError, AttributeError):
        return None
    try:
        size = os.fstat(fd).st_size
        held = total = 0
        for off, length in ranges:
            off, end = max(0, int(off)), min(size, int(off) + int(length))
            if end <= off:
                continue
            first, last = off // page, (end - 1) // page
            pages = last - first + 1
            windows = [(first, pages)] if pages <= MAX_PAGES else \
                [(first + (pages - MAX_PAGES // 16) * i // 15, MAX_PAGES // 16) for i in range(16)]
            for p0, count in windows:
                r = _resident_pages(lib, fd, p0 * page, count, page)
                if r is None:
                    return None
                held += r * (end - off) / pages
                total += count * (end - off) / pages
        return None if total == 0 else min(1.0, held / total)
    finally:
        os.close(fd)


def _resident_pages(lib, fd: int, offset: int, count: int, page: int) -> int | None:
    """Resident pages among ``count`` pages of ``fd`` from ``offset`` (page aligned)."""
    length = count * page
    addr = lib.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        return None
    try:
        vec = (ctypes.c_ubyte * count)()
        if lib.mincore(ctypes.c_void_p(addr), length, vec) != 0:
            return None
        return int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1))
    finally:
        lib.munmap(ctypes.c_void_p(addr), length)


SAMPLED_CHUNKS = 256   # chunks of a chunked dataset asked about (evenly spaced)


def dataset_share(ds) -> float | None:
    """:func:`resident_share` of an h5py dataset's bytes in its file: a contiguous dataset's one
    range, or :data:`SAMPLED_CHUNKS` of a chunked one's chunks (X at papers100M's size has ~57k
    tiles; asking 256 costs ~50 ms). None where it cannot be told (compact or unallocated storage,
    a driver without chunk queries)."""
    try:
        dsid = ds.id
        if ds.chunks is None:
            off = dsid.get_offset()
            return None if off is None else resident_share(ds.file.filename, [(off, dsid.get_storage_size())])
        count = dsid.get_num_chunks()
        if count == 0:
            return None
        ranges = []
        for i in range(0, count, max(1, count // SAMPLED_CHUNKS)):
            info = dsid.get_chunk_info(i)
            if info.byte_offset is not None:
                ranges.append((info.byte_offset, info.size))
        return resident_share(ds.file.filename, ranges)
    except (AttributeError, OSError, ValueError, RuntimeError, KeyError):
        return None
