"""Block rules of reductions: ``sum``, ``mean``, ``max``, ``min``, ``prod``.

A reduction moves the reduced axes last and works on rows
(:func:`to_rows`, :func:`from_rows`); the softmax family
(``loss_rules``) uses the same layout.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
from numpy.typing import NDArray

from fastad.core.block_rule import BlockRule, Needs, Shape, Values
from fastad.core.reach import (
    UNREACHED,
    add_reduce,
    contributions,
    reach_sum,
    sums_short_rows,
)
from fastad.kernels import fused

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue


# -- reductions ---------------------------------------------------------------------------------
class Reduction(NamedTuple):
    """The parameters of a reduction, normalised by the recorder: sorted
    non-negative ``axes`` (None: all of them) and NumPy's ``keepdims``."""

    axes: tuple[int, ...] | None
    keepdims: bool = False

    def shape(self, shape: Shape) -> Shape:
        """The result's shape for an operand of ``shape``."""
        if self.axes is None and not self.keepdims:
            return ()
        axes = range(len(shape)) if self.axes is None else self.axes
        if self.keepdims:
            return tuple(1 if i in axes else n for i, n in enumerate(shape))
        return tuple(n for i, n in enumerate(shape) if i not in axes)

    def count(self, shape: Shape) -> int:
        """How many elements each result element reduces."""
        axes = range(len(shape)) if self.axes is None else self.axes
        return math.prod(shape[i] for i in axes)

    def spread(self, reduced: RuleValue, shape: Shape) -> FloatArray:
        """A result-shaped array as a view that broadcasts against the operand's ``shape``."""
        return np.reshape(reduced, self._replace(keepdims=True).shape(shape))

    def expand(self, reduced: RuleValue, shape: Shape) -> FloatArray:
        """A result-shaped array repeated over the reduced axes: a read-only view of ``shape``."""
        return np.broadcast_to(self.spread(reduced, shape), shape)


Layout = tuple[Shape, list[int]]


def to_rows(a: RuleValue, axes: tuple[int, ...] | None) -> tuple[FloatArray, Layout]:
    """``a`` as a C-contiguous (rows, k) array whose rows are the slices along ``axes``.

    The reduced axes are moved last (in order) and flattened; rows follow
    the kept axes in order, so a result of :meth:`Reduction.shape` read
    flat lines up with them. ``from_rows`` undoes it.
    """
    a = np.asarray(a, dtype=np.float64)  # a scalar (a Var's value) is a 0-d array
    layout = row_layout(a.shape, axes)
    moved_shape, order = layout
    kept = moved_shape[: a.ndim - (a.ndim if axes is None else len(axes))]
    rows = np.ascontiguousarray(np.transpose(a, order)).reshape(
        math.prod(kept), math.prod(moved_shape[len(kept) :])
    )
    return rows, layout


def row_layout(shape: Shape, axes: tuple[int, ...] | None) -> Layout:
    """The layout :func:`to_rows` gives an array of ``shape``, without touching its data."""
    axes = tuple(range(len(shape))) if axes is None else axes
    order = [i for i in range(len(shape)) if i not in axes] + list(axes)
    return tuple(shape[i] for i in order), order


def from_rows(rows: FloatArray, layout: Layout) -> FloatArray:
    """The inverse of :func:`to_rows`: the array in its own axis order, C-contiguous."""
    shape, order = layout
    out = np.transpose(rows.reshape(shape), np.argsort(order))
    # not np.ascontiguousarray, which makes a 0-d result (a scalar operand) 1-d
    return out if out.flags.c_contiguous else out.copy()


def log_softmax_rows(rows: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The log-softmax of each row of ``rows`` (r, k), and each row's logsumexp (r,).

    Each row is shifted by its maximum ``m``, so every exp is at most 1 (no
    overflow at logits of 1e4 or more), and the log-softmax is ``(x - m) -
    log(sum(exp(x - m)))``: ``x - m`` is exact near the maximum, where ``x -
    logsumexp(x)`` would lose the digits of logsumexp's rounding (1e-12
    relative at 1e4). A row whose maximum is infinite or nan gets
    logsumexp ``m`` (inf for a row holding inf, -inf for a row of -inf, nan
    with a nan) and a log-softmax of nan throughout (so a softmax of nan
    throughout, as JAX, PyTorch and SciPy give). NumPy's vectorised exp does the exps (a
    compiled loop calling exp per element is several times slower), two
    compiled passes the rest: the maxima and the shift, then the sums, their
    logs and the subtraction.
    """
    log_p, shift = fused.shifted_rows(rows)
    # Every x - m is at most 0 or nan: the exps neither overflow nor warn.
    log_total = fused.finish_log_softmax(log_p, np.exp(log_p), shift)
    return log_p, shift + log_total


def per_row(x: RuleValue) -> FloatArray:
    """A reduction's result (or its adjoint) read flat, one element per row of ``to_rows``."""
    return np.ascontiguousarray(np.reshape(x, -1), dtype=np.float64)


def scalar_or_array(out: Any) -> RuleValue:
    return float(out) if np.ndim(out) == 0 else out


class Reduce(BlockRule):
    """``sum`` or ``mean`` over the axes of a :class:`Reduction` (all: a scalar)."""

    linear_adjoint = True

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        return cast(Reduction, params).shape(shapes[0])

    def forward(self, values: Values, params: Any) -> RuleValue:
        a = values[0]
        # IEEE results, silently: inf - inf is nan, and so is the mean of
        # nothing (0 / 0), where np.mean would warn. Sum, then divide: what
        # np.mean computes, bit for bit. Short rows are summed by a compiled
        # call, which warns of nothing, and divided by a count of at least 1:
        # they skip np.errstate's microsecond.
        if sums_short_rows(a, params.axes):
            out = add_reduce(a, params.axes, params.keepdims)
            return out / params.count(a.shape) if self.name == "mean" else out
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            out = add_reduce(a, params.axes, params.keepdims)  # a.sum's bits
            if self.name == "mean":
                out = out / params.count(a.shape)
        return scalar_or_array(out)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        (a,) = values
        if a.size == 0:
            return (np.zeros(a.shape),)  # nothing to send a gradient to
        if self.name == "mean":
            g = g * (1.0 / params.count(a.shape))
        gradient = np.empty(a.shape)
        if params.axes is None:  # one adjoint (a number, or kept dims), sent to every element
            if isinstance(g, float):
                gradient.fill(g)  # np.full's work without its Python wrapper
            else:
                gradient[...] = g
            return (gradient,)
        gradient[...] = params.spread(g, a.shape)  # one broadcasting copy
        return (gradient,)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        a = values[0]
        value = reach_sum(tangents[0], axis=params.axes, keepdims=params.keepdims)
        if self.name == "mean" and a.size:
            value = value / params.count(a.shape)
        return scalar_or_array(value)


class Extremum(Reduce):
    """``max`` or ``min`` over the axes of a :class:`Reduction`.

    NumPy's values: a nan anywhere in a reduced slice makes its result nan; a
    tie of -0.0 and +0.0 gives +0.0 for max and -0.0 for min (NumPy's sign
    there depends on its vectorised loop).
    The gradient goes to the elements equal to the result, split evenly
    among ties (as ``torch.amax``; a scalar ``fa.maximum`` splits a two-way
    tie the same way); where the result is nan, to the nan elements (where
    ``torch.amax`` gives nan everywhere). The other elements get nothing
    (UNREACHED), not even from an inf adjoint.
    """

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        if params.count(shapes[0]) == 0:
            raise ValueError(
                f"{self.name} of an empty array (shape {shapes[0]}, axes {params.axes}) "
                "has no value"
            )
        return super().shape(shapes, params)

    def forward(self, values: Values, params: Any) -> RuleValue:
        a = values[0]
        reduce = np.max if self.name == "max" else np.min
        out = reduce(a, axis=params.axes, keepdims=params.keepdims)
        zero = np.asarray(out) == 0.0
        if zero.any():
            # A tie of -0.0 and +0.0: NumPy's sign depends on its vectorised loop, so
            # the rule is fixed here (generated code gives the same): max is +0.0 where
            # any tied element is, min -0.0.
            sign = np.signbit(a) if self.name == "min" else ~np.signbit(a)
            signed = np.any((a == 0.0) & sign, axis=params.axes, keepdims=params.keepdims)
            preferred, other = (-0.0, 0.0) if self.name == "min" else (0.0, -0.0)
            out = np.where(zero, np.where(signed, preferred, other), out)
        return scalar_or_array(out)

    def _shares(self, a: FloatArray, out: RuleValue, params: Any) -> FloatArray:
        """Each element's share of the result's derivative: 1 / ties where it is hit."""
        best = params.spread(out, a.shape)
        hit = (a == best) | (np.isnan(a) & np.isnan(best))
        return hit / np.sum(hit, axis=params.axes, keepdims=True)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        (a,) = values
        return (contributions(self._shares(a, out, params), params.expand(g, a.shape)),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        (a,) = values
        shares = contributions(self._shares(a, out, params), tangents[0])
        return scalar_or_array(reach_sum(shares, axis=params.axes, keepdims=params.keepdims))


class Prod(Reduce):
    """``prod`` over the axes of a :class:`Reduction`.

    The derivative for an element is the product of the *other* elements of
    its slice, computed as prefix times suffix products, never by dividing
    the result: exact at zeros (one zero: only it gets a nonzero gradient;
    two: nobody does). A zero among the others makes the derivative
    exactly 0 even beside an inf (a chain of scalar multiplies gives 0 or
    nan there, by its order; this rule is the chain that meets the zero
    first); a nan among the others makes it nan.
    """

    linear_adjoint = False  # its VJP moves with the values: vjp_change

    def forward(self, values: Values, params: Any) -> RuleValue:
        with np.errstate(invalid="ignore", over="ignore"):
            out = values[0].prod(axis=params.axes, keepdims=params.keepdims)
        return scalar_or_array(out)

    def _others(self, a: FloatArray, params: Any) -> FloatArray:
        """Per element, the product of the other elements of its slice: exactly 0
        (a strong zero) where another element is 0, even with an inf among the
        others (not inf * 0 = nan: a chain of scalar multiplies that meets the
        zero first gives 0); nan where another element is nan."""
        rows, layout = to_rows(a, params.axes)
        ones = np.ones((rows.shape[0], 1))
        reversed_rows = rows[:, :0:-1]  # (VJP and JVP run under the sweep's IEEE state)
        before: FloatArray = np.cumprod(np.hstack([ones, rows[:, :-1]]), 1, np.float64)
        after: FloatArray = np.cumprod(np.hstack([ones, reversed_rows]), 1, np.float64)
        others = before * after[:, ::-1]
        zeros, other_nan = _zeros_and_nans_of_others(rows)
        others[(zeros > 0) & ~other_nan] = 0.0
        return from_rows(others, layout)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        (a,) = values
        if a.size == 0:
            return (np.zeros(a.shape),)
        return (contributions(self._others(a, params), params.expand(g, a.shape)),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        (a,) = values
        if a.size == 0:
            return scalar_or_array(np.full(np.shape(out), UNREACHED))
        moved = contributions(self._others(a, params), tangents[0])
        return scalar_or_array(reach_sum(moved, axis=params.axes, keepdims=params.keepdims))

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # dx_i = g others_i moves by g d(others_i), where d(others_i) is the sum over
        # k != i of t_k times the product of the rest.
        (a,) = values
        if a.size == 0:
            return (None,)
        moved = self._others_tangent(a, np.broadcast_to(tangents[0], a.shape), params)
        return (contributions(moved, params.expand(g, a.shape)),)

    def _others_tangent(self, a: FloatArray, t: FloatArray, params: Any) -> FloatArray:
        """Per element, the tangent along ``t`` of the product of the other elements of its
        slice, by prefix and suffix products carried with their tangents (dual numbers),
        never by dividing. Each term is a contribution, as the scalar multiplies' rules
        send it: nothing from an unreached tangent or across an exact zero, so a tangent
        that never moved meets an overflowed (inf) partial product as nothing, not as
        ``0 * inf = nan``. Two zeros among the others make it exactly 0."""
        rows, layout = to_rows(a, params.axes)
        moving = to_rows(t, params.axes)[0]
        count, length = rows.shape
        before, d_before = np.empty(rows.shape), np.empty(rows.shape)
        after, d_after = np.empty(rows.shape), np.empty(rows.shape)
        value, tangent = np.ones(count), np.full(count, UNREACHED)
        for i in range(length):  # the products of the elements before i, and their tangents
            before[:, i], d_before[:, i] = value, tangent
            tangent = contributions(rows[:, i], tangent) + contributions(value, moving[:, i])
            value = value * rows[:, i]
        value, tangent = np.ones(count), np.full(count, UNREACHED)
        for i in range(length - 1, -1, -1):  # after i
            after[:, i], d_after[:, i] = value, tangent
            tangent = contributions(rows[:, i], tangent) + contributions(value, moving[:, i])
            value = value * rows[:, i]
        moved = contributions(after, d_before) + contributions(before, d_after)
        zeros, other_nan = _zeros_and_nans_of_others(rows)
        moved[(zeros > 1) & ~other_nan] = 0.0
        return from_rows(moved, layout)


def _zeros_and_nans_of_others(rows: FloatArray) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Per element of ``rows``, how many *other* elements of its row are zero, and whether
    another is nan: where ``prod``'s derivatives are exactly 0."""
    zeros, nans = rows == 0.0, np.isnan(rows)
    other_zeros = zeros.sum(axis=1, keepdims=True) - zeros
    return other_zeros, (nans.sum(axis=1, keepdims=True) - nans) > 0


class Cumsum(BlockRule):
    """``np.cumsum(a, axis=params)``: running sums along one axis (the recorder flattens
    first for ``axis=None``). Linear: the VJP is the running sum of the adjoint from the
    end, the JVP the running sum of the tangent. Unreached (-0.0) elements stay unreached
    through both (-0.0 + -0.0 is -0.0)."""

    linear_adjoint = True

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        shape = shapes[0]
        if type(params) is not int or not 0 <= params < len(shape):
            raise ValueError(f"cumsum: axis {params!r} is out of range for shape {shape}")
        return shape

    def forward(self, values: Values, params: Any) -> RuleValue:
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is nan, as NumPy's
            return np.cumsum(values[0], axis=params)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        reversed_g = np.flip(np.asarray(g, dtype=np.float64), axis=params)
        return (np.ascontiguousarray(np.flip(np.cumsum(reversed_g, axis=params), axis=params)),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        return np.cumsum(np.broadcast_to(tangents[0], np.shape(values[0])), axis=params)
