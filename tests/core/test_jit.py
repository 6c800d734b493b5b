"""First-use compilation said aloud (gnnprep.core.jit.compiling): the stage is reported when numba
compiles a kernel inside the body (a cache miss), not when it loads one it has compiled before."""

import numpy as np
from numba import njit

from gnnprep.core.jit import compiling


def _calls():
    got = []
    return got, lambda stage, done, total: got.append((stage, done, total))


def test_a_kernel_compiled_in_the_body_is_said_once_and_closed():
    @njit(cache=False)
    def twice(x):
        return 2 * x

    @njit(cache=False)
    def plus_one(x):   # a second compile in the same body: said once
        return twice(x) + 1

    got, progress = _calls()
    with compiling(progress, "the kernels") as jit:
        assert plus_one(np.int64(3)) == 7 and twice(np.float64(1.5)) == 3.0
    stage = "compiling the kernels (first run only)"
    assert got == [(stage, 0, None), (stage, 1, 1)]
    assert jit["compiled"] == 2 and 0 < jit["compile_seconds"] <= jit["seconds"]   # twice(int64) inside plus_one


def test_a_kernel_already_compiled_says_nothing():
    @njit(cache=False)
    def triple(x):
        return 3 * x

    triple(np.int64(1))
    got, progress = _calls()
    with compiling(progress, "the kernels") as jit:
        assert triple(np.int64(2)) == 6
    assert got == [] and jit["compiled"] == 0 and jit["compile_seconds"] == 0.0
