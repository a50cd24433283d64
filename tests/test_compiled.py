"""fa.compile: trace once, replay at one point, in batches, on threads, from files."""

import math
import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dags, evaluate

import fastad as fa
from fastad import demo
from fastad.compiled import replay

EXAMPLE_2 = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])


def eager_value_and_grad(function, point):
    with fa.Tape():
        leaves = [fa.var(v) for v in point]
        out = function(*leaves)
        out.backward()
    return out.value, np.array([leaf.grad for leaf in leaves])


@pytest.fixture
def example_2():
    return fa.compile(demo.example_2)


# -- replay equals eager -----------------------------------------------------------
def test_example_2_replay_equals_eager(example_2):
    value, gradient = example_2.value_and_grad(EXAMPLE_2)
    eager_value, eager_gradient = eager_value_and_grad(demo.example_2, EXAMPLE_2)
    assert value == eager_value
    np.testing.assert_array_equal(gradient, eager_gradient)
    assert example_2(EXAMPLE_2) == value
    np.testing.assert_array_equal(example_2.grad(EXAMPLE_2), gradient)
    assert len(example_2.tape) == 13


def test_replay_at_new_points_equals_a_fresh_recording(example_2, rng):
    points = rng.uniform(-2, 2, size=(50, 6))
    values, gradients = example_2.value_and_grad(points)
    for point, value, gradient in zip(points, values, gradients, strict=True):
        eager_value, eager_gradient = eager_value_and_grad(demo.example_2, point)
        assert value == eager_value
        np.testing.assert_array_equal(gradient, eager_gradient)


@settings(max_examples=60)
@given(dags(), st.lists(st.floats(-2, 2), min_size=3, max_size=3))
def test_random_expressions_replay_equals_eager(dag, new_point):
    point, steps = dag
    new_point = np.array(new_point[: len(point)])
    f = fa.compile(lambda *xs: evaluate(steps, xs), num_inputs=len(point), example=point)
    value, gradient = f.value_and_grad(new_point)
    eager_value, eager_gradient = eager_value_and_grad(lambda *xs: evaluate(steps, xs), new_point)
    assert value == eager_value
    np.testing.assert_allclose(gradient, eager_gradient, rtol=1e-15, atol=0)


# -- batches, lanes and threads ------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2])
def test_batch_equals_per_point(example_2, rng, threads):
    # More points than one block and than the parallel threshold, and not a
    # multiple of the lane count, so partial blocks are exercised too.
    points = rng.uniform(-3, 3, size=(replay.PARALLEL_MIN_POINTS + 517, 6))
    values, gradients = example_2.value_and_grad(points, threads=threads)
    for index in rng.choice(points.shape[0], size=40, replace=False):
        value, gradient = example_2.value_and_grad(points[index])
        assert values[index] == value
        np.testing.assert_array_equal(gradients[index], gradient)
    np.testing.assert_array_equal(example_2(points, threads=threads), values)


def test_one_and_two_threads_agree_bit_for_bit(example_2, rng):
    points = rng.normal(size=(20_000, 6))
    one = example_2.value_and_grad(points, threads=1)
    two = example_2.value_and_grad(points, threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


def test_concurrent_calls_from_python_threads(example_2, rng):
    points = rng.normal(size=(64, 6))
    expected = [example_2.value_and_grad(p) for p in points]
    results = {}

    def worker(name):
        results[name] = [example_2.value_and_grad(p) for p in points for _ in range(5)][::5]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got in results.values():
        for (value, gradient), (want_value, want_gradient) in zip(got, expected, strict=True):
            assert value == want_value
            np.testing.assert_array_equal(gradient, want_gradient)


def test_empty_batch(example_2):
    example_2(EXAMPLE_2)
    values, gradients = example_2.value_and_grad(np.empty((0, 6)))
    assert values.shape == (0,) and gradients.shape == (0, 6)


# -- forward and reverse mode ---------------------------------------------------------
def test_jvp_and_vjp_satisfy_the_dot_product_identity(rng):
    f = fa.compile(lambda x, y, z: (fa.sin(x * y) + z, x * fa.exp(z) - y, fa.tanh(x + y + z)))
    for _ in range(20):
        p, v, u = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)
        _, jv = f.jvp(p, v)
        _, jtu = f.vjp(p, u)
        assert np.dot(u, jv) == pytest.approx(np.dot(jtu, v), rel=1e-14, abs=1e-14)


def test_jacobian_matches_central_differences(rng):
    def function(x, y):
        return (x * y, fa.sin(x), x / y)

    f = fa.compile(function)
    p = np.array([0.7, 1.3])
    jac = f.jacobian(p)
    assert jac.shape == (3, 2)
    step = 1e-6
    for i in range(2):
        e = np.zeros(2)
        e[i] = step
        numeric = (f(p + e) - f(p - e)) / (2 * step)
        np.testing.assert_allclose(jac[:, i], numeric, rtol=1e-7, atol=1e-9)
    batch = f.jacobian(rng.normal(size=(5, 2)) + 2.0)
    assert batch.shape == (5, 3, 2)


def test_output_shapes():
    scalar = fa.compile(lambda x, y: x * y)
    vector = fa.compile(lambda x, y: [x * y, x + y])
    p, batch = np.array([2.0, 3.0]), np.array([[2.0, 3.0], [1.0, 1.0]])
    assert scalar(p) == 6.0 and isinstance(scalar(p), float)
    assert scalar(batch).shape == (2,) and scalar.grad(batch).shape == (2, 2)
    assert scalar.jacobian(p).tolist() == [3.0, 2.0]
    np.testing.assert_array_equal(vector(p), [6.0, 5.0])
    assert vector(batch).shape == (2, 2) and vector.num_outputs == 2
    value, pulled = vector.vjp(batch, np.array([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_array_equal(pulled, [[3.0, 2.0], [1.0, 1.0]])
    value, pushed = scalar.jvp(batch, np.ones((2, 2)))
    np.testing.assert_array_equal(pushed, [5.0, 2.0])
    with pytest.raises(ValueError, match="needs a scalar output; this function has 2 outputs"):
        vector.grad(p)


def test_constant_output_and_unused_inputs():
    f = fa.compile(lambda x, y: (x * 2.0, 3.0))
    np.testing.assert_array_equal(f.jacobian(np.array([1.0, 5.0])), [[2.0, 0.0], [0.0, 0.0]])


# -- data-dependent control flow -------------------------------------------------------
def branchy(x, y):
    if x > 0:
        return x * y
    return -x * y


def test_branch_change_is_caught_at_one_point():
    f = fa.compile(branchy)
    assert f(np.array([2.0, 3.0])) == 6.0
    assert f(np.array([0.5, 3.0])) == 1.5  # same side: fine
    with pytest.raises(fa.BranchError, match=r"`x > 0.0`, which was True when traced"):
        f(np.array([-2.0, 3.0]))
    with pytest.raises(fa.BranchError, match="point 0"):
        f.value_and_grad(np.array([-2.0, 3.0]))


def test_branch_change_is_caught_in_batches():
    f = fa.compile(branchy, example=[-1.0, 1.0])
    points = np.column_stack([np.linspace(-3, -0.1, 5000), np.ones(5000)])
    np.testing.assert_array_equal(f(points), -points[:, 0])
    points[1234, 0] = 0.5
    points[4321, 0] = 0.25
    for threads in (1, 2):
        with pytest.raises(fa.BranchError, match=r"at point 1234 .*2 of 5000 points differ"):
            f.value_and_grad(points, threads=threads)


def test_bool_of_a_node_is_a_guard_too():
    f = fa.compile(lambda x: x * 2.0 if x else x + 1.0, example=[3.0])
    assert f(1.0) == 2.0
    with pytest.raises(fa.BranchError, match=r"bool\(x\)"):
        f(0.0)


def test_values_cannot_escape_a_trace():
    with pytest.raises(fa.TraceError, match="float"):
        fa.compile(lambda x: math.sin(x), example=[1.0])
    with pytest.raises(fa.TraceError, match=r"\.value"):
        fa.compile(lambda x: x * x.value, example=[1.0])


# -- fa.where ----------------------------------------------------------------------------
def test_where_selects_and_routes_the_gradient(rng):
    f = fa.compile(lambda x, y: fa.where(x > y, x * x, 3.0 * y))
    for x, y in rng.normal(size=(20, 2)):
        value, gradient = f.value_and_grad(np.array([x, y]))
        if x > y:
            assert value == x * x and gradient.tolist() == [2 * x, 0.0]
        else:
            assert value == 3.0 * y and gradient.tolist() == [0.0, 3.0]


def test_where_untaken_side_cannot_leak_nan():
    def safe_sqrt(x):
        return fa.where(x > 0, fa.sqrt(x), 0.0)

    f = fa.compile(safe_sqrt)
    for x, value, slope in [(-1.0, 0.0, 0.0), (0.0, 0.0, 0.0), (4.0, 2.0, 0.25)]:
        got_value, got_gradient = f.value_and_grad(np.array([x]))
        assert (got_value, got_gradient[0]) == (value, slope)
        _, tangent = f.jvp(np.array([x]), np.array([1.0]))
        assert tangent == slope
        with fa.Tape():
            node = fa.var(x)
            y = safe_sqrt(node)
            y.backward()
        assert (y.value, node.grad) == (value, slope)


def test_where_preserves_signed_zero_and_infinities():
    with fa.Tape():
        x = fa.var(-0.0)
        assert math.copysign(1.0, fa.where(x < 1.0, x, 5.0).value) == -1.0
        assert fa.where(x > 1.0, x, math.inf).value == math.inf
    assert fa.where(True, 1.0, 2.0) == 1.0 and fa.where(0.0, 1.0, 2.0) == 2.0


# -- pickling and files -----------------------------------------------------------------
def test_pickle_round_trip(example_2, rng):
    example_2(EXAMPLE_2)
    restored = pickle.loads(pickle.dumps(example_2))
    points = rng.normal(size=(100, 6))
    np.testing.assert_array_equal(restored.grad(points), example_2.grad(points))
    assert restored.tape.table() == example_2.tape.table()


def test_save_and_load_round_trip(tmp_path, rng):
    f = fa.compile(branchy, example=[1.0, 2.0])
    path = tmp_path / "branchy.npz"
    f.save(path)
    loaded = fa.load(path)
    points = rng.uniform(0.1, 2, size=(10, 2))
    np.testing.assert_array_equal(loaded.value_and_grad(points)[1], f.value_and_grad(points)[1])
    with pytest.raises(fa.BranchError):
        loaded(np.array([-1.0, 1.0]))  # the guards travel with it


def test_untraced_function_cannot_be_pickled():
    with pytest.raises(TypeError, match="not been traced"):
        pickle.dumps(fa.compile(lambda x: x * 2.0))


def test_load_validates(tmp_path):
    f = fa.compile(lambda x, y: x * y, example=[1.0, 2.0])
    path = tmp_path / "f.npz"
    f.save(path)
    state = dict(np.load(path))
    for corrupt, message in [
        ({"in0": np.array([-1, -1, 5])}, "node 2"),
        ({"inputs": np.array([0, 2])}, "distinct leaf"),
        ({"outputs": np.array([7])}, "outputs"),
        ({"guards": np.array([[2, 3]])}, "guard outcomes"),
    ]:
        np.savez(path, **(state | corrupt))
        with pytest.raises(ValueError, match=message):
            fa.load(path)


# -- bad input ---------------------------------------------------------------------------
def test_bad_points_raise_clear_errors(example_2):
    with pytest.raises(
        ValueError, match=r"shape \(6,\) or a batch of shape \(N, 6\).*got shape \(5,\)"
    ):
        example_2(np.zeros(5))
    with pytest.raises(ValueError, match=r"got shape \(2, 3, 6\)"):
        example_2(np.zeros((2, 3, 6)))
    with pytest.raises(TypeError, match="real numbers, got dtype <U"):
        example_2(["a"] * 6)
    with pytest.raises(TypeError, match="complex"):
        example_2(np.zeros(6, complex))
    with pytest.raises(ValueError, match="threads must be a positive int"):
        example_2(np.zeros((3, 6)), threads=0)
    with pytest.raises(ValueError, match=r"tangent shape \(5,\)"):
        example_2.jvp(EXAMPLE_2, np.zeros(5))
    with pytest.raises(ValueError, match="cotangent shape"):
        example_2.vjp(np.zeros((4, 6)), np.zeros(3))


def test_integer_input_is_converted_and_nan_propagates(example_2):
    assert example_2([1, 2, 3, 4, 5, 6]) == example_2(np.arange(1.0, 7.0))
    value, gradient = example_2.value_and_grad(np.array([np.nan, 1, 1, 1, 1, 1.0]))
    assert math.isnan(value) and np.isnan(gradient[[0, 1, 4, 5]]).all()


def test_signature_errors():
    with pytest.raises(TypeError, match="num_inputs"):
        fa.compile(lambda *xs: xs[0])
    with pytest.raises(TypeError, match="callable"):
        fa.compile(3.0)
    f = fa.compile(lambda *xs: xs[0] * xs[1], num_inputs=2)
    assert f([2.0, 4.0]) == 8.0
    with pytest.raises(TypeError, match="output 0 .* str"):
        fa.compile(lambda x: "x", example=[1.0])


def test_block_value_cannot_escape_a_trace():
    with pytest.raises(fa.TraceError, match=r"\.value"):
        fa.compile(lambda X: (X * float(X.value.max())).sum(), example=(np.array([1.0, 2.0]),))


def test_empty_batch_of_a_guarded_function():
    def h(x, y):
        return x * y if x > 0 else y

    f = fa.compile(h, example=np.array([1.0, 2.0]))
    assert f(np.empty((0, 2))).shape == (0,)
    values, gradients = f.value_and_grad(np.empty((0, 2)))
    assert values.shape == (0,) and gradients.shape == (0, 2)


def test_load_rejects_missing_outputs(tmp_path):
    f = fa.compile(lambda x, y: x * y, example=np.array([1.0, 2.0]))
    f.save(tmp_path / "f.npz")
    state = dict(np.load(tmp_path / "f.npz"))
    np.savez(tmp_path / "bad.npz", **(state | {"outputs": np.array([], np.int64)}))
    with pytest.raises(ValueError, match="at least one input and output"):
        fa.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "bad.npz", **(state | {"outputs": np.array([2, 2], np.int64)}))
    with pytest.raises(ValueError, match="exactly one output"):
        fa.load(tmp_path / "bad.npz")


def test_vjp_accepts_a_one_element_cotangent_for_a_scalar_output():
    f = fa.compile(lambda x, y: x * y)
    value, pulled = f.vjp(np.array([2.0, 3.0]), np.array([2.0]))
    assert value == 6.0 and pulled.tolist() == [6.0, 4.0]
    assert math.isfinite(value)


# -- results into the caller's arrays (out=) ----------------------------------------------
@pytest.mark.parametrize("backend", ["interpret", "codegen"])
@pytest.mark.parametrize("threads", [1, 2])
def test_out_receives_the_same_bits_and_is_returned(backend, threads, rng):
    f = fa.compile(demo.example_2, example=np.ones(6), backend=backend)
    points = rng.normal(size=(5000, 6))
    points[::7, 0] = 0.0  # exact zeros in the data
    expected_value, expected_gradient = f.value_and_grad(points, threads=threads)
    values, gradients = np.full(5000, 7.0), np.full((5000, 6), 7.0)
    found = f.value_and_grad(points, threads=threads, out=(values, gradients))
    assert found[0] is values and found[1] is gradients
    np.testing.assert_array_equal(values, expected_value)
    np.testing.assert_array_equal(gradients, expected_gradient)
    only = np.empty((5000, 6))
    assert f.grad(points, threads=threads, out=only) is only
    np.testing.assert_array_equal(only, expected_gradient)
    half = f.value_and_grad(points, threads=threads, out=(None, np.empty((5000, 6))))
    np.testing.assert_array_equal(half[0], expected_value)
    into = np.empty(5000)
    assert f(points, threads=threads, out=into) is into
    np.testing.assert_array_equal(into, f(points))


def test_out_of_several_outputs_and_of_masked_and_rechecked_points():
    wide = fa.compile(lambda a, b: [a * b, fa.sqrt(a) * 0.0 + b], example=[1.0, 2.0])
    points = np.array([[1.0, 2.0], [0.0, 3.0], [4.0, -1.0]])  # sqrt'(0) is inf: rechecked
    into = np.empty((3, 2))
    assert wide(points, out=into) is into
    np.testing.assert_array_equal(into, wide(points))

    def branchy(x, y):
        return x * y if x > y else x - y

    f = fa.compile(branchy, example=[2.0, 1.0], backend="codegen")
    points = np.array([[3.0, 1.0], [0.5, 1.0], [4.0, 2.0]])
    values, gradients = np.zeros(3), np.zeros((3, 2))
    (found, failed) = f.value_and_grad(points, errors="mask", out=(values, gradients))
    assert found[0] is values and failed.tolist() == [False, True, False]
    assert np.isnan(values[1]) and np.isnan(gradients[1]).all()
    np.testing.assert_array_equal(gradients[[0, 2]], [[1.0, 3.0], [2.0, 4.0]])
    with pytest.raises(fa.BranchError):
        f.value_and_grad(points, out=(values, gradients))


def test_bad_out_arrays_are_refused_by_name(example_2):
    points = np.ones((4, 6))
    f = example_2
    cases = [
        ((np.ones(4, np.float32), None), TypeError, r"out\[0\] must be a float64 NumPy array"),
        (([0.0] * 4, None), TypeError, "got list"),
        ((np.ones(5), None), ValueError, r"out\[0\] has shape \(5,\); this call writes \(4,\)"),
        ((None, np.ones((4, 7))), ValueError, r"this call writes \(4, 6\)"),
        ((None, np.ones((6, 4)).T), ValueError, "must be C-contiguous"),
        ((None, points), ValueError, r"out\[1\] shares memory with the points"),
    ]
    for out, error, message in cases:
        with pytest.raises(error, match=message):
            f.value_and_grad(points, out=out)
    shared = np.ones(4 * 7)
    with pytest.raises(ValueError, match=r"out\[1\] shares memory with out\[0\]"):
        f.value_and_grad(points, out=(shared[:4], shared[:24].reshape(4, 6)))
    read_only = np.ones(4)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        f(points, out=read_only)
    with pytest.raises(ValueError, match=r"out= takes the results of a batch, points of shape"):
        f(np.ones(6), out=np.ones(1))
    with pytest.raises(ValueError, match="one point returns a new float"):
        f.value_and_grad(np.ones(6), out=(None, np.ones((1, 6))))
    with pytest.raises(TypeError, match=r"out must be a tuple \(values, gradients\)"):
        f.value_and_grad(points, out=np.ones((4, 6)))
    with pytest.raises(ValueError, match=r"out has shape \(4, 1\)"):
        f(points, out=np.ones((4, 1)))
