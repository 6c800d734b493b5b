"""Issue 32, items 8 and 14: ``train --resume`` from a checkpoint whose fields are malformed.

A checkpoint is read with ``torch.load(weights_only=True)`` (no code runs), but what it holds was
used unchecked: NaN weights trained on (exit 0), ``current.epoch -5`` and ``best_states`` a string
exited 0, and wrong types, shapes or missing entries in fingerprint, config, finished, current,
optimizer, RNG states, history, best and weights gave tracebacks. Every field is now checked before
any of it is used (``gnnprep.train.run_folder.CheckpointCheck``): exit 1, one ``Error:`` line
naming the checkpoint and the field and what was expected, nothing on stdout, the run folder
byte-identical.

One table, one parametrized test. The checkpoint edited is a valid one with every field filled:
two runs of which the first finished and the second is in progress (``current``, with its best
epoch and best state); resuming it unedited exits 0 and ends as the uninterrupted run did.
"""

import hashlib
import json
import re

import numpy as np
import pytest
import torch
from fixtures import run, write_features

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARGS = ["--epochs", "2", "--runs", "2", "--hidden", "8", "--batch-size", "16", "--checkpoint-every", "0", "--quiet"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """features f.h5, ``full`` (the finished two-run run) and ``ck``: its checkpoint turned into the
    one written at the last epoch of run 2, before run 2 finished (what an interrupt leaves)."""
    root = tmp_path_factory.mktemp("resume4")
    features = write_features(root / "f.h5", np.random.default_rng(7), n=40, d=8, K=2)
    r = run(["train", "lc-gprgnn", features, "-o", root / "full", *ARGS])
    assert r.exit_code == 0, r.stderr
    ck = torch.load(root / "full" / "checkpoint.pt", weights_only=True)
    assert ck["current"] is None and len(ck["finished"]) == 2
    ck["current"] = {**ck["ends"][1], "best_state": ck["best_states"][1]}
    for k in ("finished", "best_states", "ends"):
        ck[k] = ck[k][:1]
    return root, features, ck


def snapshot(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def resume(features, run_dir):
    return run(["train", "lc-gprgnn", features, "-o", run_dir, *ARGS, "--resume"])


def write(ck, run_dir):
    run_dir.mkdir()
    torch.save(ck, run_dir / "checkpoint.pt")


def test_the_unedited_checkpoint_resumes_as_before(base, tmp_path):
    root, features, ck = base
    write(ck, tmp_path / "run")
    r = resume(features, tmp_path / "run")
    assert r.exit_code == 0, r.stderr
    got, want = (json.loads((d / "metrics.json").read_text()) for d in (tmp_path / "run", root / "full"))
    for a, b in zip(got["runs"], want["runs"]):
        assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
        assert (a["best_epoch"], a["valid_loss"], a["test_acc"]) == (b["best_epoch"], b["valid_loss"], b["test_acc"])


def test_a_checkpoint_from_before_the_rows_had_steps_and_seconds_resumes(base, tmp_path):
    """History rows gained ``steps`` and ``seconds`` after checkpoint version 1 was first written;
    a checkpoint without them still resumes."""
    _, features, ck = base
    ck = _copy(ck)
    for history in [ck["current"]["history"], ck["finished"][0]["history"], ck["ends"][0]["history"]]:
        for row in history:
            del row["steps"], row["seconds"]
    write(ck, tmp_path / "run")
    r = resume(features, tmp_path / "run")
    assert r.exit_code == 0, r.stderr


# --------------------------------------------------------------------------------------- edits


def setitem(where, value):
    """``ck[where...] = value`` (``where``: a path of keys and indices)."""
    def edit(ck):
        *path, last = where
        obj = ck
        for k in path:
            obj = obj[k]
        obj[last] = value(obj[last]) if callable(value) else value
    return edit


def delete(where):
    def edit(ck):
        *path, last = where
        obj = ck
        for k in path:
            obj = obj[k]
        del obj[last]
    return edit


def poison(value, index=0):
    """A copy of a tensor with one entry set to ``value``."""
    def change(t):
        t = t.clone()
        t.view(-1)[index] = value
        return t
    return change


CUR, OPT, RNG = ("current",), ("current", "optimizer"), ("current", "rng")
W = "'mlp.linears.0.weight'"        # a weight of lc-gprgnn (in_dim 8 -> hidden 8)

CASES = [
    # (id, edit, regex the one Error: line must match after "checkpoint.pt: ")
    # item 8
    ("weights-nan", setitem(CUR + ("model", "gamma"), poison(float("nan"))),
     r"current\.model\['gamma'\] is a float32 tensor of shape \[3\] holding 1 NaN and 0 infinite value\(s\); "
     r"expected finite values \(a weight of the lc-gprgnn model; a run whose values diverged cannot be continued"),
    ("current-epoch--5", setitem(CUR + ("epoch",), -5), r"current\.epoch is -5; expected 2 \(the epochs in current\.history\)"),
    ("best-states-a-string", setitem(("best_states",), "abc"), r"best_states is 'abc'; expected a list of 1 item"),
    # item 14: fingerprint
    ("fingerprint-a-string", setitem(("fingerprint",), "abc"), r"fingerprint is 'abc'; expected a dict of path, file"),
    ("fingerprint-file-a-tensor", setitem(("fingerprint", "file"), torch.zeros(3)),
     r"fingerprint\.file is a float32 tensor of shape \[3\]; expected text"),
    ("fingerprint-missing-key", delete(("fingerprint", "graph_fingerprint")), r"fingerprint\.graph_fingerprint is missing"),
    # config
    ("config-a-list", setitem(("config",), [1, 2]), r"config is a list of 2 items; expected a dict of the run's settings"),
    ("config-value-a-tensor", setitem(("config", "hidden"), torch.ones(3)),
     r"config\.hidden is a float32 tensor of shape \[3\]; expected a setting's value"),
    ("config-unknown-setting", setitem(("config", "evil"), 1), r"config is a dict with the unknown setting 'evil'"),
    # finished
    ("finished-a-bool", setitem(("finished",), True), r"finished is True; expected a list of the finished runs' results"),
    ("finished-missing-key", delete(("finished", 0, "valid_loss")), r"finished\[0\]\.valid_loss is missing"),
    ("finished-extra-key", setitem(("finished", 0, "extra"), 1), r"finished\[0\] is a dict with the unexpected key 'extra'"),
    ("finished-epochs-run-text", setitem(("finished", 0, "epochs_run"), "2"), r"finished\[0\]\.epochs_run is '2'; expected 2"),
    ("finished-valid-loss-nan", setitem(("finished", 0, "valid_loss"), float("nan")),
     r"finished\[0\]\.valid_loss is nan; expected a finite number >= 0"),
    ("finished-seed-changed", setitem(("finished", 0, "seed"), 5), r"finished\[0\]\.seed is 5; expected 0"),
    # current
    ("current-an-int", setitem(CUR, 5), r"current is 5; expected a dict of run, epoch"),
    ("current-epoch-text", setitem(CUR + ("epoch",), "2"), r"current\.epoch is '2'; expected 2"),
    ("current-run-beyond", setitem(CUR + ("run",), 7), r"current\.run is 7; expected an integer in 0\.\.1"),
    ("current-bad-negative", setitem(CUR + ("bad",), -1), r"current\.bad is -1; expected an integer >= 0"),
    ("current-elapsed-inf", setitem(CUR + ("elapsed",), float("inf")), r"current\.elapsed is inf; expected a finite number"),
    ("current-missing-rng", delete(CUR + ("rng",)), r"current\.rng is missing"),
    # best
    ("best-a-string", setitem(CUR + ("best",), "x"), r"current\.best is 'x'; expected a dict of epoch, valid_acc"),
    ("best-epoch-beyond", setitem(CUR + ("best", "epoch"), 9), r"current\.best\.epoch is 9; expected an integer in 0\.\.1"),
    ("best-valid-loss-text", setitem(CUR + ("best", "valid_loss"), "low"), r"current\.best\.valid_loss is 'low'; expected a finite"),
    ("best-state-missing", setitem(CUR + ("best_state",), None), r"current\.best_state is None; expected the lc-gprgnn model's weights"),
    ("end-best-none", setitem(("ends", 0, "best"), None), r"ends\[0\]\.best is None; expected the best epoch of a finished run"),
    # history
    ("history-a-dict", setitem(CUR + ("history",), {}), r"current\.history is a dict of 0 entries; expected a list"),
    ("history-loss-nan", setitem(CUR + ("history", 1, "train_loss"), float("nan")),
     r"current\.history\[1\]\.train_loss is nan; expected a finite number"),
    ("history-epoch-wrong", setitem(CUR + ("history", 1, "epoch"), 0), r"current\.history\[1\]\.epoch is 0; expected 1"),
    ("history-steps-negative", setitem(CUR + ("history", 0, "steps"), -1), r"current\.history\[0\]\.steps is -1; expected an integer >= 0"),
    # optimizer
    ("optimizer-a-string", setitem(OPT, "adam"), r"current\.optimizer is 'adam'; expected a dict of state, param_groups"),
    ("optimizer-no-groups", setitem(OPT + ("param_groups",), []), r"current\.optimizer\.param_groups is a list of 0 items"),
    ("optimizer-lr-text", setitem(OPT + ("param_groups", 0, "lr"), "fast"), r"current\.optimizer\.param_groups\[0\]\.lr is 'fast'"),
    ("optimizer-lr-nan", setitem(OPT + ("param_groups", 0, "lr"), float("nan")), r"param_groups\[0\]\.lr is nan; expected 0\.01"),
    ("optimizer-params-wrong", setitem(OPT + ("param_groups", 0, "params"), [0, 1]),
     r"param_groups\[0\]\.params is a list of 2 items; expected the parameter ids 0\.\.4"),
    ("optimizer-moment-wrong-shape", setitem(OPT + ("state", 1, "exp_avg"), torch.zeros(2, 2)),
     r"current\.optimizer\.state\[1\]\.exp_avg is a float32 tensor of shape \[2, 2\]; expected a float32 tensor of shape \[8, 8\]"),
    ("optimizer-moment-nan", setitem(OPT + ("state", 1, "exp_avg"), poison(float("nan"))), r"state\[1\]\.exp_avg is .* holding 1 NaN"),
    ("optimizer-moment-sq-negative", setitem(OPT + ("state", 1, "exp_avg_sq"), poison(-1.0)),
     r"state\[1\]\.exp_avg_sq is .* holding a negative value"),
    ("optimizer-step-text", setitem(OPT + ("state", 0, "step"), "1"), r"current\.optimizer\.state\[0\]\.step is '1'; expected a finite"),
    ("optimizer-state-id-beyond", setitem(OPT + ("state", 99), {}), r"current\.optimizer\.state is a dict with the key 99"),
    ("optimizer-state-missing-moment", delete(OPT + ("state", 0, "exp_avg")), r"current\.optimizer\.state\[0\]\.exp_avg is missing"),
    # RNG states
    ("rng-torch-short", setitem(RNG + ("torch",), torch.zeros(10, dtype=torch.uint8)),
     r"current\.rng\.torch is a uint8 tensor of shape \[10\]; expected a uint8 tensor of shape \[5056\]"),
    ("rng-torch-float", setitem(RNG + ("torch",), lambda t: t.float()), r"current\.rng\.torch is a float32 tensor"),
    ("rng-numpy-a-list", setitem(RNG + ("numpy",), [1]), r"current\.rng\.numpy is a list of 1 items; expected a dict"),
    ("rng-numpy-other-generator", setitem(RNG + ("numpy", "bit_generator"), "MT19937"),
     r"current\.rng\.numpy\.bit_generator is 'MT19937'; expected 'PCG64'"),
    ("rng-numpy-state-negative", setitem(RNG + ("numpy", "state", "state"), -1),
     r"current\.rng\.numpy\.state\.state is -1; expected an integer in 0\.\.2\*\*128-1"),
    ("rng-python-a-list", setitem(RNG + ("python",), lambda s: list(s)), r"current\.rng\.python is a list of 3 items; expected Python's"),
    ("rng-python-short", setitem(RNG + ("python",), lambda s: (s[0], s[1][:10], s[2])), r"current\.rng\.python\[1\] is a tuple of 10"),
    # weights
    ("weights-inf-in-best-states", setitem(("best_states", 0, "gamma"), poison(float("inf"))),
     r"best_states\[0\]\['gamma'\] is .* holding 0 NaN and 1 infinite"),
    ("weights-nan-in-best-state", setitem(CUR + ("best_state", "mlp.linears.1.bias"), poison(float("nan"))),
     r"current\.best_state\['mlp\.linears\.1\.bias'\] is .* holding 1 NaN"),
    ("weights-wrong-shape", setitem(CUR + ("model", "mlp.linears.0.weight"), torch.zeros(8, 9)),
     rf"current\.model\[{W}\] is a float32 tensor of shape \[8, 9\]; expected a float32 tensor of shape \[8, 8\]"),
    ("weights-float64", setitem(CUR + ("model", "mlp.linears.0.weight"), lambda t: t.double()),
     rf"current\.model\[{W}\] is a float64 tensor of shape \[8, 8\]; expected a float32"),
    ("weights-a-list", setitem(CUR + ("model", "mlp.linears.0.weight"), [1.0]), rf"current\.model\[{W}\] is a list of 1 items"),
    ("weights-missing", delete(("ends", 0, "model", "mlp.linears.0.weight")), rf"ends\[0\]\.model\[{W}\] is missing"),
    ("weights-extra", setitem(CUR + ("model", "evil"), torch.zeros(1)), r"current\.model is a dict with the unexpected key 'evil'"),
    ("world-size-text", setitem(("world_size",), "1"), r"world_size is '1'; expected an integer >= 1"),
    # values that are the right kind on the surface
    ("weights-sparse", setitem(CUR + ("model", "gamma"), lambda t: t.to_sparse()), r"current\.model\['gamma'\] is a sparse_coo float32"),
    ("weights-on-meta", setitem(CUR + ("model", "gamma"), torch.zeros(3, device="meta")), r"current\.model\['gamma'\] is .* on meta"),
    ("config-int-of-997-bits", setitem(("config", "lr"), 10**300), r"config\.lr is an integer of 997 bits; expected a setting's value"),
    ("optimizer-step-negative", setitem(OPT + ("state", 0, "step"), torch.tensor(-3.0)), r"state\[0\]\.step is .* holding -3\.0; expected"),
    ("optimizer-amsgrad-switched", setitem(OPT + ("param_groups", 0, "amsgrad"), True), r"param_groups\[0\]\.amsgrad is True; expected False"),
    ("optimizer-group-an-int", setitem(OPT + ("param_groups", 0), 5), r"current\.optimizer\.param_groups\[0\] is 5; expected a dict"),
    ("rng-torch-unrestorable", setitem(RNG + ("torch",), torch.full((5056,), 255, dtype=torch.uint8)), r"rng\.torch is .* that torch cannot restore"),
    ("rng-cuda-text", setitem(RNG + ("cuda",), "x"), r"current\.rng\.cuda is 'x'; expected a list of CUDA RNG states"),
    ("rng-python-gauss-nan", setitem(RNG + ("python",), lambda s: (s[0], s[1], float("nan"))), r"current\.rng\.python\[2\] is nan; expected None or a finite float"),
]


@pytest.mark.parametrize("edit,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_checkpoint(base, tmp_path, edit, pattern):
    root, features, ck = base
    ck = _copy(ck)
    edit(ck)
    write(ck, tmp_path / "run")
    before = snapshot(tmp_path)
    r = resume(features, tmp_path / "run")
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {tmp_path / 'run' / 'checkpoint.pt'}: "), r.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert snapshot(tmp_path) == before


def _copy(obj):
    """A deep copy (tensors cloned, tuples kept)."""
    if torch.is_tensor(obj):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v) for v in obj)
    return obj


def test_every_rank_state_is_checked_under_torchrun(base):
    """Under torchrun (world 2) the state also holds each rank's torch RNG; a wrong one is refused
    the same way (checked directly: a two-rank job is tests/train/test_distributed_train.py's)."""
    from gnnprep.core.errors import GnnprepError
    from gnnprep.train.config import TrainConfig
    from gnnprep.train.models import ModelSpec
    from gnnprep.train.run_folder import CheckpointCheck

    root, _, ck = base
    saved = torch.load(root / "full" / "model.pt", weights_only=True)
    spec = ModelSpec(**{**saved["spec"], "operators": tuple(saved["spec"]["operators"])})
    config = TrainConfig(**{**saved["config"], "operators": None})
    cur = _copy(ck["current"])
    cur["rank_rng"] = [{"torch": torch.get_rng_state()}, {"torch": torch.get_rng_state()}]
    check = CheckpointCheck(root / "checkpoint.pt", config, spec, world=2)
    check.state("current", cur, None, 1)                      # valid
    cur["rank_rng"][1] = {"torch": "seed"}
    with pytest.raises(GnnprepError, match=r"current\.rank_rng\[1\]\.torch is 'seed'; expected a uint8 tensor"):
        check.state("current", cur, None, 1)
    cur["rank_rng"] = cur["rank_rng"][:1]
    with pytest.raises(GnnprepError, match=r"current\.rank_rng is a list of 1 items; expected a list of 2"):
        check.state("current", cur, None, 1)
