"""Issue 24: the planner knows the page cache. A streamed S larger than what the plan's own peak
leaves of the machine's memory is read from the disk on every pass, and the prediction says so
(measured: 1/4 of papers100M in a 6 GiB cgroup, 5 GiB budget: 103 s against 57 s predicted without
this term, 85 s with it)."""

from gnnprep.core.memory import machine_memory
from gnnprep.precompute import sizing
from gnnprep.precompute.plan import (
    PAGE_CACHE_RESERVE,
    Problem,
    _s_bytes,
    memory,
    predict_seconds,
    s_rereads_from_disk,
)
from gnnprep.precompute.profile import Profile

GiB = 1 << 30
P = Problem(num_nodes=27_764_989, num_entries=836_000_000, num_features=128, hops=3)


def test_machine_memory_is_known_here_and_positive():
    m = machine_memory()
    assert m is None or m > 0


def test_rereads_come_from_the_cache_when_s_fits_and_from_the_disk_when_not():
    b, c = 4, 8
    room = memory(P, b, c) + PAGE_CACHE_RESERVE
    assert not s_rereads_from_disk(P, b, c)                                   # unknown machine: cache
    assert not s_rereads_from_disk(Problem(**{**P.__dict__, "machine_memory": room + _s_bytes(P)}), b, c)
    small = Problem(**{**P.__dict__, "machine_memory": room + _s_bytes(P) - 1})
    assert s_rereads_from_disk(small, b, c)
    assert not s_rereads_from_disk(small, 1, c)                               # S resident: read once
    prof = Profile()
    assert predict_seconds(small, prof, b, c) > predict_seconds(P, prof, b, c)


def test_sizing_takes_the_machine_memory():
    big = sizing.plan_for_sizes(27_764_989, 836_000_000, 128, 3, 5 * GiB, rows=383_156, machine_memory=64 * GiB)
    small = sizing.plan_for_sizes(27_764_989, 836_000_000, 128, 3, 5 * GiB, rows=383_156, machine_memory=6 * GiB)
    assert small["predicted_seconds"] > big["predicted_seconds"]


def test_sizing_cli_option(capsys):
    sizing.main(["--nodes", "2.7M", "--entries", "83M", "--features", "128", "--rows", "38k",
                 "--memory-budget", "1GiB", "--machine-memory", "2GiB", "--json"])
    assert '"plan"' in capsys.readouterr().out


def test_x_tiles_are_read_at_the_cold_rate_only_when_the_cache_cannot_hold_x():
    from gnnprep.precompute.plan import x_read_rate

    prof = Profile()
    b, c = 4, 8
    tiled = Problem(**{**P.__dict__, "x_tile": 16})
    room = memory(tiled, b, c) + PAGE_CACHE_RESERVE
    x_bytes = P.num_nodes * P.num_features * 4
    roomy = Problem(**{**tiled.__dict__, "machine_memory": room + _s_bytes(P) + x_bytes})
    tight = Problem(**{**tiled.__dict__, "machine_memory": room + _s_bytes(P) - 1})
    assert x_read_rate(tiled, prof, b, c) == prof.read_bytes_per_s               # unknown machine
    assert x_read_rate(roomy, prof, b, c) == prof.read_bytes_per_s
    assert x_read_rate(tight, prof, b, c) == prof.cold_tile_read_bytes_per_s
    assert x_read_rate(tight, prof, b, 1) == prof.read_bytes_per_s               # one block: whole rows
    untiled = Problem(**{**tight.__dict__, "x_tile": 0})
    assert x_read_rate(untiled, prof, b, c) == prof.read_bytes_per_s
    warm = Profile(cold_tile_read_bytes_per_s=prof.read_bytes_per_s)
    extra = predict_seconds(tight, prof, b, c) - predict_seconds(tight, warm, b, c)
    assert abs(extra - (x_bytes / prof.cold_tile_read_bytes_per_s - x_bytes / prof.read_bytes_per_s)) < 1e-6 * extra


def test_what_the_page_cache_does_not_hold_is_counted_at_the_disks_rate():
    """X and S not in the page cache when the run starts are read from the disk (the papers100M shape
    at 1/10: hop 0 took 11 s reading X cold, where the model counted 1.3 s)."""
    from gnnprep.precompute.plan import cold_read_seconds

    prof = Profile()
    b, c = 4, 8
    x_bytes = P.num_nodes * P.num_features * 4
    per_byte = 1 / prof.cold_tile_read_bytes_per_s - 1 / prof.read_bytes_per_s
    assert cold_read_seconds(x_bytes, None, prof) == cold_read_seconds(x_bytes, 1.0, prof) == 0.0
    assert abs(cold_read_seconds(x_bytes, 0.25, prof) - 0.75 * x_bytes * per_byte) < 1e-9
    warm = predict_seconds(Problem(**{**P.__dict__, "x_cached": 1.0, "s_cached": 1.0}), prof, b, c)
    assert warm == predict_seconds(P, prof, b, c)   # unknown: as cached
    cold_x = predict_seconds(Problem(**{**P.__dict__, "x_cached": 0.0, "s_cached": 1.0}), prof, b, c)
    cold_s = predict_seconds(Problem(**{**P.__dict__, "x_cached": 1.0, "s_cached": 0.0}), prof, b, c)
    assert abs(cold_x - warm - x_bytes * per_byte) < 1e-6
    assert abs(cold_s - warm - _s_bytes(P) * per_byte) < 1e-6


def test_an_ordered_copy_is_judged_by_its_own_pages():
    from gnnprep.precompute.plan import Plan, _ordered, cold_read_seconds

    prof = Profile()
    p = Problem(**{**P.__dict__, "ordered_copy": "present", "s_cached": 0.0, "copy_cached": 1.0})
    plan = Plan(a=1, b=4, c=8, width=16, s_resident=False, device="cpu", budget=8 * GiB, predicted_peak=GiB,
                predicted_seconds=100.0)
    hot, _ = _ordered(plan, p, prof)
    cold, _ = _ordered(plan, Problem(**{**p.__dict__, "copy_cached": 0.0}), prof)
    assert abs(cold.predicted_seconds - hot.predicted_seconds - cold_read_seconds(_s_bytes(P), 0.0, prof)) < 1e-2


def test_resident_share_asks_the_page_cache(tmp_path):
    import os

    import pytest

    from gnnprep.core.pagecache import resident_share

    path = tmp_path / "f.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(4 << 20))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    cold = resident_share(path, [(0, 4 << 20)])
    assert cold is not None
    if cold > 0.5:
        pytest.skip("this file system keeps its pages (tmpfs): nothing to tell apart")
    with open(path, "rb") as f:
        f.read(1 << 20)
    assert resident_share(path, [(0, 1 << 20)]) == 1.0
    assert resident_share(tmp_path / "missing", [(0, 10)]) is None
    assert resident_share(path, []) is None


def test_the_report_says_what_the_prediction_was_made_with(tmp_path, rng):
    """The cost profile (built-in: another machine's, so the text says how to measure this one's) and
    the shares of X and S the page cache held, in the report and on the plan line."""
    from click.testing import CliRunner
    from fixtures import make_store

    from gnnprep.cli import cli
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    path, *_ = make_store(tmp_path, rng, n=2000, m=10000, d=16)
    for dry in (True, False):
        r = precompute(path, tmp_path / "f.h5", PrecomputeConfig(hops=2, dry_run=dry))
        told = r.predicted_with
        assert told["profile"] == "built-in defaults"
        assert set(told["page_cached"]) >= {"x", "s"}
        assert all(v is None or 0.0 <= v <= 1.0 for v in told["page_cached"].values())
    out = CliRunner().invoke(cli, ["precompute", str(path), "-o", str(tmp_path / "out.h5"), "--dry-run"])
    assert out.exit_code == 0 and "`gnnprep calibrate` measures this machine's" in out.output.splitlines()[0]


def test_a_run_through_a_hag_is_judged_by_the_hag_files_pages():
    """The HAG's in-lists are read from its file (or its relabelled copy), not S's: their cold share
    is what a plan through it adds, and S's share changes nothing there."""
    from gnnprep.precompute.plan import cold_read_seconds, plan_with_hag

    prof = Profile()
    q = Problem(num_nodes=200_000, num_entries=8_000_000, num_features=64, hops=3)
    agg, entries = 50_000, 6_000_000

    def seconds(**kw):
        return plan_with_hag(Problem(**{**q.__dict__, **kw}), prof, 4 * GiB, 0, agg, entries, (1, 1, 1)).predicted_seconds

    assert seconds(s_cached=0.0, hag_cached=1.0) == seconds(s_cached=1.0, hag_cached=1.0) == seconds()
    cold = seconds(hag_cached=0.0) - seconds(hag_cached=1.0)
    # about the HAG's entries (its in-lists and aggregation rows, as the model weighs them) read cold, well
    # under S's
    assert 0.5 * cold_read_seconds(4 * entries, 0.0, prof) < cold < cold_read_seconds(_s_bytes(q), 0.0, prof)
