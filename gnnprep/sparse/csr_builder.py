"""Out-of-core construction of a row-sorted, duplicate-free CSR adjacency.

Edges (src -> dst) arrive in chunks of any order. Each is encoded as one int64 key
``dst * n + src`` (so sorting keys sorts rows, then columns within a row) and appended to the spill
file of its destination range ("bucket"). Buckets are sized so that one of them can be sorted and
deduplicated in memory within the budget, and hold at most :data:`MAX_BUCKET_ENTRIES` keys; a
bucket that came out larger than planned (skewed degrees, unknown edge count) is split again by
finer destination ranges before it is processed. Rows are then written in order, bucket by bucket,
straight into the HDF5 datasets, so neither the edges nor ``indptr`` are ever held whole.

A graph whose announced edges fit one bucket (under the cap) keeps its keys in memory instead of a
spill file; should more edges arrive than were announced, the keys go to the spill file from there
on. Where such a graph's source can be read twice cheaply (binary arrays:
``GraphSource.rereadable``), ingest first counts each row's keys (:meth:`CSRBuilder.count`), and
:meth:`CSRBuilder.add` then places every key at its row's next slot as it is read: the bucket is
sorted row by row in place, with no second array. (Both were measured on the papers100M shape at
1/40 before the cap, which now cuts that graph into 4 buckets: 8.5 s against 10.5-16.9 s for
spilling one bucket; peak RSS 1.42 GB against 1.72 GB for counting first. Under the cap, counting
first against sorting the held bucket into a second array, papers100M-shaped ``data.npz``
(``benchmarks/bench_ingest_count_first.py``, medians of 3 interleaved rounds): at 22.6M keys peak
RSS 483 MiB against 568 MiB in the same time (2.74 s against 2.77 s); at 9.7M keys a wash (364
against 361 MiB, 1.83 s against 1.88 s).)

A write can be resumed by another process (an interrupted ingest run again): :meth:`CSRBuilder.state`
keeps the layout and counts of a builder whose keys are all spilled, :meth:`CSRBuilder.write` reports
each bucket written (``on_bucket``) and removes its spill files only afterwards, and continues from
such a place (``start``) by reading the written part back for the fingerprint.

Symmetrisation adds (dst, src) for every (src, dst); self-loops are dropped when they arrive.
Memory per processed entry: 8 B key + 1 B mask + 8 B deduplicated copy with numpy; 8 B key + 8 B
sorted copy + at most 2 B of row counters with the compiled counting sort (~20 B with slack).

Large chunks and buckets go through compiled kernels (:mod:`gnnprep.sparse.csr_kernels`) that fuse the
numpy steps (self-loop mask, concatenation, bucket sort and gather; deduplication, column and row
pointer arithmetic) into one or two passes, with the same results byte for byte. Small ones keep
numpy: the compiler runtime costs ~130 MB of memory and a second to load, which only pays off
when there is real work (and a budget that has room for it). Hashes of what is written run in a
worker thread while HDF5 writes (hashlib releases the GIL).
"""

from __future__ import annotations

import hashlib
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.core.progress import Progress, no_progress

BYTES_PER_SORTED_ENTRY = 20      # key + mask + deduplicated copy, with slack
BYTES_PER_INCOMING_EDGE = 96     # src, dst, keys (both directions), bucket ids, order, gathered keys
INDPTR_CHUNK = 1 << 16           # rows per HDF5 chunk of indptr (512 KiB: fits HDF5's chunk cache)
MAX_NODES = 3_037_000_499        # largest n with n * n < 2**63 (keys must fit int64)
KERNEL_MIN_BUDGET = 512 << 20    # compiled kernels only where the budget has room for their runtime
KERNEL_MIN_ITEMS = 1 << 20       # ... and for chunks or buckets at least this large
# keys in one bucket at most, whatever the budget: a bucket is sorted in arrays of its size, so the
# peak holds one small bucket's, not the whole graph's. The papers100M shape at 1/40 (77M entries,
# 4 GiB budget; 2-core VM, 3 interleaved rounds): the edges' phases took 3.9-4.1 s in 4 buckets of
# this size against 4.2-6.2 s in one held bucket (whose keys are placed at random over 616 MB), peak
# RSS 1.10 GB against 1.40 GB. (Keeping two bucket arrays across buckets instead of new ones per
# bucket gained nothing and held 130 MB more.)
MAX_BUCKET_ENTRIES = 24 << 20
# edges per incoming chunk at most, whatever the budget: a chunk's arrays (ids, keys) are reused from
# chunk to chunk, so a larger chunk only faults in more fresh memory. The papers100M shape at 1/40
# (40M edges, 4 GiB: 13.4M-edge chunks before; 2-core VM, interleaved): reading and bucketing the
# edges took 3.1-4.0 s in 13.4M-edge chunks, 1.3-2.2 s in 4M, 1.5-1.6 s in 2M, 1.0-1.7 s in 1M;
# peak RSS 1.02, 0.86, 0.83, 0.82 GB
MAX_CHUNK_EDGES = 1 << 21


def _kernels():
    """The compiled kernels, imported on first use (importing numba costs ~1 s and ~130 MB)."""
    from gnnprep.sparse import csr_kernels

    return csr_kernels


def write_array(f, a: np.ndarray) -> None:
    """Append an array's bytes to a binary file. (``ndarray.tofile`` reports a full disk as a short
    write without errno; a file write raises OSError(ENOSPC), which becomes one clear error.)"""
    f.write(np.ascontiguousarray(a).data)


def incoming_chunk_edges(memory_budget: int) -> int:
    """Edges per incoming chunk so that bucketing one chunk stays within ~30% of the budget, and at
    most :data:`MAX_CHUNK_EDGES`."""
    return max(1 << 10, min(MAX_CHUNK_EDGES, int(memory_budget * 0.3) // BYTES_PER_INCOMING_EDGE))


class CSRBuilder:
    """Collect edges with :meth:`add`, then :meth:`write` the CSR into an HDF5 group."""

    def __init__(self, num_nodes: int, workdir: Path, memory_budget: int, symmetrize: bool,
                 expected_edges: int | None = None, kernels: bool | None = None):
        """``kernels``: True/False forces the compiled or the numpy steps (tests compare the two);
        None picks the compiled ones for large chunks and buckets when the budget has room."""
        if num_nodes > MAX_NODES:
            raise GnnprepError(f"{num_nodes} nodes: more than the {MAX_NODES} this ingest supports")
        self.n = int(num_nodes)
        self.workdir = Path(workdir)
        self.budget = int(memory_budget)
        self.symmetrize = symmetrize
        self.bucket_entries = max(1 << 10, min(MAX_BUCKET_ENTRIES, int(self.budget * 0.45) // BYTES_PER_SORTED_ENTRY))
        self.chunk_edges = incoming_chunk_edges(self.budget)
        # rows per indptr slab (degrees, pointers, bincount: 24 B a row), whole indptr chunks
        self.row_slab = max(1, int(self.budget * 0.1) // 24 // INDPTR_CHUNK) * INDPTR_CHUNK
        entries = (expected_edges or 0) * (2 if symmetrize else 1)
        nb = max(1, math.ceil(entries / self.bucket_entries)) if entries else 16
        nb = min(nb, max(1, self.n), 4096)
        self.rows_per_bucket = max(1, math.ceil(self.n / nb))
        self.num_buckets = max(1, math.ceil(self.n / self.rows_per_bucket)) if self.n else 1
        self._files: dict[int, object] = {}
        self.counts = np.zeros(self.num_buckets, dtype=np.int64)
        self.edges_in = 0
        self.self_loops = 0
        self.kernels = kernels if kernels is not None else (None if self.budget >= KERNEL_MIN_BUDGET else False)
        self._scratch: list[np.ndarray] = []     # keys of a chunk: two, reused (no fresh pages per chunk)
        self._spill_pool: ThreadPoolExecutor | None = None
        self._spills: list = []                  # spill writes in flight, oldest first
        # one bucket of a known size: its keys stay in memory (no spill file written and read back)
        self._held = entries if self.num_buckets == 1 and entries else 0
        self._keys: np.ndarray | None = None
        self._row_counts: np.ndarray | None = None   # keys per row, counted by count() before add()
        self._starts: np.ndarray | None = None       # ... their row starts, once placing has begun
        self._pos: np.ndarray | None = None          # ... and each row's next slot
        self._shares: np.ndarray | None = None       # ... and the rows each thread places

    @property
    def counts_first(self) -> bool:
        """Whether a first pass of :meth:`count` over the same edges pays: one bucket held in memory,
        large enough for the compiled kernels. Its keys are then placed by row as they are added (a
        counting sort while reading), so the bucket needs no sort into a second array."""
        return bool(self._held) and self.kernels is not False and self._held >= KERNEL_MIN_ITEMS

    def count(self, src: np.ndarray, dst: np.ndarray) -> None:
        """First pass (where :attr:`counts_first`): count the keys of each row; :meth:`add` must
        then be given the same edges."""
        if self._row_counts is None:
            self._row_counts = np.zeros(self.n, dtype=np.int64)
        for s in range(0, len(src), self.chunk_edges):
            _kernels().count_rows(np.ascontiguousarray(src[s:s + self.chunk_edges], dtype=np.int64),
                                  np.ascontiguousarray(dst[s:s + self.chunk_edges], dtype=np.int64),
                                  self.symmetrize, self._row_counts)

    def _place(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Second pass: the keys go straight to their row's next place in the held array."""
        if self._starts is None:
            import numba

            starts = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(self._row_counts, out=starts[1:])
            pos, self._row_counts = self._row_counts, None
            pos[:] = starts[:-1]   # the counts' array becomes the next slot of each row
            self._starts, self._pos = starts, pos
            self._keys = np.empty(int(starts[-1]), dtype=np.int64)
            threads = numba.get_num_threads()
            self._shares = _kernels().row_shares(starts, self.n, threads)   # rows of about equal keys per thread
        loops, placed = _kernels().place_keys(np.ascontiguousarray(src), np.ascontiguousarray(dst), self.n,
                                              self.symmetrize, self._pos, self._starts[1:], self._keys, self._shares)
        if loops < 0:
            raise GnnprepError("the edges changed between ingest's two reads of them (a row got more "
                               "entries than counted); run it again")
        self.edges_in += len(src)
        self.self_loops += int(loops)
        self.counts[0] += placed

    def _compiled(self, items: int) -> bool:
        return bool(self.kernels) or (self.kernels is None and items >= KERNEL_MIN_ITEMS)

    def _path(self, b: int, tag: str = "b") -> Path:
        return self.workdir / f"{tag}{b:05d}.keys"

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Add edges src[i] -> dst[i]; ids must already be validated to lie in [0, n)."""
        for s in range(0, len(src), self.chunk_edges):
            self._add(np.asarray(src[s:s + self.chunk_edges], dtype=np.int64),
                      np.asarray(dst[s:s + self.chunk_edges], dtype=np.int64))

    def _add(self, src: np.ndarray, dst: np.ndarray) -> None:
        if self._row_counts is not None or self._starts is not None:
            self._place(src, dst)
            return
        if self._compiled(len(src)):
            self._add_compiled(np.ascontiguousarray(src), np.ascontiguousarray(dst))
            return
        self._wait_spills(0)  # appends stay in order, from one thread at a time
        self.edges_in += len(src)
        loop = src == dst
        if loop.any():
            self.self_loops += int(loop.sum())
            keep = ~loop
            src, dst = src[keep], dst[keep]
        if self.symmetrize:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        keys = dst * self.n + src
        if self.num_buckets == 1:
            self._append(0, keys)
            return
        bucket = dst // self.rows_per_bucket
        del src, dst
        bucket = bucket.astype(np.uint16 if self.num_buckets <= 65535 else np.int64)
        order = np.argsort(bucket, kind="stable")  # radix sort for 16-bit ids: linear time
        sizes = np.bincount(bucket, minlength=self.num_buckets)
        keys = keys[order]
        del order, bucket
        start = 0
        for b in np.flatnonzero(sizes):
            stop = start + int(sizes[b])
            self._append(int(b), keys[start:stop])
            start = stop

    def _add_compiled(self, src: np.ndarray, dst: np.ndarray) -> None:
        """:meth:`_add` in two passes of one kernel (count per bucket, then place): the same keys
        in the same order per bucket, without the mask, concatenations, bucket ids and sort order
        (~90 B per edge of temporaries). The keys go to the spill files in a worker thread while
        the next chunk is read and bucketed, from two alternating buffers."""
        need = len(src) * (2 if self.symmetrize else 1)
        held = self._held_room(need)
        if held is not None:
            loops, total = _kernels().scatter_keys(src, dst, self.n, self.rows_per_bucket, self.symmetrize,
                                                    np.zeros(1, dtype=np.int64), held)
            self.edges_in += len(src)
            self.self_loops += int(loops)
            self.counts[0] += total
            return
        self._wait_spills(1)  # the write of two chunks ago, which used the buffer taken next, is done
        buf = self._scratch.pop(0) if len(self._scratch) == 2 else None  # oldest of two, else a new one
        if buf is None or len(buf) < need:
            buf = np.empty(max(need, self.chunk_edges * (2 if self.symmetrize else 1)), dtype=np.int64)
        self._scratch.append(buf)
        sizes = np.zeros(self.num_buckets, dtype=np.int64)
        loops, _ = _kernels().scatter_keys(src, dst, self.n, self.rows_per_bucket, self.symmetrize, sizes, buf)
        self.edges_in += len(src)
        self.self_loops += int(loops)
        if self._spill_pool is None:
            self._spill_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="csr-spill")
        self._spills.append(self._spill_pool.submit(self._append_grouped, buf, sizes))

    def _held_room(self, need: int) -> np.ndarray | None:
        """Where the next ``need`` keys go while the one bucket's keys are held in memory (the array
        sized for the announced edges, allocated on the first call); None once they are not: the
        edges outnumber the announcement, so the keys held so far go to the spill file and the rest
        follow them there."""
        if not self._held:
            return None
        filled = int(self.counts[0])
        if self._keys is None:
            self._keys = np.empty(self._held, dtype=np.int64)
        if filled + need <= len(self._keys):
            return self._keys[filled:filled + need]
        keys, self._keys, self._held = self._keys[:filled], None, 0
        self.counts[0] = 0
        self._append(0, keys)
        return None

    def _append_grouped(self, keys: np.ndarray, sizes: np.ndarray) -> None:
        start = 0
        for b in np.flatnonzero(sizes):
            stop = start + int(sizes[b])
            self._append(int(b), keys[start:stop])
            start = stop

    def _wait_spills(self, keep: int) -> None:
        """Wait until at most ``keep`` spill writes are in flight (re-raising a failure)."""
        while len(self._spills) > keep:
            self._spills.pop(0).result()

    def close_spills(self, check: bool = True) -> None:
        """Finish the spill writes in flight and close the spill files. ``check=False`` (cleaning up
        after another error) waits for the writes without raising theirs: afterwards nothing
        writes into the work folder any more, so it can be removed."""
        try:
            while self._spills:
                fut = self._spills.pop(0)
                if check:
                    fut.result()
                else:
                    fut.exception()
        finally:
            if self._spill_pool is not None:
                self._spill_pool.shutdown(wait=True)
                self._spill_pool = None
            for f in self._files.values():
                f.close()
            self._files.clear()
            self._scratch = []

    def _append(self, b: int, keys: np.ndarray) -> None:
        held = self._held_room(len(keys)) if b == 0 else None
        if held is not None:
            held[:] = keys
            self.counts[0] += len(keys)
            return
        f = self._files.get(b)
        if f is None:
            if len(self._files) > 512:  # stay far below the open-file limit
                for g in self._files.values():
                    g.close()
                self._files.clear()
            f = self._files[b] = open(self._path(b), "ab")
        write_array(f, keys)
        self.counts[b] += len(keys)

    # what a resumed builder needs of one whose edges are all added (spilled): its layout and counts
    _STATE = ("n", "symmetrize", "budget", "bucket_entries", "chunk_edges", "row_slab", "rows_per_bucket",
              "num_buckets", "edges_in", "self_loops", "kernels")

    @property
    def resumable(self) -> bool:
        """Whether every key is in the spill files (none held in memory), so that :meth:`state` and
        the files let another process :meth:`resume` the write."""
        return self._keys is None and self._starts is None and self._row_counts is None and not self._held

    def state(self) -> dict:
        """The builder's layout and counts once its edges are added (:attr:`resumable`), as JSON."""
        self.close_spills()
        return {**{k: (v.item() if isinstance(v, np.generic) else v) for k in self._STATE
                   for v in [getattr(self, k)]}, "counts": self.counts.tolist()}

    @classmethod
    def resume(cls, state: dict, workdir: Path) -> "CSRBuilder":
        """The builder of :meth:`state`, over the spill files it left in ``workdir`` (which
        :meth:`check_spills` checks)."""
        b = cls(int(state["n"]), workdir, int(state["budget"]), bool(state["symmetrize"]))
        for k in cls._STATE:
            setattr(b, k, state[k])
        b.counts = np.asarray(state["counts"], dtype=np.int64)
        return b

    def check_spills(self, start: int) -> None:
        """GnnprepError unless the spill file of every bucket from ``start`` on is there at its size."""
        for b in range(start, self.num_buckets):
            path, size = self._path(b), 8 * int(self.counts[b])
            have = path.stat().st_size if path.exists() else 0
            if have != size:
                raise GnnprepError(f"{path}: {have:,} bytes; expected {size:,} (bucket {b}'s keys)")

    @property
    def index_dtype(self):
        return np.int32 if self.n < 2**31 else np.int64

    def entries_upper(self) -> int:
        """Entries before deduplication (an upper bound of the stored ones), once every edge is added."""
        self.close_spills()
        return int(self.counts.sum())

    def write(self, group: h5py.Group, progress: Progress = no_progress, on_rows=None, on_cols=None,
              on_bucket=None, start: dict | None = None) -> dict:
        """Write ``indptr``/``indices`` into ``group``; return stats (and a content fingerprint).
        ``on_rows(lo, hi)`` is called, in row order, as soon as rows lo..hi-1 are in both datasets;
        ``on_cols(offset, cols)`` with every run of column ids as it is written (before the
        ``on_rows`` call of its rows; ``cols`` is reused afterwards: copy it).

        Resumable (:attr:`resumable` builders): ``on_bucket(place)`` is called once each bucket's
        rows are written and hashed, with its place (``{"bucket": next bucket, "offset": entries
        written}``); the bucket's spill files are removed only after it returns (a process killed
        there still finds them). ``start`` (such a place) continues an earlier process's write in the
        datasets it left in ``group``: their written part is read back for the fingerprint, and
        ``on_rows(0, lo)`` reports its rows at once. GnnprepError where they do not match ``start``."""
        self.close_spills()
        if self._row_counts is not None and self._row_counts.any():
            raise GnnprepError("the edges changed between ingest's two reads of them (entries counted, none "
                               "placed); run it again")
        self._on_rows, self._on_cols = on_rows, on_cols
        n = self.n
        index_dtype = self.index_dtype
        upper = int(self.counts.sum())  # entries before deduplication: an upper bound
        # two streams (column ids, row pointers), so the fingerprint depends only on the CSR and
        # not on how the rows were cut into buckets (which depends on the memory budget)
        self._hash_indices = hashlib.blake2b(digest_size=16)
        self._hash_indptr = hashlib.blake2b(digest_size=16)
        first = 0 if start is None else int(start["bucket"])
        if start is None:
            indptr = group.create_dataset("indptr", shape=(n + 1,), dtype=np.int64,
                                          chunks=(min(n + 1, INDPTR_CHUNK),))
            indices = group.create_dataset("indices", shape=(0,), maxshape=(None,), dtype=index_dtype,
                                           chunks=(max(1, min(1 << 18, upper)),))
            indptr[0] = 0
            self._offset = 0
        else:
            indptr, indices = self._reopen(group, start)
        total = upper
        self._done = int(self.counts[:first].sum())
        self._progress = progress
        self._trash: list[Path] | None = [] if on_bucket is not None else None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="csr-hash")
        self._pending: list = []
        try:
            for b in range(first, self.num_buckets):
                lo = b * self.rows_per_bucket
                hi = min(n, lo + self.rows_per_bucket)
                self._process(lo, hi, self._path(b), int(self.counts[b]), indptr, indices, total, depth=0)
                if on_bucket is not None:
                    self._drain(0)
                    on_bucket({"bucket": b + 1, "offset": int(self._offset),
                               "digests": [self._hash_indices.hexdigest(), self._hash_indptr.hexdigest()]})
                    for path in self._trash:
                        path.unlink(missing_ok=True)
                    self._trash = []
            self._drain(0)
        finally:
            self._pool.shutdown(wait=True)
            self._pending = []
        indptr.flush()  # write failures surface here rather than when h5py frees the datasets
        indices.flush()
        return {
            "stored_entries": int(self._offset),
            "edges_read": int(self.edges_in),
            "self_loops_dropped": int(self.self_loops),
            "duplicates_dropped": int(total - self._offset),
            "fingerprint": self._fingerprint(),
            "index_dtype": np.dtype(index_dtype).name,
        }

    def check_written(self, group: h5py.Group, start: dict, read_back: bool = True) -> None:
        """GnnprepError unless ``group`` holds what a write interrupted at ``start`` (:meth:`write`)
        left there — its row pointers up to the next bucket's first row and at least its entries,
        and with ``read_back`` those read back as hashed (``start["digests"]``) — and the spill files
        of the buckets still to write are whole."""
        first, offset = int(start["bucket"]), int(start["offset"])
        lo = min(self.n, first * self.rows_per_bucket)
        try:
            indptr, indices = group["indptr"], group["indices"]
            ok = indptr.shape == (self.n + 1,) and indices.shape[0] >= offset and int(indptr[lo]) == offset
        except (KeyError, OSError, ValueError):
            ok = False
        if not ok:
            raise GnnprepError(f"{group.file.filename}: /adj is not as the interrupted write left it "
                               f"({offset:,} entries in rows before {lo:,})")
        if read_back:   # what was written reads back as it was hashed (a killed writer's HDF5 may
            _check_digests(group, start, _hash_written(indptr, indices, lo, offset))   # not: its chunk
        self.check_spills(first)                                                     # index mid-update)

    def _reopen(self, group: h5py.Group, start: dict):
        """The datasets an interrupted write left, checked against its place ``start`` (the next
        bucket, the entries written, their hashes), cut back to it, and their written part hashed
        (read once: the hashes are the check's and the fingerprint's)."""
        self.check_written(group, start, read_back=False)
        first, offset = int(start["bucket"]), int(start["offset"])
        lo = min(self.n, first * self.rows_per_bucket)
        indptr, indices = group["indptr"], group["indices"]
        indices.resize((offset,))
        # (the columns go to the order search before their rows are reported, as in a fresh write)
        self._hash_indices, self._hash_indptr = _hash_written(indptr, indices, lo, offset, self._on_cols)
        _check_digests(group, start, (self._hash_indices, self._hash_indptr))
        self._offset = offset
        if lo and self._on_rows is not None:
            self._on_rows(0, lo)
        return indptr, indices

    def _discard(self, path: Path) -> None:
        """A spill file read: removed, or with a resumable write, once its bucket is marked."""
        if self._trash is not None:
            self._trash.append(path)
        else:
            path.unlink(missing_ok=True)

    def _fingerprint(self) -> str:
        return _combine(self.n, self._hash_indices, self._hash_indptr)

    def _process(self, lo, hi, path: Path, count: int, indptr, indices, total, depth: int) -> None:
        if hi <= lo:
            self._discard(path)
            return
        if count > self.bucket_entries * 1.25 and hi - lo > 1 and self._keys is None:
            self._split(lo, hi, path, count, indptr, indices, total, depth)
            return
        if count and self._starts is not None:   # placed by row as added: each row sorted in place
            if count != len(self._keys):
                raise GnnprepError(f"the edges changed between ingest's two reads of them ({count:,} entries "
                                   f"placed, {len(self._keys):,} counted); run it again")
            import numba

            keys, self._keys, self._pos = self._keys, None, None
            _kernels().sort_rows(keys, self._starts, numba.get_num_threads())
            self._starts = None
            keys = keys[:_kernels().unique_sorted(keys)]
        elif count:
            if self._keys is not None:   # the one bucket, held in memory
                keys, self._keys = self._keys[:count], None
            else:
                keys = np.fromfile(path, dtype=np.int64)
            if self._compiled(len(keys)):
                keys = self._sorted(keys, lo, hi)
                keys = keys[:_kernels().unique_sorted(keys)]
            else:
                keys.sort()  # in place
                keep = np.empty(len(keys), dtype=bool)
                keep[0] = True
                np.not_equal(keys[1:], keys[:-1], out=keep[1:])
                keys = keys[keep]
                del keep
        else:
            keys, self._keys = np.empty(0, dtype=np.int64), None
        if path.exists():
            self._discard(path)
        self._write_cols(keys, indices)
        self._write_indptr(lo, hi, keys, indptr)
        if self._on_rows is not None:
            self._on_rows(lo, hi)
        self._offset += len(keys)
        self._done += count
        self._progress("sort", self._done, total)

    def _sorted(self, keys: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The keys of rows [lo, hi) sorted: by the compiled counting sort by row when its counters
        (``threads`` int64 per row) come to at most 2 B per key, else by numpy's sort in place. The
        counting sort's second array of keys is within the 20 B per entry a bucket is sized for."""
        import numba

        threads = numba.get_num_threads()
        if threads * (hi - lo) * 8 > 2 * len(keys):
            keys.sort()
            return keys
        out = np.empty_like(keys)
        _kernels().sort_keys(keys, lo, hi - lo, self.n, out, threads)
        return out

    def _hash_later(self, h, block: np.ndarray) -> None:
        """Feed ``block`` to ``h`` in the worker thread (in submission order) while HDF5 writes;
        the caller must not change ``block`` before :meth:`_drain` says it was hashed."""
        self._pending.append(self._pool.submit(h.update, block))

    def _drain(self, keep: int) -> None:
        """Wait until at most ``keep`` blocks are still to be hashed (re-raising a failure)."""
        while len(self._pending) > keep:
            self._pending.pop(0).result()

    def _write_cols(self, keys: np.ndarray, indices) -> None:
        if not len(keys):
            return
        indices.resize((self._offset + len(keys),))
        step = 1 << 23
        compiled = self._compiled(len(keys))
        ring = [np.empty(min(step, len(keys)), dtype=indices.dtype) for _ in range(2)] if compiled else None
        for i, s in enumerate(range(0, len(keys), step)):
            self._drain(1)  # the block hashed two steps ago (its ring buffer is next) is done
            if compiled:
                cols = ring[i % 2][:min(step, len(keys) - s)]
                _kernels().columns(keys[s:s + step], self.n, cols)
            else:
                cols = (keys[s:s + step] % self.n).astype(indices.dtype)
            self._hash_later(self._hash_indices, cols)
            indices[self._offset + s:self._offset + s + len(cols)] = cols
            if self._on_cols is not None:
                self._on_cols(self._offset + s, cols)

    def _write_indptr(self, lo: int, hi: int, keys: np.ndarray, indptr) -> None:
        """indptr[lo+1 .. hi] from the sorted keys of rows [lo, hi), in slabs of ``row_slab`` rows:
        memory stays bounded by the budget even when a bucket spans billions of (mostly empty) rows."""
        step = 1 << 23
        a = 0
        for r0 in range(lo, hi, self.row_slab):
            r1 = min(hi, r0 + self.row_slab)
            b = int(np.searchsorted(keys, r1 * self.n, side="left"))  # keys of rows [r0, r1) are keys[a:b]
            self._drain(1)
            if self._compiled(b - a + r1 - r0):
                ptr = np.empty(r1 - r0, dtype=np.int64)
                _kernels().row_ends(keys, a, b, self.n, r0, ptr, self._offset)
            else:
                deg = np.zeros(r1 - r0, dtype=np.int64)
                for s in range(a, b, step):
                    deg += np.bincount(keys[s:min(b, s + step)] // self.n - r0, minlength=r1 - r0)
                ptr = self._offset + a + np.cumsum(deg)
            self._hash_later(self._hash_indptr, ptr)
            indptr[r0 + 1:r1 + 1] = ptr
            a = b

    def _split(self, lo, hi, path: Path, count: int, indptr, indices, total, depth: int) -> None:
        parts = min(hi - lo, max(2, math.ceil(2 * count / self.bucket_entries)))
        width = math.ceil((hi - lo) / parts)
        sub_counts = np.zeros(parts, dtype=np.int64)
        sub_paths = [path.with_name(f"{path.stem}.{depth}.{p:04d}.keys") for p in range(parts)]
        handles = [open(p, "wb") for p in sub_paths]
        try:
            with open(path, "rb") as f:
                while True:
                    keys = np.fromfile(f, dtype=np.int64, count=self.chunk_edges * 2)
                    if not len(keys):
                        break
                    part = (keys // self.n - lo) // width
                    order = np.argsort(part.astype(np.uint16 if parts <= 65535 else np.int64), kind="stable")
                    sizes = np.bincount(part, minlength=parts)
                    keys = keys[order]
                    start = 0
                    for p in np.flatnonzero(sizes):
                        write_array(handles[p], keys[start:start + sizes[p]])
                        sub_counts[p] += sizes[p]
                        start += sizes[p]
        finally:
            for h in handles:
                h.close()
        self._discard(path)
        for p in range(parts):
            plo = lo + p * width
            self._process(plo, min(hi, plo + width), sub_paths[p], int(sub_counts[p]),
                          indptr, indices, total, depth + 1)


def _combine(n: int, hash_indices, hash_indptr) -> str:
    """The CSR's fingerprint from its two streams' hashes (:meth:`CSRBuilder.write`)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.int64(n).tobytes())
    h.update(hash_indices.digest())
    h.update(hash_indptr.digest())
    return h.hexdigest()


def _check_digests(group: h5py.Group, start: dict, hashes) -> None:
    """GnnprepError unless ``hashes`` (of the written part of the CSR in ``group``) are the ones its
    mark ``start`` recorded (a mark without them, from a caller that keeps none, passes)."""
    if "digests" in start and [h.hexdigest() for h in hashes] != list(start["digests"]):
        raise GnnprepError(f"{group.file.filename}: /adj's first {int(start['offset']):,} entries differ from "
                           "what the interrupted write hashed")


def _hash_written(indptr, indices, rows: int, entries: int, on_cols=None, step: int = 1 << 24):
    """The two streams' hashes (:meth:`CSRBuilder.write`) of the first ``rows`` rows and ``entries``
    entries of a CSR in HDF5 datasets, read in blocks of ``step``; ``on_cols(offset, cols)`` sees
    every block of column ids."""
    hash_indices, hash_indptr = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
    for s in range(0, entries, step):
        cols = np.ascontiguousarray(indices[s:min(entries, s + step)])
        hash_indices.update(cols)
        if on_cols is not None:
            on_cols(s, cols)
    for r in range(1, rows + 1, step):
        hash_indptr.update(np.ascontiguousarray(indptr[r:min(rows + 1, r + step)]))
    return hash_indices, hash_indptr


def csr_fingerprint(group: h5py.Group) -> str:
    """The fingerprint :meth:`CSRBuilder.write` returned for the CSR in ``group`` (``indptr``,
    ``indices``), computed again from the datasets (a resumed ingest checks its ``/adj`` with it)."""
    indptr, indices = group["indptr"], group["indices"]
    n = int(indptr.shape[0]) - 1
    return _combine(n, *_hash_written(indptr, indices, n, int(indices.shape[0])))
