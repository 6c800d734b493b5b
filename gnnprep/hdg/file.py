"""The ``hdg.h5`` artifact: one CSC-offset array per level, a global schema tree (FlexGraph's
storage; see :mod:`gnnprep.hdg.structure`); write, read and check it, and describe it for
``gnnprep info``."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np

from gnnprep.core.artifact import (
    FORMAT_VERSIONS,
    Artifact,
    attr_value,
    count_attr,
    json_attr,
    open_artifact,
    plain_attrs,
    register_format,
)
from gnnprep.core.errors import GnnprepError
from gnnprep.hdg.structure import Hdg, Level

FORMAT = "gnnprep.hdg"
FORMAT_VERSION = FORMAT_VERSIONS[FORMAT]


def write_hdg(h: Hdg, path, provenance: dict, selector: str, spec: str, seed: int, graph_fingerprint: str,
              graph_store_bytes: int, graph_adj_bytes: int, inputs=()) -> dict:
    """Write ``hdg.h5`` atomically; return the summary written into its root attributes. ``selector``
    and ``spec`` name the selector and its canonical SPEC (:func:`gnnprep.hdg.select.select_spec`);
    ``inputs``: the files it was built from, which ``path`` must not be (refused, never overwritten).
    The HDG is in memory here; ``gnnprep hdg`` writes level by level in node blocks
    (:class:`LevelStream`, :mod:`gnnprep.hdg.stream`), the same datasets with the same values."""
    from gnnprep.core import h5file
    from gnnprep.core.output import atomic_output

    idx_dtype = id_dtype(h.num_nodes)
    with atomic_output(path, inputs=inputs) as tmp:
        with h5file.writing(tmp) as f:
            parent = "node"
            for r in h.roots:
                parent = "node"
                for lvl in r.walk():
                    g = f.create_group(f"levels/{lvl.name}")
                    if lvl.offsets is not None and not lvl.fanout:
                        narrow = np.int32 if lvl.offsets[-1] < 2**31 else np.int64
                        h5file.put(g, "offsets", data=lvl.offsets.astype(narrow))
                    if lvl.ids is not None:
                        h5file.put(g, "ids", data=lvl.ids.astype(idx_dtype))
                    if lvl.weights is not None:
                        h5file.put(g, "weights", data=lvl.weights.astype(np.float32))
                    g.attrs.update(kind=lvl.kind, parent=parent, fanout=int(lvl.fanout),
                                   num_parents=int(lvl.num_parents), num_children=int(lvl.num_children))
                    parent = lvl.name
            summary = finish_hdg(f, h, provenance, selector, spec, seed, graph_fingerprint, graph_store_bytes,
                                 graph_adj_bytes)
    return summary


def id_dtype(n: int) -> np.dtype:
    """The stored dtype of node ids: int32 below 2^31 nodes."""
    return np.dtype(np.int32 if n < 2**31 else np.int64)


def finish_hdg(f, h: Hdg, provenance: dict, selector: str, spec: str, seed: int, graph_fingerprint: str,
               graph_store_bytes: int, graph_adj_bytes: int) -> dict:
    """Write the root attributes of an HDG whose levels are in ``f`` (``h``: its schema and
    channels; its arrays may be empty stand-ins); return the summary, channels included."""
    from gnnprep.core.artifact import write_root_attrs

    hdg_bytes = sum(ds.nbytes for g in f["levels"].values() for ds in g.values())
    summary = {"num_nodes": h.num_nodes, "selector": selector, "spec": spec, "seed": int(seed),
               "levels": len(h.levels()), "hdg_bytes": int(hdg_bytes),
               "graph_store_bytes": int(graph_store_bytes), "graph_adj_bytes": int(graph_adj_bytes)}
    write_root_attrs(f, FORMAT, FORMAT_VERSION, provenance, graph_fingerprint=graph_fingerprint,
                     schema=json.dumps(h.schema()), channels=json.dumps(h.channels()), **summary)
    summary["channels"] = h.channels()
    return summary


COPY_ENTRIES = 1 << 22      # entries of a level copied from its files into the HDF5 file at a time
MARK_EVERY_S = 10.0         # seconds between the marks of an HDG written block by block (StreamMarks)


class StalePartial(GnnprepError):
    """A resumed level's file is missing or shorter than its mark: the partial output was changed
    since (the run then starts afresh, :func:`gnnprep.hdg.builder.build`)."""


class LevelStream:
    """One level of an HDG made in parent order, block by block (``gnnprep hdg`` under a memory
    budget). :meth:`append` takes the next parents' child counts (variable fanout) and the next
    children's ids and weights and appends them to plain files in ``folder`` (``<name>.offsets``:
    the running ends as int64, ``<name>.ids``, ``<name>.weights``); :meth:`finish` checks the counts;
    :meth:`write` copies the level into the HDF5 file, the datasets of :func:`write_hdg` with the same
    dtypes and values (offsets int32 when the child count stays below 2^31, known only then).

    Plain appends are what make a run resumable (:class:`StreamMarks`): after :meth:`sync`, the
    files up to :meth:`state`'s counts are exactly what was written whatever happens to the process
    next (a resizable HDF5 dataset caught mid-update is not), and ``resume`` (a state) reopens them
    cut back to those counts. The price is one copy of the level at the end, and its bytes twice on
    the disk until the output is committed."""

    def __init__(self, folder, name: str, kind: str, parent: str, fanout: int = 0, num_parents: int | None = None,
                 ids: bool = False, weighted: bool = False, n: int = 0, resume: dict | None = None):
        if not fanout and num_parents is None:
            raise ValueError("a variable-fanout level needs its number of parents")
        self.name, self.kind, self.parent, self.fanout = name, kind, parent, int(fanout)
        self.num_parents = num_parents
        r = resume or {}
        self.parents = int(r.get("parents", 0))                    # parents written so far (variable fanout)
        self.appends = int(r.get("appends", 0))                    # blocks appended
        self.children_offsets = int(r.get("children_offsets", 0))  # the running end of the offsets
        self.children = int(r.get("children", 0))                  # children (ids) written so far
        self.total = None                                           # the child count, once finished
        wanted = ([("offsets", np.dtype(np.int64), self.parents + 1)] if not self.fanout else []) \
            + ([("ids", id_dtype(n), self.children)] if ids else []) \
            + ([("weights", np.dtype(np.float32), self.children)] if weighted else [])
        self.files: dict = {}
        try:
            for key, dtype, count in wanted:
                path = Path(folder) / f"{name}.{key}"
                if resume is None:
                    fh = open(path, "w+b")
                    if key == "offsets":
                        _append(fh, np.zeros(1, np.int64))
                else:
                    keep = count * dtype.itemsize
                    try:
                        fh = open(path, "r+b")
                    except FileNotFoundError:
                        raise StalePartial(f"{path}: missing") from None
                    if os.fstat(fh.fileno()).st_size < keep:
                        fh.close()
                        raise StalePartial(f"{path}: shorter than its last mark")
                    fh.truncate(keep)
                    fh.seek(keep)
                self.files[key] = (fh, dtype)
        except BaseException:
            self.close()
            raise

    def append(self, counts: np.ndarray | None = None, ids: np.ndarray | None = None,
               weights: np.ndarray | None = None) -> None:
        """The next parents' child counts (variable fanout only) and the next children's arrays."""
        self.appends += 1
        if counts is not None and len(counts):
            offs = self.children_offsets + np.cumsum(counts, dtype=np.int64)
            _append(self.files["offsets"][0], offs)
            self.parents += len(offs)
            self.children_offsets = int(offs[-1])
        written = None
        for key, arr in (("ids", ids), ("weights", weights)):
            if arr is None or not len(arr):
                continue
            fh, dtype = self.files[key]
            _append(fh, np.ascontiguousarray(arr, dtype=dtype))
            written = len(arr)
        if written:
            self.children += written

    def sync(self) -> None:
        """Hand what was appended to the operating system (it then outlives this process)."""
        for fh, _ in self.files.values():
            fh.flush()

    def state(self) -> dict:
        """The counts a resumed run continues from (``resume``), as of the last :meth:`sync`."""
        return {"parents": self.parents, "appends": self.appends, "children_offsets": self.children_offsets,
                "children": self.children}

    def finish(self, num_parents: int | None = None) -> int:
        """Check that every parent and child was written; return the level's child count."""
        p = int(self.num_parents if num_parents is None else num_parents)
        if not self.fanout:
            if self.parents != p:
                raise RuntimeError(f"level {self.name}: {self.parents} parents written; expected {p}")
            total = self.children_offsets
        else:
            total = p * self.fanout
        if (set(self.files) - {"offsets"}) and self.children != total:
            raise RuntimeError(f"level {self.name}: {self.children} children written; expected {total}")
        self.num_parents, self.total = p, int(total)
        return self.total

    def write(self, f) -> None:
        """Copy the finished level into ``f`` (group ``levels/<name>``) and close its files."""
        self.sync()
        g = f.create_group(f"levels/{self.name}")
        lengths = {"offsets": self.num_parents + 1, "ids": self.total, "weights": self.total}
        for key, (fh, dtype) in self.files.items():
            stored = np.dtype(np.int32 if self.total < 2**31 else np.int64) if key == "offsets" else dtype
            ds = g.create_dataset(key, shape=(lengths[key],), dtype=stored)
            fh.seek(0)
            for i in range(0, lengths[key], COPY_ENTRIES):
                part = np.fromfile(fh, dtype=dtype, count=min(COPY_ENTRIES, lengths[key] - i))
                ds[i:i + len(part)] = part.astype(stored, copy=False)
            # each dataset's cache reaches the file here, where a failed write (a full disk) is an
            # exception the writer sees: flushed only as h5py freed the dataset, the failure left its
            # id half closed (gnnprep.core.h5file)
            ds.flush()
        g.attrs.update(kind=self.kind, parent=self.parent, fanout=self.fanout, num_parents=self.num_parents,
                       num_children=self.total)
        self.close()

    def close(self) -> None:
        for fh, _ in self.files.values():
            fh.close()


def _append(fh, a: np.ndarray) -> None:
    """Write a contiguous array's bytes to ``fh`` (not ``ndarray.tofile``, whose short write is an
    OSError without the errno that names a full disk or the file-size limit)."""
    fh.write(memoryview(a).cast("B"))


class StreamMarks:
    """Where an HDG made block by block has got to, recorded in its
    :class:`gnnprep.core.output.ResumableOutput` (``out``) at most every :data:`MARK_EVERY_S` seconds:
    the selector's place (``at``, e.g. the next node) and its levels' counts (:meth:`LevelStream.state`),
    their files synced first. A rerun of the same selection on the same graph reads them back
    (:meth:`place`, :meth:`level`) and continues from there; the selectors seed every node on its own,
    so the blocks, and where a run stopped, change nothing in the output."""

    def __init__(self, out, every: float | None = None):
        self.out, self.every = out, MARK_EVERY_S if every is None else every
        self.saved = out.state.get("hdg") if out.resumed else None
        self.last = time.monotonic()

    def place(self) -> dict:
        """The selector's place at the last mark ({} for a fresh run)."""
        return dict(self.saved["at"]) if self.saved else {}

    def level(self, name: str) -> dict | None:
        """Level ``name``'s counts at the last mark (None: a fresh level)."""
        return self.saved["levels"].get(name) if self.saved else None

    def block_done(self, at: dict, levels) -> None:
        """A block is appended to ``levels`` (every level made so far) and the selector is at ``at``:
        mark it when the last mark is :data:`MARK_EVERY_S` old."""
        if time.monotonic() - self.last < self.every:
            return
        for lv in levels:
            lv.sync()
        self.out.state["hdg"] = {"at": at, "levels": {lv.name: lv.state() for lv in levels}}
        self.out.mark((len(self.out.done),))
        self.last = time.monotonic()


MAX_DEPTH = 16  # levels below the root that a reader follows (the selectors make at most 2)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _dataset(g, path, name: str, kinds: str) -> np.ndarray | None:
    """``g[name]`` as a 1-D array of dtype kind in ``kinds`` (None when absent)."""
    if name not in g:
        return None
    ds = g[name]
    if not hasattr(ds, "dtype") or ds.ndim != 1 or ds.dtype.kind not in kinds:
        raise GnnprepError(f"{path}: {ds.name} is {getattr(ds, 'dtype', 'a group')} of shape {getattr(ds, 'shape', '')}; "
                           f"expected a 1-D {'integer' if kinds == 'iu' else 'float'} array")
    return ds[:]


def _schema_node(node, path, depth: int) -> tuple[str, str, int]:
    """(name, kind, fanout) of one schema node, checked."""
    where = f"{path}: schema"
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        raise GnnprepError(f"{where} has a level that is not an object or nests deeper than {MAX_DEPTH}; the HDG is corrupt")
    name, kind, fanout = node.get("level"), node.get("kind"), node.get("fanout") or 0
    if not isinstance(name, str) or not _NAME.fullmatch(name) or kind not in ("instances", "vertices") \
            or not isinstance(fanout, int) or fanout < 0:
        raise GnnprepError(f"{where} level {name!r}: kind {kind!r}, fanout {fanout!r}; expected a name, kind "
                           "instances or vertices and a fanout ≥ 0")
    if kind == "instances":
        children, combine, slots = node.get("children"), node.get("combine"), node.get("slots") or []
        if not isinstance(children, list) or len(children) != 1 or combine not in ("slots", "reduce") \
                or (combine == "slots" and (not fanout or not isinstance(slots, list) or len(slots) != fanout
                                            or not all(isinstance(x, str) and _NAME.fullmatch(x) for x in slots))):
            raise GnnprepError(f"{where} level {name!r}: expected one child level, combine slots (with one slot name "
                               "per fanout) or reduce")
    return name, kind, int(fanout)


def _offsets(g, path, name: str, num_parents: int, fanout: int) -> np.ndarray | None:
    """The level's CSC offsets, checked: P+1 entries from 0, non-decreasing (None with a fixed fanout)."""
    from gnnprep.graph.store import check_indptr

    if fanout:
        return None
    offsets = _dataset(g, path, "offsets", "iu")
    if offsets is None:
        raise GnnprepError(f"{path}: /levels/{name} has no offsets and no fixed fanout")
    offsets = offsets.astype(np.int64)
    end = int(offsets[-1]) if len(offsets) else 0
    check_indptr(offsets, num_parents, end, f"{path}: /levels/{name}/offsets")
    return offsets


def _load_level(f, path, node, num_parents: int, n: int, depth: int = 1) -> Level:
    """One level and the levels below it, every array checked against the counts it implies, so
    that aggregation never indexes out of bounds: ids in [0, n), offsets from 0, non-decreasing and
    ending at the child count, weights finite and one per id."""
    from gnnprep.graph.store import check_ids

    name, kind, fanout = _schema_node(node, path, depth)
    g = f.get(f"levels/{name}")
    if g is None or hasattr(g, "dtype"):
        raise GnnprepError(f"{path}: missing group /levels/{name}; the HDG is incomplete")
    offsets = _offsets(g, path, name, num_parents, fanout)
    num_children = num_parents * fanout if fanout else int(offsets[-1])
    ids = weights = child = None
    if kind == "vertices":
        ids = _dataset(g, path, "ids", "iu")
        if ids is None or len(ids) != num_children:
            raise GnnprepError(f"{path}: /levels/{name}/ids has {None if ids is None else len(ids)} entries; "
                               f"expected {num_children} (one per child)")
        ids = ids.astype(np.int64)
        check_ids(ids, n, f"{path}: /levels/{name}/ids")
        weights = _dataset(g, path, "weights", "f")
        if weights is not None and (len(weights) != num_children or not np.isfinite(weights).all()):
            raise GnnprepError(f"{path}: /levels/{name}/weights has {len(weights)} entries or non-finite values; "
                               f"expected {num_children} finite weights")
    else:
        child = _load_level(f, path, node["children"][0], num_children, n, depth + 1)
    return Level(name, kind, num_parents, fanout, offsets, ids, weights, node.get("combine"),
                 tuple(node.get("slots") or ()), child)


def read_hdg(path) -> tuple[Hdg, dict]:
    """The HDG in ``path`` and its root attributes, every level checked (:func:`_load_level`); the
    ``channels`` attribute must be the schema's channels."""
    with open_artifact(path, expect=FORMAT) as f:
        n = f.attrs.get("num_nodes")
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise GnnprepError(f"{path}: root attribute 'num_nodes' is {n!r}; expected a count")
        schema = json_attr(f.attrs, "schema", path, dict)
        roots = schema.get("children")
        if not isinstance(roots, list) or not roots:
            raise GnnprepError(f"{path}: schema has no levels below the root; the HDG is corrupt")
        h = Hdg(int(n), tuple(_load_level(f, path, c, int(n), int(n)) for c in roots))
        channels = json_attr(f.attrs, "channels", path, list)
        if channels != h.channels() or len(set(channels)) != len(channels):
            raise GnnprepError(f"{path}: root attribute 'channels' is {channels}; expected the schema's channels "
                               f"{h.channels()}, each once")
        attrs = plain_attrs(f.attrs)
    return h, attrs


class HdgFile(Artifact):
    """An HDG artifact opened for reading (:func:`gnnprep.open`): root attributes as ``attrs``, what
    ``gnnprep info`` shows as ``info``, the structure itself by :meth:`load`."""

    FORMAT = FORMAT

    @property
    def attrs(self) -> dict:
        return plain_attrs(self.f.attrs)

    @property
    def channels(self) -> list[str]:
        return json_attr(self.f.attrs, "channels", self.path, list)

    def load(self) -> Hdg:
        """The whole HDG (every level's members and offsets), validated."""
        return read_hdg(self.path)[0]


# -- the description for ``gnnprep info`` ---------------------------------------------------------------
def level_rows(f, path, schema: dict) -> list[dict]:
    """Each level of the schema tree (top-down order) with its counts and bytes."""
    levels, stack = [], list(reversed(schema.get("children") or []))
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or not isinstance(node.get("level"), str) \
                or not isinstance(node.get("children", []), list):
            raise GnnprepError(f"{path}: schema has a level that is not an object with a name; the HDG is corrupt")
        stack += list(reversed(node.get("children", [])))
        name = node["level"]
        g = f.get(f"levels/{name}")
        if g is None or hasattr(g, "dtype"):
            raise GnnprepError(f"{path}: missing group /levels/{name}; the HDG is incomplete")
        levels.append({"level": name, "kind": attr_value(g.attrs.get("kind")), "parent": attr_value(g.attrs.get("parent")),
                       "fanout": count_attr(g.attrs, "fanout", path, 0) or None,
                       "parents": count_attr(g.attrs, "num_parents", path, 0),
                       "instances": count_attr(g.attrs, "num_children", path, 0),
                       "bytes": int(sum(ds.nbytes for ds in g.values() if hasattr(ds, "dtype"))),
                       "arrays": sorted(g.keys())})
    return levels


def describe(path: Path) -> dict:
    """Levels of an HDG (instances and bytes per level) and its size relative to the graph store."""
    with open_artifact(path, expect="gnnprep.hdg") as f:
        a = {k: attr_value(v) for k, v in f.attrs.items()}
        prov = json_attr(f.attrs, "provenance", path, dict, {}, "attribute")
        a.pop("provenance", None)
        a["schema"] = json_attr(f.attrs, "schema", path, dict, {}, "attribute")
        a["channels"] = [str(c) for c in json_attr(f.attrs, "channels", path, list, [], "attribute")]
        for k in ("graph_store_bytes", "graph_adj_bytes"):
            a[k] = count_attr(f.attrs, k, path, 0)
        levels = level_rows(f, path, a["schema"])
        timings = prov.get("timings") if isinstance(prov.get("timings"), dict) else {}
        out = {"file": str(path), **a, "levels": levels, "select_seconds": timings.get("select_seconds"),
               "size_bytes": path.stat().st_size}
    out["hdg_bytes"] = int(sum(lv["bytes"] for lv in levels))
    out["size_vs_graph_store"] = round(out["hdg_bytes"] / max(1, out["graph_store_bytes"]), 4)
    out["size_vs_graph_adj"] = round(out["hdg_bytes"] / max(1, out["graph_adj_bytes"]), 4)
    return out


register_format(FORMAT, reader=HdgFile, describer=describe)
