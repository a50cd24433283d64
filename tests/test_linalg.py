"""fa.linalg: values as NumPy and SciPy give them, gradients against hand-written formulas,
singular matrices as NumPy treats them, shapes named in errors, np.linalg on nodes.

Every op also has a row in tests/test_registry.py (VJP and JVP against central
differences, replay bit for bit), a Hessian-vector case in tests/test_second_order.py
and a loss on data with exact zeros in tests/test_exact_zeros.py.
"""

import numpy as np
import pytest
import scipy.linalg

import fastad as fa


@pytest.fixture
def spd(rng):
    A = rng.normal(size=(4, 4))
    return A @ A.T + 4.0 * np.eye(4)


def test_values_are_numpys_and_scipys(spd, rng):
    b = rng.normal(size=(4, 2))
    L = np.linalg.cholesky(spd)
    with fa.Tape():
        K = fa.var(spd)
        np.testing.assert_array_equal(fa.linalg.cholesky(K).value, L)
        np.testing.assert_allclose(fa.linalg.solve(K, b).value, np.linalg.solve(spd, b), rtol=1e-13)
        np.testing.assert_array_equal(
            fa.linalg.solve_triangular(fa.var(L), b, lower=True).value,
            scipy.linalg.solve_triangular(L, b, lower=True),
        )
        np.testing.assert_array_equal(fa.linalg.inv(K).value, np.linalg.inv(spd))
        assert fa.linalg.det(K).value == np.linalg.det(spd)
        sign, logdet = fa.linalg.slogdet(K)
        assert (sign.value, logdet.value) == tuple(float(v) for v in np.linalg.slogdet(spd))
        assert fa.linalg.norm(K).value == pytest.approx(np.linalg.norm(spd), rel=1e-15)
    # Without a node: the values alone.
    np.testing.assert_array_equal(fa.linalg.cholesky(spd), L)
    assert fa.linalg.slogdet(spd) == tuple(float(v) for v in np.linalg.slogdet(spd))


def test_gradients_match_the_hand_written_formulas(spd, rng):
    b = rng.normal(size=4)
    inverse = np.linalg.inv(spd)
    with fa.Tape():
        K = fa.var(spd)
        fa.linalg.slogdet(K)[1].backward()
        np.testing.assert_allclose(K.grad, inverse.T, rtol=1e-12)  # d log|det| = A^-T
        fa.linalg.det(K).backward()
        np.testing.assert_allclose(K.grad, np.linalg.det(spd) * inverse.T, rtol=1e-12)
        fa.linalg.solve(K, b).sum().backward()  # d sum(A^-1 b) = -A^-T 1 x^T
        x = np.linalg.solve(spd, b)
        np.testing.assert_allclose(K.grad, -np.outer(inverse.T @ np.ones(4), x), rtol=1e-12)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [0, "N", 1, "T", 2, "C"])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_solve_triangular_takes_scipys_trans_and_unit_diagonal(lower, trans, unit_diagonal, rng):
    A = rng.normal(size=(4, 4)) + 4.0 * np.eye(4)
    A[np.diag_indices(4)] = np.inf if unit_diagonal else A.diagonal()  # never read then
    B, G = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    options = {"lower": lower, "trans": trans, "unit_diagonal": unit_diagonal}
    want = scipy.linalg.solve_triangular(A, B, check_finite=False, **options)
    with fa.Tape():
        a, b = fa.var(A), fa.var(B)
        X = fa.linalg.solve_triangular(a, b, **options)
        np.testing.assert_allclose(X.value, want, rtol=1e-13)
        da, db = fa.grad((X * G).sum(), [a, b])
    # The gradients by hand: T X = B with T the matrix solved (its triangle, transposed
    # for trans): dB = T^-T G, dT = -dB X^T, on the entries of A the solve reads.
    T = np.tril(A) if lower else np.triu(A)
    if unit_diagonal:
        T[np.diag_indices(4)] = 1.0
    if trans not in (0, "N"):
        T = T.T
    dB = np.linalg.solve(T.T, G)
    dT = -dB @ want.T
    dA = dT.T if trans not in (0, "N") else dT
    dA = np.tril(dA) if lower else np.triu(dA)
    if unit_diagonal:
        dA[np.diag_indices(4)] = 0.0
    np.testing.assert_allclose(db, dB, rtol=1e-12)
    np.testing.assert_allclose(da, dA, rtol=1e-12, atol=1e-14)


def test_solve_triangular_refuses_an_unknown_trans():
    with pytest.raises(ValueError, match=r"trans='X'; use 0 or 'N'"):
        fa.linalg.solve_triangular(np.eye(2), np.ones(2), trans="X")
    with pytest.raises(ValueError, match=r"trans=True"):
        fa.linalg.solve_triangular(np.eye(2), np.ones(2), trans=True)


def test_gaussian_process_marginal_likelihood_and_its_gradient(rng):
    """-log p(y) of a GP with an RBF kernel, by Cholesky and two triangular solves, against
    the textbook gradient 0.5 tr((K^-1 - a a^T) dK/dtheta) (Rasmussen and Williams, 5.9)."""
    x = np.sort(rng.uniform(-3.0, 3.0, size=12))
    y = np.sin(x) + 0.1 * rng.normal(size=12)
    squared = (x[:, None] - x[None, :]) ** 2

    def negative_log_likelihood(log_length, log_noise):
        K = fa.exp(-0.5 * squared / fa.exp(2.0 * log_length)) + fa.exp(2.0 * log_noise) * np.eye(12)
        L = fa.linalg.cholesky(K)
        a = fa.linalg.solve_triangular(L, y, lower=True)
        diagonal = L[np.arange(12), np.arange(12)]
        return 0.5 * (a * a).sum() + fa.log(diagonal).sum() + 6.0 * np.log(2.0 * np.pi)

    theta = (0.2, -1.5)
    value, gradient = fa.value_and_grad(negative_log_likelihood, argnums=(0, 1))(*theta)
    ell, noise = np.exp(theta[0]), np.exp(theta[1])
    K = np.exp(-0.5 * squared / ell**2) + noise**2 * np.eye(12)
    alpha = np.linalg.solve(K, y)
    want = 0.5 * y @ alpha + 0.5 * np.linalg.slogdet(K)[1] + 6.0 * np.log(2.0 * np.pi)
    assert value == pytest.approx(want, rel=1e-12)
    inner = np.linalg.inv(K) - np.outer(alpha, alpha)
    d_length = np.exp(-0.5 * squared / ell**2) * squared / ell**2  # dK / d log_length
    d_noise = 2.0 * noise**2 * np.eye(12)  # dK / d log_noise
    for got, dK in zip(gradient, (d_length, d_noise), strict=True):
        assert got == pytest.approx(0.5 * np.sum(inner * dK), rel=1e-9)


def test_eigh_values_vectors_and_gradients(spd, rng):
    w_np, V_np = np.linalg.eigh(spd)
    with fa.Tape():
        K = fa.var(spd)
        w, V = fa.linalg.eigh(K)
        np.testing.assert_array_equal(w.value, w_np)
        np.testing.assert_array_equal(V.value, V_np)
        w[2].backward()  # d w_i / dA = v_i v_i^T (a simple eigenvalue)
        np.testing.assert_allclose(K.grad, np.outer(V_np[:, 2], V_np[:, 2]), rtol=1e-12, atol=1e-14)
        sign, logdet = np.linalg.slogdet(K)  # log det = sum(log w): the same gradient, A^-1
        w2, _ = np.linalg.eigh(K)
        np.testing.assert_allclose(fa.grad(fa.log(w2).sum(), K), fa.grad(logdet, K), rtol=1e-10)


def test_singular_matrices_as_numpy_treats_them():
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    with fa.Tape():
        A = fa.var(singular)
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
            fa.linalg.solve(A, np.ones(2))
        with pytest.raises(np.linalg.LinAlgError):
            fa.linalg.inv(A)
        with pytest.raises(np.linalg.LinAlgError):
            fa.linalg.cholesky(fa.var(-np.eye(2)))  # not positive definite
        with pytest.raises(np.linalg.LinAlgError):
            fa.linalg.solve_triangular(fa.var(np.array([[1.0, 0.0], [1.0, 0.0]])), A, lower=True)
        d = fa.linalg.det(A)
        assert d.value == np.linalg.det(singular)  # the value NumPy gives
        sign, logdet = fa.linalg.slogdet(A)
        assert (sign.value, logdet.value) == (0.0, -np.inf)
        with pytest.raises(np.linalg.LinAlgError, match="adjugate"):
            d.backward()  # its gradient needs the adjugate, not an inverse: never a finite guess


@pytest.mark.parametrize("scale", [1e100, 1e-100], ids=["overflows", "underflows"])
def test_a_determinant_out_of_range_keeps_its_gradient_in_range(scale):
    # det(A) is inf (or 0) for these invertible matrices; its gradient, the
    # cofactors [[d, -c], [-b, a]], is finite: det(A) A^-T computed plainly gave
    # inf and nan (or a silent 0).
    a, b, c, d = 3.0 * scale**2, 1.0 * scale**2, 2.0 * scale**1.5, 5.0 * scale**1.5
    A = np.array([[a, b], [c, d]])
    with np.errstate(over="ignore", under="ignore"):
        assert np.linalg.det(A) in (np.inf, 0.0)
    value, gradient = fa.value_and_grad(np.linalg.det)(A)
    assert value == (np.inf if scale > 1 else 0.0)
    np.testing.assert_allclose(gradient, [[d, -c], [-b, a]], rtol=1e-12)
    # The second derivative's formula cancels there: nan, not a finite guess.
    assert np.isnan(fa.hvp(np.linalg.det)((A,), (np.ones((2, 2)),))).all()


def test_shapes_are_named_in_errors():
    with fa.Tape():
        A = fa.var(np.eye(3))
        with pytest.raises(
            ValueError, match=r"solve: the right-hand side must have shape .*\(4,\)"
        ):
            fa.linalg.solve(A, np.ones(4))
        with pytest.raises(ValueError, match=r"cholesky needs a square matrix .* \(3, 2\)"):
            fa.linalg.cholesky(fa.var(np.ones((3, 2))))
        with pytest.raises(ValueError, match=r"stacks of matrices"):
            fa.linalg.det(fa.var(np.ones((2, 3, 3))))
        with pytest.raises(TypeError, match="scalar node"):
            fa.linalg.inv(fa.var(2.0))
        with pytest.raises(TypeError, match="lower must be True or False"):
            fa.linalg.solve_triangular(A, np.ones(3), lower="yes")
        with pytest.raises(TypeError, match=r"ord='nuc' of a matrix \(singular values\)"):
            fa.linalg.norm(A, ord="nuc")
        for invalid in (0, 3, "x"):  # as NumPy refuses them
            with pytest.raises(ValueError, match=f"invalid norm order {invalid!r} for matrices"):
                fa.linalg.norm(A, ord=invalid)
        with pytest.raises(ValueError, match="ord='fro' is a matrix norm"):
            fa.linalg.norm(A, ord="fro", axis=0)
        with pytest.raises(ValueError, match=r"axis=\(0, 0\) for shape \(3, 3\)"):
            fa.linalg.norm(A, axis=(0, 0))
        with pytest.raises(TypeError, match="integer power"):
            fa.linalg.matrix_power(A, 1.5)
        with pytest.raises(ValueError, match=r"square matrices, got shape \(3, 2\)"):
            fa.linalg.matrix_power(fa.var(np.ones((3, 2))), 2)
        with pytest.raises(ValueError, match="at least two"):
            fa.linalg.multi_dot([A])


NORMS = [
    (None, None, False, (5,)),
    (1, None, False, (5,)),
    (np.inf, 0, True, (5,)),
    (-np.inf, None, False, (5,)),
    (0, 1, False, (3, 5)),
    (3, -1, True, (3, 5)),
    (0.5, 0, False, (3, 5)),
    (None, 1, False, (2, 3, 4)),
    ("fro", None, True, (3, 5)),
    (1, None, False, (3, 5)),
    (-1, (1, 0), False, (3, 5)),
    (np.inf, (0, 2), True, (3, 2, 4)),
    (-np.inf, None, False, (3, 5)),
]


@pytest.mark.parametrize("ord_, axis, keepdims, shape", NORMS)
def test_norms_match_numpy_and_central_differences(ord_, axis, keepdims, shape, rng):
    array = rng.normal(size=shape)

    def reference(x):
        return np.linalg.norm(x, ord_, axis, keepdims)

    weights = rng.normal(size=np.shape(reference(array)))
    with fa.Tape():
        X = fa.var(array)
        got = np.linalg.norm(X, ord_, axis, keepdims)
        np.testing.assert_allclose(np.asarray(got.value), reference(array), rtol=1e-14)
        loss = (got * weights).sum() if isinstance(got, fa.Block) else got * float(weights)
        gradient = fa.grad(loss, X)
    h = 1e-6
    numeric = np.zeros(shape)
    for index in np.ndindex(shape):
        up, down = array.copy(), array.copy()
        up[index] += h
        down[index] -= h
        rise = np.sum(reference(up) * weights) - np.sum(reference(down) * weights)
        numeric[index] = rise / (2 * h)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("power", [0, 1, 2, 5, -3])
def test_matrix_power_and_multi_dot_match_numpy(power, rng):
    matrix = rng.normal(size=(3, 3)) + 3.0 * np.eye(3)
    chain = [rng.normal(size=4), rng.normal(size=(4, 30)), rng.normal(size=(30, 2))]
    with fa.Tape():
        M = fa.var(matrix)
        got = np.linalg.matrix_power(M, power)
        value = got.value if isinstance(got, fa.Block) else got
        np.testing.assert_allclose(value, np.linalg.matrix_power(matrix, power), rtol=1e-12)
        nodes = [fa.var(c) for c in chain]
        product = np.linalg.multi_dot(nodes)
        np.testing.assert_allclose(product.value, np.linalg.multi_dot(chain), rtol=1e-12)
        assert product.shape == (2,)


def test_numpy_linalg_on_nodes_records_the_fastad_op(spd, rng):
    b = rng.normal(size=4)
    with fa.Tape():
        K = fa.var(spd)
        loss = (np.linalg.solve(K, b) ** 2.0).sum() + np.linalg.slogdet(K)[1]
        loss = loss + np.linalg.norm(np.linalg.cholesky(K)) + np.linalg.inv(K).sum()
        loss = loss + np.linalg.det(K * 0.5)
        assert isinstance(loss, fa.Var)
        loss.backward()
        got = K.grad

    def reference(A):
        return (
            (np.linalg.solve(A, b) ** 2).sum()
            + np.linalg.slogdet(A)[1]
            + np.linalg.norm(np.linalg.cholesky((A + A.T) / 2))
            + np.linalg.inv(A).sum()
            + np.linalg.det(A * 0.5)
        )

    assert loss.value == pytest.approx(reference(spd), rel=1e-12)
    numeric = np.zeros_like(spd)
    for i in range(4):
        for j in range(4):
            step = np.zeros_like(spd)
            step[i, j] = 1e-6
            numeric[i, j] = (reference(spd + step) - reference(spd - step)) / 2e-6
    np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-7)


def test_compiled_functions_of_arrays_run_linear_algebra_on_the_interpreter(spd, rng):
    b = rng.normal(size=4)

    def loss(K, b):
        return (fa.linalg.solve(K, b) * b).sum() + fa.linalg.slogdet(K)[1]

    with pytest.raises(NotImplementedError, match="no rule for the op 'solve'"):
        fa.compile(loss, example=(spd, b), wrt=0, backend="codegen")
    f = fa.compile(loss, example=(spd, b), wrt=0)
    assert f.tier("grad").name == "interpret"
    value, gradient = f.value_and_grad((spd, b))
    with fa.Tape():
        K = fa.var(spd)
        eager = loss(K, b)
        eager.backward()
    assert value == eager.value
    np.testing.assert_array_equal(gradient, K.grad)
    assert fa.hesscheck(f, (spd, b)) is True


# -- the examples built on second order and linear algebra ----------------------------------
def test_the_gaussian_process_example_fits_its_hyperparameters():
    from conftest import load_example

    example = load_example("gaussian_process")
    x, y = example.make_data(np.random.default_rng(1), points=60)
    result = example.fit(x, y)  # checks its gradient against the textbook's first
    assert result.success, result.message
    squared = (x[:, None] - x[None, :]) ** 2
    assert np.abs(example.textbook_gradient(result.x, squared, y)).max() < 1e-4
    length, _, noise = np.exp(result.x)
    assert 0.1 < length < 3.0 and 0.05 < noise < 0.5  # the data's scale (noise 0.2)


def test_the_newton_cg_example_reaches_a_zero_gradient():
    from conftest import load_example

    example = load_example("softmax_newton_cg")
    X, y = example.make_data(np.random.default_rng(2), samples=120)
    result = example.fit(X, y, classes=4)
    assert result.success and result.nhev > 0, result.message
    W = result.x.reshape(X.shape[1], 4)
    z = X @ W
    P = np.exp(z - z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    gradient = X.T @ (P - np.eye(4)[y]) + W  # by hand
    assert np.abs(gradient).max() < 1e-4


def test_numpy_forms_of_results_and_arguments():
    with fa.Tape():
        A = fa.var(np.diag([2.0, 3.0]))
        assert np.linalg.slogdet(A).logabsdet.value == pytest.approx(np.log(6.0))
        np.testing.assert_array_equal(np.linalg.eigh(A).eigenvalues.value, [2.0, 3.0])
        np.testing.assert_array_equal(fa.linalg.solve(A, [1.0, 3.0]).value, [0.5, 1.0])


LIST_CALLS = {
    "fa.linalg.solve": lambda a: fa.linalg.solve(np.eye(2), [a, 1.0]),
    "fa.linalg.solve_triangular": lambda a: fa.linalg.solve_triangular(
        [[a, 0.0], [1.0, a]], [1.0, 1.0], lower=True
    ),
    "fa.linalg.inv": lambda a: fa.linalg.inv([[a, 1.0], [1.0, a]]),
    "fa.linalg.det": lambda a: fa.linalg.det([[a, 1.0], [1.0, a]]),
    "fa.linalg.slogdet": lambda a: fa.linalg.slogdet([[a, 1.0], [1.0, a]]),
    "fa.linalg.cholesky": lambda a: fa.linalg.cholesky([[a, 1.0], [1.0, a]]),
    "fa.linalg.eigh": lambda a: fa.linalg.eigh(np.array([[a, 1.0], [1.0, a]], dtype=object)),
    "np.linalg.norm": lambda a: fa.linalg.norm([[a, 1.0], [1.0, a]], ord=1),
    "np.linalg.matrix_power": lambda a: fa.linalg.matrix_power([[a, 1.0], [1.0, a]], 2),
    "np.linalg.multi_dot": lambda a: fa.linalg.multi_dot([np.eye(2), [[a, 1.0], [1.0, a]]]),
}


@pytest.mark.parametrize("name", list(LIST_CALLS))
def test_nodes_inside_a_list_are_refused_not_read_as_numbers(name):
    # NumPy reads a node in a list as a number (its value): the gradient through the
    # op would silently be lost. A list of numbers is an array, as NumPy reads it.
    with fa.Tape():
        a = fa.var(2.0)
        with pytest.raises(TypeError, match=rf"{name} takes blocks or arrays, .* holding the node"):
            LIST_CALLS[name](a)
    assert fa.linalg.det([[2.0, 1.0], [1.0, 2.0]]) == pytest.approx(3.0)
    assert fa.linalg.det(np.array([[2, 1], [1, 2]], dtype=object)) == pytest.approx(3.0)


@pytest.mark.parametrize("name", ["solve", "inv", "det", "cholesky", "eigvalsh", "norm"])
def test_complex_arrays_are_refused_not_cut_to_their_real_part(name):
    A = np.array([[2.0, 1.0 + 1.0j], [1.0 - 1.0j, 3.0]])  # Hermitian: NumPy's det is 4
    call = getattr(fa.linalg, name)
    arguments = (A, np.ones(2)) if name == "solve" else (A,)
    with pytest.raises(TypeError, match="must hold real numbers, got dtype complex128"):
        call(*arguments)


def test_eigenvector_gradients_are_undefined_at_repeated_eigenvalues():
    # At diag(1, 1, 2) the first two eigenvectors may turn freely: no derivative. V^T V_bar
    # is diagonal there, so a zero times the infinite 1 / (w1 - w0) is nan, not a finite
    # 0, and the products with V spread it: nan throughout, as JAX gives.
    C = np.arange(9.0).reshape(3, 3)
    gradient = fa.grad(lambda a: (fa.linalg.eigh(a)[1] ** 2.0 * C).sum())(np.diag([1.0, 1.0, 2.0]))
    assert np.isnan(gradient).all()
    # Distinct eigenvalues: finite, whatever zeros V^T V_bar holds.
    gradient = fa.grad(lambda a: (fa.linalg.eigh(a)[1] ** 2.0 * C).sum())(np.diag([1.0, 3.0, 2.0]))
    assert np.isfinite(gradient).all()


def test_eigenvalue_hessians_stay_exact_at_repeated_eigenvalues():
    # sum(w^2) is trace(A^2): its Hessian-vector product is 2 T for a symmetric T, at the
    # identity too (a direction that does not mix a repeated pair moves nothing there).
    T = np.diag([0.3, -0.7, 1.1])
    hvp = fa.hvp(lambda a: (fa.linalg.eigvalsh(a) ** 2.0).sum())
    for A in (np.eye(3), np.diag([1.0, 1.0, 2.0])):
        np.testing.assert_allclose(hvp((A,), (T,)), 2.0 * T, atol=1e-14)


def test_eigenvalue_gradients_stay_finite_at_repeated_eigenvalues():
    # Nothing reaches the eigenvectors: d sum(w^2) / dA = 2 diag(w) here, as JAX gives.
    gradient = fa.grad(lambda a: (fa.linalg.eigh(a)[0] ** 2.0).sum())(np.diag([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(gradient, np.diag([2.0, 2.0, 4.0]), atol=1e-15)
