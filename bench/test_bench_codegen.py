"""Benchmarks of the replay tiers beyond example 2: Jacobians and a long program.

- ``jacobian``: the ``(10, 10)`` Jacobian of a 10 -> 10 function at 10^4
  points, ``f.jacobian`` (forward mode: ``k <= m``) on both tiers, beside
  JAX's ``jit(vmap(jacfwd))`` of the same function when JAX is installed
  (an optional peer: the row is skipped, saying so, without it);
- ``pendulum``: value and gradient of an RK4 pendulum (200 steps, 8,000+
  nodes after optimisation) at 10^5 points, on the default backend (which
  compiles its generated code in the background after the first call and
  switches to it; the row stores the tier that ran the timed calls, and the
  reason) and on the interpreter, side by side.

Every row checks its result once before timing against an independent
reference (the other tier bit for bit, central differences, JAX).
"""

import math
import os
import time

import numpy as np
import pytest

import fastad as fa

QUICK = os.environ.get("FASTAD_BENCH_QUICK") == "1"
JACOBIAN_POINTS = 10**4
PENDULUM_POINTS = 10**4 if QUICK else 10**5
PENDULUM_STEPS = 200


def coupled(*x):
    """A 10 -> 10 function: each output mixes three inputs through smooth ops."""
    n = len(x)
    return [
        fa.sin(x[i]) * x[(i + 1) % n] + fa.tanh(x[i] + 0.5 * x[(i + 3) % n]) + fa.exp(-x[i] * x[i])
        for i in range(n)
    ]


def coupled_numpy(x):
    """The same function on a ``(10,)`` array of any array library's numbers (JAX)."""
    import jax.numpy as jnp

    rolled1, rolled3 = jnp.roll(x, -1), jnp.roll(x, -3)
    return jnp.sin(x) * rolled1 + jnp.tanh(x + 0.5 * rolled3) + jnp.exp(-x * x)


def store(benchmark, n_points, **info):
    benchmark.extra_info.update(points=n_points, **info)
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_point"] = benchmark.stats.stats.min / n_points * 1e9


@pytest.fixture(scope="module")
def jacobian_points():
    return np.random.default_rng(0).uniform(-1.0, 1.0, (JACOBIAN_POINTS, 10))


@pytest.fixture(scope="module")
def jacobian_reference(jacobian_points):
    """Central differences of the interpreted values: an independent check."""
    f = fa.compile(coupled, num_inputs=10, example=np.zeros(10), backend="interpret")
    points = jacobian_points[:50]
    h = 1e-6
    columns = []
    for j in range(10):
        step = np.zeros(10)
        step[j] = h
        columns.append((f(points + step) - f(points - step)) / (2 * h))
    return np.stack(columns, axis=-1)


@pytest.mark.benchmark(group="jacobian")
@pytest.mark.parametrize("backend", ["codegen", "interpret"])
def test_jacobian_fastad(benchmark, backend, jacobian_points, jacobian_reference):
    f = fa.compile(coupled, num_inputs=10, example=np.zeros(10), backend=backend)
    first = f.jacobian(jacobian_points, threads=1)  # compiles, outside the timing
    np.testing.assert_allclose(first[:50], jacobian_reference, rtol=1e-6, atol=1e-7)
    other = fa.compile(coupled, num_inputs=10, example=np.zeros(10), backend="interpret")
    np.testing.assert_array_equal(first, other.jacobian(jacobian_points, threads=1))
    result = benchmark(f.jacobian, jacobian_points, threads=1)
    assert result.shape == (JACOBIAN_POINTS, 10, 10)
    store(benchmark, JACOBIAN_POINTS, backend=f.tier("jacobian_fwd").name)


@pytest.mark.benchmark(group="jacobian")
def test_jacobian_jax(benchmark, jacobian_points, jacobian_reference):
    jax = pytest.importorskip("jax", reason="JAX is an optional peer: pip install jax")
    jax.config.update("jax_enable_x64", True)
    jacobian = jax.jit(jax.vmap(jax.jacfwd(coupled_numpy)))
    points = jax.numpy.asarray(jacobian_points)

    def run():
        return jacobian(points).block_until_ready()

    first = np.asarray(run())
    np.testing.assert_allclose(first[:50], jacobian_reference, rtol=1e-6, atol=1e-7)
    benchmark(run)
    store(benchmark, JACOBIAN_POINTS, jax=jax.__version__)


def pendulum(theta, omega, length, damping):
    """The angle after PENDULUM_STEPS classical RK4 steps of a damped pendulum."""
    dt, g = 0.01, 9.81

    def rates(t, w):
        return w, -(g / length) * fa.sin(t) - damping * w

    for _ in range(PENDULUM_STEPS):
        k1t, k1w = rates(theta, omega)
        k2t, k2w = rates(theta + 0.5 * dt * k1t, omega + 0.5 * dt * k1w)
        k3t, k3w = rates(theta + 0.5 * dt * k2t, omega + 0.5 * dt * k2w)
        k4t, k4w = rates(theta + dt * k3t, omega + dt * k3w)
        theta = theta + dt / 6.0 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
        omega = omega + dt / 6.0 * (k1w + 2.0 * k2w + 2.0 * k3w + k4w)
    return theta


def pendulum_floats(theta, omega, length, damping):
    dt, g = 0.01, 9.81
    for _ in range(PENDULUM_STEPS):
        k1t, k1w = omega, -(g / length) * math.sin(theta) - damping * omega
        t, w = theta + 0.5 * dt * k1t, omega + 0.5 * dt * k1w
        k2t, k2w = w, -(g / length) * math.sin(t) - damping * w
        t, w = theta + 0.5 * dt * k2t, omega + 0.5 * dt * k2w
        k3t, k3w = w, -(g / length) * math.sin(t) - damping * w
        t, w = theta + dt * k3t, omega + dt * k3w
        k4t, k4w = w, -(g / length) * math.sin(t) - damping * w
        theta = theta + dt / 6.0 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
        omega = omega + dt / 6.0 * (k1w + 2.0 * k2w + 2.0 * k3w + k4w)
    return theta


def pendulum_points():
    return np.random.default_rng(1).uniform(
        [0.1, -0.5, 0.5, 0.0], [1.0, 0.5, 2.0, 0.3], (PENDULUM_POINTS, 4)
    )


@pytest.mark.benchmark(group="pendulum")
@pytest.mark.parametrize("backend", ["auto", "interpret"])
def test_pendulum(benchmark, backend):
    example = np.array([0.3, 0.0, 1.0, 0.1])
    f = fa.compile(pendulum, example=example, backend=backend)
    points = pendulum_points()
    values, gradients = f.value_and_grad(points, threads=1)
    for point, value in zip(points[:5], values[:5], strict=True):
        assert abs(value - pendulum_floats(*point)) <= 1e-12 * max(1.0, abs(value))
    h = 1e-6
    for j in range(4):
        step = np.zeros(4)
        step[j] = h
        difference = (f(points[:5] + step) - f(points[:5] - step)) / (2 * h)
        np.testing.assert_allclose(gradients[:5, j], difference, rtol=1e-6, atol=1e-8)
    if backend == "auto":  # the background compile the first call started, awaited untimed
        deadline = time.monotonic() + 120
        while f.tier("grad").name != "codegen" and time.monotonic() < deadline:
            f.value_and_grad(points[:100], threads=1)
            time.sleep(0.05)
    tier = f.tier("grad")
    benchmark(f.value_and_grad, points, threads=1)
    store(benchmark, PENDULUM_POINTS, nodes=len(f.tape), backend=tier.name, reason=tier.reason)
    benchmark.extra_info["requested"] = backend
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_node_point"] = (
            benchmark.stats.stats.min / PENDULUM_POINTS / len(f.tape) * 1e9
        )
