"""Independent references: results that do not use the backward sweep under check.

Central differences, each side recorded on a fresh tape (the articles'
"finite differences are the referee"), and the articles' derivations written
out by hand in NumPy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

import fastad as fa

if TYPE_CHECKING:
    from fastad.demo.models import Model
    from fastad.util.hints import FloatArray


def central_difference(
    function: Model, point: Sequence[float], index: int, step: float = 1e-6
) -> float:
    """(f(p + h e_i) - f(p - h e_i)) / 2h, each side recorded on its own tape."""

    def at(offset: float) -> float:
        shifted = list(point)
        shifted[index] += offset
        with fa.Tape():
            return function(*(fa.var(v) for v in shifted)).value

    return (at(step) - at(-step)) / (2.0 * step)


def central_differences(
    loss: Model, arrays: Iterable[ArrayLike], step: float = 1e-6
) -> list[FloatArray]:
    """The gradient of ``loss(*arrays)`` (a scalar) by central differences, element by element.

    Every evaluation records ``loss`` on a fresh tape; the step of an element
    is ``step * max(1, |value|)`` so that large entries are not drowned in rounding.
    """
    copies = [np.array(a, dtype=np.float64) for a in arrays]

    def at(which: int, position: tuple[int, ...], offset: float) -> float:
        shifted = [a.copy() for a in copies]
        shifted[which][position] += offset
        with fa.Tape():
            return loss(*(fa.var(a) for a in shifted)).value

    gradients = []
    for which, array in enumerate(copies):
        gradient = np.empty_like(array)
        for position, value in np.ndenumerate(array):
            h = step * max(1.0, abs(value))
            gradient[position] = (at(which, position, h) - at(which, position, -h)) / (2.0 * h)
        gradients.append(gradient)
    return gradients


def example_2_numpy(P: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Example 2's value and gradient at every row of ``P`` (N, 6), by hand in NumPy.

    The article's derivation: with s = sigmoid(z), r = s - y and
    dz = 2 r s (1 - s): dL/dw1 = dz x1, dL/dx1 = dz w1, ..., dL/db = dz, dL/dy = -2 r.
    """
    w1, x1, w2, x2, b, y = (np.ascontiguousarray(column) for column in P.T)
    s = 1.0 / (1.0 + np.exp(-(w1 * x1 + w2 * x2 + b)))
    r = s - y
    dz = 2.0 * r * s * (1.0 - s)
    return r * r, np.stack([dz * x1, dz * w1, dz * x2, dz * w2, dz, -2.0 * r], axis=1)


def example_6_numpy(
    X: FloatArray, W1: FloatArray, b1: FloatArray, W2: FloatArray, b2: FloatArray, T: FloatArray
) -> list[FloatArray]:
    """Example 6's gradients (dX, dW1, db1, dW2, db2) by hand: the article's table of VJPs."""
    H = 1.0 / (1.0 + np.exp(-(X @ W1 + b1)))
    dZ2 = H @ W2 + b2 - T  # dL/dZ2 = Z2 - T
    dZ1 = (dZ2 @ W2.T) * H * (1.0 - H)  # through the sigmoid: sigma' = H (1 - H)
    return [dZ1 @ W1.T, X.T @ dZ1, dZ1.sum(axis=0), H.T @ dZ2, dZ2.sum(axis=0)]


def layer_numpy(
    X: FloatArray, W: FloatArray, b: FloatArray, upstream: FloatArray
) -> tuple[FloatArray, list[FloatArray]]:
    """relu(X @ W + b) and the gradients of sum(upstream * it) w.r.t. X, W, b, by hand."""
    Z = X @ W + b
    dZ = upstream * (Z > 0)  # relu'(0) = 0
    return np.maximum(Z, 0.0), [dZ @ W.T, X.T @ dZ, dZ.sum(axis=0)]
