"""The hop backends on the CPU kernels (numba): rows r0..r1 of H_k = S H_{k-1}, one edge block at a time.

- :class:`NumbaBackend`: the fused CSR row kernel with prefetch (:mod:`gnnprep.sparse.row_kernels`):
  out[v] = l[v] (λ r[v] x[v] + Σ_{u ∈ N(v)} r[u] x[u]), the scalings of S = diag(l)(A + λI)diag(r)
  fused, each row summed in its stored order, so the output does not depend on the blocking;
- :class:`HagBackend`: the same rows through a HAG (Jia et al., "Redundancy-Free Computation for
  Graph Neural Networks", KDD 2020): the aggregation nodes first, level by level, then the rewired
  in-lists (in the computation's node order, :func:`gnnprep.hag.order.in_order`; the pruned hops
  of ``--rows labeled`` compute only their rows' in-lists).

Both implement :class:`gnnprep.precompute.backend.HopBackend`.
"""

from __future__ import annotations

import numpy as np

from gnnprep.core.memory import empty_pages, fault_in
from gnnprep.precompute.hop_graph import HopGraph
from gnnprep.precompute.hop_writer import Gather
from gnnprep.precompute.operators import Operator
from gnnprep.sparse import (
    kernels,  # numba: compiled on first use, loaded from its cache afterwards
    row_kernels,
)


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

    def end_block(self) -> None:
        pass


HAG_ROWS_HUGE_FROM = 2 << 20   # aggregation rows from one huge page's size are on huge pages
# (the rewired in-lists read them at random, so 4 KiB pages miss the TLB: on cliques64 at 32M
# entries, 125k aggregation rows of 64 float32 = 32 MB, the HAG hop alone in the community order
# was 1.17-1.27x the plain hop's speed on huge pages against 1.04-1.20x without, median of 7 hops,
# three runs, benchmarks/bench_hag_stream.py's graph)


class HagBackend(NumbaBackend):
    """Â·(r ⊙ X) through a HAG (Jia et al.): aggregation nodes first, then the rewired in-lists."""

    name = "hag"

    def __init__(self, graph: HopGraph, op: Operator, hag):
        super().__init__(graph, op)
        self.hag = hag
        self.h = None        # the current hop's aggregation rows
        self.y = None        # [cur; h] as one array, when cur has the room after it (HopGraph.buffer)
        self.own = None      # else the aggregation rows' own buffer
        self.right_joined = None

    def _rows(self, width: int) -> np.ndarray:
        """The aggregation rows' own buffer for ``width`` columns (for a hop input without room
        after it), kept across hops; a new one is faulted in at once (one write per 4 KiB page), as
        the plain hops' spare buffer is before hop 1."""
        if self.own is None or self.own.shape[1] != width:
            self.own = None
            # huge pages: the rewired in-lists read these rows at random (see HAG_ROWS_HUGE_FROM)
            self.own = empty_pages((self.hag.num_agg, width), huge_from=HAG_ROWS_HUGE_FROM)
            fault_in(self.own)
        return self.own

    def prepare(self, cur: np.ndarray) -> np.ndarray:
        out = super().prepare(cur)
        if self.graph.extended(out) is None:
            self._rows(cur.shape[1])   # before hop 1, not in it
        return out

    def begin_hop(self, cur) -> None:
        # the aggregation rows go right after cur's when the hop graph made it with that room: the
        # hop is then the plain row kernel over one array (row_kernels.hag_rows_joined)
        self.y = self.graph.extended(cur)
        self.h = self._rows(cur.shape[1]) if self.y is None else self.y[self.hag.num_nodes:]
        if self.y is not None and self.right_joined is None:   # [r; 1 ... 1], once per operator
            self.right_joined = np.concatenate([self.op.right, np.ones(self.hag.num_agg, self.op.right.dtype)])
        self.k.hag_prepare(cur, self.op.right, self.hag.inputs, self.hag.level_ptr, self.h)

    def end_block(self) -> None:
        # [cur; h] of the block's last hop is a view of one of its buffers: held here, that buffer
        # would live on beside the next block's X and output (papers100M's shape at 1/10, 6 GiB:
        # 1.42 GB more at each block's start, peak 6.54 GiB)
        self.y = self.h = None

    def hop_block(self, r0, r1, cur, nxt):
        if self.graph.hag_rows is not None:   # the in-lists streamed, a row block at a time
            ip, idx, _ = self.graph.block(r0, r1)
        else:
            ip = self.hag.indptr[r0:r1 + 1]
            idx = self.hag.indices[ip[0]:ip[-1]]
        if self.y is not None:
            row_kernels.hag_rows_joined(ip, idx, r0, self.op.left, self.right_joined, self.op.loop, self.y,
                                        nxt[r0:r1])
        else:
            row_kernels.hag_rows(ip, idx, r0, self.op.left, self.op.right, self.op.loop, cur, self.h, nxt[r0:r1])

    # the pruned hops of --rows labeled: the chosen rows' rewired in-lists (the aggregation rows are
    # prepared for the whole hop by begin_hop); streamed in-lists: a block's, or the stored rows'
    # extracted once (HopGraph.selected), as the plain kernel's with S streamed
    def hop_rows_in_place(self, rows, cur, nxt, r0: int, r1: int):
        if self.graph.hag_rows is not None:
            ip, idx, _ = self.graph.block(r0, r1)
            row_kernels.hag_listed(ip, idx, r0, rows, self.op.left, self.op.right, self.op.loop, cur, self.h, nxt)
            return
        row_kernels.hag_rows_in_place(self.hag.indptr, self.hag.indices, rows, self.op.left, self.op.right,
                                      self.op.loop, cur, self.h, nxt)

    def hop_rows(self, rows, cur, out):
        if self.graph.hag_rows is not None:
            sel, sub_ip, sub_idx, _ = self.graph.selected()
            row_kernels.hag_sub(sub_ip, sub_idx, sel, np.searchsorted(sel, rows), self.op.left, self.op.right,
                                self.op.loop, cur, self.h, out)
            return
        row_kernels.hag_selected(self.hag.indptr, self.hag.indices, rows, self.op.left, self.op.right, self.op.loop,
                                 cur, self.h, out)
