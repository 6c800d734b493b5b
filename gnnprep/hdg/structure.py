"""Hierarchical dependency graphs (HDG): neighbour selection beyond 1-hop, stored compactly.

Wang et al., "FlexGraph: A Flexible and Efficient Distributed Framework for GNN Training" (EuroSys
2021), NAU abstraction: a GNN's neighbours of v need not be its 1-hop in-neighbours. A
NeighborSelection stage builds, for every node v, a tree of *instances* whose leaves are graph
vertices; Aggregation runs bottom-up over that tree. For gnnprep an HDG is a precomputable graph
filter: the hierarchical aggregation of X becomes extra feature channels.

This module holds the structure (:class:`Hdg`, :class:`Level`), its aggregation, the ``hdg.h5``
format (:func:`read_hdg` checks every level's arrays against the counts they imply, so a corrupt
file is one error, never an out-of-bounds product) and :func:`read_graph`, the checked graph store
input of the selectors that build an HDG (``--select SPEC``), which are in :mod:`gnnprep.hdg.select`.

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
more sparse product with its 0/1 offsets matrix. :func:`folded` (what ``precompute --hdg`` aggregates
with mean or sum) makes each reduce level whose children are a vertex level one weighted vertex level
of its members: for ``mean``, h[p] = (1/k_p) Σ_{s ∈ children(p)} Σ_{c ∈ s} w_c X[ids[c]] / W_s =
Σ_c [w_c / (k_p W_s)] X[ids[c]] (k_p: the parent's instances, W_s: an instance's weight sum, 1 where
it is 0, as a vertex level's mean divides; an empty instance adds 0), summed (``Level.summed``); for
``sum`` the weights themselves. The same values up to float rounding, without an [instances, d]
array per hop: anchors at 1/40 of papers100M have 22.2M instances of which 97% are empty, and 0.66M
members.

``max`` replaces each Σ by a max: a vertex level gives h[p] = max_{c ∈ children(p)} w_c · X[ids[c]]
(elementwise; an empty parent gives 0) through the fused max-reduce row kernel
(:func:`gnnprep.sparse.kernels.spmm_rows_max`, again no per-member messages), a fixed-fanout reduce level
the max over its F instances, a variable-fanout one the max over each parent's instances; an
instance without members takes no part in a max above it, and a parent with none gives 0. A NaN is skipped as by ``np.fmax`` (NaN only where every member is NaN).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from gnnprep.core.errors import GnnprepError

REDUCES = ("mean", "sum", "max")   # how instance levels (and vertex levels) combine their children


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
    summed: bool = False            # a vertex level :func:`folded` made: its weights carry a mean's divisors

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


FOLD_PARENTS = 1 << 20   # parents folded at a time (the per-instance arrays of a chunk are transient)


def folded(hdg: Hdg, reduce: str) -> Hdg:
    """The HDG whose channels under ``reduce`` (mean or sum) equal ``hdg``'s to float rounding, with
    each reduce level over a vertex level made one vertex level of its members (module docstring):
    its weights w_c / (k_p W_s) for a mean (w_c for a sum), summed, its offsets per parent. ``max``:
    ``hdg`` itself (a max over instances is no weighted sum). Parents are folded :data:`FOLD_PARENTS`
    at a time, so only the folded arrays (n + 1 offsets, a weight per member) outlast the call."""
    if reduce == "max":
        return hdg

    def fold(lvl: Level) -> Level:
        if lvl.kind == "vertices":
            return lvl
        if lvl.combine != "reduce" or lvl.child.kind != "vertices":
            return dataclasses.replace(lvl, child=fold(lvl.child))
        v = lvl.child
        offsets = np.empty(lvl.num_parents + 1, dtype=np.int64)
        weights = np.empty(v.num_children, dtype=np.float32)
        offsets[0] = 0
        for p0 in range(0, lvl.num_parents, FOLD_PARENTS):
            p1 = min(lvl.num_parents, p0 + FOLD_PARENTS)
            c0, c1, inst = _children(lvl, p0, p1)     # the parents' instances (inst: offsets from 0)
            g0, g1, members = _children(v, c0, c1)   # their members (members: each instance's, from 0)
            w = v.weights[g0:g1].astype(np.float64) if v.weights is not None else np.ones(g1 - g0)
            if reduce == "mean" and g1 > g0:
                sizes = np.diff(members)
                filled = np.flatnonzero(sizes)
                sums = np.add.reduceat(w, members[filled])   # W_s of each instance with members
                sums[sums == 0] = 1                           # (a vertex level's mean divides a zero sum by 1)
                of = np.repeat(filled, sizes[filled])         # each member's instance (from c0)
                parent = of // lvl.fanout if lvl.fanout else np.searchsorted(inst, of, side="right") - 1
                w = w / (np.repeat(sums, sizes[filled]) * np.maximum(np.diff(inst), 1)[parent])
            weights[g0:g1] = w
            offsets[p0 + 1:p1 + 1] = members[inst[1:]] + g0
        return Level(lvl.name, "vertices", lvl.num_parents, offsets=offsets, ids=v.ids, weights=weights, summed=True)

    return Hdg(hdg.num_nodes, tuple(fold(r) for r in hdg.roots))


def reweighted(hdg: Hdg, weight) -> Hdg:
    """The HDG with every vertex level's member weights replaced by ``weight(ids, roots, w)``: the
    member's graph node id, the id of the node whose channel it feeds (the root of its tree), and
    its stored weight (1 where the level is unweighted), each an array over the level's members;
    it returns one weight per member (``precompute --hdg-weight``, a user function, see
    :mod:`gnnprep.precompute.user_operators`)."""

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
    from gnnprep.sparse.kernels import spmm_rows_max

    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)   # float16: numba computes in float32 (mean/sum do the same in scipy)
    p = len(offsets) - 1
    out = np.empty((p, x.shape[1]), dtype=x.dtype)
    ones = np.ones(max(p, len(x)), dtype=x.dtype)
    spmm_rows_max(np.ascontiguousarray(offsets, dtype=np.int64), np.ascontiguousarray(ids, dtype=np.int64),
                  np.ascontiguousarray(w, dtype=x.dtype), 0, ones, ones, 0.0, np.ascontiguousarray(x), out)
    return out


def _child_range(lvl: Level, p0: int, p1: int) -> tuple[int, int]:
    """(c0, c1): the children of parents p0..p1-1 of ``lvl``, a contiguous range (children are
    stored grouped by parent, in parent order)."""
    if lvl.offsets is None:
        return p0 * lvl.fanout, p1 * lvl.fanout
    return int(lvl.offsets[p0]), int(lvl.offsets[p1])


def _children(lvl: Level, p0: int, p1: int) -> tuple[int, int, np.ndarray]:
    """(c0, c1, offsets from 0): :func:`_child_range` and each parent's children's offsets."""
    c0, c1 = _child_range(lvl, p0, p1)
    if lvl.offsets is None:
        return c0, c1, np.arange(p1 - p0 + 1, dtype=np.int64) * lvl.fanout
    return c0, c1, np.asarray(lvl.offsets[p0:p1 + 1], dtype=np.int64) - c0


def _empty(lvl: Level, p0: int, p1: int) -> np.ndarray:
    """Whether each of the level's parents p0..p1−1 has no graph vertex below it (bool [p1 − p0])."""
    c0, c1, offsets = _children(lvl, p0, p1)
    if lvl.kind == "vertices":
        return np.diff(offsets) == 0
    return _all_empty(lvl, offsets, _empty(lvl.child, c0, c1))


def _all_empty(lvl: Level, offsets: np.ndarray, child: np.ndarray) -> np.ndarray:
    """Whether each parent of an inner level (its children's ``offsets`` from 0) has only empty
    children (``child``: each child's emptiness)."""
    if lvl.fanout:
        return child.reshape(len(offsets) - 1, lvl.fanout).all(axis=1)
    filled = np.concatenate([[0], np.cumsum(~child)])
    return filled[offsets[1:]] == filled[offsets[:-1]]


def _aggregate_level(lvl: Level, x: np.ndarray, reduce: str, p0: int = 0, p1: int | None = None
                     ) -> np.ndarray | list[tuple[str, np.ndarray]]:
    """[p1 − p0, d] for the level's parents p0..p1−1 (or the slot channels of a slots level)."""
    p1 = lvl.num_parents if p1 is None else p1
    p = p1 - p0
    c0, c1, offsets = _children(lvl, p0, p1)
    if lvl.kind == "vertices":
        ids = lvl.ids[c0:c1]
        w = lvl.weights[c0:c1] if lvl.weights is not None else np.ones(c1 - c0, dtype=x.dtype)
        if reduce == "max":
            return _segment_max(offsets, ids, w, x)
        if x.dtype == np.float32:   # (precompute's hops: on all cores, the divisor in the same pass)
            from gnnprep.sparse.kernels import segment_sum

            out, den = segment_sum(offsets, ids, w, x)
        else:
            m = sp.csr_matrix((w.astype(x.dtype, copy=False), ids, offsets), shape=(p, len(x)))
            out = np.asarray(m @ x)
            den = np.asarray(m.sum(axis=1)).ravel() if reduce == "mean" else None
        if reduce == "mean" and not lvl.summed:
            out /= np.where(den == 0, 1, den)[:, None].astype(x.dtype)
        return out
    h = _aggregate_level(lvl.child, x, reduce, c0, c1)
    d = x.shape[1]
    none = None
    if reduce == "max" and lvl.combine != "slots":
        # an instance without members is no candidate of the max (its 0 would clamp every channel at
        # 0 from below: anchors at 1/40 of papers100M, 97% of the (node, set) instances empty, gave a
        # channel with no negative value where X is half negative); a parent with none gives 0
        empty = _empty(lvl.child, c0, c1)
        if empty.any():
            h[empty] = -np.inf
            none = _all_empty(lvl, offsets, empty)   # (the children's emptiness, not asked again)
    if lvl.fanout:
        h = h.reshape(p, lvl.fanout, d)
        if lvl.combine == "slots":
            return [(name, np.ascontiguousarray(h[:, i])) for i, name in enumerate(lvl.slots)]
        if reduce == "max":
            out = np.fmax.reduce(h, axis=1)   # NaN as in the kernel: skipped unless all are
        else:
            return h.mean(axis=1) if reduce == "mean" else h.sum(axis=1)
    elif reduce == "max":
        out = _segment_max(offsets, np.arange(len(h), dtype=np.int64), np.ones(len(h), dtype=h.dtype), h)
    if reduce == "max":
        if none is not None:
            out[none] = 0
        return out
    ind = sp.csr_matrix((np.ones(len(h), dtype=x.dtype), np.arange(len(h)), offsets), shape=(p, len(h)))
    out = np.asarray(ind @ h)
    if reduce == "mean":
        cnt = np.diff(offsets)
        out /= np.maximum(cnt, 1)[:, None].astype(x.dtype)
    return out


def aggregate(hdg: Hdg, x: np.ndarray, reduce: str = "mean", rows: tuple[int, int] | None = None
              ) -> dict[str, np.ndarray]:
    """Bottom-up hierarchical aggregation of node features ``x`` [n, d] over the HDG: one [n, d]
    array per channel (see :mod:`gnnprep.hdg.select` for the formulas per selector); ``reduce`` is
    mean, sum or max (module docstring). ``rows`` (r0, r1): only the channels' rows r0..r1−1, whose
    trees are contiguous ranges of every level (:func:`root_blocks` cuts the nodes so that those
    ranges' intermediate rows fit a memory budget); the same values as those rows of the whole."""
    if reduce not in REDUCES:
        raise GnnprepError(f"reduce {reduce!r}: expected mean, sum or max")
    x = np.asarray(x)
    if x.ndim != 2 or len(x) != hdg.num_nodes:
        raise GnnprepError(f"features of shape {x.shape}; expected [{hdg.num_nodes}, d]")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    r0, r1 = (0, hdg.num_nodes) if rows is None else (int(rows[0]), int(rows[1]))
    out: dict[str, np.ndarray] = {}
    for r in hdg.roots:
        h = _aggregate_level(r, x, reduce, r0, r1)
        if isinstance(h, list):
            out.update(h)
        else:
            out[r.name] = h
    return out


ROOT_STEP = 4096   # nodes between the places root_blocks may cut


def aggregation_bytes(hdg: Hdg, d: int, r0: int, r1: int) -> int:
    """What :func:`aggregate` holds for nodes r0..r1−1 at d float32 columns: every level's rows in
    their trees (d · 4 bytes each: the levels' results and the channels) and the vertex levels'
    members (16 bytes each: ids, weights and the product's copies of them)."""
    total = 0
    for root in hdg.roots:
        p0, p1 = r0, r1
        for lvl in root.walk():
            c0, c1 = _child_range(lvl, p0, p1)   # (no offsets: root_blocks asks this once a step)
            total += (p1 - p0) * d * 4
            if lvl.kind == "vertices":
                total += (c1 - c0) * 16
            p0, p1 = c0, c1
    return total


def root_blocks(hdg: Hdg, d: int, room: int) -> list[tuple[int, int]]:
    """Node ranges whose :func:`aggregate` holds about ``room`` bytes at most at d columns (cut every
    :data:`ROOT_STEP` nodes at the finest; a single step larger than ``room`` is a block of its own):
    ``precompute --hdg`` aggregates a hop's column block range by range, so its peak is bounded by
    the budget, not by the HDG's instances (anchors at 1/40 of papers100M: 22.2M (node, set)
    instances, 5.7 GB of intermediate rows at d = 64 held at once before)."""
    n = hdg.num_nodes
    cuts = list(range(0, n, ROOT_STEP)) + [n]
    blocks, start = [], 0
    for a, z in zip(cuts[:-1], cuts[1:]):
        if z > start + ROOT_STEP and aggregation_bytes(hdg, d, start, z) > room:
            blocks.append((start, a))
            start = a
    if start < n or not blocks:
        blocks.append((start, n))
    return blocks
