"""The CSR in a locality node order, kept beside the graph store: ``<store>.ordered-<kind>.h5`` (issue 24).

A node order (:mod:`gnnprep.sparse.order`, kept by :mod:`gnnprep.graph.order`) makes the rows a
row block gathers local, but relabelling S in memory needs S resident plus ~32 bytes of
bookkeeping per node. This file holds S already relabelled, so a precompute reads row blocks of it
exactly as it reads the store's (resident or streamed, within the budget) and the blocks are as
local as a resident ordered S:

    /indptr   [n+1] int64           row pointers of P A Pᵀ (new row i is old row order[i])
    /indices  [m]   store's dtype   new ids; each row's entries in their stored sequence
    /weights  [m]   float32         (weighted stores) moved with their entries
    /order    [n]   int32 (int64 beyond 2³¹ nodes)   new id i → old id

Root attributes: ``format = "gnnprep.ordered-csr"``, ``format_version``, ``graph_fingerprint`` (of
the store it was made from), ``kind``, ``num_nodes``, ``num_edges``, ``weighted``, and the order's
near shares. Every row keeps its terms and their order, so a row's sum has the same bits as in
the stored order; results are written back in the stored (original) ids, which are the only ids
users see.

It is a cache like the order file (``<store>.order-<kind>.npz``): written once, out of core within a
memory budget (:func:`build_copy`: one sequential pass over the stored indices per output bucket,
scattering relabelled rows into the bucket), atomically; validated on open (:func:`open_copy`:
format, the graph fingerprint, shapes, row pointers, the order a permutation whose degrees match
the store's), so a copy of another graph or a damaged one is ignored and rewritten; never
required: where it cannot be written (read-only folder, no disk room) the run computes in the
stored order (streamed S) or relabels in memory (resident S), with the same bytes.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import h5py
import numpy as np
from numba import njit, prange

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.store import GraphStore, check_ids

FORMAT = "gnnprep.ordered-csr"
FORMAT_VERSION = 1
ORDER_CHUNK = 1 << 20        # order entries read at a time (as plan.ORDER_CHUNK)
READ_ENTRIES = 1 << 24       # stored entries read at a time while the copy is written


def copy_path(store_path, kind: str) -> Path:
    """Where a store's ordered copy of ``kind`` is kept: ``<store>.ordered-<kind>.h5`` beside it."""
    return Path(store_path).with_suffix(f".ordered-{kind}.h5")


def order_dtype(n: int):
    return np.int32 if n < 2**31 else np.int64


def copy_bytes(n: int, m: int, index_bytes: int, weighted: bool) -> int:
    """Bytes of an ordered copy on disk."""
    return 8 * (n + 1) + m * index_bytes + (4 * m if weighted else 0) + np.dtype(order_dtype(n)).itemsize * n


def build_memory(n: int, index_bytes: int) -> int:
    """Bytes :func:`write_copy` holds besides its output bucket and read block: the order (int64, as
    loaded), its inverse (the index dtype) and the new row pointers."""
    return 8 * n + index_bytes * n + 8 * (n + 1)


class OrderedCopy:
    """An open, validated ordered copy: its row pointers in memory, everything else read on demand."""

    def __init__(self, path: Path, f: h5py.File, indptr: np.ndarray, info: dict):
        self.path, self.f, self.indptr, self.info = path, f, indptr, info
        self.n = len(indptr) - 1
        self.m = int(indptr[-1])
        self.weighted = "weights" in f

    def read_indices(self, p0: int, p1: int, out: np.ndarray | None = None, check: bool = True) -> np.ndarray:
        """Entries p0..p1-1 (new ids), checked to lie in [0, n) (unless the caller checked them
        already)."""
        ds = self.f["indices"]
        if out is None:
            block = ds[p0:p1]
        else:
            block = out[:p1 - p0]
            if p1 > p0:
                ds.read_direct(block, np.s_[p0:p1], np.s_[0:p1 - p0])
        if check:
            check_ids(block, self.n, f"{self.path}: /indices", offset=p0)
        return block

    def read_weights(self, p0: int, p1: int, out: np.ndarray | None = None) -> np.ndarray:
        ds = self.f["weights"]
        if out is None:
            return ds[p0:p1]
        block = out[:p1 - p0]
        if p1 > p0:
            ds.read_direct(block, np.s_[p0:p1], np.s_[0:p1 - p0])
        return block

    def order_chunks(self, step: int = ORDER_CHUNK):
        """(i0, i1, order[i0:i1] as int64) over the whole order."""
        ds = self.f["order"]
        for i0 in range(0, self.n, step):
            i1 = min(self.n, i0 + step)
            yield i0, i1, ds[i0:i1].astype(np.int64)

    def order(self) -> np.ndarray:
        return self.f["order"][:].astype(np.int64)

    def new_ids(self, ids: np.ndarray) -> np.ndarray:
        """inv[ids]: the new id of each stored id in ``ids`` (int64), found by one pass over the order
        (no n-long inverse is kept unless every id is asked for)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == self.n and self.n and np.array_equal(ids[[0, -1]], [0, self.n - 1]) and \
                np.all(np.diff(ids) == 1):
            inv = np.empty(self.n, dtype=order_dtype(self.n))
            for i0, i1, chunk in self.order_chunks():
                inv[chunk] = np.arange(i0, i1, dtype=inv.dtype)
            return inv.astype(np.int64)
        sort = np.argsort(ids, kind="stable")
        keys = ids[sort]
        found = np.full(len(ids), -1, dtype=np.int64)
        if len(keys):
            for i0, _, chunk in self.order_chunks():
                pos = np.searchsorted(keys, chunk)
                pos[pos == len(keys)] = 0
                hit = np.flatnonzero(keys[pos] == chunk)
                found[pos[hit]] = i0 + hit
            # repeated ids: every copy of a key takes the first one's position
            first = np.searchsorted(keys, keys)
            found = found[first]
        out = np.empty(len(ids), dtype=np.int64)
        out[sort] = found
        return out

    def close(self) -> None:
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - closing a cache file never fails a run
            pass


def _expected_attrs(store: GraphStore, kind: str) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_fingerprint": store.fingerprint, "kind": kind,
            "num_nodes": store.num_nodes, "num_edges": store.num_edges, "weighted": bool(store.weighted)}


def open_copy(store: GraphStore, kind: str) -> OrderedCopy | None:
    """The ordered copy kept beside ``store`` when it is one of this graph, whole and consistent;
    else None (missing, another graph, another format version, or damaged: it is then rewritten)."""
    path = copy_path(store.path, kind)
    if not path.is_file() or not store.fingerprint:
        return None
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError):
        return None
    try:
        want = _expected_attrs(store, kind)
        if any(_attr(f, k) != v for k, v in want.items()):
            raise ValueError("attributes")
        n, m = store.num_nodes, store.num_edges
        shapes = {"indptr": (n + 1,), "indices": (m,), "order": (n,), **({"weights": (m,)} if store.weighted else {})}
        for name, shape in shapes.items():
            ds = f.get(name)
            if not isinstance(ds, h5py.Dataset) or ds.shape != shape:
                raise ValueError(name)
        if f["indices"].dtype != store.index_dtype or f["order"].dtype.kind not in "iu" \
                or f["indptr"].dtype.kind not in "iu":
            raise ValueError("dtypes")
        indptr = f["indptr"][:].astype(np.int64, copy=False)
        if indptr[0] != 0 or indptr[-1] != m or (np.diff(indptr) < 0).any():
            raise ValueError("indptr")
        stored = store.indptr()
        seen = np.zeros(n, dtype=np.bool_)
        copy = OrderedCopy(path, f, indptr, {k: _attr(f, k) for k in ("near_share_before", "near_share_after",
                                                                        "seconds") if k in f.attrs})
        for i0, i1, chunk in copy.order_chunks():
            if len(chunk) and (chunk.min() < 0 or chunk.max() >= n):
                raise ValueError("order range")
            seen[chunk] = True
            if not np.array_equal(stored[chunk + 1] - stored[chunk], np.diff(indptr[i0:i1 + 1])):
                raise ValueError("degrees")
        if not seen.all():
            raise ValueError("order is not a permutation")
        return copy
    except (OSError, ValueError, KeyError, TypeError):
        f.close()
        return None


def _attr(f, key):
    v = f.attrs.get(key)
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


@njit(parallel=True, nogil=True, cache=True)
def _scatter_bucket(ip_block, idx_block, w_block, r0, inv, new_indptr, t0, t1, out_idx, out_w):
    """The stored rows r0.. of this block whose new rows lie in [t0, t1), their ids mapped through
    ``inv``, written at their new places in the bucket ``out_idx`` (entries from new_indptr[t0]);
    their weights too when ``out_w`` is not empty. Each row's entries keep their sequence."""
    base = ip_block[0]
    q_base = new_indptr[t0]
    weighted = len(out_w) > 0
    for i in prange(len(ip_block) - 1):
        t = inv[r0 + i]
        if t < t0 or t >= t1:
            continue
        q = new_indptr[t] - q_base
        for p in range(ip_block[i] - base, ip_block[i + 1] - base):
            out_idx[q] = inv[idx_block[p]]
            if weighted:
                out_w[q] = w_block[p]
            q += 1


def _buckets(new_indptr: np.ndarray, entries: int) -> list[tuple[int, int]]:
    """New rows cut into contiguous ranges of at most ``entries`` entries (a longer row alone)."""
    from gnnprep.sparse.order import row_blocks

    n = len(new_indptr) - 1
    out = []
    for t0, t1 in row_blocks(new_indptr, 0, n, max(1, entries)):
        # row_blocks starts a block at the row holding each multiple of ``entries``: split further
        # where a block still holds more (rows before that multiple plus the row itself)
        while int(new_indptr[t1] - new_indptr[t0]) > entries and t1 - t0 > 1:
            cut = int(np.searchsorted(new_indptr, new_indptr[t0] + entries, side="right")) - 1
            cut = max(t0 + 1, min(cut, t1 - 1))
            out.append((t0, cut))
            t0 = cut
        out.append((t0, t1))
    return out


def build_copy(store: GraphStore, kind: str, order: np.ndarray, info: dict, room: int,
               reserve: int = 0) -> tuple[OrderedCopy | None, dict]:
    """:func:`write_copy`, then the copy opened (and validated): (the copy or None, what happened)."""
    t0 = time.perf_counter()
    done = write_copy(store, kind, order, info, room, reserve)
    if not done["written"]:
        return None, done
    copy = open_copy(store, kind)
    done["seconds"] = round(time.perf_counter() - t0, 3)
    if copy is None:
        done.update(written=False, reason="the copy just written did not validate")
    return copy, done


def write_copy(store: GraphStore, kind: str, order: np.ndarray, info: dict, room: int, reserve: int = 0) -> dict:
    """Write the ordered copy of ``store`` in ``order`` (new id i = old id order[i]), atomically.

    Out of core: besides :func:`build_memory`, at most ``room`` bytes hold the output bucket (new
    rows whose entries fit it) and one block of stored entries; each bucket takes one sequential
    pass over the stored indices. ``reserve``: disk bytes the caller still needs (its output); the
    copy is not written unless both fit. Returns what happened: written, seconds, passes, bytes,
    or why it was not written."""
    t0 = time.perf_counter()
    path = copy_path(store.path, kind)
    n, m = store.num_nodes, store.num_edges
    idx_dtype = np.dtype(store.index_dtype)
    weighted = bool(store.weighted)
    nbytes = copy_bytes(n, m, idx_dtype.itemsize, weighted)
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError as e:
        return {"written": False, "reason": f"{path.parent}: {e.strerror or e}"}
    if free < nbytes + reserve + (64 << 20):
        return {"written": False, "reason": f"{path.parent} has {free / 2**30:.1f} GiB free; the copy needs "
                                                  f"{nbytes / 2**30:.1f} GiB beside the output's {reserve / 2**30:.1f} GiB"}
    from gnnprep.core.output import atomic_output

    per = idx_dtype.itemsize + (4 if weighted else 0)
    read = max(1 << 10, min(READ_ENTRIES, room // (4 * per)))
    bucket = max(1 << 10, min(max(m, 1), (room - read * per) // per))
    passes = 0
    try:
        with atomic_output(path, inputs=[store.path]) as tmp:
            with h5py.File(tmp, "w") as f:
                for k, v in _expected_attrs(store, kind).items():
                    f.attrs[k] = v
                for k in ("near_share_before", "near_share_after", "seconds"):
                    if k in info:
                        f.attrs[k] = info[k]
                stored = store.indptr()
                new_indptr = np.zeros(n + 1, dtype=np.int64)
                ds_order = f.create_dataset("order", (n,), dtype=order_dtype(n))
                inv = np.empty(n, dtype=idx_dtype)
                for i0 in range(0, n, ORDER_CHUNK):   # chunk by chunk: no n-long temporaries
                    o = order[i0:i0 + ORDER_CHUNK]
                    new_indptr[i0 + 1:i0 + 1 + len(o)] = stored[o + 1] - stored[o]
                    ds_order[i0:i0 + len(o)] = o
                    inv[o] = np.arange(i0, i0 + len(o), dtype=idx_dtype)
                np.cumsum(new_indptr, out=new_indptr)
                f.create_dataset("indptr", data=new_indptr)
                ds_idx = f.create_dataset("indices", (m,), dtype=idx_dtype)
                ds_w = f.create_dataset("weights", (m,), dtype=np.float32) if weighted else None
                from gnnprep.sparse.order import row_blocks

                reads = row_blocks(stored, 0, n, read)
                longest = max((int(stored[r1] - stored[r0]) for r0, r1 in reads), default=0)
                buf_idx = np.empty(longest, dtype=idx_dtype)
                buf_w = np.empty(longest if weighted else 0, dtype=np.float32)
                out_len = max((int(new_indptr[b1] - new_indptr[b0]) for b0, b1 in _buckets(new_indptr, bucket)),
                              default=0)
                out_idx = np.empty(out_len, dtype=idx_dtype)
                out_w = np.empty(out_len if weighted else 0, dtype=np.float32)
                for b0, b1 in _buckets(new_indptr, bucket):
                    passes += 1
                    q0, q1 = int(new_indptr[b0]), int(new_indptr[b1])
                    for r0, r1 in reads:
                        p0, p1 = int(stored[r0]), int(stored[r1])
                        if p1 == p0:
                            continue
                        blk = store.read_indices(p0, p1, buf_idx)
                        wb = store.read_weights(p0, p1, buf_w) if weighted else buf_w[:p1 - p0]
                        _scatter_bucket(stored[r0:r1 + 1], blk, wb, r0, inv, new_indptr, b0, b1, out_idx, out_w)
                    if q1 > q0:
                        ds_idx[q0:q1] = out_idx[:q1 - q0]
                        if weighted:
                            ds_w[q0:q1] = out_w[:q1 - q0]
                del inv, out_idx, out_w, buf_idx, buf_w
    except (OSError, GnnprepError) as e:
        return {"written": False, "reason": str(e)}
    return {"written": True, "path": str(path), "seconds": round(time.perf_counter() - t0, 3), "passes": passes,
            "bytes": nbytes}


def warm_up(index_dtype) -> None:
    """Compile (or load from numba's cache) the scatter of :func:`build_copy` for ``index_dtype``."""
    ip = np.array([0, 1, 2], dtype=np.int64)
    idx = np.array([1, 0], dtype=index_dtype)
    inv = np.array([1, 0], dtype=index_dtype)
    out = np.empty(2, dtype=index_dtype)
    _scatter_bucket(ip, idx, np.empty(0, np.float32), 0, inv, ip, 0, 2, out, np.empty(0, np.float32))


def find_order_streamed(store: GraphStore, block_entries: int, sweeps: int = 2) -> tuple[np.ndarray, dict]:
    """The community order of a store whose CSR need not fit in memory: label propagation
    (:func:`gnnprep.sparse.order.propagate_labels`, the sweeps of
    :func:`~gnnprep.sparse.order.community_order`, so the same order) over row blocks of about
    ``block_entries`` stored entries read from the store; in memory the labels, counts and one
    block. Returns (order, info with the near shares)."""
    from gnnprep.sparse import order as node_order

    t0 = time.perf_counter()
    n = store.num_nodes
    indptr = store.indptr()
    label = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    count = np.zeros(n, dtype=np.int32)
    buf = np.empty(node_order.PROPAGATE_BUFFER, dtype=label.dtype)
    blocks = node_order.row_blocks(indptr, 0, n, max(1, block_entries))
    longest = max((int(indptr[r1] - indptr[r0]) for r0, r1 in blocks), default=0)
    block = np.empty(longest, dtype=store.index_dtype)
    for sweep in range(sweeps):
        for r0, r1 in blocks:
            p0, p1 = int(indptr[r0]), int(indptr[r1])
            idx = store.read_indices(p0, p1, block)
            node_order.propagate_labels(indptr[r0:r1 + 1], idx, r0, label, count, buf, sweep == 0)
    del count, block
    order = node_order.group_by_label(label)
    del label
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    w = node_order.LOCALITY_WINDOW
    ds = store.indices_dataset
    info = {"near_share_before": round(node_order.near_share_windows(indptr, ds, w), 4),
            "near_share_after": round(node_order.near_share_windows(indptr, ds, w, inv), 4),
            "seconds": round(time.perf_counter() - t0, 3)}
    return order, info
