"""The NumPy calls a JAX or autograd user reaches for (``tests/numpy_calls.py``): each is
recorded, with NumPy's value and a gradient and Hessian-vector product that match central
differences of NumPy's own function, or refused with a ``TypeError`` that names the function
and what to use. None is silently wrong, and few are refused."""

import numpy as np
import pytest
from numpy_calls import CALLS, operands

import fastad as fa

REFUSED = {"np.mod", "np.copysign", "np.linalg.qr", "np.linalg.svd", "np.linalg.pinv"}
REFUSED |= {"np.linalg.lstsq"}
"""The rows refused today (a row that starts or stops working fails until this says so)."""

CONSTANTS = {"np.floor", "np.ceil", "np.round", "np.trunc", "np.zeros_like", "np.ones_like"}
"""Rows whose result is NumPy's plain array: derivative 0 wherever there is one."""


def _outputs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _differentiable(reference):
    return np.asarray(reference).dtype.kind in "fb"


def _arguments(letters, rng):
    given = operands(rng)
    return [np.float64(given[c]) if c == "s" else given[c] for c in letters]


def test_few_calls_are_refused():
    assert len(CALLS) >= 145
    assert len(REFUSED) <= 20
    assert REFUSED <= {name for name, _, _ in CALLS}


@pytest.mark.parametrize("name, call, letters", CALLS, ids=[row[0] for row in CALLS])
def test_each_call_is_recorded_or_refused_by_name(name, call, letters):
    rng = np.random.default_rng(20261203)
    arguments = _arguments(letters, rng)
    wanted = _outputs(call(*arguments))
    weights = [rng.normal(size=np.shape(w)) for w in wanted]
    if name in REFUSED:
        with fa.Tape(), pytest.raises(TypeError) as refusal:
            call(*[fa.var(a) for a in arguments])
        function = call.__name__ if isinstance(call, np.ufunc) else name.split(".")[-1]
        assert function in str(refusal.value) and "use " in str(refusal.value), refusal.value
        return

    def loss_of(*values):  # NumPy's own function, a smooth scalar of its float results
        results = _outputs(call(*values))
        return sum(
            float(np.sum(np.tanh(np.asarray(r, np.float64)) * w))
            for r, w in zip(results, weights, strict=True)
            if _differentiable(r)
        )

    with fa.Tape():
        nodes = [fa.var(a) for a in arguments]
        got = _outputs(call(*nodes))
        assert len(got) == len(wanted)
        loss = 0.0
        for result, reference, w in zip(got, wanted, weights, strict=True):
            recorded = isinstance(result, (fa.Block, fa.Var))
            value = result.value if recorded else result
            np.testing.assert_allclose(
                np.asarray(value, np.float64),
                np.asarray(reference, np.float64),
                rtol=1e-13,
                atol=1e-15,
                err_msg=name,
            )
            if not _differentiable(reference):  # positions, shapes: NumPy's integers (or a count)
                assert recorded or np.asarray(value).dtype == np.asarray(reference).dtype
                continue
            if name in CONSTANTS:
                assert not recorded, f"{name}: a constant, outside the tape"
                continue
            assert recorded, f"{name} left the tape: {type(result).__name__}"
            loss = (
                loss + (fa.tanh(result) * w).sum()
                if isinstance(result, fa.Block)
                else (loss + fa.tanh(result) * float(w))
            )
        if not isinstance(loss, fa.Var):
            return  # nothing differentiable reaches the loss (positions, shapes)
        gradients = fa.grad(loss, nodes)
        directions = [rng.normal(size=np.shape(a)) for a in arguments]
        products = fa.hvp(loss, nodes, directions)
    h = 1e-6
    for i, array in enumerate(arguments):
        numeric = np.zeros(np.shape(array))
        for index in np.ndindex(np.shape(array)):
            up, down = (
                [np.array(a, np.float64) for a in arguments],
                [np.array(a, np.float64) for a in arguments],
            )
            up[i][index] += h
            down[i][index] -= h
            rise = loss_of(*_scalars(up, letters)) - loss_of(*_scalars(down, letters))
            numeric[index] = rise / (2 * h)
        np.testing.assert_allclose(gradients[i], numeric, rtol=1e-6, atol=1e-8, err_msg=name)

    def gradient_at(step):
        with fa.Tape():
            moved = [
                fa.var(np.float64(a + step * d) if c == "s" else a + step * d)
                for a, d, c in zip(arguments, directions, letters, strict=True)
            ]
            results = _outputs(call(*moved))
            moved_loss = sum(
                (fa.tanh(r) * w).sum() if isinstance(r, fa.Block) else fa.tanh(r) * float(w)
                for r, w, reference in zip(results, weights, wanted, strict=True)
                if _differentiable(reference)
            )
            return fa.grad(moved_loss, moved)

    up, down = gradient_at(h), gradient_at(-h)
    for got_product, after, before in zip(products, up, down, strict=True):
        numeric = (np.asarray(after) - np.asarray(before)) / (2 * h)
        np.testing.assert_allclose(got_product, numeric, rtol=1e-5, atol=1e-6, err_msg=name)


def _scalars(arrays, letters):
    return [np.float64(a) if c == "s" else a for a, c in zip(arrays, letters, strict=True)]


ORDERS_AND_ROUNDINGS = [
    ("np.floor", lambda x: (np.floor(x) * x).sum()),
    ("np.round", lambda x: (np.round(x) * x).sum()),
    ("np.argmax", lambda x: x[np.argmax(x)]),
    ("np.argsort", lambda x: x[np.argsort(x)].sum()),
    ("np.sort", lambda x: np.sort(x)[0]),
    ("np.median", lambda x: np.median(x)),
]


@pytest.mark.parametrize(
    "name, function", ORDERS_AND_ROUNDINGS, ids=[row[0] for row in ORDERS_AND_ROUNDINGS]
)
def test_orders_and_roundings_are_refused_while_tracing_by_name(name, function):
    with pytest.raises(fa.TraceError, match=f"{name} of"):
        fa.compile(function, example=(np.array([0.5, 2.5, 1.5]),))
    with fa.Tape():  # on a tape, eagerly: NumPy's numbers of the values
        x = fa.var(np.array([0.5, 2.5, 1.5]))
        np.testing.assert_allclose(function(x).value, function(np.array([0.5, 2.5, 1.5])))


def test_a_branch_on_np_all_is_a_guard():
    f = fa.compile(
        lambda x: (2.0 * x).sum() if np.all(x > 0) else (3.0 * x).sum(), example=(np.ones(3),)
    )
    assert f([np.ones(3)]) == 6.0
    with pytest.raises(fa.BranchError, match="True when traced and is False"):
        f([-np.ones(3)])


def test_scalar_node_indexing():
    with fa.Tape():
        x = fa.var(2.0)
        assert x[()] is x and x[...] is x
        with pytest.raises(IndexError, match=r"scalar node \(no axes\).*not 0"):
            x[0]
        with pytest.raises(TypeError, match="not iterable"):
            list(x)


# A function of a 0-d array argument (a scalar node), as JAX and NumPy take one: each
# call's value against NumPy's on the 0-d array, and its derivative at 1.5 against
# central differences of the same call through NumPy.
ZERO_D = {
    "x.reshape(1)[0] * x": lambda x: x.reshape(1)[0] * x,
    "x.reshape((1, 1)).sum()": lambda x: x.reshape((1, 1)).sum() * 3.0,
    "x.T * x": lambda x: x.T * x,
    "np.transpose(x) + x.squeeze()": lambda x: np.transpose(x) + x.squeeze(),
    "x[None, None].sum()": lambda x: x[None, None].sum() * x,
    "x.ravel() @ x.flatten()": lambda x: x.ravel() @ x.flatten(),
    "x.item() * x.copy()": lambda x: x.item() * x.copy(),
    "np.var(x) + x": lambda x: np.var(x) + x,
    "x.std() + 2 x": lambda x: x.std() + 2.0 * x,
    "np.sum(x, initial=2.0) * x": lambda x: np.sum(x, initial=2.0) * x,
    "np.max(x, initial=3.0)": lambda x: np.max(x, initial=3.0) + x,
    "np.sum(x, where=False) + x": lambda x: np.sum(x, where=False) + x,
    "x.cumsum().sum()": lambda x: x.cumsum().sum() ** 2,
    "x.astype(float) ** 3": lambda x: x.astype(float) ** 3,
    "np.cumsum(x) * x": lambda x: np.cumsum(x) * x,
    "np.atleast_2d(x) ** 2": lambda x: np.atleast_2d(x) ** 2,
    "np.expand_dims(x, (0, 1)) * x": lambda x: np.expand_dims(x, (0, 1)) * x,
    "np.median(x) * x": lambda x: np.median(x) * x,
    "np.take(x, [0, 0]) * x": lambda x: np.take(x, [0, 0]) * x,
}


@pytest.mark.parametrize("name", list(ZERO_D))
def test_a_scalar_node_is_a_0d_array(name):
    call = ZERO_D[name]
    point = np.array(1.5)
    want = float(np.sum(call(point)))
    value, gradient = fa.value_and_grad(lambda x: np.sum(call(x)))(point)
    assert value == pytest.approx(want, rel=1e-15)
    h = 1e-6
    numeric = (np.sum(call(point + h)) - np.sum(call(point - h))) / (2 * h)
    assert gradient == pytest.approx(numeric, rel=1e-7, abs=1e-9)


def test_a_scalar_node_keeps_its_refusals_clear():
    with fa.Tape():
        x = fa.var(2.0)
        assert (x.shape, x.ndim, x.size) == ((), 0, 1)
        assert np.var(x, ddof=1).value != np.var(x, ddof=1).value  # nan, as NumPy's
        with pytest.raises(ValueError, match=r"Var\(2.0, id=0\).*\(one number\) to \(2,\)"):
            x.reshape(2)
        with pytest.raises(ValueError, match=r"\.sum\(axis=0\): a scalar node has no axes"):
            np.sum(x, axis=0)
        with pytest.raises(ValueError, match=r"\.squeeze\(axis=0\)"):
            x.squeeze(0)
        with pytest.raises(TypeError, match="float64 only"):
            x.astype(np.int64)


def test_block_methods_take_numpys_keywords():
    X = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    mask = X > 0
    with fa.Tape():
        x = fa.var(X)
        assert x.sum(where=mask).value == np.sum(X, where=mask)
        assert x.mean(axis=1, where=mask).value.tolist() == np.mean(X, axis=1, where=mask).tolist()
        assert x.max(initial=10.0).value == 10.0 and x.min(axis=0, initial=0.0).value.tolist() == [
            0.0,
            -2.0,
            -1.0,
        ]
        assert x.prod(initial=2.0).value == np.prod(X, initial=2.0)
        np.testing.assert_array_equal(x.take([2, 0], axis=1).value, X.take([2, 0], axis=1))
        np.testing.assert_array_equal(x.mT.value, X.mT)
        with pytest.raises(TypeError, match=r"order='F'.*C-ordered"):
            x.reshape(3, 2, order="F")
        with pytest.raises(ValueError, match="mT needs at least two axes"):
            _ = x[0].mT
        x.sum(where=mask).backward()
        np.testing.assert_array_equal(x.grad, mask.astype(float))


def _recorded(call, *arrays):
    with fa.Tape():
        result = call(*[fa.var(np.asarray(a, np.float64)) for a in arrays])
        return np.asarray(result.value if isinstance(result, (fa.Block, fa.Var)) else result)


CUBES = np.arange(-20.0, 21.0) ** 3
EDGES = [
    ("np.exp2 at the integers", np.exp2, [np.arange(-60.0, 61.0)], 0.0),
    ("np.exp2 past the range", np.exp2, [np.array([1024.0, -1080.0, 1023.5])], 0.0),
    ("np.cbrt at the cubes", np.cbrt, [CUBES], 0.0),
    ("np.cbrt at the extremes", np.cbrt, [np.array([0.0, 1e298, -1e-300, 1.7e308])], 4.5e-16),
    ("np.cbrt of infinities", np.cbrt, [np.array([np.inf, -np.inf, np.nan])], 0.0),
    ("np.arccosh below 1", np.arccosh, [np.array([-1e200, -3e8, -1.0, 0.5, np.nan])], 0.0),
    ("np.arccosh above 1", np.arccosh, [np.array([1.0, 1.5, 2.0, 1e8, 1e300])], 4.5e-16),
    ("np.arcsinh", np.arcsinh, [np.array([-1e300, -3e8, -0.5, 1e-300, 2.0, 1e200])], 4.5e-16),
    ("np.arctanh", np.arctanh, [np.array([-1.0, -0.999, 1e-300, 0.5, 1.0, 1.5])], 4.5e-16),
    (
        "np.hypot with infinities and nan",
        np.hypot,
        [
            np.array([np.nan, np.inf, 0.0, 1e300, 3e-300]),
            np.array([-np.inf, np.nan, 0.0, 1e300, 4e-300]),
        ],
        4.5e-16,
    ),
    (
        "np.logaddexp with infinities",
        np.logaddexp,
        [
            np.array([np.inf, -np.inf, -np.inf, 1e300, 0.0, np.nan, np.inf]),
            np.array([np.inf, -np.inf, 2.0, 1e300, np.nan, np.nan, -np.inf]),
        ],
        4.5e-16,
    ),
    (
        "np.median with nan",
        lambda a: np.median(a, axis=1),
        [np.array([[np.nan, 1.0, 2.0], [3.0, 1.0, 2.0]])],
        0.0,
    ),
    (
        "np.median of several axes",
        lambda a: np.median(a, axis=(0, 2), keepdims=True),
        [np.arange(24.0).reshape(2, 3, 4) % 7],
        0.0,
    ),
    ("np.median, an empty axis kept", lambda a: np.median(a, axis=0), [np.zeros((2, 0))], 0.0),
    ("np.all of nothing", lambda a: np.all(a, axis=0), [np.zeros((0, 3))], 0.0),
    ("np.any of nothing", np.any, [np.zeros(0)], 0.0),
    ("np.all with nan", np.all, [np.array([np.nan, 1.0])], 0.0),
]


@pytest.mark.parametrize("name, call, arrays, rtol", EDGES, ids=[row[0] for row in EDGES])
def test_edge_values_match_numpy(name, call, arrays, rtol):
    with np.errstate(all="ignore"):
        want = np.asarray(call(*arrays), np.float64)
        got = _recorded(call, *arrays).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0.0, err_msg=name)


@pytest.mark.parametrize("name", ["arcsinh", "cbrt", "arctanh", "arcsin", "sinh", "tanh"])
def test_odd_functions_keep_the_sign_of_a_zero(name):
    zeros = np.array([-0.0, 0.0])
    with fa.Tape():
        got = getattr(np, name)(fa.var(zeros)).value
    np.testing.assert_array_equal(np.signbit(got), [True, False])
    compiled = fa.compile(lambda x: getattr(np, name)(x), num_inputs=1)
    assert np.signbit(compiled([-0.0])) and not np.signbit(compiled([0.0]))


def test_a_scalar_node_made_a_block_keeps_its_bits():
    # A sum of picks started from +0.0: -0.0 + 0.0 gave +0.0.
    with fa.Tape():
        x, y = fa.var(-0.0), fa.var(0.0)
        for block in (x.reshape(1), x[None], x.ravel(), x.cumsum()):
            assert block.value.tolist() == [0.0] and np.signbit(block.value[0])
        joined = fa.stack([x, y, fa.var(np.inf), fa.var(np.nan), -0.0, 2.0])
        np.testing.assert_array_equal(np.signbit(joined.value), [1, 0, 0, 0, 1, 0])
        np.testing.assert_array_equal(joined.value, [0.0, 0.0, np.inf, np.nan, 0.0, 2.0])


def test_logaddexp2_is_numpys_formula_to_rounding(rng):
    # NumPy's formula in base 2, larger + log2(1 + 2**-|a - b|). A base-e logaddexp of
    # the scaled arguments lost ~100 ulps where the result is near 0 (the first pair:
    # 2e-14 relative). What is left is exp2 as 2.0 ** x (pow), an ulp from libm's exp2
    # at some points: within two ulps of each of the formula's two terms.
    a = np.concatenate([[-359.15, -1.5402850137789965, 3.0, -1e300], rng.normal(size=5000) * 60])
    b = np.concatenate([[-3.08e-142, -0.38051759416940856, 3.0, -1e300], rng.normal(size=5000)])
    with fa.Tape():
        got = np.logaddexp2(fa.var(a), fa.var(b)).value
    want = np.logaddexp2(a, b)
    larger = np.maximum(a, b)
    rounding = 2.0 * (np.spacing(np.abs(larger)) + np.spacing(np.abs(want - larger)))
    assert np.all(np.abs(got - want) <= rounding)
    infinities = np.array([np.inf, -np.inf, np.inf, np.nan])
    others = np.array([np.inf, -np.inf, -np.inf, 1.0])
    with fa.Tape(), np.errstate(all="ignore"):
        got = np.logaddexp2(fa.var(infinities), fa.var(others)).value
        np.testing.assert_array_equal(got, np.logaddexp2(infinities, others))


def test_axis_errors_are_numpys_axis_error_and_ufunc_methods_say_what_to_use():
    with fa.Tape():
        x = fa.var(np.ones((3, 4, 2)))
        with pytest.raises(np.exceptions.AxisError, match="result's 4 axes"):
            np.expand_dims(x, 5)
        with pytest.raises(ValueError, match="axis 3 is out of range"):  # AxisError is both
            x.sum(axis=3)
        with pytest.raises(TypeError, match=r"np.add.accumulate .* use np.cumsum"):
            np.add.accumulate(x)
        with pytest.raises(TypeError, match=r"np.multiply.outer .* np.multiply\(x\[:, None\]"):
            np.multiply.outer(x, x)
        assert np.clip(x, None, None) is x and fa.clip(x, None, None) is x  # as NumPy 2


def test_a_median_of_nothing_is_nan_with_numpys_warning():
    with fa.Tape():
        x = fa.var(np.zeros((2, 0)))
        with pytest.warns(RuntimeWarning, match="Mean of empty slice"):
            result = np.median(x, axis=1)
        np.testing.assert_array_equal(result.value, [np.nan, np.nan])
        result.sum().backward()
        assert x.grad.shape == (2, 0)


def test_cbrt_and_arccosh_derivatives_at_the_edges():
    with fa.Tape(), np.errstate(all="ignore"):
        x = fa.var(np.array([0.0, 8.0, -8.0]))
        assert fa.grad(np.cbrt(x).sum(), x).tolist() == [np.inf, 1.0 / 12.0, 1.0 / 12.0]
        y = fa.var(np.array([0.5, -3e8]))
        assert np.isnan(fa.grad(np.arccosh(y).sum(), y)).all()


@pytest.mark.parametrize("x", [0.5, -2.0, -np.inf, np.nan])
def test_arccosh_below_one_has_a_nan_second_derivative(x):
    # Below 1 the function is nan, and so are its derivatives of every order: a
    # composition through x * nan (linear) would give a second derivative of 0.
    with np.errstate(all="ignore"):
        assert np.isnan(fa.hessian(np.arccosh)(x))
        block = fa.hessian(lambda v: np.arccosh(v).sum())(np.array([x, 2.0]))
        assert np.isnan(block[0, 0])
        assert block[1, 1] == pytest.approx(-2.0 / 3.0**1.5, rel=1e-15)  # -x / (x² - 1)^1.5


def test_derivatives_at_the_ends_of_the_domains_are_the_functions():
    with fa.Tape(), np.errstate(all="ignore"):
        x = fa.var(np.array([np.inf, -np.inf, 27.0]))
        assert fa.grad(np.cbrt(x).sum(), x).tolist() == [0.0, 0.0, 1.0 / 27.0]
        t = fa.var(np.array([1.0, -1.0, 0.5]))
        assert fa.grad(np.arctanh(t).sum(), t).tolist() == [np.inf, np.inf, 1.0 / 0.75]
        # Equal infinities: the limit along a = b, 1/2 each; a nan: nan, not 1.
        a, b = fa.var(np.array([np.inf, -np.inf, np.nan])), fa.var(np.array([np.inf, -np.inf, 1.0]))
        da, db = fa.grad(np.logaddexp(a, b).sum(), [a, b])
        np.testing.assert_array_equal(da, [0.5, 0.5, np.nan])
        np.testing.assert_array_equal(db, [0.5, 0.5, np.nan])


@pytest.mark.parametrize("at", [0.0, 1e-9, -3.0, 2.5])
def test_logaddexp_has_the_functions_second_derivative_at_a_tie_too(at):
    # d2/dx2 logaddexp(0, x) = s (1 - s), s = sigmoid(x): 1/4 at x = 0, where the two
    # arguments tie (a composition through max and |a - b| put its kinks there: 0).
    s = 1.0 / (1.0 + np.exp(-at))
    assert fa.hessian(lambda x: np.logaddexp(0.0, x))(at) == pytest.approx(s * (1 - s), rel=1e-12)
    s2 = 1.0 / (1.0 + 2.0**-at)
    want = np.log(2.0) * s2 * (1 - s2)  # logaddexp2(0, x) = log2(1 + 2**x)
    assert fa.hessian(lambda x: np.logaddexp2(0.0, x))(at) == pytest.approx(want, rel=1e-12)
    # Along the tie a = b = at: H (1, 0) = (1/4, -1/4).
    hv = fa.hvp(lambda x, y: np.logaddexp(x, y), argnums=(0, 1))((at, at), (1.0, 0.0))
    np.testing.assert_allclose(hv, [0.25, -0.25], rtol=1e-12)


def test_reduction_keywords_as_numpy_takes_them():
    X = np.array([4.0, 1.0, 2.0])
    with fa.Tape():
        x = fa.var(X)
        # initial= ties the one element where= keeps: half each, as maximum's tie
        top = np.max(x, where=np.array([True, False, False]), initial=4.0)
        assert top.value == 4.0 and fa.grad(top, x).tolist() == [0.5, 0.0, 0.0]
        low = np.min(x, where=np.array([False, True, True]), initial=9.0)
        assert low.value == 1.0 and fa.grad(low, x).tolist() == [0.0, 1.0, 0.0]
        assert np.sum(x, where=[1, 0, 1]).value == np.sum(X, where=[1, 0, 1])  # a list: truths
        with pytest.raises(TypeError, match="where= of dtype float64"):
            np.sum(x, where=np.array([0.5, 0.0, 1.0]))
        with pytest.raises(TypeError, match="where= of dtype int64"):
            np.mean(x, where=np.array([2, 0, 1]))
        with pytest.raises(ValueError, match=r"initial= must be one number, got shape \(2,\)"):
            np.sum(x, initial=np.array([10.0, 0.0]))
        with pytest.raises(ValueError, match="initial= must be one number"):
            np.max(x, initial=[1.0])


@pytest.mark.parametrize(
    ("shape", "axis"), [((0,), None), ((3, 0), 1), ((3, 0), None), ((3, 0), (0, 1)), ((0, 3), 1)]
)
@pytest.mark.parametrize(("function", "initial"), [(np.max, 0.0), (np.max, -0.0), (np.min, -0.0)])
def test_an_extremum_of_nothing_is_its_initial_value_as_numpy_gives_it(
    shape, axis, function, initial
):
    X = np.ones(shape)
    want = function(X, axis=axis, initial=initial)
    with fa.Tape():
        x, start = fa.var(X), fa.var(initial)
        got = function(x, axis=axis, initial=start)
        np.testing.assert_array_equal(np.asarray(got.value), want)
        assert np.array_equal(np.signbit(got.value), np.signbit(want))  # -0.0 kept
        if np.size(want):  # each result is the initial value: d/d initial is 1 each
            assert fa.grad(np.sum(got), start) == np.size(want)
        # np.linalg.norm's inf-norm of an empty vector is 0.0, as NumPy's (initial=0).
        if function is np.max and initial == 0.0 and axis != (0, 1):
            norm = np.linalg.norm(x, np.inf, axis=axis)
            np.testing.assert_array_equal(
                np.asarray(norm.value), np.linalg.norm(X, np.inf, axis=axis)
            )


def test_the_inf_norm_of_a_vector_holding_a_nan_sends_the_nan_back():
    # initial=0 only where the vector is empty: maximum(max|x|, 0) would keep the nan
    # element's nan from the gradient.
    with fa.Tape():
        x = fa.var(np.array([np.nan, 1.0]))
        norm = np.linalg.norm(x, np.inf)
        assert np.isnan(norm.value)
        np.testing.assert_array_equal(fa.grad(norm, x), [np.nan, 0.0])
    with fa.Tape():
        X = fa.var(np.array([[np.nan, 1.0], [2.0, -3.0]]))
        rows = np.linalg.norm(X, np.inf, axis=1)
        np.testing.assert_array_equal(fa.grad(rows.sum(), X), [[np.nan, 0.0], [0.0, -1.0]])


def test_average_returns_the_weights_as_numpy():
    a = np.arange(6.0).reshape(2, 3)
    with fa.Tape():
        A = fa.var(a)
        mean, count = np.average(A, axis=0, returned=True)
        np.testing.assert_array_equal(count, np.average(a, axis=0, returned=True)[1])
        assert np.average(A, returned=True)[1] == 6.0
        with pytest.raises(ZeroDivisionError, match="sum to zero"):
            np.average(A, axis=1, weights=[1.0, -1.0, 0.0])


def test_bad_arguments_of_the_new_functions_are_named():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        s = fa.var(2.0)
        with pytest.raises(ValueError, match="number of sections must be larger than 0, got 0"):
            np.split(X, 0)
        with pytest.raises(TypeError, match="mode='clip' .*np.clip"):
            np.take(X, [5], axis=1, mode="clip")
        with pytest.raises(TypeError, match="matrix_power takes blocks or arrays, .* scalar node"):
            np.linalg.matrix_power(s, 2)
        with pytest.raises(TypeError, match="multi_dot takes blocks or arrays, .* scalar node"):
            np.linalg.multi_dot([s, X])
        with pytest.raises(ValueError, match="scalar node .* takes no ord or axis"):
            np.linalg.norm(s, 0)
        with pytest.raises(TypeError, match=r"fa.stack\(\[x\]\)"):
            np.tile(s, 2)
        with pytest.raises(ValueError, match=r"axes under '...' of shapes \[\(1, 3\), \(5, 3\)\]"):
            np.einsum("...i,...i", X[:1], np.ones((5, 3)))
        with pytest.raises(ValueError, match="UPLO must be 'L' or 'U'"):
            np.linalg.eigvalsh(X[:, :2], UPLO="X")
        assert isinstance(np.atleast_1d(X, X), tuple)
