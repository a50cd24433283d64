"""Bad input: clear errors, raw tapes validated, checked mode, save/load."""

import math

import numpy as np
import pytest

import fastad as fa
from fastad.kernels import optable

ADD, MUL, SIN, INPUT = (optable.BY_NAME[n].code for n in ("add", "mul", "sin", "input"))


# -- unsupported operand types ---------------------------------------------------------
@pytest.mark.parametrize("bad", ["2", None, 1 + 2j, np.array(["a"]), {"a": 1}], ids=repr)
def test_unsupported_operand_types_raise_type_error_naming_the_type(bad):
    with fa.Tape():
        x = fa.var(1.0)
        for operation in (lambda: x + bad, lambda: x - bad, lambda: x**bad, lambda: x / bad):
            with pytest.raises(TypeError, match=type(bad).__name__):
                operation()
        # With the node on the right, the left operand's type may answer first
        # ("can't multiply sequence by non-int"): still a TypeError.
        for operation in (lambda: bad * x, lambda: bad / x, lambda: bad - x):
            with pytest.raises(TypeError):
                operation()
        with pytest.raises(TypeError, match=type(bad).__name__):
            fa.maximum(x, bad)
        with pytest.raises(TypeError, match=type(bad).__name__):
            fa.exp(bad)
        with pytest.raises(TypeError, match=type(bad).__name__):
            fa.var(bad)


def test_comparison_with_unsupported_type_raises():
    with fa.Tape():
        x = fa.var(1.0)
        with pytest.raises(TypeError, match="str"):
            assert x < "2"
        assert (x == "1.0") is False


def test_numpy_scalars_and_ints_are_numbers():
    with fa.Tape():
        x = fa.var(np.float32(1.5))
        y = x * np.int64(2) + np.float64(0.5) + True
        assert y.value == 4.5


def test_grad_requires_nodes():
    with fa.Tape():
        x = fa.var(1.0)
        with pytest.raises(TypeError, match="float"):
            fa.grad(1.0, [x])
        with pytest.raises(TypeError, match="int"):
            fa.grad(x, [3])


# -- tapes from raw arrays --------------------------------------------------------------
def good_arrays():
    # x, y, x*y, sin(x*y), x*y + sin(x*y)
    opcode = np.array([INPUT, INPUT, MUL, SIN, ADD], np.uint8)
    in0 = np.array([-1, -1, 0, 2, 2], np.int32)
    in1 = np.array([-1, -1, 1, -1, 3], np.int32)
    val = np.array([0.5, 2.0, 0.0, 0.0, 0.0])
    return opcode, in0, in1, val


def test_from_arrays_recomputes_values_and_differentiates():
    tape = fa.Tape.from_arrays(*good_arrays(), labels={0: "x", 1: "y"})
    assert tape.val[4] == 1.0 + math.sin(1.0)
    tape.backward(4)
    assert tape.grad[0] == pytest.approx(2.0 * (1 + math.cos(1.0)), rel=1e-15)
    assert tape.node(0).name == "x" and tape.inputs.tolist() == [0, 1]


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda o, a, b, v: (o, a, b, v[:4]), "equal lengths"),
        (lambda o, a, b, v: (o, a.reshape(5, 1), b, v), "one-dimensional"),
        (lambda o, a, b, v: (o.astype(float), a, b, v), "opcode must be integer"),
        (lambda o, a, b, v: (o, a, b, v.astype(np.int64)), "val must be floating"),
        (lambda o, a, b, v: (np.where(o == SIN, 99, o), a, b, v), "node 3: invalid opcode 99"),
        (lambda o, a, b, v: (o, np.where(np.arange(5) == 2, 4, a), b, v), r"node 2 \(mul.*in0 = 4"),
        (lambda o, a, b, v: (o, a, np.where(b == 3, 4, b), v), r"node 4 \(add.*in1 = 4"),
        (lambda o, a, b, v: (o, a, np.where(b == 1, 2, b), v), r"node 2 \(mul.*in1 = 2"),
        (lambda o, a, b, v: (o, np.where(a == -1, 0, a), b, v), r"node 0 \(input.*in0 = 0"),
        (lambda o, a, b, v: (o, a, np.where(o == SIN, 0, b), v), r"node 3 \(sin.*in1 = 0"),
        (lambda o, a, b, v: (o, np.where(o == SIN, -5, a), b, v), r"node 3 \(sin.*in0 = -5"),
    ],
    ids=[
        "length",
        "ndim",
        "opcode-dtype",
        "val-dtype",
        "opcode",
        "forward-ref",
        "forward-ref-in1",
        "self-ref",
        "leaf-operand",
        "unary-in1",
        "negative",
    ],
)
def test_from_arrays_rejects_invalid_tapes(corrupt, message):
    with pytest.raises(ValueError, match=message):
        fa.Tape.from_arrays(*corrupt(*good_arrays()))


def test_save_and_load_round_trip(tmp_path):
    with fa.Tape() as tape:
        x, y = fa.var(0.5, name="x"), fa.var(2.0, name="y")
        z = fa.tanh(x * y) + fa.log(y)
        z.name = "z"
    path = tmp_path / "tape.npz"
    tape.save(path)
    loaded = fa.Tape.load(path)
    for name in ("opcode", "in0", "in1", "val"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(tape, name))
    assert loaded.labels == tape.labels
    assert fa.grad(loaded.node(z.id), [loaded.node(0), loaded.node(1)]).tolist() == (
        fa.grad(z, [x, y]).tolist()
    )


def test_load_rejects_corrupted_files(tmp_path):
    opcode, in0, in1, val = good_arrays()
    path = tmp_path / "bad.npz"
    np.savez(path, format=np.array("fastad-tape-1"), opcode=opcode, in0=in0 + 3, in1=in1, val=val)
    with pytest.raises(ValueError, match="node 0"):
        fa.Tape.load(path)
    np.savez(path, opcode=opcode)
    with pytest.raises(ValueError, match="not a fastad tape"):
        fa.Tape.load(path)


# -- checked mode: where did the nan come from? -------------------------------------------
def test_first_nonfinite_names_the_origin_not_the_symptom():
    with fa.Tape() as tape:
        x = fa.var(0.0, name="x")
        y = fa.var(2.0)
        a = x * y
        b = fa.log(a)  # the origin: -inf from the finite input 0.0
        b.name = "b"
        c = b * y + 1.0  # symptoms downstream
        d = c - c
    assert d.value != d.value  # -inf - -inf = nan
    origin = tape.first_nonfinite()
    assert (origin.phase, origin.node, origin.op, origin.label) == ("forward", b.id, "log", "b")
    assert origin.inputs == (0.0,) and origin.value == -math.inf
    with pytest.raises(fa.NonFiniteError, match=rf"node {b.id} \(log 'b'\) produced -inf"):
        d.backward(check=True)


def test_checked_backward_finds_infinite_local_derivative():
    with fa.Tape():
        x = fa.var(0.0)
        s = fa.sqrt(x)  # value 0.0 is finite, derivative 0.5 / 0 = inf
        y = s * 3.0
        y.backward()  # unchecked: IEEE values, no exception
        assert x.grad == math.inf
        with pytest.raises(fa.NonFiniteError) as info:
            y.backward(check=True)
    origin = info.value.origin
    assert (origin.phase, origin.node, origin.op, origin.slot) == ("backward", s.id, "sqrt", 0)
    assert origin.partial == math.inf


def test_checked_mode_ignores_nonfinite_nodes_off_the_path():
    with fa.Tape() as tape:
        x = fa.var(0.0)
        fa.log(x)  # -inf, but the output does not use it
        y = x + 1.0
        y.backward(check=True)
    assert x.grad == 1.0
    assert tape.first_nonfinite(y) is None and tape.first_nonfinite() is not None


def test_nonfinite_leaf_is_its_own_origin():
    with fa.Tape():
        x = fa.var(math.nan, name="x")
        y = x * 2.0
        with pytest.raises(fa.NonFiniteError, match="node 0 \\(input 'x'\\) holds nan"):
            y.backward(check=True)
