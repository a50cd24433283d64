"""Block products as one compiled call on NumPy's BLAS give NumPy's bits.

``fastad.kernels.products`` makes a tape's 2-D products (``matmul``'s and the
fused layers' forwards and VJPs) in one compiled call each, through the BLAS
routine ``np.matmul`` picks. These tests compare them bit for bit (signs of
zeros, nan and inf included) with ``np.matmul`` and with the rules' NumPy path,
which still runs other layouts and machines whose NumPy BLAS cannot be called
from compiled code (``reach.blas_products()`` is None there).
"""

import warnings

import numpy as np
import pytest

import fastad as fa
from fastad.core import block_rules, reach
from fastad.kernels import optable, products


def bits(x):
    return np.ascontiguousarray(x, dtype=np.float64).view(np.int64)


def assert_same_bits(got, want):
    assert got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.fixture
def numpy_products(monkeypatch):
    """Run the rules' NumPy path, as where compiled code cannot call NumPy's BLAS."""

    def use_numpy():
        monkeypatch.setattr(reach, "_products", False)

    return use_numpy


def factor(rng, shape, transposed, special):
    """Normal values with exact zeros (and -0.0, inf and nan where ``special``), laid out
    C-contiguous or as the transposed view of a C-contiguous array."""
    x = rng.normal(size=shape[::-1] if transposed else shape)
    x[rng.random(x.shape) < 0.3] = 0.0
    if special and x.size:
        for value in (-0.0, np.inf, -np.inf, np.nan):
            x.flat[rng.integers(x.size)] = value
    return x.T if transposed else x


def test_products_are_numpys_bit_for_bit_in_every_layout(rng):
    for trial in range(400):
        m, k, n = (int(v) for v in rng.integers(0, 12, size=3))
        m = 1 if trial % 5 == 0 else m  # a row: NumPy's dgemv
        n = 1 if trial % 7 == 0 else n  # a column: dgemv, and ddot with a row
        special = trial % 3 == 0
        x = factor(rng, (m, k), bool(rng.integers(2)), special)
        y = factor(rng, (k, n), bool(rng.integers(2)), special)
        with np.errstate(all="ignore"):
            want = np.matmul(x, y)
        left, right = reach.blas_matrix(x), reach.blas_matrix(y)
        product, zeros, nonfinite = products.counted_product(*left, *right)
        assert_same_bits(product, want)
        assert zeros == np.count_nonzero(want == 0.0)
        assert nonfinite == np.count_nonzero(~np.isfinite(want))


def test_a_layout_blas_cannot_read_is_refused_to_the_kernels():
    strided = np.ones((6, 6))[::2, ::2]
    assert reach.blas_matrix(strided) is None
    assert reach.blas_matrix(np.ones((3, 3), np.float32)) is None
    assert not reach.c_matrices(np.ones((2, 2)), np.ones((2, 2)).T)
    assert reach.c_matrices(np.ones((2, 2)), np.ones(3))


@pytest.mark.parametrize("adjoint_left", [True, False])
def test_reach_matmul_gives_the_numpy_paths_bits(rng, numpy_products, adjoint_left):
    cases = []
    for trial in range(150):
        m, k, n = (int(v) for v in rng.integers(1, 9, size=3))
        special = trial % 2 == 0
        x = factor(rng, (m, k), bool(rng.integers(2)), special)
        y = factor(rng, (k, n), bool(rng.integers(2)), special)
        cases.append((x, y))
    with np.errstate(all="ignore"):
        compiled = [reach.reach_matmul(x, y, adjoint_left) for x, y in cases]
        numpy_products()
        for got, (x, y) in zip(compiled, cases, strict=True):
            assert_same_bits(got, reach.reach_matmul(x, y, adjoint_left))


@pytest.mark.parametrize("name", ["matmul", "linear", "linear_relu"])
@pytest.mark.parametrize("special", [False, True], ids=["finite", "non-finite"])
def test_the_rules_forwards_and_vjps_give_the_numpy_paths_bits(rng, numpy_products, name, special):
    rule = block_rules.RULES[optable.BLOCK_BY_NAME[name].code]
    Need = reach.Need
    cases = []
    for _ in range(40):
        B, n, h = (int(v) for v in rng.integers(1, 9, size=3))
        X, W = factor(rng, (B, n), False, special), factor(rng, (n, h), False, special)
        values = (X, W) if name == "matmul" else (X, W, rng.normal(size=h))
        G = factor(rng, (B, h), False, special)
        G[rng.random(G.shape) < 0.3] = -0.0  # unreached adjoints
        needs = tuple(
            [Need.ALL, Need.VALUES, Need.NOTHING][int(i)] for i in rng.integers(3, size=len(values))
        )
        cases.append((values, G, needs))

    def run():
        results = []
        with np.errstate(all="ignore"):
            for values, G, needs in cases:
                out = rule.forward(values, None)
                results.append((out, rule.vjp(values, out, G, None, needs)))
        return results

    compiled = run()
    numpy_products()
    for (out, sent), (want_out, want_sent) in zip(compiled, run(), strict=True):
        assert_same_bits(out, want_out)
        for got, want in zip(sent, want_sent, strict=True):
            assert (got is None) == (want is None)
            if want is not None:
                assert_same_bits(got, want)


def test_an_overflowing_product_on_a_tape_warns_nothing_and_gives_ieee_results():
    big = np.full((2, 2), 1e300)
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")  # a RuntimeWarning would fail the test
        with fa.Tape():
            X = fa.var(big)
            Y = X @ X
            Z = fa.linear_relu(X, X, np.zeros(2))
            (Y.sum() + Z.sum()).backward()
            assert np.all(Y.value == np.inf) and np.all(Z.value == np.inf)
            # d(sum Y)/dX = G X^T + X^T G and linear_relu's dX + dW: four sums of 2e300
            np.testing.assert_array_equal(X.grad, np.full((2, 2), 8e300))
