"""The hop writer's "sync" item (flush and fdatasync after a hop's writes): ``synced`` says how far
the file is flushed, so the hop loop records a finished unit without flushing it a second time."""

import h5py
import numpy as np

from gnnprep.precompute.hop_writer import HopWriter


def test_synced_covers_the_writes_before_a_sync_and_not_those_after(tmp_path, rng):
    x = rng.standard_normal((40, 3)).astype(np.float32)
    writer = HopWriter(np.float32)
    with h5py.File(tmp_path / "o.h5", "w") as f:
        ds = f.create_dataset("h", (40, 3), dtype=np.float32)
        writer.put(ds, 0, 20, 0, 3, x[:20])
        assert writer.synced == 0
        seq = writer.put("sync", f)
        writer.wait(seq)
        assert writer.synced == seq == 2
        later = writer.put(ds, 20, 40, 0, 3, x[20:])
        writer.wait(later)
        assert writer.synced == seq < later   # a write after the last sync: not flushed by it
        writer.close()
        np.testing.assert_array_equal(ds[:], x)
