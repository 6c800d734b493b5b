"""The one exception type the command line turns into ``Error: ...`` and exit code 1."""


class GnnprepError(Exception):
    """A failure the user can fix: bad input, a missing file, a budget that is too small.

    The message is one line that names the file and the line or field at fault and says what was
    expected. Anything else that escapes the library is a bug.
    """


class Interrupted(BaseException):
    """Raised in the main thread on SIGTERM so that ``finally`` blocks remove temporary files."""
