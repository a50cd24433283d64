"""Elementwise block ops by the scalar rules: forward mode.

``map_jvp`` over 1-D arrays, one loop per op, with strong zeros.

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
from .strong_zeros import contribution


@kernel
def map_jvp(
    op: int,
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    tx: FloatArray,
    ty: FloatArray,
    tz: FloatArray,
) -> None:
    """``tz = d0 * tx + d1 * ty`` per element, with strong zeros."""
    if op == 2:  # add
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0, tx[t])
            tz[t] = first + contribution(1.0, ty[t])
        return
    if op == 3:  # sub
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0, tx[t])
            tz[t] = first + contribution(-1.0, ty[t])
        return
    if op == 4:  # mul
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(b, tx[t])
            tz[t] = first + contribution(a, ty[t])
        return
    if op == 5:  # div
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0 / b, tx[t])
            tz[t] = first + contribution(-out / b, ty[t])
        return
    if op == 6:  # neg
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(-1.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 7:  # pow
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(pow_partial_base(a, b), tx[t])
            tz[t] = first + contribution(pow_partial_exponent(a, b, out), ty[t])
        return
    if op == 8:  # exp
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(out, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 9:  # log
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0 / a, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 10:  # sqrt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.5 / out, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 11:  # sin
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(cos(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 12:  # cos
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(-sin(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 13:  # tanh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0 - out * out, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 14:  # sigmoid
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(out * (1.0 - out), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 15:  # relu
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(relu_partial(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 16:  # abs
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(sign(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 17:  # maximum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(max_partial(a, b), tx[t])
            tz[t] = first + contribution(max_partial(b, a), ty[t])
        return
    if op == 18:  # minimum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(max_partial(b, a), tx[t])
            tz[t] = first + contribution(max_partial(a, b), ty[t])
        return
    if op == 19:  # lt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 20:  # le
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 21:  # gt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 22:  # ge
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 23:  # eq
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 24:  # ne
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 25:  # pick
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(1.0 if a != 0.0 else 0.0, ty[t])
        return
    if op == 26:  # pick_not
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0 if a != 0.0 else 1.0, ty[t])
        return
    if op == 27:  # log1p
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0 / (1.0 + a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 28:  # expm1
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(exp(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 29:  # tan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0 + out * out, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 30:  # arctan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.0 / (1.0 + a * a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 31:  # arctan2
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(atan2_partial(b, a, b), tx[t])
            tz[t] = first + contribution(-atan2_partial(a, a, b), ty[t])
        return
    if op == 32:  # sinh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(cosh(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 33:  # cosh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(sinh(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 34:  # erf
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(1.1283791670955126 * exp(-a * a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 35:  # softplus
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(sigmoid(a), tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 36:  # sign
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    if op == 37:  # stop_gradient
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            first = contribution(0.0, tx[t])
            tz[t] = first + contribution(0.0, ty[t])
        return
    return
