"""Compiled functions of scalars that build arrays: their block ops run as scalar ops.

References: the same function recorded eagerly on a tape at each point
(values and gradients within rounding: sums run left to right here, pairwise
or by BLAS there), central differences, and the interpreter against the
generated code bit for bit.
"""

import numpy as np
import pytest

import fastad as fa

M = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
W = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]])


def model(a, b, c):
    v = fa.stack([a, b, a * c])  # (3,) from scalars
    w = M @ fa.tanh(v)  # a constant matrix times a vector
    H = fa.linear_relu(v.reshape(1, 3), W, np.array([0.1, -0.2]))  # (1, 2)
    joined = fa.concatenate([w, H[0], v[::-1]])  # (7,)
    return (
        (w * w).sum()
        + fa.logsumexp(v)
        + np.cumsum(joined)[4]
        + v.reshape(3, 1).T[0, 2]
        + fa.softmax(joined)[1]
        + fa.log_softmax(v * 3.0)[2]
        + fa.mse_loss(w, np.array([0.5, -0.5]))
        + joined.mean()
        + (np.outer(v, v) @ v).sum() * 0.01
    )


POINTS = np.array([[0.3, -0.7, 1.1], [1.0, 2.0, -0.5], [-0.5, 0.25, 0.0], [2.0, 0.0, 3.0]])


def eager(function, point):
    """Value and gradient recorded on a tape at ``point``."""
    with fa.Tape():
        nodes = [fa.var(float(x)) for x in point]
        out = function(*nodes)
        out.backward()
        return out.value, np.array([node.grad for node in nodes])


def central(function, point, h=1e-6):
    gradient = np.empty(point.size)
    for i in range(point.size):
        step = np.zeros(point.size)
        step[i] = h
        gradient[i] = (function(*(point + step)) - function(*(point - step))) / (2 * h)
    return gradient


def numpy_model(a, b, c):
    """The model written in NumPy, for central differences."""
    v = np.array([a, b, a * c])
    w = M @ np.tanh(v)
    H = np.maximum(v.reshape(1, 3) @ W + np.array([0.1, -0.2]), 0.0)
    joined = np.concatenate([w, H[0], v[::-1]])
    exps = np.exp(joined - joined.max())
    log_p = 3.0 * v - np.log(np.exp(3.0 * v).sum())
    return (
        (w * w).sum()
        + np.log(np.exp(v).sum())
        + np.cumsum(joined)[4]
        + v[2]
        + exps[1] / exps.sum()
        + log_p[2]
        + np.mean((w - np.array([0.5, -0.5])) ** 2)
        + joined.mean()
        + (np.outer(v, v) @ v).sum() * 0.01
    )


def test_values_and_gradients_are_the_tapes_and_the_differences():
    f = fa.compile(model, example=POINTS[0])
    values, gradients = f.value_and_grad(POINTS)
    for point, value, gradient in zip(POINTS, values, gradients, strict=True):
        want_value, want_gradient = eager(model, point)
        assert value == pytest.approx(want_value, rel=1e-13)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-12, atol=1e-13)
        assert value == pytest.approx(numpy_model(*point), rel=1e-13)
        np.testing.assert_allclose(gradient, central(numpy_model, point), rtol=1e-6, atol=1e-7)
    assert f.tape.has_blocks is False  # a scalar program: the lanes and generated code run it


def test_generated_code_gives_the_interpreters_bits():
    generated = fa.compile(model, example=POINTS[0], backend="codegen")
    interpreted = fa.compile(model, example=POINTS[0], backend="interpret")
    assert generated.tier("grad").name == "codegen"
    points = np.random.default_rng(0).uniform(-2, 2, (50, 3))
    for got, want in zip(
        generated.value_and_grad(points), interpreted.value_and_grad(points), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    direction = np.array([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(
        generated.hvp(points, np.tile(direction, (50, 1))),
        interpreted.hvp(points, np.tile(direction, (50, 1))),
    )


def test_second_order_and_several_outputs():
    f = fa.compile(model, example=POINTS[0])
    point = POINTS[1]
    hessian = f.hessian(point)
    by_differences = np.array(
        [(f.grad(point + step) - f.grad(point - step)) / 2e-6 for step in np.eye(3) * 1e-6]
    )
    np.testing.assert_allclose(hessian, by_differences, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hessian, hessian.T, rtol=1e-12, atol=1e-13)

    def pair(a, b):
        v = fa.stack([a, b])
        return tuple(M[:, :2] @ fa.exp(v))

    g = fa.compile(pair, example=[0.1, 0.2])
    jacobian = g.jacobian(np.array([0.4, -0.3]))
    want = M[:, :2] * np.exp([0.4, -0.3])
    np.testing.assert_allclose(jacobian, want, rtol=1e-15)


def test_softmax_of_large_values_is_shifted_at_every_point():
    # The shift is each point's own maximum, not the traced point's: no overflow.
    f = fa.compile(lambda a, b: fa.logsumexp(fa.stack([a, b])), example=[0.0, 1.0])
    value, gradient = f.value_and_grad(np.array([1000.0, 999.0]))
    assert value == pytest.approx(1000.0 + np.log1p(np.exp(-1.0)), rel=1e-15)
    np.testing.assert_allclose(gradient, [1 / (1 + np.exp(-1.0)), 1 / (1 + np.exp(1.0))])


def test_a_branch_on_an_array_sum_is_guarded():
    def branchy(a, b):
        v = fa.stack([a, b])
        return v.sum() * 2.0 if v.sum() > 0 else v.sum() * 3.0

    f = fa.compile(branchy, example=[1.0, 2.0])
    assert f(np.array([0.5, 0.25])) == 1.5
    with pytest.raises(fa.BranchError):
        f(np.array([-1.0, 0.25]))


@pytest.mark.parametrize(
    ("body", "op"),
    [
        (lambda v: v.max(), "max"),
        (lambda v: v.prod(), "prod"),
        (lambda v: fa.linalg.norm(v), None),
        (lambda v: fa.linalg.det(np.outer(v, v) + np.eye(2)), "det"),
    ],
)
def test_ops_without_a_scalar_form_are_named(body, op):
    def function(a, b):
        return body(fa.stack([a, b]))

    try:
        fa.compile(function, example=[1.0, 2.0])
    except NotImplementedError as error:
        assert op is not None and repr(op) in str(error)
        assert "function of arrays" in str(error)
    else:  # a composition of expandable ops: it must then be right
        assert op is None
        f = fa.compile(function, example=[1.0, 2.0])
        value, gradient = f.value_and_grad(np.array([3.0, 4.0]))
        assert value == pytest.approx(5.0, rel=1e-15)
        np.testing.assert_allclose(gradient, [0.6, 0.8], rtol=1e-15)


def test_a_branch_that_rounding_decides_is_named():
    # Eager sums pairwise (1.0 here), the expansion left to right (0.9999999999999999):
    # the traced branch would fail at its own point, so tracing says why.
    def rounding(a):
        s = fa.stack([a] * 10).sum()
        return s * 2.0 if s >= 1.0 else s * 3.0

    with pytest.raises(ValueError, match=r"branch at .*test_scalar_expansion.py:\d+ went True"):
        fa.compile(rounding, example=[0.1], debug=True)
    f = fa.compile(rounding, example=[0.2])  # far from the threshold: fine
    assert f(np.array([0.25])) == pytest.approx(5.0, rel=1e-15)


@pytest.mark.parametrize("point", [[-np.inf, -np.inf], [np.inf, 0.0], [np.nan, 1.0], [3.0, 1e308]])
@pytest.mark.parametrize("name", ["logsumexp", "softmax", "log_softmax"])
def test_the_softmax_family_at_infinities_is_the_tapes(name, point):
    op = getattr(fa, name)

    def function(a, b):
        out = op(fa.stack([a, b]))
        return out if name == "logsumexp" else out[0] * 2.0 + out[1]

    f = fa.compile(function, example=[0.0, 1.0])
    point = np.array(point)
    with np.errstate(all="ignore"):
        value, gradient = f.value_and_grad(point)
        want_value, want_gradient = eager(function, point)
    np.testing.assert_array_equal(value, want_value)
    if name != "logsumexp" or np.isfinite(point).all():  # (its derivative: the formula's)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-15)


def test_debug_names_the_line_of_an_array_op():
    def logs(a, b):
        w = fa.log(M[:, :2] @ fa.stack([a, b]))  # a nan for b > a / 2
        return w.sum() + a * b

    f = fa.compile(logs, example=[1.0, -2.0], debug=True)
    with pytest.raises(fa.NonFiniteError, match=r"test_scalar_expansion.py:\d+"):
        f(np.array([1.0, 2.0]), check=True)


def test_stacked_scalars_cost_a_node_each_and_dead_ops_are_not_expanded():
    def many(*xs):
        v = fa.stack(list(xs))
        unused = v.max()  # refused if it were expanded; nothing reads it
        del unused
        return (v * v).sum()

    f = fa.compile(many, num_inputs=50, example=np.arange(50.0))
    assert len(f.tape) <= 4 * 50  # inputs, squares, sums: no pick per element
    np.testing.assert_allclose(f.grad(np.arange(50.0)), 2.0 * np.arange(50.0))
