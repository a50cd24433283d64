"""Tapes with blocks as plain arrays and JSON, and back, validated node by node.

A compiled function of arrays (``fastad.BlockFunction``) pickles and saves
its traced tape. Scalar rows are the tape's arrays, as for scalar tapes
(``fastad/core/tape_file.py``); the block side is four more groups of arrays:

- the values of block leaves and constants: ``block_nodes``, their
  ``block_ndim`` and ``block_dims`` (the shapes, flattened) and
  ``block_data`` (the elements, flattened in order);
- the block ops: ``op_nodes`` and their operands in CSR form
  (``op_start``, ``op_operands``);
- each op's parameters (an axis, a reduction, an index key), as tagged JSON
  (:func:`encode_param`): no pickle inside, like every fastad file.

:func:`rebuild` records the tape again node by node: every id, opcode and
operand is checked, each block op's shape rule runs on its operands' shapes
(so a shape that cannot be right raises ``ValueError`` naming the node
before any kernel sees it), then a forward sweep computes every value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core import block_rules, driver, tape_file
from fastad.core.reduction_rules import Reduction
from fastad.core.storage import as_stored
from fastad.kernels import optable
from fastad.util import npz
from fastad.util.memory import available_memory

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray

_LEAVES = (optable.INPUT, optable.CONST)
_MOST_AXES = 64
"""NumPy's largest number of axes (``np.empty((1,) * 65)`` raises)."""


def encode_param(param: Any) -> Any:
    """A block op's parameter as JSON-ready data, tagged by type; ``TypeError`` if unknown."""
    if param is None or (isinstance(param, int) and not isinstance(param, bool)):
        return param
    if isinstance(param, np.integer):
        return int(param)
    if isinstance(param, bool):
        return {"bool": param}
    if isinstance(param, str):
        return {"str": param}
    if isinstance(param, Reduction):
        return {"reduction": [encode_param(param.axes), param.keepdims]}
    if isinstance(param, tuple):
        return {"tuple": [encode_param(part) for part in param]}
    if isinstance(param, slice):
        return {"slice": [encode_param(part) for part in (param.start, param.stop, param.step)]}
    if param is Ellipsis:
        return {"ellipsis": True}
    if isinstance(param, np.ndarray) and param.dtype.kind in "biu":
        return {"array": param.ravel().tolist(), "dtype": param.dtype.str, "shape": param.shape}
    raise TypeError(
        f"cannot save a block op parameter of type {type(param).__name__} ({param!r}); "
        "fastad.core.block_file.encode_param knows None, ints, strings, reductions, tuples, "
        "slices, Ellipsis and integer or boolean arrays"
    )


def decode_param(data: Any, where: str) -> Any:
    """The parameter :func:`encode_param` wrote; ``ValueError`` naming ``where`` if malformed."""
    if data is None or (isinstance(data, int) and not isinstance(data, bool)):
        return data
    if not isinstance(data, dict) or len(data) not in (1, 3):
        raise ValueError(f"{where}: malformed block op parameter {data!r}")
    tag = next(iter(data))
    value = data[tag]
    if tag == "bool" and isinstance(value, bool):
        return value
    if tag == "str" and isinstance(value, str):
        return value
    if tag == "reduction" and isinstance(value, list) and len(value) == 2:
        axes = decode_param(value[0], where)
        if axes is not None and not (
            isinstance(axes, tuple) and all(isinstance(axis, int) for axis in axes)
        ):
            raise ValueError(f"{where}: reduction axes must be None or a tuple of ints")
        return Reduction(axes, bool(value[1]))
    if tag == "tuple" and isinstance(value, list):
        return tuple(decode_param(part, where) for part in value)
    if tag == "slice" and isinstance(value, list) and len(value) == 3:
        parts = [decode_param(part, where) for part in value]
        if not all(part is None or isinstance(part, int) for part in parts):
            raise ValueError(f"{where}: slice bounds must be ints or None")
        return slice(*parts)
    if tag == "ellipsis" and value is True:
        return Ellipsis
    if tag == "array" and set(data) == {"array", "dtype", "shape"}:
        return _decoded_array(data, where)
    raise ValueError(f"{where}: malformed block op parameter {data!r}")


def _decoded_array(data: Mapping[str, Any], where: str) -> Any:
    try:
        dtype = np.dtype(data["dtype"])
        shape = tuple(int(n) for n in data["shape"])
        array = np.array(data["array"], dtype=dtype).reshape(shape)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: malformed index array ({error})") from None
    if dtype.kind not in "biu":
        raise ValueError(f"{where}: an index array must hold integers or booleans, not {dtype}")
    array.flags.writeable = False  # as the recorder keeps index keys
    return array


def block_state(tape: TapeStorage) -> tuple[dict[str, Any], list[Any]]:
    """The block side of ``tape``: ``(arrays, encoded parameters)`` (see the module docstring)."""
    opcode = tape.opcode
    table = tape.blocks
    leaves = [
        node for node in sorted(table.values) if not table.is_op(node) and opcode[node] in _LEAVES
    ]
    blocks = [table.values[node] for node in leaves]
    ops = list(table.ops)
    operands = [table.operands(node) for node in ops]
    arrays = {
        "block_nodes": np.array(leaves, np.int64),
        "block_ndim": np.array([block.ndim for block in blocks], np.int64),
        "block_dims": np.array([n for block in blocks for n in block.shape], np.int64),
        "block_data": np.concatenate([block.ravel() for block in blocks] or [np.empty(0)]),
        "op_nodes": np.array(ops, np.int64),
        "op_start": np.cumsum([0] + [len(o) for o in operands], dtype=np.int64),
        "op_operands": np.array([j for o in operands for j in o], np.int64),
    }
    return arrays, [encode_param(table.params(node)) for node in ops]


_BLOCK_MEMBERS = (
    "block_nodes", "block_ndim", "block_dims", "block_data", "op_nodes", "op_start",
    "op_operands", "params",
)  # fmt: skip


def tape_members(tape: TapeStorage) -> dict[str, Any]:
    """The block side of a tape ``Tape.save`` writes beside its scalar rows:
    :func:`block_state`'s arrays and its parameters as JSON (read by :func:`tape_params`)."""
    arrays, params = block_state(tape)
    arrays["params"] = np.array(json.dumps({"params": params}))
    return arrays


def tape_params(data: Mapping[str, Any], source: str) -> list[Any]:
    """The block ops' encoded parameters of a tape with blocks that ``Tape.save`` wrote
    (its members ``data``), after checking that its block side is all there."""
    missing = [name for name in _BLOCK_MEMBERS if name not in data]
    if missing:
        raise ValueError(f"{source}: a tape with blocks, missing {missing}")
    text = npz.text_field(dict(data), "params", source)
    params = npz.json_object(text, f"{source}: params").get("params")
    if not isinstance(params, list):
        raise ValueError(f"{source}: params must hold a JSON list, one per block op")
    return params


def rebuild(
    storage: TapeStorage,
    scalar: Mapping[str, Any],
    arrays: Mapping[str, Any],
    params: list[Any],
    labels: Mapping[str, str],
    source: str,
) -> None:
    """Record the tape ``block_state`` described again into the empty ``storage``, checking
    every node; then a forward sweep.

    ``scalar`` holds ``opcode``, ``in0``, ``in1``, ``val`` (the rows of
    scalar nodes; block rows' operands come from the op table). Raises
    ``ValueError`` naming ``source`` and the first node that cannot be right.
    """
    opcode = _integers(scalar["opcode"], "opcode", source)
    n = opcode.size
    leaves = _block_leaves(arrays, n, source)
    ops = _block_ops(arrays, params, n, source)
    # The scalar rows, checked as a scalar tape's are (opcodes, arity, operands
    # before their node), with the block rows standing in as leaves.
    block_rows = np.zeros(n, np.bool_)
    block_rows[[*leaves, *ops]] = True
    try:
        _, in0, in1, values = tape_file.validated_arrays(
            np.where(block_rows, optable.INPUT, opcode),
            np.where(block_rows, -1, scalar["in0"]),
            np.where(block_rows, -1, scalar["in1"]),
            scalar["val"],
        )
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
    shapes: list[tuple[int, ...]] = []
    planned = 0  # bytes the block ops' values will take
    for node in range(n):
        code = int(opcode[node])
        where = f"{source}: node {node}"
        if code not in optable.ALL:  # a block row's (the scalar rows' are checked above)
            raise ValueError(f"{where}: invalid opcode {code}")
        if node in leaves:
            if code not in _LEAVES:
                raise ValueError(f"{where}: an array value belongs to a leaf or a constant")
            block = leaves[node]
            storage.push_block(code, block)
            shapes.append(block.shape)
        elif node in ops:
            operands, param = ops[node]
            shape = op_shape(code, operands, param, shapes, where)
            planned += 8 * math.prod(shape)
            # A stand-in that allocates nothing: the forward sweep computes the value.
            value: FloatArray | float = 0.0 if shape == () else np.broadcast_to(0.0, shape)
            storage.push_block_op(code, operands, value, param)
            shapes.append(shape)
        else:
            storage.push(code, int(in0[node]), int(in1[node]), float(values[node]))
            if any(shapes[j] != () for j in storage.operands(node)):
                raise ValueError(f"{where}: a scalar op with an array operand")
            shapes.append(())
    try:
        for node, label in tape_file.validated_labels(storage, dict(labels)).items():
            storage.set_label(node, label)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from None
    available = available_memory()
    if available is not None and planned > available:
        raise MemoryError(
            f"{source}: the values of the tape's {len(ops)} block ops would need "
            f"{planned / 2**30:,.1f} GiB, and {available / 2**30:,.1f} GiB is available: "
            "a damaged file, or one saved on a larger machine"
        )
    try:
        driver.replay(storage, block_rules.rule)
    except (ValueError, TypeError, IndexError, AttributeError, KeyError) as error:
        raise ValueError(
            f"{source}: replaying the tape failed ({type(error).__name__}: {error})"
        ) from None


def _integers(array: Any, name: str, source: str, size: int | None = None) -> Any:
    array = np.asarray(array)
    if array.ndim != 1 or array.dtype.kind not in "iu" or (size is not None and array.size != size):
        wanted = "" if size is None else f" of length {size}"
        raise ValueError(f"{source}: {name} must be a one-dimensional integer array{wanted}")
    return array.astype(np.int64)


def _block_leaves(arrays: Mapping[str, Any], n: int, source: str) -> dict[int, FloatArray]:
    nodes = _integers(arrays["block_nodes"], "block_nodes", source)
    ndim = _integers(arrays["block_ndim"], "block_ndim", source, nodes.size)
    dims = _integers(arrays["block_dims"], "block_dims", source, int(ndim.sum()))
    data = np.asarray(arrays["block_data"])
    if data.ndim != 1 or data.dtype != np.float64 or (dims < 0).any():
        raise ValueError(f"{source}: block values must be float64 data with non-negative shapes")
    if (ndim < 1).any():
        raise ValueError(f"{source}: a block leaf or constant must have at least one axis")
    ends = np.cumsum(ndim)
    shapes = [tuple(int(d) for d in dims[end - k : end]) for k, end in zip(ndim, ends, strict=True)]
    sizes = [int(np.prod(shape)) for shape in shapes]
    if sum(sizes) != data.size:
        raise ValueError(
            f"{source}: block shapes need {sum(sizes)} elements, data holds {data.size}"
        )
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n or np.unique(nodes).size != nodes.size):
        raise ValueError(f"{source}: block_nodes must be distinct ids in [0, {n})")
    found: dict[int, FloatArray] = {}
    start = 0
    if nodes.size and ndim.max() > _MOST_AXES:
        raise ValueError(f"{source}: a block has {ndim.max()} axes, NumPy's most is {_MOST_AXES}")
    for node, shape, size in zip(nodes.tolist(), shapes, sizes, strict=True):
        found[node] = as_stored(data[start : start + size].reshape(shape).copy())
        start += size
    return found


def _block_ops(
    arrays: Mapping[str, Any], params: list[Any], n: int, source: str
) -> dict[int, tuple[tuple[int, ...], Any]]:
    nodes = _integers(arrays["op_nodes"], "op_nodes", source)
    start = _integers(arrays["op_start"], "op_start", source, nodes.size + 1)
    operands = _integers(arrays["op_operands"], "op_operands", source)
    if len(params) != nodes.size:
        raise ValueError(f"{source}: {len(params)} op parameters for {nodes.size} block ops")
    if start[0] != 0 or (np.diff(start) < 1).any() or start[-1] != operands.size:
        raise ValueError(f"{source}: op_start must rise from 0 to the operand count")
    ops: dict[int, tuple[tuple[int, ...], Any]] = {}
    for p, node in enumerate(nodes.tolist()):
        mine = tuple(operands[start[p] : start[p + 1]].tolist())
        if not 0 <= node < n or node in ops or not all(0 <= j < node for j in mine):
            raise ValueError(
                f"{source}: block op {p} (node {node}) must be a new id in [0, {n}) whose "
                f"operands {mine} are earlier nodes"
            )
        try:
            ops[node] = (mine, decode_param(params[p], f"{source}: node {node}"))
        except RecursionError:
            raise ValueError(f"{source}: node {node}: its parameters nest too deep") from None
    return ops


def op_shape(
    code: int, operands: tuple[int, ...], param: Any, shapes: list[tuple[int, ...]], where: str
) -> tuple[int, ...]:
    """The shape block op ``code`` gives on operands of ``shapes`` (by node id), from its
    shape rule alone (no value is touched); a ``ValueError`` starting with ``where`` names
    what does not fit."""
    arity = optable.ALL[code].arity
    if code < optable.NUM_OPS and arity == 0 or arity >= 0 and len(operands) != arity:
        raise ValueError(
            f"{where}: the op {optable.ALL[code].name!r} takes {arity} operand(s), the file "
            f"gives {len(operands)}"
        )
    try:
        rule = block_rules.rule(code)
        shape = tuple(rule.shape(tuple(shapes[j] for j in operands), param))
    except (ValueError, TypeError, IndexError, NotImplementedError) as error:
        raise ValueError(f"{where}: {error}") from None
    except (AttributeError, KeyError) as error:  # parameters of another op (a damaged file)
        raise ValueError(
            f"{where}: the parameters {param!r} do not fit the op {optable.ALL[code].name!r} "
            f"({type(error).__name__}: {error})"
        ) from None
    if not all(isinstance(size, (int, np.integer)) and size >= 0 for size in shape):
        raise ValueError(f"{where}: the {optable.ALL[code].name} rule gave the shape {shape}")
    return tuple(int(size) for size in shape)
