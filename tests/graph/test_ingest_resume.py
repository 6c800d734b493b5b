"""An interrupted ingest keeps what it had marked (/adj, then the features) and the same command
continues from there, to the same store as an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from fixtures import run_json
from ogb_layouts import make_papers100m_like

from gnnprep.core.output import ResumableOutput
from gnnprep.graph.ingest import IngestConfig, from_arrays, ingest
from gnnprep.graph.sources import SourceOptions


def timeless(d):
    """``d`` without the seconds anything took (keys ending in ``seconds``), at any depth."""
    if isinstance(d, dict):
        return {k: timeless(v) for k, v in d.items() if not str(k).endswith("seconds")}
    return [timeless(v) for v in d] if isinstance(d, list) else d


def contents(path) -> dict:
    """Every dataset's bytes and every attribute of the store, less when it was made, the seconds
    things took and the budget it was run with."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = (obj.dtype.str, obj.shape, obj[()].tobytes() if obj.shape != () else obj[()])
            out[name + "@"] = timeless({k: (v.tobytes() if isinstance(v, np.ndarray) else v) for k, v in obj.attrs.items()})
        f.visititems(visit)
        attrs = dict(f.attrs)
    prov = json.loads(attrs.pop("provenance"))
    prov.pop("timings")
    prov["parameters"].pop("memory_budget")
    attrs.pop("created_utc")
    out["/"] = (attrs, json.dumps(timeless(prov), sort_keys=True))
    return out


def interrupted(monkeypatch, spec, out, config, unit: str, nth: int = 1) -> None:
    """An ingest stopped (as by Ctrl-C) right after its ``nth`` mark of ``unit`` ("buckets", "sort"
    (a bucket written), "adjacency", "features")."""
    original = ResumableOutput.mark
    seen = []

    def mark(self, done, h5file=None):
        original(self, done, h5file)
        seen.append(done[0])
        if seen.count(unit) == nth and done[0] == unit:
            raise KeyboardInterrupt

    monkeypatch.setattr(ResumableOutput, "mark", mark)
    with pytest.raises(KeyboardInterrupt):
        ingest(spec, out, config)
    monkeypatch.setattr(ResumableOutput, "mark", original)
    assert not out.exists() and out.with_name(out.name + ".partial").exists()


@pytest.fixture(scope="module")
def papers(tmp_path_factory):
    """The papers100M raw layout, large enough for a community order (> 4,096 nodes)."""
    root = tmp_path_factory.mktemp("data")
    truth = make_papers100m_like(root, n=6000, m=150_000, d=12, seed=3)   # 4 buckets at 4 MiB
    return str(truth.path)


@pytest.mark.parametrize("unit,nth", [("buckets", 1), ("sort", 1), ("sort", 3), ("adjacency", 1), ("features", 1)])
@pytest.mark.parametrize("order", ["auto", "none"])
def test_a_resumed_ingest_writes_the_store_an_uninterrupted_one_does(tmp_path, monkeypatch, papers, unit, nth, order):
    whole = ingest(papers, tmp_path / "whole.h5", IngestConfig(memory_budget=64 << 20, order=order))
    assert whole.resumed is None
    out = tmp_path / "g.h5"
    interrupted(monkeypatch, papers, out, IngestConfig(memory_budget=4 << 20, order=order), unit, nth)
    r = ingest(papers, out, IngestConfig(memory_budget=32 << 20, order=order))   # another budget resumes too
    assert r.resumed == unit
    assert contents(out) == contents(tmp_path / "whole.h5")
    assert sorted(os.listdir(tmp_path)) == ["g.h5", "whole.h5"]   # no partial, lock or work folder left
    if order != "none":
        with h5py.File(out) as f:
            assert "order" in f


def test_a_partial_store_of_other_inputs_is_not_resumed(tmp_path, monkeypatch):
    root = tmp_path / "data"
    spec = str(make_papers100m_like(root, n=300, m=2000, d=4, seed=1).path)
    out = tmp_path / "g.h5"
    interrupted(monkeypatch, spec, out, IngestConfig(memory_budget=4 << 20), "adjacency")
    # the data set is made again (another seed): its files' sizes and times change, so the key does
    make_papers100m_like(root, n=300, m=2100, d=4, seed=2)
    r = ingest(spec, out, IngestConfig())
    assert r.resumed is None
    # said in the report (the partial output dropped), not kept in the store: the same as a fresh one
    said = [w for w in r.warnings if "partial output" in w]
    assert len(said) == 1 and "starting afresh" in said[0], r.warnings
    ingest(spec, tmp_path / "whole.h5", IngestConfig())
    assert contents(out) == contents(tmp_path / "whole.h5")


def test_a_directed_run_does_not_resume_a_symmetrised_one(tmp_path, monkeypatch, papers):
    out = tmp_path / "g.h5"
    interrupted(monkeypatch, papers, out, IngestConfig(memory_budget=4 << 20), "sort")
    r = ingest(papers, out, IngestConfig(directed=True))
    assert r.resumed is None and not r.symmetric


@pytest.mark.parametrize("damage", ["truncate", "drop_adj", "not_hdf5", "spill_cut", "spill_gone", "sort_cut",
                                    "adj_value", "sort_value"])
def test_a_partial_store_changed_since_its_mark_starts_afresh_and_says_so(tmp_path, monkeypatch, papers, damage):
    out = tmp_path / "g.h5"
    unit = "sort" if damage.startswith(("spill", "sort")) else "adjacency"
    nth = 2 if damage == "sort_value" else 1
    interrupted(monkeypatch, papers, out, IngestConfig(memory_budget=4 << 20), unit, nth)
    partial = out.with_name("g.h5.partial")
    spills = sorted(out.with_name("g.h5.partial.d").glob("*.keys"))
    if damage == "spill_cut":
        with open(spills[-1], "r+b") as f:
            f.truncate(8)
    elif damage == "spill_gone":
        spills[-1].unlink()
    elif damage in ("adj_value", "sort_value"):   # same shapes, one id changed (as a torn write could)
        with h5py.File(partial, "r+") as f:
            f["adj/indices"][5] = f["adj/indices"][5] + 1
    elif damage == "sort_cut":
        with h5py.File(partial, "r+") as f:
            f["adj/indices"].resize((3,))
    elif damage == "not_hdf5":
        partial.write_bytes(b"not a store")
    else:
        with h5py.File(partial, "r+") as f:
            if damage == "drop_adj":
                del f["adj"]
            else:
                f["adj/indices"].resize((f["adj/indices"].shape[0] - 1,))
    r = ingest(papers, out, IngestConfig())
    assert r.resumed is None
    assert any("changed since; starting afresh" in w for w in r.warnings), r.warnings
    ingest(papers, tmp_path / "whole.h5", IngestConfig())
    got, want = contents(out), contents(tmp_path / "whole.h5")
    assert {k: v for k, v in got.items() if k != "/"} == {k: v for k, v in want.items() if k != "/"}


def test_arrays_in_memory_are_not_resumable(tmp_path, monkeypatch):
    """Nothing identifies arrays across runs: an interrupt keeps nothing."""
    original = ResumableOutput.mark
    calls = []
    monkeypatch.setattr(ResumableOutput, "mark", lambda *a, **k: calls.append(a) or original(*a, **k))
    rng = np.random.default_rng(0)
    from_arrays(rng.integers(0, 50, (2, 200)), x=rng.standard_normal((50, 3)), output=tmp_path / "g.h5")
    assert calls == [] and os.listdir(tmp_path) == ["g.h5"]


def test_an_edge_list_with_node_files_resumes(tmp_path, monkeypatch, rng):
    n = 500
    e = tmp_path / "e.txt"
    e.write_text("".join(f"{a} {b}\n" for a, b in rng.integers(0, n, (3000, 2))))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 5)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(-1, 4, n))
    opts = SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"), labels=str(tmp_path / "y.npy"))
    (tmp_path / "o").mkdir()
    out = tmp_path / "o" / "g.h5"
    interrupted(monkeypatch, str(e), out, IngestConfig(source=opts), "features")
    assert ingest(str(e), out, IngestConfig(source=opts)).resumed == "features"
    ingest(str(e), tmp_path / "o" / "whole.h5", IngestConfig(source=opts))
    assert contents(out) == contents(tmp_path / "o" / "whole.h5")


def test_the_command_says_it_resumed(tmp_path, monkeypatch, papers):
    out = tmp_path / "g.h5"
    interrupted(monkeypatch, papers, out, IngestConfig(memory_budget=4 << 20), "sort", 2)
    report = run_json(["ingest", papers, "-o", str(out)])
    assert report["resumed"] == "sort"


def test_an_interrupt_after_the_adjacency_names_what_it_kept(tmp_path, rng):
    """Ctrl-C once /adj is marked (during the features: 200 MB of them) keeps the partial store and
    says where; the rerun resumes after it."""
    n = 400_000
    np.save(tmp_path / "e.npy", rng.integers(0, n, (2, 200_000)))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 128), dtype=np.float32))
    out = tmp_path / "g.h5"
    args = ["ingest", str(tmp_path / "e.npy"), "-o", str(out), "--num-nodes", str(n), "--features",
            str(tmp_path / "x.npy"), "--order", "none"]
    proc = subprocess.Popen([sys.executable, "-m", "gnnprep", *args, "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marked = tmp_path / "g.h5.partial.json"
    deadline = time.monotonic() + 120
    while not marked.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:   # finished before the signal (a fast machine): the output is whole
        return
    assert proc.returncode == 130, err
    assert err.decode().startswith("Error: interrupted") and "g.h5.partial" in err.decode(), err
    assert sorted(os.listdir(tmp_path)) == ["e.npy", "g.h5.partial", "g.h5.partial.json", "x.npy"]
    assert run_json(args)["resumed"] in ("adjacency", "features")


def test_node_rows_written_again_reuse_their_space(tmp_path, rng):
    """A resumed ingest writes the node datasets again in place: the file does not grow by them."""
    from gnnprep.core import h5file
    from gnnprep.graph import store

    n, d = 40_000, 37   # not a whole number of chunks either way
    path = tmp_path / "s.h5"
    for i, mode in enumerate(("w", "r+")):
        x = rng.standard_normal((n, d)).astype(np.float32)
        with h5file.writing(path, mode) as f:
            f.require_group(store.NODES_GROUP)
            ds = store.create_node_rows(f, store.FEATURES, n, d, np.float32)
            for s in range(0, n, 9000):
                ds[s:s + 9000] = x[s:s + 9000]
            ds.flush()
        size = path.stat().st_size
        if i == 0:
            first = size
    assert size == first
    with h5py.File(path) as f:
        np.testing.assert_array_equal(f[store.FEATURES][:], x)


def test_with_tmp_dir_the_sort_is_not_resumed_but_the_adjacency_is(tmp_path, monkeypatch, papers):
    """--tmp-dir's spills go with the run: no bucket is marked; /adj and the features still are."""
    (tmp_path / "spill").mkdir()
    config = IngestConfig(memory_budget=4 << 20, tmp_dir=str(tmp_path / "spill"))
    out = tmp_path / "g.h5"
    interrupted(monkeypatch, papers, out, IngestConfig(memory_budget=4 << 20), "sort")
    r = ingest(papers, out, config)   # a partial with its spills beside the output: started afresh
    assert r.resumed is None
    interrupted(monkeypatch, papers, tmp_path / "h.h5", config, "adjacency")
    assert not (tmp_path / "h.h5.partial.d").exists() and list((tmp_path / "spill").iterdir()) == []
    assert ingest(papers, tmp_path / "h.h5", config).resumed == "adjacency"
    assert contents(tmp_path / "h.h5") == contents(out)


def test_features_changed_since_their_mark_are_copied_again(tmp_path, monkeypatch, papers):
    out = tmp_path / "g.h5"
    interrupted(monkeypatch, papers, out, IngestConfig(), "features")
    with h5py.File(out.with_name("g.h5.partial"), "r+") as f:
        f["nodes/features"][7, 3] = 1e6
    r = ingest(papers, out, IngestConfig())
    assert any("copied again" in w for w in r.warnings), r.warnings
    ingest(papers, tmp_path / "whole.h5", IngestConfig())
    got, want = contents(out), contents(tmp_path / "whole.h5")
    assert {k: v for k, v in got.items() if k != "/"} == {k: v for k, v in want.items() if k != "/"}

