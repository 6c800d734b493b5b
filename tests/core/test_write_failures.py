"""A write that fails part way (a full disk, a quota, ``ulimit -f``) ends every command with one
``Error:`` line and exit 1, and leaves no output (gnnprep.core.h5file).

Before: hdg crashed (SIGSEGV, exit 139) with h5py's tracebacks on a disk with a little room left, and
precompute and ingest under a file-size limit printed tracebacks (HDF5's failed flushes while h5py
freed its objects; a close that failed again; HDF5's exit handler closing a half-closed dataset).
The file-size limit (RLIMIT_FSIZE, which needs no root) makes the same failed writes as a full disk
at chosen sizes: early (metadata) and part way through the data.
"""

import os
import resource
import shutil
import subprocess
import sys

import pytest
from fixtures import run

KiB = 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    assert run(["ingest", "sample", "-o", d / "g.h5", "--quiet"]).exit_code == 0
    assert run(["precompute", d / "g.h5", "--hops", "1", "-o", d / "f.h5", "--quiet"]).exit_code == 0
    return d


COMMANDS = {   # name: (arguments before -o, the output's name, limits in KiB: where each crashed or printed
    # tracebacks before, early (metadata) or part way through the data)
    "ingest": (["ingest", "sample"], "o.h5", (200,)),
    "hag": (["hag", "{g}"], "o.h5", (16,)),
    "precompute": (["precompute", "{g}", "--hops", "2"], "o.h5", (400,)),
    "hdg-shells": (["hdg", "{g}", "--select", "hop-shells:2"], "o.h5", (400,)),
    "hdg-walks": (["hdg", "{g}", "--select", "random-walk:walks=10,length=3,topk=8"], "o.h5", (16,)),
    "hdg-anchors": (["hdg", "{g}", "--select", "anchors:sets=4,size=8"], "o.h5", (16,)),
    "train": (["train", "sgc", "{f}", "--epochs", "2"], "run", (16,)),
}
CASES = [(name, kib) for name, (_, _, limits) in COMMANDS.items() for kib in limits]


def _limited(nbytes: int):
    def start() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return start


@pytest.mark.parametrize("name,kib", CASES, ids=[f"{n}-{k}KiB" for n, k in CASES])
def test_a_write_past_the_file_size_limit_is_one_error_line_and_leaves_nothing(tmp_path, files, name, kib):
    args, output, _ = COMMANDS[name]
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(g=files / "g.h5", f=files / "f.h5") for a in args] + ["-o", str(out / output), "--quiet"]
    p = subprocess.run([sys.executable, "-m", "gnnprep", *argv], capture_output=True, text=True,
                       preexec_fn=_limited(kib * KiB), timeout=300, cwd=tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "file too large" in lines[0] and "ulimit -f" in lines[0], lines[0]
    assert sorted(os.listdir(out)) == [], lines[0]   # no output, no temporary or partial file


WRITER = r"""
import os, resource, sys
import numpy as np
from gnnprep.core import h5file
from gnnprep.core.output import is_disk_full
path, how = sys.argv[1], sys.argv[2]
h5file.record_dealloc_failures()
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
try:
    with h5file.writing(path) as f:
        chunked = f.create_dataset("c", shape=(1 << 20,), dtype="f4", chunks=(1 << 14,))
        plain = f.create_dataset("p", shape=(1 << 20,), dtype="f4")
        if how == "chunked":
            for i in range(0, 1 << 20, 1 << 14):
                chunked[i:i + (1 << 14)] = 1.0
        else:
            plain[:] = 1.0
        del chunked, plain   # freed inside the block: a failed flush there is remembered, not printed
    print("no failure")
except OSError as e:
    print("errno", e.errno, is_disk_full(e))
sys.stdout.flush()
os._exit(0) if h5file.left_broken() else None
"""


@pytest.mark.parametrize("how", ["chunked", "contiguous"])
def test_writing_turns_a_failed_write_into_one_oserror_with_its_errno(tmp_path, how):
    p = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path / "x.h5"), how], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["errno", "27", "True"], (p.stdout, p.stderr[-2000:])
    assert p.stderr == "", p.stderr[-2000:]   # nothing printed by h5py's deallocations


def _mount_tmpfs(where, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_a_disk_with_a_little_room_left_is_one_error_line_for_every_writer(tmp_path, files, left_kib=100):
    # the case that crashed: hdg on a disk that fills part way through its levels (full disks, where
    # the first write fails, are tests/precompute/test_faults_precompute.py's)
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "3m"):
        pytest.skip("needs root and a mountable tmpfs to fill a disk")
    try:
        for name in ("hdg-shells", "hdg-walks", "hdg-anchors", "precompute"):
            args, output, _ = COMMANDS[name]
            for p in small.iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            free = shutil.disk_usage(small).free
            with open(small / "filler", "wb") as f:
                f.write(b"\0" * max(0, free - left_kib * KiB))
            argv = [a.format(g=files / "g.h5", f=files / "f.h5") for a in args] + ["-o", str(small / output), "-q"]
            p = subprocess.run([sys.executable, "-m", "gnnprep", *argv], capture_output=True, text=True, timeout=300)
            left = sorted(x.name for x in small.iterdir())
            if p.returncode == 0:   # it fitted
                assert left == sorted(["filler", output] + (["o.order-stored.h5"] if name == "hag" else [])), left
                continue
            lines = p.stderr.strip().splitlines()
            assert p.returncode == 1, (name, p.returncode, p.stderr[-2000:])
            assert len(lines) == 1 and "no space left on device" in lines[0], (name, p.stderr[-2000:])
            assert left == ["filler"], (name, left)
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


LIBRARY = r"""
import resource, sys
from gnnprep.core import h5file
{imports}
args = sys.argv[2:]
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]) << 10, int(sys.argv[1]) << 10))
try:
    {call}
except Exception as e:
    print(type(e).__name__, "file too large" in str(e))
print("half-closed", bool(h5file._broken_files))
"""


def _library_call(imports: str, call: str, kib: int, *args):
    """A program that imports ``imports``, runs ``call`` (``args`` its ``args``) under a file-size limit of
    ``kib`` KiB, catches the error and ends normally: its exit status and output."""
    return subprocess.run([sys.executable, "-c", LIBRARY.format(imports=imports, call=call), str(kib), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("select,kib", [("hop-shells:2", 400), ("random-walk:walks=10,length=3,topk=8", 100)])
def test_a_program_that_catches_the_hdg_builders_failed_write_ends_normally(tmp_path, files, select, kib):
    # the HDG's levels flush their datasets as they finish: flushed only as h5py freed them, a failed
    # write left a half-closed id, and HDF5's exit handler crashed on it (exit 139) in a program that
    # had caught the error (the command line ends past that handler)
    p = _library_call("from gnnprep.hdg.builder import build\nfrom gnnprep.hdg.select import parse_select",
                      "build(args[0], args[1], parse_select(args[2]))", kib, files / "g.h5", tmp_path / "o.h5", select)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.split() == ["GnnprepError", "True", "half-closed", "False"], (p.stdout, p.stderr[-2000:])


def test_a_program_that_catches_the_hag_searchs_failed_write_ends_normally(tmp_path, files):
    # the search's partial file flushes each dataset it writes a block into (they were temporaries:
    # freed unflushed, a failed write left a half-closed id, and the abandoned file's close crashed)
    p = _library_call("from gnnprep.hag.builder import build", "build(args[0], args[1])", 16,
                      files / "g.h5", tmp_path / "o.h5")
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.split() == ["GnnprepError", "True", "half-closed", "False"], (p.stdout, p.stderr[-2000:])
    assert p.stderr == "", p.stderr[-2000:]


PRECOMPUTE = "from gnnprep.precompute.config import PrecomputeConfig\nfrom gnnprep.precompute.run import precompute"


@pytest.mark.parametrize("kib", [16, 400])
def test_a_program_that_catches_precomputes_failed_write_ends_normally(tmp_path, files, kib):
    # /rows, /labels and /splits were written through datasets freed unflushed (half-closed ids:
    # HDF5's exit handler crashed the program at its end)
    p = _library_call(PRECOMPUTE, 'precompute(args[0], args[1], PrecomputeConfig(hops=2, device="cpu"))', kib,
                      files / "g.h5", tmp_path / "o.h5")
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.split() == ["GnnprepError", "True", "half-closed", "False"], (p.stdout, p.stderr[-2000:])


SMALL_WRITES = {   # case: (imports, call)
    "hag-in-memory": ("from gnnprep.hag import HagConfig\nfrom gnnprep.hag.builder import build",
                      'build(args[0], args[1], HagConfig(method="exact"))'),
    # precompute through a HAG it relabels to the node order, keeping the copy beside it
    "precompute-hag-copy": (PRECOMPUTE, 'precompute(args[0], args[1], PrecomputeConfig(hops=2, device="cpu", '
                                        'hag=args[2], reorder="community"))'),
}


@pytest.mark.parametrize("case,kib", [("hag-in-memory", 8), ("precompute-hag-copy", 8)])
def test_a_program_that_catches_a_failed_write_of_small_datasets_ends_normally(tmp_path, files, case, kib):
    # datasets written from an array in one call (the HAG's in-memory writers, the HAG relabelled for a
    # run, graph stores' splits, features' rows) wait in their sieve buffers until flushed: as
    # unassigned temporaries they were flushed only as h5py freed them, a failed write left a
    # half-closed id and the program crashed (exit 139) or printed h5py's tracebacks at its exit
    hag = tmp_path / "hag.h5"
    if case == "precompute-hag-copy":
        assert run(["hag", files / "g.h5", "-o", hag, "--quiet"]).exit_code == 0
        for kept in tmp_path.glob("hag.order-*.h5"):
            kept.unlink()   # the run relabels it again, under the limit
    p = _library_call(*SMALL_WRITES[case], kib, files / "g.h5", tmp_path / "o.h5", hag)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.split() == ["GnnprepError", "True", "half-closed", "False"], (p.stdout, p.stderr[-2000:])
    assert p.stderr == "", p.stderr[-2000:]
