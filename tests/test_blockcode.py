"""Generated code for functions of arrays against the interpreter, the exact rules' tier.

Every program runs under ``backend="codegen"`` and ``backend="interpret"``
at the same arguments, dense and with exact zeros (half the entries zero,
whole columns zero, dead ReLU units): values and gradients are equal bit
for bit where the two run the same operations in the same order, and
within 1e-13 of the gradient's largest element where the kernel's ``exp``
is libm's and the interpreter's NumPy's (the softmax family and the
cross-entropy). A nan or inf meeting a zero
sends the call back to the interpreter, which is counted; finite data never
goes back.
"""

import math
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastad as fa
from fastad.compiled import array_kernel
from fastad.kernels import array_program, array_source, summation
from fastad.util.errors import BranchError

B, N, H, C = 12, 7, 5, 4


def assert_generated_gradients_equal_the_interpreters(f, arguments):
    """``f`` compiled both ways gives the same value and gradients, bit for bit:
    ``(generated, interpreted)``."""
    generated = fa.compile(f, example=arguments, backend="codegen")
    interpreted = fa.compile(f, example=arguments, backend="interpret")
    value, gradients = generated.value_and_grad(arguments)
    want_value, want_gradients = interpreted.value_and_grad(arguments)
    assert value == want_value
    for got, want in zip(gradients, want_gradients, strict=True):
        np.testing.assert_array_equal(got, want)
    return generated, interpreted


def sparse(rng, shape, zeros):
    x = rng.normal(size=shape)
    if zeros:
        x[rng.random(shape) < 0.5] = 0.0
        if len(shape) == 2:
            x[:, shape[1] // 2] = 0.0  # a whole column, like a pixel no image lights
    return x


def mlp(W1, b1, W2, b2, X, y):
    return fa.cross_entropy(fa.linear(fa.linear_relu(X, W1, b1), W2, b2), y)


def mlp_args(rng, zeros):
    b1 = rng.normal(size=H)
    b1[0] = -50.0  # a unit dead for every sample
    return (
        rng.normal(size=(N, H)),
        b1,
        rng.normal(size=(H, C)),
        rng.normal(size=C),
        sparse(rng, (B, N), zeros),
        rng.integers(0, C, size=B),
    )


def logreg(w, b, X, y):
    z = X @ w + b
    return (fa.softplus(z) - y * z).mean()


def logreg_args(rng, zeros):
    return (
        rng.normal(size=N),
        0.3,
        sparse(rng, (B, N), zeros),
        (rng.random(B) < 0.5).astype(np.float64),
    )


def layer(X, W, b, G):
    return (fa.linear_relu(X, W, b) * G).sum()


def layer_args(rng, zeros):
    return (
        sparse(rng, (B, N), zeros),
        rng.normal(size=(N, H)),
        rng.normal(size=H),
        rng.normal(size=(B, H)),
    )


def unfused(X, W, b, G):
    return (fa.relu(X @ W + b) * G).sum() / 3.0


def products(A, M, v, u):
    # matrix @ matrix, matrix @ vector, vector @ matrix; fan-out of A
    return ((A @ M) * (A @ M)).sum() + (A @ v).sum() * 0.5 + (u @ A).sum()


def products_args(rng, zeros):
    return (
        sparse(rng, (B, N), zeros),
        rng.normal(size=(N, H)),
        rng.normal(size=N),
        sparse(rng, (B,), zeros),
    )


def reductions(A, s):
    # sums and means over all, the first and the last axis, keepdims, a scalar argument
    return (
        A.sum(axis=0) @ A.mean(axis=0)
        + (A.sum(axis=1, keepdims=True) * A).mean()
        + A.mean() * s
        + (A * s).sum(axis=(0, 1), keepdims=True).sum()
    )


def reductions_args(rng, zeros):
    return sparse(rng, (B, N), zeros), 1.5


def broadcasting(A, r, c, s):
    # a row (N,), a (1, N) row, a column (B, 1), a scalar argument, and exp/log/tanh
    return (fa.tanh(A * r + c) * fa.exp(A - s) + fa.log(A * A + 1.0) / (r + 3.0)).sum()


def broadcasting_args(rng, zeros):
    return (
        sparse(rng, (B, N), zeros),
        rng.normal(size=N),
        rng.normal(size=(B, 1)),
        0.25,
    )


def softmaxes(X, T):
    return (
        (fa.softmax(X, axis=-1) * T).sum()
        + (fa.log_softmax(X, axis=1) * T).sum()
        + fa.logsumexp(X, axis=1).sum()
        + fa.cross_entropy(X, fa.softmax(T, axis=1))
    )


def softmaxes_args(rng, zeros):
    return sparse(rng, (B, C), zeros) * 3.0, sparse(rng, (B, C), zeros)


def mse(Y, T):
    return fa.mse_loss(fa.tanh(Y), T) * 2.0


def mse_args(rng, zeros):
    return sparse(rng, (B, H), zeros), sparse(rng, (B, H), zeros)


def centered(A, r):
    # a column mean read back by the loop after the one summing it (no merging there),
    # a chain of elementwise ops merged into one loop, a power
    M = A - A.mean(axis=0)
    return (M**2).sum() + (fa.tanh(M * r) * fa.exp(-(A * A)) + A.sum(axis=0) * M).mean()


def centered_args(rng, zeros):
    return sparse(rng, (B, N), zeros), rng.normal(size=N)


# name: (function, arguments, wrt, bit for bit)
CASES = {
    "mlp": (mlp, mlp_args, (0, 1, 2, 3), False),
    "logreg": (logreg, logreg_args, (0, 1), True),
    "layer": (layer, layer_args, None, True),
    "unfused": (unfused, layer_args, (1, 2), True),
    "products": (products, products_args, None, True),
    "reductions": (reductions, reductions_args, None, True),
    "broadcasting": (broadcasting, broadcasting_args, None, True),
    "softmaxes": (softmaxes, softmaxes_args, None, False),
    "mse": (mse, mse_args, None, True),
    "centered": (centered, centered_args, None, True),
}


def compiled(name, args, backend):
    function, _, wrt, _ = CASES[name]
    return fa.compile(function, example=args, wrt=wrt, backend=backend)


def assert_close(got, want, exact):
    if exact:
        np.testing.assert_array_equal(got, want)
        return
    scale = max(1.0, float(np.max(np.abs(want)))) if np.size(want) else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * scale)


@pytest.mark.parametrize("zeros", [False, True], ids=["dense", "zeros"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_equals_interpreted(name, zeros, rng):
    _, make, _, exact = CASES[name]
    args = make(rng, zeros)
    generated = compiled(name, args, "codegen")
    interpreted = compiled(name, args, "interpret")
    assert generated.tier("grad").name == "codegen"
    assert interpreted.tier("grad").name == "interpret"
    before = array_kernel.recheck_count()
    for _ in range(2):  # the second call reuses every buffer
        value, gradients = generated.value_and_grad(args)
        want_value, want_gradients = interpreted.value_and_grad(args)
        assert_close(value, want_value, exact)
        assert len(gradients) == len(want_gradients)
        for got, want in zip(gradients, want_gradients, strict=True):
            assert np.shape(got) == np.shape(want)
            assert_close(got, want, exact)
        assert_close(generated(args), interpreted(args), exact)
    # finite data, exact zeros or not, never goes back to the exact rules
    assert array_kernel.recheck_count() == before


@pytest.mark.parametrize("name", ["mlp", "logreg", "layer", "softmaxes"])
def test_generated_gradients_match_central_differences(name, rng):
    _, make, _, _ = CASES[name]
    args = make(rng, True)
    f = compiled(name, args, "codegen")
    assert fa.gradcheck(f, args)


def test_float_and_integer_labels_agree(rng):
    args = mlp_args(rng, True)
    as_floats = (*args[:5], args[5].astype(np.float64))
    f = compiled("mlp", args, "codegen")
    g = compiled("mlp", as_floats, "codegen")
    for first, second in zip(f.grad(args), g.grad(as_floats), strict=True):
        np.testing.assert_array_equal(first, second)
    # the integer function takes float labels too, and the reverse
    np.testing.assert_array_equal(f.grad(as_floats)[0], g.grad(args)[0])


@pytest.mark.parametrize("label", [-1, C, 1.5, math.nan])
def test_bad_label_raises_as_the_interpreter(label, rng):
    args = mlp_args(rng, False)
    labels = args[5].astype(np.float64)
    labels[3] = label
    f = compiled("mlp", (*args[:5], args[5].astype(np.float64)), "codegen")
    with pytest.raises(ValueError, match="sample 3 is not a class"):
        f.value_and_grad((*args[:5], labels))
    with pytest.raises(ValueError, match="sample 3 is not a class"):
        f((*args[:5], labels))


def test_infinity_meeting_a_zero_goes_back_to_the_exact_rules(rng):
    args = list(layer_args(rng, True))
    X = args[0].copy()
    X[0, 1] = math.inf  # row 0 meets zeros of W's column and dead units
    args[0] = X
    W = args[1].copy()
    W[1, 0] = 0.0
    args[1] = W
    generated = compiled("layer", tuple(args), "codegen")
    interpreted = compiled("layer", tuple(args), "interpret")
    before = array_kernel.recheck_count()
    value, gradients = generated.value_and_grad(args)
    assert array_kernel.recheck_count() == before + 1
    want_value, want_gradients = interpreted.value_and_grad(args)
    np.testing.assert_array_equal(value, want_value)
    for got, want in zip(gradients, want_gradients, strict=True):
        np.testing.assert_array_equal(got, want)
    assert np.isfinite(gradients[1]).sum() > 0  # exact rules keep what the inf does not reach


def test_nan_data_gives_the_interpreters_nan(rng):
    args = list(logreg_args(rng, False))
    X = args[2].copy()
    X[4, 2] = math.nan
    args[2] = X
    value, (dw, db) = compiled("logreg", tuple(args), "codegen").value_and_grad(args)
    want, (want_dw, want_db) = compiled("logreg", tuple(args), "interpret").value_and_grad(args)
    assert math.isnan(value) and math.isnan(want)
    np.testing.assert_array_equal(np.isnan(dw), np.isnan(want_dw))
    assert math.isnan(db) == math.isnan(want_db)


def test_out_receives_the_gradients(rng):
    args = mlp_args(rng, True)
    f = compiled("mlp", args, "codegen")
    want = f.grad(args)
    out = [np.full(np.shape(g), 7.0) for g in want]
    out[1] = None  # a fresh array for this one
    value, gradients = f.value_and_grad(args, out=out)
    assert gradients[0] is out[0] and gradients[2] is out[2] and gradients[3] is out[3]
    for got, expected in zip(gradients, want, strict=True):
        np.testing.assert_array_equal(got, expected)
    # the interpreter fills them too
    g = compiled("mlp", args, "interpret")
    want = g.grad(args)
    out = [np.empty(np.shape(x)) for x in want]
    _, gradients = g.value_and_grad(args, out=out)
    assert all(a is b for a, b in zip(gradients, out, strict=True))
    for got, expected in zip(gradients, want, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "bad, error, message",
    [
        # A wrong type or dtype is a TypeError (NumPy's out= too), a wrong shape,
        # layout or length a ValueError.
        (lambda g: [g[0].astype(np.float32), None, None, None], TypeError, "float64.*float32"),
        (lambda g: [[[0.0] * H] * N, None, None, None], TypeError, "got list"),
        (lambda g: [np.empty((H, N)), None, None, None], ValueError, r"shape \(7, 5\)"),
        (lambda g: [np.empty((N, H), order="F")[:, :], None, None, None], ValueError, "C-contig"),
        (lambda g: [None, None, None], ValueError, "a list of 4"),
        (lambda g: g[0], TypeError, "a list of 4"),
    ],
)
def test_bad_out_is_refused(bad, error, message, rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    gradients = f.grad(args)
    with pytest.raises(error, match=message) as refusal:
        f.value_and_grad(args, out=bad(gradients))
    assert refusal.type is error  # not only a subclass


def test_read_only_out_is_refused(rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    frozen = np.empty((N, H))
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f.value_and_grad(args, out=[frozen, None, None, None])


def test_scalar_argument_out_is_refused(rng):
    args = logreg_args(rng, False)
    f = compiled("logreg", args, "codegen")
    with pytest.raises(ValueError, match="scalar argument"):
        f.value_and_grad(args, out=[None, np.empty(())])


def test_other_shape_or_dtype_names_the_argument(rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    with pytest.raises(ValueError, match=r"argument 4 has shape \(3, 7\).*expects \(12, 7\)"):
        f.value_and_grad((*args[:4], args[4][:3], args[5][:3]))
    with pytest.raises(TypeError, match="argument 0 must hold real numbers"):
        f.value_and_grad((args[0].astype(complex), *args[1:]))
    with pytest.raises(ValueError, match="expected 6 arguments"):
        f.value_and_grad(args[:5])


def test_data_arguments_are_not_copied(rng):
    X = np.ascontiguousarray(rng.normal(size=(B, N)))
    assert array_kernel.kernel_argument(X) is X
    labels = rng.integers(0, C, size=B)
    assert array_kernel.kernel_argument(labels, labels=True) is labels  # int64: as it is
    assert array_kernel.kernel_argument(labels).dtype == np.float64  # other integer data
    transposed = np.asfortranarray(X)
    converted = array_kernel.kernel_argument(transposed)
    assert converted.flags.c_contiguous and np.array_equal(converted, X)
    big = np.array([2**63], dtype=np.uint64)
    assert array_kernel.kernel_argument(big, labels=True).dtype == np.float64  # never wraps
    assert array_kernel.kernel_argument(np.float64(2.5)) == 2.5  # a 0-d array: a float


def test_guards_are_checked(rng):
    def branchy(A, s):
        total = (A * A).sum()
        if total > s:
            return total - s
        return s - total

    A = rng.normal(size=(B, N))
    f = fa.compile(branchy, example=(A, 1.0), backend="codegen")
    value, (dA, ds) = f.value_and_grad((A, 1.0))
    np.testing.assert_allclose(value, (A * A).sum() - 1.0, rtol=1e-15)
    np.testing.assert_array_equal(dA, 2.0 * A)
    assert ds == -1.0
    with pytest.raises(BranchError):
        f.value_and_grad((A, 1e9))
    with pytest.raises(BranchError):
        f((A, 1e9))


def test_array_outputs_are_fresh(rng):
    def affine(X, W):
        return fa.tanh(X @ W)

    X, W = rng.normal(size=(B, N)), rng.normal(size=(N, H))
    f = fa.compile(affine, example=(X, W), backend="codegen")
    assert f.tier("values").name == "codegen"
    first = f((X, W))
    second = f((X, 2.0 * W))
    assert first is not second
    libm_tanh = np.vectorize(math.tanh)  # the op table's tanh (NumPy's differs in last bits)
    np.testing.assert_array_equal(first, libm_tanh(X @ W))
    np.testing.assert_array_equal(second, libm_tanh(X @ (2.0 * W)))
    assert f.tier("grad").name == "interpret"  # an array output has no gradient


def test_unsupported_op_stays_interpreted_with_the_reason(rng):
    def solved(A):
        return fa.linalg.solve(A.T @ A + np.eye(N), np.ones(N)).sum()

    def by_numpy(A):
        return np.linalg.solve(A.T @ A + np.eye(N), np.ones(N)).sum()

    A = rng.normal(size=(B, N))
    f = fa.compile(solved, example=(A,))
    tier = f.tier("grad")
    assert tier.name == "interpret" and "'solve'" in tier.reason
    gradient = f.grad((A,))[0]
    for i, j in [(0, 0), (B - 1, N - 1), (1, 2)]:
        step = np.zeros((B, N))
        step[i, j] = 1e-6
        central = (by_numpy(A + step) - by_numpy(A - step)) / 2e-6
        assert gradient[i, j] == pytest.approx(central, rel=1e-6, abs=1e-9)
    with pytest.raises(NotImplementedError, match="'solve'"):
        fa.compile(solved, example=(A,), backend="codegen")


def test_blas_calls_name_the_routines(rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    calls = f.blas_calls("grad")
    assert calls[0].startswith("gemm(False, False")  # X @ W1
    assert any(
        call.startswith("gemm(True, False") for call in calls
    )  # X^T @ dZ, transposed by BLAS
    assert any(call.startswith("gemm(False, True") for call in calls)  # dlogits @ W2^T
    assert len(calls) == 5  # no dX: X is data
    assert all(
        call.startswith("gemv")
        for call in compiled("logreg", logreg_args(rng, 0), "codegen").blas_calls()
    )


def test_the_text_holds_no_values(rng):
    args = mlp_args(rng, False)
    text = compiled("mlp", args, "codegen").generated_source()
    other = compiled("mlp", mlp_args(np.random.default_rng(99), True), "codegen")
    assert other.generated_source() == text  # other values and data: one module
    assert "mlp" not in text.split('"""', 2)[2]  # nor names


def test_pickle_keeps_the_backend(rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    loaded = pickle.loads(pickle.dumps(f))
    assert loaded.backend == "codegen" and loaded.tier().name == "codegen"
    for a, b in zip(loaded.grad(args), f.grad(args), strict=True):
        np.testing.assert_array_equal(a, b)


def test_check_runs_the_interpreter(rng):
    args = list(logreg_args(rng, False))
    X = args[2].copy()
    X[1, 1] = math.inf
    args[2] = X
    f = compiled("logreg", tuple(logreg_args(rng, False)), "codegen")
    with pytest.raises(fa.NonFiniteError):
        f.value_and_grad(args, check=True)


def test_auto_interprets_then_switches(rng, monkeypatch):
    from fastad.compiled import tiers

    monkeypatch.setattr(tiers, "HOT_NODE_POINTS", 1)
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "auto")
    assert f.tier().name == "interpret" or "cache" in f.tier().reason
    want = compiled("mlp", args, "interpret").grad(args)
    for _ in range(2000):
        got = f.grad(args)
        for a, b in zip(got, want, strict=True):
            assert_close(a, b, exact=False)
        if f.tier().name == "codegen":
            break
    assert f.tier().name == "codegen", f.tier().reason


def test_unknown_mode_is_refused(rng):
    f = compiled("mlp", mlp_args(rng, False), "codegen")
    with pytest.raises(ValueError, match="call must be"):
        f.tier("hessian")
    with pytest.raises(ValueError, match="unknown mode"):
        array_source.kernel_source(f._generated.code.program, "hessian")


def test_auto_keeps_long_programs_on_the_interpreter(rng):
    def chain(A):
        for _ in range(20):
            A = fa.tanh(A) + 0.5
        return A.sum()

    f = fa.compile(chain, example=(rng.normal(size=(B, N)),))
    tier = f.tier("grad")
    assert tier.name == "interpret" and "budget" in tier.reason, tier.reason
    assert (
        fa.compile(chain, example=(rng.normal(size=(B, N)),), backend="codegen").tier("grad").name
        == "codegen"
    )  # compiled anyway where asked


def test_blas_keeps_zero_signs_and_multiplies_zero_factors():
    # The premises of skipping the pass over a product's gradient: BLAS sums start at
    # +0.0 (no -0.0 from a sum of -0.0 terms), and 0 * inf is a term (a nan).
    X = np.full((5, 3), -0.0)
    G = np.abs(np.random.default_rng(1).normal(size=(5, 4))) + 1.0
    assert not np.signbit(X.T @ G).any() and not np.signbit(G.T @ X).any()
    assert not np.signbit(X.T @ G[:, 0]).any()
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.zeros((2, 3)) @ np.full((3, 2), np.inf)).all()


def test_integer_data_is_read_as_numbers(rng):
    # Integer arrays that are not class labels (pixels, counts) go to BLAS and the
    # loops as float64, whatever the example held.
    X = rng.integers(0, 5, size=(B, N)).astype(np.uint8)
    W, b = rng.normal(size=(N, H)), rng.normal(size=H)

    def loss(X, W, b):
        return (fa.linear(X, W, b) ** 2).sum() + (X * X * 2.0**40).sum()

    for example in ((X, W, b), (X.astype(np.float64), W, b)):
        generated = fa.compile(loss, example=example, backend="codegen")
        interpreted = fa.compile(loss, example=example, backend="interpret")
        got, want = generated.value_and_grad((X, W, b)), interpreted.value_and_grad((X, W, b))
        assert got[0] == want[0]
        for a, b_ in zip(got[1], want[1], strict=True):
            np.testing.assert_array_equal(a, b_)


def test_scalar_arguments_and_outputs(rng):
    X = rng.normal(size=(B, N))
    f = fa.compile(lambda X, s: (X * fa.exp(s)).sum(), example=(X, 0.5), backend="codegen")
    g = fa.compile(lambda X, s: (X * fa.exp(s)).sum(), example=(X, 0.5), backend="interpret")
    for s in (0.5, np.float64(0.25), np.array(1.5), 2):  # floats, 0-d arrays, ints
        assert f((X, s)) == g((X, s))
        value, (dX, ds) = f.value_and_grad((X, s))
        assert type(value) is float and type(ds) is float
        np.testing.assert_array_equal(dX, g.grad((X, s))[0])
    same = fa.compile(lambda X, s: s, example=(X, 3.0), backend="codegen")
    value, (dX, ds) = same.value_and_grad((X, 3.0))
    assert (value, ds) == (3.0, 1.0) and type(value) is float and type(ds) is float
    np.testing.assert_array_equal(dX, np.zeros((B, N)))
    identity = fa.compile(lambda X: X, example=(X,), backend="codegen")
    out = identity((X,))
    np.testing.assert_array_equal(out, X)
    assert out is not X  # a fresh array


@pytest.mark.parametrize(
    "shapes",
    [
        ((1, 7), (7, 5)),
        ((6, 7), (7, 1)),
        ((1, 7), (7, 1)),
        ((6, 1), (1, 5)),
        ((7,), (7, 5)),
        ((6, 7), (7,)),
        ((1, 7), (7,)),
        ((7,), (7, 1)),
        ((7,), (7,)),
    ],
)
def test_products_of_every_shape_are_numpys(shapes, rng):
    # np.matmul picks dot, gemv or gemm by the shapes; the kernels pick the same.
    A, M = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
    G = rng.normal(size=np.shape(A @ M))

    def loss(A, M):
        product = (A @ M) * G
        return product.sum() if np.ndim(G) else product  # vector @ vector: a scalar

    assert_generated_gradients_equal_the_interpreters(loss, (A, M))
    if np.ndim(A @ M):
        product = fa.compile(lambda A, M: A @ M, example=(A, M), backend="codegen")
        np.testing.assert_array_equal(product((A, M)), A @ M)


def test_a_column_sum_read_by_the_next_loop_is_complete(rng):
    X = rng.normal(size=(B, N))
    for loss in (
        lambda X: ((X / X.sum(axis=0, keepdims=True)) ** 2).sum(),
        lambda X: (X - X.sum(axis=0)).sum() + (X * X.sum(axis=1, keepdims=True)).sum(),
    ):
        generated = fa.compile(loss, example=(X,), backend="codegen")
        interpreted = fa.compile(loss, example=(X,), backend="interpret")
        assert generated((X,)) == interpreted((X,))
        np.testing.assert_array_equal(generated.grad((X,))[0], interpreted.grad((X,))[0])


def test_out_sharing_memory_is_refused(rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    W1 = args[0]
    with pytest.raises(ValueError, match="shares memory"):
        f.value_and_grad(args, out=[W1, None, None, None])
    shared = np.empty((N, H))
    view = shared.reshape(-1)[: H * C].reshape(H, C)  # C-contiguous, inside shared
    with pytest.raises(ValueError, match="shares memory"):
        f.value_and_grad(args, out=[shared, None, view, None])
    f.value_and_grad(args, out=[shared, None, view.copy(), None])  # apart: fine


def test_one_node_twice_in_a_loss(rng):
    X, b = rng.normal(size=(B, N)), rng.normal(size=N)

    def loss(X, b):
        return fa.mse_loss(X, X) + fa.mse_loss(X, X * 1.0) + fa.mse_loss(b, b)

    generated = fa.compile(loss, example=(X, b), backend="codegen")
    interpreted = fa.compile(loss, example=(X, b), backend="interpret")
    for _ in range(2):  # buffers reused
        got, want = generated.value_and_grad((X, b)), interpreted.value_and_grad((X, b))
        assert got[0] == want[0]
        for a, c in zip(got[1], want[1], strict=True):
            np.testing.assert_array_equal(a, c)


def test_read_only_and_other_label_dtypes_compile_nothing_more(rng):
    args = mlp_args(rng, False)
    f = compiled("mlp", args, "codegen")
    want = f.grad(args)
    kernel = f._generated.code.module("grad").grad
    compiled_before = len(kernel.signatures)
    X = args[4].copy()
    X.setflags(write=False)
    got = f.grad((*args[:4], X, args[5].astype(np.int32)))
    assert len(kernel.signatures) == compiled_before  # converted, not compiled again
    for a, c in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_gradients_are_the_callers_to_change(rng, backend):
    # Both tiers hand out fresh writable arrays (a block's .grad on the tape
    # itself is read-only): changing one changes no later call's result.
    X, W = rng.normal(size=(B, N)), rng.normal(size=(N, H))
    f = fa.compile(lambda X, W: (fa.tanh(X @ W) ** 2).sum(), example=(X, W), backend=backend)
    first = f.grad((X, W))
    for g in first:
        assert g.flags.writeable
        g *= 0.0
    again = f.grad((X, W))
    assert all(np.abs(g).max() > 0.0 for g in again)
    assert not any(np.shares_memory(g, h) for g in again for h in first)


def test_live_ranges_take_loop_nests_whole_and_follow_aliases():
    text = '''@kernel
def grad(a, b, c, d):
    """doc"""
    gemm(False, False, a, b, c)
    for i0 in range(c.shape[0]):
        x = c[i0]
        d[i0] = x
    f = d.reshape(d.size)
    for i0 in range(a.shape[0]):
        f[i0] += 1.0
    return 0.0, -1, False
'''
    ranges = array_kernel.live_ranges(text, "grad")
    assert ranges["c"] == (0, 1) and ranges["b"] == (0, 0)
    assert ranges["d"] == (1, 3)  # through its alias f, in the last loop
    assert ranges["a"] == (0, 0)  # a.shape in the loop reads no element


def test_buffers_share_memory_only_where_their_uses_never_meet():
    P = array_program.Parameter
    parameters = [
        P("s_a", "scratch", 0, (4, 3), -1),
        P("s_b", "scratch", 1, (12,), -1),
        P("s_c", "scratch", 2, (5, 5), -1),
        P("s_d", "scratch", 3, (2,), -1),
    ]
    ranges = {"s_a": (0, 2), "s_b": (3, 4), "s_c": (4, 6), "s_d": (1, 8)}
    buffers = array_kernel.shared_buffers(parameters, ranges)
    assert np.shares_memory(buffers["s_a"], buffers["s_b"])  # a is dead when b starts
    assert not np.shares_memory(buffers["s_b"], buffers["s_c"])  # both in statement 4
    assert not np.shares_memory(buffers["s_d"], buffers["s_a"])
    assert not np.shares_memory(buffers["s_d"], buffers["s_c"])
    for parameter in parameters:
        array = buffers[parameter.name]
        assert array.shape == parameter.shape and array.flags.c_contiguous
        assert array.flags.writeable


def test_a_deep_network_holds_half_its_buffers_and_the_interpreters_numbers(rng):
    layers, width = 4, 32

    def deep(*args):
        h = args[-2]
        for i in range(layers):
            h = fa.tanh(fa.linear(h, args[2 * i], args[2 * i + 1]))
        return fa.cross_entropy(h, args[-1])

    arguments = [
        a
        for _ in range(layers)
        for a in (rng.normal(size=(width, width)) / 6, rng.normal(size=width) / 10)
    ] + [rng.normal(size=(64, width)), rng.integers(0, width, 64)]
    wrt = tuple(range(2 * layers))
    f = fa.compile(deep, example=arguments, wrt=wrt, backend="codegen")
    reference = fa.compile(deep, example=arguments, wrt=wrt, backend="interpret")
    value, gradients = f.value_and_grad(arguments)
    want_value, want = reference.value_and_grad(arguments)
    assert value == pytest.approx(want_value, rel=1e-14)
    for got, expected in zip(gradients, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13 * np.abs(expected).max())
    held, one_each = f._generated.code.buffer_bytes("grad")
    assert held <= 0.6 * one_each


@pytest.mark.parametrize("output", ["array", "scalar"])
def test_generated_vjp_equals_the_interpreters_bit_for_bit(rng, output):
    def layer(X, W, b):
        Y = fa.tanh(fa.linear(X, W, b))
        return Y if output == "array" else (Y * Y).mean()

    X, W, b = rng.normal(size=(B, N)), rng.normal(size=(N, H)), rng.normal(size=H)
    X[:, 1] = 0.0
    f = fa.compile(layer, example=(X, W, b), wrt=(1, 2), batch=0, backend="codegen")
    reference = fa.compile(layer, example=(X, W, b), wrt=(1, 2), batch=0, backend="interpret")
    assert f.tier("vjp").name == "codegen"
    for rows in (B, 3):
        arguments = (X[:rows], W, b)
        u = rng.normal(size=(rows, H)) if output == "array" else -1.5
        value, pulled = f.vjp(arguments, u)
        want_value, want = reference.vjp(arguments, u)
        np.testing.assert_array_equal(value, want_value)
        for got, expected in zip(pulled, want, strict=True):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("call", ["vjp", "jvp"])
def test_generated_vjp_and_jvp_keep_the_strong_zeros_of_a_zero_seed(rng, call):
    # A zero cotangent (direction) where the partial is inf: plain arithmetic gives
    # 0 * inf = nan, so the call is computed again by the exact rules, which send
    # nothing there.
    X, c = rng.normal(size=(B, N)), np.ones((B, N))
    c[2, 3] = np.inf
    f = fa.compile(lambda X, c: X * c, example=(X, c), wrt=0, backend="codegen")
    u = np.ones((B, N))
    u[2, 3] = 0.0
    before = array_kernel.recheck_count()
    _, moved = getattr(f, call)((X, c), u)
    assert array_kernel.recheck_count() == before + 1
    assert moved[2, 3] == 0.0 and not np.signbit(moved[2, 3])
    np.testing.assert_array_equal(np.delete(moved.ravel(), 2 * N + 3), 1.0)


def test_vjp_of_an_argument_stays_interpreted_and_cotangents_are_checked(rng):
    X = rng.normal(size=(B, N))
    f = fa.compile(lambda X, W: X, example=(X, X.T), backend="auto")
    assert f.tier("vjp") == ("interpret", "the output is an argument: its VJP is the cotangent")
    g = fa.compile(lambda X, W: X @ W, example=(X, X.T), backend="codegen")
    with pytest.raises(
        ValueError, match=r"the cotangent has shape \(2, 2\), the output \(12, 12\)"
    ):
        g.vjp((X, X.T), np.ones((2, 2)))
    with pytest.raises(ValueError, match="the cotangent must be finite"):
        g.vjp((X, X.T), np.full((B, B), np.nan))


@pytest.mark.parametrize("output", ["array", "scalar"])
def test_generated_jvp_equals_the_interpreters_bit_for_bit(rng, output):
    def layer(X, W, b, s):
        Y = fa.tanh(fa.linear_relu(X, W, b) * s)
        Z = Y - Y.mean(axis=0) + (X @ W).sum(axis=1, keepdims=True)
        return Z if output == "array" else (Z * Z).sum() + fa.mse_loss(Z, Y)

    X, W, b = rng.normal(size=(B, N)), rng.normal(size=(N, H)), rng.normal(size=H)
    X[:, 1] = 0.0
    example = (X, W, b, 0.5)
    f = fa.compile(layer, example=example, wrt=(0, 1, 2, 3), batch=0, backend="codegen")
    reference = fa.compile(layer, example=example, wrt=(0, 1, 2, 3), batch=0, backend="interpret")
    assert f.tier("jvp").name == "codegen"
    before = array_kernel.recheck_count()
    for rows in (B, 3):
        arguments = (X[:rows], W, b, 0.5)
        directions = [rng.normal(size=(rows, N)), rng.normal(size=(N, H)), np.zeros(H), -0.25]
        directions[1][2] = 0.0
        value, tangent = f.jvp(arguments, directions)
        want_value, want = reference.jvp(arguments, directions)
        np.testing.assert_array_equal(value, want_value)
        np.testing.assert_array_equal(tangent, want)
        assert type(tangent) is type(want)
    assert array_kernel.recheck_count() == before  # finite data never goes back


def test_a_fancy_index_after_a_slice_gives_the_interpreters_tangent_bits(rng):
    # NumPy lays out B[:, [1, 0]] with other strides than C's; the interpreter's tangent
    # of it was such an array, whose sum added in another order (1 ulp off, most draws).
    def f(B):
        return np.take(B, np.array([1, 0]), axis=1).sum() + (B[:, [1, 0]] ** 2.0).sum()

    B0 = rng.normal(size=(4, 2))
    generated = fa.compile(f, example=(B0,), backend="codegen")
    interpreted = fa.compile(f, example=(B0,), backend="interpret")
    assert generated.tier("jvp").name == generated.tier("hvp").name == "codegen"
    for _ in range(30):
        B, dB = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
        assert generated.jvp((B,), [dB]) == interpreted.jvp((B,), [dB])
        np.testing.assert_array_equal(generated.hvp((B,), [dB]), interpreted.hvp((B,), [dB]))


def test_generated_jvp_agrees_with_the_gradient(rng):
    # <grad, v> is J v for a scalar output: the generated forward pass against the
    # generated backward one, on an MLP with labels (within rounding: other sums).
    def mlp(X, W1, b1, W2, b2, y):
        return fa.cross_entropy(fa.linear(fa.linear_relu(X, W1, b1), W2, b2), y)

    X = rng.normal(size=(B, N))
    X[rng.random(X.shape) < 0.4] = 0.0
    arguments = (
        X,
        rng.normal(size=(N, H)),
        rng.normal(size=H),
        rng.normal(size=(H, 3)),
        rng.normal(size=3),
        rng.integers(0, 3, B),
    )
    f = fa.compile(mlp, example=arguments, wrt=(1, 2, 3, 4), backend="codegen")
    directions = [rng.normal(size=np.shape(a)) for a in arguments[1:5]]
    value, tangent = f.jvp(arguments, directions)
    gradients = f.grad(arguments)
    inner = sum(float(np.sum(g * d)) for g, d in zip(gradients, directions, strict=True))
    assert tangent == pytest.approx(inner, rel=1e-12)
    assert value == f(arguments)


@pytest.mark.parametrize("wide", [False, True])
def test_generated_jacobians_equal_the_interpreters(rng, wide):
    # Fewer outputs than inputs: a generated VJP per row; more: a JVP per column.
    def layer(X, W, b):
        return fa.tanh(fa.linear(X, W, b)).sum(axis=1)

    rows = 2 if wide else 12
    arguments = (rng.normal(size=(rows, 3)), rng.normal(size=(3, 2)), rng.normal(size=2))
    f = fa.compile(layer, example=arguments, wrt=(1, 2), backend="codegen")
    reference = fa.compile(layer, example=arguments, wrt=(1, 2), backend="interpret")
    assert f.tier("vjp" if wide else "jvp").name == "codegen"
    calls = array_kernel.recheck_count()
    got, want = f.jacobian(arguments), reference.jacobian(arguments)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [a.shape for a in got] == [(rows, 3, 2), (rows, 2)]
    assert array_kernel.recheck_count() == calls


def test_generated_hvp_is_the_gradients_derivative(rng):
    # H v against central differences of the generated gradient along v, and bit for
    # bit against the interpreter's forward-over-reverse; the Hessian by rows of it.
    def net(X, W, b, V, s):
        H = fa.tanh(fa.linear_relu(X, W, b) * s)
        return (fa.softplus(H @ V) * H.sum(axis=1, keepdims=True)).mean() + (W * W).sum() * s

    X = rng.normal(size=(B, N))
    X[rng.random(X.shape) < 0.3] = 0.0
    arguments = (X, rng.normal(size=(N, H)) / 2, rng.normal(size=H), rng.normal(size=(H, 3)), 0.8)
    wrt = (1, 2, 3, 4)
    f = fa.compile(net, example=arguments, wrt=wrt, backend="codegen")
    reference = fa.compile(net, example=arguments, wrt=wrt, backend="interpret")
    assert f.tier("hvp").name == "codegen"
    directions = [rng.normal(size=np.shape(arguments[p])) if p < 4 else 0.5 for p in wrt]
    before = array_kernel.recheck_count()
    products = f.hvp(arguments, directions)
    for got, want in zip(products, reference.hvp(arguments, directions), strict=True):
        np.testing.assert_array_equal(got, want)
    eps = 1e-5

    def moved(sign):
        shifted = list(arguments)
        for p, d in zip(wrt, directions, strict=True):
            shifted[p] = arguments[p] + sign * eps * d
        return f.grad(shifted)

    for got, up, down in zip(products, moved(1.0), moved(-1.0), strict=True):
        np.testing.assert_allclose(got, (np.asarray(up) - down) / (2 * eps), rtol=1e-6, atol=1e-7)
    g = fa.compile(net, example=arguments, wrt=2, backend="codegen")
    hessian = g.hessian(arguments)
    np.testing.assert_array_equal(
        hessian, fa.compile(net, example=arguments, wrt=2, backend="interpret").hessian(arguments)
    )
    np.testing.assert_allclose(hessian, hessian.T, rtol=1e-12, atol=1e-14)
    assert array_kernel.recheck_count() == before


@pytest.mark.parametrize("zeros", [False, True], ids=["dense", "zeros"])
@pytest.mark.parametrize("name", ["mlp", "softmaxes", "mse"])
def test_generated_hvp_of_the_losses_and_the_softmax_family(name, zeros, rng):
    # Their second-order rules in generated code against the interpreter's: bit for bit
    # for mse_loss, within 1e-13 of the largest element where the softmax's exp is
    # libmvec's (or libm's) against NumPy's.
    function, make, wrt, exact = CASES[name]
    args = make(rng, zeros)
    generated = compiled(name, args, "codegen")
    interpreted = compiled(name, args, "interpret")
    assert generated.tier("hvp").name == "codegen"
    positions = wrt or range(len(args))
    before = array_kernel.recheck_count()
    for _ in range(2):  # the second call reuses every buffer
        directions = [sparse(rng, np.shape(args[p]), zeros) for p in positions]
        products = generated.hvp(args, directions)
        for got, want in zip(products, interpreted.hvp(args, directions), strict=True):
            assert_close(got, want, exact)
    assert array_kernel.recheck_count() == before
    if name == "mse":  # both operands one node: the two contributions add up

        def same(Y):
            return fa.mse_loss(fa.tanh(Y), Y * 0.5)

        generated = fa.compile(same, example=args[:1], backend="codegen")
        interpreted = fa.compile(same, example=args[:1], backend="interpret")
        direction = [sparse(rng, np.shape(args[0]), zeros)]
        assert_close(
            generated.hvp(args[:1], direction)[0], interpreted.hvp(args[:1], direction)[0], True
        )


def test_generated_hvp_of_a_classifier_is_the_gradients_derivative_and_rechecks_nans(rng):
    def mlp(X, W, b, y):
        return fa.cross_entropy(fa.linear(X, W, b), y)

    arguments = (
        rng.normal(size=(B, N)),
        rng.normal(size=(N, 3)),
        rng.normal(size=3),
        rng.integers(0, 3, B),
    )
    f = fa.compile(mlp, example=arguments, wrt=(1, 2), backend="codegen")
    assert f.tier("grad").name == "codegen" and f.tier("hvp").name == "codegen"
    directions = [rng.normal(size=(N, 3)), rng.normal(size=3)]
    products = f.hvp(arguments, directions)
    eps = 1e-6

    def gradient_at(sign):
        shifted = list(arguments)
        shifted[1] = arguments[1] + sign * eps * directions[0]
        shifted[2] = arguments[2] + sign * eps * directions[1]
        return f.grad(shifted)

    for got, up, down in zip(products, gradient_at(1.0), gradient_at(-1.0), strict=True):
        np.testing.assert_allclose(got, (up - down) / (2 * eps), rtol=1e-6, atol=1e-8)
    # An inf partial meets a zero direction: plain arithmetic gives a nan, which
    # sends the call to the exact rules (they send nothing there).
    c = np.ones((B, N))
    c[1, 2] = np.inf
    X = rng.normal(size=(B, N))
    g = fa.compile(lambda X, c: (X * X * c).sum(), example=(X, c), wrt=0, backend="codegen")
    v = np.ones((B, N))
    v[1, 2] = 0.0
    before = array_kernel.recheck_count()
    product = g.hvp((X, c), v)
    assert array_kernel.recheck_count() == before + 1
    want = fa.compile(
        lambda X, c: (X * X * c).sum(), example=(X, c), wrt=0, backend="interpret"
    ).hvp((X, c), v)
    np.testing.assert_array_equal(product, want)
    assert product[1, 2] == 0.0 and np.delete(product.ravel(), N + 2).tolist() == [2.0] * (
        B * N - 1
    )


def test_jvp_of_an_argument_stays_interpreted(rng):
    X = rng.normal(size=(B, N))
    f = fa.compile(lambda X, W: X, example=(X, X.T), backend="auto")
    assert f.tier("jvp") == ("interpret", "the output is an argument: its JVP is the direction")
    d = rng.normal(size=X.shape)
    np.testing.assert_array_equal(f.jvp((X, X.T), [d, np.zeros_like(X.T)])[1], d)


def test_sums_of_one_column_are_numpys_pairwise_sums(rng):
    # A (rows, 1) array summed over its rows is one contiguous run to NumPy, which
    # sums it pairwise; so do the generated forward sum and the gradient of a (1,)
    # operand broadcast against it.
    X = rng.normal(size=(40, 1)) * 3.0
    r = rng.normal(size=(1,))
    for f, wrt in (
        (lambda X, r: (X * r).sum(axis=0).sum() + (X * r).mean(axis=0, keepdims=True).sum(), None),
        (lambda X, r: (fa.tanh(X * r) * X).sum(), 1),
    ):
        generated = fa.compile(f, example=(X, r), wrt=wrt, backend="codegen")
        reference = fa.compile(f, example=(X, r), wrt=wrt, backend="interpret")
        for scale in (1.0, 7.0, 0.01):
            arguments = (X * scale, r)
            value, gradients = generated.value_and_grad(arguments)
            want_value, want = reference.value_and_grad(arguments)
            assert value == want_value
            if wrt is not None:  # one gradient, not a list
                gradients, want = [gradients], [want]
            for got, expected in zip(gradients, want, strict=True):
                np.testing.assert_array_equal(got, expected)


def test_pairwise_rows_is_numpys_sum_of_each_row(rng):
    # Every length around the eight running sums and the 128-term blocks, bit for bit.
    for columns in [0, 1, 5, 7, 8, 9, 16, 31, 32, 33, 127, 128, 129, 200, 257, 1000]:
        X = rng.normal(size=(5, columns)) * 10.0 ** rng.integers(-3, 4, size=(5, 1))
        sums = np.empty(5)
        summation.pairwise_rows(X, sums, 0.0)
        np.testing.assert_array_equal(sums, X.sum(axis=1))
    # The start is added last: 0.0 turns a sum of -0.0s (or of nothing) into 0.0 as
    # NumPy's sum does, -0.0 keeps it (reach_sum's strong zero), short rows included.
    for columns in [0, 1, 3, 7, 8, 9, 40, 129]:
        X = np.full((3, columns), -0.0)
        X[2, : columns // 2] = 0.0  # a row with a +0.0 among its -0.0s, where there is room
        for start in (0.0, -0.0):
            summation.pairwise_rows(X, sums[:3], start)
            want = np.add.reduce(X, axis=1, initial=start)
            np.testing.assert_array_equal(sums[:3], want)
            np.testing.assert_array_equal(np.signbit(sums[:3]), np.signbit(want))


@pytest.mark.parametrize("columns", [1, 8, 33, 129])
def test_row_sums_in_generated_code_equal_the_interpreter(rng, columns):
    # Sums of rows in every mode: the forward sum and mean (keepdims too), the gradient
    # of a (rows, 1) operand broadcast along the rows, the tangent of a row sum.
    X = rng.normal(size=(6, columns)) * 3.0
    X[1] = 0.0  # a row of exact zeros
    w = rng.normal(size=(6, 1))

    def f(X, w):
        rows = (fa.tanh(X) * w).sum(axis=1)
        products = (X * w).prod(axis=1)  # its tangent: a row sum from -0.0
        return (rows * rows).sum() + (X * X).mean(axis=1, keepdims=True).sum() + products.sum()

    generated, reference = assert_generated_gradients_equal_the_interpreters(f, (X, w))
    for got, want in zip(generated.grad((X, w)), reference.grad((X, w)), strict=True):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    directions = [rng.normal(size=X.shape), rng.normal(size=w.shape)]
    directions[0][1] = -0.0  # the zero row does not move
    tangent, want = generated.jvp((X, w), directions)[1], reference.jvp((X, w), directions)[1]
    assert tangent == want and np.signbit(tangent) == np.signbit(want)
    assert generated.tier("grad").name == generated.tier("jvp").name == "codegen"


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_a_refused_call_leaves_a_function_that_saves_and_loads(rng, backend, tmp_path):
    X, y = rng.normal(size=(B, C)), rng.integers(0, C, size=B)
    f = fa.compile(lambda X, y: fa.cross_entropy(X, y), example=(X, y), wrt=0, backend=backend)
    wrong = y.copy()
    wrong[2] = C + 1
    with pytest.raises(ValueError, match=f"label {C + 1} of sample 2 is not a class"):
        f.grad((X, wrong))
    path = tmp_path / "f.npz"
    f.save(path)
    for g in (fa.load(path), pickle.loads(pickle.dumps(f))):
        np.testing.assert_array_equal(g.grad((X, y)), f.grad((X, y)))


def test_without_the_jit_generated_code_is_refused_not_wrong():
    # NUMBA_DISABLE_JIT runs kernels as Python, where NumPy's BLAS, an external
    # function of compiled code, is only a declaration: generated code is refused
    # (named), and the interpreter gives the numbers.
    script = textwrap.dedent(
        """
        import numpy as np, fastad as fa
        X, W = np.ones((3, 2)), np.ones((2, 4))
        try:
            fa.compile(lambda X, W: (X @ W).sum(), example=(X, W), backend="codegen")
        except NotImplementedError as error:
            print(error)
        f = fa.compile(lambda X, W: (X @ W).sum(), example=(X, W))
        print(f.tier("grad").reason)
        print(f((X, W)))
        """
    )
    environment = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    refused, reason, value = done.stdout.strip().splitlines()
    assert 'backend="codegen": NUMBA_DISABLE_JIT is set' in refused
    assert "NUMBA_DISABLE_JIT is set" in reason
    assert float(value) == 24.0
