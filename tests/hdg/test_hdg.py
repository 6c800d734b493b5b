"""HDG selectors, artifact and aggregation: hierarchical aggregation equals a naive reference that
materialises every instance's features with explicit loops; selectors equal plain-Python BFS and
walk references."""

import json
from collections import deque

import numpy as np
import pytest
from fixtures import handmade_hdg, naive_aggregate, random_edges, run, store_csr

from gnnprep.core.errors import GnnprepError
from gnnprep.hdg.file import read_hdg
from gnnprep.hdg.select import AnchorsSelect, HopShellsSelect, RandomWalkSelect, parse_select, select, select_hop_shells
from gnnprep.hdg.structure import aggregate

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# -- fixtures ---------------------------------------------------------------------------------------------
def _graph(tmp_path, name, directed, n=40, m=90, seed=0, d=3):
    """A tiny store from a random edge list with self-loops, duplicates and 3 isolated nodes."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    rng = np.random.default_rng(seed)
    src, dst = random_edges(rng, n, m)
    np.save(tmp_path / f"{name}.npy", np.stack([src, dst]))
    np.save(tmp_path / f"{name}_x.npy", rng.standard_normal((n, d)).astype(np.float32))
    out = tmp_path / f"{name}.h5"
    ingest(str(tmp_path / f"{name}.npy"), out,
           IngestConfig(directed=directed, source=SourceOptions(num_nodes=n, features=str(tmp_path / f"{name}_x.npy"))))
    return out


@pytest.fixture(scope="module", params=[False, True], ids=["symmetric", "directed"])
def graph(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hdg")
    path = _graph(tmp, "g", request.param)
    a = store_csr(path)
    from gnnprep.graph.store import GraphStore

    with GraphStore(path) as g:
        x = g.features[:].astype(np.float64)
    return path, a.indptr.astype(np.int64), a.indices.astype(np.int64), x


SELECTS = [RandomWalkSelect(6, 4, 5), RandomWalkSelect(8, 3, 3, restart=0.3), HopShellsSelect(3),
           HopShellsSelect(2, cap=2), AnchorsSelect(4, 5), AnchorsSelect(3, 6, hops=1)]


# -- naive references -------------------------------------------------------------------------------------
def bfs_dist(indptr, indices, v, limit):
    """d(u → v) for every u within ``limit``: BFS from v along the in-lists."""
    dist, q = {v: 0}, deque([v])
    while q:
        c = q.popleft()
        if dist[c] == limit:
            continue
        for u in indices[indptr[c]:indptr[c + 1]].tolist():
            if u not in dist:
                dist[u] = dist[c] + 1
                q.append(u)
    return dist


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def naive_walks(indptr, indices, sel, seed):
    """The walk kernel's contract in plain Python: per-node splitmix64 stream, counts, top-k."""
    out = []
    restart_bits = min(2**53, int(round(sel.restart * 2**53)))
    for v in range(len(indptr) - 1):
        state = _mix((seed & MASK) ^ _mix((v + GOLDEN) & MASK))
        counts: dict[int, int] = {}
        for _ in range(sel.walks):
            cur = v
            for _ in range(sel.length):
                state = (state + GOLDEN) & MASK
                z = _mix(state)
                if restart_bits > 0 and (z >> 11) < restart_bits:
                    cur = v
                    continue
                lo, deg = int(indptr[cur]), int(indptr[cur + 1] - indptr[cur])
                if deg == 0:
                    cur = v
                    continue
                cur = int(indices[lo + (((z & 0xFFFFFFFF) * deg) >> 32)])
                if cur != v:
                    counts[cur] = counts.get(cur, 0) + 1
        top = sorted(counts.items(), key=lambda t: (-t[1], t[0]))[:sel.topk]
        out.append(top)
    return out


# -- aggregation equals the naive reference ---------------------------------------------------------------
@pytest.mark.parametrize("sel", SELECTS, ids=lambda s: repr(s))
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_aggregate_equals_naive_reference(graph, sel, reduce):
    _, indptr, indices, x = graph
    h = select(indptr, indices, sel, seed=5)
    got = aggregate(h, x, reduce)
    ref = naive_aggregate(h, x, reduce)
    assert list(got) == h.channels() and set(got) == set(ref)
    for k in ref:
        assert got[k].shape == x.shape
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("which", ["anchors", "anchors-1", "handmade", "shells"])
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_a_folded_hdg_aggregates_as_the_reference(graph, which, reduce, monkeypatch):
    """folded (what precompute aggregates with mean or sum): each reduce level over a vertex level one
    weighted vertex level of its members (no [instances, d] array), the reference's channels to
    float32 rounding, with empty parents and instances, negative weights and a zero weight sum (the
    handmade HDG), folded in chunks of parents or at once alike; slots (hop shells) and max are left."""
    from gnnprep.hdg import structure
    from gnnprep.hdg.structure import folded

    _, indptr, indices, x = graph
    h = {"anchors": lambda: select(indptr, indices, AnchorsSelect(4, 5), seed=5),
         "anchors-1": lambda: select(indptr, indices, AnchorsSelect(3, 6, hops=1), seed=5),
         "handmade": lambda: handmade_hdg(np.random.default_rng(3), len(indptr) - 1),
         "shells": lambda: select(indptr, indices, HopShellsSelect(2, cap=2), seed=5)}[which]()
    f = folded(h, reduce)
    assert folded(h, "max") is h and f.channels() == h.channels()
    assert all(lvl.kind == "vertices" for lvl in f.roots) == (which != "shells")
    ref = naive_aggregate(h, x, reduce)
    for xs, tol in ((x, 1e-6), (x.astype(np.float32), 2e-5)):
        got = aggregate(f, xs, reduce)
        for k in ref:
            assert got[k].dtype == xs.dtype
            np.testing.assert_allclose(got[k], ref[k], rtol=tol, atol=tol * np.abs(ref[k]).max())
    monkeypatch.setattr(structure, "FOLD_PARENTS", 7)
    for a, b in zip(f.levels(), folded(h, reduce).levels()):
        for name in ("offsets", "ids", "weights"):
            if getattr(a, name) is not None:
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_aggregate_channels_and_isolated_nodes(graph):
    _, indptr, indices, x = graph
    isolated = np.flatnonzero(np.diff(indptr) == 0)
    assert len(isolated) >= 3
    for sel in SELECTS:
        for name, h in aggregate(select(indptr, indices, sel, seed=1), x).items():
            if not (isinstance(sel, AnchorsSelect)):  # an isolated anchor still sees itself
                np.testing.assert_array_equal(h[isolated], 0.0)
    assert list(aggregate(select(indptr, indices, HopShellsSelect(3)), x)) == ["hop1", "hop2", "hop3"]


def test_hop1_equals_neighbour_mean(graph):
    _, indptr, indices, x = graph
    import scipy.sparse as sp

    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(x), len(x)))
    deg = np.maximum(np.diff(indptr), 1)[:, None]
    got = aggregate(select(indptr, indices, HopShellsSelect(2)), x)
    np.testing.assert_allclose(got["hop1"], (a @ x) / deg, rtol=1e-12)
    np.testing.assert_allclose(aggregate(select(indptr, indices, HopShellsSelect(1)), x, "sum")["hop1"], a @ x)


# -- selectors equal plain-Python references --------------------------------------------------------------
def test_hop_shells_equal_bfs(graph):
    _, indptr, indices, _ = graph
    k = 3
    h = select(indptr, indices, HopShellsSelect(k))
    leaf = h.roots[0].child
    for v in range(len(indptr) - 1):
        dist = bfs_dist(indptr, indices, v, k)
        for i in range(1, k + 1):
            s = v * k + i - 1
            got = leaf.ids[leaf.offsets[s]:leaf.offsets[s + 1]].tolist()
            assert got == sorted(u for u, d in dist.items() if d == i)


def test_hop_shell_cap_samples_within_the_shell_reproducibly(graph):
    _, indptr, indices, _ = graph
    full = select(indptr, indices, HopShellsSelect(3)).roots[0].child
    capped = select_hop_shells(indptr, indices, HopShellsSelect(3, cap=2), seed=7).roots[0].child
    again = select_hop_shells(indptr, indices, HopShellsSelect(3, cap=2), seed=7, block_rows=7).roots[0].child
    other = select_hop_shells(indptr, indices, HopShellsSelect(3, cap=2), seed=8).roots[0].child
    np.testing.assert_array_equal(capped.ids, again.ids)  # independent of the row blocking
    np.testing.assert_array_equal(capped.offsets, again.offsets)
    for s in range(len(full.offsets) - 1):
        whole = set(full.ids[full.offsets[s]:full.offsets[s + 1]].tolist())
        got = capped.ids[capped.offsets[s]:capped.offsets[s + 1]].tolist()
        assert len(got) == min(2, len(whole)) and set(got) <= whole and got == sorted(got)
    assert not np.array_equal(capped.ids, other.ids)


def test_anchors_equal_bfs_with_pgnn_weights(graph):
    _, indptr, indices, _ = graph
    n = len(indptr) - 1
    sel = AnchorsSelect(4, 6, hops=2)
    h = select(indptr, indices, sel, seed=3)
    rng = np.random.default_rng(3)
    sets = [rng.choice(n, sel.size, replace=False) for _ in range(sel.sets)]
    top = h.roots[0]
    leaf = top.child
    assert top.fanout == sel.sets and top.offsets is None
    for v in range(n):
        dist = bfs_dist(indptr, indices, v, sel.hops)
        for s in range(sel.sets):
            i = v * sel.sets + s
            ids = leaf.ids[leaf.offsets[i]:leaf.offsets[i + 1]].tolist()
            w = leaf.weights[leaf.offsets[i]:leaf.offsets[i + 1]]
            want = sorted(int(u) for u in sets[s] if int(u) in dist)
            assert ids == want
            np.testing.assert_allclose(w, [1.0 / (dist[u] + 1) for u in want], rtol=1e-6)


def test_random_walks_equal_python_reference(graph):
    _, indptr, indices, _ = graph
    for sel in (RandomWalkSelect(6, 4, 5), RandomWalkSelect(8, 3, 3, restart=0.3)):
        lvl = select(indptr, indices, sel, seed=11).roots[0]
        ref = naive_walks(indptr, indices, sel, 11)
        for v, top in enumerate(ref):
            a, b = lvl.offsets[v], lvl.offsets[v + 1]
            assert lvl.ids[a:b].tolist() == [u for u, _ in top]
            assert lvl.weights[a:b].tolist() == [float(c) for _, c in top]


def test_random_walks_on_a_cycle_by_hand():
    from gnnprep.hdg.walks import walk_topk

    n = 6  # row v lists v+1: every walk from v is v+1, v+2, ... ; each of 4 steps visited 3 times
    indptr, indices = np.arange(n + 1), (np.arange(n) + 1) % n
    offsets, ids, counts = walk_topk(indptr, indices, walks=3, length=4, topk=10, seed=1)
    assert offsets.tolist() == list(range(0, 4 * n + 1, 4))
    assert ids[:4].tolist() == [1, 2, 3, 4] and counts.tolist() == [3] * (4 * n)
    offsets, ids, _ = walk_topk(indptr, indices, walks=3, length=4, topk=2, seed=1)
    assert ids[:2].tolist() == [1, 2]  # ties: smaller id first
    assert walk_topk(indptr, indices, 3, 4, 10, restart=1.0)[0].tolist() == [0] * (n + 1)


def test_random_walks_do_not_depend_on_thread_count(graph):
    import numba

    _, indptr, indices, _ = graph
    sel = RandomWalkSelect(10, 5, 4, restart=0.2)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = select(indptr, indices, sel, seed=2).roots[0]
    finally:
        numba.set_num_threads(before)
    many = select(indptr, indices, sel, seed=2).roots[0]
    np.testing.assert_array_equal(one.ids, many.ids)
    np.testing.assert_array_equal(one.weights, many.weights)
    other = select(indptr, indices, sel, seed=3).roots[0]
    assert not np.array_equal(one.ids, other.ids)


# -- SPEC parsing -----------------------------------------------------------------------------------------
def test_parse_select():
    assert parse_select("random-walk:walks=10,length=3,topk=5") == RandomWalkSelect(10, 3, 5)
    assert parse_select("random-walk:walks=10,length=3,topk=5,restart=0.5") == RandomWalkSelect(10, 3, 5, 0.5)
    assert parse_select("hop-shells:3") == HopShellsSelect(3)
    assert parse_select("hop-shells:3,cap=20") == HopShellsSelect(3, 20)
    assert parse_select("anchors:sets=8,size=4") == AnchorsSelect(8, 4)
    assert parse_select("anchors:sets=8,size=4,hops=3") == AnchorsSelect(8, 4, 3)


@pytest.mark.parametrize("spec, message", [
    ("random-walk:walks=10,length=3", "missing topk"),
    ("random-walk:walks=x,length=3,topk=5", "walks='x'; expected an integer ≥ 1"),
    ("random-walk:walks=10,length=3,topk=0", "topk='0'; expected an integer ≥ 1"),
    ("random-walk:walks=10,length=3,topk=5,restart=2", "restart='2'; expected a probability"),
    ("random-walk:walks=10,length=3,topk=5,bogus=1", "unknown key 'bogus'"),
    ("random-walk:walks", "is not key=value"),
    ("hop-shells:", "missing the number of shells"),
    ("hop-shells:-1", "K='-1'"),
    ("hop-shells:2,cap=0", "cap='0'"),
    ("anchors:sets=2", "missing size"),
    ("metapath:APA", "expected NAME=T1-T2-...-TL or cap=C"),
    ("metapath:APA=author", "expected at least two node types"),
    ("metapath:cap=3", "no metapath"),
    ("pagerank:3", "unknown selector 'pagerank'"),
])
def test_bad_specs(spec, message):
    with pytest.raises(GnnprepError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_select(spec)


# -- artifact and CLI -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["random-walk:walks=5,length=3,topk=4,restart=0.1", "hop-shells:2,cap=3",
                                  "anchors:sets=3,size=4"])
def test_cli_writes_an_hdg_that_reads_back(tmp_path, spec):
    g = _graph(tmp_path, "g", directed=False)
    out = tmp_path / "hdg.h5"
    r = run(["hdg", g, "--select", spec, "-o", out, "--seed", 4, "--json"])
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["output"] == str(out) and s["hdg_bytes"] > 0 and s["size_vs_graph_store"] > 0
    h, attrs = read_hdg(out)
    assert attrs["format"] == "gnnprep.hdg" and attrs["format_version"] == 1 and attrs["seed"] == 4
    from gnnprep.graph.store import GraphStore

    with GraphStore(g) as st:
        assert attrs["graph_fingerprint"] == st.fingerprint
        x = st.features[:].astype(np.float64)
        ref = select(st.indptr(), st.indices(), parse_select(spec), seed=4)
    for k, v in aggregate(ref, x).items():
        np.testing.assert_allclose(aggregate(h, x)[k], v, rtol=1e-6)
    assert not list(tmp_path.glob("hdg.h5.tmp-*"))
    info = json.loads(run(["info", out, "--json"]).stdout)
    assert info["format"] == "gnnprep.hdg" and info["selector"] == spec.split(":")[0]
    assert [lv["level"] for lv in info["levels"]] == [lv.name for lv in h.levels()]
    assert info["hdg_bytes"] == s["hdg_bytes"] == sum(lv["bytes"] for lv in info["levels"])
    assert info["levels"][-1]["instances"] == len(h.levels()[-1].ids)
    assert info["size_vs_graph_store"] == round(s["hdg_bytes"] / s["graph_store_bytes"], 4)
    if spec.startswith("hop-shells") or spec.startswith("anchors"):
        assert "offsets" not in info["levels"][0]["arrays"]  # fixed fanout: offsets implied
    assert run(["info", out]).exit_code == 0


def test_cli_errors_are_one_line(tmp_path):
    g = _graph(tmp_path, "g", directed=True)
    for spec, msg, code in [("hop-shells:x", "K='x'", 2),  # a bad option value: usage error
                            ("metapath:APA=a-b-a", "needs a heterogeneous graph store", 1),
                            ("anchors:sets=2,size=1000", "size=1000 exceeds", 1)]:
        r = run(["hdg", g, "--select", spec, "-o", tmp_path / "h.h5"])
        assert r.exit_code == code and r.stderr.startswith("Error: ") and msg in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "h.h5").exists()


@pytest.mark.parametrize("paths", [200, 256, 512])
def test_anchor_distances_count_many_paths_exactly(paths):
    """A node reached from hundreds of frontier nodes at once keeps its distance: anchor 0 → nodes
    1..paths → node paths + 1 (the path counts once summed in int8, where 256 paths wrapped to 0 and
    the node was dropped from its shell)."""
    from gnnprep.hdg.select import _anchor_distances

    n = paths + 2
    mids = np.arange(1, paths + 1)
    rows = [[]] + [[0] for _ in mids] + [list(mids)]   # in-lists: mids read 0, the last node reads every mid
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
    dist = _anchor_distances(indptr, indices, np.array([0]), hops=2).toarray()[:, 0]
    assert dist[0] == 1 and (dist[mids] == 2).all() and dist[n - 1] == 3   # d + 1
