"""``jvp``, ``vjp``, ``jacobian`` and ``hessian`` of a compiled function of arrays.

References are independent: central differences of the function (Jacobians,
JVPs) and of its gradient (Hessians), and the dot-product identity
``<u, J v> == <J^T u, v>`` between the two modes.
"""

import math

import numpy as np
import pytest

import fastad as fa

STEP = 1e-6


def central_jacobian(f, args, position):
    """d f / d args[position] by central differences: output shape + argument shape."""
    base = np.asarray(f(args), dtype=np.float64)
    x = np.asarray(args[position], dtype=np.float64)
    J = np.zeros(base.shape + x.shape)
    for index in np.ndindex(x.shape):
        moved = []
        for sign in (1.0, -1.0):
            y = x.copy()
            y[index] += sign * STEP
            shifted = list(args)
            shifted[position] = y
            moved.append(np.asarray(f(shifted)))
        J[(...,) + index] = (moved[0] - moved[1]) / (2 * STEP)
    return J


def layer(X, W, b):
    return fa.tanh(X @ W + b)


@pytest.fixture
def args(rng):
    return rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=2)


@pytest.mark.parametrize("wrt", [None, (1, 2), 0])
def test_jacobian_of_an_array_output_matches_central_differences(args, wrt):
    f = fa.compile(layer, example=args, wrt=wrt)
    J = f.jacobian(args)
    positions = [0, 1, 2] if wrt is None else [wrt] if isinstance(wrt, int) else list(wrt)
    listed = [J] if isinstance(wrt, int) else J
    assert len(listed) == len(positions)
    for position, block in zip(positions, listed, strict=True):
        want = central_jacobian(f, args, position)
        assert block.shape == want.shape
        np.testing.assert_allclose(block, want, rtol=1e-7, atol=1e-8)


def test_both_sweep_directions_give_the_same_jacobian(rng):
    # 6 outputs by 2 inputs: forward mode; 1 output row by 8 inputs: reverse mode
    X, w = rng.normal(size=(6, 2)), rng.normal(size=2)
    tall = fa.compile(lambda X, w: fa.exp(X @ w), example=(X, w), wrt=1)
    wide = fa.compile(lambda X, w: fa.exp(X.T @ (X @ w)), example=(X, w), wrt=0)
    np.testing.assert_allclose(tall.jacobian((X, w)), central_jacobian(tall, (X, w), 1), rtol=1e-7)
    np.testing.assert_allclose(
        wide.jacobian((X, w)), central_jacobian(wide, (X, w), 0), rtol=1e-6, atol=1e-8
    )


def test_jvp_and_vjp_agree_by_the_dot_product(args, rng):
    f = fa.compile(layer, example=args)
    v = [rng.normal(size=np.shape(a)) for a in args]
    u = rng.normal(size=(3, 2))
    value, Jv = f.jvp(args, v)
    value_again, uJ = f.vjp(args, u)
    np.testing.assert_array_equal(value, value_again)
    np.testing.assert_array_equal(value, f(args))
    left = float(np.sum(u * Jv))
    right = sum(float(np.sum(g * d)) for g, d in zip(uJ, v, strict=True))
    assert math.isclose(left, right, rel_tol=1e-12)


def test_scalar_output_vjp_is_the_scaled_gradient(args):
    f = fa.compile(lambda X, W, b: (layer(X, W, b) ** 2).sum(), example=args, wrt=(1, 2))
    value, gradients = f.value_and_grad(args)
    same, pulled = f.vjp(args, 2.0)
    assert same == value
    for got, want in zip(pulled, gradients, strict=True):
        np.testing.assert_allclose(got, 2.0 * want, rtol=1e-14)
    _, tangent = f.jvp(args, [np.ones((4, 2)), np.zeros(2)])
    assert type(tangent) is float
    assert math.isclose(tangent, float(gradients[0].sum()), rel_tol=1e-12)


def test_zero_cotangents_and_directions_are_strong(rng):
    X = np.abs(rng.normal(size=(2, 3)))
    X[0, 1] = 0.0  # sqrt'(0) is inf
    f = fa.compile(lambda X: fa.sqrt(X), example=(X,))
    u = np.ones((2, 3))
    u[0, 1] = 0.0
    _, (pulled,) = f.vjp((X,), u)
    assert np.isfinite(pulled).all() and pulled[0, 1] == 0.0
    v = np.ones((2, 3))
    v[0, 1] = 0.0
    _, tangent = f.jvp((X,), [v])
    assert np.isfinite(tangent).all() and tangent[0, 1] == 0.0


def test_hessian_matches_differences_of_the_gradient(args):
    def loss(X, W, b):
        return (layer(X, W, b) ** 2).sum()

    f = fa.compile(loss, example=args, wrt=(1, 2))
    H = f.hessian(args)
    assert [[block.shape for block in row] for row in H] == [
        [(4, 2, 4, 2), (4, 2, 2)],
        [(2, 4, 2), (2, 2)],
    ]
    for i in range(2):
        for j, other in enumerate((1, 2)):

            def gradient(moved, i=i):
                return f.grad(moved)[i]

            want = central_jacobian(gradient, args, other)
            np.testing.assert_allclose(H[i][j], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H[0][1], np.moveaxis(H[1][0], 0, -1), rtol=1e-12, atol=1e-14)
    single = fa.compile(loss, example=args, wrt=1).hessian(args)
    np.testing.assert_array_equal(single, H[0][0])


def test_bad_calls_name_the_problem(args):
    f = fa.compile(layer, example=args, wrt=(1, 2))
    with pytest.raises(ValueError, match=r"cotangent has shape \(2, 3\), the output \(3, 2\)"):
        f.vjp(args, np.ones((2, 3)))
    with pytest.raises(ValueError, match="finite"):
        f.vjp(args, np.full((3, 2), np.nan))
    with pytest.raises(ValueError, match="expected 2 directions"):
        f.jvp(args, [np.ones((4, 2))])
    with pytest.raises(ValueError, match=r"direction for argument 2 has shape \(3,\)"):
        f.jvp(args, [np.ones((4, 2)), np.ones(3)])
    with pytest.raises(ValueError, match="hessian needs a scalar output"):
        f.hessian(args)


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_directions_must_be_real_on_every_backend(args, backend):
    # A complex direction would lose its imaginary part in a conversion to float64.
    f = fa.compile(lambda X, W, b: (layer(X, W, b) ** 2).sum(), example=args, backend=backend)
    shapes = [np.shape(a) for a in args]
    for bad, what in ((1j * np.ones(shapes[0]), "complex128"), (np.array("1.0"), "<U3")):
        directions = [bad if n == 0 else np.zeros(s) for n, s in enumerate(shapes)]
        for transform in (f.jvp, f.hvp, f.hessp):
            with pytest.raises(
                TypeError, match=f"direction for argument 0 must hold real .*{what}"
            ):
                transform(args, directions)
    with pytest.raises(ValueError, match=r"argument 0 has shape \(2, 4\)"):
        f.jacobian((np.ones((2, 4)), *args[1:]))
