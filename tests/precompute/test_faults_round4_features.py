"""Issue 32, line 10 (precompute's part): a graph store of under 1 MiB that declares a huge feature
matrix it never wrote (HDF5 reads unwritten chunks as zeros) is refused at once with one line, and the
planner's search stays cheap for any declared width. Each case: exit 1, one ``Error:`` line naming the
file and dataset, no traceback, nothing written, within seconds."""

import time

import h5py
import pytest
from fixtures import make_store, run

CASES = {
    # name: (shape of the replaced /nodes/features, chunks or None, data written to part of it)
    "chunked, nothing written": ((None, 10**8), (16, 1 << 14), None),
    "chunked, one chunk written": ((None, 10**6), (16, 1 << 12), (slice(0, 16), slice(0, 1 << 12))),
    "contiguous, never allocated": ((None, 10**5), None, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_store_declaring_unwritten_features_is_refused_at_once(tmp_path, rng, case):
    shape, chunks, written = CASES[case]
    g, *_ = make_store(tmp_path, rng, n=40, m=120, d=3)
    with h5py.File(g, "r+") as f:
        n = f["nodes/features"].shape[0]
        del f["nodes/features"]
        ds = f.create_dataset("nodes/features", shape=(n, shape[1]), dtype="f4", chunks=chunks)
        if written is not None:
            ds[written] = 1.0
    assert g.stat().st_size < 1 << 20
    before = sorted(p.name for p in tmp_path.iterdir())
    t0 = time.perf_counter()
    for extra in ([], ["--dry-run"]):
        r = run(["precompute", g, "--hops", "2", "-o", tmp_path / "f.h5", *extra])
        assert r.exit_code == 1, r.output
        assert r.stdout == "" and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and "/nodes/features" in lines[0] and str(g) in lines[0]
    assert time.perf_counter() - t0 < 10
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_planner_is_cheap_for_a_million_columns():
    from gnnprep.precompute.plan import Problem, choose_plan
    from gnnprep.precompute.profile import Profile

    t0 = time.perf_counter()
    plan = choose_plan(Problem(num_nodes=1000, num_entries=5000, num_features=10**6, hops=3), 1 << 30, Profile())
    assert time.perf_counter() - t0 < 5
    assert plan.c * plan.width >= 10**6


def test_the_widths_shortcut_predicts_what_the_list_does(monkeypatch):
    """Above LISTED_BLOCKS column blocks the kernel term is counted per distinct width; it equals
    the sum over the listed widths (to float rounding)."""
    from gnnprep.precompute import plan
    from gnnprep.precompute.profile import Profile

    p = plan.Problem(num_nodes=500, num_entries=3000, num_features=9001, hops=2)
    for c in (9001, 4501, 3001):
        got = plan.predict_seconds(p, Profile(), 1, c)
        monkeypatch.setattr(plan, "LISTED_BLOCKS", 10**9)
        listed = plan.predict_seconds(p, Profile(), 1, c)
        monkeypatch.undo()
        assert got == pytest.approx(listed, rel=1e-9), c
