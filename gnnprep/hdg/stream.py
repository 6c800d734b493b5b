"""``gnnprep hdg`` under a memory budget: every selector run in node blocks, the HDG written block by
block (:class:`gnnprep.hdg.file.LevelStream`; resumable, :class:`gnnprep.hdg.file.StreamMarks`), and
the plan — blocks, peak memory, seconds — predicted from sizes alone (:func:`plan_hdg`, ``--dry-run``).

What is held for the whole run (``fixed``): the interpreter with its libraries and compiled kernels
(:data:`BASE_BYTES`), the graph's CSR (indptr 8 B a node, indices 4 B an entry below 2^31 nodes:
random walks and breadth-first searches read any row at any time, so it stays in memory; a budget
that cannot hold it is refused up front), and the selector's scratch. What is left is the room of a
block of nodes, whose rows are selected, written and dropped before the next block:

- random-walk: walks from the block's nodes (:func:`gnnprep.hdg.walks.walk_topk`); a node holds its
  top-k' = min(topk, walks·length) ids and counts (int64) and their packed copies,
  :data:`WALK_NODE_BYTES` per slot; scratch: the kernel's per-thread visit buffers (≤ 8 MiB each).
- hop-shells: one breadth-first search per node (:func:`gnnprep.hdg.walks.hop_shell_blocks`);
  scratch: per thread a stamp and two frontier buffers of n entries; a call holds its shells'
  members (with a cap, cap slots per shell, and a block's nodes fit the room; without, counted
  first and the call halved until they fit — one node's members, at most n, always do). Calls
  run within the node blocks of the plan and take ~0.2 s each, so a block takes several calls.
- anchors: the sets are drawn as :func:`gnnprep.hdg.select.select_anchors` draws them; the
  distances come from one breadth-first search per distinct anchor along the out-lists (the
  in-lists themselves on a symmetric store; a directed store also holds their transpose). A first
  pass counts the (node, set, member) entries of every 64-node bin; node blocks are cut where the
  entries of a block fill the room (:data:`ANCHOR_ENTRY_BYTES` each, the sort included), and each
  block reruns the searches keeping the members that land in it (recompute instead of storing all
  distances: the searches are cheap next to the output).
- metapath: blocks of targets whose expansion touches at most room / :data:`METAPATH_WORK_BYTES`
  entries (and :data:`gnnprep.hdg.select.WORK_PER_CALL`).

Every selector is seeded per node (walks: per start node; shell caps: keys of (node, member, hop);
anchor sets: drawn once; metapath caps: keys of the instance), so the blocks change nothing: the
datasets and their values are those of the in-memory selectors (:func:`gnnprep.hdg.select.select`
and :func:`gnnprep.hdg.file.write_hdg`), whatever the budget (tests/hdg/test_hdg_budget.py).

Time model (:func:`plan_hdg`): reading the CSR (:data:`READ_BYTES_PER_S`), plus per selector

- random-walk: n·walks·length steps at :data:`WALK_NS_PER_STEP` per thread, plus n·k' written slots;
- hop-shells and anchors: the edges the searches scan, estimated from sizes with r = Σ deg² / m
  (the mean degree of a node met at the end of an edge; read from the store's indptr, or given):
  a search of K hops from a node scans E_K = Σ_{i=1..K} min(m, (m/n)·r^(i−1)) edges, at
  :data:`SEARCH_NS_PER_EDGE` per thread; hop-shells runs n searches (capped at n·m), anchors runs
  2·(1 + blocks) searches per distinct anchor plus :data:`ANCHOR_NS_PER_ENTRY` per written entry;
- metapath: a rough n·(m/n)^(L−1) expansions (the node types' shares are not known from sizes).

Size of the HDG (``predicted_hdg_bytes``): the ids, weights and offsets each selector writes, from
the same estimates (k' slots a node, shell members, anchor entries); for metapaths from the
instances counted per target (:func:`metapath_instances`, what :func:`gnnprep.hdg.builder.plan_store`
reads from a typed store: a path-count recurrence over the in-lists, one pass over the indices per
step, the cap applied per target), L ids each, and offsets: exact (from sizes alone, without the
node types: n·min(C, (m/n)^(L−1)) instances, every node a target).

Calibration (2-core machine, the papers100M shape at 1/10: n = 11.1M, m = 308M, r = 62.3; see
``benchmarks/bench_hdg_budget.py`` and the report of issue 33): the constants below.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from gnnprep.core.errors import OptionError
from gnnprep.hdg.select import (
    WORK_PER_CALL,
    AnchorsSelect,
    HopShellsSelect,
    MetapathSelect,
    RandomWalkSelect,
    Select,
    in_blocks,
    select_spec,
)
from gnnprep.hdg.structure import Hdg, Level

BASE_BYTES = 256 << 20          # interpreter, numpy, scipy, h5py, numba and the kernels (measured 213 MB)
MIN_ROOM = 16 << 20             # the least room a block may have
WALK_NODE_BYTES = 40            # per top-k slot of a block: ids + counts (int64), the packed copies, the casts
WALK_SCRATCH_BYTES = 10 << 20   # per thread: the walk kernel's visit buffer (≤ 8 MiB) and its counts
ANCHOR_ENTRY_BYTES = 80         # per (node, set, member) entry of a block: its record, expansion and sort
ANCHOR_BIN = 6                  # anchors count entries in bins of 2^6 nodes
METAPATH_WORK_BYTES = 40        # per entry an expansion touches (indices, repeats, the new paths)
READ_BYTES_PER_S = 0.8e9        # reading the CSR from a warm page cache (h5py, chunked)
WALK_NS_PER_STEP = 80.0         # per random-walk step, per thread (cache misses on a large graph)
WALK_NS_PER_SLOT = 30.0         # per written top-k slot (sorting the visits, packing, HDF5)
SEARCH_NS_PER_EDGE = 18.0       # per edge a breadth-first search scans, per thread (a stamp access each, prefetched)
SHELL_NS_PER_MEMBER = 6.0       # per shell member kept or keyed (sorting, the cap's heap, HDF5)
ANCHOR_NS_PER_ENTRY = 120.0     # per written anchor entry (expansion, sort, HDF5)
METAPATH_NS_PER_ENTRY = 100.0   # per expanded metapath entry
FIXED_SECONDS = 2.0             # start-up: imports, the kernels loaded from numba's cache


@dataclass(frozen=True)
class HdgPlan:
    """How ``gnnprep hdg`` runs under ``memory_budget`` bytes: the bytes held throughout
    (``fixed_bytes``: :data:`BASE_BYTES`, the CSR ``graph_bytes`` and the selector's
    ``scratch_bytes``), the ``room`` of a block, nodes per block (``block_nodes``) and the
    predicted ``blocks``, peak and seconds. The run goes through these node blocks (random-walk,
    hop-shells; anchors cut theirs where the counted entries fill the room, in bins of 64 nodes;
    metapaths have one, the room bounding each call's expansion instead) and reports their number as
    ``blocks``; its ``calls`` (hop shells' ~0.2 s calls within a block, metapaths' blocks of targets)
    adapt to time and are not predicted."""

    selector: str
    spec: str
    num_nodes: int
    entries: int
    memory_budget: int
    threads: int
    graph_bytes: int
    scratch_bytes: int
    fixed_bytes: int
    room: int
    block_nodes: int
    blocks: int
    predicted_peak_bytes: int
    predicted_seconds: float
    predicted_hdg_bytes: int

    @property
    def predicted_disk_bytes(self) -> int:
        """The disk at the end of a run: the levels' files (:class:`gnnprep.hdg.file.LevelStream`), then their copy."""
        return 2 * self.predicted_hdg_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "predicted_disk_bytes": self.predicted_disk_bytes}


def graph_bytes(n: int, m: int, itemsize: int = 4) -> int:
    """The CSR held: indptr int64 and indices as stored (int32 below 2^31 nodes)."""
    return 8 * (n + 1) + itemsize * m


def _edges_per_search(n: int, m: int, r: float, hops: int) -> float:
    """E_K: edges a K-hop breadth-first search scans from one node (module docstring)."""
    if n == 0:
        return 0.0
    return sum(min(float(m), (m / n) * r ** (i - 1)) for i in range(1, hops + 1))


def _shell_members(n: int, m: int, r: float, hops: int, cap: int | None) -> float:
    """Members kept per node over its shells (each shell ≈ its scan's new nodes, at most n, or cap)."""
    if n == 0:
        return 0.0
    per = [min(float(n), (m / n) * r ** (i - 1)) for i in range(1, hops + 1)]
    return sum(min(p, cap) if cap is not None else p for p in per)


def distinct_anchors(n: int, sets: int, size: int) -> float:
    """Expected distinct anchors of ``sets`` uniform sets of ``size`` nodes out of n."""
    if n == 0:
        return 0.0
    return n * (1.0 - (1.0 - min(size, n) / n) ** sets)


def metapath_instances(indptr: np.ndarray, read_indices, node_type: np.ndarray, paths, cap: int | None,
                       block: int = 1 << 20) -> list[int]:
    """The instances :func:`gnnprep.hdg.select.select_metapath` keeps for each metapath (``paths``:
    lists of type codes T1..TL), counted without enumerating them: with f_L(u) = [type(u) = T_L] and
    f_i(u) = [type(u) = T_i] · Σ_{w ∈ in(u)} f_{i+1}(w), target v has f_1(v) instances, min(C, f_1(v))
    with ``cap``. ``read_indices(a, b)`` gives the stored indices a..b−1, read in row blocks of about
    ``block`` entries, one pass per step of a path; held: two float32 counts a node (exact below 2^24
    instances a node, which is all a size needs) and a block."""
    n = len(indptr) - 1
    out = []
    for types in paths:
        f = (node_type == types[-1]).astype(np.float32)
        for t in reversed(types[:-1]):
            sums = np.zeros(n, np.float32)
            r0 = 0
            while r0 < n:
                r1 = min(n, max(r0 + 1, int(np.searchsorted(indptr, indptr[r0] + block, side="right")) - 1))
                idx = read_indices(int(indptr[r0]), int(indptr[r1]))
                rows = np.repeat(np.arange(r1 - r0), np.diff(indptr[r0:r1 + 1]))
                sums[r0:r1] = np.bincount(rows, weights=f[idx], minlength=r1 - r0)
                del idx, rows
                r0 = r1
            sums[node_type != t] = 0
            f = sums
        per_target = f[node_type == types[0]].astype(np.float64)
        total = float((np.minimum(per_target, cap) if cap is not None else per_target).sum())
        out.append(int(min(total, 2.0**62)))   # (paths past float range: inf, a run that would not end)
    return out


def plan_hdg(sel: Select, n: int, m: int, budget: int, *, itemsize: int = 4, symmetric: bool = True,
             deg2: float | None = None, threads: int | None = None, anchor_entries: int | None = None,
             instances: list[int] | None = None) -> HdgPlan:
    """The plan of ``gnnprep hdg`` for selector ``sel`` over n nodes and m stored entries under
    ``budget`` bytes, from sizes alone: ``itemsize`` of the stored indices, whether the store is
    ``symmetric`` (anchors search the in-lists then), ``deg2`` = Σ deg² over the in-degrees (None:
    m²/n, a graph of equal degrees), ``threads`` (numba's), for anchors the counted
    ``anchor_entries`` and for metapaths the counted ``instances`` of each path
    (:func:`metapath_instances`) when known (else estimated). OptionError naming the budget and what it
    needs when the fixed part and the smallest block do not fit."""
    import numba

    from gnnprep.core.sizes import format_size
    from gnnprep.hdg.walks import shell_scratch_bytes

    t = int(threads or numba.get_num_threads())
    budget = int(budget)
    graph = graph_bytes(n, m, itemsize)
    r = (deg2 / m) if (deg2 is not None and m) else (m / n if n else 0.0)
    read_s = (graph + 8 * n) / READ_BYTES_PER_S
    id_bytes = 4 if n < 2**31 else 8
    need_block = MIN_ROOM
    if isinstance(sel, RandomWalkSelect):
        k = min(sel.topk, sel.walks * sel.length)
        scratch = t * WALK_SCRATCH_BYTES
        per_node = WALK_NODE_BYTES * k + 32
        steps = float(n) * sel.walks * sel.length
        seconds = steps * WALK_NS_PER_STEP * 1e-9 / t + n * k * WALK_NS_PER_SLOT * 1e-9
        out = n * k * (id_bytes + 4) + 4 * (n + 1)
        total_units = n
    elif isinstance(sel, HopShellsSelect):
        scratch = shell_scratch_bytes(n, t)
        members = _shell_members(n, m, r, sel.hops, sel.cap)
        if sel.cap is not None:
            per_node = sel.hops * (16 + sel.cap * (2 * id_bytes + 1))
        else:
            per_node = int(sel.hops * 16 + members * id_bytes) + 1
            need_block = max(MIN_ROOM, n * id_bytes + 16 * sel.hops)   # one node's members at most
        work = min(float(n) * _edges_per_search(n, m, r, sel.hops), float(n) * m)
        seconds = work * SEARCH_NS_PER_EDGE * 1e-9 / t + n * members * SHELL_NS_PER_MEMBER * 1e-9
        out = int(n * members * id_bytes) + 4 * (n * sel.hops + 1)
        total_units = n
    elif isinstance(sel, AnchorsSelect):
        a = distinct_anchors(n, sel.sets, sel.size)
        scratch = shell_scratch_bytes(n, t) + (0 if symmetric else graph + 8 * n) + 48 * sel.sets * sel.size \
            + 8 * t * (n // (1 << ANCHOR_BIN) + 1)
        reach = 1.0 + _shell_members(n, m, r, sel.hops, None)          # nodes within Q hops of an anchor
        entries = anchor_entries if anchor_entries is not None else a * reach * (sel.sets * sel.size / max(a, 1.0))
        per_node = 16 * sel.sets
        need_block = MIN_ROOM
        search = a * _edges_per_search(n, m, r, sel.hops)
        out = int(entries * (id_bytes + 4)) + 4 * (n * sel.sets + 1)
        total_units = n
    elif isinstance(sel, MetapathSelect):
        scratch = 10 * n
        per_node = 24
        need_block = MIN_ROOM
        seconds = sum(n * (m / max(n, 1)) ** (len(types) - 1) for _, types in sel.paths) * METAPATH_NS_PER_ENTRY * 1e-9
        if instances is None:   # from sizes alone: every node a target with (m/n)^(L−1) paths
            instances = [n * min(float(sel.cap or math.inf), (m / max(n, 1)) ** (len(types) - 1))
                         for _, types in sel.paths]
        out = sum(int(i) * len(types) * id_bytes + (4 if i < 2**31 else 8) * (n + 1)
                  for i, (_, types) in zip(instances, sel.paths))
        total_units = n
    else:
        raise OptionError("--select", f"unknown selector {sel!r}")
    fixed = BASE_BYTES + graph + scratch
    room = budget - fixed
    if room < need_block:
        raise OptionError("--memory-budget", f"{format_size(budget)} is too small for {select_spec(sel)} over "
                                             f"{n:,} nodes and {m:,} stored entries: it needs at least "
                                             f"{format_size(fixed + need_block)} (the graph's CSR "
                                             f"{format_size(graph)}, held for random access, the selector's scratch "
                                             f"{format_size(scratch)} and {format_size(BASE_BYTES)} for the process)")
    if isinstance(sel, AnchorsSelect):
        blocks = max(1, math.ceil((entries * ANCHOR_ENTRY_BYTES + n * per_node) / room))  # as blocks are cut,
        blocks = min(blocks, max(1, (n + (1 << ANCHOR_BIN) - 1) >> ANCHOR_BIN))        # a bin of nodes at least
        block_nodes = max(1, math.ceil(n / blocks))
        seconds = 2 * (1 + blocks) * search * SEARCH_NS_PER_EDGE * 1e-9 / t + entries * ANCHOR_NS_PER_ENTRY * 1e-9 \
            + n * sel.sets * 4e-9
        peak = fixed + min(room, int(entries * ANCHOR_ENTRY_BYTES / blocks) + per_node * block_nodes)
    elif isinstance(sel, MetapathSelect):
        block_nodes = n
        blocks = 1
        peak = fixed + min(room, METAPATH_WORK_BYTES * WORK_PER_CALL)
    else:
        block_nodes = max(1, min(total_units, room // max(1, per_node)))
        blocks = max(1, math.ceil(total_units / block_nodes))
        peak = fixed + min(room, per_node * block_nodes)
    return HdgPlan(sel.name, select_spec(sel), int(n), int(m), budget, t, int(graph), int(scratch), int(fixed),
                   int(room), int(block_nodes), int(blocks), int(peak),
                   round(FIXED_SECONDS + read_s + seconds, 1), int(out))


# -- the selectors in node blocks ------------------------------------------------------------------------
def _skeleton_leaf(name: str, parents: int, fanout: int = 0, weighted: bool = False) -> Level:
    """A vertex level with empty stand-in arrays: its schema is that of the written one."""
    empty = np.empty(0)
    return Level(name, "vertices", parents, fanout=fanout, offsets=None if fanout else np.zeros(1, np.int64),
                 ids=empty, weights=empty if weighted else None)


def stream_random_walk(indptr, indices, sel: RandomWalkSelect, seed: int, plan: HdgPlan, folder, marks,
                       progress) -> tuple[Hdg, list, int, int]:
    """PinSage top-k random-walk neighbours (:func:`gnnprep.hdg.select.select_random_walk`) in node
    blocks, from where ``marks`` (:class:`gnnprep.hdg.file.StreamMarks`) says a run stopped; returns
    the HDG's schema (arrays empty), its levels (:class:`gnnprep.hdg.file.LevelStream`, files in
    ``folder``, finished), the node blocks run (``plan.block_nodes`` each, as :func:`plan_hdg`
    counts them) and the selector's calls written (here one a block; an interrupted run's included).
    The other ``stream_*`` functions do the same for their selector."""
    from gnnprep.hdg.file import LevelStream
    from gnnprep.hdg.walks import walk_topk

    n = len(indptr) - 1
    lv = LevelStream(folder, "topk", "vertices", "node", num_parents=n, ids=True, weighted=True, n=n,
                     resume=marks.level("topk"))
    for v0 in range(int(marks.place().get("node", 0)), n, plan.block_nodes):
        v1 = min(n, v0 + plan.block_nodes)
        offsets, ids, counts = walk_topk(indptr, indices, sel.walks, sel.length, sel.topk, sel.restart, seed,
                                         starts=np.arange(v0, v1, dtype=np.int64))
        lv.append(np.diff(offsets), ids, counts.astype(np.float32))
        del offsets, ids, counts
        marks.block_done({"node": v1}, [lv])
        progress("random walks", v1, n)
    lv.finish()
    return Hdg(n, (_skeleton_leaf("topk", n, weighted=True),)), [lv], lv.appends, lv.appends


def stream_hop_shells(indptr, indices, sel: HopShellsSelect, seed: int, plan: HdgPlan, folder, marks,
                      progress) -> tuple[Hdg, list, int, int]:
    """JK-Net hop shells (:func:`gnnprep.hdg.select.select_hop_shells`) in the plan's node blocks of
    ``plan.block_nodes`` (from an interrupted run's next node), each in calls of about 0.2 s
    (:func:`gnnprep.hdg.walks.hop_shell_blocks`; without a cap also halved where the counted members
    would not fit the room): the calls are not blocks of the plan, they are counted apart."""
    from gnnprep.hdg.file import LevelStream
    from gnnprep.hdg.walks import ShellSearch, hop_shell_blocks

    n, k = len(indptr) - 1, sel.hops
    slots = tuple(f"hop{i}" for i in range(1, k + 1))
    top = LevelStream(folder, "shell", "instances", "node", fanout=k, num_parents=n)
    leaf = LevelStream(folder, "shell_members", "vertices", "shell", num_parents=n * k, ids=True, n=n,
                       resume=marks.level("shell_members"))
    search = ShellSearch(indptr, indices, plan.threads)
    step = max(1, plan.block_nodes)
    v0 = int(marks.place().get("node", 0))
    while v0 < n:   # the plan's blocks are step·b .. step·(b+1) − 1, a resumed one from its next node
        v1 = min(n, (v0 // step + 1) * step)
        for _, c1, counts, ids in hop_shell_blocks(indptr, indices, k, sel.cap, seed, max_starts=step, room=plan.room,
                                                   search=search, start=v0, stop=v1):
            leaf.append(counts, ids)
            marks.block_done({"node": c1}, [leaf])
            progress("hop shells", c1, n)
        v0 = v1
    del search
    leaf.finish()
    top.finish()
    return Hdg(n, (Level("shell", "instances", n, fanout=k, combine="slots", slots=slots,
                         child=_skeleton_leaf("shell_members", n * k)),)), [top, leaf], -(-n // step), leaf.appends


def _out_lists(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The transposed CSR (row u: the nodes whose in-list holds u), sorted within rows."""
    from gnnprep.hdg.walks import transpose_csr

    return transpose_csr(indptr, indices)


def _anchor_chunks(search, anchors: np.ndarray, hops: int, room: int, seed64):
    """Yield (j0, j1, counts, members) of breadth-first searches from anchors[j0:j1] in chunks
    whose members (counted first) take at most ``room`` bytes with their records."""
    j0, size = 0, 256
    a = len(anchors)
    while j0 < a:
        j1 = min(a, j0 + size)
        counts = search.count(anchors[j0:j1], hops, -1, seed64)
        if j1 - j0 > 1 and int(counts.sum()) * 24 > room:
            size = max(1, (j1 - j0) // 2)
            continue
        yield j0, j1, counts, search.fill(anchors[j0:j1], hops, -1, seed64, counts)
        j0 = j1
        if int(counts.sum()) * 24 < room // 4:
            size = min(1 << 14, size * 2)


def _anchor_records(search, anchors, hops, room, seed64, v0: int, v1: int):
    """(v, j, d) of every node v in [v0, v1) within ``hops`` of anchor j (d: the distance; the
    anchor itself at 0), in no particular order."""
    vs, js, ds = [], [], []
    inside = np.flatnonzero((anchors >= v0) & (anchors < v1))
    vs.append(anchors[inside])
    js.append(inside)
    ds.append(np.zeros(len(inside), np.int8))
    for j0, j1, counts, ids in (_anchor_chunks(search, anchors, hops, room, seed64) if hops else ()):
        keep = (ids >= v0) & (ids < v1)
        if not keep.any():
            continue
        shell = np.repeat(np.arange(len(counts)), counts)[keep]
        vs.append(ids[keep].astype(np.int64))
        js.append(j0 + shell // hops)
        ds.append((shell % hops + 1).astype(np.int8))
    return np.concatenate(vs), np.concatenate(js), np.concatenate(ds)


def stream_anchors(indptr, indices, sel: AnchorsSelect, seed: int, plan: HdgPlan, folder, marks, progress,
                   symmetric: bool) -> tuple[Hdg, list, int, int]:
    """P-GNN anchor sets (:func:`gnnprep.hdg.select.select_anchors`) in node blocks (module docstring)."""
    from gnnprep.hdg.file import LevelStream
    from gnnprep.hdg.walks import ShellSearch

    n, s_count, q = len(indptr) - 1, sel.sets, sel.hops
    if sel.size > n:
        raise OptionError("--select", f"anchors: size={sel.size} exceeds the graph's {n} nodes; expected size ≤ {n}")
    rng = np.random.default_rng(seed)
    sets = np.stack([rng.choice(n, sel.size, replace=False) for _ in range(s_count)]).astype(np.int64)
    anchors, col = np.unique(sets, return_inverse=True)
    col = col.reshape(-1)
    set_of = np.repeat(np.arange(s_count, dtype=np.int64), sel.size)
    order = np.lexsort((set_of, col))                      # memberships by anchor, then set
    mem_set = set_of[order]
    mult = np.bincount(col, minlength=len(anchors))        # sets holding each anchor
    mem_ptr = np.zeros(len(anchors) + 1, dtype=np.int64)
    np.cumsum(mult, out=mem_ptr[1:])
    del sets, set_of, order, col
    out_ptr, out_idx = (indptr, indices) if symmetric else _out_lists(indptr, indices)
    search = ShellSearch(out_ptr, out_idx, plan.threads)
    seed64 = np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    chunk_room = max(1 << 20, plan.room // 4)
    # pass 1: the (node, set, member) entries of every bin of 2^ANCHOR_BIN nodes
    bins = n // (1 << ANCHOR_BIN) + 1
    hist = np.bincount(anchors >> ANCHOR_BIN, weights=mult, minlength=bins).astype(np.int64)
    for j0, j1, counts, ids in (_anchor_chunks(search, anchors, q, chunk_room, seed64) if q else ()):
        per_rec = np.repeat(mult[j0:j1], counts.reshape(j1 - j0, q).sum(axis=1))
        hist += np.bincount(ids >> ANCHOR_BIN, weights=per_rec, minlength=bins).astype(np.int64)
        progress("anchor distances", j1, len(anchors))
    total = int(hist.sum())
    # node blocks: contiguous bins whose entries (and instances) fit the room, from the first node not
    # yet written (a block bound: a multiple of the bin)
    per_bin_nodes = 1 << ANCHOR_BIN
    cum = np.cumsum(hist * ANCHOR_ENTRY_BYTES + per_bin_nodes * 16 * s_count)
    first = int(marks.place().get("node", 0))
    bounds, start_cost = [first], int(cum[(first >> ANCHOR_BIN) - 1]) if first else 0
    while bounds[-1] < n:
        b0 = bounds[-1] >> ANCHOR_BIN
        b1 = int(np.searchsorted(cum, start_cost + plan.room, side="right"))
        b1 = max(b1, b0 + 1)
        v1 = min(n, b1 << ANCHOR_BIN)
        bounds.append(v1)
        start_cost = int(cum[b1 - 1])
    del hist, cum
    top = LevelStream(folder, "anchor_set", "instances", "node", fanout=s_count, num_parents=n)
    leaf = LevelStream(folder, "anchor_members", "vertices", "anchor_set", num_parents=n * s_count, ids=True,
                       weighted=True, n=n, resume=marks.level("anchor_members"))
    for v0, v1 in zip(bounds[:-1], bounds[1:]):
        rv, rj, rd = _anchor_records(search, anchors, q, chunk_room, seed64, v0, v1)
        rep = mult[rj]
        e = int(rep.sum())
        first = np.repeat(mem_ptr[rj], rep)
        within = np.arange(e, dtype=np.int64) - np.repeat(np.cumsum(rep) - rep, rep)
        es = mem_set[first + within]
        del first, within
        inst = (np.repeat(rv, rep) - v0) * s_count + es
        del es
        ej = np.repeat(rj, rep)
        order = np.argsort(inst * len(anchors) + ej, kind="stable")
        counts = np.bincount(inst, minlength=(v1 - v0) * s_count)
        ids = anchors[ej[order]]
        w = (1.0 / (np.repeat(rd, rep)[order].astype(np.float64) + 1.0)).astype(np.float32)
        del inst, ej, order, rv, rj, rd, rep
        leaf.append(counts, ids, w)
        del counts, ids, w
        marks.block_done({"node": v1}, [leaf])
        progress("anchor sets", v1, n)
    del search
    if leaf.finish() != total:
        raise RuntimeError(f"level anchor_members: {leaf.children} entries written; counted {total}")
    top.finish()
    return Hdg(n, (Level("anchor_set", "instances", n, fanout=s_count, combine="reduce",
                         child=_skeleton_leaf("anchor_members", n * s_count, weighted=True)),)), [top, leaf], \
        leaf.appends, leaf.appends


def stream_metapath(indptr, indices, sel: MetapathSelect, seed: int, plan: HdgPlan, folder, marks, progress,
                    node_type, type_names) -> tuple[Hdg, list, int, int]:
    """MAGNN metapath instances (:func:`gnnprep.hdg.select.select_metapath`) in blocks of targets, path
    after path (a resumed run continues the path it stopped in, from its next block of targets). The
    budget does not cut the nodes into blocks here (one node block, as :func:`plan_hdg` says): it
    bounds each call's expansion instead, so the blocks of targets are counted as calls."""
    from gnnprep.hdg.file import LevelStream
    from gnnprep.hdg.select import check_types, metapath_block

    check_types(sel, type_names if node_type is not None else None)
    n = len(indptr) - 1
    code = {t: i for i, t in enumerate(type_names)}
    limit = int(max(1, min(WORK_PER_CALL, plan.room // METAPATH_WORK_BYTES)))
    at = marks.place()
    here = at.get("path", 0)   # paths before it are whole in their files, the one it names in part
    roots, levels, calls = [], [], int(at.get("calls", 0))
    for p, (name, types) in enumerate(sel.paths):
        targets = np.flatnonzero(node_type == code[types[0]])
        typed = [code[t] for t in types]
        inner = LevelStream(folder, name, "instances", "node", num_parents=n, n=n,
                            resume=marks.level(name) if p <= here else None)
        leaf = LevelStream(folder, f"{name}_members", "vertices", name, fanout=len(types), ids=True, n=n,
                           resume=marks.level(f"{name}_members") if p <= here else None)
        levels += [inner, leaf]
        if p < here:
            done, start = n, len(targets)
        else:
            done, start = (int(at.get("done", 0)), int(at.get("target", 0))) if p == here else (0, 0)
        for _, b1, paths in in_blocks(len(targets), 4096, lambda b0, b1: metapath_block(
                indptr, indices, node_type, targets[b0:b1], typed, sel.cap, seed, limit), limit=limit, start=start):
            end = int(targets[b1 - 1]) + 1
            inner.append(np.bincount(paths[:, 0] - done, minlength=end - done) if len(paths)
                         else np.zeros(end - done, np.int64))
            leaf.append(ids=paths.reshape(-1))
            done = end
            calls += 1
            marks.block_done({"path": p, "target": b1, "done": done, "calls": calls}, levels)
            progress(f"metapath {name}", b1, len(targets))
        if done < n:
            inner.append(np.zeros(n - done, np.int64))
        instances = inner.finish()
        leaf.finish(num_parents=instances)
        roots.append((name, types, instances))
    return Hdg(n, tuple(Level(name, "instances", n, offsets=np.zeros(1, np.int64), combine="reduce",
                              child=_skeleton_leaf(f"{name}_members", inst, fanout=len(types)))
                        for name, types, inst in roots)), levels, 1, calls
