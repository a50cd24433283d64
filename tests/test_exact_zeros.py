"""Exact zeros in real data take no slow path; a non-finite value meeting a zero still does.

Array products keep the scalar-node expansion's reach (``fastad/reach.py``):
BLAS makes each product, only rows or columns holding a non-finite element
are recomputed term by term (the slow path), and every zero gets its reach
from its factors. ``reach.slow_path_counts()`` counts the slow path's lines,
so these tests count it rather than time it: on finite data with exact zeros
(zero features, zero columns, dead ReLU units) it never runs, for every block
op, eager and compiled; where an infinity meets a zero it runs and gives the
scalar expansion's result.
"""

import numpy as np
import pytest

import fastad as fa
from fastad import reach
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
}

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
# Block ops with no second-order rule yet: their losses skip the Hessian-vector product.
FIRST_ORDER_ONLY = {"mse_loss", "prod", "logsumexp", "softmax", "log_softmax", "cross_entropy"}
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
        if name not in FIRST_ORDER_ONLY:
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
    if name not in FIRST_ORDER_ONLY:
        curvature = f.hvp(arguments, [np.ones_like(data[k]) for k in ARGUMENTS[:4]])
        assert all(np.all(np.isfinite(c)) for c in curvature)
    assert exact_lines() == before, f"{name}: the slow path ran on finite data"


def test_the_mlp_step_on_zero_pixels_never_takes_the_slow_path(rng):
    # The digits case: 64 pixels, many 0 in every image, some 0 in all of them.
    X = np.floor(np.abs(rng.normal(size=(256, 64))) * 8.0) * (rng.random((256, 64)) < 0.5)
    X[:, [0, 7, 56, 63]] = 0.0
    y = rng.integers(0, 10, size=256)
    W1, b1 = rng.normal(size=(64, 128)) * 0.2, rng.normal(size=128) * 0.1
    W2, b2 = rng.normal(size=(128, 10)) * 0.1, np.zeros(10)
    before = exact_lines()
    with fa.Tape():
        params = [fa.var(p) for p in (W1, b1, W2, b2)]
        L = fa.cross_entropy(fa.linear(fa.linear_relu(X, params[0], params[1]), *params[2:]), y)
        L.backward()
    assert exact_lines() == before
    # The zero pixels' weights get exact zero gradients (reach settled, not recomputed).
    assert np.all(params[0].grad[[0, 7, 56, 63]] == 0.0)
    assert not np.any(np.signbit(params[0].grad[[0, 7, 56, 63]]))


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
    from fastad import sweep

    with fa.Tape() as tape:
        X, W = fa.var(np.ones((2, 3))), fa.var(np.ones((3, 2)))
        data = np.ones((2, 3))
        Y = fa.linear(X, W, np.zeros(2))
        Z = fa.linear(fa.relu(Y), data, np.zeros(3))
        opcode = tape.columns()[0]
        blocks = tape.blocks
        need = lambda node: sweep.operand_needs(  # noqa: E731
            blocks.operands(node), opcode, blocks.values, None
        )
        Need = reach.Need
        assert need(Y.id)[:2] == (Need.VALUES, Need.VALUES)
        assert need(Z.id)[:2] == (Need.ALL, Need.NOTHING)
        wanted = np.zeros(len(tape), bool)
        wanted[[W.id, Y.id]] = True
        assert sweep.operand_needs(blocks.operands(Y.id), opcode, blocks.values, wanted)[:2] == (
            Need.NOTHING,
            Need.VALUES,
        )


@pytest.mark.parametrize("fused", ["linear_relu", "matmul"])
def test_values_only_gives_a_leaf_the_same_gradient_bit_for_bit(rng, fused):
    from fastad import registry

    X = sparse(rng, (16, 9), zero_columns=(0, 5))
    W, b = rng.normal(size=(9, 6)), rng.normal(size=6)
    G = rng.normal(size=(16, 6))
    G[rng.random(G.shape) < 0.3] = -0.0  # unreached adjoints: zeros in the products
    G[3] = -0.0  # a sample nothing reached: a zero row of dX
    code = optable.BLOCK_BY_NAME[fused].code
    rule = registry.RULES[code]
    values = (X, W, b) if fused == "linear_relu" else (X, W)
    out = rule.forward(values, None)
    Need = reach.Need
    full = rule.vjp(values, out, G, None, (Need.ALL,) * len(values))
    leaves = rule.vjp(values, out, G, None, (Need.VALUES,) * len(values))
    for exact, quick in zip(full[:2], leaves[:2], strict=True):
        assert np.any(np.signbit(exact[exact == 0.0]))  # zeros the full rule settled
        np.testing.assert_array_equal(exact, quick)
        # what the front end hands out: + 0.0, so the sign of a zero never shows
        assert not np.any(np.signbit(exact + 0.0) != np.signbit(quick + 0.0))
