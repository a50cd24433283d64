"""Function transforms (fa.grad(fn), fa.value_and_grad, fa.jacfwd/jacrev, fa.hessian(fn),
fa.hvp(fn)): JAX's argnums and has_aux, one trace per signature, the tape forms kept.

References are independent: gradients written by hand in NumPy and central differences.
"""

import sys
import threading

import numpy as np
import pytest

import fastad as fa

RTOL = 1e-10


def central(function, args, position, h=1e-6):
    """d function / d args[position] by central differences, shaped output + argument."""
    args = [np.array(a, dtype=float) for a in args]
    base = np.asarray(function(*args), dtype=float)
    x = args[position]
    out = np.zeros(base.shape + x.shape)
    for index in np.ndindex(x.shape):
        up, down = [a.copy() for a in args], [a.copy() for a in args]
        up[position][index] += h
        down[position][index] -= h
        step = (np.asarray(function(*up)) - np.asarray(function(*down))) / (2 * h)
        out[(...,) + index] = step
    return out


def logistic_loss(w, b, X, y):
    z = X @ w + b
    return (fa.softplus(z) - y * z).sum()


def logistic_reference(w, b, X, y):
    """The loss and its gradients in w and b, by hand."""
    z = X @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    return np.sum(np.logaddexp(0.0, z) - y * z), X.T @ (p - y), np.sum(p - y)


def logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 5))
    X[:, 2] = 0.0  # a whole column of exact zeros
    X[rng.random(X.shape) < 0.3] = 0.0
    y = (rng.random(40) < 0.5).astype(float)
    return rng.normal(size=5), 0.3, X, y


def test_value_and_grad_matches_the_hand_written_gradient():
    w, b, X, y = logistic_data()
    value, (dw, db) = fa.value_and_grad(logistic_loss, argnums=(0, 1))(w, b, X, y)
    want, want_dw, want_db = logistic_reference(w, b, X, y)
    assert value == pytest.approx(want, rel=RTOL)
    np.testing.assert_allclose(dw, want_dw, rtol=RTOL)
    assert isinstance(db, float) and db == pytest.approx(want_db, rel=RTOL)


def test_grad_forms_follow_argnums():
    w, b, X, y = logistic_data(1)
    _, want_dw, want_db = logistic_reference(w, b, X, y)
    single = fa.grad(logistic_loss)(w, b, X, y)  # argnums=0: the array alone
    np.testing.assert_allclose(single, want_dw, rtol=RTOL)
    pair = fa.grad(logistic_loss, (1, 0))(w, b, X, y)  # positional argnums, in that order
    assert isinstance(pair, tuple) and len(pair) == 2
    assert pair[0] == pytest.approx(want_db, rel=RTOL)
    np.testing.assert_allclose(pair[1], want_dw, rtol=RTOL)
    listed = fa.grad(logistic_loss, argnums=[0])(w, b, X, y)
    assert isinstance(listed, tuple) and len(listed) == 1


def test_grad_of_numbers_against_central_differences():
    def f(x, y):
        return fa.sin(x * y) + x**3 / y

    got = fa.grad(f, argnums=(0, 1))(0.7, 1.3)
    for position in (0, 1):
        want = central(lambda x, y: np.sin(x * y) + x**3 / y, (0.7, 1.3), position)
        assert got[position] == pytest.approx(float(want), rel=1e-7)


def test_integer_labels_are_data():
    w, b, X, y = logistic_data(2)
    labels = y.astype(np.int64)
    got = fa.grad(logistic_loss)(w, b, X, labels)
    np.testing.assert_allclose(got, logistic_reference(w, b, X, y)[1], rtol=RTOL)


def test_has_aux_returns_the_auxiliary_output():
    w, b, X, y = logistic_data(3)

    def with_aux(w, b, X, y):
        z = X @ w + b
        return logistic_loss(w, b, X, y), {"scores": z}

    want, want_dw, _ = logistic_reference(w, b, X, y)
    (value, aux), dw = fa.value_and_grad(with_aux, has_aux=True)(w, b, X, y)
    assert value == pytest.approx(want, rel=RTOL)
    np.testing.assert_allclose(aux["scores"], X @ w + b, rtol=RTOL)
    np.testing.assert_allclose(dw, want_dw, rtol=RTOL)
    dw2, aux2 = fa.grad(with_aux, has_aux=True)(w, b, X, y)
    np.testing.assert_allclose(dw2, want_dw, rtol=RTOL)
    np.testing.assert_allclose(aux2["scores"], X @ w + b, rtol=RTOL)


def test_aux_comes_from_the_arguments_as_given():
    # A 0-d array is traced as a number, but aux is fn's own output on the array itself
    # (its .sum() exists): as jax.value_and_grad(has_aux=True) gives it.
    def f(x):
        return (x * x).sum(), x.sum()

    (value, aux), gradient = fa.value_and_grad(f, has_aux=True)(np.array(3.0))
    assert (value, float(aux), gradient) == (9.0, 3.0, 6.0)
    gradient, aux = fa.grad(f, has_aux=True)(np.array(-2.0))
    assert (gradient, float(aux)) == (-4.0, -2.0)


def test_nested_transforms_are_refused_naming_what_to_use():
    with pytest.raises(TypeError, match=r"do not nest .* use fa.hessian\(f\) or fa.hvp\(f\)"):
        fa.grad(fa.grad(lambda x: x**3))(2.0)
    assert fa.hessian(lambda x: x**3)(2.0) == 12.0


def test_a_0d_array_argnums_is_its_integer():
    assert fa.grad(lambda a, b: a * b, argnums=np.array(1))(2.0, 3.0) == 2.0
    with pytest.raises(TypeError, match="argnums must be an int"):
        fa.grad(lambda a, b: a * b, argnums=np.array(1.5))(2.0, 3.0)


def test_a_tangents_error_names_the_argument_by_its_place_in_the_call():
    # A static int before the arrays is not traced: the positions are still the call's.
    def g(n, x, y):
        return (np.sin(x) * y).sum() * n

    x, y = np.array([0.3, 0.7]), np.array([1.0, 2.0])
    with pytest.raises(ValueError, match=r"tangent for argument 2 has shape \(3,\)"):
        fa.hvp(g, argnums=2)((3, x, y), np.ones(3))
    with pytest.raises(ValueError, match=r"tangent for argument 2 has shape \(5,\)"):
        fa.hvp(g, argnums=(1, 2))((3, x, y), (np.ones(2), np.ones(5)))
    hx, hy = fa.hvp(g, argnums=(1, 2))((3, x, y), (np.ones(2), np.zeros(2)))
    np.testing.assert_allclose(hx, -3 * np.sin(x) * y, rtol=1e-14)  # d2/dx2, along x
    np.testing.assert_allclose(hy, 3 * np.cos(x), rtol=1e-14)  # d2/dy dx


def test_one_trace_per_signature():
    traces = []

    def f(x):
        traces.append(np.shape(x))
        return (x * x).sum()

    g = fa.grad(f)
    np.testing.assert_allclose(g(np.array([1.0, 2.0])), [2.0, 4.0])
    np.testing.assert_allclose(g(np.array([3.0, -1.0])), [6.0, -2.0])  # replayed
    assert len(traces) == 1
    np.testing.assert_allclose(g(np.array([1.0, 2.0, 3.0])), [2.0, 4.0, 6.0])  # a new shape
    assert len(traces) == 2
    np.testing.assert_allclose(g(np.array([5.0, 6.0])), [10.0, 12.0])  # the first, kept
    assert len(traces) == 2


@pytest.mark.parametrize("transform", [fa.jacfwd, fa.jacrev])
def test_jacobians_in_jax_layout(transform):
    A = np.array([[1.0, -2.0, 0.0], [0.5, 0.0, 3.0]])

    def f(x, s):
        return fa.tanh(A @ x) * s

    x, s = np.array([0.3, -0.2, 0.5]), 1.7
    J = transform(f)(x, s)
    assert J.shape == (2, 3)
    np.testing.assert_allclose(J, central(lambda x, s: np.tanh(A @ x) * s, (x, s), 0), rtol=1e-7)
    Jx, Js = transform(f, argnums=(0, 1))(x, s)
    np.testing.assert_allclose(Jx, J, rtol=RTOL)
    np.testing.assert_allclose(Js, np.tanh(A @ x), rtol=RTOL)


@pytest.mark.parametrize("transform", [fa.jacfwd, fa.jacrev])
def test_a_constant_array_output_has_a_zero_jacobian(transform):
    # As JAX: an output that no argument reaches, returned as a plain array, is a
    # constant whose Jacobian is zeros of the output's shape then the argument's.
    J = transform(lambda x: np.arange(6.0).reshape(3, 2))(np.ones((2, 4)))
    np.testing.assert_array_equal(J, np.zeros((3, 2, 2, 4)))
    values = fa.compile(lambda x: np.arange(3.0), example=(np.ones(2),), backend="codegen")
    np.testing.assert_array_equal(values([np.ones(2)]), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="needs a scalar output"):
        fa.grad(lambda x: np.ones(3))(np.ones(2))


def test_trace_errors_name_the_argument_as_the_function_does():
    def f(n, x):
        return x[n]

    with pytest.raises(IndexError, match="name='x'"):
        fa.grad(f, argnums=1)(5, np.ones(3))
    with pytest.raises(IndexError, match="name='x1'"):  # no names to read: the position
        fa.grad(lambda *a: a[1][5], argnums=1)(5, np.ones(3))


def test_hessian_and_hvp_of_a_quadratic_form():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(4, 4))

    def f(x):
        return x @ (A @ x) + fa.exp(x).sum()

    x = rng.normal(size=4)
    want = A + A.T + np.diag(np.exp(x))  # by hand
    H = fa.hessian(f)(x)
    np.testing.assert_allclose(H, want, rtol=RTOL, atol=1e-12)
    v = rng.normal(size=4)
    np.testing.assert_allclose(fa.hvp(f)((x,), v), want @ v, rtol=RTOL, atol=1e-12)


def test_hessian_blocks_for_several_arguments():
    def f(x, y):
        return (x * x).sum() * y

    x, y = np.array([1.0, 2.0]), 3.0
    (Hxx, Hxy), (Hyx, Hyy) = fa.hessian(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(Hxx, 2 * y * np.eye(2))
    np.testing.assert_allclose(Hxy, 2 * x)
    np.testing.assert_allclose(Hyx, 2 * x)
    assert float(Hyy) == 0.0
    products = fa.hvp(f, argnums=(0, 1))((x, y), (np.array([1.0, 0.0]), 1.0))
    np.testing.assert_allclose(products[0], 2 * y * np.array([1.0, 0.0]) + 2 * x)
    assert products[1] == pytest.approx(2 * x[0])


def test_the_tape_forms_keep_working():
    with fa.Tape():
        x, y = fa.var(2.0), fa.var(3.0)
        z = x * x * y
        assert fa.grad(z, [x, y]).tolist() == [12.0, 4.0]
        assert fa.grad(z, x) == 12.0
        np.testing.assert_allclose(fa.hessian(z, [x, y]), [[6.0, 4.0], [4.0, 0.0]])
        assert fa.hvp(z, [x, y], [1.0, 0.0]).tolist() == [6.0, 4.0]


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: fa.grad(lambda x: x * x, argnums=1)(2.0), ValueError, "argnums 1 is out of range"),
        (lambda: fa.grad(lambda x: x * x, argnums=-1), ValueError, "do not wrap around"),
        (lambda: fa.grad(lambda x, y: x * y, argnums=(0, 0)), ValueError, "twice"),
        (lambda: fa.grad(lambda x: x * x, argnums=()), ValueError, "empty"),
        (lambda: fa.grad(lambda x: x * x, argnums="0"), TypeError, "argnums must be"),
        (lambda: fa.grad(lambda x: x * x, argnums=1.0), TypeError, "argnums must be"),
        (lambda: fa.grad(lambda x: x * x)(3), TypeError, "int64"),
        (lambda: fa.grad(lambda x: x.sum())(np.arange(3)), TypeError, ".astype(float)"),
        (lambda: fa.grad(lambda x, s: x * x)(2.0, "a"), TypeError, "argument 1 is str"),
        (  # JAX's pytree: a tuple of gradients there; one stacked array was a silent change
            lambda: fa.grad(lambda p: (p[0] * p[1]).sum())((np.ones(2), np.ones(2))),
            TypeError,
            "argument 0 is a tuple; JAX would read it as a pytree",
        ),
        (lambda: fa.hessian(lambda p: p[0] ** 2 * p[1])([2.0, 3.0]), TypeError, "is a list"),
        (lambda: fa.grad(lambda x: x * x)(x=2.0), TypeError, "by position"),
        (lambda: fa.grad(lambda x: (x * x, 1.0), has_aux=True)(np.ones(2)), ValueError, "scalar"),
        (lambda: fa.grad(lambda x: x.sum(), has_aux=True)(np.ones(2)), TypeError, "a pair"),
        (lambda: fa.grad(lambda x: x * x, has_aux=1), TypeError, "has_aux"),
        (lambda: fa.grad(lambda x: x * 2.0)(np.ones(2)), ValueError, "scalar output"),
        (lambda: fa.grad(lambda x: x * x, 0, argnums=1), TypeError, "argnums once"),
        (lambda: fa.grad(2.0), TypeError, "wrt None"),
        (lambda: fa.hessian(2.0), TypeError, "wrt None"),
        (lambda: fa.hvp(lambda x: x * x)(2.0, 1.0), TypeError, "primals is a tuple"),
        (lambda: fa.hvp(lambda x: x * x, 0, 1.0), TypeError, "give the direction to h"),
        (
            lambda: fa.hvp(lambda a, b: a.sum() * b.sum())(
                (np.ones(2), np.ones(3)), [np.ones(2), np.ones(3)]
            ),
            ValueError,
            "has a ragged sequence, the argument has shape (2,) (one per gradient",
        ),
        (
            lambda: fa.hvp(lambda a, b: (a * b).sum())(
                (np.ones(2), np.ones(2)), [np.ones(2), np.ones(2)]
            ),
            ValueError,
            "has shape (2, 2), the argument has shape (2,) (one per gradient",
        ),
    ],
)
def test_bad_input_names_what_is_wrong(call, error, words):
    with pytest.raises(error, match=None) as raised:
        call()
    assert words in str(raised.value), str(raised.value)


def test_python_ints_that_are_not_differentiated_stay_ints():
    v = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(fa.grad(lambda x, k: x[k] ** 2.0)(v, 1), [0.0, 4.0, 0.0])
    np.testing.assert_array_equal(fa.grad(lambda x, k: x[k] ** 2.0)(v, 2), [0.0, 0.0, 6.0])
    counted = fa.grad(lambda x, n: sum(x[i] for i in range(n)))
    np.testing.assert_array_equal(counted(v, 2), [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(counted(v, 3), [1.0, 1.0, 1.0])  # another value: traced again
    shaped = fa.grad(lambda x, n: (x.reshape((n, -1)) ** 2.0).sum())
    np.testing.assert_array_equal(shaped(np.ones(4), 2), [2.0] * 4)
    # A 0-d int array too: static, each value traced once, and aux gets it as itself.
    picked = fa.value_and_grad(lambda x, k: (x[k] ** 2.0, k), has_aux=True)
    for k in (1, 2, 1):
        (value, aux), g = picked(v, np.array(k))
        assert value == v[k] ** 2.0 and isinstance(aux, np.ndarray) and aux == k
        np.testing.assert_array_equal(g, 2.0 * v * (np.arange(3) == k))


class _Warnings:
    """Stands in for the ``warnings`` module of ``fastad.compiled.transforms``: records
    each warning with the file its ``stacklevel`` names. ``warnings.catch_warnings``
    is not thread-safe, and generated code compiling in a background thread (a hot
    function of an earlier test) restores the filters it saved under another test."""

    def __init__(self):
        self.caught = []

    def warn(self, message, category, stacklevel):
        frame = sys._getframe(stacklevel)  # the frame warnings.warn would name
        self.caught.append((str(message), category, frame.f_code.co_filename))


def test_a_static_argument_that_changes_at_every_call_keeps_a_bounded_number_of_traces(
    monkeypatch,
):
    # A step counter given as an int traces at every value: the oldest traces go, with
    # one warning that names the argument, and every call still gives its own answer.
    from fastad.compiled import transforms

    recorder = _Warnings()
    monkeypatch.setattr(transforms, "warnings", recorder)
    v = np.array([1.0, 2.0, 3.0])
    traces = []

    def scaled(x, step):
        traces.append(step)
        return (x * x).sum() * float(step)

    g = fa.grad(scaled)
    limit = transforms.SIGNATURES
    for step in range(limit + 3):
        np.testing.assert_array_equal(g(v, step), 2.0 * v * step)
    assert len(recorder.caught) == 1, recorder.caught
    message, category, filename = recorder.caught[0]
    assert category is RuntimeWarning and filename == __file__  # the user's call
    assert f"more than {limit} signatures" in message
    assert "argument 1 took other ints" in message and "functools.partial" in message
    np.testing.assert_array_equal(g(v, 0), 0.0 * v)  # dropped, so traced again
    assert traces.count(0) == 2 and traces.count(limit + 2) == 1
    # A signature called again is the most recent: it stays while others come and go.
    traces.clear()
    for step in range(limit + 3, 2 * limit + 3):
        g(v, 1)
        g(v, step)
    assert traces.count(1) == 1
    assert len(recorder.caught) == 1  # one warning per transformed function


def test_a_signature_kept_again_after_another_thread_dropped_it_keeps_the_bound(monkeypatch):
    # Thread A retraces a branch of one signature while the main thread's new signatures
    # drop it; A keeps its trace again, and the oldest goes: never more than the bound.
    from fastad.compiled import transforms

    monkeypatch.setattr(transforms, "warnings", _Warnings())
    entered, release = threading.Event(), threading.Event()

    def f(s, step):
        if s <= 1.0 and step == -1 and threading.current_thread().name == "A":
            entered.set()
            release.wait(60)
        return s * s if s > 1.0 else fa.sin(s)

    g = fa.grad(f)
    g(2.0, -1)
    thread = threading.Thread(target=lambda: g(0.5, -1), name="A")
    thread.start()
    assert entered.wait(60)
    for step in range(transforms.SIGNATURES):
        assert g(2.0, step) == 4.0
    release.set()
    thread.join(60)
    traced = next(
        c.cell_contents for c in g.__closure__ if isinstance(c.cell_contents, transforms._Traced)
    )
    assert len(traced._traced) == transforms.SIGNATURES
    assert g(0.5, -1) == np.cos(0.5)


def test_shapes_that_change_at_every_call_warn_that_shapes_retrace(monkeypatch):
    from fastad.compiled import transforms

    recorder = _Warnings()
    monkeypatch.setattr(transforms, "warnings", recorder)
    g = fa.grad(lambda x: (x * x).sum())
    for n in range(1, transforms.SIGNATURES + 2):
        np.testing.assert_array_equal(g(np.ones(n)), 2.0 * np.ones(n))
    assert len(recorder.caught) == 1, recorder.caught
    assert "argument 0 changed shape or dtype" in recorder.caught[0][0]
    assert "pad the last batch" in recorder.caught[0][0]


def test_branches_on_values_trace_once_per_way_they_go():
    # As jax.grad runs Python's control flow: each call takes the branch its values take.
    traces = []

    def f(s):
        traces.append(s)
        return s * s if s > 1.0 else fa.sin(s)

    g = fa.grad(f)
    for s in (2.0, 0.5, 3.0, 0.1, 1.5):
        assert g(s) == (2.0 * s if s > 1.0 else np.cos(s))
    assert len(traces) == 2  # one trace per branch, replayed for the other points
    hessian = fa.hessian(lambda x: (x**3.0).sum() if x.sum() > 0 else -(x**2.0).sum())
    np.testing.assert_array_equal(hessian(np.ones(2)), 6.0 * np.eye(2))
    np.testing.assert_array_equal(hessian(-np.ones(2)), -2.0 * np.eye(2))


def test_a_branch_that_keeps_a_factorisation_away_runs_the_other_branch():
    # The kept trace of the first branch runs cholesky before its guard is checked: its
    # LinAlgError must not stand in for the branch these arguments take.
    def h(A, s):
        return fa.linalg.cholesky(A).sum() if s > 0.0 else (A * A).sum()

    g = fa.grad(h)
    B = np.array([[1.0, 2.0], [2.0, 1.0]])  # not positive definite
    g(2.0 * np.eye(2), 1.0)
    np.testing.assert_array_equal(g(B, -1.0), 2.0 * B)
    with pytest.raises(np.linalg.LinAlgError):  # the branch these arguments take fails
        g(B, 1.0)
    np.testing.assert_array_equal(g(B, -1.0), 2.0 * B)


def test_an_index_that_is_a_node_is_refused_naming_it():
    # A traced integer array (data) cannot index: the op's index is fixed at recording.
    logits, labels = np.ones((2, 3)), np.array([1, 2])
    f = fa.grad(lambda z, y: -fa.log_softmax(z, axis=1)[np.arange(2), y].sum())
    with pytest.raises(TypeError, match=r"with the node Block\(shape=\(2,\).*fa.cross_entropy"):
        f(logits, labels)


def test_jax_forms_of_pairs_and_tuples():
    v = np.array([1.0, 2.0, 3.0])
    (value, aux), g = fa.value_and_grad(lambda x: [(x * x).sum(), "note"], has_aux=True)(v)
    assert value == 14.0 and aux == "note"
    np.testing.assert_array_equal(g, 2.0 * v)
    h = fa.hvp(lambda x: (x**3.0).sum())
    np.testing.assert_array_equal(h((v,), (np.ones(3),)), 6.0 * v)  # jax.jvp's tuples
    with pytest.raises(TypeError, match="argnums once"):
        fa.grad(lambda x: x, 1, argnums=0)
