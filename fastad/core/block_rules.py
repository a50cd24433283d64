"""The block-op registry: one entry per op on arrays, every rule side by side.

An entry (a :class:`BlockRule`) gives a block op's shape rule, its forward
(the one function that computes the value while recording and again in a
replay, so the two agree bit for bit), its vector-Jacobian product and its
Jacobian-vector product. Operands are a tuple of any length
(``linear(X, W, b)`` has three). No Jacobian is ever formed: a matmul's VJP
is ``dA = G @ B.T``, ``dB = A.T @ G``.

Elementwise ops are the scalar op table's rows (``kernels/optable.py``)
applied per element by compiled kernels, with NumPy broadcasting; every
other op has a class of its own below. :func:`rule` is the lookup the sweep
driver uses; an opcode without an entry raises ``NotImplementedError``
naming it, never a silent zero gradient.

Rules keep strong zeros (``fastad/core/reach.py``): an adjoint or tangent
element nothing reached is ``UNREACHED`` (-0.0) and sends nothing.

Adding a block op: its ``BlockOp`` row in ``kernels/optable.py``, a class
here registered in ``RULES``, a recording function (``fastad/eager/blocks.py`` or
a ``Block`` method) and a row in ``tests/test_registry.py``'s table.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from fastad.core.reach import (
    UNREACHED,
    Need,
    contributions,
    reach_matmul,
    reach_sum,
    unbroadcast,
)
from fastad.kernels import fused, optable, sweeps

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue

Shape = tuple[int, ...]
Values = tuple[Any, ...]
Needs = tuple[int, ...] | None
"""Per operand, a ``reach.Need`` (or a bool: True is ``ALL``): whether its
contribution is wanted (None: all are, with their reach). A VJP may skip the
work for an operand that is not (the driver discards what it sends), and a
product may leave a leaf's zeros unsettled (``Need.VALUES``)."""


class BlockRule:
    """One block op: shape rule, forward, VJP and JVP.

    ``values`` are the operands' values (arrays, or floats for scalar
    nodes), ``out`` the node's value, ``params`` what the recorder stored
    (an axis, a shape, an index key; None for most ops). A shape of ``()``
    means the node is a scalar (a ``Var``): its value is a float.
    """

    name: str
    code: int
    arity: int

    def __init__(self, name: str) -> None:
        op = optable.BLOCK_BY_NAME.get(name) or optable.BY_NAME[name]
        self.name, self.code, self.arity = op.name, op.code, op.arity

    def __repr__(self) -> str:
        return f"<block rule {self.name!r} (opcode {self.code})>"

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        """The output shape for operands of ``shapes``; raise ``ValueError`` if they do not fit."""
        raise NotImplementedError

    def forward(self, values: Values, params: object) -> RuleValue:
        """The node's value; with :attr:`saves`, ``(value, saved)``."""
        raise NotImplementedError

    saves = False
    """The forward returns ``(value, saved)``: what the VJP would otherwise
    compute again (a cross-entropy's log-softmax), kept beside the node for
    the backward sweep (:meth:`vjp_saved`)."""

    def value_of(self, values: Values, params: object) -> RuleValue:
        """The node's value alone, what :meth:`forward` gives without what it saves."""
        result = self.forward(values, params)
        return result[0] if self.saves else result

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        """One contribution per operand (None: nothing for it), from the output adjoint ``g``.

        ``needs`` says which operands' contributions are wanted (None: all);
        the work for the others may be skipped (their entry is then None).
        """
        raise NotImplementedError

    def vjp_saved(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        params: object,
        needs: Needs,
        saved: tuple[Any, ...],
    ) -> Values:
        """:meth:`vjp` reading what the forward saved (a rule with :attr:`saves`).

        The same contributions, bit for bit: ``saved`` is what the VJP would
        compute again. A rule that saves nothing has only :meth:`vjp`.
        """
        raise NotImplementedError(f"the block op {self.name!r} saves nothing for its VJP")

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        """The output tangent from the operands' (None: nothing reached that operand)."""
        raise NotImplementedError

    linear_adjoint = False
    """The VJP is linear in ``g`` and locally constant in the values (a reshape,
    a sum, an index): its tangent is the VJP of ``h``, and that is its
    second-order rule."""

    def second_vjp(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: Values,
        params: object,
        needs: Needs = None,
    ) -> Values:
        """The tangent of :meth:`vjp` (forward-over-reverse), one contribution per operand.

        ``g`` is the output's adjoint and ``h`` that adjoint's tangent,
        ``tangents`` the operands' tangents (None for any of them: nothing
        reached it). The tangent of ``vjp(values, out, g)`` along them:
        ``vjp(values, out, h)`` plus the VJP's own change with the values.
        """
        if not self.linear_adjoint:
            raise NotImplementedError(
                f"the block op {self.name!r} (opcode {self.code}) has no second-order rule "
                "yet, so no Hessian-vector product can pass through it: record this part "
                "with scalar ops or with blocks that have one "
                f"({', '.join(second_order_ops())})"
            )
        if h is None:
            return (None,) * len(values)
        return self.vjp(values, out, h, params, needs)


def second_order_ops() -> list[str]:
    """The block ops that have a second-order rule, by name (the elementwise ops as one
    entry), read from the registry."""
    found = [
        rule.name
        for rule in RULES.values()
        if not isinstance(rule, Elementwise)
        and (rule.linear_adjoint or type(rule).second_vjp is not BlockRule.second_vjp)
    ]
    return ["elementwise ops", *found]


# -- elementwise: the scalar op table, per element ---------------------------------------------
def broadcast_shape(shape_a: Shape, shape_b: Shape) -> Shape:
    """NumPy's broadcast of two shapes, with an error that names both.

    In Python: ``np.broadcast_shapes`` costs a few microseconds a call, which
    every elementwise op on a tape would pay twice.
    """
    if shape_a == shape_b or not shape_b:
        return shape_a
    if not shape_a:
        return shape_b
    extra = len(shape_a) - len(shape_b)
    if extra > 0:
        shape_b = (1,) * extra + shape_b
    elif extra < 0:
        shape_a = (1,) * -extra + shape_a
    shape = []
    for n, m in zip(shape_a, shape_b, strict=True):
        if n == m or m == 1:
            shape.append(n)
        elif n == 1:
            shape.append(m)
        else:
            raise ValueError(
                f"shapes {shape_a[max(-extra, 0) :]} and {shape_b[max(extra, 0) :]} cannot be "
                "broadcast together (NumPy rules: trailing axes must match or be 1)"
            )
    return tuple(shape)


def flat(x: RuleValue, shape: Shape) -> FloatArray:
    """``x`` broadcast to ``shape`` as a 1-D C-contiguous float64 array.

    A view, not a copy, when ``x`` already is such an array of ``shape``
    (the common case: operands of one shape).
    """
    if (
        type(x) is np.ndarray
        and x.shape == shape
        and x.dtype == np.float64
        and x.flags.c_contiguous
    ):
        return x.reshape(-1)
    full = np.empty(shape)
    full[...] = x  # NumPy broadcasts (and converts) as it copies
    return full.reshape(-1)


def _shape(value: RuleValue) -> Shape:
    return value.shape if type(value) is np.ndarray else np.shape(value)


_ADD = optable.BY_NAME["add"].code


class Elementwise(BlockRule):
    """A scalar op (``kernels/optable.py``) applied per element, with broadcasting."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        return shapes[0] if self.arity == 1 else broadcast_shape(shapes[0], shapes[1])

    def forward(self, values: Values, params: object) -> FloatArray:
        a = values[0]
        if self.arity == 1:
            shape = _shape(a)
            a_full = b_full = flat(a, shape)
        else:
            b = values[1]
            shape = broadcast_shape(_shape(a), _shape(b))
            a_full, b_full = flat(a, shape), flat(b, shape)
        out = np.empty(shape)
        sweeps.map_forward(self.code, a_full, b_full, out.reshape(-1))
        return out

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        shape = out.shape  # an elementwise block op's value is an array
        if self.code == _ADD and type(g) is np.ndarray and g.shape == shape:
            # d(a + b) = g for each, bit for bit map_vjp's contribution(1.0, g): g
            # itself where reached (+ 0.0 changes nothing but -0.0), -0.0 where not.
            return tuple(
                unbroadcast(g.copy(), _shape(value)) if want else None
                for value, want in zip(
                    values, (True, True) if needs is None else needs, strict=True
                )
            )
        a_full = flat(values[0], shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        da, db = np.empty(a_full.size), np.empty(a_full.size)
        sweeps.map_vjp(self.code, a_full, b_full, out.reshape(-1), flat(g, shape), da, db)
        da_operand = unbroadcast(da.reshape(shape), _shape(values[0]))
        if self.arity == 1:
            return (da_operand,)
        if needs is not None and not needs[1]:  # data (a constant): nothing to sum
            return da_operand, None
        return da_operand, unbroadcast(db.reshape(shape), _shape(values[1]))

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        shape = np.shape(out)
        a_full = flat(values[0], shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        ta = tangents[0]
        ta_full = flat(UNREACHED if ta is None else ta, shape)
        if self.arity == 1:
            tb_full = ta_full
        else:
            tb = tangents[1]
            tb_full = flat(UNREACHED if tb is None else tb, shape)
        tangent = np.empty(a_full.size)
        sweeps.map_jvp(self.code, a_full, b_full, flat(out, shape), ta_full, tb_full, tangent)
        return tangent.reshape(shape)

    def second_vjp(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: Values,
        params: object,
        needs: Needs = None,
    ) -> Values:
        # Per element the scalar sweeps' rule (sweeps.second_backward_range):
        # d0 * h + (s0 * ta + s1 * tb) * g for the first operand, each product
        # with strong zeros, in the same order, so blocks and scalar nodes agree.
        shape = np.shape(out)
        a_full = flat(values[0], shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        out_full = flat(out, shape)
        n = a_full.size
        first = [np.full(n, UNREACHED), np.full(n, UNREACHED)]
        if h is not None:
            sweeps.map_vjp(self.code, a_full, b_full, out_full, flat(h, shape), *first)
        if g is not None:
            s0, s1, s2 = np.empty(n), np.empty(n), np.empty(n)
            sweeps.map_second(self.code, a_full, b_full, out_full, s0, s1, s2)
            ta = flat(UNREACHED if tangents[0] is None else tangents[0], shape)
            tb = (
                flat(UNREACHED, shape)
                if self.arity == 1 or tangents[1] is None
                else flat(tangents[1], shape)
            )
            g_full = flat(g, shape)
            first[0] = first[0] + contributions(
                contributions(s0, ta) + contributions(s1, tb), g_full
            )
            first[1] = first[1] + contributions(
                contributions(s1, ta) + contributions(s2, tb), g_full
            )
        sent = tuple(
            unbroadcast(first[slot].reshape(shape), _shape(values[slot]))
            for slot in range(self.arity)
        )
        return sent


# -- matrix products -----------------------------------------------------------------------------
class Matmul(BlockRule):
    """``a @ b`` as ``np.matmul``: 1-D operands act as a row (left) or a column
    (right) and lose that axis again, leading (batch) axes broadcast; two
    vectors give a scalar."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        a, b = shapes
        if not a or not b or a[-1] != b[-2 if len(b) > 1 else 0]:
            raise ValueError(
                f"matmul needs operands of 1 or more axes whose inner dimensions match "
                f"(the last of the first, the second to last of the second), got shapes "
                f"{a} and {b}"
            )
        try:
            batch = broadcast_shape(a[:-2], b[:-2])
        except ValueError:
            raise ValueError(
                f"matmul: the leading (batch) axes of shapes {a} and {b} cannot be broadcast"
            ) from None
        return batch + a[-2:-1] + b[-1:] if len(b) > 1 else batch + a[-2:-1]

    def forward(self, values: Values, params: object) -> RuleValue:
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, like the sweeps
            out = np.matmul(values[0], values[1])
        return float(out) if np.ndim(out) == 0 else out

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        a, b = values
        want_a, want_b = (True, True) if needs is None else needs
        if a.ndim == 2 and b.ndim == 2:  # the common case, without reshapes
            return (
                reach_matmul(g, b.T, True, _wants_reach(needs, 0)) if want_a else None,
                reach_matmul(a.T, g, False, _wants_reach(needs, 1)) if want_b else None,
            )
        a2, b2 = _as_matrix(a, True), _as_matrix(b, False)
        # g with the vector operands' axes put back: the shape of a2 @ b2.
        g2 = np.reshape(
            g, np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1])
        )
        da = db = None
        if want_a:
            da = reach_matmul(g2, np.swapaxes(b2, -1, -2), True, _wants_reach(needs, 0))
            da = np.reshape(unbroadcast(da, a2.shape), a.shape)
        if want_b:
            db = reach_matmul(np.swapaxes(a2, -1, -2), g2, False, _wants_reach(needs, 1))
            db = np.reshape(unbroadcast(db, b2.shape), b.shape)
        return da, db

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        a, b = values
        ta, tb = tangents
        total: FloatArray = np.full(np.shape(out), UNREACHED)
        if ta is not None:
            total = total + _matmul_reach(np.asarray(ta, dtype=np.float64), b, True)
        if tb is not None:
            total = total + _matmul_reach(a, np.asarray(tb, dtype=np.float64), False)
        return float(total) if np.ndim(total) == 0 else total

    def second_vjp(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: Values,
        params: object,
        needs: Needs = None,
    ) -> Values:
        # The VJP (G B^T, A^T G) is bilinear: its tangent is (H B^T + G tB^T, A^T H + tA^T G).
        a, b = values
        ta, tb = tangents
        want = (True, True) if needs is None else needs
        sent = list(self.vjp(values, out, h, params, needs)) if h is not None else [None, None]
        if g is not None:
            if tb is not None and want[0]:
                moved = np.asarray(tb, dtype=np.float64)
                sent[0] = _add(sent[0], self.vjp((a, moved), out, g, params, (True, False))[0])
            if ta is not None and want[1]:
                moved = np.asarray(ta, dtype=np.float64)
                sent[1] = _add(sent[1], self.vjp((moved, b), out, g, params, (False, True))[1])
        return tuple(sent)


def _wants_reach(needs: Needs, operand: int) -> bool:
    """Whether the contribution to ``operand`` must keep its reach (not a leaf's: ``Need``)."""
    return needs is None or needs[operand] != Need.VALUES


def _add(total: RuleValue, term: RuleValue) -> RuleValue:
    """``total + term`` where None is nothing sent (strong zeros add as UNREACHED does)."""
    if term is None:
        return total
    return term if total is None else total + term


def _as_matrix(x: FloatArray, left: bool) -> FloatArray:
    """``x`` with at least two axes, as ``np.matmul`` promotes a vector operand."""
    if x.ndim > 1:
        return x
    return x[np.newaxis, :] if left else x[:, np.newaxis]


def _matmul_reach(x: FloatArray, y: FloatArray, adjoint_left: bool) -> FloatArray:
    """``np.matmul(x, y)`` with strong zeros (``reach_matmul``), vectors promoted and dropped."""
    product = reach_matmul(_as_matrix(x, True), _as_matrix(y, False), adjoint_left)
    if x.ndim == 1:
        product = product[..., 0, :]
    if y.ndim == 1:
        product = product[..., 0]
    return product


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


def _per_row(x: RuleValue) -> FloatArray:
    """A reduction's result (or its adjoint) read flat, one element per row of ``to_rows``."""
    return np.ascontiguousarray(np.reshape(x, -1), dtype=np.float64)


def _scalar_or_array(out: Any) -> RuleValue:
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
        # np.mean computes, bit for bit.
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            # np.add.reduce is what a.sum calls, without its Python wrapper.
            out = np.add.reduce(a, axis=params.axes, keepdims=params.keepdims)
            if self.name == "mean":
                out = out / params.count(a.shape)
        return _scalar_or_array(out)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        (a,) = values
        if a.size == 0:
            return (np.zeros(a.shape),)  # nothing to send a gradient to
        if self.name == "mean":
            g = g * (1.0 / params.count(a.shape))
        if params.axes is None:  # a scalar adjoint, sent to every element
            return (np.full(a.shape, g),)
        gradient = np.empty(a.shape)
        gradient[...] = params.spread(g, a.shape)  # one broadcasting copy
        return (gradient,)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        a = values[0]
        value = reach_sum(tangents[0], axis=params.axes, keepdims=params.keepdims)
        if self.name == "mean" and a.size:
            value = value / params.count(a.shape)
        return _scalar_or_array(value)


class Extremum(Reduce):
    """``max`` or ``min`` over the axes of a :class:`Reduction`.

    NumPy's values: a nan anywhere in a reduced slice makes its result nan.
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
        reduce = np.max if self.name == "max" else np.min
        return _scalar_or_array(reduce(values[0], axis=params.axes, keepdims=params.keepdims))

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
        return _scalar_or_array(reach_sum(shares, axis=params.axes, keepdims=params.keepdims))


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

    linear_adjoint = False  # no second-order rule yet

    def forward(self, values: Values, params: Any) -> RuleValue:
        with np.errstate(invalid="ignore", over="ignore"):
            out = values[0].prod(axis=params.axes, keepdims=params.keepdims)
        return _scalar_or_array(out)

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
        zeros, nans = rows == 0.0, np.isnan(rows)
        other_zero = (zeros.sum(axis=1, keepdims=True) - zeros) > 0
        other_nan = (nans.sum(axis=1, keepdims=True) - nans) > 0
        others[other_zero & ~other_nan] = 0.0
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
            return _scalar_or_array(np.full(np.shape(out), UNREACHED))
        moved = contributions(self._others(a, params), tangents[0])
        return _scalar_or_array(reach_sum(moved, axis=params.axes, keepdims=params.keepdims))


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
    out = a[key]
    return float(out) if np.ndim(out) == 0 else np.array(out)


# -- fused ops ----------------------------------------------------------------------------------
class Linear(BlockRule):
    """``X @ W + b`` (``linear``) or ``relu(X @ W + b)`` (``linear_relu``) as one node.

    One product (NumPy's BLAS) finished in place by one compiled pass (bias,
    ReLU); backward, one compiled pass for the ReLU mask and the bias sum
    (``kernels/fused.py``), then only the products wanted (``needs``). The
    tests check them against the same layer recorded unfused.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.relu = name == "linear_relu"

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        X, W, b = shapes
        if len(X) != 2 or len(W) != 2 or len(b) != 1:
            raise ValueError(
                f"{self.name} needs X (B, n), W (n, h), b (h,); got shapes {X}, {W}, {b}"
            )
        if X[1] != W[0] or W[1] != b[0]:
            raise ValueError(f"{self.name}: shapes do not chain: X {X} @ W {W} + b {b}")
        return (X[0], W[1])

    def forward(self, values: Values, params: object) -> RuleValue:
        X, W, b = values
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, like the sweeps
            Y = X @ W  # a fresh C-contiguous array: the kernel finishes it in place
        (fused.add_bias_relu if self.relu else fused.add_bias)(Y, b)
        return Y

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        X, W, _ = values
        G = np.ascontiguousarray(g)
        want_dx, want_dw = (True, True) if needs is None else needs[:2]
        if self.relu:
            dZ, db = fused.relu_backward(out, G)
        else:
            dZ, db = G, fused.bias_gradient(G)
        return (
            reach_matmul(dZ, W.T, True, _wants_reach(needs, 0)) if want_dx else None,
            reach_matmul(X.T, dZ, False, _wants_reach(needs, 1)) if want_dw else None,
            db,
        )

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        X, W, _ = values
        tX, tW, tb = tangents
        total = np.full(np.shape(out), UNREACHED)
        if tX is not None:
            total += reach_matmul(np.asarray(tX, dtype=np.float64), W, True)
        if tW is not None:
            total += reach_matmul(X, np.asarray(tW, dtype=np.float64), False)
        if tb is not None:
            total += tb  # UNREACHED + UNREACHED stays UNREACHED
        if not self.relu:
            return total
        # relu'(z) is 1 above 0, an exact (strong) zero at or below, nan at nan.
        partial = np.where(out > 0.0, 1.0, np.where(np.isnan(out), np.nan, 0.0))
        return contributions(partial, total)

    def second_vjp(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: Values,
        params: object,
        needs: Needs = None,
    ) -> Values:
        # As matmul's, through the ReLU mask (relu'' = 0, so the mask has no
        # tangent) and the bias (linear: only h reaches it).
        X, W, _ = values
        tX, tW, _ = tangents
        want_dx, want_dw = (True, True) if needs is None else needs[:2]
        sent = list(self.vjp(values, out, h, params, needs)) if h is not None else [None] * 3
        if g is not None and (tX is not None or tW is not None):
            G = np.ascontiguousarray(g)
            dZ = fused.relu_backward(out, G)[0] if self.relu else G
            if want_dx and tW is not None:
                moved = np.asarray(tW, dtype=np.float64)
                sent[0] = _add(sent[0], reach_matmul(dZ, moved.T, True))
            if want_dw and tX is not None:
                moved = np.asarray(tX, dtype=np.float64)
                sent[1] = _add(sent[1], reach_matmul(moved.T, dZ, False))
        return tuple(sent)


class MseLoss(BlockRule):
    """``mean((Y - T)**2)`` as one node (a scalar)."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        if shapes[0] != shapes[1] or not shapes[0]:
            raise ValueError(
                f"mse_loss needs two arrays of one shape, got {shapes[0]} and {shapes[1]}"
            )
        return ()

    def forward(self, values: Values, params: object) -> RuleValue:
        return float(fused.mse_loss_forward(*values))

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        Y, T = values
        return fused.mse_loss_backward(Y, T, float(g))

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        Y, T = values
        # d/dY = 2 (Y - T) / size, d/dT its negative: exact zeros where Y == T.
        partial = 2.0 * (Y - T) / Y.size
        total = contributions(partial, _unreached_if_none(tangents[0], Y))
        total = total + contributions(-partial, _unreached_if_none(tangents[1], T))
        return float(reach_sum(total))


def _unreached_if_none(tangent: RuleValue, like: RuleValue) -> RuleValue:
    return np.full(np.shape(like), UNREACHED) if tangent is None else tangent


class Softmax(BlockRule):
    """``logsumexp``, ``softmax`` or ``log_softmax`` over the axes of a :class:`Reduction`.

    Fused and stable: one compiled pass per row shifted by the row maximum
    (``kernels/fused.py``), so logits of +-1e4 neither overflow nor lose
    the small terms. The hand-derived VJPs (``dX = g softmax`` for
    logsumexp, ``P (G - sum(G P))`` for softmax, ``G - P sum(G)`` for
    log_softmax) are checked against the unfused blocks and scalar nodes.
    ``keepdims`` applies to logsumexp; the other two keep the operand's shape.
    """

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        return params.shape(shapes[0]) if self.name == "logsumexp" else shapes[0]

    def forward(self, values: Values, params: Any) -> RuleValue:
        rows, layout = to_rows(values[0], params.axes)
        log_p, lse = log_softmax_rows(rows)
        if self.name == "logsumexp":
            return _scalar_or_array(lse.reshape(params.shape(np.shape(values[0]))))
        if self.name == "softmax":
            return from_rows(np.exp(log_p), layout)
        return from_rows(log_p, layout)

    def _softmax(self, a: FloatArray, out: RuleValue, params: Any) -> FloatArray:
        """The softmax rows of ``a`` (from the saved output where it holds them)."""
        if self.name == "softmax":
            return to_rows(np.asarray(out), params.axes)[0]
        if self.name == "log_softmax":
            return np.exp(to_rows(np.asarray(out), params.axes)[0])
        return np.exp(log_softmax_rows(to_rows(a, params.axes)[0])[0])

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        (a,) = values
        P = self._softmax(a, out, params)
        layout = row_layout(np.shape(a), params.axes)
        if self.name == "logsumexp":
            return (from_rows(fused.logsumexp_backward(P, _per_row(g)), layout),)
        G = to_rows(np.asarray(g), params.axes)[0]
        backward = fused.softmax_backward if self.name == "softmax" else fused.log_softmax_backward
        return (from_rows(backward(P, G), layout),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        a = np.asarray(values[0], dtype=np.float64)  # a scalar operand is 0-d
        t = np.broadcast_to(tangents[0], a.shape)
        P = from_rows(self._softmax(a, out, params), row_layout(a.shape, params.axes))
        moved = contributions(P, t)
        if self.name == "logsumexp":
            return _scalar_or_array(reach_sum(moved, params.axes, params.keepdims))
        inner = np.broadcast_to(reach_sum(moved, params.axes, keepdims=True), a.shape)
        if self.name == "softmax":  # d exp(x - lse) = P (t - inner)
            return moved + contributions(-P, inner)
        return t + contributions(np.full(a.shape, -1.0), inner)  # d (x - lse) = t - inner


class CrossEntropy(BlockRule):
    """``cross_entropy(logits, targets)``: ``-sum(T * log_softmax(X))`` per sample, summed
    or averaged over the samples (``params``: "mean" or "sum").

    Classes are the last axis of the logits. Targets are class labels (one
    per sample: shape ``logits.shape[:-1]``, integer values in
    ``[0, classes)``, checked at every forward; they get no gradient) or
    probabilities (the logits' shape; they get ``-log_softmax``). One fused
    pass, stable at any logit; zero targets contribute exactly 0, even
    where the log-softmax is ``-inf``.
    """

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        X, T = shapes
        if not X or X[-1] == 0:
            raise ValueError(
                f"cross_entropy needs logits with classes along the last axis, got shape {X}"
            )
        if T not in (X, X[:-1]):
            raise ValueError(
                f"cross_entropy: targets of shape {T} do not fit logits of shape {X}: give "
                f"class labels of shape {X[:-1]} or probabilities of shape {X}"
            )
        return ()

    def _rows(self, values: Values) -> tuple[FloatArray, Any]:
        """The logits as (samples, classes) rows, and the targets: int64 class
        labels (checked), or probability rows."""
        X, T = values
        rows = np.ascontiguousarray(X, dtype=np.float64).reshape(-1, X.shape[-1])
        if np.shape(T) == X.shape:
            return rows, np.ascontiguousarray(np.reshape(T, rows.shape), dtype=np.float64)
        flat = np.ascontiguousarray(np.reshape(T, -1), dtype=np.float64)
        labels, bad = fused.class_labels(flat, rows.shape[1])
        if bad >= 0:
            raise ValueError(
                f"cross_entropy: label {flat[bad]:g} of sample {bad} is not a class: labels "
                f"must be integers in [0, {rows.shape[1]})"
            )
        return rows, labels

    def _weight(self, count: int, params: Any) -> float:
        return 1.0 if params == "sum" else 1.0 / count if count else math.nan

    saves = True  # the log-softmax rows and the checked targets, for the VJP

    def forward(self, values: Values, params: Any) -> tuple[float, Any]:
        rows, targets = self._rows(values)
        log_p = log_softmax_rows(rows)[0]
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is nan, silently
            if targets.ndim == 1:
                total = 0.0 - float(log_p[np.arange(rows.shape[0]), targets].sum())
            else:
                total = float(fused.cross_entropy_rows(log_p, targets).sum())
        return total * self._weight(rows.shape[0], params), (log_p, targets)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        rows, targets = self._rows(values)
        return self.vjp_saved(values, out, g, params, needs, (log_softmax_rows(rows)[0], targets))

    def vjp_saved(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs, saved: Any
    ) -> Values:
        X, T = values
        w = float(g) * self._weight(_samples(X), params)
        log_p, targets = saved
        dX, dT = self._from_log_softmax(log_p, targets, w)
        return dX.reshape(X.shape), None if dT is None else dT.reshape(np.shape(T))

    def _gradients(self, values: Values, w: float) -> tuple[FloatArray, FloatArray | None]:
        """``w`` times the derivatives of the summed loss for X and T (None for labels)."""
        rows, targets = self._rows(values)
        return self._from_log_softmax(log_softmax_rows(rows)[0], targets, w)

    @staticmethod
    def _from_log_softmax(
        log_p: FloatArray, targets: Any, w: float
    ) -> tuple[FloatArray, FloatArray | None]:
        """:meth:`_gradients` from the rows' log-softmax and the targets ``_rows`` gives."""
        P = np.exp(log_p)
        if targets.ndim == 1:
            return fused.cross_entropy_labels_backward(P, targets, w), None
        return fused.cross_entropy_backward(log_p, P, targets, w)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        X, _ = values
        dX, dT = self._gradients(values, self._weight(_samples(X), params))
        tX, tT = tangents
        total = UNREACHED
        if tX is not None:
            total += reach_sum(contributions(dX, np.reshape(tX, dX.shape)))
        if tT is not None and dT is not None:
            total += reach_sum(contributions(dT, np.reshape(tT, dT.shape)))
        return float(total)


def _samples(logits: FloatArray) -> int:
    return math.prod(logits.shape[:-1])


# -- the registry ---------------------------------------------------------------------------------
RULES: dict[int, BlockRule] = {
    entry.code: entry
    for entry in (
        *(Elementwise(op.name) for op in optable.OPS if op.arity > 0),
        Matmul("matmul"),
        Reduce("sum"),
        Reduce("mean"),
        Extremum("max"),
        Extremum("min"),
        Prod("prod"),
        Reshape("reshape"),
        Transpose("transpose"),
        Concatenate("concatenate"),
        Index("index"),
        Linear("linear"),
        Linear("linear_relu"),
        MseLoss("mse_loss"),
        Softmax("logsumexp"),
        Softmax("softmax"),
        Softmax("log_softmax"),
        CrossEntropy("cross_entropy"),
    )
}
"""Opcode -> its block rule: every scalar op with operands (elementwise) and every block op."""


def rule(code: int) -> BlockRule:
    """The block rule of ``code``; ``NotImplementedError`` naming the op if it has none."""
    entry = RULES.get(code)
    if entry is None:
        op = optable.ALL.get(code)
        name = op.name if op is not None else "unknown"
        raise NotImplementedError(
            f"no block rule for the op {name!r} (opcode {code}): add its entry to "
            "fastad/core/block_rules.py's RULES"
        )
    return entry
