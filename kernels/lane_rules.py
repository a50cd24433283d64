"""The rules of one node over lanes (one column per point), one loop per op.

``values_lanes`` and ``values_and_partials_lanes``, for the lane sweeps
of compiled functions (``lane_sweeps.py``).

Made from kernels/optable.py by ``python -m fastad.kernels._generate``: do not edit.
"""

from __future__ import annotations

from math import (  # noqa: F401  (the generated rules' namespace)
    atan,
    atan2,
    copysign,
    cos,
    cosh,
    erf,
    exp,
    expm1,
    fabs,
    inf,
    isfinite,
    log,
    log1p,
    nan,
    pow,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)

from .arrays import FloatArray
from .jit import kernel
from .rule_helpers import (  # noqa: F401  (the generated rules' namespace)
    atan2_curvature,
    atan2_partial,
    atan2_second_mixed,
    max_partial,
    maximum,
    minimum,
    pow_partial_base,
    pow_partial_exponent,
    pow_second_base,
    pow_second_exponent,
    pow_second_mixed,
    relu,
    relu_partial,
    sigmoid,
    sign,
    softplus,
)


@kernel
def values_lanes(op: int, val: FloatArray, i: int, j: int, k: int, count: int) -> None:
    """Values of node ``i`` in lanes ``0:count``.

    Rows ``j`` and ``k`` of ``val`` hold the operands (``k`` is any row,
    e.g. a scratch row, for unary ops); one column per evaluation point.
    """
    if op == 2:  # add
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a + b
            val[i, lane] = out
        return
    if op == 3:  # sub
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a - b
            val[i, lane] = out
        return
    if op == 4:  # mul
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a * b
            val[i, lane] = out
        return
    if op == 5:  # div
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a / b
            val[i, lane] = out
        return
    if op == 6:  # neg
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = -a
            val[i, lane] = out
        return
    if op == 7:  # pow
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = pow(a, b)
            val[i, lane] = out
        return
    if op == 8:  # exp
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = exp(a)
            val[i, lane] = out
        return
    if op == 9:  # log
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = log(a)
            val[i, lane] = out
        return
    if op == 10:  # sqrt
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sqrt(a)
            val[i, lane] = out
        return
    if op == 11:  # sin
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sin(a)
            val[i, lane] = out
        return
    if op == 12:  # cos
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = cos(a)
            val[i, lane] = out
        return
    if op == 13:  # tanh
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = tanh(a)
            val[i, lane] = out
        return
    if op == 14:  # sigmoid
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sigmoid(a)
            val[i, lane] = out
        return
    if op == 15:  # relu
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = relu(a)
            val[i, lane] = out
        return
    if op == 16:  # abs
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = fabs(a)
            val[i, lane] = out
        return
    if op == 17:  # maximum
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = maximum(a, b)
            val[i, lane] = out
        return
    if op == 18:  # minimum
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = minimum(a, b)
            val[i, lane] = out
        return
    if op == 19:  # lt
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a < b else 0.0
            val[i, lane] = out
        return
    if op == 20:  # le
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a <= b else 0.0
            val[i, lane] = out
        return
    if op == 21:  # gt
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a > b else 0.0
            val[i, lane] = out
        return
    if op == 22:  # ge
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a >= b else 0.0
            val[i, lane] = out
        return
    if op == 23:  # eq
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a == b else 0.0
            val[i, lane] = out
        return
    if op == 24:  # ne
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a != b else 0.0
            val[i, lane] = out
        return
    if op == 25:  # pick
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = b if a != 0.0 else -0.0
            val[i, lane] = out
        return
    if op == 26:  # pick_not
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = -0.0 if a != 0.0 else b
            val[i, lane] = out
        return
    if op == 27:  # log1p
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = log1p(a)
            val[i, lane] = out
        return
    if op == 28:  # expm1
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = expm1(a)
            val[i, lane] = out
        return
    if op == 29:  # tan
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = tan(a)
            val[i, lane] = out
        return
    if op == 30:  # arctan
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = atan(a)
            val[i, lane] = out
        return
    if op == 31:  # arctan2
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = atan2(a, b)
            val[i, lane] = out
        return
    if op == 32:  # sinh
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sinh(a)
            val[i, lane] = out
        return
    if op == 33:  # cosh
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = cosh(a)
            val[i, lane] = out
        return
    if op == 34:  # erf
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = erf(a)
            val[i, lane] = out
        return
    if op == 35:  # softplus
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = softplus(a)
            val[i, lane] = out
        return
    if op == 36:  # sign
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sign(a)
            val[i, lane] = out
        return
    if op == 37:  # stop_gradient
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a
            val[i, lane] = out
        return
    return


@kernel
def values_and_partials_lanes(
    op: int, val: FloatArray, d0: FloatArray, d1: FloatArray, i: int, j: int, k: int, count: int
) -> None:
    """Values and local partials of node ``i`` in lanes ``0:count``.

    Rows ``j`` and ``k`` of ``val`` hold the operands (``k`` is any row,
    e.g. a scratch row, for unary ops); one column per evaluation point.
    """
    if op == 2:  # add
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a + b
            val[i, lane] = out
            d0[i, lane] = 1.0
            d1[i, lane] = 1.0
        return
    if op == 3:  # sub
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a - b
            val[i, lane] = out
            d0[i, lane] = 1.0
            d1[i, lane] = -1.0
        return
    if op == 4:  # mul
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a * b
            val[i, lane] = out
            d0[i, lane] = b
            d1[i, lane] = a
        return
    if op == 5:  # div
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a / b
            val[i, lane] = out
            d0[i, lane] = 1.0 / b
            d1[i, lane] = -out / b
        return
    if op == 6:  # neg
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = -a
            val[i, lane] = out
            d0[i, lane] = -1.0
            d1[i, lane] = 0.0
        return
    if op == 7:  # pow
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = pow(a, b)
            val[i, lane] = out
            d0[i, lane] = pow_partial_base(a, b)
            d1[i, lane] = pow_partial_exponent(a, b, out)
        return
    if op == 8:  # exp
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = exp(a)
            val[i, lane] = out
            d0[i, lane] = out
            d1[i, lane] = 0.0
        return
    if op == 9:  # log
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = log(a)
            val[i, lane] = out
            d0[i, lane] = 1.0 / a
            d1[i, lane] = 0.0
        return
    if op == 10:  # sqrt
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sqrt(a)
            val[i, lane] = out
            d0[i, lane] = 0.5 / out
            d1[i, lane] = 0.0
        return
    if op == 11:  # sin
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sin(a)
            val[i, lane] = out
            d0[i, lane] = cos(a)
            d1[i, lane] = 0.0
        return
    if op == 12:  # cos
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = cos(a)
            val[i, lane] = out
            d0[i, lane] = -sin(a)
            d1[i, lane] = 0.0
        return
    if op == 13:  # tanh
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = tanh(a)
            val[i, lane] = out
            d0[i, lane] = 1.0 - out * out
            d1[i, lane] = 0.0
        return
    if op == 14:  # sigmoid
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sigmoid(a)
            val[i, lane] = out
            d0[i, lane] = out * (1.0 - out)
            d1[i, lane] = 0.0
        return
    if op == 15:  # relu
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = relu(a)
            val[i, lane] = out
            d0[i, lane] = relu_partial(a)
            d1[i, lane] = 0.0
        return
    if op == 16:  # abs
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = fabs(a)
            val[i, lane] = out
            d0[i, lane] = sign(a)
            d1[i, lane] = 0.0
        return
    if op == 17:  # maximum
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = maximum(a, b)
            val[i, lane] = out
            d0[i, lane] = max_partial(a, b)
            d1[i, lane] = max_partial(b, a)
        return
    if op == 18:  # minimum
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = minimum(a, b)
            val[i, lane] = out
            d0[i, lane] = max_partial(b, a)
            d1[i, lane] = max_partial(a, b)
        return
    if op == 19:  # lt
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a < b else 0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 20:  # le
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a <= b else 0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 21:  # gt
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a > b else 0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 22:  # ge
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a >= b else 0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 23:  # eq
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a == b else 0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 24:  # ne
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = 1.0 if a != b else 0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 25:  # pick
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = b if a != 0.0 else -0.0
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 1.0 if a != 0.0 else 0.0
        return
    if op == 26:  # pick_not
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = -0.0 if a != 0.0 else b
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0 if a != 0.0 else 1.0
        return
    if op == 27:  # log1p
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = log1p(a)
            val[i, lane] = out
            d0[i, lane] = 1.0 / (1.0 + a)
            d1[i, lane] = 0.0
        return
    if op == 28:  # expm1
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = expm1(a)
            val[i, lane] = out
            d0[i, lane] = exp(a)
            d1[i, lane] = 0.0
        return
    if op == 29:  # tan
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = tan(a)
            val[i, lane] = out
            d0[i, lane] = 1.0 + out * out
            d1[i, lane] = 0.0
        return
    if op == 30:  # arctan
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = atan(a)
            val[i, lane] = out
            d0[i, lane] = 1.0 / (1.0 + a * a)
            d1[i, lane] = 0.0
        return
    if op == 31:  # arctan2
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = atan2(a, b)
            val[i, lane] = out
            d0[i, lane] = atan2_partial(b, a, b)
            d1[i, lane] = -atan2_partial(a, a, b)
        return
    if op == 32:  # sinh
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sinh(a)
            val[i, lane] = out
            d0[i, lane] = cosh(a)
            d1[i, lane] = 0.0
        return
    if op == 33:  # cosh
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = cosh(a)
            val[i, lane] = out
            d0[i, lane] = sinh(a)
            d1[i, lane] = 0.0
        return
    if op == 34:  # erf
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = erf(a)
            val[i, lane] = out
            d0[i, lane] = 1.1283791670955126 * exp(-a * a)
            d1[i, lane] = 0.0
        return
    if op == 35:  # softplus
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = softplus(a)
            val[i, lane] = out
            d0[i, lane] = sigmoid(a)
            d1[i, lane] = 0.0
        return
    if op == 36:  # sign
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = sign(a)
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    if op == 37:  # stop_gradient
        for lane in range(count):
            a = val[j, lane]
            b = val[k, lane]
            out = a
            val[i, lane] = out
            d0[i, lane] = 0.0
            d1[i, lane] = 0.0
        return
    return
