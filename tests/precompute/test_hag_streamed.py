"""A HAG whose in-lists are streamed from its kept relabelled copy in row blocks (issue 33, item 5):
hops bit-identical to the HAG held, planned where the held HAG does not fit, the copy relabelled out
of core first where none is kept, a damaged copy relabelled again; --rows labeled holds the HAG. On the
CPU: the torch backend (a GPU's) runs a HAG in the stored order, with no copy."""

import json

import numpy as np
import pytest
from fixtures import feature_hops, run, store_with_order

from gnnprep.hag import ordered_copy


@pytest.fixture
def graph(tmp_path):
    path = store_with_order(tmp_path, np.random.default_rng(5), n=400, m=4000)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    return path, hag


def _precompute(path, hag, out, *extra):
    r = run(["precompute", str(path), "--hag", str(hag), "-o", str(out), "--hops", "3", "--json",
             "--device", "cpu", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("blocks", ["1,4,2", "1,3,1", "1,64,3"])
def test_streamed_hag_hops_are_the_held_hags_bytes(tmp_path, graph, blocks):
    path, hag = graph
    held = _precompute(path, hag, tmp_path / "held.h5", "--blocks", "1,1," + blocks.split(",")[2])
    assert held["plan"]["s_resident"]
    d = _precompute(path, hag, tmp_path / "streamed.h5", "--blocks", blocks)
    assert not d["plan"]["s_resident"] and d["plan"]["b"] == int(blocks.split(",")[1])
    assert "its in-lists streamed" in d["decisions"]["order"]
    for a, b in zip(feature_hops(tmp_path / "held.h5"), feature_hops(tmp_path / "streamed.h5")):
        assert a.tobytes() == b.tobytes()


def test_with_no_copy_kept_it_is_relabelled_out_of_core_then_streamed(tmp_path, graph):
    path, hag = graph
    _precompute(path, hag, tmp_path / "held.h5")
    kept = ordered_copy.copy_path(hag, "community")
    kept.unlink()
    d = _precompute(path, hag, tmp_path / "s.h5", "--blocks", "1,5,1")
    assert "relabelled to it out of core" in d["decisions"]["order"] and "streamed" in d["decisions"]["order"]
    assert kept.is_file()
    for a, b in zip(feature_hops(tmp_path / "held.h5"), feature_hops(tmp_path / "s.h5")):
        assert a.tobytes() == b.tobytes()
    # a damaged copy: said, relabelled again, the same bytes
    import h5py

    with h5py.File(kept, "r+") as f:
        ids = f["adj/indices"][:]
        ids[[0, -1]] = ids[[-1, 0]] if ids[0] != ids[-1] else ids[[0, -1]]
        ids[1] = ids[1] + 1 if ids[1] + 1 < 400 else ids[1] - 1
        f["adj/indices"][:] = ids
    r = run(["precompute", str(path), "--hag", str(hag), "-o", str(tmp_path / "t.h5"), "--hops", "3", "--blocks",
             "1,5,1", "--json", "--device", "cpu"])
    assert r.exit_code == 0 and "ignored, the HAG is relabelled again" in r.stderr
    for a, b in zip(feature_hops(tmp_path / "held.h5"), feature_hops(tmp_path / "t.h5")):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("blocks", ["1,4,1", "1,7,2"])
def test_labeled_rows_through_streamed_in_lists_are_the_held_hags_bytes(tmp_path, graph, blocks):
    """--rows labeled: hop K-1 computes the rows hop K reads (found from the stored rows' in-lists,
    extracted once) block by block, hop K the stored rows from their extracted in-lists."""
    path, hag = graph
    c = blocks.split(",")[2]
    held = _precompute(path, hag, tmp_path / "held.h5", "--blocks", f"1,1,{c}", "--rows", "labeled")
    assert held["plan"]["s_resident"]
    d = _precompute(path, hag, tmp_path / "s.h5", "--blocks", blocks, "--rows", "labeled")
    assert not d["plan"]["s_resident"] and "through the HAG" in d["decisions"]["pruning"]
    for a, b in zip(feature_hops(tmp_path / "held.h5"), feature_hops(tmp_path / "s.h5")):
        assert a.tobytes() == b.tobytes()


def test_the_planner_streams_the_in_lists_where_the_held_hag_does_not_fit():
    from gnnprep.core.errors import OptionError
    from gnnprep.precompute import plan as P
    from gnnprep.precompute.profile import Profile

    prof = Profile(device="cpu")
    p = P.Problem(num_nodes=1_000_000, num_entries=400_000_000, num_features=16, hops=3, out_rows=1_000_000)
    entries, agg = 300_000_000, 250_000
    held = P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries, kept=True)
    assert held.s_resident
    budget = held.predicted_peak // 2       # the held in-lists alone are 1.2 GB
    plan = P.plan_with_hag(p, prof, budget, 0, agg, entries, kept=True)
    assert not plan.s_resident and plan.b > 1 and plan.predicted_peak <= budget
    assert plan.predicted_seconds > held.predicted_seconds   # the in-lists read every hop
    # the pruned hops of --rows labeled too (the stored rows' in-lists extracted once, held)
    from dataclasses import replace

    pruned = replace(p, hop_entries=(400_000_000, 200_000_000, 1_000_000), last_inputs=300_000, out_rows=20_000)
    assert P.plan_with_hag(pruned, prof, 64 << 30, 0, agg, entries, kept=True).s_resident
    plan = P.plan_with_hag(pruned, prof, budget, 0, agg, entries, kept=True)
    assert not plan.s_resident and plan.predicted_peak <= budget
    with pytest.raises(OptionError):
        P.plan_with_hag(pruned, prof, 100 << 20, 0, agg, entries, kept=True)
