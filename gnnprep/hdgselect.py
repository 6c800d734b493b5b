"""NeighborSelection for hierarchical dependency graphs (:mod:`gnnprep.hdg`): the selectors of
``gnnprep hdg --select SPEC``, their configs and the SPEC parser.

Selectors (``--select SPEC``):

- ``random-walk:walks=W,length=L,topk=K[,restart=P]`` — PinSage (Ying et al., KDD 2018): the K most
  visited nodes of W random walks of L steps with restart probability P from v (see
  :mod:`gnnprep.walks`), weighted by visit count c(v,u). Importance pooling:
  ``h_v = Σ_u c(v,u) x_u / Σ_u c(v,u)`` (mean) or ``Σ_u c(v,u) x_u`` (sum).
- ``hop-shells:K[,cap=C]`` — JK-Net-style hop shells (Xu et al., ICML 2018): shell i of v is
  ``{u : d(u→v) = i}``, i = 1..K, d the shortest directed path length along the stored in-lists
  (u reaches v); at most C members per shell, a seeded uniform sample without replacement. One output
  channel per shell: ``h_v^(i) = mean/sum_{u ∈ shell_i(v)} x_u``.
- ``anchors:sets=S,size=Z[,hops=Q]`` — P-GNN (You et al., ICML 2019): S anchor sets A_1..A_S of Z
  distinct nodes drawn uniformly (seeded). Instance (v, s) holds the members of A_s with P-GNN's
  q-hop distance weight ``w(v,u) = 1/(d(u→v)+1)`` for d ≤ Q (default 2) and weight 0 — not stored —
  beyond. ``h_v = 1/S Σ_s M_s(v)``, ``M_s(v) = Σ_{u∈A_s} w x_u / Σ_{u∈A_s} w`` (mean; an instance
  with no member within Q hops contributes 0), or ``Σ_s Σ_{u∈A_s} w x_u`` (sum).
- ``metapath:NAME=T1-T2-…-TL[,…][,cap=C]`` — MAGNN metapath instances (Fu et al., WWW 2020) on a
  typed graph store: for a target v of type T1 every path v ← u2 ← … ← uL with u_i of type T_i
  (at most C per target, seeded), levels ``node → NAME`` (instances, reduce) ``→ NAME_members``
  (fanout L, the path's nodes, target included). ``h_v = mean_{instances I of v} mean_{u∈I} x_u``
  (mean) or ``Σ_I Σ_{u∈I} x_u`` (sum); one channel per metapath. Instances are enumerated in
  blocks of targets (SeHGNN-style prefix propagation without enumeration is not implemented).

Memory: the hop-shell and anchor selectors run breadth-first frontiers as scipy sparse products
(hop shells in blocks of rows), so they hold the uncapped frontiers of a block; this first version
targets graphs whose K-hop balls fit in RAM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from gnnprep.errors import GnnprepError
from gnnprep.hdg import Hdg, Level

SELECTORS = ("random-walk", "hop-shells", "anchors", "metapath")


# -- selector configs and SPEC parsing ------------------------------------------------------------------
@dataclass(frozen=True)
class RandomWalkSelect:
    walks: int
    length: int
    topk: int
    restart: float = 0.0
    name: str = field(default="random-walk", init=False)


@dataclass(frozen=True)
class HopShellsSelect:
    hops: int
    cap: int | None = None
    name: str = field(default="hop-shells", init=False)


@dataclass(frozen=True)
class AnchorsSelect:
    sets: int
    size: int
    hops: int = 2
    name: str = field(default="anchors", init=False)


@dataclass(frozen=True)
class MetapathSelect:
    paths: tuple[tuple[str, tuple[str, ...]], ...]   # (channel name, node types T1 .. TL)
    cap: int | None = None                           # instances kept per target (seeded sample)
    name: str = field(default="metapath", init=False)


Select = RandomWalkSelect | HopShellsSelect | AnchorsSelect | MetapathSelect


def _int_field(spec: str, key: str, text: str, lo: int) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < lo:
        raise GnnprepError(f"--select {spec!r}: {key}={text!r}; expected an integer ≥ {lo}")
    return int(text)


def _fields(spec: str, body: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in [p for p in body.split(",") if p.strip()] if body else []:
        if "=" not in part:
            raise GnnprepError(f"--select {spec!r}: {part.strip()!r} is not key=value; expected keys "
                               f"{', '.join(required + optional)}")
        key, value = (s.strip() for s in part.split("=", 1))
        if key not in required + optional:
            raise GnnprepError(f"--select {spec!r}: unknown key {key!r}; expected {', '.join(required + optional)}")
        if key in out:
            raise GnnprepError(f"--select {spec!r}: {key} given twice")
        out[key] = value
    missing = [k for k in required if k not in out]
    if missing:
        raise GnnprepError(f"--select {spec!r}: missing {', '.join(missing)}; expected "
                           + ",".join(f"{k}=N" for k in required))
    return out


def parse_select(spec: str) -> Select:
    """Parse ``--select SPEC`` (see the module docstring) into a selector config."""
    kind, _, body = spec.partition(":")
    kind = kind.strip()
    if kind == "random-walk":
        f = _fields(spec, body, ("walks", "length", "topk"), ("restart",))
        restart = 0.0
        if "restart" in f:
            try:
                restart = float(f["restart"])
            except ValueError:
                restart = -1.0
            if not 0.0 <= restart <= 1.0:
                raise GnnprepError(f"--select {spec!r}: restart={f['restart']!r}; expected a probability in [0, 1]")
        return RandomWalkSelect(_int_field(spec, "walks", f["walks"], 1), _int_field(spec, "length", f["length"], 1),
                                _int_field(spec, "topk", f["topk"], 1), restart)
    if kind == "hop-shells":
        head, _, rest = body.partition(",")
        if not head.strip():
            raise GnnprepError(f"--select {spec!r}: missing the number of shells; expected hop-shells:K[,cap=C]")
        hops = _int_field(spec, "K", head, 1)
        f = _fields(spec, rest, (), ("cap",))
        cap = _int_field(spec, "cap", f["cap"], 1) if "cap" in f else None
        return HopShellsSelect(hops, cap)
    if kind == "anchors":
        f = _fields(spec, body, ("sets", "size"), ("hops",))
        return AnchorsSelect(_int_field(spec, "sets", f["sets"], 1), _int_field(spec, "size", f["size"], 1),
                             _int_field(spec, "hops", f["hops"], 0) if "hops" in f else 2)
    if kind == "metapath":
        paths, cap = [], None
        for part in [p.strip() for p in body.split(",") if p.strip()]:
            key, eq, value = (t.strip() for t in part.partition("="))
            if not eq or not key or not value:
                raise GnnprepError(f"--select {spec!r}: {part!r}; expected NAME=T1-T2-...-TL or cap=C")
            if key == "cap":
                cap = _int_field(spec, "cap", value, 1)
                continue
            types = tuple(t.strip() for t in value.split("-"))
            if len(types) < 2 or not all(types):
                raise GnnprepError(f"--select {spec!r}: {key}={value!r}; expected at least two node types joined by -")
            if key in [k for k, _ in paths]:
                raise GnnprepError(f"--select {spec!r}: metapath name {key!r} given twice")
            paths.append((key, types))
        if not paths:
            raise GnnprepError(f"--select {spec!r}: no metapath; expected metapath:NAME=T1-T2-T1[,...][,cap=C]")
        return MetapathSelect(tuple(paths), cap)
    raise GnnprepError(f"--select {spec!r}: unknown selector {kind!r}; expected one of "
                       "random-walk:walks=W,length=L,topk=K[,restart=P], hop-shells:K[,cap=C], "
                       "anchors:sets=S,size=Z[,hops=Q], metapath:NAME=T1-T2-T1[,cap=C]")


def select_spec(sel: Select) -> str:
    """The canonical SPEC string of a selector config."""
    if isinstance(sel, RandomWalkSelect):
        return f"random-walk:walks={sel.walks},length={sel.length},topk={sel.topk},restart={sel.restart:g}"
    if isinstance(sel, HopShellsSelect):
        return f"hop-shells:{sel.hops}" + (f",cap={sel.cap}" if sel.cap is not None else "")
    if isinstance(sel, MetapathSelect):
        return "metapath:" + ",".join(f"{k}={'-'.join(t)}" for k, t in sel.paths) + \
            (f",cap={sel.cap}" if sel.cap is not None else "")
    return f"anchors:sets={sel.sets},size={sel.size},hops={sel.hops}"


# -- the selectors ------------------------------------------------------------------------------------
def _csr_offsets(rows: np.ndarray, num_rows: int) -> np.ndarray:
    offsets = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=offsets[1:])
    return offsets


def _hash_keys(seed: int, a: np.ndarray, b: np.ndarray, c: int) -> np.ndarray:
    """A splitmix64 key per (a, b) entry: a reproducible random order that does not depend on how
    the work was split into blocks."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + a.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             + b.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03) + np.uint64(c) * np.uint64(0x8CB92BA72F3D8DD7))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _adjacency(indptr: np.ndarray, indices: np.ndarray) -> sp.csr_matrix:
    n = len(indptr) - 1
    return sp.csr_matrix((np.ones(len(indices), dtype=np.int8), indices, indptr), shape=(n, n))


def select_random_walk(indptr, indices, sel: RandomWalkSelect, seed: int = 0) -> Hdg:
    from gnnprep.walks import walk_topk

    n = len(indptr) - 1
    offsets, ids, counts = walk_topk(indptr, indices, sel.walks, sel.length, sel.topk, sel.restart, seed)
    return Hdg(n, (Level("topk", "vertices", n, offsets=offsets, ids=ids, weights=counts.astype(np.float32)),))


def select_hop_shells(indptr, indices, sel: HopShellsSelect, seed: int = 0, block_rows: int = 1 << 14,
                      progress=lambda stage, done, total: None) -> Hdg:
    """Exact-distance shells by breadth-first frontiers, F_i = (F_{i-1}·A) minus the nodes seen, one
    block of rows at a time (row v of F_i: the nodes at distance i from v)."""
    n = len(indptr) - 1
    k = sel.hops
    a = _adjacency(indptr, indices)
    shell_rows, members = [], []
    for r0 in range(0, n, block_rows):
        r1 = min(n, r0 + block_rows)
        rows = np.arange(r0, r1)
        seen = sp.csr_matrix((np.ones(r1 - r0, dtype=np.int8), rows, np.arange(r1 - r0 + 1)), shape=(r1 - r0, n))
        front = seen
        for i in range(k):
            nxt = (front @ a).tocsr()
            nxt.data[:] = 1
            nxt = (nxt - nxt.multiply(seen)).tocsr()
            nxt.eliminate_zeros()
            nxt.sort_indices()
            seen = (seen + nxt).tocsr()
            seen.data[:] = 1
            front = nxt
            r = np.repeat(rows, np.diff(nxt.indptr))
            u = nxt.indices.astype(np.int64)
            if sel.cap is not None and len(u):
                key = _hash_keys(seed, r, u, i + 1)
                order = np.lexsort((key, r))
                r, u = r[order], u[order]
                starts = np.searchsorted(r, r, side="left")
                keep = (np.arange(len(r)) - starts) < sel.cap
                r, u = r[keep], u[keep]
                o = np.lexsort((u, r))
                r, u = r[o], u[o]
            shell_rows.append(r * k + i)
            members.append(u)
        progress("hop shells", r1, n)
    shell = np.concatenate(shell_rows) if shell_rows else np.empty(0, np.int64)
    ids = np.concatenate(members) if members else np.empty(0, np.int64)
    order = np.argsort(shell, kind="stable")
    shell, ids = shell[order], ids[order]
    leaf = Level("shell_members", "vertices", n * k, offsets=_csr_offsets(shell, n * k), ids=ids)
    return Hdg(n, (Level("shell", "instances", n, fanout=k, combine="slots",
                         slots=tuple(f"hop{i}" for i in range(1, k + 1)), child=leaf),))


def select_anchors(indptr, indices, sel: AnchorsSelect, seed: int = 0) -> Hdg:
    """P-GNN anchor sets with q-hop distance weights 1/(d+1): distances from every distinct anchor by
    breadth-first frontiers over columns, D_k = (A·D_{k-1}) minus the pairs seen."""
    n = len(indptr) - 1
    if sel.size > n:
        raise GnnprepError(f"--select anchors: size={sel.size} exceeds the graph's {n} nodes; expected size ≤ {n}")
    rng = np.random.default_rng(seed)
    sets = np.stack([rng.choice(n, sel.size, replace=False) for _ in range(sel.sets)]).astype(np.int64)
    anchors, col = np.unique(sets, return_inverse=True)
    col = col.reshape(sets.shape)
    u_count = len(anchors)
    a = _adjacency(indptr, indices)
    # dist[v, j] = d(anchors[j] → v) + 1 for d ≤ hops
    front = sp.csr_matrix((np.ones(u_count, dtype=np.int8), (anchors, np.arange(u_count))), shape=(n, u_count))
    seen = front.copy()
    dist = front.astype(np.float64)
    for d in range(1, sel.hops + 1):
        nxt = (a @ front).tocsr()
        nxt.data[:] = 1
        nxt = (nxt - nxt.multiply(seen)).tocsr()
        nxt.eliminate_zeros()
        seen = (seen + nxt).tocsr()
        seen.data[:] = 1
        dist = dist + nxt.astype(np.float64) * (d + 1)
        front = nxt
    dist = dist.tocsc()
    inst, ids, w = [], [], []
    for s in range(sel.sets):
        sub = dist[:, col[s]].tocoo()  # [n, Z]: rows v, columns the members of A_s
        inst.append(sub.row.astype(np.int64) * sel.sets + s)
        ids.append(sets[s][sub.col])
        w.append(1.0 / sub.data)
    inst_a = np.concatenate(inst) if inst else np.empty(0, np.int64)
    ids_a = np.concatenate(ids) if ids else np.empty(0, np.int64)
    w_a = np.concatenate(w) if w else np.empty(0)
    order = np.lexsort((ids_a, inst_a))
    inst_a, ids_a, w_a = inst_a[order], ids_a[order], w_a[order]
    leaf = Level("anchor_members", "vertices", n * sel.sets, offsets=_csr_offsets(inst_a, n * sel.sets),
                 ids=ids_a, weights=w_a.astype(np.float32))
    return Hdg(n, (Level("anchor_set", "instances", n, fanout=sel.sets, combine="reduce", child=leaf),))


def _expand(indptr, indices, node_type, paths: np.ndarray, t: int) -> np.ndarray:
    """Extend every path [P, l] by each in-neighbour of its last node that has type ``t``."""
    last = paths[:, -1]
    deg = indptr[last + 1] - indptr[last]
    total = int(deg.sum())
    rep = np.repeat(np.arange(len(paths)), deg)
    first = np.repeat(np.cumsum(deg) - deg, deg)
    nbr = indices[np.repeat(indptr[last], deg) + np.arange(total) - first]
    keep = node_type[nbr] == t
    return np.concatenate([paths[rep[keep]], nbr[keep][:, None]], axis=1)


def select_metapath(indptr, indices, sel: MetapathSelect, node_type: np.ndarray | None,
                    type_names: list[str] | None, seed: int = 0, block: int = 4096) -> Hdg:
    """MAGNN-style metapath instances (Fu et al., WWW 2020): for each target v of type T1, every
    path v ← u2 ← … ← uL with u_i of type T_i along stored in-lists; the instance's members are its
    L path nodes (target included), the node's channel aggregates its instances. With ``cap`` at
    most C instances per target are kept, a seeded sample by splitmix64 keys of (target, path
    position), independent of the block split. Targets are enumerated in blocks of ``block`` so the
    expansion's memory follows the block, not the graph."""
    if node_type is None or type_names is None:
        raise GnnprepError("--select metapath: needs a heterogeneous graph store (typed nodes, e.g. ingested from "
                           "the ogbn-mag layout); this store has no /nodes/type")
    n = len(indptr) - 1
    code = {t: i for i, t in enumerate(type_names)}
    roots = []
    for name, types in sel.paths:
        unknown = [t for t in types if t not in code]
        if unknown:
            raise GnnprepError(f"--select metapath: {name} uses node type {unknown[0]!r}; the store has "
                               f"{', '.join(type_names)}")
        targets = np.flatnonzero(node_type == code[types[0]])
        parts = []
        for b0 in range(0, len(targets), block):
            paths = targets[b0:b0 + block, None].astype(np.int64)
            for t in types[1:]:
                paths = _expand(indptr, indices, node_type, paths, code[t])
            if sel.cap is not None and len(paths):
                # rank each target's instances by a key of (target, members), keep the first cap
                key = _hash_keys(seed, paths[:, 0], _hash_keys(seed, paths[:, -1], paths[:, 1], len(types)), 0)
                order = np.lexsort((key, paths[:, 0]))
                paths = paths[order]
                start = np.searchsorted(paths[:, 0], paths[:, 0], side="left")
                paths = paths[np.arange(len(paths)) - start < sel.cap]
            order = np.lexsort(paths.T[::-1])  # by target, then members: a canonical order
            parts.append(paths[order])
        paths = np.concatenate(parts) if parts else np.empty((0, len(types)), np.int64)
        leaf = Level(f"{name}_members", "vertices", len(paths), fanout=len(types), ids=paths.reshape(-1))
        roots.append(Level(name, "instances", n, offsets=_csr_offsets(paths[:, 0], n), combine="reduce", child=leaf))
    return Hdg(n, tuple(roots))


def select(indptr: np.ndarray, indices: np.ndarray, sel: Select, seed: int = 0, progress=None,
           node_type: np.ndarray | None = None, type_names: list[str] | None = None) -> Hdg:
    """NeighborSelection: build the HDG of ``sel`` over the CSR (row v: the sources v aggregates from)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    if isinstance(sel, MetapathSelect):
        return select_metapath(indptr, indices, sel, node_type, type_names, seed)
    if isinstance(sel, RandomWalkSelect):
        return select_random_walk(indptr, indices, sel, seed)
    if isinstance(sel, HopShellsSelect):
        return select_hop_shells(indptr, indices, sel, seed, progress=progress or (lambda *a: None))
    if isinstance(sel, AnchorsSelect):
        return select_anchors(indptr, indices, sel, seed)
    raise GnnprepError(f"unknown selector {sel!r}")
