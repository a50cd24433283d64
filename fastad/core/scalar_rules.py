"""Eager (pure Python) evaluation of the op table's forward rules.

Values are computed while recording, so ``float(z)`` and Python control flow
on ``z.value`` work. The rules are the expressions of ``kernels/optable.py``
compiled into Python functions, so the eager value of every op comes from the
same text as the compiled sweeps.

Python's ``math`` raises where IEEE 754 and NumPy return a value
(``math.log(0)``, ``1.0 / 0.0``, ``math.exp(1000)``). The fast path uses
``math``; when it raises, the same expression is evaluated again with NumPy
scalars and errors ignored, which gives the IEEE/NumPy result the compiled
sweeps give: ``log(0) = -inf``, ``1/0 = inf``, ``sqrt(-1) = nan``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, cast

import numpy as np

from fastad.kernels import optable

EagerRule: TypeAlias = Callable[[float, float], float]

# Where NumPy's name differs; math.erf never raises, so it is its own fallback.
_NUMPY_EQUIVALENT = {
    "fabs": np.fabs,
    "pow": np.power,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "erf": math.erf,
}

_helpers = {helper.__name__: helper for helper in optable.HELPERS}
_math_namespace = {name: getattr(math, name) for name in optable.MATH_NAMES} | _helpers
_numpy_namespace = {
    name: _NUMPY_EQUIVALENT.get(name, getattr(np, name, None)) for name in optable.MATH_NAMES
} | _helpers


def _compile(expression: str, namespace: Mapping[str, Any]) -> EagerRule:
    return eval(f"lambda a, b: {expression}", dict(namespace))  # noqa: S307 (table text)


EAGER: list[EagerRule | None] = [
    _compile(op.value, _math_namespace) if op.arity else None for op in optable.OPS
]
"""Per opcode, ``f(a, b)`` on Python floats with ``math``; may raise where IEEE does not.

None for leaves and constants, which have no forward rule."""

_ieee: list[EagerRule | None] = [
    _compile(op.value, _numpy_namespace) if op.arity else None for op in optable.OPS
]


# Only opcodes with operands are evaluated, and each of those has its rules.
_eager_rules = cast("list[EagerRule]", EAGER)
_ieee_rules = cast("list[EagerRule]", _ieee)


def ieee_value(code: int, a: float, b: float = 0.0) -> float:
    """The IEEE/NumPy value of op ``code`` at ``a``, ``b``: the fallback of ``EAGER``."""
    with np.errstate(all="ignore"):
        return float(_ieee_rules[code](np.float64(a), np.float64(b)))


def value(code: int, a: float, b: float = 0.0) -> float:
    """The value of op ``code`` at operand values ``a`` (and ``b``), IEEE semantics."""
    try:
        return _eager_rules[code](a, b)
    except (ArithmeticError, ValueError):
        return ieee_value(code, a, b)
