"""Block rules of the softmax family and the losses: ``logsumexp``, ``softmax``,
``log_softmax``, ``mse_loss``, ``cross_entropy``.

They work on rows (the last axis), laid out as the reductions are
(``reduction_rules.to_rows``); ``cross_entropy`` saves its log-softmax for
its VJP.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.block_rule import BlockRule, Needs, Shape, Values
from fastad.core.reach import (
    UNREACHED,
    add_sent,
    contributions,
    reach_sum,
)
from fastad.core.reduction_rules import (
    from_rows,
    log_softmax_rows,
    per_row,
    row_layout,
    scalar_or_array,
    to_rows,
)
from fastad.kernels import fused

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue


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

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # dY = g 2 (Y - T) / n and dT = -dY move by 2 g (tY - tT) / n and its negative.
        Y, T = values
        tY, tT = tangents
        scale = np.full(Y.shape, 2.0 * float(g) / Y.size)
        moved = contributions(scale, _unreached_if_none(tY, Y)) + contributions(
            -scale, _unreached_if_none(tT, T)
        )
        return moved, contributions(np.full(Y.shape, -1.0), moved)


def _unreached_if_none(tangent: RuleValue, like: RuleValue) -> RuleValue:
    return np.full(np.shape(like), UNREACHED) if tangent is None else tangent


def _softmax_tangent(P: FloatArray, t: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The tangent of the softmax rows ``P`` along the logits' tangent rows ``t``,
    ``P (t - sum(P t))`` per row with strong zeros, and ``sum(P t)`` (a column)."""
    moved = contributions(P, t)
    mean = reach_sum(moved, 1, keepdims=True)
    return moved + contributions(-P, mean), mean


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
            return scalar_or_array(lse.reshape(params.shape(np.shape(values[0]))))
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
            return (from_rows(fused.logsumexp_backward(P, per_row(g)), layout),)
        G = to_rows(np.asarray(g), params.axes)[0]
        backward = fused.softmax_backward if self.name == "softmax" else fused.log_softmax_backward
        return (from_rows(backward(P, G), layout),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        a = np.asarray(values[0], dtype=np.float64)  # a scalar operand is 0-d
        t = np.broadcast_to(tangents[0], a.shape)
        P = from_rows(self._softmax(a, out, params), row_layout(a.shape, params.axes))
        moved = contributions(P, t)
        if self.name == "logsumexp":
            return scalar_or_array(reach_sum(moved, params.axes, params.keepdims))
        inner = np.broadcast_to(reach_sum(moved, params.axes, keepdims=True), a.shape)
        if self.name == "softmax":  # d exp(x - lse) = P (t - inner)
            return moved + contributions(-P, inner)
        return t + contributions(np.full(a.shape, -1.0), inner)  # d (x - lse) = t - inner

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # Through the softmax's tangent tP = P (t - sum(P t)) per row:
        #   logsumexp:   dx = g P               -> g tP
        #   softmax:     dx = P (G - sum(G P))  -> tP (G - sum(G P)) - P sum(G tP)
        #   log_softmax: dx = G - P sum(G)      -> -tP sum(G)
        a = np.asarray(values[0], dtype=np.float64)
        P = self._softmax(a, out, params)
        t = to_rows(np.broadcast_to(tangents[0], a.shape), params.axes)[0]
        tP = _softmax_tangent(P, t)[0]
        if self.name == "logsumexp":
            G = per_row(g)[:, np.newaxis]
            moved = contributions(np.broadcast_to(G, P.shape), tP)
        else:
            G = to_rows(np.asarray(g), params.axes)[0]
            if self.name == "softmax":
                centred = G - (G * P).sum(axis=1, keepdims=True)
                weight = reach_sum(contributions(G, tP), 1, keepdims=True)
                moved = contributions(centred, tP) + contributions(-P, weight)
            else:
                moved = contributions(np.broadcast_to(-G.sum(axis=1, keepdims=True), P.shape), tP)
        return (from_rows(moved, row_layout(a.shape, params.axes)),)


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
                f"cross_entropy: label {_number(flat[bad])} of sample {bad} is not a class: labels "
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

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # With w the weight per sample, P the softmax rows and tP their tangent along tX:
        #   labels:        dX = w g (P - onehot)      -> w g tP
        #   probabilities: dX = w g (P sum(T) - T)    -> w g (tP sum(T) + P sum(tT) - tT)
        #                  dT = -w g log_softmax(X)   -> -w g (tX - sum(P tX))
        X, T = values
        tX, tT = tangents
        if tX is None and np.shape(T) != X.shape:  # labels: only the logits move it
            return None, None
        rows, targets = self._rows(values)
        scale = float(g) * self._weight(rows.shape[0], params)
        log_p = log_softmax_rows(rows)[0]
        P = np.exp(log_p)
        tX_rows = None if tX is None else np.reshape(tX, rows.shape)
        tP, mean = (None, None) if tX_rows is None else _softmax_tangent(P, tX_rows)
        weight = np.full(rows.shape, scale)
        if targets.ndim == 1:  # class labels: no gradient for them
            assert tP is not None  # a tangent reaches the logits (the case above returned)
            return contributions(weight, tP).reshape(X.shape), None
        moved_X: RuleValue = None
        if tP is not None:
            moved_X = contributions(weight * targets.sum(1, keepdims=True), tP)
        if tT is not None:
            tT_rows = np.reshape(tT, rows.shape)
            through_T = contributions(P, reach_sum(tT_rows, 1, keepdims=True)) + contributions(
                np.full(rows.shape, -1.0), tT_rows
            )
            moved_X = add_sent(moved_X, contributions(weight, through_T))
        moved_T: RuleValue = None
        if tX_rows is not None and mean is not None:  # log-softmax's tangent: tX - sum(P tX)
            t_log_p = tX_rows + contributions(np.full(rows.shape, -1.0), mean)
            moved_T = np.reshape(contributions(-weight, t_log_p), np.shape(T))
        return None if moved_X is None else np.reshape(moved_X, X.shape), moved_T


def _samples(logits: FloatArray) -> int:
    return math.prod(logits.shape[:-1])


def _number(value: float) -> str:
    """``value`` as short as it reads back exactly: ``11``, ``1.1``, ``2.0000000000000004``."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)
