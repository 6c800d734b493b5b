"""A graph's node order kept with it: inside the store (``/order/<kind>``, written at ingest by
:class:`IngestOrder` while the graph is written) or beside it (``<store>.order-<kind>.npz``). The
order algorithms are in :mod:`gnnprep.sparse.order`."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

import numpy as np

from gnnprep.sparse import order as node_order
from gnnprep.sparse.order import PROPAGATE_BUFFER, group_by_label, near_share_windows, propagate_labels, row_blocks

ORDER_FORMAT = "gnnprep.order"
ORDER_FORMAT_VERSION = 1


def sampled_locality(store, windows: int = 64, width: int = 2048) -> float:
    """:func:`locality` read from a graph store without loading its indices: mean |u - v| / n over
    evenly spaced windows of stored entries (about 1/3 when ids are arbitrary)."""
    n, m = store.num_nodes, store.num_edges
    if m == 0 or n < 2:
        return 0.0
    ip = store.indptr()
    total, count = 0.0, 0
    for start in np.linspace(0, max(0, m - width), min(windows, max(1, m // width))).astype(np.int64):
        cols = store.stored_indices(start, start + width).astype(np.int64)
        rows = np.searchsorted(ip, np.arange(start, start + len(cols)), side="right") - 1
        total += float(np.abs(cols - rows).sum())
        count += len(cols)
    return total / count / n


STORE_GROUP = "order"


def write_to_store(f, kind: str, order: np.ndarray, info: dict) -> None:
    """Keep a node order inside a graph store being written: ``/order/<kind>`` (int32 when n fits)
    with its near shares and seconds as attributes."""
    ds = f.require_group(STORE_GROUP).create_dataset(kind, data=order.astype(np.int32 if len(order) < 2**31 else np.int64))
    for k in ("near_share_before", "near_share_after", "seconds"):
        if k in info:
            ds.attrs[k] = info[k]


def known(store, kind: str) -> bool:
    """Whether an order of ``kind`` is kept in the store or beside it (not yet validated)."""
    return (kind == "community" and store.kept_order(kind) is not None) or cache_path(store.path, kind).exists()


def stored_gain(store, kind: str) -> float | None:
    """near_share_after − near_share_before of the order kept in the store (None: none kept), so a
    graph the order does not help (no communities) is planned without one and nothing is loaded."""
    ds = store.kept_order(kind)
    if ds is None or not {"near_share_before", "near_share_after"} <= set(ds.attrs):
        return None
    return float(ds.attrs["near_share_after"]) - float(ds.attrs["near_share_before"])


def load_from_store(store, kind: str) -> tuple[np.ndarray, dict] | None:
    """(order, info) kept in the graph store at ingest, or None: absent, or not a permutation of the
    n nodes (an order only ever costs or saves time, so a damaged one is ignored, never trusted)."""
    ds = store.kept_order(kind)
    n = store.num_nodes
    if ds is None or ds.shape != (n,) or ds.dtype.kind not in "iu":
        return None
    order = ds[:].astype(np.int64)
    if n and (order.min() < 0 or order.max() >= n or not (np.bincount(order, minlength=n) == 1).all()):
        return None
    return order, {k: float(ds.attrs[k]) for k in ("near_share_before", "near_share_after", "seconds") if k in ds.attrs}


class IngestOrder:
    """The community order of a graph store's CSR, found while ingest still writes the CSR and then
    copies the node data, and kept in the store (``/order/community``), so that no precompute of
    the graph pays for it. Not for graphs of at most ``LOCALITY_WINDOW`` nodes (every gather is near then).

    Label propagation is serial and bound by memory latency; the CSR's sort and the feature copy are
    bound by sorting, I/O and memcpy: on two cores they overlap. The first sweep needs, for the rows
    up to v, only those rows (later rows still hold their initial labels), so it runs bucket by
    bucket as the CSR builder reports rows written (:meth:`rows_ready`, in row order); the second
    sweep starts when the CSR is complete (:meth:`csr_done`). Rows are read back from the store in
    the background thread, or, when the whole CSR fits ``share`` of the budget, copied as the
    builder writes them (:meth:`cols_written`) and kept for the second sweep; else read again
    in row blocks for the second sweep (out of core: in memory are indptr, the labels, the counts
    and one block). Skipped (``active`` False) when even that does not fit; any failure leaves the
    store without an order (precompute then finds one itself or computes in stored order; results
    are the same bit for bit either way)."""

    SWEEPS = 2

    def __init__(self, group, n: int, entries_upper: int, index_dtype, memory_budget: int, share: float = 0.3):
        self._group = group            # where the builder creates indptr and indices
        self._found: object = None
        self._thread = None
        entry = np.dtype(index_dtype).itemsize
        room = int(memory_budget * share) - 24 * n    # indptr, labels, counts (then the order, sorted)
        self.active = n > node_order.LOCALITY_WINDOW and room >= (1 << 20) and entries_upper > 0
        if not self.active:
            return  # every id is within the window of every other (no order can help), or no room
        self.n = n
        self.resident = entries_upper * entry <= room
        self._block = entries_upper if self.resident else max(1 << 16, room // (2 * entry))
        self._kept = np.empty(entries_upper, dtype=index_dtype) if self.resident else None
        self._kept_upto = 0   # entries of _kept filled (by cols_written, or by _blocks reading them)
        self._events: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rows_ready(self, lo: int, hi: int) -> None:
        """Rows lo..hi-1 are written (called in row order)."""
        if self.active:
            self._events.put((lo, hi))

    def cols_written(self, offset: int, cols: np.ndarray) -> None:
        """Column ids ``offset ..`` are written (before their rows are reported): kept in memory when
        the CSR is resident, which spares the search thread reading them back from the file."""
        if self.active and self._kept is not None:
            self._kept[offset:offset + len(cols)] = cols
            self._kept_upto = max(self._kept_upto, offset + len(cols))

    def csr_done(self) -> None:
        if self.active:
            self._events.put(None)

    def abandon(self) -> None:
        """Stop the search (ingest failed): the thread ends at its next event."""
        if self.active:
            self._events.put(False)

    def _blocks(self, indptr, lo: int, hi: int):
        """(r0, indptr block, indices block) of rows lo..hi-1 in blocks of about ``_block`` entries."""
        ds = self._group["indices"]
        for r0, r1 in row_blocks(indptr, lo, hi, self._block):
            p0, p1 = int(indptr[r0]), int(indptr[r1])
            if self._kept is not None and self._kept_upto >= p1:
                yield int(r0), indptr[r0:r1 + 1], self._kept[p0:p1]
                continue
            idx = ds[p0:p1]
            if self._kept is not None:
                self._kept[p0:p1] = idx
                self._kept_upto = max(self._kept_upto, p1)
            yield int(r0), indptr[r0:r1 + 1], idx

    def _run(self) -> None:
        try:
            t0, cpu0 = time.perf_counter(), time.thread_time()
            n = self.n
            indptr = np.zeros(n + 1, dtype=np.int64)
            label = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
            count = np.zeros(n, dtype=np.int32)
            buf = np.empty(PROPAGATE_BUFFER, dtype=label.dtype)
            while (event := self._events.get()) is not None:
                if event is False:
                    return
                lo, hi = event
                indptr[lo + 1:hi + 1] = self._group["indptr"][lo + 1:hi + 1]
                for r0, ip, idx in self._blocks(indptr, lo, hi):   # sweep 1, as rows arrive
                    propagate_labels(ip, idx, r0, label, count, buf, True)
            for _ in range(self.SWEEPS - 1):
                for r0, ip, idx in self._blocks(indptr, 0, n):
                    propagate_labels(ip, idx, r0, label, count, buf, False)
            del count
            order = group_by_label(label)
            self._found = (order, indptr, time.perf_counter() - t0, time.thread_time() - cpu0)
        except Exception as e:  # noqa: BLE001 - an order is optional; reported, never fatal
            self._found = e

    def finish(self, f) -> dict | None:
        """Wait for the order, write it into ``f`` and return its info (or None, or {"error": ...})."""
        if not self.active:
            return None
        t0 = time.perf_counter()
        self._thread.join()
        if isinstance(self._found, Exception):
            return {"error": f"{type(self._found).__name__}: {self._found}"}
        order, indptr, seconds, cpu_seconds = self._found
        self._found = self._kept = None
        inv = np.empty(len(order), dtype=np.int64)
        inv[order] = np.arange(len(order))
        indices = f["adj/indices"]
        info = {"near_share_before": round(near_share_windows(indptr, indices, node_order.LOCALITY_WINDOW), 4),
                "near_share_after": round(near_share_windows(indptr, indices, node_order.LOCALITY_WINDOW, inv), 4),
                "seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3)}
        write_to_store(f, "community", order, info)
        # seconds: the search thread's lifetime (it waits for rows while the CSR is written);
        # cpu_seconds: the processor time it used; waited_seconds: the wall time it added
        return {"kind": "community", **info, "waited_seconds": round(time.perf_counter() - t0, 3)}


def cache_path(store_path, kind: str) -> Path:
    """Where a graph store's node order of ``kind`` is kept: ``<store>.order-<kind>.npz`` beside it."""
    return Path(store_path).with_suffix(f".order-{kind}.npz")


def load_cached(store_path, kind: str, graph_fingerprint: str, n: int) -> tuple[np.ndarray, dict] | None:
    """(order, info) kept for this graph, or None: missing, unreadable, for another graph, another
    format version, or not a permutation of 0..n-1 (never trusted blindly: the kernels index with it)."""
    try:
        with np.load(cache_path(store_path, kind), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            order = z["order"].astype(np.int64)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != ORDER_FORMAT or \
            meta.get("format_version") != ORDER_FORMAT_VERSION or meta.get("graph_fingerprint") != graph_fingerprint:
        return None
    if order.shape != (n,) or (n and (order.min() < 0 or order.max() >= n)) or \
            (n and not (np.bincount(order, minlength=n) == 1).all()):
        return None
    return order, {k: meta[k] for k in ("near_share_before", "near_share_after", "seconds") if k in meta}


def save_cached(store_path, kind: str, graph_fingerprint: str, order: np.ndarray, info: dict) -> bool:
    """Keep ``order`` beside the graph store (atomically); False where that folder is not writable."""
    from gnnprep.core.errors import GnnprepError
    from gnnprep.core.output import atomic_output

    meta = {"format": ORDER_FORMAT, "format_version": ORDER_FORMAT_VERSION, "graph_fingerprint": graph_fingerprint,
            "kind": kind, **{k: info[k] for k in ("near_share_before", "near_share_after", "seconds")}}
    dtype = np.int32 if len(order) < 2**31 else np.int64
    try:
        with atomic_output(cache_path(store_path, kind), inputs=[store_path]) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, order=order.astype(dtype), meta=np.array(json.dumps(meta)))
    except (OSError, GnnprepError):
        return False
    return True
