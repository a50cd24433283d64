"""Example 2 for the compiled-function benchmarks, and its NumPy reference.

``L = (sigmoid(w1*x1 + w2*x2 + b) - y)**2`` with inputs
``(w1, x1, w2, x2, b, y)``: one neuron and its squared error (the articles'
example 2, :func:`fastad.demo.example_2`).

The reference computes value and gradient for a batch of shape ``(N, 6)``
with hand-derived formulas, vectorised over the points, as a NumPy user
would write them::

    z = w1*x1 + w2*x2 + b,  s = 1/(1 + exp(-z)),  d = s - y,  L = d*d
    gz = dL/dz = 2*d*s*(1 - s)
    grad = [gz*x1, gz*w1, gz*x2, gz*w2, gz, -2*d]

It is written with ``out=`` and in-place operators so that no temporary is
allocated that need not be: measured on the CI-sized machine (2 cores, AMD
EPYC) at 10^6 points, 54 ns/point against 63 for the same formulas written
as plain expressions (each operator a new array) and 69 for
``np.stack`` of the gradient columns. The faster baseline is the fairer one.
The fairest NumPy layout of all is column-contiguous, ``(6, N)``
(``numpy_columns_value_and_grad``: every operand a contiguous array, 30-50%
faster than the strided columns of ``(N, 6)``), and the limit any compiled
evaluation is measured against is ``limit_value_and_grad``, the function
and its gradient as one hand-written straight-line ``@njit`` loop.
"""

from math import exp

import numba
import numpy as np

from fastad.demo import example_2

INPUT_NAMES = ("w1", "x1", "w2", "x2", "b", "y")
NUM_INPUTS = len(INPUT_NAMES)

__all__ = [
    "INPUT_NAMES",
    "NUM_INPUTS",
    "example_2",
    "limit_value_and_grad",
    "numpy_columns_value_and_grad",
    "numpy_value_and_grad",
    "random_points",
]


def numpy_value_and_grad(points):
    """Hand-written NumPy value and gradient of example 2 at every point.

    Parameters
    ----------
    points : numpy.ndarray of float64, shape (N, 6)
        One point ``(w1, x1, w2, x2, b, y)`` per row.

    Returns
    -------
    value : numpy.ndarray, shape (N,)
    grad : numpy.ndarray, shape (N, 6)
        Partial derivatives in the input order.

    Examples
    --------
    >>> value, grad = numpy_value_and_grad(np.array([[0.5, 1.2, -0.3, 0.8, 0.1, 1.0]]))
    >>> round(float(value[0]), 6), round(float(grad[0, 5]), 6)
    (0.149758, 0.773972)
    """
    grad = np.empty_like(points)
    d = _value_and_grad_rows(points.T, grad.T)  # strided views: no copy
    return d * d, grad


def _value_and_grad_rows(inputs, grad_rows):
    """The hand-derived formulas on six input arrays, writing six gradient arrays;
    returns ``d = s - y`` (the value is ``d * d``)."""
    w1, x1, w2, x2, b, y = inputs
    z = w1 * x1
    z += w2 * x2
    z += b
    # s = 1 / (1 + exp(-z)), computed in z's buffer.
    s = np.negative(z, out=z)
    np.exp(s, out=s)
    s += 1.0
    np.reciprocal(s, out=s)
    d = s - y
    gz = 1.0 - s
    gz *= s
    gz *= d
    gz *= 2.0
    np.multiply(gz, x1, out=grad_rows[0])
    np.multiply(gz, w1, out=grad_rows[1])
    np.multiply(gz, x2, out=grad_rows[2])
    np.multiply(gz, w2, out=grad_rows[3])
    grad_rows[4] = gz
    np.multiply(d, -2.0, out=grad_rows[5])
    return d


def numpy_columns_value_and_grad(columns, out=None):
    """The same formulas on column-contiguous data: the fastest honest NumPy layout.

    Parameters
    ----------
    columns : numpy.ndarray of float64, shape (6, N)
        One row per input, so every operand is a contiguous array (the
        ``(N, 6)`` layout makes NumPy read strided columns, which cost it
        30-50% at 10^6 points).
    out : (numpy.ndarray, numpy.ndarray), optional
        Arrays of shapes ``(N,)`` and ``(6, N)`` to write into (the
        counterpart of ``f.value_and_grad(P, out=...)``); new ones by default.

    Returns
    -------
    value : numpy.ndarray, shape (N,)
    grad : numpy.ndarray, shape (6, N)
        One row per input, contiguous like the input.
    """
    value, grad = (None, np.empty_like(columns)) if out is None else out
    d = _value_and_grad_rows(columns, grad)
    return (d * d if value is None else np.multiply(d, d, out=value)), grad


@numba.njit(error_model="numpy", boundscheck=False, fastmath=False, nogil=True, cache=False)
def _limit_loop(points, values, grad):
    for p in range(points.shape[0]):
        w1, x1, w2, x2, b, y = (
            points[p, 0],
            points[p, 1],
            points[p, 2],
            points[p, 3],
            points[p, 4],
            points[p, 5],
        )
        s = 1.0 / (1.0 + exp(-(w1 * x1 + w2 * x2 + b)))
        d = s - y
        values[p] = d * d
        gz = 2.0 * d * s * (1.0 - s)
        grad[p, 0] = gz * x1
        grad[p, 1] = gz * w1
        grad[p, 2] = gz * x2
        grad[p, 3] = gz * w2
        grad[p, 4] = gz
        grad[p, 5] = -2.0 * d


def limit_value_and_grad(points):
    """The hand-written limit: a straight-line ``@njit`` loop of example 2 and its gradient.

    What a Numba user would write by hand for this one function, with the
    options fastad's kernels use (IEEE results, no bounds checks, no fast
    math), on the same ``(N, 6)`` points, allocating its outputs per call as
    ``f.value_and_grad`` does. It is the floor generated code aims at.
    """
    values = np.empty(points.shape[0])
    grad = np.empty_like(points)
    _limit_loop(points, values, grad)
    return values, grad


def random_points(n_points, seed=0):
    """``n_points`` seeded points of shape ``(n_points, 6)``, C-contiguous float64.

    Weights, inputs and bias are uniform in ``[-1, 1]`` and the target ``y``
    in ``[0, 1]`` (a sigmoid's range), so ``|z| <= 3``: ``exp(-z)`` never
    overflows and no point sits where the two sigmoid formulas (fastad's
    two-branch one and ``1/(1 + exp(-z))``) differ by more than rounding.
    """
    rng = np.random.default_rng(seed)
    points = rng.uniform(-1.0, 1.0, (n_points, NUM_INPUTS))
    points[:, INPUT_NAMES.index("y")] = rng.uniform(0.0, 1.0, n_points)
    return points
