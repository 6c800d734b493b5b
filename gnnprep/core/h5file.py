"""HDF5 files being written, and what a failed write leaves: one error, the file closed, no crash.

A write that fails (a full disk, a quota, the file-size limit of ``ulimit -f``) fails again when
the file is closed: HDF5 flushes its caches then, and its dataset objects flush theirs as Python
frees them, so a writer that only re-raised printed an "Exception ignored" traceback per dataset,
its close raised a RuntimeError without errno, and the interpreter's exit then crashed in h5py's
deallocation (SIGSEGV, exit 139), its one ``Error:`` line lost among them. Here:

- :func:`writing` opens a file for writing and, when a write in the block fails, :func:`abandon`\\ s
  it: the file's descriptor is pointed at ``/dev/null`` (``dup2``), so the close's flush is written
  nowhere and succeeds (a file with a half-closed object is left open instead: see :func:`abandon`).
  The caller removes the file.
- :func:`close` closes a file kept open across steps (a resumable partial output): a failed flush
  abandons it and raises the write's error, as an OSError with its errno;
  :func:`close_after_failure` does so while another exception is on its way, raising nothing.
- :func:`put` creates a dataset and flushes it while it is held (every writer's datasets made from
  an array in one call).
- :func:`record_dealloc_failures` (the command line and :func:`writing` install it) keeps h5py's failures while it
  frees an object out of the unraisable-error printout and remembers them: :func:`writing` and
  :func:`close` raise a remembered failure of their file, so a cache flush that failed while no
  exception was on its way cannot end in a file closed as if complete.

h5py gives a failed write's OSError the system's errno (28 ENOSPC, 27 EFBIG, 122 EDQUOT); a failure
at close comes as a RuntimeError whose message carries ``errno = N``, read by :func:`write_errno`.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from contextlib import contextmanager
from typing import Iterator

_ERRNO = re.compile(r"errno = (\d+)")
_FILENAME = re.compile(r"filename = '([^']*)'")
# h5py's failed writes while it freed an object (record_dealloc_failures), as (errno, message): never
# the exception itself, whose traceback holds the frame of the object being freed (keeping it past
# the deallocation crashed the interpreter's exit)
_failures: list[tuple[int, str]] = []
_broken_files: set[str] = set()   # the files (absolute paths; '' where unnamed) such a failure was of
_abandoned: list = []   # files left open, pointed at /dev/null (abandon)
_left_broken = False   # such a failure happened: HDF5 kept the object's id, which its exit handler would close


def write_errno(e: BaseException) -> int | None:
    """The system errno of a failed HDF5 (or plain) write, or None when ``e`` is not one."""
    if isinstance(e, OSError) and e.errno:
        return e.errno
    if isinstance(e, (OSError, RuntimeError)):
        m = _ERRNO.search(str(e))
        if m:
            return int(m.group(1))
    return None


def as_os_error(e: BaseException) -> BaseException:
    """``e`` as an OSError carrying its errno when it is a failed write without one (HDF5's close
    raises RuntimeError); anything else unchanged."""
    code = write_errno(e)
    if code is None or (isinstance(e, OSError) and e.errno == code):
        return e
    return OSError(code, os.strerror(code))


def abandon(f) -> None:
    """Close ``f`` (an h5py File whose writes failed) with nothing more written: its descriptor is
    pointed at /dev/null first, so the close's flush goes nowhere. Where one of its objects already
    failed to close (h5py freed it during a failed write: HDF5 keeps its id half closed, and closing
    the file decrements it again, a crash in ``H5FO_top_decr``), the file is not closed at all: it is
    kept, pointed at /dev/null, until the process ends (:func:`left_broken`). Never raises; the
    caller removes the file."""
    name = _name(f)
    try:
        if not f.id.valid:
            return
        fd = f.id.get_vfd_handle()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except Exception:  # noqa: BLE001 - a driver without a descriptor: its close is tried as it is
        pass
    if _broken(name):
        _abandoned.append(f)   # never freed: its close would crash
        return
    try:
        f.close()
    except Exception:  # noqa: BLE001 - abandoned: what its close says no longer matters
        _mark_left_broken()


def close(f) -> None:
    """Close ``f`` (an h5py File being written), raising a write that failed (at this close, or while
    one of its objects was freed) as an OSError with its errno; the file is closed either way. The
    caches are flushed first, while a failure still leaves a file that can be abandoned: after a
    failed close h5py's handle is no longer safe to touch."""
    name = _name(f)
    if _broken(name):   # one of its objects failed to close as it was freed: touching the file crashes
        failed = _take_failure(name)
        abandon(f)
        raise failed if failed is not None else OSError(errno.EIO, os.strerror(errno.EIO))
    try:
        f.flush()
    except (OSError, RuntimeError) as e:
        if write_errno(e) is None:
            raise
        abandon(f)
        _take_failure(name)
        raise as_os_error(e) from None
    try:
        f.close()
    except (OSError, RuntimeError) as e:
        _mark_left_broken()   # the handle is not touched again
        raise as_os_error(e) from None
    failed = _take_failure(name)
    if failed is not None:
        raise failed


def close_after_failure(f) -> None:
    """Close ``f`` while another exception is on its way (an interrupt keeps a resumable partial file,
    so it is flushed as usual): never raises, and a flush that fails abandons the file."""
    if _broken(_name(f)):
        abandon(f)
        return
    try:
        f.flush()
    except Exception:  # noqa: BLE001 - the exception on its way is the one to report
        abandon(f)
        return
    try:
        f.close()
    except Exception:  # noqa: BLE001 - (after a failed close the handle is not touched again)
        _mark_left_broken()
    _take_failure(_name(f))


def _broken(name: str) -> bool:
    """Whether an object of the file ``name`` failed to close while h5py freed it."""
    return "" in _broken_files or bool(name) and os.path.abspath(name) in _broken_files


def _mark_left_broken() -> None:
    global _left_broken
    _left_broken = True


@contextmanager
def writing(path, mode: str = "w", **kwargs) -> Iterator:
    """``h5py.File(path, mode, **kwargs)`` for the block; closed on success (:func:`close`: a failed
    flush raises); on a failed write abandoned (:func:`abandon`) and the failure raised as an OSError
    with its errno; on any other exception closed as usual where it can be
    (:func:`close_after_failure`)."""
    import h5py

    record_dealloc_failures()
    f = h5py.File(path, mode, **kwargs)
    try:
        yield f
    except BaseException as e:
        if write_errno(e) is not None:
            abandon(f)
        else:   # an interrupt, say: a resumable partial file is flushed as usual
            close_after_failure(f)
        _take_failure(str(path))
        converted = as_os_error(e)
        if converted is e:
            raise
        raise converted from None
    close(f)


def put(group, name: str, **kwargs):
    """``group.create_dataset(name, **kwargs)``, flushed before it is returned. A small dataset's data
    waits in its own sieve buffer until the dataset is flushed or closed; written as a temporary
    (``f.create_dataset(name, data=a)`` unassigned), it was flushed only as h5py freed it, where a
    failed write is no exception but a half-closed id (the module's docstring), on which the
    abandoned file's close, or HDF5's exit handler, crashed a program that had caught the error.
    Flushed here, the failure is raised while the caller's frame holds the dataset, so it is freed
    only after :func:`writing` has pointed the file at /dev/null."""
    ds = group.create_dataset(name, **kwargs)
    ds.flush()
    return ds


def _name(f) -> str:
    try:
        return f.filename
    except Exception:  # noqa: BLE001 - a closed file has no name to give
        return ""


def _take_failure(name: str) -> OSError | None:
    """The first remembered dealloc failure of the file ``name`` (all of them forgotten), as an OSError."""
    mine = [f for f in _failures if _failure_file(f[1]) in ("", os.path.abspath(name))]
    for f in mine:
        _failures.remove(f)
    return OSError(mine[0][0], os.strerror(mine[0][0])) if mine else None


def _failure_file(message: str) -> str:
    """The absolute path of the file a failure's message names ('' where it names none)."""
    m = _FILENAME.search(message)
    return os.path.abspath(m.group(1)) if m else ""


def record_dealloc_failures() -> None:
    """Install a ``sys.unraisablehook`` that remembers, instead of printing, a failed write raised
    while h5py frees one of its objects (what a failed write leaves: see the module's docstring);
    every other unraisable error goes to the hook that was there. Idempotent."""
    previous = sys.unraisablehook
    if getattr(previous, "_gnnprep_h5", False):
        return

    def hook(u) -> None:
        e = u.exc_value
        if write_errno(e) is not None and "write" in str(e) and "h5py" in repr(u.object) + str(u.err_msg or ""):
            _mark_left_broken()
            _broken_files.add(_failure_file(str(e)))
            if len(_failures) < 16:
                _failures.append((write_errno(e), str(e)))
            return
        previous(u)

    def excepthook(kind, value, tb) -> None:
        # Cython prints such a failure's full traceback through sys.excepthook first, then hands it
        # to the unraisable hook above
        if write_errno(value) is not None and _in_dealloc(tb):
            return
        previous_excepthook(kind, value, tb)

    previous_excepthook = sys.excepthook
    hook._gnnprep_h5 = True
    sys.unraisablehook = hook
    sys.excepthook = excepthook


def left_broken() -> bool:
    """Whether a failed write left an object HDF5 could not close (recorded by the hook of
    :func:`record_dealloc_failures`). HDF5's own exit handler closes every id still open and crashed
    (SIGSEGV in ``H5D_close``) on such a dataset, whose file was closed since: a process that ends
    after one ends with ``os._exit``, past the C library's exit handlers (the command line does)."""
    return _left_broken


def _in_dealloc(tb) -> bool:
    """Whether a traceback passes through h5py's deallocation of an object."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name.endswith(("_dealloc", "__dealloc__")) and "h5py" in code.co_filename:
            return True
        tb = tb.tb_next
    return False
