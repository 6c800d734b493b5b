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


class Interrupted(BaseException):
    """Raised in the main thread on SIGTERM so that ``finally`` blocks remove temporary files."""
