"""Compiled sweeps over a structure-of-arrays tape.

A tape of ``n`` nodes is five parallel arrays: ``opcode`` (uint8), ``in0``
and ``in1`` (int32 operand ids, -1 where the op has fewer operands), ``val``
and ``grad`` (float64). Every operand id is smaller than the id of the node
that uses it, so increasing id order is a topological order and decreasing
id order is a reverse one: the sweeps are flat loops, with no DFS, no
recursion and no per-node allocation.

These kernels trust their input (see ``jit.py``): the arrays are
C-contiguous with the dtypes above and the tape invariants hold. The front
end (``fastad.eager.tape``) validates every tape before it gets here.

The block between the GENERATED markers is produced from ``optable.py``;
everything else in this file is written by hand.
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
from typing import TypeAlias

import numpy as np
from numba import prange
from numpy.typing import NDArray

from .jit import kernel
from .optable import BY_NAME, CONST

# The arrays the kernels take (they trust these dtypes; fastad validates).
OpcodeArray: TypeAlias = NDArray[np.uint8]
IndexArray: TypeAlias = NDArray[np.int32]
"""Operand ids of a tape (``in0``, ``in1``), and a compiled function's packed program."""
IdArray: TypeAlias = NDArray[np.int64]
"""Node ids chosen by the caller (``nodes``, ``inputs``) and guard statuses."""
FloatArray: TypeAlias = NDArray[np.float64]
BoolArray: TypeAlias = NDArray[np.bool_]

PICK, PICK_NOT = BY_NAME["pick"].code, BY_NAME["pick_not"].code

NO_ORIGIN = -1

# Which adjoints and tangents are strong zeros. A node that no contribution
# has reached holds -0.0, the identity of +: every sweep starts its adjoint or
# tangent buffer at UNREACHED. A contribution that arrives is never -0.0
# (``contribution`` turns a zero product into +0.0), and in round-to-nearest
# no sum of terms that are not all -0.0 is -0.0, so a reached node never
# looks unreached again, even when its contributions cancel (1 + -1 = +0.0).
# A node that nothing reached sends nothing, whatever its local partial; a
# node that was reached sends partial * adjoint, so a cancelled adjoint
# meeting an infinite partial gives nan, as the unmerged graph and forward
# mode do. The front end adds 0.0 to every result it hands out, so users
# never see -0.0 for an unreached node.
UNREACHED = -0.0
FLOAT_MAX = np.finfo(np.float64).max


@kernel
def reached(x: float) -> bool:
    """False only for ``UNREACHED`` (-0.0): an adjoint or tangent nothing arrived at."""
    return x != 0.0 or copysign(1.0, x) > 0.0


@kernel
def contribution(partial: float, incoming: float) -> float:
    """What one edge sends: ``partial * incoming``, with strong zeros.

    ``UNREACHED`` (adds nothing, reaches nothing) when the local partial is
    exactly zero or nothing reached the sending node; otherwise the product,
    with a zero product made +0.0 so that it marks its target reached.
    """
    if partial == 0.0 or not reached(incoming):
        return UNREACHED
    return partial * incoming + 0.0


# BEGIN GENERATED RULES: made from kernels/optable.py by
# `python -m fastad.kernels._generate`. Do not edit by hand.


@kernel
def sigmoid(a: float) -> float:
    # One exp of -|a| never overflows; then 1/(1+e) for a >= 0, e/(1+e) below.
    # The select compiles without a branch around exp (measured 2x faster in
    # lanes than two branches each calling exp), and picking the numerator
    # first leaves one division, not two: the same bits, sooner.
    e = exp(-fabs(a))
    top = 1.0 if a >= 0.0 else e
    return top / (1.0 + e)


@kernel
def softplus(a: float) -> float:
    # log(1 + exp(a)) = max(a, 0) + log1p(exp(-|a|)): exp never overflows, and
    # nan propagates (nan > 0 is False, then log1p(exp(nan)) is nan).
    return (a if a > 0.0 else 0.0) + log1p(exp(-fabs(a)))


@kernel
def atan2_partial(top: float, a: float, b: float) -> float:
    # top / (a*a + b*b), the partials of atan2(a, b), scaled by the larger
    # operand so the squares neither overflow (|a| > 1e154) nor underflow
    # (both < 1e-154). At (0, 0) the derivative is undefined: nan.
    if a != a or b != b:
        return a + b  # nan in, nan out
    big = fabs(a) if fabs(a) >= fabs(b) else fabs(b)
    if big == 0.0:
        return nan
    if big == inf:  # the limit is 0 unless both are infinite
        if fabs(a) == inf and fabs(b) == inf:
            return nan
        return 0.0 / top if fabs(top) == inf else top / big
    x, y = a / big, b / big
    return (top / big) / (big * (x * x + y * y))


@kernel
def atan2_curvature(a: float, b: float) -> float:
    # 2ab / (a*a + b*b)**2 = 2 (a / r**2) (b / r**2): d2 atan2(a, b) / db2, and
    # minus d2 / da2. From the overflow-safe a / r**2 and b / r**2 (the
    # numerator 2ab alone would overflow above 1e154); nan at (0, 0).
    return 2.0 * atan2_partial(a, a, b) * atan2_partial(b, a, b)


@kernel
def atan2_second_mixed(a: float, b: float) -> float:
    # (a*a - b*b) / (a*a + b*b)**2 = (a/r**2 - b/r**2)(a/r**2 + b/r**2): d2 atan2 / da db.
    x, y = atan2_partial(a, a, b), atan2_partial(b, a, b)
    return (x - y) * (x + y)


@kernel
def relu(a: float) -> float:
    # Written so that nan propagates (nan <= 0 is False), as NumPy's maximum.
    return 0.0 if a <= 0.0 else a


@kernel
def relu_partial(a: float) -> float:
    # relu'(0) = 0 by convention (the minimum-norm subgradient); nan in, nan out.
    return 1.0 if a > 0.0 else (0.0 if a <= 0.0 else a)


@kernel
def sign(a: float) -> float:
    # abs'(0) = 0: the minimum-norm subgradient. nan in, nan out.
    if a > 0.0:
        return 1.0
    if a < 0.0:
        return -1.0
    return 0.0 if a == 0.0 else a


@kernel
def maximum(a: float, b: float) -> float:
    # NumPy semantics: a nan in either operand gives nan.
    return a if (a > b or a != a) else b


@kernel
def minimum(a: float, b: float) -> float:
    return a if (a < b or a != a) else b


@kernel
def max_partial(a: float, b: float) -> float:
    # d maximum(a, b) / d a; ties split the gradient evenly.
    return 1.0 if a > b else (0.5 if a == b else 0.0)


@kernel
def pow_partial_base(a: float, b: float) -> float:
    # d a**b / d a = b * a**(b-1); exactly 0 for b == 0 (a**0 is constant),
    # where the formula would give 0 * inf = nan at a = 0.
    return 0.0 if b == 0.0 else b * pow(a, b - 1.0)


@kernel
def pow_partial_exponent(a: float, b: float, out: float) -> float:
    # d a**b / d b = a**b * log(a). At a == 0 with b > 0 the function is
    # constant 0 in b, where the formula would give 0 * -inf = nan; at
    # a == 0, b == 0 it would give 1 * -inf. Both are 0, as in PyTorch, JAX
    # and autograd (0**b is 0 for b > 0 and 1 at b = 0: no finite slope
    # from the right, and b < 0 is inf).
    return 0.0 if (a == 0.0 and b >= 0.0) else out * log(a)


@kernel
def pow_second_base(a: float, b: float) -> float:
    # d2 a**b / d a2 = b (b - 1) a**(b - 2); exactly 0 for b == 0 and b == 1,
    # where the first partial is constant in a (0 * inf = nan at a = 0). The
    # square's is 2.0 without a libm call: pow(a, 0.0) is 1.0 for every a,
    # nan included (C99 F.9.4.4), so the bits are the formula's.
    # b (b - 1) first could overflow where a**(b - 2) is 0: inf * 0 = nan.
    if b == 2.0:
        return 2.0
    return 0.0 if (b == 0.0 or b == 1.0) else b * pow(a, b - 2.0) * (b - 1.0)


@kernel
def pow_second_mixed(a: float, b: float) -> float:
    # d2 a**b / d a d b = a**(b - 1) (1 + b log a). At a == 0 with b > 1 the
    # first partial b a**(b - 1) is 0 for all such b: 0, where the formula
    # would give 0 * -inf = nan; so would an a**(b - 1) that underflows to 0
    # beside a b log(a) that overflows (the product's true value is below
    # 1e-16 there).
    if a == 0.0 and b > 1.0:
        return 0.0
    power = pow(a, b - 1.0)
    return 0.0 if power == 0.0 else power * (1.0 + b * log(a))


@kernel
def pow_second_exponent(a: float, b: float, out: float) -> float:
    # d2 a**b / d b2 = a**b log(a)**2; 0 at a == 0, b >= 0, as the first partial.
    return 0.0 if (a == 0.0 and b >= 0.0) else out * log(a) * log(a)


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
) -> None:
    """``dx = d0 * g``, ``dy = d1 * g`` per element, with strong zeros."""
    if op == 2:  # add
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0, g[t])
            dy[t] = contribution(1.0, g[t])
        return
    if op == 3:  # sub
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0, g[t])
            dy[t] = contribution(-1.0, g[t])
        return
    if op == 4:  # mul
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(b, g[t])
            dy[t] = contribution(a, g[t])
        return
    if op == 5:  # div
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0 / b, g[t])
            dy[t] = contribution(-out / b, g[t])
        return
    if op == 6:  # neg
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(-1.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 7:  # pow
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(pow_partial_base(a, b), g[t])
            dy[t] = contribution(pow_partial_exponent(a, b, out), g[t])
        return
    if op == 8:  # exp
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(out, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 9:  # log
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0 / a, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 10:  # sqrt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.5 / out, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 11:  # sin
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(cos(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 12:  # cos
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(-sin(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 13:  # tanh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0 - out * out, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 14:  # sigmoid
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(out * (1.0 - out), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 15:  # relu
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(relu_partial(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 16:  # abs
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(sign(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 17:  # maximum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(max_partial(a, b), g[t])
            dy[t] = contribution(max_partial(b, a), g[t])
        return
    if op == 18:  # minimum
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(max_partial(b, a), g[t])
            dy[t] = contribution(max_partial(a, b), g[t])
        return
    if op == 19:  # lt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 20:  # le
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 21:  # gt
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 22:  # ge
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 23:  # eq
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 24:  # ne
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 25:  # pick
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(1.0 if a != 0.0 else 0.0, g[t])
        return
    if op == 26:  # pick_not
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0 if a != 0.0 else 1.0, g[t])
        return
    if op == 27:  # log1p
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0 / (1.0 + a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 28:  # expm1
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(exp(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 29:  # tan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0 + out * out, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 30:  # arctan
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.0 / (1.0 + a * a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 31:  # arctan2
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(atan2_partial(b, a, b), g[t])
            dy[t] = contribution(-atan2_partial(a, a, b), g[t])
        return
    if op == 32:  # sinh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(cosh(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 33:  # cosh
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(sinh(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 34:  # erf
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(1.1283791670955126 * exp(-a * a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 35:  # softplus
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(sigmoid(a), g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 36:  # sign
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    if op == 37:  # stop_gradient
        for t in range(z.size):
            a = x[t]
            b = y[t]
            out = z[t]
            dx[t] = contribution(0.0, g[t])
            dy[t] = contribution(0.0, g[t])
        return
    return


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


# END GENERATED RULES


@kernel
def forward_sweep(
    opcode: OpcodeArray, in0: IndexArray, in1: IndexArray, val: FloatArray, start: int, stop: int
) -> None:
    """Recompute ``val[start:stop]`` from the values of earlier nodes.

    Leaves and constants (no operands) keep the values stored in ``val``;
    this is the replay path: write new leaf values, sweep, read the outputs.
    """
    for i in range(start, stop):
        j = in0[i]
        if j < 0:
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        val[i] = forward_value(opcode[i], val[j], b)


@kernel
def backward_sweep(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    grad: FloatArray,
    root: int,
    check: bool,
) -> int:
    """Accumulate the adjoints of ``root`` into ``grad[:root + 1]``.

    Seeds ``grad[root] += 1`` and applies each node's local rule in
    decreasing id order (``backward_range``). The caller fills ``grad``
    with ``UNREACHED`` first. Returns what ``backward_range`` returns.
    """
    grad[root] += 1.0
    return backward_range(opcode, in0, in1, val, grad, root + 1, 0, check)


@kernel
def backward_range(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    grad: FloatArray,
    stop: int,
    start: int,
    check: bool,
) -> int:
    """The backward sweep's body over nodes ``stop - 1`` down to ``start``, no seed.

    Adds (never assigns) the contribution of every edge, so a node used
    twice (``d * d``) or on several paths gets the sum.

    Exact zeros are strong (``contribution``): a node that nothing reached
    (its adjoint is still ``UNREACHED``) sends nothing, and neither does an
    edge whose local partial is exactly zero. So nodes that do not reach the
    root contribute nothing, and the side of ``fa.where`` not taken cannot
    poison the gradient with ``0 * inf = nan``. The caller fills ``grad``
    with ``UNREACHED`` first unless it means to accumulate.

    With ``check`` set, returns ``2 * node + slot`` for the first node (in
    sweep order) whose finite adjoint times its local partial for operand
    ``slot`` is not finite, or ``NO_ORIGIN``; the sweep still completes.
    Tapes with blocks alternate this over runs of scalar nodes with the
    block nodes' rules, in decreasing id order.
    """
    origin = NO_ORIGIN
    for i in range(stop - 1, start - 1, -1):
        g = grad[i]
        j = in0[i]
        if j < 0 or not reached(g):
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        grad[j] += contribution(d0, g)
        if k >= 0:
            grad[k] += contribution(d1, g)
        # A constant's adjoint reaches nothing (x ** 3 at x < 0 has a nan
        # partial for its exponent), so only other operands are checked.
        if check and origin == NO_ORIGIN and isfinite(g):
            if opcode[j] != CONST and not isfinite(d0 * g):
                origin = 2 * i
            elif k >= 0 and opcode[k] != CONST and not isfinite(d1 * g):
                origin = 2 * i + 1
    return origin


@kernel
def second_backward_range(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    adjoint: FloatArray,
    tangent: FloatArray,
    second: FloatArray,
    stop: int,
    start: int,
) -> None:
    """Forward-over-reverse: the tangent of the backward sweep, nodes ``stop - 1 .. start``.

    ``adjoint`` holds a finished backward sweep, ``tangent`` a finished
    tangent sweep along a direction ``v``; ``second`` (UNREACHED where
    nothing arrived, as the other buffers) accumulates the tangent of each
    adjoint, so that at an input it is ``(H v)`` there. Each edge ``(i, j)``
    of the backward sweep sends ``d * adjoint[i]``; its tangent is
    ``d * second[i] + (tangent of d) * adjoint[i]``, where the tangent of a
    local partial ``d0 = d out / d a`` is ``d2/da2 * tangent[a] + d2/da db *
    tangent[b]`` (``second_partials``). Every product has the strong zeros
    of ``contribution``; the two terms are added first, then to the target,
    in the order of every tier (``sweep_block``'s lanes, generated code).
    """
    for i in range(stop - 1, start - 1, -1):
        j = in0[i]
        if j < 0:
            continue
        g = adjoint[i]
        h = second[i]
        if not reached(g) and not reached(h):
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        s0, s1, s2 = second_partials(opcode[i], val[j], b, val[i])
        tj = tangent[j]
        tk = tangent[k] if k >= 0 else UNREACHED
        dd0 = contribution(s0, tj) + contribution(s1, tk)
        second[j] += contribution(d0, h) + contribution(dd0, g)
        if k >= 0:
            dd1 = contribution(s1, tj) + contribution(s2, tk)
            second[k] += contribution(d1, h) + contribution(dd1, g)


@kernel
def evaluate_partials(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    nodes: IdArray,
    partials: FloatArray,
) -> None:
    """Write the local partials of each node in ``nodes`` into ``partials``.

    ``partials`` has shape ``(len(nodes), 2)``; used by the front end to show
    edge labels and to report where a non-finite derivative came from.
    """
    for t in range(nodes.size):
        i = nodes[t]
        j = in0[i]
        if j < 0:
            partials[t, 0] = 0.0
            partials[t, 1] = 0.0
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        partials[t, 0] = d0
        partials[t, 1] = d1


@kernel
def value_and_grad(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    grad: FloatArray,
    inputs: IdArray,
    point: FloatArray,
    root: int,
) -> float:
    """Replay the tape at a new point: value of ``root`` and its gradient.

    Writes ``point`` into the leaves ``inputs``, re-runs the forward sweep
    up to ``root``, resets the adjoints and runs the backward sweep. The
    gradient with respect to the leaves is left in ``grad[inputs]`` (where
    a leaf that does not reach the root holds ``UNREACHED``, -0.0).
    """
    for t in range(inputs.size):
        val[inputs[t]] = point[t]
    forward_sweep(opcode, in0, in1, val, 0, root + 1)
    grad[: root + 1] = UNREACHED
    backward_sweep(opcode, in0, in1, val, grad, root, False)
    return val[root]


@kernel
def mark_descendants(
    in0: IndexArray,
    in1: IndexArray,
    extra_nodes: IndexArray,
    extra_start: IndexArray,
    extra_ids: IndexArray,
    lo: int,
    hi: int,
    mark: BoolArray,
) -> None:
    """Extend ``mark`` (set for some nodes) to every node in ``[lo, hi]`` that
    depends on a marked one, in one pass up the ids.

    Operands past the second are read from the CSR arrays, as in
    :func:`mark_ancestors`. A gradient needs the adjoints of these nodes only.
    """
    p = 0
    while p < extra_nodes.size and extra_nodes[p] < lo:
        p += 1
    for i in range(lo, hi + 1):
        if not mark[i]:
            j, k = in0[i], in1[i]
            hit = (j >= 0 and mark[j]) or (k >= 0 and mark[k])
            if not hit and p < extra_nodes.size and extra_nodes[p] == i:
                for e in range(extra_start[p], extra_start[p + 1]):
                    if mark[extra_ids[e]]:
                        hit = True
                        break
            mark[i] = hit
        if p < extra_nodes.size and extra_nodes[p] == i:
            p += 1


@kernel
def mark_ancestors(
    in0: IndexArray,
    in1: IndexArray,
    extra_nodes: IndexArray,
    extra_start: IndexArray,
    extra_ids: IndexArray,
    root: int,
    mark: BoolArray,
) -> int:
    """Set ``mark[i]`` for ``root`` and every node it depends on; return the lowest.

    ``in0``/``in1`` hold the first two operands of every node; a block op
    with more (``fa.linear(X, W, b)``) lists the rest in ``extra_ids``: node
    ``extra_nodes[p]`` (ascending) has ``extra_ids[extra_start[p]:extra_start[p + 1]]``.
    The walk stops once no marked node is left below, so an ancestor set
    costs its own span of ids, not the whole tape (a long-lived tape).
    """
    mark[root] = True
    pending = 1  # marked nodes not yet visited
    p = extra_nodes.size - 1
    while p >= 0 and extra_nodes[p] > root:
        p -= 1
    i = root
    while i >= 0:
        if mark[i]:
            pending -= 1
            j = in0[i]
            if j >= 0 and not mark[j]:
                mark[j] = True
                pending += 1
            k = in1[i]
            if k >= 0 and not mark[k]:
                mark[k] = True
                pending += 1
            if p >= 0 and extra_nodes[p] == i:
                for e in range(extra_start[p], extra_start[p + 1]):
                    m = extra_ids[e]
                    if not mark[m]:
                        mark[m] = True
                        pending += 1
            if pending == 0:
                return i
        if p >= 0 and extra_nodes[p] == i:
            p -= 1
        i -= 1
    return 0


@kernel
def mark_value_ancestors(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    is_block: BoolArray,
    extra_nodes: IndexArray,
    extra_start: IndexArray,
    extra_ids: IndexArray,
    root: int,
    mark: BoolArray,
) -> None:
    """Set ``mark[i]`` for ``root`` and every node its *value* depends on.

    As ``mark_ancestors``, except that the side of ``fa.where`` not taken is
    left out: ``pick(c, x)`` with ``c == 0`` (and ``pick_not(c, x)`` with
    ``c != 0``) does not read ``x``'s value at all. Checked mode uses this, so
    a ``nan`` on the untaken side (``sqrt(x)`` at ``x < 0``) is no alarm.
    ``is_block`` marks block nodes, whose ``val`` holds no condition.
    """
    mark[root] = True
    p = extra_nodes.size - 1
    while p >= 0 and extra_nodes[p] > root:
        p -= 1
    for i in range(root, -1, -1):
        listed = p >= 0 and extra_nodes[p] == i
        if listed:
            p -= 1
        if not mark[i]:
            continue
        j = in0[i]
        if j >= 0:
            mark[j] = True
        k = in1[i]
        if k >= 0:
            op = opcode[i]
            untaken = not is_block[i] and (
                (op == PICK and val[j] == 0.0) or (op == PICK_NOT and val[j] != 0.0)
            )
            if not untaken:
                mark[k] = True
        if listed:
            for e in range(extra_start[p + 1], extra_start[p + 2]):
                mark[extra_ids[e]] = True


# -- Compiled functions: replay in lanes ------------------------------------------
#
# A compiled function packs everything about its tape into one int32 array,
# ``program`` (fewer arguments make a faster call from Python):
#
#   [n, k, m, g,
#    opcode (n + 1), in0 (n + 1), in1 (n + 1),
#    input ids (k), output ids (m), guard node ids (g), guard truths (g),
#    depends (n + 1): 1 for a node that depends on an input]
#
# Row ``n`` is a scratch row: unary ops point ``in1`` at it so every op reads
# two rows. The work space ``work`` (float64, shape (4, n + 1, lanes)) holds
# values, the two local partials saved by the forward pass, and adjoints or
# tangents; column ``lane`` belongs to one evaluation point. Constants' rows
# are filled once from ``template``. The second-order modes' work space has
# SECOND_PLANES planes: also the three second partials, tangents and the
# tangents of the adjoints.
#
# Modes: VALUES (outputs only), VJP (outputs and cotangent^T J), GRAD (VJP
# with every cotangent 1, without reading one), JVP (outputs and J tangent),
# JACOBIAN_REV / JACOBIAN_FWD (outputs and the whole (m, k) Jacobian, row
# by row, from one forward pass: m adjoint or k tangent passes), and the
# second-order modes of a scalar output: HVP (H v for a direction v per
# point: one tangent pass, one adjoint pass and the tangent of the adjoint
# pass, forward-over-reverse) and HESSIAN (the (k, k) Hessian row by row:
# one adjoint pass, then per input a tangent pass and its second pass).

VALUES, VJP, JVP, GRAD, JACOBIAN_REV, JACOBIAN_FWD, HVP, HESSIAN = 0, 1, 2, 3, 4, 5, 6, 7
PLANES = 4
"""Work-space planes of the first-order modes: values, the two partials, adjoints."""
SECOND_PLANES = 9
"""Of HVP and HESSIAN: also the three second partials, tangents, and their adjoints."""
NO_FAILED_GUARD = -1
HEADER = 4


@kernel
def unpack(
    program: IndexArray,
) -> tuple[int, int, int, int, IndexArray, IndexArray, IndexArray, IndexArray]:
    """Views of a packed program: (n, k, m, g, opcode, in0, in1, io)."""
    n, k, m, g = program[0], program[1], program[2], program[3]
    rows = n + 1
    opcode = program[HEADER : HEADER + rows]
    in0 = program[HEADER + rows : HEADER + 2 * rows]
    in1 = program[HEADER + 2 * rows : HEADER + 3 * rows]
    io = program[HEADER + 3 * rows :]
    return n, k, m, g, opcode, in0, in1, io


@kernel
def pull(target: FloatArray, partial: FloatArray, incoming: FloatArray, count: int) -> None:
    """``target += partial * incoming`` over lanes, with strong zeros: one edge's VJP.

    One operand per loop over 1-D rows vectorises better than both operands
    in one loop over 2-D indices (measured 40.6 -> 33.8 ns/point on example 2).
    """
    for lane in range(count):
        target[lane] += contribution(partial[lane], incoming[lane])


@kernel
def sweep_block(
    program: IndexArray,
    work: FloatArray,
    points: FloatArray,
    directions: FloatArray,
    values: FloatArray,
    derivatives: FloatArray,
    status: IdArray,
    mode: int,
    start: int,
    count: int,
) -> None:
    """Evaluate points ``start:start + count`` in lanes ``0:count`` of ``work``.

    Writes ``values[p]`` (m outputs), ``derivatives[p]`` (k for VJP and
    HVP, m for JVP, the ``m * k`` Jacobian row by row for the JACOBIAN
    modes, the ``k * k`` Hessian for HESSIAN) and
    ``status[p]`` (index of the first guard whose truth differs from the
    traced one; the caller fills ``status`` with ``NO_FAILED_GUARD``).
    """
    n, k, m, g, opcode, in0, in1, io = unpack(program)
    val, d0, d1, adj = work[0], work[1], work[2], work[3]
    for t in range(k):
        row = io[t]
        for lane in range(count):
            val[row, lane] = points[start + lane, t]
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        if count == 1:  # one point (the latency path): no lane loop at all
            if mode == VALUES:
                val[i, 0] = forward_value(opcode[i], val[j, 0], val[c, 0])
            else:
                val[i, 0], d0[i, 0], d1[i, 0] = values_and_partials(opcode[i], val[j, 0], val[c, 0])
        elif mode == VALUES:
            values_lanes(opcode[i], val, i, j, c, count)
        else:
            values_and_partials_lanes(opcode[i], val, d0, d1, i, j, c, count)
        if mode >= HVP:
            s0, s1, s2 = work[4], work[5], work[6]
            if count == 1:
                s0[i, 0], s1[i, 0], s2[i, 0] = second_partials(
                    opcode[i], val[j, 0], val[c, 0], val[i, 0]
                )
            else:
                depends = io[k + m + 2 * g :]  # 1 for a node that depends on an input
                need_a, need_b = depends[j] != 0, depends[c] != 0
                if need_a or need_b:
                    second_partials_lanes(
                        opcode[i], val, s0, s1, s2, i, j, c, count, need_a, need_b
                    )
    for q in range(g):
        node = io[k + m + q]
        expected = io[k + m + g + q] != 0
        for lane in range(count):
            if (val[node, lane] != 0.0) != expected and status[start + lane] == NO_FAILED_GUARD:
                status[start + lane] = q
    for r in range(m):
        row = io[k + r]
        for lane in range(count):
            values[start + lane, r] = val[row, lane]
    if mode == VJP or mode == GRAD:
        adj[:, :count] = UNREACHED
        for r in range(m):
            row = io[k + r]
            for lane in range(count):
                # A zero cotangent is a strong zero: the Jacobian's row r is
                # never touched by the other outputs' paths.
                seed = 1.0 if mode == GRAD else directions[start + lane, r]
                if seed != 0.0:
                    adj[row, lane] += seed
        adjoint_pass(in0, in1, d0, d1, adj, n, count)
        for t in range(k):
            row = io[t]
            for lane in range(count):
                derivatives[start + lane, t] = adj[row, lane] + 0.0  # no -0.0 out
    elif mode == JVP:
        adj[:, :count] = UNREACHED
        for t in range(k):
            row = io[t]
            for lane in range(count):
                seed = directions[start + lane, t]
                if seed != 0.0:  # a zero tangent is a strong zero, as in VJP
                    adj[row, lane] = seed
        tangent_pass(in0, in1, d0, d1, adj, n, count)
        for r in range(m):
            row = io[k + r]
            for lane in range(count):
                derivatives[start + lane, r] = adj[row, lane] + 0.0
    elif mode == JACOBIAN_REV:  # row r of each point's Jacobian: a VJP with cotangent e_r
        for r in range(m):
            adj[:, :count] = UNREACHED
            adj[io[k + r], :count] += 1.0
            adjoint_pass(in0, in1, d0, d1, adj, n, count)
            for t in range(k):
                row = io[t]
                for lane in range(count):
                    derivatives[start + lane, r * k + t] = adj[row, lane] + 0.0
    elif mode == JACOBIAN_FWD:  # column t: a JVP with tangent e_t
        for t in range(k):
            adj[:, :count] = UNREACHED
            adj[io[t], :count] = 1.0
            tangent_pass(in0, in1, d0, d1, adj, n, count)
            for r in range(m):
                row = io[k + r]
                for lane in range(count):
                    derivatives[start + lane, r * k + t] = adj[row, lane] + 0.0
    elif mode == HVP or mode == HESSIAN:  # a scalar output (the front end checks)
        s0, s1, s2, tan, tadj = work[4], work[5], work[6], work[7], work[8]
        depends = io[k + m + 2 * g :]
        adj[:, :count] = UNREACHED
        adj[io[k], :count] = 1.0
        adjoint_pass(in0, in1, d0, d1, adj, n, count)
        for t in range(k if mode == HESSIAN else 1):  # row t of the Hessian: H e_t
            tan[:, :count] = UNREACHED
            if mode == HESSIAN:
                tan[io[t], :count] = 1.0
            else:
                for u in range(k):
                    row = io[u]
                    for lane in range(count):
                        seed = directions[start + lane, u]
                        if seed != 0.0:  # a zero direction is a strong zero
                            tan[row, lane] = seed
            tangent_pass(in0, in1, d0, d1, tan, n, count)
            tadj[:, :count] = UNREACHED
            second_pass(in0, in1, depends, d0, d1, s0, s1, s2, adj, tan, tadj, n, count)
            for u in range(k):
                row = io[u]
                for lane in range(count):
                    derivatives[start + lane, t * k + u] = tadj[row, lane] + 0.0


@kernel
def adjoint_pass(
    in0: IndexArray,
    in1: IndexArray,
    d0: FloatArray,
    d1: FloatArray,
    adj: FloatArray,
    n: int,
    count: int,
) -> None:
    """Seeded adjoints in lanes ``0:count`` pulled back through nodes ``n - 1 .. 0``."""
    for i in range(n - 1, -1, -1):
        j = in0[i]
        if j < 0:
            continue
        pull(adj[j], d0[i], adj[i], count)
        c = in1[i]
        if c != n:  # unary ops read the scratch row: nothing to send there
            pull(adj[c], d1[i], adj[i], count)


@kernel
def tangent_pass(
    in0: IndexArray,
    in1: IndexArray,
    d0: FloatArray,
    d1: FloatArray,
    adj: FloatArray,
    n: int,
    count: int,
) -> None:
    """Seeded tangents in lanes ``0:count`` pushed through nodes ``0 .. n - 1``."""
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        for lane in range(count):
            adj[i, lane] = contribution(d0[i, lane], adj[j, lane]) + contribution(
                d1[i, lane], adj[c, lane]
            )


@kernel
def second_pass(
    in0: IndexArray,
    in1: IndexArray,
    depends: IndexArray,
    d0: FloatArray,
    d1: FloatArray,
    s0: FloatArray,
    s1: FloatArray,
    s2: FloatArray,
    adj: FloatArray,
    tan: FloatArray,
    tadj: FloatArray,
    n: int,
    count: int,
) -> None:
    """The tangent of an adjoint pass in lanes ``0:count``: ``second_backward_range``'s rule.

    ``adj`` and ``tan`` hold finished adjoint and tangent passes; ``tadj``
    starts at UNREACHED. Only nodes that depend on an input (``depends``)
    send, and only to operands that do: the others' tangents are UNREACHED
    and their sums reach no input. Unary ops read the scratch row, which
    depends on nothing.
    """
    for i in range(n - 1, -1, -1):
        j = in0[i]
        if j < 0 or depends[i] == 0:
            continue
        c = in1[i]
        if depends[j] != 0:
            pull_second(tadj[j], d0[i], tadj[i], s0[i], tan[j], s1[i], tan[c], adj[i], count)
        if depends[c] != 0:
            pull_second(tadj[c], d1[i], tadj[i], s1[i], tan[j], s2[i], tan[c], adj[i], count)


@kernel
def pull_second(
    target: FloatArray,
    partial: FloatArray,
    incoming: FloatArray,
    second_a: FloatArray,
    tangent_a: FloatArray,
    second_b: FloatArray,
    tangent_b: FloatArray,
    adjoint: FloatArray,
    count: int,
) -> None:
    """One edge of ``second_pass`` over lanes, on 1-D rows (they vectorise, as ``pull``).

    ``target += partial * incoming + (second_a * tangent_a + second_b *
    tangent_b) * adjoint``, each product with strong zeros: the edge's
    adjoint-tangent term, then its partial's tangent times the adjoint.
    """
    for lane in range(count):
        moved = contribution(second_a[lane], tangent_a[lane]) + contribution(
            second_b[lane], tangent_b[lane]
        )
        target[lane] += contribution(partial[lane], incoming[lane]) + contribution(
            moved, adjoint[lane]
        )


@kernel
def work_planes(mode: int) -> int:
    """Work-space planes the sweeps need in ``mode``: PLANES, SECOND_PLANES for HVP, HESSIAN."""
    return SECOND_PLANES if mode >= HVP else PLANES


@kernel
def new_work(template: FloatArray, lanes: int, planes: int) -> FloatArray:
    """A work space of ``planes`` planes of ``lanes`` columns, values from ``template``."""
    work = np.zeros((planes, template.size, lanes))
    for i in range(template.size):
        work[0, i, :] = template[i]
    return work


@kernel
def sweep_points(
    program: IndexArray,
    work: FloatArray,
    points: FloatArray,
    directions: FloatArray,
    values: FloatArray,
    derivatives: FloatArray,
    status: IdArray,
    mode: int,
) -> None:
    """All points, block after block, in the caller's work space (any lane count)."""
    lanes = work.shape[2]
    total = points.shape[0]
    for start in range(0, total, lanes):
        count = min(lanes, total - start)
        sweep_block(
            program, work, points, directions, values, derivatives, status, mode, start, count
        )


@kernel
def sweep_point(
    program: IndexArray, work: FloatArray, point: FloatArray, gradient: FloatArray, mode: int
) -> tuple[float, int]:
    """The latency path: one point of a scalar-output function, on 1-D rows.

    ``work`` has shape (4, n + 1): values, the two saved partials, adjoints.
    Mode VALUES or GRAD; GRAD writes d output / d inputs into ``gradient``.
    Returns ``(value, failed guard or NO_FAILED_GUARD)``. Four arrays and an
    int: each array argument costs ~100 ns in Numba's dispatcher.
    """
    n, k, m, g, opcode, in0, in1, io = unpack(program)
    val, d0, d1, adj = work[0], work[1], work[2], work[3]
    for t in range(k):
        val[io[t]] = point[t]
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        if mode == VALUES:
            val[i] = forward_value(opcode[i], val[j], val[c])
        else:
            val[i], d0[i], d1[i] = values_and_partials(opcode[i], val[j], val[c])
    failed = NO_FAILED_GUARD
    for q in range(g):
        if (val[io[k + m + q]] != 0.0) != (io[k + m + g + q] != 0):
            failed = q
            break
    root = io[k]
    if mode == GRAD:
        adj[:] = UNREACHED
        adj[root] = 1.0
        for i in range(n - 1, -1, -1):
            gi = adj[i]
            j = in0[i]
            if j < 0 or not reached(gi):
                continue
            adj[j] += contribution(d0[i], gi)
            c = in1[i]
            if c != n:
                adj[c] += contribution(d1[i], gi)
        for t in range(k):
            gradient[t] = adj[io[t]] + 0.0
    return val[root], failed


@kernel
def sweep_point_hvp(
    program: IndexArray,
    work: FloatArray,
    point: FloatArray,
    direction: FloatArray,
    product: FloatArray,
) -> tuple[float, int]:
    """The second order's latency path: ``H v`` at one point into ``product``, on 1-D rows.

    ``work`` has shape (SECOND_PLANES, n + 1). ``sweep_point`` gives the
    values, partials, guards and adjoints (its gradient lands in
    ``product`` and is overwritten); then the second partials, the tangent
    pass and the second pass of ``sweep_block``'s HVP mode, statement for
    statement on one point, so the bits are the batch's (the tests compare
    them). Returns ``(value, failed guard or NO_FAILED_GUARD)``.
    """
    value, failed = sweep_point(program, work, point, product, GRAD)
    n, k, m, g, opcode, in0, in1, io = unpack(program)
    depends = io[k + m + 2 * g :]
    val, d0, d1, adj = work[0], work[1], work[2], work[3]
    s0, s1, s2, tan, tadj = work[4], work[5], work[6], work[7], work[8]
    tan[:] = UNREACHED
    for t in range(k):
        if direction[t] != 0.0:  # a zero direction is a strong zero
            tan[io[t]] = direction[t]
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        s0[i], s1[i], s2[i] = second_partials(opcode[i], val[j], val[c], val[i])
        tan[i] = contribution(d0[i], tan[j]) + contribution(d1[i], tan[c])
    tadj[:] = UNREACHED
    for i in range(n - 1, -1, -1):
        j = in0[i]
        if j < 0 or depends[i] == 0:
            continue
        c = in1[i]
        gi, hi = adj[i], tadj[i]
        if depends[j] != 0:
            moved = contribution(s0[i], tan[j]) + contribution(s1[i], tan[c])
            tadj[j] += contribution(d0[i], hi) + contribution(moved, gi)
        if depends[c] != 0:
            moved = contribution(s1[i], tan[j]) + contribution(s2[i], tan[c])
            tadj[c] += contribution(d1[i], hi) + contribution(moved, gi)
    for t in range(k):
        product[t] = tadj[io[t]] + 0.0
    return value, failed


@kernel(parallel=True)
def sweep_points_parallel(
    program: IndexArray,
    template: FloatArray,
    points: FloatArray,
    directions: FloatArray,
    values: FloatArray,
    derivatives: FloatArray,
    status: IdArray,
    mode: int,
    lanes: int,
    threads: int,
) -> None:
    """All points, blocks of ``lanes`` points spread over ``threads`` workers.

    Each worker has its own work space and writes only its own points' rows
    of the outputs, so nothing races. Inside ``prange`` nothing may raise
    (Numba loses an exception raised in a parallel loop), which is why problems
    come back through ``status``.
    """
    total = points.shape[0]
    blocks = (total + lanes - 1) // lanes
    workers = max(1, min(threads, blocks))
    planes = work_planes(mode)
    for worker in prange(workers):
        work = new_work(template, lanes, planes)
        for block in range(worker, blocks, workers):
            start = block * lanes
            count = min(lanes, total - start)
            sweep_block(
                program, work, points, directions, values, derivatives, status, mode, start, count
            )


@kernel
def tangent_sweep(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    tangent: FloatArray,
    seeded: BoolArray,
    start: int,
    stop: int,
) -> None:
    """Forward mode on a tape: ``tangent[i] = d0 * tangent[in0] + d1 * tangent[in1]``.

    The caller sets the tangents of the nodes it perturbs (the direction;
    a zero direction stays ``UNREACHED``), marks them in ``seeded`` and
    fills the rest with ``UNREACHED``; a seeded node keeps its tangent (it
    is held as an independent variable, like ``fa.grad``'s ``wrt``). Nodes
    ``0:stop`` are swept in increasing id order with the same
    ``local_partials`` the backward sweep uses, and the same strong zeros.
    Tapes with blocks run it over the runs of scalar nodes (``start:stop``).
    """
    for i in range(start, stop):
        j = in0[i]
        if j < 0 or seeded[i]:
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        t = contribution(d0, tangent[j])
        if k >= 0:
            t += contribution(d1, tangent[k])
        tangent[i] = t


# -- Blocks: elementwise ops over arrays, by the scalar rules -----------------------


@kernel
def zeros_and_nonfinite(out: FloatArray) -> tuple[int, int]:
    """How many elements of the 2-D ``out`` are zero and how many non-finite.

    ``nonfinite_lines``'s count alone, with nothing to mark: the one read a
    product of finite data without zeros needs (``fastad/core/reach.py``).
    """
    zeros = nonfinite = 0
    for i in range(out.shape[0]):
        for k in range(out.shape[1]):
            value = out[i, k]
            zeros += value == 0.0
            nonfinite += not (fabs(value) <= FLOAT_MAX)  # inf, -inf and nan
    return zeros, nonfinite


@kernel
def nonfinite_lines(
    out: FloatArray, rows: BoolArray, columns: BoolArray, zero_rows: IdArray
) -> tuple[int, int]:
    """Mark in ``rows`` and ``columns`` each row and column of ``out`` holding a non-finite value.

    The first read of a BLAS product of adjoints (or tangents) with values
    (``fastad/core/reach.py``). A term the scalar rule never sends (an unreached
    ``-0.0`` adjoint times an ``inf`` value, an ``inf`` or ``nan`` adjoint
    times a zero value) is a ``nan`` in BLAS's sum (BLAS multiplies every
    term, zero factors included), so every element such a term touches is
    non-finite: the marked rows, or the marked columns, are all that may
    need the term-by-term product (``exact_lines``). Counts each row's
    exact zeros into ``zero_rows`` (their value is right, but whether any
    term reached them is still to be settled: ``settle_zeros``). Returns how
    many elements are zero and how many non-finite.

    One branch-free read counts both (integer sums, which LLVM vectorises);
    only a product holding a non-finite element is read again to mark it.
    """
    zeros = nonfinite = 0
    for i in range(out.shape[0]):
        row_zeros = 0
        for k in range(out.shape[1]):
            value = out[i, k]
            row_zeros += value == 0.0
            nonfinite += not (fabs(value) <= FLOAT_MAX)  # inf, -inf and nan
        zero_rows[i] = row_zeros
        zeros += row_zeros
    if nonfinite:
        for i in range(out.shape[0]):
            for k in range(out.shape[1]):
                if not isfinite(out[i, k]):
                    rows[i] = True
                    columns[k] = True
    return zeros, nonfinite


# What a line (a row of a product's left factor, a column of its right one)
# lets through, read at most once per product by ``settle_zeros``.
UNREAD, SENDS, SENDS_NOTHING = np.int8(0), np.int8(1), np.int8(2)


@kernel
def _sends(x: float, adjoint: bool) -> bool:
    """Whether a product's factor lets its term through: a reached adjoint, a non-zero value."""
    return reached(x) if adjoint else x != 0.0


@kernel
def _line_state(x: FloatArray, adjoint: bool) -> np.int8:
    """``SENDS`` if some element of the 1-D ``x`` lets a term through, else ``SENDS_NOTHING``."""
    for t in range(x.size):
        if _sends(x[t], adjoint):
            return SENDS
    return SENDS_NOTHING


@kernel
def settle_zeros(
    out: FloatArray,
    left: FloatArray,
    right: FloatArray,
    left_is_adjoint: bool,
    exact: BoolArray,
    by_row: bool,
    zero_rows: IdArray,
) -> int:
    """Give each zero of the BLAS product ``out = left @ right`` its reach, in place.

    One factor holds adjoints (or tangents), the other values; ``zero_rows``
    counts each row's zeros (``nonfinite_lines``). Outside the rows (if
    ``by_row``) or columns that ``exact`` marks, which were recomputed term
    by term, ``out`` is finite, so every term BLAS summed is finite and a
    zero element has the right value; it is +0.0 if some term reached it (a
    reached adjoint times a non-zero value) and ``UNREACHED`` if none did.

    A row of ``left`` that lets no term through (a zero input feature, a
    sample whose units are all dead) makes its whole row of ``out``
    ``UNREACHED``, exact lines included (no term reaches them either), at
    the cost of one read; a column of ``right`` likewise its column's zeros.
    The remaining zeros of a row scan only the terms its ``left`` row lets
    through (gathered once per row), stopping at the first one sent. Each
    row's zeros are gathered without a branch, so their scattered positions
    cost no mispredicted jumps. Returns how many zeros needed a scan.
    """
    m, n = out.shape
    inner = left.shape[1]
    right_columns = np.zeros(n, np.int8)
    positions = np.empty(n, np.int64)
    through = np.empty(inner, np.int64)
    scanned = 0
    for i in range(m):
        if zero_rows[i] == 0 or (by_row and exact[i]):
            continue
        senders = 0
        for k in range(inner):
            through[senders] = k
            senders += _sends(left[i, k], left_is_adjoint)
        if senders == 0:
            out[i, :] = UNREACHED
            continue
        count = 0
        for j in range(n):
            positions[count] = j
            count += out[i, j] == 0.0
        for c in range(count):
            j = positions[c]
            if not by_row and exact[j]:
                continue
            if right_columns[j] == UNREAD:
                right_columns[j] = _line_state(right[:, j], not left_is_adjoint)
            if right_columns[j] == SENDS_NOTHING:
                out[i, j] = UNREACHED
                continue
            scanned += 1
            total = UNREACHED
            for t in range(senders):
                if _sends(right[through[t], j], not left_is_adjoint):
                    total = 0.0
                    break
            out[i, j] = total
    return scanned


@kernel
def settle_zero_signs(x: FloatArray) -> None:
    """Make every zero of the 1-D ``x`` a +0.0, in place: an adjoint handed out, whose
    UNREACHED (-0.0) elements mean "no gradient" and read as an ordinary 0."""
    for t in range(x.size):
        if x[t] == 0.0:
            x[t] = 0.0


@kernel
def any_reached(x: FloatArray) -> bool:
    """Whether any element of a (C-contiguous) adjoint or tangent array was reached."""
    flat = x.reshape(x.size)
    for t in range(flat.size):
        if reached(flat[t]):
            return True
    return False


@kernel
def exact_lines(
    left: FloatArray,
    right: FloatArray,
    left_is_adjoint: bool,
    lines: IdArray,
    by_row: bool,
    out: FloatArray,
) -> None:
    """Recompute the rows (``by_row``) or columns ``lines`` of ``out = left @ right`` term by term.

    One factor holds adjoints (or tangents), the other values. Each term is
    ``contribution(value, adjoint)``: nothing from an unreached adjoint or a
    zero value, so each element gets exactly the reach and the value of its
    scalar-node expansion, summed in the order of the inner index whichever
    lines are recomputed.
    """
    m, n = out.shape
    for line in range(lines.size):
        first = lines[line]
        for other in range(n if by_row else m):
            i, j = (first, other) if by_row else (other, first)
            total = UNREACHED
            for k in range(left.shape[1]):
                if left_is_adjoint:
                    total += contribution(right[k, j], left[i, k])
                else:
                    total += contribution(left[i, k], right[k, j])
            out[i, j] = total
