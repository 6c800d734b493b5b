"""``gnnprep info``: describe any gnnprep artifact as a flat dict (rendered by the CLI); also the
caches runs keep beside artifacts, a training run's ``model.pt`` and ``checkpoint.pt``, and a tune folder.

A dispatcher on the root attribute ``format``: each artifact's reader and description live beside its
format, which registers them (:func:`gnnprep.core.artifact.register_format`) where it is defined:
:mod:`gnnprep.graph.store`, :mod:`gnnprep.hag.file`, :mod:`gnnprep.hdg.file`,
:mod:`gnnprep.precompute.features`, and :mod:`gnnprep.train.loader` (whose ``Features`` extends the
features reader). This module imports them so every format is registered, and looks the format up.
Every attribute and dataset shown is checked for the type the rendering needs, so an odd or corrupt
artifact gives one ``GnnprepError`` naming the field (never a traceback); array contents are read only
where a figure needs them (the graph store's degree pass, which checks ``indptr``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# imported for their registrations: each registers its format's reader and describer (train.loader's
# Features replaces precompute.features' FeatureStore as the features reader)
import gnnprep.graph.store
import gnnprep.hag.file
import gnnprep.hdg.file
import gnnprep.precompute.features
import gnnprep.train.loader  # noqa: F401 - imported for its registration (the names above bind `gnnprep` too)
from gnnprep.core.artifact import (
    attr_value,
    describer_of,
    is_torch_file,
    open_artifact,
    reader_of,
    registered_readers,
    root_format,
)
from gnnprep.core.errors import GnnprepError
from gnnprep.core.output import json_safe

# the caches runs keep beside artifacts (their format: each owner's FORMAT constant, tests/test_info_caches.py)
ORDERED_COPY = "gnnprep.ordered-csr"   # gnnprep.precompute.ordered: <store>.ordered-<kind>.h5
HAG_COPY = "gnnprep.hag-ordered"       # gnnprep.hag.ordered_copy: <hag>.order-<kind>.h5


# what gnnprep info describes, as its errors name it
ACCEPTED = ("a gnnprep artifact (graph store, features, HAG, HDG), a cache kept beside one, a training run's "
            "folder, model.pt or checkpoint.pt, or a tune folder (holding tune.json)")


def _cache_describer(fmt: str | None):
    """The describer of a cache format, imported only for such a file (the ordered copy's module loads
    the compiler); None for any other format."""
    if fmt == ORDERED_COPY:
        from gnnprep.precompute.ordered import describe_copy

        return describe_copy
    if fmt == HAG_COPY:
        from gnnprep.hag.ordered_copy import describe as describe_hag_copy

        return describe_hag_copy
    return None


def describe(path: str | Path) -> dict:
    """The description of the artifact at ``path`` by the module that owns its format (a format
    this gnnprep has no describer for: its name, version and size); of a cache a run keeps beside
    an artifact, what it is, what it was made from and whether it is current; of a run folder's
    ``model.pt`` or ``checkpoint.pt`` (torch files, not HDF5), what it holds (given the run folder
    itself: its model, else its checkpoint); of a tune folder (``tune.json``), the tune's grid, its
    progress and its best point (:func:`gnnprep.train.tune.folder.describe`). Any other folder is one
    GnnprepError listing what is described."""
    path = Path(path)
    if path.suffix == ".npz" and ".order-" in path.name:   # a node order kept beside a store (not HDF5)
        from gnnprep.graph.order import describe_cached

        return describe_cached(path)
    if path.is_dir():   # a run folder: its model, or while it trains (or was interrupted) its checkpoint
        run_files = [path / name for name in ("model.pt", "checkpoint.pt") if os.path.lexists(path / name)]
        run_file = next((p for p in run_files if is_torch_file(p)), None)
        if run_file is None and os.path.lexists(path / "tune.json"):   # a tune folder (gnnprep tune -o)
            from gnnprep.train.tune.folder import describe as describe_tune

            return describe_tune(path)
        if run_file is None and not run_files:
            raise GnnprepError(f"{path}: is a folder without model.pt, checkpoint.pt or tune.json; expected {ACCEPTED}")
        path = run_file or run_files[0]   # (a run file that is not one: named in the error below)
    if is_torch_file(path):   # gnnprep train's model.pt or checkpoint.pt (torch imported only for one)
        from gnnprep.train.run_folder import describe_run_file

        return describe_run_file(path)
    cache = _cache_describer(root_format(path))
    if cache is not None:
        return cache(path)
    with open_artifact(path) as f:
        fmt = attr_value(f.attrs["format"])
        describer = describer_of(fmt)
        if describer is None:
            return {"file": str(path), "format": fmt, "format_version": attr_value(f.attrs.get("format_version")),
                    "size_bytes": path.stat().st_size}
    return describer(path)


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
    reader = reader_of(fmt)
    if reader is None:
        raise GnnprepError(f"{path}: format {fmt!r} has no reader in this gnnprep; expected one of "
                           f"{', '.join(registered_readers())}")
    return reader(path)


def to_json(d: dict) -> str:
    return json.dumps(json_safe(d), sort_keys=False)
