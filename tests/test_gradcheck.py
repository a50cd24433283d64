"""gradcheck: the regression suite over every op, and proof that the checker bites."""

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from op_table import CASES, SMOOTH_CASES, sample_operands
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
@pytest.mark.parametrize("case", SMOOTH_CASES, ids=lambda c: c.name)
def test_every_op_passes_gradcheck(case, mode, rng):
    value, gradient = eager(case.apply)
    compiled = None
    for point in sample_operands(case, rng, count=6):
        point = np.array(point)
        assert fa.gradcheck(value, point, grad=gradient, mode=mode)
        if compiled is None:
            compiled = fa.compile(case.apply, num_inputs=point.size, example=point)
        assert fa.gradcheck(compiled, point, mode=mode)


def test_gradcheck_tells_a_stopped_gradient_from_the_slope(rng):
    # The rows with a derivative by definition are left out of the suite
    # above because finite differences see their value's slope: gradcheck
    # must report that difference, not pass it.
    case = CASES["stop_gradient"]
    value, gradient = eager(case.apply)
    point = np.array(sample_operands(case, rng, count=1)[0])
    assert gradient(point).tolist() == [0.0]
    result = fa.gradcheck(value, point, grad=gradient, raise_exception=False)
    assert not result.passed


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


STEEP = 1e7  # tanh(STEEP x) turns within 1e-7 of 0, far below the step of 6e-6


@pytest.mark.parametrize(
    "function, right, wrong",
    [
        # A steep but smooth stretch: the differences at h, h/4 and h/16 keep one size.
        (lambda p: np.tanh(STEEP * p[0]), STEEP, 42.0),
        # A kink and a jump within the step of the point, not at it.
        (lambda p: abs(p[0] - 1e-7), -1.0, 0.0),
        (lambda p: p[0] ** 2 + (p[0] > 1e-7), 0.0, 5.0),
    ],
    ids=["steep", "kink nearby", "jump nearby"],
)
def test_a_feature_within_the_step_is_resolved_at_a_finer_step(function, right, wrong):
    # These passed any gradient as a jump or a kink at the point.
    for mode in ("full", "fast"):
        assert fa.gradcheck(function, [0.0], grad=lambda p: np.array([right]), mode=mode)
        result = fa.gradcheck(
            function, [0.0], grad=lambda p: np.array([wrong]), mode=mode, raise_exception=False
        )
        assert not result.passed and not result.kinks and not result.jumps
        assert "faster than the step" in result.message
        assert result.numeric[0] == pytest.approx(right, abs=1e-6, rel=1e-6)


def test_kinks_and_jumps_at_the_point_itself_keep_their_verdicts():
    assert fa.gradcheck(lambda p: max(p[0], 0.0), [0.0], grad=lambda p: np.array([0.0]))
    jump = fa.gradcheck(
        lambda p: np.sign(p[0]), [0.0], grad=lambda p: np.array([3.0]), raise_exception=False
    )
    assert jump.passed and jump.jumps == [(0,)]
    with pytest.raises(fa.GradcheckError, match="non-differentiable point"):
        fa.gradcheck(lambda p: max(p[0], 0.0), [0.0], grad=lambda p: np.array([2.0]))


def test_a_failure_the_difference_cannot_tell_says_what_to_try():
    edge = fa.gradcheck(fa.compile(lambda x: x**1.5), np.array([0.0]), raise_exception=False)
    assert "leaves the function's domain" in edge.message
    big = fa.gradcheck(
        lambda p: 1e8 + p[0] * p[1],
        [0.0, 2.0],
        grad=lambda p: np.array([p[1], p[0]]),
        raise_exception=False,
    )
    assert "within its own rounding (about 0.0037" in big.message
    assert fa.gradcheck(
        lambda p: 1e8 + p[0] * p[1], [0.0, 2.0], grad=lambda p: np.array([p[1], p[0]]), atol=1e-2
    )


def test_equal_infinities_in_the_dot_product_test_agree():
    result = fa.gradcheck(fa.compile(fa.sqrt), np.array([0.0]), raise_exception=False)
    assert result.dot_product == (math.inf, math.inf)
    assert "disagree" not in result.message


def test_the_gradient_calls_a_user_makes_are_checked(rng):
    class DoubledGradient(fa.CompiledFunction):
        def value_and_grad(self, points, threads=None, **options):
            value, gradient = super().value_and_grad(points, threads, **options)
            return value, (gradient * 2 if np.ndim(points) == self.want_rank else gradient)

    for rank, call in ((1, r"f.value_and_grad\(x\)"), (2, "of 9 copies of x")):
        f = DoubledGradient(lambda x, y: fa.sin(x) * y + x * x)
        f.want_rank = rank
        with pytest.raises(fa.GradcheckError, match=f"{call} disagrees with f.jacobian"):
            fa.gradcheck(f, np.array([0.3, 1.7]))


def test_integer_labels_without_wrt_name_the_argument(rng):
    X, W, y = rng.normal(size=(6, 3)), rng.normal(size=(3, 4)), rng.integers(0, 4, 6)
    f = fa.compile(lambda X, W, y: fa.cross_entropy(X @ W, y), example=(X, W, y))
    with pytest.raises(ValueError, match=r"argument 2 is an array of int64 .* wrt=\(0, 1\)"):
        fa.gradcheck(f, (X, W, y))


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
    # A compiled function computes in float64 whatever the point: float64's tolerances.
    compiled = fa.compile(lambda x, y: fa.sin(x) + y * y)
    checked = fa.gradcheck(compiled, point, raise_exception=False)
    assert checked.passed and checked.tolerance[0] < 1e-5


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
    # f returns shape (1,): a vector output, whose Jacobian has shape (1, 1).
    with pytest.raises(ValueError, match=r"grad\(x\) has shape \(1,\), expected \(1, 1\)"):
        fa.gradcheck(lambda p: p, [1.0], grad=lambda p: np.ones(1))
    with pytest.raises(ValueError, match="mode"):
        fa.gradcheck(f, [1.0], mode="slow")
    with pytest.raises(TypeError, match="real point"):
        fa.gradcheck(f, ["a"])


# -- points of any shape, vector and array outputs (full Jacobians) ---------------------------
README_MESSAGE = (
    "gradcheck failed for 1 of 2 elements; worst is input 0: analytic 48.0, numeric "
    "63.99999999970665 (|difference| 16 > tolerance 6.4e-05 = atol + rtol * |numeric|; "
    "step 1.21e-05)"
)


def test_the_scalar_message_is_unchanged():
    with pytest.raises(fa.GradcheckError) as info:
        fa.gradcheck(example_1, [2.0, 3.0], grad=example_1_gradient_assigning)
    assert str(info.value) == README_MESSAGE


def test_scalar_output_of_an_n_d_point(rng):
    C = rng.normal(size=(2, 3, 4))
    seen = []

    def energy(x):
        seen.append(("f", type(x), x.shape, x.dtype == np.float64))
        return float(np.sum(C * np.sin(x)))

    def gradient(x):
        seen.append(("grad", type(x), x.shape, x.dtype == np.float64))
        return C * np.cos(x)

    x = rng.normal(size=(2, 3, 4))
    for mode in ("full", "fast"):
        assert fa.gradcheck(energy, x, grad=gradient, mode=mode)
    # f and grad see float64 arrays of x's shape, never a flattened point.
    assert {entry[1:] for entry in seen} == {(np.ndarray, (2, 3, 4), True)}
    result = fa.gradcheck(energy, x, grad=gradient, raise_exception=False)
    assert result.analytic.shape == result.numeric.shape == (2, 3, 4)
    np.testing.assert_array_equal(result.analytic, gradient(x))

    def planted(x):
        g = gradient(x)
        g[1, 2, 3] += 0.25
        return g

    for mode in ("full", "fast"):
        result = fa.gradcheck(energy, x, grad=planted, mode=mode, raise_exception=False)
        assert not result.passed and result.failures == [(1, 2, 3)]
        assert "failed for 1 of 24 elements; worst is input (1, 2, 3): analytic" in result.message


def test_scalar_point():
    def cube(t):
        assert isinstance(t, np.ndarray) and t.shape == ()
        return t**3

    assert fa.gradcheck(cube, 2.0, grad=lambda t: 3 * t**2)
    assert fa.gradcheck(cube, np.float32(2.0), grad=lambda t: 3 * t**2)
    result = fa.gradcheck(cube, 2.0, grad=lambda t: 2 * t**2, raise_exception=False)
    assert result.failures == [()]
    assert "1 of 1 elements; worst is the input: analytic 8.0, numeric 12.0" in result.message


def two_outputs(p):
    return np.array([p[0] * p[1], np.sin(p[2]) + p[0] ** 2])


def two_outputs_jacobian(p):
    return np.array([[p[1], p[0], 0.0], [2.0 * p[0], 0.0, np.cos(p[2])]])


def test_vector_output_full_jacobian(rng):
    point = rng.normal(size=3)
    for mode in ("full", "fast"):
        assert fa.gradcheck(two_outputs, point, grad=two_outputs_jacobian, mode=mode)
    result = fa.gradcheck(two_outputs, point, grad=two_outputs_jacobian, raise_exception=False)
    assert result.analytic.shape == (2, 3)

    def planted(p):  # a structural zero made non-zero: d out0 / d p2 is 0
        J = two_outputs_jacobian(p)
        J[0, 2] = 0.5
        return J

    for mode in ("full", "fast"):
        result = fa.gradcheck(two_outputs, point, grad=planted, mode=mode, raise_exception=False)
        assert result.failures == [(0, 2)]
        assert "1 of 6 elements; worst is input 2 of output 0: analytic 0.5" in result.message


def tanh_layer(B):
    """``f(X) = tanh(X) @ B`` from (2, 3) to (2, 2), and its Jacobian by hand."""

    def value(X):
        return np.tanh(X) @ B

    def jacobian(X):
        # J[i, k, a, b] = d (tanh(X) @ B)[i, k] / d X[a, b] = [i == a] tanh'(X[a, b]) B[b, k]
        J = np.zeros((2, 2, 2, 3))
        slope = 1.0 - np.tanh(X) ** 2
        for i in range(2):
            J[i, :, i, :] = (slope[i][:, None] * B).T
        return J

    return value, jacobian


def test_array_output_of_an_array_point(rng):
    B = rng.normal(size=(3, 2))
    X = rng.normal(size=(2, 3))
    value, jacobian = tanh_layer(B)
    result = fa.gradcheck(value, X, grad=jacobian, raise_exception=False)
    assert result.passed, result.message
    assert result.analytic.shape == (2, 2, 2, 3)  # output shape + point shape
    assert fa.gradcheck(value, X, grad=jacobian, mode="fast")
    assert fa.gradcheck(value, X, grad=jacobian, richardson=True)

    def planted(X):
        J = jacobian(X)
        J[0, 1, 0, 2] += 0.5  # a wrong entry
        J[1, 0, 0, 1] = 0.3  # output row 1 does not depend on X's row 0
        return J

    for mode in ("full", "fast"):
        with pytest.raises(fa.GradcheckError) as info:
            fa.gradcheck(value, X, grad=planted, mode=mode)
        result = info.value.result
        assert result.failures == [(0, 1, 0, 2), (1, 0, 0, 1)]
        assert "2 of 24 elements; worst is input (0, 2) of output (0, 1):" in str(info.value)
        assert str(info.value).startswith("fast gradcheck failed" if mode == "fast" else "grad")


def test_richardson_works_for_every_jacobian_element():
    def f(p):
        return np.array([np.exp(3.0 * p[0]), np.exp(p[0] * p[1]), np.sin(4.0 * p[1])])

    def jacobian(p):
        e = np.exp(p[0] * p[1])
        return np.array(
            [[3.0 * np.exp(3.0 * p[0]), 0.0], [p[1] * e, p[0] * e], [0.0, 4.0 * np.cos(4.0 * p[1])]]
        )

    point = np.array([1.0, 0.7])
    exact = jacobian(point)
    plain = fa.gradcheck(f, point, grad=jacobian, raise_exception=False)
    extrapolated = fa.gradcheck(f, point, grad=jacobian, richardson=True, raise_exception=False)
    assert plain.passed and extrapolated.passed
    smooth = exact != 0.0
    plain_error = np.abs(plain.numeric - exact)[smooth]
    extrapolated_error = np.abs(extrapolated.numeric - exact)[smooth]
    assert np.all(extrapolated_error < plain_error / 10)


def kinked(p):
    # Along p0 at p0 = 0: outputs 0 (|p0| + relu(p0)) and 1 (relu(p0) * p1) have
    # kinks, output 2 (p0^2) is smooth. (|p0| alone would not do: its central
    # difference is 0, its subgradient too, and only failing elements are examined.)
    relu = max(p[0], 0.0)
    return np.array([abs(p[0]) + relu + p[1], relu * p[1], p[0] ** 2 + p[1] ** 3])


def kinked_jacobian(p, row_1_at_kink=0.0, row_2_at_kink=0.0):
    # Subgradients |.|'(0) = 0 and relu'(0) = 0 at p0 = 0; p1 = 2 gives row 1's 2.
    return np.array([[0.0, 1.0], [row_1_at_kink, 0.0], [row_2_at_kink, 3.0 * p[1] ** 2]])


def test_kinks_are_judged_per_output_element():
    point = np.array([0.0, 2.0])
    result = fa.gradcheck(kinked, point, grad=kinked_jacobian, raise_exception=False)
    assert result.passed and "2 kink(s) with valid subgradients" in result.message
    assert [k[0] for k in result.kinks] == [(0, 0), (1, 0)]
    assert [k[1:3] for k in result.kinks] == [pytest.approx((2.0, -1.0)), pytest.approx((2, 0))]

    # An analytic value outside the one-sided derivatives of output 1's kink.
    outside = fa.gradcheck(
        kinked, point, grad=lambda p: kinked_jacobian(p, row_1_at_kink=3.0), raise_exception=False
    )
    assert outside.failures == [(1, 0)]
    assert outside.kinks[1][0] == (1, 0) and outside.kinks[1][3] is False
    assert "worst is input 0 of output 1 at a non-differentiable point (x = 0.0)" in (
        outside.message
    )

    # A wrong entry of the smooth output 2, along the same input as two kinks:
    # a mismatch, not a kink.
    smooth_bug = fa.gradcheck(
        kinked, point, grad=lambda p: kinked_jacobian(p, row_2_at_kink=0.5), raise_exception=False
    )
    assert smooth_bug.failures == [(2, 0)]
    assert [k[0] for k in smooth_bug.kinks] == [(0, 0), (1, 0)]
    assert "worst is input 0 of output 2: analytic 0.5, numeric 0.0" in smooth_bug.message


def test_fast_mode_defers_to_the_elements_at_a_kink():
    # Along a random direction the kinks' central difference is no u^T J v of the
    # subgradient; the full check then finds every element valid.
    point = np.array([0.0, 2.0])
    result = fa.gradcheck(kinked, point, grad=kinked_jacobian, mode="fast", raise_exception=False)
    assert result.passed and result.mode == "fast" and len(result.kinks) == 2
    assert "every element passes the full check" in result.message
    with pytest.raises(fa.GradcheckError, match="worst is input 0 of output 1 at a non-diff"):
        fa.gradcheck(kinked, point, grad=lambda p: kinked_jacobian(p, 3.0), mode="fast")


# -- forward and reverse mode of plain callables ------------------------------------------------
def test_plain_vjp_and_jvp_get_the_dot_product_test(rng):
    B = rng.normal(size=(3, 2))
    X = rng.normal(size=(2, 3))
    value, jacobian = tanh_layer(B)
    shapes = []

    def jvp(x, v):
        shapes.append(("jvp", x.shape, v.shape))
        return np.tensordot(jacobian(x), v, axes=2)  # (2, 2)

    def vjp(x, u):
        shapes.append(("vjp", x.shape, u.shape))
        return np.tensordot(u, jacobian(x), axes=2)  # (2, 3)

    result = fa.gradcheck(value, X, grad=jacobian, jvp=jvp, vjp=vjp, raise_exception=False)
    assert result.passed, result.message
    forward, reverse = result.dot_product
    assert forward == pytest.approx(reverse, rel=1e-12)
    assert shapes == [("jvp", (2, 3), (2, 3)), ("vjp", (2, 3), (2, 2))]

    def wrong_jvp(x, v):
        pushed = jvp(x, v)
        pushed[1, 0] *= 1.5
        return pushed

    with pytest.raises(fa.GradcheckError, match="forward and reverse mode disagree"):
        fa.gradcheck(value, X, grad=jacobian, jvp=wrong_jvp, vjp=vjp)
    with pytest.raises(TypeError, match="needs both vjp= and jvp=; got jvp= without vjp="):
        fa.gradcheck(value, X, grad=jacobian, jvp=jvp)
    with pytest.raises(ValueError, match=r"vjp\(x, u\) has shape \(2, 2\), expected \(2, 3\)"):
        fa.gradcheck(value, X, grad=jacobian, jvp=jvp, vjp=lambda x, u: u)


def test_scalar_output_vjp_gets_a_float():
    cotangents = []

    def vjp(p, u):
        cotangents.append(u)
        return u * example_1_gradient(p)

    def jvp(p, v):
        return float(example_1_gradient(p) @ v)

    assert fa.gradcheck(example_1, [2.0, 3.0], grad=example_1_gradient, vjp=vjp, jvp=jvp)
    assert len(cotangents) == 1 and isinstance(cotangents[0], float)


# -- compiled functions ---------------------------------------------------------------------
def test_compiled_function_with_one_output_in_a_tuple():
    f = fa.compile(lambda x, y: (x * fa.exp(y),))
    result = fa.gradcheck(f, np.array([0.3, 0.2]), raise_exception=False)
    assert result.passed and result.analytic.shape == (1, 2)
    assert result.dot_product is not None


def test_compiled_function_point_shape():
    f = fa.compile(lambda x, y: x * y)
    with pytest.raises(
        ValueError, match=r"k = 2 inputs .* shape \(k,\) = \(2,\), got shape \(3,\)"
    ):
        fa.gradcheck(f, np.ones(3))
    with pytest.raises(ValueError, match=r"got shape \(5, 2\); check a batch one point at a time"):
        fa.gradcheck(f, np.ones((5, 2)))
    with pytest.raises(TypeError, match="drop vjp=, jvp="):
        fa.gradcheck(f, np.ones(2), vjp=lambda p, u: u, jvp=lambda p, v: v)


def layer_loss(X, W, b, T, s):
    return s * fa.mse_loss(fa.linear_relu(X, W, b), T)


def layer_arguments(rng):
    return [
        rng.normal(size=(4, 3)),
        rng.normal(size=(3, 2)),
        rng.normal(size=2),
        rng.normal(size=(4, 2)),
        1.5,
    ]


def test_function_of_arrays_passes(rng):
    arguments = layer_arguments(rng)
    f = fa.compile(layer_loss, example=arguments)
    assert isinstance(f, fa.BlockFunction)
    moved = [a + 0.1 for a in arguments]  # a point other than the example
    for mode in ("full", "fast"):
        assert fa.gradcheck(f, moved, mode=mode)
    result = fa.gradcheck(f, tuple(moved), raise_exception=False)
    assert [np.shape(a) for a in result.analytic] == [(4, 3), (3, 2), (2,), (4, 2), ()]
    for analytic, gradient in zip(result.analytic, f.grad(moved), strict=True):
        np.testing.assert_array_equal(analytic, gradient)
    assert result.dot_product is not None  # its jvp and vjp, by the dot-product test
    assert math.isclose(*result.dot_product, rel_tol=1e-12)


class WrongGradient(fa.BlockFunction):
    """A function of arrays whose gradient of one argument has one wrong element."""

    def __init__(self, function, example, argument, element, by):
        super().__init__(function, example)
        self.argument, self.element, self.by = argument, element, by

    def value_and_grad(self, arguments):
        value, gradients = super().value_and_grad(arguments)
        wrong = np.array(gradients[self.argument], dtype=np.float64)
        wrong[self.element] += self.by
        gradients[self.argument] = wrong if wrong.ndim else float(wrong)
        return value, gradients


@pytest.mark.parametrize(
    "argument, element, name",
    [
        (1, (0, 1), "argument 1 element (0, 1)"),
        (2, (1,), "argument 2 element 1"),
        (4, (), "argument 4"),
    ],
)
@pytest.mark.parametrize("mode", ["full", "fast"])
def test_function_of_arrays_locates_a_wrong_element(rng, argument, element, name, mode):
    arguments = layer_arguments(rng)
    f = WrongGradient(layer_loss, arguments, argument, element, by=0.5)
    with pytest.raises(fa.GradcheckError) as info:
        fa.gradcheck(f, arguments, mode=mode)
    assert info.value.result.failures == [(argument, element)]
    assert f"gradcheck failed for 1 of 29 elements; worst is {name}: analytic" in str(info.value)


def test_function_of_arrays_with_an_array_output_is_checked(rng):
    X, W, b = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)
    layer = fa.compile(lambda X, W, b: fa.tanh(X @ W + b), example=(X, W, b), wrt=(1, 2))
    assert fa.gradcheck(layer, (X, W, b))
    result = fa.gradcheck(layer, (X, W, b), raise_exception=False)
    assert result.passed and result.dot_product is not None
    # per argument: output shape + argument shape, as f.jacobian
    assert [np.shape(a) for a in result.analytic] == [(4, 2, 3, 2), (4, 2, 2)]
    # a derivative left out: named by argument, element and output
    wrong = fa.compile(
        lambda X, W, b: fa.tanh(X @ W + b) + fa.stop_gradient(X @ W),
        example=(X, W, b),
        wrt=(1, 2),
    )
    result = fa.gradcheck(wrong, (X, W, b), raise_exception=False)
    assert not result.passed
    assert re.search(r"argument 1 element \(\d, \d\) of output \(\d, \d\)", result.message)


def test_function_of_arrays_bad_arguments(rng):
    arguments = layer_arguments(rng)
    f = fa.compile(layer_loss, example=arguments)
    with pytest.raises(TypeError, match=r"a tuple like its example.*ndarray of shape \(4, 3\)"):
        fa.gradcheck(f, arguments[0])
    with pytest.raises(TypeError, match="drop grad="):
        fa.gradcheck(f, arguments, grad=f.grad)
    with pytest.raises(ValueError, match=r"argument 0 has shape \(4, 4\)"):
        fa.gradcheck(f, [np.ones((4, 4))] + arguments[1:])
    with pytest.raises(ValueError, match="expected 5 arguments, got 4"):
        fa.gradcheck(f, arguments[:4])
    with pytest.raises(TypeError, match="real point, got dtype complex128 for argument 1"):
        fa.gradcheck(f, [arguments[0], arguments[1] * 1j] + arguments[2:])
    empty = fa.compile(lambda X, E: (X * X).sum() + E.sum(), example=(np.ones(3), np.zeros(0)))
    assert fa.gradcheck(empty, (np.array([1.0, 2.0, 3.0]), np.zeros(0)))  # E has no elements
    with pytest.raises(ValueError, match=r"shapes \[\(0,\), \(0,\)\]: no elements"):
        fa.gradcheck(empty, (np.zeros(0), np.zeros(0)))


# -- callable mistakes get clear errors ---------------------------------------------------
def test_callable_mistakes():
    g = example_1_gradient
    with pytest.raises(TypeError, match="needs a callable .* got float"):
        fa.gradcheck(3.0, [1.0, 2.0], grad=g)
    with pytest.raises(TypeError, match="grad= must be a callable .* got ndarray"):
        fa.gradcheck(example_1, [1.0, 2.0], grad=np.ones(2))
    with pytest.raises(TypeError, match="real point, got dtype complex128 for x; check a comp"):
        fa.gradcheck(example_1, [1.0 + 1j, 2.0], grad=g)
    with pytest.raises(ValueError, match=r"x is empty \(shape \(0,\)\)"):
        fa.gradcheck(example_1, [], grad=g)
    with pytest.raises(ValueError, match=r"x is empty \(shape \(2, 0\)\)"):
        fa.gradcheck(example_1, np.zeros((2, 0)), grad=g)
    with pytest.raises(ValueError, match="got a ragged tuple. A plain callable takes one array"):
        fa.gradcheck(example_1, (np.ones(2), np.ones(3)), grad=g)
    with pytest.raises(ValueError, match="finite point; x has nan at 1"):
        fa.gradcheck(example_1, [1.0, math.nan], grad=g)
    with pytest.raises(TypeError, match="f.x. must return a real number .* got complex"):
        fa.gradcheck(lambda p: complex(p[0], 1.0), [1.0], grad=lambda p: p)
    with pytest.raises(TypeError, match="got NoneType"):
        fa.gradcheck(lambda p: None, [1.0], grad=lambda p: p)
    with pytest.raises(TypeError, match="got str of dtype <U"):
        fa.gradcheck(lambda p: "1.0", [1.0], grad=lambda p: p)
    with pytest.raises(TypeError, match="returned a fastad node"):
        fa.gradcheck(lambda p: fa.var(p[0]) * 2.0, [1.0], grad=lambda p: p)
    with pytest.raises(TypeError, match=r"grad\(x\) must return a real number"):
        fa.gradcheck(example_1, [1.0, 2.0], grad=lambda p: p * 1j)
    with pytest.raises(ValueError, match="f.x. is inf: .* where the function is finite"):
        fa.gradcheck(lambda p: math.inf, [1.0], grad=lambda p: p)
    with pytest.raises(ValueError, match="f.x. is nan at output 1"):
        fa.gradcheck(lambda p: np.array([1.0, math.nan]), [1.0], grad=lambda p: p)
    with pytest.raises(ValueError, match=r"empty array of shape \(0,\)"):
        fa.gradcheck(lambda p: np.zeros(0), [1.0], grad=lambda p: p)
    with pytest.raises(ValueError, match="output shape must not depend on the point"):
        fa.gradcheck(
            lambda p: np.ones(2 if p[0] == 1.0 else 3), [1.0], grad=lambda p: np.ones((2, 1))
        )


def test_jacobian_shape_errors_name_both_shapes():
    value, _ = tanh_layer(np.ones((3, 2)))
    message = (
        r"grad\(x\) has shape \(2, 3\), expected \(2, 2, 2, 3\): f\(x\)'s shape \(2, 2\) "
        r"followed by x's shape \(2, 3\)"
    )
    with pytest.raises(ValueError, match=message):
        fa.gradcheck(value, np.ones((2, 3)), grad=lambda x: np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"shape \(6,\), expected \(2, 3\) like x .*scalar"):
        fa.gradcheck(lambda x: x.sum(), np.ones((2, 3)), grad=lambda x: np.ones(6))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"eps": 0.0}, "eps must be"),
        ({"eps": 2.0}, "eps must be"),
        ({"rtol": -1.0}, "rtol must be"),
        ({"atol": math.inf}, "atol must be"),
        ({"n_directions": 0}, "n_directions must be"),
        ({"mode": "slow"}, "mode must be"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        fa.gradcheck(example_1, [2.0, 3.0], grad=example_1_gradient, **options)


def test_nan_in_the_analytic_jacobian_is_a_failure():
    def g(p):
        J = two_outputs_jacobian(p)
        J[1, 1] = math.nan
        return J

    result = fa.gradcheck(two_outputs, [0.5, 1.0, 2.0], grad=g, raise_exception=False)
    assert result.failures == [(1, 1)] and "worst is input 1 of output 1: analytic nan" in (
        result.message
    )


def test_gradcheck_checks_a_function_compiled_with_wrt():
    # The wrt arguments vary, the others stay data; messages name the caller's positions.
    example = (np.ones(2), np.arange(6.0).reshape(3, 2))
    f = fa.compile(lambda b, A: (A @ b).sum() + (A * A).sum(), example=example, wrt=1)
    assert f.wrt == (1,)
    assert fa.gradcheck(f, example)
    labels = (np.arange(6.0).reshape(3, 2), np.array([0, 1, 1]))
    g = fa.compile(lambda X, y: fa.cross_entropy(X, y), example=labels, wrt=[0])
    assert fa.gradcheck(g, labels)  # integer labels pass through as data
    wrong = fa.compile(
        lambda b, A: (fa.stop_gradient(A) @ b).sum() + (A * A).sum(), example=example, wrt=1
    )
    result = fa.gradcheck(wrong, example, raise_exception=False)
    assert not result.passed
    assert "argument 1 element" in result.message
