"""precompute under ``torchrun --nproc-per-node 2`` (gloo, CPU): the published artifact equals a
one-process run bit for bit; a rank killed with SIGKILL fails the job with no artifact, and the
rerun resumes to the same bytes; ``gnnprep info`` lists the shards and refuses a missing one.

Each launch starts three Python processes that import torch (~7 s on 2 cores), so the cases are
combined: both operators in every run, (rows, column blocks) parametrised."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import interrupted_slowly, make_store, run, torchrun

from gnnprep.core.distributed import Dist, RankFailed
from gnnprep.core.errors import GnnprepError
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the kill tests find a rank's process through /proc (Linux)")
ATTRS = ("format", "format_version", "hops", "operator", "operators", "hdg_channels", "graph_fingerprint",
         "num_classes", "rows", "dtype", "num_nodes", "num_features", "normalize_features")


def assert_same_artifact(ref: Path, out: Path, operators=("sym", "rw"), hops=3) -> None:
    with h5py.File(ref, "r") as a, h5py.File(out, "r") as b:
        for op in operators:
            for k in range(hops + 1):
                x, y = a[f"channels/{op}/{k}"], b[f"channels/{op}/{k}"]
                assert x.shape == y.shape and x.dtype == y.dtype, (op, k)
                assert x[:].tobytes() == y[:].tobytes(), (op, k)
        for k in range(hops + 1):
            assert a[f"hops/{k}"][:].tobytes() == b[f"hops/{k}"][:].tobytes(), k
        for name in ["rows", "labels"] + [f"splits/{s}" for s in a["splits"]]:
            np.testing.assert_array_equal(a[name][:], b[name][:])
        assert sorted(b["splits"]) == sorted(a["splits"])
        assert set(a.attrs) <= set(b.attrs) <= set(a.attrs) | {"shards"}
        for key in ATTRS:
            assert a.attrs[key] == b.attrs[key], key


def reference(store: Path, out: Path, rows: str, blocks: int) -> None:
    precompute(store, out, PrecomputeConfig(hops=3, operators=("sym", "rw"), rows=rows, blocks=(1, 1, blocks),
                                            device="cpu"))


@pytest.mark.parametrize("rows,blocks", [("all", 1), ("all", 3), ("labeled", 1), ("labeled", 3)])
def test_torchrun_equals_one_process(tmp_path, rows, blocks):
    store, *_ = make_store(tmp_path, np.random.default_rng(5))
    ref, out = tmp_path / "ref.h5", tmp_path / "f.h5"
    reference(store, ref, rows, blocks)
    merge = (rows, blocks) == ("labeled", 3)
    r = torchrun(["precompute", store, "-o", out, "--hops", 3, "--operator", "sym,rw", "--rows", rows,
                  "--blocks", f"1,1,{blocks}", "--device", "cpu", "--json"] + (["--merge"] if merge else []))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # rank 0 alone prints: exactly one JSON object
    assert report["ranks"] == 2 and report["plan"]["c"] >= 2 and report["merged"] == merge
    assert [s["rank"] for s in report["shards"]] == [0, 1]
    assert_same_artifact(ref, out)
    shard_files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("f.h5."))
    if merge:  # one self-contained file, the shards removed
        assert shard_files == []
        with h5py.File(out, "r") as f:
            assert "shards" not in f.attrs and not f["hops/1"].is_virtual
        return
    assert shard_files == sorted(s["file"] for s in report["shards"])
    with h5py.File(out, "r") as f:
        assert f["hops/1"].is_virtual and f["channels/rw/3"].is_virtual
    if (rows, blocks) != ("all", 3):
        return
    # gnnprep info lists the shards; the artifact folder can be moved (relative shard paths)
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ["f.h5"] + shard_files:
        shutil.move(tmp_path / name, moved / name)
    assert_same_artifact(ref, moved / "f.h5")
    info = run(["info", moved / "f.h5", "--json"])
    assert info.exit_code == 0, info.stderr
    d = json.loads(info.stdout)
    assert [s["file"] for s in d["shards"]] == shard_files and all(s["present"] for s in d["shards"])
    assert "shard" in run(["info", moved / "f.h5"]).stdout
    (moved / shard_files[1]).rename(tmp_path / "away.h5")
    info = run(["info", moved / "f.h5"])
    assert info.exit_code == 1 and info.stdout == ""
    assert info.stderr.strip().splitlines() == [info.stderr.strip()]
    assert info.stderr.startswith(f"Error: {moved / 'f.h5'}: shard {shard_files[1]} is missing")
    # training refuses it too (HDF5 would read the missing columns as NaN)
    trained = run(["train", "sgc", moved / "f.h5", "-o", tmp_path / "run", "--epochs", "1"])
    assert trained.exit_code == 1 and f"shard {shard_files[1]} is missing" in trained.stderr


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of torchrun worker ``rank`` (a child of ``parent`` with RANK=rank in its environment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and f"RANK={rank}".encode() in env:
            return int(entry.name)
    return None


@pytest.mark.parametrize("victim", [1, 0])
def test_sigkill_of_one_rank_fails_the_job_then_rerun_resumes(tmp_path, victim):
    store, *_ = make_store(tmp_path, np.random.default_rng(6))
    ref, out = tmp_path / "ref.h5", tmp_path / "f.h5"
    rows = "all" if victim == 1 else "labeled"
    reference(store, ref, rows, 3)
    args = ["precompute", store, "-o", out, "--hops", 3, "--operator", "sym,rw", "--rows", rows, "--blocks", "1,1,3",
            "--device", "cpu", "--json"]
    # the victim stalls after its first finished unit, the other rank finishes its shard and waits
    proc = torchrun(args, env={"GNNPREP_TEST_STALL": f"{victim}:1"}, popen=True)
    try:
        deadline, pid = time.time() + 90, None
        while time.time() < deadline and proc.poll() is None:
            progress = list(tmp_path.glob(f"f.h5.shard-{victim}-of-2-*.h5.partial.json"))
            try:
                if progress and json.loads(progress[0].read_text())["done"]:
                    pid = _rank_pid(proc.pid, victim)
                    if pid is not None:
                        break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        assert pid is not None, f"rank {victim} was not found running: {proc.poll()}"
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert stdout == ""
    assert not out.exists()

    r = torchrun(args)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["resumed_units"] >= 1
    assert_same_artifact(ref, out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("f.h5")) == \
        sorted(["f.h5"] + [s["file"] for s in report["shards"]])


def test_torchrun_user_operators_and_ppr_equal_one_process(tmp_path):
    """--operator-file (a max-reduce operator and one with per-entry values) and ppr under torchrun:
    the same bytes as one process, and the operators' sources in the published artifact."""
    store, *_ = make_store(tmp_path, np.random.default_rng(6))
    ops = tmp_path / "ops.py"
    ops.write_text("import numpy as np\n"
                   "def peak(s, d, w):\n    return w / np.sqrt(s * d)\npeak.reduce = 'max'\npeak.loop = 1.0\n"
                   "def harmonic(s, d, w):\n    return 2.0 / (s + d)\n")
    files = (f"{ops}:peak", f"{ops}:harmonic")
    names = ("sym", "ppr:alpha=0.2,k=3", "peak", "harmonic")
    ref, out = tmp_path / "ref.h5", tmp_path / "f.h5"
    precompute(store, ref, PrecomputeConfig(hops=2, operators=names[:2], operator_files=files, blocks=(1, 1, 3),
                                            device="cpu"))
    r = torchrun(["precompute", store, "-o", out, "--hops", 2, "--operator", "sym,ppr:alpha=0.2,k=3",
                  "--operator-file", files[0], "--operator-file", files[1], "--blocks", "1,1,3", "--device", "cpu"])
    assert r.returncode == 0, r.stderr
    assert_same_artifact(ref, out, operators=names, hops=2)
    with h5py.File(out, "r") as f:
        assert sorted(json.loads(f.attrs["operator_sources"])) == ["harmonic", "peak"]


def hag_and_hdg(tmp_path, store: Path) -> tuple[Path, Path]:
    """A HAG (uncapped search) and an HDG (hop shells) of the graph store."""
    from gnnprep.graph.store import GraphStore
    from gnnprep.hag import builder as hags
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import HopShellsSelect, select, select_spec

    with GraphStore(store) as g:
        indptr, indices, fp = g.indptr(), g.indices(), g.fingerprint
    hags.build(store, tmp_path / "hag.h5", hags.HagConfig(capacity=None))
    sel = HopShellsSelect(2, cap=3)
    write_hdg(select(indptr, indices, sel, seed=3), tmp_path / "hdg.h5", {"command": "test"}, sel.name,
              select_spec(sel), 3, fp, 0, 0)
    return tmp_path / "hag.h5", tmp_path / "hdg.h5"


def assert_same_datasets(ref: Path, out: Path) -> int:
    """Every dataset of ``ref`` (hops, operator and HDG channels, rows, labels, splits) has the
    same shape, dtype and bytes in ``out``, and the same root attributes; returns how many."""
    names = []
    with h5py.File(ref, "r") as a, h5py.File(out, "r") as b:
        a.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            x, y = a[name], b[name]
            assert (x.shape, x.dtype) == (y.shape, y.dtype), name
            assert x[:].tobytes() == y[:].tobytes(), name
        for key in ATTRS:
            assert a.attrs[key] == b.attrs[key], key
    return len(names)


@pytest.mark.parametrize("case", ["files", "auto-merged"])
def test_torchrun_hag_and_hdg_equal_one_process(tmp_path, case):
    """--hag and --hdg under torchrun: every rank runs its columns through the same HAG and HDG;
    the hops and the HDG channels equal a one-process run's bit for bit, as virtual datasets over
    the shards (the HDG channels in a second file per rank, listed and checked by ``gnnprep info``)
    or merged. d = 64: each rank reads exactly its 32 columns of X (two 16-column tiles per
    operator pass); d = 37 in 3 blocks: blocks that are not tiles, and a rank with two blocks."""
    d = 64 if case == "files" else 37
    store, *_ = make_store(tmp_path, np.random.default_rng(11), d=d)
    hag, hdg = hag_and_hdg(tmp_path, store)
    ref, out = tmp_path / "ref.h5", tmp_path / "f.h5"
    hag_arg = str(hag) if case == "files" else "auto"
    reduce = "mean" if case == "files" else "max"
    precompute(store, ref, PrecomputeConfig(hops=3, operators=("sym", "rw"), blocks=(1, 1, 3), device="cpu",
                                            hag=hag_arg, hdg=str(hdg), hdg_reduce=reduce))
    merge = ["--merge"] if case == "auto-merged" else []
    r = torchrun(["precompute", store, "-o", out, "--hops", 3, "--operator", "sym,rw", "--blocks", "1,1,3",
                  "--device", "cpu", "--hag", hag_arg, "--hdg", hdg, "--hdg-reduce", reduce, "--json", *merge])
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert assert_same_datasets(ref, out) >= 4 * 4
    with h5py.File(out, "r") as f:
        channels = json.loads(f.attrs["hdg_channels"])
        assert channels and json.loads(f.attrs["operators"]) == ["sym", "rw", *channels]
        assert f[f"channels/{channels[0]}/1"].is_virtual != bool(merge)
    files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("f.h5."))
    if merge:
        assert files == []
        return
    assert report["hag"]["used"] and report["hag"]["path"] == str(hag)
    assert files == sorted([s["file"] for s in report["shards"]] + [s["hdg"]["file"] for s in report["shards"]])
    assert [s["columns"] for s in report["shards"]] == [[0, 32], [32, 64]]   # 4 blocks of 16, not 3 of 22
    n = 90
    assert [s["x_bytes_read"] for s in report["shards"]] == [2 * n * 32 * 4] * 2   # 2 operators, 2 tiles each
    info = run(["info", out, "--json"])
    assert info.exit_code == 0, info.stderr
    assert sorted(s["file"] for s in json.loads(info.stdout)["shards"]) == files
    # a rerun reuses both files of every rank
    r = torchrun(["precompute", store, "-o", out, "--hops", 3, "--operator", "sym,rw", "--blocks", "1,1,3",
                  "--device", "cpu", "--hag", hag_arg, "--hdg", hdg, "--json"])
    assert r.returncode == 0, r.stderr
    assert all(s["skipped"] and s["hdg"]["skipped"] for s in json.loads(r.stdout)["shards"])
    assert_same_datasets(ref, out)


class OneRank(Dist):
    """The sharded path as a job of one rank, without torch: no group to join, gather is [obj]."""

    def start(self, backend: str = "gloo") -> None:
        pass

    def gather(self, obj) -> list:
        return [obj]


def test_an_interrupted_hdg_pass_resumes_to_the_same_bytes(tmp_path):
    """The HDG file of a rank is resumable like its hop shard: interrupted after its first unit,
    the rerun reuses the complete hop shard and the finished HDG units."""
    from gnnprep.precompute.sharded import precompute_sharded

    store, *_ = make_store(tmp_path, np.random.default_rng(13), d=20)
    _, hdg = hag_and_hdg(tmp_path, store)
    cfg = PrecomputeConfig(hops=2, operators=("sym",), blocks=(1, 1, 2), device="cpu", hdg=str(hdg))
    ref, out = tmp_path / "ref.h5", tmp_path / "f.h5"
    precompute(store, ref, cfg)

    def stop(stage, done, total):
        if stage == "hdg units" and done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        precompute_sharded(store, out, cfg, OneRank(0, 1), progress=stop)
    assert not out.exists()
    report = precompute_sharded(store, out, cfg, OneRank(0, 1))
    (shard,) = report.shards
    assert shard["skipped"] and shard["hdg"]["resumed_units"] == 2 and not shard["hdg"]["skipped"]
    assert assert_same_datasets(ref, out) >= 6


def test_the_torch_hag_backend_shards_bitwise(tmp_path):
    """A GPU rank runs --hag on the torch backend: its columns' results must not depend on the
    column blocking either (here on the CPU: 3 blocks equal 1 block, and the sharded path equals
    one process, bit for bit)."""
    from gnnprep.precompute.sharded import precompute_sharded

    store, *_ = make_store(tmp_path, np.random.default_rng(14), d=37)
    hag, hdg = hag_and_hdg(tmp_path, store)
    for b in (1, 3):
        cfg = PrecomputeConfig(hops=2, operators=("sym", "rw"), blocks=(1, 1, b), device="cpu", backend="torch",
                               hag=str(hag), hdg=str(hdg))
        assert precompute(store, tmp_path / f"one{b}.h5", cfg).hag.used
    precompute_sharded(store, tmp_path / "sharded.h5", cfg, OneRank(0, 1))
    assert assert_same_datasets(tmp_path / "one1.h5", tmp_path / "one3.h5") >= 10
    assert assert_same_datasets(tmp_path / "one3.h5", tmp_path / "sharded.h5") >= 10


def test_an_error_is_one_line_from_rank_0(tmp_path):
    store, *_ = make_store(tmp_path, np.random.default_rng(8))
    _, hdg = hag_and_hdg(tmp_path, store)
    r = torchrun(["precompute", store, "-o", tmp_path / "f.h5", "--hops", 2, "--hdg", hdg, "--rows", "labeled",
                  "--device", "cpu"])
    assert r.returncode != 0 and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == ["Error: --hdg needs --rows all: an HDG aggregates hop features of nodes outside the splits "
                      "too (rank 0 of 2)"]
    assert not (tmp_path / "f.h5").exists()


# -- without a launch ------------------------------------------------------------------------------
def test_plain_run_has_no_dist_and_no_torch():
    assert Dist.from_env({}) is None and Dist.from_env({"WORLD_SIZE": "1", "RANK": "0"}) is None
    d = Dist.from_env({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"})
    assert (d.rank, d.world, d.local_rank, d.local_world) == (2, 4, 0, 2)
    with pytest.raises(GnnprepError, match="RANK=5"):
        Dist.from_env({"WORLD_SIZE": "2", "RANK": "5"})
    code = "import gnnprep.cli, gnnprep.precompute.run, gnnprep.core.distributed, sys; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_settle_makes_one_error_for_every_rank():
    d = Dist(rank=1, world=3)
    assert d.settle([None, None, None], None, 7) == 7
    with pytest.raises(RankFailed, match=r"^x\.h5: bad \(rank 2 of 3\)$"):
        d.settle([None, None, "x.h5: bad"], None)
    with pytest.raises(RankFailed, match=r"^x\.h5: bad \(rank 1 of 3\)$"):
        d.settle([None, "x.h5: bad", "other"], GnnprepError("x.h5: bad"))
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback on its own rank
        d.settle([None, "failed: ZeroDivisionError", None], ZeroDivisionError())


def test_rank_columns_fall_on_x_tiles_without_giving_a_rank_more_blocks():
    from gnnprep.precompute.plan import agree_width as _agree_width
    from gnnprep.precompute.plan import rank_ranges as _rank_ranges
    from gnnprep.precompute.plan import tile_width as _tile_width

    # the width rounds down to whole tiles when no rank gets more blocks: 43 (3 blocks) -> 32 (4)
    assert _tile_width(43, 128, 2, 16) == 32 and _rank_ranges(128, 32, 2, 16) == [(0, 64), (64, 128)]
    assert _tile_width(50, 100, 2, 16) == 50      # 48 would make 3 blocks: a rank with 2 passes over S
    assert _tile_width(12, 128, 2, 16) == 12 and _tile_width(64, 128, 2, 16) == 64
    assert _agree_width([{"width": 43, "stored": None}], 128, 2, 16) == 32
    assert _agree_width([{"width": 43, "stored": 43}], 128, 2, 16) == 43   # a resumed job keeps its blocks
    # blocks narrower than a tile: the cuts between ranks move to tile starts (4/6/6 blocks of 8,
    # not 5/5/6), never giving a rank more than ceil(c/P) blocks
    assert _rank_ranges(128, 8, 3, 16) == [(0, 32), (32, 80), (80, 128)]
    for d, w, ranks, tile in [(128, 8, 3, 16), (37, 13, 2, 16), (100, 7, 4, 16), (5, 2, 4, 5), (64, 1, 3, 16),
                              (7, 4, 2, 7), (300, 9, 5, 16)]:
        got = _rank_ranges(d, w, ranks, tile)
        blocks = math.ceil(d / w)
        cap = math.ceil(blocks / ranks)
        spans = [g for g in got if g is not None]
        assert spans[0][0] == 0 and spans[-1][1] == d and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert all((c1 - c0 + w - 1) // w <= cap for c0, c1 in spans), (d, w, ranks)
        assert len(spans) == min(ranks, blocks)


def test_the_x_reader_counts_whole_tiles_and_turns_readahead_off_for_some_of_them(tmp_path):
    """feature_bytes_read: the bytes of the 16-column tiles (whole HDF5 chunks) a column range
    touches; readahead is off (posix_fadvise RANDOM) while only some of the tiles are read, and
    back on afterwards."""
    from gnnprep.graph.store import GraphStore

    store, *_ = make_store(tmp_path, np.random.default_rng(12), d=40)   # tiles 0..16, 16..32, 32..40
    with GraphStore(store) as g:
        advice = []
        g._advise = lambda how: advice.append(how) or 3
        rows = g.features.chunks[0]
        assert g.features.chunks[1] == 16 and rows >= 90
        x = g.feature_columns(20, 40)
        assert x.shape == (90, 20) and g.feature_bytes_read == 2 * rows * 16 * 4 and advice == ["random", "normal"]
        g.feature_columns(0, 40)   # every tile: readahead left as it is
        assert g.feature_bytes_read == 5 * rows * 16 * 4 and advice == ["random", "normal"]
        np.testing.assert_array_equal(g.feature_columns(3, 17), g.features[:, 3:17])
        assert advice == ["random", "normal"] * 2


def test_the_x_reader_asks_the_disk_for_exactly_the_tiles_it_reads_ahead_of_reading_them(tmp_path, monkeypatch):
    """posix_fadvise(WILLNEED) over each row block's wanted tiles (one range: they lie next to each
    other), a bounded distance ahead of the reads (gnnprep.graph.store._TileHints); the columns read
    are the same."""
    import gnnprep.graph.store as G
    from gnnprep.graph.store import GraphStore

    store, *_ = make_store(tmp_path, np.random.default_rng(13), n=70_000, m=1000, d=40)
    monkeypatch.setattr(G, "FEATURE_READ_AHEAD", 2 * (1 << 20))   # 2 tiles: one row block of 2 tiles ahead
    hinted, plain = [], os.posix_fadvise
    reads = []

    def fadvise(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            hinted.append((offset, length, len(reads)))
        return plain(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    with GraphStore(store) as g:
        feats = g.features
        rows, cols = feats.chunks
        raw = G._RawTiles.read_into
        monkeypatch.setattr(G._RawTiles, "read_into", lambda self, st, s, out: reads.append(s) or raw(self, st, s, out))
        x = g.feature_columns(16, 40)
        np.testing.assert_array_equal(x, feats[:, 16:40])
        want = []
        for s in range(0, 70_000, rows):
            a = feats.id.get_chunk_info_by_coord((s, 16))
            b = feats.id.get_chunk_info_by_coord((s, 32))
            want.append((a.byte_offset, b.byte_offset + b.size - a.byte_offset))
        assert [(o, n) for o, n, _ in hinted] == want and len(want) == 5
        # row block k is hinted before block k - 1 is read (one block ahead), never all at the start
        assert [k for *_, k in hinted] == [0, 0, 1, 2, 3]


def test_overflow_error_names_the_column_of_x():
    from gnnprep.precompute.sharded import _global_column

    e = GnnprepError("hop 2 of rw: row 5, column 1 is inf in float16 (the value overflowed float16); scale the "
                     "features down or use --dtype float32")
    assert str(_global_column(e, 3)).startswith("hop 2 of rw: row 5, column 4 is inf in float16")
    other = GnnprepError("x.h5: something else")
    assert _global_column(other, 3) is other


def test_a_torchrun_worker_dies_with_its_agent(tmp_path):
    """die_with_parent: a worker of torchrun's agent (TORCHELASTIC_RUN_ID) is SIGKILLed by the
    kernel when its parent dies; any other process is left alone."""
    from gnnprep.core.distributed import die_with_parent

    assert not die_with_parent() or os.environ.get("TORCHELASTIC_RUN_ID")
    child = ("import sys, time\nfrom gnnprep.core.distributed import die_with_parent\n"
             "print(die_with_parent(), flush=True)\ntime.sleep(60)\n")
    parent = ("import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=open(sys.argv[2], 'w'))\n"
              "print(p.pid, flush=True)\nsys.stdin.read()\n")
    for run_id, dies in (("x", True), ("", False)):
        out = tmp_path / f"child{run_id}.txt"
        env = {**os.environ, "TORCHELASTIC_RUN_ID": run_id}
        agent = subprocess.Popen([sys.executable, "-c", parent, child, str(out)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env)
        pid = int(agent.stdout.readline())
        deadline = time.time() + 30
        while time.time() < deadline and not out.read_text().strip():
            time.sleep(0.05)
        assert out.read_text().strip() == str(dies)
        agent.kill()
        agent.wait()
        deadline = time.time() + (10 if dies else 1)
        while time.time() < deadline and Path(f"/proc/{pid}").exists() and \
                Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.05)
        gone = not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        if not gone:
            os.kill(pid, signal.SIGKILL)
        assert gone == dies


def test_fast_exit_only_for_a_rank_that_left_cleanly_with_nothing_open(tmp_path):
    """exit_now: no-op in a plain run and while a file is open for writing (HDF5 or not); else the
    command's exit status at once, with stdout flushed and the atexit handlers run."""
    code = """if True:
        import atexit, sys
        import h5py
        import gnnprep.core.distributed as d
        d.exit_now(0)  # a plain run: returns
        d._left_cleanly = True
        f = open(sys.argv[1] + ".txt", "w")
        f.write("kept")
        d.exit_now(3)  # returns: a file open for writing
        f.close()
        h = h5py.File(sys.argv[1] + ".h5", "w")
        d.exit_now(3)  # returns: an HDF5 file open
        h.close()
        atexit.register(lambda: open(sys.argv[1] + ".atexit", "w").close())
        print("left", end="")
        d.exit_now(3)
        print("not reached")
    """
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f")], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (3, "left"), r.stderr
    assert (tmp_path / "f.txt").read_text() == "kept" and (tmp_path / "f.atexit").exists()


def test_a_rank_aggregates_its_hdg_channels_in_node_ranges(tmp_path, monkeypatch):
    """A rank's HDG pass aggregates each hop in the node ranges a one-process run uses (intermediate
    rows within one column buffer; the whole hop at once before, several times the budget for
    anchor sets at 1/40 of papers100M): made tiny here, many ranges, the same bytes."""
    from gnnprep.hdg import structure
    from gnnprep.precompute import sharded

    store, *_ = make_store(tmp_path, np.random.default_rng(17), n=300, m=1500, d=12)
    _, hdg = hag_and_hdg(tmp_path, store)
    cfg = PrecomputeConfig(hops=2, operators=("sym",), blocks=(1, 1, 2), device="cpu", hdg=str(hdg))
    ref, out = tmp_path / "ref.h5", tmp_path / "f.h5"
    precompute(store, ref, cfg)
    cut = []
    real = structure.root_blocks
    monkeypatch.setattr(structure, "ROOT_STEP", 16)
    monkeypatch.setattr(structure, "root_blocks", lambda *a: cut.append(real(*a)) or cut[-1])
    monkeypatch.setattr(sharded, "hdg_room", lambda n, w: 500)
    puts, real_put = [], sharded.HopWriter.put   # (the channels written around the page cache, as one process's)
    monkeypatch.setattr(sharded.HopWriter, "put", lambda w, *item, **kw: puts.append(
        (item[0].name, w.raw is not None) if item[0] != "sync" else ("", True)) or real_put(w, *item, **kw))
    sharded.precompute_sharded(store, out, cfg, OneRank(0, 1))
    assert cut and len(cut[0]) > 4
    channel_puts = [direct for name, direct in puts if name.startswith("/channels/") and not name.startswith("/channels/sym/")]
    assert len(channel_puts) > len(cut[0]) and all(channel_puts)
    assert assert_same_datasets(ref, out) >= 6


def test_a_resumed_rank_keeps_the_interrupted_runs_hop_seconds(tmp_path, monkeypatch):
    """A sharded artifact's hop seconds, as a one-process one's, count the interrupted invocation's
    hops (they read as this invocation's alone: near 0 for hops a resumed rank had finished), and a
    rerun that reuses a complete shard keeps them; the report's are this invocation's."""
    from gnnprep.info import describe
    from gnnprep.precompute.sharded import precompute_sharded

    store, *_ = make_store(tmp_path, np.random.default_rng(19), d=20)
    cfg = PrecomputeConfig(hops=3, operators=("sym",), blocks=(1, 1, 2), device="cpu")
    out = tmp_path / "f.h5"
    with monkeypatch.context() as mp:
        interrupted_slowly(mp)   # Ctrl-C once hop 2 of the first column block is finished, each hop >= 1 s
        with pytest.raises(KeyboardInterrupt):
            precompute_sharded(store, out, cfg, OneRank(0, 1))
    report = precompute_sharded(store, out, cfg, OneRank(0, 1))
    assert report.shards[0]["resumed_units"] >= 3 and all(s < 1.0 for s in report.hop_seconds)
    seconds = describe(out)["hop_seconds"]
    assert len(seconds) == 4 and all(s >= 1.0 for s in seconds[:3]), seconds
    again = precompute_sharded(store, out, cfg, OneRank(0, 1))   # the shard complete: reused
    assert again.shards[0]["skipped"] and describe(out)["hop_seconds"] == seconds
