"""The precompute run's configuration and report: plain dataclasses, importable without torch or
numba (the command line builds its options from them without paying for those imports)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

REORDER_MODES = ("auto", "none", "community", "bfs")
ROWS = ("all", "labeled")
DTYPES = ("float32", "float16")
HDG_REDUCE = ("mean", "sum")


@dataclass(frozen=True)
class PrecomputeConfig:
    """Everything that defines a precompute run (:func:`gnnprep.precompute.precompute`)."""

    hops: int = 3
    operators: tuple[str, ...] = ("sym",)
    rows: str = "all"                      # all | labeled (the union of the splits)
    dtype: str = "float32"                 # output dtype: float32 | float16
    device: str = "auto"                   # auto | cpu | cuda[:i]
    backend: str = "auto"                  # auto | numba | torch (torch on CPU tests the CUDA path)
    memory_budget: int | None = None       # None: gnnprep.device.default_budget
    blocks: tuple[int, int, int] | None = None   # (a, b, c) override
    reorder: str = "auto"                  # auto | none | community | bfs: node order of the computation
    hag: str | None = None                 # a hag.h5 for the graph, or auto (see plan.choose_hag); CPU
    hdg: str | None = None                 # an hdg.h5 for the graph: its channels of every hop
    hdg_reduce: str = "mean"               # mean | sum at the HDG's instance levels
    dry_run: bool = False


@dataclass(frozen=True)
class PrecomputeReport:
    output: str
    plan: dict
    hops: int
    operators: tuple[str, ...]
    rows: int
    dtype: str
    hop_seconds: tuple[float, ...]
    seconds: float
    predicted_peak_bytes: int
    measured_peak_bytes: int | None
    baseline_rss_bytes: int
    resumed_units: int
    dry_run: bool = False
    hag: dict | None = None       # {"mode": file|auto, "used", "path", "reason"}
    reorder: dict | None = None   # {"kind", "used", "near_share_before", "near_share_after", "seconds"}
    warnings: tuple[str, ...] = ()  # also passed to the ``warn`` callback as they arise

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
