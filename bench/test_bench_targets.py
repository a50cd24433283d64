"""Benchmarks for the performance targets the other files do not cover, and CasADi peers.

- ``replay``: ``fa.compile`` of the random DAG (10^4 to 10^6 nodes; 10^5 in a
  quick run), one point, value and gradient, beside CasADi's SX virtual
  machine on the same graph when CasADi is installed;
- ``batch`` / ``latency`` peers: CasADi on example 2;
- ``memory``: bytes per scalar node of a finished (trimmed) tape;
- ``startup``: a fresh Python process importing fastad and making its first
  compiled call, with Numba's cache warm.

CasADi cases skip, saying why, when the optional extra ``bench`` is absent.
"""

import os
import subprocess
import sys

import numpy as np
import peers
import pytest
from dag import evaluate, random_dag
from example2 import example_2, numpy_value_and_grad, random_points

import fastad as fa

QUICK = os.environ.get("FASTAD_BENCH_QUICK") == "1"
REPLAY_NODES = (10**5,) if QUICK else (10**4, 10**5, 10**6)
needs_casadi = pytest.mark.skipif(peers.ca is None, reason=peers.MISSING)
ONE_POINT = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])


def _per(benchmark, key, count, scale):
    if benchmark.stats is not None:
        benchmark.extra_info[key] = benchmark.stats.stats.min / count * scale


@pytest.fixture(scope="module", params=REPLAY_NODES, ids=lambda n: f"nodes={n:.0e}")
def dag(request):
    return random_dag(request.param, seed=0)


@pytest.fixture(scope="module")
def compiled_dag(dag):
    function = fa.compile(
        lambda *xs: evaluate(dag, xs, fa.sin, fa.tanh)[-1],
        num_inputs=dag.n_inputs,
        example=dag.input_values,
    )
    function.value_and_grad(dag.input_values)  # warm
    return function


@pytest.mark.benchmark(group="replay")
def test_replay_compiled(benchmark, dag, compiled_dag):
    point = np.cos(np.arange(dag.n_inputs, dtype=float))  # a new point in [-1, 1]
    value, gradient = benchmark(compiled_dag.value_and_grad, point)
    reference = peers.call(peers.dag_function(dag), point) if peers.ca is not None else None
    if reference is not None:
        assert value == pytest.approx(reference[0], rel=1e-12)
        np.testing.assert_allclose(gradient, reference[1], rtol=1e-9, atol=1e-12)
    benchmark.extra_info.update(engine="fastad", nodes=dag.n_nodes)
    _per(benchmark, "ns_per_node", dag.n_nodes, 1e9)


@needs_casadi
@pytest.mark.benchmark(group="replay")
def test_replay_casadi(benchmark, dag):
    function = peers.dag_function(dag)
    point = np.cos(np.arange(dag.n_inputs, dtype=float))
    peers.call(function, point)
    benchmark(peers.call, function, point)
    benchmark.extra_info.update(engine="casadi", nodes=dag.n_nodes)
    _per(benchmark, "ns_per_node", dag.n_nodes, 1e9)


@needs_casadi
@pytest.mark.benchmark(group="latency")
def test_latency_casadi(benchmark):
    function = peers.example_2_function()
    value, gradient = benchmark(peers.call, function, ONE_POINT)
    fastad_value, fastad_gradient = fa.compile(example_2).value_and_grad(ONE_POINT)
    assert value == pytest.approx(fastad_value, rel=1e-14)
    benchmark.extra_info["engine"] = "casadi"
    _per(benchmark, "us_per_call", 1, 1e6)


@needs_casadi
@pytest.mark.benchmark(group="batch")
def test_batch_casadi(benchmark):
    points = random_points(10**5, seed=0)
    function = peers.example_2_function().map(points.shape[0])  # built once, not timed
    values, _ = benchmark(peers.batch_mapped, function, points)
    np.testing.assert_allclose(values, numpy_value_and_grad(points)[0], rtol=1e-12, atol=1e-15)
    benchmark.extra_info.update(engine="casadi", points=points.shape[0])
    _per(benchmark, "ns_per_point", points.shape[0], 1e9)


@pytest.mark.benchmark(group="memory")
def test_memory_per_node(benchmark):
    dag = random_dag(10**5, seed=0)

    def record():
        with fa.Tape() as tape:
            evaluate(dag, [fa.var(v) for v in dag.input_values], fa.sin, fa.tanh)
        return tape.trim()

    tape = benchmark.pedantic(record, rounds=1, iterations=1)
    bytes_per_node = tape.nbytes / len(tape)
    benchmark.extra_info["bytes_per_node"] = bytes_per_node
    assert bytes_per_node == 25.0


STARTUP = """
import time
start = time.perf_counter()
import numpy as np
import fastad as fa
f = fa.compile(lambda w1, x1, w2, x2, b, y: (fa.sigmoid(w1 * x1 + w2 * x2 + b) - y) ** 2)
f.value_and_grad(np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0]))
print(time.perf_counter() - start)
"""


@pytest.mark.benchmark(group="startup")
def test_import_and_first_call(benchmark):
    def fresh_process():
        output = subprocess.run(
            [sys.executable, "-c", STARTUP], capture_output=True, text=True, check=True
        )
        return float(output.stdout.strip().splitlines()[-1])

    fresh_process()  # fills Numba's cache if it is cold
    timings = [fresh_process() for _ in range(3)]
    benchmark.pedantic(fresh_process, rounds=1, iterations=1)
    # The figure is measured inside the process (import to first result),
    # without the interpreter's own start-up.
    benchmark.extra_info["seconds_in_process"] = min(timings)
    assert min(timings) < 30, "startup far beyond any target: is Numba's cache written?"
