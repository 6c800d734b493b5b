"""Stage 3, hierarchically aggregated computation graphs (Jia et al., KDD 2020) and the ``hag.h5`` artifact.

The package's public names (imported when used): :class:`Hag`, :func:`execute`, :func:`build`,
:func:`load_for`, :func:`cache_path`, :func:`read_hag`, :func:`write_hag`."""

import importlib

_EXPORTS = {"Hag": "structure", "execute": "structure", "covers": "structure", "graph_cost": "structure", "build": "builder", "load_for": "builder", "cache_path": "builder", "read_hag": "file", "write_hag": "file", "check_hag": "file"}


def __getattr__(name):
    """The package's public names, imported when first used (importing the package stays cheap)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
