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
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from gnnprep.errors import GnnprepError


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


def _number_by_level(n: int, inputs: np.ndarray, agg_level: np.ndarray, ordered: bool = False):
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


def _finish_csr(n: int, dst: np.ndarray, src: np.ndarray, inputs: np.ndarray, agg_level: np.ndarray) -> Hag:
    """:func:`_finish` for in-lists given as (destination, source) arrays and aggregation nodes as an
    [|VA|, 2] array with their levels: vectorised, no Python lists (a million in-lists or input
    pairs as Python ints would cost far more memory than the arrays)."""
    new_id, ins, level_ptr = _number_by_level(n, inputs, agg_level)
    src = new_id[src]
    del new_id
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return Hag(n, ins, level_ptr, indptr, src[order])


def _finish(n: int, lists: list[list[int]], inputs: list[tuple[int, int]], ordered: bool = False) -> Hag:
    """Number aggregation nodes by level (stable), rewrite ids, pack in-lists as CSR (kept in
    order with ``ordered``, else sorted)."""
    na = len(inputs)
    level = np.zeros(n + na, dtype=np.int64)
    for i, (a, b) in enumerate(inputs):
        level[n + i] = 1 + max(level[a], level[b])
    new_id, ins, level_ptr = _number_by_level(n, np.array(inputs, dtype=np.int64).reshape(-1, 2), level[n:], ordered)
    arrange = (lambda a: a) if ordered else np.sort
    rows = [arrange(new_id[np.asarray(l, dtype=np.int64)]) if l else np.empty(0, np.int64) for l in lists]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    return Hag(n, ins, level_ptr, indptr, indices.astype(np.int64))


def exact_pair_count(indptr: np.ndarray) -> int:
    """Σ_v d_v (d_v − 1) / 2: how many pair occurrences the exact search keeps counts for."""
    d = np.diff(indptr).astype(np.int64)
    return int((d * (d - 1) // 2).sum())


BYTES_PER_PAIR = 200  # Python dict entry, heap entry and the per-node destination sets


def exact_search(indptr: np.ndarray, indices: np.ndarray, capacity: int | None = None,
                 memory_budget: int | None = None) -> Hag:
    """Algorithm 3 of Jia et al. (set aggregation), with a lazy max-heap.

    Repeatedly take the pair of ids (in V ∪ VA) that co-occurs in the most in-lists — ties broken by
    the smallest pair (u, w), u < w — stop when the best pair is shared by fewer than two
    destinations or when |VA| reaches ``capacity`` (default ⌊|V|/4⌋, as in the paper); the new
    aggregation node replaces u and w in every in-list that holds both.
    """
    n = len(indptr) - 1
    capacity = n // 4 if capacity is None else min(int(capacity), int(indptr[-1]))
    pairs = exact_pair_count(indptr)
    if memory_budget is not None and pairs * BYTES_PER_PAIR > memory_budget:
        raise GnnprepError(f"--method exact needs about {pairs * BYTES_PER_PAIR / 2**20:.0f} MiB for its {pairs:,} "
                           f"pair occurrences, more than --memory-budget {memory_budget / 2**20:.0f} MiB; "
                           "use --method rounds")
    lists: list[set[int]] = [set(indices[indptr[v]:indptr[v + 1]].tolist()) for v in range(n)]
    users: dict[int, set[int]] = defaultdict(set)  # id -> destinations whose in-list holds it
    count: dict[tuple[int, int], int] = defaultdict(int)
    for v, s in enumerate(lists):
        items = sorted(s)
        for x in items:
            users[x].add(v)
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                count[(a, b)] += 1
    heap = [(-c, a, b) for (a, b), c in count.items() if c >= 2]
    heapq.heapify(heap)
    inputs: list[tuple[int, int]] = []
    while heap and len(inputs) < capacity:
        neg, a, b = heapq.heappop(heap)
        c = count.get((a, b), 0)
        if -neg != c:  # stale entry
            if c >= 2:
                heapq.heappush(heap, (-c, a, b))
            continue
        if c < 2:
            break
        new = n + len(inputs)
        inputs.append((a, b))
        both = users[a] & users[b]
        for v in both:
            s = lists[v]
            s.discard(a)
            s.discard(b)
            for x in s:
                for y in (a, b):
                    key = (x, y) if x < y else (y, x)
                    count[key] -= 1
                    if count[key] == 0:
                        del count[key]
                key = (x, new)  # x < new always
                count[key] += 1
                if count[key] >= 2:
                    heapq.heappush(heap, (-count[key], x, new))
            s.add(new)
            users[new].add(v)
            users[a].discard(v)
            users[b].discard(v)
        count.pop((a, b), None)
    return _finish(n, [sorted(s) for s in lists], inputs)


def sequential_search(indptr: np.ndarray, indices: np.ndarray, capacity: int | None = None) -> Hag:
    """The prefix-sharing HAG for order-dependent aggregation (Jia et al., Theorem 2: optimal for
    the given neighbour order). Each in-list is a sequence; a trie of the sequences counts how many
    lists share each prefix. Every prefix of length ≥ 2 shared by ≥ 2 lists becomes an aggregation
    node (its prefix of length k−1, then its k-th element), most shared first — so ancestors always
    come before descendants — up to ``capacity``; each list then starts with its longest shared
    prefix node, followed by its remaining neighbours in order.
    """
    n = len(indptr) - 1
    capacity = n // 4 if capacity is None else min(int(capacity), int(indptr[-1]))
    child: dict[tuple[int, int], int] = {}
    parent, elem, depth, count = [-1], [-1], [0], [0]
    paths: list[list[int]] = []
    for v in range(n):
        node, path = 0, []
        for x in indices[indptr[v]:indptr[v + 1]].tolist():
            key = (node, x)
            nxt = child.get(key)
            if nxt is None:
                nxt = child[key] = len(parent)
                parent.append(node)
                elem.append(x)
                depth.append(depth[node] + 1)
                count.append(0)
            count[nxt] += 1
            node = nxt
            path.append(node)
        paths.append(path)
    count_a, depth_a = np.asarray(count), np.asarray(depth)
    shared = np.flatnonzero((depth_a >= 2) & (count_a >= 2))
    shared = shared[np.lexsort((shared, depth_a[shared], -count_a[shared]))][:capacity]
    agg_of = {}
    inputs: list[tuple[int, int]] = []
    for t in shared.tolist():  # parents first: their count is at least the child's
        p = parent[t]
        first = agg_of[p] if depth[p] >= 2 else elem[p]
        agg_of[t] = n + len(inputs)
        inputs.append((first, elem[t]))
    lists = []
    for v in range(n):
        seq = indices[indptr[v]:indptr[v + 1]].tolist()
        k = 0
        for i, t in enumerate(paths[v]):
            if t in agg_of:
                k = i + 1
        lists.append(([agg_of[paths[v][k - 1]]] + seq[k:]) if k else seq)
    return _finish(n, lists, inputs, ordered=True)


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


def _window_keys(src, follow, window, big, chunk):
    """Yield the keys min·big + max of the candidate pairs (src[i], src[i+k]), 1 ≤ k ≤ window, in
    bounded chunks of entries."""
    for k in range(1, window + 1):
        for s0 in range(0, len(src), chunk):
            i = s0 + np.flatnonzero(follow[s0:s0 + chunk] >= k)
            if len(i):
                a, b = src[i], src[i + k]
                yield np.minimum(a, b) * big + np.maximum(a, b)


def _count_candidates(src, follow, window, big, parts, keep_from, chunk=1 << 22):
    """Distinct candidate pairs (src[i], src[i+k]), 1 ≤ k ≤ window, within one in-list, with their
    counts, keeping those counted ≥ keep_from. Counted one hash partition (key mod parts) at a
    time: the partition's keys are written into one preallocated array, sorted in place and run-length
    counted, so a key costs at most 8 + 1 + 2·8 bytes (key, run flag, run start and count) — about a
    third of ``np.unique(..., return_counts=True)`` on a concatenated list."""
    if parts == 1:
        sizes = np.array([sum(int((follow >= k).sum()) for k in range(1, window + 1))])
    else:
        sizes = np.zeros(parts, dtype=np.int64)
        for key in _window_keys(src, follow, window, big, chunk):
            sizes += np.bincount(key % parts, minlength=parts)
    out_u, out_c = [], []
    for part in range(parts):
        if sizes[part] == 0:
            continue
        keys = np.empty(int(sizes[part]), dtype=np.int64)
        pos = 0
        for key in _window_keys(src, follow, window, big, chunk):
            if parts > 1:
                key = key[key % parts == part]
            keys[pos:pos + len(key)] = key
            pos += len(key)
        keys.sort()
        flag = np.empty(len(keys), dtype=bool)
        flag[0] = True
        np.not_equal(keys[1:], keys[:-1], out=flag[1:])
        starts = np.flatnonzero(flag)
        del flag
        counts = np.diff(starts, append=len(keys))
        good = counts >= keep_from
        out_u.append(keys[starts[good]])
        out_c.append(counts[good])
        del keys, starts, counts, good
    if not out_u:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_u), np.concatenate(out_c)


def rounds_search(indptr: np.ndarray, indices: np.ndarray, capacity: int | None = None, window: int | None = None,
                  max_depth: int = 16, memory_budget: int | None = None, max_rounds: int = 200,
                  min_share: int = 2) -> Hag:
    """Scalable HAG search: candidate pairs from a window of frequency-sorted in-lists, merged in
    rounds of conflict-free matchings under a decreasing threshold.

    Each round: (1) sort every in-list by global frequency (ids in more in-lists first); (2) take as
    candidates the pairs (list[i], list[j]) with i < j ≤ i + window, counted by sorting their keys;
    (3) walk candidates by count (ties: smallest pair) and keep a matching — no id in two chosen
    pairs — of pairs with count ≥ the round's threshold and depth ≤ ``max_depth``; (4) rewire, all
    in-lists at once: a chosen pair (a, b) is replaced by its new aggregation node wherever both
    occur, and kept only where it occurs at least twice. The threshold starts at the largest count
    and halves after every round down to 2, where rounds continue until nothing merges or the
    capacity is reached. Memory: O(window · stored entries) per round (sorted int64 keys).
    """
    n = len(indptr) - 1
    m = int(indptr[-1])
    # every aggregation node removes at least one stored entry, so m bounds any capacity
    capacity = n // 4 if capacity is None else min(int(capacity), m)
    # memory: ~64 B per entry for the per-round arrays, 26 B per candidate key while counting one
    # hash partition (key mod parts) of the window's keys, plus a bounded chunk of temporaries
    fixed = 64 * m + 256 * 2**20
    if memory_budget is not None and fixed >= memory_budget:
        raise GnnprepError(f"--memory-budget {memory_budget / 2**20:.0f} MiB is too small for rounds over {m:,} "
                           f"entries (needs more than {fixed / 2**20:.0f} MiB)")
    room = (memory_budget - fixed) if memory_budget is not None else None
    if window is None:  # 16 recovers >= 95% of exact's savings on Cora; narrower when memory is short
        window = 16 if room is None else int(min(16, max(2, 2 * room // max(1, 26 * m))))
    window = int(window)
    parts = 1 if room is None else max(1, math.ceil(26 * window * m / max(1, room)))
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    src = indices.astype(np.int64).copy()
    inputs: list[np.ndarray] = []          # [k, 2] input pairs of the aggregation nodes, per round
    made = 0                               # aggregation nodes so far
    level = np.zeros(n + capacity + 1, dtype=np.int64)
    big = np.int64(n + capacity + 1)
    threshold = None
    for _ in range(max_rounds):
        if made >= capacity or len(src) == 0:
            break
        total = n + made
        freq = np.bincount(src, minlength=total)
        order = np.lexsort((src, -freq[src], dst))
        dst, src = dst[order], src[order]
        del order, freq
        starts = np.searchsorted(dst, dst, side="left")
        follow = np.searchsorted(dst, dst, side="right") - starts  # list length
        follow -= np.arange(len(dst)) - starts + 1                   # entries after this one
        del starts
        keep_from = min_share if threshold is None else max(min_share, threshold // 2)
        uniq, counts = _count_candidates(src, follow, window, big, parts, keep_from)
        del follow
        if not len(uniq):
            break
        if threshold is None:
            threshold = int(counts.max())
        while threshold > min_share and not (counts >= threshold).any():
            threshold //= 2
        threshold = max(threshold, min_share)
        sel = np.flatnonzero(counts >= threshold)
        sel = sel[np.lexsort((uniq[sel], -counts[sel]))]
        a_all, b_all = uniq[sel] // big, uniq[sel] % big
        ok_depth = np.maximum(level[a_all], level[b_all]) + 1 <= max_depth
        a_all, b_all = a_all[ok_depth], b_all[ok_depth]
        used = np.zeros(total, dtype=bool)
        room = capacity - made
        picked_a, picked_b = [], []
        for _ in range(4):  # a few vectorised passes of greedy matching in priority order
            free = ~used[a_all] & ~used[b_all]
            a_all, b_all = a_all[free], b_all[free]
            if not len(a_all) or room <= 0:
                break
            ends = np.stack([a_all, b_all], axis=1).ravel()
            _, first = np.unique(ends, return_index=True)
            first_pair = np.full(total, len(a_all), dtype=np.int64)
            first_pair[ends[first]] = first // 2
            i = np.arange(len(a_all))
            take = np.flatnonzero((first_pair[a_all] == i) & (first_pair[b_all] == i))[:room]
            picked_a.append(a_all[take])
            picked_b.append(b_all[take])
            used[a_all[take]] = used[b_all[take]] = True
            room -= len(take)
        ca = np.stack([np.concatenate(picked_a), np.concatenate(picked_b)], axis=1) if picked_a else np.empty((0, 2), np.int64)
        if not len(ca):
            if threshold <= min_share:
                break
            threshold = max(min_share, threshold // 2)
            continue
        # rewire: where both ids of a chosen pair occur in an in-list, replace them by the new node
        pair_of = np.full(total, -1, dtype=np.int64)
        pair_of[ca[:, 0]] = np.arange(len(ca))
        pair_of[ca[:, 1]] = np.arange(len(ca))
        p = pair_of[src]
        hit = np.flatnonzero(p >= 0)
        hkey = dst[hit] * len(ca) + p[hit]
        hk, hcount = np.unique(hkey, return_counts=True)
        applied = hk[hcount == 2]
        support = np.bincount(applied % len(ca), minlength=len(ca))
        keep_pair = support >= min_share
        kept = np.flatnonzero(keep_pair)
        new_id = np.full(len(ca), -1, dtype=np.int64)
        new_id[kept] = n + made + np.arange(len(kept))
        level[new_id[kept]] = 1 + np.maximum(level[ca[kept, 0]], level[ca[kept, 1]])
        inputs.append(ca[kept])
        made += len(kept)
        applied = applied[keep_pair[applied % len(ca)]]
        # the threshold halves every round (geometric schedule), then stays at min_share
        done_at_two = threshold <= min_share and not len(applied)
        threshold = max(min_share, threshold // 2)
        if done_at_two:
            break
        if not len(applied):
            continue
        drop = np.isin(hkey, applied)
        keep = np.ones(len(src), dtype=bool)
        keep[hit[drop]] = False
        add_dst = applied // len(ca)
        add_src = new_id[applied % len(ca)]
        dst = np.concatenate([dst[keep], add_dst])
        src = np.concatenate([src[keep], add_src])
    ins = np.concatenate(inputs) if inputs else np.empty((0, 2), np.int64)
    agg_level = level[n:n + made].copy()
    del level
    return _finish_csr(n, dst, src, ins, agg_level)


# -- the hag.h5 artifact ------------------------------------------------------------------------------
FORMAT = "gnnprep.hag"
FORMAT_VERSION = 1


def write_hag(h: Hag, path, provenance: dict, aggregate: str, capacity: int, graph_fingerprint: str,
              indptr: np.ndarray) -> dict:
    """Write ``hag.h5`` atomically; return the summary written into its root attributes."""
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
    with atomic_output(path) as tmp:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("agg/inputs", data=h.inputs.astype(idx_dtype).reshape(-1, 2))
            f.create_dataset("agg/level_ptr", data=h.level_ptr.astype(np.int64))
            f.create_dataset("adj/indptr", data=h.indptr.astype(np.int64))
            f.create_dataset("adj/indices", data=h.indices.astype(idx_dtype))
            write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance, graph_fingerprint=graph_fingerprint, **summary)
    return summary


def read_hag(path) -> tuple[Hag, dict]:
    from gnnprep.meta import open_artifact

    with open_artifact(path, expect=FORMAT) as f:
        h = Hag(int(f.attrs["num_nodes"]), f["agg/inputs"][:].astype(np.int64).reshape(-1, 2),
                f["agg/level_ptr"][:].astype(np.int64), f["adj/indptr"][:].astype(np.int64),
                f["adj/indices"][:].astype(np.int64))
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
    return h, attrs


def read_hag_summary(path, graph_fingerprint: str) -> dict | None:
    """The root summary of a HAG built for the graph with ``graph_fingerprint``, or None when
    ``path`` is missing, unreadable or for another graph (``--hag auto`` then ignores it)."""
    from gnnprep.meta import open_artifact

    try:
        with open_artifact(path, expect=FORMAT) as f:
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
    except GnnprepError:
        return None
    return attrs if attrs.get("graph_fingerprint") == graph_fingerprint else None
