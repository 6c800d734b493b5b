"""The HAG relabelled to a run's node order and kept beside it (gnnprep.hag.ordered_copy): written by
`gnnprep hag` (and by a run that relabels), read by the runs after it; hops through it equal the plain
hops, and a damaged, edited or stale copy costs time, never results."""

import os

import h5py
import numpy as np
import pytest
from fixtures import feature_hops, make_store, run, store_with_order

from gnnprep.core.errors import OptionError
from gnnprep.graph import order as kept_order
from gnnprep.graph.store import GraphStore
from gnnprep.hag import ordered_copy
from gnnprep.hag.cover_check import check_covers
from gnnprep.hag.file import read_hag
from gnnprep.hag.order import in_order
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute

KEPT = "kept beside it"


def _store_with_order(tmp_path, seed=11, n=300, m=2500, d=9):
    """A store with a community order kept beside it (any permutation will do) and its HAG."""
    return store_with_order(tmp_path, np.random.default_rng(seed), n=n, m=m, d=d)


def _same_as_plain(tmp_path, path, got):
    plain = tmp_path / "plain.h5"
    if not plain.exists():
        precompute(path, plain, PrecomputeConfig(hops=3, device="cpu", reorder="none"))
    for ref, h in zip(feature_hops(plain), feature_hops(got)):
        np.testing.assert_allclose(h, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def _through(path, hag, out, reorder="auto", **kw):
    return precompute(path, out, PrecomputeConfig(hops=3, device="cpu", reorder=reorder, hag=str(hag), **kw))


def test_gnnprep_hag_keeps_the_hag_in_the_default_order_and_runs_read_it(tmp_path):
    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    assert kept.is_file()
    r = _through(path, hag, tmp_path / "a.h5")
    assert r.hag["used"] and KEPT in r.decisions["order"], r.decisions["order"]
    _same_as_plain(tmp_path, path, tmp_path / "a.h5")
    # relabelled here instead: the same bytes as through the kept copy
    kept.unlink()
    r = _through(path, hag, tmp_path / "b.h5")
    assert "relabelled to it in" in r.decisions["order"] and kept.is_file()   # and kept again
    for a, b in zip(feature_hops(tmp_path / "a.h5"), feature_hops(tmp_path / "b.h5")):
        assert a.tobytes() == b.tobytes()


def test_the_stored_order_is_kept_too(tmp_path):
    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    r = _through(path, hag, tmp_path / "a.h5", reorder="none")
    assert r.decisions["order"].startswith("not used") and ordered_copy.copy_path(hag, "stored").is_file()
    r = _through(path, hag, tmp_path / "b.h5", reorder="none")
    assert KEPT in r.decisions["order"]
    for a, b in zip(feature_hops(tmp_path / "a.h5"), feature_hops(tmp_path / "b.h5")):
        assert a.tobytes() == b.tobytes()
    _same_as_plain(tmp_path, path, tmp_path / "b.h5")


def _edit(kept, how):
    if how == "garbage":
        kept.write_bytes(b"not an HDF5 file at all" * 10)
        return
    if how == "truncated":
        data = kept.read_bytes()
        st = os.stat(kept)
        kept.write_bytes(data[: len(data) // 2])
        os.utime(kept, ns=(st.st_atime_ns, st.st_mtime_ns))
        return
    with h5py.File(kept, "r+") as f:
        if how == "swapped":   # two in-list entries of different rows exchanged: every id in range
            ip, idx = f["adj/indptr"][:], f["adj/indices"][:]
            a, b = int(ip[1]), int(ip[2])   # first entries of rows 1 and 2 (non-empty in these graphs)
            assert ip[2] > ip[1] and ip[3] > ip[2] and idx[a] != idx[b]
            idx[a], idx[b] = idx[b], idx[a]
            f["adj/indices"][:] = idx
        elif how == "out_of_range":
            idx = f["adj/indices"][:]
            idx[0] = 10**6
            f["adj/indices"][:] = idx
        elif how == "missing":
            del f["agg/inputs"]


@pytest.mark.parametrize("how", ["swapped", "out_of_range", "missing", "garbage", "truncated"])
def test_a_damaged_copy_is_said_ignored_and_replaced(tmp_path, how):
    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    _edit(kept, how)
    said = []
    r = precompute(path, tmp_path / "a.h5", PrecomputeConfig(hops=3, device="cpu", hag=str(hag)),
                   warn=said.append)
    assert "relabelled to it in" in r.decisions["order"]
    assert len(said) == 1 and str(kept) in said[0] and "relabelled again" in said[0], said
    _same_as_plain(tmp_path, path, tmp_path / "a.h5")
    r = _through(path, hag, tmp_path / "b.h5")    # replaced: the next run reads it
    assert KEPT in r.decisions["order"]


def test_a_stale_copy_is_ignored_silently(tmp_path):
    """A new search written over the HAG, or another node order: the copy is not for it."""
    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    old = kept.read_bytes()
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "5"]).exit_code == 0   # a new HAG, rewritten
    kept.write_bytes(old)                               # (the build kept its own: the old one put back)
    said = []
    r = precompute(path, tmp_path / "a.h5", PrecomputeConfig(hops=3, device="cpu", hag=str(hag)), warn=said.append)
    assert "relabelled to it in" in r.decisions["order"] and not said
    _same_as_plain(tmp_path, path, tmp_path / "a.h5")
    with GraphStore(path) as g:   # another order
        n = g.num_nodes
        assert kept_order.save_cached(path, "community", g.fingerprint, np.random.default_rng(5).permutation(n),
                                      {"near_share_before": 0.1, "near_share_after": 0.9, "seconds": 0.0})
    r = precompute(path, tmp_path / "b.h5", PrecomputeConfig(hops=3, device="cpu", hag=str(hag)), warn=said.append)
    assert "relabelled to it in" in r.decisions["order"] and not said
    _same_as_plain(tmp_path, path, tmp_path / "b.h5")


def test_a_folder_where_no_copy_can_be_written_runs_without_keeping(tmp_path, monkeypatch):
    from gnnprep.core import output

    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    kept = ordered_copy.copy_path(hag, "community")
    kept.unlink()
    real = output.atomic_output

    def refuse(target, inputs=()):
        if str(target).endswith(".order-community.h5"):
            raise PermissionError(13, "Permission denied", str(target))
        return real(target, inputs)

    monkeypatch.setattr(output, "atomic_output", refuse)
    r = _through(path, hag, tmp_path / "a.h5")
    assert "relabelled to it in" in r.decisions["order"] and not kept.exists()
    _same_as_plain(tmp_path, path, tmp_path / "a.h5")


def test_the_build_keeps_no_copy_where_the_relabelling_does_not_fit(tmp_path):
    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    from gnnprep.hag import builder

    builder.build(path, hag, builder.HagConfig(capacity="all", memory_budget=80 << 20))
    assert not ordered_copy.copy_path(hag, "community").exists()
    builder.build(path, tmp_path / "hag2.h5", builder.HagConfig(capacity="all", memory_budget=1 << 30))
    assert ordered_copy.copy_path(tmp_path / "hag2.h5", "community").exists()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_cover_check_through_an_order_is_exact(tmp_path, seed):
    """A HAG relabelled to an order passes the check through that order, and fails through another
    one or with two entries swapped."""
    rng = np.random.default_rng(seed)
    path, *_ = make_store(tmp_path, rng, n=120, m=900, d=3)
    assert run(["hag", str(path), "-o", str(tmp_path / "hag.h5"), "--capacity", "all"]).exit_code == 0
    h, _ = read_hag(tmp_path / "hag.h5")
    with GraphStore(path) as g:
        n = g.num_nodes
        order = rng.permutation(n)
        inv = np.empty(n, np.int64)
        inv[order] = np.arange(n)
        ho = in_order(h, order, inv)
        for block in (1, 50, 1 << 22):
            check_covers(ho, g, "x", block_entries=block, inv=inv)
        other = np.empty(n, np.int64)
        other[rng.permutation(n)] = np.arange(n)
        from gnnprep.core.errors import GnnprepError

        with pytest.raises(GnnprepError, match="cover"):
            check_covers(ho, g, "x", inv=other)
        bad = ho.indices.copy()
        rows = [v for v in range(n) if ho.indptr[v + 1] > ho.indptr[v]]
        a, b = int(ho.indptr[rows[0]]), int(ho.indptr[rows[1]])
        if bad[a] != bad[b]:
            bad[a], bad[b] = bad[b], bad[a]
            from gnnprep.hag.structure import Hag

            with pytest.raises(GnnprepError, match="cover"):
                check_covers(Hag(n, ho.inputs, ho.level_ptr, ho.indptr, bad), g, "x", inv=inv)


def test_the_planner_counts_a_kept_copy_and_the_order():
    from gnnprep.precompute import plan as P
    from gnnprep.precompute.profile import Profile

    prof = Profile(device="cpu")
    p = P.Problem(num_nodes=2_000_000, num_entries=40_000_000, num_features=64, hops=3, out_rows=2_000_000)
    entries, agg = 30_000_000, 500_000
    base = P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries)
    kept = P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries, kept=True)
    assert base.predicted_seconds - kept.predicted_seconds == pytest.approx(
        entries * (P.HAG_SETUP_NS_PER_ENTRY - P.HAG_KEPT_SETUP_NS_PER_ENTRY) * 1e-9, abs=2e-3)
    ordered = P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries, speedup=0.5)
    assert ordered.predicted_seconds < base.predicted_seconds
    assert P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries, speedup=1.0).predicted_seconds > base.predicted_seconds
    # a kept copy is read instead of the HAG (int64) and its relabelling: its load holds 8 bytes an
    # entry less, so a budget that refuses the HAG read and relabelled plans through the kept one (its
    # peak then the run's: the column buffers)
    p = P.Problem(num_nodes=2_000_000, num_entries=300_000_000, num_features=16, hops=3, out_rows=2_000_000)
    entries = 280_000_000
    roomy = P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries)
    kept = P.plan_with_hag(p, prof, 64 << 30, 0, agg, entries, kept=True)
    assert kept.predicted_peak < roomy.predicted_peak
    budget = kept.predicted_peak + (64 << 20)
    assert P.plan_with_hag(p, prof, budget, 0, agg, entries, kept=True).predicted_peak <= budget
    # with no copy kept, that budget does not hold the HAG read and relabelled in memory: it is
    # relabelled out of core into the copy (gnnprep.hag.order.write_in_order), then read as kept
    assert P.hag_relabel_room(p, 64 << 30, agg, entries) is None
    room = P.hag_relabel_room(p, budget, agg, entries)
    assert room is not None
    streamed = P.plan_with_hag(p, prof, budget, 0, agg, entries)
    assert streamed.predicted_peak <= budget and streamed.c == P.plan_with_hag(p, prof, budget, 0, agg, entries,
                                                                               kept=True).c
    from gnnprep.hag import order as O

    passes = O.streamed_passes(entries, room)
    assert passes == 1 + -(-4 * entries // (room // 2))
    assert streamed.predicted_seconds - P.plan_with_hag(p, prof, budget, 0, agg, entries, kept=True).predicted_seconds \
        == pytest.approx(entries * passes * O.STREAMED_NS_PER_ENTRY_PASS * 1e-9, abs=2e-3)
    with pytest.raises(OptionError):   # below even what the out-of-core relabelling holds
        P.plan_with_hag(p, prof, 150 << 20, 0, agg, entries)


def test_a_hag_much_slower_than_the_plain_plan_is_said(tmp_path, monkeypatch):
    """--hag FILE whose plan is predicted far slower than the plain one runs (the user asked), with
    one warning line saying so and that --hag auto would not use it."""
    from gnnprep.precompute import run as R

    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "a.h5"])
    assert r.exit_code == 0 and "through the HAG against" not in r.stderr
    monkeypatch.setattr(R, "HAG_SLOWER_SAID", 0.0)   # any HAG plan "slower" than the plain one
    r = run(["precompute", path, "--hag", hag, "-o", tmp_path / "b.h5"])
    assert r.exit_code == 0 and "Warning: --hag" in r.stderr and "--hag auto would run without it" in r.stderr
    r = run(["precompute", path, "--hag", "auto", "-o", tmp_path / "c.h5"])
    assert "through the HAG against" not in r.stderr


def test_a_plain_run_after_hag_auto_declined_holds_no_order_for_the_hag(tmp_path):
    """--hag auto looks at the order a HAG run would use (order and inverse, 16 bytes a node); a run
    that goes plain does not keep them."""
    from gnnprep.hag.builder import cache_path
    from gnnprep.precompute.run import prepare_job

    path = _store_with_order(tmp_path)
    assert run(["hag", str(path), "-o", str(cache_path(path)), "--capacity", "5"]).exit_code == 0   # a poor HAG
    with GraphStore(path) as g:
        job = prepare_job(g, PrecomputeConfig(hops=3, device="cpu", hag="auto"), "cpu", "numba")
        assert job.hag is None and job.hag_order_choice is None, job.hag_info


def test_a_hag_run_lets_go_of_each_column_blocks_buffers(tmp_path, monkeypatch):
    """The HAG backend's [cur; h] view of a block's last hop input is dropped when the block ends
    (held, that buffer lived on beside the next block's X and output: one n x w buffer more than the
    plan counts at every block's start); the hops are unchanged."""
    from gnnprep.precompute import cpu_backends

    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    ends = []
    real_end = cpu_backends.HagBackend.end_block

    def end(self):
        real_end(self)
        ends.append(self.y is None and self.h is None)

    monkeypatch.setattr(cpu_backends.HagBackend, "end_block", end)
    for rows in ("all", "labeled"):
        ends.clear()
        out = tmp_path / f"{rows}.h5"
        precompute(path, out, PrecomputeConfig(hops=3, rows=rows, device="cpu", hag=str(hag), blocks=(1, 1, 3)))
        assert ends == [True] * 3, ends           # once per column block, and nothing kept
    _same_as_plain(tmp_path, path, tmp_path / "all.h5")


def test_a_dry_run_through_a_hag_reads_none_of_its_arrays_and_plans_as_the_run(tmp_path, monkeypatch):
    """`precompute --hag FILE --dry-run` plans from the HAG's root attributes (at papers100M's size
    its arrays are gigabytes and checking them takes minutes): the plan the run then makes, and the
    refusals load_for makes from the attributes (another graph, a corrupt count)."""
    import h5py

    from gnnprep.hag import builder, file

    path = _store_with_order(tmp_path)
    hag = tmp_path / "hag.h5"
    assert run(["hag", str(path), "-o", str(hag), "--capacity", "all"]).exit_code == 0
    real = _through(path, hag, tmp_path / "a.h5", rows="labeled")

    def no(*a, **k):
        raise AssertionError("a dry run read the HAG's arrays")

    for kept in (True, False):
        if not kept:
            ordered_copy.copy_path(hag, "community").unlink()
        with monkeypatch.context() as m:
            m.setattr(file, "read_hag", no)
            m.setattr(file, "read_relabelled", no)
            m.setattr(builder, "load_in_order", no)
            dry = _through(path, hag, tmp_path / "b.h5", rows="labeled", dry_run=True)
        assert dry.plan.predicted_peak == real.plan.predicted_peak and (dry.plan.c, dry.plan.a) == (real.plan.c, real.plan.a)
        assert ("kept beside it" in dry.decisions["order"]) == kept and "through the HAG" in dry.decisions["pruning"]
        assert dry.hag["used"] and not (tmp_path / "b.h5").exists()
    (tmp_path / "o").mkdir()
    other = _store_with_order(tmp_path / "o", seed=3)
    r = run(["precompute", other, "--hag", hag, "--dry-run", "-o", tmp_path / "c.h5"])
    assert r.exit_code == 1 and "another graph" in r.stderr
    with h5py.File(hag, "r+") as f:
        f.attrs["num_agg"] = -3
    r = run(["precompute", path, "--hag", hag, "--dry-run", "-o", tmp_path / "c.h5"])
    assert r.exit_code == 1 and "num_agg" in r.stderr and "Traceback" not in r.stderr
