"""The features artifact (``format = "gnnprep.features"``): hop features S^k X for chosen rows.

Layout: ``/rows`` [r] sorted node ids; ``/hops/0..K`` [r, d] (float32 or float16) for the first
operator; ``/channels/<op>/<k>`` for every operator (hard links: no copies; hop 0 is X for all);
``/labels`` [r]; ``/splits/{train,valid,test}`` node ids as in the graph store. Root attributes:
``hops``, ``operator``, ``operators`` (JSON), ``plan`` (JSON), ``graph_fingerprint``, ``num_classes``,
``rows`` (``all`` or ``labeled``), ``provenance``.
"""

from __future__ import annotations

import json
import h5py
import numpy as np

from gnnprep.meta import Artifact

FORMAT = "gnnprep.features"
FORMAT_VERSION = 1


def create_early(group: h5py.Group, name: str, shape: tuple, dtype, chunks: tuple | None) -> h5py.Dataset:
    """A dataset whose storage is allocated now, so later writes never change file metadata."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    if chunks is not None and all(shape):
        dcpl.set_chunk(tuple(int(c) for c in chunks))
    space = h5py.h5s.create_simple(tuple(int(s) for s in shape))
    tid = h5py.h5t.py_create(np.dtype(dtype))
    dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    return h5py.Dataset(dsid)


class FeatureStore(Artifact):
    """Read access to a features artifact; hop datasets are read lazily (row blocks)."""

    FORMAT = FORMAT

    @property
    def hops(self) -> int:
        return int(self.f.attrs["hops"])

    @property
    def rows(self) -> np.ndarray:
        return self.f["rows"][:].astype(np.int64)

    def hop(self, k: int, operator: str | None = None) -> h5py.Dataset:
        if operator is None:
            return self.f[f"hops/{k}"]
        return self.f[f"channels/{operator}/{k}"]

    def operators(self) -> list[str]:
        return json.loads(self.f.attrs["operators"])

    def plan(self) -> dict:
        return json.loads(self.f.attrs["plan"])
