"""The ``gnnprep`` command line: parse, call the library, render. Nothing else lives here.

Contract: stdout carries only the result (a short summary, or one JSON object with ``--json``);
progress and warnings go to stderr; exit 0 on success, 1 with one ``Error: ...`` line for failures
the user can fix, 2 for usage errors.
"""

from __future__ import annotations

import signal

import click

from gnnprep import __version__
from gnnprep.errors import GnnprepError, Interrupted


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.BadParameter as e:
            # a bad option value: exit 2 with one "Error: Invalid value for ..." line (no usage block,
            # which stays for missing options and unknown commands)
            if not isinstance(e, click.MissingParameter):
                e.ctx = None
            raise
        except GnnprepError as e:
            click.echo(f"Error: {str(e).splitlines()[0] if str(e) else 'failed'}", err=True)
            ctx.exit(1)
        except MemoryError:
            click.echo("Error: out of memory; lower --memory-budget or free RAM", err=True)
            ctx.exit(1)
        except (KeyboardInterrupt, Interrupted):
            click.echo("Error: interrupted; no output was written", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gnnprep")
def cli() -> None:
    """Prepare graphs for GNN training: ingest, HAG, HDG, precompute, train."""


def _on_sigterm(signum, frame):
    raise Interrupted()


def main() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)
    cli.main(prog_name="gnnprep")


from .calibrate import calibrate  # noqa: E402
from .hag import hag  # noqa: E402
from .hdg import hdg  # noqa: E402
from .info import info  # noqa: E402
from .ingest import ingest  # noqa: E402
from .precompute import precompute  # noqa: E402
from .train import train  # noqa: E402

cli.add_command(ingest)
cli.add_command(info)
cli.add_command(precompute)
cli.add_command(calibrate)
cli.add_command(hag)
cli.add_command(hdg)
cli.add_command(train)
