"""A tune that cannot run leaves nothing behind (issue 23, item 8): a grid value no TrainConfig takes
(``device=tpu``) is a usage error before anything is read; a grid that asks the features artifact
for hops or channels it does not hold, or jobs that do not fit the memory budget, fail with one line
before the tune folder exists."""

import pytest
from fixtures import run, write_features


def test_a_device_that_is_no_device_is_a_usage_error(tmp_path):
    out = tmp_path / "tune"
    r = run(["tune", "sgc", str(tmp_path / "missing.h5"), "-o", str(out), "--grid", "device=cpu,tpu"])
    assert r.exit_code == 2 and "tpu" in r.stderr.strip().splitlines()[-1], r.stderr
    assert not out.exists()


@pytest.mark.parametrize("args,why", [
    (["--grid", "hops=1,99"], "--hops 99: the features artifact holds hops 0..3 (--grid hops=99)"),
    (["--grid", "operators=bogus"], "--operator bogus: not a channel"),
    (["--grid", "lr=0.1", "--jobs", "0", "--memory-budget", "1"], ""),
])
def test_what_the_artifact_or_the_budget_cannot_give_leaves_no_tune_folder(tmp_path, rng, args, why):
    feats = write_features(tmp_path / "f.h5", rng)
    out = tmp_path / "tune"
    r = run(["tune", "sgc", str(feats), "-o", str(out), "--seeds", "1", "--report-seeds", "1", *args])
    assert r.exit_code in (1, 2) and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and why in last, r.stderr
    assert not out.exists()
