"""S's pattern for the hop computation, in the computation's node order, and its edge blocks.

H_k = S H_{k-1} is computed one edge block at a time: contiguous row ranges of the row-sorted CSR
with about equal nnz + rows each (Maekawa et al.'s ``b`` propagation blocks; how many is the
planner's :func:`gnnprep.precompute.plan.row_blocks`). :class:`HopGraph` holds the CSR resident, or
reads each block as the hop reaches it, and maps between the stored ids and the computation's (a
node order set up by :mod:`gnnprep.precompute.order_setup`; until it is ready, and without one,
the two are the same). A backend (:mod:`gnnprep.precompute.backend`) computes a block's rows.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref

import numba
import numpy as np

from gnnprep.core.memory import empty_pages, fault_in
from gnnprep.graph.store import GraphStore
from gnnprep.precompute.config import OrderReport
from gnnprep.precompute.operators import Operator
from gnnprep.precompute.order_setup import OrderSetup
from gnnprep.precompute.plan import Plan, row_blocks
from gnnprep.sparse import kernels  # numba: compiled on first use, loaded from its cache afterwards


def balanced_rows(indptr: np.ndarray, b: int) -> np.ndarray:
    """Row boundaries of b contiguous edge blocks with about equal nnz + rows each."""
    n = len(indptr) - 1
    cost = indptr + np.arange(n + 1)
    bounds = np.searchsorted(cost, np.linspace(0, cost[-1], b + 1))
    bounds[0], bounds[-1] = 0, n
    return np.unique(bounds)


class HopGraph:
    """The CSR pattern (resident, or read per edge block) and the edge-block boundaries.

    With ``plan.reorder`` the node order is set up in a background thread (:class:`OrderSetup`)
    while the caller reads X and writes hop 0 on the other core; :meth:`ready` switches to it.
    ``force``: an explicit ``--reorder``; ``spare``: the shape of a column buffer to fault in
    meanwhile; ``hag_order``: the hops run through a HAG, in the order (order, inv) given
    ((None, None): the stored order), and S's pattern is never read; ``copy``: an ordered copy the
    planner opened; ``copy_room``/``reserve``: the memory and disk its writer may use; ``warn``:
    told of a damaged kept order (None: a DamagedOrderWarning); ``extra_rows``: rows of room
    after each column buffer (:meth:`buffer`; a HAG's aggregation rows).
    """

    def __init__(self, store: GraphStore, plan: Plan, order_kind: str = "community", force: bool = False,
                 spare: tuple[int, int] | None = None, copy=None, copy_room: int = 64 << 20, reserve: int = 0,
                 warn=None, hag_order: tuple[np.ndarray, np.ndarray] | None = None, extra_rows: int = 0,
                 hag_rows=None):
        self.store = store
        self.n = store.num_nodes
        self.extra_rows = int(extra_rows)
        self._extended = weakref.WeakValueDictionary()  # id(buffer) -> buffer, for those buffer() made
        self.indptr = store.indptr()
        self.weighted = store.weighted
        self.resident = plan.s_resident
        self.plan = plan
        self.row_bounds = balanced_rows(self.indptr, row_blocks(plan))
        self.order = self.inv = None
        self.copy = None            # the OrderedCopy S is read from (computation order)
        self.copy_report: dict | None = None   # the ordered copy: used, written (seconds) or why not
        self.reorder_info: OrderReport | None = None
        self.reuse_buffers = False  # streamed blocks read into two kept buffers (the CPU kernel's, synchronous)
        self._buffers: dict = {}
        self._checked: set = set()  # streamed entry ranges whose ids were checked
        self.read_seconds = 0.0     # spent reading streamed row blocks of S (the hops' "reads")
        self._selected = None       # (rows, {values kind: sub-CSR}) of the pruned hops with S streamed
        self._setup: OrderSetup | None = None
        self._spare_shape, self._spare = spare, None
        self._faulting: threading.Thread | None = None  # fault_in_spare's thread
        self._indices = None
        self._weights = None
        self._op_values = None  # (operator, its values over the resident CSR)
        use_copy = plan.reorder and (plan.ordered_copy or not self.resident)
        if not use_copy and copy is not None:
            copy.close()
        self.hag = hag_order is not None
        self.hag_rows = hag_rows    # a HAG whose in-lists are streamed (gnnprep.hag.file.HagRows)
        if self.hag:
            # the hops run through a HAG (already in this order, gnnprep.hag.order.in_order): S's
            # pattern is not read at all, only the order's (order, inv) is kept for X, the scalings
            # and the writes
            self.order, self.inv = hag_order if hag_order[0] is not None else (None, None)
            if hag_rows is not None:  # its in-lists read in the plan's b row blocks, as a streamed S
                self.indptr = hag_rows.indptr
                self.row_bounds = balanced_rows(self.indptr, row_blocks(plan))
            return
        if self.resident and not use_copy:
            from gnnprep.graph import order as kept_order

            # with a known order the stored column ids are streamed into the relabelled copy instead
            # (no second copy of S); they are loaded as stored only when the order must be found
            if not (plan.reorder and not self.weighted and kept_order.known(store, order_kind)):
                self._indices = self._load_indices()
            self._weights = store.stored_weights() if self.weighted else None
        if plan.reorder:
            self._setup = OrderSetup(store, order_kind, use_copy=use_copy, resident=self.resident, force=force,
                                     indices=self._indices, weights=self._weights, copy=copy,
                                     copy_room=copy_room, reserve=reserve, warn=warn)

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
        """S's column ids, read whole into an array faulted in by several threads first (the HDF5
        read would map it one thread at a time), and checked before any kernel reads them."""
        m = self.store.num_edges
        ids = empty_pages((m,), self.store.indices_dataset.dtype)
        fault_in(ids)
        return self.store.read_indices(0, m, out=ids)

    def ready(self) -> None:
        """Wait for the node order (if one is being set up) and switch the CSR to it."""
        setup, self._setup = self._setup, None
        if setup is None:
            return
        if setup.writes_copy:
            setup.join()  # the copy's writer was given the room of the second column buffer
        if self._spare_shape is not None:
            # the reordered copy of X's first column block (or, if the order is dropped, hop 1's
            # output), faulted in while the order is still being found on the other core
            self._spare = self.buffer(self._spare_shape)   # (faulted in)
        found = setup.result()
        self.copy_report = setup.copy_report
        if found.from_copy:  # S from the ordered copy beside the store
            self.reorder_info = None if found.info is None else OrderReport.from_info(found.info,
                                                                                       used=found.copy is not None)
            if found.copy is not None:
                self.copy = found.copy
                self.indptr = found.copy.indptr
                if found.csr is not None:
                    self._indices, self._weights = found.csr
                self.row_bounds = balanced_rows(self.indptr, row_blocks(self.plan))
                if self.copy_report is not None:
                    self.copy_report["used"] = True
            elif self.resident:  # the order did not pay: S resident in the stored order
                self._indices = self._load_indices()
                self._weights = self.store.stored_weights() if self.weighted else None
            return
        self.reorder_info = OrderReport.from_info(found.info, used=found.csr is not None)
        self._indices, self._weights = found.indices, found.weights
        if found.csr is not None:
            self.order = found.order
            self.indptr, self._indices, self.inv = found.csr[:3]
            if len(found.csr) > 3:
                self._weights = found.csr[3]
            self.row_bounds = balanced_rows(self.indptr, row_blocks(self.plan))

    def spare(self, shape: tuple) -> np.ndarray:
        """A float32 buffer of ``shape`` (the pre-faulted or kept one, once, where it holds it:
        :meth:`reuse`)."""
        if self._faulting is not None:
            self._faulting.join()
            self._faulting = None
        buf, self._spare = self._spare, None
        return self.reuse(buf, shape)

    def reuse(self, buf: np.ndarray | None, shape: tuple) -> np.ndarray:
        """A float32 buffer of ``shape``: ``buf`` where it has that shape, its first pages as one where
        it is larger (the last, narrower column block of d columns in blocks of w: n·(d mod w) values
        of an n·w buffer, contiguous, its pages faulted in already), else a new one — ``buf`` let go
        of first. A HAG's buffers (:attr:`extra_rows`) are reused only whole. Two new buffers for the
        last block, with the old ones still held while they were made, ran 132 MiB over the predicted
        peak on a 1M-node graph in 3 column blocks of 43 and 42 columns."""
        shape = tuple(int(k) for k in shape)
        if buf is not None and buf.shape == shape and (not self.extra_rows or self.extended(buf) is not None):
            return buf
        size = shape[0] * shape[1]
        if (buf is not None and not self.extra_rows and buf.dtype == np.float32 and buf.flags.c_contiguous
                and buf.size >= size):
            return buf.reshape(-1)[:size].reshape(shape)
        del buf
        return self.buffer(shape)

    def buffer(self, shape: tuple) -> np.ndarray:
        """A new float32 column buffer of ``shape`` (n rows), faulted in by several threads
        (:func:`gnnprep.core.memory.fault_in`: what fills it next, an HDF5 read of X or a hop, would
        otherwise map its pages one thread at a time); with :attr:`extra_rows`, the first n rows of
        an array with that many more (:meth:`extended` gives the whole array): a HAG's aggregation
        rows then sit right after X's, and the hop is the plain row kernel over one array
        (:class:`gnnprep.precompute.cpu_backends.HagBackend`)."""
        if not self.extra_rows:
            buf = empty_pages(shape)
            fault_in(buf)
            return buf
        rows, width = shape
        full = empty_pages((rows + self.extra_rows, width))
        fault_in(full)
        view = full[:rows]
        self._extended[id(view)] = view
        return view

    def extended(self, buf) -> np.ndarray | None:
        """``buf`` with the :attr:`extra_rows` rows of room after it, as one array, when :meth:`buffer`
        made it; None otherwise."""
        if not self.extra_rows or self._extended.get(id(buf)) is not buf:
            return None
        return np.lib.stride_tricks.as_strided(buf, shape=(buf.shape[0] + self.extra_rows, buf.shape[1]))

    def fault_in_spare(self, shape: tuple) -> None:
        """Start faulting in the spare buffer (hop 1's output) in a thread, so the kernel does not
        zero fresh pages on the critical path: called while hop 0 reads X from the disk (a fault is
        the OS zeroing a page: 14% of a hop's cycles on a 2.8M-row R-MAT graph)."""
        if self._spare is not None or self._faulting is not None:
            return

        def fault() -> None:
            self._spare = self.buffer(shape)   # (faulted in)

        self._faulting = threading.Thread(target=fault, name="fault-in-spare", daemon=True)
        self._faulting.start()

    def keep_spare(self, buf) -> None:
        """Keep a finished column block's buffer for the next block (no fresh pages per block)."""
        if isinstance(buf, np.ndarray) and self._faulting is None and self._spare is None:
            self._spare = buf

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

    # -- edge blocks ----------------------------------------------------------------------------------
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
        t0 = time.perf_counter()
        try:
            return self._read_checked(p0, p1, weights)
        finally:
            self.read_seconds += time.perf_counter() - t0

    def _read_checked(self, p0: int, p1: int, weights: bool):
        keep = self.reuse_buffers
        check = (p0, p1) not in self._checked
        w = None
        if self.hag_rows is not None:   # (ids checked by the reader, once per range)
            return self.hag_rows.read(p0, p1, self._buffer("idx", self.hag_rows.dtype, p1 - p0) if keep else None), None
        if self.copy is not None:
            buf = self._buffer("idx", self.store.index_dtype, p1 - p0) if keep else None
            idx = self.copy.read_indices(p0, p1, buf, check=check)
            if weights:
                w = self.copy.read_weights(p0, p1, self._buffer("w", np.float32, p1 - p0) if keep else None)
        else:
            idx = self.store.read_indices(p0, p1, self._buffer("idx", self.store.index_dtype, p1 - p0) if keep else None,
                                          check=check)
            if weights:
                w = self.store.read_weights(p0, p1, self._buffer("w", np.float32, p1 - p0) if keep else None)
        self._checked.add((p0, p1))
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
            dtype = self.hag_rows.dtype if self.hag_rows is not None else self.store.index_dtype
            subs[key] = extract_rows(self.indptr, blocks, rows, dtype, valued)
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

    def release(self) -> None:
        """Drop S's resident arrays and every kept buffer once the hops are done (``precompute --hdg``
        aggregates the hops read back from the file in that room)."""
        self._indices = self._weights = self._op_values = self._selected = self._spare = None
        self._buffers = {}

    def close(self) -> None:
        """Close the ordered copy (waiting for the thread that opens or writes it)."""
        setup, self._setup = self._setup, None
        if setup is not None:
            setup.close()
        if self.copy is not None:
            self.copy.close()
        if self.hag_rows is not None:
            self.hag_rows.close()

    def degree(self, a: int) -> np.ndarray:
        """Row sums of A (edge counts, or weight sums) computed over ``a`` row blocks, in stored order."""
        return self.store.in_degree(a)


class _Pattern:
    """An operator stand-in whose block carries no values (the pattern of the selected rows)."""

    values = "none"


_PATTERN = _Pattern()
