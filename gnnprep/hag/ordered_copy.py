"""A HAG relabelled to a run's node order, kept beside the HAG file for the runs after it.

A CPU run through a HAG relabels it to the node order of its computation
(:func:`gnnprep.hag.order.in_order`): N̂'(i) over computation rows, aggregation nodes renumbered by
their first reader, ids int32. That costs a pass over the HAG read as int64 (8M-entry graphs:
0.15-0.2 s of a 1-1.5 s command, more than the hops it saves at K = 3), and gives the same result
every time for the same HAG and order. So the first run keeps it, ``<hag>.order-<kind>.h5`` beside
the HAG (``kind``: the order's, or ``stored`` for the stored order), and later runs read it in
place of the HAG: a third of the bytes (int32 as kept) and no relabelling.

Never trusted blindly: the copy is used only when it names the HAG file it was made from (size,
modification time, inode), the graph's fingerprint and the node order, when its arrays are a
well-formed HAG (:func:`gnnprep.hag.file.check_hag`) and when its covers match the graph through
the run's order, cover'(inv[v]) = inv[N(v)] for every stored row v
(:func:`gnnprep.hag.cover_check.check_covers`): so a damaged, edited or stale copy can cost time, never
results. Otherwise it is ignored (said, when it was not merely stale), the HAG relabelled again and
the copy replaced. Like the node-order cache (:mod:`gnnprep.graph.order`), a copy that cannot be
written (a read-only folder, a full disk) is not a reason for a run to fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.structure import Hag

COPY_FORMAT = "gnnprep.hag-ordered"
COPY_FORMAT_VERSION = 1


def computation_order(store, reorder: str = "auto", warn=None):
    """(order, inv, kind, why) of a CPU run through a HAG over ``store`` with ``--reorder reorder``:
    the order a run without one would use (the kind ingest chose, or the one asked for), when it is
    kept with the store or beside it (:mod:`gnnprep.graph.order`; a run through a HAG does not find
    one) and brings neighbours closer (:func:`gnnprep.graph.order.order_pays`); order and inv
    (its inverse: stored id v is computation row inv[v]) None where the HAG runs in the stored
    order. ``why`` is what the run reports."""
    from gnnprep.graph import order as kept_order

    kind, force, chosen_none = kept_order.precompute_kind(store, reorder)
    mode = kept_order.order_mode(reorder, chosen_none, kept_order.stored_gain(store, kind))
    if mode == "none":
        return None, None, kind, chosen_none or "not used: --reorder none, or the order kept brings few neighbours closer"
    known = kept_order.load_from_store(store, kind, warn) or \
        kept_order.load_cached(store.path, kind, store.fingerprint, store.num_nodes, warn)
    if known is None:
        return None, None, kind, (f"not used: no {kind} order is kept with the store (a run through a HAG does not "
                                  "find one; ingest keeps one, and a run without --hag keeps the one it finds)")
    order, info = known
    if not kept_order.order_pays(info, force):
        return None, None, kind, "not used: the order kept brings few neighbours closer"
    inv = np.empty(store.num_nodes, dtype=np.int64)
    inv[order] = np.arange(store.num_nodes, dtype=np.int64)
    return order, inv, kind, f"used with the HAG: the {kind} order kept with the store"


def copy_kind(choice) -> str:
    """The kind a copy for :func:`computation_order`'s ``choice`` is kept under: the order's, or
    ``stored`` where the run keeps the stored order."""
    order, _, kind, _ = choice
    return kind if order is not None else "stored"


def copy_path(hag_path, kind: str) -> Path:
    """Where the HAG at ``hag_path`` relabelled to an order of ``kind`` is kept: ``<hag>.order-<kind>.h5``."""
    return Path(hag_path).with_suffix(f".order-{kind}.h5")


def _source(hag_path) -> dict:
    """What identifies the HAG file a copy was made from: a rewritten file (a new search) is another one."""
    st = os.stat(hag_path)
    return {"hag_size": int(st.st_size), "hag_mtime_ns": int(st.st_mtime_ns), "hag_inode": int(st.st_ino)}


def describe(path) -> dict:
    """What ``gnnprep info`` shows of a kept copy: the HAG file it was made from, its order and sizes,
    and whether it is current as to that file (this format version, the file's size, mtime and inode;
    a run also checks the graph, the order and the covers before it reads one)."""
    from gnnprep.core.artifact import describe_cache

    def stale(hag_path: Path, a: dict) -> str | None:
        if a.get("format_version") != COPY_FORMAT_VERSION:
            return f"format version {a.get('format_version')}; this gnnprep writes {COPY_FORMAT_VERSION}"
        return None if all(a.get(k) == v for k, v in _source(hag_path).items()) else \
            f"{hag_path} was written again after this copy was made"

    return describe_cache(path, "a HAG relabelled to a run's node order, kept by precompute --hag", ".order-{kind}.h5",
                          ("kind", "num_nodes", "num_agg"), stale)


def _order_digest(order: np.ndarray | None) -> str:
    """A short digest of the node order (``stored`` for none): a copy made for another order is stale."""
    if order is None:
        return "stored"
    import hashlib

    return hashlib.blake2b(np.ascontiguousarray(order, dtype=np.int64).data, digest_size=16).hexdigest()


def save(hag_path, kind: str, h: Hag, graph_fingerprint: str, order: np.ndarray | None) -> bool:
    """Keep ``h`` (the HAG at ``hag_path`` relabelled to ``order``, None: the stored order) beside it,
    atomically; False where it cannot be written."""
    from gnnprep.hag.file import write_relabelled

    try:
        attrs = _attrs(hag_path, kind, graph_fingerprint, order, h.num_nodes, h.num_agg)
        write_relabelled(copy_path(hag_path, kind), h, attrs, inputs=[hag_path])
    except (OSError, GnnprepError, ValueError, TypeError):
        return False
    return True


def _attrs(hag_path, kind: str, graph_fingerprint: str, order, num_nodes: int, num_agg: int) -> dict:
    return {"format": COPY_FORMAT, "format_version": COPY_FORMAT_VERSION, "kind": kind,
            "graph_fingerprint": graph_fingerprint, "order_digest": _order_digest(order),
            "num_nodes": num_nodes, "num_agg": num_agg, **_source(hag_path)}


def save_streamed(hag_path, kind: str, graph_fingerprint: str, order: np.ndarray | None, num_agg: int,
                  inv: np.ndarray, room: int, progress=None) -> int:
    """:func:`save` of the HAG file at ``hag_path`` relabelled out of core
    (:func:`gnnprep.hag.order.write_in_order`, holding :func:`gnnprep.hag.order.streamed_bytes`):
    for a HAG too large to relabel in memory. ``inv``: the order's inverse (the identity where
    ``order`` is None: the stored order). Raises where the HAG is malformed or the copy cannot be
    written; returns the passes made over the HAG's in-lists."""
    from gnnprep.hag.order import write_in_order

    n = len(inv)
    attrs = _attrs(hag_path, kind, graph_fingerprint, order, n, num_agg)
    return write_in_order(hag_path, copy_path(hag_path, kind), inv if order is None else order, inv, attrs,
                          room, inputs=[hag_path], progress=progress)


def is_kept(hag_path, kind: str, store, order: np.ndarray | None) -> bool:
    """Whether a copy for this HAG file, graph and order is beside it (its attributes only: what
    planning counts on; :func:`load` checks the rest)."""
    from gnnprep.hag.file import relabelled_attrs

    try:
        return _fresh(relabelled_attrs(copy_path(hag_path, kind)), hag_path, kind, store, order)
    except Exception:  # noqa: BLE001 - missing, unreadable: not kept
        return False


def _fresh(a: dict, hag_path, kind: str, store, order) -> bool:
    want = {"format": COPY_FORMAT, "format_version": COPY_FORMAT_VERSION, "kind": kind,
            "graph_fingerprint": store.fingerprint, "num_nodes": store.num_nodes,
            "order_digest": _order_digest(order), **_source(hag_path)}
    return all(_plain(a.get(k)) == v for k, v in want.items())


def load(hag_path, kind: str, store, order: np.ndarray | None, inv: np.ndarray | None, warn=None,
         stream: bool = False):
    """The HAG at ``hag_path`` relabelled to ``order`` (``inv`` its inverse; None: the stored order)
    as kept by :func:`save`, checked against ``store`` (the module docstring): read whole, or with
    ``stream`` open for reading its in-lists a block at a time (:class:`gnnprep.hag.file.HagRows`,
    ``inv`` then given, the identity for the stored order). None when there is none, it is stale,
    or it is damaged (``warn(message)`` is told of damage)."""
    from gnnprep.hag.file import relabelled_attrs

    path = copy_path(hag_path, kind)
    try:
        if not path.is_file():
            return None
        attrs = relabelled_attrs(path)
        if not _fresh(attrs, hag_path, kind, store, order):
            return None   # stale: made from another HAG file, graph or order
        return read_checked(path, store, int(attrs["num_agg"]), inv, stream)
    except GnnprepError as e:
        _say(warn, f"{path}: {_after_path(str(e), path)}; ignored, the HAG is relabelled again")
        return None
    except Exception as e:  # noqa: BLE001 - h5py read errors, a missing dataset or attribute: damage
        _say(warn, f"{path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                   "ignored, the HAG is relabelled again")
        return None


def read_checked(path, store, num_agg: int, inv: np.ndarray | None, stream: bool = False, name=None):
    """The copy at ``path`` read whole (a :class:`Hag`) or, with ``stream``, opened for blocks
    (:class:`gnnprep.hag.file.HagRows`), its covers checked against ``store`` through ``inv``
    (:func:`gnnprep.hag.cover_check.check_covers`; a mismatch names ``name``, by default ``path``).
    Raises what is wrong (the reader closed)."""
    from gnnprep.hag.cover_check import check_covers
    from gnnprep.hag.file import HagRows, read_relabelled

    h = None
    try:
        h = HagRows(path, store.num_nodes, num_agg) if stream else read_relabelled(path, store.num_nodes, num_agg)
        check_covers(h, store, path if name is None else name, inv=inv, read=h.read if stream else None)
    except BaseException:
        if stream and h is not None:
            h.close()
        raise
    return h


def _plain(v):
    """An HDF5 attribute as a Python value (bytes decoded, numpy scalars unwrapped)."""
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return v.item() if isinstance(v, np.generic) else v


def _after_path(message: str, path) -> str:
    prefix = f"{path}: "
    return message[len(prefix):] if message.startswith(prefix) else message


def _say(warn, message: str) -> None:
    if warn is not None:
        warn(message)
    else:
        import warnings

        warnings.warn(message, stacklevel=3)
