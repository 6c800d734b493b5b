"""Precompute hop features S^k X, k = 0..K, block-wise and within a memory budget.

Maekawa et al. ("GNN Transformation Framework for Improving Efficiency and Scalability") show that
GCN, JKNet and GPRGNN can be rewritten so that every graph multiplication touches only X; the
products S^k X are then computed once, here. For each operator and each column block J
(:mod:`gnnprep.precompute.plan`), X[:, J] is loaded once and carried through the hops:

    H_0 = X[:, J];   H_k = S H_{k-1}   (rows r0..r1 of each edge block at a time)

Every edge lies in exactly one edge block (contiguous row ranges of the CSR) and every column in
exactly one column block, so nothing is dropped. Output row slices are written straight into the
artifact (no per-block n-row accumulators) by a writer thread while the next block computes
(:mod:`gnnprep.precompute.hop_writer`). Units (operator, column block, hop) are recorded as they finish; a rerun
of the same command continues after the last finished unit (:class:`gnnprep.core.output.ResumableOutput`).

This module is the orchestration only: plan (:mod:`gnnprep.precompute.plan`) → inputs (rows, HAG/HDG, node
order decision) → the hop loop (:mod:`gnnprep.precompute.hop_loop`, over :mod:`gnnprep.precompute.backend`) → the
artifact (:mod:`gnnprep.precompute.features`).

Under torchrun (:mod:`gnnprep.core.distributed`, :mod:`gnnprep.precompute.sharded`) the column blocks are
divided among the ranks: every rank plans under its own budget, the ranks agree on the narrowest
column width (at most d/P, so every rank gets columns; a resumed job keeps its shards' width), and
rank r computes a contiguous range of column blocks, every hop and operator, into its shard
``<out>.shard-<r>-of-<P>-<key>.h5`` (a resumable output of its own). Per column the arithmetic is
that of a one-process run (the column blocking never changes a column's sums), so the bytes are
equal. After every rank has reported success, rank 0 publishes ``<out>``: rows, labels, splits and
root attributes as a one-process run writes them, each hop an HDF5 virtual dataset over the shards
(``--merge``: a copy, the shards then removed), atomically. See :mod:`gnnprep.precompute.sharded`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from pathlib import Path

import numpy as np

from gnnprep.core import device as devices
from gnnprep.core.artifact import file_fingerprint
from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.jit import compiling
from gnnprep.core.memory import PeakMeter, machine_memory, rss
from gnnprep.core.output import ResumableOutput, refuse_input_as_output
from gnnprep.core.progress import Progress, Warn, no_progress, no_warning
from gnnprep.core.sizes import format_size
from gnnprep.graph.store import GraphStore
from gnnprep.precompute import features as fa
from gnnprep.precompute.config import HagChoice, PrecomputeConfig, PrecomputeReport
from gnnprep.precompute.hop_loop import HopRun, Job, predicted_with
from gnnprep.precompute.operators import make_operator
from gnnprep.precompute.plan import (
    Plan,
    Problem,
    choose_hag,
    choose_plan,
    copy_build_room,
    copy_disk_bytes,
    hag_relabel_room,
    hdg_seconds,
    keep_columns,
    order_speedup,
    plan_order,
    plan_with_hag,
    pruned_hop_entries,
    pruned_last_inputs,
)
from gnnprep.precompute.profile import load_profile

# --hag FILE whose plan is predicted this many times the plain plan's seconds is said (the HAG's rows
# fit a tight budget only in narrow column blocks: papers100M's shape at 1/10 and 2 GiB, 64 blocks of
# 2 columns, 103 s against 22 s without the HAG)
HAG_SLOWER_SAID = 1.5

# -- the plan and the inputs ------------------------------------------------------------------------
def _hag_unsupported(backend: str, store: GraphStore, user: dict | None = None) -> str | None:
    """Why a HAG cannot be used for this run (None: it can). The one place that decides it: a HAG
    shares sums of unweighted in-lists. Both backends execute one (the CPU kernel's
    :class:`gnnprep.precompute.cpu_backends.HagBackend`, torch's :class:`gnnprep.precompute.torch_backends.TorchHagBackend`)."""
    if store.weighted:
        return "a HAG shares sums over unweighted in-lists, and this graph store is weighted"
    for name, (fn, factors) in (user or {}).items():
        if fn.reduce == "max" or factors.values in ("entry", "weight"):
            return f"a HAG shares plain sums over in-lists, and operator {name} has per-entry values or reduce max"
    return None


class CpuKernelOnly(GnnprepError):
    """An input that only the CPU kernel runs (a user operator's ``reduce = 'max'``) on a torch
    backend: an explicit ``--device cuda`` is refused with this line; ``--device auto`` runs on the CPU
    and says ``reason``."""

    def __init__(self, reason: str):
        super().__init__(f"{reason}; use --device cpu")
        self.reason = reason


def _user_operators(store: GraphStore, config: PrecomputeConfig, backend: str) -> tuple[dict, object]:
    """``--operator-file`` functions, loaded, checked and classified on this graph's degrees and
    weights: ({name: (UserFunction, Factors)}, the :class:`gnnprep.precompute.user_operators.Degrees` or None)."""
    from gnnprep.precompute import user_operators as udf
    from gnnprep.precompute.operators import OPERATORS

    user = {}
    deg = sample = None
    for spec in config.operator_files:
        fn = udf.load(spec, OPERATORS)
        if fn.name in user:
            raise OptionError("--operator-file", f"{spec!r}: the channel {fn.name!r} is named twice")
        if fn.reduce == "max" and backend != "numba":
            raise CpuKernelOnly(f"{fn.path}: {fn.name}.reduce = 'max' runs on the CPU kernel")
        if deg is None:  # once for every function: the degrees and a sample of the weights
            deg, sample = udf.degrees(store, 0.0), udf.weight_sample(store)
        factors = udf.classify(fn, deg.with_loop(fn.loop), sample)
        user[fn.name] = (fn, factors)
    return user, deg


def _hdg_weight(store: GraphStore, spec: str, hdg, deg=None):
    """``--hdg-weight path:name``: the user function (:mod:`gnnprep.precompute.user_operators`) evaluated once on every
    member of the HDG's vertex levels, as c(d_member, d_root, w) with the graph's (weighted) degrees
    and the selector's weight; returns (UserFunction, the re-weighted HDG)."""
    from gnnprep.hdg.structure import reweighted
    from gnnprep.precompute import user_operators as udf
    from gnnprep.precompute.operators import OPERATORS

    fn = udf.load(spec, OPERATORS, option="--hdg-weight", args=udf.HDG_ARGS)
    if fn.reduce != "sum" or fn.loop != 0:
        raise GnnprepError(f"{fn.path}: {fn.name}.reduce/.loop do not apply to --hdg-weight (a member's weight); "
                           "the HDG's levels reduce by --hdg-reduce")
    deg = deg if deg is not None else udf.degrees(store, 0.0)
    return fn, reweighted(hdg, lambda ids, roots, w: udf.member_weights(fn, deg.src[ids], deg.dst[roots], w))


def _steps(name: str) -> int:
    """Kernel passes per hop of operator ``name`` (ppr: its K)."""
    from gnnprep.precompute.operators import PPR, spec_values

    return int(spec_values(name)["k"]) if name.startswith(PPR + ":") else 1


def _problem(store: GraphStore, config: PrecomputeConfig, device: str, backend: str, out_rows) -> Problem:
    n, d = store.features.shape
    # the CPU kernel prunes hops K and K-1 to the rows they need (hoploop: --rows labeled), with S
    # resident or streamed
    pruned = _prune_reason(config, backend, out_rows) is None
    deg = np.diff(store.indptr()) if pruned else None
    entries = pruned_hop_entries(deg, out_rows, config.hops) if pruned else ()
    chunks = store.features.chunks
    return Problem(num_nodes=n, num_entries=store.num_edges, num_features=d, hops=config.hops,
                   operators=len(config.operators), out_rows=n if out_rows is None else len(out_rows),
                   hop_entries=entries, last_inputs=pruned_last_inputs(deg, out_rows) if pruned and config.hops > 1 else 0,
                   x_tile=int(chunks[1]) if chunks is not None and chunks[1] < d else 0,
                   passes=sum(_steps(name) for name in config.operators),
                   buffers=3 if any(_steps(name) > 1 for name in config.operators) else 2,
                   index_bytes=store.index_dtype.itemsize, weighted=store.weighted,
                   out_itemsize=np.dtype(config.dtype).itemsize, in_itemsize=store.features.dtype.itemsize,
                   device=device if backend == "torch" else "cpu", machine_memory=machine_memory() or 0,
                   **dict(zip(("x_cached", "s_cached"), store.page_cached())))


def _prune_reason(config: PrecomputeConfig, backend: str, out_rows) -> str | None:
    """Why hops K-1 and K of ``--rows labeled`` compute every row after all (None: they are pruned)."""
    if out_rows is None:
        return "--rows all stores every row"
    if backend != "numba":
        return "the torch backend computes every row"
    if config.hdg is not None:
        return "the HDG channels read every row of every hop"
    return None


def _pruning(job: Job) -> str:
    """What the run's pruning does, for the report (``decisions["pruning"]``)."""
    p, config = job.problem, job.config
    why = _prune_reason(config, job.backend, job.out_rows)
    if why is not None:
        return f"not used: {why}"
    k = config.hops
    if k < 1:
        return "not used: no hops"
    m = max(1, p.num_entries)
    what = f"hop {k} computes only the {p.out_rows:,} stored rows ({100 * p.hop_entries[-1] / m:.1f}% of the entries)"
    if k >= 2:
        what += (f", hop {k - 1} only the ~{p.last_inputs:,} rows hop {k} reads "
                 f"(~{100 * p.hop_entries[-2] / m:.0f}% of the entries)")
    how = "through the HAG's in-lists" if job.uses_hag else "S resident" if job.plan.s_resident else \
        "S streamed: the stored rows' in-lists held as a sub-CSR, hop K-1's rows picked from each row block"
    skipped = [name for name, (fn, _) in job.user.items() if fn.reduce == "max"] + \
        [name for name in config.operators if _steps(name) > 1]
    return f"used ({how}): {what}" + (f"; not for {', '.join(skipped)} (max or diffusion)" if skipped else "")


def _copy_state(store: GraphStore, kind: str, known: bool, reserve: int, problem: Problem, warn=None):
    """(state, the ordered copy opened or None, why none can be had): state "present" (a valid
    copy of this graph beside the store), "build" (an order is known and the folder has room to
    write the copy), "find" (community order: found out of core first), or ""."""
    import os
    import shutil

    from gnnprep.precompute import ordered

    copy = ordered.open_copy(store, kind, warn)  # a damaged one is said here (once), then rewritten
    if copy is not None:
        return "present", copy, ""
    folder = Path(store.path).absolute().parent
    if not os.access(folder, os.W_OK):
        return "", None, f"{folder} is not writable"
    try:
        free = shutil.disk_usage(folder).free
    except OSError as e:
        return "", None, str(e)
    need = copy_disk_bytes(problem) + reserve + (64 << 20)
    if free < need:
        return "", None, f"{folder} has {free / 2**30:.1f} GiB free; the ordered copy and the output need {need / 2**30:.1f} GiB"
    if known:
        return "build", None, ""
    if kind == "community":
        return "find", None, ""
    return "", None, f"no {kind} order is kept with the store (bfs is found only with S resident)"


def _auto_hag(store: GraphStore, plan: Plan, problem: Problem, profile, budget: int,
              dry_run: bool, backend: str = "numba", choice=None, measured_key: str | None = None
              ) -> tuple[Path | None, dict]:
    """``--hag auto``: the cached HAG's path when it pays (building it first, with
    :func:`gnnprep.hag.builder.build` under the default :class:`gnnprep.hag.builder.HagConfig` within
    ``budget``, when even a perfect HAG would repay the search), else None; and what was decided, for
    the report. ``plan``: the plain run's, in its node order; ``choice``: the order a run through
    the HAG would use (:func:`gnnprep.hag.ordered_copy.computation_order`; None: the torch backend).
    Where earlier runs of the same settings (``measured_key``) measured both the plain run and this
    HAG's, the faster of them is run instead of the model's choice (:mod:`gnnprep.precompute.measured`)."""
    from gnnprep.hag import builder as hags
    from gnnprep.hag import file as hag_file
    from gnnprep.hag import ordered_copy

    speedup = _hag_speedup(profile, choice)

    cache = hags.cache_path(store.path)
    cached = hag_file.read_hag_summary(cache, store.fingerprint)
    search_s = None
    # the search runs on the CPU whatever the device: its speed is in the CPU's profile
    scale = (profile if profile.device == "cpu" else load_profile("cpu")).hag_search_scale
    if cached is None:  # the search that would run, predicted from sizes as `gnnprep hag --dry-run` does
        search_s = float(hags.dry_run(store.path, hags.HagConfig(memory_budget=budget), scale)["predicted_seconds"])

    def is_kept() -> bool:
        return choice is not None and ordered_copy.is_kept(cache, ordered_copy.copy_kind(choice), store, choice[0])

    last_kept = [False]   # (the copy's state as the last judgement read it: not asked again)

    def judge(cached: dict | None, search_s: float | None = None):
        kept = last_kept[0] = is_kept()
        with_pages = _hag_pages(problem, cache, choice, kept) if cached is not None else problem
        return choose_hag(plan, with_pages, profile, cached, budget, backend, search_s, speedup, kept)

    verdict = judge(cached, search_s)
    if verdict.build and not dry_run:
        try:
            hags.build(store, cache, hags.HagConfig(memory_budget=budget), command="gnnprep precompute --hag auto",
                       search_scale=scale)
        except (OSError, GnnprepError):
            pass  # a read-only folder: nothing cached, decide without it
        cached = hag_file.read_hag_summary(cache, store.fingerprint)
        verdict = judge(cached)
    if cached is not None and measured_key is not None:
        from gnnprep.precompute import measured

        relabels = choice is not None and not last_kept[0]
        told = measured.measured_choice(store.path, measured_key, measured.hag_variant(cached, relabels))
        if told is not None:
            verdict = dataclasses.replace(verdict, use=told[0], reason=told[1])
    return (cache if verdict.use else None), HagChoice("auto", verdict.use, str(cache) if verdict.use else None,
                                                       verdict.reason)


def _measured_key(store: GraphStore, job: Job) -> str:
    from gnnprep.precompute import measured

    return measured.settings_key(store.fingerprint, job.config, job.backend)


def _record_measured(store: GraphStore, job: Job, report: PrecomputeReport) -> None:
    """Keep this run's seconds for ``--hag auto``'s later runs (:mod:`gnnprep.precompute.measured`):
    on the CPU kernel, beside a store with a cached HAG (the only one auto takes: without it, the
    record would be a file written beside the input for nothing), for a whole run (not a resumed one,
    whose seconds are a part)."""
    from gnnprep.hag import builder as hags
    from gnnprep.hag import file as hag_file
    from gnnprep.precompute import measured

    if job.backend != "numba" or report.resumed_units or job.user or not hags.cache_path(store.path).exists():
        return
    variant = "plain"
    if job.uses_hag:
        summary = hag_file.read_hag_summary(job.hag_path, store.fingerprint)
        if summary is None:
            return
        variant = measured.hag_variant(summary, job.hag_relabels)
    measured.record(store.path, _measured_key(store, job), variant, report.seconds)


def _choose_hag(job: Job, store: GraphStore, profile, budget: int) -> None:
    """Resolve ``--hag`` (a file, or auto) into ``job.hag`` and a plan that holds its rows."""
    config = job.config
    if config.hag is None:
        return
    unsupported = _hag_unsupported(job.backend, store, job.user)
    if unsupported is not None:
        if config.hag != "auto":
            raise OptionError("--hag", f"{config.hag}: {unsupported}")
        job.hag_info = HagChoice("auto", False, None, unsupported)
        return
    if job.backend == "numba":  # the node order a run through the HAG uses (and its relabelled copy's)
        from gnnprep.hag import ordered_copy

        job.hag_order_choice = ordered_copy.computation_order(store, config.reorder, job.warn)
    if config.hag == "auto":
        key = _measured_key(store, job) if job.backend == "numba" else None
        job.hag_path, job.hag_info = _auto_hag(store, job.plan, job.problem, profile, budget, config.dry_run,
                                               job.backend, job.hag_order_choice, key)
        if job.hag_path is None:
            job.hag_order_choice = None  # the order and its inverse (16 bytes a node) not held by a plain run
            return
    else:
        job.hag_path = Path(config.hag)
        job.hag_info = HagChoice("file", True, str(config.hag), "--hag given")
    from gnnprep.hag.builder import load_for, load_in_order, plan_facts

    plain, planned = job.plan, None
    if config.dry_run:  # planned from the HAG's attributes: its arrays (gigabytes at papers100M) not read
        num_agg, transfers, levels, kept, why = plan_facts(job.hag_path, store, job.hag_order_choice)
        job.problem = _hag_pages(job.problem, job.hag_path, job.hag_order_choice, kept)
        if job.backend == "numba":
            job.decisions["order"] = why
        job.hag_planned = True
    else:
        kept = False
        if job.backend == "numba":
            # relabelled out of core where the HAG as read and its relabelled copy do not fit together
            num_agg, transfers, levels, kept, _ = plan_facts(job.hag_path, store, job.hag_order_choice)
            job.hag_relabels = job.hag_order_choice is not None and not kept
            job.problem = _hag_pages(job.problem, job.hag_path, job.hag_order_choice, kept)
            # planned before the HAG is read: a budget too small for it is refused before any of it is
            # held, and a plan that streams its in-lists opens the kept copy instead of reading it
            early = plan_with_hag(job.problem, profile, budget, job.baseline, num_agg, transfers, config.blocks,
                                  levels=levels, speedup=_hag_speedup(profile, job.hag_order_choice), kept=kept)
            streamed = not early.s_resident
            room = hag_relabel_room(job.problem, budget, num_agg, transfers, streamed=True) if streamed else \
                None if kept else hag_relabel_room(job.problem, budget, num_agg, transfers)
            planned = early if streamed else None   # (the reader it opens is what that plan streams)
            job.hag, kept, job.decisions["order"] = load_in_order(job.hag_path, store, job.hag_order_choice, job.warn,
                                                                  streamed_room=room, stream=streamed)
            job.hag_order = job.hag_order_choice[:2]
        else:
            job.problem = _hag_pages(job.problem, job.hag_path, None, False)
            job.hag = load_for(job.hag_path, store)
        num_agg, transfers, levels = job.hag.num_agg, job.hag.transfers(), len(job.hag.level_ptr) - 1
    job.page_cached["hag"] = job.problem.hag_cached
    job.plan = planned or plan_with_hag(job.problem, profile, budget, job.baseline, num_agg, transfers, config.blocks,
                                        backend=job.backend, levels=levels,
                                        speedup=_hag_speedup(profile, job.hag_order_choice), kept=kept)
    if config.hag != "auto" and job.plan.predicted_seconds > HAG_SLOWER_SAID * plain.predicted_seconds:
        message = (f"--hag {config.hag}: predicted {job.plan.predicted_seconds:.0f} s through the HAG against "
                   f"{plain.predicted_seconds:.0f} s without it (at {format_size(budget)} its rows fit in "
                   f"{job.plan.c} column blocks of {job.plan.width}"
                   + ("" if job.plan.s_resident else f", its in-lists streamed in {job.plan.b} row blocks")
                   + "); --hag auto would run without it")
        if job.warn is not None:
            job.warn(message)
        else:
            warnings.warn(message, stacklevel=3)


def _hag_pages(problem: Problem, hag_path: Path, choice, kept: bool) -> Problem:
    """``problem`` with the page cache's share of the file a run through the HAG at ``hag_path``
    reads its in-lists from (its relabelled copy where ``kept``, else the HAG file itself)."""
    from gnnprep.core.pagecache import resident_share
    from gnnprep.hag import ordered_copy

    path = ordered_copy.copy_path(hag_path, ordered_copy.copy_kind(choice)) if kept and choice is not None else hag_path
    try:
        share = resident_share(path, [(0, Path(path).stat().st_size)])
    except OSError:
        share = None
    return dataclasses.replace(problem, hag_cached=share)


def _hag_speedup(profile, choice) -> float | None:
    """The kernel speed-up of the node order a run through a HAG uses (``choice``: from
    :func:`gnnprep.hag.ordered_copy.computation_order`; None where it runs in the stored order)."""
    return None if choice is None or choice[0] is None else order_speedup(profile, choice[2])


def _plan_order(job: Job, store: GraphStore, problem: Problem, profile, budget: int) -> str:
    """The node order of a CPU run without a HAG: the store's facts (the order ingest kept, its
    gain, an ordered copy's state) gathered here, the decision the planner's
    (:func:`gnnprep.precompute.plan.plan_order`); sets ``job.plan`` and what the hop loop needs
    (the kind, the copy and its room), warms up the order's kernels, and returns why."""
    from gnnprep.graph import order as kept_order
    from gnnprep.sparse import kernels
    from gnnprep.sparse import order as node_order

    config, index_dtype = job.config, store.index_dtype
    # auto: the order ingest chose (community, hubs first or none), else community as before
    kind, job.order_force, chosen_none = kept_order.precompute_kind(store, config.reorder)
    job.order_kind = kind
    known = kept_order.known(store, kind)
    gain = kept_order.stored_gain(store, kind)
    mode = kept_order.order_mode(config.reorder, chosen_none, gain)
    state, copy, copy_why = ("", None, "") if mode == "none" else \
        _copy_state(store, kind, known, job.reserve_bytes, problem, job.warn)
    ordered_problem = dataclasses.replace(problem, order_known=known, ordered_copy=state,
                                          copy_cached=copy.page_cached() if copy is not None else None)
    if copy is not None:
        job.page_cached["copy"] = ordered_problem.copy_cached
    job.plan, why = plan_order(job.plan, ordered_problem, profile, kept_order.sampled_locality(store), kind=kind,
                               mode=mode, requested=config.reorder, budget=budget, chosen_none=chosen_none,
                               gain=gain, copy_why=copy_why)
    if job.plan.reorder and job.plan.ordered_copy:
        job.copy = copy
        job.copy_room = copy_build_room(ordered_problem, job.plan)
        if state != "present":
            from gnnprep.precompute import ordered

            ordered.warm_up(index_dtype)
            if state == "find":
                node_order.warm_up((index_dtype,), (kind,), find=True)
    elif copy is not None:
        copy.close()
    if job.plan.reorder:
        node_order.warm_up((index_dtype,), (kind,), find=not known and not job.plan.ordered_copy)
        kernels.warm_up((), (), hag=False, gather=True)
    return why


def prepare_job(store: GraphStore, config: PrecomputeConfig, device: str, backend: str, warn: Warn | None = None) -> Job:
    """Plan the run and load its inputs: rows, blocking, node order, HAG, HDG. ``warn``: the command's
    warning channel, told of a damaged calibration profile or kept node order (advisory: said, then
    ignored); None: a Python warning (``ProfileWarning``, ``DamagedOrderWarning``)."""
    if store.features is None:
        raise GnnprepError(f"{store.path}: the graph store has no /nodes/features to propagate")
    store.check_features_written()
    out_rows = fa.select_rows(store, config.rows)
    budget = config.memory_budget or devices.default_budget(device)
    user, user_degrees = _user_operators(store, config, backend)
    missing = [name for name in user if name not in config.operators]
    if missing:  # a file's function is a channel of its own, after the named operators
        config = dataclasses.replace(config, operators=tuple(config.operators) + tuple(missing))
    hdg, budget = _load_hdg(store, config, user_degrees, budget)
    problem = _problem(store, config, device, backend, out_rows)
    if hdg[0] is not None:   # its channels' seconds in the plan's (plan.hdg_seconds)
        levels = hdg[0].levels()
        problem = dataclasses.replace(problem, hdg_channels=len(hdg[1]),
                                      hdg_members=sum(len(lvl.ids) for lvl in levels if lvl.kind == "vertices"),
                                      hdg_instances=sum(lvl.num_children for lvl in levels if lvl.kind != "vertices"))
    if any(factors.values in ("entry", "weight") for _, factors in user.values()):
        # a user operator's per-entry values: held like weights (computed in the node order, if any);
        # on a weighted store beside the stored weights (one operator's values at a time)
        problem = dataclasses.replace(problem, weighted=True, value_bytes=4 if problem.weighted else 0)
    index_dtype = store.index_dtype
    if backend == "numba":  # only the variants this run uses (each costs seconds on a fresh install)
        from gnnprep.sparse import kernels

        variants = {problem.weighted} | ({False} if user else set())
        kernels.warm_up((index_dtype,), tuple(variants), hag=False, gather=False,
                        **({"max_reduce": True} if any(fn.reduce == "max" for fn, _ in user.values()) else {}))
    if config.dtype == "float16":   # the writer's conversion (the torch backend's hops go through it too)
        from gnnprep.sparse import half

        half.warm_up()
    profile = load_profile(device, warn=warn)
    baseline = rss()
    job = Job(config, device, backend, choose_plan(problem, budget, profile, baseline, config.blocks), problem,
               out_rows, baseline=baseline, profile=profile, user=user, degrees=user_degrees, warn=warn)
    job.reserve_bytes = _artifact_bytes(store, job)
    job.page_cached = {"x": problem.x_cached, "s": problem.s_cached}
    # --hag auto weighs the HAG against the plain run as it would run, in its own node order
    plain_why = _plan_order(job, store, problem, profile, budget) \
        if config.hag == "auto" and backend == "numba" and _hag_unsupported(backend, store, user) is None else None
    _choose_hag(job, store, profile, budget)
    if job.uses_hag and job.copy is not None:  # the plain run's ordered copy, not needed
        job.copy.close()
        job.copy = None
    if not job.uses_hag and backend == "numba":
        order_why = plain_why or _plan_order(job, store, problem, profile, budget)
    elif job.uses_hag:
        if backend == "numba":
            from gnnprep.sparse import row_kernels

            # with a node order, X is permuted and the hops' rows gathered back (the writer's first
            # gather would otherwise load its kernel during hop 2)
            kernels.warm_up((), (), hag=True, gather=job.hag_order_choice[0] is not None)
            row_kernels.warm_up((), hag=True, selected=out_rows is not None)
            order_why = job.decisions.get("order", "not used: hops run through a HAG")
        else:
            order_why = "not used: hops through a HAG on the torch backend run in the stored order"
    else:
        order_why = "not used: the node order runs on the CPU kernel (backend torch)"
    if backend == "numba" and not job.uses_hag:
        from gnnprep.precompute import pruned
        from gnnprep.sparse import row_kernels

        variants = tuple({problem.weighted} | ({False} if user else set()))
        row_kernels.warm_up((index_dtype,), variants, selected=out_rows is not None)
        if out_rows is not None and not job.plan.s_resident:
            pruned.warm_up((index_dtype,), tuple({problem.weighted, False}))
    job.decisions = {"order": order_why, "pruning": _pruning(job)}
    job.hdg, job.hdg_channels, job.hdg_weight = hdg
    if problem.hdg_channels:   # the channels' seconds after the hops (the same for every plan: added here)
        job.plan = dataclasses.replace(job.plan, predicted_seconds=round(
            job.plan.predicted_seconds + hdg_seconds(problem, job.plan.width), 3))
    return job


def _load_hdg(store: GraphStore, config: PrecomputeConfig, degrees, budget: int) -> tuple[tuple, int]:
    """((the HDG, its channels, the ``--hdg-weight`` (function, re-weighted HDG) or None), the budget
    left for the plan once the HDG's arrays are held: they stay held for the whole run, so the plan
    fits beside them (a budget they fill is refused here)."""
    if config.hdg is None:
        if config.hdg_weight is not None:
            raise OptionError("--hdg-weight", "re-weights the members of an HDG's levels; give --hdg too")
        return (None, (), None), budget
    from gnnprep.hdg.builder import load_for
    from gnnprep.hdg.structure import folded

    hdg, channels = load_for(config.hdg, store, tuple(config.operators))
    weight = _hdg_weight(store, config.hdg_weight, hdg, degrees) if config.hdg_weight is not None else None
    # the HDG the channels aggregate (re-weighted: the stored weights are not needed), with each mean or
    # sum over instances of members folded into one weighted vertex level (hdg.structure.folded)
    hdg = folded(hdg if weight is None else weight[1], config.hdg_reduce)
    weight = None if weight is None else (weight[0], hdg)
    from gnnprep.sparse import kernels

    vertex_ids = {lvl.ids.dtype for lvl in hdg.levels() if lvl.kind == "vertices"}
    if config.hdg_reduce == "max":   # (the levels' ids as int64, float32 weights)
        kernels.warm_up((np.int64,), (True,), hag=False, gather=False, max_reduce=True)
    else:
        kernels.warm_up((), (), hag=False, gather=False, segments=tuple(vertex_ids))
    held = hdg.nbytes()
    if held >= budget:
        raise OptionError("--memory-budget", f"{format_size(budget)} is too small for this run: the HDG {config.hdg} "
                                             f"alone holds {format_size(held)}")
    return (hdg, tuple(channels), weight), budget - held


def run_key(store: GraphStore, job: Job) -> str:
    """What the output depends on (besides the plan, which a resumed run keeps): a rerun with the
    same key continues the partial output. A JSON object of named parts, so that a partial output
    discarded for another key is said to be so for the parts that differ (``hops 3, now 4``); the
    sharded run names its files by its hash."""
    c = job.config

    def identity(path):
        return None if path is None else [str(Path(path).absolute()), file_fingerprint(path)]

    # what was ingested: content fingerprints where ingest recorded them, else the file's identity
    # (a re-ingested store then never resumes an output computed from the old one)
    contents = [str(store.attrs.get(k, "")) for k in ("features_fingerprint", "labels_fingerprint",
                                                       "splits_fingerprint")]
    if not all(contents):
        contents = identity(store.path)
    parts = {"graph": store.fingerprint, "contents": contents, "hops": c.hops, "operators": list(c.operators),
             "rows": c.rows, "dtype": c.dtype, "hag": identity(job.hag_path),
             "hdg": [identity(c.hdg), c.hdg_reduce] if c.hdg else None, "normalize_features": c.normalize_features}
    if store.weighted:
        # the store's fingerprint covers the pattern (indptr, indices) only: weights added or changed
        # later must not resume an output computed with other ones (a sample: 64 slices of 4,096)
        from gnnprep.precompute.user_operators import weight_sample

        parts["weights"] = hashlib.sha256(weight_sample(store).astype(np.float32).tobytes()).hexdigest()[:16]
    if job.user:
        parts["operator_files"] = sorted((name, fn.sha256) for name, (fn, _) in job.user.items())
    if job.hdg_weight is not None:
        parts["hdg_weight"] = [job.hdg_weight[0].name, job.hdg_weight[0].sha256]
    return json.dumps(parts, sort_keys=True)


def _resume_plan(job: Job, out: ResumableOutput, warn: Warn) -> None:
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


def _artifact_bytes(store: GraphStore, job: Job) -> int:
    c = job.config
    return fa.disk_bytes(job.problem.out_rows, store.num_nodes, store.features.shape[1], c.hops, len(c.operators),
                         c.dtype, len(job.hdg_channels))


def precompute(graph_path: str | Path, output: str | Path, config: PrecomputeConfig = PrecomputeConfig(),
               progress: Progress = no_progress, command: str = "", warn: Warn = no_warning) -> PrecomputeReport:
    """Write the features artifact ``output`` (:mod:`gnnprep.precompute.features`) for the graph store
    ``graph_path``: hops 0..K of every operator (and HDG channel) for the chosen rows. One
    process; under torchrun, :func:`gnnprep.precompute.sharded.precompute_sharded` runs each rank.
    A fresh install's first run says so while numba compiles the kernels it uses
    (:func:`gnnprep.core.jit.compiling`)."""
    with compiling(progress, "the kernels"):
        return _precompute(graph_path, output, config, progress, command, warn)


def _precompute(graph_path, output, config: PrecomputeConfig, progress: Progress, command: str,
                warn: Warn) -> PrecomputeReport:
    t_start = time.perf_counter()
    config.check()
    device = devices.resolve(config.device)
    backend = config.backend_for(device)
    inputs = [graph_path, config.hdg] + ([config.hag] if config.hag not in (None, "auto") else [])
    if config.hag == "auto":
        from gnnprep.hag.builder import cache_path

        inputs.append(cache_path(graph_path))  # it may be written (cached) by this run, then read
    refuse_input_as_output(output, inputs)
    warnings: list[str] = []

    def say(message: str) -> None:
        warnings.append(message)
        warn(message)

    with GraphStore(graph_path) as store:
        try:
            job = prepare_job(store, config, device, backend, warn=say)
        except CpuKernelOnly as e:
            if config.device != "auto" or config.backend != "auto" or device == "cpu":
                raise
            say(f"--device auto runs this on the CPU: {e.reason}")
            device, backend = "cpu", "numba"
            job = prepare_job(store, config, device, backend, warn=say)
        config = job.config  # with the --operator-file channels named
        if config.dry_run:
            if job.copy is not None:
                job.copy.close()
            return PrecomputeReport(str(output), job.plan, config.hops, tuple(config.operators),
                                    job.problem.out_rows, config.dtype, (), 0.0, job.plan.predicted_peak, None,
                                    job.baseline, 0, dry_run=True, hag=job.hag_info,
                                    hop_entries=tuple(job.problem.hop_entries), decisions=job.decisions,
                                    warnings=tuple(warnings), predicted_with=predicted_with(job),
                                    hdg_channels=tuple(job.hdg_channels))
        for name in config.operators:  # refuse before anything is written
            if name not in job.user:
                make_operator(name, np.zeros(1), store.symmetric)
        meter = PeakMeter().start()
        job.baseline = meter.baseline
        out = ResumableOutput(output, run_key(store, job), inputs)
        if out.discarded:
            say(out.discarded)
        out.check_room(_artifact_bytes(store, job))
        with out.writing(_artifact_bytes(store, job)):
            _resume_plan(job, out, say)
            report = HopRun(store, out, job, progress, command, t_start).execute()
            fa.sweep_shards(out.path, keep=())  # an earlier sharded run's files: nothing reads them now
        _record_measured(store, job, report)
        return dataclasses.replace(report, measured_peak_bytes=meter.above(), peak_rss_bytes=meter.process_peak(),
                                   hag=job.hag_info,
                                   warnings=tuple(warnings))
