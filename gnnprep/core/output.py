"""Atomic outputs: a file exists at its final path only when it is complete.

Writers get ``<name>.tmp-<pid>`` in the destination folder; on success it is flushed, fsynced and
``os.replace``d onto the final name; on any exception (including KeyboardInterrupt and SIGTERM) it is
removed. SIGKILL cannot be caught, so leftovers of dead processes are swept the next time anything
writes to the same path.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gnnprep.core.errors import GnnprepError, OptionError, check_interrupted
from gnnprep.core.files import kind_of
from gnnprep.core.sizes import format_size

NAME_MAX = 255   # bytes of one file name on Linux and macOS file systems


def side_name(path: Path, suffix: str, reserve: int = 0) -> str:
    """The name of a file kept beside ``path`` (``<name><suffix>``, then ``reserve`` more bytes such
    as a pid): when that would pass NAME_MAX, the start of the name and a hash of all of it, so an
    output may have any name the file system takes and its side files stay findable."""
    name = path.name + suffix
    if len(name.encode()) + reserve <= NAME_MAX:
        return name
    digest = hashlib.sha256(path.name.encode()).hexdigest()[:16]
    room = NAME_MAX - reserve - len(suffix.encode()) - len(digest) - 1
    start = path.name.encode()[:max(0, room)].decode(errors="ignore")
    return f"{start}~{digest}{suffix}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(folder: Path, prefix: str) -> None:
    """Remove ``<prefix><pid>`` files or folders in ``folder`` whose process no longer exists."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if not entry.name.startswith(prefix):
            continue
        pid = entry.name[len(prefix):]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            _remove(entry)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _fsync_path(p: Path, directory: bool = False) -> None:
    fd = os.open(p, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range():
    """libc's ``sync_file_range`` (Linux), or None where it cannot be had."""
    global _SFR
    if _SFR is False:
        import ctypes
        import ctypes.util
        import sys

        _SFR = None
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _SFR = fn
            except (OSError, AttributeError):
                _SFR = None
    return _SFR


_SFR = False


def start_writeback(path: str | os.PathLike) -> None:
    """Start writing ``path``'s dirty pages to disk now, without waiting for them (Linux; elsewhere
    nothing happens). A writer that calls this after each large piece leaves little for the final
    fsync of :func:`atomic_output`, which would otherwise wait for the whole file at the end (seconds
    for GBs); the disk works while the CPU makes the next piece. Best effort: errors are ignored,
    the fsync still decides."""
    fn = _sync_file_range()
    if fn is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fn(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
    finally:
        os.close(fd)


def check_output_path(path: Path) -> None:
    """GnnprepError unless ``path`` can take an output: its folder exists and is writable, and the
    path is new or a regular file (through symlinks). An output replaces what is there, so a device,
    pipe or socket (``-o /dev/null``, or a twin made with mknod) is refused, never replaced."""
    folder = path.parent
    if not folder.is_dir():
        raise GnnprepError(f"{path}: output folder {folder} does not exist")
    if path.is_dir():
        raise GnnprepError(f"{path}: is a folder; expected a file name for the output")
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None  # a new path (or a dangling symlink, replaced by the file)
    if mode is not None and not stat.S_ISREG(mode):
        raise GnnprepError(f"{path}: is {kind_of(mode)}; expected a regular file or a new path for the output")
    if not os.access(folder, os.W_OK):
        raise GnnprepError(f"{path}: output folder {folder} is not writable")


def refuse_input_as_output(output: str | os.PathLike, inputs) -> None:
    """GnnprepError when ``output`` is one of ``inputs`` (None entries skipped): the same path once
    symlinks are resolved, or the same file (inode) under another name. Writing it would replace an
    input the command is still reading (and, on success, lose it)."""
    out = Path(output)
    for given in inputs:
        if given is None:
            continue
        inp = Path(given)
        same = out.resolve() == inp.resolve()
        if not same and out.exists() and inp.exists():
            try:
                same = os.path.samefile(out, inp)
            except OSError:
                same = False
        if same:
            raise GnnprepError(f"{output}: is also an input of this command ({given}); write the output elsewhere")


# the failed writes a disk without room makes, and what each says
_NO_ROOM = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large"}


def is_disk_full(e: BaseException) -> bool:
    """Whether ``e`` is a write the disk had no room for: no space (ENOSPC), a quota (EDQUOT), or the
    file-size limit (EFBIG: ``ulimit -f``), from a plain write or HDF5's (whose close reports it as a
    RuntimeError with ``errno = N`` in its text: :func:`gnnprep.core.h5file.write_errno`)."""
    from gnnprep.core.h5file import write_errno

    if write_errno(e) in _NO_ROOM:
        return True
    return isinstance(e, OSError) and "No space left on device" in str(e)


def says_no_room(e: BaseException) -> bool:
    """Whether ``e`` is the one-line error :func:`disk_full_error` made (here, or in a worker)."""
    return isinstance(e, GnnprepError) and any(f": {words}" in str(e) for words in _NO_ROOM.values())


def disk_full_error(path: Path, needed: int | None = None, e: BaseException | None = None) -> GnnprepError:
    """The one line for a write to ``path`` the disk had no room for (``e``: the failed write, whose
    errno picks the words; a full disk when None), with the free space and ``needed`` where known."""
    from gnnprep.core.h5file import write_errno

    code = write_errno(e) if e is not None else None
    if code == errno.EFBIG:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        why = (f"the file-size limit of this process (ulimit -f) is {format_size(limit)}"
               if limit != resource.RLIM_INFINITY else "larger than its file system allows")
        return GnnprepError(f"{path}: file too large: {why}")
    free = shutil.disk_usage(path.parent if path.parent.is_dir() else Path.cwd()).free
    need = f"needed ~{format_size(needed)}, " if needed else ""
    return GnnprepError(f"{path}: {_NO_ROOM.get(code, _NO_ROOM[errno.ENOSPC])} ({need}free {format_size(free)})")


def check_free_space(path: str | os.PathLike, needed: int) -> None:
    """Refuse up front when the output's folder has less free space than ``needed`` bytes."""
    path = Path(path).absolute()
    if path.parent.is_dir() and shutil.disk_usage(path.parent).free < needed:
        raise disk_full_error(path, needed)


@contextmanager
def atomic_output(path: str | os.PathLike, inputs=()) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` only if the block succeeds.
    ``inputs``: paths the command reads, which the output must not be (:func:`refuse_input_as_output`).
    A full disk becomes one ``Error: <path>: no space left on device`` (the temporary file removed)."""
    path = Path(path).absolute()
    refuse_input_as_output(path, inputs)
    check_output_path(path)
    check_interrupted()  # a signal whose interrupt was dropped: nothing made yet
    prefix = side_name(path, ".tmp-", reserve=10)
    sweep_stale(path.parent, prefix)
    tmp = path.with_name(f"{prefix}{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        if not tmp.exists():
            raise RuntimeError(f"writer did not create {tmp}")
        _fsync_path(tmp)
        check_interrupted()  # ... and not put in place after one
        os.replace(tmp, path)
        _fsync_path(path.parent, directory=True)
    except BaseException as e:
        _remove(tmp)
        if is_disk_full(e):
            raise disk_full_error(path, e=e) from None
        raise


@contextmanager
def work_folder(near: str | os.PathLike, tmp_dir: str | os.PathLike | None = None) -> Iterator[Path]:
    """A scratch folder for spill files, removed afterwards (and swept if a killed run left one).

    It lives next to the output (same disk, so it has room for what the output will hold) unless
    ``tmp_dir`` is given.
    """
    near = Path(near).absolute()
    base = Path(tmp_dir).absolute() if tmp_dir else near.parent
    if not base.is_dir():
        raise OptionError("--tmp-dir", f"{base}: folder does not exist")
    prefix = "." + side_name(near, ".work-", reserve=11)
    sweep_stale(base, prefix)
    folder = base / f"{prefix}{os.getpid()}"
    _remove(folder)
    try:
        # made inside the try: a signal's exception right after mkdir returned left the folder
        # behind (SIGTERM 0.2 s into an ingest, once in a CI run)
        folder.mkdir()
        yield folder
    finally:
        _remove(folder)


def _key_difference(old, new: str) -> str:
    """What differs between a partial output's key and this run's, in words: the settings named
    where both are JSON objects (``block_entries 14993541, now 5406560``), else "other settings"."""
    import json

    try:
        a, b = json.loads(old), json.loads(new)
    except (TypeError, ValueError):
        return "other settings or inputs"
    if not isinstance(a, dict) or not isinstance(b, dict):
        return "other settings or inputs"
    names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not names:
        return "other settings or inputs"

    def short(v) -> str:
        text = json.dumps(v) if not isinstance(v, str) else v
        return text if len(text) <= 40 else text[:37] + "..."

    shown = [f"{k} {short(a.get(k))}, now {short(b.get(k))}" for k in names[:3]]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return "other settings (" + "; ".join(shown) + more + ")"


class ResumableOutput:
    """An output built in units over a long run that survives crashes and continues.

    The data go to ``<name>.partial`` (HDF5, every dataset allocated up front, so later writes touch
    raw data only and a killed process leaves a readable file) and finished units to
    ``<name>.partial.json``, replaced atomically after the file is flushed. A rerun with the same
    ``key`` continues from there; a different key starts afresh. ``commit`` renames the partial file
    onto the final path. A lock stops two processes from writing the same output. A writer whose
    units are plain files rather than HDF5 datasets keeps them in :meth:`work_dir`
    (``<name>.partial.d``), which belongs to the partial output: kept, resumed and removed with it.
    """

    def __init__(self, path: str | os.PathLike, key: str, inputs=()):
        import fcntl
        import json

        self._json = json
        self.path = Path(path).absolute()
        refuse_input_as_output(self.path, inputs)
        check_output_path(self.path)
        check_interrupted()  # a signal whose interrupt was dropped (see atomic_output)
        self.key = key
        self.partial = self.path.with_name(side_name(self.path, ".partial"))
        self.progress_file = self.path.with_name(side_name(self.path, ".partial.json"))
        self.lock_file = self.path.with_name(side_name(self.path, ".partial.lock"))
        self.work = self.path.with_name(side_name(self.path, ".partial.d"))
        try:
            self._lock = open(self.lock_file, "w")
        except OSError as e:   # (check_output_path passes as root where nothing can be created: /proc)
            raise GnnprepError(f"{self.path}: cannot create files beside the output ({self.lock_file.name}: "
                               f"{e.strerror or e}); expected a writable folder") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise GnnprepError(f"{self.path}: another gnnprep process is writing this output") from None
        self.done: list = []
        self.resumed = False
        # why an interrupted run's partial output found here was not continued (None: none was found),
        # for the command to say before it is removed: its work is lost, which should be no surprise
        self.discarded: str | None = None
        if (self.partial.exists() or self.work.is_dir()) and self.progress_file.exists():
            try:
                state = json.loads(self.progress_file.read_text())
            except ValueError:
                state = {}
            if state.get("key") == key:
                self.done = [tuple(u) for u in state.get("done", [])]
                self.resumed = True
                self.state = state
            else:
                # named as the writer laid it out: the HDF5 file (precompute, hag), the folder of plain
                # files (hdg), or both (ingest: the store and its spills); the state file goes with them
                found = [p for p in (self.partial, self.work) if p.exists()] or [self.partial]
                self.discarded = (f"{' and '.join([str(found[0])] + [p.name for p in found[1:]])}: an interrupted "
                                  f"run's partial output, made with {_key_difference(state.get('key'), key)}, was "
                                  "removed; starting afresh (the same command as then resumes it)")
        if not self.resumed:
            self.discard_partial()
            self.state = {"key": key, "done": []}

    def check_room(self, needed: int) -> None:
        """A fresh output: GnnprepError (and nothing left) unless ``needed`` bytes fit its disk."""
        if self.resumed:
            return
        try:
            check_free_space(self.path, needed)
        except GnnprepError:
            self.close(keep=False)
            raise

    @contextmanager
    def writing(self, needed: int) -> Iterator[None]:
        """The writes of the run, and what a failure leaves: a GnnprepError (the input must change
        before a rerun can succeed, and a changed input changes the key) and a full disk (a partial
        file would keep it full: one ``no space left`` line naming ``needed``) leave nothing; a crash
        or an interrupt keeps the partial output for a rerun to resume — when a unit has finished;
        before the first one it holds nothing a rerun could use, and is removed."""
        try:
            yield
        except GnnprepError:
            self.close(keep=False)
            raise
        except BaseException as e:
            if is_disk_full(e):
                self.close(keep=False)
                raise disk_full_error(self.path, needed, e) from None
            self.close(keep=bool(self.done))
            if self.done and not isinstance(e, OSError):  # said in the interrupted run's one line (gnnprep.cli), so it is not a surprise
                try:
                    e.kept_partial = str(self.partial if self.partial.exists() or not self.work.is_dir() else self.work)
                except AttributeError:
                    pass
            raise

    def discard_partial(self) -> None:
        for p in (self.partial, self.progress_file, self.work):
            _remove(p)

    def restart(self) -> None:
        """Drop what a resumed run found (its partial output and state) and start afresh under the same
        key: the writer found the partial output unusable (a file cut short or missing)."""
        self.discard_partial()
        self.done, self.resumed, self.state = [], False, {"key": self.key, "done": []}

    def work_dir(self) -> Path:
        """The folder of this output's plain-file units (made when first asked for)."""
        self.work.mkdir(exist_ok=True)
        return self.work

    def mark(self, unit: tuple, h5file=None) -> None:
        if h5file is not None:
            h5file.flush()  # a killed process's page cache still reaches the disk; no fsync needed
        self.done.append(tuple(unit))
        self.state["done"] = [list(u) for u in self.done]
        tmp = self.path.with_name(side_name(self.path, ".partial.json.tmp-", reserve=10) + str(os.getpid()))
        try:
            tmp.write_text(self._json.dumps(self.state))
            os.replace(tmp, self.progress_file)
        except BaseException:
            _remove(tmp)  # a full disk, say: no half-written record left behind
            raise

    def commit(self) -> None:
        _fsync_path(self.partial)
        check_interrupted()  # the finished partial file is kept for a rerun
        os.replace(self.partial, self.path)
        _fsync_path(self.path.parent, directory=True)
        self.close(keep=False)

    def close(self, keep: bool = True) -> None:
        if not keep:
            self.discard_partial()
        if not self._lock.closed:
            self._lock.close()
            _remove(self.lock_file)


def _json_default(v):
    """JSON for what the writers hand over beyond plain types: arrays and sets as lists, numpy and
    other numbers as floats."""
    if isinstance(v, (set, frozenset)) or hasattr(v, "tolist") and getattr(v, "ndim", 0) > 0:
        return list(v.tolist() if hasattr(v, "tolist") else v)
    return float(v)


def json_safe(v):
    """``v`` with every non-finite number (NaN, ±inf: a diverged loss) as None, arrays as lists:
    standard JSON (RFC 8259 has no NaN; Python's ``json`` writes a bare ``NaN`` that strict parsers
    refuse). Dicts, lists and tuples are walked; other values are left to the encoder."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if hasattr(v, "tolist") and getattr(v, "ndim", 0) > 0:
        return json_safe(v.tolist())
    if isinstance(v, float) or getattr(getattr(v, "dtype", None), "kind", "") == "f":
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def write_json(obj, path: str | os.PathLike) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (:func:`atomic_output`): the one JSON
    writer of run and tune folders (non-finite numbers as null, :func:`json_safe`)."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(json_safe(obj), indent=1, default=_json_default))
