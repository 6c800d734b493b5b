"""Under an address-space limit too small for numba's and torch's threads (``ulimit -v``), a command
is one Error line, exit 1, before any library starts a thread (issue 23, item 8: it used to spin
until killed, or print a libgomp line without an Error)."""

import subprocess
import sys

import pytest

resource = pytest.importorskip("resource", reason="address-space limits (RLIMIT_AS) exist on POSIX systems only")


def test_a_small_address_space_is_one_error_line(tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, resource.RLIM_INFINITY))

    out = tmp_path / "f.h5"
    r = subprocess.run([sys.executable, "-m", "gnnprep", "precompute", "sample", "--hops", "1", "-o", str(out)],
                       capture_output=True, text=True, preexec_fn=limit, timeout=120)
    assert r.returncode == 1 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the address space is limited to 400.0 MiB"), r.stderr
    assert not out.exists()
