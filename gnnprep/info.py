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


# the reader each format opens as (gnnprep.open): features as the train stage's subclass, which adds
# torch batches (torch itself is imported only when a loader is made)
READERS = {"gnnprep.graph": ("gnnprep.graph.store", "GraphStore"), "gnnprep.hag": ("gnnprep.hag.file", "HagFile"),
           "gnnprep.hdg": ("gnnprep.hdg.file", "HdgFile"), "gnnprep.features": ("gnnprep.train.loader", "Features")}


def open(path: str | Path):  # gnnprep.open, as h5py.File and anndata.read_h5ad open theirs
    """The typed reader of the gnnprep artifact at ``path``, by its ``format`` attribute:
    :class:`~gnnprep.graph.store.GraphStore` (graph.h5), :class:`~gnnprep.train.loader.Features`
    (feats.h5: ``read``, ``labels_of``, ``splits``, ``loader``), :class:`~gnnprep.hag.file.HagFile`,
    :class:`~gnnprep.hdg.file.HdgFile`. Each has ``info`` (what ``gnnprep info`` shows, as a dict),
    reads lazily, refuses files that point outside themselves, and closes with ``close()`` or as a
    context manager. A GnnprepError names the file when it is not a gnnprep artifact."""
    path = Path(path)
    with open_artifact(path) as f:
        fmt = attr_value(f.attrs["format"])
    if fmt not in READERS:
        from gnnprep.core.errors import GnnprepError

        raise GnnprepError(f"{path}: format {fmt!r} has no reader in this gnnprep; expected one of {', '.join(READERS)}")
    module, name = READERS[fmt]
    return getattr(importlib.import_module(module), name)(path)


def to_json(d: dict) -> str:
    return json.dumps(d, sort_keys=False)
