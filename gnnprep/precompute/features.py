"""The features artifact (``format = "gnnprep.features"``): hop features S^k X for chosen rows.

Layout: ``/rows`` [r] sorted node ids; ``/hops/0..K`` [r, d] (float32 or float16) for the first
operator; ``/channels/<op>/<k>`` for every operator (hard links: no copies; hop 0 is X for all) and
every HDG channel; ``/labels`` [r]; ``/splits/{train,valid,test}`` node ids as in the graph store.
Root attributes: ``hops``, ``operator``, ``operators`` (JSON: operator and HDG channel names),
``hdg_channels`` (JSON), ``plan`` (JSON), ``graph_fingerprint``, ``num_classes``, ``rows`` (``all`` or
``labeled``), ``dtype``, ``num_nodes``, ``num_features``, ``normalize_features``, ``provenance``, and
where they apply ``operator_sources`` (JSON) and ``shards`` (JSON: a sharded artifact's files).

Writers: :func:`create_layout` (every dataset allocated up front, so a resumed run only writes raw
data) and :func:`write_root`. Every other module names a dataset through :func:`hop_path` and
:func:`channel_path` and opens these files through :func:`open_output` and :func:`open_shard`, so
the layout is spelled here only. Readers: :class:`FeatureStore`, which validates what the trainer reads
(rows, labels, splits, hop datasets) with one-line errors, and :func:`hop_datasets`, the hop datasets
on a handle of their own for the trainer's block reads.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from gnnprep.core import h5file
from gnnprep.core.artifact import (
    FORMAT_VERSIONS,
    Artifact,
    attr_value,
    check_self_contained,
    count_attr,
    dataset_or_none,
    json_attr,
    register_format,
    write_root_attrs,
)
from gnnprep.core.directio import ALIGN
from gnnprep.core.errors import ArgumentError, GnnprepError, OptionError, shown
from gnnprep.core.sizes import available_ram, format_size
from gnnprep.graph.store import GraphStore, feature_chunk_rows, split_sizes

FORMAT = "gnnprep.features"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]
SPLITS = ("train", "valid", "test")
HOPS = "hops"            # /hops/<k>: the first operator's hops (hard links)
CHANNELS = "channels"    # /channels/<name>/<k>: every operator's and HDG channel's hops


def hop_path(k: int) -> str:
    """The dataset of hop k of the first operator (a hard link to its channel's)."""
    return f"{HOPS}/{k}"


def channel_path(name: str, k: int) -> str:
    """The dataset of hop k of the operator or HDG channel ``name``."""
    return f"{CHANNELS}/{name}/{k}"


HALF_READ_BYTES = 8 << 20   # float16 read raw this many bytes of rows at a time (read_columns_float32)


def read_columns_float32(ds: h5py.Dataset, c0: int, c1: int) -> np.ndarray:
    """Columns c0..c1−1 of a hop (or channel) dataset as a new float32 array [rows, c1 − c0]: a
    float32 dataset read into it directly; a float16 one (``--dtype float16``) read raw in row pieces
    of :data:`HALF_READ_BYTES` and widened exactly (:func:`gnnprep.sparse.half.widen_half`). HDF5's
    own float16 → float32 conversion took 0.86 s for 2.78M rows × 64 columns, the raw read 0.09 s."""
    from gnnprep.sparse.half import widen_half

    rows, w = ds.shape[0], c1 - c0
    out = np.empty((rows, w), dtype=np.float32)
    if ds.dtype != np.float16 or rows == 0 or w == 0:
        ds.read_direct(out, np.s_[:, c0:c1])
        return out
    step = max(1, HALF_READ_BYTES // (2 * w))
    raw = np.empty((min(step, rows), w), dtype=np.float16)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        ds.read_direct(raw, np.s_[r0:r1, c0:c1], np.s_[:r1 - r0])
        widen_half(raw[:r1 - r0], out[r0:r1])
    return out


def open_output(path, resume: bool = False, direct: bool = False) -> h5py.File:
    """An artifact or shard being written: ``r+`` to continue a partial file, else a new one.
    ``direct``: every dataset 4 KiB-aligned, since hop rows are written to the file with O_DIRECT
    (:mod:`gnnprep.core.directio`)."""
    h5file.record_dealloc_failures()   # close it with h5file.close: a failed flush is raised there
    return h5py.File(path, "r+" if resume else "w", **_aligned(direct))


def writing_output(path, resume: bool = False, direct: bool = False):
    """:func:`open_output` as a context: closed at its end, and a failed write (a full disk) closes the
    file cleanly and comes out as an OSError with its errno (:func:`gnnprep.core.h5file.writing`)."""
    return h5file.writing(path, "r+" if resume else "w", **_aligned(direct))


def _aligned(direct: bool) -> dict:
    """The file options of an output whose hop rows are written with O_DIRECT: every dataset 4 KiB-aligned."""
    return {"alignment_threshold": ALIGN, "alignment_interval": ALIGN} if direct else {}


def open_shard(path) -> h5py.File:
    """A finished shard (hops or HDG channels), read-only: the HDG pass and ``--merge`` read it."""
    return h5py.File(path, "r")


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
        raise OptionError("--rows", f"{rows!r}: expected all or labeled")
    splits = store.splits()
    if not splits:
        raise GnnprepError(f"{store.path}: --rows labeled needs splits, and this graph store has none")
    return np.unique(np.concatenate(list(splits.values()))).astype(np.int64)


def hop_chunks(rows: int, width: int, c: int, dtype: str) -> tuple | None:
    """The chunk shape of a hop dataset of ``rows`` rows in ``c`` column blocks ``width`` wide (None:
    contiguous)."""
    # one column block: contiguous rows (a single pwrite per write, row-block reads for training);
    # several: chunks one column block wide, so block writes never rewrite each other's chunks
    if c == 1:
        return None
    return min(max(rows, 1), feature_chunk_rows(width, np.dtype(dtype).itemsize)), width


def staged_bytes(rows: int, width: int, c: int, dtype: str, step: int) -> int:
    """The most bytes one write of a hop stages around the page cache: ``step`` rows of the one
    column block (contiguous hops), or one chunk of a column block (chunked ones)."""
    chunks = hop_chunks(rows, width, c, dtype)
    return (min(rows, step) if chunks is None else chunks[0]) * width * np.dtype(dtype).itemsize


def disk_bytes(rows: int, n: int, d: int, hops: int, operators: int, dtype: str, hdg_channels: int = 0) -> int:
    """About what the artifact takes on disk: every hop of every operator (hop 0 shared) for the
    stored rows, every HDG channel's hops for all n rows, and the rows, labels and splits."""
    item = np.dtype(dtype).itemsize
    hop_bytes = (1 + hops * operators) * rows * d * item
    channel_bytes = hdg_channels * (hops + 1) * n * d * item
    return int(hop_bytes + channel_bytes + 24 * rows + (1 << 20))


def _create_hops(f: h5py.File, hops: int, operators: tuple[str, ...], make) -> h5py.Group:
    """``/channels/<op>/<k>`` for every operator and hop, each made by ``make(group, op, k)`` (hop 0
    made once and hard linked into every operator: it is X for all), ``/hops/<k>`` linked to the
    first operator's."""
    channels = f.create_group(CHANNELS)
    first = operators[0]
    for op in operators:
        g = channels.create_group(op)
        for k in range(hops + 1):
            if k == 0 and op != first:
                continue
            make(g, op, k)
    for op in operators[1:]:
        channels[op]["0"] = channels[first]["0"]
    hop_group = f.create_group(HOPS)
    for k in range(hops + 1):
        hop_group[str(k)] = channels[first][str(k)]
    return channels


def _allocated(shape: tuple, dtype: str, chunks: tuple | None):
    """A ``make`` for :func:`_create_hops`: every hop an early-allocated dataset of ``shape``."""
    return lambda g, op, k: create_early(g, str(k), shape, dtype, chunks)


def create_layout(f: h5py.File, store: GraphStore, out_rows: np.ndarray | None, hops: int,
                  operators: tuple[str, ...], dtype: str, c: int, width: int,
                  hdg_channels: tuple[str, ...] = ()) -> None:
    """Allocate every dataset of the artifact: rows, hops of every operator (hop 0 shared), HDG
    channels (all rows), labels and splits of the stored rows."""
    n, d = store.features.shape
    r = n if out_rows is None else len(out_rows)
    channels = _create_hops(f, hops, operators, _allocated((r, d), dtype, hop_chunks(r, width, c, dtype)))
    _create_hdg_channels(channels, hdg_channels, hops, (n, d), dtype, hop_chunks(n, width, c, dtype))
    _rows_labels_splits(f, store, out_rows)


def _create_hdg_channels(channels: h5py.Group, names: tuple[str, ...], hops: int, shape: tuple, dtype: str,
                         chunks: tuple | None) -> None:
    """``<name>/<k>`` under ``channels`` for every HDG channel and hop 0..K, allocated early."""
    for ch in names:
        g = channels.create_group(ch)
        for k in range(hops + 1):
            create_early(g, str(k), shape, dtype, chunks)


def write_root(f: h5py.File, provenance: dict, store: GraphStore, hops: int, operators: tuple[str, ...],
               hdg_channels: tuple[str, ...], plan: dict, rows: str, dtype: str, *, normalize_features: str,
               operator_sources: dict | None = None, shards: list[dict] | None = None) -> None:
    """The root attributes of a finished artifact (written last, just before the commit), and
    the optional ones: ``operator_sources`` (JSON, with ``--operator-file`` or ``--hdg-weight``)
    and ``shards`` (JSON, a sharded artifact's files: :func:`check_shards` reads them)."""
    n, d = store.features.shape
    extra = {} if operator_sources is None else {"operator_sources": json.dumps(operator_sources)}
    if shards is not None:
        extra["shards"] = json.dumps(shards)
    write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance,
                     hops=hops, operator=operators[0],
                     operators=json.dumps(list(operators) + list(hdg_channels)),
                     hdg_channels=json.dumps(list(hdg_channels)),
                     plan=json.dumps(plan), graph_fingerprint=store.fingerprint,
                     num_classes=int(store.attrs.get("num_classes", 0)), rows=rows, dtype=dtype,
                     num_nodes=n, num_features=d, normalize_features=normalize_features, **extra)


class FeatureStore(Artifact):
    """Read access to a features artifact; hop datasets are read lazily (row blocks).

    A sharded artifact (torchrun) is checked as it is opened (:func:`check_shards`): every shard it
    lists present beside it, the one it was published with, reading only itself, and holding every
    dataset its virtual datasets map; else a GnnprepError naming the shard (HDF5 would read a
    missing shard's columns as NaN, and an edited one's from wherever it points). ``shards``: what
    :func:`check_shards` returned (None: not sharded)."""

    FORMAT = FORMAT

    def __init__(self, path):
        super().__init__(path)
        try:
            self.shards = check_shards(self.f, self.path)
        except BaseException:
            self.f.close()
            raise

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
        name = hop_path(k) if operator is None or operator == first else channel_path(operator, k)
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
        """Each split's positions in ``rows`` (sorted); train and valid must exist and not be empty; an
        empty test split is left out (as a missing one: no test accuracy)."""
        f = self.f
        missing = [f"/splits/{k}" for k in ("train", "valid") if "splits" not in f or k not in f["splits"]]
        if missing:
            raise GnnprepError(f"{self.path}: has no {' and no '.join(missing)}; "
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
        empty = [name for name in ("train", "valid") if len(positions[name]) == 0]
        if empty:
            raise GnnprepError(f"{self.path}: {' and '.join(f'/splits/{n}' for n in empty)} "
                               f"{'is' if len(empty) == 1 else 'are'} empty; training needs train and valid node ids")
        if "test" in positions and len(positions["test"]) == 0:
            del positions["test"]   # an empty test split is no test split: test accuracy null, as without one
        return positions

    # -- the Python API (gnnprep.open): numpy reads by original node id or split name --------------------
    @property
    def splits(self) -> dict[str, np.ndarray]:
        """Each split's node ids (the original ids of the graph store), as stored."""
        if "splits" not in self.f:
            return {}
        return {name: self.f["splits"][name][:].astype(np.int64) for name in SPLITS if name in self.f["splits"]}

    def positions(self, nodes) -> np.ndarray:
        """Positions in the stored rows of ``nodes``: a split name (``train``, ``valid``, ``test``),
        node ids (original ids, integers of any integer dtype; any order, repeats allowed; a scalar
        or a 1-D sequence) or a boolean mask with one entry per node of the graph (``num_nodes``,
        PyG's ``train_mask``). Anything else (floats, a 2-D array, strings, ...) is an
        :class:`~gnnprep.core.errors.ArgumentError` naming ``nodes``, as is the first id that is
        not a stored row."""
        rows = self.rows
        if isinstance(nodes, str):
            if nodes not in self.splits:
                raise ArgumentError("nodes", f"this file has no split {nodes!r}; it has "
                                    f"{', '.join(self.splits) or 'none'}", self.path)
            nodes = self.splits[nodes]
        ids = self._node_ids(nodes)
        pos = np.searchsorted(rows, ids)
        bad = (pos >= len(rows)) | (rows[np.minimum(pos, len(rows) - 1)] != ids) if len(rows) else np.ones(len(ids), bool)
        if bad.any():
            raise ArgumentError("nodes", f"node {int(ids[np.argmax(bad)])} is not a stored row "
                                f"({len(rows):,} rows stored; precompute --rows all stores every node)", self.path)
        return pos

    def _node_ids(self, nodes) -> np.ndarray:
        """``nodes`` (ids or a boolean mask; see :meth:`positions`) as int64 node ids, never coerced."""
        expected = (f"expected a split name, integer node ids or a boolean mask of {self._num_nodes():,} "
                    "nodes")
        if nodes is None or isinstance(nodes, (bytes, bytearray, dict, set, frozenset)):
            raise ArgumentError("nodes", f"is {shown(nodes)}; {expected}", self.path)
        if isinstance(nodes, (bool, np.bool_)):
            raise ArgumentError("nodes", f"is the boolean {nodes}; {expected}", self.path)
        if not isinstance(nodes, np.ndarray) and hasattr(nodes, "__len__"):
            # a lazy sequence (range(10**13)) is refused before numpy allocates for it: where the
            # kernel overcommits memory (vm.overcommit_memory = 1, seen on a GPU machine) numpy's
            # allocation succeeds and filling it ends in the OOM killer, not in MemoryError
            try:
                too_many = _beyond_free_memory(len(nodes) * 8)
            except OverflowError:    # a length beyond sys.maxsize
                too_many = True
            except TypeError:        # a __len__ that returns no integer: numpy says what is wrong below
                too_many = False
            if too_many:
                raise ArgumentError("nodes", f"does not fit in memory as an array; {expected}", self.path)
        try:
            a = np.asarray(nodes)
        except (TypeError, ValueError, OverflowError, RuntimeError) as e:
            raise ArgumentError("nodes", f"cannot be read as node ids ({_first_line(e)}); {expected}", self.path) from None
        except MemoryError:
            raise ArgumentError("nodes", f"does not fit in memory as an array; {expected}", self.path) from None
        if a.ndim > 1:
            raise ArgumentError("nodes", f"is an array of shape {a.shape}; {expected} (1-D)", self.path)
        if a.dtype == np.bool_:
            n = self._num_nodes()
            if a.ndim != 1 or len(a) != n:
                raise ArgumentError("nodes", f"is a boolean mask of {a.size:,} entries; a mask needs one per node "
                                    f"of the graph ({n:,})", self.path)
            return np.flatnonzero(a).astype(np.int64)
        if a.size == 0 and a.dtype.kind in "iuf":
            return np.zeros(0, dtype=np.int64)    # [] (numpy reads an empty list as float64)
        if a.dtype.kind == "f":
            raise ArgumentError("nodes", f"holds floats (such as {a.reshape(-1)[0].item()!r}); expected integer node ids (a float "
                                "is never truncated to an id)", self.path)
        if a.dtype.kind not in "iu":
            raise ArgumentError("nodes", f"is {shown(nodes)} of dtype {a.dtype}; {expected}", self.path)
        if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
            raise ArgumentError("nodes", f"node {int(a.max())} is not a stored row (beyond any node id)", self.path)
        return a.astype(np.int64).reshape(-1)

    def _num_nodes(self) -> int:
        """The graph's node count (root attribute ``num_nodes``; the stored rows where it is absent)."""
        v = self.f.attrs.get("num_nodes")
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 0:
            return int(v)
        return len(self.f["rows"]) if "rows" in self.f else 0

    def _hop_list(self, hops) -> list[int]:
        """``hops`` (None: 0..K; an integer or a 1-D sequence of integers, each in 0..K) as a list."""
        K = self.hops
        if hops is None:
            return list(range(K + 1))
        expected = f"expected a hop number or a list of hop numbers in 0..{K}"
        if isinstance(hops, (bool, np.bool_, str, bytes, dict, set, frozenset)):
            raise ArgumentError("hops", f"is {shown(hops)}; {expected}", self.path)
        try:
            a = np.asarray(hops)
        except (TypeError, ValueError, OverflowError, RuntimeError, MemoryError) as e:
            raise ArgumentError("hops", f"cannot be read as hop numbers ({_first_line(e)}); {expected}",
                                self.path) from None
        if a.ndim > 1:
            raise ArgumentError("hops", f"is an array of shape {a.shape}; {expected}", self.path)
        if a.size == 0:
            raise ArgumentError("hops", f"is empty; {expected}", self.path)
        if a.dtype.kind not in "iu":
            first = a.reshape(-1)[0] if a.size else None
            what = f"holds {first.item() if isinstance(first, np.generic) else first!r}" if a.size else f"is {shown(hops)}"
            note = " (a float is never truncated)" if a.dtype.kind == "f" else ""
            raise ArgumentError("hops", f"{what} ({a.dtype}); {expected}{note}", self.path)
        for k in a.reshape(-1).tolist():
            if not 0 <= k <= K:
                raise ArgumentError("hops", f"hop {k}: expected 0..{K} (the hops this file holds)", self.path)
        return [int(k) for k in a.reshape(-1)]

    def _operator_list(self, operators) -> list[str]:
        """``operators`` (None: the first; a name; a list or tuple of names) as names this file holds."""
        names = self.operators()
        if operators is None:
            return [names[0]]
        expected = f"expected an operator name or a list of them ({', '.join(names)})"
        if isinstance(operators, str):
            ops = [operators]
        elif isinstance(operators, (list, tuple)) or (isinstance(operators, np.ndarray) and operators.ndim == 1):
            ops = list(operators)
            if not ops:
                raise ArgumentError("operators", f"is empty; {expected}", self.path)
        else:
            raise ArgumentError("operators", f"is {shown(operators)}; {expected}", self.path)
        for op in ops:
            if not isinstance(op, str):
                raise ArgumentError("operators", f"holds {shown(op)}; {expected}", self.path)
            if op not in names:
                raise ArgumentError("operators", f"{op!r} is not an operator or channel of this file; it has "
                                    f"{', '.join(names)}", self.path)
        return [str(op) for op in ops]

    def read(self, nodes, hops=None, operators=None) -> np.ndarray | list[np.ndarray]:
        """The hops of ``nodes`` (a split name, original node ids or a boolean mask over the graph's
        nodes: :meth:`positions`) as float32/16 numpy arrays: [len(nodes), len(hops), d] — hop k
        of node v is S^k X restricted to v's row — for one operator (default: the first), a list of
        such arrays, one per operator, for several. ``hops``: hop numbers (an integer or a list,
        each in 0..K; default 0..K). Rows are read in sorted blocks, never the whole dataset. A bad
        argument is an :class:`~gnnprep.core.errors.ArgumentError` naming it."""
        ops = self._operator_list(operators)
        ks = self._hop_list(hops)
        pos = self.positions(nodes)
        out = []
        shapes = []
        for op in ops:
            names = [self.hop_name(k, op) for k in ks]
            shapes.append((names, *self.hop_shape(names, len(self.f["rows"]))))
        need = sum(len(pos) * len(ks) * d * np.dtype(dt).itemsize for _, d, dt in shapes)
        _check_fits("nodes", need, len(pos), self.path)
        order = np.argsort(pos, kind="stable")
        uniq, back = np.unique(pos[order], return_inverse=True)
        for names, d, dtype in shapes:
            a = np.empty((len(pos), len(ks), d), dtype=dtype)
            for j, name in enumerate(names):
                a[order, j] = _take(self.f[name], uniq)[back]
            out.append(a)
        return out[0] if operators is None or isinstance(operators, str) else out

    def labels_of(self, nodes) -> np.ndarray:
        """The class of each of ``nodes`` (a split name, original node ids or a boolean mask, as for
        :meth:`read`; −1: unlabeled)."""
        pos = self.positions(nodes)
        labels = self.labels()
        _check_fits("nodes", 8 * len(pos), len(pos), self.path)
        order = np.argsort(pos, kind="stable")
        uniq, back = np.unique(pos[order], return_inverse=True)
        out = np.empty(len(pos), dtype=np.int64)
        out[order] = _take(labels, uniq)[back]
        return out

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


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _beyond_free_memory(nbytes: int) -> bool:
    """Whether an array of ``nbytes`` (over 64 MiB: smaller ones are not weighed) exceeds the memory free now."""
    return nbytes > (1 << 26) and nbytes > available_ram()


def _check_fits(argument: str, nbytes: int, rows: int, path) -> None:
    """ArgumentError naming ``argument`` when a result of ``nbytes`` (``rows`` rows) cannot fit the
    memory free now (a MemoryError, or the kernel's OOM killer, otherwise)."""
    if _beyond_free_memory(nbytes):
        raise ArgumentError(argument, f"reading {rows:,} rows needs {format_size(nbytes)}, more than the "
                            f"{format_size(available_ram())} of memory free; read fewer rows at a time", path)


@contextmanager
def hop_datasets(path, names: list[str]):
    """The hop datasets ``names`` (paths from :meth:`FeatureStore.hop_name`) of the features artifact
    at ``path``, open read-only on a handle of their own and closed on exit: the trainer's block
    reads, one handle per reader (its streaming reads run in a background thread). No checks here:
    a :class:`FeatureStore` validated the artifact and the names before."""
    with h5py.File(path, "r") as f:
        yield [f[name] for name in names]


def _take(dset: h5py.Dataset, positions: np.ndarray, step: int = 1 << 16) -> np.ndarray:
    """dset[positions] for sorted unique positions: each block of ``step`` rows that holds some is
    read once (HDF5's point selection is slow for many rows)."""
    out = np.empty((len(positions),) + dset.shape[1:], dtype=dset.dtype)
    i = 0
    while i < len(positions):
        lo = int(positions[i])
        j = int(np.searchsorted(positions, lo + step))
        block = dset[lo:int(positions[j - 1]) + 1]
        out[i:j] = block[positions[i:j] - lo]
        i = j
    return out


# -- a scratch file for ``gnnprep calibrate`` -------------------------------------------------------------
def write_scratch(path, data: np.ndarray) -> None:
    """``data`` as the one dataset of a scratch HDF5 file at ``path``: no artifact, the stand-in
    whose write and read (:func:`read_scratch`) ``gnnprep calibrate`` times for the profile's HDF5
    bandwidths, which price this module's hop writes and reads (so the h5py handle is opened here)."""
    with h5file.writing(path) as f:
        h5file.put(f, "a", data=data)


def read_scratch(path) -> np.ndarray:
    """The dataset :func:`write_scratch` wrote at ``path``, read whole."""
    with h5py.File(path, "r") as f:
        return f["a"][:]


# -- artifacts written by several ranks (torchrun; gnnprep.core.distributed) -----------------------------
SHARD_FORMAT = "gnnprep.features-shard"


def shard_name(output_name: str, rank: int, ranks: int, run_key: str) -> str:
    """The file rank ``rank`` of ``ranks`` writes next to the output ``output_name``: its columns
    of every hop. The run key is part of the name, so a rerun with other inputs never overwrites a
    shard that a published artifact still reads."""
    return f"{output_name}.shard-{rank}-of-{ranks}-{run_key[:8]}.h5"


def shard_prefix(output_name: str) -> str:
    """What every shard file (and its partial files) of the output ``output_name`` starts with."""
    return f"{output_name}.shard-"


def create_shard_layout(f: h5py.File, rows: int, columns: int, hops: int, operators: tuple[str, ...], dtype: str,
                        c: int, width: int) -> None:
    """Allocate a shard's hop datasets: ``/channels/<op>/<k>`` [rows, columns] (hop 0 shared by
    the operators, ``/hops/<k>`` links to the first operator's), in ``c`` column blocks of
    ``width`` (one block: contiguous, written with O_DIRECT like a one-process artifact)."""
    _create_hops(f, hops, operators, _allocated((rows, columns), dtype, hop_chunks(rows, width, c, dtype)))


def create_hdg_shard_layout(f: h5py.File, channels: tuple[str, ...], hops: int, rows: int, columns: int, dtype: str,
                            c: int, width: int) -> None:
    """Allocate a rank's HDG file: ``/channels/<channel>/<k>`` [rows, columns] for every HDG channel
    and hop, chunked as a one-process artifact's channels (``c`` column blocks of ``width``)."""
    _create_hdg_channels(f.create_group(CHANNELS), channels, hops, (rows, columns), dtype,
                         hop_chunks(rows, width, c, dtype))


def publish_hdg_channels(f: h5py.File, n: int, d: int, hops: int, channels: tuple[str, ...], dtype: str,
                         shards: list[dict], merge_from: Path | None, c: int, width: int,
                         row_bytes: int = 64 << 20) -> None:
    """The published ``/channels/<channel>/<k>`` [n, d] of a sharded run: HDF5 virtual datasets over
    the ranks' HDG files (relative names, as the hops), or with ``merge_from`` (their folder) copies
    of them, chunked as a one-process artifact's (``c`` column blocks of ``width``)."""
    group = f[CHANNELS]
    for ch in channels:
        g = group.create_group(ch)
        for k in range(hops + 1):
            name = channel_path(ch, k)
            if merge_from is None:
                layout = h5py.VirtualLayout(shape=(n, d), dtype=np.dtype(dtype))
                for s in shards:
                    c0, c1 = s["columns"]
                    layout[:, c0:c1] = h5py.VirtualSource(s["file"], name, shape=(n, c1 - c0), dtype=np.dtype(dtype))
                g.create_virtual_dataset(str(k), layout, fillvalue=np.nan)
                continue
            ds = create_early(g, str(k), (n, d), dtype, hop_chunks(n, width, c, dtype))
            for s in shards:
                c0, c1 = s["columns"]
                with open_shard(merge_from / s["file"]) as src:
                    a = src[name]
                    step = max(1, row_bytes // max(1, (c1 - c0) * a.dtype.itemsize))
                    for p0 in range(0, n, step):
                        ds[p0:min(n, p0 + step), c0:c1] = a[p0:min(n, p0 + step)]


def write_shard_root(f: h5py.File, provenance: dict, shard: dict) -> None:
    """A finished shard's root attributes: ``shard`` (JSON: run key, rank, ranks, columns, ...)."""
    write_root_attrs(f, SHARD_FORMAT, 1, provenance, shard=json.dumps(shard, sort_keys=True))


def read_shard_attr(path, name: str = "shard") -> dict | None:
    """The JSON attribute ``name`` (``shard``, or ``provenance``) of a finished shard file, or None
    (absent, unreadable, another file)."""
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != SHARD_FORMAT:
                return None
            value = json.loads(f.attrs[name])
            return value if isinstance(value, dict) else None
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _rows_labels_splits(f: h5py.File, store: GraphStore, out_rows: np.ndarray | None) -> None:
    """``/rows`` (the stored node ids), ``/labels`` of those rows, ``/splits`` as in the store."""
    n = store.features.shape[0]
    h5file.put(f, "rows", data=(np.arange(n) if out_rows is None else out_rows).astype(
        np.int32 if n < 2**31 else np.int64))
    labels = store.labels()
    if labels is not None:
        h5file.put(f, "labels", data=labels if out_rows is None else labels[out_rows])
    sp = f.create_group("splits")
    for name, ids in store.splits().items():
        h5file.put(sp, name, data=ids)


def create_virtual_layout(f: h5py.File, store: GraphStore, out_rows: np.ndarray | None, hops: int,
                          operators: tuple[str, ...], dtype: str, shards: list[dict]) -> None:
    """The published artifact of a sharded run: ``/rows``, ``/labels``, ``/splits`` as
    :func:`create_layout` writes them, and every hop dataset an HDF5 virtual dataset whose columns
    ``shard["columns"]`` map the same dataset of the shard file ``shard["file"]`` (a name relative
    to the artifact's folder: HDF5 looks for relative source files next to the virtual file, so the
    folder can be moved). A missing shard would read as the fill value, NaN, never as plausible
    zeros; ``gnnprep info`` checks that every shard is present (:func:`check_shards`)."""
    n, d = store.features.shape
    r = n if out_rows is None else len(out_rows)
    _rows_labels_splits(f, store, out_rows)

    def virtual(g, op, k):
        layout = h5py.VirtualLayout(shape=(r, d), dtype=np.dtype(dtype))
        for s in shards:
            c0, c1 = s["columns"]
            layout[:, c0:c1] = h5py.VirtualSource(s["file"], channel_path(op, k), shape=(r, c1 - c0),
                                                  dtype=np.dtype(dtype))
        g.create_virtual_dataset(str(k), layout, fillvalue=np.nan)

    _create_hops(f, hops, operators, virtual)


def merge_shards(f: h5py.File, store: GraphStore, out_rows: np.ndarray | None, hops: int, operators: tuple[str, ...],
                 dtype: str, c: int, width: int, folder, shards: list[dict], row_bytes: int = 64 << 20) -> None:
    """The published artifact of a sharded run with ``--merge``: the layout of a one-process run
    (:func:`create_layout`, ``c`` column blocks of ``width``) with every shard's columns copied in,
    ``row_bytes`` of rows at a time."""
    from pathlib import Path

    create_layout(f, store, out_rows, hops, operators, dtype, c, width)
    first = operators[0]
    names = [channel_path(first, 0)] + [channel_path(op, k) for op in operators for k in range(1, hops + 1)]
    for s in shards:
        c0, c1 = s["columns"]
        with open_shard(Path(folder) / s["file"]) as src:
            for name in names:
                a, b = src[name], f[name]
                step = max(1, row_bytes // max(1, (c1 - c0) * a.dtype.itemsize))
                for p0 in range(0, a.shape[0], step):
                    p1 = min(a.shape[0], p0 + step)
                    b[p0:p1, c0:c1] = a[p0:p1]


def check_shards(f: h5py.File, path) -> list[dict] | None:
    """The shards of a sharded artifact (root attribute ``shards``), each with ``present`` and
    ``bytes_on_disk``; None for an ordinary artifact. A shard that is missing, has another size
    than recorded or belongs to another run is a GnnprepError naming it (HDF5 would read its
    columns as the fill value)."""
    if "shards" not in f.attrs:
        return None
    shards = json_attr(f.attrs, "shards", path, list)
    folder = Path(path).absolute().parent
    out = []
    for s in shards:
        if not isinstance(s, dict) or not isinstance(s.get("file"), str) or "/" in s["file"]:
            raise GnnprepError(f"{path}: root attribute 'shards' has {s!r}; expected objects with a file name")
        p = folder / s["file"]
        present = p.is_file()
        size = p.stat().st_size if present else None
        if not present:
            raise GnnprepError(f"{path}: shard {s['file']} is missing (rank {s.get('rank')}'s columns "
                               f"{s.get('columns')}; expected next to the artifact)")
        if s.get("bytes") is not None and size != s["bytes"]:
            raise GnnprepError(f"{path}: shard {s['file']} has {size} bytes; expected {s['bytes']} "
                               "(it was replaced or damaged)")
        attr = read_shard_attr(p)
        if attr is None or attr.get("key") != s.get("key"):
            raise GnnprepError(f"{path}: shard {s['file']} is not the shard this artifact was published with "
                               "(another run's, or unreadable)")
        with h5py.File(p, "r") as shard:
            check_self_contained(shard, p)   # a shard, too, reads only itself
        out.append({**s, "present": True, "bytes_on_disk": size})
    _check_virtual_sources(f, path, folder, {s["file"] for s in out})
    return out


def _check_virtual_sources(f: h5py.File, path, folder: Path, files: set[str]) -> None:
    """GnnprepError unless every source of every virtual dataset of ``f`` that reads a shard in
    ``files`` is a dataset of that shard with the virtual dataset's dtype and the mapped shape:
    HDF5 reads a source it cannot find as the fill value (NaN), never as an error. (Sources in
    other files were refused by :func:`~gnnprep.core.artifact.check_self_contained`.)"""
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) and obj.is_virtual else None)
    handles: dict[str, h5py.File] = {}
    try:
        for name in names:
            ds = f[name]
            for src in ds.virtual_sources():
                if src.file_name not in files:
                    continue
                if src.file_name not in handles:
                    handles[src.file_name] = h5py.File(folder / src.file_name, "r")
                obj = handles[src.file_name].get(src.dset_name)
                if not isinstance(obj, h5py.Dataset):
                    raise GnnprepError(f"{path}: shard {src.file_name} has no dataset {src.dset_name}, which /{name} "
                                       "reads; expected the shard this artifact was published with (its columns "
                                       "would read as NaN)")
                # the block of the virtual dataset it maps (gnnprep maps a whole source dataset to a block)
                lo, hi = src.vspace.get_select_bounds() if src.vspace.get_select_npoints() else ((0,), (-1,))
                want = tuple(int(b) - int(a) + 1 for a, b in zip(lo, hi))
                if (src.vspace.get_select_npoints() and obj.shape != want) or obj.dtype != ds.dtype:
                    raise GnnprepError(f"{path}: shard {src.file_name} has {src.dset_name} of shape {obj.shape} "
                                       f"({obj.dtype}); /{name} reads it as {want} ({ds.dtype}): expected the shard "
                                       "this artifact was published with")
    finally:
        for h in handles.values():
            h.close()


SHARD_FILE = re.compile(r"^(.*\.shard-\d+-of-\d+-[0-9a-f]+\.h5)(.*)$")


def sweep_shards(output: Path, keep) -> None:
    """Remove the shard files (and partial shards) of ``output`` not named in ``keep``: those of
    earlier sharded runs, which the artifact just published no longer reads. A partial shard whose
    lock is held (a rank writing it now) is left alone."""
    import fcntl

    prefix = shard_prefix(output.name)
    groups: dict[str, list[Path]] = {}
    try:
        entries = list(output.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = SHARD_FILE.match(entry.name) if entry.name.startswith(prefix) else None
        if m is not None and m.group(1) not in keep:
            groups.setdefault(m.group(1), []).append(entry)
    for base, files in groups.items():
        lock = output.parent / f"{base}.partial.lock"
        if lock.exists():
            try:
                with open(lock, "a") as fh:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a rank is writing this shard
        for p in files:
            try:
                p.unlink()
            except OSError:
                pass


# -- the description for ``gnnprep info`` ---------------------------------------------------------------
def _plan(f, path) -> dict:
    plan = json_attr(f.attrs, "plan", path, dict, {}, "attribute")
    return {k: plan.get(k, "?") for k in ("a", "b", "c", "device")} | plan


def describe(path: Path) -> dict:
    with FeatureStore(path) as fs:
        f = fs.f
        h0 = dataset_or_none(f, "hops/0", path, 2)
        if h0 is None:
            raise GnnprepError(f"{path}: has no /hops/0; the features artifact is incomplete")
        prov = json_attr(f.attrs, "provenance", path, dict, {}, "attribute")
        seconds = prov.get("timings", {}).get("hop_seconds") if isinstance(prov.get("timings"), dict) else None
        order = prov.get("reorder")
        shards = fs.shards  # a sharded artifact (torchrun): every shard present (checked as it was opened)
        operators = json_attr(f.attrs, "operators", path, list, [str(attr_value(f.attrs.get("operator", "sym")))], "attribute")
        return {
            "file": str(path),
            "format": "gnnprep.features",
            "format_version": int(f.attrs["format_version"]),
            "hops": count_attr(f.attrs, "hops", path),
            "operators": [str(o) for o in operators],
            "rows": int(h0.shape[0]),
            "row_selection": attr_value(f.attrs.get("rows")),
            "num_features": int(h0.shape[1]),
            "dtype": str(h0.dtype),
            "num_classes": count_attr(f.attrs, "num_classes", path, 0),
            "splits": split_sizes(f, path),
            "plan": _plan(f, path),
            "hop_seconds": seconds if isinstance(seconds, list) and all(
                isinstance(s, (int, float)) for s in seconds) else None,
            "node_order": order if isinstance(order, dict) and {"kind", "used"} <= set(order) else None,
            "graph_fingerprint": attr_value(f.attrs.get("graph_fingerprint")),
            "size_bytes": path.stat().st_size,
            "created_utc": attr_value(f.attrs.get("created_utc")),
            "shards": shards,
            "shards_bytes": sum(s["bytes_on_disk"] for s in shards) if shards is not None else None,
            "operator_sources": json_attr(f.attrs, "operator_sources", path, dict, {}, "attribute"),
        }


# the train stage registers its Features (this reader plus torch batches) over FeatureStore for gnnprep.open
register_format(FORMAT, reader=FeatureStore, describer=describe)
