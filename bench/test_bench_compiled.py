"""Compiled-function benchmarks on the articles' example 2.

Run with ``python -m pytest bench`` (the default ``pytest`` run only
collects ``tests/``). Two groups:

- ``batch``: ``value_and_grad`` of ``fa.compile(example_2)`` at 10^3 to
  10^6 points with ``threads=1`` and ``threads=2``, for both replay tiers
  (``backend="codegen"`` and ``"interpret"``), beside the hand-written
  NumPy value and gradient (``example2.py``) on the ``(N, 6)`` points and
  on column-contiguous ``(6, N)`` arrays (the fastest NumPy layout), and
  the limit: a hand-written straight-line ``@njit`` loop of the function;
- ``batch`` also times ``fast_math=True`` (one thread): the same generated
  code on vectors of points with glibc's vector ``exp``, and the same with
  ``out=`` (results into preallocated arrays) beside column NumPy writing
  into preallocated arrays;
- ``latency``: one call at one point (a float64 array of shape ``(6,)``),
  ``value_and_grad`` and plain ``__call__``, for both tiers.

Batch benchmarks store ``ns_per_point`` (best round) in ``extra_info``,
latency benchmarks ``us_per_call``. Every benchmark checks its result once
(fastad against NumPy; two threads bitwise against one), so a broken path
fails instead of producing a fast wrong number. ``bench/report.py``
prints the same figures side by side with the performance targets.
"""

import os

import numba
import numpy as np
import pytest
from example2 import (
    NUM_INPUTS,
    example_2,
    limit_value_and_grad,
    numpy_columns_value_and_grad,
    numpy_value_and_grad,
    random_points,
)

import fastad as fa

# FASTAD_BENCH_QUICK=1 (bench/report.py's default) keeps the size the target names.
BATCH_SIZES = (
    (10**6,) if os.environ.get("FASTAD_BENCH_QUICK") == "1" else (10**3, 10**4, 10**5, 10**6)
)
SEED = 0
# The one-point example (fastad/demo/models.py).
ONE_POINT = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
# fastad and NumPy round differently (fastad's sigmoid is e/(1 + e) for
# z < 0; the products are grouped differently), and d = s - y cancels where
# s is close to y, so the elementwise relative difference reaches 1e-10 on
# a few of 10^6 points (measured 9.3e-11) while the absolute difference stays
# at rounding level: at most 5.7e-16 of each column's largest magnitude.
# Hence a relative tolerance plus an absolute one scaled to the column.
RTOL = 1e-12


@pytest.fixture(scope="module", params=["codegen", "interpret"], ids=lambda b: f"backend={b}")
def compiled(request):
    """``fa.compile(example_2, backend=...)``, traced, every path the benchmarks use warmed.

    Warming compiles (or loads from Numba's cache) the serial, parallel and
    one-point kernels, and creates the per-thread work spaces, so no round
    pays for either. ``backend="auto"`` is one of these two once warm: the
    rows name the tier they time.
    """
    function = fa.compile(example_2, example=ONE_POINT, backend=request.param)
    warm = random_points(8192, seed=SEED + 1)
    for threads in (1, 2):
        function.value_and_grad(warm, threads=threads)
    function.value_and_grad(ONE_POINT)
    function(ONE_POINT)
    return function


@pytest.fixture(scope="module", params=BATCH_SIZES, ids=lambda n: f"N={n:.0e}")
def points(request):
    return random_points(request.param, seed=SEED)


@pytest.fixture(scope="module")
def numpy_reference(points):
    return numpy_value_and_grad(points)


def assert_matches(actual, expected):
    for got, want in zip(actual, expected, strict=True):
        got, want = got.reshape(want.shape[0], -1), want.reshape(want.shape[0], -1)
        for column in range(want.shape[1]):
            scale = np.abs(want[:, column]).max()
            np.testing.assert_allclose(
                got[:, column], want[:, column], rtol=RTOL, atol=RTOL * scale
            )


def store_per_point(benchmark, n_points):
    benchmark.extra_info["points"] = n_points
    # With --benchmark-disable the function runs once untimed and stats is None.
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_point"] = benchmark.stats.stats.min / n_points * 1e9


def store_per_call(benchmark):
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_call"] = benchmark.stats.stats.min * 1e6


@pytest.mark.benchmark(group="batch")
def test_batch_numpy(benchmark, points):
    result = benchmark(numpy_value_and_grad, points)
    store_per_point(benchmark, points.shape[0])
    assert result[1].shape == points.shape


@pytest.mark.benchmark(group="batch")
def test_batch_numpy_columns(benchmark, points, numpy_reference):
    columns = np.ascontiguousarray(points.T)
    value, grad = benchmark(numpy_columns_value_and_grad, columns)
    store_per_point(benchmark, points.shape[0])
    assert_matches((value, grad.T), numpy_reference)


@pytest.mark.benchmark(group="batch")
def test_batch_limit(benchmark, points, numpy_reference):
    limit_value_and_grad(points[:10])  # compile outside the timing
    result = benchmark(limit_value_and_grad, points)
    store_per_point(benchmark, points.shape[0])
    assert_matches(result, numpy_reference)


# Batches under fastad.compiled.replay.PARALLEL_MIN_POINTS (4096) run on the
# calling thread whatever ``threads`` says, so at 10^3 points both rows time
# the serial path. ``threads`` is also capped at numba.get_num_threads().
@pytest.mark.benchmark(group="batch")
@pytest.mark.parametrize("threads", [1, 2], ids=lambda t: f"threads={t}")
def test_batch_fastad(benchmark, compiled, points, numpy_reference, threads):
    result = benchmark(compiled.value_and_grad, points, threads=threads)
    store_per_point(benchmark, points.shape[0])
    benchmark.extra_info["threads"] = min(threads, numba.get_num_threads())
    benchmark.extra_info["backend"] = compiled.tier("grad").name
    assert_matches(result, numpy_reference)
    if threads > 1:
        # Each point is evaluated by the same sequence of operations whatever
        # its block and thread, so the results must agree bit for bit.
        serial = compiled.value_and_grad(points, threads=1)
        for got, want in zip(result, serial, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def fast_math():
    """``fa.compile(example_2, backend="codegen", fast_math=True)``, traced and warm."""
    function = fa.compile(example_2, example=ONE_POINT, backend="codegen", fast_math=True)
    function.value_and_grad(random_points(8192, seed=SEED + 1), threads=1)
    return function


@pytest.mark.benchmark(group="batch")
def test_batch_fastad_fast_math(benchmark, fast_math, points, numpy_reference):
    """Generated code on vectors of points with libmvec's exp (one thread)."""
    result = benchmark(fast_math.value_and_grad, points, threads=1)
    store_per_point(benchmark, points.shape[0])
    benchmark.extra_info["threads"] = 1
    tier = fast_math.tier("grad")
    assert tier.name == "codegen" and "fast math" in tier.reason, tier.reason
    benchmark.extra_info["backend"] = "codegen, fast math"
    assert_matches(result, numpy_reference)


@pytest.mark.benchmark(group="batch")
def test_batch_fastad_fast_math_out(benchmark, fast_math, points, numpy_reference):
    """Fast math writing into the caller's arrays (``out=``): no page faults of new ones."""
    out = (np.empty(points.shape[0]), np.empty_like(points))
    result = benchmark(fast_math.value_and_grad, points, threads=1, out=out)
    store_per_point(benchmark, points.shape[0])
    assert result[0] is out[0] and result[1] is out[1]
    assert_matches(result, numpy_reference)


@pytest.mark.benchmark(group="batch")
def test_batch_numpy_columns_out(benchmark, points, numpy_reference):
    """Column NumPy writing into preallocated arrays: the counterpart of ``out=``."""
    columns = np.ascontiguousarray(points.T)
    out = (np.empty(points.shape[0]), np.empty_like(columns))
    value, grad = benchmark(numpy_columns_value_and_grad, columns, out)
    store_per_point(benchmark, points.shape[0])
    assert value is out[0] and grad is out[1]
    assert_matches((value, grad.T), numpy_reference)


@pytest.mark.benchmark(group="latency")
def test_latency_value_and_grad(benchmark, compiled):
    value, grad = benchmark(compiled.value_and_grad, ONE_POINT)
    store_per_call(benchmark)
    benchmark.extra_info["backend"] = compiled.tier("grad").name
    assert_matches((np.array([value]), grad.reshape(1, -1)), numpy_value_and_grad(ONE_POINT[None]))


@pytest.mark.benchmark(group="latency")
def test_latency_call(benchmark, compiled):
    value = benchmark(compiled, ONE_POINT)
    store_per_call(benchmark)
    benchmark.extra_info["backend"] = compiled.tier("values").name
    assert isinstance(value, float)
    assert_matches((np.array([value]),), numpy_value_and_grad(ONE_POINT[None])[:1])


# -- the benchmark's own ingredients --------------------------------------------


def test_numpy_reference_matches_central_differences():
    # An oracle independent of both fastad and the hand-derived formulas:
    # central differences of the value alone, coordinate by coordinate.
    points = random_points(50, seed=SEED + 2)
    _, grad = numpy_value_and_grad(points)
    step = 1e-6
    for i in range(NUM_INPUTS):
        shift = np.zeros(NUM_INPUTS)
        shift[i] = step
        above, _ = numpy_value_and_grad(points + shift)
        below, _ = numpy_value_and_grad(points - shift)
        np.testing.assert_allclose(grad[:, i], (above - below) / (2 * step), atol=1e-8)


def test_random_points_are_reproducible_and_bounded():
    first, second = random_points(1000, seed=3), random_points(1000, seed=3)
    np.testing.assert_array_equal(first, second)
    assert first.flags.c_contiguous and first.dtype == np.float64
    assert np.all(np.abs(first) <= 1.0) and np.all(first[:, -1] >= 0.0)
