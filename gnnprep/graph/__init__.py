"""Stage 2, the graph store (``graph.h5``): its reader, every input layout's reader (``sources``), ``gnnprep ingest`` and the node order kept with a store."""

import importlib

_EXPORTS = {"GraphStore": "store", "IngestConfig": "ingest", "ensure_graph_store": "ingest"}


def __getattr__(name):
    """The package's public names, imported when first used (importing the package stays cheap)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
