"""Options and rendering shared by every command."""

from __future__ import annotations

import json
import sys
import threading

import click

from gnnprep.core.errors import GnnprepError, Interrupted, OptionError, check_interrupted
from gnnprep.core.output import json_safe
from gnnprep.core.sizes import format_size, parse_size


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")(f)


def quiet_option(f):
    return click.option("--quiet", "-q", is_flag=True, help="No progress bars or warnings on stderr.")(f)


def parsed_by(parse):
    """A click callback that reads an option's text with ``parse`` (a library function that raises
    GnnprepError): a value it refuses is a usage error (click.BadParameter, exit 2)."""

    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            return parse(value)
        except GnnprepError as e:
            # click names the option already: an OptionError's message is the text without its name
            text = e.message if isinstance(e, OptionError) else str(e)
            raise click.BadParameter(text.splitlines()[0], ctx=ctx, param=param) from None

    return callback


def parse_budget(text: str | None) -> int | None:
    return None if text is None else parse_size(text, "--memory-budget")


def budget_option(help_text: str):
    """``--memory-budget SIZE``, parsed to bytes (None when not given)."""
    return click.option("--memory-budget", "memory_budget", default=None, metavar="SIZE", callback=parsed_by(parse_budget),
                        help=help_text + " e.g. 512MiB, 8GiB, 2G.")


def device_option(default: str = "auto"):
    """``--device auto|cpu|cuda|cuda:<i>`` (checked for form here; for hardware when resolved)."""
    from gnnprep.core.device import CHOICES, check_name

    return click.option("--device", default=default, show_default=True, callback=parsed_by(check_name),
                        help=f"{CHOICES}.")


class Progress:
    """tqdm bars on stderr, one per stage; silent when stderr is not a terminal or with --quiet."""

    def __init__(self, quiet: bool):
        self.enabled = not quiet and sys.stderr.isatty()
        self.bars: dict[str, object] = {}

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if threading.current_thread() is threading.main_thread():
            check_interrupted()  # a long run acts on a signal whose interrupt was dropped at its next step
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(stage)
        if bar is None:
            bar = self.bars[stage] = tqdm(total=total, desc=stage, unit_scale=True, file=sys.stderr, leave=False)
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()


def warn(quiet: bool, message: str) -> None:
    if not quiet:
        click.echo(f"Warning: {message}", err=True)


def emit(as_json: bool, payload: dict, lines: list[str]) -> None:
    """Print a command's result (JSON with ``--json``, non-finite numbers as null), unless a signal
    arrived whose interrupt was dropped on its way (:func:`gnnprep.core.errors.check_interrupted`):
    then the command ends with status 130 instead, printing nothing."""
    try:
        check_interrupted()
    except (KeyboardInterrupt, Interrupted) as e:
        e.as_finished = True  # its outputs are in place by now: gnnprep.cli._interrupted_line
        raise
    if as_json:
        click.echo(json.dumps(json_safe(payload)))
    else:
        click.echo("\n".join(lines))


def size(n: int) -> str:
    return format_size(n)


__all__ = ["GnnprepError", "json_option", "quiet_option", "budget_option", "device_option", "parsed_by", "Progress",
           "warn", "emit", "size"]
