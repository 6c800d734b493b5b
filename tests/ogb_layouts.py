"""Tiny, seeded dataset folders in the exact raw on-disk layouts of the OGB node-property datasets.

Each ``make_*_like(root, ...)`` writes ``root/<dir_name>/`` -- ``dir_name`` being the folder name
``ogb.nodeproppred.NodePropPredDataset`` uses (the dataset name with ``-`` replaced by ``_``) -- and
returns the ground truth it wrote. The layouts follow what ogb 1.3.6 reads
(``ogb/nodeproppred/dataset.py``, ``ogb/io/read_graph_raw.py``, ``ogb/nodeproppred/master.csv``)
and the file trees of the released zips:

========================  =================  ======================================================
function                  mirrors            layout
========================  =================  ======================================================
make_arxiv_like           ogbn-arxiv  (v1)   CSV, directed edges stored once, ``raw/node_year``,
                                             ``split/time``
make_products_like        ogbn-products (v1) CSV, undirected pairs stored once (ogb adds the
                                             inverses), ``split/sales_ranking``
make_papers100m_like      ogbn-papers100M    binary: ``raw/data.npz`` + ``raw/node-label.npz``
                          (v1)               (NaN = unlabeled), ``split/time``
make_mag_like             ogbn-mag (v2)      heterogeneous CSV: ``raw/num-node-dict``,
                                             ``raw/triplet-type-list``, ``raw/relations/...``,
                                             ``raw/node-feat/paper/...``, ``split/time/paper``
========================  =================  ======================================================

``load_with_ogb(root, name)`` loads such a folder with the real ``NodePropPredDataset``, strictly
offline (no PyPI version check, no download, no prompt), from a temporary copy so the fixture
folder itself is never modified.

CSV feature values are multiples of 1/64 in [-2, 2), written with six decimals (e.g.
``-0.015625``): exactly representable in float32, float64 and decimal, so any reader that parses
them gets bit-identical float32 values.

This is a plain helper module (no tests in it); ``tests/`` must be on ``sys.path``.
"""

from __future__ import annotations

import builtins
import contextlib
import gzip
import io
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

# ogb/__init__.py starts a thread that asks PyPI (via the ``outdated`` package) whether ogb is
# current, unless ``from outdated import check_outdated`` raises ImportError. A ``None`` entry in
# sys.modules makes that import fail. Only effective if ogb has not been imported yet.
if "ogb" not in sys.modules:
    sys.modules["outdated"] = None  # type: ignore[assignment]

__all__ = [
    "Truth", "MagTruth", "MAG_NODE_TYPES", "MAG_RELATIONS",
    "make_arxiv_like", "make_products_like", "make_papers100m_like", "make_mag_like",
    "load_with_ogb", "ogb_offline",
]

SPLITS = ("train", "valid", "test")

#: ogbn-mag node types, in the order of the real ``num-node-dict.csv.gz`` header (== sorted order,
#: which is also the order ogb and our ingest concatenate them in).
MAG_NODE_TYPES: List[str] = ["author", "field_of_study", "institution", "paper"]
#: ogbn-mag relations, in the order of the real ``triplet-type-list.csv.gz`` (== sorted order).
MAG_RELATIONS: List[Tuple[str, str, str]] = [
    ("author", "affiliated_with", "institution"),
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "has_topic", "field_of_study"),
]


# ----------------------------------------------------------------------------------------------
# Ground truth
# ----------------------------------------------------------------------------------------------

@dataclass
class Truth:
    """What a homogeneous fixture folder holds (arxiv / products / papers100M).

    ``edge_index`` is exactly what was written, one column per stored line/column (so for
    products each undirected pair appears once; ogb returns it with inverses interleaved).
    ``labels`` is flat ``(n,)`` int64 with -1 for unlabeled nodes (ogb itself returns ``(n, 1)``).
    ``split`` ids are in the order written to the split files.
    ``stored_directed`` is True when each stored edge is one directed edge (arxiv, papers100M) and
    False when each stored edge is one undirected pair (products: master.csv add_inverse_edge).
    ``quirks`` names the deliberate oddities written: ``isolated`` nodes (no edge at all),
    ``self_loops`` (edge columns), ``duplicates`` (edge columns repeating an earlier column),
    ``reciprocal`` (pairs (u, v) stored in both directions).
    """

    name: str                       # OGB name, e.g. "ogbn-arxiv"
    dir_name: str                   # folder under root, e.g. "ogbn_arxiv"
    path: Path                      # root / dir_name
    num_nodes: int
    edge_index: np.ndarray          # (2, m) int64, as written
    node_feat: np.ndarray           # (n, d) float32
    labels: np.ndarray              # (n,) int64, -1 = unknown
    split: Dict[str, np.ndarray]    # {"train", "valid", "test"} -> int64 node ids
    split_name: str                 # folder under split/, e.g. "time"
    num_classes: int
    stored_directed: bool
    node_year: Optional[np.ndarray] = None   # (n,) int64 when the dataset has node_year
    quirks: Dict[str, object] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


@dataclass
class MagTruth:
    """What an ogbn-mag-like fixture folder holds.

    Per-type ids are local (0 .. count-1), as in the files. ``node_types`` / ``relations`` are in
    the order written (which is sorted order, like the real files and like ogb's own ordering).
    Only ``paper`` nodes have features, years, labels and split ids (as in ogbn-mag).
    The ``offsets`` / ``global_*`` helpers give the homogeneous view that concatenates node types
    in sorted name order (global id = offsets[type] + local id).
    """

    name: str
    dir_name: str
    path: Path
    node_types: List[str]
    num_nodes_dict: Dict[str, int]
    relations: List[Tuple[str, str, str]]
    edge_index_dict: Dict[Tuple[str, str, str], np.ndarray]   # triplet -> (2, m) int64 local ids
    edge_reltype_dict: Dict[Tuple[str, str, str], np.ndarray]  # triplet -> (m,) int64
    node_feat: np.ndarray           # paper features (n_paper, d) float32
    labels: np.ndarray              # paper labels (n_paper,) int64 (all known, as in ogbn-mag)
    split: Dict[str, np.ndarray]    # paper-local ids
    node_year: np.ndarray           # paper years (n_paper,) int64
    num_classes: int
    split_name: str = "time"
    labeled_type: str = "paper"

    @property
    def num_nodes(self) -> int:
        return int(sum(self.num_nodes_dict.values()))

    @property
    def offsets(self) -> Dict[str, int]:
        out, acc = {}, 0
        for ty in sorted(self.num_nodes_dict):
            out[ty] = acc
            acc += self.num_nodes_dict[ty]
        return out

    @property
    def node_feat_dict(self) -> Dict[str, np.ndarray]:
        return {"paper": self.node_feat}

    def global_edge_index(self) -> np.ndarray:
        """(2, M) int64: all relations in sorted order, ids shifted by the type offsets."""
        off = self.offsets
        parts = [self.edge_index_dict[r] + np.array([[off[r[0]]], [off[r[2]]]], dtype=np.int64)
                 for r in sorted(self.edge_index_dict)]
        return np.concatenate(parts, axis=1) if parts else np.empty((2, 0), np.int64)

    def global_labels(self) -> np.ndarray:
        """(N,) int64: paper labels at their global ids, -1 for every other node type."""
        y = np.full(self.num_nodes, -1, dtype=np.int64)
        o = self.offsets["paper"]
        y[o:o + len(self.labels)] = self.labels
        return y

    def global_split(self) -> Dict[str, np.ndarray]:
        o = self.offsets["paper"]
        return {k: v + o for k, v in self.split.items()}


# ----------------------------------------------------------------------------------------------
# Writers (all small; gzip with mtime=0 so equal content gives equal bytes)
# ----------------------------------------------------------------------------------------------

def _write_gz_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.encode("ascii"))


def _lines(rows) -> str:
    return "".join(",".join(r) + "\n" for r in rows)


def _write_int_csv(path: Path, a: np.ndarray) -> None:
    """No header; one row per line (a 1-D array is one value per line)."""
    a = np.asarray(a, dtype=np.int64)
    if a.ndim == 1:
        a = a[:, None]
    _write_gz_text(path, _lines([str(int(v)) for v in row] for row in a))


def _write_float_csv(path: Path, a: np.ndarray) -> None:
    a = np.asarray(a, dtype=np.float64)
    _write_gz_text(path, _lines(["%.6f" % v for v in row] for row in a))


def _write_header_csv(path: Path, header: List[str], row: List[str]) -> None:
    """A pandas-style ``to_csv(index=False)`` file: header line, one value line."""
    _write_gz_text(path, _lines([header, row]))


def _write_release(folder: Path, version: int) -> None:
    (folder / f"RELEASE_v{version}.txt").write_text(
        f"This is version {version} of the dataset (tiny synthetic fixture in the OGB layout).\n")


def _prepare(root, dir_name: str) -> Path:
    folder = Path(root) / dir_name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "raw").mkdir(parents=True)
    return folder


# ----------------------------------------------------------------------------------------------
# Random content
# ----------------------------------------------------------------------------------------------

def _dyadic_features(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """float32 multiples of 1/64 in [-2, 2): exact in text with 6 decimals."""
    return (rng.integers(-128, 128, size=(n, d)) / 64.0).astype(np.float32)


def _directed_edges(rng: np.random.Generator, n: int, m: int):
    """m directed edge columns with quirks: 1 self-loop, 3 duplicates, 2 reciprocal pairs, and one
    isolated node. Returns (edge_index (2, m) int64, quirks dict)."""
    if n < 4 or m < 10:
        raise ValueError("need n >= 4 and m >= 10")
    isolated = int(rng.integers(n))
    others = np.array([v for v in range(n) if v != isolated], dtype=np.int64)
    nb = m - 6
    src = rng.choice(others, nb)
    dst = rng.choice(others, nb)
    same = src == dst
    while same.any():
        dst[same] = rng.choice(others, int(same.sum()))
        same = src == dst
    base = np.stack([src, dst])
    loop_node = int(rng.choice(others))
    loop = np.array([[loop_node], [loop_node]], dtype=np.int64)
    dup = base[:, rng.choice(nb, 3, replace=False)]
    recip_src = base[:, rng.choice(nb, 2, replace=False)]
    recip = recip_src[::-1].copy()
    ei = np.concatenate([base, loop, dup, recip], axis=1)
    order = rng.permutation(m)
    ei = np.ascontiguousarray(ei[:, order]).astype(np.int64)
    quirks = {
        "isolated": [isolated],
        "self_loops": [(loop_node, loop_node)],
        "duplicates": [tuple(map(int, c)) for c in dup.T],
        "reciprocal": [tuple(map(int, c)) for c in recip_src.T],
    }
    return ei, quirks


def _undirected_pairs(rng: np.random.Generator, n: int, m: int, isolated_count: int = 1):
    """m distinct unordered pairs (no self-loops), each stored once in a random orientation."""
    isolated = sorted(int(v) for v in rng.choice(n, isolated_count, replace=False))
    others = np.array([v for v in range(n) if v not in isolated], dtype=np.int64)
    k = len(others)
    if m > k * (k - 1) // 2:
        raise ValueError(f"m={m} exceeds the {k * (k - 1) // 2} possible pairs")
    seen, cols = set(), []
    while len(cols) < m:
        u, v = (int(x) for x in rng.choice(others, 2, replace=False))
        key = (min(u, v), max(u, v))
        if key not in seen:
            seen.add(key)
            cols.append((u, v))
    ei = np.array(cols, dtype=np.int64).T.copy()
    return ei, {"isolated": isolated, "self_loops": [], "duplicates": [], "reciprocal": []}


def _time_years_and_split(rng: np.random.Generator, ids: np.ndarray, frac=(0.6, 0.2)):
    """OGB 'time' split: train = year <= 2017, valid = 2018, test = 2019 (ids ascending).

    Returns (years for ``ids``, split dict of ids). Every part is non-empty when len(ids) >= 3."""
    k = len(ids)
    n_train = max(1, int(round(frac[0] * k)))
    n_valid = max(1, int(round(frac[1] * k)))
    n_train = min(n_train, k - 2)
    perm = rng.permutation(k)
    years = np.empty(k, dtype=np.int64)
    years[perm[:n_train]] = rng.integers(1990, 2018, n_train)
    years[perm[n_train:n_train + n_valid]] = 2018
    years[perm[n_train + n_valid:]] = 2019
    split = {
        "train": np.sort(ids[years <= 2017]).astype(np.int64),
        "valid": np.sort(ids[years == 2018]).astype(np.int64),
        "test": np.sort(ids[years == 2019]).astype(np.int64),
    }
    return years, split


def _write_split(folder: Path, split: Dict[str, np.ndarray]) -> None:
    for k in SPLITS:
        _write_int_csv(folder / f"{k}.csv.gz", split[k])


# ----------------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------------

def make_arxiv_like(root, n: int = 60, m: int = 200, d: int = 8, seed: int = 0,
                    num_classes: int = 40) -> Truth:
    """Mirror the raw layout of **ogbn-arxiv** (CSV, version 1) under ``root/ogbn_arxiv/``::

        RELEASE_v1.txt
        raw/edge.csv.gz           m lines "src,dst" -- directed citations, each stored once
        raw/num-node-list.csv.gz  one line: n
        raw/num-edge-list.csv.gz  one line: m
        raw/node-feat.csv.gz      n lines of d floats
        raw/node-label.csv.gz     n lines: class id (every node labeled, as in arxiv)
        raw/node_year.csv.gz      n lines: year (ogb reads it: master.csv "additional node files")
        split/time/{train,valid,test}.csv.gz   node ids, one per line (year <=2017 / 2018 / 2019)

    master.csv has ``add_inverse_edge=False`` for arxiv, so ogb returns ``edge_index`` as written.
    The edges include 3 duplicate columns, 1 self-loop, 2 pairs stored in both directions and one
    isolated node (see ``Truth.quirks``).
    """
    rng = np.random.default_rng(seed)
    folder = _prepare(root, "ogbn_arxiv")
    ei, quirks = _directed_edges(rng, n, m)
    x = _dyadic_features(rng, n, d)
    y = rng.integers(0, num_classes, n).astype(np.int64)
    years, split = _time_years_and_split(rng, np.arange(n, dtype=np.int64))
    raw = folder / "raw"
    _write_int_csv(raw / "edge.csv.gz", ei.T)
    _write_int_csv(raw / "num-node-list.csv.gz", [n])
    _write_int_csv(raw / "num-edge-list.csv.gz", [ei.shape[1]])
    _write_float_csv(raw / "node-feat.csv.gz", x)
    _write_int_csv(raw / "node-label.csv.gz", y)
    _write_int_csv(raw / "node_year.csv.gz", years)
    _write_split(folder / "split" / "time", split)
    _write_release(folder, 1)
    return Truth(name="ogbn-arxiv", dir_name="ogbn_arxiv", path=folder, num_nodes=n, edge_index=ei,
                 node_feat=x, labels=y, split=split, split_name="time", num_classes=num_classes,
                 stored_directed=True, node_year=years, quirks=quirks)


def make_products_like(root, n: int = 80, m: int = 200, d: int = 10, seed: int = 0,
                       num_classes: int = 47) -> Truth:
    """Mirror the raw layout of **ogbn-products** (CSV, version 1) under ``root/ogbn_products/``::

        RELEASE_v1.txt
        raw/edge.csv.gz           m lines "u,v" -- each undirected co-purchase pair stored ONCE
        raw/num-node-list.csv.gz  one line: n
        raw/num-edge-list.csv.gz  one line: m
        raw/node-feat.csv.gz      n lines of d floats
        raw/node-label.csv.gz     n lines: class id (every node labeled)
        split/sales_ranking/{train,valid,test}.csv.gz   node ids in "sales rank" (random) order

    master.csv has ``add_inverse_edge=True``: ogb returns 2m columns, each stored (u, v) followed by
    (v, u). No node_year file (products has none). Pairs are distinct, no self-loops, one isolated
    node.
    """
    rng = np.random.default_rng(seed)
    folder = _prepare(root, "ogbn_products")
    ei, quirks = _undirected_pairs(rng, n, m)
    x = _dyadic_features(rng, n, d)
    y = rng.integers(0, num_classes, n).astype(np.int64)
    perm = rng.permutation(n).astype(np.int64)
    n_train, n_valid = max(1, n // 4), max(1, n // 10)
    split = {"train": perm[:n_train], "valid": perm[n_train:n_train + n_valid],
             "test": perm[n_train + n_valid:]}
    raw = folder / "raw"
    _write_int_csv(raw / "edge.csv.gz", ei.T)
    _write_int_csv(raw / "num-node-list.csv.gz", [n])
    _write_int_csv(raw / "num-edge-list.csv.gz", [m])
    _write_float_csv(raw / "node-feat.csv.gz", x)
    _write_int_csv(raw / "node-label.csv.gz", y)
    _write_split(folder / "split" / "sales_ranking", split)
    _write_release(folder, 1)
    return Truth(name="ogbn-products", dir_name="ogbn_products", path=folder, num_nodes=n,
                 edge_index=ei, node_feat=x, labels=y, split=split, split_name="sales_ranking",
                 num_classes=num_classes, stored_directed=False, node_year=None, quirks=quirks)


def make_papers100m_like(root, n: int = 100, m: int = 300, d: int = 8, seed: int = 0,
                         num_classes: int = 172, labeled_fraction: float = 0.4,
                         label_dtype=np.float64) -> Truth:
    """Mirror the raw layout of **ogbn-papers100M** (binary, version 1) under
    ``root/ogbn_papers100M/``::

        RELEASE_v1.txt
        raw/data.npz        np.savez_compressed (DEFLATE members) with
                              edge_index     [2, m] int64   directed citations, stored once
                              node_feat      [n, d] float32
                              node_year      [n, 1] int64
                              num_nodes_list [1] int64 = [n]
                              num_edges_list [1] int64 = [m]
        raw/node-label.npz  key "node_label": [n, 1] float (``label_dtype``), NaN = unlabeled
        split/time/{train,valid,test}.csv.gz   labeled node ids only (unlabeled nodes are in no
                                               split, as in papers100M)

    ogb reads it with ``read_binary_graph_raw`` (add_inverse_edge=False). Same edge quirks as
    ``make_arxiv_like``. Features are arbitrary float32 (binary, so no text round-trip).
    """
    rng = np.random.default_rng(seed)
    folder = _prepare(root, "ogbn_papers100M")
    ei, quirks = _directed_edges(rng, n, m)
    x = rng.standard_normal((n, d)).astype(np.float32)
    k = max(3, int(round(labeled_fraction * n)))
    labeled = np.sort(rng.choice(n, k, replace=False)).astype(np.int64)
    y = np.full(n, -1, dtype=np.int64)
    y[labeled] = rng.integers(0, num_classes, k)
    years = rng.integers(1990, 2018, n).astype(np.int64)   # unlabeled papers: any year
    lab_years, split = _time_years_and_split(rng, labeled)
    years[labeled] = lab_years
    raw = folder / "raw"
    np.savez_compressed(raw / "data.npz", edge_index=ei, node_feat=x, node_year=years[:, None],
                        num_nodes_list=np.array([n], dtype=np.int64),
                        num_edges_list=np.array([m], dtype=np.int64))
    node_label = np.where(y >= 0, y, np.nan).astype(label_dtype)[:, None]
    np.savez_compressed(raw / "node-label.npz", node_label=node_label)
    _write_split(folder / "split" / "time", split)
    _write_release(folder, 1)
    quirks["unlabeled"] = int(n - k)
    return Truth(name="ogbn-papers100M", dir_name="ogbn_papers100M", path=folder, num_nodes=n,
                 edge_index=ei, node_feat=x, labels=y, split=split, split_name="time",
                 num_classes=num_classes, stored_directed=True, node_year=years, quirks=quirks)


def make_mag_like(root, n_paper: int = 40, n_author: int = 30, n_institution: int = 6,
                  n_field_of_study: int = 20, d: int = 8, seed: int = 0,
                  num_classes: int = 349) -> MagTruth:
    """Mirror the raw layout of **ogbn-mag** (heterogeneous CSV, version 2) under
    ``root/ogbn_mag/``::

        RELEASE_v2.txt
        raw/num-node-dict.csv.gz         header "author,field_of_study,institution,paper",
                                         one line of counts
        raw/triplet-type-list.csv.gz     no header; lines "head,relation,tail"
        raw/relations/<head>___<rel>___<tail>/edge.csv.gz          "head_id,tail_id" (local ids)
        raw/relations/<head>___<rel>___<tail>/num-edge-list.csv.gz one line: m_rel
        raw/relations/<head>___<rel>___<tail>/edge_reltype.csv.gz  m_rel lines: relation index
        raw/node-feat/paper/node-feat.csv.gz   n_paper lines of d floats (papers only)
        raw/node-feat/paper/node_year.csv.gz   n_paper lines: year (this is where ogb and the
                                               real zip keep it: ``node-feat/<type>/node_year``)
        raw/nodetype-has-feat.csv.gz     header of types, one line False/True (paper only)
        raw/nodetype-has-label.csv.gz    header of types, one line False/True (paper only)
        raw/node-label/paper/node-label.csv.gz  n_paper lines: venue class id
        split/time/nodetype-has-split.csv.gz    header of types, one line False/True
        split/time/paper/{train,valid,test}.csv.gz  paper-local ids (year <=2017 / 2018 / 2019)

    Relations: author-affiliated_with-institution, author-writes-paper, paper-cites-paper,
    paper-has_topic-field_of_study (all stored directed once; master.csv add_inverse_edge=False).
    ``edge_reltype`` is the relation's index in sorted triplet order (0..3). Edges within a
    relation are distinct; cites has no self-loops.
    """
    rng = np.random.default_rng(seed)
    folder = _prepare(root, "ogbn_mag")
    counts = {"author": n_author, "field_of_study": n_field_of_study,
              "institution": n_institution, "paper": n_paper}
    targets = {
        ("author", "affiliated_with", "institution"): n_author,
        ("author", "writes", "paper"): 2 * n_paper,
        ("paper", "cites", "paper"): 3 * n_paper,
        ("paper", "has_topic", "field_of_study"): 2 * n_paper,
    }
    edge_index_dict, reltype_dict = {}, {}
    for r_id, rel in enumerate(MAG_RELATIONS):
        head, _, tail = rel
        nh, nt = counts[head], counts[tail]
        want = min(targets[rel], nh * nt - (nh if head == tail else 0))
        seen, cols = set(), []
        while len(cols) < want:
            u, v = int(rng.integers(nh)), int(rng.integers(nt))
            if (head == tail and u == v) or (u, v) in seen:
                continue
            seen.add((u, v))
            cols.append((u, v))
        edge_index_dict[rel] = np.array(cols, dtype=np.int64).reshape(-1, 2).T.copy()
        reltype_dict[rel] = np.full(len(cols), r_id, dtype=np.int64)
    x = _dyadic_features(rng, n_paper, d)
    y = rng.integers(0, num_classes, n_paper).astype(np.int64)
    years, split = _time_years_and_split(rng, np.arange(n_paper, dtype=np.int64))

    raw = folder / "raw"
    _write_header_csv(raw / "num-node-dict.csv.gz", MAG_NODE_TYPES,
                      [str(counts[t]) for t in MAG_NODE_TYPES])
    _write_gz_text(raw / "triplet-type-list.csv.gz", _lines(list(r) for r in MAG_RELATIONS))
    for rel in MAG_RELATIONS:
        sub = raw / "relations" / "___".join(rel)
        _write_int_csv(sub / "edge.csv.gz", edge_index_dict[rel].T)
        _write_int_csv(sub / "num-edge-list.csv.gz", [edge_index_dict[rel].shape[1]])
        _write_int_csv(sub / "edge_reltype.csv.gz", reltype_dict[rel])
    _write_float_csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", x)
    _write_int_csv(raw / "node-feat" / "paper" / "node_year.csv.gz", years)
    flags = [str(t == "paper") for t in MAG_NODE_TYPES]
    _write_header_csv(raw / "nodetype-has-feat.csv.gz", MAG_NODE_TYPES, flags)
    _write_header_csv(raw / "nodetype-has-label.csv.gz", MAG_NODE_TYPES, flags)
    _write_int_csv(raw / "node-label" / "paper" / "node-label.csv.gz", y)
    split_dir = folder / "split" / "time"
    _write_header_csv(split_dir / "nodetype-has-split.csv.gz", MAG_NODE_TYPES, flags)
    _write_split(split_dir / "paper", split)
    _write_release(folder, 2)
    return MagTruth(name="ogbn-mag", dir_name="ogbn_mag", path=folder,
                    node_types=list(MAG_NODE_TYPES), num_nodes_dict=counts,
                    relations=list(MAG_RELATIONS), edge_index_dict=edge_index_dict,
                    edge_reltype_dict=reltype_dict, node_feat=x, labels=y, split=split,
                    node_year=years, num_classes=num_classes)


# ----------------------------------------------------------------------------------------------
# Loading with the real ogb, offline
# ----------------------------------------------------------------------------------------------

class OgbWouldGoOnline(RuntimeError):
    """ogb tried to download or to prompt: the fixture layout is not what it expects."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise OgbWouldGoOnline(f"ogb called {what}{args!r}: the fixture folder is missing a file "
                               "ogb needs (it would download the real dataset)")
    return refuse


@contextlib.contextmanager
def ogb_offline():
    """Import ogb without its PyPI check; while active, downloads and ``input()`` raise.

    Yields the ``NodePropPredDataset`` class. ogb's prints (stdout) and tqdm bars (stderr) are
    captured and echoed to stderr only if the block raises.
    """
    from unittest import mock

    if "ogb" not in sys.modules:
        sys.modules["outdated"] = None  # type: ignore[assignment]
    import ogb.io.read_graph_raw as ogb_read
    import ogb.nodeproppred.dataset as ogb_ds
    import ogb.utils.url as ogb_url

    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        for mod in (ogb_url, ogb_ds, ogb_read):
            for fn in ("decide_download", "download_url", "extract_zip"):
                if hasattr(mod, fn):
                    stack.enter_context(mock.patch.object(mod, fn, _refuse(f"{mod.__name__}.{fn}")))
        stack.enter_context(mock.patch.object(builtins, "input", _refuse("input")))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                yield ogb_ds.NodePropPredDataset
        except BaseException:
            sys.stderr.write(out.getvalue() + err.getvalue())
            raise


def load_with_ogb(root, name: str, workdir=None):
    """Load ``root/<dir_name>`` with ``ogb.nodeproppred.NodePropPredDataset(name, root=...)``.

    ``name`` is the OGB name ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-mag").
    The folder is copied into a temporary directory (under ``workdir`` if given), any
    ``processed/`` there is replaced by an empty one (so ogb parses the raw files and has somewhere
    to save), and ogb runs under :func:`ogb_offline`. The copy is deleted afterwards; the fixture
    folder is never touched.

    Returns ``(graph, labels, split)`` exactly as ogb gives them: ``graph`` the dict from
    ``dataset[0][0]`` (homogeneous: edge_index, edge_feat, node_feat, num_nodes, node_year...;
    mag: edge_index_dict, num_nodes_dict, node_feat_dict, node_year, edge_reltype...), ``labels``
    (``(n, 1)`` array, or ``{"paper": (n_paper, 1)}`` for mag) and ``split``
    (``get_idx_split()``: {"train", "valid", "test"} -> ids, or -> {"paper": ids} for mag).
    """
    dir_name = "_".join(name.split("-"))
    src = Path(root) / dir_name
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such fixture folder")
    with tempfile.TemporaryDirectory(prefix="ogb_layouts_", dir=workdir) as tmp:
        dst = Path(tmp) / dir_name
        shutil.copytree(src, dst)
        shutil.rmtree(dst / "processed", ignore_errors=True)
        (dst / "processed").mkdir()
        with ogb_offline() as NodePropPredDataset:
            ds = NodePropPredDataset(name, root=tmp)
            split = ds.get_idx_split()
            graph, labels = ds[0]
    return graph, labels, split
