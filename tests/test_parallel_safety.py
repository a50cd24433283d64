"""Fork and thread safety of compiled calls, under each threading layer Numba can load.

Each case runs in a subprocess with a timeout: the failures it guards
against are a hang (a forked child of a GNU OpenMP process waits forever)
and an abort (two threads in Numba's workqueue layer kill the process),
neither of which a test could survive in-process.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")

PROGRAM = textwrap.dedent(
    """
    import multiprocessing, sys, threading
    import numba, numpy as np
    import fastad as fa
    from fastad.compiled import parallel

    backend, case, before = sys.argv[1], sys.argv[2], sys.argv[3]
    f = fa.compile(lambda x, y: (x * y + x) ** 2 + fa.sin(x) * y, backend=backend)
    points = np.random.default_rng(0).random((20_000, 2))
    if before == "batch":  # a batch on the thread pool, before any fork
        expected = f.value_and_grad(points)
    else:
        expected = f.value_and_grad(points, threads=1)  # starts the pool, runs no region
        if before == "user":  # the user's own parallel code ran a region

            @numba.njit(parallel=True)
            def total(a):
                t = 0.0
                for i in numba.prange(a.size):
                    t += a[i]
                return t

            assert total(np.ones(100_000)) == 100_000.0
    assert numba.get_num_threads() > 1 and parallel.layer() is not None, parallel.layer()

    def same_batch():
        value, gradient = f.value_and_grad(points)
        return np.array_equal(value, expected[0]) and np.array_equal(gradient, expected[1])

    def batch_in_worker(seed):
        return same_batch(), parallel.threads_allowed()

    if case == "fork":
        context = multiprocessing.get_context("fork")
        with context.Pool(2) as pool:
            results = pool.map(batch_in_worker, range(4))
        assert all(same for same, _ in results), results
        print(parallel.layer(), "threads in children:", sorted({t for _, t in results}))
    else:
        failures = []

        def calls():
            for _ in range(20):
                if not same_batch():
                    failures.append(1)

        threads = [threading.Thread(target=calls) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        print(parallel.layer(), "threads ok")
    """
)


def run_case(backend, case, layer, before="batch"):
    environment = {**os.environ, "NUMBA_NUM_THREADS": "2"}
    if layer is not None:
        environment["NUMBA_THREADING_LAYER"] = layer
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, backend, case, before],
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, layer, before",
    [
        ("interpret", None, "batch"),
        ("codegen", None, "batch"),
        ("interpret", "workqueue", "batch"),
        ("codegen", "workqueue", "batch"),
        # Regressions: Numba's pool started by a one-thread call, or
        # by the user's own parallel code, kills the children just the same.
        ("interpret", None, "pool started"),
        ("codegen", None, "user"),
    ],
)
def test_a_process_pool_forked_after_batch_calls_works(backend, layer, before):
    # Regression: under GNU OpenMP (Numba's default where libgomp loads) each
    # forked worker died in its first parallel region and Pool.map hung.
    result = run_case(backend, "fork", layer, before)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fork() called from a process already using GNU OpenMP" not in result.stderr
    layer_name, _, threads = result.stdout.strip().splitlines()[-1].partition(" ")
    if layer_name == "workqueue":  # fork-safe: the children keep their threads
        assert threads == "threads in children: [True]"
    elif layer_name == "omp":  # GNU OpenMP: the children run batches on one thread
        assert threads == "threads in children: [False]"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["interpret", "codegen"])
@pytest.mark.parametrize("layer", [None, "workqueue"])
def test_python_threads_calling_one_function_never_abort(backend, layer):
    # Regression: under the workqueue layer four threads calling batches
    # aborted the process ("Concurrent access has been detected").
    result = run_case(backend, "threads", layer)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("threads ok"), result.stdout
    if layer is not None:
        assert result.stdout.startswith(layer)
