"""Fast math against the default mode on random DAGs: compile time and time per point.

Usage: ``python bench/fast_math_curve.py [nodes ...] [pendulum]`` (default 100 400
1600 4000 10000 pendulum).

For each size and each mode, a fresh process with an empty cache compiles
``fa.compile(..., backend="codegen", fast_math=...)`` of the gradient of a
random DAG of sin, tanh and arithmetic (``bench/dag.py``, 10 inputs, its last
node the output), times the first call (the compile with it), then the best
of five calls at 10^4 points on one thread. ``pendulum``: the RK4 pendulum of
``bench/test_bench_codegen.py`` (200 steps) at 2 * 10^4 points instead.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import fastad as fa
    sys.path.insert(0, "bench")
    from dag import evaluate, random_dag

    fast = sys.argv[2] == "fast"
    if sys.argv[1] == "pendulum":
        from test_bench_codegen import pendulum, pendulum_points
        f = fa.compile(pendulum, num_inputs=4, backend="codegen", fast_math=fast)
        points = pendulum_points()[: 2 * 10**4]
    else:
        dag = random_dag(int(sys.argv[1]), n_inputs=10, seed=1)
        def function(*xs):
            return evaluate(dag, xs, fa.sin, fa.tanh)[-1]
        f = fa.compile(function, num_inputs=10, example=dag.input_values[:10],
                       backend="codegen", optimize=False, fast_math=fast)
        points = np.random.default_rng(0).uniform(-1.0, 1.0, (10**4, 10))
    started = time.perf_counter()
    f.value_and_grad(points[:10], threads=1)
    compiled = time.perf_counter() - started
    times = []
    for _ in range(5):
        started = time.perf_counter()
        f.value_and_grad(points, threads=1)
        times.append(time.perf_counter() - started)
    print(f"{compiled:.2f} {min(times) / len(points) * 1e9:.0f}")
    """
)


def main(sizes):
    print("| nodes | default mode | fast math | compile, default / fast |")
    print("|---:|---:|---:|---:|")
    for nodes in sizes:
        label = nodes if nodes == "pendulum" else f"{int(nodes):,}"
        found = {}
        for mode in ("plain", "fast"):
            with tempfile.TemporaryDirectory() as cache:
                result = subprocess.run(
                    [sys.executable, "-c", CHILD, nodes, mode],
                    env={**os.environ, "FASTAD_CACHE_DIR": cache},
                    capture_output=True,
                    text=True,
                    check=True,
                )
            found[mode] = result.stdout.split()
        (plain_s, plain_ns), (fast_s, fast_ns) = found["plain"], found["fast"]
        print(
            f"| {label} | {plain_ns} ns/pt | {fast_ns} ns/pt | {plain_s} s / {fast_s} s |",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["100", "400", "1600", "4000", "10000", "pendulum"])
