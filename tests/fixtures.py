"""The test suite's shared helpers, in one place (``tests/`` is on ``sys.path``: ``from fixtures import ...``).

- graph stores: the dense/scipy reference for what a store must hold, random edges, ``make_store``;
- the CLI: ``run`` / ``run_json``;
- artifacts: ``build_artifacts`` (one of each), ``write_features`` (a features file written directly);
- precompute: the float64 reference ``reference_hops``, ``assert_close``, ``interrupted_precompute``;
- node orders: ``planted`` (a graph of planted communities);
- HDG: the naive aggregation reference ``naive_aggregate``;
- ``torchrun`` (two ranks).

Test files import from here and from ``ogb_layouts`` (the OGB folder builders), never from each other.
"""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp
from click.testing import CliRunner


def reference_csr(src, dst, n, symmetric=True):
    """Row v lists the sources v aggregates from; binarised, no self-loops, sorted (scipy)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    a = sp.coo_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)).tocsr()
    if symmetric:
        a = a + a.T
    a = a.tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.data[:] = 1
    a.sort_indices()
    return a


def store_csr(path):
    from gnnprep.graph.store import GraphStore

    with GraphStore(path) as g:
        return g.csr()


def assert_same_graph(path, ref):
    got = store_csr(path)
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)


def random_edges(rng, n, m, self_loops=5, duplicates=20, isolated=3):
    """Random directed edges with self-loops, duplicates, and the last `isolated` nodes unused."""
    hi = n - isolated
    src = rng.integers(0, hi, m)
    dst = rng.integers(0, hi, m)
    src[:self_loops] = dst[:self_loops]
    dup = rng.integers(0, m, duplicates)
    return np.concatenate([src, src[dup]]), np.concatenate([dst, dst[dup]])


def run(args, **kw):
    from gnnprep.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


def assert_one_error(r, code, pattern):
    """A CLI result that failed the command contract's way: exit ``code``, nothing on stdout, no
    traceback, exactly one stderr line, an ``Error:`` line matching ``pattern``."""
    import re

    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert re.search(pattern, errors[0]), errors[0]


def weigh_store(path):
    """Symmetric positive weights on an ingested store (``/adj/weights``, a function of the pair)."""
    import h5py

    with h5py.File(path, "r+") as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:].astype(np.int64)
        dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        lo, hi = np.minimum(dst, indices), np.maximum(dst, indices)
        f.create_dataset("adj/weights", data=(0.25 + ((lo * 7919 + hi * 104729) % 17) / 4.0).astype(np.float32))


def make_artifacts(folder, store) -> dict:
    """One artifact of each kind built from ``store`` by the CLI, in ``folder``: {kind: path}, the
    store itself as "graph"."""
    made = {"graph": store}
    for kind, args in {"hag": ["hag", str(store)], "hdg": ["hdg", str(store), "--select", "hop-shells:2"],
                       "features": ["precompute", str(store), "--hops", "1", "--device", "cpu"]}.items():
        out = folder / f"{kind}.h5"
        r = run(args + ["-o", str(out)])
        assert r.exit_code == 0, r.stderr
        made[kind] = out
    return made


def run_json(args):
    r = run(list(args) + ["--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def build_artifacts(tmp, n, m, d, seed, hag_capacity, specs, hops, mag=None):
    """One of each artifact in ``tmp``: g.h5 (random edges, features, labels, three splits), hag.h5,
    an HDG per (name, spec), mag.h5 (ogbn-mag layout, ``mag`` are make_mag_like's sizes) and
    f.h5 (features, ``hops`` hops)."""
    import numpy as np
    from ogb_layouts import make_mag_like

    from gnnprep import hag as hags
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import parse_select, select, select_spec
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    rng = np.random.default_rng(seed)
    src, dst = random_edges(rng, n, m)
    np.save(tmp / "e.npy", np.stack([src, dst]))
    np.save(tmp / "x.npy", rng.standard_normal((n, d)).astype(np.float32))
    np.save(tmp / "y.npy", rng.integers(0, 3, n))
    (tmp / "splits").mkdir()
    for name, ids in (("train", np.arange(0, n, 3)), ("valid", np.arange(1, n, 3)), ("test", np.arange(2, n, 3))):
        np.save(tmp / "splits" / f"{name}.npy", ids)
    opts = SourceOptions(num_nodes=n, features=str(tmp / "x.npy"), labels=str(tmp / "y.npy"), splits=str(tmp / "splits"))
    ingest(str(tmp / "e.npy"), tmp / "g.h5", IngestConfig(source=opts))
    from gnnprep.graph.store import GraphStore

    with GraphStore(tmp / "g.h5") as g:
        indptr, indices, fp = g.indptr(), g.indices(), g.fingerprint
    hags.build(tmp / "g.h5", tmp / "hag.h5", hags.HagConfig(capacity=hag_capacity))
    for name, spec in specs:
        sel = parse_select(spec)
        write_hdg(select(indptr, indices, sel, seed=1), tmp / f"{name}.h5", {"command": "test"}, sel.name,
                  select_spec(sel), 1, fp, 0, 0)
    ingest(str(make_mag_like(tmp / "data", **(mag or {})).path), tmp / "mag.h5", IngestConfig())
    precompute(tmp / "g.h5", tmp / "f.h5", PrecomputeConfig(hops=hops, device="cpu"))


def interrupted_precompute(monkeypatch, graph, out, **config):
    """A precompute stopped (as by Ctrl-C) right after its first finished unit; its partial output
    is left for a rerun to resume."""
    import pytest

    from gnnprep.core.output import ResumableOutput
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    original = ResumableOutput.mark

    def mark(self, unit, h5file=None):
        original(self, unit, h5file)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResumableOutput, "mark", mark)
    with pytest.raises(KeyboardInterrupt):
        precompute(graph, out, PrecomputeConfig(**config))
    monkeypatch.setattr(ResumableOutput, "mark", original)
    assert not out.exists() and out.with_name(out.name + ".partial").exists()


_TORCHRUN_TMP: list[str] = []


def torchrun_tmpdir() -> str:
    """The TMPDIR of the suite's torchrun jobs: one folder for the session, removed at its end.
    torchrun's elastic agent makes a ``torchelastic_*`` folder in the temporary folder for every job
    and leaves it (some 60 a suite run in /tmp otherwise)."""
    import atexit
    import shutil
    import tempfile

    if not _TORCHRUN_TMP:
        _TORCHRUN_TMP.append(tempfile.mkdtemp(prefix="gnnprep-test-torchrun-"))
        atexit.register(shutil.rmtree, _TORCHRUN_TMP[0], ignore_errors=True)
    return _TORCHRUN_TMP[0]


def torchrun(args, env=None, popen=False):
    """``torchrun --standalone --nproc-per-node 2 -m gnnprep ARGS`` (torchrun's own module, which
    every torch install has), one thread per rank, temporary files in :func:`torchrun_tmpdir`; a
    finished CompletedProcess, or the Popen."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "gnnprep", *map(str, args)]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "TMPDIR": torchrun_tmpdir(),
               **(env or {})}
    if popen:
        return subprocess.Popen(cmd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=180)


# -- graph stores, features, references ------------------------------------------------------------
def make_store(tmp_path, rng, n=90, m=400, d=7, directed=False, splits=True, name="g.h5"):
    """A graph store ``name`` in ``tmp_path`` from random edges (self-loops, duplicates, 4 isolated
    nodes), float32 features, labels in 0..2 and (``splits``) disjoint train/test splits; returns
    (path, src, dst, x)."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    src, dst = random_edges(rng, n, m, self_loops=4, duplicates=15, isolated=4)
    np.save(tmp_path / "e.npy", np.stack([src, dst]))
    x = rng.standard_normal((n, d)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", rng.integers(0, 3, n))
    opts = dict(num_nodes=n, features=str(tmp_path / "x.npy"), labels=str(tmp_path / "y.npy"))
    if splits:
        (tmp_path / "splits").mkdir(exist_ok=True)
        np.save(tmp_path / "splits" / "train.npy", np.arange(0, n, 3))
        test = np.arange(1, n, 7)
        np.save(tmp_path / "splits" / "test.npy", test[test % 3 != 0])  # disjoint from train
        opts["splits"] = str(tmp_path / "splits")
    ingest(str(tmp_path / "e.npy"), tmp_path / name, IngestConfig(directed=directed, source=SourceOptions(**opts)))
    return tmp_path / name, src, dst, x


def feature_hops(path, hops=3):
    """Hops 0..K of the features artifact at ``path``, as arrays."""
    from gnnprep.precompute.features import FeatureStore

    with FeatureStore(path) as f:
        return [f.hop(k)[:] for k in range(hops + 1)]


def store_with_order(tmp_path, rng, n=300, m=2500, d=9):
    """:func:`make_store` with a community order kept beside it (any permutation will do: a HAG run
    relabels to it); returns the store's path."""
    from gnnprep.graph import order as kept_order
    from gnnprep.graph.store import GraphStore

    path, *_ = make_store(tmp_path, rng, n=n, m=m, d=d)
    with GraphStore(path) as g:
        assert kept_order.save_cached(path, "community", g.fingerprint, rng.permutation(n),
                                      {"near_share_before": 0.1, "near_share_after": 0.9, "seconds": 0.0})
    return path


def reference_hops(src, dst, x, n, op_name, hops, directed=False):
    """S^k X in float64 from a dense construction straight from the definition."""
    a = np.zeros((n, n))
    a[dst, src] = 1.0
    if not directed:
        a = np.maximum(a, a.T)
    np.fill_diagonal(a, 0.0)
    deg = a.sum(1)
    if op_name == "sym":
        dt = deg + 1
        s = (a + np.eye(n)) / np.sqrt(dt)[:, None] / np.sqrt(dt)[None, :]
    elif op_name == "rw":
        s = (a + np.eye(n)) / (deg + 1)[:, None]
    else:
        inv = np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0.0)
        s = inv[:, None] * a * inv[None, :]
    out = [x.astype(np.float64)]
    for _ in range(hops):
        out.append(s @ out[-1])
    return out


def assert_close(got, ref, rtol=1e-5):
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, np.abs(ref).max()))


def write_features(path, rng, n=48, d=24, K=3, classes=3, labels=True, splits=True, operators=("sym",),
                   chunk_rows=None, provenance=None, dtype=np.float32):
    """A features artifact in the contract's layout, written directly: hop k = hop k-1 smoothed by a
    random row-stochastic matrix, so hops differ but stay informative."""
    import h5py

    from gnnprep.core.artifact import write_root_attrs

    x = rng.standard_normal((n, d))
    y = rng.integers(0, classes, n)
    x[np.arange(n), y] += 2.0                      # learnable, not trivially
    s = rng.random((n, n)) * (rng.random((n, n)) < 0.1) + np.eye(n)
    s /= s.sum(1, keepdims=True)
    with h5py.File(path, "w") as f:
        f["rows"] = np.arange(n, dtype=np.int64)
        hops = [x]
        for _ in range(K):
            hops.append(s @ hops[-1])
        chunks = (chunk_rows, d) if chunk_rows else None
        for op_i, op in enumerate(operators):
            for k in range(K + 1):
                data = hops[k] if op_i == 0 or k == 0 else hops[k] * (1 + op_i)
                f.create_dataset(f"channels/{op}/{k}", data=data.astype(dtype), chunks=chunks)
        for k in range(K + 1):
            f[f"hops/{k}"] = f[f"channels/{operators[0]}/{k}"]
        if labels:
            f["labels"] = y.astype(np.int64)
        if splits:
            perm = rng.permutation(n)
            a, b = n // 2, 3 * n // 4
            for name, ids in (("train", perm[:a]), ("valid", perm[a:b]), ("test", perm[b:])):
                f[f"splits/{name}"] = np.sort(ids)
        write_root_attrs(f, "gnnprep.features", 1, provenance or {"command": "test"}, hops=K, operator=operators[0],
                         operators=json.dumps(list(operators)), graph_fingerprint="g0", num_classes=classes,
                         rows="all")
    return path


def planted(rng, groups=4, size=40, p_in=0.3, cross=6):
    """Symmetric CSR of ``groups`` dense random groups joined by a few edges, ids permuted."""
    n = groups * size
    blocks = [sp.random(size, size, density=p_in, random_state=int(rng.integers(1 << 30))) for _ in range(groups)]
    a = sp.block_diag(blocks).tolil()
    for _ in range(cross):
        u, v = rng.integers(0, n, 2)
        a[u, v] = 1
    a = a.tocsr()
    a = ((a + a.T) > 0).astype(np.float32)
    a.setdiag(0)
    a.eliminate_zeros()
    perm = rng.permutation(n)
    a = a[perm][:, perm].tocsr()
    a.sort_indices()
    group = (np.arange(n) // size)[perm]  # group of each (permuted) node
    return a.indptr.astype(np.int64), a.indices.astype(np.int32), group


# -- HDG: the naive aggregation reference ----------------------------------------------------------
def _children(lvl, p):
    if lvl.fanout:
        return list(range(p * lvl.fanout, (p + 1) * lvl.fanout))
    return list(range(int(lvl.offsets[p]), int(lvl.offsets[p + 1])))


def _naive_instance(lvl, p, x, reduce):
    """The features of instance p of ``lvl``: materialise every member's row, reduce in a loop."""
    d = x.shape[1]
    if lvl.kind == "vertices":
        rows = []
        for c in _children(lvl, p):
            w = 1.0 if lvl.weights is None else float(lvl.weights[c])
            rows.append((w, x[int(lvl.ids[c])]))
        acc = np.zeros(d)
        for w, row in rows:
            acc = acc + w * row
        total = sum(w for w, _ in rows)
        return acc / total if reduce == "mean" and total != 0 else acc
    return [_naive_instance(lvl.child, c, x, reduce) for c in _children(lvl, p)]


def naive_aggregate(h, x, reduce):
    """Every root channel of HDG ``h`` over features ``x`` (``reduce`` "mean" or "sum"), from the
    per-instance loops above: {channel name: (num_nodes, d) array}."""
    out = {}
    for r in h.roots:
        for v in range(h.num_nodes):
            got = _naive_instance(r, v, x, reduce)
            if r.kind == "vertices":
                out.setdefault(r.name, []).append(got)
            elif r.combine == "slots":
                for name, inst in zip(r.slots, got):
                    out.setdefault(name, []).append(inst)
            else:
                acc = np.zeros(x.shape[1])
                for inst in got:
                    acc = acc + inst
                out.setdefault(r.name, []).append(acc / max(1, len(got)) if reduce == "mean" else acc)
    return {k: np.array(v) for k, v in out.items()}


def clique_store(folder, seed, nodes: int, cliques: int, d: int, size: int = 7, among: int | None = None,
                 name: str = "g.h5"):
    """A graph store ``folder/name`` of ``cliques`` overlapping ``size``-cliques drawn among the first
    ``among`` (default: all) of ``nodes`` nodes, with ``d`` random features: redundancy for a HAG.
    ``seed``: an int or a numpy Generator (drawn from)."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    rng = np.random.default_rng(seed)
    groups = [rng.choice(among or nodes, size, replace=False) for _ in range(cliques)]
    src = np.concatenate([np.repeat(g, len(g)) for g in groups])
    dst = np.concatenate([np.tile(g, len(g)) for g in groups])
    np.save(folder / "e.npy", np.stack([src, dst]))
    np.save(folder / "x.npy", rng.standard_normal((nodes, d)).astype(np.float32))
    ingest(str(folder / "e.npy"), folder / name,
           IngestConfig(source=SourceOptions(num_nodes=nodes, features=str(folder / "x.npy"))))
    return folder / name


def handmade_hdg(rng, n):
    """An HDG of two reduce channels: a variable-fanout reduce level over a weighted vertex level
    (empty parents, empty instances, negative weights and an instance whose weights sum to 0), and a
    fixed-fanout reduce level over a fixed-fanout vertex level."""
    from gnnprep.hdg.structure import Hdg, Level

    cnt = rng.integers(0, 4, n)
    cnt[:3] = 0
    off = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64)
    mem = rng.integers(0, 5, off[-1])
    mem[::4] = 0
    moff = np.concatenate([[0], np.cumsum(mem)]).astype(np.int64)
    weights = rng.uniform(-1, 2, moff[-1]).astype(np.float32)
    two = np.flatnonzero(mem == 2)
    if len(two):   # an instance of weights 1 and -1: its mean divides by 1, as a vertex level's does
        weights[moff[two[0]]:moff[two[0]] + 2] = (1.0, -1.0)
    leaf = Level("var_members", "vertices", int(off[-1]), offsets=moff, ids=rng.integers(0, n, moff[-1]),
                 weights=weights)
    var = Level("var", "instances", n, offsets=off, combine="reduce", child=leaf)
    leaf2 = Level("fix_members", "vertices", n * 3, fanout=2, ids=rng.integers(0, n, n * 6))
    fix = Level("fix", "instances", n, fanout=3, combine="reduce", child=leaf2)
    return Hdg(n, (var, fix))


def interrupted_slowly(mp, unit=("sym", 0, 2)):
    """Patch (with ``mp``, a monkeypatch or its context) a precompute to stop with Ctrl-C once ``unit``
    is marked finished, every hop it works on until then taking at least a second more (so its hop
    seconds, kept for the resumed run, are told apart from a rerun's)."""
    from gnnprep.core.output import ResumableOutput
    from gnnprep.precompute.hop_loop import HopRun

    mark, spent = ResumableOutput.mark, HopRun._spent

    def mark_then_stop(self, done, h5file=None):
        mark(self, done, h5file)
        if tuple(done) == tuple(unit):
            raise KeyboardInterrupt

    def slow(self, k, t0, r0):
        spent(self, k, t0, r0)
        self.hop_seconds[k] += 1.0

    mp.setattr(ResumableOutput, "mark", mark_then_stop)
    mp.setattr(HopRun, "_spent", slow)
