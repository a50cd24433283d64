"""Numba copies of the op table's helper functions, which the rules call.

The functions of ``optable.HELPERS``, each as a ``@kernel``.

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
