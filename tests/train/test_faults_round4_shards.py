"""A sharded features artifact (torchrun) read through every reader (issue 32, items 1 and 6): the
Python API (``gnnprep.open``, ``Features``, ``FeatureStore``, ``loader``) checks the shards as it
opens the artifact, as ``gnnprep info`` and ``gnnprep train`` do. A shard edited to read another
file (external storage, an external link, a virtual dataset over an outside file or ``/proc``), a
missing shard (read as NaN before), a shard lacking or reshaping a dataset the artifact maps, another
run's shard, a resized shard and a hard-link cycle inside a shard: one error naming the shard, no
byte of the outside file returned, the folder and the inputs unchanged.

The sharded artifact is written in-process by the sharded path as a job of one rank (no torch
launch): the same files torchrun writes, one shard."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import make_store, run

import gnnprep
from gnnprep.core.distributed import Dist
from gnnprep.core.errors import GnnprepError
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.train.loader import Features, loader

SECRET = b"root:x:0:0:root:/root:/bin/bash\n"
HOP = "channels/sym/1"


class OneRank(Dist):
    """The sharded path as a job of one rank, without torch."""

    def start(self, backend: str = "gloo") -> None:
        pass

    def gather(self, obj) -> list:
        return [obj]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    from gnnprep.precompute.sharded import precompute_sharded

    t = tmp_path_factory.mktemp("sharded")
    g, *_ = make_store(t, np.random.default_rng(4), n=30, m=80, d=4)
    out = t / "art" / "f.h5"
    out.parent.mkdir()
    precompute_sharded(g, out, PrecomputeConfig(hops=2, device="cpu"), OneRank(0, 1))
    with h5py.File(out, "a") as f:   # the store has train and test only; the trainer needs valid too
        f["splits/valid"] = np.arange(2, 30, 9)
    return out.parent


def _shard(folder: Path) -> Path:
    (p,) = [p for p in folder.iterdir() if ".shard-" in p.name]
    return p


def _secret_file(t: Path, nbytes: int) -> Path:
    p = t / "elsewhere" / "passwd"
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(SECRET * (nbytes // len(SECRET) + 1))
    return p


def _replace_hop(f: h5py.File, make) -> None:
    ds = f[HOP]
    shape, dtype, data = ds.shape, ds.dtype, ds[()]
    del f[HOP]
    make(f, shape, dtype, data)


def _external_storage(t, f):
    def make(f, shape, dtype, data):
        secret = _secret_file(t, int(np.prod(shape)) * dtype.itemsize)
        f.create_dataset(HOP, shape=shape, dtype=dtype, external=[(str(secret), 0, h5py.h5f.UNLIMITED)])
    _replace_hop(f, make)


def _other_file(t, data):
    """``elsewhere/other.h5`` beside the test's files, holding ``data`` as /x."""
    other = t / "elsewhere" / "other.h5"
    other.parent.mkdir(exist_ok=True)
    with h5py.File(other, "w") as o:
        o["x"] = data
    return other


def _external_link(t, f):
    def make(f, shape, dtype, data):
        f[HOP] = h5py.ExternalLink(str(_other_file(t, data)), "/x")
    _replace_hop(f, make)


def _virtual(source):
    def trick(t, f):
        def make(f, shape, dtype, data):
            other = _other_file(t, data)
            layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
            layout[...] = h5py.VirtualSource(source(other), "x", shape=shape)
            f.create_virtual_dataset(HOP, layout)
        _replace_hop(f, make)
    return trick


def _gone(t, f):
    del f[HOP]


def _reshaped(t, f):
    _replace_hop(f, lambda f, shape, dtype, data: f.create_dataset(HOP, data=data[:, :-1]))


def _other_run(t, f):
    attr = json.loads(f.attrs["shard"])
    f.attrs["shard"] = json.dumps({**attr, "key": "0123456789abcdef-0-of-1"})


def _grown(t, f):
    f["extra"] = np.zeros(4096)


def _cycle(t, f):
    f["channels/sym/loop"] = f["channels"]


# case -> (edit of the shard (None: the shard is removed), keep the recorded size (True: the
# artifact's 'shards' attribute is updated to the edited shard's size, so only the edit itself can
# give it away), what the one line says)
CASES = {
    "external-storage": (_external_storage, True, r"channels/sym/1 is stored outside the file"),
    "external-link": (_external_link, True, r"channels/sym/1 is an external link"),
    "virtual-absolute": (_virtual(str), True, r"channels/sym/1 is a virtual dataset reading"),
    "virtual-proc": (_virtual(lambda other: "/proc/self/environ"), True, r"is a virtual dataset reading '/proc"),
    "missing": (None, True, r"shard \S+ is missing"),
    "dataset-gone": (_gone, True, r"has no dataset channels/sym/1, which /channels/sym/1 reads"),
    "dataset-reshaped": (_reshaped, True, r"has channels/sym/1 of shape \(30, 3\)"),
    "another-runs-shard": (_other_run, True, r"is not the shard this artifact was published with"),
    "resized": (_grown, False, r"has \d+ bytes; expected \d+"),
    "cycle": (_cycle, True, r"is a hard link to the group /channels that holds it"),
}


def _digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(params=sorted(CASES))
def damaged(request, sharded, tmp_path):
    edit, record_size, expected = CASES[request.param]
    folder = tmp_path / "art"
    shutil.copytree(sharded, folder)
    shard = _shard(folder)
    if edit is None:
        shard.unlink()
    else:
        with h5py.File(shard, "a") as f:
            edit(tmp_path, f)
        if record_size:
            with h5py.File(folder / "f.h5", "a") as f:
                shards = json.loads(f.attrs["shards"])
                shards[0]["bytes"] = shard.stat().st_size
                f.attrs["shards"] = json.dumps(shards)
    return folder / "f.h5", shard.name, expected, tmp_path


READERS = {
    "gnnprep.open": lambda p: gnnprep.open(p),
    "gnnprep.open(..).read": lambda p: gnnprep.open(p).read([0, 1, 2]),
    "gnnprep.open(..).labels_of": lambda p: gnnprep.open(p).labels_of("train"),
    "gnnprep.open(..).loader": lambda p: gnnprep.open(p).loader("train", batch_size=4),
    "Features": lambda p: Features(p),
    "FeatureStore": lambda p: FeatureStore(p),
    "loader()": lambda p: loader(p, "valid", batch_size=4),
}


def test_the_intact_sharded_artifact_reads_through_every_reader(sharded):
    path = sharded / "f.h5"
    with gnnprep.open(path) as f:
        a = f.read([0, 1, 2])
        assert isinstance(f, Features) and a.shape == (3, 3, 4) and np.isfinite(a).all()
        assert f.shards[0]["present"] and len(f.labels_of("train")) == 10
        x, y = next(iter(f.loader("train", batch_size=4)))
        assert tuple(x.shape) == (4, 3, 4) and np.isfinite(x.numpy()).all()
    assert run(["info", path]).exit_code == 0


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_damaged_or_edited_shard_is_refused_by_every_python_reader(damaged, reader):
    path, shard_name, expected, t = damaged
    before = _digest(t)
    with pytest.raises(GnnprepError) as e:
        READERS[reader](path)
    text = str(e.value)
    assert "\n" not in text and shard_name in text, text
    assert text.startswith(str(path.parent)), text
    assert re.search(expected, text), text
    assert "root:x" not in text
    assert _digest(t) == before


@pytest.mark.parametrize("command", ["info", "train"])
def test_a_damaged_or_edited_shard_is_refused_by_the_commands(damaged, command):
    path, shard_name, expected, t = damaged
    out = t / "out"
    out.mkdir()
    args = {"info": ["info", path],
            "train": ["train", "sgc", path, "-o", out / "run", "--epochs", "1", "--device", "cpu"]}[command]
    before = _digest(t)
    r = run(args)
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len([ln for ln in lines if ln.startswith("Error:")]) == 1, r.stderr
    assert lines[-1].startswith("Error: ") and shard_name in lines[-1], r.stderr
    assert re.search(expected, lines[-1]), lines[-1]
    assert _digest(t) == before and list(out.iterdir()) == []
