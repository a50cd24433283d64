"""NumPy ufuncs recorded as compositions of fastad's own ops, on scalar nodes and blocks.

``np.arcsin``, ``np.hypot``, ``np.logaddexp``... have no row of their own in
the op table: each is written here from ops that have one (``arctan2``,
``sqrt``, ``log1p``, ``maximum``, ``where``...), in a form that keeps NumPy's
value to a few rounding errors over the whole range (large arguments take
the asymptotic branch, as glibc's do; ``exp2`` is ``2.0 ** x`` and ``cbrt``
takes a Newton step, so both are exact at the integers and the cubes), nan
outside the domain as NumPy, and whose derivative is the function's.
Every derivative, first and second order, and every tier (eager, compiled,
generated code) is therefore the composed ops'.

The comparisons ``np.isnan``, ``np.isfinite`` and ``np.isinf`` record
comparison nodes (1.0 or 0.0, gradient 0), as ``x > y`` does. The roundings
(``np.floor``, ``np.ceil``, ``np.rint``, ``np.trunc``, ``np.round``) have
derivative 0 wherever they have one, so they return NumPy's numbers as
constants, outside the tape; ``fa.compile`` refuses them while tracing,
since the numbers would be frozen into every replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fastad.eager import functions
from fastad.eager.handle import values_of
from fastad.eager.node import Var

LN2 = math.log(2.0)
LOG2E = 1.0 / LN2  # NumPy's NPY_LOG2E, the same double
LARGE = 2.0**28
"""Beyond this, ``arcsinh(x) = log(2x)`` and ``arccosh(x) = log(2x)`` to rounding (glibc's
cut): the exact forms would square ``x`` past float64's range."""

where, sqrt, log, log1p = functions.where, functions.sqrt, functions.log, functions.log1p


def exp2(x: Any) -> Any:
    return 2.0**x  # pow: exact at the integers


def _cbrt_of_positive(t: Any) -> Any:
    """``t ** (1/3)`` and one Newton step, ``(2r + t / r²) / 3`` (no cube to overflow), for
    the correctly rounded root; at 0 and inf the power alone (0 with derivative +inf; inf
    with derivative 0, where the step would divide inf by inf)."""
    root = t ** (1.0 / 3.0)
    step = (2.0 * root + t / (root * root)) * (1.0 / 3.0)
    return where(t > 0.0, where(t < np.inf, step, root), root)


def _sign_bit(x: Any) -> Any:
    """``np.signbit(x)`` as a condition: ``atan2(x, -1)`` is -pi at -0.0 and +pi at +0.0,
    so the odd functions below keep the sign of a zero, as NumPy's do."""
    return functions.arctan2(x, -1.0) < 0.0


def cbrt(x: Any) -> Any:
    return where(_sign_bit(x), -_cbrt_of_positive(-x), _cbrt_of_positive(x))


def arcsin(x: Any) -> Any:
    return functions.arctan2(x, sqrt((1.0 - x) * (1.0 + x)))


def arccos(x: Any) -> Any:
    return functions.arctan2(sqrt((1.0 - x) * (1.0 + x)), x)


def _arcsinh_of_positive(a: Any) -> Any:
    exact = log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)))
    return where(a > LARGE, log(a) + LN2, exact)


def arcsinh(x: Any) -> Any:
    return where(_sign_bit(x), -_arcsinh_of_positive(-x), _arcsinh_of_positive(x))


def arccosh(x: Any) -> Any:
    """nan below 1, as NumPy, and so are its first and second derivatives (``sqrt`` of
    the negative ``x - 1``); the exact form would round to a finite value or an infinity
    there, and ``x * nan`` would have a second derivative of 0."""
    t = x - 1.0
    inside = where(x > LARGE, log(x) + LN2, log1p(t + sqrt(t * (t + 2.0))))
    return where(x >= 1.0, inside, sqrt(t))


def _arctanh_of_positive(a: Any) -> Any:
    """glibc's ``log1p(2a / (1 - a)) / 2`` below 1; at 1, ``(log1p(a) - log1p(-a)) / 2``,
    whose derivative is the function's (+inf) where the first form's is 0 * inf."""
    below_one = 0.5 * log1p(2.0 * a / (1.0 - a))
    return where(a < 1.0, below_one, 0.5 * (log1p(a) - log1p(-a)))


def arctanh(x: Any) -> Any:
    """Odd, as glibc's: log1p of a positive argument is well conditioned near -1 too."""
    return where(x < 0.0, -_arctanh_of_positive(-x), _arctanh_of_positive(x))


def deg2rad(x: Any) -> Any:
    return x * (math.pi / 180.0)


def rad2deg(x: Any) -> Any:
    return x * (180.0 / math.pi)


def hypot(a: Any, b: Any) -> Any:
    """``sqrt(a² + b²)`` scaled by the larger magnitude, so no square overflows."""
    larger = functions.maximum(functions.abs(a), functions.abs(b))
    scale = where(larger > 0.0, larger, 1.0)
    scaled = scale * sqrt((a / scale) * (a / scale) + (b / scale) * (b / scale))
    infinite = isinf(a) + isinf(b)  # an infinity wins over a nan, as in NumPy
    return where(infinite > 0.0, np.inf, scaled)


def logaddexp(a: Any, b: Any) -> Any:
    """``log(exp(a) + exp(b))`` as NumPy computes it, the larger plus
    ``log1p(exp(-|a - b|))``: ``a + softplus(b - a)`` where ``a >= b``, else
    ``b + softplus(a - b)`` (``softplus(x) = log1p(exp(x))`` there, ``x <= 0``). Each
    side is smooth with the function's derivatives of every order, so a tie has them
    too (``max`` and ``|a - b|`` would put their kinks there: a second derivative of 0
    instead of 1/4). Two equal infinities (whose difference is nan) give themselves,
    as NumPy does, with the derivative's limit along ``a = b`` (1/2 each); a nan gives
    nan and a nan derivative."""
    return _log_add(a, b, functions.softplus)


def _softplus2(x: Any) -> Any:
    """``log2(1 + 2**x)`` as NumPy's ``logaddexp2`` computes it: ``log1p(exp2(x))`` times
    ``log2(e)``."""
    return LOG2E * log1p(exp2(x))


def logaddexp2(a: Any, b: Any) -> Any:
    """``log2(2**a + 2**b)``, NumPy's formula in base 2 (see :func:`logaddexp`)."""
    return _log_add(a, b, _softplus2)


def _log_add(a: Any, b: Any, softplus: Callable[[Any], Any]) -> Any:
    difference = a - b
    stable = where(difference >= 0.0, a + softplus(-difference), b + softplus(difference))
    equal_infinities = where(a == b, 0.5 * (a + b), stable)
    return where(difference != difference, equal_infinities, stable)


def _ignoring_nan(pick: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``np.fmax``/``np.fmin``: ``pick`` of the two, or the one that is not nan."""

    def select(a: Any, b: Any) -> Any:
        return where(b != b, a, where(a != a, b, pick(a, b)))

    return select


def isnan(x: Any) -> Any:
    return x != x


def isfinite(x: Any) -> Any:
    return functions.abs(x) < np.inf


def isinf(x: Any) -> Any:
    return functions.abs(x) == np.inf


def _rounding(name: str) -> Callable[..., Any]:
    """``np.floor`` and its kin: NumPy's numbers of the node's values, as a constant."""
    rule = getattr(np, name)

    def rounded(x: Any, *args: Any) -> Any:
        numbers = rule(values_of(x, f"np.{name}"), *args)
        return float(numbers) if isinstance(x, Var) else numbers

    return rounded


def round_(a: Any, decimals: int = 0, out: Any = None) -> Any:
    """``np.round`` (an array function, not a ufunc): NumPy's numbers, as a constant."""
    if out is not None:
        raise TypeError("np.round(..., out=...) is not recorded on fastad nodes: use the result")
    numbers = np.round(values_of(a, "np.round"), decimals)
    return float(numbers) if isinstance(a, Var) else numbers


UFUNCS: dict[str, Callable[..., Any]] = {
    "exp2": exp2,
    "cbrt": cbrt,
    "arcsin": arcsin,
    "arccos": arccos,
    "arcsinh": arcsinh,
    "arccosh": arccosh,
    "arctanh": arctanh,
    "deg2rad": deg2rad,
    "radians": deg2rad,
    "rad2deg": rad2deg,
    "degrees": rad2deg,
    "hypot": hypot,
    "logaddexp": logaddexp,
    "logaddexp2": logaddexp2,
    "fmax": _ignoring_nan(functions.maximum),
    "fmin": _ignoring_nan(functions.minimum),
    "isnan": isnan,
    "isfinite": isfinite,
    "isinf": isinf,
    **{name: _rounding(name) for name in ("floor", "ceil", "rint", "trunc")},
}
"""NumPy ufunc name -> its composition (``numpy_protocol`` dispatches to them)."""

__all__ = ["UFUNCS", "round_"]
