import atexit
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

os.environ.setdefault("OUTDATED_IGNORE", "1")
# a calibration profile this machine's user saved (gnnprep calibrate) changes plans: the tests run on
# the built-in defaults, from an empty configuration folder of their own (inherited by subprocesses)
os.environ["GNNPREP_CONFIG"] = tempfile.mkdtemp(prefix="gnnprep-test-config-")
atexit.register(shutil.rmtree, os.environ["GNNPREP_CONFIG"], ignore_errors=True)
# importing ogb starts a PyPI version check unless `outdated` cannot be imported: block it for
# the whole test session, whichever test imports ogb first
sys.modules.setdefault("outdated", None)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: one intra-op thread is faster and immune to a busy second core."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_configure(config):
    """With test workers (pytest-xdist's ``-n``), fill numba's kernel cache once before they start
    (tests/warm_kernels.py: two halves side by side), so the workers and the processes tests start
    load the kernels instead of each compiling them. Quick when the cache is warm already."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    folder = tempfile.mkdtemp(prefix="gnnprep-warm-")
    try:
        procs = [subprocess.Popen([sys.executable, os.path.join(here, "warm_kernels.py"), half, folder],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
                 for half in ("precompute", "graphs")]
        for p in procs:
            p.wait(timeout=900)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
