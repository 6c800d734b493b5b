"""``gnnprep precompute DATASET -o features.h5 --hops K``.

Under ``torchrun`` (``torchrun --nproc-per-node P -m gnnprep precompute ...``) every process runs
this command as one rank (:mod:`gnnprep.core.distributed`); only rank 0 prints the summary, the JSON
object or the error line, and every rank exits with the same status."""

from __future__ import annotations

import sys

import click

from gnnprep.core.errors import OptionError
from gnnprep.precompute.profile import BUILT_IN

from . import ranks
from .common import Progress, budget_option, device_option, emit, json_option, parsed_by, quiet_option, size, warn


def parse_blocks(text: str) -> tuple[int, int, int] | None:
    if text == "auto":
        return None
    try:
        a, b, c = (int(x) for x in text.split(","))
    except ValueError:
        raise OptionError("--blocks", f"{text!r}: expected auto or three positive integers a,b,c") from None
    if min(a, b, c) < 1:
        raise OptionError("--blocks", f"{text!r}: counts must be positive")
    return a, b, c


def _parse_operators(text: str) -> tuple[str, ...]:
    from gnnprep.precompute.operators import parse_operators

    return parse_operators(text)


@click.command()
@click.argument("dataset")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Features artifact to write.")
@click.option("--hops", type=click.IntRange(min=0), default=3, show_default=True, help="K: write S^k X for k = 0..K.")
@click.option("--operator", "operators", default=None, callback=parsed_by(_parse_operators), help="sym, rw, sym-noloop, norm:a=A,b=B,loop=L (D̃^-a (A + L I) D̃^-b), comma-separated for several channels. Default: sym, or none when --operator-file is given.")
@click.option("--operator-file", "operator_files", multiple=True, metavar="FILE.py:NAME",
              callback=parsed_by(lambda specs: tuple(_spec(s, "--operator-file") for s in specs)),
              help="A user operator: NAME(src_deg, dst_deg, w) returns each edge's coefficient (vectorised numpy; "
                   "optional NAME.reduce = sum|mean|max, NAME.loop = self-loop weight); the channel is NAME. "
                   "Repeat for several.")
@click.option("--blocks", default="auto", show_default=True, callback=parsed_by(parse_blocks), help="auto, or a,b,c (normalisation, edge and column blocks).")
@budget_option("Memory for S and X blocks (default: free device memory, or half the free RAM on CPU).")
@click.option("--rows", type=click.Choice(["all", "labeled"]), default="all", show_default=True, help="Store every node, or the union of the splits.")
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True)
@click.option("--normalize-features", type=click.Choice(["none", "row"]), default="none", show_default=True,
              help="row: scale each row of X to unit L1 norm before propagation (the SGC/GCN/PyG convention); "
                   "recorded in the artifact.")
@device_option()
@click.option("--hag", "hag_path", default=None, type=click.Path(dir_okay=False),
              help="Aggregate through this HAG (from gnnprep hag on the same graph; CPU), or auto: use "
                   "<store>.hag.h5 beside the graph store when the predicted saving pays for it.")
@click.option("--hdg", "hdg_path", default=None, type=click.Path(dir_okay=False),
              help="Also write this HDG's channels of every hop, /channels/<channel>/<k> (from gnnprep hdg; --rows all).")
@click.option("--hdg-reduce", type=click.Choice(["mean", "sum", "max"]), default="mean", show_default=True,
              help="Reduction at the HDG's levels: mean, sum or max (elementwise; an empty parent gives 0, "
                   "and takes no part in a max above it).")
@click.option("--hdg-weight", "hdg_weight", default=None, metavar="FILE.py:NAME",
              callback=parsed_by(lambda spec: _spec(spec, "--hdg-weight")),
              help="Re-weight the HDG's members: NAME(member_deg, root_deg, w) returns each member's weight "
                   "(the --operator-file contract; w is the selector's weight, 1 where it has none).")
@click.option("--reorder", type=click.Choice(["auto", "none", "community", "bfs", "degree", "degree-bucket"]),
              default="auto", show_default=True,
              help="Node order of the computation: community (label-propagation groups), bfs, degree (hubs "
                   "first), degree-bucket, or none; auto uses the order ingest chose for the store (community "
                   "where it brings neighbours near, else hubs first where that pays) when the planner predicts "
                   "it pays (output stays in stored order).")
@click.option("--merge", is_flag=True,
              help="Under torchrun: publish one self-contained file (the shards copied in, then removed) instead "
                   "of virtual datasets over the ranks' shard files.")
@click.option("--dry-run", is_flag=True, help="Print the plan, predicted peak memory and time; compute nothing.")
@click.option("--cache-dir", default=None, help="Where a dataset spec is ingested to (default: beside the source).")
@click.option("--root", default=None, help="Folder holding ogbn_<name>/ data sets.")
@json_option
@quiet_option
def precompute(dataset, output, hops, operators, operator_files, blocks, memory_budget, rows, dtype,
               normalize_features, device, hag_path, hdg_path, hdg_reduce, hdg_weight, reorder, merge, dry_run, cache_dir,
               root, as_json, quiet):
    """Write hop features S^k X (k = 0..K) of DATASET, block-wise within a memory budget."""
    if operators is None:
        operators = () if operator_files else ("sym",)
    # the run's configuration (a PrecomputeConfig, built once the library is imported)
    options = dict(hops=hops, operators=operators, operator_files=tuple(operator_files), rows=rows, dtype=dtype,
                   device=device, memory_budget=memory_budget, blocks=blocks, dry_run=dry_run, hag=hag_path,
                   reorder=reorder, hdg=hdg_path, hdg_reduce=hdg_reduce, hdg_weight=hdg_weight,
                   normalize_features=normalize_features)
    dist = ranks.from_env()
    with ranks.rank_job(dist, start=True):
        # (--merge: a plain run writes one file anyway)
        _precompute(dataset, output, options, merge and dist is not None, cache_dir, root, as_json, quiet, dist)


def _precompute(dataset, output, options: dict, merge, cache_dir, root, as_json, quiet, dist):
    from gnnprep.graph.ingest import IngestConfig, ensure_graph_store
    from gnnprep.graph.sources import SourceOptions
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute as run_precompute

    if dist is None:   # values and conflicts of options no run can use: a usage error before any work (exit 2;
        try:           # under torchrun the ranks' one error line, rank 0's, says it as before)
            PrecomputeConfig(**options).check()
        except OptionError as e:
            raise click.BadParameter(e.message, param_hint=f"'{e.option}'") from None
    progress = Progress(quiet or ranks.silent(dist))  # one set of bars: rank 0's
    try:
        def ensure():
            return ensure_graph_store(dataset, IngestConfig(source=SourceOptions(root=root)), cache_dir, progress)

        # under torchrun rank 0 ingests a dataset spec into the (shared) cache first; the others find it there
        store = ensure() if dist is None else dist.root_first(ensure)
        config = PrecomputeConfig(**options)
        command, say = " ".join(["gnnprep"] + sys.argv[1:]), (lambda message: warn(quiet, message))
        if dist is None:
            report = run_precompute(store, output, config, progress, command=command, warn=say)
        else:
            from gnnprep.precompute.sharded import precompute_sharded

            report = precompute_sharded(store, output, config, dist, merge, progress, command=command, warn=say)
    finally:
        progress.close()
    if ranks.silent(dist):
        return  # rank 0 prints the job's result
    r = report
    p = r.plan
    lines = [f"plan: a={p['a']} b={p['b']} c={p['c']} (width {p['width']}), S {'resident' if p['s_resident'] else 'streamed'}, "
             f"device {p['device']}, budget {size(p['budget'])}; predicted peak {size(p['predicted_peak'])} "
             f"above a {size(p['baseline_rss'])} baseline, predicted {p['predicted_seconds']:.2f} s"
             + _predicted_with(r.predicted_with)]
    if not r.dry_run:
        # above the baseline, as predicted; and the process's peak RSS the run then had (what `time -v`
        # or a cgroup sees, the baseline included)
        measured = size(r.measured_peak_bytes) if r.measured_peak_bytes is not None else "n/a"
        measured += f" above the {size(r.baseline_rss_bytes)} baseline" + (
            f" (the process's peak RSS {size(r.peak_rss_bytes)})" if r.peak_rss_bytes is not None else "")
        hdg = "" if not r.hdg_channels else f"; HDG channels {', '.join(r.hdg_channels)}" + (
            f" in {r.hdg_seconds:.2f} s" if r.hdg_seconds is not None else "")
        lines.insert(0, f"{r.output}: {r.hops + 1} hops x {len(r.operators)} operator(s) ({', '.join(r.operators)}{hdg}), "
                        f"{r.rows:,} rows, {r.dtype}; {r.seconds:.2f} s")
        lines.append(f"measured peak {measured}; hop seconds " + ", ".join(f"{s:.2f}" for s in r.hop_seconds)
                     + (f"; resumed after {r.resumed_units} finished units" if r.resumed_units else ""))
    if r.dry_run and r.decisions:  # why the plan has (or has not) the node order and the pruning
        lines += [f"node order {r.decisions['order']}", f"pruning {r.decisions['pruning']}"]
    if r.reorder is not None:
        o = r.reorder
        lines.append(f"node order: {o['kind']} {'used' if o['used'] else 'dropped'} ({'loaded from its cache' if o.get('cached') else 'found'} in {o['seconds']:.2f} s; "
                     f"entries within 4,096 ids of their row {100 * o['near_share_before']:.1f}% -> "
                     f"{100 * o['near_share_after']:.1f}%)")
    if r.hag is not None:
        lines.append(f"hag: {'used ' + str(r.hag['path']) if r.hag['used'] else 'not used'} ({r.hag['reason']})")
    if getattr(r, "ranks", 1) > 1 and not r.dry_run:
        lines.append(f"{r.ranks} ranks" + ("; shards merged into the file" if r.merged else ", virtual datasets over:"))
        lines += [f"  rank {s['rank']}: {s['file'] if not r.merged else 'columns'} {s['columns'][0]}..{s['columns'][1] - 1}"
                  f" in {s['seconds']:.2f} s" + (" (complete from an earlier run)" if s["skipped"] else "")
                  for s in r.shards if s["file"]]
    emit(as_json, r.to_dict(), lines)


def _predicted_with(told: dict | None) -> str:
    """What the plan line adds of its prediction: that it is another machine's (the built-in profile),
    and how much of X the disk serves."""
    if not told:
        return ""
    notes = []
    x = (told.get("page_cached") or {}).get("x")
    if x is not None and x < 0.5:
        notes.append(f"X {100 * x:.0f}% in the page cache, the rest read from the disk")
    if told.get("profile") == BUILT_IN:
        notes.append("built-in cost profile: `gnnprep calibrate` measures this machine's")
    return f" ({'; '.join(notes)})" if notes else ""


def _spec(spec: str, option: str) -> str:
    """A FILE.py:NAME value, its form checked before any work (exit 2; the file is read by the run)."""
    from gnnprep.precompute.user_operators import check_spec

    check_spec(spec, option)
    return spec
