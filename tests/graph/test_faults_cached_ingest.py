"""A cached ingest is advisory (issue 23, item 7): a dataset spec's cached graph store whose
provenance was tampered with (not JSON, another type, deep nesting, odd inputs) is not trusted and
not fatal: the next command ingests again and succeeds."""

import json

import h5py
import numpy as np
import pytest
from fixtures import run

from gnnprep.graph.ingest import cached_store_path
from gnnprep.graph.sources import SourceOptions

TAMPERED = {
    "not-json": "{{{",
    "a-list": json.dumps([1, 2]),
    "a-number": "3",
    "inputs-a-string": json.dumps({"inputs": "x"}),
    "inputs-empty": json.dumps({"inputs": []}),
    "input-path-a-number": json.dumps({"inputs": [{"path": 1, "fingerprint": "f"}]}),
    "input-without-fingerprint": json.dumps({"inputs": [{"path": "/etc/hostname"}]}),
    "deep-nesting": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.parametrize("how", sorted(TAMPERED))
def test_a_tampered_cached_ingest_is_rebuilt(tmp_path, rng, how):
    edges = tmp_path / "e.npy"
    np.save(edges, rng.integers(0, 50, (2, 200)))
    out = tmp_path / "out"
    out.mkdir()
    r = run(["hag", str(edges), "-o", str(out / "a.h5")])
    assert r.exit_code == 0, r.stderr
    cached = cached_store_path(str(edges), SourceOptions(), None)
    assert cached.exists()
    with h5py.File(cached, "a") as f:
        f.attrs["provenance"] = TAMPERED[how]
    r = run(["hag", str(edges), "-o", str(out / "b.h5")])
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr
    with h5py.File(cached, "r") as f:               # ingested again: a fresh provenance
        assert json.loads(f.attrs["provenance"])["inputs"][0]["path"] == str(edges.absolute())
