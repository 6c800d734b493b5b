"""The interface every graph source offers to ingest, and checks they share.

A source streams what a graph store holds: edges (src -> dst, 0-based, validated), node features,
labels (-1 where unknown), splits and, for heterogeneous graphs, node types. Everything that scales
with the graph comes as chunk iterators so that ingest stays inside its memory budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from gnnprep.errors import GnnprepError

SPLIT_NAMES = ("train", "valid", "test")


@dataclass
class GraphSource:
    """Base class. Subclasses fill the fields and override the iterators they support."""

    name: str                                  # what the data set is called (for `source` attrs)
    path: Path                                 # the file or folder given by the user
    num_nodes: int | None = None               # None: infer from the largest id seen
    nodes_from: str = ""                       # which file declared num_nodes (for messages)
    stored_directed: bool = True               # False: undirected edges stored once (add inverses)
    expected_edges: int | None = None
    num_features: int = 0
    feature_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    features_from: str = ""
    labels_from: str = ""
    node_types: list[str] | None = None
    warnings: list[str] = field(default_factory=list)

    def input_files(self) -> list[Path]:
        return [self.path] if self.path.is_file() else sorted(p for p in self.path.rglob("*") if p.is_file())

    def edges(self, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        raise NotImplementedError

    def features(self, chunk_rows: int) -> Iterator[np.ndarray]:
        return iter(())

    def labels(self, chunk_rows: int) -> Iterator[np.ndarray]:
        return iter(())

    def node_type_ids(self, chunk_rows: int) -> Iterator[np.ndarray]:
        return iter(())

    def splits(self) -> dict[str, np.ndarray]:
        return {}

    def extra_attrs(self) -> dict:
        return {}


def check_ids(ids: np.ndarray, n: int | None, nodes_from: str, locate: Callable[[int], str],
              what: str = "node id") -> None:
    """Raise naming the first id that is negative or not below ``n``."""
    if not len(ids):
        return
    bad = ids < 0
    if n is not None:
        bad |= ids >= n
    if bad.any():
        i = int(np.argmax(bad))
        v = int(ids[i])
        if v < 0:
            raise GnnprepError(f"{locate(i)}: negative {what} {v}")
        raise GnnprepError(f"{locate(i)}: {what} {v} is beyond the node count {n} (from {nodes_from}); "
                           f"expected ids in [0, {n})")


def check_finite(block: np.ndarray, locate: Callable[[int], str]) -> None:
    if block.dtype.kind == "f":
        finite = np.isfinite(block)
        if not finite.all():
            row = int(np.argmax(~finite.all(axis=1) if block.ndim > 1 else ~finite))
            bad = block[row][~np.isfinite(block[row])][0] if block.ndim > 1 else block[row]
            raise GnnprepError(f"{locate(row)}: non-finite feature value {bad}; expected finite numbers")
    elif block.dtype.kind not in "iub":
        raise GnnprepError(f"{locate(0)}: features of dtype {block.dtype}; expected numbers")


def labels_from_float(values: np.ndarray, locate: Callable[[int], str]) -> np.ndarray:
    """Class ids from a float column where NaN means unlabeled (OGB's papers100M convention)."""
    values = np.asarray(values).reshape(len(values), -1)
    if values.shape[1] != 1:
        raise GnnprepError(f"{locate(0)}: {values.shape[1]} label columns; expected one class id per node "
                           "(multi-task labels are not supported)")
    values = values[:, 0]
    if values.dtype.kind in "iu":
        out = values.astype(np.int64)
    else:
        nan = np.isnan(values)
        bad = ~nan & ((values != np.round(values)) | ~np.isfinite(values))
        if bad.any():
            i = int(np.argmax(bad))
            raise GnnprepError(f"{locate(i)}: label {values[i]} is not a class id; expected an integer or NaN")
        out = np.where(nan, -1, values).astype(np.int64)
    neg = out < -1
    if neg.any():
        i = int(np.argmax(neg))
        raise GnnprepError(f"{locate(i)}: negative label {out[i]}; expected a class id >= 0 (or NaN / -1 for unknown)")
    return out


def find_split_folders(root: Path) -> list[Path]:
    """Folders under ``root/split`` that hold train/valid/test files, at any depth."""
    split = root / "split"
    if not split.is_dir():
        return []
    found = set()
    for p in split.rglob("*"):
        if p.is_file() and p.name.split(".")[0] in SPLIT_NAMES:
            found.add(p.parent)
    return sorted(found)


def split_file(folder: Path, name: str) -> Path | None:
    for ext in (".csv.gz", ".csv", ".txt", ".txt.gz", ".npy", ".tsv", ".tsv.gz"):
        p = folder / f"{name}{ext}"
        if p.is_file():
            return p
    return None


def read_id_file(path: Path, n: int, nodes_from: str, offset: int = 0) -> np.ndarray:
    """Node ids from a one-column text file or a .npy array, validated, sorted and unique."""
    from gnnprep.textio import TableReader

    if path.suffix == ".npy":
        try:
            ids = np.load(path, allow_pickle=False).reshape(-1)
        except ValueError as e:
            raise GnnprepError(f"{path}: not a valid .npy array ({e})") from None
        if ids.dtype.kind not in "iu":
            raise GnnprepError(f"{path}: dtype {ids.dtype}; expected integer node ids")
        ids = ids.astype(np.int64)
        check_ids(ids, n, nodes_from, lambda i: f"{path} entry {i}")
    else:
        parts = []
        for chunk in TableReader(path, "int", 1, what="node id", allow_header=False):
            ids = chunk.values[:, 0].astype(np.int64)
            check_ids(ids, n, nodes_from, lambda i, c=chunk: f"{path} line {c.line(i)}")
            parts.append(ids)
        ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return np.unique(ids + offset)
