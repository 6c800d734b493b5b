"""An output replaces what is at its path, so ``-o`` naming a device, a pipe or a symlink to one is
refused before anything is written, never replaced by a regular file (issue 23, item 3)."""

import os
import stat

import pytest
from fixtures import make_store, run


def _commands(store):
    return {
        "ingest": ["ingest", str(store)],
        "hag": ["hag", str(store)],
        "hdg": ["hdg", str(store), "--select", "hop-shells:2"],
        "precompute": ["precompute", str(store), "--hops", "1", "--device", "cpu"],
    }


def _fifo(tmp_path):
    p = tmp_path / "out.h5"
    os.mkfifo(p)
    return p, stat.S_ISFIFO


def _link_to_dev_null(tmp_path):
    if not os.path.exists("/dev/null"):
        pytest.skip("this system has no /dev/null to link to (the FIFO case still runs)")
    p = tmp_path / "out.h5"
    p.symlink_to("/dev/null")
    return p, stat.S_ISCHR


KINDS = {"fifo": _fifo, "symlink-to-dev-null": _link_to_dev_null}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("command", ["ingest", "hag", "hdg", "precompute"])
def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path, rng, command, kind):
    store, *_ = make_store(tmp_path, rng)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out, is_kind = KINDS[kind](out_dir)
    r = run(_commands(store)[command] + ["-o", str(out)])
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and "expected a regular file or a new path" in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert is_kind(os.stat(out).st_mode)          # still the pipe / still the device
    assert sorted(p.name for p in out_dir.iterdir()) == ["out.h5"]   # nothing else left


@pytest.mark.parametrize("length", [250, 255])
@pytest.mark.parametrize("command", ["ingest", "hag", "hdg", "precompute"])
def test_an_output_name_as_long_as_the_file_system_takes_works(tmp_path, rng, command, length):
    """The temporary and partial files beside an output have longer names than it; an output name
    near NAME_MAX (255 bytes) still works (issue 23, item 7)."""
    store, *_ = make_store(tmp_path, rng)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / ("a" * (length - 3) + ".h5")
    r = run(_commands(store)[command] + ["-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == [out.name]


def test_a_folder_where_nothing_can_be_created_is_one_error_line(tmp_path, rng, monkeypatch):
    """The output path's checks pass for root in a folder where no file can be created (``/proc``):
    the lock file beside the output raised a traceback (a dogfood finding); now one line, exit 1."""
    import builtins

    from gnnprep.core import output

    store = make_store(tmp_path, rng)[0]
    real_open = builtins.open

    def refusing(path, *a, **kw):   # (as /proc answers a root user's create)
        if str(path).endswith(".partial.lock"):
            raise FileNotFoundError(2, "No such file or directory")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(output, "open", refusing, raising=False)
    r = run(["precompute", str(store), "-o", str(tmp_path / "f.h5"), "--hops", "1", "--device", "cpu"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert r.stderr.strip().splitlines() == [f"Error: {tmp_path / 'f.h5'}: cannot create files beside the output "
                                             "(f.h5.partial.lock: No such file or directory); expected a writable folder"]
    assert list(tmp_path.glob("f.h5*")) == []
