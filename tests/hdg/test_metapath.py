"""metapath: selection on the ogbn-mag-layout fixture equals a plain-Python enumeration, and
precompute writes one channel per metapath."""

import json
from itertools import product

import numpy as np
import pytest
from fixtures import naive_aggregate, run
from ogb_layouts import make_mag_like

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.store import GraphStore
from gnnprep.hdg.select import MetapathSelect, parse_select, select
from gnnprep.hdg.structure import aggregate


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mag")
    truth = make_mag_like(tmp / "data")
    out = tmp / "mag.h5"
    ingest(str(truth.path), out, IngestConfig())
    with GraphStore(out) as g:
        return out, g.indptr(), g.indices(), g.f["nodes/type"][:].astype(np.int64), g.node_types(), \
            g.features[:].astype(np.float64)


def naive_instances(indptr, indices, node_type, names, types):
    """Every path v ← u2 ← … ← uL with the given types, by explicit loops."""
    code = [names.index(t) for t in types]
    out = []
    for v in range(len(indptr) - 1):
        if node_type[v] != code[0]:
            continue
        paths = [[v]]
        for c in code[1:]:
            paths = [p + [int(u)] for p in paths for u in indices[indptr[p[-1]]:indptr[p[-1] + 1]] if node_type[u] == c]
        out += [tuple(p) for p in paths]
    return sorted(out)


@pytest.mark.parametrize("spec", ["metapath:PAP=paper-author-paper", "metapath:PFP=paper-field_of_study-paper,"
                                  "AIA=author-institution-author", "metapath:APPA=author-paper-paper-author"])
def test_metapath_instances_and_aggregation_equal_loops(mag, spec):
    path, indptr, indices, node_type, names, x = mag
    sel = parse_select(spec)
    h = select(indptr, indices, sel, node_type=node_type, type_names=names)
    for (name, types), root in zip(sel.paths, h.roots):
        got = sorted(map(tuple, root.child.ids.reshape(-1, len(types)).tolist()))
        assert got == naive_instances(indptr, indices, node_type, names, types)
        assert root.name == name
    want = naive_aggregate(h, x, "mean")
    for ch, arr in aggregate(h, x, "mean").items():
        np.testing.assert_allclose(arr, want[ch], rtol=1e-12, atol=1e-12)


def test_metapath_cap_keeps_a_reproducible_subset(mag):
    path, indptr, indices, node_type, names, x = mag
    full = select(indptr, indices, parse_select("metapath:PAP=paper-author-paper"), node_type=node_type,
                  type_names=names).roots[0]
    capped = [select(indptr, indices, MetapathSelect((("PAP", ("paper", "author", "paper")),), cap=2), seed=s,
                     node_type=node_type, type_names=names).roots[0] for s in (1, 1, 2)]
    counts = np.diff(capped[0].offsets)
    assert counts.max() <= 2 and (counts == np.minimum(np.diff(full.offsets), 2)).all()
    all_paths = set(map(tuple, full.child.ids.reshape(-1, 3).tolist()))
    assert set(map(tuple, capped[0].child.ids.reshape(-1, 3).tolist())) <= all_paths
    np.testing.assert_array_equal(capped[0].child.ids, capped[1].child.ids)  # same seed, same sample


def test_metapath_errors(mag, tmp_path):
    path, indptr, indices, node_type, names, x = mag
    with pytest.raises(GnnprepError, match="node type 'venue'"):
        select(indptr, indices, parse_select("metapath:PV=paper-venue"), node_type=node_type, type_names=names)


def test_precompute_writes_one_channel_per_metapath(mag, tmp_path):
    path = mag[0]
    r = run(["hdg", path, "--select", "metapath:PAP=paper-author-paper,PFP=paper-field_of_study-paper,cap=20",
             "-o", tmp_path / "h.h5", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["channels"] == ["PAP", "PFP"]
    r = run(["precompute", path, "--hops", "1", "--hdg", tmp_path / "h.h5", "-o", tmp_path / "f.h5", "--json"])
    assert r.exit_code == 0, r.stderr
    import h5py

    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert json.loads(f.attrs["hdg_channels"]) == ["PAP", "PFP"]
        for ch, k in product(["PAP", "PFP"], [0, 1]):
            assert f[f"channels/{ch}/{k}"].shape == f["hops/0"].shape


def test_heterogeneous_sample_metapath_recovers_coauthorship(tmp_path):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "sample_data" / "hetero"
    assert run(["ingest", sample, "-o", tmp_path / "h.h5"]).exit_code == 0
    r = run(["hdg", tmp_path / "h.h5", "--select", "metapath:APA=author-paper-author", "-o", tmp_path / "apa.h5"])
    assert r.exit_code == 0, r.stderr
    assert run(["ingest", "sample", "-o", tmp_path / "s.h5"]).exit_code == 0
    with GraphStore(tmp_path / "h.h5") as g:
        assert g.node_types() == ["author", "paper"]
        n_auth = int((g.f["nodes/type"][:] == 0).sum())
    from gnnprep.hdg.file import read_hdg

    h, _ = read_hdg(tmp_path / "apa.h5")
    paths = h.roots[0].child.ids.reshape(-1, 3)
    coauthor = {(int(a), int(c)) for a, _, c in paths if a != c}
    with GraphStore(tmp_path / "s.h5") as g:
        ip, ind = g.indptr(), g.indices()
    want = {(v, int(u)) for v in range(n_auth) for u in ind[ip[v]:ip[v + 1]]}
    assert coauthor == want  # authors are ids 0..n_auth-1 in both stores (types in sorted order)


def test_metapath_dry_run_is_refused_as_the_run_is(tmp_path, rng):
    """--dry-run on a store without typed nodes (or with a type it lacks) exits as the run does."""
    from fixtures import make_store

    untyped, *_ = make_store(tmp_path, rng)
    codes = []
    for extra in ([], ["--dry-run"]):
        r = run(["hdg", untyped, "--select", "metapath:PAP=paper-author-paper", "-o", tmp_path / "h.h5", *extra])
        assert "needs a heterogeneous graph store" in r.stderr and r.stdout == "", (extra, r.stderr)
        assert not (tmp_path / "h.h5").exists()
        codes.append(r.exit_code)
    assert codes[0] == codes[1] != 0
