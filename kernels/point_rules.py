"""The rules of one node at one point, one branch per op of the op table.

``forward_value``, ``local_partials``, ``values_and_partials`` and
``second_partials``: the tape sweeps (``tape_sweeps.py``) and the
one-point paths of the lane sweeps (``lane_sweeps.py``) call them.

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
def forward_value(op: int, a: float, b: float) -> float:
    """Value of a node with opcode ``op`` and operand values ``a``, ``b``.

    ``b`` is ignored by unary ops. Leaves and constants never reach this
    function: the sweeps keep their stored values.
    """
    if op == 2:  # add
        return a + b
    if op == 3:  # sub
        return a - b
    if op == 4:  # mul
        return a * b
    if op == 5:  # div
        return a / b
    if op == 6:  # neg
        return -a
    if op == 7:  # pow
        return pow(a, b)
    if op == 8:  # exp
        return exp(a)
    if op == 9:  # log
        return log(a)
    if op == 10:  # sqrt
        return sqrt(a)
    if op == 11:  # sin
        return sin(a)
    if op == 12:  # cos
        return cos(a)
    if op == 13:  # tanh
        return tanh(a)
    if op == 14:  # sigmoid
        return sigmoid(a)
    if op == 15:  # relu
        return relu(a)
    if op == 16:  # abs
        return fabs(a)
    if op == 17:  # maximum
        return maximum(a, b)
    if op == 18:  # minimum
        return minimum(a, b)
    if op == 19:  # lt
        return 1.0 if a < b else 0.0
    if op == 20:  # le
        return 1.0 if a <= b else 0.0
    if op == 21:  # gt
        return 1.0 if a > b else 0.0
    if op == 22:  # ge
        return 1.0 if a >= b else 0.0
    if op == 23:  # eq
        return 1.0 if a == b else 0.0
    if op == 24:  # ne
        return 1.0 if a != b else 0.0
    if op == 25:  # pick
        return b if a != 0.0 else -0.0
    if op == 26:  # pick_not
        return -0.0 if a != 0.0 else b
    if op == 27:  # log1p
        return log1p(a)
    if op == 28:  # expm1
        return expm1(a)
    if op == 29:  # tan
        return tan(a)
    if op == 30:  # arctan
        return atan(a)
    if op == 31:  # arctan2
        return atan2(a, b)
    if op == 32:  # sinh
        return sinh(a)
    if op == 33:  # cosh
        return cosh(a)
    if op == 34:  # erf
        return erf(a)
    if op == 35:  # softplus
        return softplus(a)
    if op == 36:  # sign
        return sign(a)
    if op == 37:  # stop_gradient
        return a
    return a


@kernel
def local_partials(op: int, a: float, b: float, out: float) -> tuple[float, float]:
    """Local partial derivatives ``(d out/d a, d out/d b)`` of one node.

    ``out`` is the node value saved by the forward sweep. Unary ops give
    0.0 for the second partial.
    """
    if op == 2:  # add
        return 1.0, 1.0
    if op == 3:  # sub
        return 1.0, -1.0
    if op == 4:  # mul
        return b, a
    if op == 5:  # div
        return 1.0 / b, -out / b
    if op == 6:  # neg
        return -1.0, 0.0
    if op == 7:  # pow
        return pow_partial_base(a, b), pow_partial_exponent(a, b, out)
    if op == 8:  # exp
        return out, 0.0
    if op == 9:  # log
        return 1.0 / a, 0.0
    if op == 10:  # sqrt
        return 0.5 / out, 0.0
    if op == 11:  # sin
        return cos(a), 0.0
    if op == 12:  # cos
        return -sin(a), 0.0
    if op == 13:  # tanh
        return 1.0 - out * out, 0.0
    if op == 14:  # sigmoid
        return out * (1.0 - out), 0.0
    if op == 15:  # relu
        return relu_partial(a), 0.0
    if op == 16:  # abs
        return sign(a), 0.0
    if op == 17:  # maximum
        return max_partial(a, b), max_partial(b, a)
    if op == 18:  # minimum
        return max_partial(b, a), max_partial(a, b)
    if op == 19:  # lt
        return 0.0, 0.0
    if op == 20:  # le
        return 0.0, 0.0
    if op == 21:  # gt
        return 0.0, 0.0
    if op == 22:  # ge
        return 0.0, 0.0
    if op == 23:  # eq
        return 0.0, 0.0
    if op == 24:  # ne
        return 0.0, 0.0
    if op == 25:  # pick
        return 0.0, 1.0 if a != 0.0 else 0.0
    if op == 26:  # pick_not
        return 0.0, 0.0 if a != 0.0 else 1.0
    if op == 27:  # log1p
        return 1.0 / (1.0 + a), 0.0
    if op == 28:  # expm1
        return exp(a), 0.0
    if op == 29:  # tan
        return 1.0 + out * out, 0.0
    if op == 30:  # arctan
        return 1.0 / (1.0 + a * a), 0.0
    if op == 31:  # arctan2
        return atan2_partial(b, a, b), -atan2_partial(a, a, b)
    if op == 32:  # sinh
        return cosh(a), 0.0
    if op == 33:  # cosh
        return sinh(a), 0.0
    if op == 34:  # erf
        return 1.1283791670955126 * exp(-a * a), 0.0
    if op == 35:  # softplus
        return sigmoid(a), 0.0
    if op == 36:  # sign
        return 0.0, 0.0
    if op == 37:  # stop_gradient
        return 0.0, 0.0
    return 0.0, 0.0


@kernel
def values_and_partials(op: int, a: float, b: float) -> tuple[float, float, float]:
    """``(out, d out/d a, d out/d b)`` of one node: one dispatch for both rules."""
    if op == 2:  # add
        out = a + b
        return out, 1.0, 1.0
    if op == 3:  # sub
        out = a - b
        return out, 1.0, -1.0
    if op == 4:  # mul
        out = a * b
        return out, b, a
    if op == 5:  # div
        out = a / b
        return out, 1.0 / b, -out / b
    if op == 6:  # neg
        out = -a
        return out, -1.0, 0.0
    if op == 7:  # pow
        out = pow(a, b)
        return out, pow_partial_base(a, b), pow_partial_exponent(a, b, out)
    if op == 8:  # exp
        out = exp(a)
        return out, out, 0.0
    if op == 9:  # log
        out = log(a)
        return out, 1.0 / a, 0.0
    if op == 10:  # sqrt
        out = sqrt(a)
        return out, 0.5 / out, 0.0
    if op == 11:  # sin
        out = sin(a)
        return out, cos(a), 0.0
    if op == 12:  # cos
        out = cos(a)
        return out, -sin(a), 0.0
    if op == 13:  # tanh
        out = tanh(a)
        return out, 1.0 - out * out, 0.0
    if op == 14:  # sigmoid
        out = sigmoid(a)
        return out, out * (1.0 - out), 0.0
    if op == 15:  # relu
        out = relu(a)
        return out, relu_partial(a), 0.0
    if op == 16:  # abs
        out = fabs(a)
        return out, sign(a), 0.0
    if op == 17:  # maximum
        out = maximum(a, b)
        return out, max_partial(a, b), max_partial(b, a)
    if op == 18:  # minimum
        out = minimum(a, b)
        return out, max_partial(b, a), max_partial(a, b)
    if op == 19:  # lt
        out = 1.0 if a < b else 0.0
        return out, 0.0, 0.0
    if op == 20:  # le
        out = 1.0 if a <= b else 0.0
        return out, 0.0, 0.0
    if op == 21:  # gt
        out = 1.0 if a > b else 0.0
        return out, 0.0, 0.0
    if op == 22:  # ge
        out = 1.0 if a >= b else 0.0
        return out, 0.0, 0.0
    if op == 23:  # eq
        out = 1.0 if a == b else 0.0
        return out, 0.0, 0.0
    if op == 24:  # ne
        out = 1.0 if a != b else 0.0
        return out, 0.0, 0.0
    if op == 25:  # pick
        out = b if a != 0.0 else -0.0
        return out, 0.0, 1.0 if a != 0.0 else 0.0
    if op == 26:  # pick_not
        out = -0.0 if a != 0.0 else b
        return out, 0.0, 0.0 if a != 0.0 else 1.0
    if op == 27:  # log1p
        out = log1p(a)
        return out, 1.0 / (1.0 + a), 0.0
    if op == 28:  # expm1
        out = expm1(a)
        return out, exp(a), 0.0
    if op == 29:  # tan
        out = tan(a)
        return out, 1.0 + out * out, 0.0
    if op == 30:  # arctan
        out = atan(a)
        return out, 1.0 / (1.0 + a * a), 0.0
    if op == 31:  # arctan2
        out = atan2(a, b)
        return out, atan2_partial(b, a, b), -atan2_partial(a, a, b)
    if op == 32:  # sinh
        out = sinh(a)
        return out, cosh(a), 0.0
    if op == 33:  # cosh
        out = cosh(a)
        return out, sinh(a), 0.0
    if op == 34:  # erf
        out = erf(a)
        return out, 1.1283791670955126 * exp(-a * a), 0.0
    if op == 35:  # softplus
        out = softplus(a)
        return out, sigmoid(a), 0.0
    if op == 36:  # sign
        out = sign(a)
        return out, 0.0, 0.0
    if op == 37:  # stop_gradient
        out = a
        return out, 0.0, 0.0
    return a, 0.0, 0.0


@kernel
def second_partials(op: int, a: float, b: float, out: float) -> tuple[float, float, float]:
    """Second local partials ``(d2 out/da2, d2 out/da db, d2 out/db2)`` of one node.

    ``out`` is the node value saved by the forward sweep. Unary ops give
    0.0 for the two that involve ``b``.
    """
    if op == 2:  # add
        return 0.0, 0.0, 0.0
    if op == 3:  # sub
        return 0.0, 0.0, 0.0
    if op == 4:  # mul
        return 0.0, 1.0, 0.0
    if op == 5:  # div
        return 0.0, -1.0 / b / b, 2.0 * out / b / b
    if op == 6:  # neg
        return 0.0, 0.0, 0.0
    if op == 7:  # pow
        return pow_second_base(a, b), pow_second_mixed(a, b), pow_second_exponent(a, b, out)
    if op == 8:  # exp
        return out, 0.0, 0.0
    if op == 9:  # log
        return -1.0 / a / a, 0.0, 0.0
    if op == 10:  # sqrt
        return -0.25 / out / out / out, 0.0, 0.0
    if op == 11:  # sin
        return -out, 0.0, 0.0
    if op == 12:  # cos
        return -out, 0.0, 0.0
    if op == 13:  # tanh
        return -2.0 * out * (1.0 - out * out), 0.0, 0.0
    if op == 14:  # sigmoid
        return out * (1.0 - out) * (1.0 - 2.0 * out), 0.0, 0.0
    if op == 15:  # relu
        return 0.0, 0.0, 0.0
    if op == 16:  # abs
        return 0.0, 0.0, 0.0
    if op == 17:  # maximum
        return 0.0, 0.0, 0.0
    if op == 18:  # minimum
        return 0.0, 0.0, 0.0
    if op == 19:  # lt
        return 0.0, 0.0, 0.0
    if op == 20:  # le
        return 0.0, 0.0, 0.0
    if op == 21:  # gt
        return 0.0, 0.0, 0.0
    if op == 22:  # ge
        return 0.0, 0.0, 0.0
    if op == 23:  # eq
        return 0.0, 0.0, 0.0
    if op == 24:  # ne
        return 0.0, 0.0, 0.0
    if op == 25:  # pick
        return 0.0, 0.0, 0.0
    if op == 26:  # pick_not
        return 0.0, 0.0, 0.0
    if op == 27:  # log1p
        return -1.0 / (1.0 + a) / (1.0 + a), 0.0, 0.0
    if op == 28:  # expm1
        return exp(a), 0.0, 0.0
    if op == 29:  # tan
        return 2.0 * out * (1.0 + out * out), 0.0, 0.0
    if op == 30:  # arctan
        return -2.0 * a / (1.0 + a * a) / (1.0 + a * a), 0.0, 0.0
    if op == 31:  # arctan2
        return -atan2_curvature(a, b), atan2_second_mixed(a, b), atan2_curvature(a, b)
    if op == 32:  # sinh
        return out, 0.0, 0.0
    if op == 33:  # cosh
        return out, 0.0, 0.0
    if op == 34:  # erf
        return -2.2567583341910252 * a * exp(-a * a), 0.0, 0.0
    if op == 35:  # softplus
        return sigmoid(a) * sigmoid(-a), 0.0, 0.0
    if op == 36:  # sign
        return 0.0, 0.0, 0.0
    if op == 37:  # stop_gradient
        return 0.0, 0.0, 0.0
    return 0.0, 0.0, 0.0
