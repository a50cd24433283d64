"""Failing points of compiled batches: BranchError's data, errors="mask", check=True.

References are independent: the masked results at the good points are
compared with a call on the good points alone, and the node a checked call
names is the one the test wrote on a known line.
"""

import inspect
import pickle

import numpy as np
import pytest

import fastad as fa

BACKENDS = ["interpret", "codegen"]


def branchy(x, y):
    r = fa.log(x) * y
    if y > 0:
        return r + x * x
    return r


def two_outputs(x, y):
    if x > 0:
        return x * y, fa.sin(x) + y
    return x, y


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def batch(rng):
    points = rng.uniform(0.5, 2.0, (300, 2))
    bad = np.array([7, 150, 299])
    points[bad, 1] = -1.0  # y > 0 goes the other way there
    return points, bad


# -- BranchError carries its data -------------------------------------------------------
def test_branch_error_names_the_guard_and_every_failing_point(backend, batch):
    points, bad = batch
    f = fa.compile(branchy, example=[1.0, 1.0], backend=backend)
    for call in (f, f.grad, f.value_and_grad):
        with pytest.raises(fa.BranchError) as caught:
            call(points)
        error = caught.value
        assert error.guard == "y > 0.0"
        assert error.traced is True
        np.testing.assert_array_equal(error.indices, bad)
        assert error.point == tuple(points[bad[0]])
        assert error.total == points.shape[0]
        assert f"at point {bad[0]} " in str(error) and "(3 of 300 points differ)" in str(error)


def test_branch_error_names_every_guard_that_failed():
    f = fa.compile(two_guards, example=[1.0, 1.0])
    points = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, -2.0]])
    with pytest.raises(fa.BranchError) as caught:
        f(points)
    error = caught.value
    assert error.guard == "y > 0.0" and error.others == ("x > 0.0",)
    np.testing.assert_array_equal(error.indices, [1, 2, 3])
    assert "(3 of 4 points differ) (other points fail `x > 0.0`)" in str(error)
    assert pickle.loads(pickle.dumps(error.at_offset(5, 10))).others == ("x > 0.0",)


def two_guards(x, y):
    if y > 0:  # checked first: a point failing here never reaches x > 0
        if x > 0:
            return x * y
        return x
    return y


def test_branch_error_at_an_offset_and_through_pickle(batch):
    points, bad = batch
    f = fa.compile(branchy, example=[1.0, 1.0])
    with pytest.raises(fa.BranchError) as caught:
        f(points)
    shifted = caught.value.at_offset(1000, 10_000)
    np.testing.assert_array_equal(shifted.indices, bad + 1000)
    assert f"at point {bad[0] + 1000} " in str(shifted) and "of 10000 points" in str(shifted)
    again = pickle.loads(pickle.dumps(shifted))
    assert type(again) is fa.BranchError and str(again) == str(shifted)
    np.testing.assert_array_equal(again.indices, shifted.indices)


def test_branch_error_of_a_function_of_arrays_has_its_guard():
    def f(x):
        s = x.sum()
        if s > 0:
            return s * 2.0
        return s

    g = fa.compile(f, example=(np.ones(3),))
    with pytest.raises(fa.BranchError) as caught:
        g((-np.ones(3),))
    assert caught.value.guard == "node 1 (sum) > 0.0" and caught.value.point is None
    assert "for these arguments" in str(caught.value)


# -- errors="mask" ----------------------------------------------------------------------
def masked_and_good(call, points, bad, *directions):
    """``call`` with errors="mask", and the same call on the good points alone."""
    good = np.setdiff1d(np.arange(points.shape[0]), bad)
    result, failed = call(points, *directions, errors="mask")
    expected = np.zeros(points.shape[0], np.bool_)
    expected[bad] = True
    np.testing.assert_array_equal(failed, expected)
    alone = call(points[good], *(d[good] for d in directions))
    return result, alone, good


def assert_rows(masked, alone, good, bad):
    masked = np.asarray(masked)
    assert np.isnan(masked[bad]).all()
    np.testing.assert_array_equal(masked[good], alone)


def test_mask_gives_nan_at_failing_points_and_the_same_bits_elsewhere(backend, batch, rng):
    points, bad = batch
    f = fa.compile(branchy, example=[1.0, 1.0], backend=backend)
    directions = rng.normal(size=points.shape)
    values, alone, good = masked_and_good(f, points, bad)
    assert_rows(values, alone, good, bad)
    (values, gradients), alone, good = masked_and_good(f.value_and_grad, points, bad)
    assert_rows(values, alone[0], good, bad)
    assert_rows(gradients, alone[1], good, bad)
    gradients, alone, good = masked_and_good(f.grad, points, bad)
    assert_rows(gradients, alone, good, bad)
    products, alone, good = masked_and_good(f.hvp, points, bad, directions)
    assert_rows(products, alone, good, bad)
    hessians, alone, good = masked_and_good(f.hessian, points, bad)
    assert_rows(hessians, alone, good, bad)
    (values, pushed), alone, good = masked_and_good(f.jvp, points, bad, directions)
    assert_rows(pushed, alone[1], good, bad)
    cotangents = rng.normal(size=points.shape[0])
    (values, pulled), alone, good = masked_and_good(f.vjp, points, bad, cotangents)
    assert_rows(pulled, alone[1], good, bad)


def test_mask_on_a_function_of_several_outputs(backend, rng):
    points = rng.uniform(0.5, 2.0, (50, 2))
    bad = np.array([3, 4])
    points[bad, 0] = -1.0
    f = fa.compile(two_outputs, example=[1.0, 1.0], backend=backend)
    jacobians, alone, good = masked_and_good(f.jacobian, points, bad)
    assert_rows(jacobians, alone, good, bad)
    values, alone, good = masked_and_good(f, points, bad)
    assert_rows(values, alone, good, bad)


def test_mask_at_one_point_and_without_guards():
    f = fa.compile(branchy, example=[1.0, 1.0])
    value, failed = f(np.array([1.0, 1.0]), errors="mask")
    assert value == f(np.array([1.0, 1.0])) and failed.shape == () and not failed
    (value, gradient), failed = f.value_and_grad(np.array([1.0, -1.0]), errors="mask")
    assert failed.dtype == np.bool_ and failed.shape == () and failed
    assert np.isnan(value) and np.isnan(gradient).all()
    plain = fa.compile(lambda x, y: x * y, example=[1.0, 1.0])
    values, failed = plain(np.ones((5, 2)), errors="mask")
    assert failed.dtype == np.bool_ and failed.shape == (5,) and not failed.any()


def test_errors_must_be_raise_or_mask():
    f = fa.compile(branchy, example=[1.0, 1.0])
    for call in (f, f.grad, f.value_and_grad, f.hessian):
        with pytest.raises(ValueError, match=r'errors must be "raise" or "mask", got \'ignore\''):
            call(np.ones((3, 2)), errors="ignore")


# -- check=True ---------------------------------------------------------------------------
def sqrt_line():
    return inspect.getsourcelines(with_sqrt)[1] + 1


def with_sqrt(x, y):
    r = fa.sqrt(x - 1.0) * y  # the node checked calls must name (sqrt_line)
    return r + fa.log(y)


def test_check_names_the_first_point_and_the_node_that_made_a_nan(backend):
    f = fa.compile(with_sqrt, example=[2.0, 1.0], backend=backend, debug=True)
    points = np.array([[2.0, 1.0], [3.0, 2.0], [0.5, 1.0], [0.25, 1.0]])
    values = f(points)  # unchecked: nan, no error
    assert np.isnan(values[2:]).all()
    for call in (f, f.value_and_grad, f.grad):
        with pytest.raises(fa.NonFiniteError) as caught:
            call(points, check=True)
        error = caught.value
        assert error.point == 2 and error.coordinates == (0.5, 1.0) and error.total == 4
        assert error.origin.phase == "forward" and error.origin.op == "sqrt"
        assert error.origin.source == (__file__, sqrt_line())
        assert "point 2 [0.5, 1.0]" in str(error) and "test_batch_errors.py" in str(error)


def test_check_without_debug_names_the_node_and_says_how_to_get_its_line():
    f = fa.compile(with_sqrt, example=[2.0, 1.0])
    with pytest.raises(fa.NonFiniteError, match=r"node \d+ \(sqrt\) produced nan") as caught:
        f(np.array([[0.5, 1.0]]), check=True)
    assert caught.value.origin.source is None
    assert "fa.compile(..., debug=True)" in str(caught.value)
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


def test_check_names_a_backward_origin(backend):
    f = fa.compile(with_sqrt, example=[2.0, 1.0], backend=backend)
    points = np.array([[2.0, 1.0], [1.0, 1.0]])  # sqrt(0): finite value, infinite slope
    assert f(points, check=True)[1] == 0.0  # the values are finite
    with pytest.raises(fa.NonFiniteError) as caught:
        f.value_and_grad(points, check=True)
    origin = caught.value.origin
    assert caught.value.point == 1
    assert origin.phase == "backward" and origin.op == "sqrt" and origin.slot == 0
    assert origin.partial == np.inf


def test_check_passes_finite_results_and_skips_non_finite_inputs():
    f = fa.compile(with_sqrt, example=[2.0, 1.0])
    points = np.array([[2.0, 1.0], [np.nan, 1.0], [np.inf, 2.0]])
    values, gradients = f.value_and_grad(points, check=True)  # nan in, nan out: no error
    np.testing.assert_array_equal(values[0], f(points[0]))


def test_check_reads_values_whatever_the_direction():
    # Regression: a nan cotangent hid a nan value made from finite inputs.
    f = fa.compile(with_sqrt, example=[2.0, 1.0])
    points = np.array([[2.0, 1.0], [0.5, 1.0]])
    with pytest.raises(fa.NonFiniteError) as caught:
        f.vjp(points, np.array([1.0, np.nan]), check=True)
    assert caught.value.point == 1 and caught.value.origin.phase == "forward"
    values, pushed = f.jvp(points[:1], np.array([[np.inf, 0.0]]), check=True)  # inf in, inf out
    assert np.isfinite(values).all() and not np.isfinite(pushed).all()


def test_check_skips_masked_points():
    f = fa.compile(branchy, example=[1.0, 1.0])
    points = np.array([[1.0, 1.0], [1.0, -1.0], [0.5, 2.0]])
    (values, _), failed = f.value_and_grad(points, errors="mask", check=True)
    np.testing.assert_array_equal(failed, [False, True, False])
    with pytest.raises(fa.NonFiniteError) as caught:
        f.value_and_grad(np.array([[1.0, 1.0], [1.0, -1.0], [0.0, 2.0]]), errors="mask", check=True)
    assert caught.value.point == 2  # log(0): the masked point 1 does not count


def test_check_of_a_tangent_that_overflows_says_so():
    # x * 1e300 along 1e300 overflows in the tangent only: the values and the
    # adjoints are finite, so no node's value or edge can be named.
    f = fa.compile(lambda x, y: x * 1e300 + y, example=[1.0, 1.0])
    with pytest.raises(fa.NonFiniteError, match="tangent or second-order rule") as caught:
        f.jvp(np.array([[1.0, 1.0]]), np.array([[1e300, 0.0]]), check=True)
    assert caught.value.origin.phase == "derivative" and caught.value.point == 0


def test_check_at_one_point_and_after_pickling(tmp_path):
    f = fa.compile(with_sqrt, example=[2.0, 1.0], debug=True)
    with pytest.raises(fa.NonFiniteError) as caught:
        f(np.array([0.5, 1.0]), check=True)
    assert caught.value.point == 0
    for again in (pickle.loads(pickle.dumps(f)), _saved_and_loaded(f, tmp_path)):
        with pytest.raises(fa.NonFiniteError) as caught:
            again.grad(np.array([[2.0, 1.0], [0.5, 1.0]]), check=True)
        assert caught.value.origin.source == (__file__, sqrt_line())
    error = pickle.loads(pickle.dumps(caught.value.at_offset(10, 100)))
    assert error.point == 11 and error.total == 100 and "point 11" in str(error)


def _saved_and_loaded(f, folder):
    path = folder / "f.npz"
    f.save(path)
    return fa.load(path)


# -- compact pickles ---------------------------------------------------------------------
def test_a_function_of_ten_thousand_nodes_pickles_under_100_kb():
    def ode(a, b, c, y0):
        y, v = y0, 0.0 * a
        for _ in range(600):
            y, v = y + 0.01 * v, v + 0.01 * (-a * fa.sin(y) - b * v + c * fa.cos(y) * y)
        return y * y + v

    f = fa.compile(ode, example=np.array([1.0, 0.1, 0.3, 0.5]))
    assert len(f.tape) >= 7_000
    data = pickle.dumps(f)
    scaled = len(data) * 10_000 / len(f.tape)
    assert scaled <= 100_000, f"{len(data)} bytes for {len(f.tape)} nodes"
    again = pickle.loads(data)
    points = np.random.default_rng(1).uniform(0.1, 1.0, (50, 4))
    for mine, theirs in zip(again.value_and_grad(points), f.value_and_grad(points), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_damaged_pickle_is_refused():
    f = fa.compile(with_sqrt, example=[2.0, 1.0])
    state = f.__getstate__()
    broken = object.__new__(type(f))
    with pytest.raises(ValueError, match="pickle: not a fastad compiled function file"):
        broken.__setstate__({"npz": state["npz"][:40]})
