"""The compile-time curve of generated code for functions of arrays.

``python bench/blockcode_curve.py [layers ...]`` compiles the gradient kernel
(``value_and_grad``, ``backend="codegen"``) of an MLP with that many hidden
``linear_relu`` layers of width 128 (then ``linear`` and the cross-entropy,
batch 256, 64 inputs, 10 classes) and of a chain of elementwise ops
(``tanh``, ``exp``, ``*``, ``+``, ``-``: five per layer, bounded) on a (256, 64) array,
each in a fresh process with an empty cache folder, and loads it again in a
second fresh process from that cache. fastad's own kernels are compiled
first in each process (an interpreted call, and another program's generated
code for the array helpers every generated module calls), outside the timing. It prints,
per program: nodes, the cold compile, the cached load and one generated
call, so the README's table comes from one measured run.
"""

import sys
import tempfile
import textwrap

from codegen_curve import run_child

SIZES = (1, 2, 4, 8, 16, 32)

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import fastad as fa

    kind, layers = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    if kind == "mlp":
        widths = [64] + [128] * layers + [10]
        params = []
        for n, h in zip(widths[:-1], widths[1:]):
            params += [rng.normal(size=(n, h)) / np.sqrt(n), np.zeros(h)]
        data = [rng.normal(size=(256, 64)), rng.integers(0, 10, size=256)]

        def function(*args):
            *weights, X, y = args
            H = X
            for k in range(0, len(weights) - 2, 2):
                H = fa.linear_relu(H, weights[k], weights[k + 1])
            return fa.cross_entropy(fa.linear(H, weights[-2], weights[-1]), y)

        arguments = (*params, *data)
        wrt = tuple(range(len(params)))
    else:
        arguments = (rng.normal(size=(256, 64)) * 0.1, rng.normal(size=64) * 0.1)
        wrt = (0, 1)

        def function(A, r):
            for _ in range(layers):
                A = fa.tanh(A) * r + fa.exp(-(A * A))  # bounded: no overflow
            return A.mean()

    fa.compile(function, example=arguments, wrt=wrt, backend="interpret").value_and_grad(
        arguments
    )  # fastad's own kernels, outside the timing
    # The array helpers every generated module calls (kernels/array_helpers.py), compiled
    # once per machine into fastad's kernel cache: by another program, outside the timing.
    def warm(X, W, b, y):
        return fa.cross_entropy(fa.linear_relu(X, W, b), y) + (fa.tanh(X) * 2.0).mean()

    warm_arguments = (
        rng.normal(size=(8, 4)), rng.normal(size=(4, 3)), np.zeros(3), np.arange(8) % 3
    )
    fa.compile(warm, example=warm_arguments, wrt=(1, 2), backend="codegen").value_and_grad(
        warm_arguments
    )
    f = fa.compile(function, example=arguments, wrt=wrt, backend="codegen")
    started = time.perf_counter()
    f.value_and_grad(arguments)
    first = time.perf_counter() - started
    times = []
    for _ in range(20):
        started = time.perf_counter()
        f.value_and_grad(arguments)
        times.append(time.perf_counter() - started)
    print(json.dumps({"nodes": len(f.tape), "first_call_s": first, "call_us": min(times) * 1e6}))
    """
)


def run(kind, layers, cache):
    return run_child(CHILD, [kind, layers], cache, OPENBLAS_NUM_THREADS="1")


def main(argv):
    sizes = [int(a) for a in argv] or SIZES
    print("| program | nodes | cold compile | cached load | one call |")
    print("|---|---:|---:|---:|---:|")
    for kind in ("mlp", "elementwise"):
        for layers in sizes:
            with tempfile.TemporaryDirectory() as cache:
                cold = run(kind, layers, cache)
                warm = run(kind, layers, cache)
            name = f"MLP, {layers} hidden" if kind == "mlp" else f"elementwise, {5 * layers} ops"
            print(
                f"| {name} | {cold['nodes']} | {cold['first_call_s']:.1f} s | "
                f"{warm['first_call_s']:.2f} s | {warm['call_us']:.0f} us |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
