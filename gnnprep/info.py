"""``gnnprep info``: describe any gnnprep artifact as a flat dict (rendered by the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gnnprep.meta import open_artifact
from gnnprep.sources.base import SPLIT_NAMES
from gnnprep.store import GraphStore


def _attr(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


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


def describe_graph(path: Path, block: int = 1 << 22) -> dict:
    with GraphStore(path) as g:
        n = g.num_nodes
        ip = g.f["adj/indptr"]
        dmin, dmax, isolated = None, 0, 0
        for s in range(0, n, block):
            p = ip[s:min(n, s + block) + 1].astype(np.int64)
            deg = np.diff(p)
            if len(deg):
                dmin = int(deg.min()) if dmin is None else min(dmin, int(deg.min()))
                dmax = max(dmax, int(deg.max()))
                isolated += int((deg == 0).sum())
        feats = g.features
        labels = g.f["nodes/labels"] if "nodes/labels" in g.f else None
        out = {
            "file": str(path),
            "format": "gnnprep.graph",
            "format_version": int(g.attrs["format_version"]),
            "source": _attr(g.attrs.get("source", "")),
            "num_nodes": n,
            "num_edges": g.num_edges,
            "symmetric": g.symmetric,
            "undirected_edges": g.num_edges // 2 if g.symmetric else None,
            "num_features": int(feats.shape[1]) if feats is not None else 0,
            "feature_dtype": str(feats.dtype) if feats is not None else None,
            "num_classes": int(g.attrs.get("num_classes", 0)),
            "labeled_nodes": int(g.attrs.get("num_labeled", 0)) if labels is not None else 0,
            "splits": {k: int(len(g.f["splits"][k])) for k in SPLIT_NAMES if "splits" in g.f and k in g.f["splits"]},
            "degree": {"min": dmin or 0, "mean": round(g.num_edges / n, 4) if n else 0.0, "max": dmax},
            "isolated_nodes": isolated,
            "index_dtype": str(g.f["adj/indices"].dtype),
            "node_types": g.node_types(),
            "size_bytes": path.stat().st_size,
            "fingerprint": g.fingerprint,
            "created_utc": _attr(g.attrs.get("created_utc")),
            "gnnprep_version": _attr(g.attrs.get("gnnprep_version")),
        }
        if out["node_types"] is not None and "nodes/type" in g.f:
            t = g.f["nodes/type"][:]
            out["nodes_per_type"] = dict(zip(out["node_types"], np.bincount(t, minlength=len(out["node_types"])).tolist()))
        return out


def to_json(d: dict) -> str:
    return json.dumps(d, sort_keys=False)


def describe_features(path: Path) -> dict:
    from gnnprep.features import FeatureStore

    with FeatureStore(path) as fs:
        f = fs.f
        h0 = f["hops/0"]
        prov = json.loads(f.attrs["provenance"])
        return {
            "file": str(path),
            "format": "gnnprep.features",
            "format_version": int(f.attrs["format_version"]),
            "hops": fs.hops,
            "operators": fs.operators(),
            "rows": int(h0.shape[0]),
            "row_selection": _attr(f.attrs.get("rows")),
            "num_features": int(h0.shape[1]),
            "dtype": str(h0.dtype),
            "num_classes": int(f.attrs.get("num_classes", 0)),
            "splits": {k: int(len(f["splits"][k])) for k in SPLIT_NAMES if "splits" in f and k in f["splits"]},
            "plan": fs.plan(),
            "hop_seconds": prov.get("timings", {}).get("hop_seconds"),
            "node_order": prov.get("reorder"),
            "graph_fingerprint": _attr(f.attrs.get("graph_fingerprint")),
            "size_bytes": path.stat().st_size,
            "created_utc": _attr(f.attrs.get("created_utc")),
        }


def describe_hag(path: Path) -> dict:
    from gnnprep.meta import open_artifact

    with open_artifact(path, expect="gnnprep.hag") as f:
        a = {k: _attr(v) for k, v in f.attrs.items()}
        prov = json.loads(a.pop("provenance", "{}"))
        out = {"file": str(path), **a, "levels": int(len(f["agg/level_ptr"]) - 1),
               "search_seconds": prov.get("timings", {}).get("search_seconds"), "peak_bytes": prov.get("peak_bytes"),
               "size_bytes": path.stat().st_size}
    out["aggregation_ratio"] = round(out["aggregations_graph"] / max(1, out["aggregations_hag"]), 4)
    out["transfer_ratio"] = round(out["transfers_graph"] / max(1, out["transfers_hag"]), 4)
    return out


def describe_hdg(path: Path) -> dict:
    """Levels of an HDG (instances and bytes per level) and its size relative to the graph store."""
    with open_artifact(path, expect="gnnprep.hdg") as f:
        a = {k: _attr(v) for k, v in f.attrs.items()}
        prov = json.loads(a.pop("provenance", "{}"))
        a["schema"] = json.loads(a.get("schema", "{}"))
        a["channels"] = json.loads(a.get("channels", "[]"))
        order, stack = [], list(reversed(a["schema"].get("children", [])))
        while stack:  # schema (top-down) order
            node = stack.pop()
            order.append(node["level"])
            stack += list(reversed(node.get("children", [])))
        levels = []
        for name in order:
            g = f[f"levels/{name}"]
            levels.append({"level": name, "kind": _attr(g.attrs.get("kind")), "parent": _attr(g.attrs.get("parent")),
                           "fanout": _attr(g.attrs.get("fanout")) or None,
                           "parents": _attr(g.attrs.get("num_parents")), "instances": _attr(g.attrs.get("num_children")),
                           "bytes": int(sum(ds.nbytes for ds in g.values())), "arrays": sorted(g.keys())})
        out = {"file": str(path), **a, "levels": levels,
               "select_seconds": prov.get("timings", {}).get("select_seconds"),
               "size_bytes": path.stat().st_size}
    out["hdg_bytes"] = int(sum(lv["bytes"] for lv in levels))
    out["size_vs_graph_store"] = round(out["hdg_bytes"] / max(1, int(out.get("graph_store_bytes") or 0)), 4)
    out["size_vs_graph_adj"] = round(out["hdg_bytes"] / max(1, int(out.get("graph_adj_bytes") or 0)), 4)
    return out
