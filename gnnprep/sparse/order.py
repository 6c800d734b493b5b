"""Node reordering for locality: relabel nodes so that neighbours get nearby ids.

S·X gathers one row of X per stored nonzero; when ids are arbitrary (as in most datasets) those
gathers miss every cache. The orders:

- ``community`` (the default): label propagation (Raghavan, Albert & Kumara 2007, "Near linear time
  algorithm to detect community structures in large-scale networks") — each node repeatedly takes
  the label most frequent among its neighbours — and nodes sorted by label, so a community's rows
  are contiguous and the rows a row block gathers stay in cache. Ordering by communities for sparse
  products is the idea of Rabbit Order (Arai et al., IPDPS 2016); label propagation is its cheapest
  form. Here: asynchronous sweeps in id order (deterministic), ties to the smallest label, two
  sweeps by default (on a 1M-node, 20M-entry power-law graph with planted communities of 2,000
  nodes two sweeps recover ~1,000 groups and halve the kernel time; more sweeps gain nothing).
- ``bfs``: breadth-first order (Cuthill–McKee without its per-level degree sort). On power-law
  graphs the frontier explodes after a few levels and mixes communities; kept for comparison.
- ``degree`` (:func:`degree_order`, hubs first) and ``degree-bucket`` (:func:`degree_bucket_order`,
  power-of-two degree buckets, another order kept inside a bucket): for graphs without communities
  (R-MAT), where label propagation finds nothing; they pack the rows most entries gather into one
  prefix of X (:func:`prefix_share` measures it; ``near_share`` barely moves). Found from the row
  lengths alone in O(n).

An order only pays when it puts neighbours near each other: :func:`near_share` measures the share
of stored entries whose endpoints land within a cache-sized window of ids, before and after, and the
caller drops an order that does not raise it (a graph without communities, or label propagation
collapsing into one giant label). The artifact is always written in the original node order; only
the computation runs in the new order, and each row is still summed in its stored order, so results
are bit-for-bit those of the unordered computation.

An order is found once per graph: :func:`save_cached` keeps it beside the graph store
(``<store>.order-<kind>.npz``: the permutation, the graph's fingerprint and the near shares), and
every later precompute of that graph (other hops, operators, rows) loads it with :func:`load_cached`,
which ignores a file for another graph or one that is not a permutation of the n nodes.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gnnprep.sparse.prefetch import prefetch

LOCALITY_WINDOW = 4096   # ids: a row block's gathers that land this close stay in cache (near_share's window)

@njit(cache=True, nogil=True)
def _bfs(indptr, indices, starts):
    n = len(indptr) - 1
    seen = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for s in starts:
        if seen[s]:
            continue
        seen[s] = True
        order[tail] = s
        tail += 1
        while head < tail:
            v = order[head]
            head += 1
            for p in range(indptr[v], indptr[v + 1]):
                u = indices[p]
                if not seen[u]:
                    seen[u] = True
                    order[tail] = u
                    tail += 1
    return order


@njit(parallel=True, cache=True, nogil=True)
def _relabel(indptr, indices, order, inv, new_indptr, new_indices):
    for i in prange(len(order)):
        v = order[i]
        q = new_indptr[i]
        for p in range(indptr[v], indptr[v + 1]):
            new_indices[q] = inv[indices[p]]
            q += 1


LABEL_AHEAD = 128   # entries ahead whose neighbour label is prefetched (a few rows of ~30)
COUNT_AHEAD = 48    # entries ahead whose label's count is prefetched (its label is cached by then)


@njit(cache=True, nogil=True)
def propagate_labels(indptr_block, indices_block, r0, label, count, buf, first):
    """One asynchronous label-propagation pass over rows r0 .. r0 + len(indptr_block) - 2 (their
    entries are ``indices_block``, starting at global offset ``indptr_block[0]``): each row takes the
    label most frequent among its neighbours (ties to the smallest), in id order, seeing the labels
    already updated in this pass. ``count`` is all zeros on entry and on exit.

    A row's neighbour labels are first gathered into ``buf`` (independent loads the CPU overlaps),
    then counted, and the counts reset from ``buf``: about 30% faster than counting as they are
    loaded and re-reading them to reset (5.6M nodes, 154M entries), with the same labels. While
    entry p is gathered, the label of entry p + LABEL_AHEAD and the count of entry p + COUNT_AHEAD's
    label are prefetched (both arrays are n long and miss the cache on large graphs): about 1.8x
    faster again, the same labels (a prefetch changes no value). ``first``: this is the first pass
    from label[u] = u, so a neighbour u > v (not yet visited) still holds label u and is not loaded:
    about half the gathers of that pass saved, the same labels."""
    base = indptr_block[0]
    size = len(buf)
    m_all = len(indices_block)
    for i in range(len(indptr_block) - 1):
        v = r0 + i
        p0, p1 = indptr_block[i] - base, indptr_block[i + 1] - base
        best = label[v]
        best_count = 0
        for q0 in range(p0, p1, size):
            m = min(size, p1 - q0)
            if first:   # the first pass from label[u] = u: rows after v still hold their own id
                for t in range(m):
                    p = q0 + t
                    if p + LABEL_AHEAD < m_all:
                        u = indices_block[p + LABEL_AHEAD]
                        if u < v:
                            prefetch(label, u)
                    if p + COUNT_AHEAD < m_all:
                        u = indices_block[p + COUNT_AHEAD]
                        prefetch(count, label[u] if u < v else u)
                    u = indices_block[p]
                    buf[t] = label[u] if u < v else u
            else:
                for t in range(m):
                    p = q0 + t
                    if p + LABEL_AHEAD < m_all:
                        prefetch(label, indices_block[p + LABEL_AHEAD])
                    if p + COUNT_AHEAD < m_all:
                        prefetch(count, label[indices_block[p + COUNT_AHEAD]])
                    buf[t] = label[indices_block[p]]
            for t in range(m):
                lab = buf[t]
                c = count[lab] + 1
                count[lab] = c
                if c > best_count or (c == best_count and lab < best):
                    best_count = c
                    best = lab
        if p1 - p0 <= size:
            for t in range(p1 - p0):
                count[buf[t]] = 0
        else:
            for p in range(p0, p1):
                count[label[indices_block[p]]] = 0
        label[v] = best


@njit(cache=True, nogil=True)
def group_by_label(label):
    """Node ids grouped by label (labels ascending, ids ascending inside a label): a counting sort,
    equal to ``np.argsort(label, kind="stable")`` in O(n)."""
    n = len(label)
    start = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        start[label[v] + 1] += 1
    for i in range(n):
        start[i + 1] += start[i]
    order = np.empty(n, dtype=np.int64)
    for v in range(n):
        lab = label[v]
        order[start[lab]] = v
        start[lab] += 1
    return order


PROPAGATE_BUFFER = 1 << 16   # neighbour labels gathered per step (a row's, unless it is longer)


def row_blocks(indptr: np.ndarray, lo: int, hi: int, entries: int) -> list[tuple[int, int]]:
    """Rows lo..hi-1 cut into contiguous blocks where each new block starts at the row holding the
    next multiple of ``entries`` stored entries: at most ``entries`` beyond a block's first row."""
    cuts = np.searchsorted(indptr[lo:hi + 1], np.arange(indptr[lo], indptr[hi], max(1, entries)), side="right") - 1
    bounds = np.unique(np.concatenate([cuts + lo, [lo, hi]]))
    return [(int(r0), int(r1)) for r0, r1 in zip(bounds[:-1], bounds[1:])]


def community_order(indptr: np.ndarray, indices: np.ndarray, sweeps: int = 2) -> np.ndarray:
    """Nodes grouped by label-propagation community (stable in id order inside a community)."""
    n = len(indptr) - 1
    label = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    count = np.zeros(n, dtype=np.int32)
    buf = np.empty(PROPAGATE_BUFFER, dtype=label.dtype)
    for sweep in range(sweeps):
        propagate_labels(indptr, indices, 0, label, count, buf, sweep == 0)
    return group_by_label(label)


@njit(cache=True, nogil=True)
def _near_count(indptr, indices, picks, inv, window):
    near = 0
    for p in picks:
        # the row of entry p: binary search in indptr
        lo, hi = 0, len(indptr) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if indptr[mid] <= p:
                lo = mid
            else:
                hi = mid
        a = inv[lo] if len(inv) else np.int64(lo)
        u = np.int64(indices[p])
        b = inv[u] if len(inv) else u
        if abs(a - b) <= window:
            near += 1
    return near


def near_share(indptr: np.ndarray, indices: np.ndarray, window: int, inv: np.ndarray | None = None,
               samples: int = 200_000, seed: int = 0) -> float:
    """Share of sampled stored entries (v, u) with |id(v) − id(u)| ≤ window, ids after ``inv``
    (new id of each old id) when given: how many gathers hit rows near the row being computed."""
    m = len(indices)
    if m == 0:
        return 1.0
    picks = np.random.default_rng(seed).integers(0, m, min(samples, m))
    inv = np.empty(0, dtype=np.int64) if inv is None else inv
    return _near_count(indptr, indices, picks, inv, int(window)) / len(picks)


def bfs_order(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Breadth-first order, components started from their lowest-degree nodes (as RCM does)."""
    starts = np.argsort(np.diff(indptr), kind="stable").astype(np.int64)
    return _bfs(indptr, indices, starts)


def permute_csr(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR of P A Pᵀ where new id i is old id order[i]; returns (indptr, indices, inv)."""
    n = len(order)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    deg = np.diff(indptr)[order]
    new_indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    new_indices = np.empty(len(indices), dtype=indices.dtype)
    _relabel(indptr, indices, order, inv.astype(indices.dtype), new_indptr, new_indices)
    return new_indptr, new_indices, inv


@njit(parallel=True, cache=True, nogil=True)
def _move_values(indptr, values, order, new_indptr, new_values):
    for i in prange(len(order)):
        v = order[i]
        q = new_indptr[i]
        for p in range(indptr[v], indptr[v + 1]):
            new_values[q] = values[p]
            q += 1


def permute_values(indptr: np.ndarray, values: np.ndarray, order: np.ndarray, new_indptr: np.ndarray) -> np.ndarray:
    """Per-entry values (edge weights) moved with their entries into :func:`permute_csr`'s layout:
    each row's entries keep their stored order, so every row sums the same terms in the same order."""
    new_values = np.empty_like(values)
    _move_values(indptr, values, order, new_indptr, new_values)
    return new_values


@njit(parallel=True, cache=True, nogil=True)
def _scatter_rows(indptr_block, indices_block, r0, inv, new_indptr, new_indices):
    """Old rows r0.. (entries ``indices_block`` from global offset ``indptr_block[0]``) written, with
    their ids mapped through ``inv``, at their new rows' places in ``new_indices``."""
    base = indptr_block[0]
    for i in prange(len(indptr_block) - 1):
        q = new_indptr[inv[r0 + i]]
        for p in range(indptr_block[i] - base, indptr_block[i + 1] - base):
            new_indices[q] = inv[indices_block[p]]
            q += 1


def permute_csr_streamed(indptr: np.ndarray, read, order: np.ndarray, dtype,
                         block_entries: int = 1 << 24) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`permute_csr` without the old column ids in memory: ``read(p0, p1)`` gives stored
    entries p0..p1-1 (e.g. from the graph store), read in row blocks of about ``block_entries`` and
    scattered to their new rows. In memory: the new CSR, ``inv`` and one block — so an order costs
    no second copy of S (what lets a tight budget afford it)."""
    n = len(order)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    new_indptr = np.concatenate([[0], np.cumsum(np.diff(indptr)[order])]).astype(np.int64)
    new_indices = np.empty(int(indptr[-1]), dtype=dtype)
    inv_ids = inv.astype(dtype)
    for r0, r1 in row_blocks(indptr, 0, n, block_entries):
        p0, p1 = int(indptr[r0]), int(indptr[r1])
        _scatter_rows(indptr[r0:r1 + 1], read(p0, p1), int(r0), inv_ids, new_indptr, new_indices)
    return new_indptr, new_indices, inv


def locality(indptr: np.ndarray, indices: np.ndarray, samples: int = 100_000, seed: int = 0) -> float:
    """Mean |u - v| / n over sampled stored entries: ~1/3 for random ids, small for local ones."""
    n = len(indptr) - 1
    m = len(indices)
    if m == 0 or n < 2:
        return 0.0
    p = np.random.default_rng(seed).integers(0, m, min(samples, m))
    v = np.searchsorted(indptr, p, side="right") - 1
    return float(np.abs(indices[p].astype(np.int64) - v).mean() / n)


def find_order(kind: str, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The node order of ``kind`` (community, bfs, degree, degree-bucket) of the CSR (indptr, indices)."""
    if kind == "community":
        return community_order(indptr, indices)
    if kind == "bfs":
        return bfs_order(indptr, indices)
    if kind == "degree":
        return degree_order(indptr)
    if kind == "degree-bucket":
        return degree_bucket_order(indptr)
    raise ValueError(f"unknown node order {kind!r}")


def warm_up(index_dtypes=(np.int32, np.int64), kinds=("community", "bfs"), find: bool = True) -> None:
    """Compile (or load from numba's cache) the ordering functions before memory is measured: for
    each index dtype the relabelling, and with ``find`` the orders of ``kinds`` and ``near_share``
    (a cached order needs only the relabelling)."""
    ip = np.array([0, 1, 2], dtype=np.int64)
    for dtype in index_dtypes:
        idx = np.array([1, 0], dtype=dtype)
        order = np.array([1, 0], dtype=np.int64)
        if find:
            for kind in kinds:
                order = find_order(kind, ip, idx)
            inv = np.empty(2, dtype=np.int64)
            inv[order] = np.arange(2)
            near_share(ip, idx, 1, inv)
            near_share(ip, idx, 1)
        permute_csr(ip, idx, order)
        permute_csr_streamed(ip, lambda p0, p1, idx=idx: idx[p0:p1], order, dtype)


def near_share_windows(indptr: np.ndarray, indices, window: int, inv: np.ndarray | None = None,
                       windows: int = 256, width: int = 1024) -> float:
    """:func:`near_share` estimated from ``windows`` evenly spaced runs of ``width`` stored entries,
    so that ``indices`` may be an HDF5 dataset (a few small contiguous reads, no random ones)."""
    m = int(indptr[-1])
    if m == 0:
        return 1.0
    near = total = 0
    for start in np.unique(np.linspace(0, max(0, m - width), min(windows, max(1, m // width))).astype(np.int64)):
        cols = np.asarray(indices[start:start + width]).astype(np.int64)
        rows = np.searchsorted(indptr, np.arange(start, start + len(cols)), side="right") - 1
        if inv is not None:
            cols, rows = inv[cols], inv[rows]
        near += int(np.count_nonzero(np.abs(cols - rows) <= window))
        total += len(cols)
    return near / total


# -- degree orders: graphs without communities -----------------------------------------------------
# On a graph without communities (an R-MAT / Kronecker graph with permuted ids) no order brings a
# row's neighbours near it: each node is gathered by ~avg-degree rows scattered over the whole
# computation, so only the rows gathered very often can be reused from cache, and which those are
# does not depend on the order. What an order still changes is how tightly they are packed: with
# hubs first, the rows (and scalings r[u]; 16 share a 64-byte line) of the nodes most entries gather
# form one small contiguous prefix of X, which the caches, the TLB and the DRAM pages hold with no
# other rows' bytes mixed in. On the 2.8M-node, 83M-entry R-MAT graph of benchmarks/bench_rmat.py
# (d = 128, 2 threads, precompute's prefetching row kernel): 5-8% fewer CPU seconds per hop with the
# prefetch distance for the width (1.99 -> 1.89 s), 19% with a fixed 64 entries (2.59 -> 2.09 s),
# bit-for-bit the same rows.
# ``near_share`` barely moves for these orders; :func:`prefix_share` (the share of entries gathering
# the first ids) says what they do (0.02 -> 0.66 for the first 65,536 rows there).

@njit(cache=True, nogil=True)
def _stable_bucket_order(key, keys):
    """Node ids sorted by ``key`` ascending (0 <= key < keys), ids ascending inside a key: a
    counting sort, O(n + keys), equal to ``np.argsort(key, kind="stable")``."""
    n = len(key)
    start = np.zeros(keys + 1, dtype=np.int64)
    for v in range(n):
        start[key[v] + 1] += 1
    for k in range(keys):
        start[k + 1] += start[k]
    order = np.empty(n, dtype=np.int64)
    for v in range(n):
        k = key[v]
        order[start[k]] = v
        start[k] += 1
    return order


def degree_order(indptr: np.ndarray) -> np.ndarray:
    """Hubs first: nodes by stored row length (degree) descending, ties in id order, isolated nodes
    last. New id i is old id ``order[i]`` (as :func:`community_order`). A counting sort over the
    degrees: O(n + max degree), ~10 ms per million nodes, no look at the column ids."""
    deg = np.diff(np.asarray(indptr, dtype=np.int64))
    if len(deg) == 0:
        return np.empty(0, dtype=np.int64)
    top = int(deg.max())
    return _stable_bucket_order(top - deg, top + 1)


def degree_buckets(indptr: np.ndarray) -> np.ndarray:
    """Each node's degree bucket for :func:`degree_bucket_order`: 0 for an isolated node, else
    1 + floor(log2(degree)) (1: degree 1; 2: 2-3; 3: 4-7; ...)."""
    deg = np.diff(np.asarray(indptr, dtype=np.int64))
    # frexp: deg = m · 2**e with 0.5 <= m < 1, so e = floor(log2(deg)) + 1 exactly (and 0 for 0)
    return np.frexp(deg.astype(np.float64))[1].astype(np.int64)


def degree_bucket_order(indptr: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
    """Degree-based grouping (DBG; Faldu, Diamond & Grot, "A Closer Look at Lightweight Graph
    Reordering", IISWC 2019): nodes in power-of-two degree buckets (:func:`degree_buckets`), the
    highest bucket first, isolated nodes last; inside a bucket nodes keep their relative position
    in ``within`` (an order, e.g. :func:`community_order`'s; default: id order). Packs the hubs into
    a prefix like :func:`degree_order` while keeping whatever locality ``within`` gave the rest.
    O(n + number of buckets)."""
    bucket = degree_buckets(indptr)
    n = len(bucket)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    top = int(bucket.max())
    if within is None:
        return _stable_bucket_order(top - bucket, top + 1)
    within = np.asarray(within, dtype=np.int64)
    if len(within) != n:
        raise ValueError(f"within: {len(within)} ids for {n} nodes")
    # positions in ``within`` sorted by bucket, stably: nodes of a bucket stay in ``within``'s order
    return within[_stable_bucket_order(top - bucket[within], top + 1)]


@njit(cache=True, nogil=True)
def _prefix_count(indices, picks, inv, rows):
    hit = 0
    for p in picks:
        u = np.int64(indices[p])
        if (inv[u] if len(inv) else u) < rows:
            hit += 1
    return hit


def prefix_share(indices: np.ndarray, rows: int, inv: np.ndarray | None = None, samples: int = 200_000,
                 seed: int = 0) -> float:
    """Share of sampled stored entries whose column id (after ``inv``, new id of each old id, when
    given) is below ``rows``: the gathers that land in X's first ``rows`` rows. For a hubs-first
    order and ``rows`` = the rows a cache holds, the share of gathers that can stay in cache as one
    contiguous block (on the 2.8M-node R-MAT bench graph at d = 128, 65,536 rows = 32 MiB: ~0.66
    against ~0.02 for its random ids). 1.0 for a graph without entries."""
    m = len(indices)
    if m == 0:
        return 1.0
    picks = np.random.default_rng(seed).integers(0, m, min(samples, m))
    inv = np.empty(0, dtype=np.int64) if inv is None else np.asarray(inv, dtype=np.int64)
    return _prefix_count(indices, picks, inv, int(rows)) / len(picks)


# -- which order a graph gets ------------------------------------------------------------------------
COMMUNITY_MIN_GAIN = 0.2   # near share gained: the community order pays (precompute's REORDER_MIN_GAIN)
DEGREE_MIN_GAIN = 0.3      # prefix share gained (65,536 rows): a degree order pays where no community does
PREFIX_ROWS = 65536        # the prefix share's rows: 32 MiB of X at d = 128, a last-level cache
# kernel seconds in a degree order / in random ids (the planner's ``reorder_speedup`` for it), as the
# command runs it: hop_breakdown's kernel, mean of hops 1-3, ``precompute --hops 3 --rows all
# --reorder degree`` against ``--reorder none``, interleaved (2-core VM, 2026-11-26):
#   2.8M-node R-MAT graph (benchmarks/bench_precompute_command.py), d = 128: one column block 2.95 /
#   3.57 s and 2.36 / 3.20 s (0.74-0.83); two blocks 2.67 / 3.92 s and 2.29 / 3.26 s (0.68-0.70);
#   1M-node power-law graph (the same bench, --kind powerlaw): one block 0.83-0.93 / 1.11-1.14 s
#   (median 0.77), two blocks 0.94-1.08 / 1.04-1.37 s (median 0.83).
# The median of the four, 0.78. (Earlier, one column block on the R-MAT graph alone: 0.77-0.79 as
# the command ran it, 0.92-0.95 in CPU seconds of benchmarks/bench_rmat.py; it was taken as 0.82, and
# the planner then kept the R-MAT graph in random ids, 14.3-24.4 s against 11.8-13.6 s in the order.)
DEGREE_KERNEL_RATIO = 0.78
AUTO_KINDS = ("community", "degree")   # the orders ``choose_order`` weighs, best first


def prefix_share_windows(indices, rows: int, inv: np.ndarray | None = None, windows: int = 256,
                         width: int = 1024) -> float:
    """:func:`prefix_share` estimated from ``windows`` evenly spaced runs of ``width`` stored entries
    (as :func:`near_share_windows`), so that ``indices`` may be an HDF5 dataset."""
    m = int(indices.shape[0])
    if m == 0:
        return 1.0
    hit = total = 0
    for start in np.unique(np.linspace(0, max(0, m - width), min(windows, max(1, m // width))).astype(np.int64)):
        cols = np.asarray(indices[start:start + width]).astype(np.int64)
        if inv is not None:
            cols = inv[cols]
        hit += int(np.count_nonzero(cols < rows))
        total += len(cols)
    return hit / total


def choose_order(shares: dict) -> tuple[str, str]:
    """(kind, why): the node order a graph gets from the figures of its candidate orders,
    ``shares[kind]`` = {"near_share_before", "near_share_after"} for ``community`` and
    {"prefix_share_before", "prefix_share_after"} for ``degree`` (either may be missing: not tried).

    The community order when it brings neighbours near (near share up by at least
    ``COMMUNITY_MIN_GAIN``: the rows a block gathers then stay in cache, the larger win where it
    exists); else hubs first (``degree``) when that packs the gathers into X's first
    ``PREFIX_ROWS`` rows (prefix share up by at least ``DEGREE_MIN_GAIN``: a graph without
    communities whose degrees are skewed, such as R-MAT); else none (``"none"``)."""
    parts = []
    c = shares.get("community")
    if c is not None:
        gain = c["near_share_after"] - c["near_share_before"]
        if gain >= COMMUNITY_MIN_GAIN:
            return "community", (f"community order: near share {c['near_share_before']:.3f} -> "
                                 f"{c['near_share_after']:.3f} (+{gain:.3f} >= {COMMUNITY_MIN_GAIN})")
        parts.append(f"community near share +{gain:.3f} < {COMMUNITY_MIN_GAIN}")
    g = shares.get("degree")
    if g is not None:
        gain = g["prefix_share_after"] - g["prefix_share_before"]
        if gain >= DEGREE_MIN_GAIN:
            return "degree", ("hubs first (degree): " + "; ".join(parts + [
                f"prefix share {g['prefix_share_before']:.3f} -> {g['prefix_share_after']:.3f} "
                f"(+{gain:.3f} >= {DEGREE_MIN_GAIN})"]))
        parts.append(f"degree prefix share +{gain:.3f} < {DEGREE_MIN_GAIN}")
    return "none", "no order: " + ("; ".join(parts) if parts else "none tried")
