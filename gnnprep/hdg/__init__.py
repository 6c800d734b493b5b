"""Stage 3, hierarchical dependency graphs (FlexGraph's NAU, Wang et al., EuroSys 2021) and the ``hdg.h5`` artifact.

The package's public names (imported when used): :class:`Hdg`, :class:`Level`, :func:`aggregate`,
:func:`build`, :func:`load_for`, :func:`read_hdg`, :func:`write_hdg`, :func:`read_graph`."""

from gnnprep.core.lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "Hdg": "structure", "Level": "structure", "aggregate": "structure", "reweighted": "structure",
    "build": "builder", "load_for": "builder", "read_graph": "builder", "read_hdg": "file", "write_hdg": "file"
})
