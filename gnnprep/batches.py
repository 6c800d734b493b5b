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
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator

import h5py
import numpy as np
import torch

from gnnprep.errors import GnnprepError

BLOCK_BYTES = 4 * 1024**2     # target bytes of one block read when the dataset is stored contiguously
SPARSE_READ = 16              # a block whose span is this many times its wanted rows reads point-wise


def block_rows(dset: h5py.Dataset) -> int:
    """Rows of one aligned read: the chunk height, or ~4 MiB of rows for contiguous storage."""
    if dset.chunks is not None:
        return int(dset.chunks[0])
    row_bytes = max(1, int(np.prod(dset.shape[1:])) * dset.dtype.itemsize)
    return max(64, BLOCK_BYTES // row_bytes)


def read_rows(dsets: list[h5py.Dataset], positions: np.ndarray, out: np.ndarray, step: int) -> None:
    """out[i, v] = dsets[v][positions[i]] for sorted positions, reading aligned blocks of ``step`` rows."""
    if len(positions) == 0:
        return
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


def _to_batch(x: torch.Tensor, y: torch.Tensor, device: torch.device):
    non_blocking = device.type == "cuda"
    return x.to(device, non_blocking=non_blocking).float(), y.to(device, non_blocking=non_blocking)


class InMemoryBatches:
    """Every needed row held in one tensor [R, V, d]; batches are index gathers."""

    streaming = False

    def __init__(self, data: torch.Tensor, labels: torch.Tensor, device: torch.device):
        self.data = data
        self.labels = labels
        self.device = device

    @classmethod
    def load(cls, path, datasets: list[str], positions: np.ndarray, labels: np.ndarray, device: torch.device,
             progress=None) -> "InMemoryBatches":
        with h5py.File(path, "r") as f:
            dsets = [f[name] for name in datasets]
            d = dsets[0].shape[1]
            out = np.empty((len(positions), len(dsets), d), dtype=dsets[0].dtype)
            step = block_rows(dsets[0])
            # in slices of blocks so the progress callback advances
            per = max(1, 64 * step)
            for s in range(0, len(positions), per):
                read_rows(dsets, positions[s:s + per], out[s:s + per], step)
                if progress is not None:
                    progress("load features", min(s + per, len(positions)), len(positions))
        data = torch.from_numpy(out)
        if device.type == "cuda" and data.nbytes < 0.5 * torch.cuda.mem_get_info(device)[0]:
            data = data.to(device)
        return cls(data, torch.from_numpy(labels.astype(np.int64)).to(data.device), device)

    def batches(self, split: np.ndarray, batch_size: int, shuffle: bool, rng: np.random.Generator | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``split``: indices into the held rows (sorted)."""
        idx = split[rng.permutation(len(split))] if shuffle else split
        idx = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.data.device)
        for s in range(0, len(idx), batch_size):
            b = idx[s:s + batch_size]
            yield _to_batch(self.data.index_select(0, b), self.labels.index_select(0, b), self.device)

    def close(self) -> None:
        pass


class StreamingBatches:
    """Batches read from HDF5 on the fly, block-shuffled, prefetched by a background thread."""

    streaming = True

    def __init__(self, path, datasets: list[str], positions: np.ndarray, labels: np.ndarray, device: torch.device,
                 window_rows: int, prefetch: int = 2):
        self.path = path
        self.datasets = datasets
        self.positions = positions          # file positions of the held row indices (sorted)
        self.labels = labels.astype(np.int64)
        self.device = device
        self.window_rows = max(1, int(window_rows))
        self.prefetch = max(1, int(prefetch))
        with h5py.File(path, "r") as f:
            self.step = block_rows(f[datasets[0]])

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
            with h5py.File(self.path, "r") as f:
                dsets = [f[name] for name in self.datasets]
                d = dsets[0].shape[1]
                for w, seed in zip(windows, seeds):
                    if stop.is_set():
                        return
                    x = np.empty((len(w), len(dsets), d), dtype=dsets[0].dtype)
                    read_rows(dsets, self.positions[w], x, self.step)
                    y = self.labels[w]
                    if shuffle:
                        p = np.random.default_rng(seed).permutation(len(w))
                        x, y = x[p], y[p]
                    item = (torch.from_numpy(x), torch.from_numpy(y))
                    if self.device.type == "cuda":  # page-locked: the copy to the device runs async
                        item = (item[0].pin_memory(), item[1].pin_memory())
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
        except BaseException as e:  # handed to the consumer, which re-raises it in the main thread
            q.put(e)
            return
        q.put(None)

    def batches(self, split: np.ndarray, batch_size: int, shuffle: bool, rng: np.random.Generator | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        windows = self._windows(split, shuffle, rng)
        # the window shuffles are drawn here, in the caller's generator, so a seed fixes them
        seeds = rng.integers(0, 2**63, len(windows)) if shuffle else [0] * len(windows)
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
            stop.set()
            while t.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    t.join(timeout=0.05)

    def close(self) -> None:
        pass


def window_rows_for(budget: int, row_bytes: int, batch_size: int, prefetch: int) -> int:
    """Rows per read window so that the queued windows plus the one being consumed fit ``budget``."""
    rows = budget // max(1, row_bytes * (prefetch + 2))
    if rows < 16:
        raise GnnprepError(f"--memory-budget {budget} bytes cannot hold {prefetch + 2} read windows of 16 rows "
                           f"({row_bytes} bytes each); need at least {16 * row_bytes * (prefetch + 2)} bytes")
    # several batches per window mixes rows from several blocks into every batch
    return int(min(rows, max(8 * batch_size, 65536)))

