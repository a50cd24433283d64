"""Fit a softmax regression by Newton-CG, with Hessian-vector products from fastad.

    python examples/softmax_newton_cg.py [--samples 500]

The loss is the summed cross-entropy of ``X @ W`` against integer labels
plus ``0.5 |W|^2``, compiled once as a function of arrays with ``wrt=0``
(the weights vary; the data and labels are passed as they are). SciPy's
Newton-CG asks for the value, the gradient and products ``H p``:
``f.hessp`` gives them by forward over reverse through the cross-entropy's
second-order rule, without forming the Hessian.
"""

import argparse

import numpy as np
import scipy.optimize

import fastad as fa


def make_data(rng, samples=500, features=8, classes=4):
    """Labels from a linear rule with noise; one feature is all zeros, as real data has."""
    X = rng.normal(size=(samples, features))
    X[:, 3] = 0.0
    scores = X @ rng.normal(size=(features, classes)) + rng.gumbel(size=(samples, classes))
    return X, scores.argmax(axis=1)


def loss(W, X, y):
    return fa.cross_entropy(X @ W, y, "sum") + 0.5 * (W * W).sum()


def fit(X, y, classes):
    """Newton-CG from zero weights: SciPy's result, its ``x`` the flattened weights."""
    shape = (X.shape[1], classes)
    W0 = np.zeros(shape)
    f = fa.compile(loss, example=(W0, X, y), wrt=0)

    def arguments(w):
        return (w.reshape(shape), X, y)

    return scipy.optimize.minimize(
        lambda w: f(arguments(w)),
        W0.ravel(),
        jac=lambda w: f.grad(arguments(w)).ravel(),
        hessp=lambda w, p: f.hessp(arguments(w), p.reshape(shape)).ravel(),
        method="Newton-CG",
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args(argv)
    X, y = make_data(np.random.default_rng(0), args.samples)
    result = fit(X, y, classes=4)
    W = result.x.reshape(X.shape[1], 4)
    accuracy = float(np.mean((X @ W).argmax(axis=1) == y))
    print(
        f"loss {result.fun:.4f} after {result.nit} Newton steps, {result.nhev} Hessian-vector "
        f"products; training accuracy {accuracy:.3f}"
    )
    return result


if __name__ == "__main__":
    main()
