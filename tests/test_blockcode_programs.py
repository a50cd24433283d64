"""Generated code against the interpreter on programs whose buffers share memory.

Each program is compiled with ``backend="codegen"`` and ``backend="interpret"``
at one example and called on fresh data several times in a row: the values
(``f(args)``), the gradients (``f.value_and_grad``), the vector-Jacobian
products (``f.vjp``), the Jacobian-vector products (``f.jvp``) and the
Hessian-vector products (``f.hvp``, where every op has a second-order rule)
of the generated kernels must be the interpreter's, bit
for bit, or within 1e-13 of the largest element where the softmax family or
the cross-entropy runs (NumPy's vectorised ``exp`` against libmvec's). With
``batch=`` the calls take several numbers of rows, more than the plans kept,
and come back to earlier ones. The programs hold buffers of several sizes
whose live ranges end and begin (so :func:`fastad.compiled.array_kernel.shared_buffers`
puts several in one block), nodes read by two later ops, and broadcast sums.
Before every other call the kernels' buffers are overwritten with nan or
garbage: a kernel reading what an earlier call, or another buffer of the
same memory, left there gives other numbers, or a nan that sends the call
back to the interpreter (counted; finite data never goes back). Where the
function is simple, its gradient written by hand in NumPy is a second
reference.
"""

import numpy as np
import pytest

import fastad as fa
from fastad.compiled import array_kernel

B = 12  # the traced rows


def sparse(rng, shape, scale=1.0):
    """Normal data with exact zeros: a third of the entries and, for a matrix, a column."""
    x = rng.normal(size=shape) * scale
    x[rng.random(shape) < 0.3] = 0.0
    if len(shape) == 2 and shape[1] > 1:
        x[:, shape[1] // 2] = 0.0
    return x


def assert_same(got, want, exact):
    assert np.shape(got) == np.shape(want)
    if exact:
        np.testing.assert_array_equal(got, want)
        return
    scale = max(1.0, float(np.max(np.abs(want)))) if np.size(want) else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * scale)


def assert_all_same(got, want, exact):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert_same(a, b, exact)


@pytest.fixture
def buffers(monkeypatch):
    """Every buffer array the generated code's plans are made of, as they are made."""
    made = []
    original = array_kernel.shared_buffers

    def recording(parameters, ranges):
        found = original(parameters, ranges)
        made.extend(found.values())
        return found

    monkeypatch.setattr(array_kernel, "shared_buffers", recording)
    return made


def scribble(buffers, call, rng):
    """Overwrite every buffer (nan, huge, or noise) before odd calls."""
    if call % 2 == 0:
        return
    for array in buffers:
        kind = call // 2 % 3
        if kind == 0:
            array[...] = np.nan
        elif kind == 1:
            array[...] = 1e300
        else:
            array[...] = rng.normal(size=array.shape) * 1e3


def compare_calls(generated, interpreted, calls, modes, exact, buffers, rng):
    """Run each of ``modes`` of both functions on each argument tuple of ``calls``."""
    before = array_kernel.recheck_count()
    for call, arguments in enumerate(calls):
        kept = [np.array(argument, copy=True) for argument in arguments]
        for mode in modes:
            scribble(buffers, call, rng)
            if mode == "values":
                assert_same(generated(arguments), interpreted(arguments), exact)
            elif mode == "grad":
                value, gradients = generated.value_and_grad(arguments)
                want_value, want = interpreted.value_and_grad(arguments)
                assert_same(value, want_value, exact)
                assert_all_same(gradients, want, exact)
            elif mode in ("jvp", "hvp"):
                assert generated.tier(mode).name == "codegen"
                positions = generated.wrt or range(len(arguments))
                directions = [
                    sparse(rng, np.shape(arguments[p])) if np.ndim(arguments[p]) else 0.625
                    for p in positions
                ]
                if mode == "hvp":
                    assert_all_same(
                        generated.hvp(arguments, directions),
                        interpreted.hvp(arguments, directions),
                        exact,
                    )
                    continue
                value, tangent = generated.jvp(arguments, directions)
                want_value, want = interpreted.jvp(arguments, directions)
                assert_same(value, want_value, exact)
                assert_same(tangent, want, exact)
            else:
                output = interpreted(arguments)
                u = sparse(rng, np.shape(output)) if np.ndim(output) else -1.75
                value, pulled = generated.vjp(arguments, u)
                want_value, want = interpreted.vjp(arguments, u)
                assert_same(value, want_value, exact)
                assert_all_same(pulled, want, exact)
        for argument, copy in zip(arguments, kept, strict=True):  # read, never written
            np.testing.assert_array_equal(argument, copy)
    assert array_kernel.recheck_count() == before


ALL_MODES = ("grad", "values", "vjp", "jvp", "hvp")


def every_mode_matches(generated, interpreted, make, buffers, rng, calls=4):
    """Every mode runs generated code, and gives the interpreter's bits on ``calls``
    argument tuples from ``make(rng)``."""
    for mode in ALL_MODES:
        assert generated.tier(mode).name == "codegen", generated.tier(mode)
    arguments = [make(rng) for _ in range(calls)]
    compare_calls(generated, interpreted, arguments, ALL_MODES, True, buffers, rng)


def rows_match(generated, interpreted, calls, buffers, rng):
    """Under ``batch=``: the gradient runs generated code, and the gradients and values
    of ``calls`` (argument tuples of several numbers of rows) are the interpreter's bits."""
    assert generated.tier("grad").name == "codegen", generated.tier("grad")
    compare_calls(generated, interpreted, calls, ("grad", "values"), True, buffers, rng)


def both(function, example, **options):
    generated = fa.compile(function, example=example, backend="codegen", **options)
    interpreted = fa.compile(function, example=example, backend="interpret", **options)
    return generated, interpreted


# -- a funnel: wide, narrow, wide buffers, each layer's dying before the next is born --------


def funnel(X, W1, b1, W2, b2, W3, b3, r):
    H1 = fa.linear_relu(X, W1, b1)  # (rows, 40)
    H2 = fa.tanh(fa.linear(H1, W2, b2))  # (rows, 3)
    H3 = fa.linear(H2, W3, b3)  # (rows, 16), read twice below
    G = fa.sigmoid(H3 * r) * H3
    return (
        G.mean(axis=0) @ G.sum(axis=0)
        + (H2 * H2).mean()
        + fa.softplus(H1 * 0.5).sum(axis=1).mean()  # H1 read again, at the end
    )


def funnel_arguments(rng, rows):
    b1 = rng.normal(size=40)
    b1[:5] = -20.0  # dead ReLU units
    return (
        sparse(rng, (rows, 24), 2.0),
        rng.normal(size=(24, 40)) / 5,
        b1,
        rng.normal(size=(40, 3)) / 6,
        rng.normal(size=3),
        rng.normal(size=(3, 16)),
        sparse(rng, (16,)),
        sparse(rng, (16,)),
    )


def test_a_funnel_shares_buffers_and_gives_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(
        funnel, funnel_arguments(rng, B), wrt=(1, 2, 3, 4, 5, 6, 7), batch=0
    )
    assert generated.tier("grad").name == "codegen"
    # More numbers of rows than the plans keep (array_kernel.ROW_PLANS), and back again.
    rows = (B, 5, 1, 30, 12, 7, 2, 9, 5, B, 1)
    calls = [funnel_arguments(rng, n) for n in rows]
    compare_calls(
        generated, interpreted, calls, ("grad", "values", "vjp", "jvp", "hvp"), True, buffers, rng
    )
    held, one_each = generated._generated.code.buffer_bytes("grad")
    assert held < 0.75 * one_each  # the test is about shared memory: there is some
    held, one_each = generated._generated.code.buffer_bytes("grad", 30)
    assert held < 0.75 * one_each


# -- broadcast sums: a (n,) row, a (rows, 1) column, a scalar, keepdims and axis sums ----


def broadcasts(A, r, c, s):
    M = A - A.mean(axis=0, keepdims=True)
    T = fa.tanh(M * r + c)  # read by three sums below
    U = T * s - c
    return (
        (U.sum(axis=1, keepdims=True) * c).sum()
        + (T * U).mean(axis=1).sum()
        + (U * U).sum(axis=0) @ r
        + (T / (c * c + 1.0)).mean()
    )


def broadcasts_arguments(rng, rows):
    return sparse(rng, (rows, 9)), sparse(rng, (9,)), sparse(rng, (rows, 1)), 0.75


def test_broadcast_sums_at_several_rows(rng, buffers):
    generated, interpreted = both(broadcasts, broadcasts_arguments(rng, B), batch=(0, 2))
    calls = [broadcasts_arguments(rng, n) for n in (B, 3, 1, 25, B, 3)]
    compare_calls(
        generated, interpreted, calls, ("grad", "vjp", "jvp", "hvp", "values"), True, buffers, rng
    )
    held, one_each = generated._generated.code.buffer_bytes("grad")
    assert held < one_each


# -- an array output: vjp, with a fan-out of the hidden layer -------------------------------


def two_paths(X, W, b, V, c):
    H = fa.linear_relu(X, W, b)  # (rows, 16), read by both paths
    Z = fa.tanh(H @ V)  # (rows, 5)
    return Z * H.sum(axis=1, keepdims=True) + c * Z - fa.sin(Z)


def two_paths_arguments(rng, rows):
    b = rng.normal(size=16)
    b[3] = -30.0
    return (
        sparse(rng, (rows, 7)),
        rng.normal(size=(7, 16)) / 3,
        b,
        rng.normal(size=(16, 5)) / 4,
        sparse(rng, (5,)),
    )


def test_vjp_of_an_array_output_at_several_rows(rng, buffers):
    generated, interpreted = both(two_paths, two_paths_arguments(rng, B), batch=0)
    assert generated.tier("vjp").name == "codegen"
    assert generated.tier("grad").name == "interpret"  # an array output
    calls = [two_paths_arguments(rng, n) for n in (B, B, 4, 1, 40, 4, B)]
    compare_calls(generated, interpreted, calls, ("vjp", "jvp", "values"), True, buffers, rng)
    held, one_each = generated._generated.code.buffer_bytes("vjp")
    assert held < one_each


# -- the softmax family and both cross-entropies, off one fanned-out layer -----------------


def classifier(X, W, b, y, P):
    L = fa.linear(X, W, b)  # (rows, 6), read by five ops
    S = fa.softmax(L, axis=-1)
    return (
        fa.cross_entropy(L, y)
        + 0.5 * fa.cross_entropy(L, P)
        + (S * fa.log_softmax(L, axis=1)).sum(axis=1).mean()
        + fa.logsumexp(L, axis=-1).mean()
    )


def classifier_arguments(rng, rows):
    P = rng.random((rows, 6))
    P[rng.random((rows, 6)) < 0.3] = 0.0
    P[:, 0] += 0.1
    return (
        sparse(rng, (rows, 10), 2.0),
        rng.normal(size=(10, 6)),
        rng.normal(size=6),
        rng.integers(0, 6, size=rows),
        P / P.sum(axis=1, keepdims=True),
    )


def test_softmaxes_and_cross_entropies_within_rounding(rng, buffers):
    example = classifier_arguments(rng, B)
    generated, interpreted = both(classifier, example, wrt=(0, 1, 2, 4), batch=(0, 3, 4))
    calls = [classifier_arguments(rng, n) for n in (B, 2, 33, B, 1, 2)]
    compare_calls(
        generated, interpreted, calls, ("grad", "values", "vjp", "jvp"), False, buffers, rng
    )


# -- a regression whose gradient NumPy gives by hand ----------------------------------------


def regression(X, W, b, T):
    return fa.mse_loss(fa.linear(X, W, b), T) + (W * W).sum() * 0.01


def numpy_regression(X, W, b, T):
    D = X @ W + b - T
    dY = 2.0 * D / D.size
    return (D * D).mean() + 0.01 * (W * W).sum(), [X.T @ dY + 0.02 * W, dY.sum(axis=0)]


def regression_arguments(rng, rows):
    return (
        sparse(rng, (rows, 8)),
        rng.normal(size=(8, 3)),
        rng.normal(size=3),
        sparse(rng, (rows, 3)),
    )


def test_a_regression_gives_numpys_gradients_by_hand(rng, buffers):
    generated, interpreted = both(
        regression, regression_arguments(rng, B), wrt=(1, 2), batch=(0, 3)
    )
    for call, rows in enumerate((B, 6, 1, 21, B)):
        arguments = regression_arguments(rng, rows)
        scribble(buffers, call, rng)
        value, gradients = generated.value_and_grad(arguments)
        want_value, want = numpy_regression(*arguments)
        assert value == pytest.approx(want_value, rel=1e-13)
        for got, expected in zip(gradients, want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
        want_value, want = interpreted.value_and_grad(arguments)
        assert value == want_value
        assert_all_same(gradients, want, True)


# -- one row: a (1, n) operand then has the shape of the (rows, n) loops ------------------


def scaled(X, w, q):
    return fa.tanh(X * fa.tanh(w) + q) * fa.exp(w * 0.5)  # w (1, n), q (1, n): broadcast rows


def scaled_sum(X, w, q):
    return scaled(X, w, q).sum()


def scaled_arguments(rng, rows):
    return sparse(rng, (rows, 5)), rng.normal(size=(1, 5)), sparse(rng, (1, 5))


def test_one_row_arguments_broadcast_at_one_row(rng, buffers):
    # Written again for one row, the program's loops over (1, n) and (rows, n) would
    # merge: the traced kernel, its parameters and its buffers' shapes must serve.
    generated, interpreted = both(scaled, scaled_arguments(rng, B), wrt=(1, 2), batch=0)
    calls = [scaled_arguments(rng, n) for n in (B, 1, 3, 1, B)]
    compare_calls(generated, interpreted, calls, ("vjp", "jvp", "values"), True, buffers, rng)
    generated, interpreted = both(scaled_sum, scaled_arguments(rng, B), wrt=(1, 2), batch=0)
    compare_calls(generated, interpreted, calls, ("grad", "values", "hvp"), True, buffers, rng)


# -- one column: NumPy sums a (rows, 1) array over its rows pairwise, as one run ----------


def column(X, r, c):
    Y = X * r  # (rows, 1) times a (1,) row
    return (
        Y.sum(axis=0).sum()
        + (fa.tanh(Y) * X).mean(axis=0, keepdims=True).sum()
        + (fa.sin(X) * c).sum()  # c (1, 1): its gradient sums the column
    )


def column_arguments(rng, rows):
    return rng.normal(size=(rows, 1)) * 3.0, rng.normal(size=(1,)), rng.normal(size=(1, 1))


def test_sums_over_the_rows_of_one_column(rng, buffers):
    # Row by row in order (NumPy's order for several columns) differs from NumPy's
    # pairwise sum of one column in the last bit for about one data set in three.
    generated, interpreted = both(column, column_arguments(rng, B), batch=0)
    calls = [column_arguments(rng, n) for n in (B, B, 40, 9, B, 40, B, 17)]
    compare_calls(
        generated, interpreted, calls, ("grad", "values", "vjp", "jvp", "hvp"), True, buffers, rng
    )


# -- reshapes and transposes: 2-d and 3-d, of values read again, and as the output ---------


def reshaped(X, W, v):
    H = fa.tanh(X @ W)  # (12, 6), read three times
    T = H.T  # (6, 12)
    F = (T @ X).reshape((3, 10)) * 0.5
    P = np.transpose(F.reshape((3, 2, 5)), (2, 0, 1))  # (5, 3, 2)
    Q = fa.sin(P).reshape((15, 2)) @ v
    return (Q * Q).sum() + (F * F).mean() + (T.reshape((72,)) * H.reshape((72,))).sum()


def square(X):  # a transposed read beside loops of the same shape
    A = fa.sin(X)
    return (A.T * X).sum() + (
        np.transpose(fa.cos(X).reshape((6, 6, 1)), (2, 1, 0)).reshape((6, 6)) * A
    ).mean()


def reshaped_output(X, W):
    return fa.tanh(X @ W).T.reshape((4, -1)) * 2.0


def reshaped_arguments(rng):
    return sparse(rng, (B, 5)), rng.normal(size=(5, 6)), sparse(rng, (2,))


def test_reshapes_and_transposes_give_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(reshaped, reshaped_arguments(rng))
    every_mode_matches(generated, interpreted, reshaped_arguments, buffers, rng)
    generated, interpreted = both(square, (sparse(rng, (6, 6)),))
    calls = [(sparse(rng, (6, 6)),) for _ in range(3)]
    compare_calls(
        generated, interpreted, calls, ("grad", "values", "jvp", "hvp"), True, buffers, rng
    )
    generated, interpreted = both(
        lambda X: fa.sin(X).sum() + fa.cos(X.T).sum(), (sparse(rng, (3, 3)),), batch=0
    )
    assert generated.tier("grad").name == "codegen"  # as many rows as columns, traced
    calls = [(sparse(rng, (n, 3)),) for n in (3, 2, 5)]
    compare_calls(generated, interpreted, calls, ("grad", "values"), True, buffers, rng)
    generated, interpreted = both(reshaped_output, reshaped_arguments(rng)[:2])
    calls = [reshaped_arguments(rng)[:2] for _ in range(4)]
    compare_calls(generated, interpreted, calls, ("values", "vjp", "jvp"), True, buffers, rng)


# -- stacks of matrix products (attention's shape, and einsum's batched contractions) -------


def stacked(X, Y, Z):
    S = X @ np.swapaxes(Y, 1, 2)  # (3, 4, 6)
    H = fa.tanh(S) @ Z  # (3, 4, 2)
    E = np.einsum("bij,bkj->bik", X, fa.sin(Y))  # (3, 4, 6)
    return (H * H).sum() + (E * S).mean()


def stacked_arguments(rng):
    return sparse(rng, (3, 4, 5)), rng.normal(size=(3, 6, 5)), sparse(rng, (3, 6, 2))


def test_stacked_products_give_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(stacked, stacked_arguments(rng))
    for mode in ("grad", "values", "vjp", "jvp", "hvp"):
        assert generated.tier(mode).name == "codegen", generated.tier(mode)
    calls = generated.blas_calls("grad")
    assert "gemm(False, False, v0[b_], v3[b_], v4[b_])" in calls  # X @ Y^T, per matrix
    assert any(call.startswith("gemm(True, False, v0[b_]") for call in calls)  # X^T dS
    calls = [stacked_arguments(rng) for _ in range(4)]
    compare_calls(
        generated, interpreted, calls, ("grad", "values", "vjp", "jvp", "hvp"), True, buffers, rng
    )
    with pytest.raises(NotImplementedError, match=r"shapes \(2, 3, 4, 5\) and \(5, 2\)"):
        fa.compile(
            lambda X, W: (X @ W).sum(),
            example=(np.ones((2, 3, 4, 5)), np.ones((5, 2))),
            backend="codegen",
        )


# -- indexing: a parameter vector sliced into layers, strides, repeated picks, diagonals ----


def indexed(theta, X):
    W = theta[:20].reshape(4, 5)  # a flat parameter vector sliced into a layer
    b = theta[20:25]
    H = fa.tanh(X @ W + b)  # (rows, 5)
    picked = H[[0, 0, 2], [1, 1, 3]]  # repeated positions: their adjoints add up
    return (
        (H * H).sum()
        + theta[3] * theta[-1]  # single elements: scalar nodes
        + H[:, ::2].sum()
        + (H[::-1, 1:4] * X[:, :3]).mean()
        + (picked * picked).sum()
        + fa.sin(theta).sum()  # theta read whole as well
        + np.einsum("ii->i", X[:4, :4] @ W[:, :4]).sum()  # a diagonal
    )


def indexed_arguments(rng):
    return sparse(rng, (25,)), sparse(rng, (6, 4))


def test_indexing_gives_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(indexed, indexed_arguments(rng))
    every_mode_matches(generated, interpreted, indexed_arguments, buffers, rng)
    # An array output that is an index: its VJP and JVP.
    generated, interpreted = both(lambda X: fa.tanh(X)[1:, ::-2], (sparse(rng, (5, 4)),))
    calls = [(sparse(rng, (5, 4)),) for _ in range(3)]
    compare_calls(generated, interpreted, calls, ("values", "vjp", "jvp"), True, buffers, rng)


def test_slices_and_broadcasts_read_strided_and_fancy_indices_read_their_map(rng, buffers):
    # A basic slice or a broadcast is an affine map of the result's indices: generated code
    # computes the positions (no map among its parameters); a fancy index reads its map.
    # Broadcast positions repeat: their adjoints add up in the map's order, the same bits.
    def strided(v, X):
        return (np.broadcast_to(v, (3, 4)) * X[::-2, 1:]).sum() + (X[1:, :2] ** 2).sum()

    arguments = (sparse(rng, (4,)), sparse(rng, (6, 5)))
    generated, interpreted = both(strided, arguments)
    every_mode_matches(
        generated, interpreted, lambda r: (sparse(r, (4,)), sparse(r, (6, 5))), buffers, rng
    )
    assert "gm" not in generated.generated_source("grad").split("def grad(")[1]
    fancy, _ = both(lambda X: X[[0, 2, 2]].sum(), (arguments[1],))
    assert "gm" in fancy.generated_source("grad").split("def grad(")[1]


def test_indexing_by_hand(rng):
    theta = rng.normal(size=7)
    f = fa.compile(
        lambda t: (t[:3] * t[4:]).sum() + t[[1, 1]].sum(), example=(theta,), backend="codegen"
    )
    value, (gradient,) = f.value_and_grad((theta,))
    assert value == pytest.approx((theta[:3] * theta[4:]).sum() + 2 * theta[1], rel=1e-15)
    want = np.zeros(7)
    want[:3] += theta[4:]
    want[4:] += theta[:3]
    want[1] += 2.0
    np.testing.assert_allclose(gradient, want, rtol=1e-15)


def test_indexing_along_the_batch_axis_stays_interpreted(rng, buffers):
    # A gather map holds the traced rows' positions: a parameter may be indexed under
    # batch=, an argument with the batch axis may not (its map would change with the rows).
    def sliced(theta, X):
        return (fa.tanh(X @ theta[:12].reshape(3, 4)) * theta[12:]).sum()

    theta = sparse(rng, (16,))
    generated, interpreted = both(sliced, (theta, sparse(rng, (5, 3))), batch=1)
    calls = [(sparse(rng, (16,)), sparse(rng, (n, 3))) for n in (5, 2, 7)]
    rows_match(generated, interpreted, calls, buffers, rng)

    def columns(X):
        return fa.sin(X[:, ::2]).sum()

    carried = "index of an array that carries the batch's rows"
    with pytest.raises(NotImplementedError, match=carried):
        fa.compile(columns, example=(np.ones((5, 3)),), batch=0, backend="codegen")
    refused = fa.compile(columns, example=(np.ones((5, 3)),), batch=0)
    tier = refused.tier("grad")
    assert tier.name == "interpret" and carried in tier.reason
    X = rng.normal(size=(4, 3))
    np.testing.assert_allclose(refused((X,)), np.sin(X[:, ::2]).sum(), rtol=1e-15)


# -- joining: concatenate and stack, a constant among the operands -----------------------------


def joined(X, W, v):
    H = fa.tanh(X @ W)  # (rows, 3)
    wide = fa.concatenate([H, X, np.ones((X.shape[0], 2)), H * H], axis=1)  # (rows, 12)
    tall = fa.concatenate([W, fa.sin(W), W[:1]], axis=0)  # (9, 3)
    stacked = fa.stack([v, v * v, fa.cos(v)], axis=1)  # (3, 3)
    return (wide * wide).sum() + (tall @ stacked).sum() + (wide[:, 3:6] @ tall[:3]).mean()


def joined_arguments(rng, rows=B):
    return sparse(rng, (rows, 4)), rng.normal(size=(4, 3)), sparse(rng, (3,))


def test_joining_gives_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(joined, joined_arguments(rng))
    every_mode_matches(generated, interpreted, joined_arguments, buffers, rng)
    # Along the features of a batch: the operands' lengths along the axis are fixed.
    generated, interpreted = both(
        lambda X, W: (fa.concatenate([X, fa.tanh(X @ W)], axis=1) ** 2.0).sum(),
        joined_arguments(rng)[:2],
        batch=0,
    )
    calls = [joined_arguments(rng, rows)[:2] for rows in (B, 3, 7)]
    rows_match(generated, interpreted, calls, buffers, rng)
    # An array output that is a concatenate: its VJP and JVP.
    generated, interpreted = both(
        lambda X, W: fa.concatenate([X @ W, np.zeros((B, 1)), fa.exp(X)], axis=1),
        joined_arguments(rng)[:2],
    )
    calls = [joined_arguments(rng)[:2] for _ in range(3)]
    compare_calls(generated, interpreted, calls, ("values", "vjp", "jvp"), True, buffers, rng)


# -- maxima and minima: ties split evenly, nan slices, every kind of reduction --------------


def extremes(X, W):
    H = fa.relu(X @ W)  # dead units: ties at 0 along rows and columns
    return (
        H.max() * 2.0
        + (H.max(axis=1) * H.min(axis=1)).sum()
        + fa.tanh(H.max(axis=0, keepdims=True)).sum()
        + (np.min(X, axis=0) ** 2.0).mean()
        + H.min(axis=1, keepdims=True).sum()
        + np.max(fa.sin(X)) * np.min(W)
    )


def extremes_arguments(rng, rows=B):
    X = sparse(rng, (rows, 4))
    X[1] = X[0]  # a tie between whole rows
    W = rng.normal(size=(4, 6))
    W[:, 2] = W[:, 5]  # and between two columns
    return X, W


def test_maxima_and_minima_give_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(extremes, extremes_arguments(rng))
    every_mode_matches(generated, interpreted, extremes_arguments, buffers, rng)
    # A nan in a slice: its result is nan and the call goes back to the interpreter.
    X, W = extremes_arguments(rng)
    X[3, 1] = np.nan
    value, gradients = generated.value_and_grad((X, W))
    want_value, want = interpreted.value_and_grad((X, W))
    assert np.isnan(value) and np.isnan(want_value)
    assert_all_same(gradients, want, True)
    # Under batch=, maxima over the rows of each example and over the batch.
    generated, interpreted = both(
        lambda X, W: (fa.relu(X @ W).max(axis=1) + fa.relu(X @ W).max(axis=0).sum()).sum(),
        extremes_arguments(rng),
        batch=0,
    )
    calls = [extremes_arguments(rng, rows) for rows in (B, 4, 9)]
    rows_match(generated, interpreted, calls, buffers, rng)


# -- running sums along any axis ----------------------------------------------------------


def running(X, W):
    H = fa.tanh(X @ W)  # (rows, 5)
    C = np.cumsum(H, axis=1)
    D = np.cumsum(H * X[:, :1], axis=0)
    E = np.cumsum(np.stack([H, H * H]), axis=2)  # (2, rows, 5) along the last axis
    return (C * C).sum() + D.mean() + (E[1] * C).sum() + np.cumsum(W).sum()


def running_arguments(rng, rows=B):
    return sparse(rng, (rows, 4)), rng.normal(size=(4, 5))


def test_running_sums_give_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(running, running_arguments(rng))
    every_mode_matches(generated, interpreted, running_arguments, buffers, rng)
    # Along the batch axis and across it, at several numbers of rows.
    generated, interpreted = both(
        lambda X, W: (np.cumsum(fa.sin(X @ W), axis=0) * np.cumsum(X @ W, axis=1)).sum(),
        running_arguments(rng),
        batch=0,
    )
    calls = [running_arguments(rng, rows) for rows in (B, 2, 7)]
    rows_match(generated, interpreted, calls, buffers, rng)


# -- a stack of matrices by one matrix, either side (a sequence through a layer) -----------


def sequence_layer(X, W, V):
    H = fa.tanh(X @ W)  # (3, 4, 5) @ (5, 6): the weights shared by every matrix
    S = V @ fa.sin(H)  # (2, 4) @ (3, 4, 6): one matrix against the stack
    return (H * H).sum() + (S * S).mean()


def sequence_arguments(rng, first=3):
    return sparse(rng, (first, 4, 5)), rng.normal(size=(5, 6)), sparse(rng, (2, 4))


def test_a_stack_by_a_matrix_gives_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(sequence_layer, sequence_arguments(rng))
    every_mode_matches(generated, interpreted, sequence_arguments, buffers, rng)
    # The stack along the batch axis: any number of sequences.
    generated, interpreted = both(sequence_layer, sequence_arguments(rng), batch=0)
    calls = [sequence_arguments(rng, first) for first in (3, 1, 6)]
    rows_match(generated, interpreted, calls, buffers, rng)


def stacks_of_one(A, B, C):
    H = fa.tanh(A @ B)  # (1, 4, 5) @ (3, 5, 6): one matrix's stack broadcast
    S = fa.sin(H) @ C  # (3, 4, 6) @ (1, 6, 2): the other side
    return (H * H).sum() + (S * S).mean() + (C * C).sum()


def stacks_of_one_arguments(rng, stack=3):
    return sparse(rng, (1, 4, 5)), rng.normal(size=(stack, 5, 6)), sparse(rng, (1, 6, 2))


def test_two_stacks_where_one_broadcasts_give_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(stacks_of_one, stacks_of_one_arguments(rng))
    every_mode_matches(generated, interpreted, stacks_of_one_arguments, buffers, rng)
    # The stack along the batch axis: any number of matrices against the one broadcast.
    generated, interpreted = both(stacks_of_one, stacks_of_one_arguments(rng), batch=1)
    calls = [stacks_of_one_arguments(rng, stack) for stack in (3, 2, 7)]
    rows_match(generated, interpreted, calls, buffers, rng)
    # Traced with one matrix along the batch axis, the product's code would change with
    # the rows (a stack of one broadcasts): refused, saying how to trace it.
    with pytest.raises(NotImplementedError, match="trace the example with at least two rows"):
        fa.compile(
            stacks_of_one, example=stacks_of_one_arguments(rng, 1), batch=1, backend="codegen"
        )
    # One-element matrices: NumPy sums a (stack, 1, 1) array's stack pairwise.
    generated, interpreted = both(
        lambda s, m: fa.sin(s @ m).sum() + (m * m).sum(),
        (sparse(rng, (9, 2, 1)), np.ones((1, 1, 1))),
    )
    calls = [(rng.normal(size=(9, 2, 1)), rng.normal(size=(1, 1, 1))) for _ in range(4)]
    compare_calls(generated, interpreted, calls, ("grad", "vjp", "jvp", "hvp"), True, buffers, rng)


def test_a_broadcast_column_that_no_second_order_term_reaches():
    # Regression: in mode hvp's second pass no term reached the (3, 1) column's slot,
    # and the kernel held a loop with no body (it did not compile).
    theta = np.random.default_rng(0).normal(size=15)

    def model(t):
        return (fa.sin(t[:12].reshape(3, 4)) + t[12:].reshape(3, 1)).sum()

    generated, interpreted = both(model, (theta,))
    direction = [np.linspace(-1.0, 1.0, 15)]
    np.testing.assert_array_equal(
        generated.hvp((theta,), direction), interpreted.hvp((theta,), direction)
    )


# -- products of slices: exact zeros, one or two in a slice ------------------------------------


def products(X, w):
    H = 1.0 + 0.5 * fa.tanh(X * w)  # (rows, 4), about 1
    Z = X * w  # exact zeros where X has them: one or two in a slice
    return (
        H.prod()
        + H.prod(axis=1).sum()
        + (Z.prod(axis=0) * 3.0).sum()
        + (Z.prod(axis=1, keepdims=True) ** 2.0).mean()
    )


def products_arguments(rng, rows=6):
    X = rng.normal(size=(rows, 4))
    X[0, 1] = 0.0  # one zero in row 0 and column 1
    X[2, 2] = X[3, 2] = 0.0  # two zeros in column 2
    return X, rng.normal(size=4)


def test_products_give_the_interpreters_bits(rng, buffers):
    generated, interpreted = both(products, products_arguments(rng))
    every_mode_matches(generated, interpreted, products_arguments, buffers, rng)
    # An inf beside a zero: the exact rules give 0 where the plain product gives nan,
    # so the call goes back to the interpreter and returns its numbers.
    X, w = products_arguments(rng)
    X[0, 3] = np.inf
    value, gradients = generated.value_and_grad((X, w))
    want_value, want = interpreted.value_and_grad((X, w))
    assert_same(value, want_value, True)
    assert_all_same(gradients, want, True)


def test_signed_zero_ties_and_one_element_matrices_against_stacks(rng, buffers):
    # A tie of -0.0 and +0.0: max is +0.0 and min -0.0 in both tiers (1 / x shows the sign).
    X = np.array([[0.0, -0.0, -1.0], [-0.0, -0.0, -2.0], [-0.0, 0.0, -3.0]])
    generated, interpreted = both(lambda x: (1.0 / x.max(axis=1)).sum() + 1.0 / x.min(), (X,))
    assert generated.tier("values").name == "codegen"
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(generated((X,)), interpreted((X,)))
    maxima = fa.compile(lambda x: x.max(axis=1), example=(X,), backend="codegen")
    np.testing.assert_array_equal(np.signbit(maxima((X,))), [False, True, False])
    minima = fa.compile(lambda x: x[:, :2].min(axis=1), example=(X,), backend="codegen")
    np.testing.assert_array_equal(np.signbit(minima((X,))), [True, True, True])
    with fa.Tape():
        eager = fa.var(X).max(axis=1).value
    np.testing.assert_array_equal(np.signbit(eager), [False, True, False])
    # A (1, 1) matrix against a stack of 9: its gradient is NumPy's pairwise sum over
    # the stack; an empty stack sends it -0.0.
    generated, interpreted = both(
        lambda s, m: fa.sin(s @ m).sum() + (m * m).sum(), (sparse(rng, (9, 2, 1)), np.ones((1, 1)))
    )
    calls = [(rng.normal(size=(9, 2, 1)), rng.normal(size=(1, 1))) for _ in range(6)]
    compare_calls(generated, interpreted, calls, ("grad", "vjp", "hvp"), True, buffers, rng)
    generated, interpreted = both(
        lambda s, m: (s @ m).sum() + (m * m).sum(), (np.ones((0, 2, 3)), np.ones((3, 4)))
    )
    calls = [(np.ones((0, 2, 3)), rng.normal(size=(3, 4))) for _ in range(3)]
    compare_calls(generated, interpreted, calls, ("grad", "values"), True, buffers, rng)
