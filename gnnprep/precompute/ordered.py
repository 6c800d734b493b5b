"""The CSR in a locality node order, kept beside the graph store: ``<store>.ordered-<kind>.h5`` (issue 24).

A node order (:mod:`gnnprep.sparse.order`, kept by :mod:`gnnprep.graph.order`) makes the rows a
row block gathers local, but relabelling S in memory needs S resident plus ~32 bytes of
bookkeeping per node. This file holds S already relabelled, so a precompute reads row blocks of it
exactly as it reads the store's (resident or streamed, within the budget) and the blocks are as
local as a resident ordered S:

    /indptr   [n+1] int64           row pointers of P A Pᵀ (new row i is old row order[i])
    /indices  [m]   store's dtype   new ids; each row's entries in their stored sequence
    /weights  [m]   float32         (weighted stores) moved with their entries
    /order    [n]   int32 (int64 beyond 2³¹ nodes)   new id i → old id
    /checksums/indices [n+1] uint64   prefix sums over rows of the entries' checksums (below)
    /checksums/weights [n+1] uint64   (weighted stores) the same over the weights' bits

Root attributes: ``format = "gnnprep.ordered-csr"``, ``format_version``, ``graph_fingerprint`` (of
the store it was made from), ``kind``, ``num_nodes``, ``num_edges``, ``weighted``, ``order_checksum``
and the order's near shares.

Integrity (format_version 2, issue 32): entry p holding value v contributes mix(v, p) (a
splitmix64 finaliser of v·K₁ + p·K₂ + salt, uint64 wrap-around), so a checksum sees a swap of two
entries, within a row or between rows, and a flipped bit. ``/checksums/<name>[r]`` is the sum over
the entries of rows < r, so any row range's checksum is two reads away: a range is verified the
first time it is read (:meth:`OrderedCopy.read_indices` folds it into the id check's pass), and
``order_checksum`` (the sum over /order) when the copy is opened. The sums are not keyed: they find
disk errors and edits, not a forger who recomputes them (the copy is a cache the run writes beside
the store, not an input from someone else). The file must read only itself
(:func:`gnnprep.core.artifact.check_self_contained`: no external storage, external link or virtual
dataset). Version 1 copies have no checksums: stale, rewritten. Every row keeps its terms and their order, so a row's sum has the same bits as in
the stored order; results are written back in the stored (original) ids, which are the only ids
users see.

It is a cache like the order file (``<store>.order-<kind>.npz``): written once, out of core within a
memory budget (:func:`build_copy`: one sequential pass over the stored indices per output bucket,
scattering relabelled rows into the bucket), atomically; validated on open (:func:`open_copy`:
format, the graph fingerprint, self-containment, shapes, row pointers, the order a permutation whose
degrees match the store's and whose checksum matches), so a copy of another graph is ignored and a
damaged one is ignored with one warning, and both are rewritten; a row range found damaged as it is
streamed (:class:`DamagedCopyError`) fails the run with the copy removed, so a rerun rewrites it; never
required: where it cannot be written (read-only folder, no disk room) the run computes in the
stored order (streamed S) or relabels in memory (resident S), with the same bytes.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
from numba import njit, prange

from gnnprep.core.errors import GnnprepError
from gnnprep.core.pagecache import dataset_share
from gnnprep.graph.order import DamagedOrderWarning
from gnnprep.graph.store import GraphStore

FORMAT = "gnnprep.ordered-csr"
FORMAT_VERSION = 2           # 2: checksums (issue 32); 1 (none) is stale and rewritten
ORDER_CHUNK = 1 << 20        # order entries read at a time (as plan.ORDER_CHUNK)
READ_ENTRIES = 1 << 24       # stored entries read at a time while the copy is written


def copy_path(store_path, kind: str) -> Path:
    """Where a store's ordered copy of ``kind`` is kept: ``<store>.ordered-<kind>.h5`` beside it."""
    return Path(store_path).with_suffix(f".ordered-{kind}.h5")


def describe_copy(path) -> dict:
    """What ``gnnprep info`` shows of an ordered copy: the store it was made from, its order and sizes,
    and whether it is current (this format version, and the store beside it has the graph fingerprint
    it was made from; its checksums are checked when a run opens it)."""
    from gnnprep.core.artifact import describe_cache

    def stale(store_path: Path, a: dict) -> str | None:
        if a.get("format_version") != FORMAT_VERSION:
            return f"format version {a.get('format_version')}; this gnnprep writes {FORMAT_VERSION}"
        try:
            with GraphStore(store_path) as s:
                fingerprint = s.fingerprint
        except GnnprepError as e:
            return str(e)
        return None if fingerprint == a.get("graph_fingerprint") else f"{store_path} holds another graph now"

    return describe_cache(path, "the graph store's rows in a node order, kept by precompute", ".ordered-{kind}.h5",
                          ("kind", "num_nodes", "num_edges", "near_share_before", "near_share_after"), stale)


def order_dtype(n: int):
    return np.int32 if n < 2**31 else np.int64


def copy_bytes(n: int, m: int, index_bytes: int, weighted: bool) -> int:
    """Bytes of an ordered copy on disk (the row pointers and the checksums' prefix sums included)."""
    return (8 * (n + 1) * (3 if weighted else 2) + m * index_bytes + (4 * m if weighted else 0)
            + np.dtype(order_dtype(n)).itemsize * n)


# -- checksums ---------------------------------------------------------------------------------------
SALT_INDICES, SALT_WEIGHTS, SALT_ORDER = np.uint64(0x1D1CE5), np.uint64(0x3E1647), np.uint64(0x0DE7)
ROW_CHUNK = 1 << 20          # rows whose checksums are summed at a time while the copy is written


@njit(inline="always")
def _mix(v, p, salt):
    """splitmix64's finaliser of v·K₁ + p·K₂ + salt (uint64, wrapping): value v at position p."""
    z = np.uint64(v) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(p) * np.uint64(0xD6E8FEB86659FD93) + salt
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(parallel=True, nogil=True, cache=True)
def _range_sum(vals, p0, salt, n):
    """(Σ_j mix(vals[j], p0 + j), how many vals lie outside [0, n)) — the second 0 when n < 0."""
    s = np.uint64(0)
    bad = 0
    for j in prange(len(vals)):
        v = vals[j]
        s += _mix(v, p0 + j, salt)
        if n >= 0 and (v < 0 or v >= n):
            bad += 1
    return s, bad


@njit(parallel=True, nogil=True, cache=True)
def _row_sums(ip, vals, q_base, salt, out):
    """out[i] = Σ mix(vals[p - q_base], p) over row i's entries p = ip[i] .. ip[i+1]-1."""
    for i in prange(len(ip) - 1):
        s = np.uint64(0)
        for p in range(ip[i], ip[i + 1]):
            s += _mix(vals[p - q_base], p, salt)
        out[i] = s


def _bits(values: np.ndarray) -> np.ndarray:
    """The array the checksum reads: float32 weights by their bits, ids as they are."""
    return values.view(np.uint32) if values.dtype == np.float32 else values


def checksum(values: np.ndarray, p0: int, salt) -> int:
    """The checksum of ``values`` stored at positions p0.. (a uint64 as int)."""
    return int(_range_sum(_bits(values), p0, salt, -1)[0]) if len(values) else 0


def quiet(message: str) -> None:
    """A ``warn`` that says nothing (a copy whose damage was said already, or that was just written)."""


class DamagedCopyError(GnnprepError):
    """The ordered copy failed a check while a run read it: it was removed (a rerun writes it again)."""

    def __init__(self, path, reason: str, removed: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: the ordered copy of the graph is damaged ({reason}); {removed}")


def say(warn, message: str) -> None:
    """``warn(message)``, or a :class:`~gnnprep.graph.order.DamagedOrderWarning` without ``warn``: a
    damaged copy is never an error before the run reads it, but never passed over in silence."""
    if warn is not None:
        warn(message)
    else:
        warnings.warn(message, DamagedOrderWarning, stacklevel=3)


def build_memory(n: int, index_bytes: int) -> int:
    """Bytes :func:`write_copy` holds besides its output bucket and read block: the order (int64, as
    loaded), its inverse (the index dtype) and the new row pointers."""
    return 8 * n + index_bytes * n + 8 * (n + 1)


class OrderedCopy:
    """An open, validated ordered copy: its row pointers in memory, everything else read on demand;
    each entry range checked against the copy's checksums the first time it is read."""

    def __init__(self, path: Path, f: h5py.File, indptr: np.ndarray, info: dict, identity=None):
        self.path, self.f, self.indptr, self.info = path, f, indptr, info
        self.n = len(indptr) - 1
        self.m = int(indptr[-1])
        self.weighted = "weights" in f
        self._identity = identity   # (st_dev, st_ino) of the file opened: removed only if still it
        self._verified: set = set()  # (name, p0, p1) ranges whose checksum matched

    def page_cached(self) -> float | None:
        """The share of the copy's indices the page cache holds now (None: unknown)."""
        return dataset_share(self.f["indices"])

    def read_indices(self, p0: int, p1: int, out: np.ndarray | None = None, check: bool = True) -> np.ndarray:
        """Entries p0..p1-1 (new ids), checked to lie in [0, n) (unless the caller checked them
        already) and against the copy's checksum (once per range, in the same pass);
        :class:`DamagedCopyError` (the copy removed) where either fails."""
        ds = self.f["indices"]
        if out is None:
            block = ds[p0:p1]
        else:
            block = out[:p1 - p0]
            if p1 > p0:
                ds.read_direct(block, np.s_[p0:p1], np.s_[0:p1 - p0])
        key = ("indices", p0, p1)
        if (check or key not in self._verified) and p1 > p0:
            got, bad = _range_sum(block, p0, SALT_INDICES, self.n if check else -1)
            if bad:
                at = int(np.flatnonzero((block < 0) | (block >= self.n))[0])
                self.damaged(f"/indices[{p0 + at}] = {int(block[at])}, not a node id in [0, {self.n})")
            if key not in self._verified:
                self._verify("indices", p0, p1, int(got))
        return block

    def read_weights(self, p0: int, p1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Weights p0..p1-1, checked against the copy's checksum the first time the range is read."""
        ds = self.f["weights"]
        if out is None:
            block = ds[p0:p1]
        else:
            block = out[:p1 - p0]
            if p1 > p0:
                ds.read_direct(block, np.s_[p0:p1], np.s_[0:p1 - p0])
        if ("weights", p0, p1) not in self._verified and p1 > p0:
            self._verify("weights", p0, p1, checksum(block, p0, SALT_WEIGHTS))
        return block

    def _verify(self, name: str, p0: int, p1: int, got: int) -> None:
        """Compare the checksum ``got`` of entries p0..p1-1 of ``/name`` with the stored prefix sums
        (a range not on row boundaries is widened to them: the extra entries are read here)."""
        ip, ds, salt = self.indptr, self.f[name], SALT_INDICES if name == "indices" else SALT_WEIGHTS
        r0 = int(np.searchsorted(ip, p0, side="right")) - 1   # the last row boundary at or before p0
        r1 = int(np.searchsorted(ip, p1, side="left"))        # the first at or after p1
        a0, a1 = int(ip[r0]), int(ip[r1])
        total = got
        if a0 < p0:
            total += checksum(ds[a0:p0], a0, salt)
        if a1 > p1:
            total += checksum(ds[p1:a1], p1, salt)
        sums = self.f[f"checksums/{name}"]
        want = (int(sums[r1]) - int(sums[r0])) % 2**64
        if total % 2**64 != want:
            self.damaged(f"/{name} entries {a0}..{a1 - 1} (rows {r0}..{r1 - 1}) do not match their checksum")
        self._verified.add((name, p0, p1))

    def damaged(self, reason: str):
        """Remove the copy (when the path still names the file this copy opened) and raise
        :class:`DamagedCopyError`."""
        done = _remove(self.path, self._identity)
        removed = "it was removed, so a rerun writes it again" if done.startswith("removed") else \
            f"it could not be removed ({done.split(': ', 1)[-1].rstrip(')')}): delete it, and a rerun writes it again"
        raise DamagedCopyError(self.path, reason, removed)

    def order_chunks(self, step: int = ORDER_CHUNK):
        """(i0, i1, order[i0:i1] as int64) over the whole order."""
        ds = self.f["order"]
        for i0 in range(0, self.n, step):
            i1 = min(self.n, i0 + step)
            yield i0, i1, ds[i0:i1].astype(np.int64)

    def order(self) -> np.ndarray:
        return self.f["order"][:].astype(np.int64)

    def new_ids(self, ids: np.ndarray) -> np.ndarray:
        """inv[ids]: the new id of each stored id in ``ids`` (int64), found by one pass over the order
        (no n-long inverse is kept unless every id is asked for)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == self.n and self.n and np.array_equal(ids[[0, -1]], [0, self.n - 1]) and \
                np.all(np.diff(ids) == 1):
            inv = np.empty(self.n, dtype=order_dtype(self.n))
            for i0, i1, chunk in self.order_chunks():
                inv[chunk] = np.arange(i0, i1, dtype=inv.dtype)
            return inv.astype(np.int64)
        sort = np.argsort(ids, kind="stable")
        keys = ids[sort]
        found = np.full(len(ids), -1, dtype=np.int64)
        if len(keys):
            for i0, _, chunk in self.order_chunks():
                pos = np.searchsorted(keys, chunk)
                pos[pos == len(keys)] = 0
                hit = np.flatnonzero(keys[pos] == chunk)
                found[pos[hit]] = i0 + hit
            # repeated ids: every copy of a key takes the first one's position
            first = np.searchsorted(keys, keys)
            found = found[first]
        out = np.empty(len(ids), dtype=np.int64)
        out[sort] = found
        return out

    def close(self) -> None:
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - closing a cache file never fails a run
            pass


def _expected_attrs(store: GraphStore, kind: str) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_fingerprint": store.fingerprint, "kind": kind,
            "num_nodes": store.num_nodes, "num_edges": store.num_edges, "weighted": bool(store.weighted)}


STALE = ("format", "format_version", "graph_fingerprint", "kind")  # another graph or version: silently rewritten


def open_copy(store: GraphStore, kind: str, warn=None) -> OrderedCopy | None:
    """The ordered copy kept beside ``store`` when it is one of this graph, whole and consistent;
    else None (missing, another graph, another format version — stale: silently — or damaged:
    ``warn(message)`` is told, a :class:`~gnnprep.graph.order.DamagedOrderWarning` without
    ``warn``); either way the caller rewrites it. Damaged: not self-contained (external storage,
    an external link, a virtual dataset over another file: refused before any data is read),
    shapes, dtypes, row pointers, the order not a permutation with the store's degrees, or the
    order's checksum."""
    path = copy_path(store.path, kind)
    if not path.is_file() or not store.fingerprint:
        return None
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError, TypeError):
        say(warn, f"{path}: damaged ordered copy (not a readable HDF5 file); {_remove(path, None)}")
        return None
    try:
        st = os.stat(path)
        identity = (st.st_dev, st.st_ino)
    except OSError:
        identity = None
    try:
        want = _expected_attrs(store, kind)
        if any(_attr(f, k) != want[k] for k in STALE):
            f.close()
            return None
        reason = _damage(f, path, store, want)
        if isinstance(reason, OrderedCopy):
            reason._identity = identity
            return reason
    except (OSError, ValueError, KeyError, TypeError, GnnprepError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    f.close()
    say(warn, f"{path}: damaged ordered copy ({reason}); {_remove(path, identity)}")
    return None


def _remove(path: Path, identity) -> str:
    """Remove the damaged copy at ``path`` when it is still the file that was checked (``identity``:
    its (st_dev, st_ino)); what happened, for the message. A damaged cache is never kept: the next
    run would only say so again; a run that reads S from a copy writes it again."""
    try:
        st = os.stat(path)
        if identity is None or (st.st_dev, st.st_ino) == identity:
            os.unlink(path)
        return "removed, a run that reads S from it writes it again"
    except FileNotFoundError:
        return "removed, a run that reads S from it writes it again"
    except OSError as e:
        return f"ignored (it could not be removed: {e.strerror or e})"


def _damage(f, path, store: GraphStore, want: dict):
    """The opened copy (:class:`OrderedCopy`) when every check holds, else why not (one phrase)."""
    from gnnprep.core.artifact import check_self_contained

    try:
        check_self_contained(f, path)
    except GnnprepError as e:
        return str(e).removeprefix(f"{path}: ")
    for k, v in want.items():
        if _attr(f, k) != v:
            return f"root attribute {k!r} is {_attr(f, k)!r}; expected {v!r}"
    n, m = store.num_nodes, store.num_edges
    shapes = {"indptr": (n + 1,), "indices": (m,), "order": (n,), "checksums/indices": (n + 1,),
              **({"weights": (m,), "checksums/weights": (n + 1,)} if store.weighted else {})}
    for name, shape in shapes.items():
        ds = f.get(name)
        if not isinstance(ds, h5py.Dataset) or ds.shape != shape:
            return f"/{name} is missing or not of shape {list(shape)}"
    if f["indices"].dtype != store.index_dtype or f["order"].dtype.kind not in "iu" \
            or f["indptr"].dtype.kind not in "iu" or any(f[f"checksums/{k}"].dtype != np.uint64 for k in
                                                       ("indices", "weights") if f"checksums/{k}" in shapes):
        return "dtypes"
    if store.weighted and f["weights"].dtype != np.float32:
        return "dtypes"
    indptr = f["indptr"][:].astype(np.int64, copy=False)
    if indptr[0] != 0 or indptr[-1] != m or (np.diff(indptr) < 0).any():
        return "/indptr is not a row pointer"
    if any(int(f[f"checksums/{k}"][0]) != 0 for k in ("indices", "weights") if f"checksums/{k}" in shapes):
        return "checksums do not start at 0"
    want_sum = f.attrs.get("order_checksum")
    if not isinstance(want_sum, (int, np.integer)) or isinstance(want_sum, (bool, np.bool_)):
        return "root attribute 'order_checksum' is missing"
    stored = store.indptr()
    seen = np.zeros(n, dtype=np.bool_)
    copy = OrderedCopy(path, f, indptr, {k: _attr(f, k) for k in ("near_share_before", "near_share_after",
                                                                    "seconds") if k in f.attrs})
    ds_order, total = f["order"], 0
    for i0 in range(0, n, ORDER_CHUNK):
        raw = ds_order[i0:min(n, i0 + ORDER_CHUNK)]
        chunk = raw.astype(np.int64)
        if len(chunk) and (chunk.min() < 0 or chunk.max() >= n):
            return "/order holds ids outside [0, n)"
        seen[chunk] = True
        if not np.array_equal(stored[chunk + 1] - stored[chunk], np.diff(indptr[i0:i0 + len(chunk) + 1])):
            return "/order's degrees differ from the store's"
        total += checksum(chunk, i0, SALT_ORDER)
    if not seen.all():
        return "/order is not a permutation"
    if total % 2**64 != int(want_sum) % 2**64:
        return "/order does not match its checksum"
    return copy


def _attr(f, key):
    v = f.attrs.get(key)
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


@njit(parallel=True, nogil=True, cache=True)
def _scatter_bucket(ip_block, idx_block, w_block, r0, inv, new_indptr, t0, t1, out_idx, out_w):
    """The stored rows r0.. of this block whose new rows lie in [t0, t1), their ids mapped through
    ``inv``, written at their new places in the bucket ``out_idx`` (entries from new_indptr[t0]);
    their weights too when ``out_w`` is not empty. Each row's entries keep their sequence."""
    base = ip_block[0]
    q_base = new_indptr[t0]
    weighted = len(out_w) > 0
    for i in prange(len(ip_block) - 1):
        t = inv[r0 + i]
        if t < t0 or t >= t1:
            continue
        q = new_indptr[t] - q_base
        for p in range(ip_block[i] - base, ip_block[i + 1] - base):
            out_idx[q] = inv[idx_block[p]]
            if weighted:
                out_w[q] = w_block[p]
            q += 1


def _buckets(new_indptr: np.ndarray, entries: int) -> list[tuple[int, int]]:
    """New rows cut into contiguous ranges of at most ``entries`` entries (a longer row alone)."""
    from gnnprep.sparse.order import row_blocks

    n = len(new_indptr) - 1
    out = []
    for t0, t1 in row_blocks(new_indptr, 0, n, max(1, entries)):
        # row_blocks starts a block at the row holding each multiple of ``entries``: split further
        # where a block still holds more (rows before that multiple plus the row itself)
        while int(new_indptr[t1] - new_indptr[t0]) > entries and t1 - t0 > 1:
            cut = int(np.searchsorted(new_indptr, new_indptr[t0] + entries, side="right")) - 1
            cut = max(t0 + 1, min(cut, t1 - 1))
            out.append((t0, cut))
            t0 = cut
        out.append((t0, t1))
    return out


def build_copy(store: GraphStore, kind: str, order: np.ndarray, info: dict, room: int,
               reserve: int = 0) -> tuple[OrderedCopy | None, dict]:
    """:func:`write_copy`, then the copy opened (and validated): (the copy or None, what happened)."""
    t0 = time.perf_counter()
    done = write_copy(store, kind, order, info, room, reserve)
    if not done["written"]:
        return None, done
    copy = open_copy(store, kind, warn=quiet)
    done["seconds"] = round(time.perf_counter() - t0, 3)
    if copy is None:
        done.update(written=False, reason="the copy just written did not validate")
    return copy, done


def write_copy(store: GraphStore, kind: str, order: np.ndarray, info: dict, room: int, reserve: int = 0) -> dict:
    """Write the ordered copy of ``store`` in ``order`` (new id i = old id order[i]), atomically.

    Out of core: besides :func:`build_memory`, at most ``room`` bytes hold the output bucket (new
    rows whose entries fit it) and one block of stored entries; each bucket takes one sequential
    pass over the stored indices. ``reserve``: disk bytes the caller still needs (its output); the
    copy is not written unless both fit. Returns what happened: written, seconds, passes, bytes,
    or why it was not written."""
    t0 = time.perf_counter()
    path = copy_path(store.path, kind)
    n, m = store.num_nodes, store.num_edges
    idx_dtype = np.dtype(store.index_dtype)
    weighted = bool(store.weighted)
    nbytes = copy_bytes(n, m, idx_dtype.itemsize, weighted)
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError as e:
        return {"written": False, "reason": f"{path.parent}: {e.strerror or e}"}
    if free < nbytes + reserve + (64 << 20):
        return {"written": False, "reason": f"{path.parent} has {free / 2**30:.1f} GiB free; the copy needs "
                                                  f"{nbytes / 2**30:.1f} GiB beside the output's {reserve / 2**30:.1f} GiB"}
    from gnnprep.core import h5file
    from gnnprep.core.output import atomic_output

    per = idx_dtype.itemsize + (4 if weighted else 0)
    read = max(1 << 10, min(READ_ENTRIES, room // (4 * per)))
    bucket = max(1 << 10, min(max(m, 1), (room - read * per) // per))
    passes = 0
    try:
        with atomic_output(path, inputs=[store.path]) as tmp:
            with h5file.writing(tmp) as f:
                for k, v in _expected_attrs(store, kind).items():
                    f.attrs[k] = v
                for k in ("near_share_before", "near_share_after", "seconds"):
                    if k in info:
                        f.attrs[k] = info[k]
                stored = store.indptr()
                new_indptr = np.zeros(n + 1, dtype=np.int64)
                ds_order = f.create_dataset("order", (n,), dtype=order_dtype(n))
                inv = np.empty(n, dtype=idx_dtype)
                order_sum = 0
                for i0 in range(0, n, ORDER_CHUNK):   # chunk by chunk: no n-long temporaries
                    o = order[i0:i0 + ORDER_CHUNK]
                    new_indptr[i0 + 1:i0 + 1 + len(o)] = stored[o + 1] - stored[o]
                    ds_order[i0:i0 + len(o)] = o
                    inv[o] = np.arange(i0, i0 + len(o), dtype=idx_dtype)
                    order_sum += checksum(o, i0, SALT_ORDER)
                f.attrs["order_checksum"] = np.uint64(order_sum % 2**64)
                np.cumsum(new_indptr, out=new_indptr)
                sums = _Prefix(f, "indices", n, SALT_INDICES, new_indptr)
                sums_w = _Prefix(f, "weights", n, SALT_WEIGHTS, new_indptr) if weighted else None
                h5file.put(f, "indptr", data=new_indptr)
                ds_idx = f.create_dataset("indices", (m,), dtype=idx_dtype)
                ds_w = f.create_dataset("weights", (m,), dtype=np.float32) if weighted else None
                from gnnprep.sparse.order import row_blocks

                reads = row_blocks(stored, 0, n, read)
                longest = max((int(stored[r1] - stored[r0]) for r0, r1 in reads), default=0)
                buf_idx = np.empty(longest, dtype=idx_dtype)
                buf_w = np.empty(longest if weighted else 0, dtype=np.float32)
                out_len = max((int(new_indptr[b1] - new_indptr[b0]) for b0, b1 in _buckets(new_indptr, bucket)),
                              default=0)
                out_idx = np.empty(out_len, dtype=idx_dtype)
                out_w = np.empty(out_len if weighted else 0, dtype=np.float32)
                for b0, b1 in _buckets(new_indptr, bucket):
                    passes += 1
                    q0, q1 = int(new_indptr[b0]), int(new_indptr[b1])
                    for r0, r1 in reads:
                        p0, p1 = int(stored[r0]), int(stored[r1])
                        if p1 == p0:
                            continue
                        blk = store.read_indices(p0, p1, buf_idx)
                        wb = store.read_weights(p0, p1, buf_w) if weighted else buf_w[:p1 - p0]
                        _scatter_bucket(stored[r0:r1 + 1], blk, wb, r0, inv, new_indptr, b0, b1, out_idx, out_w)
                    if q1 > q0:
                        ds_idx[q0:q1] = out_idx[:q1 - q0]
                        if weighted:
                            ds_w[q0:q1] = out_w[:q1 - q0]
                    sums.add(b0, b1, out_idx)
                    if weighted:
                        sums_w.add(b0, b1, out_w)
                del inv, out_idx, out_w, buf_idx, buf_w
    except (OSError, GnnprepError) as e:
        return {"written": False, "reason": str(e)}
    return {"written": True, "path": str(path), "seconds": round(time.perf_counter() - t0, 3), "passes": passes,
            "bytes": nbytes}


class _Prefix:
    """``/checksums/<name>``, written bucket by bucket: the running sum of the rows' checksums."""

    def __init__(self, f, name: str, n: int, salt, new_indptr: np.ndarray):
        self.ds = f.create_dataset(f"checksums/{name}", (n + 1,), dtype=np.uint64)
        self.ds[0] = 0
        self.salt, self.ip, self.carry = salt, new_indptr, np.uint64(0)
        self.rows = np.empty(min(n, ROW_CHUNK), dtype=np.uint64)

    def add(self, b0: int, b1: int, bucket: np.ndarray) -> None:
        """Rows b0..b1-1, whose entries are ``bucket`` (from new_indptr[b0] on)."""
        q0, vals = int(self.ip[b0]), _bits(bucket)
        for t0 in range(b0, b1, ROW_CHUNK):   # a bucket of many empty rows: bounded temporaries
            t1 = min(b1, t0 + ROW_CHUNK)
            rows = self.rows[:t1 - t0]
            _row_sums(self.ip[t0:t1 + 1], vals, q0, self.salt, rows)
            np.cumsum(rows, out=rows)     # uint64: wraps, as the reader's sums do
            rows += self.carry
            self.ds[t0 + 1:t1 + 1] = rows
            self.carry = rows[-1]


def warm_up(index_dtype) -> None:
    """Compile (or load from numba's cache) the scatter of :func:`build_copy` for ``index_dtype``."""
    ip = np.array([0, 1, 2], dtype=np.int64)
    idx = np.array([1, 0], dtype=index_dtype)
    inv = np.array([1, 0], dtype=index_dtype)
    out = np.empty(2, dtype=index_dtype)
    _scatter_bucket(ip, idx, np.empty(0, np.float32), 0, inv, ip, 0, 2, out, np.empty(0, np.float32))
    rows = np.empty(2, dtype=np.uint64)
    for vals in (idx, np.ones(2, np.float32).view(np.uint32)):
        _row_sums(ip, vals, 0, SALT_INDICES, rows)
        _range_sum(vals, 0, SALT_INDICES, -1 if vals.dtype == np.uint32 else 2)
    _range_sum(np.arange(2), 0, SALT_ORDER, -1)


def find_order_streamed(store: GraphStore, block_entries: int, sweeps: int = 2) -> tuple[np.ndarray, dict]:
    """The community order of a store whose CSR need not fit in memory: label propagation
    (:func:`gnnprep.sparse.order.propagate_labels`, the sweeps of
    :func:`~gnnprep.sparse.order.community_order`, so the same order) over row blocks of about
    ``block_entries`` stored entries read from the store; in memory the labels, counts and one
    block. Returns (order, info with the near shares)."""
    from gnnprep.sparse import order as node_order

    t0 = time.perf_counter()
    n = store.num_nodes
    indptr = store.indptr()
    label = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    count = np.zeros(n, dtype=np.int32)
    buf = np.empty(node_order.PROPAGATE_BUFFER, dtype=label.dtype)
    blocks = node_order.row_blocks(indptr, 0, n, max(1, block_entries))
    longest = max((int(indptr[r1] - indptr[r0]) for r0, r1 in blocks), default=0)
    block = np.empty(longest, dtype=store.index_dtype)
    for sweep in range(sweeps):
        for r0, r1 in blocks:
            p0, p1 = int(indptr[r0]), int(indptr[r1])
            idx = store.read_indices(p0, p1, block)
            node_order.propagate_labels(indptr[r0:r1 + 1], idx, r0, label, count, buf, sweep == 0)
    del count, block
    order = node_order.group_by_label(label)
    del label
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    w = node_order.LOCALITY_WINDOW
    ds = store.indices_dataset
    info = {"near_share_before": round(node_order.near_share_windows(indptr, ds, w), 4),
            "near_share_after": round(node_order.near_share_windows(indptr, ds, w, inv), 4),
            "seconds": round(time.perf_counter() - t0, 3)}
    return order, info
