"""Shared test helpers: a dense/scipy reference for what a graph store must hold."""

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


def run_json(args):
    r = run(list(args) + ["--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def build_artifacts(tmp, n, m, d, seed, hag_capacity, specs, hops, mag=None):
    """One of each artifact in ``tmp``: g.h5 (random edges, features, labels, three splits), hag.h5,
    an HDG per (name, spec), mag.h5 (ogbn-mag layout, ``mag`` are make_mag_like's sizes) and
    f.h5 (features, ``hops`` hops)."""
    import numpy as np

    from gnnprep import hag as hags
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import parse_select, select, select_spec
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.precompute.run import precompute
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.graph.sources import SourceOptions
    from ogb_layouts import make_mag_like

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
    hags.build(indptr, indices, tmp / "hag.h5", graph_fingerprint=fp, input_path=str(tmp / "g.h5"),
               capacity=hag_capacity)
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
    from gnnprep.precompute.run import precompute
    from gnnprep.precompute.config import PrecomputeConfig

    original = ResumableOutput.mark

    def mark(self, unit, h5file=None):
        original(self, unit, h5file)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResumableOutput, "mark", mark)
    with pytest.raises(KeyboardInterrupt):
        precompute(graph, out, PrecomputeConfig(**config))
    monkeypatch.setattr(ResumableOutput, "mark", original)
    assert not out.exists() and out.with_name(out.name + ".partial").exists()


def torchrun(args, env=None, popen=False):
    """``torchrun --standalone --nproc-per-node 2 -m gnnprep ARGS`` (torchrun's own module, which
    every torch install has), one thread per rank; a finished CompletedProcess, or the Popen."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "gnnprep", *map(str, args)]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(env or {})}
    if popen:
        return subprocess.Popen(cmd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=180)
