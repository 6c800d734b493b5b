"""Lazy package exports: a stage package names its public functions and classes without importing
the modules that hold them (which may pull in numba or torch) until one is first used (PEP 562)."""

from __future__ import annotations

import importlib


def exports(package: str, table: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps each public name to the submodule
    (relative to ``package``) that defines it."""
    def __getattr__(name):
        if name in table:
            return getattr(importlib.import_module(f"{package}.{table[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(importlib.import_module(package).__dict__) | set(table))

    return __getattr__, __dir__
