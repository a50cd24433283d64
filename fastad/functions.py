"""The public scalar API: leaves, gradients and the op table's functions.

Each function accepts a ``Var`` (and records a node) or a plain real number
(and returns a float computed by the same rule, with IEEE semantics:
``fa.log(0.0) == -inf``, no exception).
"""

import numpy as np

from fastad import rules
from fastad.kernels import optable
from fastad.node import Var, check_live, is_number, record
from fastad.tape import current_tape

_op = optable.BY_NAME


def var(value, name=None, tape=None):
    """Record a leaf (independent variable) holding ``value``.

    Parameters
    ----------
    value : real number
    name : str, optional
        Label shown in tables and drawings.
    tape : fastad.Tape, optional
        Defaults to :func:`fastad.current_tape`.

    Examples
    --------
    >>> import fastad as fa
    >>> with fa.Tape():
    ...     x = fa.var(3.0, name="x")
    ...     (x * x).value
    9.0
    """
    return (tape if tape is not None else current_tape()).input(value, name)


def grad(output, wrt):
    """Gradient of ``output`` with respect to ``wrt`` without touching ``.grad``.

    Parameters
    ----------
    output : Var
    wrt : Var or sequence of Var
        Nodes of the same tape.

    Returns
    -------
    float for a single node, a float64 array of ``len(wrt)`` otherwise.
    """
    _require_node(output, "fa.grad output")
    single = isinstance(wrt, Var)
    nodes = [wrt] if single else list(wrt)
    for node in nodes:
        _require_node(node, "fa.grad wrt")
        if node._tape is not output._tape:
            raise ValueError(f"{node!r} is on another tape than {output!r}")
    gradients = output._tape.gradient(output, [node._id for node in nodes])
    return float(gradients[0]) if single else gradients


def _require_node(x, what):
    if not isinstance(x, Var):
        raise TypeError(f"{what} must be a fastad Var, got {type(x).__name__}")
    check_live(x)


def _apply(name, *operands):
    code = _op[name].code
    if any(type(x) is Var for x in operands):
        result = record(code, *operands)
        if result is NotImplemented:
            kinds = ", ".join(type(x).__name__ for x in operands)
            raise TypeError(f"fa.{name} does not accept ({kinds}): use nodes or real numbers")
        return result
    for x in operands:
        if not is_number(x):
            shape = f" of shape {np.shape(x)}" if hasattr(x, "shape") else ""
            raise TypeError(
                f"fa.{name} expects a fastad Var or a real number, got {type(x).__name__}{shape}"
            )
    return rules.value(code, *(float(x) for x in operands))


def exp(x):
    """e**x. Derivative: the saved output."""
    return _apply("exp", x)


def log(x):
    """Natural logarithm; log(0) = -inf, log(x < 0) = nan."""
    return _apply("log", x)


def sqrt(x):
    """Square root; sqrt(x < 0) = nan, derivative 0.5 / output (inf at 0)."""
    return _apply("sqrt", x)


def sin(x):
    """Sine."""
    return _apply("sin", x)


def cos(x):
    """Cosine."""
    return _apply("cos", x)


def tanh(x):
    """Hyperbolic tangent. Derivative 1 - output**2, from the saved output."""
    return _apply("tanh", x)


def sigmoid(x):
    """Logistic function 1 / (1 + exp(-x)), overflow-free. Derivative out * (1 - out)."""
    return _apply("sigmoid", x)


def relu(x):
    """max(x, 0). Subgradient relu'(0) = 0."""
    return _apply("relu", x)


def abs(x):  # noqa: A001 (mirrors numpy.abs)
    """|x|. Subgradient abs'(0) = 0 (minimum norm, as PyTorch; JAX uses 1)."""
    return _apply("abs", x)


def maximum(x, y):
    """Elementwise maximum, NumPy nan semantics; at a tie each side gets half the gradient."""
    return _apply("maximum", x, y)


def minimum(x, y):
    """Elementwise minimum, NumPy nan semantics; at a tie each side gets half the gradient."""
    return _apply("minimum", x, y)
