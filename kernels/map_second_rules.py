"""Elementwise block ops by the scalar rules: the second local partials.

``SECOND``: per opcode, a kernel of one loop over 1-D arrays.

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
def second_add(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``add``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_sub(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``sub``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_mul(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``mul``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 1.0
        s2[t] = 0.0


@kernel
def second_div(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``div``: see ``SECOND``."""
    for t in range(z.size):
        b = y[t]
        out = z[t]
        s0[t] = 0.0
        s1[t] = -1.0 / b / b
        s2[t] = 2.0 * out / b / b


@kernel
def second_neg(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``neg``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_pow(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``pow``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        out = z[t]
        s0[t] = pow_second_base(a, b)
        s1[t] = pow_second_mixed(a, b)
        s2[t] = pow_second_exponent(a, b, out)


@kernel
def second_exp(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``exp``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = out
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_log(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``log``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        s0[t] = -1.0 / a / a
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_sqrt(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``sqrt``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = -0.25 / out / out / out
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_sin(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``sin``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = -out
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_cos(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``cos``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = -out
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_tanh(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``tanh``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = -2.0 * out * (1.0 - out * out)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_sigmoid(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``sigmoid``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = out * (1.0 - out) * (1.0 - 2.0 * out)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_relu(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``relu``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_abs(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``abs``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_maximum(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``maximum``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_minimum(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``minimum``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_lt(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``lt``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_le(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``le``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_gt(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``gt``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_ge(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``ge``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_eq(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``eq``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_ne(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``ne``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_pick(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``pick``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_pick_not(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``pick_not``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_log1p(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``log1p``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        s0[t] = -1.0 / (1.0 + a) / (1.0 + a)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_expm1(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``expm1``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        s0[t] = exp(a)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_tan(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``tan``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = 2.0 * out * (1.0 + out * out)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_arctan(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``arctan``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        s0[t] = -2.0 * a / (1.0 + a * a) / (1.0 + a * a)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_arctan2(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``arctan2``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        s0[t] = -atan2_curvature(a, b)
        s1[t] = atan2_second_mixed(a, b)
        s2[t] = atan2_curvature(a, b)


@kernel
def second_sinh(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``sinh``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = out
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_cosh(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``cosh``: see ``SECOND``."""
    for t in range(z.size):
        out = z[t]
        s0[t] = out
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_erf(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``erf``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        s0[t] = -2.2567583341910252 * a * exp(-a * a)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_softplus(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``softplus``: see ``SECOND``."""
    for t in range(z.size):
        a = x[t]
        s0[t] = sigmoid(a) * sigmoid(-a)
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_sign(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``sign``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


@kernel
def second_stop_gradient(
    x: FloatArray, y: FloatArray, z: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray
) -> None:
    """``stop_gradient``: see ``SECOND``."""
    for t in range(z.size):
        s0[t] = 0.0
        s1[t] = 0.0
        s2[t] = 0.0


SECOND = {
    2: second_add,
    3: second_sub,
    4: second_mul,
    5: second_div,
    6: second_neg,
    7: second_pow,
    8: second_exp,
    9: second_log,
    10: second_sqrt,
    11: second_sin,
    12: second_cos,
    13: second_tanh,
    14: second_sigmoid,
    15: second_relu,
    16: second_abs,
    17: second_maximum,
    18: second_minimum,
    19: second_lt,
    20: second_le,
    21: second_gt,
    22: second_ge,
    23: second_eq,
    24: second_ne,
    25: second_pick,
    26: second_pick_not,
    27: second_log1p,
    28: second_expm1,
    29: second_tan,
    30: second_arctan,
    31: second_arctan2,
    32: second_sinh,
    33: second_cosh,
    34: second_erf,
    35: second_softplus,
    36: second_sign,
    37: second_stop_gradient,
}
"""Opcode -> its kernel ``(x, y, z, s0, s1, s2)``:
The second local partials (d2/dx2, d2/dx dy, d2/dy2) per element."""
