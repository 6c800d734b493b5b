"""In-memory arrays as a graph source: what :func:`gnnprep.graph.from_arrays` ingests.

For PyG ``Data`` (``edge_index`` [2, m], ``x``, ``y``, ``train_mask`` ...), DGL graphs
(``g.edges()`` as a (src, dst) pair) and plain numpy. Nothing here imports torch, PyG or DGL: an
argument is turned into numpy through its ``.detach().cpu().numpy()`` (tensors) or ``__array__``.
Edge ``(edge_index[0, e], edge_index[1, e])`` is u -> v (v aggregates from u), PyG's
source-to-target convention, so the store equals that of an edge-list file with the lines ``u v``.
Errors name the argument and the position (``edge_index column 7``, ``x row 3``): a bad argument
raises :class:`~gnnprep.core.errors.ArgumentError` (a GnnprepError, also a ValueError and a
TypeError) whose ``argument`` names it; nothing is coerced silently (``num_nodes=5.9`` is refused,
not truncated; an integer 0/1 array as long as the graph is refused as a split, since it reads as
a mask but would be taken as the ids 0 and 1: pass a boolean mask or the node ids).
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from gnnprep.core.errors import ArgumentError
from gnnprep.graph.sources.base import (
    SPLIT_NAMES,
    GraphSource,
    as_int64_ids,
    cast_features,
    check_ids,
    labels_from_float,
)

SPLIT_ALIASES = {"train": "train", "valid": "valid", "val": "valid", "test": "test"}
MAX_NODES = 2**62   # node ids are int64 in the store


def _is_int(v: Any) -> bool:
    """An integer (Python's or numpy's), not a bool and not a float that happens to be whole."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def check_num_nodes(num_nodes: Any) -> int | None:
    """``num_nodes`` as an int: None, or an integer in [1, 2**62] (numpy integers accepted; floats,
    bools and strings refused, never truncated)."""
    if num_nodes is None:
        return None
    if not _is_int(num_nodes):
        raise ArgumentError("num_nodes", f"{num_nodes!r} ({type(num_nodes).__name__}); expected an integer >= 1")
    if not 1 <= int(num_nodes) <= MAX_NODES:
        raise ArgumentError("num_nodes", f"{int(num_nodes)}; expected an integer in [1, 2**62]")
    return int(num_nodes)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or "\n" in name:
        raise ArgumentError("name", f"{name!r}; expected a non-empty one-line string")
    return name


def check_options(directed: Any = False, memory_budget: Any = None, order: Any = "auto", tmp_dir: Any = None,
                  name: Any = "arrays") -> None:
    """The keyword arguments of :func:`gnnprep.graph.from_arrays` beside the arrays: ``directed`` a
    bool, ``memory_budget`` None, a size text (``"512MiB"``) or a positive integer of bytes,
    ``order`` one of ``auto, community, degree, degree-bucket, none`` (ingest's ``--order``),
    ``tmp_dir`` None or a path, ``name`` a non-empty string. Raises ArgumentError naming the first
    bad one."""
    from gnnprep.graph.order import INGEST_MODES

    if not isinstance(directed, (bool, np.bool_)):
        raise ArgumentError("directed", f"{directed!r} ({type(directed).__name__}); expected True or False")
    if memory_budget is not None and not isinstance(memory_budget, str):
        if not _is_int(memory_budget) or int(memory_budget) < 1:
            raise ArgumentError("memory_budget", f"{memory_budget!r}; expected None (the default), a size such as "
                                                 "'512MiB' or a positive integer of bytes")
    if not isinstance(order, str) or order not in INGEST_MODES:
        raise ArgumentError("order", f"{order!r}; expected one of {', '.join(INGEST_MODES)}")
    if tmp_dir is not None and not isinstance(tmp_dir, (str, Path)):
        raise ArgumentError("tmp_dir", f"{tmp_dir!r} ({type(tmp_dir).__name__}); expected None or a folder path")
    check_name(name)


def _looks_like_mask(a: np.ndarray, n: int | None) -> bool:
    """An integer array as long as the graph holding only 0 and 1: a mask (PyG's masks are bool, but
    ``mask.long()`` or ``np.array(mask, int)`` is a common mistake), which as ids would mean nodes 0
    and 1."""
    return (n is not None and n >= 2 and a.ndim == 1 and a.dtype.kind in "iu" and len(a) == n
            and not ((a != 0) & (a != 1)).any())


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
            raise ArgumentError(what, f"cannot turn {type(a).__name__} into a numpy array ({e})") from None
    try:
        out = np.asarray(a)
    except (TypeError, ValueError) as e:
        raise ArgumentError(what, f"cannot turn {type(a).__name__} into a numpy array ({e})") from None
    if out.dtype.hasobject:
        raise ArgumentError(what, f"{type(a).__name__} of Python objects; expected a numeric array")
    return out


def _edge_pair(edge_index: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sources, destinations) of a [2, m] array or a (src, dst) pair of 1-D arrays."""
    if isinstance(edge_index, (tuple, list)) and len(edge_index) == 2 and not np.isscalar(edge_index[0]):
        src, dst = as_numpy(edge_index[0], "edge_index[0]"), as_numpy(edge_index[1], "edge_index[1]")
        if src.ndim != 1 or dst.shape != src.shape:
            raise ArgumentError("edge_index", f"a pair of arrays of shapes {src.shape} and {dst.shape}; expected "
                                              "two 1-D arrays of the same length (sources, destinations)")
    else:
        a = as_numpy(edge_index, "edge_index")
        if a.ndim != 2 or a.shape[0] != 2:
            raise ArgumentError("edge_index", f"shape {a.shape}; expected [2, m] (PyG's edge_index: row 0 "
                                              "sources, row 1 destinations) or a (src, dst) pair")
        src, dst = a[0], a[1]
    for name, ids in (("edge_index[0]", src), ("edge_index[1]", dst)):
        if ids.dtype.kind not in "iu":
            raise ArgumentError(name, f"dtype {ids.dtype}; expected integer node ids")
    return src, dst


class ArraySource(GraphSource):
    rereadable = True   # arrays in memory, read in chunks

    def __init__(self, edge_index: Any, x: Any = None, y: Any = None,
                 splits: Mapping[str, Any] | None = None, num_nodes: int | None = None, name: str = "arrays"):
        check_name(name)
        num_nodes = check_num_nodes(num_nodes)  # before any array is converted
        if splits is not None and not isinstance(splits, Mapping):
            raise ArgumentError("splits", f"{type(splits).__name__}; expected a mapping such as "
                                          "{'train': ids or boolean mask, 'valid': ..., 'test': ...}")
        super().__init__(name=name, path=Path("edge_index"))
        self._src, self._dst = _edge_pair(edge_index)
        self.expected_edges = len(self._src)
        if num_nodes is not None:
            self.num_nodes, self.nodes_from = num_nodes, "num_nodes"
        self._x = None if x is None else as_numpy(x, "x")
        if self._x is not None:
            if self._x.ndim != 2 or self._x.dtype.kind not in "biuf":
                raise ArgumentError("x", f"{self._x.dtype} array of shape {self._x.shape}; expected numeric "
                                         "[num_nodes, num_features]")
            self._set_nodes(self._x.shape[0], "x", "rows of x")
            self.num_features = self._x.shape[1]
            self.feature_dtype = np.dtype(np.float16 if self._x.dtype == np.float16 else np.float32)
            self.features_from = "x"
        self._y = None if y is None else as_numpy(y, "y")
        if self._y is not None:
            if self._y.ndim not in (1, 2) or self._y.dtype.kind not in "biuf":
                raise ArgumentError("y", f"{self._y.dtype} array of shape {self._y.shape}; expected [num_nodes] "
                                         "class ids (integers, or floats with NaN for unknown)")
            self._set_nodes(len(self._y), "y", "length of y")
            self.labels_from = "y"
        self._splits = {}
        for key, ids in (splits or {}).items():
            name = SPLIT_ALIASES.get(str(key).removesuffix("_mask").removesuffix("_idx"))
            if name is None:
                raise ArgumentError("splits", f"key {key!r}; expected {', '.join(SPLIT_NAMES)} (or val, or "
                                              "PyG's train_mask / val_mask / test_mask)")
            if name in self._splits:
                raise ArgumentError("splits", f"two entries for {name} ({key!r} and another)")
            self._splits[name] = as_numpy(ids, f"splits[{key!r}]")
            _check_split(self._splits[name], f"splits[{name!r}]", self.num_nodes, self.nodes_from)
        self.splits_from = "splits" if self._splits else ""

    def _set_nodes(self, rows: int, arg: str, what: str) -> None:
        if self.num_nodes is None:
            self.num_nodes, self.nodes_from = rows, what
        elif rows != self.num_nodes:
            raise ArgumentError(arg, f"{rows} rows; expected {self.num_nodes} (from {self.nodes_from})")

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
            _check_split(a, where, self.num_nodes, self.nodes_from)
            if a.dtype.kind == "b":
                out[name] = np.flatnonzero(a).astype(np.int64)
                continue
            ids = as_int64_ids(a, lambda i: f"{where} entry {i}")
            check_ids(ids, self.num_nodes, self.nodes_from, lambda i: f"{where} entry {i}")
            out[name] = np.unique(ids)
        return out


def _check_split(a: np.ndarray, where: str, n: int | None, nodes_from: str) -> None:
    """A split is a boolean mask of shape [n] or 1-D integer node ids; an integer 0/1 array of length
    n (a mask cast to integers) is refused rather than read as the ids 0 and 1. Ids themselves are
    checked against n where the edges are known (:meth:`ArraySource.splits`)."""
    if a.dtype.kind == "b":
        if n is not None and a.shape != (n,):
            raise ArgumentError(where, f"a boolean mask of shape {a.shape}; expected [{n}]")
        if a.ndim != 1:
            raise ArgumentError(where, f"a boolean mask of shape {a.shape}; expected one dimension [num_nodes]")
        return
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ArgumentError(where, f"{a.dtype} array of shape {a.shape}; expected 1-D node ids or a boolean mask")
    if _looks_like_mask(a, n):
        raise ArgumentError(where, f"an integer array of 0s and 1s as long as the graph ({n} nodes, from "
                                   f"{nodes_from}) reads as a mask, not as node ids; pass a boolean mask "
                                   "(mask.bool(), mask.astype(bool)) or the node ids (mask.nonzero())")
