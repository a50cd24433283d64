"""The ``fused`` group: linear+ReLU forward+backward, several ways and sizes;
and ``long_lived``: the layer trained with every step on one tape.

``python -m pytest bench -k fused``. Each ``test_fused`` case checks its
result against the textbook NumPy composition once (1e-12 relative), warms
the JIT, and stores ``us_per_call`` and ``gflops`` (three (B, n, h)
products per call) in ``extra_info`` when timing ran. The ``fused`` and
``blocks`` ways run through the public API on a fresh tape per call
(``fused_shared`` as ``fused``, its leaves keeping the caller's arrays:
``fa.var(a, copy=False)``); the
``kernels`` way is the fused kernels without a tape; the ``compiled`` way
the layer's loss compiled to one generated kernel; the ``torch`` way
PyTorch float64 eager (skipped, saying why, without torch). The scalar-node way
runs only where its tape stays small (``layer.SCALAR_NODE_LIMIT``): at
(64, 256, 512) it would record 1.7e7 nodes and at (64, 512, 1024) 6.7e7
(gigabytes of Python objects), so those cases are not generated.

``test_long_lived_tape`` runs ``layer.long_lived_loop`` to step 2050 (three
runs, each on its own tape) and stores the per-step time of steps 50-100
and 2000-2050, each the best of the runs, and their ratio. Every run's
final parameters are checked against the same SGD in NumPy. With
``--benchmark-disable`` it runs two short loops (200 steps), checked the
same way, in about 0.3 s.
"""

import gc

import numpy as np
import pytest
from data import DATA
from layer import (
    EARLY_STEPS,
    LATE_STEPS,
    LOOP_SIZE,
    SIZES,
    WAYS,
    flops,
    layer_inputs,
    long_lived_loop,
    numpy_loop,
    reference_layer,
    scalar_nodes_fit,
    torch_layer_setup,
)

# Every way on Gaussian inputs; every way but the scalar nodes also on inputs
# with exact zeros (bench/data.py), which must take the dense time.
CASES = [
    (size, way, data)
    for size in SIZES
    for way in (*WAYS, "torch")
    for data in DATA[:2]
    if (way != "scalars" or scalar_nodes_fit(*size))
    and (way not in ("scalars", "torch") or data == "dense")
]
# SGD over 2050 steps could compound each step's rounding; measured, the two
# loops end bitwise equal on (8, 64, 64), and no pre-activation comes within
# 1e-7 of the ReLU kink (where a rounding could flip a mask). The tolerance
# is a margin for another BLAS.
LOOP_RTOL = 1e-10
LOOP_RUNS = 3
UNTIMED_STEPS = 2 * EARLY_STEPS[1]


def rounds(B, n, h, way):
    # A (8, 64, 64) call takes 10-300 us: many rounds make the minimum stable.
    if way == "scalars" or B * n * h > 10**6:
        return 10
    return 50 if B * n * h > 10**5 else 200


@pytest.mark.parametrize(
    "size, way, data", CASES, ids=[f"{'x'.join(map(str, s))}-{w}-{d}" for s, w, d in CASES]
)
def test_fused(benchmark, size, way, data):
    B, n, h = size
    arrays = layer_inputs(B, n, h, data=data)
    expected = reference_layer(*arrays)
    if way == "torch":  # the peer, on tensors made once
        function, arrays = torch_layer_setup(*arrays)
        if function is None:
            pytest.skip(arrays)
    else:
        function = WAYS[way]
    if way in ("compiled", "numpy_loss"):  # the loss in H's place
        expected = ((expected[0] * arrays[3]).sum(), *expected[1:])
    for got, want in zip(function(*arrays), expected, strict=True):  # checks and warms the JIT
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    benchmark.group = f"fused {B}x{n}x{h} {data}"
    benchmark.extra_info.update(way=way, data=data, B=B, n=n, h=h)
    benchmark.pedantic(function, args=arrays, rounds=rounds(B, n, h, way), warmup_rounds=1)
    if benchmark.stats is not None:
        seconds = benchmark.stats.stats.min
        benchmark.extra_info["us_per_call"] = seconds * 1e6
        benchmark.extra_info["gflops"] = flops(B, n, h) / seconds / 1e9


def assert_loop_matches_numpy(arrays, steps, W, b):
    W_expected, b_expected = numpy_loop(*arrays, steps)
    np.testing.assert_allclose(W, W_expected, rtol=LOOP_RTOL, atol=LOOP_RTOL)
    np.testing.assert_allclose(b, b_expected, rtol=LOOP_RTOL, atol=LOOP_RTOL)


def collect_garbage():
    # Between runs only: the previous run's tape is freed outside the timing.
    # Collections triggered inside a run stay in its timing, as for a user.
    gc.collect()


@pytest.mark.benchmark(group="long_lived")
def test_long_lived_tape(benchmark):
    arrays = layer_inputs(*LOOP_SIZE)
    W, b, _ = long_lived_loop(*arrays, UNTIMED_STEPS)  # checks and warms the JIT
    assert_loop_matches_numpy(arrays, UNTIMED_STEPS, W, b)
    # Untimed (--benchmark-disable), the loop runs once more, short.
    steps = LATE_STEPS[1] if benchmark.enabled else UNTIMED_STEPS
    windows = []

    def run():
        W, b, seconds = long_lived_loop(*arrays, steps)
        assert_loop_matches_numpy(arrays, steps, W, b)
        if steps >= LATE_STEPS[1]:
            windows.append([seconds[slice(*s)].mean() for s in (EARLY_STEPS, LATE_STEPS)])

    benchmark.extra_info.update(B=LOOP_SIZE[0], n=LOOP_SIZE[1], h=LOOP_SIZE[2], steps=steps)
    benchmark.pedantic(run, setup=collect_garbage, rounds=LOOP_RUNS)
    if benchmark.stats is not None:
        early, late = np.min(windows, axis=0)  # each window's best run
        benchmark.extra_info.update(
            early_steps=list(EARLY_STEPS),
            late_steps=list(LATE_STEPS),
            early_us_per_step=early * 1e6,
            late_us_per_step=late * 1e6,
            late_over_early=late / early,
        )
