"""Hierarchical dependency graphs (HDG): neighbour selection beyond 1-hop, stored compactly.

Wang et al., "FlexGraph: A Flexible and Efficient Distributed Framework for GNN Training" (EuroSys
2021), NAU abstraction: a GNN's neighbours of v need not be its 1-hop in-neighbours. A
NeighborSelection stage builds, for every node v, a tree of *instances* whose leaves are graph
vertices; Aggregation runs bottom-up over that tree. For gnnprep an HDG is a precomputable graph
filter: the hierarchical aggregation of X becomes extra feature channels.

This module holds the structure (:class:`Hdg`, :class:`Level`), its aggregation, the ``hdg.h5``
format (:func:`read_hdg` checks every level's arrays against the counts they imply, so a corrupt
file is one error, never an out-of-bounds product) and :func:`read_graph`, the checked graph store
input of the selectors that build an HDG (``--select SPEC``), which are in :mod:`gnnprep.hdgselect`.

Layout of ``hdg.h5`` (``format = "gnnprep.hdg"``, ``format_version = 1``). The n graph nodes are the
implicit root level ``node``. The schema tree, one JSON root attribute ``schema`` shared by all
nodes, lists each level below the root: ``{"level", "kind", "fanout", "weighted", "combine",
"slots", "children"}``. ``kind`` is ``"instances"`` (an inner level) or ``"vertices"`` (a leaf level
whose children are graph node ids). Every level stores its children grouped by parent, in parent
order, so a child's parent is implied by position and no destination array is stored:

- ``/levels/<name>/offsets`` [P+1] int32 or int64 (CSC offsets: parent p's children are
  ``offsets[p] .. offsets[p+1]-1``), omitted when the schema gives a fixed ``fanout`` F (then parent
  p's children are ``p·F .. p·F+F-1``);
- ``/levels/<name>/ids`` [C] int32 or int64, vertex levels only: the graph node ids;
- ``/levels/<name>/weights`` [C] float32, where the selector weights members (visit counts, P-GNN
  distance weights); absent means weight 1.

P (the number of parents) is n below the root and the parent level's child count below that. An
inner level's ``combine`` says how its instances reach the node above: ``"slots"`` (fixed fanout;
slot i of every parent is its own output channel, named ``slots[i]``) or ``"reduce"`` (mean, sum or
max over the instances into one channel named after the level). A leaf directly under the root is one
channel named after the level. Group attrs of each level: ``kind``, ``parent``, ``fanout`` (0 when
variable), ``num_parents``, ``num_children``. Root attrs: ``num_nodes``, ``selector``, ``spec``,
``seed``, ``graph_fingerprint``, ``graph_store_bytes`` (the store's file size when the HDG was built),
``graph_adj_bytes`` (its ``/adj`` arrays), ``hdg_bytes`` (all level arrays), ``channels`` (JSON list).

The three selectors: random-walk = ``node → topk`` (one vertex level, variable fanout ≤ K,
weighted); hop-shells = ``node → shell`` (fanout K, combine slots ``hop1..hopK``) ``→ shell_members``
(offsets over the n·K shells); anchors = ``node → anchor_set`` (fanout S, combine reduce)
``→ anchor_members`` (offsets over the n·S instances, weighted).

Within a parent, ``topk`` members are ordered by visit count (most first, ties by smaller id);
shell and anchor members by id. Every index array can be regenerated from the store, the SPEC and
``seed``: walks, shell samples and anchor sets are seeded and do not depend on the thread count.

Aggregation (:func:`aggregate`) runs bottom-up: a vertex level is one sparse product ``M·X``,
M = csr(weights, ids, offsets) of shape [P, n] (per-member messages are never materialised), divided
by the row sums of M for ``mean`` (an empty parent gives 0); a fixed-fanout inner level reshapes its
child's [P·F, d] result to [P, F, d] — no index arrays at all — and takes slot i as channel i
(``slots``) or the mean/sum over the F instances (``reduce``); a variable-fanout inner level is one
more sparse product with its 0/1 offsets matrix.

``max`` replaces each Σ by a max: a vertex level gives h[p] = max_{c ∈ children(p)} w_c · X[ids[c]]
(elementwise; an empty parent gives 0) through the fused max-reduce row kernel
(:func:`gnnprep.kernels.spmm_rows_max`, again no per-member messages), a fixed-fanout reduce level
the max over its F instances, a variable-fanout one the max over each parent's instances (an empty
parent gives 0). A NaN is skipped as by ``np.fmax`` (NaN only where every member is NaN).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from gnnprep.errors import GnnprepError
from gnnprep.meta import FORMAT_VERSIONS, json_attr

if TYPE_CHECKING:
    from gnnprep.store import GraphStore

REDUCES = ("mean", "sum", "max")   # how instance levels (and vertex levels) combine their children
FORMAT = "gnnprep.hdg"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]


# -- the HDG ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Level:
    """One level of the schema tree with its arrays (see the module docstring)."""

    name: str
    kind: str                       # "instances" or "vertices"
    num_parents: int
    fanout: int = 0                 # children per parent when fixed (offsets implied), 0 = variable
    offsets: np.ndarray | None = None
    ids: np.ndarray | None = None   # vertex levels: graph node ids
    weights: np.ndarray | None = None
    combine: str | None = None      # inner levels: "slots" or "reduce"
    slots: tuple[str, ...] = ()
    child: "Level | None" = None

    @property
    def num_children(self) -> int:
        return self.num_parents * self.fanout if self.fanout else int(self.offsets[-1])

    def schema(self) -> dict:
        d = {"level": self.name, "kind": self.kind, "fanout": self.fanout or None,
             "weighted": self.weights is not None}
        if self.kind == "instances":
            d.update(combine=self.combine, slots=list(self.slots), children=[self.child.schema()])
        return d

    def walk(self):
        lvl = self
        while lvl is not None:
            yield lvl
            lvl = lvl.child


@dataclass(frozen=True)
class Hdg:
    num_nodes: int
    roots: tuple[Level, ...]        # the levels directly below the implicit root level "node"

    def levels(self) -> list[Level]:
        return [lvl for r in self.roots for lvl in r.walk()]

    def schema(self) -> dict:
        return {"level": "node", "kind": "root", "children": [r.schema() for r in self.roots]}

    def channels(self) -> list[str]:
        out: list[str] = []
        for r in self.roots:
            out += list(r.slots) if r.combine == "slots" else [r.name]
        return out

    def nbytes(self) -> int:
        return sum(a.nbytes for lvl in self.levels() for a in (lvl.offsets, lvl.ids, lvl.weights) if a is not None)


def reweighted(hdg: Hdg, weight) -> Hdg:
    """The HDG with every vertex level's member weights replaced by ``weight(ids, roots, w)``: the
    member's graph node id, the id of the node whose channel it feeds (the root of its tree), and
    its stored weight (1 where the level is unweighted), each an array over the level's members;
    it returns one weight per member (``precompute --hdg-weight``, a user function, see
    :mod:`gnnprep.udf`)."""

    def walk(lvl: Level, parent_roots: np.ndarray) -> Level:
        counts = np.full(lvl.num_parents, lvl.fanout) if lvl.fanout else np.diff(lvl.offsets)
        roots = np.repeat(parent_roots, counts)          # the root of each child of this level
        if lvl.kind == "vertices":
            w = lvl.weights.astype(np.float64) if lvl.weights is not None else np.ones(len(lvl.ids))
            new = np.asarray(weight(lvl.ids, roots, w), dtype=np.float32)
            return dataclasses.replace(lvl, weights=new)
        return dataclasses.replace(lvl, child=walk(lvl.child, roots))

    return Hdg(hdg.num_nodes, tuple(walk(r, np.arange(hdg.num_nodes)) for r in hdg.roots))


# -- aggregation ------------------------------------------------------------------------------------------
def _segment_max(offsets: np.ndarray, ids: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """out[p] = max_{c ∈ offsets[p] .. offsets[p+1]-1} w[c] · x[ids[c]] (elementwise), 0 for an empty
    segment: the max-reduce row kernel with l = r = 1 and no self-loop (numba, imported when used)."""
    from gnnprep.kernels import spmm_rows_max

    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)   # float16: numba computes in float32 (mean/sum do the same in scipy)
    p = len(offsets) - 1
    out = np.empty((p, x.shape[1]), dtype=x.dtype)
    ones = np.ones(max(p, len(x)), dtype=x.dtype)
    spmm_rows_max(np.ascontiguousarray(offsets, dtype=np.int64), np.ascontiguousarray(ids, dtype=np.int64),
                  np.ascontiguousarray(w, dtype=x.dtype), 0, ones, ones, 0.0, np.ascontiguousarray(x), out)
    return out


def _aggregate_level(lvl: Level, x: np.ndarray, reduce: str) -> np.ndarray | list[tuple[str, np.ndarray]]:
    """[num_parents, d] for the level's parents (or the slot channels of a slots level)."""
    p = lvl.num_parents
    if lvl.kind == "vertices":
        offsets = lvl.offsets if lvl.offsets is not None else np.arange(p + 1, dtype=np.int64) * lvl.fanout
        w = lvl.weights if lvl.weights is not None else np.ones(len(lvl.ids), dtype=x.dtype)
        if reduce == "max":
            return _segment_max(offsets, lvl.ids, w, x)
        m = sp.csr_matrix((w.astype(x.dtype, copy=False), lvl.ids, offsets), shape=(p, len(x)))
        out = np.asarray(m @ x)
        if reduce == "mean":
            den = np.asarray(m.sum(axis=1)).ravel()
            out /= np.where(den == 0, 1, den)[:, None].astype(x.dtype)
        return out
    h = _aggregate_level(lvl.child, x, reduce)
    d = x.shape[1]
    if lvl.fanout:
        h = h.reshape(p, lvl.fanout, d)
        if lvl.combine == "slots":
            return [(name, np.ascontiguousarray(h[:, i])) for i, name in enumerate(lvl.slots)]
        if reduce == "max":
            return np.fmax.reduce(h, axis=1)   # NaN as in the kernel: skipped unless all are
        return h.mean(axis=1) if reduce == "mean" else h.sum(axis=1)
    if reduce == "max":
        return _segment_max(lvl.offsets, np.arange(len(h), dtype=np.int64), np.ones(len(h), dtype=h.dtype), h)
    ind = sp.csr_matrix((np.ones(len(h), dtype=x.dtype), np.arange(len(h)), lvl.offsets), shape=(p, len(h)))
    out = np.asarray(ind @ h)
    if reduce == "mean":
        cnt = np.diff(lvl.offsets)
        out /= np.maximum(cnt, 1)[:, None].astype(x.dtype)
    return out


def aggregate(hdg: Hdg, x: np.ndarray, reduce: str = "mean") -> dict[str, np.ndarray]:
    """Bottom-up hierarchical aggregation of node features ``x`` [n, d] over the HDG: one [n, d]
    array per channel (see :mod:`gnnprep.hdgselect` for the formulas per selector); ``reduce`` is
    mean, sum or max (module docstring)."""
    if reduce not in REDUCES:
        raise GnnprepError(f"reduce {reduce!r}: expected mean, sum or max")
    x = np.asarray(x)
    if x.ndim != 2 or len(x) != hdg.num_nodes:
        raise GnnprepError(f"features of shape {x.shape}; expected [{hdg.num_nodes}, d]")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    out: dict[str, np.ndarray] = {}
    for r in hdg.roots:
        h = _aggregate_level(r, x, reduce)
        if isinstance(h, list):
            out.update(h)
        else:
            out[r.name] = h
    return out


# -- the hdg.h5 artifact --------------------------------------------------------------------------------
def write_hdg(h: Hdg, path, provenance: dict, selector: str, spec: str, seed: int, graph_fingerprint: str,
              graph_store_bytes: int, graph_adj_bytes: int, inputs=()) -> dict:
    """Write ``hdg.h5`` atomically; return the summary written into its root attributes. ``selector``
    and ``spec`` name the selector and its canonical SPEC (:func:`gnnprep.hdgselect.select_spec`);
    ``inputs``: the files it was built from, which ``path`` must not be (refused, never overwritten)."""
    import h5py

    from gnnprep.atomic import atomic_output
    from gnnprep.meta import write_root_attrs

    idx_dtype = np.int32 if h.num_nodes < 2**31 else np.int64
    with atomic_output(path, inputs=inputs) as tmp:
        with h5py.File(tmp, "w") as f:
            parent = "node"
            for r in h.roots:
                parent = "node"
                for lvl in r.walk():
                    g = f.create_group(f"levels/{lvl.name}")
                    if lvl.offsets is not None and not lvl.fanout:
                        narrow = np.int32 if lvl.offsets[-1] < 2**31 else np.int64
                        g.create_dataset("offsets", data=lvl.offsets.astype(narrow))
                    if lvl.ids is not None:
                        g.create_dataset("ids", data=lvl.ids.astype(idx_dtype))
                    if lvl.weights is not None:
                        g.create_dataset("weights", data=lvl.weights.astype(np.float32))
                    g.attrs.update(kind=lvl.kind, parent=parent, fanout=int(lvl.fanout),
                                   num_parents=int(lvl.num_parents), num_children=int(lvl.num_children))
                    parent = lvl.name
            hdg_bytes = sum(ds.nbytes for g in f["levels"].values() for ds in g.values())
            summary = {"num_nodes": h.num_nodes, "selector": selector, "spec": spec, "seed": int(seed),
                       "levels": len(h.levels()), "hdg_bytes": int(hdg_bytes),
                       "graph_store_bytes": int(graph_store_bytes), "graph_adj_bytes": int(graph_adj_bytes)}
            write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance, graph_fingerprint=graph_fingerprint,
                             schema=json.dumps(h.schema()), channels=json.dumps(h.channels()), **summary)
    summary["channels"] = h.channels()
    return summary


MAX_DEPTH = 16  # levels below the root that a reader follows (the selectors make at most 2)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _dataset(g, path, name: str, kinds: str) -> np.ndarray | None:
    """``g[name]`` as a 1-D array of dtype kind in ``kinds`` (None when absent)."""
    if name not in g:
        return None
    ds = g[name]
    if not hasattr(ds, "dtype") or ds.ndim != 1 or ds.dtype.kind not in kinds:
        raise GnnprepError(f"{path}: {ds.name} is {getattr(ds, 'dtype', 'a group')} of shape {getattr(ds, 'shape', '')}; "
                           f"expected a 1-D {'integer' if kinds == 'iu' else 'float'} array")
    return ds[:]


def _schema_node(node, path, depth: int) -> tuple[str, str, int]:
    """(name, kind, fanout) of one schema node, checked."""
    where = f"{path}: schema"
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        raise GnnprepError(f"{where} has a level that is not an object or nests deeper than {MAX_DEPTH}; the HDG is corrupt")
    name, kind, fanout = node.get("level"), node.get("kind"), node.get("fanout") or 0
    if not isinstance(name, str) or not _NAME.fullmatch(name) or kind not in ("instances", "vertices") \
            or not isinstance(fanout, int) or fanout < 0:
        raise GnnprepError(f"{where} level {name!r}: kind {kind!r}, fanout {fanout!r}; expected a name, kind "
                           "instances or vertices and a fanout ≥ 0")
    if kind == "instances":
        children, combine, slots = node.get("children"), node.get("combine"), node.get("slots") or []
        if not isinstance(children, list) or len(children) != 1 or combine not in ("slots", "reduce") \
                or (combine == "slots" and (not fanout or not isinstance(slots, list) or len(slots) != fanout
                                            or not all(isinstance(x, str) and _NAME.fullmatch(x) for x in slots))):
            raise GnnprepError(f"{where} level {name!r}: expected one child level, combine slots (with one slot name "
                               "per fanout) or reduce")
    return name, kind, int(fanout)


def _offsets(g, path, name: str, num_parents: int, fanout: int) -> np.ndarray | None:
    """The level's CSC offsets, checked: P+1 entries from 0, non-decreasing (None with a fixed fanout)."""
    from gnnprep.store import check_indptr

    if fanout:
        return None
    offsets = _dataset(g, path, "offsets", "iu")
    if offsets is None:
        raise GnnprepError(f"{path}: /levels/{name} has no offsets and no fixed fanout")
    offsets = offsets.astype(np.int64)
    end = int(offsets[-1]) if len(offsets) else 0
    check_indptr(offsets, num_parents, end, f"{path}: /levels/{name}/offsets")
    return offsets


def _load_level(f, path, node, num_parents: int, n: int, depth: int = 1) -> Level:
    """One level and the levels below it, every array checked against the counts it implies, so
    that aggregation never indexes out of bounds: ids in [0, n), offsets from 0, non-decreasing and
    ending at the child count, weights finite and one per id."""
    from gnnprep.store import check_ids

    name, kind, fanout = _schema_node(node, path, depth)
    g = f.get(f"levels/{name}")
    if g is None or hasattr(g, "dtype"):
        raise GnnprepError(f"{path}: missing group /levels/{name}; the HDG is incomplete")
    offsets = _offsets(g, path, name, num_parents, fanout)
    num_children = num_parents * fanout if fanout else int(offsets[-1])
    ids = weights = child = None
    if kind == "vertices":
        ids = _dataset(g, path, "ids", "iu")
        if ids is None or len(ids) != num_children:
            raise GnnprepError(f"{path}: /levels/{name}/ids has {None if ids is None else len(ids)} entries; "
                               f"expected {num_children} (one per child)")
        ids = ids.astype(np.int64)
        check_ids(ids, n, f"{path}: /levels/{name}/ids")
        weights = _dataset(g, path, "weights", "f")
        if weights is not None and (len(weights) != num_children or not np.isfinite(weights).all()):
            raise GnnprepError(f"{path}: /levels/{name}/weights has {len(weights)} entries or non-finite values; "
                               f"expected {num_children} finite weights")
    else:
        child = _load_level(f, path, node["children"][0], num_children, n, depth + 1)
    return Level(name, kind, num_parents, fanout, offsets, ids, weights, node.get("combine"),
                 tuple(node.get("slots") or ()), child)


def read_hdg(path) -> tuple[Hdg, dict]:
    """The HDG in ``path`` and its root attributes, every level checked (:func:`_load_level`); the
    ``channels`` attribute must be the schema's channels."""
    from gnnprep.hag import plain_attrs
    from gnnprep.meta import open_artifact

    with open_artifact(path, expect=FORMAT) as f:
        n = f.attrs.get("num_nodes")
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise GnnprepError(f"{path}: root attribute 'num_nodes' is {n!r}; expected a count")
        schema = json_attr(f.attrs, "schema", path, dict)
        roots = schema.get("children")
        if not isinstance(roots, list) or not roots:
            raise GnnprepError(f"{path}: schema has no levels below the root; the HDG is corrupt")
        h = Hdg(int(n), tuple(_load_level(f, path, c, int(n), int(n)) for c in roots))
        channels = json_attr(f.attrs, "channels", path, list)
        if channels != h.channels() or len(set(channels)) != len(channels):
            raise GnnprepError(f"{path}: root attribute 'channels' is {channels}; expected the schema's channels "
                               f"{h.channels()}, each once")
        attrs = plain_attrs(f.attrs)
    return h, attrs


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
    from gnnprep.store import GraphStore

    with GraphStore(path) as g:
        indptr, indices = g.indptr(), g.indices()
        adj_bytes = sum(g.f[f"adj/{k}"].nbytes for k in g.f["adj"])
        typed_codes = g.node_type_codes() if typed else None
        node_type, type_names = typed_codes if typed_codes is not None else (None, None)
        return GraphInput(indptr, indices, g.fingerprint, int(adj_bytes), node_type, type_names)


def load_for(path, store: GraphStore, operators: tuple[str, ...], rows: str, reduce: str) -> tuple[Hdg, list[str]]:
    """The HDG at ``path`` for ``precompute --hdg`` over ``store``, and its channel names: refused
    unless every row is written (an HDG aggregates hop features of nodes outside the splits too),
    ``reduce`` is mean, sum or max, it was built for this graph, and no channel is named like one of
    ``operators``."""
    if rows != "all":
        raise GnnprepError("--hdg needs --rows all: an HDG aggregates hop features of nodes outside the splits too")
    if reduce not in REDUCES:
        raise GnnprepError(f"--hdg-reduce {reduce!r}: expected mean, sum or max")
    h, attrs = read_hdg(path)
    store.check_built_for(path, "HDG", attrs.get("graph_fingerprint"), h.num_nodes)
    channels = h.channels()
    clash = sorted(set(channels) & set(operators))
    if clash:
        raise GnnprepError(f"{path}: channel {clash[0]!r} has the name of an operator channel")
    return h, channels
