"""``gnnprep hdg``'s library side: read the graph the selectors need, select and write an HDG
(:func:`build`), and load the HDG that ``precompute --hdg`` aggregates (:func:`load_for`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.core.progress import no_warning
from gnnprep.hdg.file import read_hdg
from gnnprep.hdg.structure import Hdg

if TYPE_CHECKING:
    from gnnprep.graph.store import GraphStore


# -- the graph store as the selectors read it -------------------------------------------------------------
@dataclass(frozen=True)
class GraphInput:
    """What the selectors read from a graph store, checked (:func:`read_graph`)."""

    indptr: np.ndarray
    indices: np.ndarray
    fingerprint: str
    adj_bytes: int
    node_type: np.ndarray | None = None
    type_names: list[str] | None = None
    symmetric: bool = False


def read_graph(path, typed: bool = False) -> GraphInput:
    """The CSR of the graph store at ``path`` (checked by :class:`GraphStore`; indptr int64, the
    indices in their stored dtype, int32 below 2^31 nodes), and with ``typed`` its node types:
    ``/nodes/type`` [n] with codes in [0, len(node_types)) and the root attribute ``node_types`` a
    JSON list of names (None when the store has none)."""
    from gnnprep.graph.store import GraphStore

    with GraphStore(path) as g:
        indptr = g.indptr()
        indices = g.read_indices(0, g.num_edges)
        adj_bytes = g.adj_bytes
        typed_codes = g.node_type_codes() if typed else None
        node_type, type_names = typed_codes if typed_codes is not None else (None, None)
        return GraphInput(indptr, indices, g.fingerprint, int(adj_bytes), node_type, type_names, g.symmetric)


def load_for(path, store: GraphStore, operators: tuple[str, ...]) -> tuple[Hdg, list[str]]:
    """The HDG at ``path`` for ``precompute --hdg`` over ``store``, and its channel names: refused
    unless it was built for this graph and no channel is named like one of ``operators`` (``--rows
    all`` and the reduce are :meth:`gnnprep.precompute.config.PrecomputeConfig.check`'s)."""
    h, attrs = read_hdg(path)
    store.check_built_for(path, "HDG", attrs.get("graph_fingerprint"), h.num_nodes)
    channels = h.channels()
    clash = sorted(set(channels) & set(operators))
    if clash:
        raise GnnprepError(f"{path}: channel {clash[0]!r} has the name of an operator channel")
    return h, channels


def _budget(memory_budget: int | None) -> int:
    from gnnprep.core.sizes import default_host_budget

    return default_host_budget() if memory_budget is None else int(memory_budget)


def plan_store(store_path, sel, memory_budget: int | None = None, count: bool = True,
               graph: GraphInput | None = None):
    """:func:`gnnprep.hdg.stream.plan_hdg` for the graph store at ``store_path``: its n, m, index
    dtype and symmetry, and Σ deg² read from its indptr in blocks (nothing else is read); for a
    metapath also its node types and, with ``count``, the instances of each path, counted over the
    indices in row blocks (:func:`gnnprep.hdg.stream.metapath_instances`: the HDG's size), over
    ``graph``'s arrays where the run has read them already (:func:`read_graph`), else from the store."""
    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg.select import MetapathSelect, check_types
    from gnnprep.hdg.stream import metapath_instances, plan_hdg

    with GraphStore(store_path) as g:
        typed = None
        if isinstance(sel, MetapathSelect):   # refused as the run refuses it
            typed = g.node_type_codes() if graph is None else (
                None if graph.node_type is None else (graph.node_type, graph.type_names))
            check_types(sel, typed[1] if typed is not None else None)
            typed = typed if count else None
        n, m = g.num_nodes, g.num_edges
        indptr = g.indptr()
        deg2, step = 0.0, 1 << 22
        for i in range(0, n, step):   # rows i .. i+step-1, without an [n] temporary
            deg2 += float((np.diff(indptr[i:i + step + 1]).astype(np.float64) ** 2).sum())
        instances = None
        if typed is not None:
            codes, names = typed
            read = g.read_indices if graph is None else (lambda a, b: graph.indices[a:b])
            instances = metapath_instances(indptr, read, codes,
                                           [[names.index(t) for t in types] for _, types in sel.paths], sel.cap)
            del codes, typed
        del indptr
        return plan_hdg(sel, n, m, _budget(memory_budget), itemsize=g.index_dtype.itemsize, symmetric=g.symmetric,
                        deg2=deg2, instances=instances)


def dry_run(store_path, sel, memory_budget: int | None = None) -> dict:
    """What :func:`build` would do for ``sel`` on the store at ``store_path``, from sizes alone
    (nothing selected or written): :class:`gnnprep.hdg.stream.HdgPlan` as a dict."""
    return {"dry_run": True, **plan_store(store_path, sel, memory_budget).to_dict()}


def build(store_path, output, sel, *, seed: int = 0, memory_budget: int | None = None, progress=None,
          command: str = "", warn=None) -> dict:
    """NeighborSelection of ``sel`` (a selector config, :func:`gnnprep.hdg.select.parse_select`) over
    the graph store at ``store_path``, written to ``output`` (which must not be the store) in node
    blocks within ``memory_budget`` bytes (None: half the free RAM; :mod:`gnnprep.hdg.stream`);
    return the summary of :func:`gnnprep.hdg.file.finish_hdg` with the selection's seconds (writing
    included), the HDG's size relative to the graph store, the plan and the process's peak memory;
    ``blocks`` are the node blocks run (those of the plan, ``predicted_blocks`` of ``block_nodes``;
    for anchors cut from the counted entries), ``calls`` the selector's calls written (≥ blocks:
    hop shells run ~0.2 s calls within a block, metapaths blocks of targets; an interrupted run's
    included).
    A budget that cannot hold the graph's CSR and one block is refused before anything is read; a
    fresh install's first run says so while numba compiles (:func:`gnnprep.core.jit.compiling`).
    Resumable: an interrupted run keeps the blocks it had marked (:class:`gnnprep.hdg.file.StreamMarks`,
    every ~10 s, in ``<output>.partial.d``), and the same selection on the same graph continues from
    there, whatever the budget (``resumed`` in the summary); a partial output changed since (a level's
    file missing or cut short) is dropped and the run starts afresh, said through ``warn`` and in the
    summary's ``warnings``."""
    from gnnprep.core.jit import compiling

    with compiling(progress or (lambda *a: None), "the kernels"):
        return _build(store_path, output, sel, seed, memory_budget, progress, command, warn or no_warning)


def _build(store_path, output, sel, seed: int, memory_budget: int | None, progress, command: str, warn) -> dict:
    import json

    from gnnprep.core import h5file
    from gnnprep.core.memory import peak_rss
    from gnnprep.core.output import ResumableOutput, check_output_path, refuse_input_as_output
    from gnnprep.hdg import stream
    from gnnprep.hdg.file import FORMAT_VERSION, StalePartial, StreamMarks, finish_hdg
    from gnnprep.hdg.select import select_spec

    progress = progress or (lambda *a: None)
    store_path = Path(store_path)
    refuse_input_as_output(output, [store_path])  # before the selection: it may take minutes
    check_output_path(Path(output).absolute())
    # refuses a budget that is too small before the graph is read; a metapath's size is then
    # counted over the arrays read (not read again from the store for it)
    plan = plan_store(store_path, sel, memory_budget, count=False)
    g = read_graph(store_path, typed=sel.name == "metapath")
    if sel.name == "metapath":
        plan = plan_store(store_path, sel, memory_budget, graph=g)
    spec = select_spec(sel)
    t0 = time.perf_counter()
    # the selection's blocks change nothing in the output (every node is seeded on its own), so neither
    # the budget nor the threads are in the key: a rerun with another budget resumes too
    key = json.dumps({"graph": g.fingerprint, "select": spec, "seed": int(seed), "format": FORMAT_VERSION},
                     sort_keys=True)
    out = ResumableOutput(output, key, [store_path])

    def selection():
        args = (g.indptr, g.indices, sel, seed, plan, out.work_dir(), StreamMarks(out), progress)
        if sel.name == "random-walk":
            return stream.stream_random_walk(*args)
        if sel.name == "hop-shells":
            return stream.stream_hop_shells(*args)
        if sel.name == "anchors":
            return stream.stream_anchors(*args, symmetric=g.symmetric)
        return stream.stream_metapath(*args, node_type=g.node_type, type_names=g.type_names)

    said: list[str] = [out.discarded] if out.discarded else []
    for message in said:
        warn(message)
    with out.writing(plan.predicted_disk_bytes):
        try:
            skeleton, levels, blocks, calls = selection()
        except StalePartial as e:   # (found as the levels are reopened, before any block is selected)
            said.append(f"{e}: the interrupted run's partial output was changed since; starting afresh")
            warn(said[-1])
            out.restart()
            skeleton, levels, blocks, calls = selection()
        with h5file.writing(out.partial) as f:
            for lv in levels:
                lv.write(f)
            seconds = time.perf_counter() - t0
            prov = {"command": command or "gnnprep hdg",
                    "parameters": {"select": spec, "seed": seed, "memory_budget": plan.memory_budget},
                    "inputs": [{"path": str(store_path), "graph_fingerprint": g.fingerprint}],
                    "timings": {"select_seconds": round(seconds, 4)}}
            s = finish_hdg(f, skeleton, prov, sel.name, spec, seed, g.fingerprint, store_path.stat().st_size,
                           g.adj_bytes)
        resumed = out.resumed
        out.commit()
    s.update(output=str(output), select_seconds=round(seconds, 3),
             size_vs_graph_store=round(s["hdg_bytes"] / max(1, s["graph_store_bytes"]), 4),
             memory_budget=plan.memory_budget, blocks=blocks, predicted_blocks=plan.blocks, block_nodes=plan.block_nodes,
             calls=calls,
             predicted_peak_bytes=plan.predicted_peak_bytes, predicted_seconds=plan.predicted_seconds,
             peak_rss_bytes=peak_rss(), resumed=resumed, warnings=said)
    return s
