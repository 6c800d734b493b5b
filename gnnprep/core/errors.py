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
