"""One construction path: a compiled function traced, saved and loaded, pickled and
unpickled is built from one record (``fastad.compiled.definition``) by one constructor,
and every field tracing sets comes back from a file and from a pickle."""

import dataclasses
import pickle

import numpy as np
import pytest

import fastad as fa
from fastad.compiled import BlockFunction, CompiledFunction
from fastad.compiled.definition import ArrayDefinition, ScalarDefinition, ScalarProgram
from fastad.eager.tape import Tape

# What a file does not keep, by design: the Python function (a loaded one is
# replayed, never traced again: a stand-in of the same name refuses to run), and
# the optimiser's flag and report (the saved tape is the optimised one).
NOT_SAVED = {"function", "optimize", "optimization"}


def guarded(x, y):
    z = x * y + fa.sin(x)
    if x > 0.0:
        return z * 2.0
    return z


def two_outputs(x, y, w):
    return [x * y + w, fa.exp(x - w)]


def scaled_loss(W, b, X, y):
    Z = X @ W + b
    loss = fa.cross_entropy(Z, y)
    if loss > 0.0:
        return loss * 2.0
    return loss


def scalar_functions():
    return [
        fa.compile(guarded, example=(0.5, 1.5), debug=True),
        fa.compile(two_outputs, example=(0.5, 1.5, -1.0), backend="interpret", optimize=False),
    ]


def array_function():
    rng = np.random.default_rng(3)
    W, b = rng.normal(size=(4, 3)), rng.normal(size=3)
    X, y = rng.normal(size=(5, 4)), rng.integers(0, 3, size=5)
    f = fa.compile(scaled_loss, example=(W, b, X, y), wrt=0, batch=(2, 3), backend="interpret")
    return f, (W, b, X, y)


def round_trips(f, tmp_path):
    path = tmp_path / "f.npz"
    f.save(path)
    return {"file": fa.load(path), "pickle": pickle.loads(pickle.dumps(f))}


def assert_same(traced, loaded, where):
    """Equal values, field by field, whatever the field holds."""
    if isinstance(traced, Tape):
        assert len(loaded) == len(traced), where
        for name in ("opcode", "in0", "in1"):
            np.testing.assert_array_equal(getattr(loaded, name), getattr(traced, name), where)
        for node in range(len(traced)):
            np.testing.assert_array_equal(loaded.value(node), traced.value(node), where)
        assert loaded.labels == traced.labels and loaded.sources == traced.sources, where
    elif isinstance(traced, np.ndarray):
        np.testing.assert_array_equal(loaded, traced, where)
    elif isinstance(traced, fa.Var | fa.Block):
        assert type(loaded) is type(traced) and loaded.id == traced.id, where
    elif isinstance(traced, list) and traced and isinstance(traced[0], fa.Var | fa.Block):
        assert len(loaded) == len(traced), where
        for a, b in zip(loaded, traced, strict=True):
            assert_same(a, b, where)
    else:
        assert loaded == traced, where


def assert_same_record(traced, loaded, where, skip=frozenset()):
    assert type(loaded) is type(traced), where
    for field in dataclasses.fields(traced):
        if field.name in skip:
            continue
        a, b = getattr(traced, field.name), getattr(loaded, field.name)
        if dataclasses.is_dataclass(a):
            assert_same_record(a, b, f"{where}.{field.name}", skip)
        else:
            assert_same(a, b, f"{where}.{field.name}")


@pytest.mark.parametrize("index", [0, 1])
def test_a_function_of_scalars_keeps_every_field(tmp_path, index):
    f = scalar_functions()[index]
    traced = f._calls.definition
    assert isinstance(traced, ScalarDefinition) and isinstance(traced.program, ScalarProgram)
    fields = {field.name for field in dataclasses.fields(ScalarDefinition)}
    fields |= {field.name for field in dataclasses.fields(ScalarProgram)}
    assert NOT_SAVED <= fields  # the exceptions name fields that exist
    points = np.array([[0.5, 1.5, -1.0][: f.num_inputs], [0.25, 2.0, 0.5][: f.num_inputs]])
    for how, loaded in round_trips(f, tmp_path).items():
        record = loaded._calls.definition
        assert_same_record(traced, record, how, skip=NOT_SAVED)
        assert record.name == traced.name and record.optimize is False, how
        assert record.program is not None and record.program.optimization is None, how
        assert repr(loaded) == repr(f), how
        assert (loaded.num_inputs, loaded.num_outputs) == (f.num_inputs, f.num_outputs), how
        for call in ("values", "grad", "vjp", "jvp", "jacobian_fwd", "jacobian_rev"):
            assert loaded.tier(call).name == f.tier(call).name, how  # the work done aside
        np.testing.assert_array_equal(loaded(points), f(points), how)
        np.testing.assert_array_equal(loaded.jacobian(points), f.jacobian(points), how)
        with pytest.raises(RuntimeError, match="loaded from a file"):
            record.function(1.0)


def test_a_function_of_arrays_keeps_every_field(tmp_path):
    f, arguments = array_function()
    f.value_and_grad(arguments)
    traced = f._definition
    assert isinstance(traced, ArrayDefinition)
    W, b, X, y = arguments
    fewer = (W, b, X[:3], y[:3])
    for how, loaded in round_trips(f, tmp_path).items():
        assert_same_record(traced, loaded._definition, how)
        assert repr(loaded) == repr(f), how
        assert (loaded.wrt, loaded.single_wrt, loaded.batch, loaded.rows) == (
            f.wrt,
            f.single_wrt,
            f.batch,
            f.rows,
        ), how
        for call in ("grad", "values", "vjp", "jvp", "hvp"):
            assert loaded.tier(call).name == f.tier(call).name, how  # the work done aside
        for args in (arguments, fewer):
            value, gradient = loaded.value_and_grad(args)
            expected_value, expected_gradient = f.value_and_grad(args)
            assert value == expected_value, how
            np.testing.assert_array_equal(gradient, expected_gradient, how)
        np.testing.assert_array_equal(loaded.jacobian(fewer), f.jacobian(fewer), how)
        np.testing.assert_array_equal(loaded.vjp(arguments, 0.5)[1], f.vjp(arguments, 0.5)[1], how)


def test_tracing_loading_and_unpickling_share_one_constructor(tmp_path, monkeypatch):
    built = []
    for cls in (CompiledFunction, BlockFunction):
        setup = cls._setup

        def recorded(self, definition, setup=setup):
            built.append((type(self), type(definition)))
            setup(self, definition)

        monkeypatch.setattr(cls, "_setup", recorded)
    scalar = scalar_functions()[0]
    arrays, _ = array_function()
    assert built == [
        (CompiledFunction, ScalarDefinition),
        (CompiledFunction, ScalarDefinition),
        (BlockFunction, ArrayDefinition),
    ]
    for f, kind in ((scalar, ScalarDefinition), (arrays, ArrayDefinition)):
        built.clear()
        round_trips(f, tmp_path)
        assert built == [(type(f), kind), (type(f), kind)]  # fa.load, then pickle.loads
