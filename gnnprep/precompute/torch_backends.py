"""The hop backends on torch (CPU or a CUDA device, one code path): rows r0..r1 of H_k = S H_{k-1}.

- :class:`TorchBackend`: ``torch.sparse`` CSR blocks of S with explicit values (the scalings
  folded in), moved to the device once when S is resident;
- :class:`TorchHagBackend`: the same through a HAG, as below.

Both implement :class:`gnnprep.precompute.backend.HopBackend`.

Hops through a HAG. Jia et al., "Redundancy-Free Computation for Graph Neural Networks" (KDD 2020): a HAG adds
aggregation nodes a ∈ VA, each the sum of two inputs, and rewires every node v to an in-list N̂(v)
over V ∪ VA that covers N(v) exactly (:mod:`gnnprep.hag.structure`). Because the operator factorises,

    S·X = diag(l) (Â + λI) diag(r) X,

one hop is computed over Y = [diag(r)X ; H] ((n + |VA|) rows):

1. Y[:n] = r ⊙ X (the graph nodes' rows, scaled once);
2. the aggregation nodes level by level, Y[n + a] = Y[in₀(a)] + Y[in₁(a)]: one sparse product per
   level, written straight into the level's rows of Y (``torch.addmm(..., beta=0, out=...)``) from
   a CSR matrix with two entries of value 1 per aggregation node over Y's rows *below* the level —
   a level's inputs are all in lower levels, so they are final, and the rows read and the rows
   written are disjoint slices of Y (no aliasing, on the CPU or a GPU). 1·y₀ + 1·y₁ rounds as
   y₀ + y₁: the same bits as a plain add. No temporary: 0.058 s against 0.122 s for the gather of
   the input pairs and a pairwise sum on the bench graph's 921k aggregation rows (d = 64, CPU);
3. the rewired in-lists as one sparse product per edge block over Y, with the row scaling folded
   into the values (l[v] on each of v's entries) and the self-loop as an explicit entry (v, v) of
   value λ l[v] (Y[v] is already r[v] x[v]):  out[v] = l[v] (λ y[v] + Σ_{u ∈ N̂(v)} Y[u]).

The numba executor (:class:`gnnprep.precompute.cpu_backends.HagBackend`) computes the same sums with
h = y₀ + y₁ bit for bit; the product's summation order differs, so the rows agree to float
tolerance (as the plain torch backend does with the CPU kernel).

Memory on the device: Y ((n + |VA|) × w float32), the rewired CSR (int64 column ids and float32
values: 12 bytes per entry plus the n self-loop entries) and the levels' CSR matrices (two int64
column ids, two float32 ones and a row pointer: 32 bytes per aggregation node).
"""

from __future__ import annotations

import warnings

import numpy as np

from gnnprep.precompute.hop_graph import HopGraph
from gnnprep.precompute.hop_writer import OWNED_SLOTS
from gnnprep.precompute.operators import Operator


class HostRing:
    """Host buffers a hop's rows are copied into on their way to the writer thread, reused in turn:
    page-locked on CUDA, so the device-to-host copy can run at the link's speed into memory faulted
    in once per run. On an H100 machine a steady hop of 2M rows × 128 columns took 0.657 s with a
    fresh pageable copy per write and 0.447 s through the ring (the kernel 0.011 s; the rest the
    writes, at that machine's page-cache speed of 1.3 GB/s). Unpinned, it is an ordinary copy (the
    CPU tests run it so).

    The caller hands each copy to :meth:`HopWriter.put` as an owned item before asking for the next
    one; the writer is then done with the copy OWNED_SLOTS + 1 copies back
    (:data:`gnnprep.precompute.hop_writer.OWNED_SLOTS`), whose buffer is refilled."""

    def __init__(self, torch, pinned: bool):
        self.torch, self.pinned = torch, pinned
        self.bufs: list = [None] * (OWNED_SLOTS + 1)
        self.i = 0

    def copy(self, rows) -> np.ndarray:
        """``rows`` (a tensor on any device) in the next host buffer, as a numpy array."""
        torch, i = self.torch, self.i
        self.i = (i + 1) % len(self.bufs)
        nbytes = rows.numel() * rows.element_size()
        if self.bufs[i] is None or self.bufs[i].numel() < nbytes:
            self.bufs[i] = None
            self.bufs[i] = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pinned)
        out = self.bufs[i][:nbytes].view(rows.dtype).view(rows.shape)
        out.copy_(rows)
        return out.numpy()


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
        # on the CPU a hop's rows are handed to the writer as views (no copy)
        self.ring = HostRing(torch, pinned=True) if self.device.type == "cuda" else None

    @property
    def keeps_blocks(self) -> bool:
        """Whether the row blocks are built once for the run (S resident) rather than per hop."""
        return self.graph.resident

    def load(self, blocks, stop=None) -> None:
        """Build every row block in ``blocks`` ((r0, r1) pairs) that the run keeps, moved to the
        device, then load the device's sparse library with one product of a 1 × 1 matrix: what hop 1
        would otherwise do first. The hop loop runs this in a thread while hop 0 reads X from the
        disk, where no node order is still to be found (the blocks are in the final order); ``stop``:
        an event that ends it at the next block (hop 0 failed or was interrupted: the run does not
        wait for all of S to reach the device before it exits). On an
        H100 machine (2M rows, 38.7M entries, d = 128, a new process per run, two rounds): hop 1's
        kernel time 1.05 / 1.14 s before, 0.040 / 0.040 s with it; the run 8.14 / 8.54 s against
        7.49 / 6.60 s as reported (walls 9.78 / 10.35 against 9.47 / 8.42 s)."""
        if self.keeps_blocks:
            for r0, r1 in blocks:
                if stop is not None and stop.is_set():
                    return
                self._block(r0, r1)
        if self.device.type == "cuda":
            torch = self.torch
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                one = torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1.0]),
                                              size=(1, 1)).to(self.device)
                torch.sparse.mm(one, torch.ones(1, 1, device=self.device))
            self.sync()

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
        """``arr[rows]`` on the host: a view on the CPU; from a device, copied into the next buffer of
        the host ring (:class:`HostRing`: the caller puts it to the writer as an owned item before
        the next call)."""
        sel = arr[rows] if isinstance(rows, slice) else arr[self.torch.from_numpy(rows).to(arr.device)]
        return sel.numpy() if self.ring is None else self.ring.copy(sel)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def end_block(self) -> None:
        pass   # (a HAG's Y is its own buffer, kept for the next block)


class TorchHagBackend(TorchBackend):
    """Â·(r ⊙ X) through a HAG on a torch device: levels as gather-adds, then the rewired in-lists."""

    name = "torch"   # the hop loop's writes treat its host copies as the torch backend's
    selects_rows = False

    def __init__(self, graph, op, hag, device: str):
        super().__init__(graph, op, device)
        torch = self.torch
        self.hag = hag
        self.n, self.na = int(hag.num_nodes), int(hag.num_agg)
        self.levels = [(int(a), int(b)) for a, b in zip(hag.level_ptr[:-1], hag.level_ptr[1:]) if b > a]
        self.level_mats = [_level_matrix(torch, hag, a0, a1, self.device) for a0, a1 in self.levels]
        self.right = torch.from_numpy(np.ascontiguousarray(op.right, dtype=np.float32)).to(self.device)[:, None]
        self.y = None

    def begin_hop(self, cur) -> None:
        """Y[:n] = r ⊙ cur, then every aggregation node's row, level by level."""
        torch, n = self.torch, self.n
        w = cur.shape[1]
        if self.y is None or self.y.shape[1] != w or self.y.device != cur.device:
            self.y = None
            self.y = torch.empty((n + self.na, w), dtype=torch.float32, device=cur.device)
        y = self.y
        torch.mul(cur, self.right, out=y[:n])
        for (a0, a1), mat in zip(self.levels, self.level_mats):
            rows = y[n + a0:n + a1]
            torch.addmm(rows, mat, y[:n + a0], beta=0, out=rows)

    @property
    def keeps_blocks(self) -> bool:
        return True   # the HAG is held for the whole run

    def _block(self, r0, r1):
        """Rows r0..r1-1 of diag(l)(Â_HAG + λI) as a CSR tensor over Y's n + |VA| columns (cached: a
        HAG is held for the whole run)."""
        blk = self.cache.get((r0, r1))
        if blk is None:
            blk = self.cache[(r0, r1)] = _rewired_block(self.torch, self.hag, r0, r1, self.op.left, self.op.loop,
                                                         self.device)
        return blk

    def hop_block(self, r0, r1, cur, nxt):
        nxt[r0:r1] = self.torch.sparse.mm(self._block(r0, r1), self.y)


def _level_matrix(torch, hag, a0: int, a1: int, device):
    """The CSR matrix of aggregation nodes a0..a1-1 (one level) over Y's n + a0 rows below it: row j
    holds 1 at in₀(a0 + j) and at in₁(a0 + j), so the product is y₀ + y₁ per row."""
    c = a1 - a0
    ins = np.sort(np.asarray(hag.inputs[a0:a1], dtype=np.int64), axis=1).reshape(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "beta" and invariant-check notices
        return torch.sparse_csr_tensor(torch.arange(0, 2 * c + 1, 2, dtype=torch.int64),
                                       torch.from_numpy(np.ascontiguousarray(ins)),
                                       torch.ones(2 * c, dtype=torch.float32),
                                       size=(c, hag.num_nodes + a0)).to(device)


def _rewired_block(torch, hag, r0: int, r1: int, left: np.ndarray, loop: float, device):
    """CSR of rows r0..r1-1: each entry of N̂(v) with value l[v], and (λ ≠ 0) the entry (v, v) with
    value λ l[v] appended to its row."""
    ip = np.asarray(hag.indptr[r0:r1 + 1], dtype=np.int64)
    idx = np.asarray(hag.indices[ip[0]:ip[-1]], dtype=np.int64)
    rows = r1 - r0
    counts = np.diff(ip)
    lv = np.asarray(left[r0:r1], dtype=np.float32)
    if loop:
        crow = np.concatenate([[0], np.cumsum(counts + 1)]).astype(np.int64)
        last = crow[1:] - 1
        col = np.empty(crow[-1], dtype=np.int64)
        val = np.empty(crow[-1], dtype=np.float32)
        keep = np.ones(crow[-1], dtype=bool)
        keep[last] = False
        col[keep] = idx
        val[keep] = np.repeat(lv, counts)
        col[last] = np.arange(r0, r1)
        val[last] = (np.float32(loop) * lv).astype(np.float32)
    else:
        crow = ip - ip[0]
        col, val = idx, np.repeat(lv, counts).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "beta" and invariant-check notices
        return torch.sparse_csr_tensor(torch.from_numpy(np.ascontiguousarray(crow)),
                                       torch.from_numpy(np.ascontiguousarray(col)),
                                       torch.from_numpy(np.ascontiguousarray(val)),
                                       size=(rows, hag.num_nodes + hag.num_agg)).to(device)
