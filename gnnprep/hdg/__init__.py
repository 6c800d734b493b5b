"""Stage 3, hierarchical dependency graphs (FlexGraph's NAU, Wang et al., EuroSys 2021) and the ``hdg.h5`` artifact.

The package's public names (imported when used): :class:`Hdg`, :class:`Level`, :func:`aggregate`,
:func:`build`, :func:`load_for`, :func:`read_hdg`, :func:`write_hdg`, :func:`read_graph`."""

import importlib

_EXPORTS = {"Hdg": "structure", "Level": "structure", "aggregate": "structure", "reweighted": "structure", "build": "builder", "load_for": "builder", "read_graph": "builder", "read_hdg": "file", "write_hdg": "file"}


def __getattr__(name):
    """The package's public names, imported when first used (importing the package stays cheap)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
