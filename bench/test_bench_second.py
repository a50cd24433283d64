"""Second-order benchmarks: Hessian-vector products, Hessians, Newton-CG.

Group ``second`` (every row one thread, both replay tiers, one run):

- ``value_and_grad`` and ``hvp`` of example 2 and of the 10-input
  Rosenbrock function at 10^5 points: the target "HVP <= 3x value+grad of
  the same function" compares the two rows of one tier;
- ``hessian`` of example 2 (k = 6) at 10^6 points, against the batch
  group's ``value_and_grad`` at 10^6 points (target: <= 2.5 k x);
- JAX's ``jit(vmap(hvp))`` of example 2, when JAX is installed (an optional
  peer; the row is skipped, saying so, without it).

Group ``second_latency``: one ``f.hvp`` call at one point (target <= 3 us),
beside ``value_and_grad`` at the same point.

Group ``newton``: scipy's Newton-CG with ``hessp=f.hessp`` on an
L2-regularised logistic regression, beside L-BFGS-B with the same
gradient; both run to a gradient norm of 1e-6, the rows store their
iteration counts (Newton-CG must need fewer).

Group ``array transforms``: a compiled function of arrays, a tanh layer
and a softplus loss (``tanh_net``: 256 x 64 -> 128 -> 10, half the inputs
exactly zero), with ``value_and_grad``, ``jvp`` and ``hvp`` on both tiers
(the generated kernel and the interpreter), beside the same HVP written by
hand in NumPy (``numpy_tanh_net_hvp``: eight products and the elementwise
passes, forward-over-reverse, the fastest honest layout).

Group ``classifier transforms``: a smooth classifier's loss (``classifier``:
256 x 64 -> 128 tanh units -> 10 classes, the cross-entropy of integer
labels, half the inputs exactly zero), ``value_and_grad`` and ``hvp`` on both
tiers: the HVP through the cross-entropy's second-order rule, one generated
kernel where ``f.tier("hvp")`` says codegen.

Every row checks its result once before timing against an independent
reference: central differences of the hand-written NumPy gradient.
"""

import os

import numpy as np
import pytest
import scipy.optimize
from example2 import example_2, numpy_value_and_grad, random_points

import fastad as fa

QUICK = os.environ.get("FASTAD_BENCH_QUICK") == "1"
HVP_POINTS = 10**5
HESSIAN_POINTS = 10**6
ONE_POINT = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
ONE_DIRECTION = np.array([0.3, -1.0, 0.2, 0.5, 1.5, -0.7])
ROSENBROCK_INPUTS = 10


def rosenbrock(*x):
    return sum(
        100.0 * (x[i + 1] - x[i] * x[i]) ** 2.0 + (1.0 - x[i]) ** 2.0 for i in range(len(x) - 1)
    )


def rosenbrock_numpy_grad(P):
    x = P
    g = np.zeros_like(x)
    r = x[:, 1:] - x[:, :-1] ** 2
    g[:, :-1] += -400.0 * x[:, :-1] * r - 2.0 * (1.0 - x[:, :-1])
    g[:, 1:] += 200.0 * r
    return g


FUNCTIONS = {
    "example2": (example_2, 6, lambda P: numpy_value_and_grad(P)[1]),
    "rosenbrock": (rosenbrock, ROSENBROCK_INPUTS, rosenbrock_numpy_grad),
}


def numeric_hvp(gradient, P, V, h=1e-6):
    """Central differences of a hand-written gradient along ``V``: the reference."""
    return (gradient(P + h * V) - gradient(P - h * V)) / (2 * h)


def store(benchmark, n_points, **info):
    benchmark.extra_info.update(points=n_points, **info)
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_point"] = benchmark.stats.stats.min / n_points * 1e9


def store_per_call(benchmark, **info):
    benchmark.extra_info.update(info)
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_call"] = benchmark.stats.stats.min * 1e6


def store_tier(benchmark, f, call):
    """``store_per_call`` for a compiled function's ``call`` (``value_and_grad`` is the
    ``grad`` tier), naming the tier that ran it."""
    store_per_call(
        benchmark, call=call, backend=f.tier("grad" if call == "value_and_grad" else call).name
    )


@pytest.fixture(scope="module", params=["codegen", "interpret"])
def backend(request):
    return request.param


def compiled(name, backend):
    function, k, _ = FUNCTIONS[name]
    return fa.compile(function, num_inputs=k, example=np.full(k, 0.5), backend=backend)


def points_for(name, n_points):
    k = FUNCTIONS[name][1]
    if name == "example2":
        P = random_points(n_points, seed=0)
    else:
        P = np.random.default_rng(0).uniform(-1.5, 1.5, (n_points, k))
    return P, np.random.default_rng(1).normal(size=P.shape)


@pytest.mark.benchmark(group="second")
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_second_value_and_grad(benchmark, backend, name):
    f = compiled(name, backend)
    P, _ = points_for(name, HVP_POINTS)
    _, grad = f.value_and_grad(P, threads=1)
    np.testing.assert_allclose(grad[:100], FUNCTIONS[name][2](P[:100]), rtol=1e-10, atol=1e-12)
    benchmark(f.value_and_grad, P, threads=1)
    store(benchmark, HVP_POINTS, function=name, backend=f.tier("grad").name)


@pytest.mark.benchmark(group="second")
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_second_hvp(benchmark, backend, name):
    f = compiled(name, backend)
    P, V = points_for(name, HVP_POINTS)
    first = f.hvp(P, V, threads=1)  # compiles outside the timing
    reference = numeric_hvp(FUNCTIONS[name][2], P[:100], V[:100])
    np.testing.assert_allclose(first[:100], reference, rtol=1e-6, atol=1e-6)
    benchmark(f.hvp, P, V, threads=1)
    store(benchmark, HVP_POINTS, function=name, backend=f.tier("hvp").name)


@pytest.mark.benchmark(group="second")
def test_second_hessian(benchmark, backend):
    f = compiled("example2", backend)
    P, V = points_for("example2", HESSIAN_POINTS)
    first = f.hessian(P, threads=1)
    reference = numeric_hvp(FUNCTIONS["example2"][2], P[:100], V[:100])
    np.testing.assert_allclose(
        np.einsum("nij,nj->ni", first[:100], V[:100]), reference, rtol=1e-6, atol=1e-6
    )
    benchmark(f.hessian, P, threads=1)
    store(benchmark, HESSIAN_POINTS, function="example2", backend=f.tier("hessian").name, k=6)


@pytest.mark.benchmark(group="second")
def test_second_hvp_jax(benchmark):
    jax = pytest.importorskip("jax", reason="JAX is an optional peer: pip install jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def loss(p):
        w1, x1, w2, x2, b, y = p
        return (jax.nn.sigmoid(w1 * x1 + w2 * x2 + b) - y) ** 2

    def product(p, v):
        return jax.jvp(jax.grad(loss), (p,), (v,))[1]

    hvp = jax.jit(jax.vmap(product))
    P, V = points_for("example2", HVP_POINTS)
    P, V = jnp.asarray(P), jnp.asarray(V)

    def run():
        return hvp(P, V).block_until_ready()

    first = np.asarray(run())
    reference = numeric_hvp(FUNCTIONS["example2"][2], np.asarray(P[:100]), np.asarray(V[:100]))
    np.testing.assert_allclose(first[:100], reference, rtol=1e-6, atol=1e-6)
    benchmark(run)
    store(benchmark, HVP_POINTS, function="example2", jax=jax.__version__)


@pytest.mark.benchmark(group="second_latency")
@pytest.mark.parametrize("call", ["hvp", "value_and_grad"])
def test_second_latency(benchmark, backend, call):
    f = compiled("example2", backend)
    reference = numeric_hvp(FUNCTIONS["example2"][2], ONE_POINT[None], ONE_DIRECTION[None])[0]
    np.testing.assert_allclose(f.hvp(ONE_POINT, ONE_DIRECTION), reference, rtol=1e-6)
    f.value_and_grad(ONE_POINT)
    if call == "hvp":
        benchmark(f.hvp, ONE_POINT, ONE_DIRECTION)
    else:
        benchmark(f.value_and_grad, ONE_POINT)
    store_tier(benchmark, f, call)


def logistic_loss(n_features=20, n_samples=200, seed=0):
    """An L2-regularised logistic regression as a compiled function of its weights."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, n_features))
    y = (X @ rng.normal(size=n_features) + rng.normal(size=n_samples) > 0).astype(float)

    def loss(*w):
        total = 0.0
        for row, label in zip(X, y, strict=True):
            z = sum(wi * float(xi) for wi, xi in zip(w, row, strict=True))
            total = total + fa.softplus(z) - float(label) * z
        return total + 0.5 * sum(wi * wi for wi in w)

    return fa.compile(loss, num_inputs=n_features, example=np.zeros(n_features))


@pytest.fixture(scope="module")
def logistic():
    return logistic_loss(n_features=10 if QUICK else 20)


@pytest.mark.benchmark(group="newton")
@pytest.mark.parametrize("method", ["Newton-CG", "L-BFGS-B"])
def test_newton_against_lbfgs(benchmark, logistic, method):
    f = logistic
    x0 = np.zeros(f.num_inputs)
    options = {"xtol": 1e-12} if method == "Newton-CG" else {"gtol": 1e-7, "ftol": 0.0}
    hessp = f.hessp if method == "Newton-CG" else None

    def solve():
        return scipy.optimize.minimize(
            f, x0, jac=f.grad, hessp=hessp, method=method, options=options
        )

    result = solve()
    norm = float(np.linalg.norm(f.grad(result.x)))
    assert norm <= 1e-6, (method, norm, result.message)
    benchmark(solve)
    benchmark.extra_info.update(method=method, iterations=int(result.nit), gradient_norm=norm)


# -- functions of arrays -------------------------------------------------------------------


def tanh_net(X, W1, b1, W2, b2):
    H = fa.tanh(fa.linear(X, W1, b1))
    return fa.softplus(H @ W2 + b2).mean()


def tanh_net_arguments(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(256, 64))
    X[rng.random(X.shape) < 0.5] = 0.0  # realistic data: exact zeros
    parameters = (
        rng.normal(size=(64, 128)) * 0.1,
        rng.normal(size=128) * 0.1,
        rng.normal(size=(128, 10)) * 0.1,
        rng.normal(size=10) * 0.1,
    )
    directions = [rng.normal(size=p.shape) for p in parameters]
    return (X, *parameters), directions


def numpy_tanh_net_gradient(X, W1, b1, W2, b2):
    H = np.tanh(X @ W1 + b1)
    Z = H @ W2 + b2
    dZ = 1.0 / (1.0 + np.exp(-Z)) / Z.size
    dA = (dZ @ W2.T) * (1.0 - H * H)
    return [X.T @ dA, dA.sum(axis=0), H.T @ dZ, dZ.sum(axis=0)]


def numpy_tanh_net_hvp(X, W1, b1, W2, b2, V1, c1, V2, c2):
    """H v of :func:`tanh_net` by hand: the tangents of the forward pass, then of the
    backward pass (forward-over-reverse)."""
    H = np.tanh(X @ W1 + b1)
    D = 1.0 - H * H
    Z = H @ W2 + b2
    S = 1.0 / (1.0 + np.exp(-Z))
    dZ = S / Z.size
    dH = dZ @ W2.T
    tH = D * (X @ V1 + c1)
    tZ = tH @ W2 + H @ V2 + c2
    tdZ = S * (1.0 - S) * tZ / Z.size
    tdA = (tdZ @ W2.T + dZ @ V2.T) * D - dH * 2.0 * H * tH
    return [X.T @ tdA, tdA.sum(axis=0), tH.T @ dZ + H.T @ tdZ, tdZ.sum(axis=0)]


def tanh_net_reference_hvp(arguments, directions, h=1e-6):
    """Central differences of the hand-written gradient along the directions."""

    def moved(sign):
        X, *parameters = arguments
        shifted = [p + sign * h * d for p, d in zip(parameters, directions, strict=True)]
        return numpy_tanh_net_gradient(X, *shifted)

    return [(up - down) / (2 * h) for up, down in zip(moved(1.0), moved(-1.0), strict=True)]


def assert_products(got, want):
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


@pytest.mark.benchmark(group="array transforms")
@pytest.mark.parametrize("call", ["value_and_grad", "jvp", "hvp"])
def test_array_transforms(benchmark, backend, call):
    arguments, directions = tanh_net_arguments()
    f = fa.compile(tanh_net, example=arguments, wrt=(1, 2, 3, 4), backend=backend)
    if call == "hvp":
        assert_products(f.hvp(arguments, directions), tanh_net_reference_hvp(arguments, directions))
        benchmark(f.hvp, arguments, directions)
    elif call == "jvp":
        gradients = numpy_tanh_net_gradient(*arguments)
        inner = sum(float(np.sum(g * d)) for g, d in zip(gradients, directions, strict=True))
        assert f.jvp(arguments, directions)[1] == pytest.approx(inner, rel=1e-10)
        benchmark(f.jvp, arguments, directions)
    else:
        assert_products(f.grad(arguments), numpy_tanh_net_gradient(*arguments))
        benchmark(f.value_and_grad, arguments)
    store_tier(benchmark, f, call)


@pytest.mark.benchmark(group="array transforms")
def test_array_hvp_numpy(benchmark):
    arguments, directions = tanh_net_arguments()
    assert_products(
        numpy_tanh_net_hvp(*arguments, *directions), tanh_net_reference_hvp(arguments, directions)
    )
    benchmark(numpy_tanh_net_hvp, *arguments, *directions)
    store_per_call(benchmark, call="hvp", backend="numpy by hand")


def classifier(X, W1, b1, W2, b2, y):
    return fa.cross_entropy(fa.tanh(fa.linear(X, W1, b1)) @ W2 + b2, y)


def numpy_classifier_gradient(X, W1, b1, W2, b2, y):
    """The gradient of :func:`classifier` by hand (softmax minus the one-hot labels)."""
    H = np.tanh(X @ W1 + b1)
    Z = H @ W2 + b2
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(len(y)), y] -= 1.0
    dZ = P / len(y)
    dA = (dZ @ W2.T) * (1.0 - H * H)
    return [X.T @ dA, dA.sum(axis=0), H.T @ dZ, dZ.sum(axis=0)]


@pytest.mark.benchmark(group="classifier transforms")
@pytest.mark.parametrize("call", ["value_and_grad", "hvp"])
def test_classifier_transforms(benchmark, backend, call):
    (X, *parameters), directions = tanh_net_arguments()
    y = np.random.default_rng(1).integers(0, 10, size=X.shape[0])
    arguments = (X, *parameters, y)
    f = fa.compile(classifier, example=arguments, wrt=(1, 2, 3, 4), backend=backend)
    if call == "hvp":
        h = 1e-6

        def moved(sign):
            shifted = [p + sign * h * d for p, d in zip(parameters, directions, strict=True)]
            return numpy_classifier_gradient(X, *shifted, y)

        want = [(up - down) / (2 * h) for up, down in zip(moved(1.0), moved(-1.0), strict=True)]
        assert_products(f.hvp(arguments, directions), want)
        benchmark(f.hvp, arguments, directions)
    else:
        assert_products(f.grad(arguments), numpy_classifier_gradient(*arguments))
        benchmark(f.value_and_grad, arguments)
    store_tier(benchmark, f, call)
