"""Elementwise block ops by the scalar rules: the second local partials.

``map_second`` over 1-D arrays, one loop per op.

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
def map_second(
    op: int,
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    s0: FloatArray,
    s1: FloatArray,
    s2: FloatArray,
) -> None:
    """The second local partials (d2/dx2, d2/dx dy, d2/dy2) per element."""
    if op == 2:  # add
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 3:  # sub
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 4:  # mul
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 1.0
            s2[t] = 0.0
        return
    if op == 5:  # div
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = -1.0 / b / b
            s2[t] = 2.0 * out / b / b
        return
    if op == 6:  # neg
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 7:  # pow
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = pow_second_base(a, b)
            s1[t] = pow_second_mixed(a, b)
            s2[t] = pow_second_exponent(a, b, out)
        return
    if op == 8:  # exp
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = out
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 9:  # log
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -1.0 / a / a
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 10:  # sqrt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -0.25 / out / out / out
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 11:  # sin
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -out
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 12:  # cos
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -out
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 13:  # tanh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -2.0 * out * (1.0 - out * out)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 14:  # sigmoid
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = out * (1.0 - out) * (1.0 - 2.0 * out)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 15:  # relu
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 16:  # abs
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 17:  # maximum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 18:  # minimum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 19:  # lt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 20:  # le
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 21:  # gt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 22:  # ge
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 23:  # eq
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 24:  # ne
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 25:  # pick
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 26:  # pick_not
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 27:  # log1p
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -1.0 / (1.0 + a) / (1.0 + a)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 28:  # expm1
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = exp(a)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 29:  # tan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 2.0 * out * (1.0 + out * out)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 30:  # arctan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -2.0 * a / (1.0 + a * a) / (1.0 + a * a)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 31:  # arctan2
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -atan2_curvature(a, b)
            s1[t] = atan2_second_mixed(a, b)
            s2[t] = atan2_curvature(a, b)
        return
    if op == 32:  # sinh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = out
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 33:  # cosh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = out
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 34:  # erf
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = -2.2567583341910252 * a * exp(-a * a)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 35:  # softplus
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = sigmoid(a) * sigmoid(-a)
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 36:  # sign
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    if op == 37:  # stop_gradient
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            s0[t] = 0.0
            s1[t] = 0.0
            s2[t] = 0.0
        return
    return
