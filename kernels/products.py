"""Block products on a tape, each one compiled call on NumPy's BLAS.

An eager ``X @ W`` on small blocks paid for ``np.matmul`` (0.9 us on an
(8, 16) by (16, 16) product) and for ``np.errstate`` around it (0.75 us: its
floating-point checks would warn on the IEEE results fastad keeps), then a
second compiled call to count the product's zeros and non-finite elements
for its recheck (``fastad/core/reach.py``). The kernels here do each step in
one call, through :func:`array_helpers.gemm`: the BLAS routine ``np.matmul``
picks for the shapes, with the arguments it passes, so the products are
NumPy's bit for bit (and generated code's), and no warning is raised.

``matmul``'s VJP and ``linear_relu``'s (mask, bias sum and products) are one
call each; ``linear``'s runs its bias sum, then :func:`counted_product` per
product, which any 2-D product of an adjoint with values (``reach.reach_matmul``)
calls. A product's VJP returns its products with their counts; the front end
settles the reach of the rare product that holds a zero or a non-finite
element (``reach.product_reach``), as it does for NumPy's products.

Kernels trust their input: C-contiguous float64 matrices of matching
shapes (``fastad/core/product_rules.py`` checks, and keeps NumPy for the
rest). A factor that is not wanted is an empty (0, 0) array, with counts 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from .array_helpers import gemm
from .arrays import FloatArray
from .block_reach import zeros_and_nonfinite
from .fused import add_bias, add_bias_relu, relu_backward
from .jit import kernel

# One signature per kernel, its arrays read-only: a call converts a writable array to
# it, so each compiles once (a tape's values are read-only, adjoints often writable).
_IN2 = types.Array(types.float64, 2, "C", readonly=True)
_IN1 = types.Array(types.float64, 1, "C", readonly=True)
_OUT2, _OUT1, _COUNT, _FLAG = types.float64[:, ::1], types.float64[::1], types.int64, types.boolean
_COUNTED = (_OUT2, _COUNT, _COUNT)
_tuple: Any = types.Tuple


@kernel(signatures=(_OUT2(_IN2, _FLAG, _IN2, _FLAG),))
def product(
    A: FloatArray, trans_a: bool | np.bool_, B: FloatArray, trans_b: bool | np.bool_
) -> FloatArray:
    """``op(A) @ op(B)``, a fresh C-contiguous matrix (op a transpose where asked)."""
    m = A.shape[1] if trans_a else A.shape[0]
    n = B.shape[0] if trans_b else B.shape[1]
    C = np.empty((m, n))
    gemm(trans_a, trans_b, A, B, C)
    return C


@kernel(signatures=(_tuple(_COUNTED)(_IN2, _FLAG, _IN2, _FLAG),))
def counted_product(
    A: FloatArray, trans_a: bool | np.bool_, B: FloatArray, trans_b: bool | np.bool_
) -> tuple[FloatArray, int, int]:
    """:func:`product` with its count of zeros and of non-finite elements."""
    C = product(A, trans_a, B, trans_b)
    zeros, nonfinite = zeros_and_nonfinite(C)
    return C, zeros, nonfinite


@kernel(signatures=(_OUT2(_IN2, _IN2, _IN1, _FLAG),))
def linear(X: FloatArray, W: FloatArray, b: FloatArray, relu: bool) -> FloatArray:
    """``X @ W + b``, with the ReLU where ``relu``: one product, one pass over it."""
    Y = product(X, np.bool_(False), W, np.bool_(False))
    if relu:
        add_bias_relu(Y, b)
    else:
        add_bias(Y, b)
    return Y


@kernel(signatures=(_tuple(_COUNTED + _COUNTED)(_IN2, _IN2, _IN2, _FLAG, _FLAG),))
def matmul_vjp(
    A: FloatArray, B: FloatArray, G: FloatArray, want_a: bool, want_b: bool
) -> tuple[FloatArray, int, int, FloatArray, int, int]:
    """``dA = G @ B.T`` and ``dB = A.T @ G`` for ``A @ B`` and its adjoint ``G``, each
    with its counts (an empty product, counts 0, where not wanted)."""
    d_a, zeros_a, nonfinite_a = np.empty((0, 0)), 0, 0
    d_b, zeros_b, nonfinite_b = np.empty((0, 0)), 0, 0
    if want_a:
        d_a, zeros_a, nonfinite_a = counted_product(G, np.bool_(False), B, np.bool_(True))
    if want_b:
        d_b, zeros_b, nonfinite_b = counted_product(A, np.bool_(True), G, np.bool_(False))
    return d_a, zeros_a, nonfinite_a, d_b, zeros_b, nonfinite_b


@kernel(
    signatures=(_tuple((_OUT2, _OUT1, *_COUNTED, *_COUNTED))(_IN2, _IN2, _IN2, _IN2, _FLAG, _FLAG),)
)
def linear_relu_vjp(
    X: FloatArray, W: FloatArray, H: FloatArray, G: FloatArray, want_x: bool, want_w: bool
) -> tuple[FloatArray, FloatArray, FloatArray, int, int, FloatArray, int, int]:
    """The VJP of ``H = relu(X @ W + b)``: ``(dZ, db, dX, zeros, nonfinite, dW, zeros,
    nonfinite)``, ``dZ`` the adjoint behind the ReLU, which the products' recheck reads."""
    dZ, db = relu_backward(H, G)
    dX, zeros_x, nonfinite_x, dW, zeros_w, nonfinite_w = matmul_vjp(X, W, dZ, want_x, want_w)
    return dZ, db, dX, zeros_x, nonfinite_x, dW, zeros_w, nonfinite_w
