"""A graph store given as the source of ``ingest``: validated block by block, then copied as is;
and the content fingerprints ingest records on every graph store.

Validation reads ``/adj/indptr`` and ``/adj/indices`` in blocks (bounded memory) and checks what
the kernels downstream rely on: the row pointer starts at 0, never decreases and ends at m; every
column id is in [0, n), rows are sorted without duplicates or self-loops. Labels must be class ids
in [-1, MAX_CLASSES), splits node ids in [0, n). Features are not read (their finiteness is checked
where they are used), unless their fingerprint has to be computed.

Fingerprints (root attributes ``features_fingerprint``, ``labels_fingerprint``,
``splits_fingerprint``): the first 16 hex digits of an xxh3-128 hash (xxhash) over the dataset's
dtype and shape and then its bytes as stored (for splits: each split's name, dtype, shape and bytes,
in name order); ``"none"`` when the dataset is absent. They tell content apart (precompute's resume
key), they are no defence against a crafted collision. Until 2026-11-28 they were sha256: 0.26 GB/s on
a 2-core Xeon VM without SHA instructions, so hashing papers100M's shape at 1/40 (1.42 GB of
features) took 5.5 s of ingest's 14.7 s, against 0.13 s now (10.8 GB/s). A store keeps the
fingerprints it was written with (they are compared as recorded, never recomputed).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import xxhash

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.sources.base import MAX_CLASSES
from gnnprep.graph.store import FEATURES, INDICES, INDPTR, LABELS, SPLITS_GROUP

NONE = "none"
FINGERPRINT_ATTRS = ("features_fingerprint", "labels_fingerprint", "splits_fingerprint")


class ContentHash:
    """xxh3-128 of an array's dtype, shape and bytes, fed in row blocks of the stored dtype."""

    def __init__(self, dtype, shape: tuple[int, ...], name: str = ""):
        self.dtype = np.dtype(dtype)
        self.h = xxhash.xxh3_128()
        self.add_header(name, self.dtype, shape)

    def add_header(self, name: str, dtype, shape) -> None:
        self.h.update(f"{name}|{np.dtype(dtype).str}|{tuple(int(x) for x in shape)};".encode())

    def update(self, block: np.ndarray) -> None:
        self.h.update(np.ascontiguousarray(block, dtype=self.dtype).data)

    def hexdigest(self) -> str:
        return self.h.hexdigest()[:16]


def splits_fingerprint(splits: dict[str, np.ndarray]) -> str:
    """Fingerprint of the splits as stored (ids in their stored dtype)."""
    if not splits:
        return NONE
    h = ContentHash(np.uint8, (), "splits")
    for name in sorted(splits):
        a = np.asarray(splits[name])
        h.add_header(name, a.dtype, a.shape)
        h.h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def dataset_fingerprint(ds: h5py.Dataset | None, block_bytes: int = 64 << 20) -> str:
    if ds is None:
        return NONE
    h = ContentHash(ds.dtype, ds.shape)
    row_bytes = max(1, int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize)
    step = max(1, block_bytes // row_bytes)
    for s in range(0, ds.shape[0] if ds.shape else 0, step):
        h.update(ds[s:s + step])
    return h.hexdigest()


def add_missing_fingerprints(f: h5py.File, block_bytes: int) -> None:
    """Keep the fingerprints a store carries; compute those it lacks (stores from older versions)."""
    if "features_fingerprint" not in f.attrs:
        f.attrs["features_fingerprint"] = dataset_fingerprint(f.get(FEATURES), block_bytes)
    if "labels_fingerprint" not in f.attrs:
        f.attrs["labels_fingerprint"] = dataset_fingerprint(f.get(LABELS), block_bytes)
    if "splits_fingerprint" not in f.attrs:
        grp = f.get(SPLITS_GROUP)
        f.attrs["splits_fingerprint"] = splits_fingerprint({k: grp[k][:] for k in grp} if grp is not None else {})


def _corrupt(path: Path, what: str) -> GnnprepError:
    return GnnprepError(f"{path}: {what} (the file is corrupt)")


def _check_row_block(path: Path, ip: np.ndarray, r0: int, prev_end: int, m: int) -> None:
    """A block of the row pointer: non-decreasing (also across the block boundary) and within m."""
    if r0 == 0 and ip[0] != 0:
        raise _corrupt(path, f"/adj/indptr[0] = {int(ip[0])}; expected 0")
    if ip[0] < prev_end:
        raise _corrupt(path, f"/adj/indptr decreases at row {r0 - 1}; expected non-decreasing offsets")
    drops = np.flatnonzero(np.diff(ip) < 0)
    if len(drops):
        raise _corrupt(path, f"/adj/indptr decreases at row {r0 + int(drops[0])}; expected non-decreasing offsets")
    if ip[-1] > m:
        row = r0 + int(np.argmax(ip > m)) - 1
        raise _corrupt(path, f"/adj/indptr runs past the {m} stored entries at row {row}; expected offsets <= {m}")


def _check_entries(path: Path, idx: np.ndarray, rows: np.ndarray, e0: int, n: int, prev: tuple[int, int]) -> None:
    """Entries e0.. of /adj/indices with their rows: ids in [0, n), rows strictly increasing, no
    self-loops. ``prev``: (row, column) of the entry before e0, or (-1, -1)."""
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        i = int(np.argmax(bad))
        raise _corrupt(path, f"/adj/indices[{e0 + i}] = {int(idx[i])}; expected a node id in [0, {n})")
    loop = idx == rows
    if loop.any():
        i = int(np.argmax(loop))
        raise _corrupt(path, f"/adj/indices[{e0 + i}] = {int(idx[i])} is a self-loop of row {int(rows[i])}; "
                             "expected none (operators add them)")
    prev_rows = np.concatenate([[prev[0]], rows[:-1]])
    prev_cols = np.concatenate([[prev[1]], idx[:-1]])
    unsorted = (prev_rows == rows) & (prev_cols >= idx)
    if unsorted.any():
        i = int(np.argmax(unsorted))
        raise _corrupt(path, f"row {int(rows[i])} of /adj/indices is not sorted or has a duplicate at entry "
                             f"{e0 + i}; expected sorted rows without duplicates")


def _rows_of(ip: np.ndarray, e0: int, e1: int) -> np.ndarray:
    """Row (relative to ``ip[0]``'s row) of every entry e0..e1-1, in linear time."""
    a = int(np.searchsorted(ip, e0, side="right")) - 1
    b = int(np.searchsorted(ip, e1 - 1, side="right")) - 1
    counts = np.minimum(ip[a + 1:b + 2], e1) - np.maximum(ip[a:b + 1], e0)
    return np.repeat(np.arange(a, b + 1, dtype=np.int64), counts)


def _check_adjacency(path: Path, f: h5py.File, n: int, m: int, block: int) -> None:
    ip_ds, ix_ds = f[INDPTR], f[INDICES]
    for name, ds in (("indptr", ip_ds), ("indices", ix_ds)):
        if ds.ndim != 1 or ds.dtype.kind not in "iu":
            raise _corrupt(path, f"/adj/{name} is {ds.dtype} of shape {ds.shape}; expected 1-D integers")
    prev_end, prev = 0, (-1, -1)
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        ip = ip_ds[r0:r1 + 1].astype(np.int64)
        _check_row_block(path, ip, r0, prev_end, m)
        for e0 in range(int(ip[0]), int(ip[-1]), block):
            e1 = min(int(ip[-1]), e0 + block)
            idx = ix_ds[e0:e1].astype(np.int64)
            rows = r0 + _rows_of(ip, e0, e1)
            _check_entries(path, idx, rows, e0, n, prev)
            prev = (int(rows[-1]), int(idx[-1]))
        prev_end = int(ip[-1])
    if prev_end != m or (n == 0 and m != 0):
        raise _corrupt(path, f"/adj/indptr ends at {prev_end}; expected {m}, the number of stored entries")


def _check_labels(path: Path, f: h5py.File, n: int, block: int) -> None:
    if LABELS not in f:
        return
    lab = f[LABELS]
    if lab.shape != (n,) or lab.dtype.kind not in "iu":
        raise _corrupt(path, f"/nodes/labels is {lab.dtype} of shape {lab.shape}; expected integers of shape [{n}]")
    for s in range(0, n, block):
        b = lab[s:s + block]
        bad = (b < -1) | (b >= MAX_CLASSES)
        if bad.any():
            i = int(np.argmax(bad))
            raise _corrupt(path, f"/nodes/labels[{s + i}] = {int(b[i])}; expected a class id in "
                                 f"[0, {MAX_CLASSES}) or -1 (unknown)")


def validate_store(path: Path, memory_budget: int) -> dict:
    """Check a graph store block-wise; return its summary (nodes, edges, symmetric, features, classes)."""
    from gnnprep.graph.store import GraphStore

    block = max(1 << 12, min(1 << 22, memory_budget // 128))  # ~60 B per entry in flight
    with GraphStore(path) as g:
        n, m = g.num_nodes, g.num_edges
        _check_adjacency(path, g.f, n, m, block)
        _check_labels(path, g.f, n, block)
        feats = g.features  # shape and dtype checked; values are checked where they are used
        g.splits()          # ids checked to lie in [0, n)
        g.node_type_codes()  # type codes checked against the type names
        return {"num_nodes": n, "num_edges": m, "symmetric": g.symmetric,
                "num_features": int(feats.shape[1]) if feats is not None else 0,
                "num_classes": int(g.attrs.get("num_classes", 0))}
