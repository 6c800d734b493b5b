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
