"""The hop computation's graph and its backends: H_k = S H_{k-1}, one edge block at a time.

:class:`HopGraph` holds the CSR pattern (resident, or read per edge block) in the computation's node
order and yields the edge blocks (contiguous row ranges, about equal nnz + rows each). A backend
computes rows r0..r1 of the next hop from the whole current one:

- :class:`NumbaBackend`: the fused CSR row kernel (:mod:`gnnprep.sparse.kernels`), CPU;
- :class:`HagBackend`: the same rows through a HAG (Jia et al. 2020): aggregation nodes first, then
  the rewired in-lists, CPU;
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

    With ``plan.reorder`` the node order for the computation is found in a background thread (one
    core; label propagation is serial and releases the GIL) while the caller reads X and writes
    hop 0 on the other. Unless ``force`` (an explicit ``--reorder``), an order that does not bring
    neighbours closer (``near_share`` up by at least ``REORDER_MIN_GAIN``) is dropped; a kept one
    relabels the CSR in that thread too. :meth:`ready` joins it; until then everything is in the
    stored (original) order.
    """

    REORDER_MIN_GAIN = 0.2    # share of entries that must move inside the window for an order to pay

    def __init__(self, store: GraphStore, plan: Plan, order_kind: str = "community", force: bool = False,
                 spare: tuple[int, int] | None = None):
        self.store = store
        self.n = store.num_nodes
        self.indptr = self._stored_indptr = store.indptr()
        self.weighted = store.weighted
        self.resident = plan.s_resident
        self.b = plan.b
        # a resident S is still walked in several row blocks, so each block's rows are written
        # while the next block computes (the last hop's writes would otherwise all come at the end)
        self.row_bounds = balanced_rows(self.indptr, max(plan.b, 8) if self.resident else plan.b)
        self.order = self.inv = None
        self.reorder_info: OrderReport | None = None
        self._finding: threading.Thread | None = None
        self._spare_shape, self._spare = spare, None
        self._force = force
        self._indices = None
        self._op_values = None  # (operator, its values over the resident CSR)
        if self.resident:
            from gnnprep.graph import order as kept_order

            # with a known order the stored column ids are streamed into the relabelled copy instead
            # (no second copy of S); they are loaded as stored only when the order must be found
            if not (plan.reorder and not self.weighted and kept_order.known(store, order_kind)):
                self._indices = self._load_indices()
            self._weights = store.stored_weights() if self.weighted else None
            if plan.reorder:
                self._found: object = None
                self._finding = threading.Thread(target=self._find_order, args=(order_kind,), daemon=True)
                self._finding.start()

    @property
    def indices(self) -> np.ndarray:
        """The resident CSR's column ids, in computation order (after :meth:`ready`; only when S is
        resident)."""
        return self._indices

    def _load_indices(self) -> np.ndarray:
        indices = self.store.stored_indices()
        check_ids(indices, self.n, f"{self.store.path}: /adj/indices")  # before any kernel reads them
        return indices

    def _read_checked(self, p0: int, p1: int) -> np.ndarray:
        block = self.store.stored_indices(p0, p1)
        check_ids(block, self.n, f"{self.store.path}: /adj/indices", offset=p0)
        return block

    def _find_order(self, kind: str) -> None:
        try:
            from gnnprep.graph import order as kept_order
            from gnnprep.sparse import order as node_order

            t0 = time.perf_counter()
            # found at ingest (kept in the store), or by an earlier run on this graph (kept beside it)
            cached = kept_order.load_from_store(self.store, kind) if kind == "community" else None
            where = "store"
            if cached is None:
                cached, where = kept_order.load_cached(self.store.path, kind, self.store.fingerprint, self.n), "cache"
            if cached is not None:
                order, info = cached
            else:
                if self._indices is None:  # the kept order was damaged: find it from the stored ids
                    self._indices = self._load_indices()
                order = (node_order.bfs_order if kind == "bfs" else node_order.community_order)(self.indptr, self._indices)
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
        """Wait for the node order (if one is being found) and switch the CSR to it."""
        if self._finding is None:
            return
        if self._spare_shape is not None:
            # the reordered copy of X's first column block (or, if the order is dropped, hop 1's
            # output), faulted in while the order is still being found on the other core
            self._spare = empty_pages(self._spare_shape)
            self._spare.reshape(-1)[::1024] = 0  # one write per 4 KiB page
        self._finding.join()
        self._finding = None
        if isinstance(self._found, BaseException):
            raise self._found
        order, inv, info, csr = self._found
        self._found = None
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

    def operator(self, op: Operator) -> Operator:
        """``op`` with its scalings (and a user operator's per-entry degrees) in the computation's
        node order."""
        if self.order is None:
            return op
        edge = op.edge.permuted(self.order) if op.edge is not None else None
        return dataclasses.replace(op, left=op.left[self.order], right=op.right[self.order], edge=edge)

    def blocks(self):
        for r0, r1 in zip(self.row_bounds[:-1], self.row_bounds[1:]):
            yield int(r0), int(r1)

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
        idx = self.store.stored_indices(p0, p1)
        check_ids(idx, self.n, f"{self.store.path}: /adj/indices", offset=p0)
        w = self.store.stored_weights(p0, p1) if self.weighted and values != "none" else None
        if values == "edge":
            w = op.edge.values(ip, idx, w, r0)
        return ip, idx, w

    def values(self, op: Operator) -> np.ndarray | None:
        """The whole resident CSR's values for ``op`` (computed once per operator; the previous
        operator's are dropped)."""
        if op.values == "stored":
            return self._weights
        if op.values == "none":
            return None
        if self._op_values is None or self._op_values[0] is not op:
            from concurrent.futures import ThreadPoolExecutor

            from gnnprep.precompute.user_operators import CHUNK, stdout_to_stderr

            self._op_values = None
            out = np.empty(len(self._indices), dtype=np.float32)

            def part(rows):
                r0, r1 = int(rows[0]), int(rows[1])
                p0, p1 = int(self.indptr[r0]), int(self.indptr[r1])
                w = self._weights[p0:p1] if self._weights is not None else None
                op.edge.values(self.indptr[r0:r1 + 1], self._indices[p0:p1], w, r0, out=out[p0:p1])

            # the user's function is pure (its contract) and numpy releases the GIL: one part per core
            bounds = balanced_rows(self.indptr, max(1, len(out) // CHUNK))
            with ThreadPoolExecutor(numba.get_num_threads()) as pool, stdout_to_stderr():
                list(pool.map(part, zip(bounds[:-1], bounds[1:])))
            self._op_values = (op, out)
        return self._op_values[1]

    def degree(self, a: int) -> np.ndarray:
        """Row sums of A (edge counts, or weight sums) computed over ``a`` row blocks, in stored order."""
        return self.store.in_degree(a)


class NumbaBackend:
    name = "numba"

    def __init__(self, graph: HopGraph, op: Operator):
        self.k = kernels
        self.graph, self.op = graph, op

    def begin_hop(self, cur) -> None:
        pass

    def prepare(self, cur: np.ndarray) -> np.ndarray:
        if self.graph.order is not None:
            # rows in the computation's order
            return kernels.take_rows(cur, self.graph.order, self.graph.spare(cur.shape))
        return cur

    def empty_like(self, cur):
        return self.graph.spare(cur.shape)

    def hop_block(self, r0, r1, cur, nxt):
        ip, idx, w = self.graph.block(r0, r1, self.op)
        kernel = self.k.spmm_rows_max if self.op.reduce == "max" else self.k.spmm_rows_numba
        kernel(ip, idx, w, r0, self.op.left, self.op.right, self.op.loop, cur, nxt[r0:r1])

    @property
    def selects_rows(self) -> bool:
        """Whether :meth:`hop_rows` can compute arbitrary rows (the whole CSR is resident; sum rows)."""
        return self.graph.resident and self.op.reduce != "max" and not self.op.restart

    def hop_rows_in_place(self, rows, cur, nxt):
        """nxt[v] = row v (computation order) of S·cur for v in ``rows``; other rows untouched."""
        g = self.graph
        self.k.spmm_rows_in_place(g.indptr, g.indices, g.values(self.op), rows, self.op.left, self.op.right,
                                  self.op.loop, cur, nxt)

    def hop_rows(self, rows, cur, out):
        """out[i] = row rows[i] (computation order) of S·cur."""
        g = self.graph
        self.k.spmm_selected(g.indptr, g.indices, g.values(self.op), rows, self.op.left, self.op.right,
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
        self.k.hag_rows(ip, idx, r0, self.op.left, self.op.right, self.op.loop, cur, self.h, nxt[r0:r1])


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
    given, runs on the CPU kernel (the caller has checked ``name == "numba"``)."""
    op = graph.operator(op)
    if hag is not None:
        return HagBackend(graph, op, hag)
    if name == "torch":
        return TorchBackend(graph, op, device)
    return NumbaBackend(graph, op)
