"""NeighborSelection for hierarchical dependency graphs (:mod:`gnnprep.hdg`): the selectors of
``gnnprep hdg --select SPEC``, their configs and the SPEC parser.

Selectors (``--select SPEC``):

- ``random-walk:walks=W,length=L,topk=K[,restart=P]`` — PinSage (Ying et al., KDD 2018): the K most
  visited nodes of W random walks of L steps with restart probability P from v (see
  :mod:`gnnprep.hdg.walks`), weighted by visit count c(v,u). Importance pooling:
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

Work and memory: every selector works in short calls, so a SIGTERM or Ctrl-C is acted on between
them, and holds bounded intermediates. Hop shells run one breadth-first search per node in a numba
kernel (:func:`gnnprep.hdg.walks.hop_shells`, calls of ~0.2 s; exact shells still need every node's
full (K−1)-hop ball: ``cap`` bounds what is kept, not that search); random walks run their kernel
on chunks of start nodes; anchors run breadth-first frontiers as scipy sparse products over blocks
of anchors and metapaths expand blocks of targets, a block whose next product or expansion would
touch more than ``WORK_PER_CALL`` entries being halved (the size grows back after light blocks).
SPEC values are bounded (``walks·length`` ≤ ``MAX_WALK_STEPS`` per node, K and Q ≤ ``MAX_HOPS``, …)
and the HDG's fixed-size arrays are checked against the available memory before selection starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.hdg.structure import Hdg, Level

SELECTORS = ("random-walk", "hop-shells", "anchors", "metapath")
MAX_WALK_STEPS = 10**6      # walks·length per start node
MAX_HOPS = 64               # hop-shells K, anchors hops, metapath length
MAX_COUNT = 10**9           # any other count (topk, cap, sets, size)
WORK_PER_CALL = 1 << 22     # entries one sparse product / expansion may touch (≈ 0.1 s)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")  # metapath names become level and channel names


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


def _int_field(spec: str, key: str, text: str, lo: int, hi: int = MAX_COUNT) -> int:
    if not re.fullmatch(r"\d{1,30}", text.strip()) or not lo <= int(text) <= hi:
        raise OptionError("--select", f"{spec!r}: {key}={text!r}; expected an integer ≥ {lo}"
                          + (f" and ≤ {hi:,}" if re.fullmatch(r"\d+", text.strip()) and int(text) >= lo else ""))
    return int(text)


def _fields(spec: str, body: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in [p for p in body.split(",") if p.strip()] if body else []:
        if "=" not in part:
            raise OptionError("--select", f"{spec!r}: {part.strip()!r} is not key=value; expected keys "
                                          f"{', '.join(required + optional)}")
        key, value = (s.strip() for s in part.split("=", 1))
        if key not in required + optional:
            raise OptionError("--select", f"{spec!r}: unknown key {key!r}; expected {', '.join(required + optional)}")
        if key in out:
            raise OptionError("--select", f"{spec!r}: {key} given twice")
        out[key] = value
    missing = [k for k in required if k not in out]
    if missing:
        raise OptionError("--select", f"{spec!r}: missing {', '.join(missing)}; expected "
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
                raise OptionError("--select", f"{spec!r}: restart={f['restart']!r}; expected a probability in [0, 1]")
        walks = _int_field(spec, "walks", f["walks"], 1, MAX_WALK_STEPS)
        length = _int_field(spec, "length", f["length"], 1, MAX_WALK_STEPS)
        if walks * length > MAX_WALK_STEPS:
            raise OptionError("--select", f"{spec!r}: walks·length = {walks * length:,} steps per node; expected at most "
                                          f"{MAX_WALK_STEPS:,}")
        return RandomWalkSelect(walks, length, _int_field(spec, "topk", f["topk"], 1), restart)
    if kind == "hop-shells":
        head, _, rest = body.partition(",")
        if not head.strip():
            raise OptionError("--select", f"{spec!r}: missing the number of shells; expected hop-shells:K[,cap=C]")
        hops = _int_field(spec, "K", head, 1, MAX_HOPS)
        f = _fields(spec, rest, (), ("cap",))
        cap = _int_field(spec, "cap", f["cap"], 1) if "cap" in f else None
        return HopShellsSelect(hops, cap)
    if kind == "anchors":
        f = _fields(spec, body, ("sets", "size"), ("hops",))
        return AnchorsSelect(_int_field(spec, "sets", f["sets"], 1), _int_field(spec, "size", f["size"], 1),
                             _int_field(spec, "hops", f["hops"], 0, MAX_HOPS) if "hops" in f else 2)
    if kind == "metapath":
        paths, cap = [], None
        for part in [p.strip() for p in body.split(",") if p.strip()]:
            key, eq, value = (t.strip() for t in part.partition("="))
            if not eq or not key or not value:
                raise OptionError("--select", f"{spec!r}: {part!r}; expected NAME=T1-T2-...-TL or cap=C")
            if key == "cap":
                cap = _int_field(spec, "cap", value, 1)
                continue
            types = tuple(t.strip() for t in value.split("-"))
            if not 2 <= len(types) <= MAX_HOPS or not all(types):
                raise OptionError("--select", f"{spec!r}: {key}={value!r}; expected at least two node types joined by - "
                                              f"(at most {MAX_HOPS})")
            if not _NAME.fullmatch(key):
                raise OptionError("--select", f"{spec!r}: metapath name {key!r}; expected letters, digits and _ "
                                              "(it names a channel)")
            taken = {k for k, _ in paths} | {f"{k}_members" for k, _ in paths}
            if key in taken or f"{key}_members" in taken or key == "node":
                raise OptionError("--select", f"{spec!r}: metapath name {key!r} given twice or clashes with another "
                                              "metapath's level (NAME_members)")
            paths.append((key, types))
        if not paths:
            raise OptionError("--select", f"{spec!r}: no metapath; expected metapath:NAME=T1-T2-T1[,...][,cap=C]")
        return MetapathSelect(tuple(paths), cap)
    raise OptionError("--select", f"{spec!r}: unknown selector {kind!r}; expected one of "
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
    # path counts as int32: a node reached from 256 frontier nodes summed to 0 in int8 and was dropped
    return sp.csr_matrix((np.ones(len(indices), dtype=np.int32), indices, indptr), shape=(n, n))


def in_blocks(total: int, size: int, run, progress=None, stage: str = "", limit: int = WORK_PER_CALL,
              start: int = 0):
    """Yield ``(i0, i1, result)`` of ``run(i0, i1)`` over consecutive ranges of [start, total): ``run``
    returns (result, peak work) or None when the range would make one call touch more than
    ``limit`` entries; such a range is halved and retried, and the size grows back (up to
    ``size``) after light ranges."""
    i0, cur = int(start), max(1, size)
    while i0 < total:
        i1 = min(total, i0 + cur)
        got = run(i0, i1)
        if got is None:
            cur = max(1, (i1 - i0) // 2)
            continue
        yield i0, i1, got[0]
        i0 = i1
        if got[1] < limit // 4:
            cur = min(size, cur * 2)
        if progress is not None:
            progress(stage, i0, total)


def _in_blocks(total: int, size: int, run, progress=None, stage: str = "") -> list:
    """The results of :func:`in_blocks`, in order."""
    return [r for _, _, r in in_blocks(total, size, run, progress, stage)]


def _frontiers(m: sp.csr_matrix, work: np.ndarray, starts: np.ndarray, hops: int):
    """Breadth-first frontiers from ``starts`` along the rows of ``m``: F_0 = the starts, F_i =
    (F_{i−1}·m) minus the nodes seen (row j of F_i: the nodes at distance i from starts[j]), sorted.
    Returns ([F_1 .. F_hops], peak work), or None when a product would touch more than
    ``WORK_PER_CALL`` entries (work[u]: the entries of row u) and there is more than one start."""
    n, b = m.shape[0], len(starts)
    seen = sp.csr_matrix((np.ones(b, dtype=np.int8), starts, np.arange(b + 1)), shape=(b, n))
    front, fronts, peak = seen, [], 0
    for _ in range(hops):
        cost = int(work[front.indices].sum())
        if cost > WORK_PER_CALL and b > 1:
            return None
        peak = max(peak, cost)
        nxt = (front @ m).tocsr()
        nxt.data[:] = 1
        nxt = (nxt - nxt.multiply(seen)).tocsr()
        nxt.eliminate_zeros()
        nxt.sort_indices()
        seen = (seen + nxt).tocsr()
        seen.data[:] = 1
        fronts.append(nxt)
        front = nxt
    return fronts, peak


def select_random_walk(indptr, indices, sel: RandomWalkSelect, seed: int = 0) -> Hdg:
    from gnnprep.hdg.walks import walk_topk

    n = len(indptr) - 1
    offsets, ids, counts = walk_topk(indptr, indices, sel.walks, sel.length, sel.topk, sel.restart, seed)
    return Hdg(n, (Level("topk", "vertices", n, offsets=offsets, ids=ids, weights=counts.astype(np.float32)),))


def select_hop_shells(indptr, indices, sel: HopShellsSelect, seed: int = 0, block_rows: int = 1 << 14,
                      progress=lambda stage, done, total: None) -> Hdg:
    """Exact-distance shells by a breadth-first search per node (:func:`gnnprep.hdg.walks.hop_shells`,
    calls of at most ``block_rows`` nodes), capped by seeded keys."""
    from gnnprep.hdg.walks import hop_shells

    n = len(indptr) - 1
    k = sel.hops
    counts, ids = hop_shells(indptr, indices, k, sel.cap, seed, max_starts=block_rows, progress=progress)
    offsets = np.zeros(n * k + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    leaf = Level("shell_members", "vertices", n * k, offsets=offsets, ids=ids)
    return Hdg(n, (Level("shell", "instances", n, fanout=k, combine="slots",
                         slots=tuple(f"hop{i}" for i in range(1, k + 1)), child=leaf),))


def _anchor_distances(indptr, indices, anchors: np.ndarray, hops: int) -> sp.csc_matrix:
    """[n, anchors]: d(anchors[j] → v) + 1 where d ≤ hops (else not stored), by frontiers from the
    anchors along the out-lists (the transposed in-lists), in blocks of anchors."""
    n = len(indptr) - 1
    out_lists = _adjacency(indptr, indices).T.tocsr()
    work = np.diff(out_lists.indptr)

    def run(j0, j1):
        got = _frontiers(out_lists, work, anchors[j0:j1], hops)
        if got is None:
            return None
        v, j, d = [anchors[j0:j1]], [np.arange(j0, j1)], [np.ones(j1 - j0)]
        for i, nxt in enumerate(got[0]):
            j.append(j0 + np.repeat(np.arange(j1 - j0), np.diff(nxt.indptr)))
            v.append(nxt.indices.astype(np.int64))
            d.append(np.full(nxt.nnz, i + 2.0))
        return (np.concatenate(v), np.concatenate(j), np.concatenate(d)), got[1]

    parts = _in_blocks(len(anchors), 1024, run)
    v, j, d = (np.concatenate([p[q] for p in parts]) for q in range(3))
    return sp.csc_matrix((d, (v, j)), shape=(n, len(anchors)))


def select_anchors(indptr, indices, sel: AnchorsSelect, seed: int = 0) -> Hdg:
    """P-GNN anchor sets with q-hop distance weights 1/(d+1): distances from every distinct anchor
    (:func:`_anchor_distances`), then each set's members within reach of each node."""
    n = len(indptr) - 1
    if sel.size > n:
        raise OptionError("--select", f"anchors: size={sel.size} exceeds the graph's {n} nodes; expected size ≤ {n}")
    rng = np.random.default_rng(seed)
    sets = np.stack([rng.choice(n, sel.size, replace=False) for _ in range(sel.sets)]).astype(np.int64)
    anchors, col = np.unique(sets, return_inverse=True)
    col = col.reshape(sets.shape)
    dist = _anchor_distances(indptr, indices, anchors, sel.hops)
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
    last = paths[:, -1].astype(np.int64)
    deg = indptr[last + 1] - indptr[last]
    total = int(deg.sum())
    rep = np.repeat(np.arange(len(paths)), deg)
    first = np.repeat(np.cumsum(deg) - deg, deg)
    nbr = indices[np.repeat(indptr[last], deg) + np.arange(total) - first]
    keep = node_type[nbr] == t
    return np.concatenate([paths[rep[keep]], nbr[keep][:, None]], axis=1)


def metapath_block(indptr, indices, node_type, targets, types: list[int], cap, seed, limit: int = WORK_PER_CALL):
    """The instances of ``targets`` ([P, L], by target then members), or None when an expansion
    would touch more than ``limit`` entries and there is more than one target."""
    paths, peak = targets[:, None].astype(np.int64), 0
    for t in types[1:]:
        last = paths[:, -1]
        cost = int((indptr[last + 1] - indptr[last]).sum()) * (paths.shape[1] + 1)
        if cost > limit and len(targets) > 1:
            return None
        peak = max(peak, cost)
        paths = _expand(indptr, indices, node_type, paths, t)
    if cap is not None and len(paths):
        # rank each target's instances by a key of (target, members), keep the first cap
        key = _hash_keys(seed, paths[:, 0], _hash_keys(seed, paths[:, -1], paths[:, 1], len(types)), 0)
        order = np.lexsort((key, paths[:, 0]))
        paths = paths[order]
        start = np.searchsorted(paths[:, 0], paths[:, 0], side="left")
        paths = paths[np.arange(len(paths)) - start < cap]
    return paths[np.lexsort(paths.T[::-1])], peak  # by target, then members: a canonical order


def check_types(sel: MetapathSelect, type_names: list[str] | None) -> None:
    """Refuse a metapath selection on a store without typed nodes (``type_names`` None) or naming a
    type the store does not have: the same refusal for a run and its ``--dry-run``."""
    if type_names is None:
        raise OptionError("--select", "metapath: needs a heterogeneous graph store (typed nodes, e.g. ingested from "
                                      "the ogbn-mag layout); this store has no /nodes/type")
    for name, types in sel.paths:
        unknown = [t for t in types if t not in type_names]
        if unknown:
            raise OptionError("--select", f"metapath: {name} uses node type {unknown[0]!r}; the store has "
                                          f"{', '.join(type_names)}")


def select_metapath(indptr, indices, sel: MetapathSelect, node_type: np.ndarray | None,
                    type_names: list[str] | None, seed: int = 0, block: int = 4096) -> Hdg:
    """MAGNN-style metapath instances (Fu et al., WWW 2020): for each target v of type T1, every
    path v ← u2 ← … ← uL with u_i of type T_i along stored in-lists; the instance's members are its
    L path nodes (target included), the node's channel aggregates its instances. With ``cap`` at
    most C instances per target are kept, a seeded sample by splitmix64 keys of (target, path
    position), independent of the block split. Targets are enumerated in blocks of at most
    ``block`` (halved where the expansion is heavy) so the expansion's memory follows the block."""
    check_types(sel, type_names if node_type is not None else None)
    n = len(indptr) - 1
    code = {t: i for i, t in enumerate(type_names)}
    roots = []
    for name, types in sel.paths:
        targets = np.flatnonzero(node_type == code[types[0]])
        typed = [code[t] for t in types]
        parts = _in_blocks(len(targets), block, lambda b0, b1: metapath_block(
            indptr, indices, node_type, targets[b0:b1], typed, sel.cap, seed))
        paths = np.concatenate(parts) if parts else np.empty((0, len(types)), np.int64)
        leaf = Level(f"{name}_members", "vertices", len(paths), fanout=len(types), ids=paths.reshape(-1))
        roots.append(Level(name, "instances", n, offsets=_csr_offsets(paths[:, 0], n), combine="reduce", child=leaf))
    return Hdg(n, tuple(roots))


def _check_room(sel: Select, n: int) -> None:
    """Refuse up front when the HDG's fixed-size arrays alone would not fit in the available memory."""
    import psutil

    if isinstance(sel, RandomWalkSelect):
        need, what = 16 * n * min(sel.topk, sel.walks * sel.length), f"n·topk = {n:,}·{sel.topk:,} neighbours"
    elif isinstance(sel, HopShellsSelect):
        import numba

        need, what = 16 * n * sel.hops + 24 * n * numba.get_num_threads(), f"n·K = {n:,}·{sel.hops} shells"
    elif isinstance(sel, AnchorsSelect):
        need, what = 8 * n * sel.sets + 16 * sel.sets * sel.size, f"n·sets = {n:,}·{sel.sets:,} instances"
    else:
        return
    free = psutil.virtual_memory().available
    if need > free:
        from gnnprep.core.sizes import format_size

        raise OptionError("--select", f"{select_spec(sel)}: {what} need ~{format_size(need)}, more than the "
                                      f"{format_size(free)} of memory available; expected smaller values")


def select(indptr: np.ndarray, indices: np.ndarray, sel: Select, seed: int = 0, progress=None,
           node_type: np.ndarray | None = None, type_names: list[str] | None = None) -> Hdg:
    """NeighborSelection: build the HDG of ``sel`` over the CSR (row v: the sources v aggregates from)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    _check_room(sel, len(indptr) - 1)
    if isinstance(sel, MetapathSelect):
        return select_metapath(indptr, indices, sel, node_type, type_names, seed)
    if isinstance(sel, RandomWalkSelect):
        return select_random_walk(indptr, indices, sel, seed)
    if isinstance(sel, HopShellsSelect):
        return select_hop_shells(indptr, indices, sel, seed, progress=progress or (lambda *a: None))
    if isinstance(sel, AnchorsSelect):
        return select_anchors(indptr, indices, sel, seed)
    raise GnnprepError(f"unknown selector {sel!r}")
