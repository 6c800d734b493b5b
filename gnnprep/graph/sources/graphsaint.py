"""GraphSAINT layout folders (Zeng et al., "GraphSAINT: Graph Sampling Based Inductive Learning
Method", ICLR 2020): Flickr, Reddit, Yelp, AmazonProducts as PyG and DGL ship them.

The folder (or its ``raw/`` subfolder, PyG's layout) holds:

- ``adj_full.npz``: the adjacency, a ``scipy.sparse.save_npz`` matrix (read by :class:`SparseNpz`;
  entry (i, j) is the edge i -> j; its square shape gives the node count);
- ``feats.npy`` [n, d] (optional): node features, memory-mapped and copied in row chunks;
- ``class_map.json`` (optional): ``{"<node id>": <class id>}``, or ``{"<node id>": [0/1, ...]}``
  multi-hot lists. A list with exactly one 1 is that class, all zeros is unknown (-1). A node with
  two or more classes (multi-label: Yelp, AmazonProducts, PPI) is **refused** with one line naming
  it: the store holds one class id per node. Without ``class_map.json`` the graph and features are
  ingested with no labels;
- ``role.json`` (optional): ``{"tr": [ids], "va": [ids], "te": [ids]}``, stored as the train, valid
  and test splits (other keys are ignored with a warning).

``adj_train.npz`` (the training subgraph) is not read: the store holds the full graph and the splits.
The JSON files are scanned in blocks, one ``"key": value`` item at a time (never ``json.load`` of
the whole file), so a multi-label map is refused at its first such node without being held.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.core.files import NotRegularFile, open_regular
from gnnprep.graph.sources.base import MAX_CLASSES, GraphSource, cast_features, check_ids
from gnnprep.graph.sources.edgelist import load_npy
from gnnprep.graph.sources.scipynpz import SparseNpz

ADJ = "adj_full.npz"
ROLES = {"tr": "train", "va": "valid", "te": "test"}
BLOCK = 8 * 1024**2
MAX_ITEM = 1024**3   # the longest one "key": value item read (a role list of ~100M ids)
_NODE_KEY = re.compile(r"[0-9]{1,18}")
_OPEN = re.compile(rb"\s*\{\s*(\})?")
_ITEM = re.compile(rb'\s*"([^"\\\n]*)"\s*:\s*(?:(-?\d+)|\[([^\[\]{}"]*)\])\s*(,|\})')


def _present(path: Path) -> bool:
    """Whether an optional file of the layout is there. Present means anything at that name (a
    folder, a pipe, a device, a dangling link too): it is then read or refused with one line, never
    taken for absent (a ``feats.npy`` that cannot be read must not become 'no features')."""
    if not path.exists() and not path.is_symlink():
        return False
    if path.name.endswith(".json"):
        try:
            open_regular(path, 1 << 62).close()
        except FileNotFoundError:
            raise GnnprepError(f"{path}: a link to nothing; expected a JSON file (or no {path.name})") from None
        except NotRegularFile:
            raise GnnprepError(f"{path}: not a regular file (a folder, pipe or device); expected a JSON file "
                               f"(or no {path.name})") from None
        except OSError as e:
            raise GnnprepError(f"{path}: cannot read ({e.strerror or e}); expected a readable JSON file") from None
    return True


def graphsaint_folder(path: Path) -> Path | None:
    """The folder holding ``adj_full.npz``: ``path`` itself or its ``raw/`` (PyG's layout); None when
    ``path`` is not a GraphSAINT layout folder."""
    for d in (path, path / "raw"):
        if (d / ADJ).is_file():
            return d
    return None


def json_items(path: Path, expected: str) -> Iterator[tuple[str, int | None, bytes | None]]:
    """The items of a JSON object whose values are integers or lists of integers, streamed:
    (key, integer value or None, list text or None). A malformed file raises naming the line and
    column where the expected ``expected`` was not found."""
    with open(path, "rb") as f:
        # before: bytes dropped from buf, holding `lines` newlines, the last at offset last_nl (-1: none)
        buf, eof, before, lines, last_nl = b"", False, 0, 0, -1

        def more() -> bool:
            nonlocal buf, eof
            data = f.read(BLOCK)
            eof = not data
            buf += data
            return bool(data)

        def fail(pos: int, what: str):
            while pos < len(buf) and buf[pos:pos + 1].isspace():
                pos += 1
            line = lines + buf.count(b"\n", 0, pos) + 1
            nl = buf.rfind(b"\n", 0, pos)
            column = pos - nl if nl >= 0 else before + pos - last_nl
            text = buf[pos:pos + 30].decode("utf-8", "replace")
            at = f"{path} line {line} column {column}"
            if not text:
                raise GnnprepError(f"{at}: end of file; expected {what}")
            found = text.splitlines()[0].rstrip() or text   # up to the end of its line (no literal \n shown)
            raise GnnprepError(f"{at}: expected {what}, found {found!r}")

        while not eof and len(buf) < 64:
            more()
        m = _OPEN.match(buf)
        if m is None:
            fail(0, "a JSON object '{'")
        if m.group(1):
            pos = m.end()
        else:
            pos = m.end()
            while True:
                m = _ITEM.match(buf, pos)
                if m is None:
                    if not eof and len(buf) - pos < MAX_ITEM:
                        if pos > BLOCK:                   # drop what was consumed
                            lines += buf.count(b"\n", 0, pos)
                            nl = buf.rfind(b"\n", 0, pos)
                            last_nl = before + nl if nl >= 0 else last_nl
                            before += pos
                            buf, pos = buf[pos:], 0
                        more()
                        continue
                    cut = _ITEM.match(buf + b"}", pos)
                    if cut is not None and cut.end() == len(buf) + 1:   # the file ends inside an item
                        fail(len(buf), "',' or '}'")
                    fail(pos, expected)
                key, value, items, end = m.groups()
                yield key.decode("utf-8", "replace"), None if value is None else int(value), items
                pos = m.end()
                if end == b"}":
                    break
        while True:
            if buf[pos:].strip():
                fail(pos, "nothing after the closing '}'")
            lines += buf.count(b"\n")
            nl = buf.rfind(b"\n")
            last_nl = before + nl if nl >= 0 else last_nl
            before += len(buf)
            buf, pos = b"", 0
            if not more():
                return


def _int_list(text: bytes, path: Path, where: str) -> np.ndarray:
    try:
        return np.array(text.replace(b",", b" ").split(), dtype=np.int64)
    except (ValueError, OverflowError):
        bad = next((t for t in text.replace(b",", b" ").split() if not re.fullmatch(rb"-?\d{1,18}", t)), b"?")
        raise GnnprepError(f"{path}: {where}: {bad.decode('utf-8', 'replace')[:24]!r} is not an integer; "
                           "expected a list of integers") from None


class SparseLabels:
    """Class ids of the nodes a class map names, sorted by node; every other node is unknown (-1).
    Held in memory proportional to the map, not to the node count the adjacency declares."""

    def __init__(self, nodes: list[int], classes: list[int], n: int):
        self.n = n
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.classes = np.asarray(classes, dtype=np.int64)
        order = np.argsort(self.nodes, kind="stable")
        self.nodes, self.classes = self.nodes[order], self.classes[order]

    def __len__(self) -> int:
        return self.n

    def duplicate(self) -> int | None:
        same = np.flatnonzero(self.nodes[1:] == self.nodes[:-1])
        return int(self.nodes[same[0]]) if len(same) else None

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.n)
        out = np.full(max(0, stop - start), -1, dtype=np.int64)
        a, b = np.searchsorted(self.nodes, [start, stop])
        out[self.nodes[a:b] - start] = self.classes[a:b]
        return out


def read_class_map(path: Path, n: int, nodes_from: str) -> tuple[SparseLabels, int]:
    """Class id per node (-1 unknown) from ``class_map.json``; return (labels, nodes not in the map)."""
    nodes: list[int] = []
    classes: list[int] = []
    width = None
    expected = '"<node id>": <class id> or "<node id>": [0/1, ...]'
    for key, value, items in json_items(path, expected):
        if not _NODE_KEY.fullmatch(key):   # ASCII digits only: str.isdigit() takes '²' and int() then fails
            raise GnnprepError(f"{path}: key {key[:24]!r} is not a node id; expected keys \"0\" .. \"{n - 1}\"")
        node = int(key)
        where = f"entry for node {node}"
        if node >= n:
            raise GnnprepError(f"{path}: {where}: node id {node} is beyond the node count {n} (from {nodes_from})")
        if value is not None:
            if width:
                raise GnnprepError(f"{path}: {where}: a class id after multi-hot lists; expected one kind of value")
            width = 0
            if value < -1 or value >= MAX_CLASSES:
                raise GnnprepError(f"{path}: {where}: class {value}; expected a class id in [0, {MAX_CLASSES}) "
                                   "(or -1 for unknown)")
            nodes.append(node)
            classes.append(value)
            continue
        hot = _int_list(items, path, where)
        if width == 0:
            raise GnnprepError(f"{path}: {where}: a multi-hot list after class ids; expected one kind of value")
        if width is None:
            width = len(hot)
        if len(hot) != width or width == 0:
            raise GnnprepError(f"{path}: {where}: a list of {len(hot)} entries; expected {width or 'at least 1'} "
                               "(one 0/1 per class, the same length for every node)")
        if ((hot != 0) & (hot != 1)).any():
            raise GnnprepError(f"{path}: {where}: value {int(hot[(hot != 0) & (hot != 1)][0])} in a multi-hot "
                               "list; expected 0 or 1")
        ones = int(hot.sum())
        if ones > 1:
            raise GnnprepError(f"{path}: {where}: {ones} classes set; multi-label class maps (Yelp, "
                               "AmazonProducts, PPI) are not supported, the store holds one class per node "
                               "(move class_map.json away to ingest the graph and features without labels)")
        nodes.append(node)
        classes.append(int(np.argmax(hot)) if ones else -1)
    labels = SparseLabels(nodes, classes, n)
    twice = labels.duplicate()
    if twice is not None:
        raise GnnprepError(f"{path}: entry for node {twice}: node {twice} appears twice; expected one class per node")
    return labels, n - len(labels.nodes)


def read_roles(path: Path, n: int, nodes_from: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """train/valid/test ids (sorted, unique) from ``role.json``; return (splits, ignored keys)."""
    out, ignored = {}, []
    for key, value, items in json_items(path, '"tr" | "va" | "te": [node ids]'):
        if key not in ROLES:
            ignored.append(key)
            continue
        name = ROLES[key]
        if name in out:
            raise GnnprepError(f"{path}: key {key!r} appears twice; expected one list per split")
        if items is None:
            raise GnnprepError(f"{path}: key {key!r} holds {value}; expected a list of node ids")
        ids = _int_list(items, path, f"list {key!r}")
        check_ids(ids, n, nodes_from, lambda i, k=key: f"{path}: list {k!r} entry {i}")
        out[name] = np.unique(ids)
    return out, ignored


class GraphSaintSource(GraphSource):
    """A GraphSAINT layout folder (see the module docstring)."""

    def __init__(self, path: Path):
        folder = graphsaint_folder(path)
        if folder is None:
            raise GnnprepError(f"{path}: no {ADJ}; expected a GraphSAINT layout folder")
        super().__init__(name=path.name, path=path)
        self.folder = folder
        self.matrix = SparseNpz(folder / ADJ)
        n = self.num_nodes = self.matrix.n
        self.nodes_from = f"member 'shape' of {folder / ADJ}"
        self.expected_edges = self.matrix.nnz
        self._feats = None
        feats = folder / "feats.npy"
        if _present(feats):
            self._feats = load_npy(feats, "feats.npy (the node features)")
            f = self._feats
            if f.ndim != 2 or f.dtype.kind not in "biuf":
                raise GnnprepError(f"{feats}: {f.dtype} array of shape {f.shape}; expected numeric [num_nodes, "
                                   "num_features]")
            if f.shape[0] != n:
                raise GnnprepError(f"{feats}: {f.shape[0]} feature rows; expected {n} (from {self.nodes_from})")
            self.num_features = f.shape[1]
            self.feature_dtype = np.dtype(np.float16 if f.dtype == np.float16 else np.float32)
            self.features_from = str(feats)
        self._labels = None
        class_map = folder / "class_map.json"
        if _present(class_map):
            self._labels, missing = read_class_map(class_map, n, self.nodes_from)
            self.labels_from = str(class_map)
            if missing:
                self.warnings.append(f"{class_map}: {missing} of {n} nodes have no class; stored as unknown (-1)")
        self._splits: dict[str, np.ndarray] = {}
        role = folder / "role.json"
        if _present(role):
            self._splits, ignored = read_roles(role, n, self.nodes_from)
            self.splits_from = str(role)
            if ignored:
                self.warnings.append(f"{role}: keys {', '.join(map(repr, ignored))} ignored; the splits are "
                                     "'tr', 'va' and 'te'")

    def input_files(self) -> list[Path]:
        names = (ADJ, "feats.npy", "class_map.json", "role.json")
        return [self.folder / f for f in names if (self.folder / f).is_file()]

    def edges(self, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield from self.matrix.edges(chunk_edges)

    def features(self, chunk_rows: int) -> Iterator[np.ndarray]:
        f = self._feats
        if f is None:
            return
        for s in range(0, f.shape[0], chunk_rows):
            yield cast_features(np.asarray(f[s:s + chunk_rows]), self.feature_dtype,
                                lambda i, s=s: f"{self.features_from} row {s + i}")

    def labels(self, chunk_rows: int) -> Iterator[np.ndarray]:
        if self._labels is None:
            return
        for s in range(0, len(self._labels), chunk_rows):
            yield self._labels[s:s + chunk_rows]

    def splits(self) -> dict[str, np.ndarray]:
        return dict(self._splits)
