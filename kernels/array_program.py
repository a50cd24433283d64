"""A function of arrays as generated code sees it: the program, its nodes, the kernel's parameters.

``fastad/compiled/array_kernel.py`` builds a :class:`BlockProgram` from a
validated tape; ``array_source.py`` writes the kernel's text from it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

MODES = ("values", "grad", "vjp", "jvp", "hvp")
"""``values``: the output (a scalar returned, an array written into its
buffer). ``grad``: a scalar output and the gradients of the ``wrt`` inputs.
``vjp``: the gradients from the caller's cotangent of the output. ``jvp``:
the output and its tangent along the caller's directions of the ``wrt``
inputs (forward mode, one pass)."""

OK = -1
"""Status: the call ran; a guard's index says that guard failed instead."""
BAD_LABEL = -2
"""Status: a cross-entropy label is not a class; the exact rules say which."""

SUPPORTED = (
    "input constant array scalar elementwise matmul sum mean linear linear_relu "
    "cross_entropy log_softmax softmax logsumexp mse_loss reshape transpose index concatenate "
    "max min prod cumsum"
).split()
"""The node kinds generated code has rules for, in every mode; a program with
another op (linear algebra) or shape (a product of stacks of more than three
axes) stays on the interpreter."""


class Node(NamedTuple):
    """One node as the generator reads it.

    ``op``: a kind of :data:`SUPPORTED` (``input``: an argument; ``constant``
    and ``array``: a scalar or array constant; ``scalar``: a scalar op of the
    op table on scalars; ``elementwise``: one on arrays; else the block op's
    name). ``code``: the opcode. ``shape``: ``()`` for a scalar. ``params``:
    ``(axes, keepdims)`` for reductions and the softmax family (axes None:
    all), ``(labels, mean)`` for the cross-entropy, ``(axes,)`` for a
    transpose (the operand's axis each of the result's is), ``(axis,)`` for
    a concatenate or a cumsum, else ``()``.
    An index reads its operand through a gather map, a kernel parameter
    (``BlockProgram.gathers``).
    """

    op: str
    code: int
    operands: tuple[int, ...]
    shape: tuple[int, ...]
    params: tuple[object, ...]


class BlockProgram(NamedTuple):
    """A traced function of arrays: its nodes in id order, the argument nodes,
    the output node, the argument positions to differentiate (``wrt``), the
    guards as ``(node, traced truth)`` and, per index node, its gather map:
    the flat position in the operand of each element of the result, in C
    order (int64; one element for a scalar result)."""

    nodes: tuple[Node, ...]
    inputs: tuple[int, ...]
    output: int
    wrt: tuple[int, ...]
    guards: tuple[tuple[int, bool], ...]
    gathers: dict[int, Any]


class Parameter(NamedTuple):
    """One parameter of a generated kernel, in order.

    ``role``: ``argument`` (the caller's argument ``position``), ``constants``
    (every node's traced value, float64), ``array`` (an array constant's
    value), ``gather`` (an index node's gather map, int64), ``value`` (a
    buffer for a node's value; the output's is the result), ``scratch`` (a
    buffer of ``shape``), ``adjoint`` (a buffer for a node's adjoint),
    ``gradient`` (the gradient of argument ``position``, an
    array of its shape), ``scalar_gradients`` (one float per ``wrt``
    position; the scalar arguments' gradients land there), ``cotangent``
    (mode ``vjp``: the caller's cotangent of the output, a float or an
    array of its shape, read as the output's adjoint); in mode ``jvp``
    ``direction`` (the caller's direction for argument ``position``),
    ``scalar_directions`` (one float per ``wrt`` position, read for the
    scalar arguments), ``tangent`` (a buffer for a node's tangent) or
    ``output_tangent`` (the result: the output's tangent, an array of its
    shape, ``(1,)`` for a scalar output).
    """

    name: str
    role: str
    node: int
    shape: tuple[int, ...]
    position: int


class Unsupported(NotImplementedError):
    """The program holds an op (or a form of one) that generated code has no rule for."""


def reduced_axes(node: Node) -> tuple[int, ...] | None:
    """The reduced axes of a reduction or softmax node (None: all of them)."""
    axes = node.params[0]
    return None if axes is None else tuple(int(a) for a in axes)  # type: ignore[attr-defined]


def loop_indices(rank: int) -> list[str]:
    """The index names of a loop nest of ``rank`` loops: ``i0``, ``i1``..."""
    return [f"i{t}" for t in range(rank)]
