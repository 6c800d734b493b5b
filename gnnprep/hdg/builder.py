"""``gnnprep hdg``'s library side: read the graph the selectors need, select and write an HDG
(:func:`build`), and load the HDG that ``precompute --hdg`` aggregates (:func:`load_for`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.hdg.file import read_hdg
from gnnprep.hdg.structure import REDUCES, Hdg

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


def read_graph(path, typed: bool = False) -> GraphInput:
    """The CSR of the graph store at ``path`` (checked by :class:`GraphStore`), and with ``typed``
    its node types: ``/nodes/type`` [n] with codes in [0, len(node_types)) and the root attribute
    ``node_types`` a JSON list of names (None when the store has none)."""
    from gnnprep.graph.store import GraphStore

    with GraphStore(path) as g:
        indptr, indices = g.indptr(), g.indices()
        adj_bytes = g.adj_bytes
        typed_codes = g.node_type_codes() if typed else None
        node_type, type_names = typed_codes if typed_codes is not None else (None, None)
        return GraphInput(indptr, indices, g.fingerprint, int(adj_bytes), node_type, type_names)


def load_for(path, store: GraphStore, operators: tuple[str, ...], rows: str, reduce: str) -> tuple[Hdg, list[str]]:
    """The HDG at ``path`` for ``precompute --hdg`` over ``store``, and its channel names: refused
    unless every row is written (an HDG aggregates hop features of nodes outside the splits too),
    ``reduce`` is mean, sum or max, it was built for this graph, and no channel is named like one of
    ``operators``."""
    if rows != "all":
        raise OptionError("--hdg", "needs --rows all: an HDG aggregates hop features of nodes outside the splits too")
    if reduce not in REDUCES:
        raise OptionError("--hdg-reduce", f"{reduce!r}: expected mean, sum or max")
    h, attrs = read_hdg(path)
    store.check_built_for(path, "HDG", attrs.get("graph_fingerprint"), h.num_nodes)
    channels = h.channels()
    clash = sorted(set(channels) & set(operators))
    if clash:
        raise GnnprepError(f"{path}: channel {clash[0]!r} has the name of an operator channel")
    return h, channels


def build(store_path, output, sel, *, seed: int = 0, progress=None, command: str = "") -> dict:
    """NeighborSelection of ``sel`` (a selector config, :func:`gnnprep.hdg.select.parse_select`) over
    the graph store at ``store_path``, written to ``output`` (which must not be the store); return the
    summary of :func:`gnnprep.hdg.file.write_hdg` with the selection's seconds and the HDG's size
    relative to the graph store."""
    from gnnprep.core.output import refuse_input_as_output
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import select, select_spec

    store_path = Path(store_path)
    refuse_input_as_output(output, [store_path])  # before the selection: it may take minutes
    g = read_graph(store_path, typed=sel.name == "metapath")
    t0 = time.perf_counter()
    h = select(g.indptr, g.indices, sel, seed=seed, progress=progress, node_type=g.node_type,
               type_names=g.type_names)
    seconds = time.perf_counter() - t0
    spec = select_spec(sel)
    prov = {"command": command or "gnnprep hdg",
            "parameters": {"select": spec, "seed": seed},
            "inputs": [{"path": str(store_path), "graph_fingerprint": g.fingerprint}],
            "timings": {"select_seconds": round(seconds, 4)}}
    s = write_hdg(h, output, prov, sel.name, spec, seed, g.fingerprint, store_path.stat().st_size, g.adj_bytes,
                  inputs=[store_path])
    s.update(output=str(output), select_seconds=round(seconds, 3),
             size_vs_graph_store=round(s["hdg_bytes"] / max(1, s["graph_store_bytes"]), 4))
    return s
