"""Stage 2, the graph store (``graph.h5``): its reader, every input layout's reader (``sources``), ``gnnprep ingest`` and the node order kept with a store."""

from gnnprep.core.lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "GraphStore": "store", "IngestConfig": "ingest", "ensure_graph_store": "ingest",
    "from_arrays": "ingest",
})
