"""The ``elementwise math`` group: a math function of a (256, 128) block on a tape.

``python -m pytest bench -k elementwise``. One op of each function a model
reaches for (``tanh``, ``exp``, ``log1p``, ``sin``) on a block of 32,768
elements, recorded on a fresh tape from a leaf that keeps the caller's
array (``fa.var(X, copy=False)``), the value read, against NumPy's own
ufunc on the same array:

- ``eager``: the tape, the leaf and the op, through the public API;
- ``numpy``: ``np.tanh(X)`` and its kin (NumPy's SIMD loops where the
  build has them).

fastad's elementwise rules call the C library's function (glibc's libm)
once per element, the same function a scalar node's op calls, so that a
block and its expansion into scalar nodes agree bit for bit; NumPy's
vectorised loops give other bits (a few ulps at most) in fewer cycles.
These rows measure what that costs. Every row is checked once against
NumPy's values (4 ulps).
"""

import numpy as np
import pytest

import fastad as fa

SHAPE = (256, 128)
FUNCTIONS = ("tanh", "exp", "log1p", "sin")


def _array(name):
    X = np.random.default_rng(0).normal(size=SHAPE)
    return np.abs(X) if name == "log1p" else X


def _eager(name):
    op = getattr(fa, name)

    def forward(X):
        with fa.Tape():
            return op(fa.var(X, copy=False)).value

    return forward


@pytest.mark.benchmark(group="elementwise math")
@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("way", ["eager", "numpy"])
def test_elementwise_math(benchmark, way, name):
    X = _array(name)
    forward = _eager(name) if way == "eager" else getattr(np, name)
    np.testing.assert_array_max_ulp(forward(X), getattr(np, name)(X), maxulp=4)
    benchmark.extra_info.update(way=way, function=name, shape=SHAPE)
    benchmark(forward, X)
