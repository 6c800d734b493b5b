"""Rows per queued hop write (:func:`gnnprep.precompute.hop_loop.write_step`): a column block goes in
about four writes (the writer gathers one while the disk writes the one before), each between
4 and 32 MiB of float32 rows where the block has that many, in whole chunks of a chunked hop; and
the hops are the same bytes whatever the writes' size."""

import numpy as np
import pytest
from fixtures import feature_hops, make_store

from gnnprep.precompute import hop_loop
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import hop_chunks
from gnnprep.precompute.hop_loop import WRITE_BYTES, WRITE_MIN_BYTES, write_step

MiB = 1 << 20


@pytest.mark.parametrize("rows", [1, 1000, 125_000, 1_000_000, 2_776_499, 111_059_956])
@pytest.mark.parametrize("width", [1, 16, 48, 64, 128])
@pytest.mark.parametrize("c", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pieces_of_a_block(rows, width, c, dtype):
    step = write_step(rows, width, c, dtype)
    row = 4 * width
    chunks = hop_chunks(rows, width, c, dtype)
    assert step >= 1
    if chunks is not None:
        assert step % chunks[0] == 0   # whole chunks only
        if chunks[0] * row <= WRITE_BYTES:
            assert step * row <= WRITE_BYTES
    else:
        assert step * row <= WRITE_BYTES
    block = rows * row
    if block >= 4 * WRITE_MIN_BYTES and chunks is None:
        assert -(-rows // step) >= 4 or step * row == WRITE_BYTES // row * row   # four pieces, or the largest
    if block <= WRITE_MIN_BYTES and chunks is None:
        assert step >= rows   # a small block in one write


def test_cliques64_shape_is_cut_in_four():
    assert write_step(125_000, 64, 1, "float32") == 125_000 // 4   # 8 MB of a 32 MB block
    assert write_step(2_776_499, 64, 2, "float32") * 64 * 4 == 32 * MiB   # large blocks: 32 MiB, as before


@pytest.mark.parametrize("c", [1, 2])
def test_hops_are_the_same_bytes_in_small_writes(tmp_path, rng, monkeypatch, c):
    from gnnprep.precompute.run import precompute

    path, *_ = make_store(tmp_path, rng, n=3000, m=20000, d=40)
    cfg = PrecomputeConfig(hops=3, blocks=(1, 1, c))
    precompute(path, tmp_path / "a.h5", cfg)
    monkeypatch.setattr(hop_loop, "WRITE_MIN_BYTES", 4096)
    monkeypatch.setattr(hop_loop, "WRITE_BYTES", 16384)   # a few dozen writes a hop
    precompute(path, tmp_path / "b.h5", cfg)
    for a, b in zip(feature_hops(tmp_path / "a.h5"), feature_hops(tmp_path / "b.h5")):
        np.testing.assert_array_equal(a, b)
