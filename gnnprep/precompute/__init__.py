"""Stage 4, block-wise precomputation of S^k X (Maekawa et al.'s LC transformation) and the ``features.h5`` artifact.

The package's public names (imported when used): :func:`precompute`, :class:`PrecomputeConfig`,
:class:`PrecomputeReport`, :class:`FeatureStore`."""

import importlib

_EXPORTS = {"precompute": "run", "PrecomputeConfig": "config", "PrecomputeReport": "config", "FeatureStore": "features"}


def __getattr__(name):
    """The package's public names, imported when first used (importing the package stays cheap)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
