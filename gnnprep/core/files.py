"""Opening a file that may not be what its name says: a cache, a profile, a record or a user's file
can be a named pipe (an open for reading would block), a device (``/dev/zero`` reads forever) or
far larger than such a file ever is. One opener for all of them, so each reader only says what the
problem means for it."""

from __future__ import annotations

import os
import stat


class NotRegularFile(ValueError):
    """The path is a pipe, a device, a socket or a folder."""


class TooLarge(ValueError):
    """The file has more bytes than its reader accepts (``size``)."""

    def __init__(self, size: int):
        super().__init__(f"{size} bytes")
        self.size = size


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` that is not a regular file is, for a message: "a named
    pipe", "a character device", ...; "not a regular file" for anything else."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path, max_bytes: int):
    """``path`` opened for binary reading, checked before a byte is read: FileNotFoundError when
    absent, :class:`NotRegularFile` for anything but a regular file (a named pipe is opened without
    blocking and never read), :class:`TooLarge` above ``max_bytes``, OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(str(path))
        if st.st_size > max_bytes:
            raise TooLarge(st.st_size)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, max_bytes: int) -> bytes:
    """The bytes of ``path`` through :func:`open_regular`; :class:`TooLarge` also when the file grew
    past ``max_bytes`` while it was read."""
    with open_regular(path, max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(len(data))
    return data
