"""The features artifact (``format = "gnnprep.features"``): hop features S^k X for chosen rows.

Layout: ``/rows`` [r] sorted node ids; ``/hops/0..K`` [r, d] (float32 or float16) for the first
operator; ``/channels/<op>/<k>`` for every operator (hard links: no copies; hop 0 is X for all) and
every HDG channel; ``/labels`` [r]; ``/splits/{train,valid,test}`` node ids as in the graph store.
Root attributes: ``hops``, ``operator``, ``operators`` (JSON: operator and HDG channel names),
``hdg_channels`` (JSON), ``plan`` (JSON), ``graph_fingerprint``, ``num_classes``, ``rows`` (``all`` or
``labeled``), ``dtype``, ``num_nodes``, ``num_features``, ``provenance``.

Writers: :func:`create_layout` (every dataset allocated up front, so a resumed run only writes raw
data) and :func:`write_root`. Readers: :class:`FeatureStore`, which validates what the trainer reads
(rows, labels, splits, hop datasets) with one-line errors.
"""

from __future__ import annotations

import json

import h5py
import numpy as np

from gnnprep.errors import GnnprepError
from gnnprep.meta import FORMAT_VERSIONS, Artifact, json_attr, write_root_attrs
from gnnprep.store import GraphStore, feature_chunk_rows

FORMAT = "gnnprep.features"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]
SPLITS = ("train", "valid", "test")


def create_early(group: h5py.Group, name: str, shape: tuple, dtype, chunks: tuple | None) -> h5py.Dataset:
    """A dataset whose storage is allocated now, so later writes never change file metadata."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    if chunks is not None and all(shape):
        dcpl.set_chunk(tuple(int(c) for c in chunks))
    space = h5py.h5s.create_simple(tuple(int(s) for s in shape))
    tid = h5py.h5t.py_create(np.dtype(dtype))
    dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    return h5py.Dataset(dsid)


def select_rows(store: GraphStore, rows: str) -> np.ndarray | None:
    """The node ids a features artifact stores: None for all rows, else the sorted union of the splits."""
    if rows == "all":
        return None
    if rows != "labeled":
        raise GnnprepError(f"--rows {rows!r}: expected all or labeled")
    splits = store.splits()
    if not splits:
        raise GnnprepError(f"{store.path}: --rows labeled needs splits, and this graph store has none")
    return np.unique(np.concatenate(list(splits.values()))).astype(np.int64)


def _hop_chunks(rows: int, width: int, c: int, dtype: str) -> tuple | None:
    # one column block: contiguous rows (a single pwrite per write, row-block reads for training);
    # several: chunks one column block wide, so block writes never rewrite each other's chunks
    if c == 1:
        return None
    return min(max(rows, 1), feature_chunk_rows(width, np.dtype(dtype).itemsize)), width


def disk_bytes(rows: int, n: int, d: int, hops: int, operators: int, dtype: str, hdg_channels: int = 0) -> int:
    """About what the artifact takes on disk: every hop of every operator (hop 0 shared) for the
    stored rows, every HDG channel's hops for all n rows, and the rows, labels and splits."""
    item = np.dtype(dtype).itemsize
    hop_bytes = (1 + hops * operators) * rows * d * item
    channel_bytes = hdg_channels * (hops + 1) * n * d * item
    return int(hop_bytes + channel_bytes + 24 * rows + (1 << 20))


def create_layout(f: h5py.File, store: GraphStore, out_rows: np.ndarray | None, hops: int,
                  operators: tuple[str, ...], dtype: str, c: int, width: int,
                  hdg_channels: tuple[str, ...] = ()) -> None:
    """Allocate every dataset of the artifact: rows, hops of every operator (hop 0 shared), HDG
    channels (all rows), labels and splits of the stored rows."""
    n, d = store.features.shape
    r = n if out_rows is None else len(out_rows)
    f.create_dataset("rows", data=(np.arange(n) if out_rows is None else out_rows).astype(
        np.int32 if n < 2**31 else np.int64))
    chunks = _hop_chunks(r, width, c, dtype)
    channels = f.create_group("channels")
    first = operators[0]
    for op in operators:
        g = channels.create_group(op)
        for k in range(hops + 1):
            if k == 0 and op != first:
                continue
            create_early(g, str(k), (r, d), dtype, chunks)
    for op in operators[1:]:
        channels[op]["0"] = channels[first]["0"]  # hard link: hop 0 is X for every operator
    hop_group = f.create_group("hops")
    for k in range(hops + 1):
        hop_group[str(k)] = channels[first][str(k)]
    chunks = _hop_chunks(n, width, c, dtype)
    for ch in hdg_channels:
        g = channels.create_group(ch)
        for k in range(hops + 1):
            create_early(g, str(k), (n, d), dtype, chunks)
    labels = store.labels()
    if labels is not None:
        f.create_dataset("labels", data=labels if out_rows is None else labels[out_rows])
    sp = f.create_group("splits")
    for name, ids in store.splits().items():
        sp.create_dataset(name, data=ids)


def write_root(f: h5py.File, provenance: dict, store: GraphStore, hops: int, operators: tuple[str, ...],
               hdg_channels: tuple[str, ...], plan: dict, rows: str, dtype: str) -> None:
    """The root attributes of a finished artifact (written last, just before the commit)."""
    n, d = store.features.shape
    write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance,
                     hops=hops, operator=operators[0],
                     operators=json.dumps(list(operators) + list(hdg_channels)),
                     hdg_channels=json.dumps(list(hdg_channels)),
                     plan=json.dumps(plan), graph_fingerprint=store.fingerprint,
                     num_classes=int(store.attrs.get("num_classes", 0)), rows=rows, dtype=dtype,
                     num_nodes=n, num_features=d)


class FeatureStore(Artifact):
    """Read access to a features artifact; hop datasets are read lazily (row blocks)."""

    FORMAT = FORMAT

    def _int_attr(self, name: str, default: int | None = None) -> int:
        value = self.f.attrs.get(name, default)
        if value is None:
            raise GnnprepError(f"{self.path}: root attribute {name!r} is missing")
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise GnnprepError(f"{self.path}: root attribute {name!r} is {value!r}; expected a non-negative integer")
        return int(value)

    @property
    def hops(self) -> int:
        """K: the artifact holds hops 0..K."""
        return self._int_attr("hops")

    @property
    def rows(self) -> np.ndarray:
        """The sorted node ids of the stored rows."""
        if "rows" not in self.f:
            raise GnnprepError(f"{self.path}: has no /rows; expected the sorted node ids of the stored rows")
        return self.f["rows"][:].astype(np.int64)

    @property
    def num_classes(self) -> int:
        """As recorded from the graph store (0: unknown)."""
        return self._int_attr("num_classes", 0)

    @property
    def graph_fingerprint(self) -> str:
        return str(self.f.attrs.get("graph_fingerprint", ""))

    @property
    def normalized(self) -> str:
        """How X was normalised before propagation (``precompute --normalize-features``): none or row."""
        return str(self.f.attrs.get("normalize_features", "none"))

    @property
    def provenance_text(self) -> str:
        return str(self.f.attrs.get("provenance", ""))

    def hop(self, k: int, operator: str | None = None) -> h5py.Dataset:
        return self.f[self.hop_name(k, operator)]

    def hop_name(self, k: int, operator: str | None = None) -> str:
        """The dataset path of hop k of ``operator`` (None or the first operator: ``hops/k``)."""
        first = self.operators()[0]
        name = f"hops/{k}" if operator is None or operator == first else f"channels/{operator}/{k}"
        if name not in self.f:
            raise GnnprepError(f"{self.path}: has no /{name}; expected hop {k} of operator {operator or first!r}")
        return name

    def operators(self) -> list[str]:
        """Operator and HDG channel names, the first one's hops under ``/hops``."""
        if "operators" not in self.f.attrs:
            return [str(self.f.attrs.get("operator", "sym"))]
        ops = json_attr(self.f.attrs, "operators", self.path, list)
        if not isinstance(ops, list) or not ops or not all(isinstance(o, str) for o in ops):
            raise GnnprepError(f"{self.path}: root attribute 'operators' is {ops!r}; expected a list of names")
        return ops

    def plan(self) -> dict:
        return json_attr(self.f.attrs, "plan", self.path, dict)

    def labels(self) -> h5py.Dataset:
        """``/labels``, one class per stored row (read lazily)."""
        if "labels" not in self.f:
            raise GnnprepError(f"{self.path}: has no /labels; training needs labels "
                               "(precompute from a graph store with labels)")
        labels, r = self.f["labels"], len(self.f["rows"]) if "rows" in self.f else -1
        if labels.ndim != 1 or labels.shape[0] != r:
            raise GnnprepError(f"{self.path}: /labels has shape {labels.shape}; expected [{r}] (one class per row)")
        return labels

    def split_positions(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Each split's positions in ``rows`` (sorted); train and valid must exist and not be empty."""
        f = self.f
        if "splits" not in f or "train" not in f["splits"] or "valid" not in f["splits"]:
            raise GnnprepError(f"{self.path}: has no /splits/train and /splits/valid; "
                               "training needs a train and a validation split")
        positions = {}
        for name in SPLITS:
            if name not in f["splits"]:
                continue
            ids = f["splits"][name][:].astype(np.int64)
            pos = np.searchsorted(rows, ids)
            pos = np.minimum(pos, len(rows) - 1) if len(rows) else pos
            missing = int((rows[pos] != ids).sum()) if len(rows) else len(ids)
            if missing:
                raise GnnprepError(f"{self.path}: /splits/{name} has {missing} node ids not in /rows "
                                   "(features were precomputed for other rows)")
            positions[name] = np.sort(pos)
        if len(positions["train"]) == 0 or len(positions["valid"]) == 0:
            raise GnnprepError(f"{self.path}: /splits/train and /splits/valid must not be empty")
        return positions

    def hop_shape(self, names: list[str], rows: int) -> tuple[int, np.dtype]:
        """(d, dtype) shared by the hop datasets ``names``, each [rows, d] float32 or float16."""
        shapes = {self.f[n].shape for n in names}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2 or next(iter(shapes))[0] != rows:
            raise GnnprepError(f"{self.path}: hop datasets have shapes {sorted(shapes)}; expected [{rows}, d] each")
        dtypes = {self.f[n].dtype for n in names}
        if not all(dt in (np.float32, np.float16) for dt in dtypes) or len(dtypes) != 1:
            raise GnnprepError(f"{self.path}: hop datasets have dtype {', '.join(map(str, dtypes))}; "
                               "expected float32 or float16")
        return next(iter(shapes))[1], next(iter(dtypes))
