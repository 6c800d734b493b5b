"""Mini-batches of hop-feature rows from a features artifact: held in memory, or streamed from HDF5.

A batch is ``(x, y)``: x [B, V, d] float32 (the V views a model reads, stacked per row), y [B] int64.
Rows are addressed by *position* in the artifact's ``/rows``; a split (train/valid/test) is a sorted
array of positions.

- ``InMemoryBatches``: the rows the splits need are read once (block-wise, in file order) into one
  tensor [R, V, d] in the stored dtype; every epoch draws a fresh permutation.
- ``StreamingBatches``: nothing is held but a few read windows. The split's rows are grouped by
  chunk-aligned row block of the file; each epoch visits the blocks in a random order, reads a
  window of several blocks (every view of one block is one contiguous read), shuffles the rows
  inside the window and cuts it into batches. The reads run in a background thread, a bounded queue
  ahead of the consumer, so the model computes while the next window is read.

``open_data`` opens a features artifact for training: checks labels, splits, hops and the class
count, refuses a model whose training state cannot fit the device (estimated before anything is
allocated), then picks one of the two loaders by ``--memory-budget``.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import h5py
import numpy as np
import torch

from gnnprep.core import device as devices
from gnnprep.core.artifact import file_fingerprint
from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.core.sizes import available_ram, format_size
from gnnprep.precompute.features import FeatureStore, hop_datasets
from gnnprep.train.config import MAX_CLASSES, TrainConfig
from gnnprep.train.models import ModelSpec, training_bytes, views
from gnnprep.train.regimes import resolve

BLOCK_BYTES = 4 * 1024**2     # target bytes of one block read when the dataset is stored contiguously
SPARSE_READ = 16              # a block whose span is this many times its wanted rows reads point-wise


def block_rows(dset: h5py.Dataset) -> int:
    """Rows of one aligned read: the chunk height, or ~4 MiB of rows for contiguous storage."""
    if dset.chunks is not None:
        return int(dset.chunks[0])
    row_bytes = max(1, int(np.prod(dset.shape[1:])) * dset.dtype.itemsize)
    return max(64, BLOCK_BYTES // row_bytes)


class FileGuard:
    """The files a loader reads (the features artifact, and its shards), as they were when it was
    opened: device, inode, size and mtime_ns. HDF5 reads a chunk beyond a file's new end (truncated
    after it was opened) as zeros, never as an error, and a file replaced under its path is another
    file's data at the next epoch's open: :meth:`check` (one ``os.stat`` per file, run after every
    row block is read) refuses both before the rows are handed out."""

    def __init__(self, paths):
        self.paths = [str(p) for p in paths]
        self.opened = [os.stat(p) for p in self.paths]

    def check(self) -> None:
        """GnnprepError naming the first file that is no longer the one opened."""
        for path, was in zip(self.paths, self.opened):
            try:
                now = os.stat(path)
            except OSError as e:
                raise _changed(path, f"it can no longer be read: {e.strerror or type(e).__name__}") from None
            if (now.st_dev, now.st_ino) != (was.st_dev, was.st_ino):
                raise _changed(path, "another file was put in its place")
            if now.st_size != was.st_size:
                raise _changed(path, f"{was.st_size:,} bytes when opened, {now.st_size:,} now")
            if now.st_mtime_ns != was.st_mtime_ns:
                raise _changed(path, f"written to after it was opened: mtime_ns {was.st_mtime_ns} "
                                     f"then, {now.st_mtime_ns} now")

    def explain(self, e: BaseException, what: str | None = None) -> BaseException:
        """The error to raise for ``e``, raised while the guarded files were read: the change, when a
        file changed (h5py's OSError or KeyError are its symptoms); else, where ``what`` names the
        h5py read that raised (so ``e`` can only be h5py's), a one-line GnnprepError for its
        OSError, KeyError or RuntimeError on an unchanged file; else ``e`` itself."""
        if isinstance(e, GnnprepError) or not isinstance(e, Exception):
            return e
        try:
            self.check()
        except GnnprepError as changed:
            return changed
        if what is not None and isinstance(e, (OSError, KeyError, RuntimeError)):
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            return GnnprepError(f"{self.paths[0]}: cannot read {what} ({text}); expected a readable features "
                                "artifact (the file is damaged)")
        return e


def _changed(path: str, detail: str) -> GnnprepError:
    return GnnprepError(f"{path}: the file changed or was truncated while it was read ({detail}); "
                        "expected it to stay as it was opened")


def read_rows(dsets: list[h5py.Dataset], positions: np.ndarray, out: np.ndarray, step: int,
              guard: FileGuard | None = None) -> None:
    """out[i, v] = dsets[v][positions[i]] for sorted positions, reading aligned blocks of ``step`` rows.
    ``guard``: checked after every block (a file truncated or replaced meanwhile reads as zeros or
    fails inside h5py: either is the guard's one-line GnnprepError)."""
    if len(positions) == 0:
        return
    if guard is None:
        _read_blocks(dsets, positions, out, step, None)
        check_finite_rows(dsets, positions, out)
        return
    try:
        _read_blocks(dsets, positions, out, step, guard)
    except Exception as e:  # noqa: BLE001 - h5py's errors on a changed or damaged file become one line
        raise guard.explain(e, f"{', '.join(d.name for d in dsets)} rows {int(positions[0])}..{int(positions[-1])}") \
            from None
    check_finite_rows(dsets, positions, out)


def _read_blocks(dsets: list[h5py.Dataset], positions: np.ndarray, out: np.ndarray, step: int,
                 guard: FileGuard | None) -> None:
    blocks = positions // step
    cuts = np.flatnonzero(np.diff(blocks)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(positions)]])
    buf = None
    for s, e in zip(starts, ends):
        pos = positions[s:e]
        lo, hi = int(pos[0]), int(pos[-1]) + 1
        for v, d in enumerate(dsets):
            if hi - lo > SPARSE_READ * len(pos):
                out[s:e, v] = d[pos]        # few wanted rows in a wide span: point selection
                continue
            if buf is None or buf.shape[0] < hi - lo or buf.dtype != d.dtype:
                buf = np.empty((max(step, hi - lo),) + d.shape[1:], dtype=d.dtype)
            d.read_direct(buf, np.s_[lo:hi], np.s_[0:hi - lo])
            out[s:e, v] = buf[pos - lo]
        if guard is not None:
            guard.check()   # after the block's reads: what was read is what the file held when opened


def check_finite_rows(dsets: list[h5py.Dataset], positions: np.ndarray, out: np.ndarray) -> None:
    """GnnprepError naming the file, the hop or channel dataset, the row and the column of the first
    NaN or infinity in ``out`` (rows ``positions`` of ``dsets``): a model trained on one learns NaN
    and would report it as a result."""
    flat = out.reshape(len(out), -1)
    if np.isfinite(flat.sum(axis=1, dtype=np.float64)).all():
        return  # one pass; a NaN or inf anywhere makes its row's sum non-finite (overflow aside: checked below)
    bad = np.argwhere(~np.isfinite(out))
    if not len(bad):
        return  # the sum overflowed float64 on finite values
    i, v, c = (int(x) for x in bad[0])
    d = dsets[v]
    raise GnnprepError(f"{d.file.filename}: {d.name}[{int(positions[i])}, {c}] is {out[i, v, c]}; expected finite "
                       "features (the artifact is damaged, or was written by a tool that let NaN or inf through)")


def rank_slice(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous part [lo, hi) of ``n`` items cut into ``world`` near-equal parts
    (the first ``n % world`` ranks get one more; a part is empty only when n < world)."""
    q, extra = divmod(int(n), world)
    lo = rank * q + min(rank, extra)
    return lo, lo + q + (1 if rank < extra else 0)


def rank_take(n: int, rank: int, world: int) -> tuple[int, int]:
    """The rows [lo, hi) of a global batch of ``n`` rows that rank ``rank`` runs: its
    :func:`rank_slice`, or the batch's first row when the slice is empty (n < world; the models
    cannot run an empty batch, and every rank must take the step: the trainer weights it 0)."""
    lo, hi = rank_slice(n, rank, world)
    return (lo, hi) if hi > lo else (0, 1)


def global_batches(n: int, batch_size: int, world: int) -> list[int]:
    """Lengths of an epoch's global batches: ``n`` rows in batches of ``batch_size · world`` (the
    last one shorter); under torchrun every rank takes one step per global batch."""
    g = batch_size * world
    return [min(g, n - s) for s in range(0, n, g)]


def _to_batch(x: torch.Tensor, y: torch.Tensor, device: torch.device):
    non_blocking = device.type == "cuda"
    return x.to(device, non_blocking=non_blocking).float(), y.to(device, non_blocking=non_blocking)


def _host_batch(x: np.ndarray, y: np.ndarray, device: torch.device) -> tuple:
    """(x, y) as tensors, page-locked when bound for a GPU (the copy to the device then runs async)."""
    item = (torch.from_numpy(x), torch.from_numpy(y))
    return (item[0].pin_memory(), item[1].pin_memory()) if device.type == "cuda" else item


def _put(q: queue.Queue, item, stop: threading.Event) -> None:
    """Hand ``item`` to the consumer, giving up when ``stop`` is set (the consumer has left)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _stop_reader(t: threading.Thread, q: queue.Queue, stop: threading.Event) -> None:
    """Stop a reader thread: tell it, and drain its queue until it has ended (it may be blocked on a put)."""
    stop.set()
    while t.is_alive():
        try:
            q.get_nowait()
        except queue.Empty:
            t.join(timeout=0.05)


class InMemoryBatches:
    """Every needed row held in one tensor [R, V, d]; batches are index gathers."""

    streaming = False

    def __init__(self, data: torch.Tensor, labels: torch.Tensor, device: torch.device):
        self.data = data
        self.labels = labels
        self.device = device

    @classmethod
    def load(cls, path, datasets: list[str], positions: np.ndarray, labels: np.ndarray, device: torch.device,
             progress=None, guard: FileGuard | None = None) -> "InMemoryBatches":
        """``guard``: the files as :func:`open_data` validated them (default: as they are now)."""
        guard = FileGuard([path]) if guard is None else guard
        try:
            guard.check()
            with hop_datasets(path, datasets) as dsets:
                d = dsets[0].shape[1]
                out = np.empty((len(positions), len(dsets), d), dtype=dsets[0].dtype)
                step = block_rows(dsets[0])
                # in slices of blocks so the progress callback advances
                per = max(1, 64 * step)
                for s in range(0, len(positions), per):
                    read_rows(dsets, positions[s:s + per], out[s:s + per], step, guard)
                    if progress is not None:
                        progress("load features", min(s + per, len(positions)), len(positions))
        except Exception as e:  # noqa: BLE001 - h5py's errors on a changed or damaged file become one line
            raise guard.explain(e) from None
        data = torch.from_numpy(out)
        if device.type == "cuda" and data.nbytes < 0.5 * torch.cuda.mem_get_info(device)[0]:
            data = data.to(device)
        return cls(data, torch.from_numpy(labels.astype(np.int64)).to(data.device), device)

    def batches(self, split: np.ndarray, batch_size: int, shuffle: bool, rng: np.random.Generator | None = None,
                share: tuple[int, int] | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``split``: indices into the held rows (sorted). ``share=(rank, world)``: the epoch's order
        is cut into global batches of ``batch_size · world`` rows and this rank gets its
        :func:`rank_take` of each (one batch per global batch on every rank)."""
        idx = split[rng.permutation(len(split))] if shuffle else split
        idx = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.data.device)
        if share is not None:  # torchrun: this rank's part of every global batch (batch_size · world rows)
            rank, world = share
            s = 0
            for length in global_batches(len(idx), batch_size, world):
                lo, hi = rank_take(length, rank, world)
                b = idx[s + lo:s + hi]
                s += length
                yield _to_batch(self.data.index_select(0, b), self.labels.index_select(0, b), self.device)
            return
        for s in range(0, len(idx), batch_size):
            b = idx[s:s + batch_size]
            yield _to_batch(self.data.index_select(0, b), self.labels.index_select(0, b), self.device)

    def close(self) -> None:
        pass


class StreamingBatches:
    """Batches read from HDF5 on the fly, block-shuffled, prefetched by a background thread."""

    streaming = True

    def __init__(self, path, datasets: list[str], positions: np.ndarray, labels: np.ndarray, device: torch.device,
                 window_rows: int, prefetch: int = 2, guard: FileGuard | None = None):
        """``guard``: the files as :func:`open_data` validated them (default: as they are now); every
        epoch's reads check it, so a file truncated or replaced after that is an error, never zeros."""
        self.guard = FileGuard([path]) if guard is None else guard
        self.path = path
        self.datasets = datasets
        self.positions = positions          # file positions of the held row indices (sorted)
        self.labels = labels.astype(np.int64)
        self.device = device
        self.window_rows = max(1, int(window_rows))
        self.prefetch = max(1, int(prefetch))
        with hop_datasets(path, datasets[:1]) as (first,):
            self.step = block_rows(first)
            self.row_shape = (len(datasets), first.shape[1])

    def _windows(self, split: np.ndarray, shuffle: bool, rng) -> list[np.ndarray]:
        """Groups of held-row indices, each a run of whole file blocks, in visiting order."""
        pos = self.positions[split]
        blocks = pos // self.step
        cuts = np.flatnonzero(np.diff(blocks)) + 1
        groups = np.split(split, cuts)
        order = rng.permutation(len(groups)) if shuffle else np.arange(len(groups))
        windows, cur, n = [], [], 0
        for g in order:
            cur.append(groups[g])
            n += len(groups[g])
            if n >= self.window_rows:
                windows.append(cur)
                cur, n = [], 0
        if cur:
            windows.append(cur)
        # within a window, read in file order (sequential I/O); the rows are shuffled afterwards
        return [np.sort(np.concatenate(w)) for w in windows]

    def _reader(self, windows, shuffle, seeds, q: queue.Queue, stop: threading.Event) -> None:
        try:
            self.guard.check()   # each epoch opens the path again: it must still be the file opened
            with hop_datasets(self.path, self.datasets) as dsets:
                d = dsets[0].shape[1]
                for w, seed in zip(windows, seeds):
                    if stop.is_set():
                        return
                    x = np.empty((len(w), len(dsets), d), dtype=dsets[0].dtype)
                    read_rows(dsets, self.positions[w], x, self.step, self.guard)
                    y = self.labels[w]
                    if shuffle:
                        p = np.random.default_rng(seed).permutation(len(w))
                        x, y = x[p], y[p]
                    _put(q, _host_batch(x, y, self.device), stop)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it in the main thread
            q.put(self.guard.explain(e))
            return
        q.put(None)

    def batches(self, split: np.ndarray, batch_size: int, shuffle: bool, rng: np.random.Generator | None = None,
                share: tuple[int, int] | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        windows = self._windows(split, shuffle, rng)
        # the window shuffles are drawn here, in the caller's generator, so a seed fixes them
        seeds = rng.integers(0, 2**63, len(windows)) if shuffle else [0] * len(windows)
        if share is not None:
            yield from self._shared_batches(windows, seeds, shuffle, batch_size, share)
            return
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        t = threading.Thread(target=self._reader, args=(windows, shuffle, seeds, q, stop), daemon=True,
                             name="gnnprep-prefetch")
        t.start()
        carry_x, carry_y = [], []
        have = 0
        try:
            while True:
                item = q.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                carry_x.append(item[0])
                carry_y.append(item[1])
                have += len(item[1])
                if have < batch_size:
                    continue
                x = torch.cat(carry_x) if len(carry_x) > 1 else carry_x[0]
                y = torch.cat(carry_y) if len(carry_y) > 1 else carry_y[0]
                full = (have // batch_size) * batch_size
                for s in range(0, full, batch_size):
                    yield _to_batch(x[s:s + batch_size], y[s:s + batch_size], self.device)
                carry_x, carry_y, have = ([x[full:]], [y[full:]], have - full) if have > full else ([], [], 0)
            if have:
                yield _to_batch(torch.cat(carry_x), torch.cat(carry_y), self.device)
        finally:
            _stop_reader(t, q, stop)

    def _shared_batches(self, windows, seeds, shuffle: bool, batch_size: int, share: tuple[int, int]):
        """torchrun: the epoch's row order is the one a single process would stream (windows in
        their drawn order, rows shuffled inside each); it is cut into global batches of
        ``batch_size · world`` rows and this rank reads only its :func:`rank_take` of each."""
        rank, world = share
        orders = [w[np.random.default_rng(seed).permutation(len(w))] if shuffle else w
                  for w, seed in zip(windows, seeds)]
        n = sum(len(o) for o in orders)
        lengths = global_batches(n, batch_size, world)
        mine = np.zeros(n, dtype=bool)
        sizes, s = [], 0
        for length in lengths:
            lo, hi = rank_take(length, rank, world)
            mine[s + lo:s + hi] = True
            sizes.append(hi - lo)
            s += length
        picked, s = [], 0
        for o in orders:  # this rank's rows of every window, in stream order
            p = o[mine[s:s + len(o)]]
            s += len(o)
            if len(p):
                picked.append(p)
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        t = threading.Thread(target=self._rows_reader, args=(picked, q, stop), daemon=True, name="gnnprep-prefetch")
        t.start()
        carry_x, carry_y, have = [], [], 0
        try:
            for size in sizes:
                while have < size:
                    item = q.get()
                    if item is None:
                        raise RuntimeError("the prefetch thread ended before the epoch's rows were read")
                    if isinstance(item, BaseException):
                        raise item
                    carry_x.append(item[0])
                    carry_y.append(item[1])
                    have += len(item[1])
                x = torch.cat(carry_x) if len(carry_x) > 1 else carry_x[0]
                y = torch.cat(carry_y) if len(carry_y) > 1 else carry_y[0]
                yield _to_batch(x[:size], y[:size], self.device)
                carry_x, carry_y, have = ([x[size:]], [y[size:]], have - size) if have > size else ([], [], 0)
        finally:
            _stop_reader(t, q, stop)

    def _rows_reader(self, picked: list, q: queue.Queue, stop: threading.Event) -> None:
        """Reads each group of held-row indices (in stream order) in file order, then puts the rows
        back in stream order."""
        try:
            self.guard.check()   # each epoch opens the path again: it must still be the file opened
            with hop_datasets(self.path, self.datasets) as dsets:
                for rows in picked:
                    if stop.is_set():
                        return
                    srt = np.argsort(rows, kind="stable")
                    x = np.empty((len(rows),) + self.row_shape, dtype=dsets[0].dtype)
                    read_rows(dsets, self.positions[rows[srt]], x, self.step, self.guard)
                    xs = np.empty_like(x)
                    xs[srt] = x
                    _put(q, _host_batch(xs, self.labels[rows], self.device), stop)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it in the main thread
            q.put(self.guard.explain(e))
            return
        q.put(None)

    def close(self) -> None:
        pass


def window_rows_for(budget: int, row_bytes: int, batch_size: int, prefetch: int, held_bytes: int | None = None) -> int:
    """Rows per read window so that the queued windows plus the one being consumed fit ``budget``.
    ``held_bytes``: what holding every row in memory takes instead; the least budget named when
    none of the two fits is the smaller."""
    rows = budget // max(1, row_bytes * (prefetch + 2))
    if rows < 16:
        streaming = 16 * row_bytes * (prefetch + 2)
        if held_bytes is not None and held_bytes < streaming:   # few rows: in memory takes less than the windows
            raise OptionError("--memory-budget", f"{budget} bytes cannot hold the features the splits need (streamed, "
                                                 f"{prefetch + 2} read windows of 16 rows take {streaming} bytes); need "
                                                 f"at least {held_bytes} bytes (every row in memory)")
        raise OptionError("--memory-budget", f"{budget} bytes cannot hold {prefetch + 2} read windows of 16 rows "
                                             f"({row_bytes} bytes each); need at least {streaming} bytes")
    # several batches per window mixes rows from several blocks into every batch
    return int(min(rows, max(8 * batch_size, 65536)))


# ---------------------------------------------------------------------------------------------------
# opening a features artifact for training: checks, sizes, the loader


@dataclass
class Data:
    loader: object
    splits: dict                            # name -> indices into the loader's held rows
    spec: ModelSpec
    views: list
    fingerprint: dict
    evaluator: str
    feature_bytes: int
    budget: int
    config: TrainConfig                     # the run's config, every regime default filled in
    regime: str                             # small | large (gnnprep.train.regimes)
    defaults: dict                          # the values the regime filled in


def _evaluator_name(store: FeatureStore, choice: str) -> str:
    """``ogbn-<name>`` when the artifact came from an OGB node-property data set (its provenance
    names it) and the data set is scored by accuracy; ``plain`` otherwise."""
    if choice == "plain":
        return "plain"
    text = store.provenance_text
    m = re.search(r"ogbn[-_]([a-z0-9]+)", text, flags=re.IGNORECASE)
    if m is None:
        if choice == "ogb":
            raise GnnprepError(f"{store.path}: --evaluator ogb, but the provenance names no ogbn-* data set")
        return "plain"
    name = "ogbn-" + m.group(1)
    if name.lower() == "ogbn-papers100m":
        name = "ogbn-papers100M"
    return name


def take_rows(dset, positions: np.ndarray, step: int = 1 << 22) -> np.ndarray:
    """dset[positions] for sorted positions, reading ``step`` entries at a time (never the whole array)."""
    out = np.empty(len(positions), dtype=dset.dtype)
    for lo in range(0, int(positions[-1]) + 1 if len(positions) else 0, step):
        a, b = np.searchsorted(positions, [lo, lo + step])
        if a < b:
            block = dset[lo:min(lo + step, int(positions[b - 1]) + 1)]
            out[a:b] = block[positions[a:b] - lo]
    return out


def _num_classes(store: FeatureStore, labels: np.ndarray) -> int:
    """The class count: the artifact's ``num_classes``, else the largest split label + 1; capped at
    MAX_CLASSES before it sizes the output layer, every split label inside it."""
    path = store.path
    if labels.dtype.kind not in "iu":
        raise GnnprepError(f"{path}: /labels has dtype {labels.dtype}; expected integer class ids")
    declared = store.num_classes
    if not 0 <= declared <= MAX_CLASSES:
        raise GnnprepError(f"{path}: root attribute 'num_classes' is {declared}; expected 0..{MAX_CLASSES}")
    top = int(labels.max())
    if not declared and top >= MAX_CLASSES:
        raise GnnprepError(f"{path}: /labels has class id {top}; expected class ids below {MAX_CLASSES} "
                           f"(at most {MAX_CLASSES:,} classes)")
    num_classes = declared or top + 1
    bad = int(((labels < 0) | (labels >= num_classes)).sum())
    if bad:
        classes = f"a class in 0..{num_classes - 1}" if num_classes else "a class (no row has a label)"
        raise GnnprepError(f"{path}: /labels has {bad} split rows without {classes} (unlabeled rows in a split)")
    return num_classes


def _check_model_fits(spec: ModelSpec, config: TrainConfig, device, train_rows: int) -> None:
    """Refuse a model whose training state cannot fit the device's free memory, before building it."""
    params, need = training_bytes(spec, min(config.batch_size, train_rows))
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else available_ram()
    if need > free:
        raise OptionError("--hidden", f"{spec.hidden}: the {spec.name} model ({params:,} parameters, "
                                      f"{spec.num_layers} layers) needs ~{format_size(need)} to train (weights, gradients, "
                                      f"Adam state, a best copy and one batch's activations), but {device} has "
                                      f"{format_size(free)} free; expected a smaller --hidden, --layers or --batch-size")


def _select_operators(store: FeatureStore, config: TrainConfig) -> tuple[str, ...]:
    file_ops = store.operators()
    for op in config.operators or ():
        if op not in file_ops:
            raise OptionError("--operator", f"{op}: {store.path} holds operators {', '.join(file_ops)}")
    if config.operators:
        return tuple(config.operators)
    return tuple(file_ops) if config.model == "sign" else (file_ops[0],)


def open_data(path, config: TrainConfig, progress=None, device=None, budget_share: int = 1, world: int = 1) -> Data:
    """Validate the artifact against the config and build the batch loader (in memory or streaming).

    ``device``: where batches go (default: ``config.device`` resolved; under torchrun
    ``cuda:<LOCAL_RANK>``); ``budget_share``: the default memory budget is divided by it (the
    processes of one node under torchrun); ``world``: ranks taking ``batch_size`` rows each (the
    streaming read windows are sized for the global batch, so they are those of one process with
    ``batch_size · world``; a rank holds only its share of each)."""
    path = Path(path)
    with FeatureStore(path) as store:
        shards = store.shards   # checked as the store opened (a missing shard would read as NaN)
        # the files as validated here: every later read checks they are still these (never zeros
        # read from a file truncated, or another file's rows from one replaced, after this)
        guard = FileGuard([path, *(path.absolute().parent / s["file"] for s in shards or ())])
        rows = store.rows
        labels_all = store.labels()
        K_file = store.hops
        positions = store.split_positions(rows)
        config, regime, defaults = resolve(config, len(positions["train"]), K_file, store.normalized == "row")
        K = config.hops
        if not 0 <= K <= K_file:
            raise OptionError("--hops", f"{K}: {path} holds hops 0..{K_file}")
        ops = _select_operators(store, config)
        held = np.unique(np.concatenate(list(positions.values())))
        labels = take_rows(labels_all, held)
        num_classes = _num_classes(store, labels)
        model_views = views(ModelSpec(name=config.model, in_dim=1, num_classes=num_classes, hops=K, operators=ops))
        datasets = [store.hop_name(k, op) for op, k in model_views]
        d, dtype = store.hop_shape(datasets, len(rows))
        fingerprint = {"path": str(path.absolute()), "file": file_fingerprint(path),
                       "graph_fingerprint": store.graph_fingerprint}
        evaluator = _evaluator_name(store, config.evaluator)

    spec = ModelSpec(name=config.model, in_dim=d, num_classes=num_classes, hops=K, operators=ops,
                     hidden=config.hidden, layers=config.layers, dropout=config.dropout,
                     input_dropout=config.input_dropout, alpha=config.alpha, dprate=config.dprate,
                     pool=config.pool, recompute=config.recompute)
    device = devices.torch_device(config.device) if device is None else device
    _check_model_fits(spec, config, device, len(positions["train"]))  # before reading any features
    # rows are held in host memory first
    budget = config.memory_budget or devices.default_budget("cpu") // max(1, budget_share)
    row_bytes = len(datasets) * d * dtype.itemsize
    feature_bytes = len(held) * row_bytes
    splits = {name: np.searchsorted(held, pos) for name, pos in positions.items()}
    labels = labels.astype(np.int64)
    if feature_bytes <= budget:
        loader = InMemoryBatches.load(path, datasets, held, labels, device, progress, guard)
    else:
        window = window_rows_for(budget, row_bytes, config.batch_size * world, config.prefetch, feature_bytes)
        loader = StreamingBatches(path, datasets, held, labels, device, window, config.prefetch, guard)
    return Data(loader=loader, splits=splits, spec=spec, views=model_views, fingerprint=fingerprint,
                evaluator=evaluator, feature_bytes=feature_bytes, budget=budget, config=config, regime=regime,
                defaults=defaults)


def normalize_rows(x: torch.Tensor, how: str) -> torch.Tensor:
    """Scale each row of each hop: ``row`` to unit L1 norm, ``l2`` to unit L2 norm (zero rows stay
    zero). Applied after propagation, row by row, so it needs no graph."""
    if how == "row":
        return x / x.abs().sum(-1, keepdim=True).clamp_min(1e-12)
    if how == "l2":
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return x
