"""CasADi, the strongest tape virtual machine, on the same graphs (extra ``bench``).

CasADi's SX graphs are built with its own API from the same seeded DAG
(``dag.py``) and the same example 2 (``example2.py``); ``ca.Function``
compiles each into its SX virtual machine, with the gradient from CasADi's
own reverse mode. Everything here returns None when CasADi is not
installed, and the benchmarks skip with that reason.
"""

import numpy as np

try:
    import casadi as ca
except ImportError:  # the optional extra is not installed
    ca = None

MISSING = "CasADi is not installed (pip install 'fastad[bench]')"


def dag_function(dag):
    """An SX Function ``x -> (root, d root / d x)`` for the random DAG."""
    if ca is None:
        return None
    from dag import evaluate

    x = ca.SX.sym("x", dag.n_inputs)
    nodes = evaluate(dag, [x[i] for i in range(dag.n_inputs)], ca.sin, ca.tanh)
    root = nodes[-1]
    return ca.Function("dag", [x], [root, ca.gradient(root, x)])


def example_2_function():
    """An SX Function ``p -> (L, dL/dp)`` for the articles' example 2."""
    if ca is None:
        return None
    p = ca.SX.sym("p", 6)
    w1, x1, w2, x2, b, y = (p[i] for i in range(6))
    z = w1 * x1 + w2 * x2 + b
    loss = (1.0 / (1.0 + ca.exp(-z)) - y) ** 2
    return ca.Function("example_2", [p], [loss, ca.gradient(loss, p)])


def call(function, point):
    """One numeric evaluation: (value, gradient) as float and array."""
    value, gradient = function(point)
    return float(value), np.asarray(gradient).ravel()


def batch_mapped(mapped, points):
    """Evaluate ``function.map(N)`` (CasADi's own serial batching) at ``points`` (N, k)."""
    values, gradients = mapped(points.T)
    return np.asarray(values).ravel(), np.asarray(gradients).T
