"""Measured run times for ``--hag auto``: the same precompute timed with and without a HAG.

Issue 33 (build 4) asks ``--hag auto`` to decide with measured terms, among them the reuse of a
cached HAG across later runs. The planner's model of a hop through a HAG (:func:`gnnprep.precompute.
plan.plan_with_hag`) was fitted on 8M-entry graphs at d = 64; on the cliques64 graph at 32M entries
and d = 128 it predicted the HAG 2% slower where it measured 8-22% faster (a rewired entry cost 0.93
plain ones, not the modelled 1.12 plus its aggregation rows: the column blocks' cache fit, which the
profile does not model). So a run records what it measured: every precompute on the CPU kernel
whose store has a cached HAG beside it (``<store>.hag.h5``, what ``--hag auto`` uses), or that was
given ``--hag``, keeps its best wall seconds per variant (plain, or this HAG by its identity) and per
setting (:func:`settings_key`: the graph, hops, rows, operators, dtype, budget, blocks, threads) in
``<store>.hag-runs.json``. Once both variants of the same setting are measured, ``--hag auto`` runs the
faster (:func:`measured_choice`); before that, the model decides. A record is advisory like a
calibration profile: one that cannot be read or written is ignored (never a failed run).

The variants are compared on runs made close in time where there are such (:data:`PAIR_WINDOW_S`:
the best of each among the runs of the same half hour, kept as the HAG variant's ``pair``), since a
machine's speed drifts over hours: on the shared 2-core VM the plain run's best of an evening (0.84 s)
against a HAG measured the next evening (1.19 s) chose plain where, measured side by side, the HAG
ran faster (2.21 against 2.48 s wall; cliques64 at 8M entries). Variants measured only hours apart
are compared by their bests.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gnnprep.core.files import read_regular

MEMO_MAX_BYTES = 1 << 20     # a few hundred settings
MAX_SETTINGS = 256           # the oldest dropped beyond this
RECENT_RUNS = 8              # (UTC seconds, seconds) kept per variant
PAIR_WINDOW_S = 1800.0       # runs of both variants within this many seconds are compared with each other


def memo_path(store_path) -> Path:
    """``<store>.hag-runs.json`` beside the graph store."""
    return Path(store_path).with_suffix(".hag-runs.json")


def settings_key(graph_fingerprint: str, config, backend: str) -> str:
    """What a run's time depends on besides the variant: the graph, the hops' settings, the
    ``--memory-budget`` given (its plan; None: half the free memory, whatever it is that day), the
    blocks asked for and the kernel threads."""
    import numba

    return json.dumps({"graph": graph_fingerprint, "hops": config.hops, "rows": config.rows,
                       "operators": list(config.operators), "dtype": config.dtype, "backend": backend,
                       "normalize": config.normalize_features, "budget": config.memory_budget,
                       "blocks": list(config.blocks) if config.blocks else None,
                       "threads": numba.get_num_threads()}, sort_keys=True)


def hag_variant(summary: dict, relabels: bool = False) -> str:
    """A HAG's variant name: its graph and counts and when it was made (a hard link or copy of the
    same file is the same variant; a HAG searched again is another), and whether the run relabels it
    to the node order (``relabels``: no relabelled copy kept beside it). A run that relabels the HAG
    pays for it and may plan otherwise (S streamed where the relabelling needs the room), so its time
    says nothing of a run that reads the kept copy: a HAG copied beside the store without its
    relabelled copy was taken by the times of runs through the original, which had one, and ran
    slower than both variants measured (8.0 s against 6.1 / 6.3 s, the papers100M shape at 1/40)."""
    keys = ("graph_fingerprint", "num_agg", "transfers_hag", "aggregations_hag", "levels", "created_utc")
    return "hag:" + ",".join(str(summary.get(k)) for k in keys) + (",relabelled by the run" if relabels else "")


def _load(path: Path) -> dict:
    try:
        data = json.loads(read_regular(path, MEMO_MAX_BYTES).decode())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def best_seconds(store_path, key: str) -> dict[str, float]:
    """{variant: best wall seconds} measured for ``key`` (empty where none or unreadable)."""
    runs = _load(memo_path(store_path)).get(key)
    if not isinstance(runs, dict):
        return {}
    return {v: float(s["best"]) for v, s in runs.items()
            if isinstance(s, dict) and isinstance(s.get("best"), (int, float)) and s["best"] > 0}


def record(store_path, key: str, variant: str, seconds: float, now: float | None = None) -> None:
    """Keep ``seconds`` as ``variant``'s time for ``key``: its best, its count, its recent runs with
    their UTC time (``now``, default the clock) and, for each HAG variant measured with the plain run
    within :data:`PAIR_WINDOW_S` before ``now``, the pair of their bests there (written to a temporary
    file and renamed; any failure is ignored: a record is advisory)."""
    now = round(time.time() if now is None else float(now), 1)
    path = memo_path(store_path)
    data = _load(path)
    runs = data.pop(key, None)
    runs = runs if isinstance(runs, dict) else {}
    old = runs.get(variant) if isinstance(runs.get(variant), dict) else {}
    best = old.get("best")
    runs[variant] = {"best": round(min(seconds, best) if isinstance(best, (int, float)) and best > 0 else seconds, 4),
                     "runs": int(old.get("runs", 0) or 0) + 1,
                     "recent": (_recent(old) + [[now, round(seconds, 4)]])[-RECENT_RUNS:]}
    if isinstance(old.get("pair"), dict):
        runs[variant]["pair"] = old["pair"]
    for v in ([x for x in runs if x.startswith("hag:")] if variant == "plain" else [variant]):
        pair = _pair(runs.get("plain"), runs.get(v), now)
        if pair is not None and isinstance(runs.get(v), dict):
            runs[v]["pair"] = pair
    data[key] = runs   # (the most recent setting last: the oldest are dropped first)
    while len(data) > MAX_SETTINGS:
        data.pop(next(iter(data)))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _recent(entry) -> list[list[float]]:
    """A variant's recent runs [[utc, seconds], ...] as recorded (the malformed ones left out)."""
    runs = entry.get("recent") if isinstance(entry, dict) else None
    if not isinstance(runs, list):
        return []
    return [[float(r[0]), float(r[1])] for r in runs
            if isinstance(r, list) and len(r) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                           for x in r) and r[1] > 0]


def _pair(plain, hag, now: float) -> dict | None:
    """{"plain", "hag", "utc"}: each variant's best among its runs of the :data:`PAIR_WINDOW_S` before
    ``now``, where both ran then; else None."""
    p = [s for t, s in _recent(plain) if 0 <= now - t <= PAIR_WINDOW_S]
    h = [s for t, s in _recent(hag) if 0 <= now - t <= PAIR_WINDOW_S]
    if not p or not h:
        return None
    return {"plain": min(p), "hag": min(h), "utc": now}


def measured_choice(store_path, key: str, variant: str) -> tuple[bool, str] | None:
    """(use the HAG, why) where both the plain run and ``variant`` were measured for ``key``, else None:
    by their bests among runs made within :data:`PAIR_WINDOW_S` of each other where there were such,
    else by their best runs."""
    name = memo_path(store_path).name
    runs = _load(memo_path(store_path)).get(key)
    pair = runs.get(variant, {}).get("pair") if isinstance(runs, dict) and isinstance(runs.get(variant), dict) else None
    if isinstance(pair, dict) and all(isinstance(pair.get(k), (int, float)) and not isinstance(pair.get(k), bool)
                                      and pair[k] > 0 for k in ("plain", "hag")):
        plain, hag = float(pair["plain"]), float(pair["hag"])
        how = f"best runs within {PAIR_WINDOW_S / 60:.0f} min of each other, {name}"
    else:
        best = best_seconds(store_path, key)
        if "plain" not in best or variant not in best:
            return None
        plain, hag = best["plain"], best[variant]
        how = f"best runs, {name}"
    return hag < plain, (f"measured with these settings: {hag:.2f} s through the cached HAG against {plain:.2f} s "
                         f"without ({how})")
