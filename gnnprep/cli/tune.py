"""``gnnprep tune MODEL FEATURES -o TUNE_DIR --grid SPEC``."""

from __future__ import annotations

import click

from gnnprep.core.errors import OptionError
from gnnprep.precompute.operators import parse_channels
from gnnprep.train.config import CHECKS, MAX_LAYERS, NORMALIZE, int_check, layers_problem, unused_options
from gnnprep.train.tune import TuneConfig, format_params, format_value, option_name, parse_grid
from gnnprep.train.tune import tune as run_tune

from .common import Progress, budget_option, device_option, emit, json_option, parsed_by, quiet_option, warn

# fixed train options (None: not given, so the trial keeps TrainConfig's default); names as in train
FIXED_OPTIONS = [
    click.option("--hops", type=click.IntRange(min=0), help="K (default: the artifact's regime, as in train)."),
    click.option("--operator", "operators", callback=parsed_by(parse_channels),
                 help="Channels to read, comma-separated."),
    click.option("--hidden", type=int, callback=parsed_by(CHECKS["hidden"])),
    click.option("--layers", type=int, callback=parsed_by(int_check("--layers", 1, MAX_LAYERS))),
    click.option("--dropout", type=float, callback=parsed_by(CHECKS["dropout"])),
    click.option("--input-dropout", type=float, callback=parsed_by(CHECKS["input_dropout"])),
    click.option("--alpha", type=float, callback=parsed_by(CHECKS["alpha"])),
    click.option("--dprate", type=float, callback=parsed_by(CHECKS["dprate"])),
    click.option("--pool", type=click.Choice(["concat", "max"])),
    click.option("--lr", type=float, callback=parsed_by(CHECKS["lr"])),
    click.option("--weight-decay", type=float, callback=parsed_by(CHECKS["weight_decay"])),
    click.option("--batch-size", type=click.IntRange(min=1)),
    click.option("--eval-batch-size", type=click.IntRange(min=1)),
    click.option("--epochs", type=click.IntRange(min=1)),
    click.option("--patience", type=click.IntRange(min=0)),
    click.option("--select", type=click.Choice(["loss", "acc"])),
    click.option("--normalize-features", type=click.Choice(list(NORMALIZE))),
    click.option("--evaluator", type=click.Choice(["auto", "ogb", "plain"])),
    device_option(None),
]


def fixed_options(f):
    """Every fixed train option, each defaulting to None (not given)."""
    for option in reversed(FIXED_OPTIONS):
        f = option(f)
    return f


def _check(config: TuneConfig) -> None:
    """config.check(), with a refused option value (``--grid``, ``--lr``, ...) as a usage error; so is
    a fixed option or grid key the model would ignore (``--pool`` for lc-gcn; a grid over ``alpha`` for
    mlp would train the same model once per value)."""
    try:
        config.check()
    except OptionError as e:
        raise click.BadParameter(e.message, param_hint=f"'{e.option}'") from None
    in_grid = {name for name, _ in config.grid}
    # (lc-jknet's fixed --layers with --hops in the grid: checked for each point below)
    per_point = config.model == "lc-jknet" and "hops" in in_grid
    for option, why in unused_options(config.model, [(k, v) for k, v in config.fixed.items()
                                                     if not (k == "layers" and per_point)]):
        raise click.BadParameter(why, param_hint=f"'{option}'")
    for name, values in config.grid:
        if name == "layers":   # whether a model can have them depends on --hops: checked for each point below
            continue
        for option, why in unused_options(config.model, [(name, v) for v in values])[:1]:
            raise click.BadParameter(f"{option_name(name)}: {why}", param_hint="'--grid'")
    if "layers" in in_grid or ("hops" in in_grid and "layers" in config.fixed):
        for p in config.points():   # layers the model cannot have (sgc: 1; lc-jknet: its hops)
            setting = {**config.fixed, **p}
            why = layers_problem(config.model, setting.get("layers"), setting.get("hops"))
            if why:
                where = format_params(p) + ("" if "layers" in p else f" with --layers {setting['layers']}")
                raise click.BadParameter(f"{where}: {why}", param_hint="'--grid'")


def _pct(v, sd) -> str:
    return "n/a" if v is None else f"{100 * v:.2f} ± {100 * (sd or 0):.2f}"


def _lines(d: dict, seeds: int) -> list[str]:
    """The table: one row per grid point (the chosen one marked), then the chosen point's report."""
    keys = list(d["chosen"])
    cells = [[format_value(t["params"][k]) for k in keys] for t in d["trials"]]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    head = "  ".join(k.rjust(w) for k, w in zip(keys, widths))
    lines = [f"{d['model']}: {len(cells)} grid points × {seeds} seeds, chosen on validation accuracy "
             f"({d['resumed_trials']} trials resumed, {d['jobs']} jobs × {d['threads']} threads)",
             f"   {head}  {'valid acc':>14}  {'epochs':>7}"]
    for i, (t, row) in enumerate(zip(d["trials"], cells)):
        mark = "*" if i == d["chosen_index"] else " "
        values = "  ".join(c.rjust(w) for c, w in zip(row, widths))
        lines.append(f"{mark}  {values}  {_pct(t['valid_acc'], t['valid_acc_std']):>14}  {t['epochs']:>7.0f}")
    r = d["report"]
    chosen = ", ".join(f"{k}={format_value(v)}" for k, v in d["chosen"].items())
    lines.append(f"chosen {chosen}: test {_pct(r['test_acc'], r['test_acc_std'])}, "
                 f"valid {_pct(r['valid_acc'], r['valid_acc_std'])} ({r['runs']} seeds, {r['epochs']:.0f} epochs per run)")
    lines.append(f"tune folder {d['tune_dir']} ({d['seconds']:.1f} s); chosen run folder {r['run_dir']}")
    return lines


@click.command()
@click.argument("model")
@click.argument("features", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "tune_dir", required=True, type=click.Path(file_okay=False),
              help="Tune folder: tune.json and trials/ (rerun the same command to resume).")
@click.option("--grid", "grid", required=True, callback=parsed_by(parse_grid), metavar="SPEC",
              help="Values to try: 'lr=0.2,0.05;weight-decay=1e-5,1e-4' (keys: train options without '--').")
@click.option("--seeds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Runs per grid point (seed + 1000 on), scored by mean validation accuracy.")
@click.option("--report-seeds", type=click.IntRange(min=1), default=10, show_default=True,
              help="Fresh runs of the chosen point (seed on), reported as test mean ± std.")
@click.option("--jobs", type=click.IntRange(min=0), default=1, show_default=True,
              help="Trials at once (0: as many as fit the memory budget and the CPUs).")
@budget_option("Memory for all trials together; caps --jobs (default: half the free RAM).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="torch threads per trial (default: CPUs // jobs).")
@click.option("--seed", type=int, default=0, show_default=True, callback=parsed_by(CHECKS["seed"]),
              help="Base seed: the reported runs use seed + r.")
@fixed_options
@json_option
@quiet_option
def tune(model, features, tune_dir, grid, seeds, report_seeds, jobs, memory_budget, threads, seed, as_json, quiet,
         **fixed):
    """Choose MODEL's settings on validation accuracy over a grid; report the choice's test accuracy."""
    fixed = {name: v for name, v in fixed.items() if v is not None}
    config = TuneConfig(model=model, grid=grid, fixed=fixed, seed=seed, seeds=seeds, report_seeds=report_seeds,
                        jobs=jobs, memory_budget=memory_budget, threads=threads)
    _check(config)
    progress = Progress(quiet)
    try:
        report = run_tune(features, tune_dir, config, progress)
    finally:
        progress.close()
    for note in report.warnings:
        warn(quiet, note)
    d = report.to_dict()
    emit(as_json, d, _lines(d, seeds))

