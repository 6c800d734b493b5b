"""Edge values a user's data can hold, found by a sweep of the commands on tiny inputs: an empty
test split, features whose row sums overflow float32, a diverged loss in ``--json``."""

import json
import os
import shlex
import subprocess
import sys

import h5py
import numpy as np
import pytest
from fixtures import assert_one_error, make_store, run

from gnnprep.core.output import json_safe, write_json
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.run import precompute


def test_an_empty_test_split_trains_as_one_without_a_test_split(tmp_path, rng):
    path, *_ = make_store(tmp_path, rng, n=60, m=240, d=4)
    feats = tmp_path / "f.h5"
    precompute(path, feats, PrecomputeConfig(hops=2, device="cpu"))
    with h5py.File(feats, "r+") as f:
        train = f["splits/train"][:]
        del f["splits/test"]
        f.create_dataset("splits/test", data=np.empty(0, dtype=train.dtype))
        if "valid" not in f["splits"]:
            f.create_dataset("splits/valid", data=np.setdiff1d(f["rows"][:], train)[:5])
    r = run(["train", "sgc", str(feats), "-o", str(tmp_path / "run"), "--epochs", "2", "--device", "cpu",
             "--json", "--quiet"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["test_acc"] is None


def test_row_normalisation_of_rows_summing_past_float32(tmp_path, rng):
    """--normalize-features row: a row whose L1 norm overflows float32 is divided in float64 (by the
    norm cast to float32, inf, it came out all zero); other rows are divided as before, bit for bit."""
    path, *_ = make_store(tmp_path, rng, n=60, m=240, d=4)
    with h5py.File(path, "r+") as f:
        x = f["nodes/features"][:]
        x[[3, 17]] = np.float32(3e38)
        x[17, 1] = np.float32(-1e38)
        f["nodes/features"][:] = x
    out = tmp_path / "f.h5"
    precompute(path, out, PrecomputeConfig(hops=1, device="cpu", normalize_features="row"))
    with h5py.File(out, "r") as f:
        hop0, rows = f["hops/0"][:], f["rows"][:]
    l1 = np.abs(x.astype(np.float64)).sum(1)
    with np.errstate(over="ignore"):
        want = x / np.where(l1 > 0, l1, 1.0).astype(np.float32)[:, None]
    want[[3, 17]] = (x[[3, 17]] / l1[[3, 17], None]).astype(np.float32)
    np.testing.assert_array_equal(hop0, want[rows])
    assert np.isfinite(want).all() and (np.abs(want[[3, 17]]).sum(1) > 0.99).all()


def test_json_has_no_nan():
    """Standard JSON (no bare NaN / Infinity): non-finite numbers become null, in --json and in the
    run folder's files."""
    payload = {"valid_loss": float("nan"), "per_run": [{"loss": np.float32("inf"), "acc": 0.5}],
               "curve": np.array([1.0, -np.inf]), "n": 3, "name": "x", "ok": True, "none": None}
    text = json.dumps(json_safe(payload))
    back = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert back == {"valid_loss": None, "per_run": [{"loss": None, "acc": 0.5}], "curve": [1.0, None], "n": 3,
                    "name": "x", "ok": True, "none": None}


def test_the_run_folders_json_files_are_standard(tmp_path):
    write_json({"loss": float("nan"), "x": [np.float64(1.5)]}, tmp_path / "m.json")
    assert json.loads((tmp_path / "m.json").read_text()) == {"loss": None, "x": [1.5]}


def test_messages_name_the_missing_split_and_small_budgets_in_their_unit(tmp_path, rng):
    from fixtures import assert_one_error

    path, *_ = make_store(tmp_path, rng, n=60, m=240, d=4)
    feats = tmp_path / "f.h5"
    precompute(path, feats, PrecomputeConfig(hops=1, device="cpu"))
    with h5py.File(feats, "r+") as f:
        if "valid" in f["splits"]:
            del f["splits/valid"]
    r = run(["train", "sgc", str(feats), "-o", str(tmp_path / "run"), "--epochs", "1", "--device", "cpu", "--quiet"])
    assert_one_error(r, 1, r"has no /splits/valid; training needs")
    r = run(["hag", str(path), "-o", str(tmp_path / "h.h5"), "--memory-budget", "4KiB", "--quiet"])
    assert r.exit_code in (1, 2) and "4.0 KiB is too small" in r.stderr, r.stderr


def test_train_and_tune_refuse_an_empty_or_repeated_channel_list(tmp_path, rng):
    # as precompute's --operator does (they trained on the default channels, or one channel twice)
    path, *_ = make_store(tmp_path, rng, n=60, m=240, d=4)
    feats = tmp_path / "f.h5"
    precompute(path, feats, PrecomputeConfig(hops=1, device="cpu", operators=("sym", "rw")))
    for value, said in (("", "empty"), ("rw,sym,rw", "named twice"), (" , ", "empty")):
        for cmd in (["train", "sign", str(feats), "-o", str(tmp_path / "run")],
                    ["tune", "sign", str(feats), "-o", str(tmp_path / "tune"), "--grid", "lr=0.01"]):
            r = run([*cmd, "--operator", value, "--epochs", "1", "--quiet"])
            assert r.exit_code == 2 and said in r.stderr, (cmd[0], value, r.output)
            assert not (tmp_path / "run").exists() and not (tmp_path / "tune").exists()


def test_a_gzip_cut_before_its_first_block_ends_says_no_line_was_read(tmp_path):
    import gzip

    data = gzip.compress(b"".join(b"%d,%d\n" % (i, i + 1) for i in range(20000)))
    (tmp_path / "e.csv.gz").write_bytes(data[:len(data) // 2])
    r = run(["ingest", str(tmp_path / "e.csv.gz"), "-o", str(tmp_path / "g.h5")])
    assert r.exit_code == 1
    assert "truncated or corrupt gzip data within its first" in r.stderr and "line 0" not in r.stderr, r.stderr


def test_plan_takes_a_graph_without_edges_and_bounds_entries_by_n_times_n_minus_1():
    # ingest stores a graph without edges (and a one-node graph, which has none); a store holds no
    # self-loops, so n(n - 1) entries at most (n^2 was said)
    for nodes, entries in (("1", "0"), ("10", "0"), ("10", "90")):
        r = run(["plan", "--nodes", nodes, "--entries", entries, "--features", "8", "--json"])
        assert r.exit_code == 0 and json.loads(r.stdout)["plan"] is not None, (nodes, entries, r.output)
    r = run(["plan", "--nodes", "10", "--entries", "91", "--features", "8"])
    assert r.exit_code == 2 and "at most 90 entries" in r.stderr, r.output


def test_a_split_file_listing_an_id_twice_is_said(tmp_path, rng):
    # they were deduplicated silently: a split file listing ids twice is often the wrong file
    np.save(tmp_path / "e.npy", np.array([[0, 1, 2, 3], [1, 2, 3, 4]]))
    splits = tmp_path / "splits"
    splits.mkdir()
    np.save(splits / "train.npy", np.array([0, 1, 1, 2, 2]))
    np.save(splits / "valid.npy", np.array([3]))
    r = run(["ingest", str(tmp_path / "e.npy"), "--splits", str(splits), "-o", str(tmp_path / "g.h5")])
    assert r.exit_code == 0, r.output
    assert "train.npy: 2 node ids listed more than once; each is kept once" in r.stderr, r.stderr
    with h5py.File(tmp_path / "g.h5", "r") as f:
        assert f["splits/train"][:].tolist() == [0, 1, 2]


def test_a_two_by_two_edge_array_says_which_layout_it_was_read_in(tmp_path):
    np.save(tmp_path / "e.npy", np.array([[0, 1], [2, 3]]))
    r = run(["ingest", str(tmp_path / "e.npy"), "-o", str(tmp_path / "g.h5")])
    assert r.exit_code == 0 and "taken as [2, m]" in r.stderr, r.output
    with h5py.File(tmp_path / "g.h5", "r") as f:   # edges 0-2 and 1-3, both ways
        assert f["adj/indptr"][:].tolist() == [0, 1, 2, 3, 4] and f["adj/indices"][:].tolist() == [2, 3, 0, 1]


def test_plan_warns_when_the_predicted_peak_passes_the_machines_memory():
    args = ["plan", "--nodes", "100M", "--entries", "3G", "--features", "128", "--memory-budget", "64GiB"]
    r = run([*args, "--machine-memory", "16GiB"])
    assert r.exit_code == 0 and "is more than the machine's 16.0 GiB of memory" in r.stderr, r.output
    r = run([*args, "--machine-memory", "512GiB"])
    assert r.exit_code == 0 and "Warning" not in r.stderr, r.output


def test_a_run_folder_holding_other_files_is_said(tmp_path):
    feats = tmp_path / "f.h5"   # the sample has train and valid splits
    assert run(["precompute", "sample", "--cache-dir", str(tmp_path), "-o", str(feats), "--hops", "1"]).exit_code == 0
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    r = run(["train", "sgc", str(feats), "-o", str(folder), "--epochs", "1"])
    assert r.exit_code == 0 and "already holds other files (notes.txt)" in r.stderr, r.output
    r = run(["train", "sgc", str(feats), "-o", str(tmp_path / "fresh"), "--epochs", "1"])
    assert r.exit_code == 0 and "Warning" not in r.stderr, r.output


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_result_that_cannot_be_printed_is_one_error_line_and_a_closed_stdout_no_traceback(tmp_path, rng):
    # `> /dev/full` (a redirect onto a full disk) was blamed on "(a file being written)" with the disk's
    # free space; `>&-` ended in a traceback from the final flush of a standard output that is None
    g = make_store(tmp_path, rng, n=40, m=120, d=4)[0]
    cmd = f"{shlex.quote(sys.executable)} -m gnnprep"
    full = subprocess.run(["bash", "-c", f"{cmd} info {g} --json > /dev/full"], capture_output=True, text=True,
                          timeout=120)
    assert full.returncode == 1
    assert full.stderr == "Error: could not print the result to standard output: no space left on device\n"
    out = tmp_path / "f.h5"
    full = subprocess.run(["bash", "-c", f"{cmd} precompute {g} --hops 1 -o {out} > /dev/full"],
                          capture_output=True, text=True, timeout=120)
    assert full.returncode == 1 and full.stderr.endswith("standard output: no space left on device\n"), full.stderr
    closed = subprocess.run(["bash", "-c", f"{cmd} info {g} >&-"], capture_output=True, text=True, timeout=120)
    assert (closed.returncode, closed.stderr) == (0, "")


@pytest.mark.parametrize("value", ["0", "-2", "two", ""])
def test_numba_num_threads_below_one_or_not_a_number_is_one_error_line(tmp_path, value):
    # 0 or below: numba's ValueError as it was imported, a traceback from the first command that
    # computed; anything else not a number: numba's warning, with a traceback's text in it
    r = run(["precompute", tmp_path / "g.h5", "-o", tmp_path / "f.h5"], env={"NUMBA_NUM_THREADS": value})
    assert_one_error(r, 1, rf"the environment variable NUMBA_NUM_THREADS is '{value}'; expected a positive number")


@pytest.mark.parametrize("args", [["ingest", "{p}", "-o", "{o}"], ["precompute", "{p}", "-o", "{o}"], ["info", "{p}"],
                                  ["hag", "{p}", "-o", "{o}"], ["train", "sgc", "{p}", "-o", "{o}"]])
@pytest.mark.parametrize("name", ["edges.csv", "g.h5"])
def test_a_named_pipe_as_the_input_is_said_to_be_one(tmp_path, args, name):
    # a named pipe with an edge list's name was "empty file", with an HDF5 name "not an HDF5 file"
    pipe = tmp_path / name
    os.mkfifo(pipe)
    r = run([a.format(p=pipe, o=tmp_path / "out") for a in args])
    assert_one_error(r, 1, "is a named pipe; expected a")


def test_naming_an_operator_files_function_in_operator_says_it_is_a_channel_already(tmp_path):
    r = run(["precompute", tmp_path / "g.h5", "-o", tmp_path / "f.h5", "--operator", "sym,my_op",
             "--operator-file", "ops.py:my_op"])
    assert_one_error(r, 2, r"'my_op': unknown; .* \(a function of --operator-file FILE.py:NAME is the channel NAME")
