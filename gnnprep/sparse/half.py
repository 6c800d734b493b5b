"""float32 ↔ float16 on the writer's and reader's own thread, fused with the copies they make.

``--dtype float16`` halves what a run writes, but the conversions were numpy's and HDF5's: the
writer gathered a piece of a hop back to the stored order in float32 (a copy of the piece), cast
it (``astype``: 0.32-0.45 s for 179M values, 2.78M rows × 64 columns, one thread) and scanned it
for overflow; reading a hop back for ``--hdg`` (HDF5's float16 → float32 conversion) took 0.86 s
where the raw read takes 0.09 s. A float16 run of papers100M's shape at 1/40 (``--rows all``,
K = 2) then took longer than a float32 one. Here the conversion is done in the same pass as the
gather and the overflow check (:func:`take_rows_half_finite`, :func:`half_finite`: 0.31 s against
0.70 s for the gather and the cast, the conversion alone 0.17 s), as selects LLVM vectorises
(:func:`half_bits`), and the widening back is exact (:func:`widen_half`: 0.11 against 0.19 s;
every binary16 value is a float32).

Rounding is IEEE 754's to nearest, ties to even, as numpy's ``npy_floatbits_to_halfbits`` does
it: every one of the 2^32 float32 patterns gives numpy's binary16 bits (checked once; the tests
check every tie between halves, the subnormal boundaries and the overflow edge); values of magnitude
≥ 65520 become ±inf, which the checks report as an overflow; NaN stays NaN (quiet, its payload not
kept: a NaN is an error wherever a run writes one).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from gnnprep.sparse.kernels import GATHER_AHEAD
from gnnprep.sparse.prefetch import prefetch_row


@intrinsic
def _bits(typingctx, x):
    """The bit pattern of a float32 as a uint32 (LLVM's bitcast: no memory, vectorisable)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def _float(typingctx, x):
    """The float32 of a uint32 bit pattern."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


U32 = np.uint32


@njit(inline="always", nogil=True, cache=True)
def half_bits(v):
    """The binary16 bits (a uint32) of the float32 ``v``, rounded to nearest, ties to even, as
    selects LLVM vectorises (Giesen's float_to_half_fast3_rtne): |v| in the normal halves' range,
    the exponent rebiased and the 13 dropped bits rounded by adding 0xFFF and the last kept bit (a
    carry rounds up into the exponent, up to inf at 65520); |v| < 2^−14, a subnormal half or zero,
    by the float addition |v| + 0.5, whose last place is 2^−24, a subnormal half's (the FPU rounds
    to nearest even), less 0.5's bits; |v| ≥ 2^16 or inf: inf; NaN: a quiet NaN. Checked against
    numpy's ``npy_floatbits_to_halfbits`` on all 2^32 patterns (NaN as NaN)."""
    f = _bits(v)
    sign = (f >> U32(16)) & U32(0x8000)
    a = f & U32(0x7FFFFFFF)
    normal = (a + U32(0xC8000FFF) + ((a >> U32(13)) & U32(1))) >> U32(13)   # a − (112 << 23) + 0xFFF + odd
    tiny = _bits(np.float32(abs(v) + np.float32(0.5))) - U32(0x3F000000)
    h = tiny if a < U32(0x38800000) else normal
    h = (U32(0x7E00) if a > U32(0x7F800000) else U32(0x7C00)) if a >= U32(0x47800000) else h
    return U32(sign | h)


@njit(inline="always", nogil=True, cache=True)
def _row_to_half(src, dst) -> int:
    """dst[j] = half_bits(src[j]) (``src`` float32, ``dst`` uint16); the number of values that are
    inf or NaN as halves."""
    bad = U32(0)
    for j in range(src.shape[0]):
        h = half_bits(src[j])
        dst[j] = np.uint16(h)
        bad += U32((h & U32(0x7C00)) == U32(0x7C00))
    return bad


@njit(nogil=True, cache=True)
def _take_rows_half(x, idx, out) -> bool:
    d = x.shape[1]
    flat = x.reshape(x.size)
    n = len(idx)
    bad = 0
    for i in range(n):
        if i + GATHER_AHEAD < n:   # (the row GATHER_AHEAD on, as kernels.take_rows_finite)
            prefetch_row(flat, idx[i + GATHER_AHEAD] * d, d)
        bad += _row_to_half(x[idx[i]], out[i])
    return bad == 0


@njit(nogil=True, cache=True)
def _rows_half(x, out) -> bool:
    bad = 0
    for i in range(x.shape[0]):
        bad += _row_to_half(x[i], out[i])
    return bad == 0


@njit(nogil=True, cache=True)
def _widen(h, out) -> None:
    """out = float32(h) (Giesen's half_to_float): the 15 bits shifted into place and the exponent
    rebiased; inf and NaN moved up to float32's top exponent; a subnormal half m · 2^−24 made by
    the float subtraction (2^−14 + m · 2^−24) − 2^−14, exact."""
    for i in range(h.shape[0]):
        src = h[i]
        dst = out[i]
        for j in range(src.shape[0]):
            v = U32(src[j])
            u = ((v & U32(0x7FFF)) << U32(13)) + U32(112 << 23)
            e = v & U32(0x7C00)
            u = u + U32(112 << 23) if e == U32(0x7C00) else u
            f = _float(u)
            f = np.float32(_float(u + U32(1 << 23)) - np.float32(2.0**-14)) if e == U32(0) else f
            dst[j] = _float(_bits(f) | ((v & U32(0x8000)) << U32(16)))


def take_rows_half_finite(x: np.ndarray, idx: np.ndarray, out: np.ndarray) -> bool:
    """out[i] = float16(x[idx[i]]) (``x`` float32 rows, ``out`` float16, C-contiguous) on one thread,
    and whether every value is finite as a half: the hop writer's gather back to the stored order,
    its conversion and its overflow check in one pass."""
    return bool(_take_rows_half(x, idx, out.view(np.uint16)))


def half_finite(x: np.ndarray, out: np.ndarray) -> bool:
    """out[:] = float16(x) (2-D, same shape; ``x`` float32, rows of any stride; ``out`` C-contiguous)
    on one thread, and whether every value is finite as a half."""
    return bool(_rows_half(x, out.view(np.uint16)))


def widen_half(h: np.ndarray, out: np.ndarray) -> None:
    """out[:] = float32(h) (2-D, same shape; ``h`` float16): exact, on one thread."""
    _widen(h.view(np.uint16), out)


def converts(src, dst) -> bool:
    """Whether these kernels convert ``src`` values into ``dst`` (float32 into float16)."""
    return np.dtype(src) == np.float32 and np.dtype(dst) == np.float16


def copy_finite(src: np.ndarray, out: np.ndarray) -> bool:
    """out[:] = src in ``out``'s dtype (float32 → float16 by :func:`half_finite`, else numpy's cast),
    and whether every value of ``out`` is finite."""
    if converts(src.dtype, out.dtype) and src.ndim == 2:
        return half_finite(src, out)
    with np.errstate(over="ignore"):
        out[...] = src
    return bool(np.isfinite(out).all())


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels a float16 run uses."""
    x = np.ones((2, 2), dtype=np.float32)
    h = np.empty((2, 2), dtype=np.float16)
    take_rows_half_finite(x, np.array([1, 0], dtype=np.int64), h)
    half_finite(x, h)
    widen_half(h, x)
