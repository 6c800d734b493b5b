"""The HDF5 graph store (``format = "gnnprep.graph"``): layout constants, a reader, the writer's helpers.

Layout (see docs/formats.md, "graph.h5"): ``/adj/indptr`` [n+1], ``/adj/indices`` [m] (row v lists the
sources v aggregates from, sorted, no duplicates, no self-loops), ``/nodes/features`` [n, d],
``/nodes/labels`` [n] (-1 = unknown), ``/splits/{train,valid,test}``, optional ``/nodes/type``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from gnnprep.core import h5file, pagecache
from gnnprep.core.artifact import (
    FORMAT_VERSIONS,
    Artifact,
    attr_value,
    count_attr,
    dataset_or_none,
    json_attr,
    register_format,
)
from gnnprep.core.errors import GnnprepError
from gnnprep.core.memory import empty_pages, fault_in
from gnnprep.graph.sources.base import SPLIT_NAMES

FORMAT = "gnnprep.graph"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]
FEATURE_CHUNK_BYTES = 1 << 20


FEATURE_TILE_COLUMNS = 16   # columns of one chunk of /nodes/features (64 B of a float32 row)
FEATURE_READ_AHEAD = 64 << 20   # bytes of a column block's tiles asked of the disk ahead of the reads (_TileHints)


def feature_chunk_rows(num_features: int, itemsize: int) -> int:
    """Rows per HDF5 chunk so that one chunk is about 1 MiB."""
    return max(1, FEATURE_CHUNK_BYTES // max(1, num_features * itemsize))


def feature_chunk_shape(num_features: int, itemsize: int) -> tuple[int, int]:
    """(rows, columns) of one chunk of ``/nodes/features`` as ingest writes it: tiles of
    :data:`FEATURE_TILE_COLUMNS` columns, about 1 MiB each. precompute reads X one column block at a
    time; with chunks spanning every column each of c blocks read all of X (c × 57 GB at papers100M,
    issue 24), with tiles a block reads about its own bytes (papers100M's plans use up to c = 8
    blocks of 16 columns at d = 128). Whole rows cost d / 16 chunk reads."""
    cols = max(1, min(num_features, FEATURE_TILE_COLUMNS))
    return feature_chunk_rows(cols, itemsize), cols


def check_ids(ids: np.ndarray, n: int, what: str, offset: int = 0) -> None:
    """GnnprepError unless every id is in [0, n); ``offset`` is the position of ``ids[0]`` in the
    dataset, for the message. Run on every index array read from an artifact before a compiled
    kernel uses it."""
    if len(ids) == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= n:
        bad = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
        raise GnnprepError(f"{what}[{offset + bad}] = {int(ids[bad])}: expected a node id in [0, {n}) "
                           "(the file is corrupt)")


def check_indptr(indptr: np.ndarray, n: int, m: int, what: str) -> None:
    """GnnprepError unless ``indptr`` is a CSR row pointer for n rows and m entries."""
    if indptr.ndim != 1 or len(indptr) != n + 1:
        raise GnnprepError(f"{what} has shape {indptr.shape}; expected [{n + 1}] (the file is corrupt)")
    if indptr[0] != 0 or indptr[-1] != m:
        raise GnnprepError(f"{what} runs from {int(indptr[0])} to {int(indptr[-1])}; expected 0 to {m} "
                           "(the file is corrupt)")
    drops = np.flatnonzero(np.diff(indptr) < 0)
    if len(drops):
        raise GnnprepError(f"{what} decreases at row {int(drops[0])}; expected non-decreasing offsets "
                           "(the file is corrupt)")


def _stored_bytes(feats: h5py.Dataset, s: int, e: int, c0: int, c1: int) -> int:
    """Bytes of ``feats`` HDF5 reads for rows s:e and columns c0:c1: the whole chunks they touch
    (uncompressed size), or the elements themselves when the dataset is not chunked."""
    item = feats.dtype.itemsize
    if feats.chunks is None or e <= s or c1 <= c0:
        return max(0, e - s) * max(0, c1 - c0) * item
    ch, cw = feats.chunks
    rows = (-(-e // ch) - s // ch) * ch
    tiles = -(-c1 // cw) - c0 // cw
    return rows * tiles * cw * item


# what each dataset of a store may hold: (dtype kinds, largest itemsize, what to say)
_STORED_KINDS = {
    "adj/indptr": ("iu", 8, "an integer row pointer"),
    "adj/indices": ("iu", 8, "integer node ids (int32 or int64)"),
    "adj/weights": ("f", 8, "float edge weights"),
    "nodes/features": ("f", 8, "float features (float32 or float16)"),
    "nodes/labels": ("iu", 8, "integer class ids"),
}


def check_stored_kinds(f: h5py.File, path: Path) -> None:
    """On open: every array a store reader uses is a dataset of the kind it reads (ids that are
    floats holding NaN, complex numbers or object references are refused here, not met as a raw
    exception or silently cast later) and readable here: an HDF5 filter it needs that this HDF5
    build lacks (a compression plugin) is named in one line rather than failing at the first read."""
    for name, (kinds, widest, what) in _STORED_KINDS.items():
        ds = f.get(name)
        if ds is None:
            continue
        if not isinstance(ds, h5py.Dataset):
            raise GnnprepError(f"{path}: /{name} is a {type(ds).__name__.lower()}; expected a dataset of {what}")
        if ds.dtype.kind not in kinds or ds.dtype.itemsize > widest:
            raise GnnprepError(f"{path}: /{name} is {ds.dtype} of shape {ds.shape}; expected {what} (the file is "
                               "corrupt or not written by gnnprep)")
        plist = ds.id.get_create_plist()
        for i in range(plist.get_nfilters()):
            code, _, _, label = plist.get_filter(i)
            if not h5py.h5z.filter_avail(code):
                label = label.decode(errors="replace") if isinstance(label, bytes) else str(label)
                raise GnnprepError(f"{path}: /{name} needs the HDF5 filter {label or 'unnamed'!r} (id {code}), which "
                                   "this HDF5 does not have; install its plugin (hdf5plugin) or rewrite the dataset "
                                   "without it")


class GraphStore(Artifact):
    """Read access to a graph store. Arrays are read lazily, in row blocks where they scale."""

    FORMAT = FORMAT

    def __init__(self, path: str | Path):
        super().__init__(path)
        for name in ("adj/indptr", "adj/indices"):
            if name not in self.f:
                self.f.close()
                raise GnnprepError(f"{self.path}: missing dataset /{name}; the graph store is incomplete")
        try:
            check_stored_kinds(self.f, self.path)
        except BaseException:
            self.f.close()
            raise
        for name in ("num_nodes", "num_edges"):
            value = self.f.attrs.get(name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                self.f.close()
                raise GnnprepError(f"{self.path}: root attribute {name!r} is {value!r}; expected a count")
        if len(self.f["adj/indices"]) != self.num_edges or len(self.f["adj/indptr"]) != self.num_nodes + 1:
            shapes = (self.f["adj/indptr"].shape, self.f["adj/indices"].shape)
            self.f.close()
            raise GnnprepError(f"{self.path}: /adj/indptr and /adj/indices have shapes {shapes[0]} and {shapes[1]}; "
                               f"expected [num_nodes + 1] and [num_edges] (the file is corrupt)")
        # bytes of /nodes/features read from the file so far (whole HDF5 chunks: a chunk is read as
        # one piece even when only some of its columns are wanted); a sharded precompute reports it
        # per rank (each rank reads only the tiles of its columns)
        self.feature_bytes_read = 0

    @property
    def attrs(self) -> h5py.AttributeManager:
        return self.f.attrs

    @property
    def num_nodes(self) -> int:
        return int(self.f.attrs["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.f.attrs["num_edges"])

    @property
    def symmetric(self) -> bool:
        return bool(self.f["adj"].attrs.get("symmetric", False))

    @property
    def fingerprint(self) -> str:
        return str(self.f.attrs.get("fingerprint", ""))

    def indptr(self) -> np.ndarray:
        """``/adj/indptr``, checked: n+1 entries, from 0, non-decreasing, ending at m (a corrupt array
        would otherwise send the kernels out of bounds). Read and checked once per open store (a
        precompute asks for it to plan, to estimate locality and to compute: 888 MB at papers100M);
        callers must not modify it."""
        if getattr(self, "_indptr", None) is None:
            ip = self.f["adj/indptr"][:].astype(np.int64, copy=False)
            check_indptr(ip, self.num_nodes, self.num_edges, f"{self.path}: /adj/indptr")
            self._indptr = ip
        return self._indptr

    @property
    def weighted(self) -> bool:
        """Whether the store has edge weights (``/adj/weights``)."""
        return "adj/weights" in self.f

    def page_cached(self) -> tuple[float | None, float | None]:
        """The shares of X's and of ``/adj/indices``' bytes the page cache holds now (None: unknown;
        :func:`gnnprep.core.pagecache.dataset_share`): what the planner counts as read from the disk."""
        return pagecache.dataset_share(self.f["nodes/features"]), pagecache.dataset_share(self.f["adj/indices"])

    @property
    def index_dtype(self) -> np.dtype:
        """The stored dtype of ``/adj/indices`` (int32 or int64)."""
        return self.f["adj/indices"].dtype

    @property
    def adj_bytes(self) -> int:
        """Bytes of the adjacency arrays (``/adj/*``) as stored."""
        return int(sum(ds.nbytes for ds in self.f["adj"].values()))

    def stored_indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``/adj/indices[start:stop]`` in its stored dtype, *unchecked*: for readers that check the
        ids themselves (the kernels' inputs are checked once per block by their caller)."""
        return self.f["adj/indices"][start:stop]

    def stored_weights(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``/adj/weights[start:stop]`` as stored (float32), unchecked (see :meth:`weight_blocks`)."""
        return self.f["adj/weights"][start:stop]

    def read_indices(self, start: int, stop: int, out: np.ndarray | None = None, check: bool = True) -> np.ndarray:
        """``/adj/indices[start:stop]``, read straight into ``out[:stop - start]`` when given (a
        buffer kept across blocks: no allocation per block), each id checked to lie in [0, n) unless
        ``check`` is False (a range this reader has checked before)."""
        if out is None:
            ids = self.stored_indices(start, stop)
        else:
            ids = out[:stop - start]
            if stop > start:
                self.f["adj/indices"].read_direct(ids, np.s_[start:stop], np.s_[0:stop - start])
        if check:
            check_ids(ids, self.num_nodes, f"{self.path}: /adj/indices", offset=start)
        return ids

    def read_weights(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """``/adj/weights[start:stop]``, read straight into ``out[:stop - start]`` when given."""
        if out is None:
            return self.stored_weights(start, stop)
        w = out[:stop - start]
        if stop > start:
            self.f["adj/weights"].read_direct(w, np.s_[start:stop], np.s_[0:stop - start])
        return w

    @property
    def indices_dataset(self) -> h5py.Dataset:
        """``/adj/indices`` as the open dataset, for readers that walk it in windows of their own
        (:func:`gnnprep.sparse.order.near_share_windows`); unchecked."""
        return self.f["adj/indices"]

    def kept_order(self, kind: str) -> h5py.Dataset | None:
        """The node order of ``kind`` kept in the store at ingest (``/order/<kind>``), or None."""
        ds = self.f.get(order_path(kind))
        return ds if isinstance(ds, h5py.Dataset) else None

    def indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``/adj/indices[start:stop]`` as int64, checked to lie in [0, n)."""
        idx = self.f["adj/indices"][start:stop].astype(np.int64, copy=False)
        check_ids(idx, self.num_nodes, f"{self.path}: /adj/indices")
        return idx

    def weight_blocks(self, blocks: int):
        """(r0, r1, p0, p1, w) for ``blocks`` contiguous row ranges: the stored edge weights of rows
        r0..r1-1 (entries p0..p1-1) as float64, checked finite and non-negative (one error naming the
        first bad entry); w = 1 on an unweighted store."""
        indptr, n = self.indptr(), self.num_nodes
        weighted = "adj/weights" in self.f
        for rows in np.array_split(np.arange(n), max(1, min(blocks, n))):
            if not len(rows):
                continue
            r0, r1 = int(rows[0]), int(rows[-1]) + 1
            p0, p1 = int(indptr[r0]), int(indptr[r1])
            w = self.f["adj/weights"][p0:p1].astype(np.float64) if weighted else np.ones(p1 - p0)
            if weighted and (not np.isfinite(w).all() or (w < 0).any()):
                bad = p0 + int(np.flatnonzero(~np.isfinite(w) | (w < 0))[0])
                raise GnnprepError(f"{self.path}: /adj/weights[{bad}] = {w[bad - p0]}; expected a finite, "
                                   "non-negative edge weight")
            yield r0, r1, p0, p1, w

    def in_degree(self, blocks: int = 16) -> np.ndarray:
        """Row sums of A: the entries of each row, or their weight sum on a weighted store (float64)."""
        counts = np.diff(self.indptr())
        if "adj/weights" not in self.f:
            return counts.astype(np.float64)
        deg = np.zeros(self.num_nodes)
        for r0, r1, _, _, w in self.weight_blocks(blocks):
            deg[r0:r1] = np.bincount(np.repeat(np.arange(r1 - r0), counts[r0:r1]), weights=w, minlength=r1 - r0)
        return deg

    def csr(self):
        """The whole adjacency as scipy CSR (for graphs that fit in memory; tests and small runs)."""
        import scipy.sparse as sp

        n = self.num_nodes
        data = np.ones(self.num_edges, dtype=np.float32)
        return sp.csr_matrix((data, self.f["adj/indices"][:], self.indptr()), shape=(n, n))

    @property
    def features(self) -> h5py.Dataset | None:
        """``/nodes/features`` [n, d] float (read lazily), or None."""
        if "nodes/features" not in self.f:
            return None
        x = self.f["nodes/features"]
        if x.ndim != 2 or x.shape[0] != self.num_nodes or x.dtype.kind != "f":
            raise GnnprepError(f"{self.path}: /nodes/features is {x.dtype} of shape {x.shape}; expected floats of "
                               f"shape [{self.num_nodes}, d] (the file is corrupt)")
        return x

    def check_features_written(self) -> None:
        """GnnprepError unless every part of ``/nodes/features`` was written: HDF5 reads a chunk that
        was never written as zeros, so a store declaring [n, 10**8] in a file of 1 MiB would be
        computed on for hours (issue 32). Ingest writes every chunk; counting them is O(chunks)
        in HDF5's index, without reading data."""
        x = self.features
        if x is None or x.size == 0:
            return
        if x.chunks is None:
            if x.id.get_storage_size() < x.nbytes:
                raise GnnprepError(f"{self.path}: /nodes/features declares {x.nbytes:,} bytes but stores "
                                   f"{x.id.get_storage_size():,} (never written: a damaged or partial store; ingest it again)")
            return
        want = 1
        for size, chunk in zip(x.shape, x.chunks):
            want *= -(-size // chunk)
        have = x.id.get_num_chunks()
        if have < want:
            raise GnnprepError(f"{self.path}: /nodes/features has {have:,} of its {want:,} chunks written (the rest "
                               f"would read as zeros: a damaged or partial store; ingest it again)")

    def feature_columns(self, c0: int, c1: int, out: np.ndarray | None = None) -> np.ndarray:
        """X[:, c0:c1] as float32, read in small row steps (no large temporaries) and checked finite.

        Unfiltered float32 row chunks (as ingest writes them) are read raw, chunk by chunk, and their
        columns copied out: about twice as fast as HDF5's column hyperslab selection. When only some
        of the column tiles are wanted, the kernel's readahead is switched off for the read
        (``posix_fadvise(RANDOM)``): the tiles of a row block lie next to each other in the file, and
        readahead after each ~1 MiB tile would bring in the neighbouring tiles too (measured: 52 MiB
        read from the disk for 28 MiB of tiles at 100k × 128, 31 MiB without readahead) — on a
        shared filesystem every rank of a sharded precompute would fetch all of X again. ``out``: a
        float32 array of (n, c1 - c0) to read into (a new one when None)."""
        feats, n = self.features, self.num_nodes
        if out is None:
            xb = empty_pages((n, c1 - c0))
            fault_in(xb)   # by several threads: the reads below would map it one thread at a time
        else:
            xb = out
        raw = feats.dtype == np.float32 and feats.chunks is not None \
            and feats.compression is None and not feats.shuffle and not feats.fletcher32 and feats.scaleoffset is None
        step = feats.chunks[0] if raw else max(1, (4 << 20) // max(1, (c1 - c0) * 4))
        tile = feats.chunks[1] if raw else 1
        some = raw and (c0 // tile > 0 or (c1 - 1) // tile < (feats.shape[1] - 1) // tile)   # not every tile
        fd = self._advise("random") if some else None
        try:
            self._read_columns(feats, n, c0, c1, xb, raw, step)
        finally:
            if fd is not None:
                self._advise("normal")
        return xb

    def _advise(self, how: str) -> int | None:
        """posix_fadvise(RANDOM or NORMAL) on the store's file; None where it cannot be given."""
        advice = getattr(os, "POSIX_FADV_RANDOM" if how == "random" else "POSIX_FADV_NORMAL", None)
        try:
            fd = self.f.id.get_vfd_handle()
            if advice is None or not isinstance(fd, int):
                return None
            os.posix_fadvise(fd, 0, 0, advice)
            return fd
        except (OSError, ValueError, TypeError, AttributeError, RuntimeError):
            return None

    def _read_columns(self, feats, n: int, c0: int, c1: int, xb: np.ndarray, raw: bool, step: int) -> None:
        hints = _TileHints(self, feats, n, c0, c1, step) if raw else None
        tiles = _RawTiles(feats, c0, c1) if raw else None
        for s in range(0, n, step):
            e = min(n, s + step)
            if raw:
                hints.ahead_of(s)
                finite = tiles.read_into(self, s, xb[s:e])
                raw = finite is not None
            if not raw:
                self.feature_bytes_read += _stored_bytes(feats, s, e, c0, c1)
                if feats.dtype == np.float32:
                    feats.read_direct(xb, np.s_[s:e, c0:c1], np.s_[s:e])
                else:
                    xb[s:e] = feats[s:e, c0:c1]
                finite = bool(np.isfinite(xb[s:e]).all())
            if not finite:
                raise GnnprepError(f"{self.path}: /nodes/features has non-finite values in rows {s}..{e - 1}")

    def feature_row_l1(self) -> np.ndarray:
        """Σ_j |X_ij| per row [n] (float64), read in row chunks: one pass over X."""
        feats, n = self.features, self.num_nodes
        step = feats.chunks[0] if feats.chunks is not None else max(1, (4 << 20) // max(1, 4 * feats.shape[1]))
        out = np.empty(n, dtype=np.float64)
        for s in range(0, n, step):
            self.feature_bytes_read += _stored_bytes(feats, s, min(n, s + step), 0, feats.shape[1])
            out[s:s + step] = np.abs(feats[s:s + step]).sum(axis=1, dtype=np.float64)
        return out

    def labels(self) -> np.ndarray | None:
        """``/nodes/labels`` [n] (−1 unknown), or None."""
        if "nodes/labels" not in self.f:
            return None
        labels = self.f["nodes/labels"]
        if labels.shape != (self.num_nodes,) or labels.dtype.kind not in "iu":
            raise GnnprepError(f"{self.path}: /nodes/labels is {labels.dtype} of shape {labels.shape}; expected "
                               f"integers of shape [{self.num_nodes}] (the file is corrupt)")
        return labels[:]

    def splits(self) -> dict[str, np.ndarray]:
        """The splits' node ids, checked to lie in [0, n)."""
        if "splits" not in self.f:
            return {}
        out = {}
        for k in self.f["splits"]:
            ids = self.f["splits"][k][:]
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                raise GnnprepError(f"{self.path}: /splits/{k} is {ids.dtype} of shape {ids.shape}; expected node ids")
            out[k] = ids.astype(np.int64)
            check_ids(out[k], self.num_nodes, f"{self.path}: /splits/{k}")
        return out

    def check_built_for(self, path, kind: str, graph_fingerprint, num_nodes: int) -> None:
        """GnnprepError unless the artifact at ``path`` (a ``kind``: HAG, HDG) was built for this graph."""
        if graph_fingerprint != self.fingerprint:
            raise GnnprepError(f"{path}: graph_fingerprint does not match {self.path}; this {kind} was built for "
                               "another graph")
        if num_nodes != self.num_nodes:
            raise GnnprepError(f"{path}: num_nodes is {num_nodes}; expected {self.num_nodes}, the nodes of {self.path} "
                               "(the file is corrupt)")

    def node_types(self) -> list[str] | None:
        """The type names of a heterogeneous store (root attribute ``node_types``), or None."""
        names = json_attr(self.f.attrs, "node_types", self.path, list, None)
        if names is not None and not all(isinstance(t, str) for t in names):
            raise GnnprepError(f"{self.path}: root attribute 'node_types' is not a JSON list of names (the file is corrupt)")
        return names

    def node_type_codes(self) -> tuple[np.ndarray, list[str]] | None:
        """``/nodes/type`` [n] (codes into :meth:`node_types`, checked) and the names, or None."""
        names = self.node_types()
        if names is None or "nodes/type" not in self.f:
            return None
        ds = self.f["nodes/type"]
        if not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in "iu" or ds.shape != (self.num_nodes,):
            raise GnnprepError(f"{self.path}: /nodes/type has shape {getattr(ds, 'shape', None)}; expected "
                               f"[{self.num_nodes}] integer type codes (the file is corrupt)")
        codes = ds[:].astype(np.int64)
        check_ids(codes, len(names), f"{self.path}: /nodes/type")
        return codes, names


# -- the layout's paths and the writer's side of it: ingest writes graph.h5 through these ------------------
ADJ_GROUP = "adj"              # group: the CSR ``indptr`` [n+1] and ``indices`` [m] (csr_builder writes them)
INDPTR = "adj/indptr"          # [n+1] int64 row pointer
INDICES = "adj/indices"        # [m] int32 or int64 source ids, sorted within each row
NODES_GROUP = "nodes"          # group of the per-node datasets below
FEATURES = "nodes/features"    # [n, d] float32 or float16, chunked in tiles (:func:`feature_chunk_shape`)
LABELS = "nodes/labels"        # [n] int64, -1 where unknown
NODE_TYPE = "nodes/type"       # [n] int16, heterogeneous graphs only
SPLITS_GROUP = "splits"        # group: ``train``, ``valid``, ``test``, sorted node ids
ORDER_GROUP = "order"          # group: node orders kept at ingest (:func:`order_path`); attrs ``chosen``, ``why``


def order_path(kind: str) -> str:
    """The dataset of the node order ``kind`` kept in the store: ``order/<kind>`` [n]."""
    return f"{ORDER_GROUP}/{kind}"


def writing(tmp: Path, mode: str = "w"):
    """The graph store being written at ``tmp`` (``mode`` ``w``, or ``r+`` to add to a copy): a file
    whose failed writes (a write, a flush, the flush at close) close it cleanly and come out as an
    OSError with their errno (:func:`gnnprep.core.h5file.writing`), which
    :func:`gnnprep.core.output.atomic_output` reports in one line. Writers flush each chunked dataset
    before dropping it: h5py closes a dataset when the object is freed, and a failure there (its chunk
    cache failing to reach the disk) is only remembered until the file is closed."""
    return h5file.writing(tmp, mode)


def create_adjacency(f: h5py.File) -> h5py.Group:
    """The empty ``/adj`` group, which the CSR builder fills with ``indptr`` and ``indices``."""
    return f.create_group(ADJ_GROUP)


def finish_adjacency(adj: h5py.Group, n: int, symmetric: bool) -> None:
    """The ``/adj`` group's attributes: ``shape`` [n, n] and ``symmetric``."""
    adj.attrs["shape"] = np.array([n, n], dtype=np.int64)
    adj.attrs["symmetric"] = bool(symmetric)


def create_node_rows(f: h5py.File, name: str, n: int, width: int | None, dtype) -> h5py.Dataset:
    """A per-node dataset (:data:`FEATURES`, :data:`LABELS`, :data:`NODE_TYPE`) of n rows of
    ``width`` columns (1-D when None), chunked as the store is read: feature tiles of
    :func:`feature_chunk_shape`, about 1 MiB of rows otherwise. No chunk cache: a writer stores
    blocks once, in order, so caching chunks would only add a copy of every byte."""
    shape, chunk = _node_rows_layout(n, width, dtype)
    if name in f:   # a resumed ingest's (gnnprep.graph.ingest): written again in place, its space reused
        if has_node_rows(f, name, n, width, dtype):
            # with a cache of a few chunks: without one, HDF5 writes a block into chunks that exist
            # row by row (a 1.4 GB copy took 21-24 s against 1.2 s with an 8 MiB cache)
            dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
            chunk_bytes = int(np.prod(chunk)) * np.dtype(dtype).itemsize
            dapl.set_chunk_cache(1009, max(8 << 20, 4 * chunk_bytes), 1.0)
            return h5py.Dataset(h5py.h5d.open(f.id, name.encode(), dapl))
        del f[name]
    return f.create_dataset(name, shape=shape, dtype=dtype, chunks=chunk,
                            rdcc_nbytes=0, rdcc_nslots=1)  # h5py ignores rdcc_nbytes=0 given alone


def _node_rows_layout(n: int, width: int | None, dtype) -> tuple[tuple, tuple | None]:
    """(shape, chunk shape) of a per-node dataset (:func:`create_node_rows`)."""
    shape = (n, width) if width is not None else (n,)
    if width is not None:
        rows_per_chunk, cols = feature_chunk_shape(width, np.dtype(dtype).itemsize)
        chunk = (min(max(n, 1), rows_per_chunk), cols)
    else:
        chunk = (min(max(n, 1), feature_chunk_rows(1, np.dtype(dtype).itemsize)),)
    return shape, chunk if n else None


def has_node_rows(f: h5py.File, name: str, n: int, width: int | None, dtype) -> bool:
    """Whether ``f`` holds the per-node dataset ``name`` as :func:`create_node_rows` makes it."""
    ds = f.get(name)
    shape, chunk = _node_rows_layout(n, width, dtype)
    return isinstance(ds, h5py.Dataset) and ds.shape == shape and ds.dtype == np.dtype(dtype) and ds.chunks == chunk


def write_splits(f: h5py.File, splits: dict[str, np.ndarray]) -> None:
    """``/splits/<name>`` for each split (sorted node ids, stored in the dtype given)."""
    grp = f.create_group(SPLITS_GROUP)
    for name, ids in splits.items():
        h5file.put(grp, name, data=ids)


def read_provenance(path: str | os.PathLike):
    """The ``provenance`` root attribute of the graph store at ``path``, parsed from JSON, read with
    no checks at all (ingest's cache test, where anything unexpected means "rebuild"): raises
    whatever h5py and json raise (OSError, KeyError, ValueError, TypeError, RecursionError)."""
    with h5py.File(path, "r") as f:
        raw = f.attrs["provenance"]
        return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


# -- the description for ``gnnprep info`` ---------------------------------------------------------------
def split_sizes(f, path) -> dict[str, int]:
    g = f.get("splits")
    if g is None:
        return {}
    if hasattr(g, "dtype"):
        raise GnnprepError(f"{path}: /splits is a dataset; expected a group of node id arrays")
    return {k: int(len(dataset_or_none(f, f"splits/{k}", path, 1))) for k in SPLIT_NAMES if k in g}


def _degrees(g: GraphStore, block: int) -> tuple[int, int, int]:
    """(min, max, isolated) of the in-degrees, read in blocks of ``indptr`` and checked as a CSR
    pointer on the way (from 0, non-decreasing, ending at the stored edges)."""
    n, m, ip = g.num_nodes, g.num_edges, g.f["adj/indptr"]
    dmin, dmax, isolated = None, 0, 0
    for s in range(0, n, block):
        p = ip[s:min(n, s + block) + 1].astype(np.int64)
        deg = np.diff(p)
        if (s == 0 and p[0] != 0) or (len(deg) and deg.min() < 0) or (s + block >= n and p[-1] != m):
            raise GnnprepError(f"{g.path}: /adj/indptr is not a CSR pointer from 0 to {m} without decreasing "
                               f"(rows {s}..{min(n, s + block)}; the file is corrupt)")
        if len(deg):
            dmin = int(deg.min()) if dmin is None else min(dmin, int(deg.min()))
            dmax = max(dmax, int(deg.max()))
            isolated += int((deg == 0).sum())
    return dmin or 0, dmax, isolated


def _types(g: GraphStore, path) -> tuple[list[str] | None, dict | None]:
    names = json_attr(g.attrs, "node_types", path, list, None, "attribute")
    if names is None or "nodes/type" not in g.f:
        return names, None
    t = dataset_or_none(g.f, "nodes/type", path, 1)
    if t.dtype.kind not in "iu":
        raise GnnprepError(f"{path}: /nodes/type is {t.dtype}; expected integer type codes")
    t = t[:].astype(np.int64)
    check_ids(t, len(names), f"{path}: /nodes/type")
    return names, dict(zip(map(str, names), np.bincount(t, minlength=len(names)).tolist()))


def describe(path: Path, block: int = 1 << 22) -> dict:
    with GraphStore(path) as g:
        n = g.num_nodes
        dmin, dmax, isolated = _degrees(g, block)
        feats = dataset_or_none(g.f, "nodes/features", path, 2)
        labels = dataset_or_none(g.f, "nodes/labels", path)
        node_types, per_type = _types(g, path)
        out = {
            "file": str(path),
            "format": "gnnprep.graph",
            "format_version": int(g.attrs["format_version"]),
            "source": attr_value(g.attrs.get("source", "")),
            "num_nodes": n,
            "num_edges": g.num_edges,
            "symmetric": g.symmetric,
            "weighted": "adj/weights" in g.f,
            "undirected_edges": g.num_edges // 2 if g.symmetric else None,
            "num_features": int(feats.shape[1]) if feats is not None else 0,
            "feature_dtype": str(feats.dtype) if feats is not None else None,
            "num_classes": count_attr(g.attrs, "num_classes", path, 0),
            "labeled_nodes": count_attr(g.attrs, "num_labeled", path, 0) if labels is not None else 0,
            "splits": split_sizes(g.f, path),
            "degree": {"min": dmin, "mean": round(g.num_edges / n, 4) if n else 0.0, "max": dmax},
            "isolated_nodes": isolated,
            "index_dtype": str(g.f["adj/indices"].dtype),
            "node_types": node_types,
            "size_bytes": path.stat().st_size,
            "fingerprint": str(attr_value(g.attrs.get("fingerprint", ""))),
            "created_utc": attr_value(g.attrs.get("created_utc")),
            "gnnprep_version": attr_value(g.attrs.get("gnnprep_version")),
        }
        if per_type is not None:
            out["nodes_per_type"] = per_type
        out["node_order"] = _node_order(g.f)
        return out


def _node_order(f: h5py.File) -> dict | None:
    """The node order ingest chose for the store (``/order`` attrs ``chosen``, ``why``; stores
    written before the choice was recorded: ``/order/community`` when kept) and its figures; None
    where there is none. A damaged record is shown as none recorded (it only ever changes speed)."""
    grp = f.get(ORDER_GROUP)
    chosen, why = None, None
    if isinstance(grp, h5py.Group):
        try:
            chosen, why = attr_value(grp.attrs.get("chosen")), attr_value(grp.attrs.get("why"))
        except Exception:  # noqa: BLE001 - an attribute h5py cannot read
            chosen = why = None
    if chosen == "none":
        return {"kind": "none", "why": str(why or "")}
    kind = chosen if chosen in ("community", "degree", "degree-bucket") else "community"
    order = f.get(order_path(kind))
    if not isinstance(order, h5py.Dataset):
        return None
    out = {"kind": kind}
    for k in ("near_share_before", "near_share_after", "prefix_share_before", "prefix_share_after", "seconds",
              "cpu_seconds"):
        try:
            out[k] = float(order.attrs[k])
        except Exception:  # noqa: BLE001 - absent, or not a number: left out
            pass
    if isinstance(why, str) and chosen == kind:
        out["why"] = why
    return out


register_format(FORMAT, reader=GraphStore, describer=describe)


class _RawTiles:
    """The column tiles of X that overlap ``c0:c1`` read raw, one row block at a time, into one buffer
    reused for every block (no allocation per chunk), then assembled into the rows of the column
    block with the finite check in the same pass (:func:`gnnprep.sparse.kernels.tiles_into_finite`,
    numba: imported here, where precompute reads X)."""

    def __init__(self, feats, c0: int, c1: int):
        from gnnprep.sparse.kernels import tiles_into_finite

        self.feats, self.assemble = feats, tiles_into_finite
        self.ch, self.cw = feats.chunks
        self.first = c0 - c0 % self.cw
        self.starts = range(self.first, c1, self.cw)
        self.lo = c0 - self.first
        self.bytes = self.ch * self.cw * 4
        self.buf = np.empty((len(self.starts), self.bytes), dtype=np.uint8)

    def read_into(self, store: GraphStore, s: int, out: np.ndarray) -> bool | None:
        """out = the column block's rows s .. s + len(out) − 1 from the raw chunks starting at row s:
        whether every value is finite, or None (nothing more read) when a chunk is not stored as
        plain bytes of its full shape (the caller then reads the rows through HDF5)."""
        for i, t0 in enumerate(self.starts):
            try:
                mask, data = self.feats.id.read_direct_chunk((s, t0), out=self.buf[i])
            except (KeyError, ValueError, OSError, RuntimeError):
                return None
            if mask != 0 or len(data) != self.bytes:
                return None
            store.feature_bytes_read += self.bytes
        tiles = self.buf.view(np.float32).reshape(len(self.starts), self.ch, self.cw)
        return bool(self.assemble(tiles, self.lo, out))


class _TileHints:
    """``posix_fadvise(WILLNEED)`` for the tiles of X's column block ``c0:c1`` ahead of the reads
    (:meth:`GraphStore.feature_columns`): the raw tile reads go one at a time with the kernel's
    readahead off (so that neighbouring tiles are not read for nothing), which from a cold page
    cache waits on the disk for every tile — 1.43 GB in 7.2 s (0.2 GB/s) on the R-MAT graph at
    1/40 against 1.6 s cached, on a disk that reads 1.3 GB/s in sequence. The hints name exactly the
    wanted tiles' bytes (each row block's are next to each other in the file: one range), about
    :data:`FEATURE_READ_AHEAD` bytes ahead, so the disk has them queued when they are read. Where the
    file offers no descriptor or the platform no fadvise, nothing is hinted."""

    def __init__(self, store: GraphStore, feats, n: int, c0: int, c1: int, step: int):
        self.feats, self.n, self.step = feats, n, step
        self.tiles = range(c0 - c0 % feats.chunks[1], c1, feats.chunks[1])
        self.next = 0   # the first row block not yet hinted
        advice = getattr(os, "POSIX_FADV_WILLNEED", None)
        try:
            fd = store.f.id.get_vfd_handle()
        except (ValueError, TypeError, AttributeError, RuntimeError):
            fd = None
        self.fd = fd if advice is not None and isinstance(fd, int) and FEATURE_READ_AHEAD > 0 else None
        # row blocks hinted ahead of the one read (0 read-ahead: no hints, as benchmarks/bench_cold_x.py compares)
        self.lead = max(1, FEATURE_READ_AHEAD // max(1, len(self.tiles) * FEATURE_CHUNK_BYTES))

    def ahead_of(self, row: int) -> None:
        """Hint the row blocks from the next unhinted one while they are within the read-ahead of ``row``."""
        if self.fd is None:
            return
        stop = min(self.n, row + (self.lead + 1) * self.step)
        while self.next < stop:
            try:
                first = self.feats.id.get_chunk_info_by_coord((self.next, self.tiles[0]))
                last = self.feats.id.get_chunk_info_by_coord((self.next, self.tiles[-1]))
                lo, hi = first.byte_offset, last.byte_offset + last.size
                if first.byte_offset is None or hi <= lo:
                    raise ValueError("tiles not stored in order")
                if hi - lo <= 2 * len(self.tiles) * first.size:   # (else the range holds other data too)
                    os.posix_fadvise(self.fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
                else:
                    for t in self.tiles:
                        info = self.feats.id.get_chunk_info_by_coord((self.next, t))
                        os.posix_fadvise(self.fd, info.byte_offset, info.size, os.POSIX_FADV_WILLNEED)
            except (KeyError, ValueError, OSError, RuntimeError, AttributeError, TypeError):
                self.fd = None   # a layout or file the hints do not fit: read as before
                return
            self.next += self.step
