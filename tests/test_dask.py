"""fastad.dask on a real two-process cluster: results bit for bit, one task and build, errors.

Every computation runs on ``distributed.LocalCluster(n_workers=2,
threads_per_worker=1, processes=True)`` (one cluster for the module), so
the function really travels as bytes to other processes and errors really
come back through Dask's pickling. The reference is always the same
compiled function called locally on the computed NumPy points.
"""

import os
import pickle
import signal
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import fastad as fa
import fastad.dask as fd

TIMEOUT = 60  # seconds for any one computation: a hang fails instead of stalling the run
N_POINTS = 1003  # not a multiple of the chunk sizes below: the last chunk is short


@pytest.fixture(scope="module")
def client():
    # The scheduler serves HTTP even without a dashboard: on a free port, not 8787.
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # any free port: two runs on one machine do not clash
            timeout=TIMEOUT,
        ) as cluster,
        Client(cluster, timeout=TIMEOUT) as client,
    ):
        client.wait_for_workers(2, timeout=TIMEOUT)
        yield client


def compute(client, *arrays):
    """Compute ``arrays`` together on the cluster, within TIMEOUT."""
    futures = client.compute(list(arrays))
    return [future.result(timeout=TIMEOUT) for future in futures]


def total_stats(client):
    """``fd.worker_stats()`` summed over the cluster's workers, and per worker."""
    per_worker = client.run(fd.worker_stats)
    return {key: sum(s[key] for s in per_worker.values()) for key in ("functions_built", "chunks")}


def neuron(w1, x1, w2, x2, b):
    return fa.sigmoid(w1 * x1 + w2 * x2 + b) * fa.tanh(x1 - x2)


def two_outputs(x, y, z):
    return x * fa.sin(y) + z, fa.exp(0.1 * z) * y


@pytest.fixture(scope="module")
def scalar_function():
    return fa.compile(neuron, example=[0.5, 1.2, -0.3, 0.8, 0.1], backend="interpret")


@pytest.fixture(scope="module")
def vector_function():
    return fa.compile(two_outputs, example=[0.5, 1.2, -0.3], backend="interpret")


def points(k, seed=0, n=N_POINTS):
    return np.random.default_rng(seed).uniform(-2.0, 2.0, size=(n, k))


def assert_same(actual, expected):
    assert actual.dtype == np.float64 and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)  # bit for bit: no tolerance


# -- equal to the local result, bit for bit ---------------------------------------------
@pytest.mark.parametrize("chunk", [97, 250, N_POINTS], ids=lambda c: f"chunk={c}")
def test_value_and_grad_equals_local(client, scalar_function, chunk):
    P = points(5)
    X = da.from_array(P, chunks=(chunk, 5))
    values, gradients = compute(client, *fd.value_and_grad(scalar_function, X))
    expected_values, expected_gradients = scalar_function.value_and_grad(P)
    assert_same(values, expected_values)
    assert_same(gradients, expected_gradients)


def test_value_and_grad_each_equal_local(client, scalar_function, vector_function):
    P, Q = points(5, seed=1), points(3, seed=2)
    X, Y = da.from_array(P, chunks=(128, 5)), da.from_array(Q, chunks=(300, 3))
    scalar_values, gradients, vector_values = compute(
        client,
        fd.value(scalar_function, X),
        fd.grad(scalar_function, X),
        fd.value(vector_function, Y),
    )
    assert_same(scalar_values, scalar_function(P))
    assert_same(gradients, scalar_function.grad(P))
    assert_same(vector_values, vector_function(Q))


@pytest.mark.parametrize("which", ["scalar", "vector"])
def test_jvp_and_vjp_equal_local(client, scalar_function, vector_function, which):
    f = scalar_function if which == "scalar" else vector_function
    k, m = f.num_inputs, f.num_outputs
    P = points(k, seed=3)
    tangents = points(k, seed=4)
    cotangents = points(m, seed=5) if which == "vector" else points(1, seed=5)[:, 0]
    X = da.from_array(P, chunks=(200, k))
    V = da.from_array(tangents, chunks=(200, k))
    # Other chunks than X's: rechunked to X's, and the results follow X.
    U = da.from_array(cotangents, chunks=(333,) + cotangents.shape[1:])
    jvp_values, pushed = fd.jvp(f, X, V)
    vjp_values, pulled = fd.vjp(f, X, U)
    assert pushed.chunks[0] == pulled.chunks[0] == X.chunks[0]
    jvp_values, pushed, vjp_values, pulled = compute(client, jvp_values, pushed, vjp_values, pulled)
    expected_values, expected_pushed = f.jvp(P, tangents)
    assert_same(jvp_values, expected_values)
    assert_same(pushed, expected_pushed)
    expected_values, expected_pulled = f.vjp(P, cotangents)
    assert_same(vjp_values, expected_values)
    assert_same(pulled, expected_pulled)


def test_integer_points_are_converted_like_local_calls(client, scalar_function):
    P = np.arange(5 * 40).reshape(40, 5) % 7 - 3
    X = da.from_array(P, chunks=(16, 5))
    (values,) = compute(client, fd.value(scalar_function, X))
    assert_same(values, scalar_function(P))


def test_more_threads_per_task_give_the_same_bits(client, scalar_function):
    # 5,000-point chunks: above the size where a kernel call uses Numba's threads.
    P = points(5, seed=6, n=12_000)
    X = da.from_array(P, chunks=(5_000, 5))
    values, gradients = compute(client, *fd.value_and_grad(scalar_function, X, threads=2))
    expected_values, expected_gradients = scalar_function.value_and_grad(P, threads=1)
    assert_same(values, expected_values)
    assert_same(gradients, expected_gradients)


# -- the arrays before compute --------------------------------------------------------------
def test_results_have_chunks_dtype_and_meta_before_compute(scalar_function, vector_function):
    X = da.from_array(points(5), chunks=(97, 5))
    Y = da.from_array(points(3), chunks=(97, 3))
    rows = X.chunks[0]
    values, gradients = fd.value_and_grad(scalar_function, X)
    vector_values, pushed = fd.jvp(vector_function, Y, da.ones_like(Y))
    expected = [
        (values, (rows,)),
        (gradients, (rows, (5,))),
        (fd.value(scalar_function, X), (rows,)),
        (fd.grad(scalar_function, X), (rows, (5,))),
        (vector_values, (rows, (2,))),
        (pushed, (rows, (2,))),
        (fd.vjp(vector_function, Y, da.ones((N_POINTS, 2), chunks=(97, 2)))[1], (rows, (3,))),
    ]
    for array, chunks in expected:
        assert array.chunks == chunks
        assert array.dtype == np.float64
        assert type(array._meta) is np.ndarray
        assert array._meta.dtype == np.float64 and array._meta.ndim == len(chunks)


def test_no_trial_calls_and_one_task_per_chunk(monkeypatch, scalar_function, vector_function):
    # Record every call of the chunk task in this process: building the graphs
    # must make none (no meta inference on empty arrays), and computing
    # values and gradients together one per chunk, none of them empty.
    calls = []
    evaluate = fd._evaluate_chunk

    def recording(points, *rest, block_info=None, **options):
        calls.append((points.shape, options["kind"], options["threads"]))
        return evaluate(points, *rest, block_info=block_info, **options)

    monkeypatch.setattr(fd, "_evaluate_chunk", recording)
    X = da.from_array(points(5), chunks=(97, 5))
    Y = da.from_array(points(3), chunks=(97, 3))
    arrays = [
        *fd.value_and_grad(scalar_function, X),
        fd.value(scalar_function, X),
        fd.grad(scalar_function, X, threads=2),
        *fd.jvp(vector_function, Y, Y),
        *fd.vjp(vector_function, Y, da.ones((N_POINTS, 2), chunks=97)),
    ]
    assert calls == []
    dask.compute(*arrays[:2], scheduler="sync")
    assert len(calls) == X.numblocks[0]
    dask.compute(*arrays, scheduler="sync")
    assert sorted({kind for _, kind, _ in calls}) == [
        "grad",
        "jvp",
        "value",
        "value_and_grad",
        "vjp",
    ]
    assert len(calls) == 6 * X.numblocks[0]  # value_and_grad twice, then one pass per call
    assert all(shape[0] > 0 for shape, _, _ in calls)
    assert {threads for _, kind, threads in calls if kind != "grad"} == {1}  # the default
    assert {threads for _, kind, threads in calls if kind == "grad"} == {2}


def test_values_and_gradients_run_each_chunk_once_on_the_cluster(client, scalar_function):
    X = da.from_array(points(5, seed=7), chunks=(50, 5))
    values, gradients = fd.value_and_grad(scalar_function, X)
    before = total_stats(client)["chunks"]
    with dask.config.set(scheduler=client):
        dask.compute(values, gradients)
    assert total_stats(client)["chunks"] - before == X.numblocks[0]


def test_the_function_is_in_the_graph_once(scalar_function):
    X = da.from_array(points(5), chunks=(20, 5))
    values, gradients = fd.value_and_grad(scalar_function, X)
    graph = {**dict(values.__dask_graph__()), **dict(gradients.__dask_graph__())}
    payload = pickle.dumps(scalar_function, protocol=pickle.HIGHEST_PROTOCOL)
    holding = [key for key, task in graph.items() if payload in pickle.dumps(task)]
    assert len(holding) == 1 and holding[0].startswith("fastad-function-")
    kernels = [key for key in graph if isinstance(key, tuple) and key[0].startswith("fastad-")]
    assert len(kernels) == X.numblocks[0]
    assert all(holding[0] in graph[key].dependencies for key in kernels)


def test_each_worker_builds_the_function_once(client):
    # A constant no other test uses: a program no worker has built yet.
    f = fa.compile(lambda x, y: x * y + 0.3183098861837907, example=[1.0, 2.0])
    X = da.from_array(points(2, seed=8, n=4000), chunks=(50, 2))
    before = client.run(fd.worker_stats)
    for _ in range(2):  # the second computation builds nothing
        compute(client, *fd.value_and_grad(f, X))
    after = client.run(fd.worker_stats)
    chunks = {worker: after[worker]["chunks"] - before[worker]["chunks"] for worker in after}
    builds = {
        worker: after[worker]["functions_built"] - before[worker]["functions_built"]
        for worker in after
    }
    assert sum(chunks.values()) == 2 * X.numblocks[0]
    assert builds == {worker: int(chunks[worker] > 0) for worker in after}


# -- errors name global points ---------------------------------------------------------------
def branching(x, y):
    if x > 0:
        return x * y
    return y


def test_branch_error_names_the_global_point(client):
    f = fa.compile(branching, example=[1.0, 2.0])
    P = np.abs(points(2, seed=9)) + 0.1
    bad = 2 * 100 + 37  # the third chunk of 100
    P[bad, 0] = -1.0
    P[bad + 5, 0] = -2.0
    X = da.from_array(P, chunks=(100, 2))
    with pytest.raises(fa.BranchError) as caught:
        compute(client, *fd.value_and_grad(f, X))
    error = caught.value
    np.testing.assert_array_equal(error.indices, [bad, bad + 5])
    assert error.total == N_POINTS
    assert error.guard == "x > 0.0" and error.traced is True
    assert f"at point {bad} [-1.0, " in str(error)
    # Both bad points lie in one chunk: the error is the one a local call raises.
    with pytest.raises(fa.BranchError) as local:
        f.value_and_grad(P)
    assert str(error) == str(local.value)


def test_non_finite_error_names_the_global_point(client):
    f = fa.compile(lambda x, y: fa.log(x) * y, example=[1.0, 2.0])
    P = np.abs(points(2, seed=10)) + 0.1
    bad = 3 * 100 + 11
    P[bad, 0] = -1.0  # log(-1) = nan from finite inputs
    X = da.from_array(P, chunks=(100, 2))
    (values,) = compute(client, fd.value(f, X))  # unchecked: nan, like a local call
    assert np.isnan(values[bad]) and np.isfinite(np.delete(values, bad)).all()
    with pytest.raises(fa.NonFiniteError) as caught:
        compute(client, *fd.value_and_grad(f, X, check=True))
    assert caught.value.point == bad and caught.value.total == N_POINTS
    assert f"point {bad} " in str(caught.value)
    with pytest.raises(fa.NonFiniteError) as local:
        f.value_and_grad(P, check=True)
    assert str(caught.value) == str(local.value)


# -- bad input -----------------------------------------------------------------------------------
def test_bad_functions_are_refused(scalar_function, vector_function):
    X = da.zeros((10, 2), chunks=5)
    with pytest.raises(TypeError, match="needs a fastad.CompiledFunction.*got function"):
        fd.value(lambda x, y: x * y, X)
    with pytest.raises(ValueError, match="has not been traced yet.*pass example="):
        fd.value_and_grad(fa.compile(lambda x, y: x * y), X)
    Y = da.zeros((10, 3), chunks=5)
    with pytest.raises(ValueError, match="needs a scalar output.*2 outputs"):
        fd.value_and_grad(vector_function, Y)
    with pytest.raises(ValueError, match="needs a scalar output"):
        fd.grad(vector_function, Y)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: np.zeros((10, 5)), TypeError, r"X must be a dask array of shape \(N, 5\)"),
        (lambda: da.zeros((10,), chunks=5), ValueError, r"X has shape \(10,\)"),
        (lambda: da.zeros((10, 4), chunks=5), ValueError, r"X has shape \(10, 4\).*\(N, 5\)"),
        (lambda: da.zeros((2, 10, 5), chunks=5), ValueError, r"X has shape \(2, 10, 5\)"),
        (lambda: da.zeros((10, 5), dtype=complex, chunks=5), TypeError, "dtype complex128"),
        (
            lambda: da.zeros((10, 5), chunks=(5, 2)),
            ValueError,
            r"chunked along axis 1 \(chunks \(2, 2, 1\)\).*X\.rechunk\(\{1: -1\}\)",
        ),
        (
            lambda: (lambda a: a[a[:, 0] > 0])(da.ones((10, 5), chunks=(5, 5))),
            ValueError,
            r"chunks of unknown size.*X\.compute_chunk_sizes\(\)",
        ),
    ],
    ids=["numpy", "1-d", "wrong-k", "3-d", "complex", "axis-1-chunks", "unknown-chunks"],
)
def test_bad_points_are_refused(scalar_function, make, error, message):
    with pytest.raises(error, match=message):
        fd.value_and_grad(scalar_function, make())


def test_bad_directions_and_options_are_refused(scalar_function, vector_function):
    X = da.zeros((10, 5), chunks=5)
    Y = da.zeros((10, 3), chunks=5)
    with pytest.raises(
        ValueError, match=r"V \(the tangents\) has shape \(10, 4\); expected \(10, 5\)"
    ):
        fd.jvp(scalar_function, X, da.zeros((10, 4), chunks=5))
    with pytest.raises(TypeError, match=r"V \(the tangents\) must be a dask array"):
        fd.jvp(scalar_function, X, np.zeros((10, 5)))
    with pytest.raises(
        ValueError, match=r"U \(the cotangents\) has shape \(10, 1\); expected \(10,\)"
    ):
        fd.vjp(scalar_function, X, da.zeros((10, 1), chunks=5))
    with pytest.raises(ValueError, match=r"has shape \(10,\); expected \(10, 2\)"):
        fd.vjp(vector_function, Y, da.zeros((10,), chunks=5))
    with pytest.raises(TypeError, match="must hold real numbers, got dtype <U1"):
        fd.jvp(vector_function, Y, da.from_array(np.full((10, 3), "a"), chunks=5))
    for threads in (0, -1, 1.5, True):
        with pytest.raises(
            ValueError, match=f"threads must be a positive int or None, got {threads}"
        ):
            fd.value(scalar_function, X, threads=threads)
    with pytest.raises(TypeError, match="check must be True or False"):
        fd.value(scalar_function, X, check="yes")


# -- a worker killed mid-computation ------------------------------------------------------------
def slow(a, b):
    # 60 steps of a small nonlinear map: 424 nodes, so a chunk of 4,000 points
    # takes about 25 ms on the interpreter (2-core machine): the 80 chunks last
    # long enough to kill a worker during them.
    for _ in range(60):
        a, b = a + 0.01 * fa.sin(b), b - 0.01 * fa.tanh(a) * b
    return a * b


def test_a_killed_worker_is_replaced_and_the_result_is_complete(client):
    f = fa.compile(slow, example=[0.5, 0.5], backend="interpret")
    P = points(2, seed=11, n=320_000)
    X = da.from_array(P, chunks=(4_000, 2))
    expected_values, expected_gradients = f.value_and_grad(P)
    pids = client.run(os.getpid)
    before = client.run(fd.worker_stats)

    def chunks_done():
        return min(
            s["chunks"] - before[w]["chunks"] for w, s in client.run(fd.worker_stats).items()
        )

    futures = client.compute(list(fd.value_and_grad(f, X)))
    # Kill a worker once both have evaluated a chunk or two (of 40 each), so some
    # of its finished work and its running task are lost.
    deadline = time.monotonic() + TIMEOUT
    while chunks_done() < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not any(future.done() for future in futures), "too fast to kill a worker during it"
    os.kill(next(iter(pids.values())), signal.SIGKILL)
    values, gradients = [future.result(timeout=TIMEOUT) for future in futures]
    assert_same(values, expected_values)
    assert_same(gradients, expected_gradients)
    client.wait_for_workers(2, timeout=TIMEOUT)  # the nanny restarted it
    assert set(client.run(os.getpid).values()) != set(pids.values())


def test_the_cluster_still_computes_after_the_kill(client, scalar_function):
    P = points(5, seed=12)
    values = compute(client, fd.value(scalar_function, da.from_array(P, chunks=100)))[0]
    assert_same(values, scalar_function(P))
