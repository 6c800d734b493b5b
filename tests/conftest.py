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


# Modules whose tests run gnnprep in child processes (torchrun, make, killed and resumed commands,
# the corruption trials), longest first. On a fresh clone numba's on-disk cache is empty, and every
# child compiles each kernel it runs that is not cached yet: run first, the corruption test took
# 115 s of a cold suite against 17 s once the in-process tests had filled the cache. So they run
# last, after the in-process tests have compiled the kernels into the cache the children read.
RUN_LAST = ("test_corruption", "test_two_nodes", "test_pipeline_mk", "test_distributed_train", "test_tune",
            "test_distributed", "test_resume", "test_tune_pool_shutdown", "test_write_failures",
            "test_faults_round4_pipeline_mk", "test_late_signals", "test_kill")


def pytest_collection_modifyitems(config, items):
    """Tests of :data:`RUN_LAST`'s modules moved to the end, in that list's order (a stable sort:
    each module's own order kept). pytest-xdist hands tests out in this order."""
    rank = {name: i + 1 for i, name in enumerate(RUN_LAST)}
    def key(item) -> int:
        module = getattr(item, "module", None)
        return rank.get(module.__name__.rsplit(".", 1)[-1], 0) if module is not None else 0

    items.sort(key=key)
