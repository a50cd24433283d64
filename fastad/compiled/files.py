"""Compiled functions as bytes and files: pickles and ``.npz`` files of both kinds.

A function of scalars (format ``fastad-compiled-1``) keeps its tape's
arrays (values of leaves and constants only: loading recomputes the rest),
its input, output and guard ids, its source lines and JSON metadata; a
function of arrays (``fastad-block-function-1``) also its blocks
(:mod:`fastad.core.block_file`), ``wrt``, batch positions and axes. Both are
compressed (``savez_compressed``; a pickle holds those bytes) and read back
through :func:`fastad.util.npz.read_npz`, a type check of every metadata
field, the tape's own validation and id checks, before any kernel runs.
Reading gives the records of :mod:`fastad.compiled.definition`, from which
the classes build themselves.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from fastad.compiled import array_kernel, batch_axis
from fastad.compiled.array_interpreter import replay
from fastad.compiled.definition import (
    ArrayDefinition,
    ScalarDefinition,
    ScalarProgram,
    Unavailable,
)
from fastad.compiled.tiers import BACKENDS
from fastad.compiled.trace import wrt_positions
from fastad.core import block_file
from fastad.eager.handle import storage_of
from fastad.eager.tape import Tape
from fastad.kernels import optable
from fastad.util import npz
from fastad.util.errors import BranchError

if TYPE_CHECKING:
    from fastad.eager.node import Block, Var
    from fastad.util.hints import FloatArray, IdArray, StrPath

COMPILED_FORMAT = "fastad-compiled-1"
BLOCK_FORMAT = "fastad-block-function-1"


# -- writing ------------------------------------------------------------------------------------
def scalar_state(definition: ScalarDefinition) -> dict[str, Any]:
    """The arrays a function of scalars is saved as (raises for an untraced one)."""
    program = definition.program
    if program is None:
        raise TypeError(
            "this compiled function has not been traced yet: call it once or pass "
            "example= to fa.compile before pickling or saving it"
        )
    tape = program.tape
    files, located = _source_table(program.sources)
    return {
        "format": COMPILED_FORMAT,
        "opcode": tape.opcode.copy(),
        "in0": tape.in0.copy(),
        "in1": tape.in1.copy(),
        "val": _leaf_values(tape),
        "inputs": program.inputs,
        "outputs": program.outputs,
        "guards": program.guards,
        "sources": located,
        "meta": json.dumps(
            {
                "scalar_output": program.scalar_output,
                "input_names": definition.input_names,
                "labels": {str(i): v for i, v in tape.labels.items()},
                "name": definition.name,
                "backend": definition.backend,
                "fast_math": definition.fast_math,
                "source_files": files,
            }
        ),
    }


def array_state(definition: ArrayDefinition) -> dict[str, Any]:
    """The arrays a function of arrays is saved as (its tape holds the last call's values)."""
    tape = definition.tape
    blocks, params = block_file.block_state(storage_of(tape))
    wrt, batch = definition.wrt, definition.batch
    return {
        "format": BLOCK_FORMAT,
        "opcode": tape.opcode.copy(),
        "in0": tape.in0.copy(),
        "in1": tape.in1.copy(),
        "val": _leaf_values(tape),
        **blocks,
        "inputs": np.array([node.id for node in definition.inputs], np.int64),
        "output": np.array([definition.output.id], np.int64),
        "guards": np.array(definition.guards, np.int64).reshape(-1, 2),
        "meta": json.dumps(
            {
                "name": definition.name,
                "input_names": [tape.label(node.id) or "" for node in definition.inputs],
                "labels": {str(i): v for i, v in tape.labels.items()},
                "params": params,
                "wrt": None if wrt is None else wrt[0],
                "wrt_single": wrt is not None and wrt[1],
                "backend": definition.backend,
                "fast_math": definition.fast_math,
                "integers": definition.integers,
                "batch": list(batch),
                "rows": definition.shapes[batch[0]][0] if batch else None,
                "batch_axes": {
                    str(node): list(axes) for node, axes in definition.batch_axes.items()
                },
            }
        ),
    }


def npz_bytes(state: Mapping[str, Any]) -> bytes:
    """``state``'s arrays as the bytes of a compressed ``.npz`` file."""
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {key: np.asarray(value) for key, value in state.items()}
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def scalar_pickle(definition: ScalarDefinition) -> dict[str, Any]:
    """A function of scalars' pickle state: ``{"npz": bytes}``.

    The .npz bytes, compressed: a 10^4-node program pickles to tens of kB and
    is validated on the way in like a file.
    """
    return {"npz": npz_bytes(scalar_state(definition))}


def array_bytes(definition: ArrayDefinition) -> bytes:
    """A function of arrays as the bytes of its ``.npz`` file."""
    return npz_bytes(array_state(definition))


def array_pickle(definition: ArrayDefinition) -> dict[str, Any]:
    """A function of arrays' pickle state: ``{"npz": bytes}``."""
    return {"npz": array_bytes(definition)}


def save_scalars(definition: ScalarDefinition, path: StrPath) -> None:
    """Write a function of scalars to ``path`` as a compressed ``.npz`` file."""
    path = npz.file_path(path, "save")
    with open(path, "wb") as file:
        file.write(npz_bytes(scalar_state(definition)))


def write(data: bytes, path: StrPath) -> None:
    """Write a file's bytes to ``path`` (checked to be a path)."""
    path = npz.file_path(path, "save")
    with open(path, "wb") as file:
        file.write(data)


def _leaf_values(tape: Tape) -> FloatArray:
    """The values a file must keep: leaves' and constants'. The others are zero.

    Loading recomputes every operation's value (``Tape.from_arrays``), so
    a traced value there is only noise that does not compress.
    """
    values = tape.val.copy()
    values[(tape.opcode != optable.INPUT) & (tape.opcode != optable.CONST)] = 0.0
    return values


def _source_table(sources: Mapping[int, tuple[str, int]]) -> tuple[list[str], IdArray]:
    """Source locations as ``(files, rows of [node, file index, line])`` for a file."""
    files: dict[str, int] = {}
    rows = [
        (node, files.setdefault(name, len(files)), line) for node, (name, line) in sources.items()
    ]
    return list(files), np.array(rows, np.int64).reshape(-1, 3)


# -- reading ------------------------------------------------------------------------------------
def read(path: StrPath) -> ScalarDefinition | ArrayDefinition:
    """The function a file written by ``save`` holds, validated (:func:`fastad.load`)."""
    path = npz.file_path(path, "fa.load")
    arrays = npz.read_npz(path, "compiled function")
    if "format" in arrays and npz.text_field(arrays, "format", str(path)) == BLOCK_FORMAT:
        return array_definition(arrays, str(path))
    return scalar_definition(arrays, source=str(path))


def scalar_unpickled(state: Mapping[str, Any]) -> ScalarDefinition:
    """The function of scalars a pickle state holds, validated like a file."""
    if not isinstance(state, Mapping):
        raise ValueError(
            f"pickle: not a fastad compiled function (its state is {type(state).__name__})"
        )
    if set(state) == {"npz"} and isinstance(state["npz"], bytes):
        arrays = npz.read_npz(io.BytesIO(state["npz"]), "compiled function", "pickle")
    else:
        arrays = dict(state)
    return scalar_definition(arrays)


def array_unpickled(state: Mapping[str, Any]) -> ArrayDefinition:
    """The function of arrays a pickle state holds, validated like a file."""
    if (
        not isinstance(state, Mapping)
        or set(state) != {"npz"}
        or not isinstance(state["npz"], bytes)
    ):
        raise ValueError(
            f"pickle: not a fastad function of arrays (its state is {type(state).__name__}"
            + (f" with keys {sorted(map(str, state))})" if isinstance(state, Mapping) else ")")
        )
    arrays = npz.read_npz(io.BytesIO(state["npz"]), "function of arrays", "pickle")
    return array_definition(arrays, "pickle")


_METADATA_TYPES: dict[str, tuple[type, object, str]] = {
    # key: (type, default when absent, description for errors)
    "scalar_output": (bool, True, "true or false"),
    "input_names": (list, [], "a list of strings"),
    "labels": (dict, {}, "an object of node id: label"),
    "name": (str, "function", "a string"),
    "backend": (str, "auto", '"auto", "interpret" or "codegen"'),
    "fast_math": (bool, False, "true or false"),
    "source_files": (list, [], "a list of file names"),
}


def scalar_definition(state: Mapping[str, Any], source: str = "pickle") -> ScalarDefinition:
    """A function of scalars from the arrays :func:`scalar_state` wrote, validated."""
    missing = {"format", "opcode", "in0", "in1", "val", "inputs", "outputs", "guards", "meta"}
    missing -= set(state)
    if missing:
        saved_tape = {"labels", "opcode"} <= set(state) and "meta" not in state
        hint = " (it is a saved tape: read it with fa.Tape.load)" if saved_tape else ""
        raise ValueError(
            f"{source}: not a fastad compiled function, missing {sorted(missing)}{hint}"
        )
    state = {key: np.asarray(value) for key, value in state.items()}
    found = npz.text_field(state, "format", source)
    if found != COMPILED_FORMAT:
        raise ValueError(f"{source}: format {found!r}, expected {COMPILED_FORMAT!r}")
    meta = _metadata(npz.text_field(state, "meta", source), source)
    try:
        tape = Tape.from_arrays(
            state["opcode"], state["in0"], state["in1"], state["val"], meta["labels"]
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from None
    n = len(tape)
    inputs = _ids(state["inputs"], n, "inputs", source)
    outputs = _ids(state["outputs"], n, "outputs", source)
    guards = _guard_rows(state["guards"], n, source)
    if (tape.opcode[inputs] != optable.INPUT).any() or np.unique(inputs).size != inputs.size:
        raise ValueError(f"{source}: inputs must be distinct leaf nodes")
    if inputs.size == 0 or outputs.size == 0:
        raise ValueError(f"{source}: a compiled function needs at least one input and output")
    if meta["scalar_output"] and outputs.size != 1:
        raise ValueError(f"{source}: a scalar-output function must have exactly one output")
    names = meta["input_names"] or [f"x{i}" for i in range(inputs.size)]
    if len(names) != inputs.size:
        raise ValueError(f"{source}: {len(names)} input names for {inputs.size} inputs")
    sources = _source_locations(state.get("sources"), meta["source_files"], n, source)
    program = ScalarProgram(tape, inputs, outputs, guards, meta["scalar_output"], sources, None)
    return ScalarDefinition(
        function=Unavailable(meta["name"]),
        input_names=names,
        backend=meta["backend"],
        optimize=False,
        debug=bool(sources),
        program=program,
        fast_math=meta["fast_math"],
    )


_BLOCK_FIELDS = {
    "format", "opcode", "in0", "in1", "val", "block_nodes", "block_ndim", "block_dims",
    "block_data", "op_nodes", "op_start", "op_operands", "inputs", "output", "guards", "meta",
}  # fmt: skip


def array_definition(state: Mapping[str, Any], source: str) -> ArrayDefinition:
    """A function of arrays from the arrays :func:`array_state` wrote, validated."""
    missing = _BLOCK_FIELDS - set(state)
    if missing:
        raise ValueError(f"{source}: not a fastad function of arrays, missing {sorted(missing)}")
    found = npz.text_field(dict(state), "format", source)
    if found != BLOCK_FORMAT:
        raise ValueError(f"{source}: format {found!r}, expected {BLOCK_FORMAT!r}")
    meta = npz.json_object(npz.text_field(dict(state), "meta", source), f"{source}: metadata")
    params, labels = meta.get("params"), meta.get("labels", {})
    if not isinstance(params, list) or not isinstance(labels, dict):
        raise ValueError(f"{source}: metadata must hold a params list and a labels object")
    tape = Tape()
    block_file.rebuild(storage_of(tape), state, state, params, labels, source)
    n = len(tape)
    inputs = _ids(state["inputs"], n, "inputs", source)
    output = _ids(state["output"], n, "output", source)
    guards = _guard_rows(state["guards"], n, source)
    if inputs.size == 0 or (tape.opcode[inputs] != optable.INPUT).any():
        raise ValueError(f"{source}: inputs must be leaf nodes, at least one")
    if any(tape.block_value(int(node)) is not None for node in guards[:, 0]):
        raise ValueError(f"{source}: a guard must be a scalar node (a comparison)")
    if np.unique(inputs).size != inputs.size or output.size != 1:
        raise ValueError(f"{source}: inputs must be distinct, and there must be one output")
    name, wrt, single = meta.get("name", "function"), meta.get("wrt"), meta.get("wrt_single")
    if not isinstance(name, str) or not isinstance(single, bool):
        raise ValueError(f"{source}: metadata name must be a string and wrt_single a bool")
    if wrt is not None and (not isinstance(wrt, list) or (single and len(wrt) != 1)):
        raise ValueError(f"{source}: metadata wrt must be null or a list (of one, if wrt_single)")
    if wrt is not None and any(isinstance(p, int) and p < 0 for p in wrt):
        raise ValueError(f"{source}: metadata wrt must hold positions from 0, got {wrt!r}")
    try:
        positions = wrt_positions(wrt[0] if single and wrt is not None else wrt, inputs.size)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: metadata {error}") from None
    nodes = [tape.node(int(node)) for node in inputs]
    guard_list = [(int(node), bool(truth)) for node, truth in guards.tolist()]
    out_node = tape.node(int(output[0]))
    shapes = [np.shape(tape.value(node.id)) for node in nodes]
    backend = meta.get("backend", "auto")
    integers = meta.get("integers", [False] * inputs.size)
    fast_math = meta.get("fast_math", False)
    if backend not in BACKENDS:
        raise ValueError(f"{source}: metadata backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(fast_math, bool):
        raise ValueError(f"{source}: metadata fast_math must be true or false, got {fast_math!r}")
    _check_fast_math(fast_math, backend, source)
    if (
        not isinstance(integers, list)
        or len(integers) != inputs.size
        or not all(isinstance(flag, bool) for flag in integers)
    ):
        raise ValueError(f"{source}: metadata integers must be a list of {inputs.size} bools")
    batch, batch_axes = _batch_state(meta, tape, nodes, guard_list, out_node, source)
    if batch:  # the traced number of rows (the tape holds the last call's)
        rows = meta.get("rows")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            raise ValueError(f"{source}: metadata rows must be a positive int, got {rows!r}")
        shapes = [
            (rows, *shape[1:]) if position in batch else shape
            for position, shape in enumerate(shapes)
        ]
    return ArrayDefinition(
        name=name,
        tape=tape,
        inputs=nodes,
        output=out_node,
        guards=guard_list,
        shapes=shapes,
        wrt=positions,
        batch=batch,
        batch_axes=batch_axes,
        backend=backend,
        integers=integers,
        fast_math=fast_math,
    )


def _batch_state(
    meta: Mapping[str, Any],
    tape: Tape,
    inputs: list[Var | Block],
    guards: list[tuple[int, bool]],
    output: Var | Block,
    source: str,
) -> tuple[tuple[int, ...], dict[int, batch_axis.Axes]]:
    """The batch positions and axes a saved function of arrays names, checked against its
    tape: positions of array arguments, axes of array nodes holding the rows of the
    batch arguments, and the program replayed with one row more (a node whose shape does
    not follow is refused)."""
    positions, axes = meta.get("batch", []), meta.get("batch_axes", {})
    count = len(inputs)
    if (
        not isinstance(positions, list)
        or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p < count for p in positions
        )
        or len(set(positions)) != len(positions)
        or not isinstance(axes, dict)
    ):
        raise ValueError(f"{source}: metadata batch must list distinct argument positions")
    if not positions:
        if axes:
            raise ValueError(f"{source}: metadata batch_axes without batch positions")
        return (), {}
    shapes = [np.shape(tape.value(node.id)) for node in inputs]
    if any(not shapes[p] for p in positions) or len({shapes[p][0] for p in positions}) != 1:
        raise ValueError(f"{source}: batch arguments must be arrays with one number of rows")
    rows = shapes[positions[0]][0]
    found: dict[int, batch_axis.Axes] = {}
    for key, listed in axes.items():
        node = int(key) if isinstance(key, str) and key.isdigit() else -1
        value = tape.block_value(node) if 0 <= node < len(tape) else None
        if (
            value is None
            or not isinstance(listed, list)
            or not listed
            or not all(isinstance(a, int) and 0 <= a < value.ndim for a in listed)
            or any(value.shape[a] != rows for a in listed)
        ):
            raise ValueError(f"{source}: batch_axes entry {key!r} names no axis of {rows} rows")
        found[node] = tuple(sorted(set(listed)))
    for p in positions:
        if found.get(inputs[p].id, ()) != (0,):
            raise ValueError(f"{source}: batch argument {p} must have its rows along axis 0")
    # Replay with one row more: every node's shape must follow its axes.
    kept = [tape.value(node.id) for node in inputs]
    before = {node: array_kernel.shape_of(storage_of(tape), node) for node in range(len(tape))}
    probe = [batch_axis.with_one_more_row(v) if i in positions else v for i, v in enumerate(kept)]
    _check_shapes_at(tape, inputs, probe, f"{source}: at {rows + 1} rows")  # before any replay
    try:
        try:
            replay(tape, inputs, guards, output, probe)
        except BranchError:
            pass  # a comparison of the new row's values: the shapes are what is checked
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: the batch axes do not fit the program: {error}") from None
        for node, shape in before.items():
            now = array_kernel.shape_of(storage_of(tape), node)
            if now != batch_axis.shape_at(shape, found.get(node, ()), rows + 1):
                raise ValueError(
                    f"{source}: node {node} has shape {now} at {rows + 1} rows, not its batch "
                    f"axes' {batch_axis.shape_at(shape, found.get(node, ()), rows + 1)}"
                )
    finally:
        replay(tape, inputs, guards, output, kept)
    return tuple(positions), found


def _check_shapes_at(tape: Tape, inputs: list[Var | Block], values: list[Any], where: str) -> None:
    """Run every block op's shape rule, in id order, on the shapes the program would have
    with ``values`` at ``inputs``: a ``ValueError`` names the first op whose operands do
    not fit. No value is computed, so a file whose batch axes do not fit the program is
    refused before any op runs on arrays of the wrong shapes."""
    storage = storage_of(tape)
    opcode = storage.columns()[0]
    blocks = storage.blocks
    shapes = [array_kernel.shape_of(storage, node) for node in range(len(tape))]
    for leaf, value in zip(inputs, values, strict=True):
        shapes[leaf.id] = np.shape(value)
    for op in blocks.ops:
        shapes[op] = block_file.op_shape(
            int(opcode[op]), blocks.operands(op), blocks.params(op), shapes, where
        )


def _source_locations(
    rows: Any, files: list[Any], n: int, source: str
) -> dict[int, tuple[str, int]]:
    """The ``{node: (file, line)}`` a file holds (none in files from before they were saved)."""
    if rows is None:
        return {}
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] != 3 or rows.dtype.kind not in "iu":
        raise ValueError(f"{source}: sources must be an integer array of shape (s, 3)")
    if not all(isinstance(name, str) for name in files):
        raise ValueError(f"{source}: metadata source_files must be strings")
    if rows.size and (
        rows[:, 0].min() < 0
        or rows[:, 0].max() >= n
        or rows[:, 1].min() < 0
        or rows[:, 1].max() >= len(files)
        or rows[:, 2].min() < 0
    ):
        raise ValueError(
            f"{source}: sources must name nodes in [0, {n}), files in [0, {len(files)}) "
            "and lines >= 0"
        )
    return {int(node): (files[int(f)], int(line)) for node, f, line in rows.tolist()}


def _metadata(text: str, source: str) -> dict[str, Any]:
    """The JSON metadata of a saved compiled function, every field type-checked."""
    meta = npz.json_object(text, f"{source}: metadata")
    checked: dict[str, Any] = {}
    for key, (kind, default, description) in _METADATA_TYPES.items():
        value = meta.get(key, default)
        if not isinstance(value, kind):
            raise ValueError(
                f"{source}: metadata field {key!r} must be {description}, got {value!r}"
            )
        checked[key] = value
    if checked["backend"] not in BACKENDS:
        raise ValueError(f"{source}: metadata field 'backend' must be one of {BACKENDS}")
    _check_fast_math(checked["fast_math"], checked["backend"], source)
    if not all(isinstance(name, str) for name in checked["input_names"]):
        raise ValueError(f"{source}: metadata input_names must be strings")
    return checked


def _check_fast_math(fast_math: bool, backend: str, source: str) -> None:
    """Refuse what ``fa.compile`` refuses: fast math with the interpreter alone."""
    if fast_math and backend == "interpret":
        raise ValueError(
            f"{source}: metadata asks for fast_math with backend 'interpret', which runs no "
            "generated code (fa.compile refuses the pair)"
        )


def _guard_rows(guards: ArrayLike, n: int, source: str) -> IdArray:
    """Saved guards checked: rows of (node id in [0, n), outcome 0 or 1)."""
    guards = np.asarray(guards)
    if guards.ndim != 2 or guards.shape[1] != 2 or guards.dtype.kind not in "iu":
        raise ValueError(f"{source}: guards must be an integer array of shape (g, 2)")
    _ids(guards[:, 0], n, "guard nodes", source)
    if not np.isin(guards[:, 1], (0, 1)).all():
        raise ValueError(f"{source}: guard outcomes must be 0 or 1")
    return guards.astype(np.int64)


def _ids(ids: ArrayLike, n: int, what: str, source: str) -> IdArray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"{source}: {what} must be a one-dimensional integer array")
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"{source}: {what} {ids.tolist()} must lie in [0, {n})")
    return ids.astype(np.int64)
