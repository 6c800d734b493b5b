"""``gnnprep train MODEL FEATURES -o RUN_DIR``; under ``torchrun`` one rank of a DistributedDataParallel
job (:func:`gnnprep.train.trainer.train` with a :class:`gnnprep.core.distributed.Dist`): only rank 0 prints the
summary or the JSON object, and a failure is one ``Error:`` line from rank 0."""

from __future__ import annotations

import time
from pathlib import Path

import click

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.precompute.operators import parse_channels
from gnnprep.train.config import CHECKS, MAX_LAYERS, MODEL_SETTINGS, NORMALIZE, TrainConfig, int_check, unused_options

from . import ranks
from .common import Progress, budget_option, device_option, emit, json_option, parsed_by, quiet_option, warn

_D = TrainConfig()


def _say_other_files(run_dir: Path, quiet: bool) -> None:
    """A warning when the run folder already holds files that are not a run's: its files go beside them."""
    from gnnprep.train.run_folder import RUN_FILES

    try:
        others = sorted(p.name for p in run_dir.iterdir() if p.name not in RUN_FILES) if run_dir.is_dir() else []
    except OSError:
        return
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        warn(quiet, f"{run_dir}: already holds other files ({shown}); the run's files are written beside them")


def _given(ctx: click.Context, config: TrainConfig) -> list[tuple[str, object]]:
    """(field, value) of each model-specific setting set on the command line (not left at its default),
    and of --layers and --hops (whether a model can have the layers depends on the hops)."""
    return [(field, getattr(config, field)) for field in ("operators", "layers", "hops", *MODEL_SETTINGS)
            if ctx.get_parameter_source(field) not in (None, click.core.ParameterSource.DEFAULT)]


def _fresh_run_dir(model: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{model}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return str(path)


@click.command(cls=ranks.RankCommand)
@click.argument("model")
@click.argument("features", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "run_dir", default=None, type=click.Path(),
              help="Run folder for metrics.json, model.pt, checkpoint.pt, curves.png (default: runs/<model>-<time>).")
@click.option("--hops", type=click.IntRange(min=0), default=None,
              help="K (default: small regime the model's paper K, at most FEATURES'; large regime every hop).")
@click.option("--operator", "operators", default=None, callback=parsed_by(parse_channels), help="Channels to read, comma-separated (default: the first; sign: all).")
@click.option("--hidden", type=int, default=None, callback=parsed_by(CHECKS["hidden"]),
              help="Hidden width (default: 64 small regime, 256 large; at most 2^20; a model that cannot fit the "
                   "device's free memory is refused).")
@click.option("--layers", type=int, default=None, callback=parsed_by(int_check("--layers", 1, MAX_LAYERS)),
              help=f"MLP layers, 1..{MAX_LAYERS} (default: lc-gprgnn 4 (small regime 2), lc-gcn/mlp 2, sign 2 (small 1); "
                   "sgc 1 and lc-jknet one per hop, fixed).")
@click.option("--dropout", type=float, default=None, callback=parsed_by(CHECKS["dropout"]),
              help="Default 0.5 (small regime: sgc 0, sign 0.8).")
@click.option("--input-dropout", type=float, default=None, callback=parsed_by(CHECKS["input_dropout"]),
              help="Default 0 (sign small regime 0.6).")
@click.option("--alpha", type=float, default=_D.alpha, show_default=True, callback=parsed_by(CHECKS["alpha"]),
              help="lc-gprgnn: γ_k initialised α(1−α)^k.")
@click.option("--dprate", type=float, default=_D.dprate, show_default=True, callback=parsed_by(CHECKS["dprate"]),
              help="lc-gprgnn: dropout on each hop's MLP output.")
@click.option("--pool", type=click.Choice(["concat", "max"]), default=_D.pool, show_default=True, help="lc-jknet pooling.")
@click.option("--lr", type=float, default=None, callback=parsed_by(CHECKS["lr"]), help="Default 0.01 (sgc small regime 0.2).")
@click.option("--weight-decay", type=float, default=None, callback=parsed_by(CHECKS["weight_decay"]),
              help="Default: small regime 5e-4 (sgc 5e-5), large 0.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Default: small regime every training row at once, large 4096. Under torchrun: rows per rank "
                   "(a step takes batch-size x ranks rows).")
@click.option("--eval-batch-size", type=click.IntRange(min=1), default=_D.eval_batch_size, show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Default: small regime 1000 (sgc 100), large 2000.")
@click.option("--patience", type=click.IntRange(min=0), default=None,
              help="Stop after this many epochs without a better validation score (0: never; default: small regime "
                   "100 (sgc 0), large 300).")
@click.option("--select", type=click.Choice(["loss", "acc"]), default=_D.select, show_default=True,
              help="Best epoch by validation loss or accuracy.")
@click.option("--normalize-features", type=click.Choice(list(NORMALIZE)), default=None,
              help="Scale each row of each hop to unit L1 (row) or L2 norm (default: small regime row, unless "
                   "precompute normalised X; large none).")
@click.option("--recompute", is_flag=True, help="Recompute hidden activations in backward (less memory, more compute).")
@budget_option("Memory for features held in RAM; above it, batches stream from HDF5 (default: half the free RAM).")
@device_option(_D.device)
@click.option("--seed", type=int, default=_D.seed, show_default=True, callback=parsed_by(CHECKS["seed"]),
              help="Run r uses seed + r (0..2^63-1).")
@click.option("--runs", type=click.IntRange(min=1), default=_D.runs, show_default=True, help="Seeded runs; reports mean ± std.")
@click.option("--eval-every", type=click.IntRange(min=1), default=_D.eval_every, show_default=True)
@click.option("--checkpoint-every", type=float, default=_D.checkpoint_every, show_default=True,
              callback=parsed_by(CHECKS["checkpoint_every"]),
              help="Seconds between checkpoints (0: every epoch).")
@click.option("--evaluator", type=click.Choice(["auto", "ogb", "plain"]), default=_D.evaluator, show_default=True,
              help="auto: ogb's Evaluator for ogbn-* artifacts, plain accuracy otherwise.")
@click.option("--threads", type=int, default=0, show_default=True, callback=parsed_by(CHECKS["threads"]),
              help="CPU threads for torch, 0..1024 (0: torch's default; 1 is faster for small models on a busy machine).")
@click.option("--resume", is_flag=True, help="Continue the run in RUN_DIR from its checkpoint.")
@json_option
@quiet_option
def train(model, features, run_dir, hops, operators, hidden, layers, dropout, input_dropout, alpha, dprate, pool, lr,
          weight_decay, batch_size, eval_batch_size, epochs, patience, select, normalize_features, recompute,
          memory_budget, device, seed, runs, eval_every, checkpoint_every, evaluator, threads, resume, as_json, quiet):
    """Train MODEL (sgc, lc-gcn, lc-jknet, lc-gprgnn, sign, mlp) on a features artifact."""
    config = TrainConfig(model=model, hops=hops, operators=operators,
                         hidden=hidden, layers=layers, dropout=dropout, input_dropout=input_dropout, alpha=alpha,
                         dprate=dprate, pool=pool, lr=lr, weight_decay=weight_decay, batch_size=batch_size,
                         eval_batch_size=eval_batch_size, epochs=epochs, patience=patience, select=select,
                         normalize_features=normalize_features, recompute=recompute,
                         memory_budget=memory_budget, device=device, seed=seed, runs=runs,
                         eval_every=eval_every, checkpoint_every=checkpoint_every, evaluator=evaluator,
                         threads=threads)
    dist = ranks.from_env()
    try:
        config.check()  # a bad model name fails before anything is read
        for option, why in unused_options(model, _given(click.get_current_context(), config)):
            raise OptionError(option, why)   # a setting the model would ignore: a usage error, as ingest's
    except GnnprepError as e:
        if isinstance(e, OptionError):  # an option's value (alone or with another's): a usage error, one line
            if ranks.silent(dist):
                ranks.exit_silently(2)
            raise click.BadParameter(e.message, param_hint=f"'{e.option}'") from None
        if ranks.silent(dist):
            ranks.exit_silently(1)
        raise
    if dist is not None and run_dir is None:
        if ranks.silent(dist):
            ranks.exit_silently(1)
        raise GnnprepError("-o RUN_DIR is required under torchrun (every rank must name the same run folder)")
    progress = Progress(quiet or ranks.silent(dist))  # one set of bars: rank 0's
    try:
        with ranks.rank_job(dist):
            from gnnprep.train.trainer import train as run_train  # torch: imported only when training

            if run_dir is not None and not resume:
                _say_other_files(Path(run_dir), quiet or ranks.silent(dist))
            report = run_train(features, run_dir or _fresh_run_dir(model), config, progress, resume=resume, dist=dist)
    finally:
        progress.close()
    if ranks.silent(dist):
        return  # rank 0 prints the job's result
    s = report.summary()

    def pct(v, sd):
        if v is None:
            return "n/a"
        return f"{100 * v:.2f}" + (f" ± {100 * sd:.2f}" if s["runs"] > 1 else "")

    data = "streamed from HDF5" if s["streaming"] else "in memory"
    # seconds: this invocation's; a resumed run's epochs include those trained before, so their time is said too
    took = (f"resumed: {s['seconds']:.1f} s this time, {sum(r['seconds'] for r in s['per_run']):.1f} s of training "
            "in all" if s["resumed"] else f"{s['seconds']:.1f} s")
    lines = [f"{model}: test accuracy {pct(s['test_acc'], s['test_acc_std'])}, valid {pct(s['valid_acc'], s['valid_acc_std'])} "
             f"({s['runs']} run{'s' if s['runs'] > 1 else ''}, {s['evaluator']} evaluator)",
             f"best epoch {s['best_epoch']}, {s['epochs_run']} epochs, {took} on {s['device']}"
             + (f" x {s['world_size']} ranks" if s["world_size"] > 1 else "") + f", features {data}",
             f"{s['regime']} regime; defaults used: "
             + (", ".join(f"{k.replace('_', '-')} {v}" for k, v in s["defaults"].items()) or "none (all given)"),
             f"run folder {s['run_dir']}"]
    emit(as_json, s, lines)

