"""The hop loop of one precompute run: for every operator and column block, hop 0 (X itself) and
hops 1..K, written as they finish; then the HDG channels, the root attributes and the commit.

H_0 = X[:, J];  H_k = S H_{k-1}, edge block by edge block (:mod:`gnnprep.precompute.backends`), each block's
finished rows queued to the writer thread (:mod:`gnnprep.precompute.hop_writer`) while the next block computes;
hop k's writes overlap hop k+1's kernels (two buffers per column block). Each (operator, column
block, hop) is a unit recorded in the resumable output as soon as its rows are on disk.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnprep.core import h5file
from gnnprep.core.artifact import Timer
from gnnprep.core.memory import disk_read_bytes
from gnnprep.core.output import ResumableOutput
from gnnprep.core.progress import Progress
from gnnprep.graph.store import GraphStore
from gnnprep.precompute import features as fa
from gnnprep.precompute.backend import make_backend
from gnnprep.precompute.config import PrecomputeConfig, PrecomputeReport
from gnnprep.precompute.hop_graph import HopGraph
from gnnprep.precompute.hop_writer import Gather, HopWriter
from gnnprep.precompute.operators import make_operator
from gnnprep.precompute.plan import Plan, Problem, column_blocks

if TYPE_CHECKING:
    from gnnprep.hag.structure import Hag
    from gnnprep.hdg.structure import Hdg
    from gnnprep.precompute.config import HagChoice
    from gnnprep.precompute.profile import Profile
    from gnnprep.precompute.user_operators import Degrees

WRITE_BYTES = 32 << 20     # bytes of a column block's rows in one queued write, at most ...
WRITE_MIN_BYTES = 4 << 20  # ... and at least (where the block has that many) ...
WRITE_PIECES = 4           # ... so that a column block's hop goes in about this many writes (write_step)


def write_step(rows: int, width: int, c: int, dtype: str) -> int:
    """Rows per queued write of a hop's column block (``rows`` output rows, ``width`` columns,
    ``c`` blocks): about 1 / :data:`WRITE_PIECES` of the block, between :data:`WRITE_MIN_BYTES` and
    :data:`WRITE_BYTES` of float32 rows, in whole chunks of a chunked hop (c > 1).

    The writer gathers (or copies) one write's rows into a staging buffer while the disk writes
    the one before, so a block written in one piece leaves the disk idle while its rows are
    gathered, and the last hop's write waits for both. Measured (2026-11-29, 2-core Xeon VM, six
    rounds alternating): cliques64 at 8M entries (d = 64, 125k rows: 32 MB a hop, one write of
    32 MiB before), hops 1..3 without a HAG 0.121 / 0.128 s best / median against 0.114 / 0.118 s
    in 8 MiB writes, with its HAG 0.105 / 0.113 against 0.099 / 0.101 s; the R-MAT graph at 1/40
    (``--rows all``, 711 MB a block), the papers100M shape at 1/40 (``--rows labeled``) and the
    1M-node power-law graph alike either way (already written in 4 or more pieces)."""
    row = 4 * max(1, width)
    piece = min(WRITE_BYTES, max(WRITE_MIN_BYTES, rows * row // WRITE_PIECES))
    step = max(1, piece // row)
    chunks = fa.hop_chunks(rows, width, c, dtype)
    if chunks is not None:   # whole chunks: a chunk written in part goes through HDF5
        step = max(chunks[0], step // chunks[0] * chunks[0])
    return step


@dataclass
class Job:
    """What the run computes, resolved before anything is written."""

    config: PrecomputeConfig
    device: str
    backend: str                       # numba | torch
    plan: Plan
    problem: Problem
    out_rows: np.ndarray | None        # None: every node
    hag: Hag | None = None
    hag_path: Path | None = None
    hag_info: HagChoice | None = None
    hag_order: tuple | None = None     # (order, inv) the HAG was relabelled to; (None, None): stored order
    hag_order_choice: tuple | None = None  # --hag auto: (order, inv, kind, why) a run through the HAG would use
    hag_planned: bool = False          # --dry-run: the plan goes through the HAG (its arrays not read)
    hag_relabels: bool = False         # the run relabels the HAG to its node order (no relabelled copy kept)
    # the shares of X, S and the ordered copy's S in the page cache when planned (plan.Problem)
    page_cached: dict = dataclasses.field(default_factory=dict)
    hdg: Hdg | None = None
    hdg_channels: tuple[str, ...] = ()
    baseline: int = 0
    profile: Profile | None = None     # the cost model the plan was made with
    user: dict = dataclasses.field(default_factory=dict)  # --operator-file: {name: (UserFunction, Factors)}
    hdg_weight: tuple | None = None    # --hdg-weight: (UserFunction, the re-weighted HDG)
    degrees: Degrees | None = None     # the graph's degrees (loop 0), for compiling user operators
    copy: object = None                # the ordered copy of S the planner opened (gnnprep.precompute.ordered)
    copy_room: int = 64 << 20          # bytes the ordered copy's writer may hold (plan.copy_build_room)
    reserve_bytes: int = 0             # disk bytes the artifact still needs (the copy leaves them free)
    decisions: dict = dataclasses.field(default_factory=dict)  # why the order and pruning are (not) used
    order_kind: str = "community"      # the node order's kind (graph.order.precompute_kind)
    order_force: bool = False          # used without the near-share check (--reorder <kind>, a degree order)
    warn: object = None                # the command's warning channel (a damaged kept order is said there)

    @property
    def uses_hag(self) -> bool:
        """Whether the hops go through a HAG (read, or with ``--dry-run`` planned from its attributes)."""
        return self.hag is not None or self.hag_planned


def _in_thread(fn, *args) -> Future:
    """``fn(*args)`` in a new thread; its result (or its exception, re-raised) from ``.result()``."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hop-loop")
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)


def operator_sources(job: Job) -> dict:
    """The artifact's ``operator_sources``: each ``--operator-file`` operator's (and the
    ``--hdg-weight`` function's) file, hash, source text, reduce, loop, and the factors the planner
    found (:mod:`gnnprep.precompute.user_operators`); empty without them."""
    out = {name: {**fn.provenance(), "factors": factors.to_dict(), "plan": factors.describe()}
           for name, (fn, factors) in job.user.items()}
    if job.hdg_weight is not None:
        fn = job.hdg_weight[0]
        out[f"hdg-weight:{fn.name}"] = {**fn.provenance(), "plan": "the weight of every member of the HDG's "
                                        "vertex levels, evaluated once"}
    return out


class HopRun:
    """One run over an open resumable output: layout → for every operator and column block, hop 0
    (X itself) and hops 1..K → HDG channels → root attributes → commit.

    ``shard`` (a rank of a torchrun job, :mod:`gnnprep.precompute.run`): only the column blocks inside
    ``shard["columns"]`` = [C0, C1) are computed, into a shard file whose hop datasets hold those
    columns (column c of X is the shard's column c − C0); the root attributes describe the shard."""

    def __init__(self, store: GraphStore, out: ResumableOutput, job: Job, progress: Progress, command: str,
                 t_start: float, shard: dict | None = None):
        self.store, self.out, self.job, self.progress = store, out, job, progress
        self.shard = shard
        self.command, self.t_start = command, t_start
        self.config, self.plan = job.config, job.plan
        # row sums of |X| (normalize_features="row"), found on first use: (as float32, the rows whose
        # sum float32 cannot hold, their float64 sums)
        self._row_l1 = None
        self.n, self.d = store.features.shape
        self.r = self.n if job.out_rows is None else len(job.out_rows)
        self.timer = Timer()
        self.hop_seconds = [0.0] * (self.config.hops + 1)
        # where each hop's seconds went on the compute thread: the kernels, reads (X, streamed S),
        # waits for its writes; the rest (gathers, queueing, bookkeeping) is reported as "other"
        self.hop_parts = [{"kernel": 0.0, "reads": 0.0, "writes_waited": 0.0} for _ in range(self.config.hops + 1)]
        self._k = 0  # the hop being computed
        # bytes read from the disk per hop (None: the kernel does not say); see _spent
        self.hop_read = [0] * (self.config.hops + 1) if disk_read_bytes() is not None else None
        self.done = set(out.done)
        self.resumed_units = len(self.done)
        # seconds earlier (interrupted) runs spent per hop, to their last finished unit: the artifact's
        # hop seconds carry them (the report's are this run's), so a resumed run's hops do not read as free
        earlier = out.state.get("hop_seconds") if out.resumed else None
        self.earlier_seconds = earlier if seconds_list(earlier, self.config.hops + 1) else [0.0] * (self.config.hops + 1)
        self.cols = column_blocks(self.d, self.plan.width)
        self.col0 = 0   # X's column c is the output's column c - col0
        if shard is not None:
            s0, s1 = shard["columns"]
            self.cols = [(c0, c1) for c0, c1 in self.cols if s0 <= c0 and c1 <= s1]
            self.col0 = s0
        self.step = write_step(self.r, self.plan.width, len(self.cols), self.config.dtype)
        k, ops = self.config.hops, len(self.config.operators)
        self.units_total = len(self.cols) * (1 + k * ops) + (len(self.cols) * (k + 1) if job.hdg is not None else 0)
        self._parts = None
        self._inputs = None  # rows hop K-1 computes for --rows labeled (_last_hop_inputs)
        self._new_rows = None  # the stored rows' ids in the computation's order (_computation_rows)
        self._spare_buffer = None  # a diffusion operator's third column-block buffer
        self._free = None  # the last column block's other buffer: the next block's X is read into it
        self.graph = HopGraph(store, self.plan, job.order_kind, force=job.order_force,
                              spare=(self.n, min(self.d, self.plan.width)) if self.plan.reorder else None,
                              copy=job.copy, copy_room=job.copy_room, reserve=job.reserve_bytes, warn=job.warn,
                              hag_order=job.hag_order if job.hag is not None and job.backend == "numba" else None,
                              extra_rows=job.hag.num_agg if job.hag is not None and job.backend == "numba" else 0,
                              hag_rows=job.hag if job.hag is not None and not job.plan.s_resident else None)
        job.copy = None  # the hop graph owns it now

    def execute(self) -> PrecomputeReport:
        config = self.config
        # 4 KiB-aligned datasets: hop rows are written to the file with O_DIRECT (gnnprep.core.directio)
        self.f = fa.open_output(self.out.partial, resume=self.out.resumed, direct=True)
        try:
            if not self.out.resumed and self.shard is not None:
                s0, s1 = self.shard["columns"]
                fa.create_shard_layout(self.f, self.r, s1 - s0, config.hops, tuple(config.operators), config.dtype,
                                       len(self.cols), self.plan.width)
                self.f.flush()
            elif not self.out.resumed:
                fa.create_layout(self.f, self.store, self.job.out_rows, config.hops, tuple(config.operators),
                                 config.dtype, self.plan.c, self.plan.width, self.job.hdg_channels)
                self.f.flush()
            with self.timer("normalise"):
                user = self.job.user
                deg = self.graph.degree(self.plan.a) if set(config.operators) - set(user) else None
                self.ops = {name: self._user_operator(name) if name in user else
                            make_operator(name, deg, self.store.symmetric) for name in config.operators}
                self.job.degrees = None  # compiled: no longer needed
            # page-cache-free writes, unless the HDG pass reads the hops back right after
            piece = fa.staged_bytes(self.r, self.plan.width, self.plan.c, config.dtype, self.step)
            self.writer = HopWriter(config.dtype, self.out.partial if self.job.hdg is None else None, piece)
            self.progress("units", len(self.done), self.units_total)
            try:
                for name in config.operators:  # operator-outer: a resident S is built once per operator
                    self._operator(name)
                self._free = None
                if self.job.hdg is not None:
                    with self.timer("hdg"):
                        self.writer.wait()
                        self._hdg_channels()
            finally:
                self.writer.close()
            self._write_root()
        except BaseException:
            h5file.close_after_failure(self.f)   # flushed for a rerun where it can be; never a second error
            raise
        else:
            h5file.close(self.f)   # a failed flush raises its write's error
        finally:
            self.graph.close()
        self.out.commit()
        return self._report()

    # -- steps ---------------------------------------------------------------------------------------
    def _operator(self, name: str) -> None:
        """Hops 1..K of operator ``name`` for every column block (and hop 0 where not yet written).
        A block's last hop is still being written (gathered back to stored order, with a node order)
        while the next block's X is read: its buffer becomes the spare once those writes are done."""
        be = None  # one backend per operator for the whole run: a resident S is built (and moved) once
        tail = None  # (unit, last write seq) and output buffer of the previous block's last hop
        for j, (c0, c1) in enumerate(self.cols):
            if j == 0 and self.job.backend == "numba" and not self.plan.reorder:
                self.graph.fault_in_spare((self.n, c1 - c0))  # hop 1's buffer, while X is read
            todo = [k for k in range(1, self.config.hops + 1) if (name, j, k) not in self.done]
            loading = None
            if be is None and todo and self.job.backend == "torch" and not self.plan.reorder:
                # no node order to wait for: S's blocks are built and moved to the device while X is read
                be = self._backend(name)
                stop = threading.Event()
                loading = _in_thread(be.load, [(r0, r1) for r0, r1, _ in self._row_parts()[0]], stop)
            try:
                x_block, hop0 = self._hop0(j, c0, c1)
            except BaseException:
                if loading is not None:   # (an interrupt, a bad X): the loading ends at its next block
                    stop.set()
                    loading.exception()
                raise
            if loading is not None:
                t0 = time.perf_counter()
                loading.result()
                waited = time.perf_counter() - t0
                # S moved to the device is the first hop's work (as when its first product moves it)
                self.hop_parts[todo[0]]["kernel"] += waited
                self.hop_seconds[todo[0]] += waited
            self._settle(tail)
            tail = None
            if not todo:
                if hop0 is not None:
                    self._finish(hop0)
                x_block = None
                continue
            if be is None:
                be = self._backend(name)
            tail = self._column_block(be, name, j, c0, c1, todo, x_block, hop0)
            # the block's X buffer is free once its hops are done: not held while the next one is read
            x_block = None
        self._settle(tail)

    def _backend(self, name: str):
        """Operator ``name``'s backend, made once the node order is known (:meth:`_row_parts` waits
        for it)."""
        self._row_parts()
        return make_backend(self.job.backend, self.graph, self.ops[name], self.job.device, self.job.hag)

    def _settle(self, tail) -> None:
        """Wait for a block's last hop to be written and mark it; its buffer is the next spare."""
        if tail is not None:
            pending, buf = tail
            if pending is not None:
                self._finish(pending)
            self.writer.wait()
            self.graph.keep_spare(buf)

    def _user_operator(self, name: str):
        """A ``--operator-file`` operator compiled to scalings, loop and CSR values (:mod:`gnnprep.precompute.user_operators`)."""
        from gnnprep.precompute.user_operators import compile_operator, degrees

        fn, factors = self.job.user[name]
        if self.job.degrees is None:
            self.job.degrees = degrees(self.store, 0.0, self.plan.a)
        return compile_operator(fn, factors, self.job.degrees.with_loop(fn.loop))

    def _hop0(self, j: int, c0: int, c1: int):
        """Read X[:, c0:c1] and queue it as hop 0 (in stored order, while the node order may still be
        found); returns (the block or None, (unit, last write seq) or None)."""
        if ("x", j, 0) in self.done:
            return None, None
        x_block = self._load_x(c0, c1)
        rows = self.job.out_rows
        for p0 in range(0, self.r, self.step):
            p1 = min(self.r, p0 + self.step)
            part = x_block[p0:p1] if rows is None else Gather(x_block, rows[p0:p1])
            self.writer.put(self.f[fa.hop_path(0)], p0, p1, c0 - self.col0, c1 - self.col0, part)
        self.done.add(("x", j, 0))
        return x_block, (("x", j, 0), self.writer.issued)

    def _column_block(self, be, name: str, j: int, c0: int, c1: int, todo: list[int], x_block, hop0):
        """Carry column block j through hops ``todo[0]``..K of operator ``name``: two buffers, hop k's
        writes overlapping hop k+1's kernels. Returns the last hop's (unit, last write seq) and its
        buffer, still being written (:meth:`_settle`)."""
        if todo[0] > 1 and self.job.out_rows is None:
            # resume: the last finished hop of this block is in the artifact
            src = self.graph.buffer((self.n, c1 - c0))
            src[:] = self.f[fa.channel_path(name, todo[0] - 1)][:, c0 - self.col0:c1 - self.col0]
            start_k = todo[0]
        else:
            src = x_block if x_block is not None else self._load_x(c0, c1)
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
            self._finish(hop0)  # hop 1 overwrites X's buffer
        for k in range(start_k, self.config.hops + 1):
            t0, r0 = time.perf_counter(), disk_read_bytes()
            self._k = k
            write = (name, j, k) not in self.done
            ds = self.f[fa.channel_path(name, k)]
            pruned = self.job.out_rows is not None and be.selects_rows
            if be.op.restart:
                seq = self._diffusion_hop(be, ds, write, cur, nxt, c0, c1)
            elif pruned and k == self.config.hops:
                seq = self._stored_rows_hop(be, ds, write, cur, c0, c1)
            elif pruned and k == self.config.hops - 1:
                seq = self._hop(be, ds, write, cur, nxt, c0, c1, only=self._last_hop_inputs())
            else:
                seq = self._hop(be, ds, write, cur, nxt, c0, c1)
            self._spent(k, t0, r0)
            if pending is not None:
                # hop k-1's rows are on disk before its unit is marked and before its buffer (cur)
                # is overwritten by hop k+1; hop k's writes overlap hop k+1
                self._finish(pending)
            pending = ((name, j, k), seq) if write else None
            if not write:
                t1 = time.perf_counter()
                self.writer.wait(seq)
                self.hop_parts[k]["writes_waited"] += time.perf_counter() - t1
            cur, nxt = nxt, cur
        be.end_block()
        # the last hop's writes (and unit) are settled by the caller after the next block's X is read;
        # its buffer then becomes the next block's output buffer, and the other one (its rows
        # written: hop K-1's unit is finished) takes the next block's X
        self._free = nxt if isinstance(nxt, np.ndarray) else None
        del nxt
        return pending, cur

    def _diffusion_hop(self, be, ds, write: bool, cur, nxt, c0: int, c1: int) -> int:
        """nxt = P cur for a diffusion operator (``ppr``): K passes z ← (1-α) Ŝ z + α cur (the
        (1-α) is in the operator's row scaling), through nxt and one more buffer, alternating so
        that no pass reads the buffer it writes and the last pass (the written one) lands in nxt."""
        steps, alpha = be.op.steps, be.op.restart
        if steps > 1 and (self._spare_buffer is None or tuple(self._spare_buffer.shape) != tuple(cur.shape)):
            self._spare_buffer = None
            self._spare_buffer = be.empty_like(cur)
        z = cur
        for t in range(steps - 1):
            out = self._spare_buffer if (steps - 1 - t) % 2 == 1 else nxt
            self._compute(be.begin_hop, z)
            for r0, r1 in self.graph.blocks():
                self._compute(be.hop_block, r0, r1, z, out)
                out[r0:r1] += alpha * cur[r0:r1]
            z = out
        return self._hop(be, ds, write, z, nxt, c0, c1, restart=(alpha, cur))

    def _hop(self, be, ds, write: bool, cur, nxt, c0: int, c1: int, only=None, restart=None) -> int:
        """nxt = S cur, edge block by edge block, each block's finished rows queued for writing (or,
        with a node order, all rows gathered back to stored order after the hop); the last write's seq.
        With ``only`` (rows in computation order, sorted) only those rows of nxt are computed; with
        ``restart`` = (α, h), each block's rows get α h added before they are written."""
        row_parts, write_parts = self._row_parts()
        seq = self.writer.issued
        c0, c1 = c0 - self.col0, c1 - self.col0  # the output's columns
        self._compute(be.begin_hop, cur)
        for r0, r1, writes in row_parts:
            if only is None:
                self._compute(be.hop_block, r0, r1, cur, nxt)
            else:
                a, z = np.searchsorted(only, [r0, r1])
                if z > a:
                    self._compute(be.hop_rows_in_place, only[a:z], cur, nxt, r0, r1)
            if restart is not None:
                nxt[r0:r1] += restart[0] * restart[1][r0:r1]
            if write and write_parts is None:
                self._compute(be.sync)
                for rows, p0, p1 in writes:
                    host = be.to_host(nxt, rows)
                    # an owned item (a device's rows in the host ring) waits here for a free slot:
                    # the writer behind, so the disk's time, not other
                    t1 = time.perf_counter()
                    seq = self.writer.put(ds, p0, p1, c0, c1, host, owned=be.name == "torch")
                    self.hop_parts[self._k]["writes_waited"] += time.perf_counter() - t1
        self._compute(be.sync)
        if write and write_parts is not None:
            for p0, p1, idx in write_parts:
                seq = self.writer.put(ds, p0, p1, c0, c1, Gather(nxt, idx))
        if write:
            seq = self.writer.put("sync", self.f)
        return seq

    def _last_hop_inputs(self) -> np.ndarray:
        """The rows (computation order, sorted) the last hop of ``--rows labeled`` reads: the stored
        rows and their in-neighbours. Hop K−1 computes only these (with 1.4% of nodes stored and
        mean degree 29, about a third of the rows)."""
        if self._inputs is None and self.job.hag is not None:  # through the HAG (in the computation's order)
            from gnnprep.hag.order import rows_read, rows_read_listed

            g, h = self.graph, self.job.hag
            if g.hag_rows is not None:  # its in-lists streamed: the stored rows' extracted once
                g.select(np.sort(self._computation_rows()))
                rows, _, sub_idx, _ = g.selected()
                self._inputs = rows_read_listed(h.num_nodes, h.inputs, h.level_ptr, rows, sub_idx)
            else:
                self._inputs = rows_read(h, self._computation_rows())
        if self._inputs is None:
            g = self.graph
            rows = self._computation_rows()
            mark = np.zeros(self.n, dtype=bool)
            mark[rows] = True
            if g.resident:
                starts, lens = g.indptr[rows], g.indptr[rows + 1] - g.indptr[rows]
                entries = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
                mark[g.indices[entries]] = True
            else:  # the stored rows' in-lists, extracted once from the streamed S
                g.select(np.sort(rows))
                mark[g.selected()[2]] = True
            del rows
            self._inputs = np.flatnonzero(mark)
        return self._inputs

    def _computation_rows(self) -> np.ndarray:
        """The stored rows (``job.out_rows``, in stored order) in the computation's ids."""
        if self._new_rows is None:
            self._new_rows = np.asarray(self.graph.new_ids(self.job.out_rows), dtype=np.int64)
        return self._new_rows

    def _stored_rows_hop(self, be, ds, write: bool, cur, c0: int, c1: int) -> int:
        """The last hop of ``--rows labeled``: only the stored rows of S·cur are computed (no later
        hop needs the others), straight in stored order, through two alternating buffers; the
        last write's seq."""
        seq = self.writer.issued
        if not write:
            return seq
        rows = self._computation_rows()
        if not self.graph.resident and (not self.graph.hag or self.graph.hag_rows is not None):
            self.graph.select(np.sort(rows))
        self._compute(be.begin_hop, cur)  # (a HAG's aggregation rows)
        bufs = [np.empty((min(self.step, self.r), c1 - c0), dtype=np.float32) for _ in range(2)]
        c0, c1 = c0 - self.col0, c1 - self.col0  # the output's columns
        seqs = []
        for i, p0 in enumerate(range(0, self.r, self.step)):
            p1 = min(self.r, p0 + self.step)
            if i >= 2:
                t1 = time.perf_counter()
                self.writer.wait(seqs[i - 2])  # that buffer's rows are written
                self.hop_parts[self._k]["writes_waited"] += time.perf_counter() - t1
            out = bufs[i % 2][:p1 - p0]
            self._compute(be.hop_rows, rows[p0:p1], cur, out)
            seqs.append(self.writer.put(ds, p0, p1, c0, c1, out))
        return self.writer.put("sync", self.f)

    def _row_parts(self):
        """(row_parts, write_parts), once the computation's node order is known.

        row_parts: (r0, r1, [(rows, p0, p1), ...]) an edge block and the output rows it finishes;
        write_parts: with a node order, (p0, p1, rows) written after the whole hop (output rows, in
        stored order, gathered from the computation's order), else None."""
        if self._parts is not None:
            return self._parts
        self.graph.ready()
        out_rows, step, r = self.job.out_rows, self.step, self.r
        row_parts = []
        for r0, r1 in self.graph.blocks():
            if out_rows is None:
                writes = [(slice(q, min(r1, q + step)), q, min(r1, q + step)) for q in range(r0, r1, step)]
            else:
                a, z = (int(v) for v in np.searchsorted(out_rows, [r0, r1]))
                writes = [(out_rows[q:min(z, q + step)], q, min(z, q + step)) for q in range(a, z, step)]
            row_parts.append((r0, r1, writes))
        write_parts = None
        if self.graph.ordered:
            new = self.graph.new_ids(np.arange(self.n)) if out_rows is None else self._computation_rows()
            write_parts = [(p0, min(r, p0 + step), new[p0:p0 + step]) for p0 in range(0, r, step)]
        self._parts = row_parts, write_parts
        return self._parts

    def _x_buffer(self, shape: tuple) -> np.ndarray:
        """The buffer X's column block is read into: the one the last column block finished with,
        where it holds the shape (:meth:`HopGraph.reuse`; with a HAG, one that has its aggregation
        rows' room), else a new one.
        Faulting fresh pages in is slow on VMs that return free pages to the host (0.45-0.8 GB/s
        measured): on the papers100M shape at 1/40 (c = 2, 711 MB a block) the second block's read
        took 1.0-1.2 s into fresh pages."""
        buf, self._free = self._free, None
        return self.graph.reuse(buf, shape)

    def _load_x(self, c0: int, c1: int) -> np.ndarray:
        """X[:, c0:c1], row-normalised with ``normalize_features="row"`` (X_i / Σ_j |X_ij|, the
        row sums over all d columns found once; zero rows stay zero), as GCN (Kipf & Welling 2017),
        SGC (Wu et al. 2019) and PyG's NormalizeFeatures do before propagating (PyG also clamps the
        sum to at least 1; here no row is scaled up or down by anything but its own L1 norm)."""
        t0, r0 = time.perf_counter(), disk_read_bytes()
        xb = self.store.feature_columns(c0, c1, out=self._x_buffer((self.n, c1 - c0)))
        if self.config.normalize_features == "row":
            if self._row_l1 is None:
                l1 = self.store.feature_row_l1()
                l1 = np.where(l1 > 0, l1, 1.0)
                with np.errstate(over="ignore"):
                    l1_32 = l1.astype(np.float32)
                # rows whose L1 norm exceeds float32 (features near 3e38) are divided in float64:
                # by the norm cast to float32 (inf) they would come out all zero
                wide = np.flatnonzero(~np.isfinite(l1_32))
                self._row_l1 = (l1_32, wide, l1[wide])
            l1_32, wide, l1_wide = self._row_l1
            exact = (xb[wide] / l1_wide[:, None]).astype(np.float32) if len(wide) else None
            np.divide(xb, l1_32[:, None], out=xb)
            if exact is not None:
                xb[wide] = exact
        self.hop_parts[0]["reads"] += time.perf_counter() - t0
        self._spent(0, t0, r0)
        return xb

    def _compute(self, kernel, *args) -> None:
        """Call a backend step, charging its time to the current hop's kernel seconds, less the
        streamed S reads inside it (charged to its reads)."""
        t0, s0 = time.perf_counter(), self.graph.read_seconds
        kernel(*args)
        read = self.graph.read_seconds - s0
        part = self.hop_parts[self._k]
        part["kernel"] += time.perf_counter() - t0 - read
        part["reads"] += read

    def hop_breakdown(self) -> tuple[dict, ...]:
        """Per hop: kernel, reads, writes waited for and other seconds (the hop's seconds less the
        three), as ``--json`` reports them."""
        out = []
        for k, parts in enumerate(self.hop_parts):
            row = {name: round(v, 4) for name, v in parts.items()}
            row["other"] = round(max(0.0, self.hop_seconds[k] - sum(parts.values())), 4)
            out.append(row)
        return tuple(out)

    def total_hop_seconds(self) -> list[float]:
        """Each hop's seconds over every run that wrote this output: earlier, interrupted runs' (to
        their last finished unit, work an interrupt lost counted again when redone) and this one's."""
        return [round(e + s, 4) for e, s in zip(self.earlier_seconds, self.hop_seconds)]

    def _spent(self, k: int, t0: float, r0: int | None) -> None:
        """Charge the time and disk reads since (t0, r0) to hop k."""
        self.hop_seconds[k] += time.perf_counter() - t0
        r1 = disk_read_bytes()
        if self.hop_read is not None and r0 is not None and r1 is not None:
            self.hop_read[k] += r1 - r0

    def _mark(self, unit, flushed: bool = False) -> None:
        # flushed: the writer's "sync" item already flushed the file past the unit's writes (a
        # second flush here would only wait on HDF5's lock while the writer works on the next hop)
        self.out.state["hop_seconds"] = self.total_hop_seconds()
        self.out.mark(unit, None if flushed else self.f)
        self.progress("units", len(self.out.done), self.units_total)

    def _finish(self, unit_seq) -> None:
        """Wait for a unit's writes, then record it as finished."""
        t0, r0 = time.perf_counter(), disk_read_bytes()
        self.writer.wait(unit_seq[1])
        unit = unit_seq[0]
        k = 0 if unit[0] == "x" else unit[2]
        self.hop_parts[k]["writes_waited"] += time.perf_counter() - t0
        self._mark(unit, flushed=self.writer.synced >= unit_seq[1])
        self._spent(k, t0, r0)

    def _hdg_channels(self) -> None:
        """HDG channels (FlexGraph's hierarchical aggregation, Wang et al. 2021) of every hop:
        ``/channels/<c>/<k> = HDG_c(S^k X)``, computed bottom-up by :func:`gnnprep.hdg.structure.aggregate`
        from the hop as written (one column block at a time: the HDG's sparse products act on
        columns independently). Each (hop, column block) is one resumable unit, aggregated in node
        ranges (:func:`gnnprep.hdg.structure.root_blocks`) whose intermediate rows fit one column
        buffer of the plan (the hops' second buffer, free by then), so the budget bounds this phase
        too (anchors at 1/40 of papers100M, d = 64: 9.3 GB peak at a 2 GiB budget before).

        The hops went through the page cache, for this pass to read them back; the channels are
        read by nobody here, so they are written around it as hops are without an HDG (a writer of
        their own, :class:`HopWriter` with the artifact's path, in the hops' pieces), each range's
        rows written before the next range is aggregated."""
        config = self.config
        hdg = self.job.hdg if self.job.hdg_weight is None else self.job.hdg_weight[1]
        self.graph.release()   # (S and the hops' buffers: this phase reads the hops back from the file)
        self.writer.close()
        self.writer = HopWriter(config.dtype, self.out.partial,
                                fa.staged_bytes(self.r, self.plan.width, self.plan.c, config.dtype, self.step))
        ranges = ChannelRanges(hdg, hdg_room(self.n, self.plan.width))
        for k in range(config.hops + 1):
            for j, (c0, c1) in enumerate(self.cols):
                if ("hdg", j, k) in self.done:
                    continue
                x = fa.read_columns_float32(self.f[fa.hop_path(k)], c0, c1)   # (float16: widened in pieces)
                write_channels(self.writer, self.f, hdg, x, config.hdg_reduce, k, (c0, c1), ranges, self.step)
                del x
                self.f.flush()
                self._mark(("hdg", j, k))

    def _write_root(self) -> None:
        config, job = self.config, self.job
        provenance = self.provenance()
        if self.shard is not None:
            fa.write_shard_root(self.f, provenance, self.shard)
            return
        fa.write_root(self.f, provenance, self.store, config.hops, tuple(config.operators), job.hdg_channels,
                      self.plan.to_dict(), config.rows, config.dtype, normalize_features=config.normalize_features,
                      operator_sources=self.operator_sources() if job.user or job.hdg_weight is not None else None)

    def provenance(self) -> dict:
        """The run's provenance (the artifact's ``provenance`` attribute)."""
        config, job = self.config, self.job
        return {
            "command": self.command or "precompute",
            "parameters": {**dataclasses.asdict(config), "device": job.device, "backend": job.backend},
            # the store's source (an OGB data set's name): train scores by its evaluator whatever the paths
            "inputs": [{"path": str(Path(self.store.path).absolute()), "graph_fingerprint": self.store.fingerprint,
                        "source": str(self.store.attrs.get("source", ""))}],
            "plan": self.plan.to_dict(),
            "timings": {**self.timer.timings, "hop_seconds": self.total_hop_seconds()},
            "reorder": None if self.graph.reorder_info is None else self.graph.reorder_info.to_dict(),
            **({"ordered_copy": self.graph.copy_report} if self.graph.copy_report else {}),
            **({"decisions": self.job.decisions} if self.job.decisions else {}),
            **({"operator_sources": self.operator_sources()} if self.job.user or self.job.hdg_weight else {}),
        }

    def operator_sources(self) -> dict:
        return operator_sources(self.job)

    def _report(self) -> PrecomputeReport:
        config = self.config
        return PrecomputeReport(
            output=str(self.out.path), plan=self.plan, hops=config.hops, operators=tuple(config.operators),
            rows=self.r, dtype=config.dtype, hop_seconds=tuple(round(s, 4) for s in self.hop_seconds),
            seconds=round(time.perf_counter() - self.t_start, 3), predicted_peak_bytes=self.plan.predicted_peak,
            measured_peak_bytes=None, baseline_rss_bytes=self.job.baseline, resumed_units=self.resumed_units,
            reorder=self.graph.reorder_info, hop_entries=tuple(self.job.problem.hop_entries),
            decisions=self.job.decisions or None, ordered_copy=self.graph.copy_report,
            hop_disk_read_bytes=None if self.hop_read is None else tuple(self.hop_read),
            hop_breakdown=self.hop_breakdown(), predicted_with=predicted_with(self.job),
            hdg_channels=tuple(self.job.hdg_channels),
            hdg_seconds=round(self.timer.timings["hdg"], 3) if "hdg" in self.timer.timings else None)


def seconds_list(v, n: int) -> bool:
    """Whether ``v`` is a list of ``n`` finite, non-negative seconds (a partial output's record)."""
    return isinstance(v, list) and len(v) == n and all(
        isinstance(s, (int, float)) and not isinstance(s, bool) and 0 <= s < float("inf") for s in v)


def predicted_with(job: Job) -> dict:
    """What the plan's prediction was made with, for the report: the cost profile (``gnnprep
    calibrate``'s, or the built-in defaults: another machine's) and the shares of X, S and the
    ordered copy's S the page cache held (the rest counted at the disk's rate)."""
    profile = job.profile.measured if job.profile is not None else None
    return {"profile": profile, "page_cached": {k: None if v is None else round(v, 3) for k, v in job.page_cached.items()}}


class ChannelRanges:
    """The node ranges the HDG channels of a column block of w columns are aggregated in
    (:func:`gnnprep.hdg.structure.root_blocks` within ``room`` bytes), cut once per width."""

    def __init__(self, hdg: Hdg, room: int):
        self.hdg, self.room, self.cut = hdg, room, {}

    def __call__(self, width: int) -> list[tuple[int, int]]:
        from gnnprep.hdg.structure import root_blocks

        if width not in self.cut:
            self.cut[width] = root_blocks(self.hdg, width, self.room)
        return self.cut[width]


def write_channels(writer: HopWriter, f, hdg: Hdg, x: np.ndarray, reduce: str, k: int, columns: tuple[int, int],
                   ranges: ChannelRanges, step: int) -> None:
    """``/channels/<c>/<k>`` of ``f`` in ``columns`` (of ``f``'s datasets) = HDG_c(x) (x: those columns of
    hop k), aggregated node range by node range (``ranges``), each range's rows queued to ``writer``
    in pieces of ``step`` rows and written (and freed) before the next range is aggregated: one (hop,
    column block) unit of a one-process run or of a rank's HDG file."""
    from gnnprep.hdg.structure import aggregate

    c0, c1 = columns
    for r0, r1 in ranges(c1 - c0):
        rows = aggregate(hdg, x, reduce, (r0, r1))
        for ch, arr in rows.items():
            ds = f[fa.channel_path(ch, k)]
            for p0, p1 in _pieces(r0, r1, step):
                writer.put(ds, p0, p1, c0, c1, arr[p0 - r0:p1 - r0])
        writer.wait()
        del rows, arr


def _pieces(r0: int, r1: int, step: int):
    """Rows r0..r1 cut at the multiples of ``step`` (the hops' write pieces: whole chunks of a chunked
    dataset, so only a range's first and last piece can cover a chunk in part)."""
    p0 = r0
    while p0 < r1:
        p1 = min(r1, (p0 // step + 1) * step)
        yield p0, p1
        p0 = p1


def hdg_room(n: int, width: int) -> int:
    """Bytes ``precompute --hdg`` aggregates a node range in: one column buffer of the plan (n rows
    of ``width`` float32; the hops' second buffer, free once the hops are written), at least 64 MiB."""
    return max(64 << 20, n * width * 4)
