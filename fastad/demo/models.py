"""The computations under check: the articles' six examples and one fused layer.

``fastad.demo.main`` looks up the names ``fastad.demo`` re-exports when it
runs a section, so a test can plant a wrong one (``monkeypatch.setattr(demo,
"example_1", wrong)``, or the ``model=`` argument of each ``show_*``
function) to see the demo fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import fastad as fa

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray

    Model = Callable[..., Any]
    """A computation under check (``example_1`` ...), or a planted wrong one."""


def example_1(x: fa.Var, y: fa.Var) -> fa.Var:
    """z = (x*y + x)**2: x reaches z along two paths, so its adjoints must add."""
    return (x * y + x) ** 2


def example_2(w1: fa.Var, x1: fa.Var, w2: fa.Var, x2: fa.Var, b: fa.Var, y: fa.Var) -> fa.Var:
    """L = (sigmoid(w1*x1 + w2*x2 + b) - y)**2: one neuron, squared error."""
    return (fa.sigmoid(w1 * x1 + w2 * x2 + b) - y) ** 2


def example_3(X: fa.Block, b: fa.Block) -> fa.Block:
    """Y = X + b: b of shape (3,) is broadcast over the rows of X of shape (2, 3)."""
    return X + b


def example_4(W: fa.Block, x: fa.Block) -> fa.Block | fa.Var:
    """y = W @ x: one linear layer without bias."""
    return W @ x


def example_5(w: fa.Var) -> fa.Var:
    """L(w) = (w - 3)**2: the loss of the gradient-descent example."""
    return (w - 3.0) ** 2


def example_6(
    X: fa.Block, W1: fa.Block, b1: fa.Block, W2: fa.Block, b2: fa.Block, T: FloatArray
) -> fa.Var:
    """L = 0.5 * ||sigmoid(X @ W1 + b1) @ W2 + b2 - T||^2: a two-layer network."""
    H = fa.sigmoid(X @ W1 + b1)
    Z2 = H @ W2 + b2
    return 0.5 * ((Z2 - T) ** 2).sum()


def fused_layer(X: fa.Block, W: fa.Block, b: fa.Block) -> fa.Block:
    """relu(X @ W + b) as one fused node with a hand-derived backward rule."""
    return fa.linear_relu(X, W, b)
