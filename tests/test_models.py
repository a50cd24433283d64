"""Models with arrays: the softmax family, reductions and shape ops,
``where``/``clip``/``stop_gradient`` on arrays, and the NumPy protocol.

References are independent: the same computation recorded unfused (blocks)
and as scalar nodes, SciPy's special functions, NumPy written by hand, and
central differences (``tests/test_registry.py`` has those for every op).
"""

import math
import warnings

import numpy as np
import pytest
import scipy.special

import fastad as fa
from fastad.core import block_rules
from fastad.core.reach import Need
from fastad.kernels import optable


def scalar_values(nodes):
    return np.vectorize(lambda v: v.value)(nodes)


def scalar_grads(nodes):
    return np.vectorize(lambda v: v.grad)(nodes)


# -- the softmax family: fused == unfused blocks == scalar nodes -------------------------------
def _unfused_logsumexp(x, axis):
    m = fa.stop_gradient(x.max(axis=axis, keepdims=True))
    return m + fa.log(fa.exp(x - m).sum(axis=axis, keepdims=True))


def _scalar_logsumexp(row):
    m = max(v.value for v in row)
    return m + fa.log(sum(fa.exp(v - m) for v in row))


FAMILY = {
    "logsumexp": (
        lambda x: fa.logsumexp(x, axis=1),
        lambda x: _unfused_logsumexp(x, 1).reshape(-1),
        lambda rows: np.array([_scalar_logsumexp(row) for row in rows], dtype=object),
    ),
    "softmax": (
        fa.softmax,
        lambda x: fa.exp(x - _unfused_logsumexp(x, 1)),
        lambda rows: np.array(
            [[fa.exp(v - _scalar_logsumexp(row)) for v in row] for row in rows], dtype=object
        ),
    ),
    "log_softmax": (
        fa.log_softmax,
        lambda x: x - _unfused_logsumexp(x, 1),
        lambda rows: np.array(
            [[v - _scalar_logsumexp(row) for v in row] for row in rows], dtype=object
        ),
    ),
}


@pytest.mark.parametrize("name", list(FAMILY))
@pytest.mark.parametrize("scale", [1.0, 1e4], ids=["unit", "1e4"])
def test_softmax_family_fused_equals_unfused_equals_scalar_nodes(name, scale, rng):
    fused, unfused, scalars = FAMILY[name]
    X = rng.normal(size=(4, 5)) * scale
    X[0, :2] = X[0, 2]  # ties at the maximum
    weights = rng.normal(size=fused(X).shape)
    results = []
    for way in (fused, unfused):
        with fa.Tape():
            x = fa.var(X)
            out = way(x)
            (out * weights).sum().backward()
            results.append((out.value, x.grad))
    with fa.Tape():
        nodes = fa.scalar_nodes(X)
        out = scalars(nodes)
        (out * weights).sum().backward()
        results.append((scalar_values(out), scalar_grads(nodes)))
    for value, gradient in results[1:]:
        np.testing.assert_allclose(results[0][0], value, rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_allclose(results[0][1], gradient, rtol=1e-10, atol=1e-12)


def test_softmax_family_is_stable_at_logits_of_1e4():
    X = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4 + 1.0, -1e4], [1e4, 1e4, 1e4 - 2.0]])
    with fa.Tape():
        x = fa.var(X)
        lse, P, logP = fa.logsumexp(x, axis=1), fa.softmax(x), fa.log_softmax(x)
        for out, reference in (
            (lse, scipy.special.logsumexp(X, axis=1)),
            (P, scipy.special.softmax(X, axis=1)),
            (logP, scipy.special.log_softmax(X, axis=1)),
        ):
            np.testing.assert_allclose(out.value, reference, rtol=1e-15)
        softmax = scipy.special.softmax(X, axis=1)
        np.testing.assert_allclose(fa.grad(lse.sum(), x), softmax, rtol=1e-15)
        G = np.arange(9.0).reshape(3, 3)
        by_hand = softmax * (G - (G * softmax).sum(axis=1, keepdims=True))
        np.testing.assert_allclose(fa.grad((P * G).sum(), x), by_hand, rtol=1e-12, atol=1e-300)
        by_hand = G - softmax * G.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(fa.grad((logP * G).sum(), x), by_hand, rtol=1e-12)


def test_logsumexp_follows_ieee_at_infinite_and_nan_rows():
    inf = math.inf
    X = np.array([[inf, 1.0], [-inf, -inf], [np.nan, 1.0], [3.0, -inf]])
    got = fa.logsumexp(X, axis=1)
    np.testing.assert_array_equal(got, [inf, -inf, np.nan, 3.0])


@pytest.mark.parametrize("backend", ["tape", "codegen"])
def test_softmax_of_a_row_holding_inf_is_nan_throughout(backend):
    # The textbook formula with IEEE arithmetic (SciPy's, JAX's and PyTorch's answer):
    # exp(x - max) / sum, where x - max is nan at the inf and the sum is nan. The
    # log-softmax is nan there too, the logsumexp inf; the other rows are untouched.
    inf = math.inf
    X = np.array([[inf, -inf, 2.0], [1.0, -inf, 2.0], [0.5, 0.25, -1.0]])
    with np.errstate(invalid="ignore"):
        shifted = X - X.max(axis=1, keepdims=True)
        by_formula = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    assert np.isnan(by_formula[0]).all()
    weights = np.arange(9.0).reshape(3, 3)

    def family(X):
        return (
            (fa.softmax(X, axis=1) * weights).sum()
            + fa.log_softmax(X, axis=1).sum()
            + fa.logsumexp(X, axis=1) @ np.array([0.0, 1.0, 1.0])
        )

    if backend == "tape":
        with fa.Tape():
            x = fa.var(X)
            values = [fa.softmax(x, axis=1).value, fa.log_softmax(x, axis=1).value]
            lse = fa.logsumexp(x, axis=1).value
            family(x).backward()
            gradient = x.grad
    else:
        f = fa.compile(lambda X: fa.softmax(X, axis=1), example=(X,), backend="codegen")
        g = fa.compile(lambda X: fa.log_softmax(X, axis=1), example=(X,), backend="codegen")
        h = fa.compile(lambda X: fa.logsumexp(X, axis=1), example=(X,), backend="codegen")
        values, lse = [f((X,)), g((X,))], h((X,))
        gradient = fa.compile(family, example=(X,), backend="codegen").grad((X,))[0]
    np.testing.assert_allclose(values[0], by_formula, rtol=1e-15)
    assert np.isnan(values[1][0]).all() and np.isfinite(values[1][1:]).sum() == 5  # one -inf
    assert lse[0] == inf and lse[1] == pytest.approx(2.0 + math.log1p(math.exp(-1.0)))
    assert np.isnan(gradient[0]).all() and np.isfinite(gradient[1:]).all()


# -- cross-entropy --------------------------------------------------------------------------
def _numpy_cross_entropy(X, labels):
    """Mean softmax cross-entropy and its gradient, by hand."""
    shifted = X - X.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(X.shape[0])
    loss = -log_p[rows, labels].mean()
    d = np.exp(log_p)
    d[rows, labels] -= 1.0
    return loss, d / X.shape[0]


@pytest.mark.parametrize("scale", [1.0, 1e4], ids=["unit", "1e4"])
def test_cross_entropy_with_labels_equals_numpy_by_hand(scale, rng):
    X = rng.normal(size=(6, 4)) * scale
    labels = rng.integers(0, 4, size=6)
    loss, gradient = _numpy_cross_entropy(X, labels)
    with fa.Tape():
        x = fa.var(X)
        L = fa.cross_entropy(x, labels)
        L.backward()
        assert L.value == pytest.approx(loss, rel=1e-13)
        np.testing.assert_allclose(x.grad, gradient, rtol=1e-12, atol=1e-17)
        total = fa.cross_entropy(x, labels, reduction="sum")
        assert total.value == pytest.approx(6 * loss, rel=1e-13)
        along = rng.normal(size=X.shape)
        assert fa.jvp(L, x, along) == pytest.approx(float((gradient * along).sum()), rel=1e-12)
    assert fa.cross_entropy(X, labels) == pytest.approx(loss, rel=1e-13)  # plain arrays


def test_cross_entropy_three_ways_with_probability_targets(rng):
    X = rng.normal(size=(3, 4))
    T = rng.dirichlet(np.ones(4), size=3)
    results = []
    for way in ("fused", "blocks", "scalars"):
        with fa.Tape():
            if way == "scalars":
                x, t = fa.scalar_nodes(X), fa.scalar_nodes(T)
                losses = [
                    -sum(t[r, c] * (x[r, c] - _scalar_logsumexp(x[r])) for c in range(4))
                    for r in range(3)
                ]
                L = sum(losses) / 3.0
            else:
                x, t = fa.var(X), fa.var(T)
                if way == "fused":
                    L = fa.cross_entropy(x, t)
                else:
                    L = -(t * (x - _unfused_logsumexp(x, 1))).sum(axis=1).mean()
            L.backward()
            grads = [x.grad, t.grad] if way != "scalars" else [scalar_grads(x), scalar_grads(t)]
            results.append((L.value, grads))
    for value, grads in results[1:]:
        assert value == pytest.approx(results[0][0], rel=1e-13)
        for got, want in zip(results[0][1], grads, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(results[0][1][1], -scipy.special.log_softmax(X, axis=1) / 3)


def test_cross_entropy_zero_targets_contribute_nothing_even_at_minus_inf():
    X = np.array([[0.0, -np.inf, 1.0]])
    T = np.array([[0.5, 0.0, 0.5]])
    expected = -(0.5 * scipy.special.log_softmax(np.array([0.0, 1.0]))).sum()
    assert fa.cross_entropy(X, T) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "labels, match",
    [
        ([0, 4, 1], "label 4 of sample 1 is not a class"),
        ([0, -1, 1], "label -1"),
        ([0.0, 1.5, 1.0], "label 1.5"),
        ([0.0, np.nan, 1.0], "label nan"),
        ([0, 1], "do not fit logits of shape"),
    ],
)
def test_cross_entropy_refuses_labels_that_are_not_classes(labels, match):
    with fa.Tape():
        x = fa.var(np.zeros((3, 4)))
        with pytest.raises(ValueError, match=match):
            fa.cross_entropy(x, np.array(labels))
        with pytest.raises(ValueError, match='"mean" or "sum"'):
            fa.cross_entropy(x, np.zeros(3), reduction="none")


def test_cross_entropy_checks_labels_again_in_every_replay():
    f = fa.compile(lambda x, y: fa.cross_entropy(x, y), example=(np.zeros((2, 3)), np.zeros(2)))
    assert f((np.zeros((2, 3)), np.array([2.0, 1.0]))) == pytest.approx(math.log(3))
    with pytest.raises(ValueError, match="label 3"):
        f((np.zeros((2, 3)), np.array([0.0, 3.0])))


# -- reductions and shapes against NumPy -------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "var", "std"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (2, 1, 0)], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_give_numpys_values_and_shapes(name, axis, keepdims, rng):
    A = rng.uniform(0.5, 1.5, size=(2, 3, 4))
    with fa.Tape():
        out = getattr(fa.var(A), name)(axis=axis, keepdims=keepdims)
        expected = getattr(np, name)(A, axis=axis, keepdims=keepdims)
        got = out.value
        assert np.shape(got) == np.shape(expected)
        np.testing.assert_allclose(got, expected, rtol=1e-13)
        assert isinstance(out, fa.Var) == (np.ndim(expected) == 0)


def test_reductions_refuse_bad_axes():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        with pytest.raises(ValueError, match="twice"):
            X.sum(axis=(0, -2))
        with pytest.raises(ValueError, match="out of range"):
            X.mean(axis=(0, 2))
        with pytest.raises(TypeError, match="axis must be"):
            X.max(axis=1.0)
        with pytest.raises(TypeError, match="keepdims"):
            X.sum(keepdims=None)
        with pytest.raises(ValueError, match="permutation"):
            X.transpose(0, 0)


def test_prod_is_exact_at_zeros():
    # One zero: only it gets a gradient (the product of the others); two: none.
    # (With an inf beside a zero the chain's order decides between 0 and nan:
    # tests/test_exact_zeros.py has the rule for that, by hand.)
    for row in ([2.0, 0.0, 3.0], [0.0, 5.0, 0.0], [np.inf, 2.0, 3.0]):
        with fa.Tape():
            x = fa.var(np.array(row))
            block = fa.grad(x.prod(), x)
            nodes = fa.scalar_nodes(np.array(row))
            chain = nodes[0] * nodes[1] * nodes[2]
            chain.backward()
            np.testing.assert_array_equal(block, scalar_grads(nodes))


def test_joining_and_permuting_match_numpy(rng):
    A, B = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    with fa.Tape():
        a, b = fa.var(A), fa.var(B)
        cases = [
            (fa.concatenate([a, B, b], axis=-1), np.concatenate([A, B, B], axis=-1)),
            (fa.concatenate([a, b], axis=None), np.concatenate([A, B], axis=None)),
            (fa.stack([a, b]), np.stack([A, B])),
            (fa.stack([a, B], axis=2), np.stack([A, B], axis=2)),
            (fa.stack([a, b], axis=-1).transpose(2, 0, 1), np.stack([A, B], -1).transpose(2, 0, 1)),
            (a.ravel(), A.ravel()),
        ]
        for got, expected in cases:
            np.testing.assert_array_equal(got.value, expected)
        weights = rng.normal(size=(2, 9))
        (fa.concatenate([a, a, b], axis=1) * weights).sum().backward()
        np.testing.assert_allclose(a.grad, weights[:, :3] + weights[:, 3:6])
        np.testing.assert_allclose(b.grad, weights[:, 6:])
        with pytest.raises(ValueError, match="one shape"):
            fa.stack([a, a.T])
        with pytest.raises(ValueError, match="other axes match"):
            fa.concatenate([a, a.T], axis=0)
        with pytest.raises(ValueError, match="scalar node"):
            fa.concatenate([a, a.sum()])


def test_batched_matmul_matches_numpy_and_keeps_strong_zeros(rng):
    A, B = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5))
    B[1, 2] = np.inf
    with fa.Tape():
        a, b = fa.var(A), fa.var(B)
        C = a @ b
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(C.value, np.matmul(A, B))
        # Only C[0, :, :2] is used: nothing reaches a[1], and B's inf column
        # never meets an unreached adjoint (no 0 * inf = nan).
        grad_a, grad_b = fa.grad(C[0, :, :2].sum(), [a, b])
    with fa.Tape():
        nodes_a, nodes_b = fa.scalar_nodes(A), fa.scalar_nodes(B)
        (nodes_a[0] @ nodes_b)[:, :2].sum().backward()
    # atol=0: every zero (and nothing else) where the scalar nodes have one
    np.testing.assert_allclose(grad_a[0], scalar_grads(nodes_a[0]), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(grad_a[1], np.zeros((3, 4)))
    np.testing.assert_allclose(grad_b, scalar_grads(nodes_b), rtol=1e-14, atol=0)
    with fa.Tape():
        with pytest.raises(ValueError, match="batch"):
            fa.var(np.ones((2, 3, 4))) @ fa.var(np.ones((3, 4, 5)))


# -- where, clip, stop_gradient on arrays ------------------------------------------------------
def test_where_on_arrays_keeps_the_untaken_side_out():
    X0 = np.array([-1.0, 0.0, 4.0, np.inf])
    with fa.Tape():
        X = fa.var(X0)
        with np.errstate(invalid="ignore", divide="ignore"):
            Y = fa.where(X > 0, fa.sqrt(X), 0.0)  # sqrt(-1) is nan, its slope at 0 inf
            Z = fa.where(X0 < 1.0, 1.0 / X, X)  # 1/0 = inf on the side taken at 0
        np.testing.assert_array_equal(Y.value, [0.0, 0.0, 2.0, np.inf])
        np.testing.assert_array_equal(fa.grad(Y[:3].sum(), X), [0.0, 0.0, 0.25, 0.0])
        assert fa.grad(Z[2], X).tolist() == [0.0, 0.0, 1.0, 0.0]
    np.testing.assert_array_equal(fa.where(X0 > 0, X0, -X0), np.abs(X0))  # plain arrays


def test_clip_gradient_is_one_inside_zero_outside_half_at_a_bound():
    with fa.Tape():
        X = fa.var(np.array([-2.0, -1.0, 0.5, 1.0, 3.0]))
        Y = fa.clip(X, -1.0, 1.0)
        np.testing.assert_array_equal(Y.value, [-1.0, -1.0, 0.5, 1.0, 1.0])
        np.testing.assert_array_equal(fa.grad(Y.sum(), X), [0.0, 0.5, 1.0, 0.5, 0.0])
        x = fa.var(5.0)
        assert fa.grad(fa.clip(x, None, 2.0), x) == 0.0
        assert fa.clip(X, None, None) is X  # no bounds: x itself, as NumPy 2


def test_stop_gradient_passes_the_value_and_stops_the_gradient():
    with fa.Tape():
        x = fa.var(3.0)
        y = x * fa.stop_gradient(x)  # d/dx = stop(x) = 3, not 2x = 6
        assert (y.value, fa.grad(y, x)) == (9.0, 3.0)
        X = fa.var(np.array([1.0, 2.0]))
        Y = (X * fa.stop_gradient(X * 10.0)).sum()
        assert Y.value == 50.0
        np.testing.assert_array_equal(fa.grad(Y, X), [10.0, 20.0])
        assert fa.jvp(Y, X, np.ones(2)) == 30.0
    assert fa.stop_gradient(2.5) == 2.5


# -- the NumPy protocol ---------------------------------------------------------------------
NUMPY_CALLS = {
    "np.sum": (lambda x: np.sum(x, axis=0), lambda x: x.sum(axis=0)),
    "np.mean": (lambda x: np.mean(x, axis=(0, 1), keepdims=True), lambda x: x.mean((0, 1), True)),
    "np.max": (lambda x: np.max(x, axis=1), lambda x: x.max(axis=1)),
    "np.amin": (lambda x: np.amin(x), lambda x: x.min()),
    "np.prod": (lambda x: np.prod(x, axis=-1), lambda x: x.prod(axis=-1)),
    "np.var": (lambda x: np.var(x, ddof=1), lambda x: x.var(ddof=1)),
    "np.std": (lambda x: np.std(x, axis=0), lambda x: x.std(axis=0)),
    "np.reshape": (lambda x: np.reshape(x, (3, 2)), lambda x: x.reshape(3, 2)),
    "np.transpose": (lambda x: np.transpose(x), lambda x: x.T),
    "np.ravel": (lambda x: np.ravel(x), lambda x: x.ravel()),
    "np.squeeze": (lambda x: np.squeeze(x.reshape(1, 2, 1, 3), axis=2), lambda x: x[None]),
    "np.copy": (lambda x: np.copy(x) * 2.0, lambda x: x * 2.0),
    "X.clip": (lambda x: x.clip(0.5, 1.5), lambda x: fa.clip(x, 0.5, 1.5)),
    "X.dot": (lambda x: x.dot(np.ones(3)), lambda x: x @ np.ones(3)),
    "X.item": (lambda x: x[:1, :1].item() * x, lambda x: x[0, 0] * x),
    "np.where(np.True_)": (lambda x: np.where(np.True_, x, 0.0), lambda x: x),
    "np.concatenate": (
        lambda x: np.concatenate([x, x * 2.0], axis=1),
        lambda x: fa.concatenate([x, x * 2.0], axis=1),
    ),
    "np.stack": (lambda x: np.stack([x, x]), lambda x: fa.stack([x, x])),
    "np.where": (lambda x: np.where(x > 1.0, x, 0.0), lambda x: fa.where(x > 1.0, x, 0.0)),
    "np.clip": (lambda x: np.clip(x, 0.5, 1.5), lambda x: fa.clip(x, 0.5, 1.5)),
    "np.matmul": (lambda x: np.matmul(x, np.ones((3, 2))), lambda x: x @ np.ones((3, 2))),
    "np.dot": (lambda x: np.dot(x.T, x), lambda x: x.T @ x),
    "np.exp": (np.exp, fa.exp),
    "np.sin": (np.sin, fa.sin),
    "np.arctan2": (lambda x: np.arctan2(x, 2.0), lambda x: fa.arctan2(x, 2.0)),
    "np.square": (np.square, lambda x: x * x),
    "np.log10": (np.log10, lambda x: fa.log(x) / math.log(10.0)),
    "array * x": (lambda x: np.full((2, 3), 3.0) * x, lambda x: x * 3.0),
    "array - x": (lambda x: np.ones(3) - x, lambda x: 1.0 - x),
    "np.maximum": (lambda x: np.maximum(x, 1.0), lambda x: fa.maximum(x, 1.0)),
    "np.greater": (lambda x: np.greater(1.0, x) * x, lambda x: (x < 1.0) * x),
}


@pytest.mark.parametrize("name", list(NUMPY_CALLS))
def test_numpy_functions_record_the_fastad_op(name, rng):
    through_numpy, through_fastad = NUMPY_CALLS[name]
    X0 = rng.uniform(0.2, 2.0, size=(2, 3))
    results = []
    for way in (through_numpy, through_fastad):
        with fa.Tape():
            X = fa.var(X0)
            out = way(X)
            assert isinstance(out, (fa.Block, fa.Var)), type(out)
            L = out if isinstance(out, fa.Var) else out.sum()
            results.append((np.asarray(out.value), fa.grad(L, X)))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-14)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-13)


def test_numpy_functions_on_scalar_nodes():
    with fa.Tape():
        x = fa.var(0.5)
        for got, expected in ((np.sin(x), math.sin(0.5)), (np.float64(2.0) * x, 1.0)):
            assert isinstance(got, fa.Var) and got.value == expected
        for condition, value, slope in ((np.True_, 0.5, 1.0), (np.False_, 2.0, 0.0)):
            for select in (fa.where, np.where):  # a NumPy bool is a condition like True
                picked = select(condition, x, 2.0)
                assert isinstance(picked, fa.Var) and picked.value == value
                assert fa.grad(picked, x) == slope
        pair = np.array([1.0, 2.0]) * x  # an array and a scalar node: a block
        assert isinstance(pair, fa.Block) and pair.value.tolist() == [0.5, 1.0]
        nodes = fa.scalar_nodes(np.ones(2))
        product = np.multiply(nodes, x)  # object arrays of nodes still go per element
        assert product.dtype == object and product[1].value == 0.5


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda X: np.asarray(X), "cannot convert .* to a NumPy array"),
        (lambda X: np.array([X, X]), "cannot convert"),
        (lambda X: np.sum(X, out=np.empty(())), "out="),
        (lambda X: np.exp(X, out=np.empty((2, 3))), "out="),
        (lambda X: np.mean(X, dtype=np.float32), "dtype="),
        (lambda X: np.add.reduce(X), "np.add.reduce .* np.sum"),
        (lambda X: np.cumsum(X, out=np.empty(6)), "np.cumsum with out="),
        (lambda X: np.mod(X, 2.0), r"np.remainder .* np.floor\(x / y\)"),
        (lambda X: np.linalg.svd(X), "np.linalg.svd is not recorded .*eigh of A.T @ A"),
        (lambda X: np.where(X > 0), "one argument"),
        (lambda X: np.reshape(X, 6, order="F"), "order"),
        (lambda X: np.linalg.eig(X), "eig is not recorded"),
        (lambda X: np.cumprod(X, dtype=np.float32), "np.cumprod with dtype="),
        (lambda X: np.linalg.norm(X, 2), "ord=2 of a matrix"),
        (lambda X: scipy.special.erf(X), "fa.erf"),
        (lambda X: X % 2, r"no % \(x % y\): it is a step function"),
        (lambda X: 2.0 % X, r"no % \(y % x\)"),
        (lambda X: X // 2, "no //"),
        (lambda X: divmod(X, 2), "no divmod"),
        (lambda X: X.sum() % 2, r"no %"),
        (lambda X: X.astype(np.float32), r"float64 only.*x.value.astype\(float32\)"),
    ],
)
def test_numpy_functions_without_a_fastad_op_raise_naming_what_to_use(call, match):
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        with pytest.raises(TypeError, match=match):
            call(X)


def test_a_scalar_nodes_reductions_are_the_node_itself():
    # As a NumPy scalar's methods: X.sum().sum() is valid NumPy code.
    with fa.Tape():
        X = fa.var(np.arange(6.0).reshape(2, 3))
        total = X.sum()
        for reduced in (total.sum(), total.mean(), total.prod(), total.max(), total.min()):
            assert reduced is total
        with pytest.raises(ValueError, match=r"\.mean\(axis=0\): a scalar node has no axes"):
            total.mean(axis=0)
        with pytest.raises(ValueError, match=r"\.sum\(keepdims=True\)"):
            total.sum(keepdims=True)
    assert fa.grad(lambda X: X.sum().sum() * 2.0)(np.ones(3)).tolist() == [2.0] * 3


def test_squeeze_copy_and_astype_methods():
    with fa.Tape():
        X = fa.var(np.arange(6.0).reshape(1, 2, 1, 3))
        assert X.squeeze().shape == (2, 3) and X.squeeze((0, 2)).shape == (2, 3)
        assert X.squeeze(-2).shape == (1, 2, 3)
        with pytest.raises(ValueError, match="cannot squeeze axis 1 .* length 2, not 1"):
            X.squeeze(1)
        one = fa.var(np.full((1, 1), 4.0)).squeeze()  # no axis left: a scalar node
        assert isinstance(one, fa.Var) and one.value == 4.0
        # The element itself, as NumPy's squeeze and reshape to (): -0.0 stays -0.0.
        zero = fa.var(np.full((1, 1, 1), -0.0))
        for element in (zero.squeeze(), zero.reshape(()), np.reshape(zero, ()), zero.reshape([])):
            assert isinstance(element, fa.Var) and math.copysign(1.0, element.value) == -1.0
        with pytest.raises(ValueError, match=r"cannot reshape .* of shape \(1, 2, 1, 3\) to \(\)"):
            X.reshape(())
        assert X.copy() is X and X.astype(np.float64) is X and X.astype("float64") is X
        (X.squeeze() * np.arange(6.0).reshape(2, 3)).sum().backward()
        np.testing.assert_array_equal(X.grad, np.arange(6.0).reshape(1, 2, 1, 3))


def test_numpy_metadata_functions_read_the_shape():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        assert (np.shape(X), np.ndim(X), np.size(X), np.size(X, 1)) == ((2, 3), 2, 6, 3)
        assert np.shape(X.sum()) == ()


# -- gradients for chosen arguments only -------------------------------------------------------
def _layer_loss(X, W1, b1, W2, b2, y):
    H = fa.linear_relu(X, W1, b1)
    return fa.cross_entropy(fa.tanh(H @ W2) + b2, y)


def _mlp_arguments(rng):
    return (
        rng.normal(size=(8, 5)),
        rng.normal(size=(5, 6)),
        rng.normal(size=6),
        rng.normal(size=(6, 3)),
        rng.normal(size=3),
        rng.integers(0, 3, size=8).astype(float),
    )


def test_grad_sends_nothing_to_operands_no_wanted_node_depends_on(rng, monkeypatch):
    asked = []
    for name in ("matmul", "linear_relu"):
        rule = block_rules.RULES[optable.BLOCK_BY_NAME[name].code]
        original = rule.vjp

        def spy(values, out, g, params, needs=None, original=original, name=rule.name):
            asked.append((name, needs))
            return original(values, out, g, params, needs)

        monkeypatch.setattr(rule, "vjp", spy)
    arguments = _mlp_arguments(rng)
    with fa.Tape():
        nodes = [fa.var(a) for a in arguments]
        L = _layer_loss(*nodes)
        everything = fa.grad(L, nodes)
        asked.clear()
        chosen = fa.grad(L, [nodes[1], nodes[3]])  # W1 and W2; X, b1, b2, y are data
    # Nothing to data, values only to the leaves W1 and W2 (their adjoints go no
    # further), everything to H, whose adjoint flows on into the first layer.
    assert sorted(asked) == [
        ("linear_relu", (Need.NOTHING, Need.VALUES, Need.NOTHING)),
        ("matmul", (Need.ALL, Need.VALUES)),
    ]
    np.testing.assert_array_equal(chosen[0], everything[1])
    np.testing.assert_array_equal(chosen[1], everything[3])
    with fa.Tape():
        nodes = [fa.var(a) for a in arguments]
        asked.clear()
        fa.grad(_layer_loss(*nodes), nodes[3])  # W2 only: nothing below H @ W2 runs
    assert asked == [("matmul", (Need.NOTHING, Need.VALUES))]


def test_compiled_function_of_arrays_with_wrt(rng):
    arguments = _mlp_arguments(rng)
    full = fa.compile(_layer_loss, example=arguments)
    chosen = fa.compile(_layer_loss, example=arguments, wrt=(3, 1))
    single = fa.compile(_layer_loss, example=arguments, wrt=-5)
    moved = tuple(a * 1.1 for a in arguments[:5]) + (arguments[5],)
    value, gradients = full.value_and_grad(moved)
    assert chosen.value_and_grad(moved)[0] == value
    picked = chosen.grad(moved)
    assert len(picked) == 2
    np.testing.assert_array_equal(picked[0], gradients[3])
    np.testing.assert_array_equal(picked[1], gradients[1])
    np.testing.assert_array_equal(single.grad(moved), gradients[1])
    for wrt, error in (((0, 0), ValueError), (6, ValueError), ((), ValueError), (1.0, TypeError)):
        with pytest.raises(error, match="wrt"):
            fa.compile(_layer_loss, example=arguments, wrt=wrt)
    with pytest.raises(TypeError, match="wrt="):
        fa.compile(lambda x, y: x * y, example=np.ones(2), wrt=0)


def test_array_constants_get_no_gradient_and_cost_no_product(rng, monkeypatch):
    asked = []
    rule = block_rules.RULES[optable.BLOCK_BY_NAME["linear_relu"].code]
    original = rule.vjp

    def spy(values, out, g, params, needs=None):
        asked.append(needs)
        return original(values, out, g, params, needs)

    monkeypatch.setattr(rule, "vjp", spy)
    X, W0, b0 = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)
    with fa.Tape() as tape:
        W = fa.var(W0)
        L = fa.linear_relu(X, W, b0).sum()  # X and b0 become constants
        L.backward()
        assert asked == [(Need.NOTHING, Need.VALUES, Need.NOTHING)]
        X_id = tape.operands(L.id - 1)[0]  # the layer's first operand: X's constant
        with pytest.raises(ValueError, match="constant"):
            tape.block_adjoint(X_id)
        (dX,) = tape.gradient(L, [X_id])  # asked for, it is computed
        mask = (X @ W0 + b0) > 0
        np.testing.assert_allclose(dX, mask @ W0.T, rtol=1e-14)
        np.testing.assert_allclose(W.grad, X.T @ mask, rtol=1e-14)


def test_numpy_reductions_take_numpys_positional_arguments():
    A = np.arange(6.0).reshape(2, 3) ** 2
    with fa.Tape():
        X = fa.var(A)
        for call in (
            lambda a: np.std(a, 1, None, None, 1),  # ddof is the fifth
            lambda a: np.var(a, 0, None, None, 0, True),
            lambda a: np.max(a, 0, None, True),  # np.max has no dtype
            lambda a: np.sum(a, 1, None, None, True),
            lambda a: np.var(a, correction=1),
        ):
            np.testing.assert_allclose(np.asarray(call(X).value), call(A), rtol=1e-14)
        with warnings.catch_warnings():  # NumPy warns past n degrees of freedom; we do not
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = np.var(A, 0, ddof=3)
        np.testing.assert_array_equal(X.var(axis=0, ddof=3).value, expected)
        assert X.sum(keepdims=1).shape == (1, 1)


def test_a_cross_entropy_of_one_class_is_plus_zero():
    assert math.copysign(1.0, fa.cross_entropy(np.zeros((2, 1)), np.zeros(2))) == 1.0
