"""What a tune needs to know of the features artifact, read from its shapes (no data): its
identity (a tune folder belongs to one artifact) and the sizes the memory estimate of a trial
needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnprep.core.artifact import file_fingerprint
from gnnprep.core.errors import GnnprepError, OptionError


def features_fingerprint(path: Path, store) -> dict:
    """What train records as the features' identity: path, size/mtime, the graph's fingerprint."""
    return {"path": str(path.absolute()), "file": file_fingerprint(path), "graph_fingerprint": store.graph_fingerprint}


def same_features(a: dict, b: dict) -> bool:
    """Whether two fingerprints name the same artifact (the same file and graph, wherever it lies)."""
    return a.get("file") == b.get("file") and a.get("graph_fingerprint") == b.get("graph_fingerprint")


@dataclass(frozen=True)
class ArtifactFacts:
    """What the memory estimate needs from the features artifact (read from shapes, no data)."""

    fingerprint: dict
    held_rows: int             # rows the splits need
    width: int                 # d
    itemsize: int
    hops: int                  # K of the artifact
    operators: int             # operator channels the artifact holds
    operator_names: tuple[str, ...] = ()

    def check_fits(self, config, where: str) -> None:
        """GnnprepError naming ``where`` (a grid point or the fixed options) unless the TrainConfig
        ``config`` asks only for hops and channels the artifact has (before any tune folder exists)."""
        if config.hops is not None and config.hops > self.hops:
            raise OptionError("--hops", f"{config.hops}: the features artifact holds hops 0..{self.hops} ({where})")
        missing = [o for o in (config.operators or ()) if o not in self.operator_names]
        if missing and self.operator_names:
            raise OptionError("--operator", f"{missing[0]}: not a channel of the features artifact (it has "
                                            f"{', '.join(self.operator_names)}; {where})")


def read_facts(path) -> ArtifactFacts:
    from gnnprep.precompute.features import FeatureStore

    path = Path(path)
    with FeatureStore(path) as store:
        positions = store.split_positions(store.rows)
        held = len(np.unique(np.concatenate(list(positions.values()))))
        hop0 = store.hop(0)
        if hop0.ndim != 2:
            raise GnnprepError(f"{path}: /hops/0 has shape {hop0.shape}; expected [rows, d]")
        return ArtifactFacts(fingerprint=features_fingerprint(path, store), held_rows=held, width=int(hop0.shape[1]),
                             itemsize=hop0.dtype.itemsize, hops=store.hops, operators=len(store.operators()),
                             operator_names=tuple(store.operators()))
