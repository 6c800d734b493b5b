"""The HDF5 graph store (``format = "gnnprep.graph"``): layout constants and a reader.

Layout (see README, "Artifacts"): ``/adj/indptr`` [n+1], ``/adj/indices`` [m] (row v lists the
sources v aggregates from, sorted, no duplicates, no self-loops), ``/nodes/features`` [n, d],
``/nodes/labels`` [n] (-1 = unknown), ``/splits/{train,valid,test}``, optional ``/nodes/type``.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from gnnprep.errors import GnnprepError
from gnnprep.meta import Artifact

FORMAT = "gnnprep.graph"
FORMAT_VERSION = 1
FEATURE_CHUNK_BYTES = 1 << 20


def feature_chunk_rows(num_features: int, itemsize: int) -> int:
    """Rows per HDF5 chunk so that one chunk is about 1 MiB."""
    return max(1, FEATURE_CHUNK_BYTES // max(1, num_features * itemsize))


class GraphStore(Artifact):
    """Read access to a graph store. Arrays are read lazily, in row blocks where they scale."""

    FORMAT = FORMAT

    def __init__(self, path: str | Path):
        super().__init__(path)
        version = int(self.f.attrs.get("format_version", 0))
        if version > FORMAT_VERSION:
            self.f.close()
            raise GnnprepError(f"{self.path}: graph store format_version {version} is newer than this gnnprep "
                               f"reads ({FORMAT_VERSION}); upgrade gnnprep")
        for name in ("adj/indptr", "adj/indices"):
            if name not in self.f:
                self.f.close()
                raise GnnprepError(f"{self.path}: missing dataset /{name}; the graph store is incomplete")

    @property
    def attrs(self) -> h5py.AttributeManager:
        return self.f.attrs

    @property
    def num_nodes(self) -> int:
        return int(self.f.attrs["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.f.attrs["num_edges"])

    @property
    def symmetric(self) -> bool:
        return bool(self.f["adj"].attrs.get("symmetric", False))

    @property
    def fingerprint(self) -> str:
        return str(self.f.attrs.get("fingerprint", ""))

    def indptr(self) -> np.ndarray:
        return self.f["adj/indptr"][:].astype(np.int64, copy=False)

    def indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self.f["adj/indices"][start:stop].astype(np.int64, copy=False)

    def csr(self):
        """The whole adjacency as scipy CSR (for graphs that fit in memory; tests and small runs)."""
        import scipy.sparse as sp

        n = self.num_nodes
        data = np.ones(self.num_edges, dtype=np.float32)
        return sp.csr_matrix((data, self.f["adj/indices"][:], self.indptr()), shape=(n, n))

    @property
    def features(self) -> h5py.Dataset | None:
        return self.f["nodes/features"] if "nodes/features" in self.f else None

    def feature_columns(self, c0: int, c1: int) -> np.ndarray:
        """X[:, c0:c1] as float32, read in small row steps (no large temporaries) and checked finite."""
        feats, n = self.features, self.num_nodes
        xb = np.empty((n, c1 - c0), dtype=np.float32)
        step = max(1, (4 << 20) // max(1, (c1 - c0) * 4))
        for s in range(0, n, step):
            e = min(n, s + step)
            if feats.dtype == np.float32:
                feats.read_direct(xb, np.s_[s:e, c0:c1], np.s_[s:e])
            else:
                xb[s:e] = feats[s:e, c0:c1]
            if not np.isfinite(xb[s:e]).all():
                raise GnnprepError(f"{self.path}: /nodes/features has non-finite values in rows {s}..{e - 1}")
        return xb

    def labels(self) -> np.ndarray | None:
        return self.f["nodes/labels"][:] if "nodes/labels" in self.f else None

    def splits(self) -> dict[str, np.ndarray]:
        if "splits" not in self.f:
            return {}
        return {k: self.f["splits"][k][:].astype(np.int64) for k in self.f["splits"]}

    def node_types(self) -> list[str] | None:
        raw = self.f.attrs.get("node_types")
        return json.loads(raw) if raw is not None else None
