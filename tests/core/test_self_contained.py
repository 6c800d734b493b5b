"""An artifact received from someone else must only ever read itself (issue 23, item 2): a dataset in
external raw storage, an external link, or a virtual dataset reading another file (absolute, ``../``,
``/proc``) makes every command that opens the artifact refuse with one line, and nothing of the
outside file reaches an output. A legitimate sharded artifact (virtual datasets over the shards it
lists beside it) keeps working: tests/precompute/test_distributed.py."""

import h5py
import numpy as np
import pytest
from fixtures import make_artifacts, make_store, run


def _secret(tmp_path, nbytes):
    """An outside file the artifact must never read (stands in for /etc/passwd)."""
    p = tmp_path / "elsewhere" / "secret.bin"
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(b"root:x:0:0:" * (nbytes // 11 + 1))
    return p


def _external_storage(f, name, tmp_path):
    ds = f[name]
    shape, dtype = ds.shape, ds.dtype
    del f[name]
    secret = _secret(tmp_path, int(np.prod(shape)) * dtype.itemsize)
    f.create_dataset(name, shape=shape, dtype=dtype, external=[(str(secret), 0, h5py.h5f.UNLIMITED)])


def _external_link(f, name, tmp_path):
    data = f[name][()]
    other = tmp_path / "elsewhere" / "other.h5"
    other.parent.mkdir(exist_ok=True)
    with h5py.File(other, "w") as o:
        o.create_dataset("x", data=data)
    del f[name]
    f[name] = h5py.ExternalLink(str(other), "/x")


def _virtual(source_name):
    def make(f, name, tmp_path):
        ds = f[name]
        shape, dtype = ds.shape, ds.dtype
        other = tmp_path / "elsewhere" / "other.h5"
        other.parent.mkdir(exist_ok=True)
        with h5py.File(other, "w") as o:
            o.create_dataset("x", data=ds[()])
        del f[name]
        layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
        layout[...] = h5py.VirtualSource(source_name(other), "x", shape=shape)
        f.create_virtual_dataset(name, layout)
    return make


TRICKS = {
    "external-storage": _external_storage,
    "external-link": _external_link,
    "virtual-absolute": _virtual(lambda other: str(other)),
    "virtual-parent": _virtual(lambda other: "../elsewhere/other.h5"),
    "virtual-proc": _virtual(lambda other: "/proc/self/environ"),
}


@pytest.fixture
def artifacts(tmp_path, rng):
    store, *_ = make_store(tmp_path, rng)
    return make_artifacts(tmp_path, store)


def _first_dataset(path, prefix):
    names = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n.startswith(prefix) else None)
    return sorted(names)[0]


TARGET = {"graph": "nodes/features", "features": "hops/0", "hag": "agg/inputs", "hdg": "levels/"}


def _uses(kind, made, tmp_path):
    """Every command that opens an artifact of ``kind`` (besides ``info``)."""
    store = str(made["graph"])
    out = ["-o", str(tmp_path / "out" / "x.h5")]
    return {
        "graph": [["precompute", store, "--hops", "1", "--device", "cpu", *out], ["ingest", store, *out],
                  ["hag", store, *out], ["hdg", store, "--select", "hop-shells:2", *out]],
        "features": [["train", "sgc", str(made["features"]), "-o", str(tmp_path / "out" / "run"), "--epochs", "1"]],
        "hag": [["precompute", store, "--hops", "1", "--device", "cpu", "--hag", str(made["hag"]), *out]],
        "hdg": [["precompute", store, "--hops", "1", "--device", "cpu", "--hdg", str(made["hdg"]), *out]],
    }[kind]


@pytest.mark.parametrize("trick", sorted(TRICKS))
@pytest.mark.parametrize("kind", ["graph", "features", "hag", "hdg"])
def test_an_artifact_that_reads_another_file_is_refused(tmp_path, artifacts, kind, trick):
    path = artifacts[kind]
    name = TARGET[kind] if not TARGET[kind].endswith("/") else _first_dataset(path, TARGET[kind])
    with h5py.File(path, "a") as f:
        TRICKS[trick](f, name, tmp_path)
    (tmp_path / "out").mkdir()
    for args in [["info", str(path)]] + _uses(kind, artifacts, tmp_path):
        r = run(args)
        assert r.exit_code == 1, (args, r.stdout, r.stderr)
        assert r.stdout == "" and "Traceback" not in r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"Error: {path}: /{name}") and "expected data" in last, (args, r.stderr)
        assert list((tmp_path / "out").iterdir()) == [], args
