"""Fused block kernels with hand-derived backward rules.

Each kernel does in one compiled call what the unfused graph does in
several nodes, and each backward rule is derived by hand below; the tests
check every one against the same computation recorded unfused (as blocks and
as scalar nodes). The matrix products call NumPy's own BLAS (``products.py``,
``blas.py``): one BLAS in the process. Numba's ``np.dot`` would call SciPy's
copy of OpenBLAS beside NumPy's, and two thread pools spinning on the same
cores made threaded steps 10-80x slower (``bench/threads.py``).
The kernels here are the passes around the products: bias, ReLU and their
backward rules, losses, the softmax family's backward rules.

Shapes: ``X`` is (B, n), ``W`` is (n, h), ``b`` is (h,), outputs (B, h).
These kernels trust their input (C-contiguous float64, matching shapes);
``fastad.eager.blocks`` validates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .jit import kernel
from .strong_zeros import UNREACHED, contribution, reached

if TYPE_CHECKING:
    from .arrays import FloatArray

# Strong zeros (strong_zeros.py): an adjoint element nothing reached holds
# -0.0 and sends nothing; a local partial that is exactly zero sends nothing
# either. tests/test_blocks.py checks the fused rules against the scalar-node
# expansion, where reach is exact node by node.


@kernel
def add_bias(Y: FloatArray, b: FloatArray) -> None:
    """``Y += b`` over the rows of a fresh product ``Y = X @ W``, in place."""
    for r in range(Y.shape[0]):
        for c in range(Y.shape[1]):
            Y[r, c] += b[c]


@kernel
def add_bias_relu(Y: FloatArray, b: FloatArray) -> None:
    """``Y = relu(Y + b)`` in place, one pass over a fresh product ``Y = X @ W``.

    Fusing saves two full (B, h) temporaries and two passes over memory
    (``X @ W + b`` and ``maximum(., 0)`` each allocate and stream one).
    """
    for r in range(Y.shape[0]):
        for c in range(Y.shape[1]):
            z = Y[r, c] + b[c]
            # relu, nan-propagating like the scalar op (nan <= 0 is False)
            Y[r, c] = 0.0 if z <= 0.0 else z


@kernel
def bias_gradient(G: FloatArray) -> FloatArray:
    """``db = G.sum(axis=0)`` for ``Y = X @ W + b``, the bias broadcast over the B rows.

    Strong zeros: a column of ``G`` nothing reached gives ``UNREACHED``.
    """
    db = np.full(G.shape[1], UNREACHED)
    for r in range(G.shape[0]):
        for c in range(G.shape[1]):
            db[c] += G[r, c]
    return db


@kernel
def relu_backward(H: FloatArray, G: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``dZ = G * relu'(Z)`` and ``db = dZ.sum(axis=0)`` for ``H = relu(Z)``, ``Z = X @ W + b``.

    ``relu'(z) = 1`` for ``z > 0`` and 0 otherwise (``relu'(0) = 0``, as the
    scalar op); ``Z > 0`` exactly where ``H > 0``, so the saved output is
    enough and ``Z`` is never stored. Mask and bias sum share one pass. Then
    ``dX = dZ @ W.T`` and ``dW = X.T @ dZ``: the front end's products.

    Strong zeros as ``fa.relu``'s: a masked entry (``relu'(z) = 0``) sends
    ``UNREACHED`` even if ``G`` is inf/nan; ``relu'(nan) = nan`` propagates.
    """
    dZ = np.empty_like(G)
    db = np.full(G.shape[1], UNREACHED)
    for r in range(G.shape[0]):
        for c in range(G.shape[1]):
            h = H[r, c]
            partial = 1.0 if h > 0.0 else (h if h != h else 0.0)
            d = contribution(partial, G[r, c])
            dZ[r, c] = d
            db[c] += d
    return dZ, db


@kernel
def mse_loss_forward(Y: FloatArray, T: FloatArray) -> float:
    """``mean((Y - T)**2)`` over all elements, one pass, no temporary."""
    total = 0.0
    flat_y, flat_t = Y.ravel(), T.ravel()
    for i in range(flat_y.size):
        d = flat_y[i] - flat_t[i]
        total += d * d
    return total / flat_y.size


@kernel
def mse_loss_backward(Y: FloatArray, T: FloatArray, g: float) -> tuple[FloatArray, FloatArray]:
    """VJP of the mean squared error: ``dY = 2 (Y - T) g / size``, ``dT = -dY``.

    Strong zeros as the unfused ``mean((Y - T) * (Y - T))``: where ``Y == T``
    the local partial ``2 (Y - T)`` is exactly zero, so both get ``UNREACHED``.
    """
    scale = 2.0 * g / Y.size
    dY, dT = np.empty_like(Y), np.empty_like(T)
    flat_y, flat_t, flat_dy, flat_dt = Y.ravel(), T.ravel(), dY.ravel(), dT.ravel()
    for i in range(flat_y.size):
        d = flat_y[i] - flat_t[i]
        if d == 0.0:
            flat_dy[i] = flat_dt[i] = UNREACHED
        else:
            flat_dy[i] = scale * d + 0.0
            flat_dt[i] = -(scale * d) + 0.0
    return dY, dT


# -- the softmax family: rows of a (r, k) array, classes along the last axis --------------------
# The front end (fastad/core/block_rules.py) takes the exps with NumPy, whose
# vectorised exp is several times faster than a compiled loop calling exp
# per element; these kernels are the row reductions around them (NumPy's
# reductions along a short last axis cost ~10 us for a (256, 10) array),
# the backward rules and the label checks.
ROW_LANES_FROM = 16
"""The shortest row :func:`row_max` runs its eight running maxima on."""


@kernel
def row_max(X: FloatArray, r: int) -> float:
    """The maximum of row ``r`` of ``X`` as the scan ``if x > m: m = x`` from ``m = -inf``
    gives it: nan where the row holds a nan (the first), -inf for an empty row, and of
    equal maxima the first (-0.0 before 0.0).

    Eight running maxima, so that the compares do not wait on each other (one scan
    waits 3-4 cycles an element); a nan never wins a compare, so a flag notes one. A
    row holding a nan, or whose maximum is a zero (whose sign the first of the ties
    sets), is scanned again in order: the same bits as the one scan, always. (The row
    is read in place: a view of it per row costs more than a short row's scan.)
    """
    n = X.shape[1]
    if n < ROW_LANES_FROM:  # in order, here: a call would cost more than a short row's scan
        m, bad = -np.inf, False
        for i in range(n):
            a = X[r, i]
            bad |= a != a
            m = a if a > m else m
        return _first_max(X, r) if bad else m
    m0, m1, m2, m3 = X[r, 0], X[r, 1], X[r, 2], X[r, 3]
    m4, m5, m6, m7 = X[r, 4], X[r, 5], X[r, 6], X[r, 7]
    bad = (m0 != m0) | (m1 != m1) | (m2 != m2) | (m3 != m3)
    bad |= (m4 != m4) | (m5 != m5) | (m6 != m6) | (m7 != m7)
    stop = n - n % 8
    for i in range(8, stop, 8):
        a0, a1, a2, a3 = X[r, i], X[r, i + 1], X[r, i + 2], X[r, i + 3]
        a4, a5, a6, a7 = X[r, i + 4], X[r, i + 5], X[r, i + 6], X[r, i + 7]
        bad |= (a0 != a0) | (a1 != a1) | (a2 != a2) | (a3 != a3)
        bad |= (a4 != a4) | (a5 != a5) | (a6 != a6) | (a7 != a7)
        m0 = a0 if a0 > m0 else m0
        m1 = a1 if a1 > m1 else m1
        m2 = a2 if a2 > m2 else m2
        m3 = a3 if a3 > m3 else m3
        m4 = a4 if a4 > m4 else m4
        m5 = a5 if a5 > m5 else m5
        m6 = a6 if a6 > m6 else m6
        m7 = a7 if a7 > m7 else m7
    m = -np.inf
    for lane in (m0, m1, m2, m3, m4, m5, m6, m7):
        m = lane if lane > m else m
    for i in range(stop, n):
        a = X[r, i]
        bad |= a != a
        m = a if a > m else m
    if bad or m == 0.0:
        return _first_max(X, r)
    return m


@kernel
def _first_max(X: FloatArray, r: int) -> float:
    """:func:`row_max` by one scan in order."""
    m = -np.inf
    for i in range(X.shape[1]):
        a = X[r, i]
        if a != a:
            return a
        if a > m:
            m = a
    return m


@kernel
def shifted_rows(X: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``X - m`` per row and the rows' maxima ``m`` (:func:`row_max`): a log-softmax's
    first pass.

    ``m`` is the row's maximum, nan if the row holds a nan (-inf for an
    empty row); ``X - m`` is then IEEE's (``inf - inf`` is nan).
    """
    shifted = np.empty_like(X)
    shift = np.empty(X.shape[0])
    for r in range(X.shape[0]):
        m = row_max(X, r)
        shift[r] = m
        for c in range(X.shape[1]):
            shifted[r, c] = X[r, c] - m
    return shifted, shift


@kernel
def finish_log_softmax(shifted: FloatArray, E: FloatArray, shift: FloatArray) -> FloatArray:
    """``log(sum(E[r]))`` per row, subtracted in place from ``shifted``; ``E = exp(shifted)``.

    ``shifted`` is ``X - shift`` (:func:`shifted_rows`) and becomes the
    log-softmax. A row whose maximum is infinite or nan has ``shift`` as
    its logsumexp (its log-sum is 0): inf for a row holding inf, -inf for a
    row of -inf, nan with a nan. Its log-softmax is nan throughout, as
    ``(X - shift) - log(sum(E))`` gives, the sum being nan (``inf - inf``
    in the row): JAX's and PyTorch's answer (``X - shift`` alone is nan
    already, except in a row holding +inf, whose other elements would read
    -inf). Returns the log-sums (the logsumexp is ``shift`` plus them).
    """
    out = np.zeros(E.shape[0])
    for r in range(E.shape[0]):
        m = shift[r]
        if m == np.inf:
            shifted[r, :] = np.nan
            continue
        if m != m or m == -np.inf:
            continue
        total = 0.0
        for c in range(E.shape[1]):
            total += E[r, c]
        log_total = np.log(total)
        out[r] = log_total
        for c in range(E.shape[1]):
            shifted[r, c] -= log_total
    return out


@kernel
def logsumexp_backward(P: FloatArray, g: FloatArray) -> FloatArray:
    """VJP of ``lse = logsumexp(X)`` per row: ``dX = g * softmax(X)``.

    ``P`` is the softmax. An element whose softmax underflowed to exactly 0
    has a zero partial: a strong zero, as ``exp`` in the unfused form gives.
    """
    dX = np.empty_like(P)
    for r in range(P.shape[0]):
        for c in range(P.shape[1]):
            dX[r, c] = contribution(P[r, c], g[r])
    return dX


@kernel
def softmax_backward(P: FloatArray, G: FloatArray) -> FloatArray:
    """VJP of ``P = softmax(X)`` per row: ``dX = P * (G - sum(G * P))``.

    Unfused, ``P = exp(X - lse)``: ``X[c]`` gets ``P[c] G[c]`` directly and
    ``-P[c] s`` through ``lse``, whose adjoint ``-s = -sum(G * P)`` is
    reached where any ``G[c]`` is reached with ``P[c] != 0``. So an element
    with ``P[c] == 0``, or a row that nothing reached, gets UNREACHED.
    """
    dX = np.empty_like(P)
    for r in range(P.shape[0]):
        s = UNREACHED
        for c in range(P.shape[1]):
            s += contribution(P[r, c], G[r, c])
        row_reached = reached(s)
        for c in range(P.shape[1]):
            p = P[r, c]
            if p == 0.0 or not row_reached:
                dX[r, c] = UNREACHED
            else:
                own = G[r, c] if reached(G[r, c]) else 0.0
                dX[r, c] = p * (own - s) + 0.0
    return dX


@kernel
def log_softmax_backward(P: FloatArray, G: FloatArray) -> FloatArray:
    """VJP of ``Y = X - lse`` per row: ``dX = G - P * sum(G)``.

    ``X[c]`` gets ``G[c]`` directly (where reached) and ``-P[c] sum(G)``
    through ``lse`` (where some ``G`` is reached and ``P[c] != 0``).
    """
    dX = np.empty_like(P)
    for r in range(P.shape[0]):
        s = UNREACHED
        for c in range(P.shape[1]):
            g = G[r, c]
            if reached(g):
                s += g
        through = reached(s)
        for c in range(P.shape[1]):
            g, p = G[r, c], P[r, c]
            own = reached(g)
            via = through and p != 0.0
            if not own and not via:
                dX[r, c] = UNREACHED
            else:
                dX[r, c] = (g if own else 0.0) - (p * s if via else 0.0) + 0.0
    return dX


@kernel
def cross_entropy_rows(log_p: FloatArray, T: FloatArray) -> FloatArray:
    """Per row, ``-sum(T * log_p)``: the cross-entropy of targets ``T`` given the log-softmax."""
    out = np.empty(log_p.shape[0])
    for r in range(log_p.shape[0]):
        total = 0.0
        for c in range(log_p.shape[1]):
            t = T[r, c]
            if t != 0.0:  # 0 * log 0 is 0, as for a one-hot label
                total -= t * log_p[r, c]
        out[r] = total
    return out


@kernel
def cross_entropy_backward(
    log_p: FloatArray, P: FloatArray, T: FloatArray, w: float
) -> tuple[FloatArray, FloatArray]:
    """VJP of ``loss = w * sum_r -sum_c T log_p`` (``w``: 1, or 1 / rows for a mean).

    With ``P = exp(log_p)``: ``dX = w (P sum(T) - T)`` per row (``P - T``
    for probability targets); ``dT = -w log_p``. Strong zeros as the
    unfused form: ``X[c]`` is reached where ``T[c] != 0`` (directly) or
    where ``P[c] != 0`` and the row holds a nonzero target (through the
    logsumexp).
    """
    dX, dT = np.empty_like(log_p), np.empty_like(log_p)
    for r in range(log_p.shape[0]):
        total = 0.0
        any_target = False
        for c in range(log_p.shape[1]):
            total += T[r, c]
            any_target = any_target or T[r, c] != 0.0
        for c in range(log_p.shape[1]):
            t, p = T[r, c], P[r, c]
            via = any_target and p != 0.0
            if t == 0.0 and not via:
                dX[r, c] = UNREACHED
            else:
                dX[r, c] = w * ((p * total if via else 0.0) - t) + 0.0
            dT[r, c] = contribution(-log_p[r, c], w)
    return dX, dT


# Integer class labels: no one-hot rows. The labels arrive as float64 (a
# block of the tape); class_labels checks and converts them in one pass.
@kernel
def class_labels(labels: FloatArray, classes: int) -> tuple[np.ndarray, int]:
    """``labels`` (1-D) as int64 classes, and the position of the first that is
    not an integer in ``[0, classes)`` (-1: all are)."""
    out = np.empty(labels.size, np.int64)
    for i in range(labels.size):
        v = labels[i]
        if not (v >= 0.0 and v < classes and v == np.floor(v)):  # nan fails too
            return out, i
        out[i] = np.int64(v)
    return out, -1


@kernel
def cross_entropy_labels_backward(P: FloatArray, labels: np.ndarray, w: float) -> FloatArray:
    """VJP of ``w * sum_r -log_softmax(X[r])[labels[r]]``: ``dX = w (P - onehot(labels))``.

    As :func:`cross_entropy_backward` with one-hot targets: the label's
    element is always reached, another where its softmax ``P`` is not 0.
    """
    dX = np.empty_like(P)
    for r in range(P.shape[0]):
        for c in range(P.shape[1]):
            p = P[r, c]
            if c == labels[r]:
                dX[r, c] = w * (p - 1.0) + 0.0
            elif p != 0.0:
                dX[r, c] = w * p + 0.0
            else:
                dX[r, c] = UNREACHED
    return dX
