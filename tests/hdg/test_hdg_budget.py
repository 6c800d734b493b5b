"""Issue 33 item 6: ``gnnprep hdg --memory-budget``. Every selector run in node blocks writes the
same datasets with the same values as the in-memory selectors (``select`` + ``write_hdg``), whatever
the budget; a budget that cannot hold the graph is one ``Error:`` line and no file; ``--dry-run
--json`` predicts blocks, peak and time from sizes."""

import json

import h5py
import numpy as np
import pytest
from fixtures import random_edges, run

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.hdg import stream
from gnnprep.hdg.builder import build, plan_store, read_graph
from gnnprep.hdg.file import LevelStream, write_hdg
from gnnprep.hdg.select import parse_select, select, select_spec
from gnnprep.hdg.stream import plan_hdg

SPECS = ["random-walk:walks=5,length=3,topk=4,restart=0.1", "random-walk:walks=2,length=2,topk=9",
         "hop-shells:2,cap=3", "hop-shells:3", "anchors:sets=3,size=20", "anchors:sets=4,size=40,hops=1",
         "anchors:sets=2,size=5,hops=0"]


def _store(tmp_path, directed, n=240, m=1100, seed=3, name="g.h5"):
    """Random edges with self-loops, duplicates and isolated nodes (ingest drops the first two)."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    rng = np.random.default_rng(seed)
    src, dst = random_edges(rng, n, m, self_loops=6, duplicates=30, isolated=5)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    out = tmp_path / name
    ingest(str(tmp_path / "e.npy"), out, IngestConfig(directed=directed, source=SourceOptions(num_nodes=n)))
    return out


@pytest.fixture(scope="module", params=[False, True], ids=["symmetric", "directed"])
def store(request, tmp_path_factory):
    return _store(tmp_path_factory.mktemp("budget"), request.param)


def datasets(path) -> dict:
    """Every dataset as (dtype, bytes), every level's attributes, and the schema and channels."""
    out = {}
    with h5py.File(path) as f:
        f.visititems(lambda k, v: out.__setitem__(k, (v.dtype.str, v.shape, v[:].tobytes()))
                     if isinstance(v, h5py.Dataset) else None)
        for name, g in f["levels"].items():
            out[f"attrs/{name}"] = {k: int(v) if not isinstance(v, str) else v for k, v in g.attrs.items()}
        for k in ("schema", "channels", "num_nodes", "hdg_bytes", "levels", "selector", "spec", "seed"):
            out[k] = str(f.attrs[k])
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_budgeted_equals_in_memory_whatever_the_blocks(store, tmp_path, monkeypatch, spec):
    monkeypatch.setattr(stream, "MIN_ROOM", 0)   # a room of a few KiB: tiny graphs in many blocks
    sel = parse_select(spec)
    g = read_graph(store)
    write_hdg(select(g.indptr, g.indices, sel, seed=5), tmp_path / "ref.h5", {}, sel.name, select_spec(sel), 5,
              g.fingerprint, 0, 0)
    ref = datasets(tmp_path / "ref.h5")
    fixed = plan_store(store, sel, 1 << 40).fixed_bytes
    blocks = []
    for room in (1 << 40, 30000, 4000):
        s = build(store, tmp_path / "out.h5", sel, seed=5, memory_budget=fixed + room)
        assert datasets(tmp_path / "out.h5") == ref, room
        blocks.append(s["blocks"])
    assert blocks[0] == 1 and blocks[-1] >= 4 or spec.endswith("hops=0")
    assert not list(tmp_path.glob("*.tmp-*")) and not list(tmp_path.glob(".*work-*"))


def test_metapath_budgeted_equals_in_memory(tmp_path, monkeypatch):
    from ogb_layouts import make_mag_like

    from gnnprep.graph.ingest import IngestConfig, ingest

    ingest(str(make_mag_like(tmp_path / "data").path), tmp_path / "mag.h5", IngestConfig())
    monkeypatch.setattr(stream, "MIN_ROOM", 0)
    g = read_graph(tmp_path / "mag.h5", typed=True)
    for spec in ("metapath:PAP=paper-author-paper,PP=paper-paper", "metapath:PAP=paper-author-paper,cap=2"):
        sel = parse_select(spec)
        h = select(g.indptr, g.indices, sel, seed=2, node_type=g.node_type, type_names=g.type_names)
        write_hdg(h, tmp_path / "ref.h5", {}, sel.name, select_spec(sel), 2, g.fingerprint, 0, 0)
        fixed = plan_store(tmp_path / "mag.h5", sel, 1 << 40).fixed_bytes
        for room in (1 << 40, 2000):
            s = build(tmp_path / "mag.h5", tmp_path / "out.h5", sel, seed=2, memory_budget=fixed + room)
            assert datasets(tmp_path / "out.h5") == datasets(tmp_path / "ref.h5")
        assert s["blocks"] == 1 and s["calls"] > 1   # one node block; the room bounds each call


def test_a_level_is_copied_with_its_offsets_narrowed_to_the_count(tmp_path):
    """The offsets are appended as int64 (the count is known only at the end) and come back narrowed
    (int32 here), as write_hdg would store them."""
    counts = np.array([3, 0, 2, 5, 0, 1])
    lv = LevelStream(tmp_path, "x", "vertices", "node", num_parents=6, ids=True, n=10)
    lv.append(counts[:2], np.arange(3))
    lv.append(counts[2:], np.arange(8) % 10)
    assert lv.finish() == 11
    with h5py.File(tmp_path / "a.h5", "w") as f:
        lv.write(f)
        assert f["levels/x/offsets"].dtype == np.int32
        assert f["levels/x/offsets"][:].tolist() == [0, 3, 3, 5, 10, 10, 11]
        assert f["levels/x/ids"].dtype == np.int32 and f["levels/x/ids"][:].tolist() == [0, 1, 2, *range(8)]
        assert dict(f["levels/x"].attrs) == {"kind": "vertices", "parent": "node", "fanout": 0, "num_parents": 6,
                                             "num_children": 11}


def test_a_level_reopened_from_its_state_drops_what_came_after_it(tmp_path):
    lv = LevelStream(tmp_path, "x", "vertices", "node", num_parents=4, ids=True, weighted=True, n=10)
    lv.append(np.array([2, 1]), np.array([5, 6, 7]), np.ones(3))
    lv.sync()
    state = lv.state()
    lv.append(np.array([9]), np.arange(9), np.ones(9))   # not marked: a rerun does it again
    lv.sync()
    lv.close()
    again = LevelStream(tmp_path, "x", "vertices", "node", num_parents=4, ids=True, weighted=True, n=10, resume=state)
    again.append(np.array([1, 0]), np.array([8]), np.full(1, 2.0))
    assert again.finish() == 4 and again.appends == 2
    with h5py.File(tmp_path / "a.h5", "w") as f:
        again.write(f)
        assert f["levels/x/offsets"][:].tolist() == [0, 2, 3, 4, 4]
        assert f["levels/x/ids"][:].tolist() == [5, 6, 7, 8] and f["levels/x/weights"][:].tolist() == [1, 1, 1, 2]
    (tmp_path / "x.ids").write_bytes(b"")   # a file cut short: refused, not read as zeros
    with pytest.raises(GnnprepError, match="shorter than its last mark"):
        LevelStream(tmp_path, "x", "vertices", "node", num_parents=4, ids=True, n=10, resume=state)


def test_too_small_budget_is_one_line_and_leaves_nothing(tmp_path):
    g = _store(tmp_path, directed=False)
    for spec in ("random-walk:walks=2,length=2,topk=2", "hop-shells:2", "anchors:sets=2,size=3"):
        r = run(["hdg", g, "--select", spec, "--memory-budget", "64MiB", "-o", tmp_path / "h.h5"])
        assert r.exit_code == 1, r.stderr
        assert r.stderr.startswith("Error: --memory-budget 64.0 MiB is too small for") and "needs at least" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("h.h5*")) and not list(tmp_path.glob(".h.h5*"))


def test_dry_run_json_fields_and_a_budgeted_run(tmp_path):
    g = _store(tmp_path, directed=True)
    spec = "hop-shells:2,cap=4"
    r = run(["hdg", g, "--select", spec, "--memory-budget", "1GiB", "-o", tmp_path / "h.h5", "--dry-run", "--json"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["dry_run"] is True and d["spec"] == spec and d["num_nodes"] == 240 and d["memory_budget"] == 1 << 30
    for key in ("entries", "graph_bytes", "scratch_bytes", "fixed_bytes", "room", "block_nodes", "blocks",
                "predicted_peak_bytes", "predicted_seconds", "predicted_hdg_bytes", "predicted_disk_bytes", "threads"):
        assert key in d and d[key] >= 0, key
    assert d["fixed_bytes"] <= d["predicted_peak_bytes"] <= d["memory_budget"] and d["blocks"] == 1
    assert d["predicted_disk_bytes"] == 2 * d["predicted_hdg_bytes"]
    assert not (tmp_path / "h.h5").exists()
    assert run(["hdg", g, "--select", spec, "--dry-run"]).exit_code == 2   # -o is still required
    r = run(["hdg", g, "--select", spec, "--memory-budget", "1GiB", "-o", tmp_path / "h.h5", "--json"])
    s = json.loads(r.stdout)
    assert r.exit_code == 0 and s["memory_budget"] == 1 << 30 and s["blocks"] >= 1 and s["peak_rss_bytes"] > 0
    assert run(["hdg", g, "--select", spec, "--memory-budget", "lots", "-o", tmp_path / "h.h5"]).exit_code == 2


def test_plan_scales_and_refuses_by_sizes():
    """The model alone: the papers100M shape at full size fits 20 GiB for the three selectors, the
    CSR (12.3 GB of int32 ids) does not fit 8 GiB, and more budget never means more blocks."""
    n, m, deg2 = 111_059_956, 3_080_000_000, 1.92e11
    for spec in ("random-walk:walks=10,length=3,topk=8", "hop-shells:2,cap=16", "anchors:sets=16,size=128"):
        p = plan_hdg(parse_select(spec), n, m, 20 << 30, deg2=deg2, threads=2)
        assert p.predicted_peak_bytes <= 20 << 30 and p.fixed_bytes > 12e9 and p.predicted_seconds > 0
        assert plan_hdg(parse_select(spec), n, m, 40 << 30, deg2=deg2, threads=2).blocks <= p.blocks
        with pytest.raises(OptionError, match=r"--memory-budget 8\.0 GiB is too small .* needs at least"):
            plan_hdg(parse_select(spec), n, m, 8 << 30, deg2=deg2, threads=2)


def _interrupt_after_marks(monkeypatch, count):
    """ResumableOutput.mark as is, then KeyboardInterrupt once ``count`` marks are made; returns the original."""
    from gnnprep.core.output import ResumableOutput

    original, made = ResumableOutput.mark, []

    def mark(self, unit, h5file=None):
        original(self, unit, h5file)
        made.append(unit)
        if len(made) == count:
            raise KeyboardInterrupt
    monkeypatch.setattr(ResumableOutput, "mark", mark)
    return original


def _partial(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name + "."))


@pytest.mark.parametrize("spec", ["random-walk:walks=3,length=3,topk=4,restart=0.1", "hop-shells:2,cap=3",
                                  "hop-shells:3", "anchors:sets=3,size=20", "anchors:sets=2,size=30,hops=1"])
def test_an_interrupted_selection_resumes_to_the_same_bytes(store, tmp_path, monkeypatch, spec):
    """Interrupted after its third mark, the run keeps its levels' files; the same selection run again
    (with another budget: the blocks change nothing) continues from the last mark and writes the
    bytes of an uninterrupted run. A different seed starts afresh."""
    from gnnprep.core.output import ResumableOutput
    from gnnprep.hdg import file as hdg_file

    monkeypatch.setattr(stream, "MIN_ROOM", 0)
    monkeypatch.setattr(hdg_file, "MARK_EVERY_S", 0.0)   # a mark after every block
    sel = parse_select(spec)
    fixed = plan_store(store, sel, 1 << 40).fixed_bytes
    ref = tmp_path / "ref.h5"
    assert build(store, ref, sel, seed=5, memory_budget=fixed + (1 << 40))["resumed"] is False
    out = tmp_path / "out.h5"
    original = _interrupt_after_marks(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt) as e:
        build(store, out, sel, seed=5, memory_budget=fixed + 4000)
    assert _partial(out) == ["out.h5.partial.d", "out.h5.partial.json"]
    assert e.value.kept_partial == str(tmp_path / "out.h5.partial.d")
    state = json.loads((tmp_path / "out.h5.partial.json").read_text())["hdg"]
    assert 0 < state["at"]["node"] < 240
    monkeypatch.setattr(ResumableOutput, "mark", original)
    s = build(store, out, sel, seed=5, memory_budget=fixed + 30000)
    assert s["resumed"] is True and datasets(out) == datasets(ref)
    assert _partial(out) == []
    # a partial of another seed is not resumed
    _interrupt_after_marks(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build(store, out, sel, seed=6, memory_budget=fixed + 4000)
    monkeypatch.setattr(ResumableOutput, "mark", original)
    assert build(store, out, sel, seed=5, memory_budget=fixed + 4000)["resumed"] is False
    assert datasets(out) == datasets(ref) and _partial(out) == []


def test_an_interrupted_metapath_selection_resumes_in_the_path_it_stopped_in(tmp_path, monkeypatch):
    from ogb_layouts import make_mag_like

    from gnnprep.core.output import ResumableOutput
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.hdg import file as hdg_file

    ingest(str(make_mag_like(tmp_path / "data").path), tmp_path / "mag.h5", IngestConfig())
    monkeypatch.setattr(stream, "MIN_ROOM", 0)
    monkeypatch.setattr(hdg_file, "MARK_EVERY_S", 0.0)
    sel = parse_select("metapath:PAP=paper-author-paper,PP=paper-paper,cap=2")
    fixed = plan_store(tmp_path / "mag.h5", sel, 1 << 40).fixed_bytes
    ref, out = tmp_path / "ref.h5", tmp_path / "out.h5"
    build(tmp_path / "mag.h5", ref, sel, seed=2, memory_budget=fixed + (1 << 40))
    marks = []
    for stop in (3, 40, 41, 50):   # in the first path, around its end and in the second (59 marks in all)
        original = _interrupt_after_marks(monkeypatch, stop)
        with pytest.raises(KeyboardInterrupt):
            build(tmp_path / "mag.h5", out, sel, seed=2, memory_budget=fixed + 2000)
        marks.append(json.loads((tmp_path / "out.h5.partial.json").read_text())["hdg"]["at"])
        monkeypatch.setattr(ResumableOutput, "mark", original)
        s = build(tmp_path / "mag.h5", out, sel, seed=2, memory_budget=fixed + 2000)
        assert s["resumed"] is True and datasets(out) == datasets(ref) and _partial(out) == []
    assert {m["path"] for m in marks} == {0, 1}, marks


def test_the_command_says_where_an_interrupted_selection_is_kept_and_that_it_resumed(store, tmp_path, monkeypatch):
    """`gnnprep hdg` interrupted after a mark: exit 130, one line naming the kept part; before any
    mark: the plain line and nothing kept. The same command then resumes and says so."""
    from fixtures import assert_one_error

    from gnnprep.core.output import ResumableOutput
    from gnnprep.hdg import file as hdg_file

    monkeypatch.setattr(stream, "MIN_ROOM", 0)
    spec = "hop-shells:2,cap=3"
    budget = plan_store(store, parse_select(spec), 1 << 40).fixed_bytes + 4000
    out = tmp_path / "h.h5"
    args = ["hdg", store, "--select", spec, "-o", out, "--memory-budget", budget]
    append, calls = hdg_file.LevelStream.append, []

    def stopping(self, *a, **k):   # an interrupt at the third block, before the first mark (every 10 s)
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return append(self, *a, **k)
    monkeypatch.setattr(hdg_file.LevelStream, "append", stopping)
    assert_one_error(run(args), 130, r"^Error: interrupted; no output was written$")
    assert _partial(out) == []
    monkeypatch.setattr(hdg_file.LevelStream, "append", append)
    original = _interrupt_after_marks(monkeypatch, 1)
    monkeypatch.setattr(hdg_file, "MARK_EVERY_S", 0.0)
    assert_one_error(run(args), 130, r"^Error: interrupted; no output was written \(the finished part is kept in "
                                     r".*h\.h5\.partial\.d: run the same command again to resume\)$")
    monkeypatch.setattr(ResumableOutput, "mark", original)
    r = run(args)
    assert r.exit_code == 0 and "resumed from an interrupted run's blocks" in r.stdout, r.stderr
    assert _partial(out) == []


@pytest.mark.parametrize("damage", ["missing", "cut short"])
def test_a_partial_output_changed_since_its_mark_starts_afresh_and_says_so(store, tmp_path, monkeypatch, damage):
    from gnnprep.core.output import ResumableOutput
    from gnnprep.hdg import file as hdg_file

    monkeypatch.setattr(stream, "MIN_ROOM", 0)
    monkeypatch.setattr(hdg_file, "MARK_EVERY_S", 0.0)
    sel = parse_select("random-walk:walks=3,length=3,topk=4")
    budget = plan_store(store, sel, 1 << 40).fixed_bytes + 4000
    ref, out = tmp_path / "ref.h5", tmp_path / "out.h5"
    build(store, ref, sel, seed=5, memory_budget=budget)
    original = _interrupt_after_marks(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        build(store, out, sel, seed=5, memory_budget=budget)
    monkeypatch.setattr(ResumableOutput, "mark", original)
    ids = tmp_path / "out.h5.partial.d" / "topk.ids"
    ids.unlink() if damage == "missing" else ids.write_bytes(b"\0" * 4)
    said = []
    s = build(store, out, sel, seed=5, memory_budget=budget, warn=said.append)
    assert s["resumed"] is False and datasets(out) == datasets(ref) and _partial(out) == []
    assert len(said) == 1 and said == s["warnings"] and "topk.ids" in said[0] and "starting afresh" in said[0], said
