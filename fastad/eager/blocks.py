"""Blocks: NumPy arrays as nodes of the same tape as scalars; the fused ops.

A block node is a row of the tape like any other (opcode, operand ids), so
the ordering invariant and the sweep order are unchanged; its array value
lives beside the hot arrays (the tape's block table). The backward sweep
walks the tape in decreasing id order, running the compiled scalar sweep
over each run of scalar nodes and, at each block node, that node's rule
from the block-op registry (``fastad/core/block_rules.py``: elementwise rules are
the scalar op table's rules applied per element by compiled kernels; matrix
products go to BLAS; fused ops to ``kernels/fused.py``). No Jacobian is
ever formed: every rule is a vector-Jacobian product.

Broadcasting follows NumPy (right-aligned, size-1 axes expand) and every
rule hands its gradients to ``fastad.core.reach.unbroadcast``, which sums them
back to the operand's own shape.

This module is the public face of blocks: the ``Block`` handle (defined with
``Var`` in ``fastad/eager/node.py``), the fused layers and loss, and
:func:`scalar_nodes`, the third way to record the same computation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from fastad.eager.block_params import normal_axis, reduction
from fastad.eager.handle import Node, tape_of
from fastad.eager.node import Block, Var, compute_block, elementwise, matmul, record_block_on
from fastad.eager.operators import is_number
from fastad.eager.tape import tape_or_current
from fastad.kernels import optable
from fastad.util.errors import as_float64

if TYPE_CHECKING:
    from fastad.eager.node import Axes
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, ObjectArray, PlainArrayLike

    ArrayInput: TypeAlias = "Block | ArrayLike"
    """An operand of the fused ops: a block node or array data."""

__all__ = [
    "Block",
    "concatenate",
    "cross_entropy",
    "elementwise",
    "log_softmax",
    "logsumexp",
    "softmax",
    "stack",
    "linear",
    "linear_relu",
    "matmul",
    "mse_loss",
    "scalar_nodes",
]

_BLOCK = optable.BLOCK_BY_NAME
LINEAR, LINEAR_RELU = _BLOCK["linear"].code, _BLOCK["linear_relu"].code
MSE_LOSS, CONCATENATE = _BLOCK["mse_loss"].code, _BLOCK["concatenate"].code
LOGSUMEXP, SOFTMAX = _BLOCK["logsumexp"].code, _BLOCK["softmax"].code
LOG_SOFTMAX, CROSS_ENTROPY = _BLOCK["log_softmax"].code, _BLOCK["cross_entropy"].code
PICK = optable.BY_NAME["pick"].code


def _fused(
    code: int, name: str, unfused: str, operands: tuple[Any, ...], params: object = None
) -> Any:
    """Record fused op ``code`` on ``operands``, or compute it when none is a node."""
    if not all(isinstance(x, Node) for x in operands):
        _refuse_scalar_nodes(name, unfused, *operands)
    tape = tape_of(*operands)
    if tape is None:
        return compute_block(code, operands, params)
    return record_block_on(tape, code, operands, params, name + " operand")


@overload
def linear(X: ArrayInput, W: Block, b: ArrayInput) -> Block: ...
@overload
def linear(X: Block, W: ArrayInput, b: ArrayInput) -> Block: ...
@overload
def linear(X: ArrayInput, W: ArrayInput, b: Block) -> Block: ...
@overload
def linear(X: PlainArrayLike, W: PlainArrayLike, b: PlainArrayLike) -> FloatArray: ...
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
def linear_relu(X: PlainArrayLike, W: PlainArrayLike, b: PlainArrayLike) -> FloatArray: ...
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
def mse_loss(Y: PlainArrayLike, T: PlainArrayLike) -> float: ...
def mse_loss(Y: Any, T: Any) -> Var | float:
    """Mean squared error ``mean((Y - T)**2)`` as one fused node (a scalar)."""
    return _fused(MSE_LOSS, "mse_loss", "((Y - T) * (Y - T)).mean()", (Y, T))


# -- the softmax family: fused, stable --------------------------------------------------------
def _shape_of(x: object) -> tuple[int, ...]:
    return x.shape if isinstance(x, Block) else np.shape(cast(Any, x))


@overload
def logsumexp(x: Block, axis: None = None, keepdims: Literal[False] = False) -> Var: ...
@overload
def logsumexp(x: Block, axis: Axes = None, keepdims: bool = False) -> Block | Var: ...
@overload
def logsumexp(x: PlainArrayLike, axis: Axes = None, keepdims: bool = False) -> Any: ...
def logsumexp(x: ArrayInput, axis: Axes = None, keepdims: bool = False) -> Any:
    """``log(sum(exp(x)))`` over ``axis`` (default: all axes, as ``scipy.special.logsumexp``).

    One fused node, computed as ``m + log(sum(exp(x - m)))`` with ``m`` the
    maximum of each slice: no overflow at any finite input. Its derivative
    is the softmax. A plain array gives a plain result.
    """
    params = reduction(_shape_of(x), axis, keepdims, x)
    return _fused(LOGSUMEXP, "logsumexp", "m + fa.log(fa.exp(x - m).sum())", (x,), params)


@overload
def softmax(x: Block, axis: Axes = -1) -> Block: ...
@overload
def softmax(x: PlainArrayLike, axis: Axes = -1) -> FloatArray: ...
def softmax(x: ArrayInput, axis: Axes = -1) -> Any:
    """``exp(x) / sum(exp(x))`` over ``axis`` (default: the last, as ``jax.nn.softmax``).

    One fused node, stable at any logit (``exp(x - logsumexp(x))``); the
    backward rule is ``P * (G - sum(G * P))``.
    """
    params = reduction(_shape_of(x), axis, False, x)
    return _fused(SOFTMAX, "softmax", "fa.exp(x - fa.logsumexp(x, axis, True))", (x,), params)


@overload
def log_softmax(x: Block, axis: Axes = -1) -> Block: ...
@overload
def log_softmax(x: PlainArrayLike, axis: Axes = -1) -> FloatArray: ...
def log_softmax(x: ArrayInput, axis: Axes = -1) -> Any:
    """``x - logsumexp(x)`` over ``axis`` (default: the last): one fused, stable node.

    Its backward rule is ``G - softmax(x) * sum(G)``.
    """
    params = reduction(_shape_of(x), axis, False, x)
    return _fused(LOG_SOFTMAX, "log_softmax", "x - fa.logsumexp(x, axis, True)", (x,), params)


@overload
def cross_entropy(logits: Block, targets: ArrayInput, reduction: str = "mean") -> Var: ...
@overload
def cross_entropy(logits: ArrayLike, targets: Block, reduction: str = "mean") -> Var: ...
@overload
def cross_entropy(
    logits: PlainArrayLike, targets: PlainArrayLike, reduction: str = "mean"
) -> float: ...
def cross_entropy(logits: ArrayInput, targets: ArrayInput, reduction: str = "mean") -> Any:
    """Softmax cross-entropy of ``logits`` (classes along the last axis) as one fused node.

    Parameters
    ----------
    logits : Block or array, shape (..., classes)
    targets : class labels of shape ``logits.shape[:-1]`` (integers in
        ``[0, classes)``, checked; no gradient), or probabilities of the
        logits' shape (they get the gradient ``-log_softmax(logits)``).
    reduction : "mean" (over the samples, the default, as PyTorch) or "sum".

    Per sample ``-sum(t * log_softmax(x))``; stable at any logit (+-1e4 and
    beyond). The gradient for the logits is ``softmax(x) - t`` per sample
    (times 1 / samples for the mean). A zero target contributes exactly 0.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f'cross_entropy reduction must be "mean" or "sum", got {reduction!r}')
    if isinstance(targets, (list, tuple)):
        targets = np.asarray(targets)
    unfused = "-(t * fa.log_softmax(x)).sum(-1).mean()"
    return _fused(CROSS_ENTROPY, "cross_entropy", unfused, (logits, targets), reduction)


# -- joining arrays -------------------------------------------------------------------------
def concatenate(arrays: Sequence[ArrayInput], axis: int | None = 0) -> Any:
    # Any: a Block when a block is among the arrays, else a plain array.
    """Join blocks (and arrays) along an existing ``axis``, as ``np.concatenate``.

    ``axis=None`` flattens each first. One node whatever the count; the
    gradient of each operand is its slice of the output's.
    """
    parts = _parts(arrays, "concatenate")
    if axis is None:
        parts = [p.ravel() if isinstance(p, Block) else np.ravel(p) for p in parts]
        axis = 0
    first = _shape_of(parts[0])
    if not first:
        raise ValueError("concatenate needs arrays of one axis or more, got a scalar first")
    params = normal_axis(first, axis, parts[0])
    tape = tape_of(*parts)
    if tape is None:
        return np.concatenate([as_float64(p, "concatenate") for p in parts], axis=params)
    return record_block_on(tape, CONCATENATE, tuple(parts), params, "concatenate operand")


def stack(arrays: Sequence[ArrayInput], axis: int = 0) -> Any:
    """Join blocks (and arrays) of one shape along a new ``axis``, as ``np.stack``.

    Scalar nodes (with numbers beside them) join into a vector (``axis`` 0
    or -1): each is placed by a pick, so a handful of them costs a few ops
    (``k`` of them cost ``k`` ops of ``k`` elements).
    """
    if isinstance(arrays, Sequence) and any(isinstance(p, Var) for p in arrays):
        return _stack_scalars(list(arrays), axis)
    parts = _parts(arrays, "stack")
    shapes = [_shape_of(p) for p in parts]
    if any(shape != shapes[0] for shape in shapes):
        raise ValueError(f"stack needs arrays of one shape, got shapes {shapes}")
    new = normal_axis((*shapes[0], 1), axis, "stack")
    grown = shapes[0][:new] + (1,) + shapes[0][new:]
    return concatenate(
        [p.reshape(grown) if isinstance(p, Block) else np.reshape(p, grown) for p in parts],
        axis=new,
    )


def _stack_scalars(parts: list[Any], axis: int) -> Block:
    """Scalar nodes and numbers as one vector: numbers in a constant, each node by a pick."""
    normal_axis((len(parts),), axis, "stack")
    for part in parts:
        if not isinstance(part, Var) and not is_number(part):
            raise ValueError(
                f"stack: scalar nodes join numbers and other scalar nodes into a vector; got "
                f"{type(part).__name__} of shape {np.shape(part)} beside them"
            )
    tape_of(*parts)  # one tape, none stale
    placed = np.eye(len(parts))
    # A node's place starts at -0.0, as a pick's other places are: x + -0.0 is x, bit for
    # bit, where +0.0 would turn a -0.0 node into +0.0.
    total: Any = np.array([-0.0 if isinstance(p, Var) else float(p) for p in parts])
    for i, part in enumerate(parts):
        if isinstance(part, Var):
            total = total + elementwise(PICK, placed[i], part)
    return cast("Block", total)


def _parts(arrays: object, name: str) -> list[Any]:
    if isinstance(arrays, (Node, np.ndarray)) or not isinstance(arrays, Sequence):
        raise TypeError(
            f"{name} takes a sequence (list or tuple) of arrays, got {type(arrays).__name__}"
        )
    parts = list(arrays)
    if not parts:
        raise ValueError(f"{name} needs at least one array")
    for part in parts:
        if isinstance(part, Var):
            raise ValueError(
                f"{name}: {part!r} is a scalar node; join blocks (arrays of one axis or more)"
            )
    _refuse_scalar_nodes(name, "the blocks themselves", *parts)
    # Nested lists of numbers are arrays, as NumPy reads them.
    return [p if isinstance(p, (Node, np.ndarray)) else as_float64(p, name) for p in parts]


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
    values = as_float64(values, "fa.scalar_nodes")
    tape = tape_or_current(tape)
    nodes = np.empty(values.shape, dtype=object)
    for position, value in np.ndenumerate(values):
        label = f"{name}[{', '.join(map(str, position))}]" if name else None
        nodes[position] = tape.input(float(value), label)
    return nodes
