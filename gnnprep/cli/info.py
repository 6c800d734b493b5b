"""``gnnprep info FILE``."""

from __future__ import annotations

from pathlib import Path

import click

from .common import emit, json_option, size


def _graph_lines(d: dict) -> list[str]:
    splits = ", ".join(f"{k} {v:,}" for k, v in d["splits"].items()) or "none"
    deg = d["degree"]
    lines = [
        f"{d['file']}: gnnprep graph store (format version {d['format_version']}, source {d['source']})",
        f"  nodes          {d['num_nodes']:,}",
        f"  stored edges   {d['num_edges']:,} ({'symmetric' if d['symmetric'] else 'directed'}"
        + (", weighted: /adj/weights)" if d.get("weighted") else ")"),
        f"  features       {d['num_features']} ({d['feature_dtype'] or 'none'})",
        f"  classes        {d['num_classes']} ({d['labeled_nodes']:,} labeled nodes)",
        f"  splits         {splits}",
        f"  degree         min {deg['min']}, mean {deg['mean']:.2f}, max {deg['max']} "
        f"({d['isolated_nodes']:,} isolated)",
        f"  size on disk   {size(d['size_bytes'])}",
    ]
    o = d.get("node_order")
    if o and o["kind"] == "none":
        lines.insert(-1, f"  node order     none ({o.get('why', '')})")
    elif o:
        share = (f"entries gathering X's first 65,536 rows: {o['prefix_share_before']:.0%} -> "
                 f"{o['prefix_share_after']:.0%}" if "prefix_share_after" in o and "prefix_share_before" in o else
                 f"entries within 4,096 ids of their row: {o.get('near_share_before', 0):.0%} -> "
                 f"{o.get('near_share_after', 0):.0%}")
        lines.insert(-1, f"  node order     {o['kind']} ({share}; found in {o.get('seconds', 0):.1f} s at ingest)")
        if o.get("why"):
            lines.insert(-1, f"    chosen       {o['why']}")
    if d.get("node_types"):
        lines.insert(2, "  node types     " + ", ".join(f"{k} {v:,}" for k, v in d.get("nodes_per_type", {}).items()))
    return lines


def _features_lines(d: dict) -> list[str]:
    p = d["plan"]
    splits = ", ".join(f"{k} {v:,}" for k, v in d["splits"].items()) or "none"
    o = d.get("node_order")
    order = f"{o['kind']}, {'used' if o['used'] else 'dropped'}" if o else "stored"
    return [
        f"{d['file']}: gnnprep features (format version {d['format_version']})",
        f"  hops           0..{d['hops']} of {', '.join(d['operators'])}",
        f"  rows           {d['rows']:,} ({d['row_selection']}) x {d['num_features']} features, {d['dtype']}",
        f"  classes        {d['num_classes']}; splits {splits}",
        f"  plan           a={p['a']} b={p['b']} c={p['c']} on {p['device']}, hop seconds "
        + ", ".join(f"{s:.2f}" for s in (d['hop_seconds'] or [])) + f"; node order {order}",
        f"  size on disk   {size(d['size_bytes'])}" + (f" + {size(d['shards_bytes'])} in {len(d['shards'])} shards"
                                                     if d.get("shards") is not None else ""),
    ] + [f"  shard          {s['file']} (rank {s['rank']}, columns {s['columns'][0]}..{s['columns'][1] - 1}, "
         f"{size(s['bytes_on_disk'])}, present)" for s in d.get("shards") or []] + _operator_source_lines(d)


def _operator_source_lines(d: dict) -> list[str]:
    """Each --operator-file operator: where it came from, what the planner made of it, its source."""
    lines = []
    for name, o in (d.get("operator_sources") or {}).items():
        if not isinstance(o, dict):
            continue
        lines.append(f"  operator {name}: {o.get('function')} from {o.get('file')} (sha256 {str(o.get('sha256'))[:16]}..., "
                     f"reduce {o.get('reduce')}, loop {o.get('loop')}); {o.get('plan')}")
        text = o.get("function_source", o.get("source", ""))  # (the whole file is in the attribute)
        lines += ["    | " + line for line in str(text).rstrip("\n").splitlines()]
    return lines


@click.command()
@click.argument("file", type=click.Path(dir_okay=True))
@json_option
def info(file, as_json):
    """Describe a gnnprep artifact (graph store, HAG, HDG, features), a cache a run keeps beside one, a
    training run's model.pt or checkpoint.pt (given its run folder: the model, else the checkpoint), or a
    tune folder (its grid, trials finished and best point)."""
    from gnnprep.info import describe

    d = describe(file)
    if "cache_of" in d:
        state = "current" if d["current"] else f"stale ({d['stale_because']}): not used; the next run that needs it rewrites it"
        lines = [f"{d['file']}: {d['what']} (a cache, safe to delete; format {d['format']} version {d['format_version']})",
                 f"  made from      {d['cache_of'] or 'unknown'}",
                 f"  state          {state}"]
        share = (f" (entries within 4,096 ids of their row: {d['near_share_before']:.0%} -> {d['near_share_after']:.0%})"
                 if isinstance(d.get("near_share_before"), float) and isinstance(d.get("near_share_after"), float) else "")
        lines.append(f"  node order     {d.get('kind')}{share}")
        lines += [f"  {label:<14} {d[k]:,}" for k, label in (("num_nodes", "nodes"), ("num_edges", "stored edges"),
                                                             ("num_agg", "aggregation nodes")) if isinstance(d.get(k), int)]
        lines.append(f"  size on disk   {size(d['size_bytes'])}")
    elif d["format"] in ("gnnprep.model", "gnnprep.checkpoint"):
        lines = _run_file_lines(d)
    elif d["format"] == "gnnprep.tune":
        lines = _tune_lines(d)
    elif d["format"] == "gnnprep.graph":
        lines = _graph_lines(d)
    elif d["format"] == "gnnprep.features":
        lines = _features_lines(d)
    elif d["format"] == "gnnprep.hag":
        lines = [f"{d['file']}: gnnprep HAG (format version {d['format_version']}, {d['aggregate']} aggregation)",
                 f"  aggregation nodes {d['num_agg']:,} in {d['levels']} levels (capacity {d['capacity']:,})",
                 f"  aggregations   {d['aggregations_graph']:,} -> {d['aggregations_hag']:,} ({d['aggregation_ratio']:.2f}x)",
                 f"  transfers      {d['transfers_graph']:,} -> {d['transfers_hag']:,} ({d['transfer_ratio']:.2f}x)",
                 f"  search seconds {_seconds(d['search_seconds'])}; peak {size(d['peak_bytes']) if d.get('peak_bytes') else 'n/a'}; "
                 f"size on disk {size(d['size_bytes'])}"]
    elif d["format"] == "gnnprep.hdg":
        lines = [f"{d['file']}: gnnprep HDG (format version {d['format_version']}, {d['spec']}, seed {d['seed']})",
                 f"  channels       {', '.join(d['channels'])}"]
        lines += [f"  level {lv['level']:<15} {lv['kind']}, {lv['instances']:,} under {lv['parents']:,} parents, "
                  f"{size(lv['bytes'])}" for lv in d["levels"]]
        lines.append(f"  size           {size(d['hdg_bytes'])} = {d['size_vs_graph_store']:.3f}x the graph store")
    else:
        lines = [f"{d['file']}: {d['format']} (format version {d['format_version']}), {size(d['size_bytes'])}"]
    emit(as_json, d, lines)


# the settings a run file's description shows (every one is in --json's "config")
_RUN_SETTINGS = ("hops", "operators", "hidden", "layers", "dropout", "lr", "weight_decay", "batch_size", "epochs",
                 "patience", "seed")


def _run_file_lines(d: dict) -> list[str]:
    """A training run's model.pt or checkpoint.pt (gnnprep.train.run_folder.describe_run_file)."""
    c = d["config"]
    settings = ", ".join(f"{k.replace('_', '-')} {','.join(c[k]) if isinstance(c[k], list) else c[k]}"
                         for k in _RUN_SETTINGS if c.get(k) is not None)
    if d["format"] == "gnnprep.model":
        lines = [f"{d['file']}: {d['what']} (format {d['format']} version {d['format_version']}; "
                 "gnnprep.train.load_model(path) rebuilds it)",
                 f"  model          {d['model']} (seed {d['seed']}), best epoch {d['best_epoch']}: valid "
                 f"{_pct(d['valid_acc'])}, test {_pct(d['test_acc'])}",
                 f"  parameters     {d['parameters']:,} in {d['tensors']} tensors"]
    else:
        cur = d["current"]
        lines = [f"{d['file']}: {d['what']} (format {d['format']} version {d['format_version']}; the same "
                 f"gnnprep train command with -o {Path(d['file']).parent} --resume continues it)",
                 f"  model          {d['model']}, {c.get('runs')} run(s) of up to {c.get('epochs')} epochs"
                 + (f" on {d['world_size']} ranks" if d["world_size"] != 1 else ""),
                 f"  progress       {d['finished_runs']} run(s) finished"
                 + (f"; run {cur['run'] + 1 if isinstance(cur['run'], int) else cur['run']} at epoch {cur['epoch']}"
                    if cur else "; none in progress")]
    return lines + [f"  trained on     {d['features']} (graph {d['graph_fingerprint']})",
                    f"  settings       {settings or 'none recorded'}",
                    f"  size on disk   {size(d['size_bytes'])}"]


def _values(v) -> str:
    """A grid's values or a fixed option's value as --grid writes them (a channel list as a+b)."""
    if isinstance(v, list):
        return ",".join("+".join(map(str, x)) if isinstance(x, list) else str(x) for x in v)
    return str(v)


def _tune_lines(d: dict) -> list[str]:
    """A tune folder (gnnprep.train.tune.folder.describe)."""
    grid = "; ".join(f"{k}={_values(v)}" for k, v in d["grid"].items()) or "none"
    points = 1
    for v in d["grid"].values():
        points *= len(v) if isinstance(v, list) else 1
    done = ("unknown (its config cannot make its trials)" if d["trials_total"] is None else
            f"{d['trials_finished']} of {d['trials_total']} finished")
    state = ("finished" if d["finished"] else
             f"not finished: the same gnnprep tune command with -o {d['file']} resumes it")
    lines = [f"{d['file']}: {d['what']} (format {d['format']} version {d['format_version']}; {state})",
             f"  model          {d['model']} on {d['features']} (graph {d['graph_fingerprint']})",
             f"  grid           {grid} ({points} points x {d['seeds']} seeds, then {d['report_seeds']} report seeds)",
             "  fixed          " + (", ".join(f"{k} {_values(v)}" for k, v in d["fixed"].items()) or "none"),
             f"  trials         {done}"]
    b = d["best"]
    if b is None:
        lines.append("  best           none yet")
    else:
        params = ", ".join(f"{k}={_values(v)}" for k, v in b["params"].items())
        if b["chosen"]:
            lines.append(f"  chosen         {params}: valid {_pm(b['valid_acc'], b['valid_acc_std'])}, "
                         f"test {_pm(b['test_acc'], b['test_acc_std'])} ({b['runs']} report seeds)")
        else:
            lines.append(f"  best so far    {params}: valid {_pm(b['valid_acc'], b['valid_acc_std'])} "
                         f"({b['runs']} seeds; the test accuracy comes with the report of the chosen point)")
        lines.append(f"  run folder     {b['run_dir']}")
    return lines


def _pm(value, sd) -> str:
    """Mean ± std of an accuracy as percentages; n/a without one (no test split)."""
    return "n/a" if value is None else f"{_pct(value)} ± {_pct(sd)}"


def _pct(value) -> str:
    """An accuracy as a percentage (two decimals); anything else (none: no test split) as it is."""
    return f"{100 * value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _seconds(value) -> str:
    """Seconds as a reader wants them (two decimals); anything else as it is."""
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
