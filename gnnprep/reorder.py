"""Node reordering for locality: relabel nodes so that neighbours get nearby ids.

S·X gathers one row of X per stored nonzero; when ids are arbitrary (as in most datasets) those
gathers miss every cache. Two orders:

- ``community`` (the default): label propagation (Raghavan, Albert & Kumara 2007, "Near linear time
  algorithm to detect community structures in large-scale networks") — each node repeatedly takes
  the label most frequent among its neighbours — and nodes sorted by label, so a community's rows
  are contiguous and the rows a row block gathers stay in cache. Ordering by communities for sparse
  products is the idea of Rabbit Order (Arai et al., IPDPS 2016); label propagation is its cheapest
  form. Here: asynchronous sweeps in id order (deterministic), ties to the smallest label, two
  sweeps by default (on a 1M-node, 20M-entry power-law graph with planted communities of 2,000
  nodes two sweeps recover ~1,000 groups and halve the kernel time; more sweeps gain nothing).
- ``bfs``: breadth-first order (Cuthill–McKee without its per-level degree sort). On power-law
  graphs the frontier explodes after a few levels and mixes communities; kept for comparison.

An order only pays when it puts neighbours near each other: :func:`near_share` measures the share
of stored entries whose endpoints land within a cache-sized window of ids, before and after, and the
caller drops an order that does not raise it (a graph without communities, or label propagation
collapsing into one giant label). The artifact is always written in the original node order; only
the computation runs in the new order, and each row is still summed in its stored order, so results
are bit-for-bit those of the unordered computation.

An order is found once per graph: :func:`save_cached` keeps it beside the graph store
(``<store>.order-<kind>.npz``: the permutation, the graph's fingerprint and the near shares), and
every later precompute of that graph (other hops, operators, rows) loads it with :func:`load_cached`,
which ignores a file for another graph or one that is not a permutation of the n nodes.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from gnnprep.prefetch import prefetch

ORDER_FORMAT = "gnnprep.order"
ORDER_FORMAT_VERSION = 1


@njit(cache=True, nogil=True)
def _bfs(indptr, indices, starts):
    n = len(indptr) - 1
    seen = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for s in starts:
        if seen[s]:
            continue
        seen[s] = True
        order[tail] = s
        tail += 1
        while head < tail:
            v = order[head]
            head += 1
            for p in range(indptr[v], indptr[v + 1]):
                u = indices[p]
                if not seen[u]:
                    seen[u] = True
                    order[tail] = u
                    tail += 1
    return order


@njit(parallel=True, cache=True, nogil=True)
def _relabel(indptr, indices, order, inv, new_indptr, new_indices):
    for i in prange(len(order)):
        v = order[i]
        q = new_indptr[i]
        for p in range(indptr[v], indptr[v + 1]):
            new_indices[q] = inv[indices[p]]
            q += 1


LABEL_AHEAD = 128   # entries ahead whose neighbour label is prefetched (a few rows of ~30)
COUNT_AHEAD = 48    # entries ahead whose label's count is prefetched (its label is cached by then)


@njit(cache=True, nogil=True)
def _propagate(indptr_block, indices_block, r0, label, count, buf, first):
    """One asynchronous label-propagation pass over rows r0 .. r0 + len(indptr_block) - 2 (their
    entries are ``indices_block``, starting at global offset ``indptr_block[0]``): each row takes the
    label most frequent among its neighbours (ties to the smallest), in id order, seeing the labels
    already updated in this pass. ``count`` is all zeros on entry and on exit.

    A row's neighbour labels are first gathered into ``buf`` (independent loads the CPU overlaps),
    then counted, and the counts reset from ``buf``: about 30% faster than counting as they are
    loaded and re-reading them to reset (5.6M nodes, 154M entries), with the same labels. While
    entry p is gathered, the label of entry p + LABEL_AHEAD and the count of entry p + COUNT_AHEAD's
    label are prefetched (both arrays are n long and miss the cache on large graphs): about 1.8x
    faster again, the same labels (a prefetch changes no value). ``first``: this is the first pass
    from label[u] = u, so a neighbour u > v (not yet visited) still holds label u and is not loaded:
    about half the gathers of that pass saved, the same labels."""
    base = indptr_block[0]
    size = len(buf)
    m_all = len(indices_block)
    for i in range(len(indptr_block) - 1):
        v = r0 + i
        p0, p1 = indptr_block[i] - base, indptr_block[i + 1] - base
        best = label[v]
        best_count = 0
        for q0 in range(p0, p1, size):
            m = min(size, p1 - q0)
            if first:   # the first pass from label[u] = u: rows after v still hold their own id
                for t in range(m):
                    p = q0 + t
                    if p + LABEL_AHEAD < m_all:
                        u = indices_block[p + LABEL_AHEAD]
                        if u < v:
                            prefetch(label, u)
                    if p + COUNT_AHEAD < m_all:
                        u = indices_block[p + COUNT_AHEAD]
                        prefetch(count, label[u] if u < v else u)
                    u = indices_block[p]
                    buf[t] = label[u] if u < v else u
            else:
                for t in range(m):
                    p = q0 + t
                    if p + LABEL_AHEAD < m_all:
                        prefetch(label, indices_block[p + LABEL_AHEAD])
                    if p + COUNT_AHEAD < m_all:
                        prefetch(count, label[indices_block[p + COUNT_AHEAD]])
                    buf[t] = label[indices_block[p]]
            for t in range(m):
                lab = buf[t]
                c = count[lab] + 1
                count[lab] = c
                if c > best_count or (c == best_count and lab < best):
                    best_count = c
                    best = lab
        if p1 - p0 <= size:
            for t in range(p1 - p0):
                count[buf[t]] = 0
        else:
            for p in range(p0, p1):
                count[label[indices_block[p]]] = 0
        label[v] = best


@njit(cache=True, nogil=True)
def _group_by_label(label):
    """Node ids grouped by label (labels ascending, ids ascending inside a label): a counting sort,
    equal to ``np.argsort(label, kind="stable")`` in O(n)."""
    n = len(label)
    start = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        start[label[v] + 1] += 1
    for i in range(n):
        start[i + 1] += start[i]
    order = np.empty(n, dtype=np.int64)
    for v in range(n):
        lab = label[v]
        order[start[lab]] = v
        start[lab] += 1
    return order


PROPAGATE_BUFFER = 1 << 16   # neighbour labels gathered per step (a row's, unless it is longer)


def row_blocks(indptr: np.ndarray, lo: int, hi: int, entries: int) -> list[tuple[int, int]]:
    """Rows lo..hi-1 cut into contiguous blocks where each new block starts at the row holding the
    next multiple of ``entries`` stored entries: at most ``entries`` beyond a block's first row."""
    cuts = np.searchsorted(indptr[lo:hi + 1], np.arange(indptr[lo], indptr[hi], max(1, entries)), side="right") - 1
    bounds = np.unique(np.concatenate([cuts + lo, [lo, hi]]))
    return [(int(r0), int(r1)) for r0, r1 in zip(bounds[:-1], bounds[1:])]


def community_order(indptr: np.ndarray, indices: np.ndarray, sweeps: int = 2) -> np.ndarray:
    """Nodes grouped by label-propagation community (stable in id order inside a community)."""
    n = len(indptr) - 1
    label = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    count = np.zeros(n, dtype=np.int32)
    buf = np.empty(PROPAGATE_BUFFER, dtype=label.dtype)
    for sweep in range(sweeps):
        _propagate(indptr, indices, 0, label, count, buf, sweep == 0)
    return _group_by_label(label)


@njit(cache=True, nogil=True)
def _near_count(indptr, indices, picks, inv, window):
    near = 0
    for p in picks:
        # the row of entry p: binary search in indptr
        lo, hi = 0, len(indptr) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if indptr[mid] <= p:
                lo = mid
            else:
                hi = mid
        a = inv[lo] if len(inv) else np.int64(lo)
        u = np.int64(indices[p])
        b = inv[u] if len(inv) else u
        if abs(a - b) <= window:
            near += 1
    return near


def near_share(indptr: np.ndarray, indices: np.ndarray, window: int, inv: np.ndarray | None = None,
               samples: int = 200_000, seed: int = 0) -> float:
    """Share of sampled stored entries (v, u) with |id(v) − id(u)| ≤ window, ids after ``inv``
    (new id of each old id) when given: how many gathers hit rows near the row being computed."""
    m = len(indices)
    if m == 0:
        return 1.0
    picks = np.random.default_rng(seed).integers(0, m, min(samples, m))
    inv = np.empty(0, dtype=np.int64) if inv is None else inv
    return _near_count(indptr, indices, picks, inv, int(window)) / len(picks)


def bfs_order(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Breadth-first order, components started from their lowest-degree nodes (as RCM does)."""
    starts = np.argsort(np.diff(indptr), kind="stable").astype(np.int64)
    return _bfs(indptr, indices, starts)


def permute_csr(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR of P A Pᵀ where new id i is old id order[i]; returns (indptr, indices, inv)."""
    n = len(order)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    deg = np.diff(indptr)[order]
    new_indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    new_indices = np.empty(len(indices), dtype=indices.dtype)
    _relabel(indptr, indices, order, inv.astype(indices.dtype), new_indptr, new_indices)
    return new_indptr, new_indices, inv


@njit(parallel=True, cache=True, nogil=True)
def _move_values(indptr, values, order, new_indptr, new_values):
    for i in prange(len(order)):
        v = order[i]
        q = new_indptr[i]
        for p in range(indptr[v], indptr[v + 1]):
            new_values[q] = values[p]
            q += 1


def permute_values(indptr: np.ndarray, values: np.ndarray, order: np.ndarray, new_indptr: np.ndarray) -> np.ndarray:
    """Per-entry values (edge weights) moved with their entries into :func:`permute_csr`'s layout:
    each row's entries keep their stored order, so every row sums the same terms in the same order."""
    new_values = np.empty_like(values)
    _move_values(indptr, values, order, new_indptr, new_values)
    return new_values


@njit(parallel=True, cache=True, nogil=True)
def _scatter_rows(indptr_block, indices_block, r0, inv, new_indptr, new_indices):
    """Old rows r0.. (entries ``indices_block`` from global offset ``indptr_block[0]``) written, with
    their ids mapped through ``inv``, at their new rows' places in ``new_indices``."""
    base = indptr_block[0]
    for i in prange(len(indptr_block) - 1):
        q = new_indptr[inv[r0 + i]]
        for p in range(indptr_block[i] - base, indptr_block[i + 1] - base):
            new_indices[q] = inv[indices_block[p]]
            q += 1


def permute_csr_streamed(indptr: np.ndarray, read, order: np.ndarray, dtype,
                         block_entries: int = 1 << 24) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`permute_csr` without the old column ids in memory: ``read(p0, p1)`` gives stored
    entries p0..p1-1 (e.g. from the graph store), read in row blocks of about ``block_entries`` and
    scattered to their new rows. In memory: the new CSR, ``inv`` and one block — so an order costs
    no second copy of S (what lets a tight budget afford it)."""
    n = len(order)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    new_indptr = np.concatenate([[0], np.cumsum(np.diff(indptr)[order])]).astype(np.int64)
    new_indices = np.empty(int(indptr[-1]), dtype=dtype)
    inv_ids = inv.astype(dtype)
    for r0, r1 in row_blocks(indptr, 0, n, block_entries):
        p0, p1 = int(indptr[r0]), int(indptr[r1])
        _scatter_rows(indptr[r0:r1 + 1], read(p0, p1), int(r0), inv_ids, new_indptr, new_indices)
    return new_indptr, new_indices, inv


def locality(indptr: np.ndarray, indices: np.ndarray, samples: int = 100_000, seed: int = 0) -> float:
    """Mean |u - v| / n over sampled stored entries: ~1/3 for random ids, small for local ones."""
    n = len(indptr) - 1
    m = len(indices)
    if m == 0 or n < 2:
        return 0.0
    p = np.random.default_rng(seed).integers(0, m, min(samples, m))
    v = np.searchsorted(indptr, p, side="right") - 1
    return float(np.abs(indices[p].astype(np.int64) - v).mean() / n)


def sampled_locality(store, windows: int = 64, width: int = 2048) -> float:
    """:func:`locality` read from a graph store without loading its indices: mean |u - v| / n over
    evenly spaced windows of stored entries (about 1/3 when ids are arbitrary)."""
    n, m = store.num_nodes, store.num_edges
    if m == 0 or n < 2:
        return 0.0
    ip = store.indptr()
    total, count = 0.0, 0
    for start in np.linspace(0, max(0, m - width), min(windows, max(1, m // width))).astype(np.int64):
        cols = store.f["adj/indices"][start:start + width].astype(np.int64)
        rows = np.searchsorted(ip, np.arange(start, start + len(cols)), side="right") - 1
        total += float(np.abs(cols - rows).sum())
        count += len(cols)
    return total / count / n


def warm_up(index_dtypes=(np.int32, np.int64), kinds=("community", "bfs"), find: bool = True) -> None:
    """Compile (or load from numba's cache) the ordering functions before memory is measured: for
    each index dtype the relabelling, and with ``find`` the orders of ``kinds`` and ``near_share``
    (a cached order needs only the relabelling)."""
    ip = np.array([0, 1, 2], dtype=np.int64)
    for dtype in index_dtypes:
        idx = np.array([1, 0], dtype=dtype)
        order = np.array([1, 0], dtype=np.int64)
        if find:
            for kind in kinds:
                order = community_order(ip, idx) if kind == "community" else bfs_order(ip, idx)
            inv = np.empty(2, dtype=np.int64)
            inv[order] = np.arange(2)
            near_share(ip, idx, 1, inv)
            near_share(ip, idx, 1)
        permute_csr(ip, idx, order)
        permute_csr_streamed(ip, lambda p0, p1, idx=idx: idx[p0:p1], order, dtype)


def near_share_windows(indptr: np.ndarray, indices, window: int, inv: np.ndarray | None = None,
                       windows: int = 256, width: int = 1024) -> float:
    """:func:`near_share` estimated from ``windows`` evenly spaced runs of ``width`` stored entries,
    so that ``indices`` may be an HDF5 dataset (a few small contiguous reads, no random ones)."""
    m = int(indptr[-1])
    if m == 0:
        return 1.0
    near = total = 0
    for start in np.unique(np.linspace(0, max(0, m - width), min(windows, max(1, m // width))).astype(np.int64)):
        cols = np.asarray(indices[start:start + width]).astype(np.int64)
        rows = np.searchsorted(indptr, np.arange(start, start + len(cols)), side="right") - 1
        if inv is not None:
            cols, rows = inv[cols], inv[rows]
        near += int(np.count_nonzero(np.abs(cols - rows) <= window))
        total += len(cols)
    return near / total


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
    return (kind == "community" and f"{STORE_GROUP}/{kind}" in store.f) or cache_path(store.path, kind).exists()


def stored_gain(store, kind: str) -> float | None:
    """near_share_after − near_share_before of the order kept in the store (None: none kept), so a
    graph the order does not help (no communities) is planned without one and nothing is loaded."""
    ds = store.f.get(f"{STORE_GROUP}/{kind}")
    if ds is None or not {"near_share_before", "near_share_after"} <= set(ds.attrs):
        return None
    return float(ds.attrs["near_share_after"]) - float(ds.attrs["near_share_before"])


def load_from_store(store, kind: str) -> tuple[np.ndarray, dict] | None:
    """(order, info) kept in the graph store at ingest, or None: absent, or not a permutation of the
    n nodes (an order only ever costs or saves time, so a damaged one is ignored, never trusted)."""
    ds = store.f.get(f"{STORE_GROUP}/{kind}")
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
    the graph pays for it. Not for graphs of at most ``WINDOW`` nodes (every gather is near then).

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

    WINDOW = 4096   # as HopGraph.REORDER_WINDOW: ids a row block's gathers may span and stay in cache
    SWEEPS = 2

    def __init__(self, group, n: int, entries_upper: int, index_dtype, memory_budget: int, share: float = 0.3):
        self._group = group            # where the builder creates indptr and indices
        self._found: object = None
        self._thread = None
        entry = np.dtype(index_dtype).itemsize
        room = int(memory_budget * share) - 24 * n    # indptr, labels, counts (then the order, sorted)
        self.active = n > self.WINDOW and room >= (1 << 20) and entries_upper > 0
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
                    _propagate(ip, idx, r0, label, count, buf, True)
            for _ in range(self.SWEEPS - 1):
                for r0, ip, idx in self._blocks(indptr, 0, n):
                    _propagate(ip, idx, r0, label, count, buf, False)
            del count
            order = _group_by_label(label)
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
        info = {"near_share_before": round(near_share_windows(indptr, indices, self.WINDOW), 4),
                "near_share_after": round(near_share_windows(indptr, indices, self.WINDOW, inv), 4),
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
    from gnnprep.atomic import atomic_output
    from gnnprep.errors import GnnprepError

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
