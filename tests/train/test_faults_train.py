"""Issue 12 for ``gnnprep train``: every fixable input gives exit 1 (2 for an option's value) with one
``Error:`` line naming the option, file or field and what was expected; no traceback, nothing left
behind, inputs byte-identical. One table, one parametrized test; resume and the read-only folder apart.

Findings covered: 1 (run folder = the features file, or an existing file), 6 (seed, lr, checkpoint
interval, threads, hidden, dropout values; a model too big for memory; a class id of 2^40; a corrupt
checkpoint; an unwritable run folder), 7 (--layers bounded), 8 (newer / non-integer format_version),
11 (--resume without a checkpoint; --epochs raised on resume continues the run).
"""

import hashlib
import json
import os
import re

import h5py
import numpy as np
import pytest
import torch
from fixtures import run, write_features

BASE = ["--epochs", "2", "--hidden", "8", "--batch-size", "16", "--quiet"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def snapshot(root):
    """Every path under ``root`` and a hash of every file: equal before and after a failed command
    means nothing was left behind and no input changed."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def A(*extra, model="sgc", out="{out}/run"):
    return ["train", model, "{in}/f.h5", "-o", out, *BASE, *extra]


# --------------------------------------------------------------------------------------- setups


def feats(root, rng):
    write_features(root / "in" / "f.h5", rng, n=40, d=8, K=2)


def edit(fn):
    """Features, then ``fn(h5file)`` on them."""
    def setup(root, rng):
        feats(root, rng)
        with h5py.File(root / "in" / "f.h5", "a") as f:
            fn(f)
    return setup


def set_attr(name, value):
    return edit(lambda f: f.attrs.__setitem__(name, value))


def big_label(f):
    f.attrs["num_classes"] = 0                       # unknown: taken from the largest label
    labels = f["labels"][:]
    labels[int(f["splits/train"][0])] = 2**40
    f["labels"][...] = labels


def float_labels(f):
    y = f["labels"][:].astype(np.float32)
    del f["labels"]
    f["labels"] = y


def with_file(name, data=b"notes\n"):
    def setup(root, rng):
        feats(root, rng)
        (root / "in" / name).write_bytes(data)
    return setup


def with_folder(root, rng):
    feats(root, rng)
    (root / "out" / "empty").mkdir()


def with_checkpoint(data):
    def setup(root, rng):
        feats(root, rng)
        (root / "out" / "run").mkdir()
        (root / "out" / "run" / "checkpoint.pt").write_bytes(data)
    return setup


def with_run(epochs=4, truncate=False):
    """A finished run of A() with ``epochs`` in out/run (optionally its checkpoint cut in half)."""
    def setup(root, rng):
        feats(root, rng)
        args = [str(a).format(**{"in": root / "in", "out": root / "out"}) for a in A("--epochs", str(epochs))]
        assert run(args).exit_code == 0
        if truncate:
            ck = root / "out" / "run" / "checkpoint.pt"
            ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    return setup


def features_as_metrics(root, rng):
    """A features artifact named like a file the run writes, inside the run folder."""
    (root / "out" / "run").mkdir()
    write_features(root / "out" / "run" / "metrics.json", rng, n=40, d=8, K=2)


class _Code:
    """Unpickling this runs os.mkdir: a checkpoint must never execute what it holds."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def with_code_checkpoint(root, rng):
    feats(root, rng)
    (root / "out" / "run").mkdir()
    torch.save({"format": "gnnprep.checkpoint", "x": _Code(str(root / "out" / "pwned"))},
               root / "out" / "run" / "checkpoint.pt")


# --------------------------------------------------------------------------------------- the table

CASES = [
    # (id, setup, args, exit code, regex the one Error: line must match)
    # finding 6: option values (usage errors, nothing read)
    ("seed-negative", feats, A("--seed", "-1"), 2, r"'--seed'.*-1: expected an integer in 0\.\.9223372036854775807"),
    ("seed-beyond-64-bits", feats, A("--seed", str(2**64 + 1)), 2, r"'--seed'.*18446744073709551617: expected an integer"),
    ("seed-plus-runs-overflow", feats, A("--seed", str(2**63 - 1), "--runs", "2"), 2,
     r"'--seed'.*run 2 would use seed 9223372036854775808; expected seed \+ runs - 1 <="),
    ("lr-nan", feats, A("--lr", "nan"), 2, r"'--lr'.*nan: expected a finite learning rate > 0"),
    ("lr-inf", feats, A("--lr", "inf"), 2, r"'--lr'.*inf: expected a finite learning rate > 0"),
    ("weight-decay-nan", feats, A("--weight-decay", "nan"), 2, r"'--weight-decay'.*nan: expected a finite number >= 0"),
    ("checkpoint-every-nan", feats, A("--checkpoint-every", "nan"), 2,
     r"'--checkpoint-every'.*nan: expected a finite number of seconds >= 0"),
    ("checkpoint-every-negative", feats, A("--checkpoint-every", "-5"), 2, r"'--checkpoint-every'.*-5\.0: expected"),
    ("threads-100000", feats, A("--threads", "100000"), 2, r"'--threads'.*100000: expected an integer in 0\.\.1024"),
    ("hidden-100000000", feats, A("--hidden", "100000000"), 2, r"'--hidden'.*100000000: expected an integer in 1\.\.1048576"),
    ("hidden-0", feats, A("--hidden", "0"), 2, r"'--hidden'.*0: expected an integer in 1\.\."),
    ("layers-100000", feats, A("--layers", "100000", model="lc-gcn"), 2, r"'--layers'.*100000: expected an integer in 1\.\.64"),
    ("layers-0", feats, A("--layers", "0", model="lc-gcn"), 2, r"'--layers'.*0: expected an integer in 1\.\.64"),
    ("dropout-1", feats, A("--dropout", "1"), 2, r"'--dropout'.*1\.0: expected a finite probability >= 0 and < 1"),
    ("dropout-nan", feats, A("--dropout", "nan"), 2, r"'--dropout'.*nan: expected a finite probability"),
    ("input-dropout-negative", feats, A("--input-dropout", "-0.1"), 2, r"'--input-dropout'.*-0\.1: expected"),
    ("dprate-inf", feats, A("--dprate", "inf"), 2, r"'--dprate'.*inf: expected a finite probability"),
    ("alpha-2", feats, A("--alpha", "2", model="lc-gprgnn"), 2, r"'--alpha'.*2\.0: expected a finite value >= 0 and <= 1"),
    # finding 6: file-dependent (exit 1)
    ("model-too-big-for-memory", feats, A("--hidden", "300000", "--layers", "4", model="lc-gprgnn"), 1,
     r"--hidden 300000: the lc-gprgnn model \([\d,]+ parameters, 4 layers\) needs ~[\d.]+ TiB to train .* "
     r"but (cpu|cuda\S*) has [\d.]+ \w+ free; expected a smaller --hidden"),
    ("label-2^40", edit(big_label), A(), 1,
     r"f\.h5: /labels has class id 1099511627776; expected class ids below 1000000"),
    ("num-classes-attr-2^40", set_attr("num_classes", 2**40), A(), 1,
     r"f\.h5: root attribute 'num_classes' is 1099511627776; expected 0\.\.1000000"),
    ("labels-float", edit(float_labels), A(), 1, r"f\.h5: /labels has dtype float32; expected integer class ids"),
    ("output-parent-is-a-file", with_file("notes.txt"), A(out="{in}/notes.txt/run"), 1,
     r"notes\.txt/run: .*notes\.txt is not a folder; expected a folder to hold the run"),
    ("resume-garbage-checkpoint", with_checkpoint(b"\x00garbage" * 50), A("--resume"), 1,
     r"checkpoint\.pt: cannot be read \(corrupt or from another version\)"),
    ("resume-empty-checkpoint", with_checkpoint(b""), A("--resume"), 1,
     r"checkpoint\.pt: cannot be read \(corrupt or from another version\)"),
    ("resume-truncated-checkpoint", with_run(truncate=True), A("--resume"), 1,
     r"checkpoint\.pt: cannot be read \(corrupt or from another version\)"),
    ("resume-checkpoint-with-code", with_code_checkpoint, A("--resume"), 1,
     r"checkpoint\.pt: cannot be read \(corrupt or from another version\)"),
    # finding 8
    ("format-version-newer", set_attr("format_version", 2), A(), 1,
     r"f\.h5: gnnprep\.features format_version 2 is newer than this gnnprep reads \(1\)"),
    ("format-version-string", set_attr("format_version", "1"), A(), 1,
     r"f\.h5: root attribute 'format_version' is '1'; expected a positive integer"),
    # finding 11
    ("resume-missing-folder", feats, A("--resume", out="{out}/nothere"), 1,
     r"nothere: no checkpoint to resume"),
    ("resume-empty-folder", with_folder, A("--resume", out="{out}/empty"), 1, r"empty: no checkpoint to resume"),
    ("resume-shorter-epochs", with_run(epochs=4), A("--resume"), 1,
     r"--epochs 2: the run in .*run has trained 4 epochs already; expected --epochs >= 4"),
    # finding 1
    ("output-is-the-features-file", feats, A(out="{in}/f.h5"), 1, r"f\.h5: is also an input of this command"),
    ("features-inside-the-run-folder", features_as_metrics, ["train", "sgc", "{out}/run/metrics.json", "-o", "{out}/run", *BASE],
     1, r"run/metrics\.json: is also an input of this command"),
    ("output-is-an-existing-file", with_file("notes.txt"), A(out="{in}/notes.txt"), 1,
     r"notes\.txt: exists and is not a folder; expected a run folder"),
]


@pytest.mark.parametrize("setup,args,code,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fault(tmp_path, rng, setup, args, code, pattern):
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    setup(tmp_path, rng)
    before = snapshot(tmp_path)
    r = run([a.format(**{"in": tmp_path / "in", "out": tmp_path / "out"}) for a in args])
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert snapshot(tmp_path) == before          # nothing left behind, every input byte-identical


# --------------------------------------------------------------------------------------- apart


def _train(tmp_path, out, *extra):
    r = run(["train", "lc-gcn", tmp_path / "f.h5", "-o", tmp_path / out, "--hidden", "8", "--batch-size", "16",
             "--dropout", "0.3", "--json", "--quiet", *extra])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_resume_with_more_epochs_continues_a_finished_run(tmp_path, rng):
    """Finding 11: --epochs 20 --resume on a finished 15-epoch run trains on to 20, exactly as an
    uninterrupted 20-epoch run (model, optimizer and RNG states continue from the run's end)."""
    write_features(tmp_path / "f.h5", rng, n=40, d=8, K=2)
    _train(tmp_path, "full", "--epochs", "20", "--runs", "2")
    short = _train(tmp_path, "run", "--epochs", "15", "--runs", "2")
    assert [r["epochs_run"] for r in short["per_run"]] == [15, 15]
    longer = _train(tmp_path, "run", "--epochs", "20", "--runs", "2", "--resume")
    assert [r["epochs_run"] for r in longer["per_run"]] == [20, 20]
    metrics = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("full", "run")]
    for a, b in zip(metrics[0]["runs"], metrics[1]["runs"]):
        assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
        assert (a["best_epoch"], a["test_acc"]) == (b["best_epoch"], b["test_acc"])
    sa, sb = (torch.load(tmp_path / d / "model.pt", weights_only=False)["state_dict"] for d in ("full", "run"))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # resuming at the same --epochs trains nothing more
    again = _train(tmp_path, "run", "--epochs", "20", "--runs", "2", "--resume")
    assert again["epochs_run"] == 40 and again["test_acc"] == longer["test_acc"]
    assert not list((tmp_path / "run").glob("*.tmp-*"))


def test_read_only_run_folder_is_refused(tmp_path, rng, monkeypatch):
    """Finding 6: -o inside a read-only folder. Running as root, mode 0555 does not stop writes, so
    there the folder is made read-only to gnnprep by denying os.access write permission on it (what
    the kernel answers for a read-only mount, EROFS, even to root); otherwise chmod does it."""
    write_features(tmp_path / "f.h5", rng, n=40, d=8, K=2)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):   # root
            real = os.access

            def access(p, mode, **kw):
                if mode & os.W_OK and os.path.exists(p) and os.path.samefile(p, ro):
                    return False
                return real(p, mode, **kw)

            monkeypatch.setattr(os, "access", access)
        before = snapshot(tmp_path)
        r = run(["train", "sgc", tmp_path / "f.h5", "-o", ro / "run", *BASE])
        assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0] == f"Error: {ro / 'run'}: folder {ro} is not writable; expected a writable run folder"
        assert snapshot(tmp_path) == before
    finally:
        ro.chmod(0o755)


def test_an_interrupted_run_says_its_checkpoint_is_kept(tmp_path, rng, monkeypatch):
    """Dogfood finding: an interrupted train said "no output was written" while checkpoint.pt was kept
    and --resume continued from it; its one line now says so."""
    from gnnprep.train import trainer

    write_features(tmp_path / "f.h5", rng, n=40, d=8, K=2)
    real, saved = trainer.save_torch, []

    def save_then_interrupt(obj, path, *a, **k):
        real(obj, path, *a, **k)
        saved.append(path)
        if path.name == "checkpoint.pt" and len(saved) >= 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "save_torch", save_then_interrupt)
    r = run(["train", "lc-gcn", tmp_path / "f.h5", "-o", tmp_path / "run", "--hidden", "8", "--batch-size", "16",
             "--dropout", "0.3", "--epochs", "10", "--checkpoint-every", "0", "--quiet"])
    assert r.exit_code == 130
    (line,) = r.stderr.strip().splitlines()
    assert "checkpoint in" in line and "--resume" in line and (tmp_path / "run" / "checkpoint.pt").is_file()
    monkeypatch.setattr(trainer, "save_torch", real)
    assert _train(tmp_path, "run", "--epochs", "10", "--resume")["epochs_run"] == 10
