"""Compiled functions of arrays pickle, save and load, validated like scalar ones."""

import io
import json
import pickle
import re

import numpy as np
import pytest

import fastad as fa
from fastad.core import block_file, reduction_rules
from fastad.eager.handle import storage_of
from fastad.kernels import optable
from fastad.util import npz


@pytest.fixture
def arrays(rng):
    X, W, b = rng.normal(size=(8, 5)), rng.normal(size=(5, 3)), rng.normal(size=3)
    T = rng.normal(size=(8, 3))
    labels = rng.integers(0, 3, size=8).astype(np.float64)
    return X, W, b, T, labels


def many_block_ops(X, W, b, T, labels):
    H = fa.linear_relu(X, W, b)
    Z = fa.tanh(H @ np.ones((3, 3)) * 0.5)[1:, ::2].reshape(-1)
    picked = H[np.array([0, 2, 5]), 1] + H[..., 0].T[:3]
    joined = fa.concatenate([Z, picked], axis=0)
    s = joined.sum() + fa.logsumexp(H, axis=1).mean() + fa.mse_loss(H, T)
    s = s + fa.cross_entropy(H, labels) + (X @ W).max(axis=0, keepdims=True).sum()
    if s > -1e6:
        return s * 2.0
    return s


def round_trips(f, folder):
    path = folder / "f.npz"
    f.save(path)
    return [pickle.loads(pickle.dumps(f)), fa.load(path)]


def test_a_function_of_many_block_ops_round_trips_bit_for_bit(arrays, tmp_path, rng):
    for wrt in (None, [1, 2], 0):
        f = fa.compile(many_block_ops, example=arrays, wrt=wrt)
        value, gradients = f.value_and_grad(arrays)
        moved = [a + 0.1 * rng.normal(size=np.shape(a)) for a in arrays[:4]] + [arrays[4]]
        expected = f.value_and_grad(moved)
        for again in round_trips(f, tmp_path):
            assert type(again) is fa.BlockFunction and again.wrt == f.wrt
            for point, (v, g) in ((arrays, (value, gradients)), (moved, expected)):
                found_value, found_gradients = again.value_and_grad(point)
                assert found_value == v
                if wrt == 0:
                    np.testing.assert_array_equal(found_gradients, g)
                else:
                    for mine, theirs in zip(found_gradients, g, strict=True):
                        np.testing.assert_array_equal(mine, theirs)


def guarded(X, W, b):
    s = fa.tanh(X @ W + b).sum()
    if s > -10.0:
        return s * s
    return s


def test_a_loaded_function_keeps_its_guards_labels_and_second_order(arrays, tmp_path, rng):
    X, W, b = arrays[:3]
    f = fa.compile(guarded, example=(X, W, b), wrt=1)
    direction = rng.normal(size=W.shape)
    for again in round_trips(f, tmp_path):
        with pytest.raises(fa.BranchError, match="which was True"):
            again((X, W, b - 100.0))  # every tanh near -1: the sum is -24
        assert again.tape.labels == f.tape.labels and again.tape.frozen
        np.testing.assert_array_equal(again.hvp((X, W, b), direction), f.hvp((X, W, b), direction))


def test_params_encode_and_decode_every_kind_the_recorder_keeps():
    key = np.array([True, False, True])
    key.flags.writeable = False
    for param in (
        None,
        3,
        "mean",
        reduction_rules.Reduction((0, 2), True),
        reduction_rules.Reduction(None),
        (2, 0, 1),
        (slice(1, None, 2), Ellipsis, None, 4),
        key,
        np.array([[0, 2], [1, 1]]),
    ):
        encoded = json.loads(json.dumps(block_file.encode_param(param)))
        decoded = block_file.decode_param(encoded, "here")
        if isinstance(param, np.ndarray):
            np.testing.assert_array_equal(decoded, param)
            assert decoded.dtype == param.dtype and not decoded.flags.writeable
        else:
            assert decoded == param and type(decoded) is type(param)
    with pytest.raises(TypeError, match="cannot save a block op parameter of type object"):
        block_file.encode_param(object())
    for bad in ({"tuple": 3}, {"slice": [1.5, None, None]}, {"what": 1}, [1, 2], {"array": 1}):
        with pytest.raises(ValueError, match="here: malformed"):
            block_file.decode_param(bad, "here")


def damaged(f, change):
    """``f``'s saved arrays after ``change(arrays, meta)``, as pickle state."""
    arrays = npz.read_npz(io.BytesIO(f.__getstate__()["npz"]), "x")
    arrays = {key: np.array(value) for key, value in arrays.items()}
    meta = json.loads(str(arrays["meta"]))
    change(arrays, meta)
    arrays["meta"] = np.array(json.dumps(meta))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return {"npz": buffer.getvalue()}


def test_damaged_files_are_refused_naming_the_problem(arrays):
    f = fa.compile(guarded, example=arrays[:3])
    matmul = int(storage_of(f.tape).blocks.ops[0])

    def set_value(name, index, value):
        def change(state, meta):
            state[name][index] = value

        return change

    def set_meta(key, value):
        def change(state, meta):
            meta[key] = value

        return change

    def transpose_x(state, meta):
        state["block_dims"][:2] = [5, 8]  # X (8, 5) read as (5, 8): the same data size

    def seventy_axes(state, meta):  # X (8, 5) as (8, 5, 1, ..., 1): the same data size
        state["block_ndim"][0] = 70
        dims = state["block_dims"]
        state["block_dims"] = np.concatenate([dims[:2], np.ones(68, dims.dtype), dims[2:]])

    cases = [
        (transpose_x, f"node {matmul}: .*shape"),
        (set_value("block_dims", 1, 4), "block shapes need 50 elements, data holds 58"),
        (set_value("opcode", matmul, 250), f"node {matmul}: invalid opcode 250"),
        (set_value("op_operands", 0, matmul), "operands .* are earlier nodes"),
        (set_value("inputs", 0, matmul), "inputs must be leaf nodes"),
        (set_value("guards", (slice(None), 0), 10**6), "guard nodes"),
        (
            set_meta("params", [{"bogus": 1}] * len(storage_of(f.tape).blocks.ops)),
            "malformed block op",
        ),
        (set_meta("wrt", [7]), "pickle: metadata wrt position 7 is out of range"),
        (set_meta("wrt", [1.5]), "pickle: metadata wrt holds argument positions"),
        (set_meta("wrt", [-1]), "pickle: metadata wrt must hold positions from 0"),
        (seventy_axes, "pickle: a block has 70 axes, NumPy's most is 64"),
        (set_value("block_data", 0, np.nan), None),  # a value, not a structure: loads
    ]
    for change, message in cases:
        state = damaged(f, change)
        target = object.__new__(fa.BlockFunction)
        if message is None:
            target.__setstate__(state)
            continue
        with pytest.raises(ValueError, match=message):
            target.__setstate__(state)


def test_every_opcode_in_place_of_a_block_op_loads_or_is_refused_with_a_value_error(arrays):
    # An op swapped for another in a file: its parameters or operands are then the
    # other op's (a sum's None for a reshape's shape, a matmul's two operands for a
    # unary op), which reached the rules and the code generator (AttributeError,
    # IndexError). Every opcode in every block op's place: a ValueError naming the
    # node, or a file that loads.
    def program(X, W, b, T, labels):
        return (fa.tanh(X @ W).sum(axis=0) * 2.0).mean() + fa.logsumexp(X, axis=1).sum()

    f = fa.compile(program, example=arrays)
    codes = [*range(optable.NUM_OPS), 38, 63, 70, 82, 255]
    codes += [op.code for op in optable.BLOCK_OPS]
    refused = loaded = 0
    for node in storage_of(f.tape).blocks.ops:
        for code in codes:

            def swap(state, meta, node=node, code=code):
                state["opcode"][node] = code

            g = object.__new__(fa.BlockFunction)
            try:
                g.__setstate__(damaged(f, swap))
            except ValueError as error:
                # The node, or one it feeds whose operands no longer fit, or the replay.
                assert re.search(r"node \d+: |replaying the tape failed", str(error)), error
                refused += 1
                continue
            loaded += 1  # another op that fits (sin for tanh): it runs
            assert np.ndim(g(arrays)) == 0
    assert refused > 0 and loaded > 0


def test_pickle_states_that_are_not_mappings_are_refused():
    for cls, what in ((fa.BlockFunction, "function of arrays"), (fa.CompiledFunction, "compiled")):
        with pytest.raises(ValueError, match=f"pickle: not a fastad {what}.*NoneType"):
            object.__new__(cls).__setstate__(None)


def test_crafted_shapes_and_params_are_refused_before_anything_is_allocated(arrays):
    # Regressions: a 3 kB pickle claiming (10^6, 0) @ (0, 10^6) asked
    # for 7 TiB; a reshape to a string failed inside NumPy.
    f = fa.compile(lambda A, B: (A @ B).sum(), example=(np.ones((2, 3)), np.ones((3, 2))))

    def empty_inner(state, meta):
        state["block_dims"][:] = [10**6, 0, 0, 10**6]
        state["block_data"] = np.empty(0)

    with pytest.raises(MemoryError, match="2 block ops would need 7,450.6 GiB"):
        object.__new__(fa.BlockFunction).__setstate__(damaged(f, empty_inner))
    g = fa.compile(lambda A: A.reshape(3, 2).sum(), example=(np.ones((2, 3)),))
    reshape = [
        i for i, p in enumerate(storage_of(g.tape).blocks.ops) if g.tape.op_name(p) == "reshape"
    ][0]

    def bad_reshape(value):
        def change(state, meta):
            meta["params"][reshape] = value

        return change

    for value in ({"str": "abc"}, {"tuple": [4, 2]}, {"tuple": [-6]}):
        with pytest.raises(ValueError, match="cannot reshape an array of shape"):
            object.__new__(fa.BlockFunction).__setstate__(damaged(g, bad_reshape(value)))

    def zero_dimensional(state, meta):
        state["block_ndim"][0] = 0
        state["block_dims"] = state["block_dims"][2:]

    with pytest.raises(ValueError, match="at least one axis"):
        object.__new__(fa.BlockFunction).__setstate__(damaged(g, zero_dimensional))


def test_a_guard_on_a_block_node_is_refused():
    f = fa.compile(guarded, example=(np.ones((2, 2)), np.ones((2, 2)), np.ones(2)))

    def guard_a_block(state, meta):
        state["guards"][0, 0] = state["inputs"][0]

    with pytest.raises(ValueError, match="a guard must be a scalar node"):
        object.__new__(fa.BlockFunction).__setstate__(damaged(f, guard_a_block))


def test_load_tells_a_function_of_arrays_from_one_of_scalars(arrays, tmp_path):
    scalar = fa.compile(lambda x, y: x * y, example=[1.0, 2.0])
    blocks = fa.compile(lambda X, W: (X @ W).sum(), example=arrays[:2])
    scalar.save(tmp_path / "s.npz")
    blocks.save(tmp_path / "b.npz")
    assert type(fa.load(tmp_path / "s.npz")) is fa.CompiledFunction
    assert type(fa.load(tmp_path / "b.npz")) is fa.BlockFunction


def test_a_function_of_arrays_has_a_checked_mode(arrays):
    X, W, b = arrays[:3]

    def layer(X, W, b):
        return fa.log(X @ W + b).sum()

    f = fa.compile(layer, example=(X, W, np.full(3, 100.0)), debug=True)
    with pytest.raises(fa.NonFiniteError, match=r"\(log\) at test_block_files.py") as caught:
        f((X, W, b - 100.0), check=True)
    assert caught.value.origin.phase == "forward"
    assert np.isnan(f((X, W, b - 100.0)))  # unchecked: the nan, no error
    ones = np.ones((2, 2))
    g = fa.compile(lambda X, W: fa.sqrt(X @ W - 2.0).sum(), example=(ones, ones * 2.0), wrt=1)
    assert np.isinf(g.grad((ones, ones))).all()
    with pytest.raises(fa.NonFiniteError) as caught:
        g.grad((ones, ones), check=True)  # sqrt at 0: an infinite slope
    assert caught.value.origin.phase == "backward"


def test_a_refused_call_leaves_the_tape_as_the_last_good_call_had_it(tmp_path):
    def loss(X, w):
        s = (X @ w).sum()
        return s * s if s > 0 else -s

    X, w = np.ones((4, 2)), np.array([1.0, 2.0])
    f = fa.compile(loss, example=(X, w), wrt=1, batch=(0,), backend="interpret")
    assert f((X[:3], w)) == 81.0  # a good call with three rows
    for refused in [(X, -w), (X[:2], -w)]:
        with pytest.raises(fa.BranchError):
            f(refused)
        # The tape holds the last good call: a save or pickle loads and runs.
        assert np.array_equal(f.tape.block_value(f.tape.inputs[0]), X[:3])
        for again in round_trips(f, tmp_path):
            assert again((X, w)) == 144.0


def test_metadata_nested_past_pythons_depth_is_a_damaged_file(arrays):
    f = fa.compile(guarded, example=arrays[:3])
    state = npz.read_npz(io.BytesIO(f.__getstate__()["npz"]), "x")
    state = {key: np.array(value) for key, value in state.items()}
    state["meta"] = np.array("[" * 100_000 + "]" * 100_000)
    buffer = io.BytesIO()
    np.savez(buffer, **state)
    with pytest.raises(ValueError, match="pickle: metadata nests deeper than Python can read"):
        object.__new__(fa.BlockFunction).__setstate__({"npz": buffer.getvalue()})


def test_batch_axes_that_do_not_fit_the_program_are_refused_before_any_op_runs(rng):
    X, W, b = rng.normal(size=(8, 3)), rng.normal(size=(3, 2)), np.zeros(2)
    f = fa.compile(lambda X, W, b: fa.linear_relu(X, W, b).sum(), example=(X, W, b))

    def rows_of_w(state, meta):  # W named the batch argument: (3, 2) at 4 rows is (4, 2)
        meta.update(batch=[1], rows=3, batch_axes={str(f.tape.inputs[1]): [0]})

    with pytest.raises(
        ValueError, match=r"pickle: at 4 rows: .*linear_relu: .*\(8, 3\) @ W \(4, 2\)"
    ):
        object.__new__(fa.BlockFunction).__setstate__(damaged(f, rows_of_w))
