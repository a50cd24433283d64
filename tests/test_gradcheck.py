"""gradcheck: the regression suite over every op, and proof that the checker bites."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from op_table import OP_CASES, sample_operands
from strategies import dags, evaluate

import fastad as fa
from fastad import demo


def eager(function):
    """(value, gradient) callables that record ``function`` on a fresh tape per call."""

    def record(point):
        with fa.Tape():
            leaves = [fa.var(v) for v in point]
            out = function(*leaves)
            out.backward()
        return out.value, np.array([leaf.grad for leaf in leaves])

    return (lambda p: record(p)[0]), (lambda p: record(p)[1])


# -- the regression suite: every op, both modes, eager and compiled --------------------
@pytest.mark.parametrize("mode", ["full", "fast"])
@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_every_op_passes_gradcheck(case, mode, rng):
    value, gradient = eager(case.apply)
    compiled = None
    for point in sample_operands(case, rng, count=6):
        point = np.array(point)
        assert fa.gradcheck(value, point, grad=gradient, mode=mode)
        if compiled is None:
            compiled = fa.compile(case.apply, num_inputs=point.size, example=point)
        assert fa.gradcheck(compiled, point, mode=mode)


@settings(max_examples=300)
@given(dags())
def test_random_dags_pass_gradcheck_and_the_dot_product_test(dag):
    point, steps = dag
    f = fa.compile(lambda *xs: evaluate(steps, xs), num_inputs=len(point), example=point)
    result = fa.gradcheck(f, np.array(point), raise_exception=False)
    assert result.passed, result.message
    forward, reverse = result.dot_product
    assert forward == pytest.approx(reverse, rel=1e-12, abs=1e-12)


# -- the articles' classic bugs, planted in hand-written gradients ----------------------
def example_1(p):
    x, y = p
    return (x * y + x) ** 2


def example_1_gradient(p):
    x, y = p
    u = x * y + x
    return np.array([2 * u * (y + 1.0), 2 * u * x])


def example_1_gradient_assigning(p):
    # `x.grad = ...` instead of `+=` on x's fan-out edge: the product's path
    # overwrites the direct path, leaving 48 instead of 64 (the article's bug).
    x, y = p
    u = x * y + x
    du = 2 * u
    x_grad = du * 1.0  # the direct edge u = ... + x
    x_grad = du * y  # the product edge overwrites it
    return np.array([x_grad, du * x])


def test_assignment_instead_of_accumulation_is_caught():
    point = np.array([2.0, 3.0])
    assert fa.gradcheck(example_1, point, grad=example_1_gradient)
    with pytest.raises(fa.GradcheckError) as info:
        fa.gradcheck(example_1, point, grad=example_1_gradient_assigning)
    message = str(info.value)
    assert "1 of 2 elements" in message and "worst is input 0" in message
    assert "analytic 48.0" in message and "numeric 63.99" in message
    assert info.value.result.failures == [(0,)]


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def example_2_gradient(p, derivative_of_sigmoid=lambda s: s * (1.0 - s)):
    w1, x1, w2, x2, b, y = p
    s = sigmoid(w1 * x1 + w2 * x2 + b)
    dz = 2.0 * (s - y) * derivative_of_sigmoid(s)
    return np.array([dz * x1, dz * w1, dz * x2, dz * w2, dz, -2.0 * (s - y)])


def test_missing_factor_in_one_local_rule_is_caught():
    point = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])

    def value(p):
        return demo.example_2(*p)

    assert fa.gradcheck(value, point, grad=example_2_gradient)
    buggy = lambda p: example_2_gradient(p, derivative_of_sigmoid=lambda s: s)  # noqa: E731
    result = fa.gradcheck(value, point, grad=buggy, raise_exception=False)
    assert not result.passed
    # Every input behind the sigmoid is wrong; y, before it, is right.
    assert sorted(result.failures) == [(0,), (1,), (2,), (3,), (4,)]
    assert "5 of 6 elements; worst is input 0" in result.message


class TinyNode:
    """A micrograd-style node whose forward pass may overwrite its buffer in place."""

    def __init__(self, data):
        self.data, self.grad = data, 0.0


def example_2_gradient_stale(p):
    # The forward pass reuses one buffer: z is overwritten by sigmoid(z) in
    # place, and the backward rule then reads "z" from the buffer: it computes
    # sigmoid'(sigmoid(z)) instead of sigmoid'(z) (the article's "backward
    # reads forward data that has since changed").
    w1, x1, w2, x2, b, y = p
    buffer = TinyNode(w1 * x1 + w2 * x2 + b)
    buffer.data = sigmoid(buffer.data)  # in-place activation
    s = buffer.data
    stale = sigmoid(buffer.data)  # should be sigmoid(z), but z is gone
    dz = 2.0 * (s - y) * stale * (1.0 - stale)
    return np.array([dz * x1, dz * w1, dz * x2, dz * w2, dz, -2.0 * (s - y)])


def test_rule_reading_overwritten_forward_data_is_caught():
    point = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])

    def value(p):
        return demo.example_2(*p)

    with pytest.raises(fa.GradcheckError, match=r"5 of 6 elements; worst is input \d"):
        fa.gradcheck(value, point, grad=example_2_gradient_stale)
    with pytest.raises(fa.GradcheckError, match="fast gradcheck failed"):
        fa.gradcheck(value, point, grad=example_2_gradient_stale, mode="fast")


# -- the checker's own behaviour -----------------------------------------------------------
def test_kink_with_a_valid_subgradient_passes_and_is_reported():
    f = fa.compile(lambda x: fa.abs(x) + fa.relu(x))
    result = fa.gradcheck(f, np.array([0.0]), raise_exception=False)
    assert result.passed and len(result.kinks) == 1
    index, forward, backward, is_subgradient = result.kinks[0]
    assert index == (0,) and (forward, backward) == pytest.approx((2.0, -1.0))
    assert is_subgradient


def test_kink_with_an_impossible_derivative_is_reported_as_non_differentiable():
    with pytest.raises(fa.GradcheckError, match="non-differentiable point .* one-sided"):
        fa.gradcheck(lambda p: abs(p[0]), [0.0], grad=lambda p: np.array([1.5]))


def test_richardson_extrapolation_is_more_accurate():
    def f(p):
        return math.exp(3.0 * p[0])

    def g(p):
        return np.array([3.0 * math.exp(3.0 * p[0])])

    plain = fa.gradcheck(f, [1.0], grad=g, raise_exception=False)
    extrapolated = fa.gradcheck(f, [1.0], grad=g, richardson=True, raise_exception=False)
    exact = g([1.0])[0]
    assert abs(extrapolated.numeric[0] - exact) < abs(plain.numeric[0] - exact) / 10


def test_step_and_tolerances_follow_the_dtype():
    def f(p):
        return float(np.sum(np.sin(p.astype(np.float32))))

    def g(p):
        return np.cos(p.astype(np.float32)).astype(np.float64)

    point = np.array([0.3, 1.7], dtype=np.float32)
    assert fa.gradcheck(f, point, grad=g)  # float32 arithmetic passes with float32 defaults
    with pytest.raises(fa.GradcheckError):
        fa.gradcheck(f, point.astype(np.float64), grad=g)  # float64 expectations reject it


def test_vector_output_compiled_function():
    f = fa.compile(lambda x, y: (x * y, fa.sin(x) + y))
    assert fa.gradcheck(f, np.array([0.4, -1.1]))
    assert fa.gradcheck(f, np.array([0.4, -1.1]), mode="fast")


def test_dot_product_test_catches_disagreeing_modes():
    class WrongForwardMode(fa.CompiledFunction):
        def jvp(self, points, tangents, threads=None):
            value, pushed = super().jvp(points, tangents, threads)
            return value, pushed * 1.5

    f = WrongForwardMode(lambda x, y: x * fa.exp(y))
    with pytest.raises(fa.GradcheckError, match="forward and reverse mode disagree"):
        fa.gradcheck(f, np.array([0.3, 0.2]))


def test_bad_arguments():
    f = fa.compile(lambda x: x * x)
    with pytest.raises(TypeError, match="grad="):
        fa.gradcheck(lambda p: p[0], [1.0])
    with pytest.raises(TypeError, match="drop grad="):
        fa.gradcheck(f, [1.0], grad=lambda p: p)
    with pytest.raises(ValueError, match=r"shape \(k,\)"):
        fa.gradcheck(f, [[1.0]])
    with pytest.raises(ValueError, match=r"grad\(x\) has shape \(2,\)"):
        fa.gradcheck(lambda p: p[0], [1.0], grad=lambda p: np.zeros(2))
    with pytest.raises(ValueError, match="must return a scalar"):
        fa.gradcheck(lambda p: p, [1.0], grad=lambda p: np.ones(1))
    with pytest.raises(ValueError, match="mode"):
        fa.gradcheck(f, [1.0], mode="slow")
    with pytest.raises(TypeError, match="real point"):
        fa.gradcheck(f, ["a"])
