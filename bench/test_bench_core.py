"""Core-engine benchmarks on a random scalar DAG of 10^5 nodes.

Run with ``python -m pytest bench`` (the default ``pytest`` run only
collects ``tests/``). Two groups:

- ``record``: eager recording plus one backward, fastad against the
  micrograd-style engine, on the same DAG through the same driver loop;
- ``replay``: the compiled forward+backward sweep of the recorded tape at a
  new point (``fastad.kernels.tape_sweeps.value_and_grad``).

Each benchmark stores ``ns_per_node`` (best round) in ``extra_info`` and
checks its gradient against the other engine once, so a broken engine fails
the benchmark instead of producing a fast wrong number. The small tests at
the end check the benchmark's own ingredients (the DAG and the baseline)
against central differences, an oracle independent of both engines.
"""

import gc

import numpy as np
import pytest
from dag import evaluate_floats, random_dag, record_fastad, record_micrograd
from micrograd_engine import Value

from fastad.kernels import tape_sweeps

N_NODES = 100_000
SEED = 0
# The two engines add the same terms in different orders (micrograd's DFS
# order versus decreasing ids), so gradients differ by rounding only;
# measured worst element ~1e-12 relative at 10^5 nodes.
GRADIENT_RTOL = 1e-9


@pytest.fixture(scope="module")
def dag():
    return random_dag(N_NODES, seed=SEED)


@pytest.fixture(scope="module")
def replay_point(dag):
    return np.random.default_rng(SEED + 1).uniform(-1.0, 1.0, dag.n_inputs)


# Both engines' timed functions include reading the input gradients into an
# array (100 attribute reads, well under 0.1% of a round).
def micrograd_value_and_grad(dag, point=None):
    root, inputs = record_micrograd(dag, point)
    root.backward()
    return root.data, np.array([x.grad for x in inputs])


def fastad_value_and_grad(dag, point=None):
    tape, root, inputs = record_fastad(dag, point)
    root.backward()
    return root.value, np.array([x.grad for x in inputs])


@pytest.fixture(scope="module")
def warm_jit():
    # Compile (or load from Numba's cache) every kernel the benchmarks call,
    # on a small DAG, so no round pays for compilation.
    small = random_dag(1000, n_inputs=10, seed=SEED)
    tape, root, _ = record_fastad(small)
    root.backward()
    tape_sweeps.value_and_grad(*replay_arguments(tape, root, small.input_values))


@pytest.fixture(scope="module")
def fastad_reference(dag, warm_jit):
    return fastad_value_and_grad(dag)


@pytest.fixture(scope="module")
def micrograd_reference(dag, replay_point):
    return {
        "recording": micrograd_value_and_grad(dag),
        "replay": micrograd_value_and_grad(dag, replay_point),
    }


def replay_arguments(tape, root, point):
    """Private copies of the tape arrays, in ``value_and_grad``'s order."""
    return (
        tape.opcode.copy(),
        tape.in0.copy(),
        tape.in1.copy(),
        tape.val.copy(),
        np.zeros(len(tape)),
        tape.inputs,
        np.array(point, dtype=np.float64),
        root.id,
    )


def assert_same_gradient(actual, expected):
    expected_value, expected_grad = expected
    actual_value, actual_grad = actual
    assert actual_value == pytest.approx(expected_value, rel=GRADIENT_RTOL)
    np.testing.assert_allclose(actual_grad, expected_grad, rtol=GRADIENT_RTOL)


def store_ns_per_node(benchmark, n_nodes):
    benchmark.extra_info["nodes"] = n_nodes
    # With --benchmark-disable the function runs once untimed and stats is None.
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_node"] = benchmark.stats.stats.min / n_nodes * 1e9


def collect_garbage():
    # Between rounds only: the previous round's graph is freed here, outside
    # the timing. Collections triggered while recording stay in the timing,
    # since every user of the engine pays them too.
    gc.collect()


@pytest.mark.benchmark(group="record")
def test_record_backward_fastad(benchmark, dag, warm_jit, micrograd_reference):
    result = benchmark.pedantic(fastad_value_and_grad, args=(dag,), setup=collect_garbage, rounds=5)
    store_ns_per_node(benchmark, dag.n_nodes)
    assert_same_gradient(result, micrograd_reference["recording"])


@pytest.mark.benchmark(group="record")
def test_record_backward_micrograd(benchmark, dag, fastad_reference):
    result = benchmark.pedantic(
        micrograd_value_and_grad, args=(dag,), setup=collect_garbage, rounds=5
    )
    store_ns_per_node(benchmark, dag.n_nodes)
    assert_same_gradient(result, fastad_reference)


@pytest.mark.benchmark(group="replay")
def test_replay_fastad(benchmark, dag, replay_point, warm_jit, micrograd_reference):
    tape, root, _ = record_fastad(dag)
    # Recording in id order without constants gives tape ids equal to DAG ids.
    np.testing.assert_array_equal(tape.in0, dag.in0)
    np.testing.assert_array_equal(tape.in1, dag.in1)
    arguments = replay_arguments(tape, root, replay_point)
    # Numba compiles per argument type, not size, so warm_jit already compiled
    # this call; one untimed call here also brings the arrays into cache.
    tape_sweeps.value_and_grad(*arguments)
    value = benchmark(tape_sweeps.value_and_grad, *arguments)
    store_ns_per_node(benchmark, len(tape))
    grad, inputs = arguments[4], arguments[5]
    assert_same_gradient((value, grad[inputs]), micrograd_reference["replay"])


# -- the benchmark's own ingredients --------------------------------------------


def test_dag_shape_and_bounded_values(dag):
    assert dag.n_nodes == N_NODES
    # Every node reaches the root, so every engine's backward visits all of it.
    uses = np.bincount(np.concatenate([dag.in0[dag.in0 >= 0], dag.in1[dag.in1 >= 0]]))
    assert uses.size == dag.n_nodes - 1 and np.all(uses >= 1)
    assert np.all(dag.in0[dag.n_inputs :] < np.arange(dag.n_inputs, dag.n_nodes))
    assert np.all(dag.in1[dag.n_inputs :] < np.arange(dag.n_inputs, dag.n_nodes))
    rng = np.random.default_rng(SEED + 2)
    for point in [dag.input_values, *rng.uniform(-1.0, 1.0, (3, dag.n_inputs))]:
        assert np.max(np.abs(evaluate_floats(dag, point))) < 100.0


def test_random_dag_is_reproducible():
    first, second = random_dag(2000, n_inputs=20, seed=7), random_dag(2000, n_inputs=20, seed=7)
    for name in ("op", "in0", "in1", "input_values"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


@pytest.mark.parametrize("engine", [micrograd_value_and_grad, fastad_value_and_grad])
def test_engine_matches_central_differences(engine, warm_jit):
    # Random-direction check (as HIPS autograd's test_util): the gradient's
    # projection on v against (f(x + h v) - f(x - h v)) / 2h on floats.
    small = random_dag(3000, n_inputs=30, seed=SEED + 3)
    x = small.input_values
    direction = np.random.default_rng(SEED + 4).standard_normal(small.n_inputs)
    step = 1e-6
    above = evaluate_floats(small, x + step * direction)[-1]
    below = evaluate_floats(small, x - step * direction)[-1]
    value, grad = engine(small)
    assert value == evaluate_floats(small)[-1]
    assert grad @ direction == pytest.approx((above - below) / (2 * step), rel=1e-6)


def test_micrograd_engine_accumulates_over_fan_out():
    # The article's d * d case: the same node used twice gets 2d.
    d = Value(3.0)
    (d * d).backward()
    assert d.grad == 6.0
