"""Precompute hop features S^k X, k = 0..K, block-wise and within a memory budget.

Maekawa et al. ("GNN Transformation Framework for Improving Efficiency and Scalability") show that
GCN, JKNet and GPRGNN can be rewritten so that every graph multiplication touches only X; the
products S^k X are then computed once, here. For each operator and each column block J
(:mod:`gnnprep.plan`), X[:, J] is loaded once and carried through the hops:

    H_0 = X[:, J];   H_k = S H_{k-1}   (rows r0..r1 of each edge block at a time)

Every edge lies in exactly one edge block (contiguous row ranges of the CSR) and every column in
exactly one column block, so nothing is dropped. Output row slices are written straight into the
artifact (no per-block n-row accumulators) by a writer thread while the next block computes.
Units (operator, column block, hop) are recorded as they finish; a rerun of the same command
continues after the last finished unit (:class:`gnnprep.atomic.ResumableOutput`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from gnnprep import features as fa
from gnnprep import kernels  # numba: compiled on first use, loaded from its cache afterwards
from gnnprep.atomic import ResumableOutput
from gnnprep.directio import ALIGN, RawWriter, contiguous_offset
from gnnprep.errors import GnnprepError
from gnnprep.meta import Timer, write_root_attrs
from gnnprep.operators import Operator, make_operator
from gnnprep.plan import Plan, Problem, choose_hag, choose_plan, load_profile, plan_with_hag, with_reorder
from gnnprep.sizes import default_host_budget
from gnnprep.store import GraphStore, feature_chunk_rows

Progress = Callable[[str, int, int | None], None]
REORDER_MODES = ("auto", "none", "community", "bfs")


def _noop(stage: str, done: int, total: int | None) -> None:
    pass


@dataclass(frozen=True)
class PrecomputeConfig:
    hops: int = 3
    operators: tuple[str, ...] = ("sym",)
    rows: str = "all"                      # all | labeled (the union of the splits)
    dtype: str = "float32"                 # output dtype: float32 | float16
    device: str = "auto"                   # auto | cpu | cuda
    backend: str = "auto"                  # auto | numba | torch (torch on CPU tests the CUDA path)
    memory_budget: int | None = None
    blocks: tuple[int, int, int] | None = None   # (a, b, c) override
    reorder: str = "auto"                  # auto | none | community | bfs: node order of the computation
    hag: str | None = None                 # a hag.h5 for the graph, or auto (see plan.choose_hag); CPU
    hdg: str | None = None                 # an hdg.h5 for the graph: its channels of every hop (see _hdg_pass)
    hdg_reduce: str = "mean"               # mean | sum at the HDG's instance levels
    dry_run: bool = False


@dataclass(frozen=True)
class PrecomputeReport:
    output: str
    plan: dict
    hops: int
    operators: tuple[str, ...]
    rows: int
    dtype: str
    hop_seconds: tuple[float, ...]
    seconds: float
    predicted_peak_bytes: int
    measured_peak_bytes: int | None
    baseline_rss_bytes: int
    resumed_units: int
    dry_run: bool = False
    hag: dict | None = None       # {"mode": file|auto, "used", "path", "reason"}
    reorder: dict | None = None   # {"kind", "used", "near_share_before", "near_share_after", "seconds"}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# -- memory measurement ----------------------------------------------------------------------------
def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (Linux); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# -- devices and backends --------------------------------------------------------------------------
def resolve_device(device: str) -> str:
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise GnnprepError(f"--device {device!r}: expected auto, cpu or cuda")
    if device == "cpu":
        return "cpu"
    try:
        import torch
    except ImportError:
        if device == "auto":
            return "cpu"
        raise GnnprepError("--device cuda: torch is not installed") from None
    if torch.cuda.is_available():
        return "cuda" if device == "auto" else device
    if device == "auto":
        return "cpu"
    raise GnnprepError(f"--device {device}: no CUDA device is available (torch.cuda.is_available() is False)")


def default_budget(device: str) -> int:
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free * 0.9)
    return default_host_budget()


def _balanced(indptr: np.ndarray, b: int) -> np.ndarray:
    """Row boundaries of b contiguous edge blocks with about equal nnz + rows each."""
    n = len(indptr) - 1
    cost = indptr + np.arange(n + 1)
    bounds = np.searchsorted(cost, np.linspace(0, cost[-1], b + 1))
    bounds[0], bounds[-1] = 0, n
    return np.unique(bounds)


class _Graph:
    """The CSR pattern (resident, or read per edge block) and the edge-block boundaries.

    With ``plan.reorder`` the node order for the computation is found in a background thread (one
    core; label propagation is serial and releases the GIL) while the caller reads X and writes
    hop 0 on the other. Unless ``force`` (an explicit ``--reorder``), an order that does not bring
    neighbours closer (``near_share`` up by at least ``REORDER_MIN_GAIN``) is dropped; a kept one
    relabels the CSR in that thread too. :meth:`ready` joins it; until then everything is in the
    stored (original) order.
    """

    REORDER_WINDOW = 4096     # ids: a row block's gathers that land this close stay in cache
    REORDER_MIN_GAIN = 0.2    # share of entries that must move inside the window for an order to pay

    def __init__(self, store: GraphStore, plan: Plan, order_kind: str = "community", force: bool = False,
                 spare: tuple[int, int] | None = None):
        self.store = store
        self.n = store.num_nodes
        self.indptr = self._stored_indptr = store.indptr()
        self.weighted = "adj/weights" in store.f
        self.resident = plan.s_resident
        self.b = plan.b
        # a resident S is still walked in several row blocks, so each block's rows are written
        # while the next block computes (the last hop's writes would otherwise all come at the end)
        self.row_bounds = _balanced(self.indptr, max(plan.b, 8) if self.resident else plan.b)
        self.order = self.inv = None
        self.reorder_info: dict | None = None
        self._finding: threading.Thread | None = None
        self._spare_shape, self._spare = spare, None
        self._force = force
        if self.resident:
            self._indices = store.f["adj/indices"][:]
            self._weights = store.f["adj/weights"][:] if self.weighted else None
            if plan.reorder:
                self._found: object = None
                self._finding = threading.Thread(target=self._find_order, args=(order_kind,), daemon=True)
                self._finding.start()

    def _find_order(self, kind: str) -> None:
        try:
            from gnnprep.reorder import bfs_order, community_order, near_share

            t0 = time.perf_counter()
            if kind == "bfs":
                order = bfs_order(self.indptr, self._indices)
            else:
                order = community_order(self.indptr, self._indices)
            inv = np.empty(self.n, dtype=np.int64)
            inv[order] = np.arange(self.n)
            before = near_share(self.indptr, self._indices, self.REORDER_WINDOW)
            after = near_share(self.indptr, self._indices, self.REORDER_WINDOW, inv)
            info = {"kind": kind, "near_share_before": round(before, 4), "near_share_after": round(after, 4),
                    "seconds": round(time.perf_counter() - t0, 3)}
            csr = None
            if self._use(info):
                # relabelled while the caller still reads X or faults in buffers (no other numba
                # parallel region runs then; numba's omp and tbb layers are thread-safe in any case)
                from gnnprep.reorder import permute_csr

                csr = permute_csr(self.indptr, self._indices, order)
            self._found = (order, inv, info, csr)
        except BaseException as e:  # raised in the caller's thread by ready()
            self._found = e

    def ready(self) -> None:
        """Wait for the node order (if one is being found) and switch the CSR to it."""
        if self._finding is None:
            return
        if self._spare_shape is not None:
            # the reordered copy of X's first column block (or, if the order is dropped, hop 1's
            # output), faulted in while the order is still being found on the other core
            self._spare = np.empty(self._spare_shape, dtype=np.float32)
            self._spare.reshape(-1)[::1024] = 0  # one write per 4 KiB page
        self._finding.join()
        self._finding = None
        if isinstance(self._found, BaseException):
            raise self._found
        order, inv, info, csr = self._found
        self._found = None
        self.reorder_info = {**info, "used": csr is not None}
        if csr is not None:
            self.order = order
            self.indptr, self._indices, self.inv = csr
            self.row_bounds = _balanced(self.indptr, max(self.b, 8))

    def _use(self, info: dict) -> bool:
        return self._force or info["near_share_after"] - info["near_share_before"] >= self.REORDER_MIN_GAIN

    def spare(self, shape: tuple) -> np.ndarray:
        """A float32 buffer of ``shape`` (the pre-faulted one, once, when it matches)."""
        buf, self._spare = self._spare, None
        if buf is not None and buf.shape == tuple(shape):
            return buf
        return np.empty(shape, dtype=np.float32)

    def operator(self, op: Operator) -> Operator:
        """``op`` with its scalings in the computation's node order."""
        if self.order is None:
            return op
        return dataclasses.replace(op, left=op.left[self.order], right=op.right[self.order])

    def blocks(self):
        for r0, r1 in zip(self.row_bounds[:-1], self.row_bounds[1:]):
            yield int(r0), int(r1)

    def block(self, r0: int, r1: int):
        p0, p1 = int(self.indptr[r0]), int(self.indptr[r1])
        if self.resident:
            idx = self._indices[p0:p1]
            w = self._weights[p0:p1] if self._weights is not None else None
        else:
            idx = self.store.f["adj/indices"][p0:p1]
            w = self.store.f["adj/weights"][p0:p1] if self.weighted else None
        return self.indptr[r0:r1 + 1], idx, w

    def degree(self, a: int) -> np.ndarray:
        """Row sums of A (edge counts, or weight sums) computed over ``a`` row blocks, in stored order."""
        if not self.weighted:
            return np.diff(self._stored_indptr).astype(np.float64)
        deg = np.zeros(self.n)
        for rows in np.array_split(np.arange(self.n), max(1, min(a, self.n))):
            if len(rows):
                r0, r1 = int(rows[0]), int(rows[-1]) + 1
                p0, p1 = int(self._stored_indptr[r0]), int(self._stored_indptr[r1])
                w = self.store.f["adj/weights"][p0:p1].astype(np.float64)
                local = np.repeat(np.arange(r1 - r0), np.diff(self._stored_indptr[r0:r1 + 1]))
                deg[r0:r1] = np.bincount(local, weights=w, minlength=r1 - r0)
        return deg


class _NumbaBackend:
    name = "numba"

    def __init__(self, graph: _Graph, op: Operator, device: str):
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
        ip, idx, w = self.graph.block(r0, r1)
        self.k.spmm_rows_numba(ip, idx, w, r0, self.op.left, self.op.right, self.op.loop, cur, nxt[r0:r1])

    def to_host(self, arr, rows):
        # a slice is a view; selected rows are gathered lazily in the writer thread, so at most one
        # gathered copy exists at a time (the rows are final once their edge block is computed)
        return arr[rows] if isinstance(rows, slice) else _Gather(arr, rows)

    def sync(self):
        pass


class _HagBackend(_NumbaBackend):
    """Â·(r ⊙ X) through a HAG (Jia et al.): aggregation nodes first, then the rewired in-lists."""

    name = "hag"

    def __init__(self, graph: _Graph, op: Operator, device: str, hag):
        super().__init__(graph, op, device)
        self.hag = hag
        self.h = None

    def begin_hop(self, cur) -> None:
        n = cur.shape[0]
        if self.h is None or self.h.shape[1] != cur.shape[1]:
            self.h = np.empty((self.hag.num_agg, cur.shape[1]), dtype=np.float32)
        self.k.hag_prepare(cur, self.op.right, self.hag.inputs, self.hag.level_ptr, self.h)

    def hop_block(self, r0, r1, cur, nxt):
        ip = self.hag.indptr[r0:r1 + 1]
        idx = self.hag.indices[ip[0]:ip[-1]]
        self.k.hag_rows(ip, idx, r0, self.op.left, self.op.right, self.op.loop, cur, self.h, nxt[r0:r1])


class _TorchBackend:
    name = "torch"

    def begin_hop(self, cur) -> None:
        pass

    def __init__(self, graph: _Graph, op: Operator, device: str):
        import torch

        from gnnprep.kernels import TorchBlock

        self.torch, self.TorchBlock = torch, TorchBlock
        self.graph, self.op, self.device = graph, op, torch.device(device)
        self.cache: dict = {}

    def _block(self, r0, r1):
        if (r0, r1) in self.cache:
            return self.cache[(r0, r1)]
        ip, idx, w = self.graph.block(r0, r1)
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


class _Gather:
    """Rows ``src[idx]``, gathered by the writer thread (off the compute thread), at most one
    gathered copy at a time; :meth:`into` gathers straight into a staging buffer."""

    def __init__(self, src: np.ndarray, idx: np.ndarray):
        self.src, self.idx = src, idx

    def __call__(self) -> np.ndarray:
        return self.src[self.idx]

    def into(self, out: np.ndarray) -> None:
        np.take(self.src, self.idx, axis=0, out=out)


class _Writer:
    """Writes (dataset, rows, columns, array) in a thread, overlapping the kernels.

    ``put`` returns a sequence number; ``wait(seq)`` blocks until every write up to it is done.
    Full-width writes into contiguous datasets go to the file directly (:mod:`gnnprep.directio`,
    page-cache free); others through h5py.
    """

    def __init__(self, dtype, path=None):
        self.dtype = np.dtype(dtype)
        # views and lazy gathers queue freely (a hop's worth of descriptors); owned copies (torch's
        # device-to-host rows) take one of 8 slots, so at most 8 × 32 MiB of them wait
        self.q: queue.Queue = queue.Queue()
        self.slots = threading.BoundedSemaphore(8)
        self.error: BaseException | None = None
        self.cv = threading.Condition()
        self.issued = 0
        self.finished = 0
        self.raw = RawWriter(path) if path is not None else None
        self.offsets: dict = {}
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _direct(self, ds, p0, p1, c0, c1, arr) -> bool:
        """Stage a full-width write into a contiguous dataset and queue it to the raw writer (which
        finishes the item once written); False when the item is not such a write."""
        if self.raw is None or c0 != 0 or c1 != ds.shape[1] or p1 <= p0:
            return False
        key = ds.id.id
        if key not in self.offsets:
            self.offsets[key] = contiguous_offset(ds)
        base = self.offsets[key]
        if base is None:
            return False
        row = ds.shape[1] * self.dtype.itemsize
        offset, nbytes = base + p0 * row, (p1 - p0) * row
        stage = self.raw.stage(offset, nbytes).view(self.dtype).reshape(p1 - p0, ds.shape[1])
        if isinstance(arr, _Gather) and arr.src.dtype == self.dtype:
            arr.into(stage)
        else:
            stage[:] = arr() if callable(arr) else arr
        self.raw.write_staged(offset, nbytes, self._finish)
        return True

    def _finish(self) -> None:
        if self.raw is not None and self.raw.error is not None and self.error is None:
            self.error = self.raw.error
        with self.cv:
            self.finished += 1
            self.cv.notify_all()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            owned = len(item) == 7
            item = item[:6]
            queued = False  # a direct write: the raw writer's I/O thread finishes it
            try:
                if self.error is None and item[0] == "sync":
                    # write back what this hop wrote while the next hop computes, so the final
                    # fsync before the rename has little left to do
                    if self.raw is not None:
                        self.raw.drain()
                    item[1].flush()
                    os.fdatasync(item[1].id.get_vfd_handle())
                elif self.error is None:
                    queued = self._direct(*item)
                    if not queued:
                        if self.raw is not None:
                            self.raw.drain()  # items finish in order
                        ds, p0, p1, c0, c1, arr = item
                        if callable(arr):  # a gather to run here, off the compute thread
                            arr = arr()
                        ds[p0:p1, c0:c1] = arr.astype(self.dtype, copy=False)
            except BaseException as e:  # surfaced in the main thread by wait()
                self.error = e
            finally:
                if owned:
                    self.slots.release()
                if not queued:
                    self._finish()

    def put(self, *item, owned: bool = False) -> int:
        if self.error is not None:
            raise self.error
        if owned:
            self.slots.acquire()
            item = item + (True,)
        self.issued += 1
        self.q.put(item)
        return self.issued

    def wait(self, seq: int | None = None):
        seq = self.issued if seq is None else seq
        with self.cv:
            while self.finished < seq and self.error is None:
                self.cv.wait()
        if self.error is not None:
            raise self.error

    def close(self):
        self.q.put(None)
        self.t.join()
        if self.raw is not None:
            self.raw.close()


def _select_rows(store: GraphStore, rows: str) -> np.ndarray | None:
    """None for all rows, else the sorted union of the splits."""
    if rows == "all":
        return None
    if rows != "labeled":
        raise GnnprepError(f"--rows {rows!r}: expected all or labeled")
    splits = store.splits()
    if not splits:
        raise GnnprepError(f"{store.path}: --rows labeled needs splits, and this graph store has none")
    return np.unique(np.concatenate(list(splits.values()))).astype(np.int64)


def _sampled_locality(store: GraphStore, windows: int = 64, width: int = 2048) -> float:
    """Mean |u - v| / n over evenly spaced windows of stored entries: about 1/3 when ids are
    arbitrary, small when neighbours already have nearby ids."""
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


def _run_key(store: GraphStore, config: PrecomputeConfig) -> str:
    parts = [store.fingerprint, config.hops, list(config.operators), config.rows, config.dtype,
             str(Path(config.hag).absolute()) if config.hag else None,
             [str(Path(config.hdg).absolute()), config.hdg_reduce] if config.hdg else None]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def precompute(graph_path: str | Path, output: str | Path, config: PrecomputeConfig = PrecomputeConfig(),
               progress: Progress = _noop, command: str = "") -> PrecomputeReport:
    t_start = time.perf_counter()
    if config.hops < 0:
        raise GnnprepError(f"--hops {config.hops}: expected a non-negative integer")
    if config.dtype not in ("float32", "float16"):
        raise GnnprepError(f"--dtype {config.dtype!r}: expected float32 or float16")
    device = resolve_device(config.device)
    backend = config.backend
    if backend == "auto":
        backend = "torch" if device.startswith("cuda") else "numba"
    if backend == "numba" and device != "cpu":
        raise GnnprepError("--backend numba runs on the CPU only")
    with GraphStore(graph_path) as store:
        feats = store.features
        if feats is None:
            raise GnnprepError(f"{store.path}: the graph store has no /nodes/features to propagate")
        n, d = feats.shape
        m = store.num_edges
        out_rows = _select_rows(store, config.rows)
        r = n if out_rows is None else len(out_rows)
        budget = config.memory_budget or default_budget(device)
        problem = Problem(num_nodes=n, num_entries=m, num_features=d, hops=config.hops,
                          operators=len(config.operators), out_rows=r,
                          index_bytes=store.f["adj/indices"].dtype.itemsize, weighted="adj/weights" in store.f,
                          out_itemsize=np.dtype(config.dtype).itemsize, in_itemsize=feats.dtype.itemsize,
                          device=device if backend == "torch" else "cpu")
        if backend == "numba":
            kernels.warm_up()
        baseline = _rss()
        profile = load_profile(device)
        plan = choose_plan(problem, budget, profile, baseline, config.blocks)
        if config.reorder not in REORDER_MODES:
            raise GnnprepError(f"--reorder {config.reorder!r}: expected one of {', '.join(REORDER_MODES)}")
        hag, hag_path, hag_info = None, config.hag, None
        if config.hag == "auto":
            hag_path, hag_info = _auto_hag(store, plan, problem, profile, budget, backend, config.dry_run)
        elif config.hag is not None:
            hag_info = {"mode": "file", "used": True, "path": str(config.hag), "reason": "--hag given"}
        if hag_path is not None:
            hag = _load_hag(hag_path, store, backend)
            plan = plan_with_hag(problem, profile, budget, baseline, hag.num_agg, hag.transfers(), config.blocks)
        elif backend == "numba":
            plan = with_reorder(plan, problem, profile, _sampled_locality(store), config.reorder, budget)
            if plan.reorder:
                from gnnprep import reorder

                reorder.warm_up()
        hdg = _load_hdg(config, store) if config.hdg is not None else None
        if config.dry_run:
            return PrecomputeReport(str(output), plan.to_dict(), config.hops, tuple(config.operators), r, config.dtype,
                                    (), 0.0, plan.predicted_peak, None, baseline, 0, dry_run=True, hag=hag_info)
        for name in config.operators:  # refuse before anything is written
            make_operator(name, np.zeros(1), store.symmetric)
        peak_ok = _reset_peak()
        baseline = _rss()
        out = ResumableOutput(output, _run_key(store, config))
        try:
            report = _run(store, out, config, plan, out_rows, device, backend, progress, command, t_start, baseline, hag,
                          hdg)
        except GnnprepError:
            out.close(keep=bool(out.done))  # nothing worth resuming: leave no trace
            raise
        except BaseException:
            out.close(keep=True)  # crash or interrupt: keep the partial output for a rerun to resume
            raise
        measured = (_peak_rss() - baseline) if peak_ok and _peak_rss() else None
        return dataclasses.replace(report, measured_peak_bytes=measured, hag=hag_info)


def _column_blocks(d: int, width: int) -> list[tuple[int, int]]:
    return [(c0, min(d, c0 + width)) for c0 in range(0, d, width)]


def _create_layout(f: h5py.File, store: GraphStore, config: PrecomputeConfig, plan: Plan, out_rows, n, d, r):
    f.create_dataset("rows", data=(np.arange(n) if out_rows is None else out_rows).astype(
        np.int32 if n < 2**31 else np.int64))
    # one column block: contiguous rows (a single pwrite per write, row-block reads for training);
    # several: chunks one column block wide, so block writes never rewrite each other's chunks
    chunk_rows = min(max(r, 1), feature_chunk_rows(plan.width, np.dtype(config.dtype).itemsize))
    chunks = None if plan.c == 1 else (chunk_rows, plan.width)
    hops = f.create_group("hops")
    channels = f.create_group("channels")
    first = config.operators[0]
    for op in config.operators:
        g = channels.create_group(op)
        for k in range(config.hops + 1):
            if k == 0 and op != first:
                continue
            fa.create_early(g, str(k), (r, d), config.dtype, chunks)
    for op in config.operators[1:]:
        channels[op]["0"] = channels[first]["0"]  # hard link: hop 0 is X for every operator
    for k in range(config.hops + 1):
        hops[str(k)] = channels[first][str(k)]
    labels = store.labels()
    if labels is not None:
        f.create_dataset("labels", data=labels if out_rows is None else labels[out_rows])
    sp = f.create_group("splits")
    for name, ids in store.splits().items():
        sp.create_dataset(name, data=ids)


def hag_cache_path(store_path: str | Path) -> Path:
    """Where ``--hag auto`` looks for (and keeps) a graph store's HAG: ``<store>.hag.h5`` beside it."""
    return Path(store_path).with_suffix(".hag.h5")


def _auto_hag(store: GraphStore, plan: Plan, problem: Problem, profile, budget: int, backend: str,
              dry_run: bool) -> tuple[Path | None, dict]:
    """``--hag auto``: the cached HAG's path when it pays (searching for one first when even a
    perfect HAG would repay the search), else None; and what was decided, for the report."""
    from gnnprep.hag import read_hag_summary, rounds_search, write_hag

    cache = hag_cache_path(store.path)
    cached = read_hag_summary(cache, store.fingerprint) if backend == "numba" else None
    choice = choose_hag(plan, problem, profile, cached, budget) if backend == "numba" else None
    if choice is not None and choice.build and not dry_run:
        indptr, indices = store.indptr(), store.indices()
        n = len(indptr) - 1
        t0 = time.perf_counter()
        h = rounds_search(indptr, indices, capacity=n // 4, memory_budget=budget)
        prov = {"command": "gnnprep precompute --hag auto", "parameters": {"method": "rounds", "capacity": n // 4},
                "inputs": [{"path": str(store.path), "graph_fingerprint": store.fingerprint}],
                "timings": {"search_seconds": round(time.perf_counter() - t0, 4)}}
        try:
            write_hag(h, cache, prov, "set", n // 4, store.fingerprint, indptr)
        except (OSError, GnnprepError):
            pass  # a read-only folder: nothing cached, decide without it
        cached = read_hag_summary(cache, store.fingerprint)
        choice = choose_hag(plan, problem, profile, cached, budget)
    if choice is None:
        return None, {"mode": "auto", "used": False, "path": None, "reason": "the HAG executor runs on the CPU kernel"}
    return (cache if choice.use else None), {"mode": "auto", "used": choice.use,
                                             "path": str(cache) if choice.use else None, "reason": choice.reason}


class _HdgInput:
    """An HDG loaded for precompute: the structure and its channel names."""

    def __init__(self, hdg, channels: list[str]):
        self.hdg = hdg
        self.channels = channels


def _load_hdg(config: PrecomputeConfig, store: GraphStore) -> _HdgInput:
    from gnnprep.hdg import read_hdg

    if config.rows != "all":
        raise GnnprepError("--hdg needs --rows all: an HDG aggregates hop features of nodes outside the splits too")
    if config.hdg_reduce not in ("mean", "sum"):
        raise GnnprepError(f"--hdg-reduce {config.hdg_reduce!r}: expected mean or sum")
    h, attrs = read_hdg(config.hdg)
    if attrs.get("graph_fingerprint") != store.fingerprint:
        raise GnnprepError(f"{config.hdg}: graph_fingerprint does not match {store.path}; this HDG was built for another graph")
    channels = json.loads(attrs["channels"]) if isinstance(attrs.get("channels"), str) else list(attrs["channels"])
    clash = sorted(set(channels) & set(config.operators))
    if clash:
        raise GnnprepError(f"{config.hdg}: channel {clash[0]!r} has the name of an operator channel")
    return _HdgInput(h, channels)


def _create_hdg_layout(f: h5py.File, config: PrecomputeConfig, hdg: _HdgInput, plan: Plan, n: int, d: int) -> None:
    chunk_rows = min(max(n, 1), feature_chunk_rows(plan.width, np.dtype(config.dtype).itemsize))
    chunks = None if plan.c == 1 else (chunk_rows, plan.width)
    for ch in hdg.channels:
        g = f["channels"].create_group(ch)
        for k in range(config.hops + 1):
            fa.create_early(g, str(k), (n, d), config.dtype, chunks)


def _hdg_pass(f: h5py.File, config: PrecomputeConfig, hdg: _HdgInput, cols, done: set, mark) -> None:
    """HDG channels (FlexGraph's hierarchical aggregation, Wang et al. 2021) of every hop:
    ``/channels/<c>/<k> = HDG_c(S^k X)``, computed bottom-up by :func:`gnnprep.hdg.aggregate` from the
    hop as written (one column block at a time: the HDG's sparse products act on columns
    independently). Each (hop, column block) is one resumable unit."""
    from gnnprep.hdg import aggregate

    for k in range(config.hops + 1):
        for j, (c0, c1) in enumerate(cols):
            if ("hdg", j, k) in done:
                continue
            x = f[f"hops/{k}"][:, c0:c1].astype(np.float32, copy=False)
            for ch, arr in aggregate(hdg.hdg, x, config.hdg_reduce).items():
                f[f"channels/{ch}/{k}"][:, c0:c1] = arr.astype(config.dtype, copy=False)
            f.flush()
            mark(("hdg", j, k))


def _load_hag(path, store: GraphStore, backend: str):
    from gnnprep.hag import read_hag

    if backend != "numba":
        raise GnnprepError("--hag runs on the CPU kernels; use --device cpu")
    h, attrs = read_hag(path)
    if attrs.get("graph_fingerprint") != store.fingerprint:
        raise GnnprepError(f"{path}: graph_fingerprint does not match {store.path}; this HAG was built for another graph")
    if "adj/weights" in store.f:
        raise GnnprepError(f"{path}: --hag needs an unweighted graph store")
    return h


def _run(store, out: ResumableOutput, config, plan, out_rows, device, backend, progress, command, t_start, baseline,
         hag=None, hdg=None):
    feats = store.features
    n, d = feats.shape
    r = n if out_rows is None else len(out_rows)
    timer = Timer()
    # 4 KiB-aligned datasets: hop rows are written to the file with O_DIRECT (gnnprep.directio)
    f = h5py.File(out.partial, "r+" if out.resumed else "w", alignment_threshold=ALIGN, alignment_interval=ALIGN)
    try:
        if not out.resumed:
            _create_layout(f, store, config, plan, out_rows, n, d, r)
            if hdg is not None:
                _create_hdg_layout(f, config, hdg, plan, n, d)
            f.flush()
        else:
            plan = Plan(**{**plan.to_dict(), **json.loads(out.state.get("plan", "{}"))}) if out.state.get("plan") else plan
        out.state["plan"] = json.dumps({k: plan.to_dict()[k] for k in ("a", "b", "c", "width")})
        done = set(out.done)
        resumed_units = len(done)
        graph = _Graph(store, plan, "bfs" if config.reorder == "bfs" else "community",
                       force=config.reorder in ("community", "bfs"),
                       spare=(n, min(d, plan.width)) if plan.reorder else None)
        with timer("normalise"):
            deg = graph.degree(plan.a)
            ops = {name: make_operator(name, deg, store.symmetric) for name in config.operators}
        cols = _column_blocks(d, plan.width)

        def make_backend(name: str):
            # one backend per operator for the whole run: a resident S is built (and moved) once
            op = graph.operator(ops[name])
            if hag is not None:
                return _HagBackend(graph, op, device, hag)
            return (_TorchBackend if backend == "torch" else _NumbaBackend)(graph, op, device)

        hop_seconds = [0.0] * (config.hops + 1)
        # page-cache-free writes, unless the HDG pass reads the hops back right after
        writer = _Writer(config.dtype, out.partial if hdg is None else None)
        units_total = len(cols) * (1 + config.hops * len(config.operators)) + \
            (len(cols) * (config.hops + 1) if hdg is not None else 0)
        units_done = len(done)
        progress("units", units_done, units_total)
        step = max(1, (32 << 20) // max(1, 4 * plan.width))  # rows per write: at most 32 MiB in flight
        ids = np.arange(n) if out_rows is None else out_rows
        # hop 0 is X itself, written in stored order while the node order (if any) is still found
        hop0_parts = [(slice(p0, min(r, p0 + step)) if out_rows is None else out_rows[p0:p0 + step],
                       p0, min(r, p0 + step)) for p0 in range(0, r, step)]

        def hop_parts():
            """(row_parts, write_parts) once the computation's node order is known.

            row_parts: (r0, r1, [(rows, p0, p1), ...]) an edge block and the output rows it finishes;
            write_parts: with a node order, (p0, p1, rows) written after the whole hop (output rows,
            in stored order, gathered from the computation's order), else None."""
            graph.ready()
            row_parts = []
            for r0, r1 in graph.blocks():
                if out_rows is None:
                    writes = [(slice(q, min(r1, q + step)), q, min(r1, q + step)) for q in range(r0, r1, step)]
                else:
                    a, z = (int(v) for v in np.searchsorted(out_rows, [r0, r1]))
                    writes = [(out_rows[q:min(z, q + step)], q, min(z, q + step)) for q in range(a, z, step)]
                row_parts.append((r0, r1, writes))
            write_parts = None
            if graph.inv is not None:
                write_parts = [(p0, min(r, p0 + step), graph.inv[ids[p0:p0 + step]]) for p0 in range(0, r, step)]
            return row_parts, write_parts

        def load_x(c0: int, c1: int) -> np.ndarray:
            t0 = time.perf_counter()
            xb = np.empty((n, c1 - c0), dtype=np.float32)
            step = max(1, (4 << 20) // max(1, (c1 - c0) * 4))  # small steps: no large temporaries
            for s in range(0, n, step):
                e = min(n, s + step)
                if feats.dtype == np.float32:
                    feats.read_direct(xb, np.s_[s:e, c0:c1], np.s_[s:e])
                else:
                    xb[s:e] = feats[s:e, c0:c1]
                if not np.isfinite(xb[s:e]).all():
                    raise GnnprepError(f"{store.path}: /nodes/features has non-finite values in rows {s}..{e - 1}")
            hop_seconds[0] += time.perf_counter() - t0
            return xb

        def mark(unit):
            nonlocal units_done
            out.mark(unit, f)
            units_done += 1
            progress("units", units_done, units_total)

        try:
            parts = None
            for name in config.operators:  # operator-outer: a resident S is built once per operator
                be = None
                for j, (c0, c1) in enumerate(cols):
                    x_block = None
                    hop0 = None  # (unit, last write seq) of hop 0 (X itself), while it is being written
                    if ("x", j, 0) not in done:
                        x_block = load_x(c0, c1)
                        for rows, p0, p1 in hop0_parts:
                            if p1 > p0:
                                writer.put(f["hops/0"], p0, p1, c0, c1,
                                           x_block[rows] if isinstance(rows, slice) else _Gather(x_block, rows))
                        hop0 = (("x", j, 0), writer.issued)
                        done.add(("x", j, 0))

                    def finish(unit_seq):
                        t0 = time.perf_counter()
                        writer.wait(unit_seq[1])
                        mark(unit_seq[0])
                        hop_seconds[0 if unit_seq[0][0] == "x" else unit_seq[0][2]] += time.perf_counter() - t0

                    todo = [k for k in range(1, config.hops + 1) if (name, j, k) not in done]
                    if not todo:
                        if hop0 is not None:
                            finish(hop0)
                        continue
                    if be is None:
                        parts = parts or hop_parts()
                        be = make_backend(name)
                    row_parts, write_parts = parts
                    if todo[0] > 1 and out_rows is None:
                        # resume: the last finished hop of this block is in the artifact
                        src = np.empty((n, c1 - c0), dtype=np.float32)
                        src[:] = f[f"channels/{name}/{todo[0] - 1}"][:, c0:c1]
                        start_k = todo[0]
                    else:
                        src = x_block if x_block is not None else load_x(c0, c1)
                        start_k = 1
                    cur = be.prepare(src)
                    # the buffers are reused for later hops; a reordered copy frees X's buffer for hop 1
                    # (fresh memory is slow to fault in on VMs that return free pages to the host)
                    reuse = isinstance(cur, np.ndarray) and cur is not src and cur.shape == src.shape
                    nxt = src if reuse else be.empty_like(cur)
                    del src, x_block
                    # (unit, last write seq) of the previous hop, still being written from ``cur``
                    pending = hop0 if hop0 is not None and not reuse else None
                    if reuse and hop0 is not None:
                        finish(hop0)  # hop 1 overwrites X's buffer
                    for k in range(start_k, config.hops + 1):
                        t0 = time.perf_counter()
                        ds = f[f"channels/{name}/{k}"]
                        write = (name, j, k) not in done
                        seq = writer.issued
                        be.begin_hop(cur)
                        for r0, r1, writes in row_parts:
                            be.hop_block(r0, r1, cur, nxt)
                            if write and write_parts is None:
                                be.sync()
                                for rows, p0, p1 in writes:
                                    seq = writer.put(ds, p0, p1, c0, c1, be.to_host(nxt, rows),
                                                     owned=be.name == "torch")
                        be.sync()
                        if write and write_parts is not None:
                            for p0, p1, idx in write_parts:
                                seq = writer.put(ds, p0, p1, c0, c1, _Gather(nxt, idx))
                        if write:
                            seq = writer.put("sync", f)
                        hop_seconds[k] += time.perf_counter() - t0
                        if pending is not None:
                            # hop k-1's rows are on disk before its unit is marked and before its
                            # buffer (cur) is overwritten by hop k+1; hop k's writes overlap hop k+1
                            finish(pending)
                        pending = ((name, j, k), seq) if write else None
                        if not write:
                            writer.wait(seq)
                        cur, nxt = nxt, cur
                    if pending is not None:
                        finish(pending)
                    writer.wait()
                    del cur, nxt
                be = None
            if hdg is not None:
                with timer("hdg"):
                    writer.wait()
                    _hdg_pass(f, config, hdg, cols, done, mark)
        finally:
            writer.close()
        f.attrs["_resumed"] = out.resumed
        provenance = {
            "command": command or "precompute",
            "parameters": {**dataclasses.asdict(config), "device": device, "backend": backend},
            "inputs": [{"path": str(Path(store.path).absolute()), "graph_fingerprint": store.fingerprint}],
            "plan": plan.to_dict(),
            "timings": {**timer.timings, "hop_seconds": [round(s, 4) for s in hop_seconds]},
            "reorder": graph.reorder_info,
        }
        write_root_attrs(f, fa.FORMAT, fa.FORMAT_VERSION, provenance,
                         hops=config.hops, operator=config.operators[0],
                         operators=json.dumps(list(config.operators) + (list(hdg.channels) if hdg is not None else [])),
                         hdg_channels=json.dumps(list(hdg.channels) if hdg is not None else []),
                         plan=json.dumps(plan.to_dict()), graph_fingerprint=store.fingerprint,
                         num_classes=int(store.attrs.get("num_classes", 0)), rows=config.rows, dtype=config.dtype,
                         num_nodes=n, num_features=d)
        del f.attrs["_resumed"]
    finally:
        f.close()
    out.commit()
    return PrecomputeReport(
        output=str(out.path), plan=plan.to_dict(), hops=config.hops, operators=tuple(config.operators), rows=r,
        dtype=config.dtype, hop_seconds=tuple(round(s, 4) for s in hop_seconds),
        seconds=round(time.perf_counter() - t_start, 3), predicted_peak_bytes=plan.predicted_peak,
        measured_peak_bytes=None, baseline_rss_bytes=baseline, resumed_units=resumed_units,
        reorder=graph.reorder_info)
