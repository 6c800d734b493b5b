"""Stage 5, the mini-batch trainer of LC models over a features artifact, and ``gnnprep tune``.

The package's public names (imported when used): :func:`train`, :func:`load_model`,
:class:`TrainConfig`."""

from gnnprep.core.lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "train": "trainer", "load_model": "trainer", "TrainConfig": "config"
})
