"""The second local partials of one node over lanes, one loop per op.

``second_partials_lanes``, for the second-order modes of the lane
sweeps (``lane_sweeps.py``).

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
def second_partials_lanes(
    op: int,
    val: FloatArray,
    s0: FloatArray,
    s1: FloatArray,
    s2: FloatArray,
    i: int,
    j: int,
    k: int,
    count: int,
    need_a: bool,
    need_b: bool,
) -> None:
    """The second local partials of node ``i`` that are needed, in lanes ``0:count``.

    Rows ``i``, ``j`` and ``k`` of ``val`` hold the node's value and its
    operands' (as in ``values_and_partials_lanes``, which runs first);
    ``need_a`` / ``need_b``: operand ``a`` / ``b`` depends on an input.
    """
    if op == 2:  # add
        return
    if op == 3:  # sub
        return
    if op == 4:  # mul
        if need_a and need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s1[i, lane] = 1.0
        return
    if op == 5:  # div
        if need_a and need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s1[i, lane] = -1.0 / b / b
        if need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s2[i, lane] = 2.0 * out / b / b
        return
    if op == 6:  # neg
        return
    if op == 7:  # pow
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = pow_second_base(a, b)
        if need_a and need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s1[i, lane] = pow_second_mixed(a, b)
        if need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s2[i, lane] = pow_second_exponent(a, b, out)
        return
    if op == 8:  # exp
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = out
        return
    if op == 9:  # log
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -1.0 / a / a
        return
    if op == 10:  # sqrt
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -0.25 / out / out / out
        return
    if op == 11:  # sin
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -out
        return
    if op == 12:  # cos
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -out
        return
    if op == 13:  # tanh
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -2.0 * out * (1.0 - out * out)
        return
    if op == 14:  # sigmoid
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = out * (1.0 - out) * (1.0 - 2.0 * out)
        return
    if op == 15:  # relu
        return
    if op == 16:  # abs
        return
    if op == 17:  # maximum
        return
    if op == 18:  # minimum
        return
    if op == 19:  # lt
        return
    if op == 20:  # le
        return
    if op == 21:  # gt
        return
    if op == 22:  # ge
        return
    if op == 23:  # eq
        return
    if op == 24:  # ne
        return
    if op == 25:  # pick
        return
    if op == 26:  # pick_not
        return
    if op == 27:  # log1p
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -1.0 / (1.0 + a) / (1.0 + a)
        return
    if op == 28:  # expm1
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = exp(a)
        return
    if op == 29:  # tan
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = 2.0 * out * (1.0 + out * out)
        return
    if op == 30:  # arctan
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -2.0 * a / (1.0 + a * a) / (1.0 + a * a)
        return
    if op == 31:  # arctan2
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -atan2_curvature(a, b)
        if need_a and need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s1[i, lane] = atan2_second_mixed(a, b)
        if need_b:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s2[i, lane] = atan2_curvature(a, b)
        return
    if op == 32:  # sinh
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = out
        return
    if op == 33:  # cosh
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = out
        return
    if op == 34:  # erf
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = -2.2567583341910252 * a * exp(-a * a)
        return
    if op == 35:  # softplus
        if need_a:
            for lane in range(count):
                a = val[j, lane]
                b = val[k, lane]
                out = val[i, lane]
                s0[i, lane] = sigmoid(a) * sigmoid(-a)
        return
    if op == 36:  # sign
        return
    if op == 37:  # stop_gradient
        return
    return
