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

Rules keep strong zeros (``fastad/reach.py``): an adjoint or tangent
element nothing reached is ``UNREACHED`` (-0.0) and sends nothing.

Adding a block op: its ``BlockOp`` row in ``kernels/optable.py``, a class
here registered in ``RULES``, a recording function (``fastad/blocks.py`` or
a ``Block`` method) and a row in ``tests/test_registry.py``'s table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.kernels import fused, optable, sweeps
from fastad.reach import (
    UNREACHED,
    contributions,
    product_reach,
    reach_matmul,
    reach_sum,
    unbroadcast,
)

if TYPE_CHECKING:
    from fastad._typing import FloatArray, RuleValue

Shape = tuple[int, ...]
Values = tuple[Any, ...]


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
        raise NotImplementedError

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: object) -> Values:
        """One contribution per operand (None: nothing for it), from the output adjoint ``g``."""
        raise NotImplementedError

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        """The output tangent from the operands' (None: nothing reached that operand)."""
        raise NotImplementedError


# -- elementwise: the scalar op table, per element ---------------------------------------------
def broadcast_shape(shape_a: Shape, shape_b: Shape) -> Shape:
    """NumPy's broadcast of two shapes, with an error that names both."""
    if shape_a == shape_b or not shape_b:
        return shape_a
    if not shape_a:
        return shape_b
    try:
        return np.broadcast_shapes(shape_a, shape_b)
    except ValueError:
        raise ValueError(
            f"shapes {shape_a} and {shape_b} cannot be broadcast together (NumPy rules: "
            "trailing axes must match or be 1)"
        ) from None


def flat(x: RuleValue, shape: Shape) -> FloatArray:
    """``x`` broadcast to ``shape`` as a 1-D C-contiguous float64 array.

    A view, not a copy, when ``x`` already is such an array of ``shape``
    (the common case: operands of one shape).
    """
    if (
        isinstance(x, np.ndarray)
        and x.shape == shape
        and x.dtype == np.float64
        and x.flags.c_contiguous
    ):
        return x.reshape(-1)
    if isinstance(x, float):
        return np.full(int(np.prod(shape)), x)
    return np.ascontiguousarray(np.broadcast_to(x, shape), dtype=np.float64).reshape(-1)


def _shape(value: RuleValue) -> Shape:
    return value.shape if type(value) is np.ndarray else np.shape(value)


class Elementwise(BlockRule):
    """A scalar op (``kernels/optable.py``) applied per element, with broadcasting."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        return shapes[0] if self.arity == 1 else broadcast_shape(shapes[0], shapes[1])

    def forward(self, values: Values, params: object) -> FloatArray:
        a = values[0]
        b = a if self.arity == 1 else values[1]
        shape = broadcast_shape(_shape(a), _shape(b))
        out = np.empty(shape)
        sweeps.map_forward(self.code, flat(a, shape), flat(b, shape), out.reshape(-1))
        return out

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: object) -> Values:
        shape = out.shape
        a_full = flat(values[0], shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        da, db = np.empty(a_full.size), np.empty(a_full.size)
        sweeps.map_vjp(self.code, a_full, b_full, out.reshape(-1), flat(g, shape), da, db)
        da_operand = unbroadcast(da.reshape(shape), _shape(values[0]))
        if self.arity == 1:
            return (da_operand,)
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


# -- matrix products -----------------------------------------------------------------------------
class Matmul(BlockRule):
    """``a @ b`` for 1-D and 2-D operands; a scalar for two vectors."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        a, b = shapes
        if len(a) not in (1, 2) or len(b) not in (1, 2) or a[-1] != b[0]:
            raise ValueError(
                f"matmul needs 1-D or 2-D operands with matching inner dimensions, got shapes "
                f"{a} and {b}"
            )
        return a[:-1] + b[1:]

    def forward(self, values: Values, params: object) -> RuleValue:
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, like the sweeps
            out = np.matmul(values[0], values[1])
        return float(out) if np.ndim(out) == 0 else out

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: object) -> Values:
        a, b = values
        g = np.asarray(g, dtype=np.float64)
        if a.ndim == 2 and b.ndim == 2:
            return reach_matmul(g, b.T, True), reach_matmul(a.T, g, False)
        if a.ndim == 2:  # (m, k) @ (k,) -> (m,): dA = outer(g, b)
            return reach_matmul(g[:, None], b[None, :], True), reach_matmul(a.T, g, False)
        if b.ndim == 2:  # (k,) @ (k, n) -> (n,): dB = outer(a, g)
            return reach_matmul(b, g, False), reach_matmul(a[:, None], g[None, :], False)
        g = g.reshape(1)  # (k,) @ (k,) -> scalar: dA = g b, dB = g a
        return reach_matmul(g, b[None, :], True), reach_matmul(g, a[None, :], True)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        a, b = values
        ta, tb = tangents
        total: FloatArray = np.full(np.shape(out), UNREACHED)
        if ta is not None:
            total = total + reach_matmul(np.asarray(ta, dtype=np.float64), b, True)
        if tb is not None:
            total = total + reach_matmul(a, np.asarray(tb, dtype=np.float64), False)
        return float(total) if np.ndim(total) == 0 else total


# -- reductions, shapes, indexing --------------------------------------------------------------
class Reduce(BlockRule):
    """``sum`` or ``mean`` of all elements (a scalar) or along the axis in ``params``."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        if params is None:
            return ()
        assert isinstance(params, int)  # the recorder validates the axis
        return shapes[0][:params] + shapes[0][params + 1 :]

    def _count(self, a: FloatArray, axis: int | None) -> int:
        return a.size if axis is None else a.shape[axis]

    def forward(self, values: Values, params: Any) -> RuleValue:
        a = values[0]
        # IEEE results, silently: inf - inf is nan, and so is the mean of
        # nothing (0 / 0), where np.mean would warn. Sum, then divide: what
        # np.mean computes, bit for bit.
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            out = a.sum(axis=params)
            if self.name == "mean":
                out = out / self._count(a, params)
        return float(out) if params is None else out

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: Any) -> Values:
        (a,) = values
        if a.size == 0:
            return (np.zeros(a.shape),)  # nothing to send a gradient to
        if self.name == "mean":
            g = g * (1.0 / self._count(a, params))
        if params is None:
            return (np.full(a.shape, g),)
        return (np.broadcast_to(np.expand_dims(g, params), a.shape).copy(),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        value = reach_sum(tangents[0], axis=params)
        if self.name == "mean" and values[0].size:
            value = value / self._count(values[0], params)
        return float(value) if params is None else value


class Extremum(Reduce):
    """``max`` or ``min`` of all elements (a scalar) or along the axis in ``params``.

    NumPy's values: a nan anywhere in a reduced slice makes its result nan.
    The gradient goes to the elements equal to the result, split evenly
    among ties (as ``torch.amax``; a scalar ``fa.maximum`` splits a two-way
    tie the same way); where the result is nan, to the nan elements (where
    ``torch.amax`` gives nan everywhere). The other elements get nothing
    (UNREACHED), not even from an inf adjoint.
    """

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        reduced = shapes[0] if params is None else (shapes[0][params],)
        if 0 in reduced:
            raise ValueError(
                f"{self.name} of an empty array (shape {shapes[0]}, axis {params}) has no value"
            )
        return super().shape(shapes, params)

    def forward(self, values: Values, params: Any) -> RuleValue:
        out = values[0].max(axis=params) if self.name == "max" else values[0].min(axis=params)
        return float(out) if params is None else out

    def _shares(self, a: FloatArray, out: RuleValue, params: Any) -> FloatArray:
        """Each element's share of the result's derivative: 1 / ties where it is hit."""
        best = np.asarray(out) if params is None else np.expand_dims(out, params)
        hit = (a == best) | (np.isnan(a) & np.isnan(best))
        return hit / np.sum(hit, axis=params, keepdims=True)

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: Any) -> Values:
        (a,) = values
        incoming = g if params is None else np.expand_dims(g, params)
        return (contributions(self._shares(a, out, params), np.broadcast_to(incoming, a.shape)),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        (a,) = values
        value = reach_sum(contributions(self._shares(a, out, params), tangents[0]), axis=params)
        return float(value) if params is None else value


class Reshape(BlockRule):
    """``a.reshape(params)``; the recorder resolves ``-1`` first."""

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        return tuple(params)

    def forward(self, values: Values, params: Any) -> RuleValue:
        return np.reshape(values[0], params)

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: Any) -> Values:
        return (np.reshape(g, np.shape(values[0])),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        return np.reshape(tangents[0], params)


class Transpose(BlockRule):
    """``a.T`` (all axes reversed)."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        return shapes[0][::-1]

    def forward(self, values: Values, params: object) -> RuleValue:
        return np.ascontiguousarray(values[0].T)

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: object) -> Values:
        return (np.transpose(g),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        return np.ascontiguousarray(np.transpose(tangents[0]))


class Index(BlockRule):
    """``a[key]``: a scalar for a single element, else an array (a copy)."""

    def shape(self, shapes: tuple[Shape, ...], params: Any) -> Shape:
        return np.empty(shapes[0], np.bool_)[params].shape

    def forward(self, values: Values, params: Any) -> RuleValue:
        return _pick(values[0], params)

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: Any) -> Values:
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

    The hand-derived backward rules are in ``kernels/fused.py``; the tests
    check them against the same layer recorded unfused.
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
        kernel = fused.linear_relu_forward if self.relu else fused.linear_forward
        return kernel(*values)

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: object) -> Values:
        X, W, _ = values
        G = np.ascontiguousarray(g)
        if self.relu:
            dX, dW, db, G = fused.linear_relu_backward(X, W, out, G)
        else:
            dX, dW, db = fused.linear_backward(X, W, G)
        return product_reach(dX, G, W.T, True), product_reach(dW, X.T, G, False), db

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

    def vjp(self, values: Values, out: RuleValue, g: RuleValue, params: object) -> Values:
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
        Reshape("reshape"),
        Transpose("transpose"),
        Index("index"),
        Linear("linear"),
        Linear("linear_relu"),
        MseLoss("mse_loss"),
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
            "fastad/registry.py's RULES"
        )
    return entry
