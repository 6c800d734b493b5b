"""Deprecated name of :mod:`gnnprep.precompute` (kept for one release; see docs/internals.md)."""

from __future__ import annotations

import warnings

from gnnprep.hag.builder import cache_path as hag_cache_path  # noqa: F401
from gnnprep.precompute.config import PrecomputeConfig, PrecomputeReport  # noqa: F401
from gnnprep.precompute.run import precompute  # noqa: F401

warnings.warn("gnnprep.propagate is now gnnprep.precompute (PrecomputeConfig: gnnprep.precompute.config); "
              "this alias goes in the next release", DeprecationWarning, stacklevel=2)
