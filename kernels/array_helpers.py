"""The array-level helpers of generated code for functions of arrays, compiled once.

The BLAS routine ``np.matmul`` picks for a product's shapes (:func:`gemm`,
:func:`gemv`, :func:`dot`, calling NumPy's own ``cblas_dgemm``,
``cblas_dgemv`` and ``cblas_ddot``: ``blas.py``) and the bound that spares a
product's recheck (:func:`bounded`); NumPy's summation order is
``summation.py``'s. Every generated module of
``fastad.kernels.array_source`` calls them once per array, never per element
(the softmax family's HVP sums a row at a time), so they live here, in
fastad's kernel cache, instead of in each module's text: a module's cold
compile then skips them (about 2 s of a small program's 3.5 s on the 2-core
machine). A generated module's text carries the stamp of fastad's kernel
files, so a change to these is a new module, never one compiled against the
old helpers.

Kernels trust their input: C-contiguous float64 arrays of matching shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from .arrays import FloatArray
from .blas import NO_TRANS, ROW_MAJOR, SYMBOLS, TRANS
from .jit import kernel

_i = types.int64
_p = types.voidptr
_f = types.float64
dgemm: Any = types.ExternalFunction(
    SYMBOLS["dgemm"], types.void(_i, _i, _i, _i, _i, _i, _f, _p, _i, _p, _i, _f, _p, _i)
)
dgemv: Any = types.ExternalFunction(
    SYMBOLS["dgemv"], types.void(_i, _i, _i, _i, _f, _p, _i, _p, _i, _f, _p, _i)
)
ddot: Any = types.ExternalFunction(SYMBOLS["ddot"], types.float64(_i, _p, _i, _p, _i))


@kernel
def gemm(
    trans_a: bool | np.bool_, trans_b: bool | np.bool_, A: FloatArray, B: FloatArray, C: FloatArray
) -> None:
    """``C = op(A) @ op(B)`` for C-contiguous matrices, op a transpose where asked, with
    the BLAS routine np.matmul picks: ``ddot`` when ``C`` is one element, ``dgemv`` when
    it is one row or one column, else ``dgemm``; the vectors are passed with their
    strides, as NumPy passes them."""
    m = A.shape[1] if trans_a else A.shape[0]
    k = A.shape[0] if trans_a else A.shape[1]
    n = B.shape[0] if trans_b else B.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        C[:, :] = 0.0
        return
    a_step = A.shape[1] if trans_a else 1  # along a row of op(A)
    b_step = 1 if trans_b else B.shape[1]  # along a column of op(B)
    if m == 1 and n == 1:
        C[0, 0] = ddot(k, A.ctypes, a_step, B.ctypes, b_step)
    elif n == 1:  # op(A) times a column
        dgemv(
            ROW_MAJOR,
            TRANS if trans_a else NO_TRANS,
            A.shape[0],
            A.shape[1],
            1.0,
            A.ctypes,
            A.shape[1],
            B.ctypes,
            b_step,
            0.0,
            C.ctypes,
            1,
        )
    elif m == 1:  # a row times op(B): op(B)^T times the row
        dgemv(
            ROW_MAJOR,
            NO_TRANS if trans_b else TRANS,
            B.shape[0],
            B.shape[1],
            1.0,
            B.ctypes,
            B.shape[1],
            A.ctypes,
            a_step,
            0.0,
            C.ctypes,
            1,
        )
    else:
        dgemm(
            ROW_MAJOR,
            TRANS if trans_a else NO_TRANS,
            TRANS if trans_b else NO_TRANS,
            m,
            n,
            k,
            1.0,
            A.ctypes,
            A.shape[1],
            B.ctypes,
            B.shape[1],
            0.0,
            C.ctypes,
            n,
        )


@kernel
def gemv(trans: bool, A: FloatArray, x: FloatArray, y: FloatArray) -> None:
    """``y = op(A) @ x`` for a C-contiguous matrix: NumPy's cblas_dgemv, or ``ddot``
    where ``y`` is one element."""
    rows, columns = A.shape
    if y.size == 0:
        return
    if x.size == 0:
        y[:] = 0.0
        return
    if y.size == 1:
        y[0] = ddot(x.size, A.ctypes, columns if trans else 1, x.ctypes, 1)
        return
    dgemv(
        ROW_MAJOR,
        TRANS if trans else NO_TRANS,
        rows,
        columns,
        1.0,
        A.ctypes,
        max(1, columns),
        x.ctypes,
        1,
        0.0,
        y.ctypes,
        1,
    )


@kernel
def magnitude(a: FloatArray) -> int:
    """The bits of the largest ``|element|`` of ``a`` (an int64, ordered as the magnitudes
    are): at least those of inf where ``a`` holds an inf or a nan. One integer pass."""
    bits = a.reshape(a.size).view(np.int64)
    top = 0
    for i in range(bits.size):
        top = max(top, bits[i] & 0x7FFFFFFFFFFFFFFF)
    return top


@kernel
def bounded(P: FloatArray, Q: FloatArray) -> bool:
    """Whether every sum of products of an element of ``P`` and one of ``Q`` (at most
    ``P.size + Q.size`` terms) stays far below overflow, so the product BLAS makes of
    them holds no nan and no inf: both finite, and the count times the two largest
    magnitudes under 2^1000 (rounding can at most double a sum's bound)."""
    found = np.empty(2, np.int64)
    found[0], found[1] = magnitude(P), magnitude(Q)
    if found[0] >= 0x7FF0000000000000 or found[1] >= 0x7FF0000000000000:
        return False
    largest = found.view(np.float64)
    return (P.size + Q.size) * largest[0] * largest[1] < 2.0**1000


@kernel
def dot(x: FloatArray, y: FloatArray) -> float:
    """``x @ y`` for two vectors: NumPy's cblas_ddot."""
    if x.size == 0:
        return 0.0
    return ddot(x.size, x.ctypes, 1, y.ctypes, 1)
