"""``gnnprep info``: describe any gnnprep artifact as a flat dict (rendered by the CLI).

A dispatcher on the root attribute ``format``: each artifact's description lives beside its format
(:func:`gnnprep.graph.store.describe`, :func:`gnnprep.hag.file.describe`,
:func:`gnnprep.hdg.file.describe`, :func:`gnnprep.precompute.features.describe`). Every attribute
and dataset shown is checked for the type the rendering needs, so an odd or corrupt artifact gives
one ``GnnprepError`` naming the field (never a traceback); array contents are read only where a
figure needs them (the graph store's degree pass, which checks ``indptr``).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from gnnprep.core.artifact import attr_value, open_artifact

DESCRIBERS = {"gnnprep.graph": "gnnprep.graph.store", "gnnprep.hag": "gnnprep.hag.file",
              "gnnprep.hdg": "gnnprep.hdg.file", "gnnprep.features": "gnnprep.precompute.features"}


def describe(path: str | Path) -> dict:
    """The description of the artifact at ``path`` by the module that owns its format (a format
    this gnnprep has no describer for: its name, version and size)."""
    path = Path(path)
    with open_artifact(path) as f:
        fmt = attr_value(f.attrs["format"])
        if fmt not in DESCRIBERS:
            return {"file": str(path), "format": fmt, "format_version": attr_value(f.attrs.get("format_version")),
                    "size_bytes": path.stat().st_size}
    return importlib.import_module(DESCRIBERS[fmt]).describe(path)


def to_json(d: dict) -> str:
    return json.dumps(d, sort_keys=False)
