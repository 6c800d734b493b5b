"""User code runs under the command contract (issue 23, item 5): however an operator file's code
leaves (``sys.exit`` at import, in the function, in the worker threads that compute per-entry
values, ``GeneratorExit``), the command fails with one ``Error:`` line naming the file, exit 1, and no
output; what it prints goes to stderr, so ``--json`` still prints exactly one object."""

import json

import pytest
from fixtures import make_store, run

EXITS = [
    ("import sys\nsys.exit(0)\ndef f(s, d, w):\n    return w\n", "running the operator file called sys.exit(0) (line 2)"),
    ("import sys\nsys.exit('bye')\ndef f(s, d, w):\n    return w\n", "called sys.exit('bye')"),
    ("import sys\ndef f(s, d, w):\n    sys.exit(0)\n", "f(src_deg, dst_deg, w) called sys.exit(0) (line 3)"),
    ("def f(s, d, w):\n    raise GeneratorExit('x')\n", "raised GeneratorExit"),
    # not a product of per-node factors: the per-entry values are computed in worker threads
    ("import sys\nimport numpy as np\ndef f(s, d, w):\n    if len(w) > 5000:\n        sys.exit(3)\n"
     "    return w / (s * d + (s > 3))\n", "called sys.exit(3)"),
]


def _ops(tmp_path, text):
    p = tmp_path / "ops.py"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,message", EXITS)
def test_user_code_that_exits_is_one_error_line(tmp_path, rng, text, message):
    store = make_store(tmp_path, rng, n=200, m=6000)[0]
    out = tmp_path / "f.h5"
    r = run(["precompute", str(store), "-o", str(out), "--operator-file", f"{_ops(tmp_path, text)}:f"])
    assert r.exit_code == 1 and r.stdout == "", (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and "ops.py" in lines[-1] and message in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("f.h5*"))


def test_what_user_code_prints_goes_to_stderr(tmp_path, rng):
    store = make_store(tmp_path, rng, n=200, m=6000)[0]
    text = "print('at import')\ndef f(s, d, w):\n    print('called', len(w))\n    return w / (s * d + (s > 3))\n"
    r = run(["precompute", str(store), "-o", str(tmp_path / "f.h5"), "--hops", "1", "--json",
             "--operator-file", f"{_ops(tmp_path, text)}:f"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["operators"] == ["f"]          # exactly one object on stdout
    assert "at import" in r.stderr and "called" in r.stderr


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "folder"])
def test_an_operator_file_that_is_not_a_regular_file_is_refused_unread(tmp_path, rng, target):
    import os

    store = make_store(tmp_path, rng, n=50)[0]
    if target == "fifo":
        target = tmp_path / "ops.fifo"
        os.mkfifo(target)
    elif target == "folder":
        target = tmp_path
    r = run(["precompute", str(store), "-o", str(tmp_path / "f.h5"), "--operator-file", f"{target}:f"])
    assert r.exit_code == 1 and "not a regular file" in r.stderr.strip().splitlines()[-1], r.stderr
    assert not list(tmp_path.glob("f.h5*"))


def test_the_file_runs_once_and_a_chdir_in_it_does_not_move_the_output(tmp_path, rng, monkeypatch):
    store = make_store(tmp_path, rng, n=60)[0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    log = tmp_path / "ran.txt"
    text = (f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write('x')\nos.chdir({str(elsewhere)!r})\n"
            "def f(s, d, w):\n    return w / (s + d)\ndef g(s, d, w):\n    return w\n")
    ops = _ops(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    r = run(["precompute", str(store), "-o", "f.h5", "--hops", "1",
             "--operator-file", f"{ops}:f", "--operator-file", f"{ops}:g"])
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "f.h5").exists() and not (elsewhere / "f.h5").exists()
    assert log.read_text() == "x"          # two functions of one file: the file ran once


def test_a_changed_helper_module_changes_the_run_key(tmp_path, monkeypatch):
    """The run key covers the user's own modules the operator file uses, so a partial output made
    with an old helper is never resumed with a new one (issue 23, item 4)."""
    from gnnprep.precompute.user_operators import load

    (tmp_path / "opshelper.py").write_text("SCALE = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ops = _ops(tmp_path, "import opshelper\nfrom opshelper import SCALE\ndef f(s, d, w):\n    return SCALE * w\n")
    first = load(f"{ops}:f")
    (tmp_path / "opshelper.py").write_text("SCALE = 3.0\n")
    second = load(f"{ops}:f")
    assert first.imports and first.imports[0][0].endswith("opshelper.py")
    assert first.sha256 != second.sha256 and first.file_sha256 == second.file_sha256
    (tmp_path / "plain").mkdir()
    plain = load(f"{_ops(tmp_path / 'plain', 'def f(s, d, w):' + chr(10) + '    return w' + chr(10))}:f")
    assert plain.sha256 == plain.file_sha256 and plain.imports == ()   # no helper: the file's hash, as before


def test_run_parts_computes_every_part_and_does_not_wait_for_a_hanging_one():
    """The per-entry values' threads (issue 23, item 5): every part once; the first error is raised
    while another part still hangs (daemon threads, never joined), a GnnprepError before others."""
    import threading
    import time

    from gnnprep.core.errors import GnnprepError
    from gnnprep.precompute.user_operators import run_parts

    out = [0] * 97
    run_parts(lambda i: out.__setitem__(i, out[i] + i * i), range(97), 4)
    assert out == [i * i for i in range(97)]
    run_parts(lambda i: None, [], 4)
    release = threading.Event()

    def work(i):
        if i == 0:
            release.wait(60)   # a hanging user function
        elif i == 1:
            raise ValueError("first")
        elif i == 2:
            raise GnnprepError("named")

    t0 = time.monotonic()
    with pytest.raises((GnnprepError, ValueError)):
        run_parts(work, range(8), 3)
    assert time.monotonic() - t0 < 30
    release.set()
