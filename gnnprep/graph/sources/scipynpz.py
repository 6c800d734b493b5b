"""Sparse matrices saved by ``scipy.sparse.save_npz`` (csr, csc or coo), read as a graph's adjacency.

An archive holds ``format`` (b"csr" | b"csc" | b"coo"), ``shape`` [2] and ``data``, plus ``indptr``
and ``indices`` (csr/csc) or ``row`` and ``col`` (coo). Entry (i, j) is the edge i -> j (j aggregates
from i), as in PyG's ``from_scipy_sparse_matrix`` and an edge-list line ``i j``: for csr, i is the row
given by ``indptr`` and j = indices[k]; for csc, i = indices[k] and j is the column. Every stored
entry is an edge (explicit zeros included, as scipy counts them in ``nnz``); ``data`` is checked for
its length only. The node count is the (square) shape, so isolated nodes are kept.

Members are streamed with :class:`NpzReader` (never ``np.load`` whole): ``indptr`` and ``indices``
are read side by side in chunks, each entry's row found by a ``searchsorted`` within the current
``indptr`` block, so memory stays within a few chunks whatever n and nnz are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.sources.base import as_int64_ids, check_ids
from gnnprep.graph.sources.edgelist import EdgeListSource
from gnnprep.graph.sources.npzstream import NpzReader

FORMATS = ("csr", "csc", "coo")


def is_scipy_sparse_npz(path: Path) -> bool:
    """An ``.npz`` written by ``scipy.sparse.save_npz`` (it has ``format`` and ``shape`` members)."""
    if not path.name.lower().endswith(".npz") or not path.is_file():
        return False
    try:
        with NpzReader(path) as z:
            return "format" in z.members and "shape" in z.members
    except GnnprepError:
        return False


def _zip_aligned(a_it: Iterator[np.ndarray], b_it: Iterator[np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Pairs of equal-length pieces from two streams of 1-D blocks cut at different places; stops when
    either ends (the caller checks the totals)."""
    a = b = np.empty(0, dtype=np.int64)
    while True:
        while not len(a):
            a = next(a_it, None)
            if a is None:
                return
        while not len(b):
            b = next(b_it, None)
            if b is None:
                return
        k = min(len(a), len(b))
        yield a[:k], b[:k]
        a, b = a[k:], b[k:]


class SparseNpz:
    """Reader of one ``save_npz`` archive: its size and its entries as edge chunks."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.z = NpzReader(self.path)
        z = self.z
        fmt = z.load_small("format")
        if fmt.dtype.kind not in "SU" or fmt.shape != ():
            raise GnnprepError(f"{self.path}: member 'format' is a {fmt.dtype} array of shape {fmt.shape}; "
                               "expected the scipy.sparse.save_npz format name (csr, csc or coo)")
        self.format = fmt.item().decode("ascii", "replace") if fmt.dtype.kind == "S" else str(fmt.item())
        if self.format not in FORMATS:
            raise GnnprepError(f"{self.path}: member 'format' is {self.format!r}; expected csr, csc or coo "
                               "(convert with scipy: m.tocsr())")
        shape = z.load_small("shape")
        if shape.dtype.kind not in "iu" or shape.shape != (2,):
            raise GnnprepError(f"{self.path}: member 'shape' is {shape.tolist()!r}; expected [rows, cols]")
        rows, cols = (int(s) for s in shape)
        if rows != cols or rows <= 0:
            raise GnnprepError(f"{self.path}: member 'shape' is ({rows}, {cols}); expected a square adjacency "
                               "matrix with at least one node")
        self.n = rows
        if self.format == "coo":
            self.members = ("row", "col")
        else:
            self.members = ("indptr", "indices")
        for key in self.members + ("data",):
            info = z.require(key)
            if len(info.shape) != 1:
                raise GnnprepError(f"{self.path}: member {key!r} has shape {info.shape}; expected a 1-D array")
            if key != "data" and info.dtype.kind not in "iu":
                raise GnnprepError(f"{self.path}: member {key!r} has dtype {info.dtype}; expected integers")
        entries = z.members[self.members[1]].shape[0]
        if self.format == "coo" and z.members["row"].shape[0] != entries:
            raise GnnprepError(f"{self.path}: member 'row' has {z.members['row'].shape[0]} entries and 'col' "
                               f"{entries}; expected the same length")
        if self.format != "coo" and z.members["indptr"].shape[0] != self.n + 1:
            raise GnnprepError(f"{self.path}: member 'indptr' has {z.members['indptr'].shape[0]} entries; expected "
                               f"{self.n + 1} (the {('rows', 'columns')[self.format == 'csc']} + 1 of shape "
                               f"({rows}, {cols}))")
        if z.members["data"].shape[0] != entries:
            raise GnnprepError(f"{self.path}: member 'data' has {z.members['data'].shape[0]} entries and "
                               f"{self.members[1]!r} {entries}; expected the same length")
        self.nnz = entries

    def close(self) -> None:
        self.z.close()

    def _ids(self, key: str, chunk: int) -> Iterator[np.ndarray]:
        done = 0
        for block in self.z.iter_rows(key, chunk):
            where = lambda i, d=done: f"{self.path} member {key!r} entry {d + i}"  # noqa: E731
            ids = as_int64_ids(block, where, what="index")
            check_ids(ids, self.n, f"member 'shape' of {self.path}", where, what="index")
            done += len(block)
            yield ids

    def _pointer_ids(self, chunk: int) -> Iterator[np.ndarray]:
        """The row (csr) or column (csc) of every entry, in order, in pieces of at most ``chunk``."""
        key, last, first_row = "indptr", None, 0
        for block in self.z.iter_rows(key, chunk):
            block = as_int64_ids(block, lambda i, r=first_row: f"{self.path} member 'indptr' entry {r + i}",
                                 what="pointer")
            if last is None:
                if block[0] != 0:
                    raise GnnprepError(f"{self.path} member 'indptr' entry 0: {int(block[0])}; expected 0")
                ptr = block
            else:
                ptr = np.concatenate([[last], block])
            steps = np.diff(ptr)
            base = first_row - (0 if last is None else 1)   # row of ptr[0]
            if len(steps) and steps.min() < 0:
                i = int(np.argmax(steps < 0)) + 1
                raise GnnprepError(f"{self.path} member 'indptr' entry {base + i}: {int(ptr[i])} after "
                                   f"{int(ptr[i - 1])}; expected a non-decreasing pointer")
            if ptr[-1] > self.nnz:
                i = int(np.argmax(ptr > self.nnz))
                raise GnnprepError(f"{self.path} member 'indptr' entry {base + i}: {int(ptr[i])} is beyond the "
                                   f"{self.nnz} entries of {self.members[1]!r}")
            for pos in range(int(ptr[0]), int(ptr[-1]), chunk):
                at = np.arange(pos, min(pos + chunk, int(ptr[-1])), dtype=np.int64)
                yield base + np.searchsorted(ptr, at, side="right") - 1
            first_row += len(block)
            last = int(ptr[-1])
        if last != self.nnz:
            raise GnnprepError(f"{self.path} member 'indptr' entry {self.n}: {last}; expected {self.nnz} (the "
                               f"length of {self.members[1]!r})")

    def edges(self, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(sources, destinations) chunks: entry (i, j) is the edge i -> j."""
        if self.format == "coo":
            pairs = _zip_aligned(self._ids("row", chunk), self._ids("col", chunk))
        elif self.format == "csr":
            pairs = _zip_aligned(self._pointer_ids(chunk), self._ids("indices", chunk))
        else:
            pairs = ((i, j) for j, i in _zip_aligned(self._pointer_ids(chunk), self._ids("indices", chunk)))
        yield from pairs


class SparseNpzSource(EdgeListSource):
    """A ``save_npz`` archive as the adjacency, with ``--features``/``--labels``/``--splits`` as for an
    edge list."""

    def _array_info(self) -> None:
        self.matrix = SparseNpz(self.path)
        n = self.matrix.n
        if self.num_nodes is not None and self.num_nodes != n:
            raise GnnprepError(f"{self.path}: member 'shape' gives {n} nodes, but {self.nodes_from} gives "
                               f"{self.num_nodes}; expected the same node count")
        self.num_nodes, self.nodes_from = n, f"member 'shape' of {self.path}"
        self.expected_edges = self.matrix.nnz

    def edges(self, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield from self.matrix.edges(chunk_edges)
