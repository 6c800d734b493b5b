"""``gnnprep hag``'s library side: search a HAG for a graph and write it (:func:`build`); find and
load the HAG that ``precompute --hag`` aggregates through (:func:`cache_path`, :func:`load_for`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.file import read_hag, write_hag
from gnnprep.hag.structure import Hag

if TYPE_CHECKING:
    from gnnprep.graph.store import GraphStore


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
    :func:`gnnprep.core.device.default_budget` of the CPU."""
    from gnnprep.core.device import default_budget
    from gnnprep.core.memory import PeakMeter
    from gnnprep.core.output import check_output_path, refuse_input_as_output
    from gnnprep.hag.search import exact_search, rounds_search, sequential_search

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
    if store.weighted:
        raise GnnprepError(f"{path}: --hag needs an unweighted graph store")
    return h
