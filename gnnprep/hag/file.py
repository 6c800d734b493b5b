"""The ``hag.h5`` artifact: write, read and check a HAG, and describe it for ``gnnprep info``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnprep.core.artifact import (
    FORMAT_VERSIONS,
    Artifact,
    attr_value,
    count_attr,
    dataset_or_none,
    json_attr,
    open_artifact,
    plain_attrs,
    register_format,
)
from gnnprep.core.errors import GnnprepError
from gnnprep.hag.structure import Hag, graph_cost

FORMAT = "gnnprep.hag"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]


def write_hag(h: Hag, path, provenance: dict, aggregate: str, capacity: int, graph_fingerprint: str,
              indptr: np.ndarray, inputs=()) -> dict:
    """Write ``hag.h5`` atomically; return the summary written into its root attributes. ``inputs``:
    the files the HAG was built from, which ``path`` must not be (refused, never overwritten)."""
    from gnnprep.core import h5file
    from gnnprep.core.artifact import write_root_attrs
    from gnnprep.core.output import atomic_output

    ag, tg = graph_cost(indptr)
    summary = {
        "num_nodes": h.num_nodes, "num_agg": h.num_agg, "levels": len(h.level_ptr) - 1,
        "aggregate": aggregate, "capacity": int(capacity),
        "aggregations_graph": ag, "aggregations_hag": h.aggregations(),
        "transfers_graph": tg, "transfers_hag": h.transfers(),
    }
    idx_dtype = np.int32 if h.num_nodes + h.num_agg < 2**31 else np.int64
    with atomic_output(path, inputs=inputs) as tmp:
        with h5file.writing(tmp) as f:
            h5file.put(f, "agg/inputs", data=h.inputs.astype(idx_dtype).reshape(-1, 2))
            h5file.put(f, "agg/level_ptr", data=h.level_ptr.astype(np.int64))
            h5file.put(f, "adj/indptr", data=h.indptr.astype(np.int64))
            h5file.put(f, "adj/indices", data=h.indices.astype(idx_dtype))
            write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance, graph_fingerprint=graph_fingerprint, **summary)
    return summary


def write_hag_rows(path, num_nodes: int, inputs: np.ndarray, level_ptr: np.ndarray, lengths: np.ndarray,
                   rows, provenance: dict, aggregate: str, capacity: int, graph_fingerprint: str,
                   graph_indptr: np.ndarray, inputs_files=()) -> dict:
    """:func:`write_hag` for in-lists too large to hold: ``lengths`` [n] of the in-lists and
    ``rows`` an iterable of (first entry, ids) pieces in order, written as they come. Returns the
    summary written into the root attributes."""
    from gnnprep.core import h5file
    from gnnprep.core.artifact import write_root_attrs
    from gnnprep.core.output import atomic_output

    na = len(inputs)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    total = int(indptr[-1])
    ag, tg = graph_cost(graph_indptr)
    summary = {
        "num_nodes": int(num_nodes), "num_agg": int(na), "levels": len(level_ptr) - 1,
        "aggregate": aggregate, "capacity": int(capacity),
        "aggregations_graph": ag, "aggregations_hag": int(np.maximum(lengths - 1, 0).sum()) + int(na),
        "transfers_graph": tg, "transfers_hag": total + 2 * int(na),
    }
    idx_dtype = np.int32 if num_nodes + na < 2**31 else np.int64
    with atomic_output(path, inputs=inputs_files) as tmp:
        with h5file.writing(tmp) as f:
            h5file.put(f, "agg/inputs", data=np.asarray(inputs).astype(idx_dtype).reshape(-1, 2))
            h5file.put(f, "agg/level_ptr", data=np.asarray(level_ptr, dtype=np.int64))
            h5file.put(f, "adj/indptr", data=indptr)
            ds = f.create_dataset("adj/indices", shape=(total,), dtype=idx_dtype,
                                  chunks=(min(max(1, total), 1 << 20),) if total else None)
            for start, ids in rows:
                if len(ids):
                    ds[start:start + len(ids)] = ids.astype(idx_dtype, copy=False)
            write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance, graph_fingerprint=graph_fingerprint, **summary)
    return summary


class SearchWork:
    """The streamed search's partial file (``<hag.h5>.partial``, kept by
    :class:`gnnprep.core.output.ResumableOutput`): each finished row block's rewired in-lists and
    aggregation nodes, every dataset allocated when the file is made, so a killed search leaves a
    file a rerun continues from.

    ``work/lengths`` [n] the in-lists' new lengths; ``work/ids`` [m] a block's in-lists packed from
    its first stored entry; ``work/inputs`` [cap, 2] and ``work/levels`` [cap] the aggregation
    nodes in the order they were made (node j is id n + j)."""

    def __init__(self, path, n: int, m: int, cap: int, ids_dtype, fresh: bool):
        import h5py

        from gnnprep.core import h5file

        h5file.record_dealloc_failures()
        self.f = h5py.File(path, "a")
        if fresh:
            self.f.create_dataset("work/lengths", shape=(n,), dtype=np.int64)
            self.f.create_dataset("work/ids", shape=(m,), dtype=ids_dtype)
            self.f.create_dataset("work/inputs", shape=(max(1, cap), 2), dtype=np.int64)
            self.f.create_dataset("work/levels", shape=(max(1, cap),), dtype=np.int32)
        self.ids_dtype = self.f["work/ids"].dtype

    def __enter__(self) -> "SearchWork":
        return self

    def __exit__(self, kind, *exc) -> None:
        from gnnprep.core import h5file

        if kind is None:
            h5file.close(self.f)   # a failed flush raises its write's error
        else:
            h5file.close_after_failure(self.f)

    def put(self, r0: int, r1: int, p0: int, lengths: np.ndarray, rows: np.ndarray, made: int,
            inputs: np.ndarray, levels: np.ndarray) -> None:
        """Rows r0..r1−1 (first stored entry p0) and the aggregation nodes made + 0..k−1 of a block.
        Each dataset is flushed before it is dropped: a failed write (a full disk) is then an exception
        here, not a failure as h5py frees the dataset, which left its id half closed
        (:mod:`gnnprep.core.h5file`)."""
        writes = [("work/lengths", slice(r0, r1), lengths)]
        if len(rows):
            writes.append(("work/ids", slice(p0, p0 + len(rows)), rows.astype(self.ids_dtype)))
        if len(inputs):
            writes += [("work/inputs", slice(made, made + len(inputs)), inputs),
                       ("work/levels", slice(made, made + len(inputs)), levels)]
        for name, where, values in writes:
            ds = self.f[name]
            ds[where] = values
            ds.flush()

    def aggregation_nodes(self, made: int) -> tuple[np.ndarray, np.ndarray]:
        return self.f["work/inputs"][:made], self.f["work/levels"][:made].astype(np.int64)

    def lengths(self) -> np.ndarray:
        return self.f["work/lengths"][:]

    def rows(self, p0: int, k: int) -> np.ndarray:
        return self.f["work/ids"][p0:p0 + k]


def _index_dataset(f, path, name: str, ndim: int):
    """An integer dataset of the HAG (not read), or a one-line error naming it."""
    if name not in f or not hasattr(f[name], "dtype"):
        raise GnnprepError(f"{path}: missing dataset /{name}; the HAG is incomplete")
    ds = f[name]
    if ds.dtype.kind not in "iu" or ds.ndim != ndim or (ndim == 2 and ds.shape[1] != 2):
        want = "[|VA|, 2] integers" if ndim == 2 else "a 1-D integer array"
        raise GnnprepError(f"{path}: /{name} is {ds.dtype} of shape {ds.shape}; expected {want}")
    return ds


def _read_index(f, path, name: str, ndim: int) -> np.ndarray:
    """An integer dataset of the HAG as int64, or a one-line error naming it."""
    return _index_dataset(f, path, name, ndim)[:].astype(np.int64)


def _root_count(f, path, name: str) -> int:
    """A count among the HAG's root attributes, or a one-line error naming it."""
    v = f.attrs.get(name)
    if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < 0:
        raise GnnprepError(f"{path}: root attribute {name!r} is {v!r}; expected a count")
    return int(v)


def check_hag(h: Hag, path) -> None:
    """GnnprepError unless ``h`` is a well-formed HAG (one vectorised pass over its arrays), so that
    the executor's kernels never index out of bounds: ``level_ptr`` runs from 0 to |VA| without
    decreasing; every input of an aggregation node of level l+1 lies in [0, n + level_ptr[l]) (graph
    nodes or earlier levels: topological); the in-lists are a CSR over V ∪ VA."""
    from gnnprep.graph.store import check_ids, check_indptr

    check_aggregates(h.num_nodes, h.inputs, h.level_ptr, path)
    check_indptr(h.indptr, h.num_nodes, len(h.indices), f"{path}: /adj/indptr")
    check_ids(h.indices, h.num_nodes + h.num_agg, f"{path}: /adj/indices")


def check_aggregates(n: int, inputs: np.ndarray, lp: np.ndarray, path) -> None:
    """:func:`check_hag`'s checks of the aggregation nodes alone (``inputs`` [|VA|, 2], ``lp`` the
    level pointer): for a HAG whose in-lists are checked block by block as they are read."""
    na = len(inputs)
    if len(lp) < 1 or lp[0] != 0 or lp[-1] != na or (np.diff(lp) < 0).any():
        runs = f"runs from {int(lp[0])} to {int(lp[-1])}" if len(lp) else "is empty"
        raise GnnprepError(f"{path}: /agg/level_ptr {runs} or decreases; expected non-decreasing offsets from 0 "
                           f"to {na} (the file is corrupt)")
    bound = n + np.repeat(lp[:-1], np.diff(lp))
    bad = np.flatnonzero(((inputs < 0) | (inputs >= bound[:, None])).any(axis=1))
    if len(bad):
        i = int(bad[0])
        raise GnnprepError(f"{path}: /agg/inputs[{i}] = {inputs[i].tolist()}; expected ids in [0, {int(bound[i])}) "
                           "(graph nodes or aggregation nodes of earlier levels; the file is corrupt)")


def read_hag(path) -> tuple[Hag, dict]:
    """The HAG in ``path`` and its root attributes, validated by :func:`check_hag`."""
    with open_artifact(path, expect=FORMAT) as f:
        n = _root_count(f, path, "num_nodes")
        h = Hag(n, _read_index(f, path, "agg/inputs", 2), _read_index(f, path, "agg/level_ptr", 1),
                _read_index(f, path, "adj/indptr", 1), _read_index(f, path, "adj/indices", 1))
        attrs = plain_attrs(f.attrs)
    check_hag(h, path)
    return h, attrs


# -- a HAG relabelled to a run's node order, kept beside the HAG (gnnprep.hag.ordered_copy) -------------------
def write_relabelled(path, h: Hag, attrs: dict, inputs=()) -> None:
    """``h`` (relabelled to a node order: int32 ids where they fit, as :func:`gnnprep.hag.order.in_order`
    makes them) at ``path`` atomically, ``attrs`` at its root, in the HAG's own layout."""
    from gnnprep.core import h5file
    from gnnprep.core.output import atomic_output

    with atomic_output(path, inputs=inputs) as tmp:
        with h5file.writing(tmp) as f:
            h5file.put(f, "agg/inputs", data=h.inputs)
            h5file.put(f, "agg/level_ptr", data=h.level_ptr)
            h5file.put(f, "adj/indptr", data=h.indptr)
            h5file.put(f, "adj/indices", data=h.indices)
            for k, v in attrs.items():
                f.attrs[k] = v


def write_relabelled_rows(path, inputs: np.ndarray, level_ptr: np.ndarray, indptr: np.ndarray, num_entries: int,
                          ids_dtype, pieces, attrs: dict, inputs_files=()) -> None:
    """:func:`write_relabelled` for in-lists too large to hold: ``pieces`` yields (first entry, ids)
    in order, each written as it comes (:func:`gnnprep.hag.order.write_in_order`)."""
    from gnnprep.core import h5file
    from gnnprep.core.output import atomic_output

    with atomic_output(path, inputs=inputs_files) as tmp, h5file.writing(tmp) as f:
        h5file.put(f, "agg/inputs", data=inputs)
        h5file.put(f, "agg/level_ptr", data=level_ptr)
        h5file.put(f, "adj/indptr", data=indptr)
        out = f.create_dataset("adj/indices", shape=(num_entries,), dtype=ids_dtype)
        for q0, ids in pieces:
            if len(ids):
                out[q0:q0 + len(ids)] = ids
        for k, v in attrs.items():
            f.attrs[k] = v


def relabelled_attrs(path) -> dict:
    """The root attributes of a file :func:`write_relabelled` wrote (OSError where it cannot be read)."""
    import h5py

    with h5py.File(path, "r") as f:
        return plain_attrs(f.attrs)


def _shaped(f, path, num_nodes: int, num_agg: int) -> dict:
    """The HAG layout's four datasets in ``f`` (not read): integers, of the shapes a HAG over
    ``num_nodes`` nodes with ``num_agg`` aggregation nodes has (the in-lists' length is checked with
    the row pointers); a one-line error naming the first that is not."""
    out = {}
    for name, shape in (("agg/inputs", (num_agg, 2)), ("agg/level_ptr", None), ("adj/indptr", (num_nodes + 1,)),
                        ("adj/indices", None)):
        ds = _index_dataset(f, path, name, 2 if name == "agg/inputs" else 1)
        if shape is not None and ds.shape != shape:
            raise GnnprepError(f"{path}: /{name} has shape {ds.shape}; expected {list(shape)}")
        out[name] = ds
    return out


def read_relabelled(path, num_nodes: int, num_agg: int) -> Hag:
    """The HAG :func:`write_relabelled` wrote, its arrays as kept (ids int32 where n + |VA| < 2^31),
    validated by :func:`check_hag`; GnnprepError naming what is wrong."""
    import h5py

    with h5py.File(path, "r") as f:
        arrays = {name: ds[:] for name, ds in _shaped(f, path, num_nodes, num_agg).items()}
    ids = np.int32 if num_nodes + num_agg < 2**31 else np.int64
    h = Hag(num_nodes=num_nodes, inputs=arrays["agg/inputs"].astype(ids, copy=False),
            level_ptr=arrays["agg/level_ptr"].astype(np.int64, copy=False),
            indptr=arrays["adj/indptr"].astype(np.int64, copy=False),
            indices=arrays["adj/indices"].astype(ids, copy=False))
    check_hag(h, path)
    return h


class HagRows:
    """A HAG file open for reading its in-lists a block at a time: ``hag.h5`` (``num_nodes`` None: from
    its root attributes, the file checked as an artifact) or the copy :func:`write_relabelled` wrote
    (the same layout; ``num_nodes`` and ``num_agg`` from its attributes). ``num_nodes``, ``inputs``,
    ``level_ptr`` and ``indptr`` are held (ids int32 where n + |VA| < 2^31) and checked as
    :func:`check_hag` checks them; :meth:`read` gives entries p0..p1-1, their ids checked in
    [0, n + |VA|) the first time a range is read. For a HAG too large to hold: relabelled
    (:func:`gnnprep.hag.order.write_in_order`) or streamed as S is
    (:class:`gnnprep.precompute.hop_graph.HopGraph`). GnnprepError naming what is wrong; :meth:`close`
    when done."""

    def __init__(self, path, num_nodes: int | None = None, num_agg: int | None = None):
        import h5py

        from gnnprep.graph.store import check_indptr

        self.path = path
        self.f = open_artifact(path, expect=FORMAT) if num_nodes is None else h5py.File(path, "r")
        try:
            if num_nodes is None:
                num_nodes = _root_count(self.f, path, "num_nodes")
                num_agg = len(_index_dataset(self.f, path, "agg/inputs", 2))
            sets = _shaped(self.f, path, num_nodes, num_agg)
            self.dtype = np.dtype(np.int32 if num_nodes + num_agg < 2**31 else np.int64)
            self.num_nodes = num_nodes
            self.inputs = sets["agg/inputs"][:].astype(self.dtype, copy=False)
            self.level_ptr = sets["agg/level_ptr"][:].astype(np.int64, copy=False)
            self.indptr = sets["adj/indptr"][:].astype(np.int64, copy=False)
            self._ids = sets["adj/indices"]
            check_aggregates(num_nodes, self.inputs, self.level_ptr, path)
            check_indptr(self.indptr, num_nodes, len(self._ids), f"{path}: /adj/indptr")
        except BaseException:
            self.f.close()
            raise
        self._checked: set = set()

    @property
    def num_agg(self) -> int:
        return len(self.inputs)

    def transfers(self) -> int:
        return len(self._ids) + 2 * self.num_agg

    def read(self, p0: int, p1: int, out: np.ndarray | None = None) -> np.ndarray:
        """In-list entries p0..p1-1 (into ``out[:p1 - p0]`` when given, as kept: no conversion)."""
        from gnnprep.graph.store import check_ids

        if out is not None and out.dtype == self._ids.dtype and p1 > p0:
            ids = out[:p1 - p0]
            self._ids.read_direct(ids, np.s_[p0:p1])
        else:
            ids = self._ids[p0:p1]
        if (p0, p1) not in self._checked:
            check_ids(ids, self.num_nodes + self.num_agg, f"{self.path}: /adj/indices", offset=p0)
            self._checked.add((p0, p1))
        return ids

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> "HagRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HagFile(Artifact):
    """A HAG artifact opened for reading (:func:`gnnprep.open`): root attributes as ``attrs``, what
    ``gnnprep info`` shows as ``info``, the structure itself by :meth:`load`."""

    FORMAT = FORMAT

    @property
    def attrs(self) -> dict:
        return plain_attrs(self.f.attrs)

    def load(self) -> Hag:
        """The whole HAG (in-lists over V ∪ VA and the aggregation nodes' input pairs), validated."""
        return read_hag(self.path)[0]


def read_hag_summary(path, graph_fingerprint: str) -> dict | None:
    """The root summary of a HAG built for the graph with ``graph_fingerprint``, or None when
    ``path`` is missing, unreadable or for another graph (``--hag auto`` then ignores it)."""
    try:
        with open_artifact(path, expect=FORMAT) as f:
            attrs = plain_attrs(f.attrs)
    except GnnprepError:
        return None
    return attrs if attrs.get("graph_fingerprint") == graph_fingerprint else None


# -- the description for ``gnnprep info`` ---------------------------------------------------------------
HAG_COUNTS = ("num_nodes", "num_agg", "capacity", "aggregations_graph", "aggregations_hag", "transfers_graph",
              "transfers_hag")


def describe(path: Path) -> dict:
    with open_artifact(path, expect="gnnprep.hag") as f:
        a = {k: attr_value(v) for k, v in f.attrs.items()}
        prov = json_attr(f.attrs, "provenance", path, dict, {}, "attribute")
        a.pop("provenance", None)
        a.update({k: count_attr(f.attrs, k, path) for k in HAG_COUNTS})
        missing = [k for k in HAG_COUNTS if a[k] is None]
        if missing:
            raise GnnprepError(f"{path}: root attribute {missing[0]!r} is missing; the HAG is incomplete")
        level_ptr = dataset_or_none(f, "agg/level_ptr", path, 1)
        if level_ptr is None:
            raise GnnprepError(f"{path}: missing dataset /agg/level_ptr; the HAG is incomplete")
        timings = prov.get("timings") if isinstance(prov.get("timings"), dict) else {}
        peak = prov.get("peak_bytes")
        out = {"file": str(path), **a, "aggregate": str(a.get("aggregate")), "levels": max(0, len(level_ptr) - 1),
               "search_seconds": timings.get("search_seconds"),
               "peak_bytes": peak if isinstance(peak, int) and not isinstance(peak, bool) else None,
               "size_bytes": path.stat().st_size}
    out["aggregation_ratio"] = round(out["aggregations_graph"] / max(1, out["aggregations_hag"]), 4)
    out["transfer_ratio"] = round(out["transfers_graph"] / max(1, out["transfers_hag"]), 4)
    return out


register_format(FORMAT, reader=HagFile, describer=describe)
