"""The hop computation's graph and its backends: H_k = S H_{k-1}, one edge block at a time.

:class:`HopGraph` holds the CSR pattern (resident, or read per edge block) in the computation's node
order and yields the edge blocks (contiguous row ranges, about equal nnz + rows each). A backend
computes rows r0..r1 of the next hop from the whole current one:

- :class:`NumbaBackend`: the fused CSR row kernel (:mod:`gnnprep.sparse.kernels`), CPU;
- :class:`HagBackend`: the same rows through a HAG (Jia et al. 2020): aggregation nodes first, then
  the rewired in-lists, CPU (on a torch device: :mod:`gnnprep.precompute.hag_torch`);
- :class:`TorchBackend`: ``torch.sparse`` CSR blocks, on the CPU or a CUDA device.

Every backend sums each row's entries in stored order, so the output does not depend on the blocking.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numba
import numpy as np

from gnnprep.core.memory import empty_pages
from gnnprep.graph.store import GraphStore, check_ids
from gnnprep.precompute.config import OrderReport
from gnnprep.precompute.hop_writer import Gather
from gnnprep.precompute.operators import Operator
from gnnprep.precompute.plan import Plan
from gnnprep.sparse import (
    kernels,  # numba: compiled on first use, loaded from its cache afterwards
    row_kernels,
)


def balanced_rows(indptr: np.ndarray, b: int) -> np.ndarray:
    """Row boundaries of b contiguous edge blocks with about equal nnz + rows each."""
    n = len(indptr) - 1
    cost = indptr + np.arange(n + 1)
    bounds = np.searchsorted(cost, np.linspace(0, cost[-1], b + 1))
    bounds[0], bounds[-1] = 0, n
    return np.unique(bounds)


class HopGraph:
    """The CSR pattern (resident, or read per edge block) and the edge-block boundaries.

    With ``plan.reorder`` the computation runs in a node order, set up in a background thread
    (label propagation is serial and releases the GIL) while the caller reads X and writes hop 0
    on the other core:

    - from the ordered copy beside the store (``plan.ordered_copy``, always when S is streamed;
      :mod:`gnnprep.precompute.ordered`): opened, or written first from the order kept with the
      store (or found out of core); S is then read from it, resident or in row blocks, with no
      per-node bookkeeping beyond the stored rows' new ids;
    - else (S resident) the order is loaded or found and the CSR relabelled in memory.

    Unless ``force`` (an explicit ``--reorder``), an order that does not bring neighbours closer
    (``near_share`` up by at least ``REORDER_MIN_GAIN``) is dropped. :meth:`ready` joins the thread;
    until then everything is in the stored (original) order. Where the ordered copy cannot be had
    (no order, no disk room, a read-only folder) the run goes on in the stored order with the same
    bytes (or, S resident, relabels in memory).
    """

    REORDER_MIN_GAIN = 0.2    # share of entries that must move inside the window for an order to pay

    def __init__(self, store: GraphStore, plan: Plan, order_kind: str = "community", force: bool = False,
                 spare: tuple[int, int] | None = None, copy=None, copy_room: int = 64 << 20, reserve: int = 0,
                 warn=None):
        self.store = store
        self._warn = warn           # told of a damaged kept order (None: a DamagedOrderWarning)
        self.n = store.num_nodes
        self.indptr = self._stored_indptr = store.indptr()
        self.weighted = store.weighted
        self.resident = plan.s_resident
        self.b = plan.b
        # a resident S is still walked in several row blocks, so each block's rows are written
        # while the next block computes (the last hop's writes would otherwise all come at the end)
        self.row_bounds = balanced_rows(self.indptr, max(plan.b, 8) if self.resident else plan.b)
        self.order = self.inv = None
        self.copy = None            # the OrderedCopy S is read from (computation order)
        self.copy_report: dict | None = None   # the ordered copy: used, written (seconds) or why not
        self.reorder_info: OrderReport | None = None
        self.reuse_buffers = False  # streamed blocks read into two kept buffers (the CPU kernel's, synchronous)
        self._buffers: dict = {}
        self._checked: set = set()  # streamed entry ranges whose ids were checked
        self._selected = None       # (rows, {values kind: sub-CSR}) of the pruned hops with S streamed
        self._finding: threading.Thread | None = None
        self._spare_shape, self._spare = spare, None
        self._force = force
        self._indices = None
        self._weights = None
        self._op_values = None  # (operator, its values over the resident CSR)
        self._copy_room, self._reserve = copy_room, reserve
        self._writing_copy = False
        self._found: object = None
        if plan.reorder and (plan.ordered_copy or not self.resident):
            self._writing_copy = copy is None
            self._finding = threading.Thread(target=self._ordered_copy, args=(order_kind, copy), daemon=True)
            self._finding.start()
            return
        if copy is not None:
            copy.close()
        if self.resident:
            from gnnprep.graph import order as kept_order

            # with a known order the stored column ids are streamed into the relabelled copy instead
            # (no second copy of S); they are loaded as stored only when the order must be found
            if not (plan.reorder and not self.weighted and kept_order.known(store, order_kind)):
                self._indices = self._load_indices()
            self._weights = store.stored_weights() if self.weighted else None
            if plan.reorder:
                self._finding = threading.Thread(target=self._find_order, args=(order_kind,), daemon=True)
                self._finding.start()

    @property
    def indices(self) -> np.ndarray:
        """The resident CSR's column ids, in computation order (after :meth:`ready`; only when S is
        resident)."""
        return self._indices

    @property
    def ordered(self) -> bool:
        """Whether the computation runs in a node order (after :meth:`ready`)."""
        return self.order is not None or self.copy is not None

    def _load_indices(self) -> np.ndarray:
        indices = self.store.stored_indices()
        check_ids(indices, self.n, f"{self.store.path}: /adj/indices")  # before any kernel reads them
        return indices

    def _read_checked(self, p0: int, p1: int) -> np.ndarray:
        block = self.store.stored_indices(p0, p1)
        check_ids(block, self.n, f"{self.store.path}: /adj/indices", offset=p0)
        return block

    def _known_order(self, kind: str):
        """(order, info, where) kept in the store or beside it, or None."""
        from gnnprep.graph import order as kept_order

        cached = kept_order.load_from_store(self.store, kind, self._warn)   # None for a kind never kept there (bfs)
        if cached is not None:
            return (*cached, "store")
        cached = kept_order.load_cached(self.store.path, kind, self.store.fingerprint, self.n, self._warn)
        return None if cached is None else (*cached, "cache")

    def _ordered_copy(self, kind: str, copy) -> None:
        """The background thread's work when S is read from the ordered copy: open it (or take the
        one the planner opened), else write it; without one, fall back (see the class doc)."""
        from gnnprep.precompute import ordered

        try:
            t0 = time.perf_counter()
            path = ordered.copy_path(self.store.path, kind)
            report = {"path": str(path), "built": False}
            where = "copy"
            if copy is None:
                copy = ordered.open_copy(self.store, kind)
            if copy is None:
                known = self._known_order(kind)
                if known is None and kind == "community":
                    from gnnprep.graph import order as kept_order

                    order, info = ordered.find_order_streamed(self.store, max(1 << 16, self._copy_room // 8))
                    kept_order.save_cached(self.store.path, kind, self.store.fingerprint, order, info)
                    known = (order, info, "found")
                if known is None:
                    report["reason"] = f"no {kind} order is kept with the store"
                else:
                    order, info, where = known
                    if not self._use(info):
                        report["reason"] = "the order does not bring neighbours closer"
                        self.copy_report = report
                        self._found = ("copy", None, {**info, "kind": kind, "cached": where != "found",
                                                      "seconds": round(time.perf_counter() - t0, 3)}, None)
                        return
                    done = ordered.write_copy(self.store, kind, order, info, self._copy_room, self._reserve)
                    del order, known
                    if done["written"]:
                        copy = ordered.open_copy(self.store, kind)
                        if copy is None:
                            done["reason"] = "the copy just written did not validate"
                    done["seconds"] = round(time.perf_counter() - t0, 3)
                    report.update(built=copy is not None, **{k: v for k, v in done.items() if k != "written"})
            self.copy_report = report
            if copy is None:
                if self.resident:  # relabel in memory instead (the order found or loaded again)
                    from gnnprep.graph import order as kept_order

                    self._weights = self.store.stored_weights() if self.weighted else None
                    if self.weighted or not kept_order.known(self.store, kind):
                        self._indices = self._load_indices()
                    self._find_order(kind)
                    return
                self._found = ("copy", None, None, None)
                return
            info = {**copy.info, "kind": kind, "cached": True, "seconds": round(time.perf_counter() - t0, 3),
                    "found_in": where if where != "found" else "precompute"}
            if "seconds" in copy.info:
                info["found_seconds"] = copy.info["seconds"]
            if not self._use(info):
                report["reason"] = "the order does not bring neighbours closer"
                copy.close()
                self._found = ("copy", None, info, None)
                return
            csr = None
            if self.resident:
                csr = (copy.read_indices(0, copy.m), copy.read_weights(0, copy.m) if self.weighted else None)
            self._found = ("copy", copy, info, csr)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread by ready()
            self._found = e

    def _find_order(self, kind: str) -> None:
        try:
            from gnnprep.graph import order as kept_order
            from gnnprep.sparse import order as node_order

            t0 = time.perf_counter()
            # found at ingest (kept in the store), or by an earlier run on this graph (kept beside it)
            cached = kept_order.load_from_store(self.store, kind, self._warn)   # None for a kind never kept there (bfs)
            where = "store"
            if cached is None:
                cached, where = kept_order.load_cached(self.store.path, kind, self.store.fingerprint, self.n, self._warn), "cache"
            if cached is not None:
                order, info = cached
            else:
                if self._indices is None:  # the kept order was damaged: find it from the stored ids
                    self._indices = self._load_indices()
                order = node_order.find_order(kind, self.indptr, self._indices)
            inv = np.empty(self.n, dtype=np.int64)
            inv[order] = np.arange(self.n)
            if cached is None:
                before = node_order.near_share(self.indptr, self._indices, node_order.LOCALITY_WINDOW)
                after = node_order.near_share(self.indptr, self._indices, node_order.LOCALITY_WINDOW, inv)
                info = {"near_share_before": round(before, 4), "near_share_after": round(after, 4),
                        "seconds": round(time.perf_counter() - t0, 3)}
                kept_order.save_cached(self.store.path, kind, self.store.fingerprint, order, info)
            info = {**info, "kind": kind, "seconds": round(time.perf_counter() - t0, 3), "cached": cached is not None,
                    **({"found_seconds": info.get("seconds"), "found_in": where} if cached is not None else {})}
            csr = None
            if self._use(info):
                # relabelled while the caller still reads X or faults in buffers (no other numba
                # parallel region runs then; numba's omp and tbb layers are thread-safe in any case)
                if self._indices is None:
                    csr = node_order.permute_csr_streamed(self.indptr, self._read_checked, order,
                                                       self.store.index_dtype)
                else:
                    csr = node_order.permute_csr(self.indptr, self._indices, order)
                if self._weights is not None:  # the weights move with their entries
                    csr = (*csr, node_order.permute_values(self.indptr, self._weights, order, csr[0]))
            elif self._indices is None:  # computed in stored order after all
                self._indices = self._load_indices()
            self._found = (order, inv, info, csr)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread by ready()
            self._found = e

    def ready(self) -> None:
        """Wait for the node order (if one is being set up) and switch the CSR to it."""
        if self._finding is None:
            return
        if self._writing_copy:
            self._finding.join()  # the copy's writer was given the room of the second column buffer
        if self._spare_shape is not None:
            # the reordered copy of X's first column block (or, if the order is dropped, hop 1's
            # output), faulted in while the order is still being found on the other core
            self._spare = empty_pages(self._spare_shape)
            self._spare.reshape(-1)[::1024] = 0  # one write per 4 KiB page
        self._finding.join()
        self._finding = None
        if isinstance(self._found, BaseException):
            raise self._found
        found, self._found = self._found, None
        if isinstance(found[0], str):  # ("copy", ...): S from the ordered copy beside the store
            _, copy, info, csr = found
            self.reorder_info = None if info is None else OrderReport.from_info(info, used=copy is not None)
            if copy is not None:
                self.copy = copy
                self.indptr = copy.indptr
                if csr is not None:
                    self._indices, self._weights = csr
                self.row_bounds = balanced_rows(self.indptr, max(self.b, 8) if self.resident else self.b)
                if self.copy_report is not None:
                    self.copy_report["used"] = True
            return
        order, inv, info, csr = found
        self.reorder_info = OrderReport.from_info(info, used=csr is not None)
        if csr is not None:
            self.order = order
            self.indptr, self._indices, self.inv = csr[:3]
            if len(csr) > 3:
                self._weights = csr[3]
            self.row_bounds = balanced_rows(self.indptr, max(self.b, 8))

    def _use(self, info: dict) -> bool:
        return self._force or info["near_share_after"] - info["near_share_before"] >= self.REORDER_MIN_GAIN

    def spare(self, shape: tuple) -> np.ndarray:
        """A float32 buffer of ``shape`` (the pre-faulted one, once, when it matches)."""
        buf, self._spare = self._spare, None
        if buf is not None and buf.shape == tuple(shape):
            return buf
        return empty_pages(shape)

    # -- the node order: stored ids <-> computation ids ----------------------------------------------
    def permute_rows(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out = x's rows in the computation's order (x in stored order); x itself when unordered."""
        if self.order is not None:
            return kernels.take_rows(x, self.order, out)
        if self.copy is None:
            return x
        for i0, i1, chunk in self.copy.order_chunks():
            kernels.take_rows(x, chunk, out[i0:i1])
        return out

    def permute_vector(self, v: np.ndarray) -> np.ndarray:
        """v (one value per node, stored order) in the computation's order."""
        if self.order is not None:
            return v[self.order]
        if self.copy is None:
            return v
        out = np.empty_like(v)
        for i0, i1, chunk in self.copy.order_chunks():
            out[i0:i1] = v[chunk]
        return out

    def new_ids(self, ids: np.ndarray) -> np.ndarray:
        """The computation's ids of the stored ids ``ids``."""
        if self.inv is not None:
            return self.inv[ids]
        if self.copy is not None:
            return self.copy.new_ids(ids)
        return np.asarray(ids)

    def operator(self, op: Operator) -> Operator:
        """``op`` with its scalings (and a user operator's per-entry degrees) in the computation's
        node order."""
        if not self.ordered:
            return op
        edge = op.edge
        if edge is not None:
            edge = edge.permuted(self.order if self.order is not None else self.copy.order())
        return dataclasses.replace(op, left=self.permute_vector(op.left), right=self.permute_vector(op.right),
                                   edge=edge)

    def blocks(self):
        for r0, r1 in zip(self.row_bounds[:-1], self.row_bounds[1:]):
            yield int(r0), int(r1)

    def _buffer(self, name: str, dtype, size: int) -> np.ndarray:
        """A kept buffer of at least ``size`` entries (the largest edge block's, allocated once)."""
        buf = self._buffers.get(name)
        if buf is None or len(buf) < size:
            longest = int(np.max(np.diff(self.indptr[self.row_bounds]))) if len(self.row_bounds) > 1 else 0
            buf = self._buffers[name] = np.empty(max(size, longest), dtype=dtype)
        return buf

    def _read(self, p0: int, p1: int, weights: bool):
        """Stored entries p0..p1-1 of the streamed CSR (the ordered copy's or the store's), checked
        (each range once per run: a streamed S is read once per hop and column block, and its
        files are not rewritten in place: they are replaced atomically, and this run keeps the
        file it opened); with their weights when ``weights``."""
        keep = self.reuse_buffers
        check = (p0, p1) not in self._checked
        if self.copy is not None:
            buf = self._buffer("idx", self.store.index_dtype, p1 - p0) if keep else None
            idx = self.copy.read_indices(p0, p1, buf, check=check)
            self._checked.add((p0, p1))
            w = None
            if weights:
                w = self.copy.read_weights(p0, p1, self._buffer("w", np.float32, p1 - p0) if keep else None)
            return idx, w
        if keep:
            idx = self._buffer("idx", self.store.index_dtype, p1 - p0)[:p1 - p0]
            if p1 > p0:
                self.store.f["adj/indices"].read_direct(idx, np.s_[p0:p1], np.s_[0:p1 - p0])
        else:
            idx = self.store.stored_indices(p0, p1)
        if check:
            check_ids(idx, self.n, f"{self.store.path}: /adj/indices", offset=p0)
            self._checked.add((p0, p1))
        w = None
        if weights:
            if keep:
                w = self._buffer("w", np.float32, p1 - p0)[:p1 - p0]
                if p1 > p0:
                    self.store.f["adj/weights"].read_direct(w, np.s_[p0:p1], np.s_[0:p1 - p0])
            else:
                w = self.store.stored_weights(p0, p1)
        return idx, w

    def block(self, r0: int, r1: int, op: Operator | None = None):
        """(indptr[r0..r1], indices, values) of rows r0..r1-1: the values the kernel reads for ``op``
        (the stored weights, none, or a user operator's: computed once with a resident S, per
        block as it is read otherwise)."""
        p0, p1 = int(self.indptr[r0]), int(self.indptr[r1])
        values = "stored" if op is None else op.values
        ip = self.indptr[r0:r1 + 1]
        if self.resident:
            idx = self._indices[p0:p1]
            if values == "edge":
                return ip, idx, self.values(op)[p0:p1]
            w = self._weights[p0:p1] if self._weights is not None and values == "stored" else None
            return ip, idx, w
        idx, w = self._read(p0, p1, self.weighted and values != "none")
        if values == "edge":
            w = op.edge.values(ip, idx, w, r0)
        return ip, idx, w

    # -- pruned hops with S streamed (gnnprep.precompute.pruned) -------------------------------------
    def select(self, rows: np.ndarray) -> None:
        """The rows (computation ids, sorted) the last hop of ``--rows labeled`` computes; with S
        streamed their in-lists are extracted once (:meth:`selected`)."""
        if self._selected is None or not np.array_equal(self._selected[0], rows):
            self._selected = (np.asarray(rows, dtype=np.int64), {})

    def selected(self, op: Operator | None = None):
        """(rows, sub_ip, sub_idx, sub_values) of the selected rows' in-lists with ``op``'s values
        (None: the pattern), extracted by one pass over the streamed S and kept for the run."""
        from gnnprep.precompute.pruned import extract_rows

        rows, subs = self._selected
        values = "none" if op is None else op.values
        if values == "stored" and not self.weighted:
            values = "none"
        if op is None and subs:
            return (rows, *next(iter(subs.values())))
        key = (values, id(op)) if values == "edge" else values
        if key not in subs:
            valued = values != "none"
            blocks = ((r0, r1, *self.block(r0, r1, op if valued else _PATTERN)) for r0, r1 in self.blocks())
            subs[key] = extract_rows(self.indptr, blocks, rows, self.store.index_dtype, valued)
        return (rows, *subs[key])

    def values(self, op: Operator) -> np.ndarray | None:
        """The whole resident CSR's values for ``op`` (computed once per operator; the previous
        operator's are dropped)."""
        if op.values == "stored":
            return self._weights
        if op.values == "none":
            return None
        if self._op_values is None or self._op_values[0] is not op:
            from gnnprep.precompute.user_operators import CHUNK, run_parts, stdout_to_stderr

            self._op_values = None
            out = np.empty(len(self._indices), dtype=np.float32)

            def part(rows):
                r0, r1 = int(rows[0]), int(rows[1])
                p0, p1 = int(self.indptr[r0]), int(self.indptr[r1])
                w = self._weights[p0:p1] if self._weights is not None else None
                op.edge.values(self.indptr[r0:r1 + 1], self._indices[p0:p1], w, r0, out=out[p0:p1])

            # the user's function is pure (its contract) and numpy releases the GIL: one part per core
            bounds = balanced_rows(self.indptr, max(1, len(out) // CHUNK))
            with stdout_to_stderr():  # (daemon threads: a hanging function cannot hold up an interrupt)
                run_parts(part, zip(bounds[:-1], bounds[1:]), numba.get_num_threads())
            self._op_values = (op, out)
        return self._op_values[1]

    def close(self) -> None:
        """Close the ordered copy (waiting for the thread that opens or writes it)."""
        if self._finding is not None:
            self._finding.join()
            self._finding = None
            found, self._found = self._found, None
            if isinstance(found, tuple) and found and isinstance(found[0], str) and found[1] is not None:
                found[1].close()
        if self.copy is not None:
            self.copy.close()

    def degree(self, a: int) -> np.ndarray:
        """Row sums of A (edge counts, or weight sums) computed over ``a`` row blocks, in stored order."""
        return self.store.in_degree(a)


class _Pattern:
    """An operator stand-in whose block carries no values (the pattern of the selected rows)."""

    values = "none"


_PATTERN = _Pattern()


class NumbaBackend:
    name = "numba"

    def __init__(self, graph: HopGraph, op: Operator):
        self.k = kernels
        self.graph, self.op = graph, op
        graph.reuse_buffers = True  # a block is consumed before the next one is read

    def begin_hop(self, cur) -> None:
        pass

    def prepare(self, cur: np.ndarray) -> np.ndarray:
        if self.graph.ordered:
            # rows in the computation's order
            return self.graph.permute_rows(cur, self.graph.spare(cur.shape))
        return cur

    def empty_like(self, cur):
        return self.graph.spare(cur.shape)

    def hop_block(self, r0, r1, cur, nxt):
        ip, idx, w = self.graph.block(r0, r1, self.op)
        # sum rows: the row kernel with prefetch (gnnprep.sparse.row_kernels: the same bytes)
        kernel = self.k.spmm_rows_max if self.op.reduce == "max" else row_kernels.spmm_rows
        kernel(ip, idx, w, r0, self.op.left, self.op.right, self.op.loop, cur, nxt[r0:r1])

    @property
    def selects_rows(self) -> bool:
        """Whether :meth:`hop_rows` and :meth:`hop_rows_in_place` can compute chosen rows (sum rows;
        S resident, or streamed: :mod:`gnnprep.precompute.pruned`)."""
        return self.op.reduce != "max" and not self.op.restart

    def hop_rows_in_place(self, rows, cur, nxt, r0: int, r1: int):
        """nxt[v] = row v (computation order) of S·cur for v in ``rows`` (inside the edge block
        r0..r1-1); other rows untouched."""
        g = self.graph
        if g.resident:
            row_kernels.spmm_rows_in_place(g.indptr, g.indices, g.values(self.op), rows, self.op.left, self.op.right,
                                           self.op.loop, cur, nxt)
            return
        ip, idx, w = g.block(r0, r1, self.op)
        row_kernels.spmm_listed(ip, idx, w, r0, rows, self.op.left, self.op.right, self.op.loop, cur, nxt)

    def hop_rows(self, rows, cur, out):
        """out[i] = row rows[i] (computation order; one of the rows given to ``graph.select``) of S·cur."""
        g = self.graph
        if g.resident:
            row_kernels.spmm_selected(g.indptr, g.indices, g.values(self.op), rows, self.op.left, self.op.right,
                                      self.op.loop, cur, out)
            return
        sel, sub_ip, sub_idx, sub_w = g.selected(self.op)
        row_kernels.spmm_sub(sub_ip, sub_idx, sub_w, sel, np.searchsorted(sel, rows), self.op.left, self.op.right,
                             self.op.loop, cur, out)

    def to_host(self, arr, rows):
        # a slice is a view; selected rows are gathered lazily in the writer thread, so at most one
        # gathered copy exists at a time (the rows are final once their edge block is computed)
        return arr[rows] if isinstance(rows, slice) else Gather(arr, rows)

    def sync(self):
        pass


class HagBackend(NumbaBackend):
    """Â·(r ⊙ X) through a HAG (Jia et al.): aggregation nodes first, then the rewired in-lists."""

    name = "hag"

    def __init__(self, graph: HopGraph, op: Operator, hag):
        super().__init__(graph, op)
        self.hag = hag
        self.h = None

    selects_rows = False

    def begin_hop(self, cur) -> None:
        if self.h is None or self.h.shape[1] != cur.shape[1]:
            self.h = np.empty((self.hag.num_agg, cur.shape[1]), dtype=np.float32)
        self.k.hag_prepare(cur, self.op.right, self.hag.inputs, self.hag.level_ptr, self.h)

    def hop_block(self, r0, r1, cur, nxt):
        ip = self.hag.indptr[r0:r1 + 1]
        idx = self.hag.indices[ip[0]:ip[-1]]
        row_kernels.hag_rows(ip, idx, r0, self.op.left, self.op.right, self.op.loop, cur, self.h, nxt[r0:r1])


class TorchBackend:
    name = "torch"
    selects_rows = False

    def begin_hop(self, cur) -> None:
        pass

    def __init__(self, graph: HopGraph, op: Operator, device: str):
        import torch

        from gnnprep.sparse.kernels import TorchBlock

        self.torch, self.TorchBlock = torch, TorchBlock
        self.graph, self.op, self.device = graph, op, torch.device(device)
        self.cache: dict = {}

    def _block(self, r0, r1):
        if (r0, r1) in self.cache:
            return self.cache[(r0, r1)]
        ip, idx, w = self.graph.block(r0, r1, self.op)
        blk = self.TorchBlock(ip, idx, w, r0, self.graph.n, self.op.left, self.op.right, self.op.loop, self.device)
        if self.graph.resident:  # moved to the device once for the whole run
            self.cache[(r0, r1)] = blk
        return blk

    def prepare(self, cur: np.ndarray):
        t = self.torch.from_numpy(cur)
        if self.device.type == "cuda":
            t = t.pin_memory().to(self.device, non_blocking=True)
        return t

    def empty_like(self, cur):
        return self.torch.empty_like(cur)

    def hop_block(self, r0, r1, cur, nxt):
        nxt[r0:r1] = self._block(r0, r1).matmul(cur)

    def to_host(self, arr, rows):
        sel = arr[rows] if isinstance(rows, slice) else arr[self.torch.from_numpy(rows).to(arr.device)]
        return sel.to("cpu").numpy()

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def make_backend(name: str, graph: HopGraph, op: Operator, device: str, hag=None):
    """The backend ``name`` (numba | torch) for operator ``op`` in the graph's node order; a HAG, when
    given, runs on that backend's executor (:class:`HagBackend`, or
    :class:`gnnprep.precompute.hag_torch.TorchHagBackend` on a torch device)."""
    op = graph.operator(op)
    if hag is not None:
        if name == "torch":
            from gnnprep.precompute.hag_torch import TorchHagBackend

            return TorchHagBackend(graph, op, hag, device)
        return HagBackend(graph, op, hag)
    if name == "torch":
        return TorchBackend(graph, op, device)
    return NumbaBackend(graph, op)
