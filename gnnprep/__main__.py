"""The ``gnnprep`` command's entry point: the ``gnnprep`` script (``[project.scripts]`` in
pyproject.toml names :func:`main`) and ``python -m gnnprep`` (how torchrun starts every rank:
``torchrun ... -m gnnprep ...``). A rank that has left its process group cleanly skips the
interpreter's teardown of torch there: :func:`gnnprep.core.distributed.exit_now`.

The first SIGINT/SIGTERM is honoured from the first instant gnnprep's code runs (issue 32, line
13): importing the command line (click, numpy, h5py and every command's module) takes ~0.15 s, and
before :func:`gnnprep.cli.main` installs its handlers a SIGTERM killed the process by the signal
(exit -15) and a SIGINT printed a KeyboardInterrupt traceback. So this module imports nothing but
``os`` and ``signal`` (the ``gnnprep`` package's own ``__init__`` is all that runs before
it), and :func:`main`'s first statements install handlers that end the process at once with the
documented status (130) and one ``Error:`` line. Nothing has been read or written yet, so there is
nothing to remove. :func:`gnnprep.cli.main` then replaces them with the command's own (which remove
temporary files and keep resumable outputs). What cannot be covered is the interpreter's own start
before this module runs (~20-40 ms: Python's initialisation, ``site``, the package's
``__init__``)."""

import os
import signal

EXIT_INTERRUPTED = 130   # docs/cli.md: "130 when interrupted (SIGINT/SIGTERM)"
_LINE = b"Error: interrupted; no output was written\n"


_SILENT = False   # a torchrun rank other than 0 (set by main): rank 0 alone speaks


def _interrupted_at_start(signum, frame):
    """SIGINT/SIGTERM before the command line's handlers are installed: one line, exit 130, no
    traceback (``os._exit``: an exception raised here would surface inside some module's import)."""
    if not _SILENT:
        try:
            os.write(2, _LINE)
        except OSError:
            pass
    os._exit(EXIT_INTERRUPTED)


_interrupted_at_start.gnnprep_start_handler = True   # how gnnprep.cli.main knows it may replace it


def install_start_handlers() -> None:
    """The start-up handlers (main thread only). SIGINT only where Python's own handler is in place:
    a command started with SIGINT ignored (``nohup``, a background job of a shell) keeps it ignored."""
    signal.signal(signal.SIGTERM, _interrupted_at_start)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_at_start)


def check_address_space_at_start() -> None:
    """Under a small ``ulimit -v`` the first import of numpy can already fail: OpenBLAS reserves a
    buffer per core and, refused, prints its own line and exits (seen on a 16-core machine at
    400 MiB). So the limit is checked here, before numpy is imported (:mod:`gnnprep.core.memory`
    imports only ``sys``): one ``Error:`` line, exit 1."""
    from gnnprep.core.errors import GnnprepError
    from gnnprep.core.memory import check_address_space

    try:
        check_address_space()
    except GnnprepError as e:
        os.write(2, f"Error: {e}\n".encode())
        raise SystemExit(1) from None


def main():
    """Install the start-up handlers, check the address space, then import and run the command line."""
    global _SILENT
    try:
        from gnnprep.core.distributed import speaks  # the standard library and gnnprep.core.errors only

        _SILENT = not speaks()
        install_start_handlers()
    except KeyboardInterrupt:
        # a SIGINT while the handlers were being installed (Python's own handler raised it: a traceback
        # from inside signal.signal, seen once in a clean-clone test run): as if it came just after
        _interrupted_at_start(signal.SIGINT, None)
    check_address_space_at_start()
    from gnnprep.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    main()
