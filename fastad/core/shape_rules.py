"""Block rules of shape ops: ``reshape``, ``transpose``, ``concatenate``, ``index``.

Their VJPs are linear in the adjoint and constant in the values, so each
is its own second-order rule (``linear_adjoint``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.block_rule import BlockRule, Needs, Shape, Values
from fastad.core.reach import (
    UNREACHED,
)

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue


class Reshape(BlockRule):
    """``a.reshape(params)``; the recorder resolves ``-1`` first."""

    linear_adjoint = True

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        shape = tuple(params) if isinstance(params, tuple) else ()
        if (
            not shape
            or not all(isinstance(n, int) and n >= 0 for n in shape)
            or math.prod(shape) != math.prod(shapes[0])
        ):
            raise ValueError(f"cannot reshape an array of shape {shapes[0]} to {params!r}")
        return shape

    def forward(self, values: Values, params: Any) -> RuleValue:
        return np.reshape(values[0], params)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        return (np.reshape(g, np.shape(values[0])),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        return np.reshape(tangents[0], params)


class Transpose(BlockRule):
    """``np.transpose(a, params)``: the axes permuted (None: reversed, ``a.T``)."""

    linear_adjoint = True

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        shape = shapes[0]
        return shape[::-1] if params is None else tuple(shape[i] for i in params)

    def forward(self, values: Values, params: Any) -> RuleValue:
        return np.ascontiguousarray(np.transpose(values[0], params))

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        inverse = None if params is None else tuple(np.argsort(params))
        return (np.transpose(g, inverse),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        return np.ascontiguousarray(np.transpose(tangents[0], params))


class Concatenate(BlockRule):
    """``np.concatenate(operands, axis=params)``: any number of operands."""

    linear_adjoint = True

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        first = shapes[0]
        for shape in shapes:
            if (
                not shape
                or len(shape) != len(first)
                or any(
                    n != m for i, (n, m) in enumerate(zip(shape, first, strict=True)) if i != params
                )
            ):
                raise ValueError(
                    f"concatenate along axis {params} needs arrays of one number of axes whose "
                    f"other axes match, got shapes {list(shapes)}"
                )
        return first[:params] + (sum(shape[params] for shape in shapes),) + first[params + 1 :]

    def forward(self, values: Values, params: Any) -> RuleValue:
        return np.concatenate(values, axis=params)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        ends = np.cumsum([np.shape(v)[params] for v in values])[:-1]
        return tuple(np.split(g, ends, axis=params))

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        parts = [
            np.full(np.shape(v), UNREACHED) if t is None else t
            for v, t in zip(values, tangents, strict=True)
        ]
        return np.concatenate(parts, axis=params)


class Index(BlockRule):
    """``a[key]``: a scalar for a single element, else an array (a copy)."""

    linear_adjoint = True

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        return np.empty(shapes[0], np.bool_)[params].shape

    def forward(self, values: Values, params: Any) -> RuleValue:
        return _pick(values[0], params)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        gradient = np.full(np.shape(values[0]), UNREACHED)  # elements not picked: unreached
        np.add.at(gradient, params, g)
        return (gradient,)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        return _pick(np.asarray(tangents[0]), params)


def _pick(a: FloatArray, key: Any) -> float | FloatArray:
    """``a[key]``: a float for one element, else a C-contiguous copy (NumPy lays out a
    fancy index after a slice, ``a[:, [1, 0]]``, with other strides, and a sum of such
    a tangent would add in another order than generated code's: other bits)."""
    out = a[key]
    return float(out) if np.ndim(out) == 0 else np.array(out, order="C")
