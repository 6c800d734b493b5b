"""Issue 24 acceptance 3: the precompute report says how many bytes each hop read from the disk
(``/proc/self/io`` read_bytes: page-cache misses), hop 0 being X's reads."""

import os

import pytest
from fixtures import feature_hops, make_store, run_json

from gnnprep.core.memory import disk_read_bytes


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="/proc/self/io is Linux-only")
def test_disk_read_bytes_counts_up():
    a = disk_read_bytes()
    assert a is None or a >= 0


def test_the_report_has_one_disk_read_figure_per_hop(tmp_path, rng):
    path, *_ = make_store(tmp_path, rng, n=200, m=1500, d=5)
    out = run_json(["precompute", str(path), "--hops", "2", "-o", str(tmp_path / "f.h5")])
    got = out["hop_disk_read_bytes"]
    if disk_read_bytes() is None:
        assert got is None
    else:
        assert len(got) == 3 and all(isinstance(b, int) and b >= 0 for b in got)


@pytest.mark.parametrize("blocks", [None, "1,2,3"])
def test_the_report_says_where_each_hops_seconds_went(tmp_path, rng, blocks):
    """Issue 34, build item 3: per hop, kernel + reads + writes waited for + other = the hop's seconds
    (hop 0 is X's read: no kernel), with column blocks and edge blocks too."""
    path, *_ = make_store(tmp_path, rng, n=300, m=2000, d=7)
    extra = [] if blocks is None else ["--blocks", blocks]
    out = run_json(["precompute", str(path), "--hops", "3", "-o", str(tmp_path / "f.h5"), *extra])
    parts = out["hop_breakdown"]
    assert len(parts) == 4 and out["hop_seconds"][0] >= 0
    for k, part in enumerate(parts):
        assert set(part) == {"kernel", "reads", "writes_waited", "other"}
        assert all(v >= 0 for v in part.values())
        assert sum(part.values()) == pytest.approx(out["hop_seconds"][k], abs=2e-3)
    assert parts[0]["kernel"] == 0 and parts[0]["reads"] > 0
    assert all(p["kernel"] > 0 for p in parts[1:])


@pytest.mark.parametrize("small_chunks", [False, True])   # True: whole chunks written raw, the rest via h5py
@pytest.mark.parametrize("rows", ["all", "labeled"])
def test_a_column_blocks_x_is_freed_before_the_next_one_is_read(tmp_path, rng, monkeypatch, rows, small_chunks):
    """With column blocks, block j's X buffer is no longer held when block j + 1's X is read, unless
    it is the buffer that read goes into (a finished block's free buffer is reused, not faulted in
    anew): two hop buffers of a block at a time, as the planner's peak counts them (the R-MAT 1/40
    store, c = 2: peak 2.70 GB with it held, 2.01 GB without)."""
    import gc
    import weakref

    from gnnprep.graph.store import GraphStore
    from gnnprep.precompute import PrecomputeConfig, precompute

    if small_chunks:
        from gnnprep.precompute import features as fa

        monkeypatch.setattr(fa, "feature_chunk_rows", lambda width, itemsize: 16)
    path, *_ = make_store(tmp_path, rng, n=300, m=2000, d=8)
    read = GraphStore.feature_columns
    earlier: list = []

    def watched(self, c0, c1, out=None):
        gc.collect()
        assert all(ref() is None or ref() is out for ref in earlier), "an earlier column block's X is still held"
        xb = read(self, c0, c1, out)
        earlier.append(weakref.ref(xb))
        return xb

    monkeypatch.setattr(GraphStore, "feature_columns", watched)
    precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=3, blocks=(1, 2, 4), rows=rows))
    assert len(earlier) == 4


@pytest.mark.parametrize("reorder", ["none", "community"])
def test_later_column_blocks_make_no_new_buffers(tmp_path, rng, monkeypatch, reorder):
    """Column blocks after the first read X into a buffer the blocks before finished with (its pages
    already faulted in) and compute in the other: four column blocks make as many column buffers
    as one; the hops are the bytes of one column block's run."""
    from gnnprep.precompute import PrecomputeConfig, hop_graph, precompute

    path, *_ = make_store(tmp_path, rng, n=300, m=2000, d=8)
    made = hop_graph.HopGraph.buffer
    counts: list = []

    def counted(self, shape):
        counts[-1] += 1
        return made(self, shape)

    monkeypatch.setattr(hop_graph.HopGraph, "buffer", counted)
    for c in (4, 1):
        counts.append(0)
        precompute(path, tmp_path / f"c{c}.h5", PrecomputeConfig(hops=3, blocks=(1, 1, c), reorder=reorder))
    assert counts[0] == counts[1] == 2
    for a, b in zip(feature_hops(tmp_path / "c4.h5"), feature_hops(tmp_path / "c1.h5")):
        assert a.tobytes() == b.tobytes()
