"""Small models, one step each, every contender on one BLAS thread (``models.py``).

``python -m pytest bench -k models``. Three groups:

Every group runs on Gaussian data (``dense``) and on the same data with
exact zeros (``zeros``: half the entries 0, some whole columns 0), the MLP
also on digit-like images (``digits``), all built in ``bench/data.py``;
each ``zeros`` or ``digits`` row should take its ``dense`` row's time.

- ``mlp``: one training step (forward, backward, gradients) of the
  64 -> 128 -> 10 classifier at batch 256: NumPy by hand, fastad eager (a
  fresh tape per step), fastad compiled (``fa.compile`` of the function of
  arrays), PyTorch float64 eager (skipped, saying why, without torch);
- ``logreg``: logistic-regression value and gradient, X (2000, 20): fastad
  compiled, by default and with ``fast_math=True`` (libmvec's exp and log1p
  in the vectorised loops, as NumPy's own SIMD loops run them), against
  NumPy by hand;
- ``cross_entropy``: fastad's fused ``fa.cross_entropy`` against the same
  loss composed from blocks (on the fused ``log_softmax``, and on
  primitives), forward+backward on a tape, logits (256, 10) and (256, 1000).

Every case checks once that its loss and gradients equal the NumPy ones
(the NumPy step itself: the textbook form's) to 1e-10 relative (the
gradients elementwise, with an absolute floor of 1e-10 of the array's
largest magnitude), which also warms the JIT, then stores ``us_per_call``
(best round) in ``extra_info``. ``bench/conftest.py`` pins the BLAS
libraries to one thread and torch's pool is set to one here too, so the
ratios compare code, not thread pools. The NumPy references are checked
against the textbook forms, and those against central differences, by
the tests at the end.
"""

import os

import models
import numpy as np
import pytest
from data import DATA

QUICK = os.environ.get("FASTAD_BENCH_QUICK") == "1"
RTOL = 1e-10
# A step takes 0.1-10 ms on the 2-core machine; the best of this many rounds
# is stable to a few percent when the machine is quiet (it often is not).
ROUNDS = 40 if QUICK else 200


def assert_same_step(got, want, what):
    loss, grads = got
    want_loss, want_grads = want
    assert float(loss) == pytest.approx(want_loss, rel=RTOL), f"{what}: loss"
    assert len(grads) == len(want_grads), f"{what}: gradient count"
    for i, (g, w) in enumerate(zip(grads, want_grads, strict=True)):
        w = np.asarray(w)
        np.testing.assert_allclose(
            np.asarray(g), w, rtol=RTOL, atol=RTOL * np.abs(w).max(), err_msg=f"{what}: grad {i}"
        )


def time_step(benchmark, function, arguments, **info):
    benchmark.extra_info.update(info)
    benchmark.pedantic(function, args=arguments, rounds=ROUNDS, warmup_rounds=2)
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_call"] = benchmark.stats.stats.min * 1e6


# -- mlp ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=DATA)
def mlp(request):
    inputs = models.mlp_inputs(*models.MLP_SIZE, data=request.param)
    return request.param, inputs, models.numpy_mlp(*inputs)


def mlp_way(way, inputs):
    """``(function, arguments)`` of one way's step, set up outside the timing."""
    if way == "numpy":
        return models.numpy_mlp, inputs
    if way == "eager":
        return models.eager_mlp, inputs
    if way == "compiled":
        return models.compiled_mlp, models.compile_mlp(*inputs)
    torch, missing = models.load_torch()
    if torch is None:
        pytest.skip(missing)
    return models.torch_mlp, models.torch_mlp_setup(*inputs)


@pytest.mark.parametrize("way", ["numpy", "eager", "compiled", "torch"])
def test_mlp(benchmark, mlp, way):
    data, inputs, expected = mlp
    if way == "numpy":  # the reference itself, against the textbook form
        expected = models.textbook_mlp(*inputs)
    function, arguments = mlp_way(way, inputs)
    assert_same_step(function(*arguments), expected, way)  # checks and warms
    B, n, h, c = models.MLP_SIZE
    benchmark.group = f"mlp {data}"
    info = dict(way=way, data=data, B=B, n=n, h=h, c=c)
    if way == "torch":
        info["torch"] = models.load_torch()[0].__version__
    time_step(benchmark, function, arguments, **info)


# -- logreg -------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=DATA[:2])
def logreg(request):
    inputs = models.logreg_inputs(*models.LOGREG_SIZE, data=request.param)
    return request.param, inputs, models.numpy_logreg(*inputs)


@pytest.mark.parametrize("way", ["numpy", "compiled", "fast_math"])
def test_logreg(benchmark, logreg, way):
    data, inputs, expected = logreg
    if way == "numpy":
        function, arguments = models.numpy_logreg, inputs
        expected = models.textbook_logreg(*inputs)
    else:
        fast_math = way == "fast_math"
        if fast_math:
            missing = models.fast_math_missing()
            if missing:
                pytest.skip(missing)
        function, arguments = models.compiled_logreg, models.compile_logreg(*inputs, fast_math)
    assert_same_step(function(*arguments), expected, way)
    N, k = models.LOGREG_SIZE
    benchmark.group = f"logreg {data}"
    time_step(benchmark, function, arguments, way=way, data=data, N=N, k=k)


# -- cross_entropy ------------------------------------------------------------------------------
CROSS_ENTROPY_CASES = [
    (size, way, data)
    for size in models.CROSS_ENTROPY_SIZES
    for way in models.CROSS_ENTROPY_WAYS
    for data in DATA[:2]
]


@pytest.mark.parametrize(
    "size, way, data",
    CROSS_ENTROPY_CASES,
    ids=[f"{s[0]}x{s[1]}-{w}-{d}" for s, w, d in CROSS_ENTROPY_CASES],
)
def test_cross_entropy(benchmark, size, way, data):
    B, c = size
    inputs = models.cross_entropy_inputs(B, c, data=data)
    loss, dlogits = models.numpy_cross_entropy(*inputs)
    function = models.CROSS_ENTROPY_WAYS[way]
    got_loss, got_dlogits = function(*inputs)
    assert_same_step((got_loss, [got_dlogits]), (loss, [dlogits]), way)
    benchmark.group = f"cross_entropy {B}x{c} {data}"
    time_step(benchmark, function, inputs, way=way, data=data, B=B, c=c)


# -- the references' own checks (untimed) -------------------------------------------------------
def central_differences(loss_of, arrays, step=1e-6):
    """d loss / d each element of each array, by central differences."""
    grads = []
    for position, array in enumerate(arrays):
        grad = np.empty(np.shape(array))
        for index in np.ndindex(grad.shape):
            shifted = [np.array(a, dtype=float) for a in arrays]
            shifted[position][index] += step
            above = loss_of(*shifted)
            shifted[position][index] -= 2 * step
            grad[index] = (above - loss_of(*shifted)) / (2 * step)
        grads.append(grad)
    return grads


def test_mlp_references():
    # A small net: central differences need one loss per parameter.
    W1, b1, W2, b2, X, y = models.mlp_inputs(B=16, n=5, h=7, c=4, seed=1)
    textbook = models.textbook_mlp(W1, b1, W2, b2, X, y)
    assert_same_step(models.numpy_mlp(W1, b1, W2, b2, X, y), textbook, "numpy")
    numeric = central_differences(lambda *p: models.textbook_mlp(*p, X, y)[0], [W1, b1, W2, b2])
    for got, want in zip(textbook[1], numeric, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_logreg_references():
    w, b, X, y = models.logreg_inputs(N=50, k=4, seed=1)
    textbook = models.textbook_logreg(w, b, X, y)
    assert_same_step(models.numpy_logreg(w, b, X, y), textbook, "numpy")
    numeric = central_differences(lambda w, b: models.textbook_logreg(w, b, X, y)[0], [w, b])
    for got, want in zip(textbook[1], numeric, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    # Stable far out, where exp(-z) overflows: the loss is z - y z for z >> 0.
    big = models.numpy_logreg(np.array([1e3]), 0.0, np.array([[1.0], [-1.0]]), np.array([0.0, 1.0]))
    assert big[0] == pytest.approx(1e3) and np.all(np.isfinite(big[1][0]))


def test_cross_entropy_reference():
    logits, y = models.cross_entropy_inputs(6, 5, seed=1)
    loss, grad = models.numpy_cross_entropy(logits, y)
    (numeric,) = central_differences(lambda x: models.numpy_cross_entropy(x, y)[0], [logits])
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)
    naive = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)  # fine at spread 3
    assert loss == pytest.approx(-np.log(naive[np.arange(len(y)), y]).mean(), rel=1e-13)
