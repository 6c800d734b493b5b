"""The Python API (issue 25): gnnprep.open gives the typed reader of every artifact kind; a features
artifact's numpy reads equal the HDF5 content; its loader's batches are exactly the ones
``gnnprep train`` trains on for the same seed, in memory and streamed (a budget below the data)."""

import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from fixtures import build_artifacts, write_features

import gnnprep
from gnnprep.core.errors import GnnprepError
from gnnprep.info import describe


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    build_artifacts(tmp, n=300, m=1500, d=12, seed=3, hag_capacity=None, specs=[("hdg", "hop-shells:2,cap=4")], hops=2)
    return tmp


def test_open_gives_each_artifact_kind_its_reader_with_info(artifacts):
    kinds = {"g.h5": "GraphStore", "f.h5": "Features", "hag.h5": "HagFile", "hdg.h5": "HdgFile"}
    for name, cls in kinds.items():
        with gnnprep.open(artifacts / name) as a:
            assert type(a).__name__ == cls
            assert a.info == describe(artifacts / name)
    with gnnprep.open(artifacts / "hag.h5") as h:
        hag = h.load()
        assert hag.num_nodes == 300 and h.attrs["num_agg"] == hag.num_agg
    with gnnprep.open(artifacts / "hdg.h5") as h:
        assert h.load().channels() == h.channels


def test_open_refuses_what_is_not_an_artifact(tmp_path):
    (tmp_path / "x.h5").write_bytes(b"not hdf5")
    with pytest.raises(GnnprepError, match="x.h5"):
        gnnprep.open(tmp_path / "x.h5")
    with h5py.File(tmp_path / "y.h5", "w") as f:
        f.attrs["format"] = "someone.else"
    with pytest.raises(GnnprepError, match="someone.else"):
        gnnprep.open(tmp_path / "y.h5")


@pytest.mark.parametrize("operators", [("sym",), ("sym", "rw")])
def test_reads_for_a_split_or_ids_equal_the_hdf5_content(tmp_path, operators):
    rng = np.random.default_rng(1)
    path = write_features(tmp_path / "f.h5", rng, n=70, d=9, K=3, operators=operators, chunk_rows=8)
    with h5py.File(path, "r") as h, gnnprep.open(path) as f:
        rows = h["rows"][:]
        for split in ("train", "valid", "test"):
            ids = h[f"splits/{split}"][:]
            pos = np.searchsorted(rows, ids)
            got = f.read(split)
            want = np.stack([h[f"hops/{k}"][:][pos] for k in range(4)], axis=1)
            assert got.dtype == np.float32 and np.array_equal(got, want)
            assert np.array_equal(f.labels_of(split), h["labels"][:][pos])
            assert np.array_equal(f.splits[split], ids)
        ids = np.array([5, 0, 5, 69, 33])                        # any order, repeats
        both = f.read(ids, hops=[0, 3], operators=list(operators))
        assert isinstance(both, list) and len(both) == len(operators)
        for op, a in zip(operators, both):
            want = np.stack([h[f"channels/{op}/{k}"][:][ids] for k in (0, 3)], axis=1)
            assert np.array_equal(a, want)
        with pytest.raises(GnnprepError, match="node 70 is not a stored row"):
            f.read([1, 70])
        with pytest.raises(GnnprepError, match="hop 4"):
            f.read("train", hops=[4])
        with pytest.raises(GnnprepError, match="no split 'nope'"):
            f.read("nope")


def _trainer_batches(monkeypatch, path, config):
    """The (x, y) batches ``gnnprep train`` trains on: every shuffled batches() call of its loader."""
    from gnnprep.train import batches as B
    from gnnprep.train.trainer import train

    seen = []
    for cls in (B.InMemoryBatches, B.StreamingBatches):
        orig = cls.batches

        def spy(self, split, batch_size, shuffle, rng=None, share=None, _orig=orig):
            for x, y in _orig(self, split, batch_size, shuffle, rng, share):
                if shuffle:
                    seen.append((x.clone(), y.clone(), self.streaming))
                yield x, y

        monkeypatch.setattr(cls, "batches", spy)
    train(path, path.parent / "run", config)
    return seen


@pytest.mark.parametrize("budget", [None, 16000])
def test_the_loader_yields_exactly_the_trainers_batches(tmp_path, monkeypatch, budget):
    from gnnprep.train.config import TrainConfig

    rng = np.random.default_rng(2)
    path = write_features(tmp_path / "f.h5", rng, n=200, d=10, K=3, chunk_rows=16)
    row_bytes = 4 * 10 * 4
    config = TrainConfig(model="lc-gprgnn", hops=3, batch_size=16, epochs=2, patience=0, seed=7, memory_budget=budget,
                         normalize_features="none", device="cpu", hidden=8)
    seen = _trainer_batches(monkeypatch, path, config)
    monkeypatch.undo()
    streamed = budget is not None
    assert seen and all(s[2] == streamed for s in seen)
    if streamed:
        assert budget < 200 * row_bytes                          # the budget is below the data
    loader = gnnprep.open(path).loader("train", hops=3, batch_size=16, seed=7, memory_budget=budget)
    assert loader.streaming == streamed
    ours = [b for _ in range(2) for b in loader]                  # two epochs, the shuffle stream continuing
    assert len(ours) == len(seen)
    for (x, y), (tx, ty, _) in zip(ours, seen):
        assert x.shape[1:] == (4, 10) and torch.equal(x, tx) and torch.equal(y, ty)


def test_several_operators_come_as_one_tensor_per_channel(tmp_path):
    path = write_features(tmp_path / "f.h5", np.random.default_rng(4), n=60, d=5, K=2, operators=("sym", "rw"))
    f = gnnprep.open(path)
    x, y = next(iter(f.loader("valid", operators=["sym", "rw"], batch_size=1000)))
    ref = f.read("valid", operators=["sym", "rw"])
    assert isinstance(x, list) and len(x) == 2
    for t, a in zip(x, ref):
        assert np.array_equal(t.numpy(), a)
    assert np.array_equal(y.numpy(), f.labels_of("valid"))
    with pytest.raises(GnnprepError, match="no split"):
        f.loader("nope")


def test_gnnprep_open_imports_no_torch_until_a_loader(tmp_path):
    path = write_features(tmp_path / "f.h5", np.random.default_rng(5))
    code = ("import sys, gnnprep\nf = gnnprep.open(sys.argv[1]); f.read('train'); f.info\n"
            "assert 'torch' not in sys.modules and 'numba' not in sys.modules, 'imported'\n"
            "f.loader('train', batch_size=8); assert 'torch' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
