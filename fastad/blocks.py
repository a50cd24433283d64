"""Blocks: NumPy arrays as nodes of the same tape as scalars; the fused ops.

A block node is a row of the tape like any other (opcode, operand ids), so
the ordering invariant and the sweep order are unchanged; its array value
lives beside the hot arrays (the tape's block table). The backward sweep
walks the tape in decreasing id order, running the compiled scalar sweep
over each run of scalar nodes and, at each block node, that node's rule
from the block-op registry (``fastad/registry.py``: elementwise rules are
the scalar op table's rules applied per element by compiled kernels; matrix
products go to BLAS; fused ops to ``kernels/fused.py``). No Jacobian is
ever formed: every rule is a vector-Jacobian product.

Broadcasting follows NumPy (right-aligned, size-1 axes expand) and every
rule hands its gradients to ``fastad.reach.unbroadcast``, which sums them
back to the operand's own shape.

This module is the public face of blocks: the ``Block`` handle (defined with
``Var`` in ``fastad/node.py``), the fused layers and loss, and
:func:`scalar_nodes`, the third way to record the same computation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, overload

import numpy as np
from numpy.typing import ArrayLike

from fastad.kernels import optable
from fastad.node import (
    Block,
    Node,
    Var,
    compute_block,
    elementwise,
    matmul,
    record_block_on,
    tape_of,
)
from fastad.reach import any_reached, reach_sum, reached_elements, unbroadcast
from fastad.registry import broadcast_shape
from fastad.tape import current_tape

if TYPE_CHECKING:
    from fastad._typing import FloatArray, ObjectArray
    from fastad.tape import Tape

    ArrayInput: TypeAlias = "Block | ArrayLike"
    """An operand of the fused ops: a block node or array data."""

__all__ = [
    "Block",
    "elementwise",
    "linear",
    "linear_relu",
    "matmul",
    "mse_loss",
    "scalar_nodes",
    # Defined here before the layers; they live in fastad.reach and
    # fastad.registry now and keep working from here.
    "any_reached",
    "broadcast_shape",
    "reach_sum",
    "reached_elements",
    "unbroadcast",
]

_BLOCK = optable.BLOCK_BY_NAME
LINEAR, LINEAR_RELU = _BLOCK["linear"].code, _BLOCK["linear_relu"].code
MSE_LOSS = _BLOCK["mse_loss"].code


def _fused(code: int, name: str, unfused: str, operands: tuple[Any, ...]) -> Any:
    """Record fused op ``code`` on ``operands``, or compute it when none is a node."""
    if not all(isinstance(x, Node) for x in operands):
        _refuse_scalar_nodes(name, unfused, *operands)
    tape = tape_of(*operands)
    if tape is None:
        return compute_block(code, operands)
    return record_block_on(tape, code, operands, None, name + " operand")


@overload
def linear(X: ArrayInput, W: Block, b: ArrayInput) -> Block: ...
@overload
def linear(X: Block, W: ArrayInput, b: ArrayInput) -> Block: ...
@overload
def linear(X: ArrayInput, W: ArrayInput, b: Block) -> Block: ...
@overload
def linear(X: ArrayLike, W: ArrayLike, b: ArrayLike) -> FloatArray: ...
def linear(X: ArrayInput, W: ArrayInput, b: ArrayInput) -> Block | FloatArray:
    """``X @ W + b`` as one fused node (see ``kernels/fused.py`` for the backward rule)."""
    return _fused(LINEAR, "linear", "X @ W + b", (X, W, b))


@overload
def linear_relu(X: ArrayInput, W: Block, b: ArrayInput) -> Block: ...
@overload
def linear_relu(X: Block, W: ArrayInput, b: ArrayInput) -> Block: ...
@overload
def linear_relu(X: ArrayInput, W: ArrayInput, b: Block) -> Block: ...
@overload
def linear_relu(X: ArrayLike, W: ArrayLike, b: ArrayLike) -> FloatArray: ...
def linear_relu(X: ArrayInput, W: ArrayInput, b: ArrayInput) -> Block | FloatArray:
    """``relu(X @ W + b)`` as one fused node; ``relu'(0) = 0``.

    The same as ``fa.relu(X @ W + b)`` recorded as three block nodes (and
    checked against it in the tests), in one compiled forward and one
    hand-derived backward call, without the two (B, h) temporaries.
    """
    return _fused(LINEAR_RELU, "linear_relu", "fa.relu(X @ W + b)", (X, W, b))


@overload
def mse_loss(Y: Block, T: ArrayInput) -> Var: ...
@overload
def mse_loss(Y: ArrayInput, T: Block) -> Var: ...
@overload
def mse_loss(Y: ArrayLike, T: ArrayLike) -> float: ...
def mse_loss(Y: Any, T: Any) -> Var | float:
    """Mean squared error ``mean((Y - T)**2)`` as one fused node (a scalar)."""
    return _fused(MSE_LOSS, "mse_loss", "((Y - T) * (Y - T)).mean()", (Y, T))


def _holds_nodes(x: object) -> bool:
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype=object)
    if not (isinstance(x, np.ndarray) and x.dtype == object):
        return False
    return any(isinstance(element, Node) for element in x.flat)


def _refuse_scalar_nodes(name: str, unfused: str, *operands: object) -> None:
    # Nodes in an object array (or a list) would be read as numbers: values,
    # no gradient.
    if any(_holds_nodes(x) for x in operands):
        raise TypeError(
            f"fa.{name} takes arrays or blocks, not object arrays of scalar nodes "
            f"(fa.scalar_nodes): write it unfused, {unfused}, which records every node"
        )


# -- the scalar-node path: the same computation as individual nodes -------------------------
def scalar_nodes(
    values: ArrayLike, name: str | None = None, tape: Tape | None = None
) -> ObjectArray:
    """An object array of scalar leaves, one per element of ``values``.

    The third way to record a block computation (after fused and unfused
    blocks): NumPy's object arrays apply the nodes' operators elementwise,
    so ``scalar_nodes(X) @ scalar_nodes(W)`` records every multiply and add.
    Use the ``fastad`` functions (``fa.relu`` and co.) on object arrays too.
    """
    values = np.asarray(values, dtype=np.float64)
    tape = tape if tape is not None else current_tape()
    nodes = np.empty(values.shape, dtype=object)
    for position, value in np.ndenumerate(values):
        label = f"{name}[{', '.join(map(str, position))}]" if name else None
        nodes[position] = tape.input(float(value), label)
    return nodes
