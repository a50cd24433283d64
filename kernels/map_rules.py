"""Elementwise block ops by the scalar rules: values and reverse mode.

``FORWARD`` and ``VJP``: per opcode, a kernel of one loop over 1-D arrays,
the VJP's with the strong zeros of ``contribution``.

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
def forward_add(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``add``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = a + b


@kernel
def forward_sub(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``sub``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = a - b


@kernel
def forward_mul(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``mul``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = a * b


@kernel
def forward_div(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``div``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = a / b


@kernel
def forward_neg(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``neg``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = -a


@kernel
def forward_pow(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``pow``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = pow(a, b)


@kernel
def forward_exp(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``exp``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = exp(a)


@kernel
def forward_log(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``log``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = log(a)


@kernel
def forward_sqrt(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``sqrt``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = sqrt(a)


@kernel
def forward_sin(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``sin``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = sin(a)


@kernel
def forward_cos(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``cos``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = cos(a)


@kernel
def forward_tanh(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``tanh``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = tanh(a)


@kernel
def forward_sigmoid(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``sigmoid``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = sigmoid(a)


@kernel
def forward_relu(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``relu``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = relu(a)


@kernel
def forward_abs(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``abs``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = fabs(a)


@kernel
def forward_maximum(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``maximum``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = maximum(a, b)


@kernel
def forward_minimum(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``minimum``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = minimum(a, b)


@kernel
def forward_lt(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``lt``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = 1.0 if a < b else 0.0


@kernel
def forward_le(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``le``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = 1.0 if a <= b else 0.0


@kernel
def forward_gt(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``gt``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = 1.0 if a > b else 0.0


@kernel
def forward_ge(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``ge``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = 1.0 if a >= b else 0.0


@kernel
def forward_eq(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``eq``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = 1.0 if a == b else 0.0


@kernel
def forward_ne(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``ne``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = 1.0 if a != b else 0.0


@kernel
def forward_pick(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``pick``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = b if a != 0.0 else -0.0


@kernel
def forward_pick_not(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``pick_not``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = -0.0 if a != 0.0 else b


@kernel
def forward_log1p(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``log1p``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = log1p(a)


@kernel
def forward_expm1(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``expm1``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = expm1(a)


@kernel
def forward_tan(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``tan``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = tan(a)


@kernel
def forward_arctan(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``arctan``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = atan(a)


@kernel
def forward_arctan2(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``arctan2``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        z[t] = atan2(a, b)


@kernel
def forward_sinh(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``sinh``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = sinh(a)


@kernel
def forward_cosh(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``cosh``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = cosh(a)


@kernel
def forward_erf(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``erf``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = erf(a)


@kernel
def forward_softplus(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``softplus``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = softplus(a)


@kernel
def forward_sign(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``sign``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = sign(a)


@kernel
def forward_stop_gradient(x: FloatArray, y: FloatArray, z: FloatArray) -> None:
    """``stop_gradient``: see ``FORWARD``."""
    for t in range(z.size):
        a = x[t]
        z[t] = a


FORWARD = {
    2: forward_add,
    3: forward_sub,
    4: forward_mul,
    5: forward_div,
    6: forward_neg,
    7: forward_pow,
    8: forward_exp,
    9: forward_log,
    10: forward_sqrt,
    11: forward_sin,
    12: forward_cos,
    13: forward_tanh,
    14: forward_sigmoid,
    15: forward_relu,
    16: forward_abs,
    17: forward_maximum,
    18: forward_minimum,
    19: forward_lt,
    20: forward_le,
    21: forward_gt,
    22: forward_ge,
    23: forward_eq,
    24: forward_ne,
    25: forward_pick,
    26: forward_pick_not,
    27: forward_log1p,
    28: forward_expm1,
    29: forward_tan,
    30: forward_arctan,
    31: forward_arctan2,
    32: forward_sinh,
    33: forward_cosh,
    34: forward_erf,
    35: forward_softplus,
    36: forward_sign,
    37: forward_stop_gradient,
}
"""Opcode -> its kernel ``(x, y, z)``:
``z[t] = op(x[t], y[t])`` over 1-D arrays of one size: the scalar rule."""


@kernel
def vjp_add(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``add``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(1.0, g[t])
        if want_y:
            dy[t] = contribution(1.0, g[t])


@kernel
def vjp_sub(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``sub``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(1.0, g[t])
        if want_y:
            dy[t] = contribution(-1.0, g[t])


@kernel
def vjp_mul(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``mul``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        if want_x:
            dx[t] = contribution(b, g[t])
        if want_y:
            dy[t] = contribution(a, g[t])


@kernel
def vjp_div(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``div``: see ``VJP``."""
    for t in range(z.size):
        b = y[t]
        out = z[t]
        if want_x:
            dx[t] = contribution(1.0 / b, g[t])
        if want_y:
            dy[t] = contribution(-out / b, g[t])


@kernel
def vjp_neg(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``neg``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(-1.0, g[t])


@kernel
def vjp_pow(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``pow``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        out = z[t]
        if want_x:
            dx[t] = contribution(pow_partial_base(a, b), g[t])
        if want_y:
            dy[t] = contribution(pow_partial_exponent(a, b, out), g[t])


@kernel
def vjp_exp(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``exp``: see ``VJP``."""
    for t in range(z.size):
        out = z[t]
        if want_x:
            dx[t] = contribution(out, g[t])


@kernel
def vjp_log(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``log``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(1.0 / a, g[t])


@kernel
def vjp_sqrt(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``sqrt``: see ``VJP``."""
    for t in range(z.size):
        out = z[t]
        if want_x:
            dx[t] = contribution(0.5 / out, g[t])


@kernel
def vjp_sin(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``sin``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(cos(a), g[t])


@kernel
def vjp_cos(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``cos``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(-sin(a), g[t])


@kernel
def vjp_tanh(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``tanh``: see ``VJP``."""
    for t in range(z.size):
        out = z[t]
        if want_x:
            dx[t] = contribution(1.0 - out * out, g[t])


@kernel
def vjp_sigmoid(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``sigmoid``: see ``VJP``."""
    for t in range(z.size):
        out = z[t]
        if want_x:
            dx[t] = contribution(out * (1.0 - out), g[t])


@kernel
def vjp_relu(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``relu``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(relu_partial(a), g[t])


@kernel
def vjp_abs(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``abs``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(sign(a), g[t])


@kernel
def vjp_maximum(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``maximum``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        if want_x:
            dx[t] = contribution(max_partial(a, b), g[t])
        if want_y:
            dy[t] = contribution(max_partial(b, a), g[t])


@kernel
def vjp_minimum(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``minimum``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        if want_x:
            dx[t] = contribution(max_partial(b, a), g[t])
        if want_y:
            dy[t] = contribution(max_partial(a, b), g[t])


@kernel
def vjp_lt(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``lt``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0, g[t])


@kernel
def vjp_le(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``le``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0, g[t])


@kernel
def vjp_gt(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``gt``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0, g[t])


@kernel
def vjp_ge(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``ge``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0, g[t])


@kernel
def vjp_eq(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``eq``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0, g[t])


@kernel
def vjp_ne(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``ne``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0, g[t])


@kernel
def vjp_pick(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``pick``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(1.0 if a != 0.0 else 0.0, g[t])


@kernel
def vjp_pick_not(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``pick_not``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(0.0, g[t])
        if want_y:
            dy[t] = contribution(0.0 if a != 0.0 else 1.0, g[t])


@kernel
def vjp_log1p(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``log1p``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(1.0 / (1.0 + a), g[t])


@kernel
def vjp_expm1(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``expm1``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(exp(a), g[t])


@kernel
def vjp_tan(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``tan``: see ``VJP``."""
    for t in range(z.size):
        out = z[t]
        if want_x:
            dx[t] = contribution(1.0 + out * out, g[t])


@kernel
def vjp_arctan(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``arctan``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(1.0 / (1.0 + a * a), g[t])


@kernel
def vjp_arctan2(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``arctan2``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        b = y[t]
        if want_x:
            dx[t] = contribution(atan2_partial(b, a, b), g[t])
        if want_y:
            dy[t] = contribution(-atan2_partial(a, a, b), g[t])


@kernel
def vjp_sinh(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``sinh``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(cosh(a), g[t])


@kernel
def vjp_cosh(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``cosh``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(sinh(a), g[t])


@kernel
def vjp_erf(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``erf``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(1.1283791670955126 * exp(-a * a), g[t])


@kernel
def vjp_softplus(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``softplus``: see ``VJP``."""
    for t in range(z.size):
        a = x[t]
        if want_x:
            dx[t] = contribution(sigmoid(a), g[t])


@kernel
def vjp_sign(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``sign``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])


@kernel
def vjp_stop_gradient(
    x: FloatArray,
    y: FloatArray,
    z: FloatArray,
    g: FloatArray,
    dx: FloatArray,
    dy: FloatArray,
    want_x: bool,
    want_y: bool,
) -> None:
    """``stop_gradient``: see ``VJP``."""
    for t in range(z.size):
        if want_x:
            dx[t] = contribution(0.0, g[t])


VJP = {
    2: vjp_add,
    3: vjp_sub,
    4: vjp_mul,
    5: vjp_div,
    6: vjp_neg,
    7: vjp_pow,
    8: vjp_exp,
    9: vjp_log,
    10: vjp_sqrt,
    11: vjp_sin,
    12: vjp_cos,
    13: vjp_tanh,
    14: vjp_sigmoid,
    15: vjp_relu,
    16: vjp_abs,
    17: vjp_maximum,
    18: vjp_minimum,
    19: vjp_lt,
    20: vjp_le,
    21: vjp_gt,
    22: vjp_ge,
    23: vjp_eq,
    24: vjp_ne,
    25: vjp_pick,
    26: vjp_pick_not,
    27: vjp_log1p,
    28: vjp_expm1,
    29: vjp_tan,
    30: vjp_arctan,
    31: vjp_arctan2,
    32: vjp_sinh,
    33: vjp_cosh,
    34: vjp_erf,
    35: vjp_softplus,
    36: vjp_sign,
    37: vjp_stop_gradient,
}
"""Opcode -> its kernel ``(x, y, z, g, dx, dy, want_x, want_y)``:
``dx = d0 * g``, ``dy = d1 * g`` per element, with strong zeros: ``dx`` where
``want_x``, ``dy`` where ``want_y`` and the op has a second operand (an array
not written may be empty)."""
