"""The eager path's own pieces, each against an independent reference: the shape
broadcast (NumPy's), the log-softmax rows (the formula in NumPy), what a
rule's forward saves for its VJP (the VJP that computes it again), the
first-element shortcut of the reach test, the backward's skipping of
runs that hold only array leaves (a long chain of them against NumPy's
hand-written gradients), add's VJP without a kernel (the kernel's), and
sums over short last axes in one compiled call (NumPy's sums, bit for bit)."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastad as fa
from fastad.core import block_rules, elementwise_rules, reach, reduction_rules
from fastad.eager.handle import storage_of
from fastad.kernels import optable

CROSS_ENTROPY = block_rules.RULES[optable.BLOCK_BY_NAME["cross_entropy"].code]

axes = st.lists(st.sampled_from([0, 1, 2, 3, 5]), max_size=4).map(tuple)


@given(axes, axes)
def test_broadcast_shape_is_numpys(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ValueError, match="cannot be broadcast"):
            elementwise_rules.broadcast_shape(a, b)
        return
    assert elementwise_rules.broadcast_shape(a, b) == expected


def test_broadcast_error_names_both_shapes():
    with pytest.raises(ValueError, match=r"shapes \(2, 3, 4\) and \(5, 4\) cannot be broadcast"):
        elementwise_rules.broadcast_shape((2, 3, 4), (5, 4))
    with pytest.raises(ValueError, match=r"shapes \(3,\) and \(3, 4\)"):
        elementwise_rules.broadcast_shape((3,), (3, 4))


def _log_softmax_in_numpy(rows):
    """The formula, written out in NumPy: shift by the row maximum, subtract the log-sum."""
    with np.errstate(invalid="ignore", over="ignore"):
        shift = np.array([np.nan if np.isnan(r).any() else r.max() for r in rows])
        shifted = rows - shift[:, np.newaxis]
        finite = np.isfinite(shift)
        # Each row's sum left to right (cumsum's order; np.sum pairs elements),
        # its log by the C library (math.log; NumPy's own log may differ in the last bit).
        # A row whose maximum is not finite: its sum is nan (inf - inf), and so is its
        # log-softmax throughout; its logsumexp is the maximum.
        sums = np.cumsum(np.exp(shifted), axis=1)[:, -1]
        log_total = np.array([math.log(t) for t in sums])
        return shifted - log_total[:, np.newaxis], shift + np.where(finite, log_total, 0.0)


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_log_softmax_rows_equal_the_formula_bit_for_bit(rng, scale):
    rows = rng.normal(size=(64, 10)) * scale
    rows[3, 2] = np.inf
    rows[4, :] = -np.inf
    rows[5, 1] = np.nan
    rows[6, :] = 0.0
    rows[7, 3] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the compiled passes and exp warn about nothing
        log_p, lse = reduction_rules.log_softmax_rows(rows)
    want_log_p, want_lse = _log_softmax_in_numpy(rows)
    np.testing.assert_array_equal(log_p, want_log_p)
    np.testing.assert_array_equal(lse, want_lse)
    assert np.isnan(log_p[5]).all() and lse[3] == np.inf and lse[4] == -np.inf
    assert np.isnan(log_p[3]).all()  # a row holding +inf: nan, as JAX and PyTorch give


@pytest.mark.parametrize("targets", ["labels", "probabilities"])
def test_cross_entropy_keeps_its_log_softmax_for_the_vjp(rng, targets):
    X = rng.normal(size=(16, 5))
    if targets == "labels":
        T = rng.integers(0, 5, size=16).astype(np.float64)
    else:
        T = rng.dirichlet(np.ones(5), size=16)
    with fa.Tape() as tape:
        logits = fa.var(X)
        L = fa.cross_entropy(logits, T)
        saved = storage_of(tape).blocks.saved[L.id]
        L.backward()
    recomputed = CROSS_ENTROPY.vjp((X, T), L.value, 1.0, "mean")
    np.testing.assert_array_equal(logits.grad, recomputed[0] + 0.0)
    np.testing.assert_array_equal(saved[0], reduction_rules.log_softmax_rows(X)[0])
    # A replay (tape.forward) saves it again, from the current values.
    tape.forward()
    assert storage_of(tape).blocks.saved[L.id] is not saved
    np.testing.assert_array_equal(storage_of(tape).blocks.saved[L.id][0], saved[0])


def test_saved_arrays_count_in_the_tapes_memory(rng):
    X = rng.normal(size=(32, 8))
    with fa.Tape() as tape:
        logits = fa.var(X)
        before = storage_of(tape).blocks.nbytes
        fa.cross_entropy(logits, rng.integers(0, 8, size=32))
        labels_and_log_p = 32 + 32 + 32 * 8  # the labels constant, int labels, log-softmax
        assert storage_of(tape).blocks.nbytes - before == 8 * labels_and_log_p
        tape.forward()  # replaces what was saved, counted once
        assert storage_of(tape).blocks.nbytes - before == 8 * labels_and_log_p


def test_a_rule_that_saves_nothing_refuses_vjp_saved():
    rule = block_rules.RULES[optable.BLOCK_BY_NAME["matmul"].code]
    with pytest.raises(NotImplementedError, match="'matmul' saves nothing"):
        rule.vjp_saved((np.ones((2, 2)), np.ones((2, 2))), None, np.ones((2, 2)), None, None, ())


def test_any_reached_looks_past_an_unreached_first_element():
    x = np.full((3, 4), reach.UNREACHED)
    assert not reach.any_reached(x)
    x[2, 3] = 0.0  # a reached zero, last
    assert reach.any_reached(x)
    assert reach.any_reached(np.array([np.nan, reach.UNREACHED]))
    assert not reach.any_reached(np.full((0,), 1.0))


def test_a_long_chain_between_array_leaves_matches_numpy(rng):
    """Every other node is an array constant (a run the backward skips)."""
    Y0, C = rng.normal(size=(4, 6)), rng.uniform(0.5, 1.5, size=(4, 6))
    with fa.Tape():
        Y = leaf = fa.var(Y0)
        for _ in range(50):
            Y = fa.tanh(Y * C)  # a constant C recorded before every product
        Y.sum().backward()
    forward, G = [], np.ones_like(Y0)
    value = Y0
    for _ in range(50):
        value = np.tanh(value * C)
        forward.append(value)
    for value in reversed(forward):
        G = G * (1.0 - value * value) * C
    np.testing.assert_allclose(leaf.grad, G, rtol=1e-12, atol=1e-300)


def test_a_gradient_adopted_from_a_transposed_view_reads_without_negative_zeros():
    # transpose's VJP sends g.T, a view: adopted as a C-ordered copy, so its first
    # read settles its unreached zeros in place.
    S = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]).T
    with fa.Tape():
        X = fa.var(np.arange(6.0).reshape(2, 3) + 1.0)
        (fa.tanh(X.T) * S).sum().backward()
        assert not np.signbit(X.grad).any()
        want = (1.0 - np.tanh(np.arange(6.0).reshape(2, 3) + 1.0) ** 2) * S.T
        np.testing.assert_allclose(X.grad, want, rtol=1e-15)


def test_a_0d_array_beside_scalar_nodes_is_a_number():
    with fa.Tape():
        x = fa.var(2.0)
        z = fa.where(x > 0, x, np.array(0.0)) * (x * np.array(3.0))
        assert type(z) is fa.Var
        z.backward()
    assert z.value == 12.0 and x.grad == 12.0  # d(3 x^2)/dx at 2


@pytest.mark.parametrize("b_shape", [(6, 5), (5,), (1, 5), (6, 1), ()])
def test_the_vjp_of_add_is_the_kernels_bit_for_bit(rng, b_shape):
    # Add's VJP sends the adjoint itself (no kernel call): the same bits as its VJP kernel's
    # contribution(1.0, g), strong zeros (-0.0), reached zeros, infs and nans included.
    from fastad.kernels import map_rules

    g = rng.normal(size=(6, 5))
    g[0] = -0.0
    g[1] = 0.0
    g[2, :3] = [np.inf, -np.inf, np.nan]
    a, b = rng.normal(size=(6, 5)), rng.normal(size=b_shape)
    out = a + b
    add = block_rules.RULES[optable.BY_NAME["add"].code]
    da, db = np.empty(out.size), np.empty(out.size)
    full = np.broadcast_to(b, out.shape).copy().reshape(-1)
    with np.errstate(invalid="ignore"):  # inf - inf in a column's sum, as in a sweep
        sent = add.vjp((a, b), out, g, None, None)
        map_rules.VJP[add.code](
            a.reshape(-1), full, out.reshape(-1), g.reshape(-1), da, db, True, True
        )
        want = (da.reshape(out.shape), reach.unbroadcast(db.reshape(out.shape), b_shape))
    for got, expected in zip(sent, want, strict=True):
        assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()
    assert sent[0] is not g  # a copy: the rule's result becomes another node's adjoint
    assert add.vjp((a, b), out, g, None, (True, False))[1] is None


def _specials(rng, shape):
    """Normal numbers with zeros of both signs, infinities, nans and subnormals among them."""
    x = rng.normal(size=shape)
    flat = x.reshape(-1)
    if flat.size >= 8:
        flat[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1e-310, 1e308]
        rng.shuffle(flat)
    return x


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("b_shape", [(80, 64), (64,), (80, 1), (), "float"])
def test_large_arithmetic_is_the_kernels_bit_for_bit(rng, name, b_shape):
    # From 4,096 elements the four IEEE ops run as NumPy's ufuncs: the same bits as
    # the kernel's scalar rule over broadcast copies, specials included.
    from fastad.kernels import map_rules

    rule = block_rules.RULES[optable.BY_NAME[name].code]
    a = _specials(rng, (80, 64))
    b = 0.75 if b_shape == "float" else _specials(rng, b_shape)
    for x, y in ((a, b), (b, a)):
        got = rule.forward((x, y), None)
        full_x = np.broadcast_to(x, (80, 64)).copy().reshape(-1)
        full_y = np.broadcast_to(y, (80, 64)).copy().reshape(-1)
        want = np.empty(80 * 64)
        map_rules.FORWARD[rule.code](full_x, full_y, want)
        assert got.shape == (80, 64) and got.flags.c_contiguous and got.flags.owndata
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("name", ["mul", "div", "sub"])
@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_a_vjp_sends_only_what_is_wanted(rng, name, needs):
    # An operand that is data gets None, and the other operand the same bits as when
    # both are wanted.
    rule = block_rules.RULES[optable.BY_NAME[name].code]
    a, b = _specials(rng, (6, 5)), _specials(rng, (5,))
    out = rule.forward((a, b), None)
    g = _specials(rng, (6, 5))
    g[0] = -0.0
    with np.errstate(all="ignore"):
        both = rule.vjp((a, b), out, g, None, None)
        sent = rule.vjp((a, b), out, g, None, needs)
    for slot in (0, 1):
        if needs[slot]:
            assert np.asarray(sent[slot]).tobytes() == np.asarray(both[slot]).tobytes()
        else:
            assert sent[slot] is None


def test_an_op_whose_operands_are_all_unwanted_sends_nothing(rng):
    # Regression: a unary op's VJP with needs (False,) wrote its whole output into an
    # empty placeholder (a heap overflow). The rule sends None without a kernel call.
    exp = block_rules.RULES[optable.BY_NAME["exp"].code]
    a = rng.normal(size=100_000)
    assert exp.vjp((a,), np.exp(a), np.ones_like(a), None, (False,)) == (None,)
    mul = block_rules.RULES[optable.BY_NAME["mul"].code]
    assert mul.vjp((a, a), a * a, np.ones_like(a), None, (False, False)) == (None, None)


def test_gradients_of_intermediate_nodes_and_functions_of_constants(rng):
    # The two ways a unary op meets an operand that wants nothing, through the public API.
    values = np.linspace(0.1, 1.0, 200_000)
    with fa.Tape():
        x = fa.var(values)
        e = np.exp(x)
        (de,) = fa.grad(np.sum(e * e), [e])
    np.testing.assert_allclose(de, 2.0 * np.exp(values), rtol=1e-15)
    with fa.Tape() as tape:
        x = fa.var(values)
        c = tape.block_constant(values[::-1].copy())
        loss = np.sum(np.exp(c) * x)
        loss.backward()
    np.testing.assert_allclose(x.grad, np.exp(values[::-1]), rtol=1e-15)


def _bits(x):
    """The bits of a float array, every nan alike (NumPy and a compiled loop may carry
    different payloads)."""
    x = np.array(x, dtype=np.float64)
    x[np.isnan(x)] = np.nan
    return x.view(np.int64)


@pytest.mark.parametrize("shape", [(5, 1), (5, 7), (5, 8), (5, 33), (2, 3, 128), (4, 0, 9)])
@pytest.mark.parametrize("start", [0.0, -0.0])
def test_short_row_sums_are_numpys_bit_for_bit(rng, shape, start):
    # add_reduce sums these rows with one compiled call: NumPy's sum (initial=-0.0:
    # reach_sum's), the sign of every zero, inf and nan included.
    X = rng.normal(size=shape) * 10.0 ** rng.integers(-3, 4, size=(*shape[:-1], 1))
    if X.size:
        X.reshape(-1, shape[-1])[0] = -0.0  # a row of -0.0s: +0.0 from 0.0, -0.0 from -0.0
        X.reshape(-1, shape[-1])[-1, 0] = np.inf
        X.reshape(-1, shape[-1])[-1, -1] = -np.inf  # inf - inf: nan (a one-element row: -inf)
    X[rng.random(shape) < 0.3] = -0.0
    for keepdims in (False, True):
        with np.errstate(invalid="ignore"):  # inf - inf, as the rules run it
            want = np.add.reduce(X, axis=-1, keepdims=keepdims, initial=start)
            got = reach.add_reduce(X, (X.ndim - 1,), keepdims, start)
        assert got.shape == want.shape
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_other_sums_are_numpys_own(rng):
    # Long rows, other axes and views that are not C-contiguous keep NumPy's reduction.
    X = rng.normal(size=(3, 200))
    cases = [(X, (1,)), (X, (0,)), (X, None), (X[:, ::2], (1,)), (X.T, (1,))]
    for x, axes in cases:
        want = np.add.reduce(x, axis=axes)
        np.testing.assert_array_equal(_bits(reach.add_reduce(x, axes, False)), _bits(want))


def test_sums_of_rows_on_a_tape_are_numpys(rng):
    # The eager path: sum and mean over the last axis, their values NumPy's, bit for bit,
    # and their gradients (a broadcast of the adjoint) and tangents (reach_sum).
    X = rng.normal(size=(6, 3, 20))
    X[0, 0] = -0.0
    with fa.Tape() as tape:
        x = fa.var(X)
        total = x.sum(axis=-1)
        mean = x.mean(axis=2, keepdims=True)
        np.testing.assert_array_equal(_bits(total.value), _bits(X.sum(axis=-1)))
        np.testing.assert_array_equal(_bits(mean.value), _bits(X.mean(axis=2, keepdims=True)))
        weights = rng.normal(size=(6, 3))
        loss = (total * weights).sum() + mean.sum()
        loss.backward()
        want_grad = np.broadcast_to(weights[..., None] + 1.0 / 20, X.shape)
        np.testing.assert_allclose(x.grad, want_grad, rtol=1e-15)
        direction = rng.normal(size=X.shape)
        tangent = tape.tangent(loss, [x], [direction])
        want = (direction.sum(axis=-1) * weights).sum() + direction.mean(axis=2).sum()
        assert tangent == pytest.approx(want, rel=1e-13)
