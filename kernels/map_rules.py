"""Elementwise block ops by the scalar rules: values and reverse mode.

``map_forward`` and ``map_vjp`` over 1-D arrays, one loop per op,
with the strong zeros of ``contribution``.

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
def map_forward(op: int, x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``z[t] = op(x[t], y[t])`` over 1-D arrays of one size: the scalar rule."""
    if op == 2:  # add
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = a + b
        return
    if op == 3:  # sub
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = a - b
        return
    if op == 4:  # mul
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = a * b
        return
    if op == 5:  # div
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = a / b
        return
    if op == 6:  # neg
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = -a
        return
    if op == 7:  # pow
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = pow(a, b)
        return
    if op == 8:  # exp
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = exp(a)
        return
    if op == 9:  # log
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = log(a)
        return
    if op == 10:  # sqrt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = sqrt(a)
        return
    if op == 11:  # sin
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = sin(a)
        return
    if op == 12:  # cos
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = cos(a)
        return
    if op == 13:  # tanh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = tanh(a)
        return
    if op == 14:  # sigmoid
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = sigmoid(a)
        return
    if op == 15:  # relu
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = relu(a)
        return
    if op == 16:  # abs
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = fabs(a)
        return
    if op == 17:  # maximum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = maximum(a, b)
        return
    if op == 18:  # minimum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = minimum(a, b)
        return
    if op == 19:  # lt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = 1.0 if a < b else 0.0
        return
    if op == 20:  # le
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = 1.0 if a <= b else 0.0
        return
    if op == 21:  # gt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = 1.0 if a > b else 0.0
        return
    if op == 22:  # ge
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = 1.0 if a >= b else 0.0
        return
    if op == 23:  # eq
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = 1.0 if a == b else 0.0
        return
    if op == 24:  # ne
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = 1.0 if a != b else 0.0
        return
    if op == 25:  # pick
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = b if a != 0.0 else -0.0
        return
    if op == 26:  # pick_not
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = -0.0 if a != 0.0 else b
        return
    if op == 27:  # log1p
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = log1p(a)
        return
    if op == 28:  # expm1
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = expm1(a)
        return
    if op == 29:  # tan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = tan(a)
        return
    if op == 30:  # arctan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = atan(a)
        return
    if op == 31:  # arctan2
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = atan2(a, b)
        return
    if op == 32:  # sinh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = sinh(a)
        return
    if op == 33:  # cosh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = cosh(a)
        return
    if op == 34:  # erf
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = erf(a)
        return
    if op == 35:  # softplus
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = softplus(a)
        return
    if op == 36:  # sign
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = sign(a)
        return
    if op == 37:  # stop_gradient
        for t in range(z.size):
            a = x[t]
            b = y[t]
            z[t] = a
        return
    return


@kernel
def map_vjp(
    op: int,
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``dx = d0 * g``, ``dy = d1 * g`` per element, with strong zeros: ``dx`` where
    ``want_x``, ``dy`` where ``want_y`` and the op has a second operand (an array
    not written may be empty)."""
    if op == 2:  # add
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0, g[t])
            if want_y:
                dy[t] = contribution(1.0, g[t])
        return
    if op == 3:  # sub
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0, g[t])
            if want_y:
                dy[t] = contribution(-1.0, g[t])
        return
    if op == 4:  # mul
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(b, g[t])
            if want_y:
                dy[t] = contribution(a, g[t])
        return
    if op == 5:  # div
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0 / b, g[t])
            if want_y:
                dy[t] = contribution(-out / b, g[t])
        return
    if op == 6:  # neg
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(-1.0, g[t])
        return
    if op == 7:  # pow
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(pow_partial_base(a, b), g[t])
            if want_y:
                dy[t] = contribution(pow_partial_exponent(a, b, out), g[t])
        return
    if op == 8:  # exp
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(out, g[t])
        return
    if op == 9:  # log
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0 / a, g[t])
        return
    if op == 10:  # sqrt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.5 / out, g[t])
        return
    if op == 11:  # sin
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(cos(a), g[t])
        return
    if op == 12:  # cos
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(-sin(a), g[t])
        return
    if op == 13:  # tanh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0 - out * out, g[t])
        return
    if op == 14:  # sigmoid
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(out * (1.0 - out), g[t])
        return
    if op == 15:  # relu
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(relu_partial(a), g[t])
        return
    if op == 16:  # abs
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(sign(a), g[t])
        return
    if op == 17:  # maximum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(max_partial(a, b), g[t])
            if want_y:
                dy[t] = contribution(max_partial(b, a), g[t])
        return
    if op == 18:  # minimum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(max_partial(b, a), g[t])
            if want_y:
                dy[t] = contribution(max_partial(a, b), g[t])
        return
    if op == 19:  # lt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0, g[t])
        return
    if op == 20:  # le
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0, g[t])
        return
    if op == 21:  # gt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0, g[t])
        return
    if op == 22:  # ge
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0, g[t])
        return
    if op == 23:  # eq
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0, g[t])
        return
    if op == 24:  # ne
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0, g[t])
        return
    if op == 25:  # pick
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(1.0 if a != 0.0 else 0.0, g[t])
        return
    if op == 26:  # pick_not
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
            if want_y:
                dy[t] = contribution(0.0 if a != 0.0 else 1.0, g[t])
        return
    if op == 27:  # log1p
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0 / (1.0 + a), g[t])
        return
    if op == 28:  # expm1
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(exp(a), g[t])
        return
    if op == 29:  # tan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0 + out * out, g[t])
        return
    if op == 30:  # arctan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.0 / (1.0 + a * a), g[t])
        return
    if op == 31:  # arctan2
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(atan2_partial(b, a, b), g[t])
            if want_y:
                dy[t] = contribution(-atan2_partial(a, a, b), g[t])
        return
    if op == 32:  # sinh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(cosh(a), g[t])
        return
    if op == 33:  # cosh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(sinh(a), g[t])
        return
    if op == 34:  # erf
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(1.1283791670955126 * exp(-a * a), g[t])
        return
    if op == 35:  # softplus
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(sigmoid(a), g[t])
        return
    if op == 36:  # sign
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
        return
    if op == 37:  # stop_gradient
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            if want_x:
                dx[t] = contribution(0.0, g[t])
        return
    return
