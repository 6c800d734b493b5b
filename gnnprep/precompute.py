"""Precompute hop features S^k X, k = 0..K, block-wise and within a memory budget.

Maekawa et al. ("GNN Transformation Framework for Improving Efficiency and Scalability") show that
GCN, JKNet and GPRGNN can be rewritten so that every graph multiplication touches only X; the
products S^k X are then computed once, here. For each operator and each column block J
(:mod:`gnnprep.plan`), X[:, J] is loaded once and carried through the hops:

    H_0 = X[:, J];   H_k = S H_{k-1}   (rows r0..r1 of each edge block at a time)

Every edge lies in exactly one edge block (contiguous row ranges of the CSR) and every column in
exactly one column block, so nothing is dropped. Output row slices are written straight into the
artifact (no per-block n-row accumulators) by a writer thread while the next block computes
(:mod:`gnnprep.hopwriter`). Units (operator, column block, hop) are recorded as they finish; a rerun
of the same command continues after the last finished unit (:class:`gnnprep.atomic.ResumableOutput`).

This module is the orchestration only: plan (:mod:`gnnprep.plan`) → inputs (graph in the
computation's node order, operators, HAG/HDG) → the hop loop (:mod:`gnnprep.backends`) → the
artifact (:mod:`gnnprep.features`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from gnnprep import device as devices
from gnnprep import features as fa
from gnnprep.atomic import (ResumableOutput, check_free_space, disk_full_error, is_disk_full,
                            refuse_input_as_output)
from gnnprep.backends import HopGraph, make_backend
from gnnprep.directio import ALIGN
from gnnprep.errors import GnnprepError
from gnnprep.hopwriter import Gather, HopWriter
from gnnprep.memory import PeakMeter, rss
from gnnprep.meta import Timer, file_fingerprint
from gnnprep.operators import make_operator
from gnnprep.plan import (Plan, Problem, choose_hag, choose_plan, column_blocks, keep_columns, load_profile,
                          plan_with_hag, with_reorder)
from gnnprep.precomputeconfig import PrecomputeConfig, PrecomputeReport
from gnnprep.progress import Progress, Warn, no_progress, no_warning
from gnnprep.store import GraphStore

WRITE_BYTES = 32 << 20    # rows per queued write: at most this many bytes of a column block in flight


@dataclass
class _Job:
    """What the run computes, resolved before anything is written."""

    config: PrecomputeConfig
    device: str
    backend: str                       # numba | torch
    plan: Plan
    problem: Problem
    out_rows: np.ndarray | None        # None: every node
    hag: object = None                 # gnnprep.hag.Hag
    hag_path: Path | None = None
    hag_info: dict | None = None
    hdg: object = None                 # gnnprep.hdg.Hdg
    hdg_channels: tuple[str, ...] = ()
    baseline: int = 0
    profile: object = None             # gnnprep.plan.Profile the plan was made with


# -- the plan and the inputs ------------------------------------------------------------------------
def _hag_unsupported(backend: str, store: GraphStore) -> str | None:
    """Why a HAG cannot be used for this run (None: it can). The one place that decides it: the
    HAG executor is the CPU kernel, and a HAG shares sums of unweighted in-lists."""
    if backend != "numba":
        return "the HAG executor runs on the CPU kernel"
    if "adj/weights" in store.f:
        return "a HAG shares sums over unweighted in-lists, and this graph store is weighted"
    return None


def _problem(store: GraphStore, config: PrecomputeConfig, device: str, backend: str, rows: int) -> Problem:
    n, d = store.features.shape
    return Problem(num_nodes=n, num_entries=store.num_edges, num_features=d, hops=config.hops,
                   operators=len(config.operators), out_rows=rows,
                   index_bytes=store.f["adj/indices"].dtype.itemsize, weighted="adj/weights" in store.f,
                   out_itemsize=np.dtype(config.dtype).itemsize, in_itemsize=store.features.dtype.itemsize,
                   device=device if backend == "torch" else "cpu")


def _auto_hag(store: GraphStore, plan: Plan, problem: Problem, profile, budget: int,
              dry_run: bool) -> tuple[Path | None, dict]:
    """``--hag auto``: the cached HAG's path when it pays (building it first, with
    :func:`gnnprep.hag.build`, when even a perfect HAG would repay the search), else None; and what
    was decided, for the report."""
    from gnnprep import hag as hags

    cache = hags.cache_path(store.path)
    choice = choose_hag(plan, problem, profile, hags.read_hag_summary(cache, store.fingerprint), budget)
    if choice.build and not dry_run:
        try:
            hags.build(store.indptr(), store.indices(), cache, graph_fingerprint=store.fingerprint,
                       input_path=str(store.path), method="rounds", capacity=store.num_nodes // 4,
                       memory_budget=budget, command="gnnprep precompute --hag auto")
        except (OSError, GnnprepError):
            pass  # a read-only folder: nothing cached, decide without it
        choice = choose_hag(plan, problem, profile, hags.read_hag_summary(cache, store.fingerprint), budget)
    return (cache if choice.use else None), {"mode": "auto", "used": choice.use,
                                             "path": str(cache) if choice.use else None, "reason": choice.reason}


def _choose_hag(job: _Job, store: GraphStore, profile, budget: int) -> None:
    """Resolve ``--hag`` (a file, or auto) into ``job.hag`` and a plan that holds its rows."""
    config = job.config
    if config.hag is None:
        return
    unsupported = _hag_unsupported(job.backend, store)
    if config.hag == "auto":
        if unsupported is not None:
            job.hag_info = {"mode": "auto", "used": False, "path": None, "reason": unsupported}
            return
        job.hag_path, job.hag_info = _auto_hag(store, job.plan, job.problem, profile, budget, config.dry_run)
    else:
        if unsupported is not None:
            raise GnnprepError(f"--hag {config.hag}: {unsupported}" +
                               ("; use --device cpu" if job.backend != "numba" else ""))
        job.hag_path = Path(config.hag)
        job.hag_info = {"mode": "file", "used": True, "path": str(config.hag), "reason": "--hag given"}
    if job.hag_path is not None:
        from gnnprep.hag import load_for

        job.hag = load_for(job.hag_path, store)
        job.plan = plan_with_hag(job.problem, profile, budget, job.baseline, job.hag.num_agg, job.hag.transfers(),
                                 config.blocks)


def _prepare(store: GraphStore, config: PrecomputeConfig, device: str, backend: str) -> _Job:
    """Plan the run and load its inputs: rows, blocking, node order, HAG, HDG."""
    if store.features is None:
        raise GnnprepError(f"{store.path}: the graph store has no /nodes/features to propagate")
    out_rows = fa.select_rows(store, config.rows)
    n = store.num_nodes
    budget = config.memory_budget or devices.default_budget(device)
    problem = _problem(store, config, device, backend, n if out_rows is None else len(out_rows))
    index_dtype = store.f["adj/indices"].dtype
    if backend == "numba":  # only the variants this run uses (each costs seconds on a fresh install)
        from gnnprep import kernels

        kernels.warm_up((index_dtype,), (problem.weighted,), hag=False, gather=False)
    profile = load_profile(device)
    baseline = rss()
    job = _Job(config, device, backend, choose_plan(problem, budget, profile, baseline, config.blocks), problem,
               out_rows, baseline=baseline, profile=profile)
    _choose_hag(job, store, profile, budget)
    if job.hag is None and backend == "numba":
        from gnnprep import reorder

        job.plan = with_reorder(job.plan, problem, profile, reorder.sampled_locality(store), config.reorder, budget)
        if job.plan.reorder:
            kind = "bfs" if config.reorder == "bfs" else "community"
            reorder.warm_up((index_dtype,), (kind,), find=not reorder.cache_path(store.path, kind).exists())
            kernels.warm_up((), (), hag=False, gather=True)
    elif job.hag is not None:
        kernels.warm_up((), (), hag=True, gather=False)
    if config.hdg is not None:
        from gnnprep.hdg import load_for

        job.hdg, channels = load_for(config.hdg, store, tuple(config.operators), config.rows, config.hdg_reduce)
        job.hdg_channels = tuple(channels)
    return job


def _run_key(store: GraphStore, job: _Job) -> str:
    """What the output depends on (besides the plan, which a resumed run keeps): a rerun with the
    same key continues the partial output."""
    c = job.config

    def identity(path):
        return None if path is None else [str(Path(path).absolute()), file_fingerprint(path)]

    # what was ingested: content fingerprints where ingest recorded them, else the file's identity
    # (a re-ingested store then never resumes an output computed from the old one)
    contents = [str(store.attrs.get(k, "")) for k in ("features_fingerprint", "labels_fingerprint",
                                                       "splits_fingerprint")]
    if not all(contents):
        contents = identity(store.path)
    parts = [store.fingerprint, contents, c.hops, list(c.operators), c.rows, c.dtype, identity(job.hag_path),
             [identity(c.hdg), c.hdg_reduce] if c.hdg else None]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _resume_plan(job: _Job, out: ResumableOutput, warn: Warn) -> None:
    """A resumed run keeps the interrupted run's column blocks (the partial file's layout is made of
    them); its edge blocks follow the new budget. Say so when the new plan would block differently."""
    stored = json.loads(out.state.get("plan", "{}")) if out.resumed else {}
    if stored and (stored["c"], stored["width"]) != (job.plan.c, job.plan.width):
        new = job.plan
        job.plan = keep_columns(new, job.problem, job.profile, stored["c"], stored["width"])
        warn(f"resuming {out.path.name} with the interrupted run's column blocks (c={stored['c']}, width "
             f"{stored['width']}); this budget alone would choose c={new.c} (width {new.width}); predicted peak "
             f"now {job.plan.predicted_peak / 2**20:.0f} MiB for a {new.budget / 2**20:.0f} MiB budget. "
             f"Delete {out.partial.name} to start over with the new plan")
    out.state["plan"] = json.dumps({k: job.plan.to_dict()[k] for k in ("a", "b", "c", "width")})


def _artifact_bytes(store: GraphStore, job: _Job) -> int:
    c = job.config
    return fa.disk_bytes(job.problem.out_rows, store.num_nodes, store.features.shape[1], c.hops, len(c.operators),
                         c.dtype, len(job.hdg_channels))


def precompute(graph_path: str | Path, output: str | Path, config: PrecomputeConfig = PrecomputeConfig(),
               progress: Progress = no_progress, command: str = "", warn: Warn = no_warning) -> PrecomputeReport:
    """Write the features artifact ``output`` (:mod:`gnnprep.features`) for the graph store
    ``graph_path``: hops 0..K of every operator (and HDG channel) for the chosen rows."""
    t_start = time.perf_counter()
    config.check()
    device = devices.resolve(config.device)
    backend = config.backend_for(device)
    inputs = [graph_path, config.hdg] + ([config.hag] if config.hag not in (None, "auto") else [])
    if config.hag == "auto":
        from gnnprep.hag import cache_path

        inputs.append(cache_path(graph_path))  # it may be written (cached) by this run, then read
    refuse_input_as_output(output, inputs)
    with GraphStore(graph_path) as store:
        job = _prepare(store, config, device, backend)
        if config.dry_run:
            return PrecomputeReport(str(output), job.plan.to_dict(), config.hops, tuple(config.operators),
                                    job.problem.out_rows, config.dtype, (), 0.0, job.plan.predicted_peak, None,
                                    job.baseline, 0, dry_run=True, hag=job.hag_info)
        for name in config.operators:  # refuse before anything is written
            make_operator(name, np.zeros(1), store.symmetric)
        meter = PeakMeter().start()
        job.baseline = meter.baseline
        out = ResumableOutput(output, _run_key(store, job), inputs)
        if not out.resumed:
            try:
                check_free_space(output, _artifact_bytes(store, job))
            except GnnprepError:
                out.close(keep=False)
                raise
        warnings: list[str] = []

        def say(message: str) -> None:
            warnings.append(message)
            warn(message)

        try:
            _resume_plan(job, out, say)
            report = _Run(store, out, job, progress, command, t_start).execute()
        except GnnprepError:
            # the input must change before a rerun can succeed, and a changed input changes the run
            # key: nothing worth resuming, leave no trace
            out.close(keep=False)
            raise
        except OSError as e:
            if not is_disk_full(e):
                out.close(keep=True)
                raise
            out.close(keep=False)  # a partial file would keep the disk full
            raise disk_full_error(out.path, _artifact_bytes(store, job)) from None
        except BaseException:
            out.close(keep=True)  # crash or interrupt: keep the partial output for a rerun to resume
            raise
        return dataclasses.replace(report, measured_peak_bytes=meter.above(), hag=job.hag_info,
                                   warnings=tuple(warnings))


# -- the run ------------------------------------------------------------------------------------------
class _Run:
    """One run over an open resumable output: layout → for every operator and column block, hop 0
    (X itself) and hops 1..K → HDG channels → root attributes → commit."""

    def __init__(self, store: GraphStore, out: ResumableOutput, job: _Job, progress: Progress, command: str,
                 t_start: float):
        self.store, self.out, self.job, self.progress = store, out, job, progress
        self.command, self.t_start = command, t_start
        self.config, self.plan = job.config, job.plan
        self.n, self.d = store.features.shape
        self.r = self.n if job.out_rows is None else len(job.out_rows)
        self.timer = Timer()
        self.hop_seconds = [0.0] * (self.config.hops + 1)
        self.done = set(out.done)
        self.resumed_units = len(self.done)
        self.cols = column_blocks(self.d, self.plan.width)
        self.step = max(1, WRITE_BYTES // max(1, 4 * self.plan.width))
        k, ops = self.config.hops, len(self.config.operators)
        self.units_total = len(self.cols) * (1 + k * ops) + (len(self.cols) * (k + 1) if job.hdg is not None else 0)
        self._parts = None
        self.graph = HopGraph(store, self.plan, "bfs" if self.config.reorder == "bfs" else "community",
                              force=self.config.reorder in ("community", "bfs"),
                              spare=(self.n, min(self.d, self.plan.width)) if self.plan.reorder else None)

    def execute(self) -> PrecomputeReport:
        config = self.config
        # 4 KiB-aligned datasets: hop rows are written to the file with O_DIRECT (gnnprep.directio)
        self.f = h5py.File(self.out.partial, "r+" if self.out.resumed else "w", alignment_threshold=ALIGN,
                           alignment_interval=ALIGN)
        try:
            if not self.out.resumed:
                fa.create_layout(self.f, self.store, self.job.out_rows, config.hops, tuple(config.operators),
                                 config.dtype, self.plan.c, self.plan.width, self.job.hdg_channels)
                self.f.flush()
            with self.timer("normalise"):
                deg = self.graph.degree(self.plan.a)
                self.ops = {name: make_operator(name, deg, self.store.symmetric) for name in config.operators}
            # page-cache-free writes, unless the HDG pass reads the hops back right after
            self.writer = HopWriter(config.dtype, self.out.partial if self.job.hdg is None else None)
            self.progress("units", len(self.done), self.units_total)
            try:
                for name in config.operators:  # operator-outer: a resident S is built once per operator
                    self._operator(name)
                if self.job.hdg is not None:
                    with self.timer("hdg"):
                        self.writer.wait()
                        self._hdg_channels()
            finally:
                self.writer.close()
            self._write_root()
        finally:
            self.f.close()
        self.out.commit()
        return self._report()

    # -- steps ---------------------------------------------------------------------------------------
    def _operator(self, name: str) -> None:
        """Hops 1..K of operator ``name`` for every column block (and hop 0 where not yet written)."""
        be = None  # one backend per operator for the whole run: a resident S is built (and moved) once
        for j, (c0, c1) in enumerate(self.cols):
            x_block, hop0 = self._hop0(j, c0, c1)
            todo = [k for k in range(1, self.config.hops + 1) if (name, j, k) not in self.done]
            if not todo:
                if hop0 is not None:
                    self._finish(hop0)
                continue
            if be is None:
                self._row_parts()  # the node order is known from here on
                be = make_backend(self.job.backend, self.graph, self.ops[name], self.job.device, self.job.hag)
            self._column_block(be, name, j, c0, c1, todo, x_block, hop0)

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
            self.writer.put(self.f["hops/0"], p0, p1, c0, c1, part)
        self.done.add(("x", j, 0))
        return x_block, (("x", j, 0), self.writer.issued)

    def _column_block(self, be, name: str, j: int, c0: int, c1: int, todo: list[int], x_block, hop0) -> None:
        """Carry column block j through hops ``todo[0]``..K of operator ``name``: two buffers, hop k's
        writes overlapping hop k+1's kernels."""
        if todo[0] > 1 and self.job.out_rows is None:
            # resume: the last finished hop of this block is in the artifact
            src = np.empty((self.n, c1 - c0), dtype=np.float32)
            src[:] = self.f[f"channels/{name}/{todo[0] - 1}"][:, c0:c1]
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
            t0 = time.perf_counter()
            write = (name, j, k) not in self.done
            seq = self._hop(be, self.f[f"channels/{name}/{k}"], write, cur, nxt, c0, c1)
            self.hop_seconds[k] += time.perf_counter() - t0
            if pending is not None:
                # hop k-1's rows are on disk before its unit is marked and before its buffer (cur)
                # is overwritten by hop k+1; hop k's writes overlap hop k+1
                self._finish(pending)
            pending = ((name, j, k), seq) if write else None
            if not write:
                self.writer.wait(seq)
            cur, nxt = nxt, cur
        if pending is not None:
            self._finish(pending)
        self.writer.wait()

    def _hop(self, be, ds, write: bool, cur, nxt, c0: int, c1: int) -> int:
        """nxt = S cur, edge block by edge block, each block's finished rows queued for writing (or,
        with a node order, all rows gathered back to stored order after the hop); the last write's seq."""
        row_parts, write_parts = self._row_parts()
        seq = self.writer.issued
        be.begin_hop(cur)
        for r0, r1, writes in row_parts:
            be.hop_block(r0, r1, cur, nxt)
            if write and write_parts is None:
                be.sync()
                for rows, p0, p1 in writes:
                    seq = self.writer.put(ds, p0, p1, c0, c1, be.to_host(nxt, rows), owned=be.name == "torch")
        be.sync()
        if write and write_parts is not None:
            for p0, p1, idx in write_parts:
                seq = self.writer.put(ds, p0, p1, c0, c1, Gather(nxt, idx))
        if write:
            seq = self.writer.put("sync", self.f)
        return seq

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
        if self.graph.inv is not None:
            ids = np.arange(self.n) if out_rows is None else out_rows
            write_parts = [(p0, min(r, p0 + step), self.graph.inv[ids[p0:p0 + step]]) for p0 in range(0, r, step)]
        self._parts = row_parts, write_parts
        return self._parts

    def _load_x(self, c0: int, c1: int) -> np.ndarray:
        t0 = time.perf_counter()
        xb = self.store.feature_columns(c0, c1)
        self.hop_seconds[0] += time.perf_counter() - t0
        return xb

    def _mark(self, unit) -> None:
        self.out.mark(unit, self.f)
        self.progress("units", len(self.out.done), self.units_total)

    def _finish(self, unit_seq) -> None:
        """Wait for a unit's writes, then record it as finished."""
        t0 = time.perf_counter()
        self.writer.wait(unit_seq[1])
        self._mark(unit_seq[0])
        unit = unit_seq[0]
        self.hop_seconds[0 if unit[0] == "x" else unit[2]] += time.perf_counter() - t0

    def _hdg_channels(self) -> None:
        """HDG channels (FlexGraph's hierarchical aggregation, Wang et al. 2021) of every hop:
        ``/channels/<c>/<k> = HDG_c(S^k X)``, computed bottom-up by :func:`gnnprep.hdg.aggregate`
        from the hop as written (one column block at a time: the HDG's sparse products act on
        columns independently). Each (hop, column block) is one resumable unit."""
        from gnnprep.hdg import aggregate

        config = self.config
        for k in range(config.hops + 1):
            for j, (c0, c1) in enumerate(self.cols):
                if ("hdg", j, k) in self.done:
                    continue
                x = self.f[f"hops/{k}"][:, c0:c1].astype(np.float32, copy=False)
                for ch, arr in aggregate(self.job.hdg, x, config.hdg_reduce).items():
                    self.f[f"channels/{ch}/{k}"][:, c0:c1] = arr.astype(config.dtype, copy=False)
                self.f.flush()
                self._mark(("hdg", j, k))

    def _write_root(self) -> None:
        config, job = self.config, self.job
        provenance = {
            "command": self.command or "precompute",
            "parameters": {**dataclasses.asdict(config), "device": job.device, "backend": job.backend},
            "inputs": [{"path": str(Path(self.store.path).absolute()), "graph_fingerprint": self.store.fingerprint}],
            "plan": self.plan.to_dict(),
            "timings": {**self.timer.timings, "hop_seconds": [round(s, 4) for s in self.hop_seconds]},
            "reorder": self.graph.reorder_info,
        }
        fa.write_root(self.f, provenance, self.store, config.hops, tuple(config.operators), job.hdg_channels,
                      self.plan.to_dict(), config.rows, config.dtype)

    def _report(self) -> PrecomputeReport:
        config = self.config
        return PrecomputeReport(
            output=str(self.out.path), plan=self.plan.to_dict(), hops=config.hops, operators=tuple(config.operators),
            rows=self.r, dtype=config.dtype, hop_seconds=tuple(round(s, 4) for s in self.hop_seconds),
            seconds=round(time.perf_counter() - self.t_start, 3), predicted_peak_bytes=self.plan.predicted_peak,
            measured_peak_bytes=None, baseline_rss_bytes=self.job.baseline, resumed_units=self.resumed_units,
            reorder=self.graph.reorder_info)
