"""Stream arrays out of ``.npz`` archives without loading them whole.

papers100M's ``raw/data.npz`` holds DEFLATE-compressed members (edge_index alone is 26 GB), which
``np.load(mmap_mode=...)`` cannot map. We read the ``.npy`` header from the zip member and then
decompress the payload in row chunks. A [2, m] C-ordered edge array is read through two member
handles, one positioned at each row, so sources and destinations arrive chunk by chunk together.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from numpy.lib import format as npy_format

from gnnprep.errors import GnnprepError


@dataclass(frozen=True)
class MemberInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int  # bytes from the start of the decompressed member to the array payload


def _read_header(path: Path, fh, key: str) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    try:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
        else:
            shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
    except ValueError as e:
        raise GnnprepError(f"{path}: member {key!r} is not a valid .npy array ({e})") from None
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


class NpzReader:
    """Lazy access to the members of an ``.npz`` file (compressed or stored)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise GnnprepError(f"{self.path}: no such file")
        try:
            self.zf = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile as e:
            raise GnnprepError(f"{self.path}: not a valid .npz (zip) archive ({e})") from None
        self.members: dict[str, MemberInfo] = {}
        for name in self.zf.namelist():
            key = name[:-4] if name.endswith(".npy") else name
            with self._open(name) as fh:
                shape, dtype, fortran, off = _read_header(self.path, fh, key)
            self.members[key] = MemberInfo(name, tuple(shape), dtype, fortran, off)

    def _open(self, name: str):
        try:
            return self.zf.open(name)
        except (zipfile.BadZipFile, OSError) as e:
            raise GnnprepError(f"{self.path}: cannot read member {name!r} ({e})") from None

    def close(self) -> None:
        self.zf.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def require(self, key: str) -> MemberInfo:
        if key not in self.members:
            raise GnnprepError(f"{self.path}: missing array {key!r} (found: {', '.join(sorted(self.members)) or 'none'})")
        return self.members[key]

    def load_small(self, key: str) -> np.ndarray:
        info = self.require(key)
        with self._open(info.name) as fh:
            fh.seek(info.data_offset)
            return self._read_exact(fh, info, int(np.prod(info.shape, dtype=np.int64))).reshape(
                info.shape, order="F" if info.fortran_order else "C")

    def _read_exact(self, fh, info: MemberInfo, count: int) -> np.ndarray:
        nbytes = count * info.dtype.itemsize
        try:
            buf = fh.read(nbytes)
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise GnnprepError(f"{self.path}: member {info.name!r} is corrupt ({e})") from None
        if len(buf) != nbytes:
            raise GnnprepError(f"{self.path}: member {info.name!r} is truncated")
        return np.frombuffer(buf, dtype=info.dtype).copy()

    def iter_rows(self, key: str, chunk_rows: int) -> Iterator[np.ndarray]:
        """Yield consecutive row blocks of a C-ordered (or 1-D) member."""
        info = self.require(key)
        if info.fortran_order and len(info.shape) > 1:
            raise GnnprepError(f"{self.path}: member {key!r} is Fortran-ordered; expected C order for streaming")
        rows = info.shape[0] if info.shape else 1
        row_len = int(np.prod(info.shape[1:], dtype=np.int64)) if len(info.shape) > 1 else 1
        with self._open(info.name) as fh:
            fh.seek(info.data_offset)
            for start in range(0, rows, chunk_rows):
                n = min(chunk_rows, rows - start)
                yield self._read_exact(fh, info, n * row_len).reshape((n,) + tuple(info.shape[1:]))

    def iter_edge_pairs(self, key: str, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield (row 0, row 1) chunks of a [2, m] array, or (col 0, col 1) of an [m, 2] array."""
        info = self.require(key)
        shape = info.shape
        if len(shape) != 2 or 2 not in shape:
            raise GnnprepError(f"{self.path}: {key!r} has shape {shape}; expected [2, m] or [m, 2]")
        if info.dtype.kind not in "iu":
            raise GnnprepError(f"{self.path}: {key!r} has dtype {info.dtype}; expected integers")
        # [2, m] unless it is [m, 2] with m != 2 (a 2x2 array is read as OGB's [2, m]).
        two_by_m = shape[0] == 2
        m = shape[1] if two_by_m else shape[0]
        if two_by_m == info.fortran_order:
            # the two ids of an edge are adjacent in storage: read pairs
            with self._open(info.name) as fh:
                fh.seek(info.data_offset)
                for start in range(0, m, chunk_edges):
                    n = min(chunk_edges, m - start)
                    a = self._read_exact(fh, info, 2 * n).reshape(n, 2)
                    yield (_ids_int64(a[:, 0], self.path, key, start).copy(),
                           _ids_int64(a[:, 1], self.path, key, start).copy())
            return
        m = shape[1] if two_by_m else shape[0]
        with self._open(info.name) as f0, self._open(info.name) as f1:
            f0.seek(info.data_offset)
            f1.seek(info.data_offset + m * info.dtype.itemsize)
            for start in range(0, m, chunk_edges):
                n = min(chunk_edges, m - start)
                yield (_ids_int64(self._read_exact(f0, info, n), self.path, key, start),
                       _ids_int64(self._read_exact(f1, info, n), self.path, key, start))
