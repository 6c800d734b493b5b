"""The host ring a device's hop rows go through on their way to the writer
(gnnprep.precompute.torch_backends.HostRing): a buffer is refilled only once the writer is done with
what it held. Run here unpinned, on the CPU; on a CUDA machine the precompute tests run it pinned."""

import h5py
import numpy as np
import pytest
from fixtures import make_store

from gnnprep.precompute import hop_loop
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.hop_writer import OWNED_SLOTS, HopWriter
from gnnprep.precompute.run import precompute

torch = pytest.importorskip("torch")

from gnnprep.precompute.torch_backends import HostRing, TorchBackend  # noqa: E402 - needs torch


def test_every_copy_reaches_the_file_though_the_buffers_are_reused(tmp_path, rng):
    parts = [torch.from_numpy(rng.standard_normal((int(rng.integers(1, 40)), 5)).astype(np.float32))
             for _ in range(6 * (OWNED_SLOTS + 1))]
    rows = sum(len(p) for p in parts)
    ring, writer = HostRing(torch, pinned=False), HopWriter(np.float32)
    with h5py.File(tmp_path / "o.h5", "w") as f:
        ds = f.create_dataset("h", (rows, 5), dtype=np.float32)
        p0 = 0
        for p in parts:
            writer.put(ds, p0, p0 + len(p), 0, 5, ring.copy(p), owned=True)
            p0 += len(p)
        writer.wait()
        np.testing.assert_array_equal(ds[:], torch.cat(parts).numpy())
    assert len({id(b) for b in ring.bufs}) == OWNED_SLOTS + 1  # reused, grown where a part was larger


@pytest.mark.parametrize("rows", ["all", "labeled"])
def test_the_torch_backend_through_the_ring_writes_the_same_bytes(tmp_path, rng, monkeypatch, rows):
    path, *_ = make_store(tmp_path, rng, n=300, m=1500, d=9)
    cfg = PrecomputeConfig(hops=3, operators=("sym", "rw"), backend="torch", device="cpu", rows=rows, blocks=(1, 3, 2))
    precompute(path, tmp_path / "views.h5", cfg)

    plain_init, rings = TorchBackend.__init__, []

    def with_ring(self, *a, **k):
        plain_init(self, *a, **k)
        self.ring = HostRing(torch, pinned=False)
        rings.append(self.ring)

    monkeypatch.setattr(TorchBackend, "__init__", with_ring)
    monkeypatch.setattr(hop_loop, "WRITE_BYTES", 4 * 5 * 4)  # 4-5 rows a write: many more writes than buffers
    precompute(path, tmp_path / "ring.h5", cfg)
    assert rings and all(all(b is not None for b in r.bufs) for r in rings)  # every buffer went round
    with FeatureStore(tmp_path / "views.h5") as a, FeatureStore(tmp_path / "ring.h5") as b:
        for op in ("sym", "rw"):
            for k in range(4):
                np.testing.assert_array_equal(a.hop(k, op)[:], b.hop(k, op)[:])
