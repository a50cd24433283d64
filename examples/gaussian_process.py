"""Fit a Gaussian process's kernel hyperparameters by its marginal likelihood.

    python examples/gaussian_process.py [--points 200]

The negative log marginal likelihood of observations ``y`` at inputs ``x``
under a squared-exponential kernel with length scale ``l``, signal scale
``s`` and noise ``n`` (all optimised as logarithms, ``theta``):

    K = s^2 exp(-(x_i - x_j)^2 / (2 l^2)) + n^2 I
    -log p(y) = y^T K^-1 y / 2 + log det K / 2 + N log(2 pi) / 2

computed as JAX or GPyTorch would: one Cholesky factor ``L`` of ``K``, a
triangular solve ``a = L^-1 y`` (so ``y^T K^-1 y = a^T a``) and the log
determinant ``2 sum(log diag L)``. ``fa.value_and_grad`` gives the value
and the gradient in ``theta`` from one trace, and SciPy's L-BFGS-B takes
both (``jac=True``). The gradient is checked once against the textbook
formula ``0.5 tr((K^-1 - alpha alpha^T) dK/dtheta)`` with ``alpha = K^-1 y``.
"""

import argparse

import numpy as np
import scipy.optimize

import fastad as fa


def make_data(rng, points=200):
    """Noisy samples of a smooth function at sorted random inputs."""
    x = np.sort(rng.uniform(-4.0, 4.0, size=points))
    y = np.sin(1.5 * x) + 0.3 * np.cos(4.0 * x) + 0.2 * rng.normal(size=points)
    return x, y


def negative_log_likelihood(theta, squared, y):
    """-log p(y | theta) from the pairwise squared distances: a scalar node."""
    length, signal, noise = fa.exp(theta[0]), fa.exp(theta[1]), fa.exp(theta[2])
    points = y.shape[0]
    K = signal * signal * fa.exp(squared * (-0.5 / (length * length))) + noise * noise * np.eye(
        points
    )
    L = fa.linalg.cholesky(K)
    a = fa.linalg.solve_triangular(L, y, lower=True)
    log_det = 2.0 * fa.log(L[np.arange(points), np.arange(points)]).sum()
    return 0.5 * (a * a).sum() + 0.5 * log_det + 0.5 * points * np.log(2.0 * np.pi)


def textbook_gradient(theta, squared, y):
    """The same gradient written by hand in NumPy (Rasmussen and Williams, eq. 5.9)."""
    length, signal, noise = np.exp(theta)
    shape = np.exp(-0.5 * squared / length**2)
    K = signal**2 * shape + noise**2 * np.eye(y.shape[0])
    alpha = np.linalg.solve(K, y)
    inner = np.linalg.inv(K) - np.outer(alpha, alpha)
    derivatives = (
        signal**2 * shape * squared / length**2,  # dK / d log l
        2.0 * signal**2 * shape,  # dK / d log s
        2.0 * noise**2 * np.eye(y.shape[0]),  # dK / d log n
    )
    return np.array([0.5 * np.sum(inner * dK) for dK in derivatives])


def fit(x, y, theta0=(0.0, 0.0, -1.0)):
    """L-BFGS-B on the marginal likelihood: SciPy's result."""
    squared = (x[:, None] - x[None, :]) ** 2
    value_and_grad = fa.value_and_grad(negative_log_likelihood)
    theta0 = np.array(theta0)
    _, gradient = value_and_grad(theta0, squared, y)
    expected = textbook_gradient(theta0, squared, y)
    if not np.allclose(gradient, expected, rtol=1e-8, atol=1e-10):
        raise AssertionError(f"gradient {gradient} differs from the textbook's {expected}")
    return scipy.optimize.minimize(
        lambda theta: value_and_grad(theta, squared, y), theta0, jac=True, method="L-BFGS-B"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    args = parser.parse_args(argv)
    x, y = make_data(np.random.default_rng(0), args.points)
    result = fit(x, y)
    length, signal, noise = np.exp(result.x)
    print(f"-log p(y) = {result.fun:.4f} after {result.nit} iterations ({result.message})")
    print(f"length scale {length:.3f}, signal {signal:.3f}, noise {noise:.3f}")
    return result


if __name__ == "__main__":
    main()
