"""Stream arrays out of ``.npz`` archives without loading them whole.

papers100M's ``raw/data.npz`` may hold DEFLATE-compressed members (edge_index alone is 26 GB),
which ``np.load(mmap_mode=...)`` cannot map. We read the ``.npy`` header from the zip member and
then decompress the payload in row chunks. A [2, m] C-ordered edge array is read through two
member handles, one positioned at each row, so sources and destinations arrive chunk by chunk
together.

Stored (uncompressed) members, as ``np.savez`` writes them, skip zipfile's read path: it builds a
bytes object per read (copied once more into an array, and fresh pages every block) and computes
the CRC in the reading thread. They are read with positional reads straight into the arrays handed
out, one block ahead in a worker thread (the read and the CRC release the GIL, so they overlap the
consumer's work), and their CRC-32 is still checked before the last block is handed out, so a
corrupt member fails as it does through zipfile.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from numpy.lib import format as npy_format

from gnnprep.core.errors import GnnprepError

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")   # zipfile.structFileHeader: 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"
READ_PIECE = 1 << 30                            # bytes per read call (Linux moves < 2 GiB per call)


@dataclass(frozen=True)
class MemberInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int  # bytes from the start of the decompressed member to the array payload


MAX_HEADER = 1 << 16     # bytes of a .npy header (numpy writes < 200; its own limit is 10,000 characters)
MAX_SMALL = 1 << 20      # bytes of a member read whole by :meth:`NpzReader.load_small`


def _read_header(path: Path, fh, key: str) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Shape, dtype, order and payload offset of a member's .npy header. The header's length field
    is checked before the header is read: numpy reads as many bytes as it says (up to 4 GiB from a
    few compressed bytes) before it applies its own limit."""
    try:
        version = npy_format.read_magic(fh)
        size = 2 if version == (1, 0) else 4
        raw = fh.read(size)
        if len(raw) != size:
            raise ValueError("EOF reading the array header length")
        length = int.from_bytes(raw, "little")
        if length > MAX_HEADER:
            raise GnnprepError(f"{path}: member {key!r} has a .npy header of {length:,} bytes; expected at most "
                               f"{MAX_HEADER:,} (numpy writes a few hundred)")
        header = io.BytesIO(raw + fh.read(length))
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(header)
        else:
            shape, fortran, dtype = npy_format.read_array_header_2_0(header)
    except (ValueError, EOFError) as e:
        if isinstance(e, GnnprepError):
            raise
        raise GnnprepError(f"{path}: member {key!r} is not a valid .npy array ({str(e).splitlines()[0]})") from None
    if dtype.hasobject:
        raise GnnprepError(f"{path}: member {key!r} holds Python objects; expected a numeric array")
    return shape, dtype, fortran, fh.tell()


def _ids_int64(a: np.ndarray, path: Path, key: str, first: int) -> np.ndarray:
    """int64 ids; a uint64 id above 2**63 - 1 is refused (a plain cast would wrap it negative)."""
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and len(a) and a.max() > np.iinfo(np.int64).max:
        i = int(np.argmax(a > np.iinfo(np.int64).max))
        raise GnnprepError(f"{path} {key} edge {first + i}: node id {int(a[i])} is too large; "
                           "expected ids below 2**63")
    return a.astype(np.int64, copy=False)


def _gf2_times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from crc(A), crc(B) and len(B) (zlib's ``crc32_combine``, which Python does
    not expose): the two rows of a [2, m] member are checked as two streams read side by side."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << k for k in range(31)]       # operator for one zero bit
    even = [_gf2_times(odd, odd[k]) for k in range(32)]    # two zero bits
    odd = [_gf2_times(even, even[k]) for k in range(32)]   # four zero bits
    while True:
        even = [_gf2_times(odd, odd[k]) for k in range(32)]
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = [_gf2_times(even, even[k]) for k in range(32)]
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


class _Stored:
    """One stored (uncompressed) member, read with positional reads from the archive's file."""

    def __init__(self, path: Path, fd: int, name: str, start: int, size: int, crc: int):
        self.path, self.fd, self.name = path, fd, name
        self.start, self.size, self.crc = start, size, crc   # payload's offset in the archive

    def read_into(self, out: np.ndarray, pos: int, crc: int) -> int:
        """Fill ``out`` (contiguous) with member bytes from ``pos``; return the running CRC."""
        view = memoryview(out.reshape(-1).view(np.uint8))
        done = 0
        while done < len(view) and pos + done < self.size:
            piece = view[done:done + min(READ_PIECE, self.size - pos - done)]
            got = os.preadv(self.fd, [piece], self.start + pos + done)
            if got <= 0:
                break
            done += got
        if done != len(view):
            raise GnnprepError(f"{self.path}: member {self.name!r} is truncated")
        return zlib.crc32(view, crc)

    def crc_of(self, pos: int, end: int, crc: int = 0) -> int:
        """Running CRC over member bytes [pos, end), read in bounded pieces (headers, tails)."""
        while pos < end:
            buf = np.empty(min(end - pos, 1 << 24), dtype=np.uint8)
            crc = self.read_into(buf, pos, crc)
            pos += len(buf)
        return crc

    def check(self, crc: int) -> None:
        """The CRC of the whole member must be the one the archive records."""
        if crc != self.crc:
            raise GnnprepError(f"{self.path}: member {self.name!r} is corrupt (Bad CRC-32 for file {self.name!r})")


def _pipelined(fill: Callable[[int], object], blocks: int) -> Iterator:
    """Yield ``fill(0) .. fill(blocks - 1)``, computing block i + 1 in a worker thread while the
    consumer handles block i. On early exit the block in flight is waited for (it may use the file)."""
    if blocks <= 0:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="npz-read") as pool:
        fut = pool.submit(fill, 0)
        for i in range(blocks):
            out = fut.result()
            fut = pool.submit(fill, i + 1) if i + 1 < blocks else None
            yield out


class _Ring:
    """Output arrays for streamed blocks: fresh ones, or (``reuse``) two that alternate, so the
    consumer must be done with a block when it asks for the one after next (ingest copies each
    block into HDF5 before asking for more; reuse spares ~1 page fault per 4 KiB read)."""

    def __init__(self, reuse: bool):
        self.reuse, self.bufs = reuse, {}

    def get(self, i: int, shape: tuple[int, ...], dtype) -> np.ndarray:
        if not self.reuse:
            return np.empty(shape, dtype=dtype)
        size = int(np.prod(shape, dtype=np.int64))
        buf = self.bufs.get(i % 2)
        if buf is None or len(buf) < size or buf.dtype != dtype:
            buf = self.bufs[i % 2] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)


class NpzReader:
    """Lazy access to the members of an ``.npz`` file (compressed or stored)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise GnnprepError(f"{self.path}: no such file")
        try:
            self.zf = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile as e:
            raise GnnprepError(f"{self.path}: not a valid .npz (zip) archive ({e})") from None
        self._fd: int | None = None
        self.members: dict[str, MemberInfo] = {}
        for name in self.zf.namelist():
            key = name[:-4] if name.endswith(".npy") else name
            try:
                with self._open(name) as fh:
                    shape, dtype, fortran, off = _read_header(self.path, fh, key)
            except (zipfile.BadZipFile, EOFError, OSError) as e:  # zipfile reads a small member whole
                raise GnnprepError(f"{self.path}: member {name!r} is corrupt ({e})") from None
            payload = int(np.prod(shape, dtype=object)) * dtype.itemsize
            listed = self.zf.getinfo(name).file_size
            if listed < off + payload:
                # the .npy header declares more than the zip directory says the member holds (a
                # truncated member, or a header inflated to drive a huge read): refused before reading
                raise GnnprepError(f"{self.path}: member {name!r} is {listed:,} bytes in the zip directory, but "
                                   f"its .npy header declares a {dtype} array of shape {tuple(shape)} "
                                   f"({off + payload:,} bytes); expected the member to hold its array")
            self.members[key] = MemberInfo(name, tuple(shape), dtype, fortran, off)

    def _open(self, name: str):
        try:
            return self.zf.open(name)
        except (zipfile.BadZipFile, OSError) as e:
            raise GnnprepError(f"{self.path}: cannot read member {name!r} ({e})") from None

    def _stored(self, name: str) -> _Stored | None:
        """Direct access to a stored, unencrypted member (None: read it through zipfile). Its local
        header gives where the payload starts; anything odd there is left to zipfile to report."""
        z = self.zf.getinfo(name)
        if z.compress_type != zipfile.ZIP_STORED or z.flag_bits & 0x1 or not hasattr(os, "preadv"):
            return None
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        head = os.pread(self._fd, _LOCAL_HEADER.size, z.header_offset)
        if len(head) != _LOCAL_HEADER.size or head[:4] != _LOCAL_MAGIC:
            return None
        fields = _LOCAL_HEADER.unpack(head)
        start = z.header_offset + _LOCAL_HEADER.size + fields[10] + fields[11]
        return _Stored(self.path, self._fd, name, start, z.file_size, z.CRC)

    def close(self) -> None:
        self.zf.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def require(self, key: str) -> MemberInfo:
        if key not in self.members:
            raise GnnprepError(f"{self.path}: missing array {key!r} (found: {', '.join(sorted(self.members)) or 'none'})")
        return self.members[key]

    def load_small(self, key: str, max_bytes: int = MAX_SMALL) -> np.ndarray:
        """A member read whole: one meant to be small (a name, a shape, a count). One whose header
        declares more than ``max_bytes`` is refused before it is read."""
        info = self.require(key)
        nbytes = int(np.prod(info.shape, dtype=object)) * info.dtype.itemsize
        if nbytes > max_bytes:
            raise GnnprepError(f"{self.path}: member {key!r} is a {info.dtype} array of shape {info.shape} "
                               f"({nbytes:,} bytes); expected a small array (at most {max_bytes:,} bytes)")
        with self._open(info.name) as fh:
            self._skip(fh, info, info.data_offset)
            return self._read_exact(fh, info, int(np.prod(info.shape, dtype=np.int64))).reshape(
                info.shape, order="F" if info.fortran_order else "C")

    def _skip(self, fh, info: MemberInfo, nbytes: int) -> None:
        """Advance a fresh zipfile handle by ``nbytes``, reading them: since Python 3.12 a seek in a
        stored member jumps and turns the member's CRC check off (seen on a 3.12 machine: a flipped
        byte went unnoticed), where reading keeps it on, as on 3.11 and for compressed members."""
        try:
            while nbytes > 0:
                got = len(fh.read(min(nbytes, 1 << 20)))
                if not got:
                    raise GnnprepError(f"{self.path}: member {info.name!r} is truncated")
                nbytes -= got
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise GnnprepError(f"{self.path}: member {info.name!r} is corrupt ({e})") from None

    def _read_exact(self, fh, info: MemberInfo, count: int) -> np.ndarray:
        nbytes = count * info.dtype.itemsize
        try:
            buf = fh.read(nbytes)
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise GnnprepError(f"{self.path}: member {info.name!r} is corrupt ({e})") from None
        if len(buf) != nbytes:
            raise GnnprepError(f"{self.path}: member {info.name!r} is truncated")
        return np.frombuffer(buf, dtype=info.dtype).copy()

    def _stored_blocks(self, st: _Stored, info: MemberInfo, total: int, step: int, shape_of,
                       reuse: bool) -> Iterator[np.ndarray]:
        """Consecutive blocks of ``step`` items of a stored member's payload (the last one shorter),
        shaped by ``shape_of(items)``; the member's CRC covers its header and any trailing bytes."""
        ring = _Ring(reuse)
        state = {"crc": st.crc_of(0, info.data_offset), "pos": info.data_offset}
        blocks = -(-total // step) if total else 0

        def fill(i: int) -> np.ndarray:
            k = min(step, total - i * step)
            out = ring.get(i, shape_of(k), info.dtype)
            state["crc"] = st.read_into(out, state["pos"], state["crc"])
            state["pos"] += out.nbytes
            if i == blocks - 1:
                st.check(st.crc_of(state["pos"], st.size, state["crc"]))
            return out

        if not blocks:
            st.check(st.crc_of(state["pos"], st.size, state["crc"]))
        yield from _pipelined(fill, blocks)

    def iter_rows(self, key: str, chunk_rows: int, reuse: bool = False) -> Iterator[np.ndarray]:
        """Yield consecutive row blocks of a C-ordered (or 1-D) member. ``reuse``: blocks of a stored
        member alternate between two arrays, so each is valid only until the next one is asked for."""
        info = self.require(key)
        if info.fortran_order and len(info.shape) > 1:
            raise GnnprepError(f"{self.path}: member {key!r} is Fortran-ordered; expected C order for streaming")
        rows = info.shape[0] if info.shape else 1
        tail = tuple(info.shape[1:])
        row_len = int(np.prod(tail, dtype=np.int64)) if len(info.shape) > 1 else 1
        st = self._stored(info.name)
        if st is not None:
            yield from self._stored_blocks(st, info, rows, chunk_rows, lambda k: (k,) + tail, reuse)
            return
        with self._open(info.name) as fh:
            self._skip(fh, info, info.data_offset)
            for start in range(0, rows, chunk_rows):
                n = min(chunk_rows, rows - start)
                yield self._read_exact(fh, info, n * row_len).reshape((n,) + tail)

    def iter_edge_pairs(self, key: str, chunk_edges: int, reuse: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield (row 0, row 1) chunks of a [2, m] array, or (col 0, col 1) of an [m, 2] array.
        ``reuse`` as in :meth:`iter_rows` (int64 members of a stored [2, m] array)."""
        info = self.require(key)
        shape = info.shape
        if len(shape) != 2 or 2 not in shape:
            raise GnnprepError(f"{self.path}: {key!r} has shape {shape}; expected [2, m] or [m, 2]")
        if info.dtype.kind not in "iu":
            raise GnnprepError(f"{self.path}: {key!r} has dtype {info.dtype}; expected integers")
        # [2, m] unless it is [m, 2] with m != 2 (a 2x2 array is read as OGB's [2, m]).
        two_by_m = shape[0] == 2
        m = shape[1] if two_by_m else shape[0]
        st = self._stored(info.name)
        if two_by_m == info.fortran_order:
            # the two ids of an edge are adjacent in storage: read pairs
            if st is not None:
                blocks = self._stored_blocks(st, info, m, chunk_edges, lambda k: (k, 2), False)
            else:
                blocks = self._zip_pairs(info, m, chunk_edges)
            start = 0
            for a in blocks:
                yield (_ids_int64(a[:, 0], self.path, key, start).copy(),
                       _ids_int64(a[:, 1], self.path, key, start).copy())
                start += len(a)
            return
        if st is not None:
            yield from self._stored_rows(st, info, key, m, chunk_edges, reuse)
            return
        with self._open(info.name) as f0, self._open(info.name) as f1:
            self._skip(f0, info, info.data_offset)
            self._skip(f1, info, info.data_offset + m * info.dtype.itemsize)
            for start in range(0, m, chunk_edges):
                n = min(chunk_edges, m - start)
                yield (_ids_int64(self._read_exact(f0, info, n), self.path, key, start),
                       _ids_int64(self._read_exact(f1, info, n), self.path, key, start))

    def _zip_pairs(self, info: MemberInfo, m: int, chunk_edges: int) -> Iterator[np.ndarray]:
        with self._open(info.name) as fh:
            self._skip(fh, info, info.data_offset)
            for start in range(0, m, chunk_edges):
                n = min(chunk_edges, m - start)
                yield self._read_exact(fh, info, 2 * n).reshape(n, 2)

    def _stored_rows(self, st: _Stored, info: MemberInfo, key: str, m: int, chunk_edges: int,
                     reuse: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The two rows of a stored [2, m] member side by side, each its own CRC stream (header and
        row 0; row 1 and any trailing bytes), combined into the member's CRC at the end."""
        ring0, ring1 = _Ring(reuse), _Ring(reuse)
        row1 = info.data_offset + m * info.dtype.itemsize
        state = {"c0": st.crc_of(0, info.data_offset), "c1": 0, "p0": info.data_offset, "p1": row1}
        blocks = -(-m // chunk_edges) if m else 0

        def fill(i: int) -> tuple[np.ndarray, np.ndarray]:
            k = min(chunk_edges, m - i * chunk_edges)
            a, b = ring0.get(i, (k,), info.dtype), ring1.get(i, (k,), info.dtype)
            state["c0"] = st.read_into(a, state["p0"], state["c0"])
            state["c1"] = st.read_into(b, state["p1"], state["c1"])
            state["p0"] += a.nbytes
            state["p1"] += b.nbytes
            if i == blocks - 1:
                c1 = st.crc_of(state["p1"], st.size, state["c1"])
                st.check(crc32_combine(state["c0"], c1, st.size - row1))
            return a, b

        if not blocks:
            st.check(st.crc_of(0, st.size))
        start = 0
        for a, b in _pipelined(fill, blocks):
            yield (_ids_int64(a, self.path, key, start), _ids_int64(b, self.path, key, start))
            start += len(a)
