"""Elementwise block ops by the scalar rules: forward mode.

``JVP``: per opcode, a kernel of one loop over 1-D arrays, with strong zeros.

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
def jvp_add(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``add``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(1.0, tx[t])
        tz[t] = first + contribution(1.0, ty[t])


@kernel
def jvp_sub(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``sub``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(1.0, tx[t])
        tz[t] = first + contribution(-1.0, ty[t])


@kernel
def jvp_mul(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``mul``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        first = contribution(b, tx[t])
        tz[t] = first + contribution(a, ty[t])


@kernel
def jvp_div(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``div``: see ``JVP``."""
    for t in range(z.size):
        b = y[t]
        out = z[t]
        first = contribution(1.0 / b, tx[t])
        tz[t] = first + contribution(-out / b, ty[t])


@kernel
def jvp_neg(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``neg``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(-1.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_pow(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``pow``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        out = z[t]
        first = contribution(pow_partial_base(a, b), tx[t])
        tz[t] = first + contribution(pow_partial_exponent(a, b, out), ty[t])


@kernel
def jvp_exp(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``exp``: see ``JVP``."""
    for t in range(z.size):
        out = z[t]
        first = contribution(out, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_log(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``log``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(1.0 / a, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_sqrt(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``sqrt``: see ``JVP``."""
    for t in range(z.size):
        out = z[t]
        first = contribution(0.5 / out, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_sin(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``sin``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(cos(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_cos(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``cos``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(-sin(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_tanh(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``tanh``: see ``JVP``."""
    for t in range(z.size):
        out = z[t]
        first = contribution(1.0 - out * out, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_sigmoid(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``sigmoid``: see ``JVP``."""
    for t in range(z.size):
        out = z[t]
        first = contribution(out * (1.0 - out), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_relu(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``relu``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(relu_partial(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_abs(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``abs``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(sign(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_maximum(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``maximum``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        first = contribution(max_partial(a, b), tx[t])
        tz[t] = first + contribution(max_partial(b, a), ty[t])


@kernel
def jvp_minimum(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``minimum``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        first = contribution(max_partial(b, a), tx[t])
        tz[t] = first + contribution(max_partial(a, b), ty[t])


@kernel
def jvp_lt(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``lt``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_le(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``le``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_gt(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``gt``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_ge(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``ge``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_eq(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``eq``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_ne(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``ne``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_pick(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``pick``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(1.0 if a != 0.0 else 0.0, ty[t])


@kernel
def jvp_pick_not(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``pick_not``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0 if a != 0.0 else 1.0, ty[t])


@kernel
def jvp_log1p(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``log1p``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(1.0 / (1.0 + a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_expm1(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``expm1``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(exp(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_tan(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``tan``: see ``JVP``."""
    for t in range(z.size):
        out = z[t]
        first = contribution(1.0 + out * out, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_arctan(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``arctan``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(1.0 / (1.0 + a * a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_arctan2(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``arctan2``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        first = contribution(atan2_partial(b, a, b), tx[t])
        tz[t] = first + contribution(-atan2_partial(a, a, b), ty[t])


@kernel
def jvp_sinh(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``sinh``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(cosh(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_cosh(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``cosh``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(sinh(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_erf(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``erf``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(1.1283791670955126 * exp(-a * a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_softplus(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``softplus``: see ``JVP``."""
    for t in range(z.size):
        a = x[t]
        first = contribution(sigmoid(a), tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_sign(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``sign``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


@kernel
def jvp_stop_gradient(
    x: FloatArray, y: FloatArray, z: FloatArray, tx: FloatArray, ty: FloatArray, tz: FloatArray
) -> None:
    """``stop_gradient``: see ``JVP``."""
    for t in range(z.size):
        first = contribution(0.0, tx[t])
        tz[t] = first + contribution(0.0, ty[t])


JVP = {
    2: jvp_add,
    3: jvp_sub,
    4: jvp_mul,
    5: jvp_div,
    6: jvp_neg,
    7: jvp_pow,
    8: jvp_exp,
    9: jvp_log,
    10: jvp_sqrt,
    11: jvp_sin,
    12: jvp_cos,
    13: jvp_tanh,
    14: jvp_sigmoid,
    15: jvp_relu,
    16: jvp_abs,
    17: jvp_maximum,
    18: jvp_minimum,
    19: jvp_lt,
    20: jvp_le,
    21: jvp_gt,
    22: jvp_ge,
    23: jvp_eq,
    24: jvp_ne,
    25: jvp_pick,
    26: jvp_pick_not,
    27: jvp_log1p,
    28: jvp_expm1,
    29: jvp_tan,
    30: jvp_arctan,
    31: jvp_arctan2,
    32: jvp_sinh,
    33: jvp_cosh,
    34: jvp_erf,
    35: jvp_softplus,
    36: jvp_sign,
    37: jvp_stop_gradient,
}
"""Opcode -> its kernel ``(x, y, z, tx, ty, tz)``:
``tz = d0 * tx + d1 * ty`` per element, with strong zeros."""
