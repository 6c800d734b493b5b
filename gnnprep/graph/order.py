"""A graph's node order kept with it: inside the store (``/order/<kind>``, written at ingest by
:class:`IngestOrder` while the graph is written) or beside it (``<store>.order-<kind>.npz``). The
order algorithms are in :mod:`gnnprep.sparse.order`."""

from __future__ import annotations

import json
import math
import os
import queue
import stat
import threading
import time
import warnings
import zipfile
from pathlib import Path

import h5py
import numpy as np

from gnnprep.core import h5file
from gnnprep.core.files import NotRegularFile, TooLarge, open_regular
from gnnprep.core.sizes import format_size, format_size_up
from gnnprep.graph.store import INDICES, INDPTR, ORDER_GROUP
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


STORE_KINDS = ("community", "degree", "degree-bucket")   # the orders ingest may keep in the store
SHARE_KEYS = ("near_share_before", "near_share_after", "prefix_share_before", "prefix_share_after")


def write_to_store(f, kind: str, order: np.ndarray, info: dict) -> None:
    """Keep a node order inside a graph store being written: ``/order/<kind>`` (int32 when n fits)
    with its near shares (and prefix shares, for a degree order) and seconds as attributes."""
    ds = h5file.put(f.require_group(ORDER_GROUP), kind, data=order.astype(np.int32 if len(order) < 2**31 else np.int64))
    for k in (*SHARE_KEYS, "seconds"):
        if k in info:
            ds.attrs[k] = info[k]


def record_choice(f, kind: str, why: str) -> None:
    """Say in a graph store being written which node order precompute is to use (``kind``: one kept
    under ``/order``, or ``"none"``) and why: the ``chosen`` and ``why`` attributes of ``/order``."""
    grp = f.require_group(ORDER_GROUP)
    grp.attrs["chosen"] = kind
    grp.attrs["why"] = why


def chosen_order(store) -> tuple[str, str] | None:
    """(kind, why) of the node order ingest chose for the store (:func:`record_choice`): ``"none"``
    or a kind of ``STORE_KINDS``; None for a store written before the choice was recorded, or with a
    damaged record (then precompute falls back to the community order, as before)."""
    try:
        grp = store.f.get(ORDER_GROUP)
        if grp is None or isinstance(grp, h5py.Dataset):
            return None
        kind, why = grp.attrs.get("chosen"), grp.attrs.get("why", "")
    except Exception:  # noqa: BLE001 - a damaged group or attribute: an order only changes speed
        return None
    kind, why = _text(kind), _text(why)
    if kind not in ("none", *STORE_KINDS):
        return None
    return kind, (why or "")[:500]


FORCED_KINDS = ("community", "bfs", "degree", "degree-bucket")   # precompute --reorder <kind>


ORDER_MIN_GAIN = 0.2   # share of the stored entries an order must move near their row for it to pay


def order_pays(info: dict, force: bool = False) -> bool:
    """Whether a node order whose near shares are ``info`` (``near_share_before``/``_after``: the
    entries within ``LOCALITY_WINDOW`` ids of their row) is used: forced (an explicit ``--reorder``),
    or it moves at least ORDER_MIN_GAIN more of them near their row. Decided once the order is
    known (kept with the store, or found by the run)."""
    return force or info["near_share_after"] - info["near_share_before"] >= ORDER_MIN_GAIN


def order_mode(requested: str, chosen_none: str | None, gain: float | None) -> str:
    """``--reorder`` as the planner takes it: ``auto`` becomes ``none`` where the order kept with the
    store already says it does not pay (ingest chose none: ``chosen_none`` says why; or its
    near-share gain is under ORDER_MIN_GAIN)."""
    if requested == "auto" and (chosen_none or gain is not None and gain < ORDER_MIN_GAIN):
        return "none"
    return requested


def precompute_kind(store, reorder: str) -> tuple[str, bool, str | None]:
    """(kind, force, why not) of the node order a precompute with ``--reorder reorder`` runs in:
    a kind given is forced; ``auto`` takes the order ingest chose and recorded (:func:`settle`),
    forced past the near-share check when it is a degree order (chosen by its prefix share, which
    the near share does not see), or, where ingest chose none, no order (``why not`` says why); a
    store without a record gets the community order, unforced, as before the choice was recorded."""
    if reorder in FORCED_KINDS:
        return reorder, True, None
    if reorder != "auto":
        return "community", False, None
    chosen = chosen_order(store)
    if chosen is None:
        return "community", False, None
    kind, why = chosen
    if kind == "none":
        return "community", False, f"not used: ingest chose no order ({why})"
    return kind, kind != "community", None


def _text(v) -> str | None:
    if isinstance(v, bytes):
        try:
            v = v.decode()
        except UnicodeDecodeError:
            return None
    return v if isinstance(v, str) else None


def _kept(store, kind: str):
    """The store's ``/order/<kind>`` dataset, or None where there is none or it cannot even be
    looked up (a damaged file: an order only ever changes speed, so it is never an error)."""
    if kind not in STORE_KINDS:
        return None
    try:
        return store.kept_order(kind)
    except Exception:  # noqa: BLE001 - h5py raises KeyError, OSError, ValueError, RuntimeError for damage
        return None


def _number(v) -> float | None:
    """A stored number (a Python or NumPy scalar, not a bool) as a float, or None."""
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    try:
        return float(v)
    except OverflowError:
        return None


def _share(v) -> float | None:
    """A near share as stored (a number in [0, 1]), or None for anything else."""
    v = _number(v)
    return v if v is not None and 0.0 <= v <= 1.0 else None   # NaN fails both comparisons


def _seconds(v) -> float | None:
    v = _number(v)
    return v if v is not None and math.isfinite(v) and v >= 0 else None


def _store_info(ds) -> dict:
    """near_share_before/after and seconds of a kept order (and its prefix shares, when kept and
    valid); ValueError naming the first bad one (both near shares are needed: whether the order
    pays is decided from them)."""
    info = {}
    for k in ("prefix_share_before", "prefix_share_after"):
        try:
            value = _share(ds.attrs.get(k))
        except Exception:  # noqa: BLE001 - optional figures: an unreadable one is left out
            value = None
        if value is not None:
            info[k] = value
    for k, check in (("near_share_before", _share), ("near_share_after", _share), ("seconds", _seconds)):
        try:
            raw = ds.attrs.get(k)
        except Exception:  # noqa: BLE001 - an attribute h5py cannot read (odd type, damaged heap)
            raise ValueError(f"its attribute {k!r} cannot be read") from None
        if raw is None:
            if k == "seconds":
                continue
            raise ValueError(f"it has no attribute {k!r}")
        value = check(raw)
        if value is None:
            raise ValueError(f"its attribute {k!r} is {_short_repr(raw)}; expected "
                             + ("a share in [0, 1]" if k != "seconds" else "seconds >= 0"))
        info[k] = value
    return info


def _short_repr(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class DamagedOrderWarning(UserWarning):
    """A kept node order (in the store or its cache) that was ignored as damaged."""


def _say(warn, message: str) -> None:
    """``warn(message)``, or a :class:`DamagedOrderWarning` where the caller gave no ``warn``: a
    damaged order is never an error, but never passed over in silence either."""
    if warn is not None:
        warn(message)
    else:
        warnings.warn(message, DamagedOrderWarning, stacklevel=3)


def known(store, kind: str) -> bool:
    """Whether an order of ``kind`` is kept in the store (a dataset of n integer ids) or beside it
    (a non-empty regular file), so that planning may count on loading it rather than finding it.
    Only looked at, never read; :func:`load_from_store` and :func:`load_cached` validate, and a
    damaged one is found again (which costs time, never results)."""
    ds = _kept(store, kind)
    try:
        if ds is not None and ds.shape == (store.num_nodes,) and ds.dtype.kind in "iu":
            return True
    except Exception:  # noqa: BLE001 - a damaged dataset header
        pass
    try:
        st = os.stat(cache_path(store.path, kind))   # stat, never open: a named pipe would block
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > 0


def stored_gain(store, kind: str) -> float | None:
    """near_share_after − near_share_before of the order kept in the store (for a degree order its
    prefix share's gain, what it is chosen by; None: none kept, or
    its shares are missing or damaged), so a graph the order does not help (no communities) is
    planned without one and nothing is loaded."""
    ds = _kept(store, kind)
    if ds is None:
        return None
    try:
        info = _store_info(ds)
    except ValueError:
        return None   # load_from_store says so when the order is wanted
    if kind.startswith("degree") and "prefix_share_after" in info and "prefix_share_before" in info:
        return info["prefix_share_after"] - info["prefix_share_before"]
    return info["near_share_after"] - info["near_share_before"]


def load_from_store(store, kind: str, warn=None) -> tuple[np.ndarray, dict] | None:
    """(order, info) kept in the graph store at ingest, or None: absent, or damaged (not a
    permutation of the n nodes, an odd dtype or shape, its near shares missing or not in [0, 1], a
    read error), which ``warn(message)`` is told (a :class:`DamagedOrderWarning` without ``warn``):
    an order only ever costs or saves time, so a damaged one is ignored, never trusted, never an
    error. Reads at most the n ids it expects."""
    ds = _kept(store, kind)
    if ds is None:
        return None
    where = f"{store.path}: /{ORDER_GROUP}/{kind}"
    try:
        n = store.num_nodes
        if ds.shape != (n,) or ds.dtype.kind not in "iu":
            raise ValueError(f"it is {ds.dtype} of shape {ds.shape}; expected {n} integer node ids")
        info = _store_info(ds)
        order = ds[:].astype(np.int64)
        _check_permutation(order, n)
    except ValueError as e:
        _say(warn, f"{where} is damaged ({e}); ignored, the order is found again")
        return None
    except Exception as e:  # noqa: BLE001 - h5py read errors (a damaged chunk, filter, heap)
        _say(warn, f"{where} cannot be read ({type(e).__name__}: {_first_line(e)}); ignored, the order is found "
             "again")
        return None
    return order, info


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:120]


def _check_permutation(order: np.ndarray, n: int) -> None:
    """ValueError unless ``order`` (int64, shape (n,)) is a permutation of 0..n-1."""
    if n and (order.min() < 0 or order.max() >= n):
        raise ValueError(f"it holds ids outside [0, {n})")
    if n and not (np.bincount(order, minlength=n) == 1).all():
        raise ValueError("it is not a permutation (an id repeats)")


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
        indices = f[INDICES]
        info = {"near_share_before": round(near_share_windows(indptr, indices, node_order.LOCALITY_WINDOW), 4),
                "near_share_after": round(near_share_windows(indptr, indices, node_order.LOCALITY_WINDOW, inv), 4),
                "seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3)}
        write_to_store(f, "community", order, info)
        # seconds: the search thread's lifetime (it waits for rows while the CSR is written);
        # cpu_seconds: the processor time it used; waited_seconds: the wall time it added
        return {"kind": "community", **info, "waited_seconds": round(time.perf_counter() - t0, 3)}


INGEST_MODES = ("auto", "community", "degree", "degree-bucket", "none")   # ingest --order
DEGREE_BYTES_PER_NODE = 48   # indptr, degrees, the counting sort's keys, the order and its inverse


def _degree_candidate(f, kind: str, memory_budget: int) -> tuple[np.ndarray | None, dict]:
    """A degree order of the CSR just written to ``f`` (from ``/adj/indptr`` alone) and its figures
    (near and prefix shares before/after from evenly spaced windows of ``/adj/indices``, seconds);
    (None, {"error": why}) when its ~48 bytes per node do not fit ``memory_budget``."""
    indptr_ds, indices = f[INDPTR], f[INDICES]
    n = int(indptr_ds.shape[0]) - 1
    if DEGREE_BYTES_PER_NODE * n > memory_budget:
        return None, {"error": f"the {kind} order needs ~{format_size_up(DEGREE_BYTES_PER_NODE * n)}, more than "
                               f"--memory-budget {format_size(memory_budget)}"}
    t0 = time.perf_counter()
    indptr = indptr_ds[:].astype(np.int64, copy=False)
    order = node_order.degree_order(indptr) if kind == "degree" else node_order.degree_bucket_order(indptr)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    rows = node_order.PREFIX_ROWS
    info = {"near_share_before": round(near_share_windows(indptr, indices, node_order.LOCALITY_WINDOW), 4),
            "near_share_after": round(near_share_windows(indptr, indices, node_order.LOCALITY_WINDOW, inv), 4),
            "prefix_share_before": round(node_order.prefix_share_windows(indices, rows), 4),
            "prefix_share_after": round(node_order.prefix_share_windows(indices, rows, inv), 4),
            "seconds": round(time.perf_counter() - t0, 3)}
    return order, info


def settle(f, mode: str, community: dict | None, memory_budget: int) -> dict | None:
    """Decide, at the end of ingest, which node order precompute is to use, keep it in the store
    being written (``f``) and record the choice and why (:func:`record_choice`); the report's
    ``order``: {"kind" (the chosen kind or ``"none"``), "why", its figures, "candidates"}.

    ``mode`` (``ingest --order``): ``community`` keeps what :class:`IngestOrder` found
    (``community``: its :meth:`IngestOrder.finish` info, or None); ``degree`` or ``degree-bucket``
    that order, forced; ``auto`` lets :func:`gnnprep.sparse.order.choose_order` weigh the community
    order's near share against the degree order's prefix share, the degree order looked at only
    when the community order does not pay (a graph without communities) and kept only when it
    pays; ``none`` records nothing (precompute decides as before). A store of at most
    ``LOCALITY_WINDOW`` nodes gets no order and no record (every gather is near)."""
    n = int(f[INDPTR].shape[0]) - 1
    if mode == "none" or n <= node_order.LOCALITY_WINDOW:
        return None
    candidates = {}
    if community is not None and "error" not in community:
        candidates["community"] = {k: community[k] for k in ("near_share_before", "near_share_after")}
    if mode == "community":
        if community is None or "error" in community:
            return community
        why = "--order community: " + node_order.choose_order(candidates)[1]
        record_choice(f, "community", why)
        return {**community, "why": why, "candidates": candidates}
    forced = mode != "auto"
    if forced or node_order.choose_order(candidates)[0] != "community":
        kind = mode if forced else "degree"
        order, info = _degree_candidate(f, kind, memory_budget)
        if order is None:
            candidates[kind] = info
        else:
            candidates[kind] = {k: v for k, v in info.items() if k != "seconds"}
        if forced:
            if order is None:
                return {"kind": kind, **info}
            write_to_store(f, kind, order, info)
            why = f"--order {kind}: prefix share {info['prefix_share_before']:.3f} -> {info['prefix_share_after']:.3f}"
            record_choice(f, kind, why)
            return {"kind": kind, **info, "why": why, "candidates": candidates}
        chosen, why = node_order.choose_order({k: v for k, v in candidates.items() if "error" not in v})
        if chosen == kind:
            write_to_store(f, kind, order, info)
            record_choice(f, kind, why)
            return {"kind": kind, **info, "why": why, "candidates": candidates}
        if order is None:
            why += f"; {kind}: {info['error']}"
        record_choice(f, "none", why)
        return {"kind": "none", "why": why, "candidates": candidates}
    why = node_order.choose_order(candidates)[1]
    record_choice(f, "community", why)
    return {**community, "why": why, "candidates": candidates}


def cache_path(store_path, kind: str) -> Path:
    """Where a graph store's node order of ``kind`` is kept: ``<store>.order-<kind>.npz`` beside it."""
    return Path(store_path).with_suffix(f".order-{kind}.npz")


CACHE_META_BYTES = 1 << 20   # far above the few keys save_cached writes


def _npy(z: zipfile.ZipFile, name: str, max_bytes: int, check) -> np.ndarray:
    """The array ``name`` of an npz, read within ``max_bytes`` of data: its header is read first
    and ``check(shape, dtype)`` must pass before anything is allocated (a declared shape of 10¹⁸
    must not allocate), and the data must be exactly what the header says (the zip's CRC is checked
    as the member is read to its end)."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ValueError(f"it has no {name}") from None
    if info.file_size > max_bytes + 4096:
        raise ValueError(f"its {name} is {info.file_size} bytes; expected at most {max_bytes + 4096}")
    with z.open(info) as m:
        version = np.lib.format.read_magic(m)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(m)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(m)
        else:
            raise ValueError(f"its {name} has .npy version {version}")
        if dtype.hasobject:
            raise ValueError(f"its {name} holds Python objects")
        check(shape, dtype)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        size = count * dtype.itemsize
        if size > max_bytes:
            raise ValueError(f"its {name} declares {size} bytes; expected at most {max_bytes}")
        data = m.read(size)
        if len(data) != size or m.read(1):
            raise ValueError(f"its {name} holds other than the {size} bytes its header declares")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _meta_shape(shape, dtype) -> None:
    if shape != () or dtype.kind != "U":
        raise ValueError(f"its meta is {dtype} of shape {shape}; expected one JSON string")


def _read_cache(path: Path, n: int):
    """(order, meta) of a cache file; ValueError naming what is wrong, FileNotFoundError when absent."""
    try:
        fh = open_regular(path, 8 * n + CACHE_META_BYTES + (1 << 16))
    except NotRegularFile:
        raise ValueError("it is not a regular file") from None
    except TooLarge as e:
        raise ValueError(f"it is {e.size} bytes, more than an order of {n} nodes takes") from None
    def order_shape(shape, dtype):
        if shape != (n,) or dtype.kind not in "iu":
            raise ValueError(f"its order is {dtype} of shape {shape}; expected {n} integer node ids")

    with fh, zipfile.ZipFile(fh) as z:
        order = _npy(z, "order.npy", 8 * n, order_shape).astype(np.int64)
        meta_text = str(_npy(z, "meta.npy", CACHE_META_BYTES, _meta_shape)[()])
    try:
        meta = json.loads(meta_text)
    except (ValueError, RecursionError):
        raise ValueError("its meta is not valid JSON") from None
    if not isinstance(meta, dict):
        raise ValueError("its meta is not a JSON object")
    return order, meta


def load_cached(store_path, kind: str, graph_fingerprint: str, n: int, warn=None) -> tuple[np.ndarray, dict] | None:
    """(order, info) kept for this graph, or None: missing, for another graph or another format
    version (stale: silently), or damaged (``warn(message)`` is told, a :class:`DamagedOrderWarning`
    without ``warn``): not a regular file (a named
    pipe is never opened for reading), not an npz, truncated, a bad CRC, an order that is not a
    permutation of 0..n-1 (never trusted blindly: the kernels index with it), a declared shape
    other than (n,) (checked before anything is allocated), metadata that is not a JSON object or
    whose near shares are not numbers in [0, 1]. A cache must never fail a run: ignored, said, and
    the caller finds the order again and replaces the file (:func:`save_cached`)."""
    path = cache_path(store_path, kind)
    try:
        order, meta = _read_cache(path, n)
        stale = meta.get("format") != ORDER_FORMAT or meta.get("format_version") != ORDER_FORMAT_VERSION or \
            meta.get("graph_fingerprint") != graph_fingerprint
        if not stale:
            _check_permutation(order, n)
            info = {}
            for k, check in (("near_share_before", _share), ("near_share_after", _share), ("seconds", _seconds)):
                value = check(meta.get(k))
                if value is None:
                    raise ValueError(f"its meta {k!r} is {_short_repr(meta.get(k))}; expected "
                                     + ("a share in [0, 1]" if k != "seconds" else "seconds >= 0"))
                info[k] = value
    except FileNotFoundError:
        return None
    except (ValueError, zipfile.BadZipFile, EOFError) as e:   # BadZipFile: a bad CRC, a truncated member
        _say(warn, f"{path}: damaged node order cache ({_first_line(e)}); ignored, the order is found again")
        return None
    except Exception as e:  # noqa: BLE001 - a cache must never fail a run (OSError, zlib.error, ...)
        _say(warn, f"{path}: unreadable node order cache ({type(e).__name__}: {_first_line(e)}); ignored, "
             "the order is found again")
        return None
    if stale:
        return None
    return order, info


def describe_cached(path) -> dict:
    """What ``gnnprep info`` shows of a node order kept beside a store (``<store>.order-<kind>.npz``):
    the store it was made from, its kind, near shares and size, and whether it is current (this
    format version, and the store beside it has the graph fingerprint it was made for; the order
    itself is checked, a permutation of the store's nodes, when a run reads it). GnnprepError where
    the file is not such a cache."""
    from gnnprep.core.errors import GnnprepError

    path = Path(path)

    try:
        with open_regular(path, 1 << 62) as fh, zipfile.ZipFile(fh) as z:   # any size: only its meta is read
            meta = json.loads(str(_npy(z, "meta.npy", CACHE_META_BYTES, _meta_shape)[()]))
            order_bytes = z.getinfo("order.npy").file_size
    except FileNotFoundError:
        raise GnnprepError(f"{path}: no such file") from None
    except NotRegularFile:
        raise GnnprepError(f"{path}: not a regular file; expected a node order kept beside a graph store") from None
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile, RecursionError) as e:
        raise GnnprepError(f"{path}: not a node order kept beside a graph store ({_first_line(e)})") from None
    if not isinstance(meta, dict) or meta.get("format") != ORDER_FORMAT:
        raise GnnprepError(f"{path}: not a node order kept beside a graph store (its meta names no {ORDER_FORMAT!r})")
    kind = meta.get("kind")
    tail = f".order-{kind}.npz"
    source = path.with_name(path.name[:-len(tail)] + ".h5") if isinstance(kind, str) and path.name.endswith(tail) \
        else None
    if meta.get("format_version") != ORDER_FORMAT_VERSION:
        why = f"format version {meta.get('format_version')}; this gnnprep writes {ORDER_FORMAT_VERSION}"
    elif source is None:
        why = f"its name does not end in .order-{kind}.npz, so what it was made from is unknown"
    elif not source.is_file():
        why = f"{source}: no such file"
    else:
        from gnnprep.graph.store import GraphStore

        try:
            with GraphStore(source) as g:
                fingerprint = g.fingerprint
        except GnnprepError as e:
            fingerprint, why = None, str(e)
        if fingerprint is not None:
            why = None if meta.get("graph_fingerprint") == fingerprint else \
                f"{source} holds another graph than the one this order was found for"
    return {"file": str(path), "format": ORDER_FORMAT, "format_version": meta.get("format_version"),
            "what": "a node order kept beside a graph store, found by a run", "cache_of": None if source is None
            else str(source), "current": why is None, "stale_because": why, "kind": kind,
            **{k: meta.get(k) for k in ("near_share_before", "near_share_after")},
            "order_bytes": int(order_bytes), "size_bytes": path.stat().st_size}


def save_cached(store_path, kind: str, graph_fingerprint: str, order: np.ndarray, info: dict) -> bool:
    """Keep ``order`` beside the graph store (atomically, replacing a stale or damaged file, a named
    pipe or a link at its name included); False where it cannot be written (a folder that is not
    writable, a full disk, a folder at its name): a cache is an optimisation, never a reason for a
    run to fail."""
    from gnnprep.core.errors import GnnprepError
    from gnnprep.core.output import atomic_output

    meta = {"format": ORDER_FORMAT, "format_version": ORDER_FORMAT_VERSION, "graph_fingerprint": graph_fingerprint,
            "kind": kind, **{k: info[k] for k in ("near_share_before", "near_share_after", "seconds")}}
    dtype = np.int32 if len(order) < 2**31 else np.int64
    path = cache_path(store_path, kind)
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            path.unlink()   # the cache's own name: a named pipe or a link there is damage, replaced
    except OSError:
        pass
    try:
        with atomic_output(path, inputs=[store_path]) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, order=order.astype(dtype), meta=np.array(json.dumps(meta)))
    except (OSError, GnnprepError, ValueError, TypeError):
        return False
    return True
