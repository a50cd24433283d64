"""Fused block kernels with hand-derived backward rules.

Each kernel does in one compiled call what the unfused graph does in
several nodes, and each backward rule is derived by hand below; the tests
check every one against the same computation recorded unfused (as blocks and
as scalar nodes). Matrix products go to BLAS through ``np.dot`` (Numba links
SciPy's BLAS), so large layers run at BLAS speed; small layers gain because
one call replaces the per-operation overhead of a NumPy composition.

Shapes: ``X`` is (B, n), ``W`` is (n, h), ``b`` is (h,), outputs (B, h).
These kernels trust their input (C-contiguous float64, matching shapes);
``fastad.blocks`` validates.
"""

from __future__ import annotations

from math import copysign
from typing import TYPE_CHECKING

import numpy as np

from .jit import kernel

if TYPE_CHECKING:
    from .sweeps import FloatArray

# Strong zeros, as in sweeps.py (UNREACHED, reached, contribution): an
# adjoint element nothing reached holds -0.0 and sends nothing; a local
# partial that is exactly zero sends nothing either. Restated here rather
# than imported because Numba's cache keys a kernel on its own file only
# (see jit.py); tests/test_block_reach.py checks the fused rules against the
# scalar-node expansion, where reach is exact node by node.
UNREACHED = -0.0


@kernel
def _contribution(partial: float, incoming: float) -> float:
    if partial == 0.0 or (incoming == 0.0 and copysign(1.0, incoming) < 0.0):
        return UNREACHED
    return partial * incoming + 0.0


@kernel
def linear_forward(X: FloatArray, W: FloatArray, b: FloatArray) -> FloatArray:
    """``Y = X @ W + b``: the bias is added in the same pass that copies the product."""
    Y = np.dot(X, W)
    for r in range(Y.shape[0]):
        for c in range(Y.shape[1]):
            Y[r, c] += b[c]
    return Y


@kernel
def linear_backward(
    X: FloatArray, W: FloatArray, G: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """VJP of ``Y = X @ W + b`` for the upstream gradient ``G`` (B, h).

    dY/dX: ``dX = G @ W.T``; dY/dW: ``dW = X.T @ G``; the bias is broadcast
    over the B rows, so ``db = G.sum(axis=0)``. No Jacobian (B*h x B*n) is
    ever formed. ``db`` keeps strong zeros (a column of ``G`` nothing reached
    gives ``UNREACHED``); the zeros of the two products get their reach from
    the front end (``fastad.blocks``), which has ``G``.
    """
    dX = np.dot(G, W.T)
    dW = np.dot(X.T, G)
    db = np.full(G.shape[1], UNREACHED)
    for r in range(G.shape[0]):
        for c in range(G.shape[1]):
            db[c] += G[r, c]
    return dX, dW, db


@kernel
def linear_relu_forward(X: FloatArray, W: FloatArray, b: FloatArray) -> FloatArray:
    """``H = relu(X @ W + b)`` with bias and ReLU applied in one pass over the product.

    Fusing saves two full (B, h) temporaries and two passes over memory
    (``X @ W + b`` and ``maximum(., 0)`` each allocate and stream one).
    """
    H = np.dot(X, W)
    for r in range(H.shape[0]):
        for c in range(H.shape[1]):
            z = H[r, c] + b[c]
            # relu, nan-propagating like the scalar op (nan <= 0 is False)
            H[r, c] = 0.0 if z <= 0.0 else z
    return H


@kernel
def linear_relu_backward(
    X: FloatArray, W: FloatArray, H: FloatArray, G: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """VJP of ``H = relu(Z)``, ``Z = X @ W + b`` for the upstream gradient ``G``.

    ``dZ = G * relu'(Z)`` with ``relu'(z) = 1`` for ``z > 0`` and 0 otherwise
    (``relu'(0) = 0``, as the scalar op). ``Z > 0`` exactly where ``H > 0``,
    so the saved output is enough and ``Z`` is never stored. Then, as for
    ``linear``: ``dX = dZ @ W.T``, ``dW = X.T @ dZ``, ``db = dZ.sum(axis=0)``.
    The mask, the product and the bias sum share one pass. Returns ``dZ``
    too: the front end works out the reach of the products' zeros from it.

    Strong zeros as ``fa.relu``'s: a masked entry (``relu'(z) = 0``) sends
    ``UNREACHED`` even if ``G`` is inf/nan; ``relu'(nan) = nan`` propagates.
    """
    dZ = np.empty_like(G)
    db = np.full(G.shape[1], UNREACHED)
    for r in range(G.shape[0]):
        for c in range(G.shape[1]):
            h = H[r, c]
            partial = 1.0 if h > 0.0 else (h if h != h else 0.0)
            d = _contribution(partial, G[r, c])
            dZ[r, c] = d
            db[c] += d
    return np.dot(dZ, W.T), np.dot(X.T, dZ), db, dZ


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
