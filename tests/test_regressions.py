"""Regressions found in review: each test pins one bug that once existed."""

import math

import numpy as np
import pytest

import fastad as fa


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
