"""In-memory arrays as a graph source: what :func:`gnnprep.graph.from_arrays` ingests.

For PyG ``Data`` (``edge_index`` [2, m], ``x``, ``y``, ``train_mask`` ...), DGL graphs
(``g.edges()`` as a (src, dst) pair) and plain numpy. Nothing here imports torch, PyG or DGL: an
argument is turned into numpy through its ``.detach().cpu().numpy()`` (tensors) or ``__array__``.
Edge ``(edge_index[0, e], edge_index[1, e])`` is u -> v (v aggregates from u), PyG's
source-to-target convention, so the store equals that of an edge-list file with the lines ``u v``.
Errors name the argument and the position (``edge_index column 7``, ``x row 3``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.sources.base import (
    SPLIT_NAMES,
    GraphSource,
    as_int64_ids,
    cast_features,
    check_ids,
    labels_from_float,
)

SPLIT_ALIASES = {"train": "train", "valid": "valid", "val": "valid", "test": "test"}


def as_numpy(a: Any, what: str) -> np.ndarray:
    """A numpy view of a numpy array, a torch tensor (any device) or anything with ``__array__``."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "detach"):
        a = a.detach()
    if hasattr(a, "cpu"):
        a = a.cpu()
    if hasattr(a, "numpy"):
        try:
            return np.asarray(a.numpy())
        except (TypeError, RuntimeError, ValueError) as e:
            raise GnnprepError(f"{what}: cannot turn {type(a).__name__} into a numpy array ({e})") from None
    try:
        out = np.asarray(a)
    except (TypeError, ValueError) as e:
        raise GnnprepError(f"{what}: cannot turn {type(a).__name__} into a numpy array ({e})") from None
    if out.dtype.hasobject:
        raise GnnprepError(f"{what}: {type(a).__name__} of Python objects; expected a numeric array")
    return out


def _edge_pair(edge_index: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sources, destinations) of a [2, m] array or a (src, dst) pair of 1-D arrays."""
    if isinstance(edge_index, (tuple, list)) and len(edge_index) == 2 and not np.isscalar(edge_index[0]):
        src, dst = as_numpy(edge_index[0], "edge_index[0]"), as_numpy(edge_index[1], "edge_index[1]")
        if src.ndim != 1 or dst.shape != src.shape:
            raise GnnprepError(f"edge_index: a pair of arrays of shapes {src.shape} and {dst.shape}; expected two "
                               "1-D arrays of the same length (sources, destinations)")
    else:
        a = as_numpy(edge_index, "edge_index")
        if a.ndim != 2 or a.shape[0] != 2:
            raise GnnprepError(f"edge_index: shape {a.shape}; expected [2, m] (PyG's edge_index: row 0 sources, "
                               "row 1 destinations) or a (src, dst) pair")
        src, dst = a[0], a[1]
    for name, ids in (("edge_index[0]", src), ("edge_index[1]", dst)):
        if ids.dtype.kind not in "iu":
            raise GnnprepError(f"{name}: dtype {ids.dtype}; expected integer node ids")
    return src, dst


class ArraySource(GraphSource):
    def __init__(self, edge_index: Any, x: Any = None, y: Any = None,
                 splits: Mapping[str, Any] | None = None, num_nodes: int | None = None, name: str = "arrays"):
        super().__init__(name=name, path=Path("edge_index"))
        self._src, self._dst = _edge_pair(edge_index)
        self.expected_edges = len(self._src)
        if num_nodes is not None:
            if int(num_nodes) < 1:
                raise GnnprepError(f"num_nodes: {num_nodes}; expected at least 1")
            self.num_nodes, self.nodes_from = int(num_nodes), "num_nodes"
        self._x = None if x is None else as_numpy(x, "x")
        if self._x is not None:
            if self._x.ndim != 2 or self._x.dtype.kind not in "biuf":
                raise GnnprepError(f"x: {self._x.dtype} array of shape {self._x.shape}; expected numeric "
                                   "[num_nodes, num_features]")
            self._set_nodes(self._x.shape[0], "x", "rows of x")
            self.num_features = self._x.shape[1]
            self.feature_dtype = np.dtype(np.float16 if self._x.dtype == np.float16 else np.float32)
            self.features_from = "x"
        self._y = None if y is None else as_numpy(y, "y")
        if self._y is not None:
            if self._y.ndim not in (1, 2):
                raise GnnprepError(f"y: shape {self._y.shape}; expected [num_nodes] class ids")
            self._set_nodes(len(self._y), "y", "length of y")
            self.labels_from = "y"
        self._splits = {}
        for key, ids in (splits or {}).items():
            name = SPLIT_ALIASES.get(str(key).removesuffix("_mask").removesuffix("_idx"))
            if name is None:
                raise GnnprepError(f"splits: key {key!r}; expected {', '.join(SPLIT_NAMES)} (or val, or PyG's "
                                   "train_mask / val_mask / test_mask)")
            if name in self._splits:
                raise GnnprepError(f"splits: two entries for {name} ({key!r} and another)")
            self._splits[name] = as_numpy(ids, f"splits[{key!r}]")
        self.splits_from = "splits" if self._splits else ""

    def _set_nodes(self, rows: int, arg: str, what: str) -> None:
        if self.num_nodes is None:
            self.num_nodes, self.nodes_from = rows, what
        elif rows != self.num_nodes:
            raise GnnprepError(f"{arg}: {rows} rows; expected {self.num_nodes} (from {self.nodes_from})")

    def input_files(self) -> list[Path]:
        return []

    def edges(self, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = self.num_nodes
        for s in range(0, len(self._src), chunk_edges):
            pair = []
            for row, ids in enumerate((self._src, self._dst)):
                where = lambda i, s=s, r=row: f"edge_index[{r}] entry {s + i}"  # noqa: E731
                ids = as_int64_ids(np.asarray(ids[s:s + chunk_edges]), where)
                check_ids(ids, n, self.nodes_from, where)
                pair.append(np.ascontiguousarray(ids))
            yield pair[0], pair[1]

    def features(self, chunk_rows: int) -> Iterator[np.ndarray]:
        if self._x is None:
            return
        for s in range(0, self._x.shape[0], chunk_rows):
            yield cast_features(np.asarray(self._x[s:s + chunk_rows]), self.feature_dtype,
                                lambda i, s=s: f"x row {s + i}")

    def labels(self, chunk_rows: int) -> Iterator[np.ndarray]:
        if self._y is None:
            return
        for s in range(0, len(self._y), chunk_rows):
            yield labels_from_float(np.asarray(self._y[s:s + chunk_rows]), lambda i, s=s: f"y entry {s + i}")

    def splits(self) -> dict[str, np.ndarray]:
        out = {}
        for name, a in self._splits.items():
            where = f"splits[{name!r}]"
            if a.dtype.kind == "b":
                if a.shape != (self.num_nodes,):
                    raise GnnprepError(f"{where}: a boolean mask of shape {a.shape}; expected [{self.num_nodes}]")
                out[name] = np.flatnonzero(a).astype(np.int64)
                continue
            if a.ndim != 1 or a.dtype.kind not in "iu":
                raise GnnprepError(f"{where}: {a.dtype} array of shape {a.shape}; expected 1-D node ids or a "
                                   "boolean mask")
            ids = as_int64_ids(a, lambda i: f"{where} entry {i}")
            check_ids(ids, self.num_nodes, self.nodes_from, lambda i: f"{where} entry {i}")
            out[name] = np.unique(ids)
        return out
