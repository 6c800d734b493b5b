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
