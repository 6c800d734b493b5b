"""Precompute as one rank of a torchrun job: this rank's column blocks into its own shard, then
rank 0 publishes one features artifact over the shards (:mod:`gnnprep.core.distributed` holds the
process group and the collective steps; :mod:`gnnprep.precompute.features` the shard layouts).

Every rank plans under its own budget, the ranks agree on the narrowest column width (rounded
down to whole 16-column tiles of X where that gives no rank another block), and rank r computes a
contiguous range of X's column blocks for every hop and operator with the one-process hop loop
(:class:`gnnprep.precompute.hop_loop.HopRun` with ``shard``); the cuts between ranks fall on tile
starts where they can, so a rank reads only the tiles of its own columns
(``GraphStore.feature_bytes_read`` counts them; the report gives ``x_bytes_read`` per rank). Each
column's sums are those of a one-process run (the blocking never changes a row's summation order),
also through a HAG (``--hag``) or an HDG (``--hdg``), so the published bytes are equal. A rank's
shard is its own resumable output; rank 0 publishes only after every rank has reported success.

Scaling model (checked by ``benchmarks/bench_distributed.py``): with P ranks, w = d/P columns each,
n nodes, m stored entries and r output rows, every rank reads S once, (n+1)·8 + m·4 bytes (resident;
streamed per hop and column block when its budget cannot hold it), and its slice of X, n·w·4 bytes
(whole tiles: at most one tile more at each end of its range when the cuts cannot fall on tiles;
``--normalize-features row`` reads all of X once more on every rank, for the row sums); per hop it writes
r·w·4 bytes and gathers m·w·4 (at least one 64-byte cache line per entry once w·4 < 64). The hops
are bound by that memory traffic, not by cores: on the 2-core bench machines 2 ranks (or 2 threads)
take 1.0-1.1x one worker's hop time, because together they move the same bytes over one memory bus.
N machines divide the traffic, so T(N) = T_fixed + T_hops(1)/N (until the cache-line floor):
T_fixed (torchrun and torch starting, every rank loading S and the node order, the publish) does
not shrink with N, so distributing pays only once one machine's hop time is several times T_fixed
minus a plain run's fixed cost (on the 1M-node bench graph, ~3.5 s of the fixed cost is torchrun's
agent importing torch, the ranks importing torch, and the agent's exit; a rank itself skips torch's
teardown at exit, :func:`gnnprep.core.distributed.exit_now`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnprep.core import device as devices
from gnnprep.core.distributed import RankFailed
from gnnprep.core.errors import GnnprepError
from gnnprep.core.memory import PeakMeter
from gnnprep.core.output import (
    ResumableOutput,
    atomic_output,
    check_output_path,
    refuse_input_as_output,
)
from gnnprep.core.progress import Progress, Warn, no_progress, no_warning
from gnnprep.graph.store import GraphStore
from gnnprep.precompute import features as fa
from gnnprep.precompute.config import PrecomputeConfig, PrecomputeReport
from gnnprep.precompute.hop_loop import (
    ChannelRanges,
    HopRun,
    hdg_room,
    operator_sources,
    seconds_list,
    write_channels,
    write_step,
)
from gnnprep.precompute.hop_writer import HopWriter
from gnnprep.precompute.operators import make_operator
from gnnprep.precompute.plan import agree_width, column_blocks, keep_columns, rank_columns
from gnnprep.precompute.run import prepare_job, run_key


@dataclass(frozen=True)
class ShardedReport(PrecomputeReport):
    """A sharded run's report (rank 0's view): the one-process fields (hop seconds: the slowest
    rank's per hop; resumed units and measured peak: summed and largest over the ranks), plus the
    ranks and, per rank, its shard (file, columns, bytes, seconds, hop seconds, peak, resumed units,
    ``skipped``: the shard was complete from an earlier run of the same inputs)."""

    ranks: int = 1
    shards: tuple = ()
    merged: bool = False

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["plan"] = {**d["plan"], "ranks": self.ranks}   # the plan a rank ran, and how many ranks ran it
        return d


def _rank_device(config: PrecomputeConfig, dist) -> str:
    """The resolved device; a GPU run puts rank LOCAL_RANK on ``cuda:<LOCAL_RANK mod GPUs>``."""
    device = devices.resolve(config.device)
    if device == "cuda":
        import torch

        device = f"cuda:{dist.local_rank % max(1, torch.cuda.device_count())}"
    return device


def _rank_config(config: PrecomputeConfig, device: str, dist) -> PrecomputeConfig:
    """Without ``--memory-budget``, a rank's default budget is its device's default divided among
    the ranks that share the device (the processes of one node share its RAM)."""
    if config.memory_budget is not None:
        return config
    if devices.is_cuda(device):
        import torch

        sharing = math.ceil(dist.local_world / max(1, torch.cuda.device_count()))
    else:
        sharing = dist.local_world
    return dataclasses.replace(config, memory_budget=max(1, devices.default_budget(device) // max(1, sharing)))


def _x_tile(store: GraphStore) -> int:
    """Columns of one HDF5 chunk of /nodes/features (1: not chunked, any column boundary will do)."""
    chunks = store.features.chunks
    return int(chunks[1]) if chunks is not None else 1


_COLUMN = re.compile(r"^(hop \S+(?: of \S+)?: row \d+, column )(\d+)( is .*)$", re.S)


def _global_column(e: GnnprepError, c0: int) -> GnnprepError:
    """An overflow error names the shard's column; the user knows X's (the shard starts at ``c0``)."""
    m = _COLUMN.match(str(e))
    return GnnprepError(f"{m.group(1)}{int(m.group(2)) + c0}{m.group(3)}") if m and c0 else e


def _stall_for_tests(progress: Progress, rank: int) -> Progress:
    """``GNNPREP_TEST_STALL=r:n``: rank r sleeps once n units are finished (tests kill it there)."""
    spec = os.environ.get("GNNPREP_TEST_STALL")
    if not spec:
        return progress
    r, n = (int(v) for v in spec.split(":"))
    if r != rank:
        return progress

    def stalled(stage: str, done: int, total) -> None:
        progress(stage, done, total)
        if stage == "units" and done >= n:
            time.sleep(3600)

    return stalled


def _stall_published_for_tests(rank: int) -> None:
    """``GNNPREP_TEST_STALL_PUBLISHED=r:s:FILE``: rank r creates FILE, then sleeps s seconds, once the
    artifact is published and every rank has passed the publish step, just before the ranks'
    goodbye (tests kill a rank or an agent there)."""
    spec = os.environ.get("GNNPREP_TEST_STALL_PUBLISHED")
    if not spec:
        return
    r, seconds, marker = spec.split(":", 2)
    if int(r) == rank:
        Path(marker).touch()
        time.sleep(float(seconds))


def _hdg_shard_name(output_name: str, rank: int, ranks: int, key: str) -> str:
    """The file of rank r's HDG channels: a shard name (so that publishing sweeps old ones like
    any shard) with a key of its own."""
    return fa.shard_name(output_name, rank, ranks, hashlib.sha256(f"{key}:hdg".encode()).hexdigest())


def _hdg_shard(store: GraphStore, job, hop_shard: Path, path: Path, shard: dict, graph_path, progress: Progress,
               command: str, stack) -> dict:
    """This rank's HDG channels: ``/channels/<channel>/<k>`` [n, C1 − C0] = HDG_channel(S^k X) over
    the rank's columns [C0, C1), from ``/hops/<k>`` of its finished hop shard, one column block of
    the job's width at a time, exactly as a one-process run aggregates its blocks (FlexGraph's
    hierarchical aggregation, Wang et al. 2021, acts on every column alone) and in the same node
    ranges (:func:`gnnprep.hdg.structure.root_blocks`: the intermediate rows of one range fit one
    column buffer, so the budget bounds this phase as it does there). Each (hop, block) is a
    resumable unit of its own file; a file complete from an earlier run is reused. Returns the
    shard entry: file, bytes, key, channels, resumed units, skipped."""
    cfg = job.config
    n = store.num_nodes
    s0, s1 = shard["columns"]
    width, c = shard["width"], shard["c"]
    key = f"{shard['key']}-hdg-{s0}-{s1}-{width}-{c}"
    entry = {"file": path.name, "key": key, "channels": "hdg", "bytes": 0, "resumed_units": 0, "skipped": False}
    done = fa.read_shard_attr(path) if path.exists() else None
    if done is not None and done.get("key") == key:
        return {**entry, "bytes": path.stat().st_size, "skipped": True}
    cols = [(c0, c1) for c0, c1 in column_blocks(store.features.shape[1], width) if s0 <= c0 and c1 <= s1]
    channels = tuple(job.hdg_channels)
    out = ResumableOutput(path, key, [graph_path])
    stack.callback(out.close, True)  # an interrupt keeps the partial file (idempotent)
    needed = len(channels) * (cfg.hops + 1) * n * (s1 - s0) * np.dtype(cfg.dtype).itemsize + (1 << 20)
    out.check_room(needed)
    hdg = job.hdg if job.hdg_weight is None else job.hdg_weight[1]
    resumed, total = len(out.done), len(cols) * (cfg.hops + 1)
    step = write_step(n, width, len(cols), cfg.dtype)   # (the pieces of a one-process run's hop writes)
    with out.writing(needed):
        with fa.writing_output(out.partial, resume=out.resumed, direct=True) as f, fa.open_shard(hop_shard) as hops:
            if not out.resumed:
                fa.create_hdg_shard_layout(f, channels, cfg.hops, n, s1 - s0, cfg.dtype, len(cols), width)
                f.flush()
            done_units, ranges = set(out.done), ChannelRanges(hdg, hdg_room(n, width))
            progress("hdg units", len(done_units), total)
            # written around the page cache, as a one-process run's channels (HopRun._hdg_channels)
            writer = HopWriter(cfg.dtype, out.partial, fa.staged_bytes(n, width, len(cols), cfg.dtype, step))
            try:
                for k in range(cfg.hops + 1):
                    for j, (c0, c1) in enumerate(cols):
                        if ("hdg", j, k) in done_units:
                            continue
                        x = fa.read_columns_float32(hops[fa.hop_path(k)], c0 - s0, c1 - s0)
                        write_channels(writer, f, hdg, x, cfg.hdg_reduce, k, (c0 - s0, c1 - s0), ranges, step)
                        del x
                        out.mark(("hdg", j, k), f)
                        progress("hdg units", len(out.done), total)
            finally:
                writer.close()
            provenance = {"command": command or "precompute", "hdg": str(cfg.hdg), "hdg_reduce": cfg.hdg_reduce,
                          "hop_shard": hop_shard.name}
            fa.write_shard_root(f, provenance, {**shard, "key": key, "channels": list(channels)})
        out.commit()
    return {**entry, "bytes": path.stat().st_size, "resumed_units": resumed}


def _recorded_hop_seconds(path: Path, hops: int) -> list[float]:
    """The hop seconds a finished shard's provenance records (over the invocations that wrote it), or
    zeros where it records none."""
    seconds = ((fa.read_shard_attr(path, "provenance") or {}).get("timings") or {}).get("hop_seconds")
    return [float(s) for s in seconds] if seconds_list(seconds, hops + 1) else [0.0] * (hops + 1)


class _RankRun:
    """One rank's run in the phases of a one-process run (:func:`gnnprep.precompute.run.precompute`):
    :meth:`prepare` (the job, this rank's partial shard) → :meth:`agree` (the column blocks) →
    :meth:`compute` (this rank's shard) → :meth:`publish` (rank 0) → :meth:`report`. Every phase
    ends with an exchange of the ranks' outcomes or proposals, the same ones in the same order on
    every rank, so a failure anywhere is one error everywhere (:meth:`gnnprep.core.distributed.Dist.step`)."""

    def __init__(self, graph_path, output: Path, dist, merge: bool, progress: Progress, command: str, warn: Warn,
                 t_start: float, stack):
        self.graph_path, self.output, self.dist, self.merge = graph_path, output, dist, merge
        self.progress, self.command, self.warn, self.t_start, self.stack = progress, command, warn, t_start, stack
        self.rank, self.ranks = dist.rank, dist.world
        self.warnings: list[str] = []

    def say(self, message: str) -> None:
        self.warnings.append(message)
        self.warn(message if self.dist.is_root else f"rank {self.rank}: {message}")

    # -- prepare ---------------------------------------------------------------------------------------
    def prepare(self, config: PrecomputeConfig) -> None:
        """Every rank's job under its own budget (``--hag auto``: rank 0 decides, building the cached
        HAG once, and the others use its choice), then this rank's shard opened for resuming."""
        dist = self.dist
        if config.hag == "auto":
            first = dist.step(self._job, config) if dist.is_root else dist.step(lambda: None)
            chosen = dist.gather(str(first[1].hag_path) if dist.is_root and first[1].hag_path else None)[0]
            later = dist.step(lambda: None) if dist.is_root else dist.step(self._job, dataclasses.replace(config, hag=chosen))
            self.store, self.job, self.key = first if dist.is_root else later
        else:
            self.store, self.job, self.key = dist.step(self._job, config)
        self.cfg = self.job.config
        self.d = self.store.features.shape[1]
        self.shard_path = self.output.with_name(fa.shard_name(self.output.name, self.rank, self.ranks, self.key))
        self.shard_key = f"{self.key}-{self.rank}-of-{self.ranks}"
        self.out, self.done, self.layout = dist.step(self._open_shard)

    def _job(self, config: PrecomputeConfig):
        """(store, job, run key) of this rank; every operator is checked before anything is written."""
        config.check()
        device = _rank_device(config, self.dist)
        backend = config.backend_for(device)
        cfg = _rank_config(config, device, self.dist)
        refuse_input_as_output(self.output, [self.graph_path])
        check_output_path(self.output)
        store = self.stack.enter_context(GraphStore(self.graph_path))
        job = prepare_job(store, cfg, device, backend, warn=self.say)
        for name in job.config.operators:  # refuse before anything is written
            if name not in job.user:
                make_operator(name, np.zeros(1), store.symmetric)
        return store, job, hashlib.sha256(run_key(store, job).encode()).hexdigest()[:16]   # (names the shard files)

    def _open_shard(self):
        """(the resumable shard, its ``shard`` attribute when complete from an earlier run of the
        same inputs else None, the layout it was written with: width, columns); Nones for a dry run."""
        if self.cfg.dry_run:
            return None, None, None
        done = fa.read_shard_attr(self.shard_path) if self.shard_path.exists() else None
        done = done if done is not None and done.get("key") == self.shard_key else None
        out = ResumableOutput(self.shard_path, self.shard_key, [self.graph_path])
        self.stack.callback(out.close, True)  # an error or interrupt keeps the partial shard (idempotent)
        stored = json.loads(out.state.get("plan", "{}")) if out.resumed else {}
        stored = {**stored, "columns": out.state.get("columns")} if done is None else done
        return out, done, stored

    # -- plan: agree on the column blocks -------------------------------------------------------------
    def agree(self) -> None:
        """The column width every rank uses (:func:`gnnprep.precompute.plan.agree_width`), the plan kept to it, and this
        rank's columns; a partial shard laid out with another width or columns starts afresh."""
        dist, job, cfg, d, rank, ranks, out = self.dist, self.job, self.cfg, self.d, self.rank, self.ranks, self.out
        stored_columns, stored = (self.layout or {}).get("columns"), (self.layout or {}).get("width")
        proposals = dist.gather({"key": self.key, "width": job.plan.width, "stored": stored})
        if len({p["key"] for p in proposals}) > 1:
            raise RankFailed(f"{self.output}: the ranks read different inputs (run keys "
                             f"{', '.join(sorted({p['key'] for p in proposals}))}); every rank needs the same graph "
                             "store and options (a shared filesystem for multi-node runs)")
        tile = _x_tile(self.store)
        self.width = width = agree_width(proposals, d, ranks, tile)
        self.c = c = len(column_blocks(d, width))
        if dist.is_root and cfg.blocks is not None and c > cfg.blocks[2] and not any(p["stored"] for p in proposals):
            self.say(f"--blocks {','.join(map(str, cfg.blocks))}: {c} column blocks instead of {cfg.blocks[2]}, so "
                     f"that each of the {ranks} ranks has columns")
        job.plan = keep_columns(job.plan, job.problem, job.profile, c, width)
        self.columns = columns = rank_columns(d, width, rank, ranks, tile)
        if stored is not None and self.done is None and "columns" not in out.state:
            stored_columns = rank_columns(d, stored, rank, ranks)  # a partial shard of the even split (no tiles)
        moved = stored_columns is not None and (columns is None or list(stored_columns) != list(columns))
        if (stored is not None and stored != width) or moved:  # laid out otherwise: start this shard afresh
            self.say(f"{self.shard_path.name}: the job's column width is {width}, this shard's was {stored}; "
                     "recomputed" if stored != width else f"{self.shard_path.name}: this rank's columns are "
                     f"{columns}, this shard's were {stored_columns}; recomputed")
            self.done = None
            out.restart()

    def dry_report(self) -> ShardedReport:
        """A dry run's report: the plan this rank would run, nothing written."""
        job, cfg = self.job, self.cfg
        if job.copy is not None:
            job.copy.close()
        return ShardedReport(str(self.output), job.plan, cfg.hops, tuple(cfg.operators),
                             job.problem.out_rows, cfg.dtype, (), 0.0, job.plan.predicted_peak, None,
                             job.baseline, 0, dry_run=True, hop_entries=tuple(job.problem.hop_entries),
                             decisions=job.decisions or None, ranks=self.ranks, hag=job.hag_info)

    # -- compute this rank's shard ------------------------------------------------------------------------
    def compute(self) -> None:
        """This rank's shard (its hops, then with ``--hdg`` its HDG file); every rank learns every
        rank's outcome (``infos``) and the shard entries the artifact will list."""
        job, out, cfg = self.job, self.out, self.cfg
        out.state["plan"] = json.dumps({k: job.plan.to_dict()[k] for k in ("a", "b", "c", "width")})
        out.state["columns"] = list(self.columns) if self.columns else None
        self.hdg_path = self.output.with_name(_hdg_shard_name(self.output.name, self.rank, self.ranks, self.key))
        self.hop_job = dataclasses.replace(job, hdg=None, hdg_channels=(), hdg_weight=None) \
            if job.hdg is not None else job
        infos = self.infos = self.dist.step(self._shard, share=True)
        self.shards = [{k: i[k] for k in ("file", "rank", "columns", "bytes", "key")} for i in infos if i["file"]]
        self.hdg_shards = [{**i["hdg"], "rank": i["rank"], "columns": i["columns"]} for i in infos if i["hdg"]]
        self.plan = {**job.plan.to_dict(), "ranks": self.ranks}
        self.hop_seconds = tuple(round(max(i["hop_seconds"][k] for i in infos), 4) for k in range(cfg.hops + 1))
        # the artifact's: over every invocation that wrote the shards (a one-process run's keep an
        # interrupted run's too: HopRun.total_hop_seconds); the report's are this invocation's
        self.total_hop_seconds = [round(max(i["total_hop_seconds"][k] for i in infos), 4) for k in range(cfg.hops + 1)]
        self.reorder_info = next((i["reorder"] for i in infos if i["reorder"] is not None), None)

    def _shard(self) -> dict:
        """This rank's outcome: its shard file, columns, bytes, seconds, peak, resumed units, ``skipped``
        (complete from an earlier run), X bytes read, and its HDG file's entry."""
        store, job, cfg, out, columns = self.store, self.job, self.cfg, self.out, self.columns
        info = {"rank": self.rank, "file": None, "columns": list(columns) if columns else None, "key": self.shard_key,
                "bytes": 0, "seconds": 0.0, "hop_seconds": [0.0] * (cfg.hops + 1),
                "total_hop_seconds": [0.0] * (cfg.hops + 1), "measured_peak_bytes": None,
                "resumed_units": 0, "skipped": False, "reorder": None, "x_bytes_read": 0, "x_disk_read_bytes": None,
                "hdg": None}
        shard = {"key": self.shard_key, "run_key": self.key, "rank": self.rank, "ranks": self.ranks,
                 "columns": list(columns or ()), "width": self.width, "c": self.c}
        if columns is None or self.done is not None:
            out.close(keep=False)
            if columns is not None:
                info.update(file=self.shard_path.name, bytes=self.shard_path.stat().st_size, skipped=True,
                            total_hop_seconds=_recorded_hop_seconds(self.shard_path, cfg.hops))
                if job.hdg is not None:
                    info["hdg"] = self._hdg(shard)
            return info
        meter = PeakMeter().start()
        job.baseline = meter.baseline
        shard_bytes = fa.disk_bytes(job.problem.out_rows, store.num_nodes, columns[1] - columns[0], cfg.hops,
                                    len(cfg.operators), cfg.dtype)
        out.check_room(shard_bytes)
        try:
            with out.writing(shard_bytes):
                run = HopRun(store, out, self.hop_job, _stall_for_tests(self.progress, self.rank), self.command,
                             self.t_start, shard=shard)
                report = run.execute()
        except GnnprepError as e:
            raise _global_column(e, columns[0]) from None
        info.update(file=self.shard_path.name, bytes=self.shard_path.stat().st_size, seconds=report.seconds,
                    hop_seconds=list(report.hop_seconds), total_hop_seconds=run.total_hop_seconds(),
                    measured_peak_bytes=meter.above(),
                    resumed_units=report.resumed_units, reorder=report.reorder,
                    x_bytes_read=store.feature_bytes_read,
                    x_disk_read_bytes=None if report.hop_disk_read_bytes is None else report.hop_disk_read_bytes[0])
        if job.hdg is not None:
            info["hdg"] = self._hdg(shard)
            info["measured_peak_bytes"] = meter.above()
        return info

    def _hdg(self, shard: dict) -> dict:
        return _hdg_shard(self.store, self.job, self.shard_path, self.hdg_path, shard, self.graph_path, self.progress,
                          self.command, self.stack)

    # -- publish ----------------------------------------------------------------------------------------
    def publish(self) -> None:
        """Rank 0 writes ``output`` over the shards once every rank succeeded; the others wait."""
        self.dist.step(self._publish)

    def _publish(self) -> None:
        """The artifact: virtual datasets over the shards, or with ``--merge`` one self-contained
        file; then the shard files it does not read are removed."""
        if not self.dist.is_root:
            return
        cfg, job, store, merge, output = self.cfg, self.job, self.store, self.merge, self.output
        provenance = self._provenance()
        ops = tuple(cfg.operators)
        with atomic_output(output, [self.graph_path]) as tmp:
            with fa.writing_output(tmp) as f:
                if merge:
                    fa.merge_shards(f, store, job.out_rows, cfg.hops, ops, cfg.dtype, self.c, self.width,
                                    output.parent, self.shards)
                else:
                    fa.create_virtual_layout(f, store, job.out_rows, cfg.hops, ops, cfg.dtype, self.shards)
                if job.hdg is not None:
                    fa.publish_hdg_channels(f, store.num_nodes, self.d, cfg.hops, job.hdg_channels, cfg.dtype,
                                            self.hdg_shards, output.parent if merge else None, self.c, self.width)
                fa.write_root(f, provenance, store, cfg.hops, ops, job.hdg_channels, self.plan, cfg.rows, cfg.dtype,
                              normalize_features=cfg.normalize_features,
                              operator_sources=operator_sources(job) if job.user or job.hdg_weight is not None
                              else None,
                              shards=None if merge else self.shards + self.hdg_shards)
        fa.sweep_shards(output, keep=() if merge else {s["file"] for s in self.shards + self.hdg_shards})

    def _provenance(self) -> dict:
        """The published artifact's provenance: a one-process run's, plus the ranks and their timings."""
        cfg, job, store = self.cfg, self.job, self.store
        return {
            "command": self.command or "precompute",
            "parameters": {**dataclasses.asdict(cfg), "device": job.device, "backend": job.backend,
                           "ranks": self.ranks, "merge": self.merge},
            "inputs": [{"path": str(Path(store.path).absolute()), "graph_fingerprint": store.fingerprint}],
            "plan": self.plan,
            "timings": {"hop_seconds": self.total_hop_seconds,
                        "ranks": [{k: i[k] for k in ("rank", "columns", "seconds", "hop_seconds", "total_hop_seconds",
                                                     "measured_peak_bytes", "resumed_units", "skipped")}
                                  for i in self.infos]},
            "reorder": None if self.reorder_info is None else self.reorder_info.to_dict(),
            **({"operator_sources": operator_sources(job)} if job.user or job.hdg_weight is not None else {}),
        }

    # -- report -----------------------------------------------------------------------------------------
    def report(self) -> ShardedReport:
        """Rank 0's view of the job (every rank returns the same shard entries)."""
        job, cfg, infos = self.job, self.cfg, self.infos
        peaks = [i["measured_peak_bytes"] for i in infos if i["measured_peak_bytes"] is not None]
        return ShardedReport(
            output=str(self.output), plan=job.plan, hops=cfg.hops, operators=tuple(cfg.operators),
            rows=job.problem.out_rows, dtype=cfg.dtype, hop_seconds=self.hop_seconds,
            seconds=round(time.perf_counter() - self.t_start, 3), predicted_peak_bytes=job.plan.predicted_peak,
            measured_peak_bytes=max(peaks) if peaks else None, baseline_rss_bytes=job.baseline,
            resumed_units=sum(i["resumed_units"] for i in infos), reorder=self.reorder_info,
            warnings=tuple(self.warnings), hop_entries=tuple(job.problem.hop_entries), ranks=self.ranks,
            hag=job.hag_info, shards=tuple({k: v for k, v in i.items() if k != "reorder"} for i in infos),
            merged=self.merge)


def precompute_sharded(graph_path, output, config: PrecomputeConfig, dist, merge: bool = False,
                       progress: Progress = no_progress, command: str = "", warn: Warn = no_warning
                       ) -> PrecomputeReport:
    """One rank of a torchrun job, shaped like a one-process run (:class:`_RankRun`): prepare →
    agree on the column blocks → this rank's shard → (rank 0, once every rank succeeded) publish
    ``output`` → report. Each phase ends with an exchange of the ranks' outcomes
    (:meth:`gnnprep.core.distributed.Dist.step`), so a failure anywhere is the same one-line error
    on every rank and nothing is published.

    ``--hag``: every rank runs its column blocks through the same HAG (an aggregation node's sums
    are per column, so a column's result does not depend on which others are computed with it);
    ``--hag auto`` is decided (and the HAG built, once, into the cache next to the store) by rank 0,
    the others use its choice. ``--hdg``: once its hop shard is complete, a rank aggregates its
    columns of every hop through the HDG into a second shard file (:func:`_hdg_shard`), published as
    ``/channels/<channel>/<k>`` like the hops."""
    from contextlib import ExitStack

    t_start = time.perf_counter()
    dist.start()
    with ExitStack() as stack:
        run = _RankRun(graph_path, Path(output).absolute(), dist, merge, progress, command, warn, t_start, stack)
        run.prepare(config)
        run.agree()
        if run.cfg.dry_run:
            return run.dry_report()
        run.compute()
        run.publish()
    _stall_published_for_tests(dist.rank)
    return run.report()
