"""A features file truncated or replaced while a loader reads it (issue 32, line 15, last part).

HDF5 reads a chunk beyond a file's new end as zeros, never as an error, and opens whatever file is at
the path at the next epoch; so a streamed loader over a file truncated between two of its batches
handed out zeros. Every read of the trainer's loaders now checks the file is still the one opened
(:class:`gnnprep.train.batches.FileGuard`: one ``os.stat`` per row block) and h5py's errors on the
way become the same one line: a ``GnnprepError`` from the Python API, ``Error: ...`` and exit 1 from
``gnnprep train``. An untouched file streams exactly what it holds."""

from __future__ import annotations

import os
import time

import h5py
import numpy as np
import pytest
import torch
from fixtures import run, write_features

import gnnprep
from gnnprep.core.errors import GnnprepError
from gnnprep.train import batches

N, D, K = 4000, 16, 2
BUDGET = 20000          # bytes: a few read windows of ~34 rows, far less than the 4000 rows: streamed
CHANGED = "the file changed or was truncated while it was read"


def _features(path, seed=0):
    return write_features(path, np.random.default_rng(seed), n=N, d=D, K=K, chunk_rows=64)


def _other(path):
    """Another features artifact, in the same folder."""
    return _features(path.parent / f"other-{path.name}", seed=1)


def _rewrite(path, data: bytes) -> None:
    time.sleep(0.02)   # mtimes are as coarse as the kernel's clock tick: the write must land after it
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate(len(data))


# case -> what happens to the file (path) while it is read
CHANGES = {
    "truncated-to-half": lambda p: os.truncate(p, os.path.getsize(p) // 2),
    "truncated-to-the-header": lambda p: os.truncate(p, 2048),
    "truncated-to-nothing": lambda p: os.truncate(p, 0),
    "replaced-by-another-artifact": lambda p: os.replace(_other(p), p),
    "overwritten-in-place-by-another-artifact": lambda p: _rewrite(p, _other(p).read_bytes()),
    "zeroed-in-place-same-size": lambda p: _rewrite(p, bytes(os.path.getsize(p))),
    "removed": lambda p: os.unlink(p),
}


def _one_line(e: BaseException, path) -> str:
    text = str(e)
    assert "\n" not in text and text.startswith(f"{path}: "), text
    return text


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_streamed_loader_refuses_a_file_changed_between_two_batches(tmp_path, change):
    path = _features(tmp_path / "f.h5")
    loader = gnnprep.open(path).loader("train", batch_size=64, memory_budget=BUDGET, prefetch=1, shuffle=False)
    assert loader.streaming and len(loader) > 10
    with h5py.File(path, "r") as f:
        want = np.stack([f[f"hops/{k}"][:] for k in range(K + 1)], axis=1)[f["splits/train"][:]]
    it = iter(loader)
    x, _ = next(it)
    np.testing.assert_array_equal(x.numpy(), want[:64])          # read before the change: the file's rows
    CHANGES[change](path)
    got = 64
    with pytest.raises(GnnprepError) as e:
        for x, _ in it:   # batches already read ahead may still come: they must be the file's own rows
            np.testing.assert_array_equal(x.numpy(), want[got:got + len(x)])
            got += len(x)
    assert CHANGED in _one_line(e.value, path) and "expected it to stay as it was opened" in str(e.value)
    assert got < len(want)
    with pytest.raises(GnnprepError, match=CHANGED):   # and the next epoch, which opens the path again
        next(iter(loader))


@pytest.mark.parametrize("change", ["truncated-to-half", "truncated-to-the-header", "replaced-by-another-artifact"])
def test_a_file_changed_between_epochs_is_refused_at_the_next_epoch(tmp_path, change):
    path = _features(tmp_path / "f.h5")
    loader = gnnprep.open(path).loader("valid", batch_size=64, memory_budget=BUDGET)
    assert loader.streaming
    first = [x for x, _ in loader]
    assert sum(len(x) for x in first) == N // 4
    CHANGES[change](path)
    with pytest.raises(GnnprepError, match=CHANGED):
        for _ in loader:
            pass


def _during_read(monkeypatch, path, change, after=1, then_raise=None):
    """h5py's ``read_direct`` changes the file (``change``) after ``after`` reads, inside a block, and
    then reads on (or raises ``then_raise``, as h5py does over a file cut below its metadata)."""
    real = h5py.Dataset.read_direct
    calls = {"n": 0}

    def read_direct(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] == after + 1:
            CHANGES[change](path)
            if then_raise is not None:
                raise then_raise
        return real(self, *args, **kw)

    monkeypatch.setattr(h5py.Dataset, "read_direct", read_direct)
    return calls


@pytest.mark.parametrize("raised", [None, OSError("Can't synchronously read data (addr overflow)"),
                                    KeyError("Unable to open object")], ids=["zeros", "OSError", "KeyError"])
@pytest.mark.parametrize("change", ["truncated-to-half", "truncated-to-the-header", "replaced-by-another-artifact"])
def test_a_file_truncated_inside_a_block_read_is_refused(tmp_path, monkeypatch, change, raised):
    path = _features(tmp_path / "f.h5")
    loader = gnnprep.open(path).loader("train", batch_size=64, memory_budget=BUDGET, prefetch=1)
    calls = _during_read(monkeypatch, path, change, after=1, then_raise=raised)
    with pytest.raises(GnnprepError) as e:
        for _ in loader:
            pass
    assert CHANGED in _one_line(e.value, path), e.value
    assert calls["n"] >= 2


@pytest.mark.parametrize("raised", [OSError("Can't synchronously read data (inflate() failed)"),
                                    KeyError("Unable to synchronously open object"), RuntimeError("bad chunk")])
def test_an_h5py_error_on_an_unchanged_file_is_one_line_too(tmp_path, monkeypatch, raised):
    path = _features(tmp_path / "f.h5")
    loader = gnnprep.open(path).loader("train", batch_size=64, memory_budget=BUDGET, prefetch=1)

    def read_direct(self, *args, **kw):
        raise raised

    monkeypatch.setattr(h5py.Dataset, "read_direct", read_direct)
    with pytest.raises(GnnprepError) as e:
        next(iter(loader))
    text = _one_line(e.value, path)
    assert "cannot read /hops/" in text and "expected a readable features artifact" in text
    assert CHANGED not in text


def test_an_untouched_file_streams_exactly_its_rows(tmp_path):
    path = _features(tmp_path / "f.h5")
    with h5py.File(path, "r") as f:
        hops = np.stack([f[f"hops/{k}"][:] for k in range(K + 1)], axis=1)
        labels = f["labels"][:]
        train = f["splits/train"][:]
    loader = gnnprep.open(path).loader("train", batch_size=100, memory_budget=BUDGET, shuffle=False)
    assert loader.streaming
    for _ in range(2):
        x = torch.cat([x for x, _ in loader]).numpy()
        y = torch.cat([y for _, y in loader]).numpy()
        np.testing.assert_array_equal(x, hops[train])
        np.testing.assert_array_equal(y, labels[train])
    shuffled = gnnprep.open(path).loader("train", batch_size=100, memory_budget=BUDGET, seed=3)
    again = gnnprep.open(path).loader("train", batch_size=100, memory_budget=BUDGET, seed=3)
    for (a, ya), (b, yb) in zip(shuffled, again):
        assert torch.equal(a, b) and torch.equal(ya, yb)


def test_the_guard_costs_one_stat_per_block(tmp_path, monkeypatch):
    path = _features(tmp_path / "f.h5")
    loader = gnnprep.open(path).loader("train", batch_size=64, memory_budget=BUDGET, shuffle=False)
    stats = {"n": 0}
    real = os.stat

    def counting(p, *a, **kw):
        if os.fspath(p) == str(path):
            stats["n"] += 1
        return real(p, *a, **kw)

    with h5py.File(path, "r") as f:
        blocks = len(np.unique(f["splits/train"][:] // 64))    # rows == positions; chunks of 64 rows
    monkeypatch.setattr(batches.os, "stat", counting)
    assert sum(len(y) for _, y in loader) == N // 2
    assert stats["n"] == blocks + 1   # one per row block read, and one when the epoch opens the file


# --------------------------------------------------------------------------------------- gnnprep train


def _train(tmp_path, path, budget: str | None):
    args = ["train", "sgc", str(path), "-o", str(tmp_path / "run"), "--epochs", "3", "--quiet",
            "--batch-size", "64"]
    return run(args + (["--memory-budget", budget] if budget else []))


@pytest.mark.parametrize("change", ["truncated-to-half", "truncated-to-the-header", "replaced-by-another-artifact",
                                    "zeroed-in-place-same-size"])
@pytest.mark.parametrize("budget,when", [(str(BUDGET), "after-the-first-window"),
                                         (str(BUDGET), "inside-the-second-block"),
                                         (None, "inside-the-second-block")],   # in memory: one read_rows call
                         ids=["streamed-after-the-first-window", "streamed-inside-a-block", "in-memory-inside-a-block"])
def test_train_refuses_a_file_changed_while_it_reads(tmp_path, monkeypatch, change, budget, when):
    path = _features(tmp_path / "f.h5")
    if when == "inside-the-second-block":   # sgc reads one view (S^K X): read 2 is the second block's
        _during_read(monkeypatch, path, change, after=1)
    else:
        real = batches.read_rows
        calls = {"n": 0}

        def read_rows(*args, **kw):   # the streamed reader's first window is read, then the file changes
            calls["n"] += 1
            real(*args, **kw)
            if calls["n"] == 1:
                CHANGES[change](path)

        monkeypatch.setattr(batches, "read_rows", read_rows)
    r = _train(tmp_path, path, budget)
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}: {CHANGED} ("), r.stderr
    assert lines[0].endswith("expected it to stay as it was opened"), r.stderr
    assert not (tmp_path / "run" / "model.pt").exists()


def test_train_over_an_untouched_file_streams_as_before(tmp_path):
    path = _features(tmp_path / "f.h5")
    r = _train(tmp_path, path, str(BUDGET))
    assert r.exit_code == 0, r.stderr


def test_an_error_that_is_not_the_files_is_not_called_damage(tmp_path, monkeypatch):
    """Only h5py's own read errors become 'cannot read'; anything else in the reader thread (a
    pinned-memory copy failing, say) comes through as it is."""
    path = _features(tmp_path / "f.h5")
    loader = gnnprep.open(path).loader("train", batch_size=64, memory_budget=BUDGET)

    def host_batch(*args):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(batches, "_host_batch", host_batch)
    with pytest.raises(RuntimeError, match="CUDA error") as e:
        next(iter(loader))
    assert not isinstance(e.value, GnnprepError)
