"""The ``fused`` group: linear+ReLU forward+backward, five ways, several sizes.

``python -m pytest bench -k fused``. Each case checks its result against
the NumPy composition once (1e-12 relative), warms the JIT, and stores
``us_per_call`` and ``gflops`` (three (B, n, h) products per call) in
``extra_info``. The scalar-node way runs only where its tape stays small
(``layer.SCALAR_NODE_LIMIT``): at (64, 256, 512) it would record 1.7e7
nodes and at (64, 512, 1024) 6.7e7 (gigabytes of Python objects), so those
cases are not generated.
"""

import numpy as np
import pytest
from layer import SIZES, WAYS, flops, layer_inputs, numpy_layer, scalar_nodes_fit

CASES = [
    (size, way) for size in SIZES for way in WAYS if way != "scalars" or scalar_nodes_fit(*size)
]


@pytest.mark.parametrize("size, way", CASES, ids=[f"{'x'.join(map(str, s))}-{w}" for s, w in CASES])
def test_fused(benchmark, size, way):
    B, n, h = size
    arrays = layer_inputs(B, n, h)
    function = WAYS[way]
    expected = numpy_layer(*arrays)
    for got, want in zip(function(*arrays), expected, strict=True):  # checks and warms the JIT
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    benchmark.group = f"fused {B}x{n}x{h}"
    benchmark.extra_info.update(way=way, B=B, n=n, h=h)
    benchmark.pedantic(
        function, args=arrays, rounds=5 if B * n * h > 10**6 else 20, warmup_rounds=1
    )
    if benchmark.stats is not None:
        seconds = benchmark.stats.stats.min
        benchmark.extra_info["us_per_call"] = seconds * 1e6
        benchmark.extra_info["gflops"] = flops(B, n, h) / seconds / 1e9
