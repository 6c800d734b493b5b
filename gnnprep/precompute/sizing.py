"""Plan a precompute from sizes alone, before any data is downloaded (issue 24): "how long will
papers100M take on a machine with B GiB?".

:func:`plan_for_sizes` builds the planner's :class:`~gnnprep.precompute.plan.Problem` from the
counts (nodes, stored entries, feature columns, hops, stored rows) and returns the plan
:func:`gnnprep.precompute.run.prepare_job` would make, with the same reasons for the node order
and the pruning of ``--rows labeled``. What a store would tell it is assumed: the degrees follow
a power law (1 + Pareto(2) node weights scaled to the mean degree, as ``benchmarks/bench_scale.py``
generates; they set how many entries the pruned hops read), ids are arbitrary, and the order is
kept in the store (as ``gnnprep ingest`` keeps it) or, with ``order="none"``, must be found.

From the shell (the same numbers, no data needed)::

    python -m gnnprep.precompute.sizing --nodes 111059956 --entries 3.2e9 --features 128 \\
        --hops 3 --rows 1.6M --memory-budget 8GiB

(``--entries``: stored entries of the symmetrised CSR, about twice the directed edges.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.core.memory import machine_memory as memory_of_this_machine
from gnnprep.graph.store import FEATURE_TILE_COLUMNS
from gnnprep.precompute.plan import (
    Problem,
    choose_plan,
    decide_order,
    pruned_hop_entries,
    pruned_last_inputs,
)
from gnnprep.precompute.profile import load_profile

SAMPLE = 1 << 20   # nodes drawn to estimate the pruned hops' entries


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
                   reorder: str = "auto", **problem) -> dict:
    """The plan (as ``precompute --dry-run --json`` gives it) for a store of these sizes under
    ``memory_budget`` bytes, and why the node order and pruning are or are not used. Keyword
    arguments beyond these go to :func:`sizes_problem`. The profile is this machine's
    (``gnnprep calibrate``) or the built-in defaults."""
    p = sizes_problem(nodes, entries, features, hops, rows, **problem)
    if device != "cpu":
        p = dataclasses.replace(p, device=device, hop_entries=(), last_inputs=0, ordered_copy="")
    prof = load_profile(device)
    try:
        plan = choose_plan(p, memory_budget, prof, baseline_rss)
    except GnnprepError as e:
        return {"plan": None, "error": str(e), "hop_entries": list(p.hop_entries), "profile": prof.measured}
    plan, why = decide_order(plan, p, prof, 1 / 3, reorder, memory_budget)
    m = max(1, p.num_entries)
    if p.hop_entries:
        k = hops
        pruning = (f"used (S {'resident' if plan.s_resident else 'streamed'}): hop {k} computes the {p.out_rows:,} "
                   f"stored rows (~{100 * p.hop_entries[-1] / m:.1f}% of the entries)" +
                   (f", hop {k - 1} ~{p.last_inputs:,} rows (~{100 * p.hop_entries[-2] / m:.0f}%)" if k > 1 else ""))
    else:
        pruning = "not used: " + ("every row is stored" if rows is None or rows >= nodes else "device " + device)
    return {"plan": plan.to_dict(), "predicted_seconds": plan.predicted_seconds,
            "predicted_peak_bytes": plan.predicted_peak, "hop_entries": list(p.hop_entries),
            "decisions": {"order": why, "pruning": pruning}, "profile": prof.measured}


def _count(text: str) -> int:
    t = text.strip().lower().replace("_", "").replace(",", "")
    mult = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}.get(t[-1:], 1)
    return int(round(float(t.rstrip("kmgb")) * mult))


def main(argv=None) -> None:
    from gnnprep.core.sizes import parse_size

    ap = argparse.ArgumentParser(prog="python -m gnnprep.precompute.sizing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", required=True, type=_count)
    ap.add_argument("--entries", required=True, type=_count, help="stored entries of the CSR (symmetrised)")
    ap.add_argument("--features", required=True, type=int)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--rows", type=_count, default=None, help="rows stored (--rows labeled: the splits' size)")
    ap.add_argument("--memory-budget", required=True)
    ap.add_argument("--operators", type=int, default=1)
    ap.add_argument("--weighted", action="store_true")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--order", choices=["known", "copy", "none"], default="known")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--machine-memory", default=None,
                    help="memory of the machine the run will have, page cache included (default: this one's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = plan_for_sizes(a.nodes, a.entries, a.features, a.hops, parse_size(a.memory_budget), a.rows, a.device,
                         operators=a.operators, weighted=a.weighted, dtype_bytes=2 if a.dtype == "float16" else 4,
                         order=a.order,
                         machine_memory=None if a.machine_memory is None else parse_size(a.machine_memory))
    if a.json:
        print(json.dumps(res))
        return
    if res["plan"] is None:
        raise SystemExit(f"Error: {res['error']}")
    p = res["plan"]
    print(f"plan: b={p['b']} c={p['c']} (width {p['width']}), S {'resident' if p['s_resident'] else 'streamed'}, "
          f"order {'used' if p['reorder'] else 'not used'}; predicted peak {p['predicted_peak'] / 2**30:.2f} GiB, "
          f"predicted {res['predicted_seconds'] / 60:.1f} min ({math.ceil(res['predicted_seconds'])} s)")
    print(f"node order: {res['decisions']['order']}")
    print(f"pruning: {res['decisions']['pruning']}")
    print(f"(profile: {res['profile']})")


if __name__ == "__main__":
    main()
