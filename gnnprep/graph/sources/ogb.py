"""OGB node-property raw layouts, read offline from disk.

- CSV layout (ogbn-arxiv, -products, -proteins; our ``sample`` and Cora): ``raw/edge.csv.gz``,
  ``raw/num-node-list.csv.gz``, ``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz``.
- Binary layout (ogbn-papers100M): ``raw/data.npz`` (edge_index [2, m], node_feat [n, d],
  num_nodes_list) and ``raw/node-label.npz`` (node_label [n, 1], NaN = unlabeled), streamed.
- Heterogeneous CSV layout (ogbn-mag): ``raw/num-node-dict.csv.gz``, ``raw/triplet-type-list.csv.gz``,
  ``raw/relations/<head>___<rel>___<tail>/edge.csv.gz``, ``raw/node-feat/<type>/...``,
  ``raw/node-label/<type>/...``. Node types are concatenated in sorted name order (as ogb does);
  global id = offset[type] + local id.

Splits live in ``split/<name>/`` (``split/<name>/<type>/`` for heterogeneous graphs); the folder is
discovered, not assumed. Edges in OGB files are (source, target): the target aggregates from the
source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.graph.sources.base import (
    SPLIT_NAMES,
    GraphSource,
    cast_features,
    check_ids,
    find_split_folders,
    labels_from_float,
    read_id_file,
    regular_input,
    split_file,
)
from gnnprep.graph.sources.npzstream import NpzReader
from gnnprep.graph.sources.textio import TableReader, block_bytes_for

# Facts from OGB's nodeproppred/master.csv: whether edges are stored once per undirected pair
# (add_inverse_edge) and the default split folder.
KNOWN = {
    "ogbn_arxiv": (True, "time"),
    "ogbn_products": (False, "sales_ranking"),
    "ogbn_proteins": (False, "species"),
    "ogbn_papers100M": (True, "time"),
    "ogbn_mag": (True, "time"),
}


def _gz(raw: Path, stem: str) -> Path | None:
    """``raw/<stem>.csv.gz`` (or ``.csv``); None when neither is there. A name that is there but not a
    file (a folder, a pipe, a broken link) is refused: the data it should hold would otherwise be
    left out without a word (a missing ``node-feat.csv.gz`` means a store without features)."""
    for name in (f"{stem}.csv.gz", f"{stem}.csv"):
        if os.path.lexists(raw / name):
            return regular_input(raw / name, f"OGB's {stem} table (a .csv.gz file)")
    return None


def absent(path: Path, lacks: str) -> str:
    """The warning for an optional OGB file or folder that is not there: the store is still written
    (a graph without labels or splits is legitimate) but lacks what it would have held."""
    return f"{path}: not there; the store has no {lacks}"


NO_LABELS = "labels (train needs them)"
NO_FEATURES = "node features (precompute needs them)"
NO_SPLITS = "splits (train needs a train and a validation split)"


def _read_count(path: Path) -> int:
    values = np.concatenate([c.values[:, 0] for c in TableReader(path, "int", 1, what="count", allow_header=False)] or [np.empty(0)])
    if len(values) != 1:
        raise GnnprepError(f"{path}: {len(values)} lines; expected exactly one count "
                           "(datasets of several graphs are not supported)")
    return int(values[0])


def _node_type_counts(p: Path) -> dict[str, int]:
    """``raw/num-node-dict.csv.gz``: a header of node types and one row of non-negative counts."""
    import pandas as pd

    try:
        df = pd.read_csv(p)
    except (ValueError, pd.errors.ParserError, EOFError, OSError) as e:
        raise GnnprepError(f"{p}: expected a header of node types and one row of counts ({e})") from None
    if len(df) != 1 or not len(df.columns):
        raise GnnprepError(f"{p}: {len(df)} rows of counts; expected a header of node types and exactly one row")
    counts = {}
    for t in df.columns:
        v = df[t].iloc[0]
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < 0:
            raise GnnprepError(f"{p}: node type {str(t)!r} has count {v}; expected a non-negative integer")
        counts[str(t)] = int(v)
    return counts


def _relations(raw: Path, node_types: list[str]) -> list[tuple[str, ...]]:
    """``raw/triplet-type-list.csv.gz``, checked against the node types and the relation folders."""
    import pandas as pd

    t = _gz(raw, "triplet-type-list")
    if t is None:
        raise GnnprepError(f"{raw}: missing triplet-type-list.csv.gz (the relation types)")
    try:
        trip = pd.read_csv(t, header=None, dtype=str).values.tolist()
    except (ValueError, pd.errors.ParserError, EOFError, OSError) as e:
        raise GnnprepError(f"{t}: cannot read relation triplets ({e})") from None
    relations = sorted(tuple(r) for r in trip)
    for r in relations:
        if len(r) != 3 or r[0] not in node_types or r[2] not in node_types:
            raise GnnprepError(f"{t}: relation {r} names unknown node types; known: {', '.join(node_types)}")
    listed = {"___".join(r) for r in relations}
    rel_dir = raw / "relations"
    for sub in sorted(rel_dir.iterdir()) if rel_dir.is_dir() else ():
        if sub.is_dir() and sub.name not in listed:
            raise GnnprepError(f"{sub}: relation not listed in {t}; expected one folder per listed relation")
    return relations


def detect_layout(folder: Path) -> str | None:
    raw = folder / "raw"
    if (raw / "data.npz").is_file():
        return "binary"
    if _gz(raw, "num-node-dict"):
        return "hetero"
    if _gz(raw, "edge"):
        return "csv"
    return None


def open_ogb_folder(folder: Path, split: str | None = None) -> GraphSource:
    layout = detect_layout(folder)
    if layout is None:
        raise GnnprepError(f"{folder}: not an OGB raw layout; expected raw/edge.csv.gz, raw/data.npz "
                           "or raw/num-node-dict.csv.gz")
    cls = {"csv": OgbCsvSource, "binary": OgbBinarySource, "hetero": OgbHeteroSource}[layout]
    return cls(folder, split)


class _OgbBase(GraphSource):
    def __init__(self, folder: Path, split: str | None):
        super().__init__(name=folder.name, path=folder)
        self.raw = folder / "raw"
        known = KNOWN.get(folder.name)
        self.stored_directed = known[0] if known else True
        self.direction_known = known is not None
        self.split_folder = self._choose_split(split, known[1] if known else None)
        self.splits_from = str(self.split_folder or "")
        if self.split_folder is None:
            self.warnings.append(absent(folder / "split", NO_SPLITS) if not (folder / "split").is_dir() else
                                 f"{folder / 'split'}: holds no train, valid or test file; the store has no {NO_SPLITS}")

    def input_files(self) -> list[Path]:
        """Every file under raw/ and split/ (not the folder's other content, such as a cached store
        under .gnnprep/ or the sample's hetero/ sub-folder)."""
        files: list[Path] = []
        for sub in ("raw", "split"):
            if (self.path / sub).is_dir():
                files += sorted(p for p in (self.path / sub).rglob("*") if p.is_file())
        return files

    def _check_edge_count(self, path: Path, count: int, declared: int | None, declared_in: Path | None) -> None:
        if declared is not None and count != declared:
            raise GnnprepError(f"{declared_in}: declares {declared} edges, but {path} holds {count}; "
                               "expected the two to agree")

    def _choose_split(self, split: str | None, default: str | None) -> Path | None:
        folders = find_split_folders(self.path)
        if isinstance(self, OgbHeteroSource):
            folders = sorted({f.parent for f in folders})
        if not folders:
            return None
        by_name = {f.relative_to(self.path / "split").parts[0]: f for f in folders}
        if split is not None:
            if split not in by_name:
                raise OptionError("--split", f"{split}: no such split in {self.path / 'split'}; "
                                             f"found {', '.join(sorted(by_name))}")
            return by_name[split]
        if len(by_name) == 1:
            return next(iter(by_name.values()))
        if default in by_name:
            return by_name[default]
        raise GnnprepError(f"{self.path / 'split'}: several splits ({', '.join(sorted(by_name))}); "
                           "choose one with --split")

    def _split_ids(self, folder: Path, n: int, nodes_from: str, offset: int = 0) -> dict[str, np.ndarray]:
        out = {}
        for name in SPLIT_NAMES:
            p = split_file(folder, name)
            if p is not None:
                out[name] = read_id_file(p, n, nodes_from, offset, self.warnings.append)
        return out

    def _csv_features(self, path: Path | None, rows_expected: int, rows_from: str) -> Iterator[np.ndarray]:
        if path is None:
            return
        rows = 0
        for chunk in TableReader(path, "float", self.num_features or None, what="feature value",
                                 allow_header=False):
            rows += len(chunk.values)
            if rows > rows_expected:
                first_extra = len(chunk.values) - (rows - rows_expected)
                raise GnnprepError(f"{path} line {chunk.line(first_extra)}: more feature rows than the "
                                   f"{rows_expected} nodes (from {rows_from})")
            yield cast_features(chunk.values, self.feature_dtype, lambda i, c=chunk: f"{path} line {c.line(i)}")
        if rows != rows_expected:
            raise GnnprepError(f"{path}: {rows} feature rows; expected {rows_expected} (from {rows_from})")

    def _csv_labels(self, path: Path | None, rows_expected: int, rows_from: str) -> Iterator[np.ndarray]:
        if path is None:
            return
        rows = 0
        # minimum=None: -1 (unknown) is allowed here; labels_from_float names any other negative
        for chunk in TableReader(path, "int", 1, what="label", allow_header=False, allow_nan=True, minimum=None):
            yield labels_from_float(chunk.values, lambda i, c=chunk: f"{path} line {c.line(i)}")
            rows += len(chunk.values)
        if rows != rows_expected:
            raise GnnprepError(f"{path}: {rows} labels; expected {rows_expected} (from {rows_from})")

    def _feature_width(self, path: Path | None) -> None:
        if path is None:
            return
        for chunk in TableReader(path, "float", None, what="feature value", allow_header=False,
                                 block_bytes=1 << 16):
            self.num_features = chunk.values.shape[1]
            return


class OgbCsvSource(_OgbBase):
    def __init__(self, folder: Path, split: str | None = None):
        super().__init__(folder, split)
        p = _gz(self.raw, "num-node-list")
        if p is None:
            raise GnnprepError(f"{self.raw}: missing num-node-list.csv.gz (the node count)")
        self.num_nodes, self.nodes_from = _read_count(p), str(p)
        e = self.edge_count_path = _gz(self.raw, "num-edge-list")
        self.expected_edges = _read_count(e) if e else None
        self.declared_edges = self.expected_edges
        self.feat_path = _gz(self.raw, "node-feat")
        self.label_path = _gz(self.raw, "node-label")
        self._feature_width(self.feat_path)
        self.features_from = str(self.feat_path or "")
        self.labels_from = str(self.label_path or "")
        if self.feat_path is None:
            self.warnings.append(absent(self.raw / "node-feat.csv.gz", NO_FEATURES))
        if self.label_path is None:
            self.warnings.append(absent(self.raw / "node-label.csv.gz", NO_LABELS))

    def edges(self, chunk_edges: int):
        path = _gz(self.raw, "edge")
        count = 0
        for chunk in TableReader(path, "int", 2, what="node id", allow_header=False,
                                 block_bytes=block_bytes_for(chunk_edges)):
            v = chunk.values
            for col in (0, 1):
                check_ids(v[:, col], self.num_nodes, self.nodes_from, lambda i, c=chunk: f"{path} line {c.line(i)}")
            count += len(v)
            yield v[:, 0].copy(), v[:, 1].copy()
        self._check_edge_count(path, count, self.declared_edges, self.edge_count_path)

    def features(self, chunk_rows: int):
        return self._csv_features(self.feat_path, self.num_nodes, self.nodes_from)

    def labels(self, chunk_rows: int):
        return self._csv_labels(self.label_path, self.num_nodes, self.nodes_from)

    def splits(self):
        if self.split_folder is None:
            return {}
        return self._split_ids(self.split_folder, self.num_nodes, self.nodes_from)


class OgbBinarySource(_OgbBase):
    rereadable = True   # edge_index is read from data.npz in binary chunks

    def __init__(self, folder: Path, split: str | None = None):
        super().__init__(folder, split)
        self.npz = NpzReader(self.raw / "data.npz")
        counts = self.npz.load_small("num_nodes_list").reshape(-1)
        if len(counts) != 1:
            raise GnnprepError(f"{self.npz.path}: num_nodes_list has {len(counts)} entries; expected one graph")
        self.num_nodes, self.nodes_from = int(counts[0]), f"{self.npz.path} num_nodes_list"
        ei = self.npz.require("edge_index").shape
        self.expected_edges = ei[1] if len(ei) == 2 and ei[0] == 2 else None
        if "num_edges_list" in self.npz.members and self.expected_edges is not None:
            declared = self.npz.load_small("num_edges_list").reshape(-1)
            if len(declared) != 1 or int(declared[0]) != self.expected_edges:
                raise GnnprepError(f"{self.npz.path}: num_edges_list is {declared.tolist()}; expected "
                                   f"[{self.expected_edges}] (the columns of edge_index)")
        if "node_feat" in self.npz.members:
            info = self.npz.members["node_feat"]
            if len(info.shape) != 2:
                raise GnnprepError(f"{self.npz.path}: node_feat has shape {info.shape}; expected [n, d]")
            if info.shape[0] != self.num_nodes:
                raise GnnprepError(f"{self.npz.path}: node_feat has {info.shape[0]} rows; expected "
                                   f"{self.num_nodes} (from num_nodes_list)")
            self.num_features = info.shape[1]
            self.feature_dtype = np.dtype(np.float16 if info.dtype == np.float16 else np.float32)
            self.features_from = f"{self.npz.path} node_feat"
        else:
            self.warnings.append(f"{self.npz.path}: holds no node_feat; the store has no {NO_FEATURES}")
        self.label_path = self.raw / "node-label.npz"
        labeled = os.path.lexists(self.label_path) and regular_input(self.label_path, "the node labels (a .npz file)")
        self.labels_from = str(self.label_path) if labeled else ""
        if not labeled:
            self.warnings.append(absent(self.label_path, NO_LABELS))

    def edges(self, chunk_edges: int):
        done = 0
        for src, dst in self.npz.iter_edge_pairs("edge_index", chunk_edges, reuse=True):
            for ids in (src, dst):
                check_ids(ids, self.num_nodes, self.nodes_from,
                          lambda i, d=done: f"{self.npz.path} edge_index column {d + i}")
            done += len(src)
            yield src, dst

    def features(self, chunk_rows: int):
        if not self.num_features:
            return
        start = 0
        for block in self.npz.iter_rows("node_feat", chunk_rows, reuse=True):
            yield cast_features(block, self.feature_dtype, lambda i, s=start: f"{self.npz.path} node_feat row {s + i}")
            start += len(block)

    def labels(self, chunk_rows: int):
        if not self.labels_from:
            return
        from gnnprep.graph.sources.edgelist import npz_member

        with NpzReader(self.label_path) as z:
            key = npz_member(z, ("node_label",), "node labels")
            rows = z.members[key].shape[0] if z.members[key].shape else 0
            if rows != self.num_nodes:
                raise GnnprepError(f"{self.label_path}: {key} has {rows} rows; expected {self.num_nodes} "
                                   f"(from {self.nodes_from})")
            start = 0
            for block in z.iter_rows(key, chunk_rows):
                yield labels_from_float(block, lambda i, s=start: f"{self.label_path} {key} row {s + i}")
                start += len(block)

    def splits(self):
        if self.split_folder is None:
            return {}
        return self._split_ids(self.split_folder, self.num_nodes, self.nodes_from)


class OgbHeteroSource(_OgbBase):
    def __init__(self, folder: Path, split: str | None = None):
        super().__init__(folder, split)
        p = _gz(self.raw, "num-node-dict")
        counts = _node_type_counts(p)
        self.node_types = sorted(counts)
        self.type_counts = [counts[t] for t in self.node_types]
        self.offsets = np.concatenate([[0], np.cumsum(self.type_counts)]).astype(np.int64)
        self.num_nodes, self.nodes_from = int(self.offsets[-1]), str(p)
        self.relations = _relations(self.raw, self.node_types)
        self.rel_edges: dict[tuple, tuple[int | None, Path | None]] = {}
        for r in self.relations:
            e = _gz(self.raw / "relations" / "___".join(r), "num-edge-list")
            self.rel_edges[r] = (_read_count(e) if e else None, e)
        self.expected_edges = sum(c or 0 for c, _ in self.rel_edges.values())
        for folder_of_types in (self.raw / "node-feat", self.raw / "node-label", self.split_folder):
            self._refuse_unknown_types(folder_of_types)
        self.feat_paths = {ty: _gz(self.raw / "node-feat" / ty, "node-feat") for ty in self.node_types}
        self.label_paths = {ty: _gz(self.raw / "node-label" / ty, "node-label") for ty in self.node_types}
        for ty in self.node_types:
            if self.feat_paths[ty] is not None:
                w = self.num_features
                self._feature_width(self.feat_paths[ty])
                if w and w != self.num_features:
                    raise GnnprepError(f"{self.feat_paths[ty]}: {self.num_features} feature columns; expected {w} "
                                       "like the other node types")
        self.features_from = ", ".join(str(p) for p in self.feat_paths.values() if p)
        self.labels_from = ", ".join(str(p) for p in self.label_paths.values() if p)
        missing = [ty for ty in self.node_types if self.feat_paths[ty] is None]
        if missing and self.num_features:
            self.warnings.append(f"{folder}: node types without features ({', '.join(missing)}) get zero rows")
        if not self.features_from:
            self.warnings.append(f"{self.raw / 'node-feat'}: no node type's node-feat.csv.gz there; the store has no "
                                 f"{NO_FEATURES}")
        if not self.labels_from:
            self.warnings.append(f"{self.raw / 'node-label'}: no node type's node-label.csv.gz there; the store has "
                                 f"no {NO_LABELS}")

    def _refuse_unknown_types(self, folder: Path | None) -> None:
        """A per-type folder (features, labels, split) for a type num-node-dict does not list would
        otherwise be dropped without a word."""
        if folder is None or not folder.is_dir():
            return
        for sub in sorted(folder.iterdir()):
            if sub.is_dir() and sub.name not in self.node_types:
                raise GnnprepError(f"{sub}: node type {sub.name!r} is not in {self.nodes_from} "
                                   f"({', '.join(self.node_types)}); expected folders of known node types only")

    def _type(self, ty: str) -> int:
        return self.node_types.index(ty)

    def edges(self, chunk_edges: int):
        for head, rel, tail in self.relations:
            folder = self.raw / "relations" / f"{head}___{rel}___{tail}"
            path = _gz(folder, "edge")
            if path is None:
                raise GnnprepError(f"{folder}: missing edge.csv.gz")
            h, t = self._type(head), self._type(tail)
            count = 0
            for chunk in TableReader(path, "int", 2, what="node id", allow_header=False,
                                     block_bytes=block_bytes_for(chunk_edges)):
                v = chunk.values
                check_ids(v[:, 0], self.type_counts[h], f"{self.nodes_from} ({head})",
                          lambda i, c=chunk: f"{path} line {c.line(i)}")
                check_ids(v[:, 1], self.type_counts[t], f"{self.nodes_from} ({tail})",
                          lambda i, c=chunk: f"{path} line {c.line(i)}")
                count += len(v)
                yield v[:, 0] + self.offsets[h], v[:, 1] + self.offsets[t]
            self._check_edge_count(path, count, *self.rel_edges[(head, rel, tail)])

    def features(self, chunk_rows: int):
        if not self.num_features:
            return
        for i, ty in enumerate(self.node_types):
            count = self.type_counts[i]
            if self.feat_paths[ty] is None:
                for s in range(0, count, chunk_rows):
                    yield np.zeros((min(chunk_rows, count - s), self.num_features), self.feature_dtype)
            else:
                yield from self._csv_features(self.feat_paths[ty], count, f"{self.nodes_from} ({ty})")

    def labels(self, chunk_rows: int):
        if not any(self.label_paths.values()):
            return
        for i, ty in enumerate(self.node_types):
            count = self.type_counts[i]
            if self.label_paths[ty] is None:
                for s in range(0, count, chunk_rows):
                    yield np.full(min(chunk_rows, count - s), -1, dtype=np.int64)
            else:
                yield from self._csv_labels(self.label_paths[ty], count, f"{self.nodes_from} ({ty})")

    def node_type_ids(self, chunk_rows: int):
        for i, count in enumerate(self.type_counts):
            for s in range(0, count, chunk_rows):
                yield np.full(min(chunk_rows, count - s), i, dtype=np.int16)

    def splits(self):
        if self.split_folder is None:
            return {}
        out: dict[str, list[np.ndarray]] = {}
        for i, ty in enumerate(self.node_types):
            folder = self.split_folder / ty
            if folder.is_dir():
                for name, ids in self._split_ids(folder, self.type_counts[i], f"{self.nodes_from} ({ty})",
                                                 int(self.offsets[i])).items():
                    out.setdefault(name, []).append(ids)
        return {k: np.unique(np.concatenate(v)) for k, v in out.items()}

    def extra_attrs(self) -> dict:
        return {
            "node_types": json.dumps(self.node_types),
            "node_type_offsets": json.dumps([int(x) for x in self.offsets]),
            "relations": json.dumps(["___".join(r) for r in self.relations]),
        }
