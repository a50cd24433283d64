"""The ``gp`` group: a Gaussian process's negative log marginal likelihood and its gradient.

``python -m pytest bench -k gp``. n = 500 points, an RBF kernel with three
log-hyperparameters (length, signal, noise), one BLAS thread:

- ``fastad``: ``fa.value_and_grad`` of the likelihood written with
  ``fa.linalg.cholesky`` and ``fa.linalg.solve_triangular``
  (``examples/gaussian_process.py``), the path a user calls (its first,
  tracing call outside the timing);
- ``numpy``: the same value and gradient by hand in NumPy and SciPy, the
  fastest honest layout we know: one Cholesky factor, ``alpha`` by
  ``cho_solve``, ``K^-1`` by ``cho_solve`` of the identity, then
  ``0.5 tr((K^-1 - alpha alpha^T) dK/dtheta)`` per hyperparameter;
- ``jax``: ``jit(value_and_grad)`` of the same function in float64, one
  thread (skipped, saying so, without JAX).

Every row is checked once against the NumPy row's gradient and against
central differences of its value.

``python -m pytest bench/test_bench_linalg.py -k jax`` also checks every
``fa.linalg`` op (value, gradient and Hessian-vector product) against
JAX's, where JAX is installed: a cross-check, not a timing.
"""

import os

import numpy as np
import pytest
import scipy.linalg

import fastad as fa

POINTS = 500
THETA = np.array([0.1, 0.2, -1.5])


def data():
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-4.0, 4.0, size=POINTS))
    y = np.sin(1.5 * x) + 0.2 * rng.normal(size=POINTS)
    return (x[:, None] - x[None, :]) ** 2, y


def fastad_nll(theta, squared, y):
    length, signal, noise = fa.exp(theta[0]), fa.exp(theta[1]), fa.exp(theta[2])
    n = y.shape[0]
    K = signal * signal * fa.exp(squared * (-0.5 / (length * length))) + noise * noise * np.eye(n)
    L = fa.linalg.cholesky(K)
    a = fa.linalg.solve_triangular(L, y, lower=True)
    return 0.5 * (a * a).sum() + fa.log(L[np.arange(n), np.arange(n)]).sum()


def numpy_value_and_grad(theta, squared, y):
    """The value and gradient by hand (Rasmussen and Williams, eq. 5.9)."""
    length, signal, noise = np.exp(theta)
    n = y.shape[0]
    shape = np.exp(-0.5 * squared / length**2)
    K = signal**2 * shape
    K[np.diag_indices(n)] += noise**2
    factor = scipy.linalg.cho_factor(K, lower=True, check_finite=False)
    alpha = scipy.linalg.cho_solve(factor, y, check_finite=False)
    value = 0.5 * y @ alpha + np.log(np.diag(factor[0])).sum()
    inner = scipy.linalg.cho_solve(factor, np.eye(n), check_finite=False)
    inner -= np.outer(alpha, alpha)
    weighted = inner * shape  # the kernel's shape, shared by two derivatives
    gradient = np.array(
        [
            0.5 * signal**2 * np.vdot(weighted, squared) / length**2,
            signal**2 * weighted.sum(),
            noise**2 * np.trace(inner),
        ]
    )
    return value, gradient


def jax_value_and_grad():
    """``jit(value_and_grad)`` of the likelihood in JAX, float64, or skip without JAX."""
    jax = pytest.importorskip("jax", reason="JAX is an optional peer: pip install jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.scipy.linalg

    def nll(theta, squared, y):
        length, signal, noise = jnp.exp(theta[0]), jnp.exp(theta[1]), jnp.exp(theta[2])
        n = y.shape[0]
        K = signal**2 * jnp.exp(-0.5 * squared / length**2) + noise**2 * jnp.eye(n)
        L = jnp.linalg.cholesky(K)
        a = jax.scipy.linalg.solve_triangular(L, y, lower=True)
        return 0.5 * a @ a + jnp.log(jnp.diag(L)).sum()

    compiled = jax.jit(jax.value_and_grad(nll))

    def call(theta, squared, y):
        value, gradient = compiled(theta, squared, y)
        return float(value), np.asarray(gradient)

    return call


def _ways():
    return {
        "fastad": lambda: fa.value_and_grad(fastad_nll),
        "numpy": lambda: numpy_value_and_grad,
        "jax": jax_value_and_grad,
    }


@pytest.mark.benchmark(group="gp")
@pytest.mark.parametrize("way", ["fastad", "numpy", "jax"])
def test_gp_value_and_grad(benchmark, way):
    if way == "jax" and os.environ.get("OMP_NUM_THREADS") == "1":
        os.environ.setdefault(
            "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        )
    squared, y = data()
    function = _ways()[way]()
    value, gradient = function(THETA, squared, y)  # traces or compiles, outside the timing
    want_value, want_gradient = numpy_value_and_grad(THETA, squared, y)
    assert value == pytest.approx(want_value, rel=1e-10)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-8)
    h = 1e-6
    for i in range(3):  # the reference itself, against central differences
        step = np.zeros(3)
        step[i] = h
        up = numpy_value_and_grad(THETA + step, squared, y)[0]
        down = numpy_value_and_grad(THETA - step, squared, y)[0]
        assert want_gradient[i] == pytest.approx((up - down) / (2 * h), rel=1e-5)
    benchmark.extra_info.update(way=way, points=POINTS)
    benchmark(function, THETA, squared, y)


# -- every linear-algebra op against JAX ------------------------------------------------------
# Not a timing: a cross-check of fastad's linear algebra (value, gradient, Hessian-vector
# product and Jacobian) against JAX's, where JAX is installed (an optional peer, so it
# lives with the peers' rows, skipped without it). Each case is a scalar function of a
# matrix A (and a second matrix B), whose matrices are made symmetric positive definite
# (or triangular) from A inside, so every direction keeps them so.
SIZE, COLUMNS = 5, 3


def linear_algebra_cases(np_, linalg, solve_triangular):
    """``{name: f(A, B)}`` written once for either library (``np_``: ``np`` or ``jnp``)."""
    rng = np.random.default_rng(7)
    W, V = rng.normal(size=(SIZE, SIZE)), rng.normal(size=(SIZE, COLUMNS))
    lower = np.tril(np.ones((SIZE, SIZE)))

    def spd(A):
        return A @ A.T + SIZE * np.eye(SIZE)

    def eigh(A, B):
        values, vectors = linalg.eigh(spd(A))
        return (values * W[0]).sum() + (vectors * vectors * W).sum()  # signs cancel

    return {
        "cholesky": lambda A, B: (linalg.cholesky(spd(A)) * W).sum(),
        "solve": lambda A, B: (linalg.solve(spd(A), B) * V).sum(),
        "solve_triangular": lambda A, B: (
            solve_triangular(A * lower + SIZE * np.eye(SIZE), B, lower=True) * V
        ).sum(),
        "inv": lambda A, B: (linalg.inv(spd(A)) * W).sum(),
        "det": lambda A, B: linalg.det(spd(A)) / SIZE**SIZE,
        "slogdet": lambda A, B: linalg.slogdet(spd(A))[1],
        "eigh": eigh,
        "norm": lambda A, B: linalg.norm(A) + linalg.norm(B[:, 0]) * linalg.norm(A @ B),
    }


CASE_NAMES = ["cholesky", "solve", "solve_triangular", "inv", "det", "slogdet", "eigh", "norm"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_linear_algebra_agrees_with_jax(name):
    jax = pytest.importorskip("jax", reason="JAX is an optional peer: pip install jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.scipy.linalg

    mine = linear_algebra_cases(np, fa.linalg, fa.linalg.solve_triangular)[name]
    theirs = linear_algebra_cases(jnp, jnp.linalg, jax.scipy.linalg.solve_triangular)[name]
    rng = np.random.default_rng(len(name))
    A, B = rng.normal(size=(SIZE, SIZE)), rng.normal(size=(SIZE, COLUMNS))
    dA, dB = rng.normal(size=A.shape), rng.normal(size=B.shape)
    value, (gA, gB) = fa.value_and_grad(mine, argnums=(0, 1))(A, B)
    want_value, (want_gA, want_gB) = jax.value_and_grad(theirs, argnums=(0, 1))(A, B)
    assert value == pytest.approx(float(want_value), rel=1e-12)
    np.testing.assert_allclose(gA, want_gA, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gB, want_gB, rtol=1e-10, atol=1e-12)
    products = fa.hvp(mine, argnums=(0, 1))((A, B), [dA, dB])  # forward over reverse
    grad = jax.grad(theirs, argnums=(0, 1))
    want_products = jax.jvp(lambda a, b: grad(a, b), (A, B), (dA, dB))[1]
    for got, want in zip(products, want_products, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)
