"""The batch axis of a compiled function of arrays: one trace for any number of rows.

``fa.compile(fn, example=(W, b, X, y), batch=(2, 3))`` names the arguments
whose leading axis holds the examples (one row each). Calls may then give
those arguments any number of rows, the same in each: the last, smaller
batch of an epoch runs the same traced program, without a new trace.

That is only right where the program carries the batch axis along and
nothing else depends on its length: a mean over the rows divides by the
rows of the call, but ``L.sum() / X.shape[0]`` traced a constant ``1/256``.
So the function is traced a second time with one row more (each batch
argument's last row repeated) and the two tapes must agree in everything
but the sizes along the batch axes: the ops, their operands and
parameters, every constant, the guards. A node whose shape changes in any
other way, or a constant that changes (a number computed from a length, an
array made with the batch's length), is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.kernels import optable

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage

Axes = tuple[int, ...]


def positions(batch: object, example: Sequence[Any]) -> tuple[int, ...]:
    """``batch`` checked against the example: argument positions (ints, each once) of
    arrays with at least one axis and one number of rows, at least one row."""
    found = argument_positions(batch, len(example), "batch")
    rows = None
    for position in found:
        shape = np.shape(example[position])
        if not shape:
            raise ValueError(
                f"batch argument {position} is a scalar: a batch argument has its examples "
                "along its first axis"
            )
        if rows is None:
            rows = shape[0]
        elif shape[0] != rows:
            raise ValueError(
                f"batch arguments share one number of rows: argument {found[0]} has {rows}, "
                f"argument {position} has {shape[0]}"
            )
    if not rows:
        raise ValueError("the example's batch arguments need at least one row to trace")
    return tuple(found)


def argument_positions(value: object, count: int, what: str) -> list[int]:
    """``value`` (an int, or a list or tuple of them) as positions among ``count``
    arguments (negative from the end), each once and at least one; errors name
    ``what`` (``wrt``, ``batch``)."""
    listed = list(value) if isinstance(value, (list, tuple)) else [value]
    found: list[int] = []
    for position in listed:
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise TypeError(f"{what} holds argument positions (ints), got {position!r}")
        if not -count <= position < count:
            raise ValueError(f"{what} position {position} is out of range for {count} arguments")
        found.append(int(position) % count)
    if not found or len(set(found)) != len(found):
        raise ValueError(
            f"{what} must name each argument at most once and at least one, got {value!r}"
        )
    return found


def with_one_more_row(value: Any) -> Any:
    """``value`` with its last row repeated (class labels stay valid labels)."""
    array = np.asarray(value)
    return np.concatenate([array, array[-1:]])


def shape_at(shape: tuple[int, ...], axes: Axes, rows: int) -> tuple[int, ...]:
    """``shape`` with ``rows`` along the batch ``axes``."""
    return tuple(rows if axis in axes else n for axis, n in enumerate(shape))


def batch_axes(
    first: TapeStorage,
    second: TapeStorage,
    rows: int,
    guards: tuple[Sequence[tuple[int, bool]], Sequence[tuple[int, bool]]],
    arguments: Sequence[int],
) -> dict[int, Axes]:
    """The batch axes of every array node that has any, from traces at ``rows`` and
    ``rows + 1`` rows (their tapes and their guards; ``arguments``: the argument
    nodes). Every other leaf is frozen into the program as traced, a constant or a
    leaf the function made itself (``fa.var`` inside it), and must not change.

    Raises ``ValueError`` naming the first node where the two traces differ
    in anything but the sizes along batch axes.
    """

    def refuse(node: int, what: str) -> ValueError:
        op = optable.ALL[int(first.opcode[node])].name
        return ValueError(
            f"batch=: the traced program depends on the number of rows: node {node} ({op}) "
            f"{what}. A program for any number of rows carries the batch axis along "
            "(means over it divide by the rows of the call); compile one function per "
            "batch size where it cannot"
        )

    if len(first) != len(second):
        raise ValueError(
            f"batch=: the function records {len(first)} nodes at {rows} rows and "
            f"{len(second)} at {rows + 1}: its Python code branches on the number of rows"
        )
    guards_a, guards_b = list(guards[0]), list(guards[1])
    if guards_a != guards_b:
        raise ValueError(
            "batch=: the function's comparisons (guards) differ between traces at "
            f"{rows} and {rows + 1} rows: {guards_a} against {guards_b}"
        )
    columns_a, columns_b = first.columns(), second.columns()
    for name, a, b in zip(("opcode", "in0", "in1"), columns_a[:3], columns_b[:3], strict=True):
        differs = np.flatnonzero(a != b)
        if differs.size:
            raise refuse(int(differs[0]), f"has another {name} at {rows + 1} rows")
    opcode, value_a, value_b = columns_a[0], columns_a[3], columns_b[3]
    argument_nodes = set(arguments)
    axes: dict[int, Axes] = {}
    for node in range(len(first)):
        block_a, block_b = first.block_value(node), second.block_value(node)
        if (block_a is None) != (block_b is None):
            raise refuse(node, f"is an array at one of {rows} and {rows + 1} rows only")
        if first.blocks.is_op(node) and not _same(
            (first.operands(node), first.blocks.params(node)),
            (second.operands(node), second.blocks.params(node)),
        ):
            raise refuse(node, f"has other operands or parameters at {rows + 1} rows")
        code = opcode[node]
        constant = code == optable.CONST or (code == optable.INPUT and node not in argument_nodes)
        if block_a is None or block_b is None:
            if constant and not _same(value_a[node], value_b[node]):
                raise refuse(
                    node,
                    f"holds {float(value_a[node])!r} at {rows} rows and "
                    f"{float(value_b[node])!r} at {rows + 1}: a number computed from the "
                    "number of rows (a length such as X.shape[0], or ddof of var or std)",
                )
            continue
        if block_a.ndim != block_b.ndim:
            raise refuse(
                node, f"has shape {block_a.shape} at {rows} rows, {block_b.shape} at {rows + 1}"
            )
        moved = tuple(
            i for i, (n, m) in enumerate(zip(block_a.shape, block_b.shape, strict=True)) if n != m
        )
        if any(block_a.shape[i] != rows or block_b.shape[i] != rows + 1 for i in moved):
            raise refuse(
                node,
                f"has shape {block_a.shape} at {rows} rows and {block_b.shape} at {rows + 1}: "
                "an axis changes by another amount than the rows",
            )
        if constant and (moved or not _same(block_a, block_b)):
            raise refuse(
                node,
                f"is an array of shape {block_a.shape}, fixed in the program, that changes "
                "with the number of rows (made from a length?): make it from the arguments",
            )
        if moved:
            axes[node] = moved
    return axes


def _same(a: Any, b: Any) -> bool:
    """Equal, arrays and nans included, bit for bit in the floats."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    if isinstance(a, slice) and isinstance(b, slice):
        return _same((a.start, a.stop, a.step), (b.start, b.stop, b.step))
    return type(a) is type(b) and bool(a == b)
