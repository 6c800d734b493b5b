"""Issue 24 (build item 5): which node order a store gets. ``ingest --order auto`` keeps the
community order where it brings neighbours near and hubs first (degree) on a graph without
communities (R-MAT), records the choice and why in the store, and precompute's ``--reorder auto``
runs in it; every order leaves the hops bit for bit those of the stored order, in original ids."""

import dataclasses
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import planted, run, run_json

from gnnprep.graph import order as kept_order
from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import SourceOptions
from gnnprep.graph.store import GraphStore
from gnnprep.precompute import plan
from gnnprep.precompute import run as run_module
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.run import precompute
from gnnprep.sparse import order as node_order

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # benchmarks/ beside gnnprep/
    sys.path.insert(0, str(ROOT))
from benchmarks.harness import rmat_edges  # noqa: E402


@pytest.fixture
def small_windows(monkeypatch):
    """The cache-sized windows of the real sizes scaled to graphs of thousands of nodes."""
    monkeypatch.setattr(node_order, "LOCALITY_WINDOW", 32)
    monkeypatch.setattr(node_order, "PREFIX_ROWS", 500)


def _edges_store(tmp_path, rng, src, dst, n, order="auto", name="g.h5", budget=None):
    np.save(tmp_path / "e.npy", np.stack([src, dst]).astype(np.int64))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 5)).astype(np.float32))
    (tmp_path / "splits").mkdir(exist_ok=True)
    np.save(tmp_path / "splits" / "train.npy", np.arange(1, n, 7))
    np.save(tmp_path / "splits" / "valid.npy", np.arange(3, n, 14))
    rep = ingest(str(tmp_path / "e.npy"), tmp_path / name,
                 IngestConfig(order=order, memory_budget=budget,
                              source=SourceOptions(num_nodes=n, features=str(tmp_path / "x.npy"),
                                                   splits=str(tmp_path / "splits"))))
    return tmp_path / name, rep


def _rmat_store(tmp_path, rng, order="auto", name="rmat.h5", n=6000):
    u, v, _ = rmat_edges(n, 80_000, seed=1, chunk=1 << 14, progress=False)
    # a few isolated nodes past the generator's, a duplicate and a reversed pair, a self-loop
    src = np.concatenate([u, u[:5], v[:5], [7]])
    dst = np.concatenate([v, v[:5], u[:5], [7]])
    return _edges_store(tmp_path, rng, src, dst, n + 50, order, name)


def _order_pays(monkeypatch):
    """The planner told that an order pays on these tiny graphs (its column blocks are cache-sized,
    and at the real sizes the planner's profile decides): what auto chose is then used."""
    real = run_module.load_profile
    monkeypatch.setattr(plan, "REORDER_MIN_BLOCK_BYTES", 0)
    monkeypatch.setattr(run_module, "load_profile", lambda device, warn=None: dataclasses.replace(
        real(device, warn=warn), reorder_speedup=0.01, reorder_ns_per_entry=0.0, relabel_ns_per_entry=0.0,
        gather_bytes_per_s=1e15))


def _same_hops(a, b, hops):
    with FeatureStore(a) as fa, FeatureStore(b) as fb:
        assert np.array_equal(fa.rows, fb.rows) if fa.rows is not None else fb.rows is None
        for k in range(hops + 1):
            assert fa.hop(k)[:].tobytes() == fb.hop(k)[:].tobytes(), k


def test_choose_order_takes_community_then_hubs_then_none():
    c_good = {"near_share_before": 0.01, "near_share_after": 0.7}
    c_flat = {"near_share_before": 0.003, "near_share_after": 0.005}
    d_good = {"prefix_share_before": 0.02, "prefix_share_after": 0.66}
    d_flat = {"prefix_share_before": 0.4, "prefix_share_after": 0.6}
    assert node_order.choose_order({"community": c_good, "degree": d_good})[0] == "community"
    kind, why = node_order.choose_order({"community": c_flat, "degree": d_good})
    assert kind == "degree" and "+0.002 < 0.2" in why and "0.020 -> 0.660" in why
    assert node_order.choose_order({"community": c_flat, "degree": d_flat})[0] == "none"
    assert node_order.choose_order({"degree": d_good})[0] == "degree"
    assert node_order.choose_order({})[0] == "none"


def test_prefix_share_windows_reads_every_entry_when_the_windows_cover_them(rng):
    indices = rng.integers(0, 1000, 5000).astype(np.int32)
    inv = rng.permutation(1000)
    exact = np.count_nonzero(inv[indices] < 100) / len(indices)
    assert node_order.prefix_share_windows(indices, 100, inv, windows=5, width=1000) == pytest.approx(exact)
    assert node_order.prefix_share_windows(np.empty(0, np.int32), 10) == 1.0


def test_auto_keeps_hubs_first_on_rmat_and_precompute_runs_in_it_bitwise(tmp_path, rng, small_windows, monkeypatch):
    path, rep = _rmat_store(tmp_path, rng)
    o = rep.order
    assert o["kind"] == "degree", o
    assert o["prefix_share_after"] - o["prefix_share_before"] >= node_order.DEGREE_MIN_GAIN
    assert o["candidates"]["community"]["near_share_after"] - o["candidates"]["community"]["near_share_before"] < 0.2
    assert "hubs first" in o["why"]
    with GraphStore(path) as g:
        assert kept_order.chosen_order(g) == ("degree", o["why"])
        kept, info = kept_order.load_from_store(g, "degree")
        np.testing.assert_array_equal(kept, node_order.degree_order(g.indptr()))
        assert info["prefix_share_after"] == o["prefix_share_after"]
        assert kept_order.precompute_kind(g, "auto") == ("degree", True, None)
        assert kept_order.precompute_kind(g, "bfs") == ("bfs", True, None)
    _order_pays(monkeypatch)
    base = dict(hops=3, device="cpu", rows="all")
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(reorder="none", blocks=(1, 1, 1), **base))
    for blocks in [(1, 1, 2), (1, 3, 2)]:   # S resident; S in 3 row blocks
        out = tmp_path / f"auto-{blocks[1]}.h5"
        r = precompute(out.parent / "rmat.h5", out, PrecomputeConfig(reorder="auto", blocks=blocks, **base))
        if blocks[1] == 1:   # streamed, the planner may rather not write the ordered copy for so few hops
            assert r.reorder["used"] and r.reorder["kind"] == "degree" and r.reorder["found_in"] == "store", \
                (r.reorder, r.decisions)
            assert r.decisions["order"].startswith("used") and r.decisions["order"].endswith("(order: degree)")
        _same_hops(tmp_path / "ref.h5", out, 3)


@pytest.mark.parametrize("kind", ["degree", "degree-bucket"])
def test_a_forced_degree_order_is_bitwise_with_pruned_rows_in_original_ids(tmp_path, rng, small_windows, kind):
    path, rep = _rmat_store(tmp_path, rng, order=kind)
    assert rep.order["kind"] == kind and rep.order["why"].startswith(f"--order {kind}")
    base = dict(hops=2, device="cpu", rows="labeled")
    precompute(path, tmp_path / "ref.h5", PrecomputeConfig(reorder="none", **base))
    for blocks in [(1, 1, 2), (1, 3, 1)]:
        out = tmp_path / f"f-{blocks[1]}.h5"
        r = precompute(path, out, PrecomputeConfig(reorder=kind, blocks=blocks, **base))
        assert r.reorder["used"] and r.reorder["kind"] == kind, (r.reorder, r.decisions)
        _same_hops(tmp_path / "ref.h5", out, 2)
        with FeatureStore(out) as f, GraphStore(path) as g:
            labeled = np.union1d(g.f["splits/train"][:], g.f["splits/valid"][:])
            assert np.array_equal(f.rows, labeled)   # the rows users see: original ids


def test_auto_keeps_the_community_order_on_a_graph_with_communities(tmp_path, rng, small_windows):
    indptr, indices, _ = planted(rng, groups=40, size=150, cross=3)
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    path, rep = _edges_store(tmp_path, rng, rows, indices, n)
    assert rep.order["kind"] == "community" and "near share" in rep.order["why"], rep.order
    with GraphStore(path) as g:
        assert kept_order.chosen_order(g)[0] == "community" and g.kept_order("degree") is None
        assert kept_order.precompute_kind(g, "auto") == ("community", False, None)


def test_auto_records_none_when_no_order_pays_and_precompute_says_why(tmp_path, rng, small_windows, monkeypatch):
    n = 3000
    src = rng.integers(0, n, 30_000)          # uniform random: no communities, no hubs
    dst = rng.integers(0, n, 30_000)
    path, rep = _edges_store(tmp_path, rng, src, dst, n)
    assert rep.order["kind"] == "none" and "degree prefix share" in rep.order["why"], rep.order
    with GraphStore(path) as g:
        assert kept_order.chosen_order(g)[0] == "none" and g.kept_order("degree") is None
        kind, force, why = kept_order.precompute_kind(g, "auto")
        assert why.startswith("not used: ingest chose no order")
    _order_pays(monkeypatch)
    r = precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=1, device="cpu", reorder="auto"))
    assert r.decisions["order"].startswith("not used: ingest chose no order"), r.decisions


def test_order_none_records_nothing_and_a_damaged_record_is_ignored(tmp_path, rng, small_windows):
    path, rep = _rmat_store(tmp_path, rng, order="none")
    assert rep.order is None
    with GraphStore(path) as g:
        assert kept_order.chosen_order(g) is None
        assert kept_order.precompute_kind(g, "auto") == ("community", False, None)   # as before
    path, _ = _rmat_store(tmp_path, rng, name="damaged.h5")
    for bad in ["hubs", b"\xff", 7, np.arange(3)]:
        with h5py.File(path, "r+") as f:
            f["order"].attrs["chosen"] = bad
        with GraphStore(path) as g:
            assert kept_order.chosen_order(g) is None


def test_ingest_cli_reports_the_choice(tmp_path, rng, small_windows):
    u, v, _ = rmat_edges(6000, 80_000, seed=1, chunk=1 << 14, progress=False)
    np.save(tmp_path / "e.npy", np.stack([u, v]).astype(np.int64))
    out = run_json(["ingest", str(tmp_path / "e.npy"), "-o", str(tmp_path / "g.h5"), "--num-nodes", "6000",
                    "--json"])
    assert out["order"]["kind"] == "degree"
    text = run(["ingest", str(tmp_path / "e.npy"), "-o", str(tmp_path / "h.h5"), "--num-nodes", "6000",
                "--reorder", "degree-bucket"])
    assert "node order: degree-bucket" in text.output and "why: --order degree-bucket" in text.output


def test_info_shows_the_chosen_order_and_why(tmp_path, rng, small_windows):
    path, rep = _rmat_store(tmp_path, rng)
    d = run_json(["info", str(path)])
    assert d["node_order"]["kind"] == "degree" and d["node_order"]["why"] == rep.order["why"]
    assert d["node_order"]["prefix_share_after"] == pytest.approx(rep.order["prefix_share_after"])
    text = run(["info", str(path)]).output
    assert "node order     degree (entries gathering X's first 65,536 rows" in text and "chosen       hubs first" in text
    n = 3000
    path, rep = _edges_store(tmp_path, rng, rng.integers(0, n, 30_000), rng.integers(0, n, 30_000), n, name="u.h5")
    assert run_json(["info", str(path)])["node_order"] == {"kind": "none", "why": rep.order["why"]}
    assert "node order     none (no order: community near share" in run(["info", str(path)]).output
