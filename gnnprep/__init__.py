"""gnnprep: prepare graphs for GNN training.

One subpackage per pipeline stage, each owning the artifact it writes; a stage imports only earlier
ones (``tests/test_structure.py`` holds that):

    core ← sparse ← graph ← {hag, hdg} ← precompute ← train ← cli

The library never prints and never imports click; the command line lives in :mod:`gnnprep.cli`.
Stages communicate through self-describing HDF5 artifacts (see README).

Modules that moved when the stages became packages still import under their old flat names
(``gnnprep.features``, ``gnnprep.tune``, ...), with a ``DeprecationWarning``, for this release only.
"""

import importlib
import sys

from gnnprep.core.version import __version__  # noqa: F401 - the package's version, defined in core

# old flat module -> its home since the stage packages (kept for one release)
MOVED = {
    "errors": "core.errors", "sizes": "core.sizes", "memory": "core.memory", "progress": "core.progress",
    "device": "core.device", "atomic": "core.output", "directio": "core.directio",
    "distributed": "core.distributed", "meta": "core.artifact",
    "kernels": "sparse.kernels", "csr_builder": "sparse.csr_builder", "csr_kernels": "sparse.csr_kernels",
    "prefetch": "sparse.prefetch", "reorder": "sparse.order",
    "store": "graph.store", "ingest": "graph.ingest", "sources": "graph.sources",
    "sources.base": "graph.sources.base", "sources.edgelist": "graph.sources.edgelist",
    "sources.ogb": "graph.sources.ogb", "sources.graphstore": "graph.sources.graphstore",
    "textio": "graph.sources.textio", "npzstream": "graph.sources.npzstream",
    "hagsearch": "hag.search", "hdgselect": "hdg.select", "walks": "hdg.walks",
    "precomputeconfig": "precompute.config", "plan": "precompute.plan", "calibrate": "precompute.calibrate",
    "operators": "precompute.operators", "udf": "precompute.user_operators", "backends": "precompute.backend",
    "hoploop": "precompute.hop_loop", "hopwriter": "precompute.hop_writer", "features": "precompute.features",
    "shardrun": "precompute.sharded",
    "trainconfig": "train.config", "models": "train.models", "batches": "train.batches",
    "regimes": "train.regimes", "runfolder": "train.run_folder", "ddp": "train.ddp", "tune": "train.tune",
}


class _MovedModule:  # a MetaPathFinder and Loader by protocol (importlib.abc costs ~18 ms at start-up)
    """``import gnnprep.<old>`` gives the module at its new path (the same object, so a patch of
    one is a patch of the other) and warns once."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname[len(__name__) + 1:] if fullname.startswith(__name__ + ".") else None
        if old not in MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = f"{__name__}.{MOVED[spec.name[len(__name__) + 1:]]}"
        import warnings

        warnings.warn(f"{spec.name} is now {new}; the old name goes in the next release", DeprecationWarning,
                      stacklevel=2)
        module = importlib.import_module(new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec  # the import machinery set the alias's spec; the module keeps its own


sys.meta_path.append(_MovedModule())

from gnnprep.core.lazy import exports  # noqa: E402

# the library's public names at the top, imported on first use (no numba or torch at `import gnnprep`)
__getattr__, __dir__ = exports(__name__, {"from_arrays": "graph.ingest", "open": "info"})
