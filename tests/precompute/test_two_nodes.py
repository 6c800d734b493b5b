"""Two torchrun nodes on one machine, the test stand for several machines: two agents
(``--nnodes 2 --nproc-per-node 1``) meeting at a c10d rendezvous on 127.0.0.1, each in a working
folder of its own (its cwd, TMPDIR, HOME and caches), sharing only what docs/distributed.md says is shared:
the graph store's folder and the output's folder.

- precompute and train give the bytes (precompute) and the weights and metrics (train, per-rank
  batch B against one process with 2B) of one process;
- a node killed mid-run (SIGKILL to its agent, both the rendezvous host and the other node) makes
  both agents exit nonzero at once with nothing published; the rerun resumes the killed rank's
  partial shard to the same bytes;
- a rank killed at start-up, or a rank SIGKILLed or SIGTERMed once ``f.h5`` is published (rank 0
  paused before the ranks' goodbye: GNNPREP_TEST_STALL_PUBLISHED), ends both agents within seconds
  (not in torch's 300 s exit barrier); a published ``f.h5`` stays complete.

Each launch starts four Python processes that import torch (~10-13 s on 2 cores); ten launches."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import make_store, write_features

from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="a node's rank is found through /proc and dies with its agent (prctl): Linux")

HOPS = ["--hops", "3", "--operator", "sym,rw", "--device", "cpu", "--json"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(base: Path, args, env=None) -> list[subprocess.Popen]:
    """Node i = 0, 1: ``torchrun --nnodes 2 --node-rank i --nproc-per-node 1 --rdzv-backend c10d
    --rdzv-endpoint 127.0.0.1:PORT -m gnnprep ARGS`` in ``base/node<i>`` (its cwd, TMPDIR, HOME and
    caches); node 0 hosts the rendezvous store (``is_host``: on one machine both would qualify)."""
    port, procs = free_port(), []
    for i in range(2):
        node = base / f"node{i}"
        node.mkdir(exist_ok=True)
        environ = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "TMPDIR": str(node),
                   "HOME": str(node), "XDG_CACHE_HOME": str(node / "cache"), **(env or {})}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(i),
               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-conf", f"is_host={int(i == 0)}", "-m", "gnnprep", *map(str, args)]
        procs.append(subprocess.Popen(cmd, cwd=node, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def finish(procs, timeout=120) -> list[tuple[int, str, str]]:
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def the_report(results) -> dict:
    """Rank 0 alone prints: one node's stdout is the JSON object, the other's is empty."""
    assert [r[0] for r in results] == [0, 0], [r[2][-2000:] for r in results]
    printed = [r[1] for r in results if r[1].strip()]
    assert len(printed) == 1, printed
    return json.loads(printed[0])


def rank_pid(agent: int) -> int | None:
    """The pid of the one worker of the torchrun agent ``agent``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == agent:
                    return int(entry.name)
            except (OSError, IndexError, ValueError):
                continue
    return None


def stand(tmp_path) -> tuple[Path, Path]:
    """The shared folder with a graph store (d = 40: 3 tiles of X), the output's folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    store, *_ = make_store(shared, np.random.default_rng(21), d=40)
    (shared / "out").mkdir()
    return store, shared / "out"


def same_bytes(ref: Path, out: Path) -> None:
    """Every dataset of ``ref`` has the same shape, dtype and bytes in ``out``."""
    names = []
    with h5py.File(ref, "r") as a, h5py.File(out, "r") as b:
        a.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            assert (a[name].shape, a[name].dtype) == (b[name].shape, b[name].dtype), name
            assert a[name][:].tobytes() == b[name][:].tobytes(), name
        for key in ("hops", "operators", "rows", "dtype", "num_features", "graph_fingerprint"):
            assert a.attrs[key] == b.attrs[key], key
    assert len(names) >= 8


TRAIN = ["--normalize-features", "none", "--dropout", "0", "--lr", "0.2", "--weight-decay", "0"]


def same_training(features: Path, run_dir: Path, ref_dir: Path) -> None:
    """Two ranks with per-rank batch 17 train the weights and metrics of one process with 34
    (no dropout: the same gradients, to float tolerance)."""
    import torch

    from gnnprep.train.trainer import TrainConfig, load_model, train

    torch.set_num_threads(1)
    train(features, ref_dir, TrainConfig(model="sgc", normalize_features="none", dropout=0.0, lr=0.2,
                                         weight_decay=0.0, batch_size=34, epochs=3, device="cpu"))
    a, b = load_model(ref_dir / "model.pt")[0].state_dict(), load_model(run_dir / "model.pt")[0].state_dict()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    ha = json.loads((ref_dir / "metrics.json").read_text())["runs"][0]["history"]
    hb = json.loads((run_dir / "metrics.json").read_text())["runs"][0]["history"]
    assert [h["steps"] for h in ha] == [h["steps"] for h in hb] == [2, 2, 2]
    for x, y in zip(ha, hb):
        for key in ("train_loss", "valid_loss", "valid_acc", "test_acc"):
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-6), key


def test_two_nodes_precompute_and_train_equal_one_process(tmp_path):
    store, outdir = stand(tmp_path)
    ref = tmp_path / "ref.h5"
    precompute(store, ref, PrecomputeConfig(hops=3, operators=("sym", "rw"), device="cpu"))
    report = the_report(finish(launch(tmp_path, ["precompute", store, "-o", outdir / "f.h5", *HOPS])))
    assert report["ranks"] == 2 and [s["rank"] for s in report["shards"]] == [0, 1]
    same_bytes(ref, outdir / "f.h5")
    # the nodes' own folders hold nothing of the job (torchrun's logs at most)
    assert not [p for i in range(2) for p in (tmp_path / f"node{i}").rglob("*.h5*")]

    features = write_features(outdir / "t.h5", np.random.default_rng(3), n=70, d=16, K=2)  # 35 training rows
    run_dir = outdir / "run"
    report = the_report(finish(launch(tmp_path, ["train", "sgc", features, "-o", run_dir, "--batch-size", 17,
                                                 "--device", "cpu", *TRAIN, "--epochs", 3, "--json",
                                                 "--checkpoint-every", 0])))
    assert report["world_size"] == 2 and report["epochs_run"] == 3
    same_training(features, run_dir, tmp_path / "one")


def kill_node(tmp_path, outdir: Path, args, node: int, units: int) -> None:
    """A launch in which rank 1 stalls once ``units`` of its units are finished; then node
    ``node``'s agent is SIGKILLed: both agents exit nonzero within seconds, nothing is published."""
    procs = launch(tmp_path, args, env={"GNNPREP_TEST_STALL": f"1:{units}"})
    try:
        deadline, found = time.time() + 90, False
        while time.time() < deadline and all(p.poll() is None for p in procs):
            progress = list(outdir.glob("f.h5.shard-1-of-2-*.h5.partial.json"))
            try:
                found = bool(progress) and len(json.loads(progress[0].read_text())["done"]) >= units
            except (OSError, ValueError, KeyError):
                found = False
            if found and all(rank_pid(p.pid) for p in procs):
                break
            time.sleep(0.05)
        assert found, [p.poll() for p in procs]
        worker = rank_pid(procs[node].pid)
        os.kill(procs[node].pid, signal.SIGKILL)
        t0 = time.time()
        results = finish(procs, timeout=60)
        assert time.time() - t0 < 30
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(code != 0 for code, _, _ in results), results
    assert all(stdout == "" for _, stdout, _ in results)
    assert not (outdir / "f.h5").exists()
    assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]


def test_a_killed_node_fails_both_then_the_rerun_resumes(tmp_path):
    store, outdir = stand(tmp_path)
    ref = tmp_path / "ref.h5"
    precompute(store, ref, PrecomputeConfig(hops=3, operators=("sym", "rw"), device="cpu", blocks=(1, 1, 2)))
    args = ["precompute", store, "-o", outdir / "f.h5", *HOPS, "--blocks", "1,1,2"]
    kill_node(tmp_path, outdir, args, node=1, units=1)   # the other node
    kill_node(tmp_path, outdir, args, node=0, units=2)   # the node hosting the rendezvous
    report = the_report(finish(launch(tmp_path, args)))
    assert report["resumed_units"] >= 2
    same_bytes(ref, outdir / "f.h5")
    assert sorted(p.name for p in outdir.iterdir()) == sorted(["f.h5"] + [s["file"] for s in report["shards"]])


@pytest.mark.parametrize("node", [1])
def test_a_rank_killed_at_start_up_ends_both_nodes_within_seconds(tmp_path, node):
    """Issue 32, line 12: one node's rank SIGKILLed as it starts (before the process group is
    joined): its agent fails at once, and the other node's rank, which waited in the handshake for
    the group's 7-day timeout, gives up after GNNPREP_DIST_INIT_TIMEOUT (5 s here; 60 s by default),
    so both agents exit nonzero within seconds and nothing is published."""
    store, outdir = stand(tmp_path)
    procs = launch(tmp_path, ["precompute", store, "-o", outdir / "f.h5", *HOPS],
                   env={"GNNPREP_DIST_INIT_TIMEOUT": "5"})
    try:
        deadline, worker = time.time() + 90, None
        while time.time() < deadline and worker is None and all(p.poll() is None for p in procs):
            worker = rank_pid(procs[node].pid)
            time.sleep(0.01)
        assert worker is not None, [p.poll() for p in procs]
        os.kill(worker, signal.SIGKILL)
        t0 = time.time()
        results = finish(procs, timeout=60)
        took = time.time() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert took < 25, (took, [r[2][-800:] for r in results])
    assert all(code != 0 for code, _, _ in results), [(r[0], r[2][-800:]) for r in results]
    assert not (outdir / "f.h5").exists()


def rank_of(worker: int) -> int | None:
    """The RANK torchrun gave the worker ``worker`` (c10d numbers the ranks at the rendezvous; None
    before the worker's exec)."""
    try:
        environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((int(e[5:]) for e in environ if e.startswith(b"RANK=")), None)


# Two of the eight (signal, node, rank or agent) cases, to keep the suite short; all eight held when
# run by hand (issue 32's closing note: each agent out in 0.8-5.4 s after the signal).
@pytest.mark.parametrize("target", ["rank"])
@pytest.mark.parametrize("sig, node", [(signal.SIGKILL, 1), (signal.SIGTERM, 0)], ids=["kill-node1", "term-node0"])
def test_a_node_killed_after_publish_ends_both_within_seconds(tmp_path, sig, node, target):
    """Issue 32, line 12: rank 0 pauses 3 s once ``f.h5`` is published and both ranks have passed
    the publish step (GNNPREP_TEST_STALL_PUBLISHED), before the ranks' goodbye
    (:meth:`gnnprep.core.distributed.Dist.close`); one node's rank (or agent) gets ``sig`` in that
    window. Without the goodbye the surviving rank exited 0 and its agent waited in torch's exit
    barrier for the lost one (300 s); now the goodbye fails on the survivor, which exits 1
    (docs/distributed.md: "a peer lost at that point makes the survivors exit 1 although the
    artifact is complete"), so both agents exit nonzero within seconds and ``f.h5`` is complete."""
    store, outdir = stand(tmp_path)
    ref = tmp_path / "ref.h5"
    precompute(store, ref, PrecomputeConfig(hops=3, operators=("sym", "rw"), device="cpu"))
    marker = tmp_path / "stalled"
    procs = launch(tmp_path, ["precompute", store, "-o", outdir / "f.h5", *HOPS],
                   env={"GNNPREP_TEST_STALL_PUBLISHED": f"0:3:{marker}"})
    ended = [None, None]
    try:
        deadline, workers, ranks_ = time.time() + 90, [None, None], [None, None]
        while time.time() < deadline and all(p.poll() is None for p in procs) and not marker.exists():
            time.sleep(0.02)
        workers = [rank_pid(p.pid) for p in procs]
        ranks_ = [rank_of(w) if w else None for w in workers]
        assert marker.exists() and sorted(ranks_) == [0, 1], [p.poll() for p in procs]
        os.kill(workers[node] if target == "rank" else procs[node].pid, sig)
        t0 = time.time()
        while time.time() - t0 < 60 and None in ended:
            ended = [e if e is not None or p.poll() is None else time.time() - t0 for e, p in zip(ended, procs)]
            time.sleep(0.02)
        results = finish(procs, timeout=1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    print(f"{sig.name} to node {node}'s {target} (rank {ranks_[node]}): agents exit {[r[0] for r in results]} "
          f"after {[None if e is None else round(e, 2) for e in ended]} s")
    assert None not in ended and max(ended) < 15, (ended, [r[2][-800:] for r in results])
    assert all(code != 0 for code, _, _ in results), [(r[0], r[2][-800:]) for r in results]
    # the survivor failed in the goodbye, with one line (rank 0 printed its report before it)
    assert "lost contact with the other ranks as the job ended" in results[1 - node][2], results[1 - node][2][-800:]
    same_bytes(ref, outdir / "f.h5")
