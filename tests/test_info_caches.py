"""`gnnprep info` on the caches runs keep beside artifacts (S in a node order, a relabelled HAG): what
each is, what it was made from and whether it is current — not "not a gnnprep artifact"."""

import json
import os

import numpy as np
from fixtures import make_store, run, store_with_order

from gnnprep import info
from gnnprep.graph import order as kept_order
from gnnprep.graph.store import GraphStore
from gnnprep.hag import ordered_copy
from gnnprep.precompute import ordered
from gnnprep.sparse.order import community_order


def test_the_cache_formats_are_their_owners():
    from gnnprep.core.artifact import CACHES

    assert info.ORDERED_COPY == ordered.FORMAT
    assert info.HAG_COPY == ordered_copy.COPY_FORMAT
    assert set(CACHES) == {info.ORDERED_COPY, info.HAG_COPY}


def _info(path):
    r = run(["info", str(path), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_an_ordered_copy_is_described_and_goes_stale_with_its_store(tmp_path, rng):
    path, *_ = make_store(tmp_path, rng, n=200, m=1500, d=3)
    with GraphStore(path) as store:
        order = community_order(store.indptr(), store.stored_indices())
        copy, _ = ordered.build_copy(store, "community", order, {"near_share_before": 0.1, "near_share_after": 0.5},
                                       room=1 << 16)
        copy.close()
    kept = ordered.copy_path(path, "community")
    d = _info(kept)
    assert d["current"] and d["cache_of"] == str(path) and d["kind"] == "community"
    assert d["num_nodes"] == 200 and d["stale_because"] is None
    text = run(["info", str(kept)]).output
    assert "a cache, safe to delete" in text and "state          current" in text
    # another graph at the store's path: stale, and said so
    make_store(tmp_path, np.random.default_rng(5), n=200, m=1400, d=3)
    d = _info(kept)
    assert not d["current"] and "another graph" in d["stale_because"]
    # renamed: what it was made from is unknown
    os.rename(kept, tmp_path / "elsewhere.h5")
    d = _info(tmp_path / "elsewhere.h5")
    assert d["cache_of"] is None and not d["current"]


def test_a_kept_hag_copy_is_described_and_goes_stale_with_its_hag(tmp_path, rng):
    path = store_with_order(tmp_path, rng)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    d = _info(kept)
    assert d["current"] and d["cache_of"] == str(hag) and d["num_nodes"] == 300 and d["num_agg"] >= 0
    os.utime(hag, ns=(1, 1))   # the HAG file written again (its mtime moved)
    d = _info(kept)
    assert not d["current"] and "written again" in d["stale_because"]
    assert "stale" in run(["info", str(kept)]).output
    r = run(["precompute", str(path), "--hops", "1", "--hag", str(kept), "-o", str(tmp_path / "f.h5")])
    assert r.exit_code == 1 and "a HAG relabelled to a run's node order" in r.stderr, r.output
    assert "expected a gnnprep.hag artifact (pass the file it was made from)" in r.stderr, r.output
    hag.unlink()
    d = _info(kept)
    assert not d["current"] and "no such file" in d["stale_because"]


def test_a_node_order_kept_beside_a_store_is_described(tmp_path, rng):
    """``<store>.order-<kind>.npz`` (not HDF5): what it is, its store, whether it is current."""
    path, *_ = make_store(tmp_path, rng, n=120, m=800, d=3)
    with GraphStore(path) as store:
        fingerprint = store.fingerprint
    shares = {"near_share_before": 0.2, "near_share_after": 0.7, "seconds": 0.1}
    assert kept_order.save_cached(path, "community", fingerprint, rng.permutation(120), shares)
    kept = kept_order.cache_path(path, "community")
    d = _info(kept)
    assert d["current"] and d["cache_of"] == str(path) and d["kind"] == "community" and d["stale_because"] is None
    assert d["near_share_after"] == 0.7 and d["format"] == kept_order.ORDER_FORMAT
    text = run(["info", str(kept)]).output
    assert "a cache, safe to delete" in text and "state          current" in text and "20% -> 70%" in text
    # made for another graph: stale, and why
    assert kept_order.save_cached(path, "community", "another", rng.permutation(120), shares)
    d = _info(kept)
    assert not d["current"] and "another graph" in d["stale_because"]
    # renamed away from its store: what it was made from is unknown
    os.replace(kept, tmp_path / "elsewhere.order-x.npz")
    assert _info(tmp_path / "elsewhere.order-x.npz")["cache_of"] is None
    # not an order at all: one line naming it
    bad = tmp_path / "g.order-community.npz"
    bad.write_bytes(b"not a zip")
    r = run(["info", str(bad)])
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {bad}: not a node order kept beside a graph store")
    np.savez(bad, x=np.arange(3))
    r = run(["info", str(bad)])
    assert r.exit_code == 1 and "not a node order" in r.stderr and len(r.stderr.strip().splitlines()) == 1
