"""Regressions: each test pins one bug that once existed."""

import ast
import math
import pathlib
import warnings

import numpy as np
import pytest

import fastad as fa
import fastad.kernels


def test_jvp_with_repeated_and_intermediate_nodes_matches_grad():
    with fa.Tape():
        x, y, w = fa.var(3.0), fa.var(2.0), fa.var(0.5)
        u = x * y
        z = u * u + x * w
        assert fa.jvp(z, [x, x], [1.0, 1.0]) == pytest.approx(fa.grad(z, [x, x]) @ [1.0, 1.0])
        assert fa.jvp(z, [u], [1.0]) == fa.grad(z, [u])[0] == 2 * 6.0
        # u and w are independent of each other: J v == grad . v
        assert fa.jvp(z, [u, w], [0.5, 2.0]) == pytest.approx(fa.grad(z, [u, w]) @ [0.5, 2.0])


def test_checked_backward_ignores_constant_operands():
    with fa.Tape():
        x = fa.var(-2.0)
        y = x**3  # d/d(exponent) = out * log(-2) = nan, but the exponent is a constant
        y.backward(check=True)
    assert x.grad == 12.0


def test_zero_grad_clears_block_gradients():
    with fa.Tape() as tape:
        W, s = fa.var(np.array([1.0, 2.0])), fa.var(3.0)
        L = (W * W).sum() + s * s
        L.backward()
        tape.zero_grad()
        assert W.grad.tolist() == [0.0, 0.0] and s.grad == 0.0
        L.backward(accumulate=True)
        assert W.grad.tolist() == [2.0, 4.0] and s.grad == 6.0


def test_block_value_cannot_escape_a_trace():
    with pytest.raises(fa.TraceError, match=r"\.value"):
        fa.compile(lambda X: (X * float(X.value.max())).sum(), example=(np.array([1.0, 2.0]),))


def test_empty_batch_of_a_guarded_function():
    def h(x, y):
        return x * y if x > 0 else y

    f = fa.compile(h, example=np.array([1.0, 2.0]))
    assert f(np.empty((0, 2))).shape == (0,)
    values, gradients = f.value_and_grad(np.empty((0, 2)))
    assert values.shape == (0,) and gradients.shape == (0, 2)


def test_load_rejects_missing_outputs(tmp_path):
    f = fa.compile(lambda x, y: x * y, example=np.array([1.0, 2.0]))
    f.save(tmp_path / "f.npz")
    state = dict(np.load(tmp_path / "f.npz"))
    np.savez(tmp_path / "bad.npz", **(state | {"outputs": np.array([], np.int64)}))
    with pytest.raises(ValueError, match="at least one input and output"):
        fa.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "bad.npz", **(state | {"outputs": np.array([2, 2], np.int64)}))
    with pytest.raises(ValueError, match="exactly one output"):
        fa.load(tmp_path / "bad.npz")


def test_stale_nodes_do_not_report_the_new_nodes_label():
    tape = fa.Tape()
    with tape:
        x = fa.var(1.0, name="x")
        A = fa.var(np.ones(2))
        tape.reset()
        fa.var(2.0, name="w")
    with pytest.raises(fa.StaleNodeError):
        x.name  # noqa: B018
    with pytest.raises(fa.StaleNodeError):
        A.shape  # noqa: B018
    assert "stale" in repr(x) and "stale" in repr(A)


def test_block_comparisons_record_nodes():
    with fa.Tape():
        A = fa.var(np.array([1.0, 3.0]))
        mask = A > 2.0
        assert mask.value.tolist() == [0.0, 1.0]
        B = A * mask
        B.sum().backward()
    assert A.grad.tolist() == [0.0, 1.0]


def test_zero_dimensional_array_is_a_scalar_leaf():
    with fa.Tape():
        x = fa.var(np.array(3.0))
        assert isinstance(x, fa.Var) and (x * x).value == 9.0


def test_vjp_accepts_a_one_element_cotangent_for_a_scalar_output():
    f = fa.compile(lambda x, y: x * y)
    value, pulled = f.vjp(np.array([2.0, 3.0]), np.array([2.0]))
    assert value == 6.0 and pulled.tolist() == [6.0, 4.0]
    assert math.isfinite(value)


# -- wrong or inconsistent answers ------------------------------------------------
def test_pow_exponent_derivative_at_zero_base_and_zero_exponent_is_zero():
    # d(a**b)/db = a**b * log(a) is 1 * -inf at a = b = 0; PyTorch, JAX and
    # autograd give 0 (0**b is 0 for b > 0 and 1 at b = 0).
    with fa.Tape():
        a, b = fa.var(0.0), fa.var(0.0)
        (a**b).backward()
        assert (a.grad, b.grad) == (0.0, 0.0)
    with fa.Tape():
        b = fa.var(0.0)
        (0.0**b).backward()
        assert b.grad == 0.0
    f = fa.compile(lambda a, b: a**b)
    assert f.grad(np.array([0.0, 0.0])).tolist() == [0.0, 0.0]
    assert f.jvp(np.array([0.0, 0.0]), np.array([1.0, 1.0]))[1] == 0.0
    with fa.Tape():
        base, exponent = fa.var(np.array([0.0, 2.0])), fa.var(np.array([0.0, 0.0]))
        (base**exponent).sum().backward()
        assert exponent.grad.tolist() == [0.0, math.log(2.0)]
    # Away from the corner the rule is unchanged: d/db at a = 2, b = 3 is 8 log 2.
    assert f.grad(np.array([2.0, 3.0]))[1] == pytest.approx(8.0 * math.log(2.0))


def test_merged_common_subexpressions_give_the_unmerged_gradient():
    # exp(800) = inf, so exp(x) - exp(x) is nan and so is its derivative
    # inf - inf. Merging the two exp nodes (CSE) cancels their adjoints to an
    # exact 0 first; that zero was reached, so it is not a strong zero.
    point = np.array([800.0])
    merged = fa.compile(lambda x: fa.exp(x) - fa.exp(x))
    unmerged = fa.compile(lambda x: fa.exp(x) - fa.exp(x), optimize=False)
    assert math.isnan(merged.grad(point)[0]) and math.isnan(unmerged.grad(point)[0])
    assert merged.optimization.common == 1  # traced at the first call
    assert math.isnan(merged.vjp(point, 1.0)[1][0])
    assert math.isnan(merged.jvp(point, np.array([1.0]))[1])
    with fa.Tape():
        x = fa.var(800.0)
        e = fa.exp(x)
        z = e - e  # merged by hand: forward and reverse mode must still agree
        assert math.isnan(fa.grad(z, x)) and math.isnan(fa.jvp(z, [x], [1.0]))
    # Where everything is finite the merged function is exact: d/dx = 0.
    assert merged.grad(np.array([1.0]))[0] == 0.0


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


# -- the layered front end ------------------------------------------------------------
def test_stale_block_handles_raise_in_every_block_method():
    tape = fa.Tape()
    with tape:
        X = fa.var(np.array([[1.0, 2.0, 3.0]]))
    tape.reset()
    with tape:
        fa.var(np.array([[10.0], [20.0], [30.0]]))  # takes the stale handle's id
        for use in (X.sum, X.mean, X.transpose, lambda: X.T, lambda: X[0], lambda: X + 1.0):
            with pytest.raises(fa.StaleNodeError):
                use()
    tape.reset()
    with pytest.raises(fa.StaleNodeError):
        X.sum()  # nothing at its id now: still StaleNodeError, not KeyError


def test_an_index_key_changed_after_recording_changes_nothing():
    key = np.array([1, 0])
    with fa.Tape() as tape:
        X = fa.var(np.array([1.0, 2.0, 3.0, 4.0]))
        Y = X[key]
        L = (Y * np.array([10.0, 100.0])).sum()
        key[:] = 3  # the caller reuses its array
        L.backward()
        tape.forward()
    assert X.grad.tolist() == [100.0, 10.0, 0.0, 0.0]
    assert Y.value.tolist() == [2.0, 1.0] and L.value == 120.0
    f = fa.compile(lambda A: A[key].sum(), example=(np.zeros(4),))
    key[:] = 0
    assert f((np.array([1.0, 2.0, 3.0, 4.0]),)) == 8.0  # key [3, 3] as traced


def test_checked_backward_ignores_a_block_power_s_constant_exponent():
    # As for scalars: d(x**3)/d3 = x**3 log(x) is nan at x < 0, but a constant's
    # adjoint reaches nothing, so it is no alarm.
    with fa.Tape():
        X = fa.var(np.array([-1.0, 2.0]))
        (X**3.0).sum().backward(check=True)
        assert X.grad.tolist() == [3.0, 12.0]


@pytest.mark.parametrize(
    "use", [lambda x: x + 5.0, lambda x: fa.where(x, 1.0, 2.0)], ids=["plus a number", "where"]
)
def test_a_stale_var_records_nothing(use):
    # No constant lands on the reset tape before the StaleNodeError.
    tape = fa.Tape()
    with tape:
        x = fa.var(1.0)
    tape.reset()
    with tape:
        fa.var(2.0)
        with pytest.raises(fa.StaleNodeError):
            use(x)
        assert len(tape) == 1


def test_scalar_accessors_refuse_block_nodes_by_name():
    with fa.Tape() as tape:
        X = fa.var(np.ones(2))
        S = X * 2.0
        L = S.sum()
        L.backward()
        with pytest.raises(TypeError, match="block_adjoint"):
            tape.adjoint(X)
        with pytest.raises(TypeError, match="scalar node"):
            tape.block_adjoint(L)
        with pytest.raises(TypeError, match="block op"):
            tape.local_partials([S])
        assert isinstance(tape.node(X.id), fa.Block) and isinstance(tape.node(L.id), fa.Var)
        assert len(tape) == 4  # asking about S recorded nothing (no S[0], S[1])
        assert "n0 -> n2;" in tape.to_dot()  # S's edges are unlabelled


def test_a_backward_that_fails_midway_leaves_no_half_sweep(monkeypatch):
    from fastad import registry

    with fa.Tape() as tape:
        x = fa.var(3.0)
        X = fa.var(np.ones(2))
        L = (X * x).sum() + x * x
        L.backward()
        assert x.grad == 8.0
        rule = registry.rule
        failing = fa.kernels.optable.BLOCK_BY_NAME["sum"].code

        def refuse(code):
            if code == failing:
                raise NotImplementedError("planted")
            return rule(code)

        monkeypatch.setattr(registry, "rule", refuse)
        with pytest.raises(NotImplementedError, match="planted"):
            L.backward()
        assert x.grad == 0.0 and X.grad.tolist() == [0.0, 0.0]
        assert tape.grad.tolist() == [0.0] * len(tape)


def test_the_table_fits_three_operands_with_long_ids():
    with fa.Tape() as tape:
        for _ in range(1000):
            fa.var(1.0)
        X, W, b = fa.var(np.ones((2, 3))), fa.var(np.ones((3, 2))), fa.var(np.ones(2))
        fa.linear(X, W, b)
    rows = tape.table(start=1000).splitlines()
    assert rows[-1].split()[-3:] == ["#1000,", "#1001,", "#1002"]
    header_label = rows[0].index("label")
    assert rows[-1].index("#1000") < header_label <= rows[-1].index("#1002") + 6


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 3)])
def test_a_mean_over_nothing_is_nan_with_an_empty_gradient(shape, axis):
    # NumPy's values (0 / 0 = nan where a mean has no elements), without its
    # warning, and no ZeroDivisionError in the backward or forward mode rule.
    with fa.Tape():
        X = fa.var(np.zeros(shape))
        Y = X.mean(axis=axis)
        L = Y if axis is None else Y.sum()
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = np.zeros(shape).mean(axis=axis)
        np.testing.assert_array_equal(Y.value, expected)
        L.backward()
        assert X.grad.shape == shape
        assert fa.jvp(L, X, np.ones(shape)) == 0.0  # no element to move


def test_block_bytes_count_a_view_once():
    with fa.Tape() as tape:
        X = fa.var(np.ones((100, 100)))
        held = tape.blocks.nbytes
        X.reshape(10_000).reshape(100, 100)  # views of X's array
        assert tape.blocks.nbytes == held == 80_000


def test_the_old_blocks_helpers_still_import():
    from fastad.blocks import any_reached, broadcast_shape, reach_sum, reached_elements, unbroadcast

    assert broadcast_shape((3, 1), (4,)) == (3, 4)
    assert not any_reached(np.array([-0.0])) and reached_elements(np.array([0.0])).all()
    assert unbroadcast(np.ones((3, 4)), (4,)).tolist() == [3.0] * 4
    assert np.signbit(reach_sum(np.array([-0.0, -0.0])))


# -- bugs a user hit ------------------------------------------------------------------
def test_jvp_with_a_single_block_as_wrt_takes_its_array_as_the_direction():
    for shape in ((1, 2), (3, 2)):
        X0 = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
        with fa.Tape():
            X = fa.var(X0)
            L = (X * X).sum()
            assert fa.jvp(L, X, np.ones(shape)) == pytest.approx(2 * X0.sum())


def test_block_forward_and_reverse_mode_give_ieee_values_without_warnings():
    # tests run with warnings as errors: inf - inf inside a block rule is nan, silently
    inf = np.inf
    with fa.Tape():
        Y, T = fa.var(np.array([inf, 1.0])), fa.var(np.array([inf, -inf]))
        with np.errstate(invalid="ignore"):
            L = fa.mse_loss(Y, T)
        assert math.isnan(fa.jvp(L, [Y, T], [np.ones(2), np.ones(2)]))
        dY, dT = fa.grad(L, [Y, T])
        assert math.isnan(dY[0]) and dY[1] == inf and dT[1] == -inf


def test_max_and_min_split_ties_evenly_and_follow_nan():
    # torch.amax's rule; a two-way tie agrees with the scalar fa.maximum.
    with fa.Tape():
        X = fa.var(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
        (X.max(axis=1) * np.array([1.0, 3.0])).sum().backward()
        np.testing.assert_allclose(X.grad, [[0.0, 0.5, 0.5], [1.0, 1.0, 1.0]])
        assert fa.jvp(X.min(), X, np.arange(6.0).reshape(2, 3)) == pytest.approx(0.0)
        pair = fa.var(np.array([4.0, 4.0]))
        a, b = fa.var(4.0), fa.var(4.0)
        assert fa.grad(pair.max(), pair).tolist() == fa.grad(fa.maximum(a, b), [a, b]).tolist()
        N = fa.var(np.array([1.0, np.nan, 5.0]))
        M = N.max()
        assert math.isnan(M.value)
        assert fa.grad(M, N)[1] != 0.0 and fa.grad(M, N)[[0, 2]].tolist() == [0.0, 0.0]
        with pytest.raises(ValueError, match="empty"):
            fa.var(np.zeros((0, 2))).max(axis=0)


def test_arctan2_and_expm1_derivatives_hold_at_extreme_magnitudes():
    # References by hand: d atan2(a, b) = (b, -a) / (a^2 + b^2), scaled so that
    # the squares cannot overflow or underflow; d expm1(x) = exp(x), not
    # expm1(x) + 1, which cancels to 0 below x = -37.
    cases = {
        (1e-200, 1e-200): (5e199, -5e199),
        (1e-200, 0.0): (0.0, -1e200),
        (1e200, 1e200): (5e-201, -5e-201),
        (1.0, 1e200): (1e-200, 0.0),
        (1.0, math.inf): (0.0, 0.0),
    }
    for (a, b), expected in cases.items():
        with fa.Tape():
            x, y = fa.var(a), fa.var(b)
            fa.arctan2(x, y).backward()
            assert (x.grad, y.grad) == pytest.approx(expected, rel=1e-15), (a, b)
    with fa.Tape():
        x = fa.var(0.0)
        fa.arctan2(x, 0.0).backward()
        assert math.isnan(x.grad)  # undefined at the origin
    for value in (-5.0, -20.0, -40.0, 3.0):
        with fa.Tape():
            x = fa.var(value)
            fa.expm1(x).backward()
            assert x.grad == pytest.approx(math.exp(value), rel=1e-15)


def test_jvp_of_a_block_output_is_j_times_v(rng):
    # It raised an internal TypeError; now one tangent sweep gives J v for
    # every element, checked against central differences.
    X0, V = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    W = rng.normal(size=(2, 4))

    def layer(X):
        return fa.tanh(X @ W) * 2.0

    with fa.Tape():
        X = fa.var(X0)
        Y = layer(X)
        tangent = fa.jvp(Y, X, V)
        assert tangent.shape == (3, 4)
    with fa.Tape():
        hi, lo = layer(fa.var(X0 + 1e-6 * V)).value, layer(fa.var(X0 - 1e-6 * V)).value
    np.testing.assert_allclose(tangent, (hi - lo) / 2e-6, rtol=1e-7, atol=1e-9)
    with fa.Tape():
        X = fa.var(X0)
        np.testing.assert_array_equal(fa.jvp(X * 1.0, X, V), V)
        assert fa.jvp(X * 1.0, fa.var(1.0), 1.0).tolist() == np.zeros((3, 2)).tolist()


def test_checked_backward_through_the_fused_layers(rng):
    # It raised "setting an array element with a sequence".
    X, W, b = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)
    for layer in (fa.linear, fa.linear_relu):
        with fa.Tape():
            w = fa.var(W)
            L = layer(X, w, b).sum()
            L.backward(check=True)
            checked = w.grad.copy()
            L.backward()
            np.testing.assert_array_equal(checked, w.grad)
        with fa.Tape():
            w = fa.var(W)
            with np.errstate(invalid="ignore"):
                L = (layer(X * np.inf, w, b) * 0.0).sum()
            with pytest.raises(fa.NonFiniteError):
                L.backward(check=True)


def test_node_table_columns_widen_for_long_op_names_and_shapes():
    with fa.Tape() as tape:
        logits = fa.var(np.ones((200, 2000)))
        fa.cross_entropy(logits, np.zeros(200))
    header, *rows = tape.table().splitlines()
    starts = {header.index(column) for column in ("value", "inputs")}
    assert "cross_entropy " in rows[2]  # the name, then a space, not run into the value
    for row in rows:
        # every value ends where the header's "value" ends; inputs start under "inputs"
        assert row[header.index("value") + len("value") - 1] != " "
        assert row[header.index("inputs")] in "-#"
    assert len(starts) == 2


# -- more bugs that once existed -------------------------------------------------------------
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


def test_checked_backward_ignores_what_an_array_where_drops():
    with fa.Tape():
        X = fa.var(np.array([-1.0, 4.0]))
        with np.errstate(invalid="ignore"):
            L = fa.where(X > 0, fa.sqrt(X), 0.0).sum()
        L.backward(check=True)  # sqrt(-1) is on the side not taken
        np.testing.assert_array_equal(X.grad, [0.0, 0.25])
    with fa.Tape():
        X = fa.var(np.array([-1.0, 4.0]))
        with np.errstate(invalid="ignore"):
            L = fa.where(X < 5, fa.sqrt(X), 0.0).sum()  # taken: a real nan
        with pytest.raises(fa.NonFiniteError, match="sqrt"):
            L.backward(check=True)


def test_gradcheck_checks_a_function_compiled_with_wrt():
    # The wrt arguments vary, the others stay data; messages name the caller's positions.
    example = (np.ones(2), np.arange(6.0).reshape(3, 2))
    f = fa.compile(lambda b, A: (A @ b).sum() + (A * A).sum(), example=example, wrt=1)
    assert f.wrt == (1,)
    assert fa.gradcheck(f, example)
    labels = (np.arange(6.0).reshape(3, 2), np.array([0, 1, 1]))
    g = fa.compile(lambda X, y: fa.cross_entropy(X, y), example=labels, wrt=[0])
    assert fa.gradcheck(g, labels)  # integer labels pass through as data
    wrong = fa.compile(
        lambda b, A: (fa.stop_gradient(A) @ b).sum() + (A * A).sum(), example=example, wrt=1
    )
    result = fa.gradcheck(wrong, example, raise_exception=False)
    assert not result.passed
    assert "argument 1 element" in result.message


def test_empty_batched_products_and_scalar_logsumexp():
    with fa.Tape():
        A, B = fa.var(np.ones((2, 3, 0))), fa.var(np.ones((2, 0, 3)))
        C = A @ B
        np.testing.assert_array_equal(C.value, np.zeros((2, 3, 3)))
        assert fa.grad(C.sum(), A).shape == (2, 3, 0)
        E = fa.var(np.ones((2, 3, 4)))
        assert fa.jvp(E @ np.ones((4, 0)), E, np.ones((2, 3, 4))).shape == (2, 3, 0)
        x = fa.var(3.0)
        y = fa.logsumexp(x)
        assert isinstance(y, fa.Var) and y.value == 3.0 and fa.grad(y, x) == 1.0
    assert fa.logsumexp(3.0) == 3.0


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


def test_no_kernel_calls_blas():
    # Numba's np.dot (and @ in a kernel) calls SciPy's OpenBLAS; beside
    # NumPy's, two thread pools spinning on the same cores made threaded
    # steps 10-80x slower (bench/threads.py). Products belong to the front
    # end (NumPy); a kernel calling BLAS would bring the second pool back.
    kernels = pathlib.Path(fastad.kernels.__file__).resolve().parent
    paths = sorted(kernels.glob("*.py"))
    assert {"fused.py", "sweeps.py"} <= {path.name for path in paths}, kernels
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                raise AssertionError(f"{path.name}:{node.lineno}: a matrix product in a kernel")
            if isinstance(node, ast.Attribute) and node.attr in ("dot", "matmul", "vdot"):
                raise AssertionError(f"{path.name}:{node.lineno}: np.{node.attr} in a kernel")


def test_joins_and_where_read_nested_lists_as_numpy_does():
    with fa.Tape():
        X = fa.var(np.ones((1, 3)))
        joined = np.concatenate([[[1.0, 2.0, 3.0]], X])
        np.testing.assert_array_equal(joined.value, [[1, 2, 3], [1, 1, 1]])
        picked = fa.where([[True, False, True]], X * 2.0, [0.0, 5.0, 0.0])
        np.testing.assert_array_equal(picked.value, [[2.0, 5.0, 2.0]])
        np.testing.assert_array_equal(fa.grad(picked.sum(), X), [[2.0, 0.0, 2.0]])


def test_more_bugs_that_once_existed():
    # A where condition larger than one side: checked mode crashed.
    with fa.Tape() as tape:
        C, x = fa.var(np.ones((3, 4))), fa.var(np.ones(4))
        L = fa.where(C > 0, x, 0.0).sum()
        L.backward(check=True)
        np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0, 3.0])
        assert tape.first_nonfinite(L) is None
    # A scalar condition with an array side: backward raised AttributeError.
    with fa.Tape():
        s, X = fa.var(1.0), fa.var(np.array([2.0, 3.0]))
        L = fa.where(s > 0, X, 1.0).sum()
        L.backward()
        assert (s.grad, X.grad.tolist()) == (0.0, [1.0, 1.0])
    # A nan on a dropped side, also consumed by a node the root does not read.
    with fa.Tape():
        X = fa.var(np.array([-1.0, 4.0]))
        with np.errstate(invalid="ignore"):
            S = fa.sqrt(X)
            S * 2.0  # recorded, never used by L
            L = fa.where(X > 0, S, 0.0).sum()
        L.backward(check=True)
    # Forward mode through logsumexp of a scalar node.
    with fa.Tape():
        x = fa.var(3.0)
        assert fa.jvp(fa.logsumexp(x), x, 1.0) == 1.0
    # A nan among the others makes prod's derivative nan, a zero makes it 0.
    with fa.Tape():
        x = fa.var(np.array([np.nan, 0.0, 1.0]))
        np.testing.assert_array_equal(fa.grad(x.prod(), x), [0.0, np.nan, np.nan])
    # The helpers kept in fastad.blocks give IEEE values without warnings.
    assert math.isnan(fa.blocks.reach_sum(np.array([np.inf, -np.inf])))
    # Accumulating an inf onto a -inf adjoint: nan, no warning.
    with fa.Tape():
        x = fa.var(1.0)
        (x * np.inf).backward()
        (x * -np.inf).backward(accumulate=True)
        assert math.isnan(x.grad)
    # One class: a loss of exactly +0.0.
    assert math.copysign(1.0, fa.cross_entropy(np.zeros((2, 1)), np.zeros(2))) == 1.0
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        with pytest.raises(ValueError, match="ddof and correction"):
            np.var(X, ddof=1, correction=1)
        with pytest.raises(TypeError, match="keepdims"):
            X.sum(keepdims=1.0)
