"""Bad input: clear errors, raw tapes validated, checked mode, save/load."""

import math

import numpy as np
import pytest

import fastad as fa
from fastad.eager.handle import storage_of
from fastad.kernels import optable
from fastad.util import memory

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
        (lambda o, a, b, v: (o, a, b, v.astype(np.longdouble)), "at most 64 bits, got .*128"),
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
        "val-long-double",
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
    # The path exactly, as f.save writes it: no ".npz" is added to a name without it.
    tape.save(str(tmp_path / "plain"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "tape.npz"]
    assert fa.Tape.load(tmp_path / "plain").labels == tape.labels


def test_load_rejects_corrupted_files(tmp_path):
    opcode, in0, in1, val = good_arrays()
    path = tmp_path / "bad.npz"
    np.savez(
        path,
        format=np.array("fastad-tape-1"),
        opcode=opcode,
        in0=in0 + 3,
        in1=in1,
        val=val,
        labels=np.array("{}"),
    )
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


# -- ids, files, traces and everyday conversions ------------------------------------
def test_node_ids_are_validated_everywhere_a_user_passes_one():
    with fa.Tape() as tape:
        x = fa.var(2.0)
        r = x * x
        r.backward()
    calls = {
        "gradient": lambda i: tape.gradient(r, [i]),
        "tangent": lambda i: tape.tangent(r, [i], [1.0]),
        "adjoint": tape.adjoint,
        "backward": tape.backward,
        "op_name": tape.op_name,
        "node": tape.node,
        "source": tape.source,
        "local_partials": lambda i: tape.local_partials([i]),
        "table": lambda i: tape.table(around=i),
        "to_dot": lambda i: tape.to_dot(root=i),
        "first_nonfinite": tape.first_nonfinite,
        "optimize": lambda i: fa.optimize(tape, [i]),
    }
    for name, call in calls.items():
        for bad in (-1, 2, 50):  # -1 must not wrap around to the last node
            with pytest.raises(IndexError, match=f"{bad} is out of range"):
                call(bad)
        for bad in (1.5, 1.0, True, "1"):  # 1.5 must not silently name node 1
            with pytest.raises(TypeError, match="must be an integer"):
                call(bad)
        assert call(np.int64(1)) is not None or name in ("backward", "source", "first_nonfinite")


def test_reduction_axis_must_be_an_integer():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        for bad in (1.5, "1", True):
            with pytest.raises(TypeError, match="axis must be an integer"):
                X.sum(axis=bad)
        assert X.mean(axis=np.int64(1)).shape == (2,)


@pytest.mark.parametrize("key", [1.7, "1.5", "x", -1, 2, True])
def test_label_keys_must_name_existing_nodes(key):
    opcode, in0, in1 = np.array([INPUT, INPUT]), np.array([-1, -1]), np.array([-1, -1])
    val = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="label 'x'"):
        fa.Tape.from_arrays(opcode, in0, in1, val, labels={key: "x"})
    tape = fa.Tape.from_arrays(opcode, in0, in1, val, labels={"1": "y", 0: "x"})
    assert tape.labels == {0: "x", 1: "y"}


def test_traced_values_cannot_escape_through_conversions():
    for convert in (int, round, math.floor, math.ceil, math.trunc, lambda x: f"{x:.3f}"):
        with pytest.raises(fa.TraceError):
            fa.compile(lambda x: x * convert(x)).grad(np.array([2.0]))  # noqa: B023
    # str()/repr() show no value while tracing, so float(str(x)) cannot freeze it.
    shown = []
    fa.compile(lambda x: shown.append(str(x)) or x * x)(np.array([2.0]))
    assert "2.0" not in shown[0] and "traced" in shown[0]


def test_conversions_outside_a_trace_give_plain_numbers():
    # A number taken out of the tape is a constant: no gradient flows through
    # math.exp(x) (documented; use fa.exp), unlike fa.exp(x).
    with fa.Tape():
        x = fa.var(2.6)
        assert (int(x), round(x), round(x, 1), math.floor(x), math.ceil(x)) == (2, 3, 2.6, 2, 3)
        assert f"{x:.2f}" == "2.60" and str(x) == repr(x) == "Var(2.6, id=0)"
        plain = math.exp(x)
        assert type(plain) is float and plain == math.exp(2.6)
        y = x * plain  # plain is a constant node: d/dx = e**2.6, not 2 * ...
        y.backward()
        assert x.grad == math.exp(2.6)


def test_float32_and_integer_inputs_are_computed_in_float64():
    # Documented: eager tapes hold float64; a float32 input is converted
    # exactly (every float32 is a float64), results and gradients are float64.
    value = np.float32(0.1)
    with fa.Tape():
        x = fa.var(value)
        X = fa.var(np.array([0.1, 0.2], dtype=np.float32))
        y = x * 3
        Y = (X * 3).sum()
        y.backward()
        assert type(x.value) is float and x.value == float(value) != 0.1
        assert X.value.dtype == np.float64 and X.value.tolist() == [
            float(np.float32(0.1)),
            float(np.float32(0.2)),
        ]
        assert y.value == float(value) * 3 and x.grad == 3.0
        Y.backward()
        assert X.grad.dtype == np.float64


def test_zero_dimensional_arrays_are_numbers():
    with fa.Tape():
        x = fa.var(2.0)
        X = fa.var(np.array([1.0, 2.0]))
        assert (x * np.array(2.0)).value == 4.0
        assert (np.float64(3.0) - x).value == 1.0
        assert (X * np.array(3.0)).value.tolist() == [3.0, 6.0]
        assert fa.where(np.array(1.0), x, 0.0).value == 2.0
    assert fa.exp(np.array(0.0)) == 1.0


def test_compiled_functions_keep_their_tapes_intact(tmp_path):
    f = fa.compile(lambda x, y: x * y + fa.sin(x), example=np.array([1.0, 2.0]))
    expected = f.value_and_grad(np.array([0.5, 3.0]))
    with pytest.raises(ValueError, match="cannot reset this tape"):
        f.tape.reset()
    with pytest.raises(ValueError, match="cannot record new nodes"):
        with f.tape:
            fa.var(1.0)
    f.save(tmp_path / "f.npz")  # the tape it saves is still the traced one
    loaded = fa.load(tmp_path / "f.npz")
    assert loaded.value_and_grad(np.array([0.5, 3.0]))[0] == expected[0]
    g = fa.compile(lambda X: (X * X).sum(), example=(np.ones(3),))
    with pytest.raises(ValueError, match="cannot reset this tape"):
        g.tape.reset()
    assert g.value_and_grad((np.array([1.0, 2.0, 3.0]),))[0] == 14.0


def test_optimize_refuses_block_tapes_clearly():
    with fa.Tape() as tape:
        X = fa.var(np.ones(3))
        L = (X * X).sum()
    with pytest.raises(ValueError, match="block"):
        fa.optimize(tape, [L])
    with pytest.raises(TypeError, match="needs a fastad.Tape"):
        fa.optimize("tape", [0])


def test_checked_backward_ignores_the_untaken_side_of_where():
    with fa.Tape():
        x = fa.var(-1.0)
        y = fa.where(x > 0, fa.sqrt(x), 0.0)
        y.backward(check=True)  # sqrt(-1) = nan is never read
        assert (y.value, x.grad) == (0.0, 0.0)
    with fa.Tape():
        x = fa.var(-1.0)
        y = fa.where(x > 0, 0.0, fa.sqrt(x))  # now the nan is taken
        with pytest.raises(fa.NonFiniteError, match="sqrt"):
            y.backward(check=True)


# -- damaged files ------------------------------------------------------------------------------
def saved_files(tmp_path):
    with fa.Tape() as tape:
        x = fa.var(0.5, name="x")
        fa.tanh(x * x)
    tape.save(tmp_path / "tape.npz")
    fa.compile(lambda x, y: x * y, example=[1.0, 2.0]).save(tmp_path / "f.npz")
    return {tmp_path / "tape.npz": fa.Tape.load, tmp_path / "f.npz": fa.load}


def test_damaged_files_raise_value_errors_naming_the_file(tmp_path):
    rng = np.random.default_rng(10)
    for path, load in saved_files(tmp_path).items():
        good = path.read_bytes()
        damaged = tmp_path / "damaged.npz"
        trials = [good[:cut] for cut in (0, 10, 100, len(good) // 2, len(good) - 1)]
        for _ in range(60):  # flip random bytes
            data = bytearray(good)
            for position in rng.integers(0, len(data), size=rng.integers(1, 4)):
                data[position] ^= int(rng.integers(1, 256))
            trials.append(bytes(data))
        trials.append(b"not a zip file at all")
        for data in trials:
            damaged.write_bytes(data)
            try:
                load(damaged)
            except ValueError as error:
                assert str(damaged) in str(error)
            # a flip inside a value or label may still load a valid file: fine


def test_a_header_claiming_huge_arrays_is_refused_before_allocating(tmp_path):
    import zipfile

    for path, load in saved_files(tmp_path).items():
        with zipfile.ZipFile(path) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        header = members["val.npy"]
        shape_at = header.index(b"'shape': (") + len(b"'shape': (")
        end = header.index(b")", shape_at)
        members["val.npy"] = header[:shape_at] + b"1000000000000," + header[end:]
        with zipfile.ZipFile(tmp_path / "huge.npz", "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        with pytest.raises(ValueError, match="claims 1000000000000 elements"):
            load(tmp_path / "huge.npz")


def test_files_with_objects_or_wrong_metadata_types_are_refused(tmp_path):
    path = tmp_path / "f.npz"
    fa.compile(lambda x, y: x * y, example=[1.0, 2.0]).save(path)
    state = dict(np.load(path))
    np.savez(path, **(state | {"val": np.array([object()] * 3, dtype=object)}))
    with pytest.raises(ValueError, match="Python objects"):
        fa.load(path)
    for meta, message in [
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "not valid JSON"),
        ('{"labels": [1]}', "'labels' must be an object"),
        ('{"scalar_output": "yes"}', "'scalar_output' must be true or false"),
        ('{"input_names": "xy"}', "'input_names' must be a list"),
        ('{"input_names": ["x"]}', "1 input names for 2 inputs"),
        ('{"name": 3}', "'name' must be a string"),
    ]:
        np.savez(path, **(state | {"meta": np.array(meta)}))
        with pytest.raises(ValueError, match=message):
            fa.load(path)
    tape_path = tmp_path / "tape.npz"
    np.savez(tape_path, **{k: state[k] for k in ("opcode", "in0", "in1", "val")},
             format=np.array("fastad-tape-1"), labels=np.array("[3]"))  # fmt: skip
    with pytest.raises(ValueError, match="labels must be a JSON object"):
        fa.Tape.load(tape_path)
    with pytest.raises(FileNotFoundError):
        fa.load(tmp_path / "missing.npz")


def test_a_zip_directory_claiming_huge_members_is_not_trusted(tmp_path):
    # The header and the zip directory both claim 8 TB; the file holds 1 kB.
    import io
    import zipfile

    from numpy.lib import format as npy_format

    path = next(iter(saved_files(tmp_path)))
    crafted = tmp_path / "crafted.npz"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(crafted, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "val.npy":
                header = io.BytesIO()
                npy_format.write_array_header_1_0(
                    header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
                )
                target.writestr("val.npy", header.getvalue() + bytes(64))
                target.filelist[-1].file_size = len(header.getvalue()) + 8 * 10**12
            else:
                target.writestr(info.filename, data)
    with pytest.raises(ValueError, match="holds only 64 bytes"):
        fa.Tape.load(crafted)


def test_a_saved_tape_without_its_labels_is_damaged(tmp_path):
    path = next(iter(saved_files(tmp_path)))
    state = dict(np.load(path))
    del state["labels"]
    np.savez(tmp_path / "unlabelled.npz", **state)
    with pytest.raises(ValueError, match=r"missing \['labels'\]"):
        fa.Tape.load(tmp_path / "unlabelled.npz")


def test_fortran_ordered_members_load_in_their_order(tmp_path):
    path = tmp_path / "f.npz"
    fa.compile(lambda x, y: x * y, example=[1.0, 2.0]).save(path)
    state = dict(np.load(path))
    state["guards"] = np.asfortranarray(np.array([[2, 1], [2, 1]]))
    np.savez(path, **state)
    np.testing.assert_array_equal(fa.load(path)._calls.program.guards, [[2, 1], [2, 1]])


def test_tape_values_cannot_be_read_while_tracing():
    def leaky(x):
        return x * float(x.tape.val[x.id])

    with pytest.raises(fa.TraceError, match="tape.val"):
        fa.compile(leaky)(np.array([3.0]))


# -- what a compile or a call was given ---------------------------------------------------
def test_a_plain_array_example_for_a_function_of_one_array_says_to_use_a_tuple():
    with pytest.raises(
        ValueError,
        match=r"got shape \(3,\)\. fastad reads a plain array as one "
        r"point.*fa\.compile\(fn, example=\(x,\)\)",
    ):
        fa.compile(lambda x: x.sum(), example=np.ones(3))
    f = fa.compile(lambda x, y: x * y, example=(1.0, 2.0))
    with pytest.raises(ValueError, match=r"got shape \(3,\)$"):  # traced: no hint
        f(np.ones(3))
    assert fa.compile(lambda x: x.sum(), example=(np.ones(3),))((np.ones(3),)) == 3.0


@pytest.mark.parametrize(
    "example, match",
    [
        (
            ({"a": 1.0},),
            r"point must hold real numbers, got dtype object \(dict \{'a': 1\.0\} "
            r"at index \(0,\)\): fastad differentiates real numbers",
        ),
        (
            (np.ones(2), {"a": 1.0}),
            r"argument 1 must hold real numbers, got dtype object "
            r"\(dict \{'a': 1\.0\}\)",
        ),
        ((np.ones(2), ["x", "y"]), r"argument 1 must hold real numbers, got dtype <U1"),
    ],
)
def test_arguments_that_are_not_numbers_are_named(example, match):
    functions = {1: lambda x: x * 2.0, 2: lambda x, y: x * 2.0}
    with pytest.raises(TypeError, match=match):
        fa.compile(functions[len(example)], example=example)


# A float wider than float64 would be rounded to it: refused at every way in. Where
# long double is float64 itself (Windows, ARM macOS) a 128-bit float stands in for it.
WIDE = next(
    (
        np.dtype(name)
        for name in ("longdouble", "float128", "float96")
        if hasattr(np, name) and np.dtype(name).itemsize > 8
    ),
    None,
)
WIDER_THAN_FLOAT64 = r"dtype float(96|128), wider than float64: fastad computes in float64"


WIDE_ENTRY_POINTS = {
    "a block leaf": lambda X, x, block, scalar: fa.var(X),
    "a scalar leaf": lambda X, x, block, scalar: fa.var(x),
    "an array beside a block": lambda X, x, block, scalar: block + X,
    "a number beside a block": lambda X, x, block, scalar: block * x,
    "a number beside a scalar node": lambda X, x, block, scalar: scalar + x,
    "a number on the left of a scalar node": lambda X, x, block, scalar: x - scalar,
    "a linear-algebra operand": lambda X, x, block, scalar: np.linalg.solve(
        block[:2, :2] + np.eye(2), X[:2, 0]
    ),
    "points of a compiled function": lambda X, x, block, scalar: fa.compile(
        lambda a, b: a * b, example=np.array([1.0, 2.0])
    )(np.ones((4, 2), WIDE)),
    "a compiled function of arrays": lambda X, x, block, scalar: fa.compile(
        lambda X: (X * X).sum(), example=(np.ones((3, 2)),)
    )((X,)),
    "a transform": lambda X, x, block, scalar: fa.grad(lambda v: (v * v).sum())(X),
    "an operand of fa.where": lambda X, x, block, scalar: fa.where(X > 0, block, X),
    "np.einsum's operand": lambda X, x, block, scalar: np.einsum("ij,ij->", block, X),
    "fa.concatenate": lambda X, x, block, scalar: fa.concatenate([block, X]),
    "plain arrays only": lambda X, x, block, scalar: fa.exp(X),
    "fa.matmul of plain arrays": lambda X, x, block, scalar: fa.matmul(X, X.T),
    "fa.scalar_nodes": lambda X, x, block, scalar: fa.scalar_nodes(X),
    "np.pad's constant": lambda X, x, block, scalar: np.pad(block, 1, constant_values=x),
    "gradcheck's point": lambda X, x, block, scalar: fa.gradcheck(
        fa.compile(lambda a, b: a * b, example=np.array([1.0, 2.0])), X[0]
    ),
}
WIDE_IN_OBJECTS = r"must hold real numbers, got dtype object \(longdouble"


@pytest.mark.skipif(
    np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 here: nothing rounds"
)
def test_a_wider_float_inside_an_object_array_is_refused_not_rounded():
    operand = np.array([np.longdouble(1.5), 2.0], dtype=object)
    with fa.Tape():
        block = fa.var(np.ones(2))
        for way in (
            lambda: np.linalg.solve(fa.var(np.eye(2)), operand),
            lambda: np.einsum("i,i->", block, operand),
            lambda: np.vstack([block, operand]),
            lambda: fa.where(np.array([True, False]), block, operand),
            lambda: fa.logsumexp(operand),
            lambda: fa.concatenate([operand, operand]),
        ):
            with pytest.raises(TypeError, match=WIDE_IN_OBJECTS):
                way()


@pytest.mark.parametrize("way", list(WIDE_ENTRY_POINTS) if WIDE is not None else [])
def test_floats_wider_than_float64_are_refused_not_rounded(way):
    X, x = np.ones((3, 2), WIDE), np.array(1.5, WIDE)[()]
    with fa.Tape():
        block, scalar = fa.var(np.ones((3, 2))), fa.var(1.0)
        with pytest.raises(TypeError, match=WIDER_THAN_FLOAT64 + r".*astype\(np\.float64\)"):
            WIDE_ENTRY_POINTS[way](X, x, block, scalar)


@pytest.mark.parametrize(
    "data, match",
    [
        (np.array([1 + 2j, 3.0]), r"must hold real numbers, got dtype complex128"),
        (np.array(["1", "2"]), r"must hold real numbers, got dtype <U1"),
        (np.array([1.0, "2"], dtype=object), r"got dtype object \(str '2' at index \(1,\)\)"),
    ],
)
def test_complex_and_text_data_are_refused_not_cut_or_parsed(data, match):
    # Where data is converted to float64 for a block op, NumPy's conversion would drop
    # an imaginary part (with only a warning) or parse the text.
    with fa.Tape():
        block = fa.var(np.ones(2))
        for way in (
            lambda: np.einsum("i,i->", block, data),
            lambda: np.vstack([block, data]),
            lambda: fa.where(np.array([True, False]), block, data),
            lambda: fa.concatenate([data, data]),
            lambda: fa.scalar_nodes(data),
            lambda: np.linalg.solve(fa.var(np.eye(2)), data),
            lambda: fa.matmul(data, data),
        ):
            with pytest.raises(TypeError, match=match):
                way()


@pytest.mark.parametrize("data", [np.array([1 + 2j, 3.0]), np.array(["1", "2"])], ids=repr)
def test_a_function_of_a_plain_array_of_another_dtype_names_it(data):
    with pytest.raises(TypeError, match=rf"fa.exp's ndarray operand .* dtype {data.dtype}"):
        fa.exp(data)


def test_fa_matmul_of_plain_arrays_computes_in_float64():
    # As fastad's other functions of plain arrays: float32 and integers convert exactly.
    A = np.arange(4, dtype=np.float32).reshape(2, 2)
    product = fa.matmul(A, [1, 1])
    assert product.dtype == np.float64
    np.testing.assert_array_equal(product, A.astype(np.float64) @ np.ones(2))


def test_floats_of_float64_or_narrower_and_integers_still_convert():
    g = fa.compile(lambda X: (X * X).sum(), example=(np.ones((3, 2)),))
    for dtype in (np.float16, np.float32, np.float64, np.int8, np.int64, np.bool_):
        assert g((np.ones((3, 2), dtype),)) == 6.0
    with fa.Tape():
        assert (fa.var(np.ones(2, np.float32)) * np.float32(2.0)).value.tolist() == [2.0, 2.0]


# -- the tape's raw recording and reading methods: errors, never a crash -------------------
RAW_CALLS = r"""
import numpy as np
import fastad as fa
from fastad.core import graph
from fastad.eager.handle import storage_of

cases = []
with fa.Tape() as t:
    x = fa.var(2.0)
    y = x * x
    X = fa.var(np.ones(2))
    n = len(t)
    for bad in (10**7, 2**31 - 1, n, -1, -5):
        cases += [
            ("push in0", lambda b=bad: t.push(4, b, 0, 1.0)),
            ("push in1", lambda b=bad: t.push(4, 0, b, 1.0)),
            ("append", lambda b=bad: t.append(10, b, -1, 1.0)),
            ("ancestors", lambda b=bad: graph.ancestors(storage_of(t), b)),
            ("reaching", lambda b=bad: graph.reaching(storage_of(t), b)),
            ("value_ancestors", lambda b=bad: graph.value_ancestors(storage_of(t), b)),
            ("descendants root", lambda b=bad: graph.descendants(storage_of(t), [0], 0, b)),
            ("descendants source", lambda b=bad: graph.descendants(storage_of(t), [b], 0, 1)),
            ("value", lambda b=bad: t.value(b)),
            ("operands", lambda b=bad: t.operands(b)),
            ("set_label", lambda b=bad: t.set_label(b, "z")),
            ("set_leaf_value", lambda b=bad: storage_of(t).set_leaf_value(b, 1.0)),

        ]
    for code in (38, 65, 255, 4.5, True, "4"):
        cases.append(("opcode", lambda c=code: t.push(c, 0, 1, 1.0)))
    for row in ((4, 0.5, 0, 1.0), (4, n - 1, 0, 1.0), (10, 0, 1, 1.0), (0, 0, -1, 1.0),
                (1, -1, 0, 1.0), (4, 0, 1, "a"), (4, 0, 1, None)):
        cases.append(("row", lambda r=row: t.push(*r)))
    cases.append(("leaf is an op", lambda: storage_of(t).set_leaf_value(y.id, 3.0)))
    cases.append(("leaf array", lambda: storage_of(t).set_leaf_value(X.id, np.ones((2, 2)))))
    cases.append(("leaf scalar", lambda: storage_of(t).set_leaf_value(x.id, np.ones(2))))
    for name, call in cases:
        try:
            call()
        except (ValueError, TypeError) as error:
            assert str(error), name
            continue
        raise SystemExit(f"{name}: accepted")
    # Nothing written: the tape is as it was, and backward still gives 2x.
    assert len(t) == n, len(t)
    y.backward()
    assert x.grad == 4.0 and t.push(4, 0, 0, 4.0) == n and t.value(n) == 4.0
print("ok", len(cases))
"""


def test_raw_tape_methods_refuse_bad_ids_opcodes_and_values_without_crashing():
    # In a child process: an id that reached a kernel would end it with a signal.
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", RAW_CALLS], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])
    assert result.stdout.startswith("ok ")


def test_the_unchecked_row_writers_are_not_public():
    # Rows written without checks (what from_arrays and the loaders validate first),
    # the writable columns the kernels sweep, and the storage's own bookkeeping: the
    # tape holds its storage, and none of these is an attribute of the tape.
    private = ("fill", "push_block", "push_block_op", "columns", "constant_id")
    private += ("widen_adjoints", "clear_adjoints", "end_trace", "freeze", "sync", "blocks")
    private += ("check_id", "set_leaf_value", "set_source", "guards", "lock", "generation")
    with fa.Tape() as tape:
        fa.var(1.0)
    storage = storage_of(tape)
    for name in private:
        assert not hasattr(tape, name) and not hasattr(tape, "_" + name), name
        assert hasattr(storage, name), name
    with pytest.raises(TypeError, match="expected a fastad Tape, got int"):
        storage_of(3)


def test_what_a_fuzz_of_the_public_surface_found():
    with fa.Tape() as t:
        x = fa.var(2.0)
        c = t.constant(2.5)
        z = fa.sin(x) * c
        X = fa.var(np.ones((2, 3)))
        X.name = "W"
        u = fa.var(1.0)  # recorded after z
    for bad in ({}, "1", None, 1.5, [1], 2**63):  # a switch is True or False
        with pytest.raises(TypeError, match="check must be True or False"):
            z.backward(check=bad)
        with pytest.raises(TypeError, match="accumulate must be True or False"):
            t.backward(z, accumulate=bad)
    z.backward(check=np.True_)
    with pytest.raises(ValueError, match=r"node 1 is not an input \(const\)"):
        storage_of(t).set_leaf_value(c.id, 9.0)  # shared by later nodes: it keeps its value
    for call in (
        lambda: fa.jvp(z, X, "a"),  # wrt nodes recorded after the root: checked too
        lambda: fa.hvp(z, u, 1j),
        lambda: fa.jvp(z, [x, X], [1.0, np.ones(7)]),
    ):
        with pytest.raises((TypeError, ValueError), match="direction for node"):
            call()
    for bad in (1.0, True, np.float64(3.0)):  # not node 1 or 3
        for read in (t.value, t.block_value, t.label):
            with pytest.raises(TypeError, match="must be an integer"):
                read(bad)
    for bad in (-1, 10**7):
        with pytest.raises(fa.NodeIdError):
            t.label(bad)
        with pytest.raises(fa.NodeIdError):
            t.block_value(bad)
    with pytest.raises(TypeError, match="the cotangent must hold real numbers"):
        t.vjp(z, [x], 1 + 5j)
    with pytest.raises(TypeError, match="the cotangent must hold real numbers"):
        t.vjp(z, [x], "2")
    for call in (
        lambda: t.push(0, -1, -1, 10**400),
        lambda: fa.var(10**400),
        lambda: t.constant(10**400),
        lambda: storage_of(t).set_leaf_value(x.id, 10**400),
    ):
        with pytest.raises(ValueError, match="too large for a float64"):
            call()
    f = fa.compile(lambda a, b: a * b, example=(1.0, 2.0))
    g = fa.compile(lambda A: A.sum(), example=(np.ones(2),))
    for call in (
        lambda: fa.load(42),
        lambda: fa.Tape.load(None),
        lambda: f.save(1),
        lambda: g.save(1),
        lambda: fa.Tape().save(3),
    ):
        with pytest.raises(TypeError, match="takes a file path"):
            call()


def test_tape_capacity_is_checked():
    with pytest.raises(TypeError, match="capacity must be an int .* got float inf"):
        fa.Tape(capacity=float("inf"))
    with pytest.raises(ValueError, match="capacity must be between 1 and 2,147,483,647"):
        fa.Tape(capacity=0)
    assert len(fa.Tape(capacity=np.int64(10))) == 0
    with pytest.raises(TypeError, match="debug must be True or False, got str 'yes'"):
        fa.Tape(debug="yes")


def test_checked_backward_ignores_constant_operands():
    with fa.Tape():
        x = fa.var(-2.0)
        y = x**3  # d/d(exponent) = out * log(-2) = nan, but the exponent is a constant
        y.backward(check=True)
    assert x.grad == 12.0


def test_checked_backward_ignores_a_block_power_s_constant_exponent():
    # As for scalars: d(x**3)/d3 = x**3 log(x) is nan at x < 0, but a constant's
    # adjoint reaches nothing, so it is no alarm.
    with fa.Tape():
        X = fa.var(np.array([-1.0, 2.0]))
        (X**3.0).sum().backward(check=True)
        assert X.grad.tolist() == [3.0, 12.0]


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


def test_zero_dimensional_array_is_a_scalar_leaf():
    with fa.Tape():
        x = fa.var(np.array(3.0))
        assert isinstance(x, fa.Var) and (x * x).value == 9.0


def test_checked_mode_with_where_conditions_of_other_shapes_and_dropped_nans():
    # A where condition larger than one side: checked mode crashed.
    with fa.Tape() as tape:
        C, x = fa.var(np.ones((3, 4))), fa.var(np.ones(4))
        L = fa.where(C > 0, x, 0.0).sum()
        L.backward(check=True)
        np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0, 3.0])
        assert tape.first_nonfinite(L) is None
    # A nan on a dropped side, also consumed by a node the root does not read.
    with fa.Tape():
        X = fa.var(np.array([-1.0, 4.0]))
        with np.errstate(invalid="ignore"):
            S = fa.sqrt(X)
            S * 2.0  # recorded, never used by L
            L = fa.where(X > 0, S, 0.0).sum()
        L.backward(check=True)
        np.testing.assert_array_equal(X.grad, [0.0, 0.25])


def test_what_a_fuzz_of_compiled_functions_and_blocks_found():
    f = fa.compile(lambda x, y: (x * y + x) ** 2)
    point = np.array([2.0, 3.0])
    assert f(point) == 64.0
    for call in (f, f.grad, f.value_and_grad):  # one point: checked as a batch is
        with pytest.raises(ValueError, match="threads must be a positive int, got -5"):
            call(point, threads=-5)
        for bad in ("x", True, 2.0):
            with pytest.raises(TypeError, match="threads must be a positive int"):
                call(point, threads=bad)
        with pytest.raises(TypeError, match="check must be True or False, got str 'no'"):
            call(point, check="no")
    assert f(point[None], threads=np.int64(2))[0] == 64.0
    with pytest.raises(TypeError, match="num_inputs must be a positive int, got bool True"):
        fa.compile(lambda x: x * 2.0, num_inputs=True)
    assert fa.compile(lambda *x: x[0] * x[1], num_inputs=np.int64(2)).num_inputs == 2
    for name in ("optimize", "debug"):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            fa.compile(lambda x: x * 2.0, **{name: "yes"})
    with fa.Tape():
        X = fa.var(np.arange(6.0).reshape(2, 3))
        assert X[[]].shape == (0, 3) and X[:, []].shape == (2, 0)  # NumPy's empty index
        with pytest.raises(TypeError, match=r"X\.value\.tolist\(\)"):
            X.tolist()
        with pytest.raises(ValueError, match="item\\(\\) needs a block of one element"):
            X.item()


def test_the_first_fuzzs_minor_findings():
    with fa.Tape(debug=True) as t:
        x = fa.var(2.0)
        X = fa.var(np.ones((2, 3)))
        z = (X * x).sum()
    with pytest.raises(TypeError, match=r"location must be \(file, line\)"):
        storage_of(t).set_source(0, ("f", True))
    for bad, kind in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(kind, match="start must"):
            t.table(start=bad)
    with pytest.raises(ValueError, match="max_rows must be at least 1"):
        t.table(max_rows=0)
    for call in (t.gradient, lambda root, wrt: t.tangent(root, wrt, [np.ones((2, 3))])):
        with pytest.raises(TypeError, match=r"wrt is one node, .*: pass a list of nodes"):
            call(z, X)
    assert len(t) == 4  # nothing recorded by the refused calls (rows of X were, before)
    np.testing.assert_array_equal(t.gradient(z, [X])[0], np.full((2, 3), 2.0))


def test_a_cotangent_is_named_when_it_is_not_finite_or_not_numbers():
    g = fa.compile(lambda A: A * A, example=(np.ones(3),))
    with pytest.raises(ValueError, match=r"finite, got inf at index \(1,\)"):
        g.vjp([np.ones(3)], np.array([1.0, np.inf, 0.0]))
    s = fa.compile(lambda A: (A * A).sum(), example=(np.ones(3),))
    with pytest.raises(ValueError, match="finite, got nan"):
        s.vjp([np.ones(3)], np.nan)
    with pytest.raises(TypeError, match="cotangent must hold real numbers.*NoneType None"):
        s.vjp([np.ones(3)], None)


def test_an_untraced_function_refuses_an_empty_batch_in_every_mode():
    f = fa.compile(lambda a, b: a * b)
    empty = np.zeros((0, 2))
    with pytest.raises(ValueError, match="untraced function on an empty batch"):
        f.vjp(empty, np.zeros(0))
    with pytest.raises(ValueError, match="untraced function on an empty batch"):
        f.jvp(empty, np.zeros((0, 2)))


def test_num_inputs_past_a_tapes_ids_or_memory_is_refused_before_tracing(monkeypatch):
    with pytest.raises(ValueError, match="less than 2,147,483,647.*got 2,147,483,647"):
        fa.compile(lambda *a: a[0], num_inputs=2**31 - 1)
    # 10**9 inputs fit the ids but not a machine with 16 GiB free: refused at once,
    # not after minutes of tracing.
    monkeypatch.setattr(memory, "available_memory", lambda: 16 * 2**30)
    with pytest.raises(MemoryError, match="1,000,000,000 scalar inputs needs .*function of arrays"):
        fa.compile(lambda *a: a[0], num_inputs=10**9)


def test_a_file_of_the_other_kind_names_the_loader_to_use(tmp_path):
    with fa.Tape() as tape:
        x = fa.var(2.0)
        x * x
    tape.save(tmp_path / "tape.npz")
    f = fa.compile(lambda a: a * a, num_inputs=1)
    f.value_and_grad(np.array([1.0]))
    f.save(tmp_path / "f.npz")
    with pytest.raises(ValueError, match=r"tape.npz: not a fastad compiled .*fa\.Tape\.load"):
        fa.load(tmp_path / "tape.npz")
    with pytest.raises(ValueError, match=r"f.npz: not a fastad tape, .*read it with fa\.load"):
        fa.Tape.load(tmp_path / "f.npz")
