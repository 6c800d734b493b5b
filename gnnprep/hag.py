"""Hierarchically aggregated computation graphs (HAG), Jia et al., "Redundancy-Free Computation
Graphs for Graph Neural Networks" (KDD 2020).

Neighbour sets overlap, so Σ_{u∈N(v)} h_u recomputes the same partial sums for many v. A HAG adds
aggregation nodes VA, each the sum of exactly two inputs, and rewires every destination v to an
in-list N̂(v) over V ∪ VA whose *cover* is N(v):

    cover(x) = {x}                          for x ∈ V
    cover(a) = cover(in₀(a)) ⊎ cover(in₁(a))  for a ∈ VA
    equivalent  ⇔  ⊎_{x∈N̂(v)} cover(x) = N(v)  for every v ∈ V   (multisets, set aggregation)

Cost (binary aggregations) = Σ_{v∈V∪VA} (|N̂(v)| − 1); transfers = |Ê| = Σ_{v∈V∪VA} |N̂(v)|.
Because S = diag(l)(A + λI)diag(r) factorises, S·X = diag(l)(Â·(diag(r)X) + λ·diag(r)X) runs on the
HAG exactly: :func:`execute` computes the aggregation nodes level by level, then one sparse product
over the rewired in-lists.

Ids: 0..n−1 are graph nodes, n+i is aggregation node i; aggregation nodes are numbered by level
(1 + the max level of their inputs; graph nodes are level 0), so both inputs of n+i are < n+i.

This module holds the structure, its cost, :func:`execute`, the ``hag.h5`` format and :func:`build`
(search, measure, write: what ``gnnprep hag`` runs); the searches themselves are in
:mod:`gnnprep.hagsearch`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from gnnprep.errors import GnnprepError
from gnnprep.meta import FORMAT_VERSIONS

if TYPE_CHECKING:
    from gnnprep.store import GraphStore


@dataclass(frozen=True)
class Hag:
    num_nodes: int
    inputs: np.ndarray      # [|VA|, 2] int64, topological (sorted by level)
    level_ptr: np.ndarray   # [L+1]: level l holds aggregation nodes level_ptr[l] .. level_ptr[l+1]-1
    indptr: np.ndarray      # [n+1] rewired in-lists of the graph nodes
    indices: np.ndarray     # ids in V ∪ VA

    @property
    def num_agg(self) -> int:
        return len(self.inputs)

    def aggregations(self) -> int:
        deg = np.diff(self.indptr)
        return int(np.maximum(deg - 1, 0).sum()) + self.num_agg

    def transfers(self) -> int:
        return int(len(self.indices)) + 2 * self.num_agg


def graph_cost(indptr: np.ndarray) -> tuple[int, int]:
    """(aggregations, transfers) of plain neighbour aggregation over a CSR."""
    deg = np.diff(indptr)
    return int(np.maximum(deg - 1, 0).sum()), int(indptr[-1])


def covers(h: Hag, ordered: bool = False) -> list[np.ndarray]:
    """cover(v) for every graph node: sorted arrays (multisets), or with ``ordered`` the sequences
    (concatenation in input order, for sequential aggregation) — for checking equivalence."""
    n = h.num_nodes
    finish = (lambda a: a) if ordered else np.sort
    memo: list[np.ndarray | None] = [None] * h.num_agg
    for i, (a, b) in enumerate(h.inputs):  # topological order: inputs are already known
        parts = [np.array([x]) if x < n else memo[x - n] for x in (int(a), int(b))]
        memo[i] = finish(np.concatenate(parts))
    out = []
    for v in range(n):
        row = h.indices[h.indptr[v]:h.indptr[v + 1]]
        parts = [np.array([x]) if x < n else memo[x - n] for x in row.tolist()]
        out.append(finish(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64))
    return out


def number_by_level(n: int, inputs: np.ndarray, agg_level: np.ndarray, ordered: bool = False):
    """Renumber aggregation nodes by level (stable): (id map over V ∪ VA, their [|VA|, 2] inputs in
    new ids — each pair sorted unless ``ordered`` — and level_ptr, where level_ptr[l] ..
    level_ptr[l+1]−1 are the aggregation nodes of level l+1; graph nodes are level 0)."""
    na = len(inputs)
    order = np.argsort(agg_level, kind="stable")
    new_id = np.arange(n + na, dtype=np.int64)
    new_id[n + order] = n + np.arange(na)
    ins = new_id[inputs[order]] if na else inputs.reshape(-1, 2)
    if not ordered:
        ins.sort(axis=1)
    levels = int(agg_level.max()) if na else 0
    level_ptr = np.concatenate([[0], np.cumsum(np.bincount(agg_level, minlength=levels + 1)[1:])]).astype(np.int64)
    return new_id, ins, level_ptr


def finish_csr(n: int, dst: np.ndarray, src: np.ndarray, inputs: np.ndarray, agg_level: np.ndarray) -> Hag:
    """:func:`finish_lists` for in-lists given as (destination, source) arrays and aggregation nodes as an
    [|VA|, 2] array with their levels: vectorised, no Python lists (a million in-lists or input
    pairs as Python ints would cost far more memory than the arrays)."""
    new_id, ins, level_ptr = number_by_level(n, inputs, agg_level)
    src = new_id[src]
    del new_id
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return Hag(n, ins, level_ptr, indptr, src[order])


def finish_lists(n: int, lists: list[list[int]], inputs: list[tuple[int, int]], ordered: bool = False) -> Hag:
    """Number aggregation nodes by level (stable), rewrite ids, pack in-lists as CSR (kept in
    order with ``ordered``, else sorted)."""
    na = len(inputs)
    level = np.zeros(n + na, dtype=np.int64)
    for i, (a, b) in enumerate(inputs):
        level[n + i] = 1 + max(level[a], level[b])
    new_id, ins, level_ptr = number_by_level(n, np.array(inputs, dtype=np.int64).reshape(-1, 2), level[n:], ordered)
    arrange = (lambda a: a) if ordered else np.sort
    rows = [arrange(new_id[np.asarray(l, dtype=np.int64)]) if l else np.empty(0, np.int64) for l in lists]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    return Hag(n, ins, level_ptr, indptr, indices.astype(np.int64))


def execute(h: Hag, x: np.ndarray) -> np.ndarray:
    """Â·x through the HAG: aggregation nodes level by level, then one sparse product."""
    n, d = x.shape
    hbuf = np.empty((n + h.num_agg, d), dtype=x.dtype)
    hbuf[:n] = x
    for l in range(len(h.level_ptr) - 1):
        a0, a1 = int(h.level_ptr[l]), int(h.level_ptr[l + 1])
        ins = h.inputs[a0:a1]
        np.add(hbuf[ins[:, 0]], hbuf[ins[:, 1]], out=hbuf[n + a0:n + a1])
    a = sp.csr_matrix((np.ones(len(h.indices), dtype=x.dtype), h.indices, h.indptr), shape=(n, n + h.num_agg))
    return a @ hbuf


# -- the hag.h5 artifact ------------------------------------------------------------------------------
FORMAT = "gnnprep.hag"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]


def write_hag(h: Hag, path, provenance: dict, aggregate: str, capacity: int, graph_fingerprint: str,
              indptr: np.ndarray, inputs=()) -> dict:
    """Write ``hag.h5`` atomically; return the summary written into its root attributes. ``inputs``:
    the files the HAG was built from, which ``path`` must not be (refused, never overwritten)."""
    import h5py

    from gnnprep.atomic import atomic_output
    from gnnprep.meta import write_root_attrs

    ag, tg = graph_cost(indptr)
    summary = {
        "num_nodes": h.num_nodes, "num_agg": h.num_agg, "levels": len(h.level_ptr) - 1,
        "aggregate": aggregate, "capacity": int(capacity),
        "aggregations_graph": ag, "aggregations_hag": h.aggregations(),
        "transfers_graph": tg, "transfers_hag": h.transfers(),
    }
    idx_dtype = np.int32 if h.num_nodes + h.num_agg < 2**31 else np.int64
    with atomic_output(path, inputs=inputs) as tmp:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("agg/inputs", data=h.inputs.astype(idx_dtype).reshape(-1, 2))
            f.create_dataset("agg/level_ptr", data=h.level_ptr.astype(np.int64))
            f.create_dataset("adj/indptr", data=h.indptr.astype(np.int64))
            f.create_dataset("adj/indices", data=h.indices.astype(idx_dtype))
            write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance, graph_fingerprint=graph_fingerprint, **summary)
    return summary


def plain_attrs(attrs) -> dict:
    """Root attributes as plain Python values (numpy scalars and arrays converted, bytes decoded)."""
    def plain(v):
        if isinstance(v, bytes):
            return v.decode(errors="replace")
        if isinstance(v, np.ndarray):
            return v.tolist()
        return v.item() if isinstance(v, np.generic) else v

    return {k: plain(v) for k, v in attrs.items()}


def _read_index(f, path, name: str, ndim: int) -> np.ndarray:
    """An integer dataset of the HAG as int64, or a one-line error naming it."""
    if name not in f or not hasattr(f[name], "dtype"):
        raise GnnprepError(f"{path}: missing dataset /{name}; the HAG is incomplete")
    ds = f[name]
    if ds.dtype.kind not in "iu" or ds.ndim != ndim or (ndim == 2 and ds.shape[1] != 2):
        want = "[|VA|, 2] integers" if ndim == 2 else "a 1-D integer array"
        raise GnnprepError(f"{path}: /{name} is {ds.dtype} of shape {ds.shape}; expected {want}")
    return ds[:].astype(np.int64)


def check_hag(h: Hag, path) -> None:
    """GnnprepError unless ``h`` is a well-formed HAG (one vectorised pass over its arrays), so that
    the executor's kernels never index out of bounds: ``level_ptr`` runs from 0 to |VA| without
    decreasing; every input of an aggregation node of level l+1 lies in [0, n + level_ptr[l]) (graph
    nodes or earlier levels: topological); the in-lists are a CSR over V ∪ VA."""
    from gnnprep.store import check_ids, check_indptr

    n, na, lp = h.num_nodes, h.num_agg, h.level_ptr
    if len(lp) < 1 or lp[0] != 0 or lp[-1] != na or (np.diff(lp) < 0).any():
        runs = f"runs from {int(lp[0])} to {int(lp[-1])}" if len(lp) else "is empty"
        raise GnnprepError(f"{path}: /agg/level_ptr {runs} or decreases; expected non-decreasing offsets from 0 "
                           f"to {na} (the file is corrupt)")
    bound = n + np.repeat(lp[:-1], np.diff(lp))
    bad = np.flatnonzero(((h.inputs < 0) | (h.inputs >= bound[:, None])).any(axis=1))
    if len(bad):
        i = int(bad[0])
        raise GnnprepError(f"{path}: /agg/inputs[{i}] = {h.inputs[i].tolist()}; expected ids in [0, {int(bound[i])}) "
                           "(graph nodes or aggregation nodes of earlier levels; the file is corrupt)")
    check_indptr(h.indptr, n, len(h.indices), f"{path}: /adj/indptr")
    check_ids(h.indices, n + na, f"{path}: /adj/indices")


def read_hag(path) -> tuple[Hag, dict]:
    """The HAG in ``path`` and its root attributes, validated by :func:`check_hag`."""
    from gnnprep.meta import open_artifact

    with open_artifact(path, expect=FORMAT) as f:
        n = f.attrs.get("num_nodes")
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise GnnprepError(f"{path}: root attribute 'num_nodes' is {n!r}; expected a count")
        h = Hag(int(n), _read_index(f, path, "agg/inputs", 2), _read_index(f, path, "agg/level_ptr", 1),
                _read_index(f, path, "adj/indptr", 1), _read_index(f, path, "adj/indices", 1))
        attrs = plain_attrs(f.attrs)
    check_hag(h, path)
    return h, attrs


def read_hag_summary(path, graph_fingerprint: str) -> dict | None:
    """The root summary of a HAG built for the graph with ``graph_fingerprint``, or None when
    ``path`` is missing, unreadable or for another graph (``--hag auto`` then ignores it)."""
    from gnnprep.meta import open_artifact

    try:
        with open_artifact(path, expect=FORMAT) as f:
            attrs = plain_attrs(f.attrs)
    except GnnprepError:
        return None
    return attrs if attrs.get("graph_fingerprint") == graph_fingerprint else None


def cache_path(store_path) -> Path:
    """Where ``--hag auto`` looks for (and keeps) a graph store's HAG: ``<store>.hag.h5`` beside it."""
    return Path(store_path).with_suffix(".hag.h5")


def build(indptr: np.ndarray, indices: np.ndarray, output, *, graph_fingerprint: str, input_path: str,
          method: str = "rounds", aggregate: str = "set", capacity: int | None = None, window: int | None = None,
          max_depth: int = 16, min_share: int = 2, memory_budget: int | None = None, command: str = "") -> dict:
    """Search a HAG for the CSR and write it to ``output``; return the summary of :func:`write_hag`
    with the search's method, seconds, peak memory and the aggregation and transfer ratios.

    ``aggregate="sequential"`` runs the prefix search (method ``"prefix"``); otherwise ``method`` is
    ``"exact"`` or ``"rounds"``. ``capacity`` defaults to ⌊|V|/4⌋ and is clipped to the stored
    entries (every aggregation node removes at least one); ``memory_budget`` defaults to
    :func:`gnnprep.device.default_budget` of the CPU."""
    from gnnprep.device import default_budget
    from gnnprep.hagsearch import exact_search, rounds_search, sequential_search
    from gnnprep.memory import PeakMeter

    from gnnprep.atomic import check_output_path, refuse_input_as_output

    refuse_input_as_output(output, [input_path])  # before the search: it may take minutes
    check_output_path(Path(output).absolute())
    n = len(indptr) - 1
    cap = min(n // 4 if capacity is None else int(capacity), int(indptr[-1]))
    budget = default_budget("cpu") if memory_budget is None else int(memory_budget)
    meter = PeakMeter().start()
    t0 = time.perf_counter()
    if aggregate == "sequential":
        method = "prefix"
        h = sequential_search(indptr, indices, capacity=cap)
    elif method == "exact":
        h = exact_search(indptr, indices, capacity=cap, memory_budget=budget)
    else:
        h = rounds_search(indptr, indices, capacity=cap, window=window, max_depth=max_depth, memory_budget=budget,
                          min_share=min_share)
    seconds = time.perf_counter() - t0
    peak = meter.above()
    prov = {"command": command or "gnnprep hag",
            "parameters": {"method": method, "capacity": cap, "window": window, "max_depth": max_depth,
                           "min_share": min_share, "memory_budget": budget},
            "inputs": [{"path": str(input_path), "graph_fingerprint": graph_fingerprint}],
            "timings": {"search_seconds": round(seconds, 4)}, "peak_bytes": peak}
    s = write_hag(h, output, prov, aggregate, cap, graph_fingerprint, indptr, inputs=[input_path])
    s.update(output=str(output), method=method, search_seconds=round(seconds, 3), peak_bytes=peak,
             aggregation_ratio=round(s["aggregations_graph"] / max(1, s["aggregations_hag"]), 4),
             transfer_ratio=round(s["transfers_graph"] / max(1, s["transfers_hag"]), 4))
    return s


def load_for(path, store: GraphStore) -> Hag:
    """The HAG at ``path`` for aggregating over ``store``: refused when it was built for another
    graph, or when the store is weighted (a HAG sums unweighted neighbour rows)."""
    h, attrs = read_hag(path)
    store.check_built_for(path, "HAG", attrs.get("graph_fingerprint"), h.num_nodes)
    if "adj/weights" in store.f:
        raise GnnprepError(f"{path}: --hag needs an unweighted graph store")
    return h
