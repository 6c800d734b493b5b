"""``gnnprep info``: describe any gnnprep artifact as a flat dict (rendered by the CLI).

Every attribute and dataset shown is checked for the type the rendering needs, so an odd or
corrupt artifact gives one ``GnnprepError`` naming the field (never a traceback); array contents
are read only where a figure needs them (the graph store's degree pass, which checks ``indptr``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gnnprep.errors import GnnprepError
from gnnprep.meta import json_attr, open_artifact
from gnnprep.sources.base import SPLIT_NAMES
from gnnprep.store import GraphStore, check_ids


def _attr(v):
    """An attribute value as plain JSON-able Python (anything else as its text)."""
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.generic):
        v = v.item()
    elif isinstance(v, np.ndarray):
        v = v.tolist()
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return str(v)
    return v


def _count(attrs, name: str, path, default=None) -> int | None:
    """A non-negative integer attribute (``default`` when absent), or a one-line error."""
    v = _attr(attrs.get(name, default))
    if v is default:
        return v
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise GnnprepError(f"{path}: attribute {name!r} is {v!r}; expected a count")
    return v


def _dataset(f, name: str, path, ndim: int | None = None):
    """``f[name]`` when it is a dataset (of ``ndim`` dimensions), else None (absent) or an error."""
    if name not in f:
        return None
    ds = f[name]
    if not hasattr(ds, "dtype") or (ndim is not None and ds.ndim != ndim):
        want = f"a {ndim}-D dataset" if ndim else "a dataset"
        raise GnnprepError(f"{path}: /{name} has shape {getattr(ds, 'shape', None)}; expected {want} (the file is corrupt)")
    return ds


def _splits(f, path) -> dict[str, int]:
    g = f.get("splits")
    if g is None:
        return {}
    if hasattr(g, "dtype"):
        raise GnnprepError(f"{path}: /splits is a dataset; expected a group of node id arrays")
    return {k: int(len(_dataset(f, f"splits/{k}", path, 1))) for k in SPLIT_NAMES if k in g}


def describe(path: str | Path) -> dict:
    path = Path(path)
    with open_artifact(path) as f:
        fmt = _attr(f.attrs["format"])
    if fmt == "gnnprep.graph":
        return describe_graph(path)
    if fmt == "gnnprep.features":
        return describe_features(path)
    if fmt == "gnnprep.hag":
        return describe_hag(path)
    if fmt == "gnnprep.hdg":
        return describe_hdg(path)
    with open_artifact(path) as f:  # later stages extend this with their own describers
        return {"file": str(path), "format": fmt, "format_version": _attr(f.attrs.get("format_version")),
                "size_bytes": path.stat().st_size}


def _degrees(g: GraphStore, block: int) -> tuple[int, int, int]:
    """(min, max, isolated) of the in-degrees, read in blocks of ``indptr`` and checked as a CSR
    pointer on the way (from 0, non-decreasing, ending at the stored edges)."""
    n, m, ip = g.num_nodes, g.num_edges, g.f["adj/indptr"]
    dmin, dmax, isolated = None, 0, 0
    for s in range(0, n, block):
        p = ip[s:min(n, s + block) + 1].astype(np.int64)
        deg = np.diff(p)
        if (s == 0 and p[0] != 0) or (len(deg) and deg.min() < 0) or (s + block >= n and p[-1] != m):
            raise GnnprepError(f"{g.path}: /adj/indptr is not a CSR pointer from 0 to {m} without decreasing "
                               f"(rows {s}..{min(n, s + block)}; the file is corrupt)")
        if len(deg):
            dmin = int(deg.min()) if dmin is None else min(dmin, int(deg.min()))
            dmax = max(dmax, int(deg.max()))
            isolated += int((deg == 0).sum())
    return dmin or 0, dmax, isolated


def _types(g: GraphStore, path) -> tuple[list[str] | None, dict | None]:
    names = json_attr(g.attrs, "node_types", path, list, None, "attribute")
    if names is None or "nodes/type" not in g.f:
        return names, None
    t = _dataset(g.f, "nodes/type", path, 1)
    if t.dtype.kind not in "iu":
        raise GnnprepError(f"{path}: /nodes/type is {t.dtype}; expected integer type codes")
    t = t[:].astype(np.int64)
    check_ids(t, len(names), f"{path}: /nodes/type")
    return names, dict(zip(map(str, names), np.bincount(t, minlength=len(names)).tolist()))


def describe_graph(path: Path, block: int = 1 << 22) -> dict:
    with GraphStore(path) as g:
        n = g.num_nodes
        dmin, dmax, isolated = _degrees(g, block)
        feats = _dataset(g.f, "nodes/features", path, 2)
        labels = _dataset(g.f, "nodes/labels", path)
        node_types, per_type = _types(g, path)
        out = {
            "file": str(path),
            "format": "gnnprep.graph",
            "format_version": int(g.attrs["format_version"]),
            "source": _attr(g.attrs.get("source", "")),
            "num_nodes": n,
            "num_edges": g.num_edges,
            "symmetric": g.symmetric,
            "weighted": "adj/weights" in g.f,
            "undirected_edges": g.num_edges // 2 if g.symmetric else None,
            "num_features": int(feats.shape[1]) if feats is not None else 0,
            "feature_dtype": str(feats.dtype) if feats is not None else None,
            "num_classes": _count(g.attrs, "num_classes", path, 0),
            "labeled_nodes": _count(g.attrs, "num_labeled", path, 0) if labels is not None else 0,
            "splits": _splits(g.f, path),
            "degree": {"min": dmin, "mean": round(g.num_edges / n, 4) if n else 0.0, "max": dmax},
            "isolated_nodes": isolated,
            "index_dtype": str(g.f["adj/indices"].dtype),
            "node_types": node_types,
            "size_bytes": path.stat().st_size,
            "fingerprint": str(_attr(g.attrs.get("fingerprint", ""))),
            "created_utc": _attr(g.attrs.get("created_utc")),
            "gnnprep_version": _attr(g.attrs.get("gnnprep_version")),
        }
        if per_type is not None:
            out["nodes_per_type"] = per_type
        order = g.f.get("order/community")
        out["node_order"] = None if order is None else {
            "kind": "community", **{k: float(order.attrs[k]) for k in ("near_share_before", "near_share_after",
                                                                      "seconds", "cpu_seconds") if k in order.attrs}}
        return out


def to_json(d: dict) -> str:
    return json.dumps(d, sort_keys=False)


def _plan(f, path) -> dict:
    plan = json_attr(f.attrs, "plan", path, dict, {}, "attribute")
    return {k: plan.get(k, "?") for k in ("a", "b", "c", "device")} | plan


def describe_features(path: Path) -> dict:
    from gnnprep.features import FeatureStore, check_shards

    with FeatureStore(path) as fs:
        f = fs.f
        h0 = _dataset(f, "hops/0", path, 2)
        if h0 is None:
            raise GnnprepError(f"{path}: has no /hops/0; the features artifact is incomplete")
        prov = json_attr(f.attrs, "provenance", path, dict, {}, "attribute")
        seconds = prov.get("timings", {}).get("hop_seconds") if isinstance(prov.get("timings"), dict) else None
        order = prov.get("reorder")
        shards = check_shards(f, path)  # a sharded artifact (torchrun): every shard present, or one error
        operators = json_attr(f.attrs, "operators", path, list, [str(_attr(f.attrs.get("operator", "sym")))], "attribute")
        return {
            "file": str(path),
            "format": "gnnprep.features",
            "format_version": int(f.attrs["format_version"]),
            "hops": _count(f.attrs, "hops", path),
            "operators": [str(o) for o in operators],
            "rows": int(h0.shape[0]),
            "row_selection": _attr(f.attrs.get("rows")),
            "num_features": int(h0.shape[1]),
            "dtype": str(h0.dtype),
            "num_classes": _count(f.attrs, "num_classes", path, 0),
            "splits": _splits(f, path),
            "plan": _plan(f, path),
            "hop_seconds": seconds if isinstance(seconds, list) and all(
                isinstance(s, (int, float)) for s in seconds) else None,
            "node_order": order if isinstance(order, dict) and {"kind", "used"} <= set(order) else None,
            "graph_fingerprint": _attr(f.attrs.get("graph_fingerprint")),
            "size_bytes": path.stat().st_size,
            "created_utc": _attr(f.attrs.get("created_utc")),
            "shards": shards,
            "shards_bytes": sum(s["bytes_on_disk"] for s in shards) if shards is not None else None,
            "operator_sources": json_attr(f.attrs, "operator_sources", path, dict, {}, "attribute"),
        }


HAG_COUNTS = ("num_nodes", "num_agg", "capacity", "aggregations_graph", "aggregations_hag", "transfers_graph",
              "transfers_hag")


def describe_hag(path: Path) -> dict:
    with open_artifact(path, expect="gnnprep.hag") as f:
        a = {k: _attr(v) for k, v in f.attrs.items()}
        prov = json_attr(f.attrs, "provenance", path, dict, {}, "attribute")
        a.pop("provenance", None)
        a.update({k: _count(f.attrs, k, path) for k in HAG_COUNTS})
        missing = [k for k in HAG_COUNTS if a[k] is None]
        if missing:
            raise GnnprepError(f"{path}: root attribute {missing[0]!r} is missing; the HAG is incomplete")
        level_ptr = _dataset(f, "agg/level_ptr", path, 1)
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


def _hdg_levels(f, path, schema: dict) -> list[dict]:
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
        levels.append({"level": name, "kind": _attr(g.attrs.get("kind")), "parent": _attr(g.attrs.get("parent")),
                       "fanout": _count(g.attrs, "fanout", path, 0) or None,
                       "parents": _count(g.attrs, "num_parents", path, 0),
                       "instances": _count(g.attrs, "num_children", path, 0),
                       "bytes": int(sum(ds.nbytes for ds in g.values() if hasattr(ds, "dtype"))),
                       "arrays": sorted(g.keys())})
    return levels


def describe_hdg(path: Path) -> dict:
    """Levels of an HDG (instances and bytes per level) and its size relative to the graph store."""
    with open_artifact(path, expect="gnnprep.hdg") as f:
        a = {k: _attr(v) for k, v in f.attrs.items()}
        prov = json_attr(f.attrs, "provenance", path, dict, {}, "attribute")
        a.pop("provenance", None)
        a["schema"] = json_attr(f.attrs, "schema", path, dict, {}, "attribute")
        a["channels"] = [str(c) for c in json_attr(f.attrs, "channels", path, list, [], "attribute")]
        for k in ("graph_store_bytes", "graph_adj_bytes"):
            a[k] = _count(f.attrs, k, path, 0)
        levels = _hdg_levels(f, path, a["schema"])
        timings = prov.get("timings") if isinstance(prov.get("timings"), dict) else {}
        out = {"file": str(path), **a, "levels": levels, "select_seconds": timings.get("select_seconds"),
               "size_bytes": path.stat().st_size}
    out["hdg_bytes"] = int(sum(lv["bytes"] for lv in levels))
    out["size_vs_graph_store"] = round(out["hdg_bytes"] / max(1, out["graph_store_bytes"]), 4)
    out["size_vs_graph_adj"] = round(out["hdg_bytes"] / max(1, out["graph_adj_bytes"]), 4)
    return out
