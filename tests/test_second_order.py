"""Second order: Hessian-vector products and Hessians, eager and compiled.

References are independent of the sweeps under test: central differences
of the gradient (itself checked against central differences of values in
test_ops.py), hand-written NumPy Hessians, and the closed forms of small
functions.
"""

import threading

import numpy as np
import pytest
import scipy.optimize
from op_table import OP_CASES, sample_operands

import fastad as fa
from fastad.util import memory


def wrapped(apply):
    """``op`` inside a nonlinear function, so the chain terms of the sweeps count too."""

    def function(*xs):
        u = apply(*xs)
        return u * (xs[0] + 0.5) + fa.sin(u)

    return function


def eager_gradient(function, point):
    with fa.Tape():
        nodes = [fa.var(v) for v in point]
        return np.asarray(fa.grad(function(*nodes), nodes))


def eager_hessian(function, point):
    with fa.Tape():
        nodes = [fa.var(v) for v in point]
        return fa.hessian(function(*nodes), nodes)


def differences_of_the_gradient(gradient, point):
    """Central differences of ``gradient``: the Hessian's reference, column by column."""
    point = np.asarray(point, np.float64)
    columns = []
    for j in range(point.size):
        h = 1e-5 * max(1.0, abs(point[j]))
        above, below = point.copy(), point.copy()
        above[j] += h
        below[j] -= h
        columns.append((gradient(above) - gradient(below)) / (above[j] - below[j]))
    return np.stack(columns, axis=1)


# -- every op, eager and compiled ------------------------------------------------------
@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_hessian_of_every_op_matches_central_differences_of_the_gradient(case, rng):
    function = wrapped(case.apply)
    points = sample_operands(case, rng, count=6)
    compiled = fa.compile(
        function, num_inputs=len(case.domain), example=points[0], backend="interpret"
    )
    batch = compiled.hessian(np.array(points))
    for point, from_batch in zip(points, batch, strict=True):
        hessian = eager_hessian(function, point)
        if case.derivative is None:  # stop_gradient's derivative is 0 by definition
            numeric = differences_of_the_gradient(lambda p: eager_gradient(function, p), point)
            np.testing.assert_allclose(hessian, numeric, rtol=1e-5, atol=1e-6, err_msg=case.name)
        np.testing.assert_allclose(hessian, hessian.T, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(from_batch, hessian, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(compiled.hessian(np.array(point)), from_batch, rtol=0, atol=0)
        v = rng.normal(size=len(point))
        with fa.Tape():
            nodes = [fa.var(x) for x in point]
            eager_product = fa.hvp(function(*nodes), nodes, v)
        np.testing.assert_allclose(eager_product, hessian @ v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(compiled.hvp(point, v), hessian @ v, rtol=1e-12, atol=1e-12)


# The article's example 2, L = (sigmoid(w1 x1 + w2 x2 + b) - y)^2, by hand.
def example_2(w1, x1, w2, x2, b, y):
    return (fa.sigmoid(w1 * x1 + w2 * x2 + b) - y) ** 2.0


def example_2_hessian_numpy(P):
    w1, x1, w2, x2, b, y = P.T
    s = 1.0 / (1.0 + np.exp(-(w1 * x1 + w2 * x2 + b)))
    ds = s * (1.0 - s)
    dds = ds * (1.0 - 2.0 * s)
    du = np.stack([x1, w1, x2, w2, np.ones_like(b), np.zeros_like(y)], axis=1)  # du/dθ
    ddu = np.zeros((P.shape[0], 6, 6))
    ddu[:, 0, 1] = ddu[:, 1, 0] = ddu[:, 2, 3] = ddu[:, 3, 2] = 1.0
    r = s - y
    # L = r^2 with r = s(u) - y: H = 2 (dr dr^T + r d2r).
    dr = ds[:, None] * du
    dr[:, 5] = -1.0
    d2r = dds[:, None, None] * du[:, :, None] * du[:, None, :] + ds[:, None, None] * ddu
    return 2.0 * (dr[:, :, None] * dr[:, None, :] + r[:, None, None] * d2r)


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_example_2_hessian_matches_the_hand_written_one(backend, rng):
    point = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
    f = fa.compile(example_2, example=point, backend=backend)
    P = rng.uniform(-2.0, 2.0, (500, 6))
    expected = example_2_hessian_numpy(P)
    np.testing.assert_allclose(f.hessian(P), expected, rtol=1e-12, atol=1e-14)
    V = rng.normal(size=(500, 6))
    np.testing.assert_allclose(
        f.hvp(P, V), np.einsum("nij,nj->ni", expected, V), rtol=1e-11, atol=1e-14
    )
    np.testing.assert_allclose(
        eager_hessian(example_2, point), expected_at(point), rtol=1e-12, atol=1e-15
    )


def expected_at(point):
    return example_2_hessian_numpy(np.asarray(point)[None, :])[0]


def test_stop_gradient_stops_second_derivatives_too():
    # As jax.hessian: z = u (x + 1/2) + sin(u) with u = stop_gradient(x) has
    # the gradient u, whose own derivative is 0 through the stop.
    with fa.Tape():
        x = fa.var(0.7)
        z = wrapped(fa.stop_gradient)(x)
        assert fa.grad(z, x) == 0.7
        assert fa.hessian(z, [x]).tolist() == [[0.0]]


def test_closed_forms_and_shapes():
    with fa.Tape():
        x, y = fa.var(1.0), fa.var(2.0)
        z = x * x * y  # H = [[2y, 2x], [2x, 0]]
        assert fa.hessian(z, [x, y]).tolist() == [[4.0, 2.0], [2.0, 0.0]]
        assert fa.hvp(z, [x, y], [0.0, 1.0]).tolist() == [2.0, 0.0]
        assert fa.hvp(z, x, 3.0) == 12.0  # one node: a float, like fa.grad
        assert fa.hessian(z, x).tolist() == [[4.0]]
        assert z.grad == 0.0  # .grad untouched
    f = fa.compile(lambda x, y: x * x * y)
    assert f.hessian(np.array([1.0, 2.0])).shape == (2, 2)
    assert f.hessian(np.ones((5, 2))).shape == (5, 2, 2)
    assert f.hvp(np.ones((5, 2)), np.ones((5, 2))).shape == (5, 2)
    assert f.hessp(np.array([1.0, 2.0]), np.array([0.0, 1.0])).tolist() == [2.0, 0.0]


def test_where_keeps_the_untaken_side_out_of_the_hessian():
    # log(x) at x = -1 is nan and its second derivative 1/x^2 is finite, but
    # 1/0 = inf at x = 0: neither may reach the taken side's Hessian.
    def function(x):
        return fa.where(x > 0.5, x**3.0, fa.log(x))

    with fa.Tape():
        x = fa.var(0.0)
        # the traced branch is the log side at 0: its Hessian is -1/x^2 = -inf
        assert fa.hessian(function(x), [x])[0, 0] == -np.inf
    with fa.Tape():
        x = fa.var(2.0)
        assert fa.hessian(function(x), [x]).tolist() == [[12.0]]
    f = fa.compile(function, example=np.array([2.0]))
    assert f.hessian(np.array([[2.0], [-1.0]]))[:, 0, 0].tolist()[0] == 12.0


def test_zero_direction_is_a_strong_zero():
    # An inf second partial meeting a zero direction contributes nothing.
    with fa.Tape():
        x, y = fa.var(0.0), fa.var(3.0)
        z = fa.sqrt(x) + y * y  # d2/dx2 sqrt at 0 is -inf
        assert fa.hvp(z, [x, y], [0.0, 1.0]).tolist() == [0.0, 2.0]
    f = fa.compile(lambda x, y: fa.sqrt(x) + y * y, example=np.array([1.0, 3.0]))
    assert f.hvp(np.array([0.0, 3.0]), np.array([0.0, 1.0])).tolist() == [0.0, 2.0]


def test_intermediate_nodes_are_held_as_independent_variables():
    with fa.Tape():
        x = fa.var(1.5)
        u = x * x
        z = fa.sin(u) * x
        # d2z/du2 with x held: -sin(u) x
        assert fa.hessian(z, [u])[0, 0] == pytest.approx(-np.sin(2.25) * 1.5, rel=1e-15)


# -- blocks -------------------------------------------------------------------------------
BLOCK_CASES = {
    "elementwise": lambda W, A: (fa.sin(W) * W + fa.exp(-W * W)).sum(),
    "matmul": lambda W, A: fa.tanh(A @ W).sum(),
    "matmul_right": lambda W, A: fa.sigmoid(W.T @ A.T).mean(),
    "linear": lambda W, A: (fa.tanh(fa.linear(A, W, W[0] * 0.5))).sum(),
    "linear_relu": lambda W, A: (fa.linear_relu(A, W, W[1]) ** 2.0).sum(),
    "reshape_index": lambda W, A: (fa.cos(W.reshape((-1,))[1:5]) * W.T[0, 1]).sum(),
    "concatenate_max": lambda W, A: fa.concatenate([W * W, fa.sin(W)]).max(axis=0).sum(),
    "broadcast": lambda W, A: (fa.exp(W * W[0]) + W[:, 0:1] * W).sum(),
    "softmax": lambda W, A: (fa.softmax(A @ W) * A[:, :2]).sum(),
    "softmax_axis0": lambda W, A: (fa.softmax(A @ W, axis=0) * A[:, 1:]).sum(),
    "log_softmax": lambda W, A: (fa.log_softmax(A @ W) ** 2.0).sum(),
    "logsumexp": lambda W, A: fa.logsumexp(A @ W, axis=1).sum() * W[0, 0],
    "logsumexp_all": lambda W, A: fa.logsumexp(W * W),
    "logsumexp_keepdims": lambda W, A: (fa.logsumexp(A @ W, axis=0, keepdims=True) * W).sum(),
    "cross_entropy_labels": lambda W, A: fa.cross_entropy(A @ W, LABELS) * W[1, 1],
    "cross_entropy_sum": lambda W, A: fa.cross_entropy(fa.tanh(A @ W), LABELS, "sum"),
    "cross_entropy_probabilities": lambda W, A: fa.cross_entropy(
        A @ W, fa.softmax(A @ W * 0.5 + 0.1)
    ),
    "mse_loss": lambda W, A: fa.mse_loss(fa.tanh(A @ W), A[:, :2] * W[0, 1]),
    "prod": lambda W, A: (fa.tanh(A @ W) + 1.5).prod(axis=1).sum(),
    "prod_one_zero": lambda W, A: (W * ONE_ZERO).prod() + (W * W).prod(axis=0).sum(),
    "prod_two_zeros": lambda W, A: (W * TWO_ZEROS).prod() * W[0, 0],
    "cholesky": lambda W, A: (fa.linalg.cholesky(spd(W)) ** 2.0).sum() * W[0, 0],
    "solve": lambda W, A: (fa.linalg.solve(spd(W), A[:3, :2] @ W.T) ** 2.0).sum(),
    "solve_triangular": lambda W, A: (
        fa.linalg.solve_triangular(fa.linalg.cholesky(spd(W)), A[:3] * W[1, 1], lower=True) ** 2.0
    ).sum(),
    "solve_triangular_full": lambda W, A: (  # its upper triangle is never read
        fa.linalg.solve_triangular(spd(W) + W[:, :1] * 0.3, A[:3] * W[1, 1], lower=True) ** 2.0
    ).sum(),
    "inv": lambda W, A: (fa.linalg.inv(spd(W)) * A[:3]).sum(),
    "det": lambda W, A: fa.linalg.det(spd(W)),
    "logabsdet": lambda W, A: fa.linalg.slogdet(spd(W))[1] * W[2, 1],
    "eigh": lambda W, A: (
        (fa.linalg.eigh(spd(W) + np.diag([0.0, 2.0, 5.0]))[0] * np.array([1.0, -2.0, 0.5])).sum()
        + (fa.linalg.eigh(spd(W) + np.diag([0.0, 2.0, 5.0]))[1] ** 2.0 * A[:3]).sum()
    ),
    "cumsum": lambda W, A: (fa.sin(np.cumsum(A @ W, axis=0)) * W[0, 1]).sum(),
    "sign_det": lambda W, A: fa.linalg.slogdet(spd(W) - 3.0 * np.eye(3))[0] * (W * W).sum(),
}


def spd(W):
    """A symmetric positive definite (3, 3) block that moves with W (3, 2)."""
    return W @ W.T + 2.0 * np.eye(3)


LABELS = np.array([0, 1, 1, 0, 1])
ONE_ZERO = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
TWO_ZEROS = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


@pytest.mark.parametrize("name", sorted(BLOCK_CASES))
def test_block_hvp_matches_central_differences_of_the_gradient(name, rng):
    build = BLOCK_CASES[name]
    A = rng.normal(size=(5, 3))
    W0 = rng.normal(size=(3, 2)) * 0.7
    V = rng.normal(size=W0.shape)

    def gradient(W):
        with fa.Tape():
            node = fa.var(W)
            return fa.grad(build(node, A), node)

    with fa.Tape():
        node = fa.var(W0)
        product = fa.hvp(build(node, A), node, V)
        listed = fa.hvp(build(node, A), [node], [V])
    assert product.shape == W0.shape
    h = 1e-6
    numeric = (gradient(W0 + h * V) - gradient(W0 - h * V)) / (2 * h)
    np.testing.assert_allclose(product, numeric, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(listed[0], product)


def test_block_logistic_regression_hvp_matches_numpy():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 4))
    y = (rng.random(40) < 0.5).astype(float)
    w0 = rng.normal(size=4)
    v = rng.normal(size=4)
    with fa.Tape():
        w = fa.var(w0)
        z = X @ w
        loss = (fa.softplus(z) - y * z).sum()
        product = fa.hvp(loss, w, v)
    p = 1.0 / (1.0 + np.exp(-X @ w0))
    expected = X.T @ ((p * (1.0 - p)) * (X @ v))
    np.testing.assert_allclose(product, expected, rtol=1e-12)


def test_blocks_equal_their_scalar_expansion():
    rng = np.random.default_rng(4)
    w0, v = rng.normal(size=3), rng.normal(size=3)
    with fa.Tape():
        w = fa.var(w0)
        block = fa.hvp((fa.tanh(w) * w).sum(), w, v)
    with fa.Tape():
        ws = [fa.var(x) for x in w0]
        scalar = fa.hvp(sum(fa.tanh(x) * x for x in ws), ws, v)
    np.testing.assert_array_equal(block, scalar)


def test_every_block_op_has_a_second_order_rule():
    from fastad.core.block_rules import second_order_ops
    from fastad.kernels import optable

    offered = second_order_ops()
    assert offered[0] == "elementwise ops"
    assert set(offered[1:]) == {op.name for op in optable.BLOCK_OPS}


def test_a_block_op_without_a_second_order_rule_raises_naming_it():
    from fastad.core.block_rule import BlockRule

    class Plain(BlockRule):  # a rule with a VJP and no second-order rule
        pass

    rule = Plain("matmul")
    message = "block op 'matmul' .* no second-order rule"
    with pytest.raises(NotImplementedError, match=message) as raised:
        rule.second_vjp((np.ones(2),), np.ones(2), np.ones(2), None, (np.ones(2),), None)
    # The ops the message offers instead, read from the registry: each has a rule.
    offered = str(raised.value).rsplit("(", 1)[1].rstrip(")").split(", ")
    assert offered[0] == "elementwise ops"
    assert {"matmul", "linear_relu", "sum", "softmax", "cross_entropy", "prod"} <= set(offered)


# -- errors -------------------------------------------------------------------------------
def test_errors_name_the_problem():
    f = fa.compile(lambda x, y: [x * y, x + y], example=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="hvp needs a scalar output; this function has 2"):
        f.hvp(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="hessian needs a scalar output"):
        f.hessian(np.ones(2))
    g = fa.compile(lambda x, y: x * x * y, example=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"direction shape \(3,\) does not match"):
        g.hvp(np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match=r"direction shape \(4, 2\) does not match"):
        g.hvp(np.ones((5, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"hessp takes one point of shape \(2,\)"):
        g.hessp(np.ones((3, 2)), np.ones(2))
    with fa.Tape():
        W = fa.var(np.ones(3))
        with pytest.raises(TypeError, match="fa.hessian takes scalar nodes; node 0 is a block"):
            fa.hessian((W * W).sum(), [W])
        with pytest.raises(TypeError, match="fa.hvp output must be a scalar fastad Var"):
            fa.hvp(W * W, W, np.ones(3))


def test_hessian_refuses_a_result_that_cannot_fit(monkeypatch):
    f = fa.compile(lambda x, y: x * x * y, example=np.array([1.0, 2.0]))
    monkeypatch.setattr(memory, "SMALL_BYTES", 0)
    monkeypatch.setattr(memory, "available_memory", lambda: 1000)
    with pytest.raises(MemoryError, match=r"the Hessian of 100 points \(2 x 2 each"):
        f.hessian(np.ones((100, 2)))


# -- hesscheck ------------------------------------------------------------------------------
def test_hesscheck_passes_and_catches_wrong_hessians(monkeypatch):
    f = fa.compile(example_2, example=np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0]))
    point = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
    assert fa.hesscheck(f, point) is True
    assert fa.hesscheck(f, point, mode="fast") is True
    right = f.hessian

    def off_by_one_element(z):
        hessian = np.array(right(z))
        hessian[2, 4] += 0.01
        hessian[4, 2] += 0.01
        return hessian

    monkeypatch.setattr(f, "hessian", off_by_one_element)
    result = fa.hesscheck(f, point, raise_exception=False)
    assert not result.passed
    assert result.failures == [(2, 4), (4, 2)]
    assert "hesscheck failed for 2 of 36 elements" in result.message

    def asymmetric(z):
        hessian = np.array(right(z))
        hessian[0, 1] += 1e-3
        return hessian

    monkeypatch.setattr(f, "hessian", asymmetric)
    result = fa.hesscheck(f, point, raise_exception=False)
    assert "the Hessian is not symmetric: H[0, 1]" in result.message
    with pytest.raises(fa.GradcheckError, match="hesscheck failed"):
        fa.hesscheck(f, point)
    with pytest.raises(TypeError, match="hesscheck checks a compiled function"):
        fa.hesscheck(lambda x: x, point)


def softmax_regression(seed=0, classes=3, features=4, samples=50):
    """A compiled L2-regularised softmax regression of the weights W (features, classes),
    on data with a column of exact zeros and integer labels."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(samples, features))
    X[:, 1] = 0.0
    y = rng.integers(0, classes, size=samples)

    def loss(W, X, y):
        return fa.cross_entropy(X @ W, y, "sum") + 0.5 * (W * W).sum()

    W0 = rng.normal(size=(features, classes)) * 0.3
    return fa.compile(loss, example=(W0, X, y), wrt=0), W0, X, y


def test_hesscheck_checks_functions_of_arrays(monkeypatch):
    f, W0, X, y = softmax_regression()
    assert fa.hesscheck(f, (W0, X, y)) is True
    # Several arguments vary: the Hessian's blocks are assembled beside each other.
    rng = np.random.default_rng(1)
    A, b = rng.normal(size=(6, 3)), rng.normal(size=6)
    g = fa.compile(
        lambda w, s, A: fa.logsumexp(A @ w * s) + (w * w).sum() * s, example=(b[:3], 1.3, A)
    )
    assert fa.hesscheck(g, (b[:3], 1.3, A), mode="fast") is True
    right = f.hessian

    def off(arguments):
        hessian = np.array(right(arguments))
        hessian[1, 2, 3, 0] += 0.01  # element (5, 9) of the flat (12, 12) Hessian
        hessian[3, 0, 1, 2] += 0.01
        return hessian

    monkeypatch.setattr(f, "hessian", off)
    result = fa.hesscheck(f, (W0, X, y), raise_exception=False)
    # (argument, (gradient element, element of the argument)): H[5, 9] and H[9, 5]
    assert not result.passed and result.failures == [(0, (5, 3, 0)), (0, (9, 1, 2))]
    with pytest.raises(ValueError, match="scalar output"):
        fa.hesscheck(fa.compile(lambda w: w * 2.0, example=(b,)), (b,))


def test_newton_cg_fits_a_softmax_regression_through_hessp():
    f, W0, X, y = softmax_regression(2)
    shape = W0.shape

    def arguments(w):
        return (w.reshape(shape), X, y)

    fit = scipy.optimize.minimize(
        lambda w: f(arguments(w)),
        W0.reshape(-1),
        jac=lambda w: f.grad(arguments(w)).reshape(-1),
        hessp=lambda w, p: f.hessp(arguments(w), p.reshape(shape)).reshape(-1),
        method="Newton-CG",
        options={"xtol": 1e-12},
    )
    assert fit.success, fit.message
    # At the optimum the gradient, written by hand in NumPy, vanishes.
    W = fit.x.reshape(shape)
    z = X @ W
    P = np.exp(z - z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    gradient = X.T @ (P - np.eye(shape[1])[y]) + W
    assert np.abs(gradient).max() < 1e-6
    assert fit.nhev > 0  # the Hessian-vector products were used


# -- scipy.optimize ---------------------------------------------------------------------------
def logistic_regression(n_features=5, n_samples=60, seed=0):
    """A compiled L2-regularised logistic-regression loss of the weights (scalar inputs)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, n_features))
    y = (X @ rng.normal(size=n_features) + rng.normal(size=n_samples) > 0).astype(float)

    def loss(*w):
        total = 0.0
        for row, label in zip(X, y, strict=True):
            z = sum(wi * float(xi) for wi, xi in zip(w, row, strict=True))
            total = total + fa.softplus(z) - float(label) * z
        return total + 0.5 * sum(wi * wi for wi in w)

    return fa.compile(loss, num_inputs=n_features, example=np.zeros(n_features))


def test_newton_cg_and_trust_constr_work_as_written():
    f = logistic_regression()
    x0 = np.zeros(5)
    newton = scipy.optimize.minimize(f, x0, jac=f.grad, hessp=f.hessp, method="Newton-CG")
    assert newton.success and np.linalg.norm(f.grad(newton.x)) <= 1e-6
    trust = scipy.optimize.minimize(f, x0, jac=f.grad, hess=f.hessian, method="trust-constr")
    np.testing.assert_allclose(trust.x, newton.x, rtol=1e-5, atol=1e-6)
    lbfgs = scipy.optimize.minimize(f, x0, jac=f.grad, method="L-BFGS-B", tol=1e-12)
    np.testing.assert_allclose(lbfgs.x, newton.x, rtol=1e-5, atol=1e-6)


def test_compiled_function_of_arrays_gives_hvps_by_argument():
    rng = np.random.default_rng(5)
    X, w0, b0 = rng.normal(size=(6, 3)), rng.normal(size=3), 0.3
    f = fa.compile(lambda X, w, b: fa.softplus(X @ w + b).sum(), example=(X, w0, b0))
    v = rng.normal(size=3)
    products = f.hvp((X, w0, b0), [np.zeros(X.shape), v, 0.0])
    with fa.Tape():
        w, b = fa.var(w0), fa.var(b0)
        expected = fa.hvp(fa.softplus(X @ w + b).sum(), [w, b], [v, 0.0])
    np.testing.assert_array_equal(products[1], expected[0])
    assert products[2] == expected[1]
    only_w = fa.compile(lambda X, w, b: fa.softplus(X @ w + b).sum(), example=(X, w0, b0), wrt=1)
    np.testing.assert_array_equal(only_w.hvp((X, w0, b0), v), expected[0])
    with pytest.raises(ValueError, match="expected 3 directions, one per gradient, got 2"):
        f.hvp((X, w0, b0), [v, 0.0])


def test_one_node_direction_may_be_a_number_or_one_element():
    with fa.Tape():
        x = fa.var(2.0)
        z = x**3.0
        assert fa.hvp(z, x, 2.0) == fa.hvp(z, x, np.array([2.0])) == 24.0


@pytest.mark.parametrize("backend", ["interpret", "codegen"])
def test_guards_raise_in_second_order_calls(backend):
    def function(x, y):
        if x > 0.0:
            return x * x * y
        return -x * y

    f = fa.compile(function, example=np.array([1.0, 2.0]), backend=backend)
    assert f.hessian(np.array([3.0, 2.0])).tolist() == [[4.0, 6.0], [6.0, 0.0]]
    for call in (
        lambda: f.hvp(np.array([-1.0, 2.0]), np.array([1.0, 0.0])),
        lambda: f.hvp(np.array([[1.0, 2.0], [-1.0, 2.0]]), np.ones((2, 2))),
        lambda: f.hessian(np.array([[1.0, 2.0], [-1.0, 2.0]])),
    ):
        with pytest.raises(fa.BranchError, match=r"`x > 0.0`, which was True when traced"):
            call()


def test_threads_share_a_compiled_function_for_hvps():
    f = fa.compile(example_2, example=np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0]))
    rng = np.random.default_rng(6)
    P, V = rng.uniform(-1.0, 1.0, (200, 6)), rng.normal(size=(200, 6))
    expected = f.hvp(P, V)
    results = {}

    def work(index):
        for _ in range(20):
            batch = f.hvp(P, V)
            single = np.array([f.hvp(P[i], V[i]) for i in range(0, 200, 7)])
        results[index] = batch, single

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for batch, single in results.values():
        np.testing.assert_array_equal(batch, expected)
        np.testing.assert_array_equal(single, expected[::7])


def test_hesscheck_catches_a_wrong_hvp(monkeypatch):
    f = fa.compile(example_2, example=np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0]))
    point = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
    right = f.hvp
    for wrong in (lambda x, v: 2.0 * right(x, v), lambda x, v: 0.0 * right(x, v)):
        monkeypatch.setattr(f, "hvp", wrong)
        result = fa.hesscheck(f, point, raise_exception=False)
        assert not result.passed
        assert "f.hvp disagrees with f.hessian: along a random v" in result.message


def test_checks_at_points_of_reduced_smoothness():
    # relu(x)**3 at 0: the gradient 3 relu(x)**2 has a kinked derivative, so
    # the central difference of the gradient errs by O(h); extrapolated, it
    # confirms the analytic 0.
    result = fa.hesscheck(fa.compile(lambda x: fa.relu(x) ** 3.0), [0.0], raise_exception=False)
    assert result.passed and result.refined == [(0, 0)]
    assert "smooth to first order only" in result.message
    assert fa.gradcheck(fa.compile(lambda x: fa.relu(x) ** 2.0), [0.0])
    # A wrong value at such a point still fails: its error does not shrink.
    wrong = fa.gradcheck(
        lambda x: float(max(x[0], 0.0) ** 2),
        np.array([0.0]),
        grad=lambda x: np.array([1e-3]),
        raise_exception=False,
    )
    assert not wrong.passed and wrong.refined == []
    # Where the gradient jumps (abs(y) * x at y = 0) no second derivative exists.
    jump = fa.hesscheck(
        fa.compile(lambda x, y: fa.relu(x) ** 2.0 * y + fa.abs(y) * x),
        [1.0, 0.0],
        raise_exception=False,
    )
    # d/dy of dz/dy = relu(x)**2 + sign(y) x: the gradient jumps by 2x there.
    assert jump.passed and jump.jumps == [(1, 1)]
    assert "the function jumps: no derivative to check" in jump.message


def test_wrt_nodes_that_depend_on_each_other_are_refused():
    with fa.Tape():
        x, y = fa.var(1.5), fa.var(2.0)
        u = x * x
        z = u * y + fa.sin(u)
        for call in (lambda: fa.hessian(z, [x, u]), lambda: fa.hvp(z, [y, x, u], [1.0, 0.0, 0.0])):
            with pytest.raises(ValueError, match="wrt node 2 depends on wrt node 0"):
                call()
        assert fa.hessian(z, [x, x]).shape == (2, 2)  # the same node twice is fine


def test_directions_must_be_real():
    with fa.Tape():
        X = fa.var(np.array([1.0, 2.0]))
        with pytest.raises(TypeError, match="direction for node 0 must hold real numbers"):
            fa.hvp((X * X * X).sum(), X, np.array([1j, 1.0]))
        with pytest.raises(TypeError, match="direction for node 0 must hold real numbers"):
            fa.jvp((X * X).sum(), X, np.array([1j, 1.0]))
    with fa.Tape():
        x = fa.var(1.0)
        with pytest.raises(TypeError, match="the direction must hold real numbers"):
            fa.hvp(x * x, [x], [1j])
        with pytest.raises(TypeError, match="fa.hvp wrt must be a fastad node or a sequence"):
            fa.hvp(x * x, 1.0, 1.0)


def test_directions_that_do_not_fit_the_nodes_say_how_to_give_them():
    # On a tape with blocks: an array direction for a scalar node was "only 0-dimensional
    # arrays can be converted to Python scalars".
    with fa.Tape():
        x, X = fa.var(0.5), fa.var(np.ones((2, 2)))
        L = (X * x).sum() * x
        for call in (fa.hvp, fa.jvp):
            with pytest.raises(
                ValueError,
                match="node 0, a scalar node, must be a number; got "
                r"an array of shape \(2, 2\)",
            ):
                call(L, [x, X], [np.ones((2, 2)), 1.0])
            with pytest.raises(
                ValueError,
                match="2 directions for 1 wrt nodes: give one direction per node, in a list",
            ):
                call(L, x, np.ones((2, 2)))
        product = fa.hvp(L, [x, X], [1.0, np.ones((2, 2))])  # d2L: 2 sum(X), and 2x
        assert product[0] == 8.0 + 4.0 and np.array_equal(product[1], np.ones((2, 2)))


def test_function_of_arrays_names_the_argument_of_a_bad_direction():
    X, w0 = np.ones((4, 3)), np.ones(3)
    f = fa.compile(lambda X, w: (X @ w).sum(), example=(X, w0), wrt=1)
    with pytest.raises(ValueError, match=r"direction for argument 1 has shape \(2,\), the arg"):
        f.hvp((X, w0), np.ones(2))


def test_a_one_output_sequence_is_named():
    f = fa.compile(lambda x, y: [x * y], example=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="returns a sequence of one output, not the output"):
        f.hvp(np.ones(2), np.ones(2))


@pytest.mark.parametrize(
    "function, point, expected",
    [
        # 2 x / y**3, where y * y underflows: inf from 2 out / (y * y)
        (lambda x, y: x / y, [1e-300, 1e-170], [[0.0, -1e340], [-1e340, 2e210]]),
        # e**-a / (1 + e**-a)**2, which sigmoid(a) (1 - sigmoid(a)) gives as 0
        (lambda x: fa.softplus(x), [40.0], [[4.248354255291589e-18]]),
        # -2a / (1 + a*a)**2, where (1 + a*a)**2 overflows
        (lambda x: fa.arctan(x), [1e100], [[-2e-300]]),
        # 2ab / r**4 and friends: about 1e-401, 0 in float64, not inf from 2ab
        (lambda x, y: fa.arctan2(x, y), [1e200, 2e200], [[0.0, 0.0], [0.0, 0.0]]),
        # b (b - 1) a**(b - 2) with b (b - 1) overflowing beside a**(b - 2) = 0
        (lambda x, y: x**y, [0.5, 1e200], [[0.0, 0.0], [0.0, 0.0]]),
    ],
)
def test_second_derivatives_at_extreme_operands(function, point, expected):
    for hessian in (
        eager_hessian(function, point),
        fa.compile(function, num_inputs=len(point), example=point).hessian(np.array(point)),
    ):
        np.testing.assert_allclose(hessian, expected, rtol=1e-12, atol=1e-320)


def test_untraced_functions_refuse_empty_batches_clearly():
    for call in ("hessian", "jacobian"):
        f = fa.compile(lambda x, y: x * y)
        with pytest.raises(ValueError, match="cannot evaluate an untraced function"):
            getattr(f, call)(np.empty((0, 2)))


def test_direction_of_one_point_must_have_its_shape():
    f = fa.compile(lambda x, y: x * x * y, example=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"direction shape \(1, 2\) does not match"):
        f.hvp(np.ones(2), np.ones((1, 2)))
    g = fa.compile(lambda X: (X * X).sum(), example=(np.ones(3),))
    with pytest.raises(TypeError, match=r"directions must be a list or tuple with one direction"):
        g.hvp((np.ones(3),), np.ones(3))
    assert g.hvp((np.ones(3),), [np.ones(3)])[0].tolist() == [2.0, 2.0, 2.0]
