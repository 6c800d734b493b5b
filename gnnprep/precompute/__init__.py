"""Stage 4, block-wise precomputation of S^k X (Maekawa et al.'s LC transformation) and the ``features.h5`` artifact.

The package's public names (imported when used): :func:`precompute`, :class:`PrecomputeConfig`,
:class:`PrecomputeReport`, :class:`FeatureStore`."""

from gnnprep.core.lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "precompute": "run", "PrecomputeConfig": "config", "PrecomputeReport": "config", "FeatureStore": "features"
})
