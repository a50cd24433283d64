"""Fast math against the default mode on random DAGs: compile time and time per point.

Usage: ``python bench/fast_math_curve.py [nodes ...]`` (default 100 400 1600 4000).

For each size and each mode, a fresh process with an empty cache compiles
``fa.compile(..., backend="codegen", fast_math=...)`` of the gradient of a
random DAG of sin, tanh and arithmetic (``bench/dag.py``, 10 inputs, its last
node the output), times the first call (the compile with it), then the best
of five calls at 10^4 points on one thread.
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

    nodes, fast = int(sys.argv[1]), sys.argv[2] == "fast"
    dag = random_dag(nodes, n_inputs=10, seed=1)
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
    print(f"{compiled:.2f} {min(times) / 1e4 * 1e9:.0f}")
    """
)


def main(sizes):
    print("| nodes | default mode | fast math | compile, default / fast |")
    print("|---:|---:|---:|---:|")
    for nodes in sizes:
        found = {}
        for mode in ("plain", "fast"):
            with tempfile.TemporaryDirectory() as cache:
                result = subprocess.run(
                    [sys.executable, "-c", CHILD, str(nodes), mode],
                    env={**os.environ, "FASTAD_CACHE_DIR": cache},
                    capture_output=True,
                    text=True,
                    check=True,
                )
            found[mode] = result.stdout.split()
        (plain_s, plain_ns), (fast_s, fast_ns) = found["plain"], found["fast"]
        print(
            f"| {nodes:,} | {plain_ns} ns/pt | {fast_ns} ns/pt | {plain_s} s / {fast_s} s |",
            flush=True,
        )


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [100, 400, 1600, 4000])
