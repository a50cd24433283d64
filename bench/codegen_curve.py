"""The compile-time curve of generated code: nodes and rows against seconds.

``python bench/codegen_curve.py [nodes ...]`` compiles the gradient
(``value_and_grad``) kernels of random DAGs (``dag.py``, 10 inputs, ops
add, sub, mul, sin, tanh) with ``backend="codegen"``, each in a fresh
process with an empty cache folder, and then loads them again in a second
fresh process from that cache. It prints, per size: nodes, rows of code
(nodes times passes), the cold compile, the cached load, and the
interpreter's and generated code's time per point at 10^4 points (one
thread), so the budget of ``backend="auto"`` (``fastad.compiled.module_cache.BUDGET_ROWS``)
and the README's table come from one measured run.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap

SIZES = (25, 100, 400, 1600, 3200, 10000, 30000)

CHILD = textwrap.dedent(
    """
    import json, sys, time
    started = time.perf_counter()
    import numpy as np
    import fastad as fa
    sys.path.insert(0, "bench")
    from dag import evaluate, random_dag

    nodes = int(sys.argv[1])
    dag = random_dag(nodes, n_inputs=10, seed=1)
    def function(*xs):
        return evaluate(dag, xs, fa.sin, fa.tanh)[-1]
    f = fa.compile(function, num_inputs=10, example=dag.input_values[:10],
                   backend="codegen", optimize=False)
    imported = time.perf_counter()
    points = np.random.default_rng(0).uniform(-1.0, 1.0, (10**4, 10))
    f.value_and_grad(points[:1], threads=1)
    compiled = time.perf_counter()
    slow = fa.compile(function, num_inputs=10, example=dag.input_values[:10],
                      backend="interpret", optimize=False)
    slow.value_and_grad(points, threads=1)
    def best(g):
        times = []
        for _ in range(5):
            start = time.perf_counter()
            g.value_and_grad(points, threads=1)
            times.append(time.perf_counter() - start)
        return min(times) / points.shape[0] * 1e9
    print(json.dumps({
        "nodes": len(f.tape), "rows": 2 * len(f.tape),  # grad: a forward and a reverse pass
        "first_call_s": compiled - imported, "interpret_ns": best(slow), "codegen_ns": best(f),
    }))
    """
)


def run_child(child, arguments, cache, **environment):
    """Run the script ``child`` in a fresh process with its own cache folder; its last
    line of output, read as JSON."""
    process = subprocess.run(
        [sys.executable, "-c", child, *map(str, arguments)],
        env={**os.environ, "FASTAD_CACHE_DIR": cache, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(process.stdout.splitlines()[-1])


def run(nodes, cache):
    return run_child(CHILD, [nodes], cache)


def main(argv):
    sizes = [int(a) for a in argv] or SIZES
    print("| nodes | rows | cold compile | cached load | interpreter | generated |")
    print("|---:|---:|---:|---:|---:|---:|")
    for nodes in sizes:
        with tempfile.TemporaryDirectory() as cache:
            cold = run(nodes, cache)
            warm = run(nodes, cache)
        print(
            f"| {cold['nodes']} | {cold['rows']} | {cold['first_call_s']:.1f} s "
            f"| {warm['first_call_s']:.2f} s | {warm['interpret_ns']:.0f} ns/pt "
            f"| {warm['codegen_ns']:.0f} ns/pt |",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
