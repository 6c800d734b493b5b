"""The HAG relabelled to a node order out of core (gnnprep.hag.order.write_in_order): the same arrays,
byte for byte, as the in-memory relabelling (in_order), whatever the room (one bucket or many, one
read block or many); a corrupt HAG is refused with the dataset named."""

import json

import h5py
import numpy as np
import pytest
from fixtures import feature_hops, random_edges, reference_csr

from gnnprep.core.errors import GnnprepError
from gnnprep.hag.file import read_hag, read_relabelled, write_hag
from gnnprep.hag.order import in_order, write_in_order
from gnnprep.hag.stream import search_arrays


def _hag_file(tmp_path, rng, n=400, m=3000, isolated=0, capacity=None):
    """A HAG file of a random graph with self-loops, duplicate edges and ``isolated`` nodes without
    in-lists (the last ones)."""
    src, dst = random_edges(rng, n - isolated, m)
    src = np.concatenate([src, np.arange(5), [3, 3]])        # self-loops and a duplicate
    dst = np.concatenate([dst, np.arange(5), [7, 7]])
    a = reference_csr(src, dst, n)
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    h = search_arrays(indptr, indices, capacity=capacity if capacity is not None else n)
    path = tmp_path / "hag.h5"
    write_hag(h, path, {}, "set", n, "fp", indptr)
    return path


def _orders(rng, n):
    perm = rng.permutation(n)
    return {"permutation": perm, "identity": np.arange(n)}


@pytest.mark.parametrize("room", [1 << 26, 2048, 300])   # one bucket; a few; a bucket per handful of rows
@pytest.mark.parametrize("seed", [0, 1])
def test_streamed_relabelling_writes_the_in_memory_arrays(tmp_path, seed, room):
    rng = np.random.default_rng(seed)
    path = _hag_file(tmp_path, rng, isolated=7)
    h, _ = read_hag(path)
    assert h.num_agg > 0
    for name, order in _orders(rng, h.num_nodes).items():
        inv = np.empty(h.num_nodes, np.int64)
        inv[order] = np.arange(h.num_nodes)
        want = in_order(h, order, inv)
        out = tmp_path / f"copy-{name}.h5"
        passes = write_in_order(path, out, order, inv, {"kind": name}, room=room)
        assert passes >= 2 and (passes > 2) == (room < 2 * 4 * len(want.indices))
        got = read_relabelled(out, h.num_nodes, h.num_agg)
        for field in ("inputs", "level_ptr", "indptr", "indices"):
            a, b = getattr(got, field), getattr(want, field)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (name, field)
        with h5py.File(out) as f:
            assert f.attrs["kind"] == name


def test_a_hag_without_aggregation_nodes_or_entries(tmp_path):
    rng = np.random.default_rng(3)
    path = _hag_file(tmp_path, rng, n=50, m=60, capacity=0)
    h, _ = read_hag(path)
    assert h.num_agg == 0
    order = rng.permutation(h.num_nodes)
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    write_in_order(path, tmp_path / "c.h5", order, inv, {}, room=256)
    got, want = read_relabelled(tmp_path / "c.h5", h.num_nodes, 0), in_order(h, order, inv)
    assert got.indices.tobytes() == want.indices.tobytes() and got.indptr.tobytes() == want.indptr.tobytes()


def test_a_corrupt_hag_is_refused_naming_the_dataset_and_nothing_is_left(tmp_path):
    rng = np.random.default_rng(4)
    path = _hag_file(tmp_path, rng)
    h, _ = read_hag(path)
    with h5py.File(path, "r+") as f:
        f["adj/indices"][len(h.indices) - 1] = h.num_nodes + h.num_agg   # past the last node
    order = np.arange(h.num_nodes)
    out = tmp_path / "c.h5"
    with pytest.raises(GnnprepError, match=r"/adj/indices\[\d+\] = \d+: expected a node id"):
        write_in_order(path, out, order, order, {}, room=512)
    assert not out.exists() and not list(tmp_path.glob("*.tmp-*"))


def _store_with_order(tmp_path, seed=21):
    from fixtures import store_with_order

    return store_with_order(tmp_path, np.random.default_rng(seed))


@pytest.mark.parametrize("rows", ["all", "labeled"])
def test_a_run_whose_budget_does_not_hold_the_in_memory_relabelling_relabels_out_of_core(tmp_path, monkeypatch, rows):
    """precompute --hag FILE with no relabelled copy kept, under a budget that does not hold the HAG
    read (int64) beside its relabelled copy (here: any budget, patched): relabelled out of core into
    the kept copy, which later runs read; the hops are the bytes of the in-memory relabelling's."""
    from fixtures import run

    from gnnprep.hag import ordered_copy
    from gnnprep.precompute import plan as P
    from gnnprep.precompute import run as R

    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    kept.unlink()
    extra = ["--rows", rows, "--hops", "3", "--device", "cpu"]   # the numba backend's copy
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "mem.h5", "--json", *extra])
    assert r.exit_code == 0 and "relabelled to it in" in r.stdout and kept.is_file()
    kept.unlink()
    for mod in (P, R):   # every budget too small for the in-memory relabelling: a bucket per few rows
        monkeypatch.setattr(mod, "hag_relabel_room", lambda *a: 4096)
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "out.h5", "--json", *extra])
    assert r.exit_code == 0, r.output
    assert "relabelled to it out of core" in r.stdout and "passes over its in-lists" in r.stdout and kept.is_file()
    for a, b in zip(feature_hops(tmp_path / "mem.h5"), feature_hops(tmp_path / "out.h5")):
        assert a.tobytes() == b.tobytes()
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "again.h5", "--json", *extra])
    assert r.exit_code == 0 and "kept beside it: read and checked" in r.stdout


def test_gnnprep_hag_keeps_the_copy_out_of_core_where_in_memory_does_not_fit(tmp_path, monkeypatch):
    from fixtures import run

    from gnnprep.graph.store import GraphStore
    from gnnprep.hag import order as O
    from gnnprep.hag import ordered_copy
    from gnnprep.hag.order import in_order

    path = _store_with_order(tmp_path)
    monkeypatch.setattr(O, "in_order_bytes", lambda *a: 1 << 50)
    monkeypatch.setattr(O, "relabel_room", lambda *a: 2048)
    hag = tmp_path / "hag.h5"
    r = run(["hag", str(path), "-o", str(hag), "--capacity", "all", "--json"])
    assert r.exit_code == 0
    report = json.loads(r.stdout)["kept_copy"]
    assert report["path"] == str(ordered_copy.copy_path(hag, "community")) and report["how"] == "out of core"
    assert "out of core" in run(["hag", str(path), "-o", str(tmp_path / "h2.h5"), "--capacity", "all"]).output
    h, _ = read_hag(hag)
    with GraphStore(path) as g:
        choice = ordered_copy.computation_order(g, "auto")
        assert choice[0] is not None
        got = ordered_copy.load(hag, "community", g, choice[0], choice[1])
    want = in_order(h, choice[0], choice[1])
    assert got is not None and got.indices.tobytes() == want.indices.tobytes()
    assert got.inputs.tobytes() == want.inputs.tobytes()


def test_gnnprep_hag_keeps_no_copy_whose_relabelling_would_outlast_the_search(tmp_path, monkeypatch):
    """At papers100M's size under a small budget the out-of-core relabelling has 16 MiB of room and
    is predicted to take hours after a search of minutes: the HAG is written, the copy is not (the
    report says why; precompute --hag relabels it at its own budget), and --dry-run says so."""
    from fixtures import run

    from gnnprep.hag import order as O
    from gnnprep.hag import ordered_copy

    path = _store_with_order(tmp_path)
    monkeypatch.setattr(O, "relabel_seconds", lambda *a: 1e6)
    hag = tmp_path / "hag.h5"
    r = run(["hag", str(path), "-o", str(hag), "--capacity", "all", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)["kept_copy"]
    assert report["path"] is None and "longer than the search" in report["why"]
    assert hag.is_file() and not ordered_copy.copy_path(hag, "community").exists()
    dry = json.loads(run(["hag", str(path), "-o", str(hag), "--dry-run", "--json"]).stdout)
    assert dry["keeps_relabelled"] is False and dry["predicted_relabel_seconds"] == 0.0
    assert dry["predicted_seconds"] == dry["predicted_search_seconds"]
    assert "not kept relabelled" in run(["hag", str(path), "-o", str(hag), "--dry-run"]).output
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "f.h5", "--hops", "2"])
    assert r.exit_code == 0, r.output


def test_a_hag_whose_covers_are_wrong_is_refused_after_the_out_of_core_relabelling(tmp_path, monkeypatch):
    """The copy is checked against the graph (cover(v) = N(v), through the order) as it is read: an
    edited HAG is refused naming it, and no copy is left to be trusted."""
    from fixtures import run

    from gnnprep.hag import ordered_copy
    from gnnprep.precompute import plan as P
    from gnnprep.precompute import run as R

    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    kept.unlink()
    h, _ = read_hag(hag)
    with h5py.File(hag, "r+") as f:   # two graph ids of one row swapped with another row's: same sizes
        idx = f["adj/indices"][:]
        rows = [v for v in range(h.num_nodes) if 0 < h.indptr[v + 1] - h.indptr[v]]
        a, b = int(h.indptr[rows[0]]), int(h.indptr[rows[-1]])
        assert idx[a] != idx[b]
        idx[a], idx[b] = idx[b], idx[a]
        f["adj/indices"][:] = idx
    for mod in (P, R):
        monkeypatch.setattr(mod, "hag_relabel_room", lambda *a: 4096)
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "out.h5"])
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {hag}") and "cover" in r.stderr, r.stderr
    assert not kept.exists() and not (tmp_path / "out.h5").exists()
