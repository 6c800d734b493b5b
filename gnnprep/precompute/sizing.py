"""Plan a precompute from sizes alone, before any data is downloaded (issue 24): "how long will
papers100M take on a machine with B GiB?", and "how much memory do I need?".

:func:`plan_for_sizes` builds the planner's :class:`~gnnprep.precompute.plan.Problem` from the
counts (nodes, stored entries, feature columns, hops, stored rows) and returns the plan
:func:`gnnprep.precompute.run.prepare_job` would make, with the same reasons for the node order
and the pruning of ``--rows labeled``. What a store would tell it is assumed: the degrees follow
a power law (1 + Pareto(2) node weights scaled to the mean degree, as ``benchmarks/bench_scale.py``
generates; they set how many entries the pruned hops read), ids are arbitrary, and the order is
kept in the store (as ``gnnprep ingest`` keeps it) or, with ``order="none"``, must be found.

From the shell (the same numbers, no data needed), ``gnnprep plan`` (issue 32, line 17)::

    gnnprep plan --nodes 111059956 --entries 3.2e9 --features 128 --hops 3 --rows 1.6M \\
        --memory-budget 8GiB

(``--entries``: stored entries of the symmetrised CSR, about twice the directed edges.) Every size
is bounded (:data:`LIMITS`), so no input makes the planner's search run long; a budget no plan fits
is a failure naming the least budget (exit 1). ``python -m gnnprep.precompute.sizing`` is kept as an
alias of ``gnnprep plan`` with the same options, output and exit codes (:func:`main`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import re
import sys
from decimal import Decimal

import numpy as np

from gnnprep.core.errors import ArgumentError, GnnprepError, OptionError
from gnnprep.core.memory import machine_memory as memory_of_this_machine
from gnnprep.core.output import json_safe
from gnnprep.core.sizes import format_size
from gnnprep.graph.store import FEATURE_TILE_COLUMNS
from gnnprep.precompute.plan import (
    Problem,
    choose_plan,
    decide_order,
    least_budget,
    pruned_hop_entries,
    pruned_last_inputs,
)
from gnnprep.precompute.profile import load_profile

SAMPLE = 1 << 20   # nodes drawn to estimate the pruned hops' entries

# Bounds of every size (issue 32, line 10): beyond them a plan is not worth asking for, and inside
# them the planner's search (column counts x edge blocks x hops) stays well under 10 s. (name, low,
# high); rows and entries are also bounded by the nodes (rows <= nodes, entries <= nodes**2).
LIMITS = {
    "nodes": (1, 2**40),              # 1.1e12 nodes
    "entries": (0, 2**44),            # 1.8e13 stored entries (0: a graph without edges, which ingest stores)
    "features": (1, 2**16),           # 65,536 feature columns (2**20 took 7 s to plan on a loaded machine)
    "hops": (0, 1024),
    "rows": (1, 2**40),
    "operators": (1, 64),
    "memory_budget": (1, 2**60),      # 1 EiB
    "machine_memory": (1, 2**60),
}
OPTION_OF = {name: "--" + name.replace("_", "-") for name in LIMITS} | {"device": "--device", "order": "--order",
                                                                       "dtype_bytes": "--dtype"}
DEVICES = ("cpu", "cuda")
ORDERS = ("known", "copy", "none")
_COUNT = re.compile(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]{1,3})?)([kmgbt]?)")
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}


def parse_count(text: str | int, option: str = "--nodes") -> int:
    """A count as the shell gives it: ``111059956``, ``3.2e9``, ``1.6M``, ``38k``, ``2B`` (decimal
    suffixes k, M, G or B, T), ``1_000`` or ``1,000``. A whole number >= 0; anything else (negative,
    a fraction, nan, inf, text) raises OptionError naming ``option``. Ranges are checked by
    :func:`check_sizes`."""
    if isinstance(text, numbers.Integral) and not isinstance(text, bool):
        return int(text)
    t = str(text).strip().lower().replace("_", "").replace(",", "")
    m = _COUNT.fullmatch(t) if len(t) <= 40 else None
    if not m:
        raise OptionError(option, f"{str(text)[:40]!r}: expected a count such as 128, 2.7M, 38k or 3.2e9")
    value = Decimal(m.group(1)) * _SCALE[m.group(2)]
    if value > 2**62:   # (before int(): 1e999 is a number of 999 digits)
        raise OptionError(option, f"{text!r}: too large")
    if value != value.to_integral_value():
        raise OptionError(option, f"{text!r}: not a whole number")
    return int(value)


def check_sizes(*, option_names: bool = False, **values) -> None:
    """Raise naming the first value that is not an integer within :data:`LIMITS` (rows and
    machine_memory may be None), a ``device`` not in cpu, cuda, an ``order`` not in known, copy,
    none, ``dtype_bytes`` not 2 or 4, more rows than nodes, or more entries than n(n − 1) (a store holds no self-loops). Floats and
    bools are refused, never truncated. The error names the Python argument (:class:`ArgumentError`,
    also a ValueError and a TypeError), or with ``option_names`` the command-line option
    (:class:`OptionError`)."""
    def bad(name: str, message: str) -> GnnprepError:
        return OptionError(OPTION_OF.get(name, name), message) if option_names else ArgumentError(name, message)

    for name, v in values.items():
        if name in LIMITS:
            if v is None and name in ("rows", "machine_memory"):
                continue
            lo, hi = LIMITS[name]
            if not isinstance(v, numbers.Integral) or isinstance(v, (bool, np.bool_)):
                raise bad(name, f"{v!r} ({type(v).__name__}); expected an integer in [{lo:,}, {hi:,}]")
            if not lo <= v <= hi:
                raise bad(name, f"{int(v):,}; expected an integer in [{lo:,}, {hi:,}]")
    if "device" in values and values["device"] not in DEVICES:
        raise bad("device", f"{values['device']!r}; expected one of {', '.join(DEVICES)}")
    if "order" in values and values["order"] not in ORDERS:
        raise bad("order", f"{values['order']!r}; expected one of {', '.join(ORDERS)}")
    if "dtype_bytes" in values and values["dtype_bytes"] not in (2, 4):
        raise bad("dtype_bytes", f"{values['dtype_bytes']!r}; expected 4 (float32) or 2 (float16)")
    n = values.get("nodes")
    if n is not None and values.get("rows") is not None and values["rows"] > n:
        raise bad("rows", f"{values['rows']:,} stored rows; expected at most the {n:,} nodes")
    if n is not None and values.get("entries") is not None and values["entries"] > n * (n - 1):
        raise bad("entries", f"{values['entries']:,}; a graph store of {n:,} nodes holds at most {n * (n - 1):,} "
                             "entries (self-loops are dropped at ingest)")


def _degrees(mean: float, seed: int) -> np.ndarray:
    """A power-law degree sample of ``SAMPLE`` nodes with the given mean (1 + Pareto(2) weights)."""
    w = 1.0 + np.random.default_rng(seed).pareto(2.0, SAMPLE)
    return w * (mean / w.mean())


def sizes_problem(nodes: int, entries: int, features: int, hops: int, rows: int | None = None,
                  operators: int = 1, index_bytes: int | None = None, weighted: bool = False,
                  dtype_bytes: int = 4, order: str = "known", x_tile: int = FEATURE_TILE_COLUMNS, seed: int = 0,
                  machine_memory: int | None = None) -> Problem:
    """The :class:`~gnnprep.precompute.plan.Problem` of a store of these sizes. ``rows``: rows
    stored (``--rows labeled``: the splits' size; None: every node). ``order``: "known" (kept in
    the store, the copy then written by the first streamed run), "copy" (the ordered copy already
    beside the store), "none" (found first). ``machine_memory``: bytes of memory of the machine the
    run will have, page cache included (None: this machine's, :func:`gnnprep.core.memory.machine_memory`);
    a streamed S larger than what the plan leaves of it is re-read from the disk on every pass.
    ``x_tile``: columns per chunk of X, as ingest writes it (the default)."""
    n, m = int(nodes), int(entries)
    if machine_memory is None:
        machine_memory = memory_of_this_machine() or 0
    pruned = rows is not None and rows < n
    hop_entries, last = (), 0
    if pruned and hops >= 1 and n:
        deg = _degrees(m / n, seed)
        stored = np.random.default_rng(seed + 1).choice(SAMPLE, max(1, round(SAMPLE * rows / n)), replace=False)
        scale = m / deg.sum()
        hop_entries = tuple(int(e * scale) for e in pruned_hop_entries(deg, stored, hops))
        last = int(pruned_last_inputs(deg, stored) * n / SAMPLE) if hops > 1 else 0
    state = {"known": "build", "copy": "present", "none": "find"}[order]
    return Problem(num_nodes=n, num_entries=m, num_features=features, hops=hops, operators=operators,
                   out_rows=n if rows is None else int(rows), index_bytes=index_bytes or (4 if n < 2**31 else 8),
                   weighted=weighted, out_itemsize=dtype_bytes, order_known=order != "none", hop_entries=hop_entries,
                   last_inputs=last, ordered_copy=state, x_tile=x_tile, machine_memory=int(machine_memory))


def plan_for_sizes(nodes: int, entries: int, features: int, hops: int, memory_budget: int,
                   rows: int | None = None, device: str = "cpu", baseline_rss: int = 300 << 20,
                   reorder: str = "auto", warn=None, **problem) -> dict:
    """The plan (as ``precompute --dry-run --json`` gives it) for a store of these sizes under
    ``memory_budget`` bytes, and why the node order and pruning are or are not used. Keyword
    arguments beyond these go to :func:`sizes_problem`. The profile is this machine's
    (``gnnprep calibrate``) or the built-in defaults (a damaged one is said through ``warn``).
    Sizes out of :data:`LIMITS` raise :class:`ArgumentError` naming the argument (see
    :func:`check_sizes`); a budget no plan fits is not an error here: ``plan`` is None and
    ``error`` says the least budget."""
    check_sizes(nodes=nodes, entries=entries, features=features, hops=hops, memory_budget=memory_budget,
                rows=rows, device=device,
                **{k: v for k, v in problem.items() if k in ("operators", "machine_memory", "order", "dtype_bytes")})
    p = sizes_problem(nodes, entries, features, hops, rows, **problem)
    if device != "cpu":
        p = dataclasses.replace(p, device=device, hop_entries=(), last_inputs=0, ordered_copy="")
    prof = load_profile(device, warn)
    try:
        plan = choose_plan(p, memory_budget, prof, baseline_rss)
    except GnnprepError as e:
        least = e.least_budget if hasattr(e, "least_budget") else least_budget(p, prof, baseline_rss, memory_budget)
        return {"plan": None, "error": str(e), "least_budget": least, "hop_entries": list(p.hop_entries),
                "profile": prof.measured}
    plan, why = decide_order(plan, p, prof, 1 / 3, reorder, memory_budget)
    m = max(1, p.num_entries)
    if p.hop_entries:
        k = hops
        pruning = (f"used (S {'resident' if plan.s_resident else 'streamed'}): hop {k} computes the {p.out_rows:,} "
                   f"stored rows (~{100 * p.hop_entries[-1] / m:.1f}% of the entries)" +
                   (f", hop {k - 1} ~{p.last_inputs:,} rows (~{100 * p.hop_entries[-2] / m:.0f}%)" if k > 1 else ""))
    else:
        pruning = "not used: " + ("every row is stored" if rows is None or rows >= nodes else "device " + device)
    from gnnprep.core.memory import machine_memory

    machine = problem.get("machine_memory") or machine_memory()
    if warn is not None and machine and plan.predicted_peak + baseline_rss > machine:
        warn(f"the predicted peak, {format_size(plan.predicted_peak + baseline_rss)} with the process's baseline, "
             f"is more than the machine's {format_size(machine)} of memory: the run would swap or be killed; "
             "lower --memory-budget")
    return {"plan": plan.to_dict(), "predicted_seconds": plan.predicted_seconds,
            "predicted_peak_bytes": plan.predicted_peak, "hop_entries": list(p.hop_entries),
            "decisions": {"order": why, "pruning": pruning}, "profile": prof.measured}


def summary_lines(res: dict) -> list[str]:
    """The human summary of a :func:`plan_for_sizes` result with a plan (what ``gnnprep plan`` prints)."""
    p = res["plan"]
    return [
        f"plan: b={p['b']} c={p['c']} (width {p['width']}), S {'resident' if p['s_resident'] else 'streamed'}, "
        f"order {'used' if p['reorder'] else 'not used'}; predicted peak {p['predicted_peak'] / 2**30:.2f} GiB "
        f"of a {p['budget'] / 2**30:.2f} GiB budget, predicted {res['predicted_seconds'] / 60:.1f} min "
        f"({math.ceil(res['predicted_seconds'])} s)",
        f"node order: {res['decisions']['order']}",
        f"pruning: {res['decisions']['pruning']}",
        f"(profile: {res['profile']})",
    ]


def main(argv=None) -> None:
    """``python -m gnnprep.precompute.sizing ...``: the alias of ``gnnprep plan ...`` (same options,
    output and exit codes), kept for the commands in older notes. The command line is not imported
    here (a stage never imports a later one): the same options are read by the same library
    functions, with the command contract's exits (0; 1 and one ``Error:`` line for a budget no plan
    fits; 2 and one ``Error:`` line for a refused option)."""
    import argparse

    from gnnprep.core.sizes import parse_size

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            self.exit(2, f"Error: {message.splitlines()[0]}\n")

    ap = Parser(prog="python -m gnnprep.precompute.sizing", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--entries", required=True, help="stored entries of the CSR (symmetrised)")
    ap.add_argument("--features", required=True)
    ap.add_argument("--hops", default="3")
    ap.add_argument("--rows", default="all", help="all, or the rows stored (--rows labeled: the splits' size)")
    ap.add_argument("--memory-budget", default=None)
    ap.add_argument("--operators", default="1")
    ap.add_argument("--weighted", action="store_true")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--order", choices=list(ORDERS), default="known")
    ap.add_argument("--device", choices=list(DEVICES), default="cpu")
    ap.add_argument("--machine-memory", default=None,
                    help="memory of the machine the run will have, page cache included (default: this one's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        sizes = dict(nodes=parse_count(a.nodes, "--nodes"), entries=parse_count(a.entries, "--entries"),
                     features=parse_count(a.features, "--features"), hops=parse_count(a.hops, "--hops"),
                     rows=None if a.rows.strip().lower() == "all" else parse_count(a.rows, "--rows"),
                     operators=parse_count(a.operators, "--operators"),
                     memory_budget=None if a.memory_budget is None else parse_size(a.memory_budget, "--memory-budget"),
                     machine_memory=None if a.machine_memory is None else parse_size(a.machine_memory,
                                                                                     "--machine-memory"))
        sizes["memory_budget"] = default_budget(a.device, sizes["memory_budget"])
        check_sizes(option_names=True, device=a.device, order=a.order, **sizes)
    except GnnprepError as e:
        ap.exit(2, f"Error: {str(e).splitlines()[0]}\n")
    res = plan_for_sizes(sizes.pop("nodes"), sizes.pop("entries"), sizes.pop("features"), sizes.pop("hops"),
                         sizes.pop("memory_budget"), sizes.pop("rows"), a.device, weighted=a.weighted,
                         dtype_bytes=2 if a.dtype == "float16" else 4, order=a.order,
                         warn=lambda m: print(f"Warning: {m}", file=sys.stderr), **sizes)
    if res["plan"] is None:
        ap.exit(1, f"Error: {res['error']}\n")
    print(json.dumps(json_safe(res)) if a.json else "\n".join(summary_lines(res)))


def default_budget(device: str, given: int | None) -> int:
    """The budget to plan for: ``given``, else on the CPU this machine's default (half the free RAM,
    as ``gnnprep precompute`` takes it); a GPU plan needs it given (this machine's GPU, if any, is not
    the question)."""
    if given is not None:
        return given
    if device != "cpu":
        raise OptionError("--memory-budget", f"is needed with --device {device}: the GPU memory to plan for")
    from gnnprep.core.sizes import default_host_budget

    return default_host_budget()


if __name__ == "__main__":
    main()
