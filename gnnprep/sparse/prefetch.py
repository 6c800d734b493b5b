"""A software prefetch for numba kernels: ``prefetch(array, i)`` asks the CPU to start loading
``array[i]`` into cache and returns at once (LLVM's ``llvm.prefetch``: read, high locality, data
cache). It never faults and changes no value, so a kernel that uses it computes exactly what it
computes without it; it only pays where a loop's loads are random and their addresses are known a
few dozen iterations ahead (label propagation's neighbour labels: about 1.8x faster sweeps on a
5.5M-node graph whose 22 MB label array misses the cache)."""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)


@intrinsic
def prefetch(typingctx, array, index):
    """Prefetch ``array[index]`` (a 1-d array, an integer index) for reading."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        address = builder.bitcast(builder.gep(data, [args[1]]), _I8P)
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
        fn = builder.module.globals.get("llvm.prefetch.p0i8") or ir.Function(builder.module, fnty, "llvm.prefetch.p0i8")
        # rw = 0 (read), locality = 3 (keep in all cache levels), cache type = 1 (data)
        builder.call(fn, [address, ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


@njit(inline="always", nogil=True, cache=True)
def prefetch_row(af, start, d):
    """Prefetch the d values of ``af`` (a flattened 2-d array) from ``start``: the first, the last
    and every 64-byte line between (float32: 16 values a line)."""
    prefetch(af, start)
    for k in range(16, d - 1, 16):
        prefetch(af, start + k)
    prefetch(af, start + d - 1)
