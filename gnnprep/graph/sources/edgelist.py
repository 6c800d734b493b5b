"""Plain edge lists: text (.csv/.tsv/.txt, optionally .gz) or arrays (.npy/.npz, [2, m] or [m, 2]),
with optional ``--features FILE.npy``, ``--labels FILE.npy`` and ``--splits DIR``.

Each edge ``u v`` means u -> v: v aggregates from u (PyG's source-to-target convention).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.files import NotRegularFile, open_regular
from gnnprep.graph.sources.base import (
    SPLIT_NAMES,
    GraphSource,
    as_int64_ids,
    cast_features,
    check_ids,
    labels_from_float,
    read_id_file,
    split_file,
)
from gnnprep.graph.sources.npzstream import NpzReader
from gnnprep.graph.sources.textio import TableReader, block_bytes_for

TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".edges", ".el")


def is_text_edge_list(path: Path) -> bool:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return any(name.endswith(s) for s in TEXT_SUFFIXES)


def npz_member(z: NpzReader, preferred: tuple[str, ...], what: str) -> str:
    """The member of an .npz to read: a preferred name, else the only one; several others are
    ambiguous (which one would be used is refused, not guessed)."""
    for key in preferred:
        if key in z.members:
            return key
    if len(z.members) == 1:
        return next(iter(z.members))
    if not z.members:
        raise GnnprepError(f"{z.path}: empty archive; expected {what}")
    raise GnnprepError(f"{z.path}: {len(z.members)} arrays ({', '.join(sorted(z.members))}); expected one "
                       f"array, or one named {' or '.join(preferred)}, holding {what}")


class NpzRows:
    """The member of an .npz chosen by :func:`npz_member`, streamed in row blocks (never read whole:
    a compressed member of a few KiB may inflate to GiBs). Offers what the sources use of an array:
    ``shape``, ``ndim``, ``dtype``, ``len`` and :func:`row_blocks`."""

    WHOLE = 16 << 20   # a Fortran-ordered member (it cannot be streamed by rows) is read whole up to this

    def __init__(self, path: Path, what: str, preferred: tuple[str, ...]):
        self.path = path
        with NpzReader(path) as z:
            self.key = npz_member(z, preferred, what)
            info = z.members[self.key]
            self.shape, self.dtype = info.shape, info.dtype
            self.ndim = len(self.shape)
            self._whole = None
            if info.fortran_order and self.ndim > 1:
                self._whole = z.load_small(self.key, self.WHOLE)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1

    def blocks(self, chunk_rows: int) -> Iterator[np.ndarray]:
        if self._whole is not None:
            yield from (self._whole[s:s + chunk_rows] for s in range(0, len(self), chunk_rows))
            return
        with NpzReader(self.path) as z:
            yield from z.iter_rows(self.key, chunk_rows)


def row_blocks(a, chunk_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, block) of a memory-mapped .npy or an :class:`NpzRows`."""
    if isinstance(a, NpzRows):
        s = 0
        for block in a.blocks(chunk_rows):
            yield s, block
            s += len(block)
        return
    for s in range(0, a.shape[0], chunk_rows):
        yield s, np.asarray(a[s:s + chunk_rows])


def load_npy(path: Path, what: str) -> np.ndarray:
    """Memory-map a .npy file, refusing one line for what is not a regular file with a NumPy header
    (a pipe, a folder, a device, an empty file) rather than blocking, reading forever or raising."""
    try:
        with open_regular(path, 1 << 62) as fh:
            magic = fh.read(6)
    except FileNotFoundError:
        raise GnnprepError(f"{path}: no such file ({what})") from None
    except NotRegularFile:
        raise GnnprepError(f"{path}: not a regular file (a folder, pipe or device); {what} must be a .npy "
                           "array file") from None
    except OSError as e:
        raise GnnprepError(f"{path}: cannot read ({e.strerror or e}); {what} must be a readable .npy array") from None
    if not magic:
        raise GnnprepError(f"{path}: empty file (0 bytes); {what} must be a .npy array")
    if magic != b"\x93NUMPY":
        raise GnnprepError(f"{path}: not a .npy array (no NumPy header); {what} must be a .npy or .npz array")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise GnnprepError(f"{path}: not a valid .npy array ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None


def _load_array(path: Path, what: str, preferred: tuple[str, ...] = ()):
    """Memory-map a .npy (or stream the member of an .npz chosen by :func:`npz_member`)."""
    if not path.exists() and not path.is_symlink():
        raise GnnprepError(f"{path}: no such file ({what})")
    name = path.name.lower()
    if name.endswith(".npz"):
        if not path.is_file():
            raise GnnprepError(f"{path}: not a regular file (a folder, pipe or device); {what} must be an .npz file")
        return NpzRows(path, what, preferred)
    if not name.endswith(".npy"):
        raise GnnprepError(f"{path}: {what} must be a .npy or .npz array")
    return load_npy(path, what)


class EdgeListSource(GraphSource):
    def __init__(self, path: Path, index_base: int = 0, num_nodes: int | None = None,
                 features: Path | None = None, labels: Path | None = None, splits: Path | None = None):
        super().__init__(name=path.name, path=path)
        if index_base not in (0, 1):
            raise OptionError("--index-base", f"must be 0 or 1, got {index_base}")
        self.index_base = index_base
        if path.stat().st_size == 0:
            raise GnnprepError(f"{path}: empty file; expected one edge per line or an edge array")
        self.text = is_text_edge_list(path)
        self._features = _load_array(features, "--features", ("node_feat",)) if features else None
        self._labels_path = labels
        self._splits_dir = splits
        self.feature_path = features
        if num_nodes is not None:
            self.num_nodes, self.nodes_from = int(num_nodes), "--num-nodes"
        if self._features is not None:
            f = self._features
            if f.ndim != 2:
                raise GnnprepError(f"{features}: shape {f.shape}; expected [num_nodes, num_features]")
            if f.dtype.kind not in "biuf":
                raise GnnprepError(f"{features}: dtype {f.dtype}; expected numeric features")
            if self.num_nodes is None:
                self.num_nodes, self.nodes_from = f.shape[0], f"rows of {features}"
            elif f.shape[0] != self.num_nodes:
                raise GnnprepError(f"{features}: {f.shape[0]} feature rows; expected {self.num_nodes} "
                                   f"(from {self.nodes_from})")
            self.num_features = f.shape[1]
            self.feature_dtype = np.dtype(np.float16 if f.dtype == np.float16 else np.float32)
            self.features_from = str(features)
        if labels is not None:
            self._labels = _load_array(labels, "--labels", ("node_label",))
            if self._labels.dtype.kind not in "biuf" or self._labels.ndim not in (1, 2):
                raise GnnprepError(f"{labels}: {self._labels.dtype} array of shape {self._labels.shape}; expected "
                                   "[num_nodes] integer class ids (or floats with NaN for unknown)")
            if self.num_nodes is None:
                self.num_nodes, self.nodes_from = len(self._labels), f"length of {labels}"
            elif len(self._labels) != self.num_nodes:
                raise GnnprepError(f"{labels}: {len(self._labels)} labels; expected {self.num_nodes} "
                                   f"(from {self.nodes_from})")
            self.labels_from = str(labels)
        if splits is not None and not Path(splits).is_dir():
            raise OptionError("--splits", f"{splits}: no such folder")
        self.splits_from = str(splits or "")
        if not self.text:
            self._array_info()

    def input_files(self) -> list[Path]:
        files = [self.path, self.feature_path, self._labels_path]
        if self._splits_dir:
            files += [split_file(self._splits_dir, s) for s in SPLIT_NAMES]
        return [Path(f) for f in files if f]

    def _array_info(self) -> None:
        if self.path.name.lower().endswith(".npz"):
            self._npz = NpzReader(self.path)
            key = self._npz_key = npz_member(self._npz, ("edge_index",), "an edge array")
            shape = self._npz.members[key].shape
        else:
            self._arr = _load_array(self.path, "edges")
            shape = self._arr.shape
            if self._arr.dtype.kind not in "iu":
                raise GnnprepError(f"{self.path}: dtype {self._arr.dtype}; expected integer node ids")
        if len(shape) != 2 or 2 not in shape:
            raise GnnprepError(f"{self.path}: edge array of shape {shape}; expected [2, m] or [m, 2]")
        self.expected_edges = shape[1] if shape[0] == 2 else shape[0]
        if tuple(shape) == (2, 2):   # either layout fits: say which one was taken
            self.warnings.append(f"{self.path}: a 2 x 2 edge array reads either way; taken as [2, m] (row 0 the "
                                 "sources, row 1 the destinations, as OGB and PyG store edges)")

    def edges(self, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        base, n = self.index_base, self.num_nodes
        if self.text:
            for chunk in TableReader(self.path, "int", 2, what="node id", block_bytes=block_bytes_for(chunk_edges)):
                v = chunk.values.astype(np.int64, copy=False) - base
                for col in (0, 1):
                    check_ids(v[:, col], n, self.nodes_from,
                              lambda i, c=chunk: f"{self.path} line {c.line(i)}",
                              what="node id" if not base else "node id (after --index-base 1)")
                yield v[:, 0].copy(), v[:, 1].copy()
            return
        if self.path.name.lower().endswith(".npz"):
            it = self._npz.iter_edge_pairs(self._npz_key, chunk_edges)
        else:
            it = self._npy_pairs(chunk_edges)
        done = 0
        for src, dst in it:
            src, dst = src - base, dst - base
            for ids in (src, dst):
                check_ids(ids, n, self.nodes_from, lambda i, d=done: f"{self.path} edge {d + i}")
            done += len(src)
            yield src, dst

    def _npy_pairs(self, chunk_edges: int):
        a = self._arr
        two_by_m = a.shape[0] == 2
        m = a.shape[1] if two_by_m else a.shape[0]
        for s in range(0, m, chunk_edges):
            block = np.asarray(a[:, s:s + chunk_edges] if two_by_m else a[s:s + chunk_edges].T)
            where = lambda i, s=s: f"{self.path} edge {s + i}"  # noqa: E731
            yield (np.ascontiguousarray(as_int64_ids(block[0], where)),
                   np.ascontiguousarray(as_int64_ids(block[1], where)))

    def features(self, chunk_rows: int) -> Iterator[np.ndarray]:
        f = self._features
        if f is None:
            return
        for s, block in row_blocks(f, chunk_rows):
            yield cast_features(block, self.feature_dtype, lambda i, s=s: f"{self.feature_path} row {s + i}")

    def labels(self, chunk_rows: int) -> Iterator[np.ndarray]:
        if self._labels_path is None:
            return
        for s, block in row_blocks(self._labels, chunk_rows):
            yield labels_from_float(block, lambda i, s=s: f"{self._labels_path} entry {s + i}")

    def splits(self) -> dict[str, np.ndarray]:
        out = {}
        if self._splits_dir is None:
            return out
        for name in SPLIT_NAMES:
            p = split_file(Path(self._splits_dir), name)
            if p is not None:
                out[name] = read_id_file(p, self.num_nodes, self.nodes_from, warn=self.warnings.append)
        if not out:
            raise OptionError("--splits", f"{self._splits_dir}: no train/valid/test files found "
                                          "(expected e.g. train.csv.gz, valid.txt or test.npy)")
        return out
