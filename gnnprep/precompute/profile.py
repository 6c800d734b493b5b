"""Calibration profiles: the machine coefficients the planner's time model uses.

``gnnprep calibrate`` (:mod:`gnnprep.precompute.calibrate`) measures them and writes
``~/.config/gnnprep/profile-<device>.json`` (or under ``$GNNPREP_CONFIG``); :func:`load_profile`
reads that file, else the built-in defaults below. A profile is advisory: one that cannot be used
is said (one warning line) and the defaults are used instead, so a damaged file never stops a run.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from gnnprep.core.files import NotRegularFile, TooLarge, read_regular

BUILT_IN = "built-in defaults"   # a profile's ``measured`` where no calibration was found (another machine's figures)


@dataclass(frozen=True)
class Profile:
    """Machine coefficients; ``gnnprep calibrate`` measures them, these defaults were measured on the
    2-core CI-class machine (numba kernel, power-law graph; kernel table 2026-11-24 with the
    prefetching row kernel of :mod:`gnnprep.sparse.row_kernels` on huge-page buffers, as a run
    uses them, ``calibrate(nodes=1_000_000)``; I/O figures 2026-11-22, kept conservative).

    The table's steps between widths, 2026-11-28 (the entries at 8, 16 and 64 as measured; 32, 128
    and 256 set from the passes of whole runs): as timed, a 64-column pass cost 1.79x a 32-column one
    and a 128-column pass 1.82x a 64-column one, so a run of d = 64 columns was planned in two blocks
    and one of d = 128 in one. In the kernels of ``precompute --rows all`` runs (a 2-core Xeon VM,
    ``--blocks 1,1,c``, two rounds) a 64-column pass cost 1.30-1.46x a 32-column one on four 8M-entry
    graphs of 125k-500k nodes (cliques, ego-like, citation-like, cliques64: one block 1.35-1.6x
    faster than two) and 1.60-1.64x on a 1M-node power-law and the 2.8M-node R-MAT graph; a
    128-column pass 2.06-2.11x a 64-column one there (one block and two alike). So 32 → 7.0 (64 /
    32 = 1.43), 128 → 20.0 (128 / 64 = 2.0), 256 kept at 1.76x 128. What it changed, old table
    against new, the planner's own plans, rotated rounds: cliques c = 2 → 1, walls 3.33-3.65 against
    2.97-3.12 s; ego c = 2 → 1, 2.37-2.65 against 2.28-2.47 s; the power-law graph c = 4 → 2, kernels
    2.41-2.50 against 1.79-1.83 s; the papers100M shape at 1/40 (``--rows labeled``, 4 GiB) c = 4 → 2,
    9.85-11.44 against 8.59-10.46 s back to back, 9.15-9.54 against 9.05-9.13 s after 8 s idle, peak
    1.43 → 2.06 GiB (its R-MAT twin 13.47-14.23 against 12.27-14.00 s).

    Still open: first touches of fresh memory ran at 0.45-0.8 GB/s after idle, not
    ``fault_bytes_per_s``, and the table's 8-column entry is of a block that fits the last-level cache
    on its 1M-node graph (widths under 16 interpolate too cheap for larger graphs: with both that rate
    and a flatter table, the three-operator run at 300 MiB planned 12 column blocks of 11 and measured
    19.5 s against 13.1-13.8 s). The fix there is a model of the cache fit and of the fresh-memory
    pool (docs/internals.md, the column-block choice)."""

    device: str = "cpu"
    # kernel seconds per stored nonzero, by column-block width (interpolated in between)
    spmm_ns_per_nnz: dict = field(default_factory=lambda: {8: 3.4, 16: 4.8, 32: 7.0, 64: 10.0, 128: 20.0,
                                                           256: 35.2})
    row_ns_per_col: float = 0.4        # self term, scaling, output write per row·column
    read_bytes_per_s: float = 1.5e9    # HDF5 read (page cache warm-ish)
    # S read again within a run (streamed: once per hop and column block), from the page cache:
    # 13-18 GB/s measured (the first read is a read_bytes_per_s one)
    reread_bytes_per_s: float = 1.0e10
    # X's column tiles read from the disk (the page cache cannot hold X beside a streamed S): one
    # ~1 MiB tile per read with the kernel's readahead off (GraphStore.feature_columns), so at the
    # disk's latency-bound rate. Measured on the papers100M-shaped graph in a memory cgroup scaled
    # like the data, cold cache: 0.50 GB/s at 1/4 (13.3 GB in 26.3 s), 0.54 GB/s at 0.35 (20.0 GB
    # in 37.3 s) — against 1.5 GB/s assumed before, the largest part of a 35% underestimate. Not
    # measured by ``gnnprep calibrate``: a file it has just written is served from the host's cache
    # on a VM (0.96-1.67 GB/s measured that way here), and the disk's rate varies run to run
    # (0.3-1.0 GB/s for the same reads minutes apart)
    cold_tile_read_bytes_per_s: float = 5.0e8
    write_bytes_per_s: float = 1.0e9   # HDF5 write
    copy_bytes_per_s: float = 1.0e10   # host<->device (CUDA) or memcpy
    block_overhead_s: float = 0.002    # per (edge block, column block, hop) launch and bookkeeping
    # community order (label propagation, mostly hidden behind reading X) + relabelling, per entry;
    # kernel time ratio in that order, prefetching kernel: 0.37 on calibrate's 1M-node graph,
    # 0.53-0.67 on the papers100M-shaped bench graph at 1/10 (11.1M rows, near share 0.0007 -> 0.78)
    reorder_ns_per_entry: float = 40.0
    reorder_speedup: float = 0.5
    # relabelling alone (the order found at ingest, or by an earlier run): one parallel gather per entry
    relabel_ns_per_entry: float = 15.0
    # the kernel's cost per entry grows with the gathered block beyond the table's graph (caches,
    # TLB reach): x (1 + kernel_growth * log2(rows / kernel_ref_rows)) for larger graphs. Fitted on
    # the papers100M-shaped bench graph (11.1M rows, stored order) against the 1M-row table: the
    # prefetch hides most of it (it was 0.27 for the plain kernel)
    kernel_ref_rows: int = 1_000_000
    kernel_growth: float = 0.1
    # first touch of fresh memory (the two column buffers; VMs that return free pages to the host
    # fault them in slowly): 2.8 GB took 0.7 s with huge pages, 1.6 s without (2026-11-23); on
    # 2026-11-27 a fresh 0.7-2.8 GB mapping took 0.45-0.8 GB/s, memory the process freed and reused
    # 11-15 GB/s (see the class's docstring for why the rate is kept)
    fault_bytes_per_s: float = 2.0e9
    # a column block of X gathered into the node order (n·w·4 bytes read at random rows, written in
    # sequence), and the ordered copy's scatter of S (issue 24): one random write per entry
    gather_bytes_per_s: float = 3.0e9
    # the streamed HAG search's seconds against its model (gnnprep.hag.stream.stream_plan, fitted on
    # the reference machine: 1.0). It waits on memory (hash tables, heaps), so it differs by machine
    # more than the kernels: 1.29 on calibrate's 3.9M-entry graph on an AMD EPYC VM where the kernels
    # were faster than here (2026-11-26; 1.45 there on the papers100M shape at 1/40, 77M entries)
    hag_search_scale: float = 1.0
    measured: str = BUILT_IN

    def spmm_seconds(self, nnz: int, rows: int, width: int) -> float:
        table = sorted((int(k), float(v)) for k, v in self.spmm_ns_per_nnz.items())
        if width <= table[0][0]:
            ns = table[0][1] * width / table[0][0]
        elif width >= table[-1][0]:
            ns = table[-1][1] * width / table[-1][0]
        else:
            for (w0, t0), (w1, t1) in zip(table, table[1:]):
                if w0 <= width <= w1:
                    ns = t0 + (t1 - t0) * (width - w0) / (w1 - w0)
                    break
        if rows > self.kernel_ref_rows > 0:
            ns *= 1 + self.kernel_growth * math.log2(rows / self.kernel_ref_rows)
        return nnz * ns * 1e-9 + rows * width * self.row_ns_per_col * 1e-9

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> "Profile":
        """The profile in ``text``; ValueError naming the first field that is missing or unusable
        (:func:`parse_profile`)."""
        return parse_profile(text)[0]


def profile_path(device: str) -> Path:
    base = Path(os.environ.get("GNNPREP_CONFIG") or Path.home() / ".config" / "gnnprep")
    return base / f"profile-{device}.json"


PROFILE_MAX_BYTES = 1 << 20   # a profile is a few hundred bytes


class ProfileWarning(UserWarning):
    """A calibration profile that could not be used (the built-in defaults are, instead)."""


def _finite(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:   # an integer of 400 digits
        return False


def _short_repr(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _kernel_table(v) -> dict:
    """``spmm_ns_per_nnz`` as {width: ns}: a non-empty JSON object of positive integer widths
    (written as strings) to finite ns > 0; ValueError otherwise."""
    if not isinstance(v, dict) or not v:
        raise ValueError("'spmm_ns_per_nnz' is not a non-empty object of width: ns")
    table = {}
    for k, ns in v.items():
        try:
            width = int(k)
        except (TypeError, ValueError):
            width = 0
        if width <= 0 or width > 1 << 20 or str(k).strip() != str(width):
            raise ValueError(f"'spmm_ns_per_nnz' has width {_short_repr(k)}; expected a positive integer")
        if not _finite(ns) or ns <= 0:
            raise ValueError(f"'spmm_ns_per_nnz' width {width} is {_short_repr(ns)}; expected a finite ns > 0")
        table[width] = float(ns)
    return table


def parse_profile(text: str, defaults: Profile | None = None) -> tuple[Profile, tuple[str, ...]]:
    """(profile, the coefficients taken from ``defaults``) from the JSON ``text``; ValueError naming
    the first field that is of the wrong type, not finite or out of range (a rate must be > 0, any
    other coefficient >= 0; the kernel table needs at least one width), or missing when no
    ``defaults`` are given (with them, a coefficient missing from ``text``, as in an older gnnprep's
    profile, is taken from them). Keys this gnnprep does not know are ignored (a newer one's)."""
    try:
        d = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    values, missing = {}, []
    for f in fields(Profile):
        if f.name not in d:
            if defaults is None:
                raise ValueError(f"no {f.name!r}")
            if f.name not in ("device", "measured"):   # descriptions, not coefficients
                missing.append(f.name)
            values[f.name] = getattr(defaults, f.name)
            continue
        v = d[f.name]
        if f.name in ("device", "measured"):
            if not isinstance(v, str):
                raise ValueError(f"{f.name!r} is {_short_repr(v)}; expected a string")
        elif f.name == "spmm_ns_per_nnz":
            v = _kernel_table(v)
        else:
            low = "> 0" if f.name.endswith("_per_s") else ">= 0"
            if not _finite(v) or v < 0 or (low == "> 0" and v == 0):
                raise ValueError(f"{f.name!r} is {_short_repr(v)}; expected a finite number {low}")
        values[f.name] = v
    return Profile(**values), tuple(missing)


def _builtin_profile(device: str) -> Profile:
    if device.startswith("cuda"):
        return Profile(device="cuda", spmm_ns_per_nnz={8: 0.15, 32: 0.3, 128: 0.9, 256: 1.8}, row_ns_per_col=0.01,
                       copy_bytes_per_s=2.0e10, block_overhead_s=0.0005)
    return Profile()


def _read_profile(p: Path) -> str | None:
    """The text of ``p`` (None: no such file); ValueError for a path that is not a regular file of
    at most PROFILE_MAX_BYTES of UTF-8 (a named pipe is never opened for reading)."""
    try:
        data = read_regular(p, PROFILE_MAX_BYTES)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise ValueError("not a regular file") from None
    except TooLarge:
        raise ValueError(f"larger than {PROFILE_MAX_BYTES} bytes") from None
    except OSError as e:
        raise ValueError(f"cannot be read: {e.strerror or e}") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def load_profile(device: str, warn=None) -> Profile:
    """The calibration profile of ``device`` (``gnnprep calibrate`` writes it to
    :func:`profile_path`), else the built-in defaults.

    A profile is advisory, like a cache: it changes which plan is chosen (time, memory headroom),
    never a result. So a damaged one (not JSON, not an object, a coefficient of the wrong type, NaN,
    negative or zero where it divides, an empty kernel table, a named pipe, too large) does not fail
    the run: it is said once (``warn(message)``, or a :class:`ProfileWarning` where no ``warn`` is
    given) and the built-in defaults are used whole (one bad value says the file cannot be
    trusted). A coefficient that is merely missing (a profile from an older gnnprep, before the
    coefficient existed) takes its built-in default and is said too; the measured ones are kept.
    The fix either way is to rerun ``gnnprep calibrate``."""
    p = profile_path(device)
    builtin = _builtin_profile(device)

    def say(message: str) -> None:
        if warn is not None:
            warn(message)
        else:
            warnings.warn(message, ProfileWarning, stacklevel=3)

    try:
        text = _read_profile(p)
        if text is None:
            return builtin
        prof, missing = parse_profile(text, defaults=builtin)
    except ValueError as e:   # json's JSONDecodeError is a ValueError
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        say(f"{p}: unusable calibration profile ({reason}); using the built-in defaults (rerun gnnprep calibrate)")
        return builtin
    if missing:
        say(f"{p}: calibration profile has no {', '.join(missing)}; using the built-in default for "
            f"{'it' if len(missing) == 1 else 'them'} (rerun gnnprep calibrate)")
    return prof
