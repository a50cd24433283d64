"""Tape semantics: fan-out, long chains, accumulation, scopes, lifetime."""

import gc
import math
import tracemalloc

import numpy as np
import pytest

import fastad as fa


# -- fan-out: every edge adds its contribution ------------------------------------
def test_same_node_on_both_edges():
    with fa.Tape() as tape:
        a = fa.var(3.0)
        (a * a).backward()
    assert a.grad == 6.0  # 2a: both edges of a*a count
    assert len(tape) == 2


def test_fan_out_over_several_paths():
    with fa.Tape():
        a = fa.var(1.5)
        b = fa.sin(a)
        c = b * a + fa.exp(a) - a / b
        c.backward()
    s, co = np.sin(1.5), np.cos(1.5)
    expected = co * 1.5 + s + np.exp(1.5) - (s - 1.5 * co) / s**2
    assert a.grad == pytest.approx(expected, rel=1e-14)


def test_repeated_subexpression_records_two_nodes_both_correct():
    with fa.Tape() as tape:
        a, b = fa.var(2.0), fa.var(5.0)
        y = (a + b) * (a + b)
        y.backward()
    assert len(tape) == 5  # two add nodes
    assert (a.grad, b.grad) == (14.0, 14.0)


def test_long_chain_no_recursion():
    # 10^6 nodes: the sweeps are loops over ids, not a recursive DFS.
    n = 1_000_000
    with fa.Tape(capacity=n + 8) as tape:
        x = fa.var(0.5)
        y = x
        for _ in range(n // 2):
            y = y * 1.0000001
            y = y + 1e-9
        y.backward()
    assert len(tape) > n
    assert x.grad == pytest.approx(1.0000001 ** (n // 2), rel=1e-9)
    assert y.value == pytest.approx(tape.val[-1])


def test_backward_from_an_intermediate_node_ignores_later_nodes():
    with fa.Tape():
        x = fa.var(2.0)
        y = x * 3.0
        z = fa.log(y - 6.0)  # -inf, recorded after y, does not reach y
        y.backward()
    assert x.grad == 3.0
    assert z.grad == 0.0


def test_node_that_does_not_reach_root_injects_no_nan():
    with fa.Tape():
        x = fa.var(0.0)
        unused = fa.sqrt(x)  # infinite local derivative, but not on the path
        y = x * 2.0 + unused * 0.0
        y.backward()
    # y depends on sqrt(x) only through an exact zero: the zero adjoint stops there.
    assert x.grad == 2.0


# -- backward twice, accumulation, fa.grad ------------------------------------------
def make_example_1():
    x, y = fa.var(2.0), fa.var(3.0)
    return x, y, (x * y + x) ** 2


def test_second_backward_gives_the_same_gradients():
    with fa.Tape():
        x, y, z = make_example_1()
        z.backward()
        first = (x.grad, y.grad)
        z.backward()
    assert (x.grad, y.grad) == first == (64.0, 32.0)


def test_accumulate_adds_across_outputs():
    with fa.Tape() as tape:
        x, y, z = make_example_1()
        w = x * y
        z.backward()
        w.backward(accumulate=True)
        assert (x.grad, y.grad) == (64.0 + 3.0, 32.0 + 2.0)
        z.backward(accumulate=True)
        assert (x.grad, y.grad) == (128.0 + 3.0, 64.0 + 2.0)
        tape.zero_grad()
        assert (x.grad, y.grad) == (0.0, 0.0)
        z.backward(accumulate=True)
        assert (x.grad, y.grad) == (64.0, 32.0)
        z.backward()  # the default replaces: never "sometimes accumulated"
        assert (x.grad, y.grad) == (64.0, 32.0)


def test_accumulated_intermediate_adjoints_are_not_propagated_twice():
    with fa.Tape():
        x = fa.var(1.0)
        u = x * 3.0
        z = u * u
        z.backward()
        z.backward(accumulate=True)
    assert x.grad == 2 * 18.0
    assert u.grad == 2 * 6.0


def test_grad_function_leaves_grad_untouched():
    with fa.Tape():
        x, y, z = make_example_1()
        assert fa.grad(z, [x, y]).tolist() == [64.0, 32.0]
        assert fa.grad(z, x) == 64.0
        assert (x.grad, y.grad) == (0.0, 0.0)
        z.backward()
        fa.grad(x * 5.0, [x])
        assert x.grad == 64.0


def test_grad_of_node_recorded_after_output_is_zero():
    with fa.Tape():
        x = fa.var(1.0)
        y = x * 2.0
        later = fa.var(4.0)
        assert fa.grad(y, [x, later]).tolist() == [2.0, 0.0]


# -- constants ------------------------------------------------------------------------
def test_repeated_constants_share_one_node():
    with fa.Tape() as tape:
        x = fa.var(1.0)
        y = x
        for _ in range(100):
            y = y * 0.5 + 0.25
    assert len(tape) == 1 + 2 + 200


def test_signed_zero_constants_stay_distinct():
    with fa.Tape():
        x = fa.var(1.0)
        assert (x / 0.0).value == np.inf
        assert (x / -0.0).value == -np.inf


# -- scopes and lifetime ------------------------------------------------------------
def test_scope_records_on_its_tape_and_restores_the_previous_one():
    outer = fa.current_tape()
    with fa.Tape() as t1:
        assert fa.current_tape() is t1
        with fa.Tape() as t2:
            x = fa.var(1.0)
        assert fa.current_tape() is t1
    assert fa.current_tape() is outer
    assert x.tape is t2 and len(t2) == 1 and len(t1) == 0


def test_default_tape_records_outside_any_scope():
    tape = fa.current_tape()
    before = len(tape)
    x = fa.var(2.0)
    assert x.tape is tape and len(tape) == before + 1
    tape.reset()


def test_mixing_tapes_raises_value_error():
    with fa.Tape():
        x = fa.var(1.0)
    with fa.Tape():
        y = fa.var(2.0)
        with pytest.raises(ValueError, match="two different tapes"):
            x + y
        with pytest.raises(ValueError, match="two different tapes"):
            fa.maximum(y, x)
        with pytest.raises(ValueError, match="another tape"):
            fa.grad(y, [x])


def test_node_used_after_reset_raises():
    with fa.Tape() as tape:
        x = fa.var(1.0)
        y = x * 2.0
        tape.reset()
        z = fa.var(5.0)  # takes id 0, which x used to name
        for use in (lambda: x + 1.0, lambda: y.backward(), lambda: y.grad, lambda: fa.exp(x)):
            with pytest.raises(fa.StaleNodeError, match="reset"):
                use()
        assert z.value == 5.0 and z.id == 0


def test_training_loop_memory_is_bounded():
    # The README's loop: a fresh tape per step. Memory after 10,000 steps must
    # equal memory after the warm-up, not grow with the step count.
    def train(steps, w=0.0):
        for _ in range(steps):
            with fa.Tape():
                wv = fa.var(w)
                loss = (wv - 3.0) ** 2
                loss.backward()
                w -= 0.1 * wv.grad
        return w

    train(200)
    gc.collect()
    tracemalloc.start()
    try:
        train(100)
        gc.collect()
        baseline = tracemalloc.get_traced_memory()[0]
        w = train(10_000)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert w == pytest.approx(3.0)
    assert after - baseline < 64 * 1024, f"memory grew by {after - baseline} bytes"


def test_reset_loop_reuses_memory():
    tape = fa.Tape()
    w = 0.0
    for step in range(10_000):
        tape.reset()
        wv = tape.input(w)
        loss = (wv - 3.0) ** 2
        loss.backward()
        w -= 0.1 * wv.grad
        if step == 10:
            capacity = tape.nbytes
    assert tape.nbytes == capacity
    assert w == pytest.approx(3.0)


def test_gradient_descent_step_example_5():
    # The articles' example 5: L(w) = (w - 3)^2, w0 = 0, eta = 0.1 gives w1 = 0.6.
    with fa.Tape():
        w = fa.var(0.0)
        ((w - 3.0) ** 2).backward()
        w1 = w.value - 0.1 * w.grad
    assert w1 == pytest.approx(0.6, abs=1e-15)


# -- arrays and printing ------------------------------------------------------------
def test_arrays_are_read_only_views_of_the_recorded_rows():
    with fa.Tape() as tape:
        x = fa.var(2.0)
        fa.exp(x)
    assert tape.val.tolist() == [2.0, np.exp(2.0)]
    assert tape.opcode.dtype == np.uint8 and tape.in0.dtype == np.int32
    with pytest.raises(ValueError):
        tape.val[0] = 1.0


def test_trim_gives_25_bytes_per_node():
    with fa.Tape() as tape:
        x = fa.var(1.0)
        for _ in range(999):
            x = fa.sin(x)
    assert tape.trim().nbytes == 1000 * (1 + 4 + 4 + 8 + 8)
    assert x.value == pytest.approx(tape.val[-1]) and len(tape) == 1000


def test_trim_releases_the_spare_capacity_at_once_even_after_a_sweep():
    import gc
    import weakref

    with fa.Tape() as tape:
        leaf = x = fa.var(1.0)
        for _ in range(99_999):
            x = fa.sin(x)
    x.backward()  # a sweep reads (and keeps views of) the columns
    capacity = tape.opcode.base
    while capacity.base is not None:  # the array behind the read-only view
        capacity = capacity.base
    assert capacity.size > len(tape)
    held = weakref.ref(capacity)
    del capacity
    tape.trim()
    gc.collect()
    assert held() is None  # freed by trim, not at the next sweep
    assert leaf.grad == pytest.approx(np.prod(np.cos(tape.val[:-1])), rel=1e-12)


def test_table_elides_the_middle_of_long_tapes():
    with fa.Tape() as tape:
        x = fa.var(1.0, name="x")
        for _ in range(500):
            x = x * 1.0
    lines = tape.table(max_rows=10).splitlines()
    assert len(lines) == 1 + 10 + 1
    assert "rows not shown" in lines[6]
    assert lines[1].split() == ["0", "leaf", "1.0000", "-", "x"]


def test_labels_and_repr():
    with fa.Tape() as tape:
        x = fa.var(2.0, name="x")
        y = x * x
        y.name = "y"
    assert tape.labels == {0: "x", 1: "y"}
    assert repr(y) == f"Var(4.0, name='y', id={y.id})"
    assert x.name == "x" and y.op == "mul" and x.op == "input"


def test_comparisons_and_conversions_use_values():
    with fa.Tape():
        x, y = fa.var(2.0), fa.var(3.0)
        assert x < y and x <= 2.0 and y > 2 and y >= x and x == 2.0 and x != y
        assert float(x * y) == 6.0 and bool(x - 2.0) is False
        assert len({x, y}) == 2  # hashable by identity


def test_jvp_with_repeated_and_intermediate_nodes_matches_grad():
    with fa.Tape():
        x, y, w = fa.var(3.0), fa.var(2.0), fa.var(0.5)
        u = x * y
        z = u * u + x * w
        assert fa.jvp(z, [x, x], [1.0, 1.0]) == pytest.approx(fa.grad(z, [x, x]) @ [1.0, 1.0])
        assert fa.jvp(z, [u], [1.0]) == fa.grad(z, [u])[0] == 2 * 6.0
        # u and w are independent of each other: J v == grad . v
        assert fa.jvp(z, [u, w], [0.5, 2.0]) == pytest.approx(fa.grad(z, [u, w]) @ [0.5, 2.0])


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


def test_a_backward_that_fails_midway_leaves_no_half_sweep(monkeypatch):
    from fastad.core import block_rules

    with fa.Tape() as tape:
        x = fa.var(3.0)
        X = fa.var(np.ones(2))
        L = (X * x).sum() + x * x
        L.backward()
        assert x.grad == 8.0
        rule = block_rules.rule
        failing = fa.kernels.optable.BLOCK_BY_NAME["sum"].code

        def refuse(code):
            if code == failing:
                raise NotImplementedError("planted")
            return rule(code)

        monkeypatch.setattr(block_rules, "rule", refuse)
        with pytest.raises(NotImplementedError, match="planted"):
            L.backward()
        assert x.grad == 0.0 and X.grad.tolist() == [0.0, 0.0]
        assert tape.grad.tolist() == [0.0] * len(tape)


def test_jvp_with_a_single_block_as_wrt_takes_its_array_as_the_direction():
    for shape in ((1, 2), (3, 2)):
        X0 = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
        with fa.Tape():
            X = fa.var(X0)
            L = (X * X).sum()
            assert fa.jvp(L, X, np.ones(shape)) == pytest.approx(2 * X0.sum())


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


def test_accumulating_an_inf_onto_a_minus_inf_adjoint_gives_nan_without_a_warning():
    with fa.Tape():
        x = fa.var(1.0)
        (x * np.inf).backward()
        (x * -np.inf).backward(accumulate=True)
        assert math.isnan(x.grad)
