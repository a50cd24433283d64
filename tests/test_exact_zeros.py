"""Exact zeros in real data take no slow path; a non-finite value meeting a zero still does.

Array products keep the scalar-node expansion's reach (``fastad/core/reach.py``):
BLAS makes each product, only rows or columns holding a non-finite element
are recomputed term by term (the slow path), and every zero gets its reach
from its factors. ``reach.slow_path_counts()`` counts the slow path's lines,
so these tests count it rather than time it: on finite data with exact zeros
(zero features, zero columns, dead ReLU units) it never runs, for every block
op, eager and compiled; where an infinity meets a zero it runs and gives the
scalar expansion's result.
"""

import math

import numpy as np
import pytest

import fastad as fa
from fastad.core import reach
from fastad.eager.handle import storage_of
from fastad.kernels import optable

B, N, H, C = 12, 7, 5, 4


def sparse(rng, shape, zero_columns=()):
    """Normal values with half the entries exactly 0 and the given columns all 0."""
    x = rng.normal(size=shape)
    x[rng.random(shape) < 0.5] = 0.0
    x[..., list(zero_columns)] = 0.0
    return x


@pytest.fixture
def data(rng):
    """Finite data with exact zeros: inputs, weights with a zero row, labels, targets."""
    X = sparse(rng, (B, N), zero_columns=(1, 4))
    W = rng.normal(size=(N, H))
    W[2] = 0.0  # an input feature no unit reads
    b = rng.normal(size=H)
    b[0] = -50.0  # unit 0 dead for every sample
    return dict(
        X=X,
        W=W,
        b=b,
        V=sparse(rng, (H, C), zero_columns=(3,)),
        S=sparse(rng, (3, B, N)),  # a stack, for batched matmul
        T=sparse(rng, (B, H)),
        labels=rng.integers(0, C, size=B).astype(np.float64),
        P=np.abs(sparse(rng, (B, N))) + 0.5,  # positive: prod, log, sqrt, pow
    )


# One loss per block op: a scalar that reaches the op through at least one product.
BLOCK_LOSSES = {
    "matmul": lambda d: ((d["X"] @ d["W"]) @ d["V"]).sum(),
    "sum": lambda d: (d["X"] @ d["W"]).sum(axis=0) @ d["V"][:, 0],
    "mean": lambda d: (d["X"] @ d["W"]).mean(axis=1).sum() + (d["X"] @ d["W"]).mean(),
    "reshape": lambda d: (d["X"] @ d["W"]).reshape(-1, 1).sum(),
    "transpose": lambda d: (d["W"].T @ d["X"].T).sum(),
    "index": lambda d: (d["X"] @ d["W"])[2:7, 1:].sum(),
    "linear": lambda d: fa.linear(d["X"], d["W"], d["b"]).sum(),
    "linear_relu": lambda d: (fa.linear_relu(d["X"], d["W"], d["b"]) @ d["V"]).sum(),
    "mse_loss": lambda d: fa.mse_loss(d["X"] @ d["W"], d["T"]),
    "max": lambda d: (d["X"] @ d["W"]).max(axis=1).sum(),
    "min": lambda d: (d["X"] @ d["W"]).min(axis=0).sum(),
    "prod": lambda d: (d["P"] @ d["W"] * 0.1).prod(axis=1).sum(),
    "concatenate": lambda d: fa.concatenate([d["X"] @ d["W"], d["T"]], axis=1).sum(),
    "logsumexp": lambda d: fa.logsumexp(d["X"] @ d["W"], axis=1).sum(),
    "softmax": lambda d: (fa.softmax(d["X"] @ d["W"], axis=1) @ d["V"]).sum(),
    "log_softmax": lambda d: fa.log_softmax(d["X"] @ d["W"], axis=1).sum(),
    "cross_entropy": lambda d: fa.cross_entropy(
        fa.linear(fa.linear_relu(d["X"], d["W"], d["b"]), d["V"], np.zeros(C)), d["labels"]
    ),
    "batched matmul": lambda d: (d["S"] @ d["W"]).sum(),
    "cholesky": lambda d: (fa.linalg.cholesky(spd(d)) @ d["V"]).sum(),
    "solve": lambda d: (fa.linalg.solve(spd(d), d["b"] * d["b"]) ** 2.0).sum(),
    "solve_triangular": lambda d: fa.linalg.solve_triangular(
        fa.linalg.cholesky(spd(d)), d["V"], lower=True
    ).sum(),
    "inv": lambda d: (fa.linalg.inv(spd(d)) @ d["V"]).sum(),
    "det": lambda d: fa.linalg.det(spd(d) * 0.5),
    "logabsdet": lambda d: fa.linalg.slogdet(spd(d))[1],
    "eigh": lambda d: (
        fa.linalg.eigh(spd(d) + np.diag(np.arange(H) * 3.0))[0].sum()
        + (fa.linalg.eigh(spd(d) + np.diag(np.arange(H) * 3.0))[1] ** 2.0 @ d["V"]).sum()
    ),
    "cumsum": lambda d: (np.cumsum(d["X"] @ d["W"], axis=0) @ d["V"]).sum(),
    "sign_det": lambda d: fa.linalg.slogdet(spd(d))[0] * (d["X"] @ d["W"]).sum(),
}


def spd(d):
    """A symmetric positive definite (H, H) block from the weights (which hold a zero row)."""
    return d["W"].T @ d["W"] + 2.0 * np.eye(H)


# Elementwise ops run on arrays by their scalar rules (no product of their own);
# each loss puts one after a product, so its adjoint meets the product's zeros.
UNARY = ("neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs")
UNARY += ("log1p", "expm1", "tan", "arctan", "sinh", "cosh", "erf", "softplus", "sign")
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": fa.maximum,
    "minimum": fa.minimum,
    "arctan2": fa.arctan2,
}


def elementwise_loss(name):
    def loss(d):
        Z = (d["P"] @ np.abs(d["W"])) * 0.1 + 0.5  # positive: every unary op is finite there
        if name == "neg":
            Y = -Z
        elif name == "stop_gradient":
            Y = fa.stop_gradient(Z) * Z
        elif name in BINARY:
            Y = BINARY[name](Z, np.abs(d["T"]) + 0.25)
        else:
            Y = getattr(fa, name)(Z)
        return Y.sum()

    return loss


ELEMENTWISE = (*UNARY, *BINARY, "stop_gradient")
LOSSES = {**BLOCK_LOSSES, **{name: elementwise_loss(name) for name in ELEMENTWISE}}
# The comparisons and picks have no derivative to carry (their partials are 0).
NOT_DIFFERENTIABLE = {"lt", "le", "gt", "ge", "eq", "ne", "pick", "pick_not"}
ARGUMENTS = ("X", "W", "b", "V", "S", "T", "labels", "P")
WRT = (0, 1, 2, 3)  # X, W, b, V: the data arguments after them get no gradient


def test_every_block_and_elementwise_op_has_a_case():
    block_ops = {op.name for op in optable.BLOCK_OPS}
    elementwise = {op.name for op in optable.OPS if op.arity > 0} - NOT_DIFFERENTIABLE
    assert block_ops <= set(BLOCK_LOSSES)
    assert elementwise == set(ELEMENTWISE)


def exact_lines():
    return reach.slow_path_counts()["exact_lines"]


@pytest.mark.parametrize("name", list(LOSSES))
def test_finite_data_with_exact_zeros_never_takes_the_slow_path_eager(name, data):
    before = exact_lines()
    with fa.Tape():
        leaves = {k: fa.var(v) for k, v in data.items() if k in ("X", "W", "b", "V", "P", "S")}
        L = LOSSES[name]({**data, **leaves})
        L.backward()
        grads = {k: v.grad for k, v in leaves.items()}
        directions = [np.ones(np.shape(v.value)) for v in leaves.values()]
        tangent = fa.jvp(L, list(leaves.values()), directions)
        curvature = fa.hvp(L, [leaves["W"]], [np.ones(data["W"].shape)])
        assert np.all(np.isfinite(curvature))
    assert np.isfinite(L.value) and np.isfinite(tangent)
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    assert exact_lines() == before, f"{name}: the slow path ran on finite data"


@pytest.mark.parametrize("name", list(LOSSES))
def test_finite_data_with_exact_zeros_never_takes_the_slow_path_compiled(name, data):
    def loss(X, W, b, V, S, T, labels, P):
        return LOSSES[name](dict(X=X, W=W, b=b, V=V, S=S, T=T, labels=labels, P=P))

    arguments = [data[k] for k in ARGUMENTS]
    f = fa.compile(loss, example=arguments, wrt=WRT)
    before = exact_lines()
    value, grads = f.value_and_grad(arguments)
    assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in grads)
    curvature = f.hvp(arguments, [np.ones_like(data[k]) for k in ARGUMENTS[:4]])
    assert all(np.all(np.isfinite(c)) for c in curvature)
    assert exact_lines() == before, f"{name}: the slow path ran on finite data"


@pytest.fixture(scope="module")
def digits():
    """A batch of 256 of scikit-learn's digits, scaled to [0, 1]: 49% of the pixels are 0,
    three pixels 0 in every image, many lit in only a few (the test extra installs it)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    rows = np.random.default_rng(7).choice(len(data.target), 256, replace=False)
    return data.data[rows] / 16.0, data.target[rows]


def test_the_mlp_step_on_the_digits_takes_no_slow_path_and_settles_nothing(rng, digits):
    X, y = digits
    W1, b1 = rng.normal(size=(64, 128)) * 0.2, rng.normal(size=128) * 0.1
    W2, b2 = rng.normal(size=(128, 10)) * 0.1, np.zeros(10)
    before = reach.slow_path_counts()
    with fa.Tape():
        params = [fa.var(p) for p in (W1, b1, W2, b2)]
        L = fa.cross_entropy(fa.linear(fa.linear_relu(X, params[0], params[1]), *params[2:]), y)
        L.backward()
    # dW1's zeros (the blank pixels' rows, and more) go to a leaf: nothing to settle.
    assert reach.slow_path_counts() == before
    blank = np.flatnonzero((X == 0.0).all(axis=0))
    assert blank.size >= 3 and np.all(params[0].grad[blank] == 0.0)
    assert np.all(params[0].grad[(X != 0.0).any(axis=0)].any(axis=1))


def test_the_digits_product_settles_the_reach_of_every_zero(rng, digits):
    # dW1 of the digits MLP where W1 is no leaf (its adjoint goes on): every zero's
    # reach settled, against an exact integer count of the terms each element receives.
    X, _ = digits
    dZ = rng.normal(size=(256, 128))
    dZ[rng.random(dZ.shape) < 0.5] = -0.0  # dead units
    dZ[:, 5] = -0.0  # a unit dead for the whole batch
    before = reach.slow_path_counts()
    got = reach.reach_matmul(X.T, dZ, False)
    counts = reach.slow_path_counts()
    terms = (X.T != 0.0).astype(np.int64) @ reach.reached_elements(dZ).astype(np.int64)
    np.testing.assert_array_equal(reach.reached_elements(got), terms > 0)
    np.testing.assert_allclose(got, X.T @ dZ, rtol=1e-12, atol=1e-300)
    assert (got == 0.0).sum() > 1000 and counts["exact_lines"] == before["exact_lines"]
    # Most zeros are settled by their pixel's row or their unit's column at once.
    scanned = counts["scanned_zeros"] - before["scanned_zeros"]
    assert 0 < scanned < (got == 0.0).sum() / 2


def test_blas_sums_every_term_so_an_unsent_term_shows_as_nan():
    # The fast path's premise: BLAS multiplies zero factors too (a BLAS that skipped
    # them would hide 0 * inf), at matrix-matrix and matrix-vector shapes alike.
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.array([[0.0, 1.0]]) @ np.array([[np.inf], [1.0]]))
        assert np.isnan(np.array([[0.0, 1.0], [2.0, 3.0]]) @ np.array([np.inf, 1.0]))[0]
        assert np.isnan(np.ones((3, 2)) @ np.array([[np.nan, 1.0], [0.0, 1.0]]))[:, 0].all()
        assert np.isnan(np.zeros((4, 5)) @ np.full((5, 6), np.inf)).all()


# -- where an infinity meets a zero, the slow path runs and the result is the scalar one ------
def gradient(build, values, as_scalar_nodes=False):
    with fa.Tape(), np.errstate(invalid="ignore"):  # the forward's 0 * inf is nan, as in NumPy
        A = fa.scalar_nodes(values) if as_scalar_nodes else fa.var(values)
        L = build(A)
        if as_scalar_nodes:
            return np.reshape(fa.grad(L, list(A.ravel())), values.shape)
        return fa.grad(L, A)


INFINITE_CASES = {
    # an inf weight meets a zero input: d/dA reads W.T with the inf
    "inf weight, zero input": (
        lambda A: (A @ np.array([[np.inf, 1.0], [2.0, 0.0]])).sum(),
        np.array([[0.0, 3.0], [1.0, 0.0]]),
    ),
    # an inf adjoint (sqrt'(0)) meets a zero weight in the next product
    "inf adjoint, zero weight": (
        lambda A: fa.sqrt(A @ np.array([[0.0, 1.0], [1.0, 0.0]])).sum(),
        np.array([[0.0, 4.0], [9.0, 0.0]]),
    ),
    # an unreached adjoint (dead unit) meets an inf value
    "dead unit, inf input": (
        lambda A: fa.linear_relu(np.array([[np.inf, 1.0]]), A, np.array([-np.inf, 0.0])).sum(),
        np.array([[-1.0, 2.0], [3.0, 4.0]]),
    ),
}
# The scalar-node references: linear_relu takes no scalar nodes, so it is written unfused.
UNFUSED = {
    "dead unit, inf input": lambda A: fa.relu(
        np.array([[np.inf, 1.0]]) @ A + np.array([-np.inf, 0.0])
    ).sum(),
}


@pytest.mark.parametrize("name", list(INFINITE_CASES))
def test_an_infinity_meeting_a_zero_takes_the_slow_path_with_the_exact_result(name):
    build, values = INFINITE_CASES[name]
    expected = gradient(UNFUSED.get(name, build), values, as_scalar_nodes=True)
    before = exact_lines()
    got = gradient(build, values)
    assert exact_lines() > before, f"{name}: the exact recomputation did not run"
    np.testing.assert_array_equal(got, expected)


# -- reach_matmul against a term-by-term reference ---------------------------------------------
def term_by_term(x, y, adjoint_left):
    """``x @ y`` as the scalar-node expansion sends it: value and reach of every element."""
    m, k = x.shape
    n = y.shape[1]
    value = np.zeros((m, n))
    reached = np.zeros((m, n), bool)
    for i in range(m):
        for j in range(n):
            for t in range(k):
                adjoint, other = (x[i, t], y[t, j]) if adjoint_left else (y[t, j], x[i, t])
                if other != 0.0 and not (adjoint == 0.0 and np.signbit(adjoint)):
                    value[i, j] += adjoint * other
                    reached[i, j] = True
    return value, reached


def random_factor(rng, shape, adjoint, infinite):
    x = rng.normal(size=shape)
    x[rng.random(shape) < 0.4] = 0.0
    if adjoint:  # unreached elements, and whole unreached rows
        x[rng.random(shape) < 0.3] = -0.0
        x[rng.integers(shape[0])] = -0.0
    x[:, rng.integers(shape[1])] = -0.0 if adjoint else 0.0
    if infinite:
        x[rng.integers(shape[0]), rng.integers(shape[1])] = rng.choice([np.inf, -np.inf, np.nan])
    return x


@pytest.mark.parametrize("infinite", [False, True], ids=["finite", "non-finite"])
@pytest.mark.parametrize("adjoint_left", [True, False], ids=["adjoint left", "adjoint right"])
def test_reach_matmul_gives_every_element_the_value_and_reach_of_its_terms(
    rng, adjoint_left, infinite
):
    for _ in range(20):
        m, k, n = rng.integers(1, 9, size=3)
        x = random_factor(rng, (m, k), adjoint_left, infinite and rng.random() < 0.5)
        y = random_factor(rng, (k, n), not adjoint_left, infinite)
        with np.errstate(invalid="ignore"):  # inf - inf, as the sweeps give it
            value, reached = term_by_term(x, y, adjoint_left)
            before = exact_lines()
            got = reach.reach_matmul(x, y, adjoint_left)
        np.testing.assert_allclose(got, value, rtol=1e-12, atol=1e-300)
        np.testing.assert_array_equal(reach.reached_elements(got), reached)
        if not infinite:
            assert exact_lines() == before


SHAPES = {
    "vector @ matrix": ((5,), (5, 3)),
    "matrix @ vector": ((4, 5), (5,)),
    "vector @ vector": ((5,), (5,)),
    "empty inner axis": ((3, 0), (0, 4)),
    "stack @ matrix": ((2, 3, 4), (4, 5)),
    "matrix @ stack": ((3, 4), (2, 4, 5)),
    "stack @ stack, broadcast": ((2, 1, 3, 4), (3, 4, 2)),
    "empty stack inner axis": ((2, 3, 0), (0, 4)),
}


@pytest.mark.parametrize("infinite", [False, True], ids=["finite", "non-finite"])
@pytest.mark.parametrize("adjoint_left", [True, False], ids=["adjoint left", "adjoint right"])
@pytest.mark.parametrize("shapes", list(SHAPES))
def test_reach_matmul_of_any_shape_and_layout_matches_its_terms(
    rng, shapes, adjoint_left, infinite
):
    x_shape, y_shape = SHAPES[shapes]

    def factor(shape, adjoint):
        if 0 in shape or len(shape) < 2:
            x = rng.normal(size=shape)
            x[rng.random(shape) < 0.4] = -0.0 if adjoint else 0.0
            return x
        # a transposed view, as a rule's W.T or X.T
        flat = random_factor(rng, (shape[-1], shape[-2]), adjoint, infinite)
        return (
            np.stack([flat.T] * math.prod(shape[:-2])).reshape(shape) if len(shape) > 2 else flat.T
        )

    x, y = factor(x_shape, adjoint_left), factor(y_shape, not adjoint_left)
    with np.errstate(invalid="ignore"):
        got = reach.reach_matmul(x, y, adjoint_left)
        expected = np.matmul(x, y)  # the shape, and the values where no term is unsent
        assert got.shape == expected.shape
        x2 = x[np.newaxis] if x.ndim == 1 else x
        y2 = y[:, np.newaxis] if y.ndim == 1 else y
        batch = np.broadcast_shapes(x2.shape[:-2], y2.shape[:-2])
        count = math.prod(batch)
        xs = np.broadcast_to(x2, batch + x2.shape[-2:]).reshape(count, *x2.shape[-2:])
        ys = np.broadcast_to(y2, batch + y2.shape[-2:]).reshape(count, *y2.shape[-2:])
        flat = np.reshape(got, (count, x2.shape[-2], y2.shape[-1]))
        for i in range(len(xs)):
            value, reached = term_by_term(xs[i], ys[i], adjoint_left)
            np.testing.assert_allclose(flat[i], value, rtol=1e-12, atol=1e-300)
            np.testing.assert_array_equal(reach.reached_elements(flat[i]), reached)


def test_one_infinite_value_recomputes_one_line_not_the_product(rng):
    # An inf in one column of the values makes that column of the product non-finite
    # in every row: the column is the one line to recompute.
    adjoint = rng.normal(size=(30, 8))
    values = rng.normal(size=(8, 20))
    values[3, 7] = np.inf
    values[4, 7] = 0.0
    before = exact_lines()
    with np.errstate(invalid="ignore"):
        got = reach.reach_matmul(adjoint, values, True)
    assert exact_lines() - before == 1
    value, reached = term_by_term(adjoint, values, True)
    np.testing.assert_allclose(got, value, rtol=1e-12)
    np.testing.assert_array_equal(reach.reached_elements(got), reached)


def test_a_stack_of_products_settles_each_matrix(rng):
    x = np.stack([random_factor(rng, (4, 3), True, False) for _ in range(3)])
    y = random_factor(rng, (3, 5), False, False)
    before = exact_lines()
    got = reach.reach_matmul(x, y, True)
    assert exact_lines() == before
    for i in range(3):
        value, reached = term_by_term(x[i], y, True)
        np.testing.assert_allclose(got[i], value, rtol=1e-12, atol=1e-300)
        np.testing.assert_array_equal(reach.reached_elements(got[i]), reached)


# -- a leaf's adjoint goes no further: its zeros need no reach ---------------------------------
def test_the_sweep_asks_values_only_for_leaves_and_nothing_for_data():
    from fastad.core import driver

    with fa.Tape() as tape:
        X, W = fa.var(np.ones((2, 3))), fa.var(np.ones((3, 2)))
        data = np.ones((2, 3))
        Y = fa.linear(X, W, np.zeros(2))
        Z = fa.linear(fa.relu(Y), data, np.zeros(3))
        opcode = storage_of(tape).columns()[0]
        blocks = storage_of(tape).blocks
        need = lambda node: driver.operand_needs(  # noqa: E731
            blocks.operands(node), opcode, blocks.values, None
        )
        Need = reach.Need
        assert need(Y.id)[:2] == (Need.VALUES, Need.VALUES)
        assert need(Z.id)[:2] == (Need.ALL, Need.NOTHING)
        wanted = np.zeros(len(tape), bool)
        wanted[[W.id, Y.id]] = True
        assert driver.operand_needs(blocks.operands(Y.id), opcode, blocks.values, wanted)[:2] == (
            Need.NOTHING,
            Need.VALUES,
        )


@pytest.mark.parametrize("infinite", [False, True], ids=["finite", "an inf adjoint"])
@pytest.mark.parametrize("fused", ["linear_relu", "matmul"])
def test_values_only_settles_nothing_and_keeps_every_value(rng, fused, infinite):
    from fastad.core import block_rules

    X = sparse(rng, (16, 9), zero_columns=(0, 5))
    W, b = rng.normal(size=(9, 6)), rng.normal(size=6)
    G = rng.normal(size=(16, 6))
    G[rng.random(G.shape) < 0.3] = -0.0  # unreached adjoints: zeros in the products
    G[3] = -0.0  # a sample nothing reached: a zero row of dX
    code = optable.BLOCK_BY_NAME[fused].code
    rule = block_rules.RULES[code]
    values = (X, W, b) if fused == "linear_relu" else (X, W)
    out = rule.forward(values, None)
    if infinite:  # at a live unit: it meets X's zeros in dW, W's entries in dX
        G[tuple(np.argwhere(out > 0.0)[0])] = np.inf
    Need = reach.Need
    counts = [reach.slow_path_counts()]
    with np.errstate(invalid="ignore"):
        full = rule.vjp(values, out, G, None, (Need.ALL,) * len(values))
        counts.append(reach.slow_path_counts())
        leaves = rule.vjp(values, out, G, None, (Need.VALUES,) * len(values))
    counts.append(reach.slow_path_counts())
    settled, exact = ([c[key] for c in counts] for key in ("settled_zeros", "exact_lines"))
    assert settled[1] > settled[0] and settled[2] == settled[1]  # only the full rule settles
    if infinite:  # both recompute the non-finite lines, the same ones
        assert exact[1] > exact[0] and exact[2] - exact[1] == exact[1] - exact[0]
    for settled, quick in zip(full[:2], leaves[:2], strict=True):
        assert np.any(np.signbit(settled[settled == 0.0]))  # the full rule's strong zeros
        np.testing.assert_array_equal(settled, quick)  # every value, nan where nan
        np.testing.assert_array_equal(np.isnan(settled), np.isnan(quick))


def test_cancelled_tangent_meeting_an_infinite_partial_gives_nan_both_ways():
    # t = x - x has tangent 1 - 1 = 0 by cancellation, not because nothing
    # moves it; log'(0) = inf, so forward and reverse mode both give nan.
    f = fa.compile(lambda x: fa.log(x - x), optimize=False)
    point = np.array([2.0])
    assert math.isnan(f.grad(point)[0])
    assert math.isnan(f.jvp(point, np.array([1.0]))[1])
    with fa.Tape():
        x = fa.var(2.0)
        y = fa.log(x - x)
        assert math.isnan(fa.grad(y, x)) and math.isnan(fa.jvp(y, [x], [1.0]))


def test_nodes_nothing_reached_report_plus_zero():
    # The sweeps mark unreached adjoints with -0.0 internally; users see +0.0.
    def positive_zero(value):
        return value == 0.0 and math.copysign(1.0, value) == 1.0

    with fa.Tape() as tape:
        x, unused = fa.var(2.0), fa.var(5.0)
        y = fa.exp(x)
        y.backward()
        assert positive_zero(unused.grad) and positive_zero(fa.grad(y, [x, unused])[1])
        assert all(positive_zero(g) for g in tape.grad[[1]])
        assert positive_zero(fa.jvp(y, [unused], [1.0]))
    f = fa.compile(lambda x, unused: fa.exp(x), example=np.array([1.0, 2.0]))
    for gradient in (f.grad(np.array([1.0, 2.0])), f.grad(np.array([[1.0, 2.0]] * 5))[0]):
        assert positive_zero(gradient[1])
    assert positive_zero(f.jvp(np.array([1.0, 2.0]), np.array([0.0, 1.0]))[1])
    with fa.Tape():
        X = fa.var(np.array([1.0, 2.0, 3.0]))
        X[0].backward()
        assert [math.copysign(1.0, g) for g in X.grad] == [1.0, 1.0, 1.0]
        assert X.grad.tolist() == [1.0, 0.0, 0.0]


def test_prod_sends_nothing_past_a_zero_even_beside_an_inf():
    # The product of the others was inf * 0 = nan. The rule: an element's
    # derivative is exactly 0 when another element of its slice is 0, whatever
    # the others; by hand, and as both chains of scalar multiplies give for
    # the first row.
    cases = {
        (np.inf, 2.0, 0.0): [0.0, 0.0, np.inf],
        (0.0, np.inf, 3.0, 1.0): [np.inf, 0.0, 0.0, 0.0],
        (np.nan, 0.0, 1.0): [0.0, np.nan, np.nan],  # a nan among the others: nan
        (2.0, 0.0, 3.0): [0.0, 6.0, 0.0],
    }
    for row, expected in cases.items():
        with fa.Tape():
            x = fa.var(np.array(row))
            np.testing.assert_array_equal(fa.grad(x.prod(), x), expected)
            tangents = [fa.jvp(x.prod(), x, direction) for direction in np.eye(len(row))]
            np.testing.assert_array_equal(tangents, expected)
    for chain in (lambda a: (a[0] * a[1]) * a[2], lambda a: a[0] * (a[1] * a[2])):
        with fa.Tape():
            nodes = fa.scalar_nodes(np.array([np.inf, 2.0, 0.0]))
            assert fa.grad(chain(nodes), list(nodes)).tolist() == [0.0, 0.0, np.inf]


def test_prods_derivative_is_nan_beside_a_nan_and_zero_past_a_zero():
    with fa.Tape():
        x = fa.var(np.array([np.nan, 0.0, 1.0]))
        np.testing.assert_array_equal(fa.grad(x.prod(), x), [0.0, np.nan, np.nan])


def test_prods_hessian_beside_an_overflowed_partial_product_is_the_scalar_chains():
    # Finite inputs whose partial products overflow: a tangent that never moved met an
    # inf prefix product as 0 * inf = nan, where the chain of scalar multiplies (and the
    # formula H_ij = prod of the others but i and j) sends nothing and stays finite.
    for row in ([2.0, 1e308, 1e308], [1e200, 1e200, 3.0, -1e200]):
        x0 = np.array(row)
        n = len(row)
        with np.errstate(over="ignore"):  # 1e200 * 1e200: some of the second row's are inf
            want = np.array(
                [
                    [0.0 if i == j else np.prod(np.delete(x0, [i, j])) for j in range(n)]
                    for i in range(n)
                ]
            )
        with fa.Tape():
            x = fa.var(x0)
            got = np.array([fa.hvp(x.prod(), x, d) for d in np.eye(n)])
        with fa.Tape():
            nodes = fa.scalar_nodes(x0)
            chain = nodes[0]
            for node in nodes[1:]:
                chain = chain * node
            scalars = np.array([fa.hvp(chain, list(nodes), d) for d in np.eye(n)])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(scalars, want)
        np.testing.assert_array_equal(fa.hessian(lambda X: np.prod(X))(x0), want)
