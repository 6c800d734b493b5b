"""Setting up the computation's node order, in a background thread, while X is read and hop 0 written.

Each stored nonzero of S gathers one row of X; with arbitrary ids those gathers miss every cache.
A node order that groups neighbours (label propagation, Raghavan et al. 2007; the idea of Rabbit
Order, Arai et al. 2016; or hubs first on graphs without communities) makes them contiguous. When
the plan asks for one (``plan.reorder``), :class:`OrderSetup` gets it, on the other core (label
propagation is serial and releases the GIL):

- S read from the ordered copy beside the store (``plan.ordered_copy``, always when S is streamed;
  :mod:`gnnprep.precompute.ordered`): opened, or written first from the order kept with the store
  (or found out of core);
- else (S resident) the order is loaded (kept in the store at ingest, or beside it by an earlier
  run) or found, and the CSR relabelled in memory.

Whether a found order is used is the planner's rule (:func:`gnnprep.graph.order.order_pays`).
The result is a :class:`FoundOrder`, which :class:`gnnprep.precompute.hop_graph.HopGraph` switches
to; without one (no order, no disk room, a read-only folder) the run goes on in the stored order
with the same bytes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from gnnprep.graph.order import order_pays
from gnnprep.graph.store import GraphStore


@dataclass
class FoundOrder:
    """What the setup found: the ordered copy S is read from (``copy``), or the permutation
    (``order``: computation id -> stored id; ``inv`` its inverse) with the relabelled resident CSR
    (``csr``: indptr, indices[, weights]); ``info`` the order's near shares and timings (None: no
    order could be had). ``indices``/``weights``: the stored arrays the setup loaded on the way."""

    info: dict | None = None
    copy: object = None
    csr: tuple | None = None
    order: np.ndarray | None = None
    inv: np.ndarray | None = None
    from_copy: bool = False
    indices: np.ndarray | None = None
    weights: np.ndarray | None = None


class OrderSetup:
    """The node order of ``kind`` for ``store``, set up in a daemon thread (:meth:`result` joins it
    and re-raises its error in the caller's thread).

    ``indices``/``weights``: the stored CSR arrays the caller already holds (None: read here when
    needed); ``resident``: S is held in memory (relabelled there when no ordered copy can be had);
    ``copy``: an ordered copy the planner opened; ``copy_room``/``reserve``: the memory and disk the
    copy's writer may use; ``force``: an explicit ``--reorder`` (used even where it does not pay)."""

    def __init__(self, store: GraphStore, kind: str, *, use_copy: bool, resident: bool, force: bool,
                 indices=None, weights=None, copy=None, copy_room: int = 64 << 20, reserve: int = 0, warn=None):
        self.store, self.kind, self.resident, self.force = store, kind, resident, force
        self.n, self.weighted = store.num_nodes, store.weighted
        self.indptr = store.indptr()
        self.indices, self.weights = indices, weights
        self.copy_room, self.reserve, self.warn = copy_room, reserve, warn
        self.copy_report: dict | None = None   # the ordered copy: used, written (seconds) or why not
        self.writes_copy = use_copy and copy is None
        self._found: object = None
        target = (self._ordered_copy, (copy,)) if use_copy else (self._find_order, ())
        self._thread = threading.Thread(target=target[0], args=target[1], daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> FoundOrder:
        """Wait for the thread; its result (its error, raised here)."""
        self._thread.join()
        found, self._found = self._found, None
        if isinstance(found, BaseException):
            raise found
        return found

    def close(self) -> None:
        """Wait for the thread and close an ordered copy it opened but nobody took."""
        self._thread.join()
        found, self._found = self._found, None
        if isinstance(found, FoundOrder) and found.copy is not None:
            found.copy.close()

    def _pays(self, info: dict) -> bool:
        return order_pays(info, self.force)

    def _load_indices(self) -> np.ndarray:
        return self.store.read_indices(0, self.store.num_edges)

    def _known_order(self):
        """(order, info, where) kept in the store or beside it, or None."""
        from gnnprep.graph import order as kept_order

        cached = kept_order.load_from_store(self.store, self.kind, self.warn)  # None for a kind never kept there (bfs)
        if cached is not None:
            return (*cached, "store")
        cached = kept_order.load_cached(self.store.path, self.kind, self.store.fingerprint, self.n, self.warn)
        return None if cached is None else (*cached, "cache")

    def _write_copy(self, report: dict, t0: float):
        """Write the ordered copy from the order kept (or found out of core) and open it; (copy or
        None, where the order came from), or None when the order does not pay."""
        from gnnprep.graph import order as kept_order
        from gnnprep.precompute import ordered

        kind = self.kind
        known = self._known_order()
        if known is None and kind == "community":
            order, info = ordered.find_order_streamed(self.store, max(1 << 16, self.copy_room // 8))
            kept_order.save_cached(self.store.path, kind, self.store.fingerprint, order, info)
            known = (order, info, "found")
        if known is None:
            report["reason"] = f"no {kind} order is kept with the store"
            return None, "copy"
        order, info, where = known
        if not self._pays(info):
            report["reason"] = "the order does not bring neighbours closer"
            self.copy_report = report
            self._found = FoundOrder(info={**info, "kind": kind, "cached": where != "found",
                                           "seconds": round(time.perf_counter() - t0, 3)}, from_copy=True)
            return None
        done = ordered.write_copy(self.store, kind, order, info, self.copy_room, self.reserve)
        del order, known
        copy = None
        if done["written"]:
            copy = ordered.open_copy(self.store, kind, warn=ordered.quiet)
            if copy is None:
                done["reason"] = "the copy just written did not validate"
        done["seconds"] = round(time.perf_counter() - t0, 3)
        report.update(built=copy is not None, **{k: v for k, v in done.items() if k != "written"})
        return copy, where

    def _ordered_copy(self, copy) -> None:
        """The thread's work when S is read from the ordered copy: open it (or take the one the
        planner opened), else write it; without one, relabel in memory (S resident) or go on in the
        stored order. A copy read whole here (S resident) that fails its checksums is said once,
        and written again (before any hop)."""
        from gnnprep.precompute import ordered

        try:
            t0 = time.perf_counter()
            report = {"path": str(ordered.copy_path(self.store.path, self.kind)), "built": False}
            for attempt in (0, 1):
                where = "copy"
                if copy is None:  # (the planner said already if it was damaged)
                    copy = ordered.open_copy(self.store, self.kind, warn=ordered.quiet)
                if copy is None:
                    written = self._write_copy(report, t0)
                    if written is None:
                        return
                    copy, where = written
                self.copy_report = report
                if copy is None:
                    self._without_copy()
                    return
                info = {**copy.info, "kind": self.kind, "cached": True, "seconds": round(time.perf_counter() - t0, 3),
                        "found_in": where if where != "found" else "precompute"}
                if "seconds" in copy.info:
                    info["found_seconds"] = copy.info["seconds"]
                if not self._pays(info):
                    report["reason"] = "the order does not bring neighbours closer"
                    copy.close()
                    self._found = FoundOrder(info=info, from_copy=True)
                    return
                csr = None
                if self.resident:
                    try:  # read whole, so checked whole (ids and checksums) before any hop
                        csr = (copy.read_indices(0, copy.m), copy.read_weights(0, copy.m) if self.weighted else None)
                    except ordered.DamagedCopyError as e:
                        copy.close()
                        copy = None
                        if attempt == 0:
                            ordered.say(self.warn, f"{e.path}: damaged ordered copy ({e.reason}); ignored, it is "
                                                   "written again")
                            continue
                        report.update(built=False, reason=f"the copy just written did not validate ({e.reason})")
                        self._without_copy()
                        return
                self._found = FoundOrder(info=info, copy=copy, csr=csr, from_copy=True)
                return
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread by result()
            self._found = e

    def _without_copy(self) -> None:
        """No ordered copy could be had: relabel in memory (S resident: the order found or loaded
        again), or go on in the stored order."""
        if self.resident:
            from gnnprep.graph import order as kept_order

            self.weights = self.store.stored_weights() if self.weighted else None
            if self.weighted or not kept_order.known(self.store, self.kind):
                self.indices = self._load_indices()
            self._find_order()
            return
        self._found = FoundOrder(from_copy=True)

    def _find_order(self) -> None:
        """The thread's work with S resident: load the kept order (or find it), then relabel the CSR."""
        try:
            from gnnprep.graph import order as kept_order
            from gnnprep.sparse import order as node_order

            t0 = time.perf_counter()
            # found at ingest (kept in the store), or by an earlier run on this graph (kept beside it)
            known = self._known_order()
            if known is not None:
                order, info, where = known
            else:
                if self.indices is None:  # the kept order was damaged: find it from the stored ids
                    self.indices = self._load_indices()
                order = node_order.find_order(self.kind, self.indptr, self.indices)
            inv = np.empty(self.n, dtype=np.int64)
            inv[order] = np.arange(self.n)
            if known is None:
                before = node_order.near_share(self.indptr, self.indices, node_order.LOCALITY_WINDOW)
                after = node_order.near_share(self.indptr, self.indices, node_order.LOCALITY_WINDOW, inv)
                info = {"near_share_before": round(before, 4), "near_share_after": round(after, 4),
                        "seconds": round(time.perf_counter() - t0, 3)}
                kept_order.save_cached(self.store.path, self.kind, self.store.fingerprint, order, info)
            info = {**info, "kind": self.kind, "seconds": round(time.perf_counter() - t0, 3), "cached": known is not None,
                    **({"found_seconds": info.get("seconds"), "found_in": where} if known is not None else {})}
            csr = None
            if self._pays(info):
                # relabelled while the caller still reads X or faults in buffers (no other numba
                # parallel region runs then; numba's omp and tbb layers are thread-safe in any case)
                if self.indices is None:
                    csr = node_order.permute_csr_streamed(self.indptr, self.store.read_indices, order,
                                                          self.store.index_dtype)
                else:
                    csr = node_order.permute_csr(self.indptr, self.indices, order)
                if self.weights is not None:  # the weights move with their entries
                    csr = (*csr, node_order.permute_values(self.indptr, self.weights, order, csr[0]))
            elif self.indices is None:  # computed in stored order after all
                self.indices = self._load_indices()
            self._found = FoundOrder(info=info, csr=csr, order=order, inv=inv, indices=self.indices,
                                     weights=self.weights)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread by result()
            self._found = e
