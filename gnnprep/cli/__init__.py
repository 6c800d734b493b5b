"""The ``gnnprep`` command line: parse, call the library, render. Nothing else lives here.

Contract: stdout carries only the result (a short summary, or one JSON object with ``--json``);
progress and warnings go to stderr; exit 0 on success, 1 with one ``Error: ...`` line for failures
the user can fix, 2 for usage errors.
"""

from __future__ import annotations

import signal
import sys

import click

from gnnprep import __version__
from gnnprep.core.errors import GnnprepError, Interrupted


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
    """The ``gnnprep`` entry point. SIGTERM raises Interrupted (exit 130, temporary files removed,
    resumable outputs kept) while a command runs; once it has finished, SIGTERM and SIGINT are
    blocked, so a late signal cannot kill the exiting interpreter (which restores the default
    handlers while it shuts down): a pending one still exits 130, after the output is complete."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    code, late = 0, False
    try:
        cli.main(prog_name="gnnprep")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except (KeyboardInterrupt, Interrupted):  # after the command, in click's own exit path
        code, late = 130, True
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    if code == 0 and {signal.SIGTERM, signal.SIGINT} & signal.sigpending():
        code, late = 130, True
    sys.stdout.flush()
    if late:
        click.echo("Error: interrupted as the command finished (its output, if any, is complete)", err=True)
    from gnnprep.core.distributed import exit_now

    exit_now(code)  # a torchrun rank that left its group cleanly ends here, without torch's teardown
    sys.exit(code)


from .calibrate import calibrate  # noqa: E402
from .hag import hag  # noqa: E402
from .hdg import hdg  # noqa: E402
from .info import info  # noqa: E402
from .ingest import ingest  # noqa: E402
from .precompute import precompute  # noqa: E402
from .train import train  # noqa: E402
from .tune import tune  # noqa: E402

cli.add_command(ingest)
cli.add_command(info)
cli.add_command(precompute)
cli.add_command(calibrate)
cli.add_command(hag)
cli.add_command(hdg)
cli.add_command(train)
cli.add_command(tune)
