"""Stage 5, the mini-batch trainer of LC models over a features artifact, and ``gnnprep tune``.

The package's public names (imported when used): :func:`train`, :func:`load_model`,
:class:`TrainConfig`."""

import importlib

_EXPORTS = {"train": "trainer", "load_model": "trainer", "TrainConfig": "config"}


def __getattr__(name):
    """The package's public names, imported when first used (importing the package stays cheap)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
