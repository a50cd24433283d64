"""``batch=``: a compiled function of arrays called with any number of rows.

References: the gradients NumPy gives by hand, and the same function
compiled (interpreted) for each number of rows.
"""

import pickle

import numpy as np
import pytest

import fastad as fa
from fastad.compiled import array_kernel

IN, HIDDEN, CLASSES, ROWS = 6, 8, 3, 16


def mlp(W1, b1, W2, b2, X, y):
    return fa.cross_entropy(fa.linear(fa.linear_relu(X, W1, b1), W2, b2), y)


def numpy_mlp(W1, b1, W2, b2, X, y):
    """The loss and its gradients for the parameters, written by hand."""
    B = X.shape[0]
    Z = X @ W1 + b1
    H = np.maximum(Z, 0.0)
    logits = H @ W2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    P = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    loss = -np.log(P[np.arange(B), y]).mean()
    dlogits = P.copy()
    dlogits[np.arange(B), y] -= 1.0
    dlogits /= B
    dH = dlogits @ W2.T * (Z > 0.0)
    return loss, [X.T @ dH, dH.sum(axis=0), H.T @ dlogits, dlogits.sum(axis=0)]


@pytest.fixture
def data(rng):
    parameters = [
        rng.normal(size=(IN, HIDDEN)) / 2,
        rng.normal(size=HIDDEN),
        rng.normal(size=(HIDDEN, CLASSES)) / 3,
        rng.normal(size=CLASSES),
    ]
    X = rng.normal(size=(3 * ROWS, IN))
    X[:, 2] = 0.0  # a feature that is zero in every example
    return parameters, X, rng.integers(0, CLASSES, size=3 * ROWS)


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_any_number_of_rows_gives_numpys_gradients(data, backend):
    parameters, X, y = data
    f = fa.compile(
        mlp, example=(*parameters, X[:ROWS], y[:ROWS]), wrt=(0, 1, 2, 3), batch=(4, 5),
        backend=backend,
    )  # fmt: skip
    assert f.batch == (4, 5) and f.rows == ROWS
    assert f.tier("grad").name == backend
    for rows in (ROWS, 5, 1, 3 * ROWS, 5, ROWS, 7, 9, 11, 13, 5):  # sizes come back after others
        arguments = (*parameters, X[:rows], y[:rows])
        value, gradients = f.value_and_grad(arguments)
        loss, expected = numpy_mlp(*arguments)
        assert value == pytest.approx(loss, rel=1e-12)
        for got, want in zip(gradients, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
        assert f(arguments) == value


def test_the_same_numbers_as_a_function_traced_for_that_many_rows(data):
    parameters, X, y = data
    f = fa.compile(mlp, example=(*parameters, X[:ROWS], y[:ROWS]), batch=(4, 5), backend="codegen")
    rows = 7
    arguments = (*parameters, X[:rows], y[:rows])
    traced = fa.compile(mlp, example=arguments, backend="interpret")
    value, gradients = f.value_and_grad(arguments)
    want_value, want_gradients = traced.value_and_grad(arguments)
    assert value == want_value
    for got, want in zip(gradients, want_gradients, strict=True):  # X's gradient too (7 rows)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert gradients[4].shape == (rows, IN)


def regression(W, X, t):
    return ((fa.tanh(X @ W) - t) ** 2).mean()


def test_transforms_take_the_calls_rows(rng):
    W, X, t = rng.normal(size=(IN, 2)), rng.normal(size=(ROWS, IN)), rng.normal(size=(ROWS, 2))
    f = fa.compile(regression, example=(W, X, t), wrt=(0, 1), batch=(1, 2))
    rows = 5
    arguments = (W, X[:rows], t[:rows])
    traced = fa.compile(regression, example=arguments, wrt=(0, 1))
    directions = [rng.normal(size=(IN, 2)), rng.normal(size=(rows, IN))]
    for name in ("jvp", "hvp"):
        got, want = (
            getattr(f, name)(arguments, directions),
            getattr(traced, name)(arguments, directions),
        )
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    value, pulled = f.vjp(arguments, 2.0)
    assert value == traced(arguments)
    np.testing.assert_allclose(pulled[1], traced.vjp(arguments, 2.0)[1][1], rtol=1e-13)
    jacobian = f.jacobian(arguments)
    assert [j.shape for j in jacobian] == [(IN, 2), (rows, IN)]
    np.testing.assert_allclose(jacobian[1], traced.jacobian(arguments)[1], rtol=1e-13)
    hessian = f.hessian(arguments)
    assert hessian[1][1].shape == (rows, IN, rows, IN)
    with pytest.raises(
        ValueError,
        match=r"direction for argument 1 has shape \(16, 6\), the argument has shape \(5, 6\)",
    ):
        f.jvp(arguments, [directions[0], rng.normal(size=(ROWS, IN))])


def test_out_takes_the_calls_shape(data):
    parameters, X, y = data
    f = fa.compile(
        mlp, example=(*parameters, X[:ROWS], y[:ROWS]), wrt=(0, 4), batch=(4, 5), backend="codegen"
    )
    out = [np.empty((IN, HIDDEN)), np.empty((3, IN))]
    value, gradients = f.value_and_grad((*parameters, X[:3], y[:3]), out=out)
    assert gradients[0] is out[0] and gradients[1] is out[1]
    with pytest.raises(ValueError, match=r"out for argument 4 must be .* of shape \(4, 6\)"):
        f.value_and_grad((*parameters, X[:4], y[:4]), out=out)


def test_an_array_output_follows_the_rows(rng):
    X, W = rng.normal(size=(ROWS, IN)), rng.normal(size=(IN, 2))
    for backend in ("interpret", "codegen"):
        f = fa.compile(lambda X, W: fa.tanh(X @ W), example=(X, W), batch=0, backend=backend)
        assert f((X[:3], W)).shape == (3, 2)
        np.testing.assert_allclose(f((X[:3], W)), np.tanh(X[:3] @ W), rtol=1e-14)


@pytest.mark.parametrize(
    "function, named",
    [
        (
            lambda X: X.sum() / X.shape[0],
            r"node 2 \(const\) holds 16.0 at 16 rows and 17.0 at 17",
        ),
        (
            lambda X: (X * np.ones((ROWS, IN))).sum(),
            r"tracing the function again with 17 rows .* failed",
        ),
        (
            lambda X: X.reshape(ROWS * IN).sum(),
            r"tracing the function again|other operands or parameters",
        ),
        (lambda X: X.sum() if X.shape[0] == ROWS else X.mean(), r"has another opcode|records"),
        (lambda X: (X[:4] * 2.0).sum() + X[4:].sum(), r"depends on the number of rows"),
        (lambda X: X.sum() * fa.var(1.0 / X.shape[0]), r"node 2 \(input\) holds 0.0625"),
        (
            lambda X: (X.sum(axis=1) * fa.var(np.arange(X.shape[0], dtype=float))).sum(),
            r"node 2 \(input\) is an array of shape \(16,\), fixed in the program",
        ),
        (lambda X: X.var(ddof=1), r"holds 95.0 at 16 rows and 101.0 at 17"),
    ],
    ids=[
        "length-constant",
        "array-of-rows",
        "reshape",
        "branch-on-rows",
        "slice",
        "leaf-of-a-length",
        "leaf-of-the-rows",
        "var-ddof",
    ],  # fmt: skip
)
def test_a_program_that_depends_on_the_rows_is_refused(rng, function, named):
    X = rng.normal(size=(ROWS, IN))
    with pytest.raises(ValueError, match=named):
        fa.compile(function, example=(X,), batch=0)
    fa.compile(function, example=(X,))  # without batch= it traces as before


def test_bad_calls_name_the_argument(data):
    parameters, X, y = data
    f = fa.compile(mlp, example=(*parameters, X[:ROWS], y[:ROWS]), batch=(4, 5))
    with pytest.raises(ValueError, match=r"argument 5 has 4 rows, argument 4 has 5"):
        f((*parameters, X[:5], y[:4]))
    with pytest.raises(ValueError, match=r"argument 4 has shape \(5, 5\), .* \(rows,\) \+ \(6,\)"):
        f((*parameters, X[:5, :5], y[:5]))
    with pytest.raises(ValueError, match=r"at least one row"):
        f((*parameters, X[:0], y[:0]))
    with pytest.raises(ValueError, match=r"argument 0 has shape \(5, 8\).* name the arguments"):
        f((parameters[0][:5], *parameters[1:], X[:5], y[:5]))


@pytest.mark.parametrize(
    "batch, error, message",
    [
        (True, TypeError, "argument positions"),
        (7, ValueError, "out of range"),
        ((2, 2), ValueError, "at most once"),
        ((), ValueError, "at least one"),
        (1, ValueError, "argument 1 is a scalar"),
        ((0, 2), ValueError, "argument 0 has 16, argument 2 has 3"),
    ],
)
def test_bad_batch_positions(rng, batch, error, message):
    X = rng.normal(size=(ROWS, IN))
    with pytest.raises(error, match=message):
        fa.compile(
            lambda X, s, v: (X * s).sum() + v.sum(), example=(X, 2.0, np.ones(3)), batch=batch
        )


def test_batch_is_for_functions_of_arrays():
    with pytest.raises(TypeError, match="batch= names arguments of a function of arrays"):
        fa.compile(lambda x, y: x * y, example=np.array([1.0, 2.0]), batch=0)


def test_pickles_and_files_keep_the_batch_axis(data, tmp_path):
    parameters, X, y = data
    f = fa.compile(mlp, example=(*parameters, X[:ROWS], y[:ROWS]), wrt=(0, 1), batch=(4, 5))
    f.value_and_grad((*parameters, X[:5], y[:5]))  # the tape now holds a call of 5 rows
    path = tmp_path / "mlp.npz"
    f.save(path)
    for g in (pickle.loads(pickle.dumps(f)), fa.load(path)):
        assert g.batch == (4, 5)
        for rows in (ROWS, 9):
            arguments = (*parameters, X[:rows], y[:rows])
            value, gradients = g.value_and_grad(arguments)
            want_value, want = f.value_and_grad(arguments)
            assert value == want_value
            np.testing.assert_array_equal(gradients[0], want[0])


def test_a_file_whose_batch_axes_do_not_fit_is_refused(data, tmp_path):
    parameters, X, y = data
    f = fa.compile(mlp, example=(*parameters, X[:ROWS], y[:ROWS]), batch=(4, 5))
    state = dict(np.load(_saved(f, tmp_path)))
    meta = str(state["meta"])
    for bad, message in (
        (meta.replace('"batch": [4, 5]', '"batch": [4, 9]'), "distinct argument positions"),
        (meta.replace('"batch": [4, 5]', '"batch": [0, 5]'), "one number of rows"),
        (meta.replace('"batch_axes": {', '"batch_axes": {"1": [0], '), "names no axis"),
    ):
        assert bad != meta
        path = tmp_path / "bad.npz"
        np.savez(path, **{**state, "meta": np.array(bad)})
        with pytest.raises(ValueError, match=message):
            fa.load(path)


def _saved(f, tmp_path):
    path = tmp_path / "f.npz"
    f.save(path)
    return path


def test_generated_code_keeps_few_row_plans(data):
    parameters, X, y = data
    f = fa.compile(mlp, example=(*parameters, X[:ROWS], y[:ROWS]), batch=(4, 5), backend="codegen")
    for rows in range(1, 3 * ROWS + 1):
        f.value_and_grad((*parameters, X[:rows], y[:rows]))
    # the plans the code keeps, by number of rows
    kept = {rows for _, rows in f._generated.code._plans}
    assert ROWS in kept and len(kept) <= 1 + array_kernel.ROW_PLANS


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_variance_over_the_batch_reads_the_calls_rows(rng, backend):
    X = rng.normal(size=(ROWS, IN))
    f = fa.compile(lambda X: X.var(axis=0).sum(), example=(X,), batch=0, backend=backend)
    g = fa.compile(lambda X: X.std(), example=(X,), batch=0, backend="interpret")
    for rows in (ROWS, 3, 2 * ROWS):
        Y = rng.normal(size=(rows, IN))
        assert f((Y,)) == pytest.approx(Y.var(axis=0).sum(), rel=1e-13)
        assert g((Y,)) == pytest.approx(Y.std(), rel=1e-13)


def test_the_traced_rows_survive_a_pickle_after_another_call(data):
    parameters, X, y = data
    f = fa.compile(
        mlp, example=(*parameters, X[:ROWS], y[:ROWS]), batch=(4, 5), backend="interpret"
    )
    f((*parameters, X[:3], y[:3]))  # the tape now holds 3 rows
    g = pickle.loads(pickle.dumps(f))
    assert f.rows == g.rows == ROWS
    assert repr(g) == repr(f)


def test_one_row_where_a_row_vector_meets_the_batch(rng):
    # At one row a (1, N) operand has the batch's shape: written again for one
    # row the kernel would merge other loops. The traced kernel serves it, with
    # its buffers planned from the axes that follow the rows.
    X, w = rng.normal(size=(8, 5)), rng.normal(size=(1, 5))

    def f(X, w):
        return (X * fa.tanh(w)).sum()

    generated = fa.compile(f, example=(X, w), wrt=1, batch=0, backend="codegen")
    reference = fa.compile(f, example=(X, w), wrt=1, batch=0, backend="interpret")
    for rows in (1, 8, 3, 1):
        arguments = (X[:rows], w)
        np.testing.assert_array_equal(generated.grad(arguments), reference.grad(arguments))
        assert generated(arguments) == reference(arguments)
