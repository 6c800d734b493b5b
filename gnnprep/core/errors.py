"""The exceptions the command line turns into ``Error: ...`` and exit code 1, or, for an option's
refused value, into a usage error (exit 2)."""


class GnnprepError(Exception):
    """A failure the user can fix: bad input, a missing file, a budget that is too small.

    The message is one line that names the file and the line or field at fault and says what was
    expected. Anything else that escapes the library is a bug.
    """


class OptionError(GnnprepError):
    """A GnnprepError about one command-line option's value: ``option`` names it (``--memory-budget``)
    and ``message`` says what is wrong without the name, so the command line can turn a value refused
    before any work into a usage error about that option (exit 2) without parsing the text.
    ``str()`` stays ``option + sep + message``, the one line every other caller sees."""

    def __init__(self, option: str, message: str, sep: str = " "):
        super().__init__(f"{option}{sep}{message}")
        self.option, self.message, self.sep = option, message, sep

    def __reduce__(self):
        # rebuilt from its fields when a trial's worker process sends it back (args hold the whole text)
        return type(self), (self.option, self.message, self.sep)


class ArgumentError(GnnprepError, ValueError, TypeError):
    """A GnnprepError about one argument of a Python API call (``nodes``, ``hops``,
    ``memory_budget``, ...): ``argument`` names it and ``message`` says what is wrong and what was
    expected. Also a ValueError and a TypeError, so code that catches what Python itself raises for
    a bad argument catches it too. Never a silent coercion: a float where an integer is expected is
    refused, not truncated. ``str()`` is one line, ``"<where>: <argument>: <message>"`` (where:
    the file the call reads, when there is one)."""

    def __init__(self, argument: str, message: str, where: str | None = None):
        super().__init__(f"{where}: {argument}: {message}" if where else f"{argument}: {message}")
        self.argument, self.message, self.where = argument, message, where

    def __reduce__(self):
        return type(self), (self.argument, self.message, self.where)


def shown(value) -> str:
    """``value`` as an ArgumentError message shows what it got: a short repr and its type."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} ({type(value).__name__})"


class Interrupted(BaseException):
    """Raised in the main thread on SIGTERM so that ``finally`` blocks remove temporary files."""


_RAISED: list[int] = []   # the signals the command line's handler raised an interrupt for, this command


def note_interrupt(signum: int) -> None:
    """The command line's signal handler (gnnprep.cli) raises an interrupt for ``signum`` now."""
    _RAISED.append(signum)


def clear_interrupts() -> None:
    """A command starts: no signal yet."""
    _RAISED.clear()


def interrupt_noted() -> bool:
    """Whether the command line's handler has raised an interrupt during this command."""
    return bool(_RAISED)


def check_interrupted() -> None:
    """Raise the interrupt again for a signal whose exception did not end the command.

    The handler's exception surfaces wherever Python checks for signals, and code that is not
    gnnprep's can drop it: seen inside numpy.random's import (an ``abc.register`` call in a compiled
    module's initialisation; ~1 run in 20 with SIGTERM 0.1 s after start), after which the command
    ran to the end and exited 0 with its output written (or replaced: numba's compiled dispatcher
    turned it into "ImportError: numba._devicearray failed to import", which the command line
    reports as the interrupt, gnnprep.cli). Called where an output is created or put in place, at
    each progress step of the command line's bars and before a command prints its result, so such a
    signal still ends the command there, with status 130 and nothing new on disk. (When the exception went its way, the process is
    already unwinding and the record is never read again.)"""
    if _RAISED:
        import signal

        raise KeyboardInterrupt if _RAISED[0] == signal.SIGINT else Interrupted()
