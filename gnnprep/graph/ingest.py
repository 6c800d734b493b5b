"""Ingest: any graph source -> HDF5 graph store, in bounded memory.

Steps: (1) when the node count is not declared, spill the edges once to a binary file while
finding the largest id; (2) bucket the edges by destination range into spill files
(:mod:`gnnprep.sparse.csr_builder`), symmetrising unless ``directed``; (3) sort and deduplicate one bucket
at a time and write its rows; (4) copy features and labels in row chunks; (5) write splits and
metadata. The output appears at its path only when complete, and never replaces a file the source
reads. An interrupted ingest keeps its partial store once the edges are bucketed, after each
bucket of step (3), after step (3) and after the features, and the same command resumes from there
(:func:`_ingest_source`, :func:`_build_adjacency`).

While features, labels and splits stream through, a hash of their stored bytes (xxh3-128) is taken and written
as the root attributes ``features_fingerprint``, ``labels_fingerprint``, ``splits_fingerprint``
(:mod:`gnnprep.graph.sources.graphstore`), so later stages can tell when node data changed. A graph store
given as the source is validated block-wise and copied as is (fingerprints added when it lacks them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from gnnprep.core.artifact import Timer, file_fingerprint, write_root_attrs
from gnnprep.core.device import default_budget
from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.jit import compiling
from gnnprep.core.output import atomic_output, check_free_space, refuse_input_as_output, start_writeback, work_folder
from gnnprep.core.progress import Progress, no_progress
from gnnprep.core.sizes import format_size, parse_size
from gnnprep.graph import store
from gnnprep.graph.sources import GraphSource, SourceOptions, is_graph_store, open_source, source_kind
from gnnprep.graph.sources.base import check_disjoint, check_ids
from gnnprep.graph.sources.graphstore import (
    NONE,
    ContentHash,
    add_missing_fingerprints,
    dataset_fingerprint,
    splits_fingerprint,
    validate_store,
)
from gnnprep.sparse.csr_builder import CSRBuilder, csr_fingerprint, incoming_chunk_edges, write_array

MIN_BUDGET = 4 * 1024**2
# a block of node rows read and written at a time at most (counted as float64), whatever the budget:
# larger blocks are only more fresh memory to fault in (papers100M shape at 1/40 with the default
# budget, whose blocks were 700 MB: peak RSS 1.44 GB against 2.02 GB when the cap was set)
NODE_BLOCK_BYTES = 128 << 20
DISK_SLACK = 256 * 1024      # HDF5 metadata and chunk-index overhead beyond the raw arrays


@dataclass(frozen=True)
class IngestConfig:
    directed: bool = False               # keep edge direction instead of symmetrising
    memory_budget: int | None = None     # bytes; None: half of the free RAM
    tmp_dir: str | None = None           # where spill files go (default: next to the output)
    order: str = "auto"                  # auto | community | degree | degree-bucket | none: the node order kept
                                         # in the store (/order/<kind>) and recorded as chosen (graph.order.settle)
    source: SourceOptions = field(default_factory=SourceOptions)


@dataclass(frozen=True)
class IngestReport:
    output: str
    source: str
    num_nodes: int
    num_edges: int                       # stored entries (both directions when symmetric)
    symmetric: bool
    num_features: int
    num_classes: int
    edges_read: int
    self_loops_dropped: int
    duplicates_dropped: int
    seconds: float
    warnings: tuple[str, ...] = ()
    order: dict | None = None            # {"kind" (chosen, or "none"), "why", "near_share_before", "near_share_after",
                                         #  ["prefix_share_before", "prefix_share_after"], "seconds", ..., "candidates"}
    resumed: str | None = None           # where an interrupted run was resumed: after its "buckets" (every edge
                                         # bucketed), its "sort" (some buckets written), its "adjacency" or "features"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def check_budget(budget: int) -> int:
    if budget < MIN_BUDGET:
        raise OptionError("--memory-budget", f"{format_size(budget)} is too small; ingest needs at least "
                                             f"{format_size(MIN_BUDGET)}")
    return budget


def parse_budget(text: str) -> int:
    """``--memory-budget`` of ingest: a size of at least MIN_BUDGET."""
    return check_budget(parse_size(text, "--memory-budget"))


def unused_options(spec: str, config: IngestConfig) -> list[tuple[str, str]]:
    """(option, why) for every option given that this kind of source would ignore; reads at most a
    file's first bytes (to tell a graph store), never downloads."""
    opts = config.source
    if spec == "sample" or (spec.startswith("ogbn-") and not Path(spec).exists()):
        kind = "folder"
    elif Path(spec).exists():
        kind = source_kind(Path(spec))
    else:
        return []  # open_source says what is missing
    what = {"store": "a graph store, which is copied as is", "folder": "an OGB folder, which brings its own",
            "graphsaint": "a GraphSAINT folder, which brings its own", "edges": "an edge list",
            "matrix": "a sparse matrix (.mtx or save_npz), whose size gives the node count and whose indices "
                      "have a fixed base"}[kind]
    given = [("--features", opts.features is not None), ("--labels", opts.labels is not None),
             ("--splits", opts.splits is not None), ("--num-nodes", opts.num_nodes is not None),
             ("--index-base", opts.index_base != 0)]
    node_data = ("--features", "--labels", "--splits")   # also taken by a matrix
    out = [(o, f"not used: SOURCE {spec} is {what}; it applies to edge lists")
           for o, set_ in given if set_ and kind != "edges" and not (kind == "matrix" and o in node_data)]
    if opts.split is not None and kind != "folder":
        out.append(("--split", f"not used: SOURCE {spec} is {what}; it picks a split folder of an OGB folder"))
    if config.directed and kind == "store":
        out.append(("--directed", f"not used: SOURCE {spec} is {what}, with the direction it was made with"))
    if opts.download and not spec.startswith("ogbn-"):
        out.append(("--download", f"not used: SOURCE {spec} is not an ogbn-<name> data set"))
    return out


def _check_inferred_nodes(largest: int, budget: int, where: Path) -> None:
    """Sparse huge ids (e.g. one id of 2**31) would make a store whose row pointer alone does not fit
    in memory: refuse before anything of that size is allocated or written."""
    n = largest + 1
    need = 8 * (n + 1)
    if need > budget:
        raise GnnprepError(f"{where}: the largest node id {largest} implies {n:,} nodes (largest id + 1), whose "
                           f"row pointer alone needs {format_size(need)} of memory, more than the memory budget "
                           f"{format_size(budget)}; renumber the ids to 0..n-1 (or raise --memory-budget)")


DECLARED_NODES_FLOOR = 1 << 25   # nodes a declared count may always have (a row pointer of 256 MiB, ~1 s)
NODES_PER_ENTRY = 64             # beyond this many nodes per entry, nearly every node would be isolated


def _check_declared_nodes(source: GraphSource, n: int, entries: int, budget: int) -> None:
    """A node count declared by a file or an option (a .mtx size line, a save_npz 'shape',
    --num-nodes) costs O(n) work and disk whatever the entries are: 3e9 nodes with one entry is
    24 GB of row pointer and minutes. Refuse it up front when it is far beyond what the entries can
    use (more than ``NODES_PER_ENTRY`` per entry, above ``DECLARED_NODES_FLOOR``) and its row pointer
    needs more than 1/8 of the memory budget; a larger budget is how to ask for such a graph."""
    pointer = 8 * (n + 1)
    if n <= max(DECLARED_NODES_FLOOR, NODES_PER_ENTRY * entries) or pointer <= budget // 8:
        return
    raise GnnprepError(f"{source.nodes_from or source.path} declares {n:,} nodes for {entries:,} "
                       f"entr{'y' if entries == 1 else 'ies'} (at most "
                       f"{min(n, 2 * entries):,} of them can have an edge); the row pointer alone would be "
                       f"{format_size(pointer)} (8 bytes a node), more than 1/8 of the memory budget "
                       f"{format_size(budget)}; expected a node count near the ids the entries use (or a "
                       f"--memory-budget of at least {format_size(8 * pointer)})")


def _spill_and_count(source: GraphSource, work: Path, chunk: int, budget: int,
                     progress: Progress) -> tuple[Path, int, int]:
    """Write edges as int64 pairs to a spill file; return (path, edges, largest id)."""
    path = work / "edges.pairs"
    largest, count = -1, 0
    with open(path, "wb") as f:
        for src, dst in source.edges(chunk):
            if len(src):
                largest = max(largest, int(src.max()), int(dst.max()))
                _check_inferred_nodes(largest, budget, source.path)
            write_array(f, np.stack([src, dst], axis=1).astype(np.int64))
            count += len(src)
            progress("edges", count, source.expected_edges)
    return path, count, largest


def _replay(path: Path, chunk: int):
    with open(path, "rb") as f:
        while True:
            a = np.fromfile(f, dtype=np.int64, count=2 * chunk)
            if not len(a):
                return
            a = a.reshape(-1, 2)
            yield a[:, 0], a[:, 1]


def _write_rows(f: h5py.File, name: str, chunks, n: int, width: int | None, dtype, what: str,
                origin: str, progress: Progress, on_block=None) -> str:
    """Copy row chunks into a new dataset of n rows (checked); return the content fingerprint of
    what was stored. ``on_block(block)`` sees every block as stored.

    The hash of a block runs in a worker thread while HDF5 stores it (xxhash releases the GIL);
    it is waited for before the next block is asked for, since sources may reuse a block's memory.
    The dataset (:func:`gnnprep.graph.store.create_node_rows`) has no chunk cache: blocks are written
    once, in order, so caching chunks only adds a copy of every byte. Each block's writeback to disk
    is started as it is stored (see :func:`gnnprep.core.output.start_writeback`)."""
    shape = (n, width) if width is not None else (n,)
    ds = store.create_node_rows(f, name, n, width, dtype)
    digest = ContentHash(dtype, shape)
    row = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rows-hash") as pool:
        for block in chunks:
            if width is not None and (block.ndim != 2 or block.shape[1] != width):
                raise GnnprepError(f"{origin}: {what} block of shape {block.shape}; expected {width} columns")
            if row + len(block) > n:
                raise GnnprepError(f"{origin}: more than {n} {what} rows; expected {n} (one per node)")
            block = np.ascontiguousarray(block, dtype=dtype)
            hashed = pool.submit(digest.update, block)
            if on_block is not None:
                on_block(block)
            ds[row:row + len(block)] = block
            pool.submit(start_writeback, f.filename)  # the final fsync then has little left to wait for
            hashed.result()
            row += len(block)
            progress(what, row, n)
    if row != n:
        raise GnnprepError(f"{origin}: {row} {what} rows; expected {n} (one per node)")
    ds.flush()  # a write failure surfaces here, not when the dataset object is freed
    return digest.hexdigest()


def _check_disk(output: Path, work: Path, source: GraphSource, n: int, symmetrize: bool, pairs: int = 0) -> None:
    """Refuse up front when the output's (and the spill folder's) disk cannot hold what this ingest
    writes. Peak: spilled pairs (``pairs`` bytes still to write) and keys plus the row pointer while
    the CSR is built, then the store itself. Sizes not known yet (edges of a text file) count 0."""
    entries = (source.expected_edges or 0) * (2 if symmetrize else 1)
    nodes = (n * source.num_features * np.dtype(source.feature_dtype).itemsize
             + (8 * n if source.labels_from else 0) + (2 * n if source.node_types else 0))
    out = 8 * (n + 1) + (4 if n < 2**31 else 8) * entries + nodes + DISK_SLACK
    keys = 8 * entries + DISK_SLACK
    if output.absolute().parent.stat().st_dev == work.stat().st_dev:
        check_free_space(output, pairs + max(out, keys + 8 * (n + 1)))
    else:
        check_free_space(output, out)
        check_free_space(work / "keys", pairs + keys)


def _copy_store(source: Path, output: Path, budget: int, t0: float) -> IngestReport:
    """A graph store as the source: validated block-wise, copied as is, fingerprints added if absent."""
    refuse_input_as_output(output, [source])
    s = validate_store(source, budget)
    check_free_space(output, source.stat().st_size + DISK_SLACK)
    with atomic_output(output, inputs=[source]) as tmp:
        shutil.copyfile(source, tmp)
        with store.writing(tmp, "r+") as f:
            add_missing_fingerprints(f, max(1 << 20, budget // 8))
    return IngestReport(str(output), str(source), s["num_nodes"], s["num_edges"], s["symmetric"],
                        s["num_features"], s["num_classes"], 0, 0, 0, round(time.perf_counter() - t0, 3),
                        (f"{source}: already a graph store; copied as is",))


def _write_nodes(f: h5py.File, source: GraphSource, n: int, budget: int, timer: Timer,
                 progress: Progress, features_mark: dict | None = None, out=None) -> tuple[dict, int, int]:
    """Features, labels and node types; return (fingerprints, num_classes, labeled nodes).
    ``features_mark``: a resumed run's features, kept as written (their fingerprint); ``out``: the
    resumable output to mark the features written in (:func:`_ingest_source`)."""
    fps = {"features_fingerprint": NONE, "labels_fingerprint": NONE}
    f.require_group(store.NODES_GROUP)
    if source.num_features:
        # kept when they read back as they were hashed (see _reopen_adjacency)
        kept = features_mark is not None and store.has_node_rows(f, store.FEATURES, n, source.num_features,
                                                                 source.feature_dtype) \
            and dataset_fingerprint(f[store.FEATURES]) == features_mark["fingerprint"]
        if features_mark is not None and not kept:
            source.warnings.append(f"{f.filename}: the features an interrupted run marked as written differ "
                                   "from them (changed since); copied again")
        if kept:
            fps["features_fingerprint"] = features_mark["fingerprint"]
        else:
            rows = max(1, min(budget // 8, NODE_BLOCK_BYTES) // max(1, source.num_features * 8))
            tile_rows = store.feature_chunk_shape(source.num_features, np.dtype(source.feature_dtype).itemsize)[0]
            if rows >= tile_rows:
                rows -= rows % tile_rows   # whole chunks per block: no chunk written twice
            with timer("features"):
                fps["features_fingerprint"] = _write_rows(
                    f, store.FEATURES, source.features(rows), n, source.num_features, source.feature_dtype,
                    "features", source.features_from, progress)
            f[store.FEATURES].attrs["source"] = source.features_from
            if out is not None:
                out.state["features"] = {"fingerprint": fps["features_fingerprint"],
                                         "seconds": timer.timings.get("features")}
                out.mark(("features",), f)
    seen = {"classes": 0, "labeled": 0}

    def count(block: np.ndarray) -> None:
        if len(block):
            seen["classes"] = max(seen["classes"], int(block.max()) + 1)
            seen["labeled"] += int((block >= 0).sum())

    if source.labels_from:
        with timer("labels"):
            fps["labels_fingerprint"] = _write_rows(
                f, store.LABELS, source.labels(max(1024, budget // 64)), n, None, np.int64, "labels",
                source.labels_from, progress, on_block=count)
    if source.node_types is not None:
        _write_rows(f, store.NODE_TYPE, source.node_type_ids(1 << 20), n, None, np.int16, "node types",
                    str(source.path), progress)
    return fps, seen["classes"], seen["labeled"]


def _write_splits(f: h5py.File, source: GraphSource, n: int) -> str:
    """Splits as sorted node ids (int32 when they fit), checked in range and disjoint."""
    stored = {}
    for name, ids in source.splits().items():
        check_ids(ids, n, source.nodes_from, lambda i, name=name: f"split {name} entry {i}")
        stored[name] = ids.astype(np.int32 if n < 2**31 else np.int64)
        if not len(ids):   # stored as given, but said: train refuses an empty train or valid split
            source.warnings.append(f"{source.splits_from or source.path}: the {name} split is empty (no node ids)")
    check_disjoint(stored, source.splits_from or str(source.path))
    store.write_splits(f, stored)
    return splits_fingerprint(stored)


def _build_adjacency(f: h5py.File, source: GraphSource, work: Path, output: Path, budget: int,
                     symmetrize: bool, timer: Timer, progress: Progress, order: str = "none", out=None):
    """Count nodes if needed (spilling the edges once), bucket, sort and write /adj; return (n, stats,
    the node-order search started on it or None).

    ``out`` (a resumable output, :func:`_ingest_source`): the buckets' spill files go to its work
    folder (``<output>.partial.d``) and are marked once every edge is bucketed, then each bucket as
    its rows are written; a resumed run (its state holds ``buckets``) continues from the last of
    those marks without reading the edges again."""
    resumed = out.state.get("buckets") if out is not None else None
    spills = out.work_dir() if out is not None else work
    if resumed is not None:
        builder = CSRBuilder.resume(resumed["builder"], spills)
        n = builder.n
        _restore_source(source, timer, n, resumed)
    else:
        n, builder = _bucket_edges(source, work, spills, output, budget, symmetrize, timer, progress)
        if out is not None and builder.resumable:
            out.state["buckets"] = {"builder": builder.state(), **_source_state(source, timer)}
            out.mark(("buckets",), f)
    adj = f.require_group(store.ADJ_GROUP)
    start = out.state.get("sort") if resumed is not None else None
    if resumed is not None and start is None and "indptr" in adj:
        start = {"bucket": 0, "offset": 0}   # interrupted before its first bucket's mark: reused from the start
    on_bucket = None
    if out is not None and builder.resumable:
        def on_bucket(place: dict) -> None:
            out.state["sort"] = place
            out.mark(("sort", place["bucket"]), f)
    finder = None
    if order in ("community", "auto"):
        from gnnprep.graph.order import IngestOrder  # numba: imported only when used

        # its first sweep follows the rows as they are written, the second overlaps the node data
        finder = IngestOrder(adj, n, builder.entries_upper(), builder.index_dtype, budget)
    with timer("sort_write_edges"):
        try:
            stats = builder.write(adj, progress, on_rows=finder.rows_ready if finder is not None else None,
                                  on_cols=finder.cols_written if finder is not None else None,
                                  on_bucket=on_bucket, start=start)
        except BaseException:
            if finder is not None:
                finder.abandon()
            raise
        if finder is not None:
            finder.csr_done()
        start_writeback(f.filename)
    store.finish_adjacency(adj, n, symmetrize)
    return n, stats, finder


def _source_state(source: GraphSource, timer: Timer) -> dict:
    """What a mark keeps of the source once its edges are read (:func:`_restore_source` gives it
    back to a resumed run): where the node count came from, the edges announced, the warnings and
    the timings so far."""
    return {"nodes_from": source.nodes_from, "expected_edges": source.expected_edges,
            "warnings": list(source.warnings), "timings": dict(timer.timings)}


def _restore_source(source: GraphSource, timer: Timer, n: int, mark: dict) -> None:
    source.num_nodes, source.nodes_from, source.expected_edges = n, mark["nodes_from"], mark["expected_edges"]
    source.warnings[:0] = [w for w in mark["warnings"] if w not in source.warnings]
    timer.timings.update(mark["timings"])


def _bucket_edges(source: GraphSource, work: Path, spills: Path, output: Path, budget: int, symmetrize: bool,
                  timer: Timer, progress: Progress) -> tuple[int, CSRBuilder]:
    """Read the edges into a CSR builder whose buckets spill to ``spills`` (the node count found
    first where the source declares none, spilling the edges once to ``work``); return (n, builder)."""
    chunk = incoming_chunk_edges(budget)
    edges = None
    if source.num_nodes is None:
        _check_disk(output, work, source, 0, symmetrize, pairs=16 * (source.expected_edges or 0))
        with timer("read_edges"):
            spill, count, largest = _spill_and_count(source, work, chunk, budget, progress)
        if count == 0:
            raise GnnprepError(f"{source.path}: no edges found, and no node count given (--num-nodes)")
        source.num_nodes, source.nodes_from = largest + 1, "largest node id + 1"
        source.expected_edges = count
        edges = _replay(spill, chunk)
    n = int(source.num_nodes)
    declared = edges is None
    if declared and source.expected_edges is not None:
        _check_declared_nodes(source, n, source.expected_edges, budget)
    # a declared node count with edges not yet counted (a text file): its row pointer and node data
    # are checked against the disk once the edges are read and the count judged against them, so a
    # count far beyond the edges is named as such whatever the free disk
    later = declared and source.expected_edges is None
    _check_disk(output, spills, source, 0 if later else n, symmetrize)
    builder = CSRBuilder(n, spills, budget, symmetrize, source.expected_edges)
    if edges is None and source.rereadable and builder.counts_first:
        with timer("count_edges"):   # each row's entries, so the keys are placed by row as they come
            done = 0
            try:
                for src, dst in source.edges(chunk):
                    builder.count(src, dst)
                    done += len(src)
                    progress("counting edges", done, source.expected_edges)
            except BaseException:
                builder.close_spills(check=False)
                raise
    with timer("bucket_edges"):
        done = 0
        try:
            for src, dst in (edges if edges is not None else source.edges(chunk)):
                builder.add(src, dst)
                done += len(src)
                progress("edges", done, source.expected_edges)
            if declared:
                _check_declared_nodes(source, n, done, budget)   # the entries read (a text file declares none)
            if later:
                _check_disk(output, spills, source, n, symmetrize)
        except BaseException:
            builder.close_spills(check=False)  # no write left in flight when the work folder goes
            raise
    return n, builder


def ingest(spec: str, output: str | Path, config: IngestConfig = IngestConfig(),
           progress: Progress = no_progress, command: str = "") -> IngestReport:
    """Turn the dataset ``spec`` into a graph store at ``output``."""
    t0 = time.perf_counter()
    budget = check_budget(config.memory_budget or default_budget("cpu"))
    output = Path(output)
    for option, why in unused_options(spec, config):
        raise OptionError(option, why, sep=": ")
    source = open_source(spec, config.source)
    if isinstance(source, Path):
        return _copy_store(source, output, budget, t0)
    return ingest_source(source, output, config, progress, command or f"ingest {spec}", t0)


def ingest_source(source: GraphSource, output: str | Path, config: IngestConfig = IngestConfig(),
                  progress: Progress = no_progress, command: str = "", t0: float | None = None) -> IngestReport:
    """Write the graph store of an opened ``source`` (what :func:`ingest` does after opening a spec);
    a fresh install's first run says so while numba compiles (:func:`gnnprep.core.jit.compiling`)."""
    with compiling(progress, "the kernels"):
        return _ingest_source(source, output, config, progress, command, t0)


def _resume_key(source: GraphSource, config: IngestConfig, symmetrize: bool, inputs: list[Path]) -> str | None:
    """What an interrupted ingest's partial store must have been made from to be resumed: the input
    files (size and modification time), the source and its options, the direction and the store's
    format; not the memory budget or the node order (neither changes ``/adj`` or the node data).
    None for a source without files (arrays in memory): nothing identifies its data across runs."""
    if not inputs:
        return None
    import json

    return json.dumps({"source": source.name, "kind": type(source).__name__, "options": dataclasses.asdict(config.source),
                       "symmetrize": symmetrize, "format": [store.FORMAT, store.FORMAT_VERSION],
                       "inputs": [[str(p.absolute()), file_fingerprint(p)] for p in inputs]}, sort_keys=True)


class StalePartial(GnnprepError):
    """A resumed ingest's partial store does not hold the adjacency its mark records (changed since)."""


def _reopen_adjacency(f: h5py.File, mark: dict) -> None:
    """Check the marked ``/adj`` of a resumed partial store (shapes and the last row pointer, then
    its fingerprint, read back whole) and drop what was written after the mark but the node
    datasets, which are written again in place (HDF5 does not reuse the space of a deleted dataset)."""
    n, m = int(mark["num_nodes"]), int(mark["stats"]["stored_entries"])
    try:
        indptr, indices = f[store.INDPTR], f[store.INDICES]
        ok = (indptr.shape == (n + 1,) and indices.shape == (m,) and int(indptr[n]) == m
              and tuple(f[store.ADJ_GROUP].attrs.get("shape", ())) == (n, n))
    except (KeyError, OSError, ValueError):
        ok = False
    if not ok:
        raise StalePartial(f"{f.filename}: /adj is not the {n:,} rows and {m:,} entries its mark records")
    # read back whole: a writer killed later (SIGKILL, out of memory) may have left HDF5's metadata
    # half updated, and a store must never carry an /adj other than the one its fingerprint names
    if csr_fingerprint(f[store.ADJ_GROUP]) != mark["stats"]["fingerprint"]:
        raise StalePartial(f"{f.filename}: /adj differs from the one its mark records (its fingerprint)")
    for name in list(f):
        if name not in (store.ADJ_GROUP, store.NODES_GROUP):
            del f[name]
    for name in list(f.attrs):
        del f.attrs[name]


def _check_sorting(f: h5py.File, out) -> None:
    """GnnprepError unless a partial store interrupted while its adjacency was sorted is as its
    marks say: the spill files of the buckets still to write whole, and ``/adj`` as far as written."""
    builder = CSRBuilder.resume(out.state["buckets"]["builder"], out.work)
    start = out.state.get("sort")
    if start is None:
        builder.check_spills(0)
    elif store.ADJ_GROUP not in f:
        raise GnnprepError(f"{f.filename}: no /adj, where its mark records {start['offset']:,} entries written")
    else:
        builder.check_written(f[store.ADJ_GROUP], start)


def _ingest_source(source: GraphSource, output: str | Path, config: IngestConfig, progress: Progress, command: str,
                   t0: float | None) -> IngestReport:
    """The ingest of an opened source, resumable: the store is written to ``<output>.partial``
    (:class:`gnnprep.core.output.ResumableOutput`) and marked as the adjacency is built
    (:func:`_build_adjacency`: the edges bucketed, then each bucket written), once ``/adj`` is
    whole and once the features are, so a rerun of the same command after an interrupt continues
    from the last mark (``resumed`` in the report), whatever the budget."""
    from gnnprep.core.output import ResumableOutput

    t0 = time.perf_counter() if t0 is None else t0
    budget = check_budget(config.memory_budget or default_budget("cpu"))
    output = Path(output)
    if config.directed and not getattr(source, "direction_known", True):
        source.warnings.append(f"{source.path}: not a known OGB data set, so whether its edges are stored once "
                               "per undirected pair is unknown; --directed keeps them as stored")
    timer = Timer()
    symmetrize = not config.directed or not source.stored_directed
    inputs = source.input_files()
    key = _resume_key(source, config, symmetrize, inputs)
    out = ResumableOutput(output, key or f"unresumable-{os.getpid()}-{time.time_ns()}", inputs)
    # said in the report, not kept in the store's provenance (it is of this run, not of the data)
    notes = [out.discarded] if out.discarded else []
    with out.writing(None), work_folder(output, config.tmp_dir) as work:
        mark = out.state.get("adjacency") if out.resumed else None
        # the buckets' spills are kept for a rerun beside the output, not in --tmp-dir
        keep = out if key is not None and config.tmp_dir is None else None
        sorting = out.resumed and mark is None and "buckets" in out.state
        if sorting and keep is None:   # (spilled beside the output, now asked to go to --tmp-dir)
            out.restart()
            sorting = False
        if mark is not None or sorting:
            try:
                with store.writing(out.partial, "r+") as f:
                    if mark is not None:
                        _reopen_adjacency(f, mark)
                    else:
                        _check_sorting(f, out)
            except (GnnprepError, OSError) as e:
                why = str(e) if isinstance(e, GnnprepError) else f"{out.partial}: {e}"
                source.warnings.append(f"{why}: the interrupted run's partial store was changed since; starting afresh")
                out.restart()
                mark, sorting = None, False
        resumed = (mark is not None and ("features" if "features" in out.state else "adjacency")) or \
            (sorting and ("sort" if "sort" in out.state else "buckets"))
        with store.writing(out.partial, "r+" if mark or sorting else "w") as f:
            if mark is None:
                n, stats, finder = _build_adjacency(f, source, work, output, budget, symmetrize, timer, progress,
                                                    config.order, keep)
                if key is not None:
                    out.state["adjacency"] = {"num_nodes": n, "stats": stats, **_source_state(source, timer)}
                    out.mark(("adjacency",), f)
                shutil.rmtree(out.work, ignore_errors=True)   # the buckets' spills, written
            else:
                n, stats = int(mark["num_nodes"]), mark["stats"]
                _restore_source(source, timer, n, mark)
                if "features" in out.state and out.state["features"].get("seconds") is not None:
                    timer.timings["features"] = out.state["features"]["seconds"]
                finder = _order_of_written(f, n, stats, budget, config.order)
            try:
                fps, num_classes, labeled = _write_nodes(f, source, n, budget, timer, progress,
                                                         out.state.get("features"), out if key else None)
                with timer("splits"):
                    fps["splits_fingerprint"] = _write_splits(f, source, n)
            except BaseException:
                if finder is not None:
                    finder.abandon()
                raise
            with timer("order_wait"):
                order = finder.finish(f) if finder is not None else None
                if config.order != "none":
                    from gnnprep.graph.order import settle

                    # which order precompute uses (the community one, hubs first, or none) and why
                    order = settle(f, config.order, order, budget)
            if order is not None and "error" in order:
                source.warnings.append(f"no node order kept in the store ({order['error']}); precompute will "
                                       "find one itself if it pays")
                order = None
            provenance = {
                "command": command or f"ingest {source.name}",
                "parameters": {"directed": config.directed, "symmetrized": symmetrize, "memory_budget": budget,
                               **dataclasses.asdict(config.source)},
                "inputs": [{"path": str(p.absolute()), "fingerprint": file_fingerprint(p)} for p in inputs],
                "timings": timer.timings,
                "stats": stats,
                "order": order,
                "warnings": list(source.warnings),
            }
            write_root_attrs(
                f, store.FORMAT, store.FORMAT_VERSION, provenance,
                num_nodes=n, num_edges=stats["stored_entries"], num_features=int(source.num_features),
                num_classes=num_classes, num_labeled=labeled, source=source.name,
                fingerprint=stats["fingerprint"], **fps, **source.extra_attrs())
        out.commit()
    return IngestReport(
        output=str(output), source=source.name, num_nodes=n, num_edges=stats["stored_entries"],
        symmetric=symmetrize, num_features=int(source.num_features), num_classes=num_classes,
        edges_read=stats["edges_read"], self_loops_dropped=stats["self_loops_dropped"],
        duplicates_dropped=stats["duplicates_dropped"], seconds=round(time.perf_counter() - t0, 3),
        warnings=tuple(notes + source.warnings), order=order, resumed=resumed or None)


def _order_of_written(f: h5py.File, n: int, stats: dict, budget: int, order: str):
    """The community order search of a resumed ingest, over the ``/adj`` an interrupted run wrote
    (every row ready at once; it overlaps the node data as in a fresh run), or None."""
    if order not in ("community", "auto"):
        return None
    from gnnprep.graph.order import IngestOrder

    finder = IngestOrder(f[store.ADJ_GROUP], n, int(stats["stored_entries"]), np.dtype(stats["index_dtype"]), budget)
    finder.rows_ready(0, n)
    finder.csr_done()
    return finder


def cached_store_path(spec: str, opts: SourceOptions, cache_dir: str | None) -> Path:
    """Where the graph store for a dataset spec is cached: under ``cache_dir`` when given, else
    beside the source (``<folder>/.gnnprep/graph.h5`` or ``<file>.gnnprep.h5``)."""
    from gnnprep.graph.sources import resolve_spec

    path = resolve_spec(spec, opts).absolute()
    if cache_dir:
        tag = hashlib.sha256(str(path).encode()).hexdigest()[:10]
        return Path(cache_dir).absolute() / f"{path.name}-{tag}.h5"
    if path.is_dir():
        return path / ".gnnprep" / "graph.h5"
    return path.with_name(path.name + ".gnnprep.h5")


def _cache_is_fresh(store_path: Path) -> bool:
    """The cached store was made from input files that have not changed since. A cache is advisory:
    anything unexpected in it (unreadable, tampered provenance) means not fresh, so it is rebuilt."""
    try:
        prov = store.read_provenance(store_path)
    except (OSError, KeyError, ValueError, TypeError, RecursionError):
        return False
    inputs = prov.get("inputs") if isinstance(prov, dict) else None
    if not isinstance(inputs, list) or not inputs:
        return False
    for item in inputs:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) \
                or not isinstance(item.get("fingerprint"), str):
            return False
        p = Path(item["path"])
        try:
            if not p.is_file() or file_fingerprint(p) != item["fingerprint"]:
                return False
        except OSError:
            return False
    return True


def ensure_graph_store(spec: str, config: IngestConfig = IngestConfig(), cache_dir: str | None = None,
                       progress: Progress = no_progress) -> Path:
    """A graph store for ``spec``: the spec itself when it is one, else a cached ingest of it."""
    from gnnprep.graph.sources import resolve_spec

    path = resolve_spec(spec, config.source)
    if is_graph_store(path):
        return path
    target = cached_store_path(spec, config.source, cache_dir)
    if target.exists() and _cache_is_fresh(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    ingest(spec, target, config, progress, command=f"(cached ingest of {spec})")
    return target


def from_arrays(edge_index, x=None, y=None, splits=None, num_nodes: int | None = None, *,
                output: str | Path, directed: bool = False, memory_budget: int | str | None = None,
                order: str = "auto", tmp_dir: str | None = None, name: str = "arrays",
                progress: Progress = no_progress) -> IngestReport:
    """Ingest in-memory arrays (PyG ``Data``, a DGL graph, numpy) into the graph store ``output``.

    ``edge_index``: [2, m] (row 0 sources u, row 1 destinations v: v aggregates from u, PyG's
    convention) or a (src, dst) pair such as DGL's ``g.edges()``; ``x`` [n, d] features; ``y`` [n]
    class ids (-1 or NaN: unknown); ``splits``: {"train"|"valid"|"test" (or "val", PyG's
    "train_mask", ...): node ids or a boolean mask [n]}; ``num_nodes`` (default: rows of x, length of y,
    else the largest id + 1). numpy arrays, torch tensors on any device and anything with ``__array__``
    are accepted; torch, PyG and DGL are never imported. The store equals that of ``gnnprep ingest`` on
    an edge-list file with the lines ``u v`` and the same ``--features``/``--labels``/``--splits``
    (symmetrised unless ``directed``). Arrays are read in chunks, so ``memory_budget`` bounds what
    ingest holds beyond the arrays themselves. Bad input raises :class:`~gnnprep.core.errors.ArgumentError`
    (a GnnprepError that is also a ValueError/TypeError) naming the argument and position (``edge_index[1] entry 7``, ``x row 3``).

    The public name is ``gnnprep.graph.from_arrays`` (and ``gnnprep.from_arrays``): ingest is a stage of
    the ``graph`` package; ``gnnprep.ingest.from_arrays`` also works, through the deprecated alias of
    this module.
    """
    from gnnprep.graph.sources.arrays import ArraySource, check_options

    check_options(directed=directed, memory_budget=memory_budget, order=order, tmp_dir=tmp_dir, name=name)
    budget = parse_budget(memory_budget) if isinstance(memory_budget, str) else memory_budget
    source = ArraySource(edge_index, x=x, y=y, splits=splits, num_nodes=num_nodes, name=name)
    config = IngestConfig(directed=directed, memory_budget=budget, tmp_dir=tmp_dir, order=order)
    return ingest_source(source, output, config, progress, command=f"from_arrays -> {output}")
