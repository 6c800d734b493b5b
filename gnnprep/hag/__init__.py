"""Stage 3, hierarchically aggregated computation graphs (Jia et al., KDD 2020) and the ``hag.h5`` artifact.

The package's public names (imported when used): :class:`Hag`, :func:`execute`, :func:`build`,
:class:`HagConfig`, :class:`HagReport`, :func:`load_for`, :func:`cache_path`, :func:`read_hag`,
:func:`write_hag`."""

from gnnprep.core.lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "Hag": "structure", "execute": "structure", "covers": "structure", "graph_cost": "structure", "build": "builder",
    "HagConfig": "builder", "HagReport": "builder", "load_for": "builder", "cache_path": "builder",
    "read_hag": "file", "write_hag": "file", "check_hag": "file"
})
