"""HAG searches: which aggregation nodes to add (Jia et al., "Redundancy-Free Computation Graphs for
Graph Neural Networks", KDD 2020). The structure, its cost and its executor live in :mod:`gnnprep.hag.structure`.

- :func:`exact_search` — Algorithm 3 of the paper (set aggregation): greedily merge the pair of ids
  shared by the most in-lists, one pair at a time.
- :func:`sequential_search` — the prefix-sharing HAG for order-dependent aggregation (Theorem 2).
- :func:`rounds_search` — a scalable approximation of Algorithm 3: candidate pairs from a window of
  frequency-sorted in-lists, merged in rounds of conflict-free matchings.

Every search returns a :class:`gnnprep.hag.structure.Hag` whose covers equal the in-lists (see that module's
docstring for the definitions); ``capacity`` bounds |VA| (default ⌊|V|/4⌋, as in the paper).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict

import numpy as np

from gnnprep.core.errors import OptionError
from gnnprep.core.sizes import format_size
from gnnprep.hag.structure import Hag, finish_csr, finish_lists, order_by_rows


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
        raise OptionError("--method", f"exact needs about {pairs * BYTES_PER_PAIR / 2**20:.0f} MiB for its {pairs:,} "
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
        _merge_exact(lists, users, count, heap, a, b, n + len(inputs))
        inputs.append((a, b))
    return finish_lists(n, [sorted(s) for s in lists], inputs)


def _merge_exact(lists: list[set[int]], users: dict[int, set[int]], count: dict[tuple[int, int], int],
                 heap: list, a: int, b: int, new: int) -> None:
    """Replace ids a and b by the aggregation node ``new`` in every in-list that holds both, updating
    the pair counts (and pushing the pairs with ``new`` that become shared) as it goes."""
    for v in users[a] & users[b]:
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
    return finish_lists(n, lists, inputs, ordered=True)


# -- rounds: the scalable search ------------------------------------------------------------------------
def _window_keys(src, follow, window, big, chunk):
    """Yield the keys min·big + max of the candidate pairs (src[i], src[i+k]), 1 ≤ k ≤ window, in
    bounded chunks of entries."""
    for k in range(1, window + 1):
        for s0 in range(0, len(src), chunk):
            i = s0 + np.flatnonzero(follow[s0:s0 + chunk] >= k)
            if len(i):
                a, b = src[i], src[i + k]
                yield np.minimum(a, b) * big + np.maximum(a, b)


def _count_candidates(src, follow, window, big, parts, keep_from, chunk=1 << 22, sort_items=None):
    """Distinct candidate pairs (src[i], src[i+k]), 1 ≤ k ≤ window, within one in-list, with their
    counts, keeping those counted ≥ keep_from. Counted one hash partition (key mod parts) at a
    time: the partition's keys are written into one preallocated array, grouped into sub-buckets of
    about ``sort_items`` keys (default ``CALL_ITEMS``), each sorted in place and run-length counted —
    short numpy calls, so a SIGTERM or Ctrl-C is acted on between them — and a key costs at most
    8 + 1 + 2·8 bytes (key, run flag, run start and count). Output in bucket order (not sorted)."""
    sort_items = CALL_ITEMS if sort_items is None else sort_items
    total = sum(int((follow >= k).sum()) for k in range(1, window + 1))
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    subs = max(1, math.ceil(total / parts / sort_items))
    nb = parts * subs  # bucket = key mod nb; its partition = bucket mod parts, sub-bucket = bucket // parts
    if nb == 1:
        sizes = np.array([total], dtype=np.int64)
    else:
        sizes = np.zeros(nb, dtype=np.int64)
        for key in _window_keys(src, follow, window, big, chunk):
            sizes += np.bincount(key % nb, minlength=nb)
    sizes = sizes.reshape(subs, parts)  # [sub, part]
    out_u, out_c = [], []
    for part in range(parts):
        psize = sizes[:, part]
        if psize.sum() == 0:
            continue
        keys = np.empty(int(psize.sum()), dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum(psize)])
        cursor = bounds[:-1].copy()
        for key in _window_keys(src, follow, window, big, chunk):
            if nb > 1:
                bucket = key % nb
                if parts > 1:
                    mine = bucket % parts == part
                    key, bucket = key[mine], bucket[mine]
                sub = bucket // parts
                order = np.argsort(sub, kind="stable")
                sub, key = sub[order], key[order]
                cnt = np.bincount(sub, minlength=subs)
                first = np.cumsum(cnt) - cnt
                keys[cursor[sub] + np.arange(len(sub)) - first[sub]] = key
                cursor += cnt
            else:
                keys[cursor[0]:cursor[0] + len(key)] = key
                cursor[0] += len(key)
        for j in range(subs):
            run = keys[bounds[j]:bounds[j + 1]]
            if not len(run):
                continue
            run.sort()
            flag = np.empty(len(run), dtype=bool)
            flag[0] = True
            np.not_equal(run[1:], run[:-1], out=flag[1:])
            starts = np.flatnonzero(flag)
            del flag
            counts = np.diff(starts, append=len(run))
            good = counts >= keep_from
            out_u.append(run[starts[good]])
            out_c.append(counts[good])
            del starts, counts, good
        del keys
    if not out_u:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_u), np.concatenate(out_c)


def _rounds_sizes(m: int, window: int | None, memory_budget: int | None,
                  longest: int | None = None) -> tuple[int, int]:
    """(window, hash partitions) for rounds over m stored entries within ``memory_budget``. A given
    window is clipped to ``longest`` − 1 (the longest in-list: no pair is farther apart, and lists
    only shrink), so a huge window costs no more than the graph allows.

    Memory: ~64 B per entry for the per-round arrays, 26 B per candidate key while counting one
    hash partition (key mod parts) of the window's keys, plus a bounded chunk of temporaries."""
    fixed = 64 * m + 256 * 2**20
    if memory_budget is not None and fixed >= memory_budget:
        raise OptionError("--memory-budget", f"{format_size(memory_budget)} is too small for rounds over {m:,} "
                                             f"entries (needs more than {format_size(fixed)})")
    room = (memory_budget - fixed) if memory_budget is not None else None
    if window is None:  # 16 recovers >= 95% of exact's savings on Cora; narrower when memory is short
        window = 16 if room is None else int(min(16, max(2, 2 * room // max(1, 26 * m))))
    elif longest is not None:
        window = max(1, min(int(window), longest - 1))
    window = int(window)
    parts = 1 if room is None else max(1, math.ceil(26 * window * m / max(1, room)))
    return window, parts


def _sort_by_frequency(dst: np.ndarray, src: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step (1): every in-list sorted by global frequency (ids in more in-lists first, ties by id);
    returns (dst, src, follow), follow[i] = how many entries of its in-list come after entry i.

    The entries are ordered by (dst, rank of src), rank = an id's place in (frequency descending,
    id): one sort over the ids, then the entries row block by row block
    (:func:`gnnprep.hag.structure.order_by_rows`),
    so no numpy call sorts all m entries at once and a signal is acted on between blocks."""
    freq = np.bincount(src, minlength=total)
    rank = np.empty(total, dtype=np.int64)
    rank[np.argsort(-freq, kind="stable")] = np.arange(total, dtype=np.int64)
    rows = int(dst.max(initial=-1)) + 1
    rowptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=rows), out=rowptr[1:])
    order = order_by_rows(dst, src, rowptr, rank)
    del rank, freq
    dst, src = dst[order], src[order]
    del order
    follow = rowptr[dst + 1] - np.arange(len(dst), dtype=np.int64) - 1  # entries after this one
    return dst, src, follow


def _greedy_matching(uniq: np.ndarray, counts: np.ndarray, threshold: int, big: np.int64, level: np.ndarray,
                     max_depth: int, total: int, room: int) -> np.ndarray:
    """Step (3): candidates counted ≥ ``threshold`` whose node would be at most ``max_depth`` deep,
    walked by count (ties: smallest pair), greedily matched — no id in two chosen pairs — up to
    ``room`` pairs; [k, 2] in priority order."""
    sel = np.flatnonzero(counts >= threshold)
    sel = sel[np.lexsort((uniq[sel], -counts[sel]))]
    a_all, b_all = uniq[sel] // big, uniq[sel] % big
    ok_depth = np.maximum(level[a_all], level[b_all]) + 1 <= max_depth
    a_all, b_all = a_all[ok_depth], b_all[ok_depth]
    used = np.zeros(total, dtype=bool)
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
    if not picked_a:
        return np.empty((0, 2), np.int64)
    return np.stack([np.concatenate(picked_a), np.concatenate(picked_b)], axis=1)


def _rewire(dst: np.ndarray, src: np.ndarray, ca: np.ndarray, level: np.ndarray, first_id: int, total: int,
            min_share: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Step (4), all in-lists at once: a chosen pair (a, b) becomes aggregation node ``first_id + j``
    (numbered in the order of ``ca``) when both ids occur in at least ``min_share`` in-lists, and
    replaces a and b there. Sets the new nodes' levels; returns (their input pairs, dst, src, how
    many in-lists were rewired)."""
    k = len(ca)
    pair_of = np.full(total, -1, dtype=np.int64)
    pair_of[ca[:, 0]] = np.arange(k)
    pair_of[ca[:, 1]] = np.arange(k)
    p = pair_of[src]
    hit = np.flatnonzero(p >= 0)
    hkey = dst[hit] * k + p[hit]
    hk, hcount = np.unique(hkey, return_counts=True)
    applied = hk[hcount == 2]  # (in-list, pair) keys where both ids occur
    support = np.bincount(applied % k, minlength=k)
    keep_pair = support >= min_share
    kept = np.flatnonzero(keep_pair)
    new_id = np.full(k, -1, dtype=np.int64)
    new_id[kept] = first_id + np.arange(len(kept))
    level[new_id[kept]] = 1 + np.maximum(level[ca[kept, 0]], level[ca[kept, 1]])
    applied = applied[keep_pair[applied % k]]
    if len(applied):
        drop = np.isin(hkey, applied)
        keep = np.ones(len(src), dtype=bool)
        keep[hit[drop]] = False
        dst = np.concatenate([dst[keep], applied // k])
        src = np.concatenate([src[keep], new_id[applied % k]])
    return ca[kept], dst, src, len(applied)



GREEDY_RATIO = 0.8    # capped rounds take the pairs counted >= this fraction of the round's best count
RECOUNT_FACTOR = 8    # capped rounds recount exactly this many candidates per aggregation node left
CALL_ITEMS = 1 << 20  # lookups one numpy call makes while recounting (a signal is acted on between calls)


def _top_candidates(uniq: np.ndarray, counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k candidates with the largest counts (ties: the first in the given order), in the given order."""
    if len(uniq) <= k:
        return uniq, counts
    hist = np.bincount(counts)
    at_least = np.cumsum(hist[::-1])[::-1]      # at_least[c] = #counts >= c
    cut = int(np.searchsorted(-at_least, -k, side="right"))  # smallest c with at_least[c] <= k
    take = counts >= cut
    short = k - int(take.sum())
    if short > 0 and cut > 0:
        take[np.flatnonzero(counts == cut - 1)[:short]] = True
    sel = np.flatnonzero(take)
    return uniq[sel], counts[sel]


def _exact_support(dst: np.ndarray, src: np.ndarray, a: np.ndarray, b: np.ndarray, total: int) -> np.ndarray:
    """|users(a) ∩ users(b)| for every pair: how many in-lists hold both ids (ids occur at most once per
    in-list). Walks the users of the rarer id of each pair and looks (user, other id) up in the sorted
    keys id·n + user, about ``CALL_ITEMS`` lookups per numpy call."""
    n = np.int64(int(dst.max(initial=0)) + 1)
    mem = np.sort(src * n + dst)
    start = np.searchsorted(mem, np.arange(total + 1, dtype=np.int64) * n)
    deg = np.diff(start)
    swap = deg[a] > deg[b]
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    work = np.cumsum(deg[a])
    out = np.zeros(len(a), dtype=np.int64)
    i = 0
    while i < len(a):
        base = work[i - 1] if i else 0
        j = max(i + 1, int(np.searchsorted(work, base + CALL_ITEMS, side="right")))
        aa, bb = a[i:j], b[i:j]
        d = deg[aa]
        rep = np.repeat(np.arange(len(aa)), d)
        off = np.arange(int(d.sum())) - np.repeat(np.cumsum(d) - d, d)
        key = bb[rep] * n + mem[start[aa][rep] + off] % n
        pos = np.minimum(np.searchsorted(mem, key), len(mem) - 1)
        out[i:j] = np.bincount(rep[mem[pos] == key], minlength=len(aa))
        i = j
    return out


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

    Under a capacity that can bind — fewer aggregation nodes left than merges still possible, at
    most (stored entries − non-empty in-lists) / ``min_share`` since a merge shared by t lists removes
    t entries — the choice order matters (the greedy keeps the most shared pairs), so a round instead
    (a) recounts exactly, as |users(a) ∩ users(b)|, the ``RECOUNT_FACTOR`` · room candidates with the
    largest window counts (window counts only bound the true counts from below) and (b) takes only
    the pairs counted ≥ ``GREEDY_RATIO`` × the round's largest count: a decreasing-threshold greedy
    (Badanidiyuru & Vondrák, "Fast algorithms for maximizing submodular functions", SODA 2014),
    anchored to the current best count each round rather than halved. Once the capacity can no
    longer bind, rounds go on in bulk as above.
    """
    n = len(indptr) - 1
    m = int(indptr[-1])
    # every aggregation node removes at least one stored entry, so m bounds any capacity
    capacity = n // 4 if capacity is None else min(int(capacity), m)
    window, parts = _rounds_sizes(m, window, memory_budget, int(np.diff(indptr).max(initial=0)))
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    src = indices.astype(np.int64).copy()
    inputs: list[np.ndarray] = []          # [k, 2] input pairs of the aggregation nodes, per round
    made = 0                               # aggregation nodes so far
    level = np.zeros(n + capacity + 1, dtype=np.int64)
    big = np.int64(n + capacity + 1)
    threshold = None
    nonempty = int((np.diff(indptr) > 0).sum())  # in-lists never become empty
    for _ in range(max_rounds):
        if made >= capacity or len(src) == 0:
            break
        total = n + made
        dst, src, follow = _sort_by_frequency(dst, src, total)
        room = capacity - made
        capped = room < (len(src) - nonempty) // min_share
        keep_from = min_share if (threshold is None or capped) else max(min_share, threshold // 2)
        uniq, counts = _count_candidates(src, follow, window, big, parts, keep_from)
        del follow
        if not len(uniq):
            break
        if capped:
            uniq, counts = _top_candidates(uniq, counts, max(RECOUNT_FACTOR * room, 1024))
            counts = _exact_support(dst, src, uniq // big, uniq % big, total)
            threshold = max(min_share, math.ceil(GREEDY_RATIO * int(counts.max())))
            ca = _greedy_matching(uniq, counts, threshold, big, level, max_depth, total, room)
            if not len(ca) and threshold > min_share:  # the best pairs are all too deep
                threshold = min_share
                ca = _greedy_matching(uniq, counts, threshold, big, level, max_depth, total, room)
            del uniq, counts
            if not len(ca):
                break
            pairs, dst, src, rewired = _rewire(dst, src, ca, level, n + made, total, min_share)
            inputs.append(pairs)
            made += len(pairs)
            if not rewired:
                break
            continue
        if threshold is None:
            threshold = int(counts.max())
        while threshold > min_share and not (counts >= threshold).any():
            threshold //= 2
        threshold = max(threshold, min_share)
        ca = _greedy_matching(uniq, counts, threshold, big, level, max_depth, total, capacity - made)
        del uniq, counts
        if not len(ca):
            if threshold <= min_share:
                break
            threshold = max(min_share, threshold // 2)
            continue
        pairs, dst, src, rewired = _rewire(dst, src, ca, level, n + made, total, min_share)
        inputs.append(pairs)
        made += len(pairs)
        # the threshold halves every round (geometric schedule), then stays at min_share
        if threshold <= min_share and not rewired:
            break
        threshold = max(min_share, threshold // 2)
    ins = np.concatenate(inputs) if inputs else np.empty((0, 2), np.int64)
    agg_level = level[n:n + made].copy()
    del level
    return finish_csr(n, dst, src, ins, agg_level)
