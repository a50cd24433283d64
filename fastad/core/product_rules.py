"""Block rules of products: ``matmul`` and the fused linear layers.

Products of an adjoint or tangent with values go through
``reach.reach_matmul`` (BLAS, with the term-by-term path only where a
non-finite element or an unexplained zero needs it). ``linear`` and
``linear_relu`` fuse ``X @ W + b`` (and the ReLU) into one compiled kernel.
Matrix products of C-contiguous float64 operands (a tape's values always are)
are one compiled call each (``reach.blas_products``), NumPy's bits without
``np.errstate`` around ``np.matmul``; other layouts, and machines whose NumPy
BLAS compiled code cannot call, run ``np.matmul``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.block_rule import BlockRule, Needs, Shape, Values
from fastad.core.elementwise_rules import broadcast_shape
from fastad.core.reach import (
    UNREACHED,
    Need,
    add_sent,
    blas_products,
    c_matrices,
    contributions,
    reach_matmul,
    settled,
    unbroadcast,
)
from fastad.kernels import fused

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue


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
        a, b = values
        if a.ndim == 2 and b.ndim == 2:  # the common case: one compiled call, NumPy's bits
            products = blas_products()
            if products is not None and c_matrices(a, b):
                return products.product(a, False, b, False)
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, like the sweeps
            out = np.matmul(a, b)
        return float(out) if np.ndim(out) == 0 else out

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        a, b = values
        want_a, want_b = (True, True) if needs is None else needs
        if a.ndim == 2 and b.ndim == 2:  # the common case, without reshapes
            products = blas_products()
            if products is not None and c_matrices(a, b, g):  # both products in one call
                made = products.matmul_vjp(a, b, g, bool(want_a), bool(want_b))
                return _settled_pair(made, a, b, g, needs)
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
                sent[0] = add_sent(sent[0], self.vjp((a, moved), out, g, params, (True, False))[0])
            if ta is not None and want[1]:
                moved = np.asarray(ta, dtype=np.float64)
                sent[1] = add_sent(sent[1], self.vjp((moved, b), out, g, params, (False, True))[1])
        return tuple(sent)


def _settled_pair(
    made: Sequence[Any], a: FloatArray, b: FloatArray, g: FloatArray, needs: Needs
) -> tuple[FloatArray | None, FloatArray | None]:
    """The VJP of ``a @ b`` from ``products.matmul_vjp``'s ``(da, zeros, nonfinite, db,
    zeros, nonfinite)`` for the adjoint ``g``: each product wanted, its reach settled
    where its counts ask (``reach.settled``); None for one not wanted."""
    da, zeros_a, nonfinite_a, db, zeros_b, nonfinite_b = made
    want_a, want_b = (True, True) if needs is None else needs[:2]
    if zeros_a or nonfinite_a:  # counts are 0 for a product not made; views made here only
        settled(da, zeros_a, nonfinite_a, g, b.T, True, _wants_reach(needs, 0))
    if zeros_b or nonfinite_b:
        settled(db, zeros_b, nonfinite_b, a.T, g, False, _wants_reach(needs, 1))
    return da if want_a else None, db if want_b else None


def _wants_reach(needs: Needs, operand: int) -> bool:
    """Whether the contribution to ``operand`` must keep its reach (not a leaf's: ``Need``)."""
    return needs is None or needs[operand] != Need.VALUES


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


# -- fused ops ----------------------------------------------------------------------------------
class Linear(BlockRule):
    """``X @ W + b`` (``linear``) or ``relu(X @ W + b)`` (``linear_relu``) as one node.

    One compiled call: the product on NumPy's BLAS, finished in place by one
    pass for the bias and the ReLU (``kernels/products.py``, ``kernels/fused.py``).
    Backward, ``linear_relu``'s ReLU mask, bias sum and the products wanted
    (``needs``) are one call too; ``linear``'s bias sum is one pass, then its
    products. The tests check them against the same layer recorded unfused.
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
        products = blas_products()
        if products is not None and c_matrices(X, W, b):  # one compiled call, NumPy's bits
            return products.linear(X, W, b, self.relu)
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
        products = blas_products()
        if self.relu and products is not None and c_matrices(X, W, G, out):  # one call
            dZ, db, *made = products.linear_relu_vjp(X, W, out, G, bool(want_dx), bool(want_dw))
            return (*_settled_pair(made, X, W, dZ, needs), db)
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
                sent[0] = add_sent(sent[0], reach_matmul(dZ, moved.T, True))
            if want_dw and tX is not None:
                moved = np.asarray(tX, dtype=np.float64)
                sent[1] = add_sent(sent[1], reach_matmul(moved.T, dZ, False))
        return tuple(sent)
