"""fastad.dask on a local cluster: throughput against one local thread, and the cost per chunk.

Run with ``python -m pytest bench/test_bench_dask.py`` (the default
``pytest`` run only collects ``tests/``). One group, ``dask``, on a
``distributed.LocalCluster`` of 2 worker processes x 1 thread, the points
already on the cluster (``X.persist()``, as data a cluster computed or
loaded), timing what a user calls: ``fastad.dask.value_and_grad(f, X)``
and ``dask.compute`` of both arrays back to this process.

- ``test_dask_value_and_grad``: 2 x 10^6 points (2 x 10^4 in a quick run)
  of the pendulum below in chunks of 10^5, beside the same call made
  locally on one thread, ``f.value_and_grad(P, threads=1)``, timed in the
  same test (best of ``REFERENCE_ROUNDS``). ``extra_info["speedup"]`` is the
  reference's time over the cluster's (goal: >= 1.6).
- ``test_dask_overhead_per_chunk``: the same function on chunks of 100
  points (400 chunks; 20 in a quick run), where the kernels take
  microseconds: ``extra_info["overhead_ms_per_chunk"]`` is the wall time
  less the kernels' time split over the two workers, per chunk (goal:
  <= 5 ms). Each chunk is three tasks: its kernel and the two slices.

Both check the cluster's result against the local one, bit for bit, once
(while warming the workers: their first call loads the generated code from
the disk cache). The pendulum is compiled with ``backend="codegen"`` so
both sides run the generated kernels from the first call (``"auto"``
would reach them too, after its threshold, at a different time in each
process).
"""

import os
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, wait

import fastad as fa
import fastad.dask

QUICK = os.environ.get("FASTAD_BENCH_QUICK") == "1"
N_POINTS = 2 * 10**4 if QUICK else 2 * 10**6
CHUNK = 2 * 10**3 if QUICK else 10**5
TINY_CHUNK = 100
TINY_CHUNKS = 20 if QUICK else 400
REFERENCE_ROUNDS = 1 if QUICK else 3
WORKERS = 2
STEPS = 25
TIMEOUT = 300


def pendulum(theta, omega, length, damping):
    """The angle after STEPS explicit Euler steps of a damped pendulum (k = 4 inputs)."""
    dt, g = 0.02, 9.81
    for _ in range(STEPS):
        acceleration = -(g / length) * fa.sin(theta) - damping * omega
        theta, omega = theta + dt * omega, omega + dt * acceleration
    return theta


LOW, HIGH = np.array([0.1, -0.5, 0.5, 0.0]), np.array([1.0, 0.5, 2.0, 0.3])


def random_points(n, seed=0):
    return np.random.default_rng(seed).uniform(LOW, HIGH, (n, 4))


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=WORKERS,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            timeout=TIMEOUT,
        ) as cluster,
        Client(cluster, timeout=TIMEOUT) as client,
    ):
        client.wait_for_workers(WORKERS, timeout=TIMEOUT)
        yield client


@pytest.fixture(scope="module")
def function():
    f = fa.compile(pendulum, example=random_points(1)[0], backend="codegen")
    f.value_and_grad(random_points(8192, seed=1), threads=1)  # compile, warm
    return f


def on_cluster(n, chunk, seed):
    """Points drawn on the workers and kept there, and a local copy for the reference.

    Drawn there, not sent from here: a NumPy array of 2 x 10^6 points in the
    graph would be 61 MiB of graph (distributed warns), not what timing is for.
    """
    # Scaled here: uniform(LOW, HIGH, ...) would put LOW and HIGH in the graph
    # broadcast to (n, 4).
    unit = da.random.default_rng(seed).random((n, 4), chunks=(chunk, 4))
    X = (LOW + (HIGH - LOW) * unit).persist()
    wait(X, timeout=TIMEOUT)
    return X, X.compute()


def cluster_value_and_grad(f, X):
    """The user's call: the lazy arrays, then both computed together."""
    return dask.compute(*fastad.dask.value_and_grad(f, X))


def best_time(call, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def check_and_warm(client, f, X, points):
    """One cluster run (it warms the workers) checked bit for bit against the local call."""
    with dask.config.set(scheduler=client):
        values, gradients = cluster_value_and_grad(f, X)
    local_values, local_gradients = f.value_and_grad(points, threads=1)
    np.testing.assert_array_equal(values, local_values)
    np.testing.assert_array_equal(gradients, local_gradients)


@pytest.mark.benchmark(group="dask")
def test_dask_value_and_grad(benchmark, client, function):
    X, points = on_cluster(N_POINTS, CHUNK, seed=0)
    check_and_warm(client, function, X, points)
    reference = best_time(lambda: function.value_and_grad(points, threads=1), REFERENCE_ROUNDS)
    with dask.config.set(scheduler=client):
        benchmark(cluster_value_and_grad, function, X)
    benchmark.extra_info.update(
        points=N_POINTS,
        chunks=X.numblocks[0],
        workers=WORKERS,
        nodes=len(function.tape),
        backend=function.tier("grad").name,
        reference_ns_per_point=reference / N_POINTS * 1e9,
    )
    if benchmark.stats is not None:
        seconds = benchmark.stats.stats.min
        benchmark.extra_info["ns_per_point"] = seconds / N_POINTS * 1e9
        benchmark.extra_info["speedup"] = reference / seconds


@pytest.mark.benchmark(group="dask")
def test_dask_overhead_per_chunk(benchmark, client, function):
    X, points = on_cluster(TINY_CHUNK * TINY_CHUNKS, TINY_CHUNK, seed=2)
    check_and_warm(client, function, X, points)

    def kernels_alone():
        for start in range(0, points.shape[0], TINY_CHUNK):
            function.value_and_grad(points[start : start + TINY_CHUNK], threads=1)

    kernels = best_time(kernels_alone, 3)
    with dask.config.set(scheduler=client):
        benchmark(cluster_value_and_grad, function, X)
    benchmark.extra_info.update(
        chunks=TINY_CHUNKS, points_per_chunk=TINY_CHUNK, kernels_ms=kernels * 1e3
    )
    if benchmark.stats is not None:
        seconds = benchmark.stats.stats.min
        overhead = (seconds - kernels / WORKERS) / TINY_CHUNKS
        benchmark.extra_info["ms_per_chunk"] = seconds / TINY_CHUNKS * 1e3
        benchmark.extra_info["overhead_ms_per_chunk"] = overhead * 1e3
