"""The precompute run's configuration and report: plain dataclasses, importable without torch or
numba (the command line builds its options from them without paying for those imports)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gnnprep.core.errors import OptionError
from gnnprep.core.record import Record, optional

if TYPE_CHECKING:
    from gnnprep.precompute.plan import Plan

REORDER_MODES = ("auto", "none", "community", "bfs", "degree", "degree-bucket")
ROWS = ("all", "labeled")
DTYPES = ("float32", "float16")
HDG_REDUCE = ("mean", "sum", "max")
NORMALIZE_X = ("none", "row")


@dataclass(frozen=True)
class PrecomputeConfig:
    """Everything that defines a precompute run (:func:`gnnprep.precompute.run.precompute`)."""

    hops: int = 3
    operators: tuple[str, ...] = ("sym",)  # channel names: built-ins, and the functions of operator_files
    operator_files: tuple[str, ...] = ()   # "path:name": user operators (gnnprep.precompute.user_operators), named in operators too
    rows: str = "all"                      # all | labeled (the union of the splits)
    dtype: str = "float32"                 # output dtype: float32 | float16
    device: str = "auto"                   # auto | cpu | cuda[:i]
    backend: str = "auto"                  # auto | numba | torch (torch on CPU tests the CUDA path)
    memory_budget: int | None = None       # None: gnnprep.core.device.default_budget
    blocks: tuple[int, int, int] | None = None   # (a, b, c) override
    reorder: str = "auto"                  # auto | none | community | bfs | degree | degree-bucket: node order
    hag: str | None = None                 # a hag.h5 for the graph, or auto (see plan.choose_hag); CPU
    hdg: str | None = None                 # an hdg.h5 for the graph: its channels of every hop
    hdg_reduce: str = "mean"               # mean | sum | max at the HDG's levels
    hdg_weight: str | None = None          # "path:name": a user function re-weighting the HDG's members
    normalize_features: str = "none"       # row: X_i / sum_j |X_ij| before propagation (SGC, GCN, PyG)
    dry_run: bool = False

    def check(self) -> None:
        """OptionError for a value no run can use (before anything is read)."""
        if self.hops < 0:
            raise OptionError("--hops", f"{self.hops}: expected a non-negative integer")
        if self.dtype not in DTYPES:
            raise OptionError("--dtype", f"{self.dtype!r}: expected float32 or float16")
        if self.rows not in ROWS:
            raise OptionError("--rows", f"{self.rows!r}: expected all or labeled")
        if self.reorder not in REORDER_MODES:
            raise OptionError("--reorder", f"{self.reorder!r}: expected one of {', '.join(REORDER_MODES)}")
        if self.normalize_features not in NORMALIZE_X:
            raise OptionError("--normalize-features", f"{self.normalize_features!r}: expected none or row")
        if self.hdg is not None and self.hdg_reduce not in HDG_REDUCE:
            raise OptionError("--hdg-reduce", f"{self.hdg_reduce!r}: expected mean, sum or max")
        if self.hdg is not None and self.rows != "all":   # (known before any work: a usage error)
            raise OptionError("--hdg", "needs --rows all: an HDG aggregates hop features of nodes outside the splits too")

    def backend_for(self, device: str) -> str:
        """numba (the CPU kernels) or torch (torch.sparse, the CUDA path) on the resolved ``device``."""
        if self.backend == "auto":
            return "torch" if device.startswith("cuda") else "numba"
        if self.backend not in ("numba", "torch"):
            raise OptionError("--backend", f"{self.backend!r}: expected auto, numba or torch")
        if self.backend == "numba" and device != "cpu":
            raise OptionError("--backend", "numba runs on the CPU only")
        return self.backend


@dataclass(frozen=True)
class HagChoice(Record):
    """What ``--hag`` decided, as the run reports it (``PrecomputeReport.hag``): ``mode`` file|auto,
    whether a HAG is ``used``, its ``path``, and why (for auto, the planner's
    :class:`gnnprep.precompute.plan.HagVerdict`)."""

    mode: str
    used: bool
    path: str | None
    reason: str


@dataclass(frozen=True)
class OrderReport(Record):
    """The node order of a run (:mod:`gnnprep.sparse.order`): its ``kind``, whether it was ``used``,
    the share of stored entries within the locality window before and after, the seconds this run
    spent on it, whether it was ``cached``, and for a cached order how long finding it took and
    where it was kept (``store`` or ``cache``)."""

    kind: str
    used: bool
    near_share_before: float
    near_share_after: float
    seconds: float
    cached: bool
    found_seconds: float | None = optional()
    found_in: str | None = optional()

    @classmethod
    def from_info(cls, info: dict, used: bool) -> "OrderReport":
        """From the order finder's info dict (keys beyond the fields, from an older cache, ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in info.items() if k in names}, used=used)


@dataclass(frozen=True)
class PrecomputeReport(Record):
    output: str
    plan: Plan
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
    hag: HagChoice | None = None
    reorder: OrderReport | None = None
    warnings: tuple[str, ...] = ()  # also passed to the ``warn`` callback as they arise
    hop_entries: tuple[int, ...] = ()  # entries each hop 1..K reads as planned (empty: all, every hop)
    # why the node order and the pruning of --rows labeled are or are not used ({"order", "pruning"})
    decisions: dict | None = None
    # the ordered copy of S beside the store: path, used, built (its seconds, passes), or why not
    ordered_copy: dict | None = None
    # bytes read from the disk (page-cache misses, /proc/self/io) while computing each hop: hop 0 is
    # reading X, hop k >= 1 mostly S's row blocks; None where the kernel does not say
    hop_disk_read_bytes: tuple[int, ...] | None = None
    # per hop, where its seconds went on the compute thread: {"kernel", "reads" (X for hop 0, streamed S
    # blocks), "writes_waited" (its rows reaching the disk), "other" (gathers, queueing, bookkeeping)}
    hop_breakdown: tuple[dict, ...] = ()
    # the process's peak RSS over the whole command (planning and loading included: what `time -v`
    # reports); measured_peak_bytes is the run's above its baseline, as the plan predicts it
    peak_rss_bytes: int | None = None
    # what the prediction was made with: {"profile": the cost profile's source, "page_cached": {"x",
    # "s", "copy": shares in the page cache at planning}} (hop_loop.predicted_with)
    predicted_with: dict | None = None
    # precompute --hdg: the HDG channels written beside the operators' hops, and their seconds
    hdg_channels: tuple[str, ...] = ()
    hdg_seconds: float | None = None

    def to_dict(self) -> dict:
        return Record.to_dict(self)
