"""Ingest: any graph source -> HDF5 graph store, in bounded memory.

Steps: (1) when the node count is not declared, spill the edges once to a binary file while
finding the largest id; (2) bucket the edges by destination range into spill files
(:mod:`gnnprep.csr_builder`), symmetrising unless ``directed``; (3) sort and deduplicate one bucket
at a time and write its rows; (4) copy features and labels in row chunks; (5) write splits and
metadata. The output appears at its path only when complete (:func:`gnnprep.atomic.atomic_output`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from gnnprep import store
from gnnprep.atomic import atomic_output, work_folder
from gnnprep.csr_builder import CSRBuilder, incoming_chunk_edges
from gnnprep.device import default_budget
from gnnprep.errors import GnnprepError
from gnnprep.meta import Timer, file_fingerprint, write_root_attrs
from gnnprep.progress import Progress, no_progress
from gnnprep.sources import GraphSource, SourceOptions, open_source
from gnnprep.sources.base import check_ids

MIN_BUDGET = 4 * 1024**2



@dataclass(frozen=True)
class IngestConfig:
    directed: bool = False               # keep edge direction instead of symmetrising
    memory_budget: int | None = None     # bytes; None: half of the free RAM
    tmp_dir: str | None = None           # where spill files go (default: next to the output)
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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _spill_and_count(source: GraphSource, work: Path, chunk: int, progress: Progress) -> tuple[Path, int, int]:
    """Write edges as int64 pairs to a spill file; return (path, edges, largest id)."""
    path = work / "edges.pairs"
    largest, count = -1, 0
    with open(path, "wb") as f:
        for src, dst in source.edges(chunk):
            if len(src):
                largest = max(largest, int(src.max()), int(dst.max()))
            np.stack([src, dst], axis=1).astype(np.int64).tofile(f)
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
                origin: str, progress: Progress) -> int:
    """Copy row chunks into a new dataset of n rows; return rows written (checked == n)."""
    shape = (n, width) if width is not None else (n,)
    rows_per_chunk = store.feature_chunk_rows(width or 1, np.dtype(dtype).itemsize)
    ds = f.create_dataset(name, shape=shape, dtype=dtype,
                          chunks=(min(max(n, 1), rows_per_chunk),) + shape[1:] if n else None)
    row = 0
    for block in chunks:
        if width is not None and (block.ndim != 2 or block.shape[1] != width):
            raise GnnprepError(f"{origin}: {what} block of shape {block.shape}; expected {width} columns")
        if row + len(block) > n:
            raise GnnprepError(f"{origin}: more than {n} {what} rows; expected {n} (one per node)")
        ds[row:row + len(block)] = block
        row += len(block)
        progress(what, row, n)
    if row != n:
        raise GnnprepError(f"{origin}: {row} {what} rows; expected {n} (one per node)")
    return row


def ingest(spec: str, output: str | Path, config: IngestConfig = IngestConfig(),
           progress: Progress = no_progress, command: str = "") -> IngestReport:
    """Turn the dataset ``spec`` into a graph store at ``output``."""
    t0 = time.perf_counter()
    budget = config.memory_budget or default_budget("cpu")
    if budget < MIN_BUDGET:
        raise GnnprepError(f"--memory-budget {budget} bytes is too small; ingest needs at least 4MiB")
    output = Path(output)
    source = open_source(spec, config.source)
    if isinstance(source, Path):  # already a graph store: validate and copy
        with store.GraphStore(source) as g:
            report = IngestReport(str(output), str(source), g.num_nodes, g.num_edges, g.symmetric,
                                  int(g.attrs.get("num_features", 0)), int(g.attrs.get("num_classes", 0)),
                                  0, 0, 0, 0.0, (f"{source}: already a graph store; copied as is",))
        with atomic_output(output) as tmp:
            shutil.copyfile(source, tmp)
        return report

    if config.directed and not getattr(source, "direction_known", True):
        source.warnings.append(f"{source.path}: not a known OGB data set, so whether its edges are stored once "
                               "per undirected pair is unknown; --directed keeps them as stored")
    timer = Timer()
    symmetrize = not config.directed or not source.stored_directed
    with atomic_output(output) as tmp, work_folder(output, config.tmp_dir) as work:
        chunk = incoming_chunk_edges(budget)
        edges = None
        if source.num_nodes is None:
            with timer("read_edges"):
                spill, count, largest = _spill_and_count(source, work, chunk, progress)
            if count == 0:
                raise GnnprepError(f"{source.path}: no edges found, and no node count given (--num-nodes)")
            source.num_nodes, source.nodes_from = largest + 1, "largest node id + 1"
            source.expected_edges = count
            edges = _replay(spill, chunk)
        n = int(source.num_nodes)
        builder = CSRBuilder(n, work, budget, symmetrize, source.expected_edges)
        with timer("bucket_edges"):
            done = 0
            for src, dst in (edges if edges is not None else source.edges(chunk)):
                builder.add(src, dst)
                done += len(src)
                progress("edges", done, source.expected_edges)
        with h5py.File(tmp, "w") as f:
            adj = f.create_group("adj")
            with timer("sort_write_edges"):
                stats = builder.write(adj, progress)
            adj.attrs["shape"] = np.array([n, n], dtype=np.int64)
            adj.attrs["symmetric"] = bool(symmetrize)
            nodes = f.create_group("nodes")
            if source.num_features:
                rows = max(1, budget // 8 // max(1, source.num_features * 8))
                with timer("features"):
                    _write_rows(f, "nodes/features", source.features(rows), n, source.num_features,
                                source.feature_dtype, "features", source.features_from, progress)
                nodes["features"].attrs["source"] = source.features_from
            num_classes, labeled = 0, 0
            if source.labels_from:
                with timer("labels"):
                    _write_rows(f, "nodes/labels", source.labels(max(1024, budget // 64)), n, None, np.int64,
                                "labels", source.labels_from, progress)
                    lab = f["nodes/labels"]
                    for s in range(0, n, 1 << 22):
                        block = lab[s:s + (1 << 22)]
                        if len(block):
                            num_classes = max(num_classes, int(block.max()) + 1)
                            labeled += int((block >= 0).sum())
            if source.node_types is not None:
                _write_rows(f, "nodes/type", source.node_type_ids(1 << 20), n, None, np.int16, "node types",
                            str(source.path), progress)
            with timer("splits"):
                splits = source.splits()
            grp = f.create_group("splits")
            for name, ids in splits.items():
                check_ids(ids, n, source.nodes_from, lambda i, name=name: f"split {name} entry {i}")
                grp.create_dataset(name, data=ids.astype(np.int32 if n < 2**31 else np.int64))
            provenance = {
                "command": command or f"ingest {spec}",
                "parameters": {"directed": config.directed, "symmetrized": symmetrize, "memory_budget": budget,
                               **dataclasses.asdict(config.source)},
                "inputs": [{"path": str(p.absolute()), "fingerprint": file_fingerprint(p)}
                           for p in source.input_files()],
                "timings": timer.timings,
                "stats": stats,
            }
            write_root_attrs(
                f, store.FORMAT, store.FORMAT_VERSION, provenance,
                num_nodes=n, num_edges=stats["stored_entries"], num_features=int(source.num_features),
                num_classes=num_classes, num_labeled=labeled, source=source.name,
                fingerprint=stats["fingerprint"], **source.extra_attrs())
    return IngestReport(
        output=str(output), source=source.name, num_nodes=n, num_edges=stats["stored_entries"],
        symmetric=symmetrize, num_features=int(source.num_features), num_classes=num_classes,
        edges_read=stats["edges_read"], self_loops_dropped=stats["self_loops_dropped"],
        duplicates_dropped=stats["duplicates_dropped"], seconds=round(time.perf_counter() - t0, 3),
        warnings=tuple(source.warnings))


def cached_store_path(spec: str, opts: SourceOptions, cache_dir: str | None) -> Path:
    """Where the graph store for a dataset spec is cached: under ``cache_dir`` when given, else
    beside the source (``<folder>/.gnnprep/graph.h5`` or ``<file>.gnnprep.h5``)."""
    from gnnprep.sources import resolve_spec

    path = resolve_spec(spec, opts).absolute()
    if cache_dir:
        tag = hashlib.sha256(str(path).encode()).hexdigest()[:10]
        return Path(cache_dir).absolute() / f"{path.name}-{tag}.h5"
    if path.is_dir():
        return path / ".gnnprep" / "graph.h5"
    return path.with_name(path.name + ".gnnprep.h5")


def _cache_is_fresh(store_path: Path) -> bool:
    """The cached store was made from input files that have not changed since."""
    try:
        with h5py.File(store_path, "r") as f:
            prov = json.loads(f.attrs["provenance"])
    except (OSError, KeyError, ValueError):
        return False
    for item in prov.get("inputs", []):
        p = Path(item["path"])
        if not p.exists() or file_fingerprint(p) != item["fingerprint"]:
            return False
    return True


def ensure_graph_store(spec: str, config: IngestConfig = IngestConfig(), cache_dir: str | None = None,
                       progress: Progress = no_progress) -> Path:
    """A graph store for ``spec``: the spec itself when it is one, else a cached ingest of it."""
    from gnnprep.sources import is_graph_store, resolve_spec

    path = resolve_spec(spec, config.source)
    if is_graph_store(path):
        return path
    target = cached_store_path(spec, config.source, cache_dir)
    if target.exists() and _cache_is_fresh(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    ingest(spec, target, config, progress, command=f"(cached ingest of {spec})")
    return target
