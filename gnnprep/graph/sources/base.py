"""The interface every graph source offers to ingest, and checks they share.

A source streams what a graph store holds: edges (src -> dst, 0-based, validated), node features,
labels (-1 where unknown), splits and, for heterogeneous graphs, node types. Everything that scales
with the graph comes as chunk iterators so that ingest stays inside its memory budget. A chunk is
valid only until the next one is asked for: a source may read the next chunk into the same memory
(ingest stores or spills every chunk before asking for the next).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.core.files import kind_of

SPLIT_NAMES = ("train", "valid", "test")


@dataclass
class GraphSource:
    """Base class. Subclasses fill the fields and override the iterators they support."""

    # edges() may be iterated twice for the same edges, cheaply (binary arrays, not parsed text):
    # ingest then counts each row's entries first and places the keys by row as it reads them
    rereadable: ClassVar[bool] = False

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
    splits_from: str = ""
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


INT64_MAX = 2**63 - 1
MAX_CLASSES = 1_000_000   # a class id must be below this (a larger one is a data error, not a class)


def check_ids(ids: np.ndarray, n: int | None, nodes_from: str, locate: Callable[[int], str],
              what: str = "node id") -> None:
    """Raise naming the first id that is negative or not below ``n``."""
    if not len(ids):
        return
    if n is not None and ids.dtype.kind == "i":
        # one reduction: as unsigned, a negative id is at least 2**(bits - 1), beyond any n
        if ids.view(ids.dtype.str.replace("i", "u")).max() < n:
            return
    elif (ids.dtype.kind == "u" or ids.min() >= 0) and (n is None or ids.max() < n):
        return  # two reductions; the boolean masks below only to locate a bad id
    bad = ids < 0 if ids.dtype.kind != "u" else np.zeros(len(ids), dtype=bool)
    if n is not None:
        bad |= ids >= n
    if bad.any():
        i = int(np.argmax(bad))
        v = int(ids[i])
        if v < 0:
            raise GnnprepError(f"{locate(i)}: negative {what} {v}")
        raise GnnprepError(f"{locate(i)}: {what} {v} is beyond the node count {n} (from {nodes_from}); "
                           f"expected ids in [0, {n})")


def as_int64_ids(ids: np.ndarray, locate: Callable[[int], str], what: str = "node id") -> np.ndarray:
    """``ids`` as int64; an unsigned id that int64 cannot hold is an error, not a wrapped negative."""
    if ids.dtype.kind == "u" and ids.dtype.itemsize == 8 and len(ids) and ids.max() > INT64_MAX:
        i = int(np.argmax(ids > INT64_MAX))
        raise GnnprepError(f"{locate(i)}: {what} {int(ids[i])} is too large; expected ids below 2**63")
    if ids.dtype.kind not in "iu":
        raise GnnprepError(f"{locate(0)}: {what}s of dtype {ids.dtype}; expected integers")
    return ids.astype(np.int64, copy=False)


def check_finite(block: np.ndarray, locate: Callable[[int], str]) -> None:
    if block.dtype.kind == "f":
        finite = np.isfinite(block)
        if not finite.all():
            row = int(np.argmax(~finite.all(axis=1) if block.ndim > 1 else ~finite))
            bad = block[row][~np.isfinite(block[row])][0] if block.ndim > 1 else block[row]
            raise GnnprepError(f"{locate(row)}: non-finite feature value {bad}; expected finite numbers")
    elif block.dtype.kind not in "iub":
        raise GnnprepError(f"{locate(0)}: features of dtype {block.dtype}; expected numbers")


def cast_features(block: np.ndarray, dtype, locate: Callable[[int], str]) -> np.ndarray:
    """``block`` [rows, d] cast to the stored ``dtype``, checked finite *after* the cast (a float64
    1e300 becomes inf in float32), naming the row and column of the first bad value."""
    dtype = np.dtype(dtype)
    if block.dtype.kind not in "biuf":
        raise GnnprepError(f"{locate(0)}: features of dtype {block.dtype}; expected numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(block, dtype=dtype)
    if _all_finite(out):
        return out
    finite = np.isfinite(out)
    bad_rows = ~finite.all(axis=1) if out.ndim > 1 else ~finite
    row = int(np.argmax(bad_rows))
    col = int(np.argmax(~finite[row])) if out.ndim > 1 else 0
    orig = block[row, col] if out.ndim > 1 else block[row]
    if np.isfinite(orig):
        raise GnnprepError(f"{locate(row)}: feature value {_number(orig)} in column {col} does not fit {dtype.name} "
                           f"(it would be {out[row, col] if out.ndim > 1 else out[row]}); expected magnitudes up "
                           f"to {float(np.finfo(dtype).max):.4g}")
    raise GnnprepError(f"{locate(row)}: non-finite feature value {_number(orig)} in column {col}; "
                       "expected finite numbers")


def _all_finite(a: np.ndarray) -> bool:
    """Whether every value is finite, by two reductions instead of a boolean array as large as the
    block (NaN propagates through min/max; an infinity is the min or the max)."""
    if a.size == 0 or a.dtype.kind != "f":
        return True
    return bool(np.isfinite(a.min()) and np.isfinite(a.max()))


def _number(x) -> str:
    """A number for a message: integral values as integers, others as Python's repr (1e+300, nan)."""
    x = int(x) if isinstance(x, (int, np.integer)) else float(x)
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**63:
        return str(int(x))
    return repr(x)


def labels_from_float(values: np.ndarray, locate: Callable[[int], str]) -> np.ndarray:
    """Class ids in [0, MAX_CLASSES) from an integer or float column; NaN (floats) or -1 means
    unlabeled (OGB's papers100M convention and the store's own)."""
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":
        raise GnnprepError(f"{locate(0)}: labels of dtype {values.dtype}; expected integer class ids "
                           "(or floats with NaN for unknown)")
    if values.size == 0:
        return np.empty(0, dtype=np.int64)
    values = values.reshape(len(values), -1)
    if values.shape[1] != 1:
        raise GnnprepError(f"{locate(0)}: {values.shape[1]} label columns; expected one class id per node "
                           "(multi-task labels are not supported)")
    v = values[:, 0]
    if v.dtype.kind == "b":
        v = v.astype(np.int64)
    nan = np.isnan(v) if v.dtype.kind == "f" else None
    frac = (~nan & np.isfinite(v) & (v != np.floor(v))) if nan is not None else np.zeros(len(v), dtype=bool)
    low, high = v < -1, v >= MAX_CLASSES        # NaN compares False; +-inf falls in one of them
    bad = frac | low | high
    if bad.any():
        i = int(np.argmax(bad))
        x = _number(v[i])
        if frac[i]:
            raise GnnprepError(f"{locate(i)}: label {x} is not a class id; expected an integer or NaN")
        if low[i]:
            raise GnnprepError(f"{locate(i)}: negative label {x}; expected a class id >= 0 "
                               "(or NaN / -1 for unknown)")
        raise GnnprepError(f"{locate(i)}: label {x} is too large; expected a class id below {MAX_CLASSES} "
                           "(at most 1,000,000 classes; NaN / -1 for unknown)")
    if nan is not None:
        return np.where(nan, -1, v).astype(np.int64)
    return v.astype(np.int64)


def check_disjoint(splits: dict[str, np.ndarray], where: str) -> None:
    """Refuse a node that is in two splits (a valid or test node seen in training leaks labels).
    ``splits`` hold sorted unique ids."""
    names = [k for k in SPLIT_NAMES if k in splits] + sorted(k for k in splits if k not in SPLIT_NAMES)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = np.intersect1d(splits[a], splits[b], assume_unique=True)
            if len(both):
                raise GnnprepError(f"{where}: node {int(both[0])} is in both {a} and {b} ({len(both)} such "
                                   f"node{'s' if len(both) > 1 else ''}); expected disjoint splits")


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


SPLIT_EXTENSIONS = (".csv.gz", ".csv", ".txt", ".txt.gz", ".npy", ".tsv", ".tsv.gz")


def split_file(folder: Path, name: str) -> Path | None:
    """The one file of split ``name`` in ``folder`` (None when there is none). Two files for the same
    split (``train.csv`` beside ``train.npy``) are refused rather than one picked silently, and so is
    a name that is a folder, a pipe or a broken link: the split would otherwise be dropped without a
    word."""
    found = [folder / f"{name}{ext}" for ext in SPLIT_EXTENSIONS if os.path.lexists(folder / f"{name}{ext}")]
    if not found:
        return None
    if len(found) > 1:
        raise GnnprepError(f"{folder}: {' and '.join(p.name for p in found)} both name the {name} split; expected "
                           "one file per split (move the others away)")
    return regular_input(found[0], f"a file of {name} node ids")


def regular_input(path: Path, expected: str) -> Path:
    """``path`` when it is a regular file (through symlinks); otherwise GnnprepError saying what it is
    (a folder, a pipe, a broken link) and ``expected``."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise GnnprepError(f"{path}: is a broken link (its target does not exist); expected {expected}") from None
    except OSError as e:
        raise GnnprepError(f"{path}: cannot be read ({e.strerror or e}); expected {expected}") from None
    if not stat.S_ISREG(mode):
        raise GnnprepError(f"{path}: is {kind_of(mode)}; expected {expected}")
    return path


def read_id_file(path: Path, n: int, nodes_from: str, offset: int = 0, warn=None) -> np.ndarray:
    """Node ids from a one-column text file or a .npy array, validated, sorted and unique; ``warn``
    (a callable taking one line) is told how many ids were listed more than once."""
    from gnnprep.graph.sources.textio import TableReader

    if path.suffix == ".npy":
        if path.stat().st_size == 0:   # np.load raises EOFError, which click takes for an abort
            raise GnnprepError(f"{path}: empty file (0 bytes); expected a .npy array of node ids")
        try:
            ids = np.load(path, allow_pickle=False).reshape(-1)
        except (ValueError, EOFError, OSError) as e:
            raise GnnprepError(f"{path}: not a valid .npy array ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
                from None
        if ids.dtype.kind not in "iu":
            raise GnnprepError(f"{path}: dtype {ids.dtype}; expected integer node ids")
        check_ids(ids, n, nodes_from, lambda i: f"{path} entry {i}")
        ids = as_int64_ids(ids, lambda i: f"{path} entry {i}")
    else:
        parts = []
        for chunk in TableReader(path, "int", 1, what="node id", allow_header=False):
            ids = chunk.values[:, 0].astype(np.int64)
            check_ids(ids, n, nodes_from, lambda i, c=chunk: f"{path} line {c.line(i)}")
            parts.append(ids)
        ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    unique = np.unique(ids + offset)
    if warn is not None and len(unique) < len(ids):
        k = len(ids) - len(unique)
        warn(f"{path}: {k:,} node id{'s' if k > 1 else ''} listed more than once; each is kept once")
    return unique
