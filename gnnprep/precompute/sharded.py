"""Precompute as one rank of a torchrun job: this rank's column blocks into its own shard, then
rank 0 publishes one features artifact over the shards (:mod:`gnnprep.core.distributed` holds the
process group and the collective steps; :mod:`gnnprep.precompute.features` the shard layouts).

Every rank plans under its own budget, the ranks agree on the narrowest column width, and rank r
computes a contiguous range of X's column blocks for every hop and operator with the one-process
hop loop (:class:`gnnprep.precompute.hop_loop.HopRun` with ``shard``). Each column's sums are those of a
one-process run (the blocking never changes a row's summation order), so the published bytes are
equal. A rank's shard is its own resumable output; rank 0 publishes only after every rank has
reported success.

Scaling model (checked by ``benchmarks/bench_distributed.py``): with P ranks, w = d/P columns each,
n nodes, m stored entries and r output rows, every rank reads S once, (n+1)·8 + m·4 bytes (resident;
streamed per hop and column block when its budget cannot hold it), and its slice of X, n·w·4 bytes
(the file I/O under it is all of X: the store's chunks span every column); per hop it writes
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
from gnnprep.precompute.hop_loop import HopRun, operator_sources
from gnnprep.precompute.operators import make_operator
from gnnprep.precompute.plan import column_blocks, keep_columns
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


def _rank_columns(d: int, width: int, rank: int, ranks: int) -> tuple[int, int] | None:
    """Rank ``rank``'s contiguous share [C0, C1) of the column blocks of ``width`` (None: none)."""
    blocks = column_blocks(d, width)
    lo, hi = rank * len(blocks) // ranks, (rank + 1) * len(blocks) // ranks
    return (blocks[lo][0], blocks[hi - 1][1]) if hi > lo else None


def _agree_width(proposals: list[dict], d: int, ranks: int) -> int:
    """The column width every rank uses: a resumed job's (its shards were laid out with it), else
    the narrowest any rank's own plan chose (it fits every rank's budget), at most ⌈d/P⌉ so that
    every rank gets columns."""
    stored = [p["stored"] for p in proposals if p["stored"]]
    if stored:
        return int(stored[0])
    return max(1, min([p["width"] for p in proposals] + [math.ceil(max(d, 1) / ranks)]))


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


def precompute_sharded(graph_path, output, config: PrecomputeConfig, dist, merge: bool = False,
                       progress: Progress = no_progress, command: str = "", warn: Warn = no_warning
                       ) -> PrecomputeReport:
    """One rank of a torchrun job: plan → agree on the column blocks → this rank's shard →
    (rank 0, once every rank succeeded) publish ``output``. Each phase ends with an exchange of the
    ranks' outcomes (:meth:`gnnprep.core.distributed.Dist.step`), so a failure anywhere is the same
    one-line error on every rank and nothing is published. ``--hag`` and ``--hdg`` are refused
    (not sharded yet)."""
    from contextlib import ExitStack

    import h5py

    t_start = time.perf_counter()
    dist.start()
    output = Path(output).absolute()
    rank, ranks = dist.rank, dist.world
    warnings: list[str] = []

    def say(message: str) -> None:
        warnings.append(message)
        warn(message if dist.is_root else f"rank {rank}: {message}")

    with ExitStack() as stack:
        def prepare():
            config.check()
            if config.hag is not None or config.hdg is not None:
                raise GnnprepError(f"--{'hag' if config.hag is not None else 'hdg'}: not supported under torchrun "
                                   "yet; run this precompute as one process")
            device = _rank_device(config, dist)
            backend = config.backend_for(device)
            cfg = _rank_config(config, device, dist)
            refuse_input_as_output(output, [graph_path])
            check_output_path(output)
            store = stack.enter_context(GraphStore(graph_path))
            job = prepare_job(store, cfg, device, backend)
            for name in job.config.operators:  # refuse before anything is written
                if name not in job.user:
                    make_operator(name, np.zeros(1), store.symmetric)
            return store, job, run_key(store, job)

        store, job, key = dist.step(prepare)
        cfg = job.config
        d = store.features.shape[1]
        shard_path = output.with_name(fa.shard_name(output.name, rank, ranks, key))
        shard_key = f"{key}-{rank}-of-{ranks}"

        def open_shard():
            if cfg.dry_run:
                return None, None, None
            done = fa.read_shard_attr(shard_path) if shard_path.exists() else None
            done = done if done is not None and done.get("key") == shard_key else None
            out = ResumableOutput(shard_path, shard_key, [graph_path])
            stack.callback(out.close, True)  # an error or interrupt keeps the partial shard (idempotent)
            stored = json.loads(out.state.get("plan", "{}")).get("width") if out.resumed else None
            return out, done, stored if done is None else done.get("width")

        out, done, stored = dist.step(open_shard)
        proposals = dist.gather({"key": key, "width": job.plan.width, "stored": stored})
        if len({p["key"] for p in proposals}) > 1:
            raise RankFailed(f"{output}: the ranks read different inputs (run keys "
                             f"{', '.join(sorted({p['key'] for p in proposals}))}); every rank needs the same graph "
                             "store and options (a shared filesystem for multi-node runs)")
        width = _agree_width(proposals, d, ranks)
        c = len(column_blocks(d, width))
        if dist.is_root and cfg.blocks is not None and c > cfg.blocks[2] and not any(p["stored"] for p in proposals):
            say(f"--blocks {','.join(map(str, cfg.blocks))}: {c} column blocks instead of {cfg.blocks[2]}, so "
                f"that each of the {ranks} ranks has columns")
        job.plan = keep_columns(job.plan, job.problem, job.profile, c, width)
        columns = _rank_columns(d, width, rank, ranks)
        if stored is not None and stored != width:  # laid out with another width: start this shard afresh
            say(f"{shard_path.name}: the job's column width is {width}, this shard's was {stored}; recomputed")
            done = None
            out.discard_partial()
            out.done, out.resumed, out.state = [], False, {"key": shard_key, "done": []}
        if cfg.dry_run:
            if job.copy is not None:
                job.copy.close()
            return ShardedReport(str(output), job.plan, cfg.hops, tuple(cfg.operators),
                                 job.problem.out_rows, cfg.dtype, (), 0.0, job.plan.predicted_peak, None,
                                 job.baseline, 0, dry_run=True, hop_entries=tuple(job.problem.hop_entries),
                                 decisions=job.decisions or None, ranks=ranks)
        out.state["plan"] = json.dumps({k: job.plan.to_dict()[k] for k in ("a", "b", "c", "width")})

        def compute() -> dict:
            info = {"rank": rank, "file": None, "columns": list(columns) if columns else None, "key": shard_key,
                    "bytes": 0, "seconds": 0.0, "hop_seconds": [0.0] * (cfg.hops + 1), "measured_peak_bytes": None,
                    "resumed_units": 0, "skipped": False, "reorder": None}
            if columns is None or done is not None:
                out.close(keep=False)
                if columns is not None:
                    info.update(file=shard_path.name, bytes=shard_path.stat().st_size, skipped=True)
                return info
            meter = PeakMeter().start()
            job.baseline = meter.baseline
            shard_bytes = fa.disk_bytes(job.problem.out_rows, store.num_nodes, columns[1] - columns[0], cfg.hops,
                                        len(cfg.operators), cfg.dtype)
            out.check_room(shard_bytes)
            shard = {"key": shard_key, "run_key": key, "rank": rank, "ranks": ranks, "columns": list(columns),
                     "width": width, "c": c}
            try:
                with out.writing(shard_bytes):
                    report = HopRun(store, out, job, _stall_for_tests(progress, rank), command, t_start,
                                    shard=shard).execute()
            except GnnprepError as e:
                raise _global_column(e, columns[0]) from None
            info.update(file=shard_path.name, bytes=shard_path.stat().st_size, seconds=report.seconds,
                        hop_seconds=list(report.hop_seconds), measured_peak_bytes=meter.above(),
                        resumed_units=report.resumed_units, reorder=report.reorder)
            return info

        infos = dist.step(compute, share=True)
        shards = [{k: i[k] for k in ("file", "rank", "columns", "bytes", "key")} for i in infos if i["file"]]
        plan = {**job.plan.to_dict(), "ranks": ranks}
        hop_seconds = tuple(round(max(i["hop_seconds"][k] for i in infos), 4) for k in range(cfg.hops + 1))
        reorder_info = next((i["reorder"] for i in infos if i["reorder"] is not None), None)

        def publish() -> None:
            if not dist.is_root:
                return
            provenance = {
                "command": command or "precompute",
                "parameters": {**dataclasses.asdict(cfg), "device": job.device, "backend": job.backend,
                               "ranks": ranks, "merge": merge},
                "inputs": [{"path": str(Path(store.path).absolute()), "graph_fingerprint": store.fingerprint}],
                "plan": plan,
                "timings": {"hop_seconds": list(hop_seconds),
                            "ranks": [{k: i[k] for k in ("rank", "columns", "seconds", "hop_seconds",
                                                         "measured_peak_bytes", "resumed_units", "skipped")}
                                      for i in infos]},
                "reorder": None if reorder_info is None else reorder_info.to_dict(),
                **({"operator_sources": operator_sources(job)} if job.user else {}),
            }
            ops = tuple(cfg.operators)
            with atomic_output(output, [graph_path]) as tmp:
                with h5py.File(tmp, "w") as f:
                    if merge:
                        fa.merge_shards(f, store, job.out_rows, cfg.hops, ops, cfg.dtype, c, width, output.parent,
                                        shards)
                    else:
                        fa.create_virtual_layout(f, store, job.out_rows, cfg.hops, ops, cfg.dtype, shards)
                    fa.write_root(f, provenance, store, cfg.hops, ops, (), plan, cfg.rows, cfg.dtype)
                    f.attrs["normalize_features"] = cfg.normalize_features
                    if job.user:
                        f.attrs["operator_sources"] = json.dumps(operator_sources(job))
                    if not merge:
                        f.attrs["shards"] = json.dumps(shards)
            fa.sweep_shards(output, keep=() if merge else {s["file"] for s in shards})

        dist.step(publish)
    peaks = [i["measured_peak_bytes"] for i in infos if i["measured_peak_bytes"] is not None]
    return ShardedReport(
        output=str(output), plan=job.plan, hops=cfg.hops, operators=tuple(cfg.operators), rows=job.problem.out_rows,
        dtype=cfg.dtype, hop_seconds=hop_seconds, seconds=round(time.perf_counter() - t_start, 3),
        predicted_peak_bytes=job.plan.predicted_peak, measured_peak_bytes=max(peaks) if peaks else None,
        baseline_rss_bytes=job.baseline, resumed_units=sum(i["resumed_units"] for i in infos), reorder=reorder_info,
        warnings=tuple(warnings), hop_entries=tuple(job.problem.hop_entries), ranks=ranks,
        shards=tuple({k: v for k, v in i.items() if k != "reorder"} for i in infos), merged=merge)
