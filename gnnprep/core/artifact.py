"""Root metadata shared by every gnnprep artifact (format, version, provenance) and its checks."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.core.files import kind_of
from gnnprep.core.version import __version__

# every artifact format and the newest format_version this gnnprep reads (and writes)
FORMAT_VERSIONS = {"gnnprep.graph": 1, "gnnprep.hag": 1, "gnnprep.hdg": 1, "gnnprep.features": 1}
FORMATS = tuple(FORMAT_VERSIONS)
# the caches runs keep beside artifacts (gnnprep.info describes them), as a user given one is told
CACHES = {"gnnprep.hag-ordered": "a HAG relabelled to a run's node order, which precompute --hag keeps beside the HAG",
          "gnnprep.ordered-csr": "a graph store's S in a node order, which precompute keeps beside the store"}


def write_root_attrs(f: h5py.File, fmt: str, format_version: int, provenance: dict, **attrs) -> None:
    f.attrs["format"] = fmt
    f.attrs["format_version"] = int(format_version)
    f.attrs["gnnprep_version"] = __version__
    f.attrs["created_utc"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    f.attrs["provenance"] = json.dumps(provenance, sort_keys=True, default=str)
    for key, value in attrs.items():
        f.attrs[key] = value


def file_fingerprint(path: str | os.PathLike) -> str:
    """Cheap identity of an input file: size and modification time (content hashing would cost a
    full extra read of inputs that can be hundreds of GB)."""
    st = Path(path).stat()
    return f"size={st.st_size},mtime_ns={st.st_mtime_ns}"


def root_format(path: str | os.PathLike) -> str | None:
    """The root attribute ``format`` of the HDF5 file at ``path`` as a string; None where the file is
    missing, not HDF5, unreadable or has no such string (a peek: never an error)."""
    try:
        if not Path(path).is_file() or not h5py.is_hdf5(path):
            return None
        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format")
    except (OSError, ValueError, TypeError):
        return None
    if isinstance(fmt, bytes):
        fmt = fmt.decode(errors="backslashreplace")
    return fmt if isinstance(fmt, str) else None


def is_torch_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file in ``torch.save``'s zip layout (``<name>/data.pkl`` beside
    ``<name>/version``), as gnnprep train's ``model.pt`` and ``checkpoint.pt`` are: a peek at the zip
    directory only (nothing unpickled, never an error)."""
    import zipfile

    try:
        if not Path(path).is_file() or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
    except (OSError, ValueError, zipfile.BadZipFile):
        return False
    return any(n.count("/") == 1 and n.endswith("/data.pkl") and n[:-len("data.pkl")] + "version" in names
               for n in names)


def describe_cache(path: str | os.PathLike, what: str, suffix: str, fields: tuple[str, ...],
                   stale: Callable[[Path, dict], str | None]) -> dict:
    """What ``gnnprep info`` shows of a cache a run keeps beside an artifact (S in a node order, a
    relabelled HAG): ``what`` it is, the artifact it was made from (its name less ``suffix``, which
    may name root attributes as ``{kind}``, plus ``.h5``), the root attributes in ``fields``, and
    whether it is current: ``stale(source, attrs)`` says why not, None when it is. A stale cache is
    never used (the next run that needs it rewrites it); any cache is safe to delete."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            a = plain_attrs(f.attrs)
    except OSError as e:
        raise GnnprepError(f"{path}: cannot open HDF5 file ({_short(e)})") from None
    try:
        tail = suffix.format(**a)
    except (KeyError, IndexError, ValueError):
        tail = None
    source = path.with_name(path.name[:-len(tail)] + ".h5") if tail and path.name.endswith(tail) else None
    if source is None:
        why = f"its name does not end in {suffix}, so what it was made from is unknown"
    elif not source.is_file():
        why = f"{source}: no such file"
    else:
        why = stale(source, a)
    return {"file": str(path), "format": a.get("format"), "format_version": a.get("format_version"),
            "what": what, "cache_of": None if source is None else str(source), "current": why is None,
            "stale_because": why, **{k: a.get(k) for k in fields}, "size_bytes": path.stat().st_size}


def open_artifact(path: str | os.PathLike, expect: str | None = None) -> h5py.File:
    """Open a gnnprep artifact read-only, with one-line errors for every way that can fail."""
    path = Path(path)
    if not path.exists():
        raise GnnprepError(f"{path}: no such file")
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise GnnprepError(f"{path}: is {kind_of(mode)}; expected a gnnprep HDF5 file")
    if not h5py.is_hdf5(path):
        if is_torch_file(path):   # a run folder's model.pt or checkpoint.pt, given where an artifact goes
            raise GnnprepError(f"{path}: not an HDF5 file (a PyTorch file, such as a training run's model.pt or "
                               "checkpoint.pt, which gnnprep info describes); expected a gnnprep artifact")
        raise GnnprepError(f"{path}: not an HDF5 file (corrupt or another format)")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise GnnprepError(f"{path}: cannot open HDF5 file ({_short(e)})") from None
    try:
        fmt = _root_attr(f, "format", path)
    except GnnprepError:
        f.close()
        raise
    if isinstance(fmt, bytes):
        fmt = fmt.decode(errors="backslashreplace")
    if isinstance(fmt, str) and fmt in CACHES:   # a file a run keeps beside an artifact, given as one
        f.close()
        raise GnnprepError(f"{path}: {CACHES[fmt]}, not an artifact; expected " +
                           (f"a {expect} artifact" if expect else f"one of {', '.join(FORMATS)}") +
                           " (pass the file it was made from)")
    if not isinstance(fmt, str) or fmt not in FORMATS:   # an array, a number, a compound, Empty: refused
        f.close()
        raise GnnprepError(f"{path}: root attribute 'format' is {_described(fmt)}; expected one of "
                           f"{', '.join(FORMATS)} (not a gnnprep artifact)")
    fmt = str(fmt)
    if expect is not None and fmt != expect:
        f.close()
        raise GnnprepError(f"{path}: is a {fmt} artifact; expected {expect}")
    try:
        version = _root_attr(f, "format_version", path)
    except GnnprepError:
        f.close()
        raise
    if not isinstance(version, (int, np.integer)) or isinstance(version, (bool, np.bool_)) or version < 1:
        f.close()
        raise GnnprepError(f"{path}: root attribute 'format_version' is {_described(version)}; expected a positive "
                           "integer")
    if version > FORMAT_VERSIONS[fmt]:
        f.close()
        raise GnnprepError(f"{path}: {fmt} format_version {int(version)} is newer than this gnnprep reads "
                           f"({FORMAT_VERSIONS[fmt]}); upgrade gnnprep")
    try:
        check_self_contained(f, path, listed_shards(f))
    except BaseException:
        f.close()
        raise
    return f


def _root_attr(f: h5py.File, name: str, path):
    """Root attribute ``name`` as h5py reads it (None when absent), or a one-line GnnprepError where
    h5py cannot read it at all (a type without a NumPy equivalent, a damaged attribute heap)."""
    try:
        return f.attrs.get(name)
    except Exception as e:  # noqa: BLE001 - h5py raises OSError, TypeError, ValueError, KeyError here
        raise GnnprepError(f"{path}: root attribute {name!r} cannot be read ({_short(e)}); expected "
                           "a gnnprep artifact") from None


def _described(v) -> str:
    """An attribute value for a one-line message: an array by its shape and dtype, anything else
    by its repr, cut to 60 characters."""
    if isinstance(v, np.ndarray) and v.ndim > 0:
        return f"an array of shape {v.shape} ({v.dtype})"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def listed_shards(f: h5py.File) -> set[str]:
    """The file names a sharded features artifact lists in its root attribute ``shards`` (plain
    names in its own folder; anything else is left out here and refused by its reader)."""
    raw = f.attrs.get("shards")
    try:
        shards = json.loads(raw.decode() if isinstance(raw, bytes) else raw) if raw is not None else []
    except (TypeError, ValueError, RecursionError):
        return set()
    if not isinstance(shards, list):
        return set()
    return {s["file"] for s in shards if isinstance(s, dict) and isinstance(s.get("file"), str)
            and s["file"] not in ("", ".", "..") and "/" not in s["file"] and "\\" not in s["file"]}


def check_self_contained(f: h5py.File, path, shards: set[str] = frozenset()) -> None:
    """GnnprepError unless the file reads only itself: no external link, no dataset in external raw
    storage, and no virtual dataset whose source is another file, except ``shards`` (plain names
    beside it: a sharded features artifact's). An artifact received from someone else could
    otherwise make a command read any file (``/etc/passwd``, ``/proc/self/environ``) into its output.

    Every object is looked at once, by its address in the file (a group or dataset hard linked
    under several names, as the hops are, is checked once), and a group hard linked into itself or
    into one of its subgroups is a GnnprepError: no gnnprep writer makes such a cycle, and a walk
    of the tree (this one, or any reader's) would never end."""
    open_groups = {_address(f): "/"}   # the groups on the path being walked: a link to one is a cycle
    done: set[int] = set()
    stack = [("", iter(f), f, _address(f))]
    while stack:
        prefix, names, group, group_address = stack[-1]
        name = next(names, None)
        if name is None:
            stack.pop()
            del open_groups[group_address]
            done.add(group_address)
            continue
        where = f"{prefix}/{name}"
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise GnnprepError(f"{path}: {where} is an external link to {link.filename}:{link.path}; "
                               "expected data stored in the file itself")
        if not isinstance(link, h5py.HardLink):
            continue  # a soft link names another object of this file, checked where it lives
        obj = group.get(name)
        address = _address(obj)
        if address in open_groups:
            raise GnnprepError(f"{path}: {where} is a hard link to the group {open_groups[address]} that holds "
                               "it (a cycle); expected a tree of groups (the file is damaged or was edited)")
        if address in done:
            continue  # a hard link to an object already checked
        if isinstance(obj, h5py.Group):
            open_groups[address] = where
            stack.append((where, iter(obj), obj, address))
            continue
        done.add(address)
        if isinstance(obj, h5py.Dataset):
            if obj.external:
                raise GnnprepError(f"{path}: {where} is stored outside the file (external storage in "
                                   f"{obj.external[0][0]!r}); expected data stored in the file itself")
            if obj.is_virtual:
                for src in obj.virtual_sources():
                    name_ = src.file_name
                    if name_ == "." or name_ in shards:
                        continue
                    raise GnnprepError(f"{path}: {where} is a virtual dataset reading {name_!r}; expected "
                                       "data in the file itself or in the shards its 'shards' attribute lists "
                                       "beside it")


def _address(obj) -> int:
    """Where the object header of ``obj`` (a group or dataset) lives in its file: one number per
    object, whatever the name or how many hard links lead to it."""
    return h5py.h5o.get_info(obj.id).addr


_REQUIRED = object()


def json_attr(attrs, name: str, where, kind: type, default=_REQUIRED, label: str = "root attribute"):
    """The JSON attribute ``name`` of type ``kind`` (``default`` when absent; absent and no default:
    an error), or a one-line GnnprepError naming ``where`` (the file) for anything else."""
    raw = attrs.get(name)
    if raw is None:
        if default is _REQUIRED:
            raise GnnprepError(f"{where}: {label} {name!r} is missing (the file is corrupt)")
        return default
    try:
        value = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError, RecursionError):
        value = None
    if not isinstance(value, kind):
        raise GnnprepError(f"{where}: {label} {name!r} is not a JSON {kind.__name__} (the file is corrupt)")
    return value


class Artifact:
    """Base of the artifact readers: an open read-only HDF5 file, usable as a context manager."""

    FORMAT = ""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.f = open_artifact(self.path, expect=self.FORMAT)

    def close(self) -> None:
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def info(self) -> dict:
        """What ``gnnprep info`` shows for this artifact, as a dict: the describer registered for its
        :attr:`FORMAT` (:func:`register_format`) by the module that owns the format."""
        return describer_of(self.FORMAT)(self.path)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path}>"


# -- the format registry: each format's module registers its reader and describer where it defines them ---
# (gnnprep.graph.store, gnnprep.hag.file, gnnprep.hdg.file, gnnprep.precompute.features, and
# gnnprep.train.loader, whose Features extends the features reader); gnnprep.info imports those modules
# by name, so the structure test sees every import, and looks the format up here.
_READERS: dict[str, type] = {}
_DESCRIBERS: dict[str, Callable[[Path], dict]] = {}


def register_format(fmt: str, reader: type | None = None, describer: Callable[[Path], dict] | None = None) -> None:
    """Register ``reader`` (an :class:`Artifact` subclass whose ``FORMAT`` is ``fmt``; what
    ``gnnprep.open`` returns) and/or ``describer`` (``describe(path) -> dict``, what ``gnnprep info``
    shows) for the artifact format ``fmt``. A later stage may replace a reader with a subclass of it
    (the train stage's ``Features`` over the precompute stage's ``FeatureStore``); registering a base
    after its subclass keeps the subclass. Anything else already registered differently is a
    ValueError: two modules claiming one format."""
    if fmt not in FORMAT_VERSIONS:
        raise ValueError(f"register_format: {fmt!r} is no artifact format; expected one of {', '.join(FORMATS)}")
    if reader is not None:
        if not (isinstance(reader, type) and issubclass(reader, Artifact) and reader.FORMAT == fmt):
            raise ValueError(f"register_format: the reader of {fmt} must be an Artifact subclass with FORMAT "
                             f"{fmt!r}; got {reader!r}")
        current = _READERS.get(fmt)
        if current is None or issubclass(reader, current) or _same_definition(reader, current):
            _READERS[fmt] = reader
        elif not issubclass(current, reader):
            raise ValueError(f"register_format: {fmt} already has the reader {_qualified(current)}; "
                             f"{_qualified(reader)} does not extend it")
    if describer is not None:
        current = _DESCRIBERS.get(fmt)
        if current is not None and current is not describer and not _same_definition(describer, current):
            raise ValueError(f"register_format: {fmt} already has the describer {_qualified(current)}; "
                             f"not replaced by {_qualified(describer)}")
        _DESCRIBERS[fmt] = describer


def _same_definition(a, b) -> bool:
    """Whether ``a`` and ``b`` are one definition executed twice (a reloaded module)."""
    return _qualified(a) == _qualified(b)


def _qualified(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def reader_of(fmt: str) -> type | None:
    """The reader class registered for ``fmt`` (None: no module imported so far registered one)."""
    return _READERS.get(fmt)


def describer_of(fmt: str) -> Callable[[Path], dict] | None:
    """The describer registered for ``fmt`` (None: no module imported so far registered one)."""
    return _DESCRIBERS.get(fmt)


def registered_readers() -> tuple[str, ...]:
    """The formats that have a reader, in the order of :data:`FORMATS`."""
    return tuple(f for f in FORMATS if f in _READERS)


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


class Timer:
    """Collects named wall-clock timings for provenance."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    def __call__(self, name: str):
        timer = self

        class _Span:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.timings[name] = round(timer.timings.get(name, 0.0) + time.perf_counter() - self.t0, 4)

        return _Span()


def plain_attrs(attrs) -> dict:
    """Root attributes as plain Python values (numpy scalars and arrays converted, bytes decoded)."""
    def plain(v):
        if isinstance(v, bytes):
            return v.decode(errors="replace")
        if isinstance(v, np.ndarray):
            return v.tolist()
        return v.item() if isinstance(v, np.generic) else v

    return {k: plain(v) for k, v in attrs.items()}


# -- reading attributes and datasets for a description (``gnnprep info``) --------------------------------
def attr_value(v):
    """An attribute value as plain JSON-able Python (anything else as its text)."""
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.generic):
        v = v.item()
    elif isinstance(v, np.ndarray):
        v = v.tolist()
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return str(v)
    return v


def count_attr(attrs, name: str, path, default=None) -> int | None:
    """A non-negative integer attribute (``default`` when absent), or a one-line error."""
    v = attr_value(attrs.get(name, default))
    if v is default:
        return v
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise GnnprepError(f"{path}: attribute {name!r} is {v!r}; expected a count")
    return v


def dataset_or_none(f, name: str, path, ndim: int | None = None):
    """``f[name]`` when it is a dataset (of ``ndim`` dimensions), else None (absent) or an error."""
    if name not in f:
        return None
    ds = f[name]
    if not hasattr(ds, "dtype") or (ndim is not None and ds.ndim != ndim):
        want = f"a {ndim}-D dataset" if ndim else "a dataset"
        raise GnnprepError(f"{path}: /{name} has shape {getattr(ds, 'shape', None)}; expected {want} (the file is corrupt)")
    return ds
