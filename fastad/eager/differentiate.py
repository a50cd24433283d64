"""What a ``Tape`` is asked to differentiate: arguments checked, then handed over.

Each function here is the body of the ``fastad.Tape`` method of its name
(``tape.gradient(...)`` calls ``gradient(tape, ...)`` under the tape's lock):
it refuses to run while ``fa.compile`` traces, resolves handles and ids with
``Tape.node_id``, checks the shapes a user gives, and hands the storage to
``fastad/core/derivatives.py`` or the sweep driver (``fastad/core/driver.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from fastad.core import block_rules, derivatives, driver
from fastad.eager.handle import Node, storage_of
from fastad.kernels import optable
from fastad.util.errors import flag

if TYPE_CHECKING:
    from fastad.eager.node import NodeRef
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray


def adjoint(tape: Tape, node_id: NodeRef) -> float:
    """The adjoint of one scalar node (what ``Var.grad`` returns)."""
    storage = storage_of(tape)
    storage.refuse_while_tracing("a gradient (.grad)")
    node = tape.node_id(node_id)
    if node in storage.blocks.values:
        raise TypeError(f"node {node} is a block node: its adjoint is tape.block_adjoint({node})")
    return float(storage.columns()[4][node])


def block_adjoint(tape: Tape, node_id: NodeRef) -> FloatArray:
    """The adjoint array of a block node (zeros before any backward), read-only.

    The tape's own array, not a copy (copying a layer's weight gradient
    cost as much as its backward product): read-only, like ``.value``,
    and never changed afterwards. A later backward makes new arrays, so
    one read keeps its numbers; ``.copy()`` it to change them.
    """
    storage = storage_of(tape)
    storage.refuse_while_tracing("a block gradient")
    node = node_id if type(node_id) is int and node_id in storage.blocks.values else None
    if node is None:
        node = tape.node_id(node_id)
        if node not in storage.blocks.values:
            raise TypeError(f"node {node} is a scalar node: its adjoint is tape.adjoint({node})")
    if storage.opcode_of(node) == optable.CONST:
        raise ValueError(
            f"node {node} is an array constant (data, such as a NumPy array in an "
            "expression): constants get no gradient. Record it with fa.var(array) to "
            f"differentiate with respect to it, or use tape.gradient(L, [{node}])"
        )
    return storage.block_adjoint(node)


def backward(tape: Tape, root: NodeRef, accumulate: bool, check: bool) -> None:
    """Reverse sweep from node ``root`` (a ``Var`` or an id); see ``Var.backward``.

    Without ``accumulate`` every adjoint on the tape is replaced by
    d root / d node (zero for nodes after ``root`` or not reaching it).
    With ``accumulate`` d root / d node is added to the existing
    adjoints instead; nothing is ever "sometimes zeroed".
    """
    storage_of(tape).refuse_while_tracing("backward()")
    node = scalar_root(tape, root, "backward")
    check, accumulate = flag(check, "check"), flag(accumulate, "accumulate")
    derivatives.backward_into(storage_of(tape), node, accumulate, check)


def gradient(
    tape: Tape, root: NodeRef, wrt: Iterable[NodeRef]
) -> FloatArray | list[float | FloatArray]:
    """d root / d node for each node id in ``wrt``, leaving ``grad`` untouched.

    Only what these gradients need is computed: block rules send nothing
    to operands that no node of ``wrt`` feeds (the data of a layer).

    A float64 array for scalar nodes; with blocks among ``wrt``, a list
    of floats and arrays.
    """
    storage_of(tape).refuse_while_tracing("fa.grad")
    node = scalar_root(tape, root, "a gradient")
    ids = wrt_ids(tape, wrt)
    return derivatives.gradient(storage_of(tape), node, ids)


def vjp(
    tape: Tape, root: NodeRef, wrt: Iterable[NodeRef], cotangent: ArrayLike
) -> list[float | FloatArray]:
    """``u^T J``: the cotangent ``u`` of ``root`` pulled back to each node of ``wrt``.

    ``u`` has ``root``'s shape (a float for a scalar node, an array for a
    block); one backward sweep seeded with it, so a block output needs no
    reduction first. Zero entries of ``u`` are strong zeros (they send
    nothing, even against an infinite partial), as zero seeds are
    everywhere. A list of floats and arrays, shaped like the nodes;
    ``.grad`` is untouched.
    """
    storage = storage_of(tape)
    storage.refuse_while_tracing("fa.vjp")
    node = tape.node_id(root, "output")
    ids = wrt_ids(tape, wrt)
    block = storage.block_value(node)
    u = derivatives.real_direction(cotangent, "the cotangent")
    shape = () if block is None else block.shape
    if u.shape != shape:
        raise ValueError(f"the cotangent has shape {u.shape}, the output {shape}")
    if not np.isfinite(u).all():
        found = u[~np.isfinite(u)].flat[0]
        raise ValueError(f"the cotangent must be finite, got {found} in it")
    return derivatives.vjp(storage, node, ids, u)


def tangent(
    tape: Tape, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
) -> float | FloatArray:
    """Forward mode: d root along ``direction`` (one entry per node id in ``wrt``).

    The nodes in ``wrt`` are perturbed as independent variables (an
    intermediate node is held at its perturbation, not recomputed from
    its inputs; a node listed twice gets the sum), all other leaves hold
    still: ``tangent(root, wrt, v) == gradient(root, wrt) @ v`` when no
    node of ``wrt`` depends on another (each adjoint is a total
    derivative through everything downstream of its node). This is ``J v``
    for one output, computed by the compiled tangent sweep from the same
    local partials as ``backward``. For a block in ``wrt`` its direction
    is an array of the block's shape. A block ``root`` gives an array of
    its shape: ``J v`` for all its elements from the one sweep.
    """
    storage = storage_of(tape)
    storage.refuse_while_tracing("fa.jvp")
    node = tape.node_id(root, "output")
    ids = wrt_ids(tape, wrt)
    visits = driver.plan(storage, node)
    tangents, block_tangents, seeded = derivatives.seed_tangents(
        storage, node, ids, direction, visits
    )
    return driver.tangent(storage, block_rules.rule, node, tangents, block_tangents, seeded, visits)


def hvp(
    tape: Tape, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
) -> FloatArray | list[float | FloatArray]:
    """``H v``: the Hessian of ``root`` with respect to ``wrt``, times ``direction``.

    Forward-over-reverse: a tangent sweep along ``direction`` (seeded as
    in :func:`tangent`), the backward sweep, and the tangent of the
    backward sweep; no Hessian is formed and ``.grad`` is untouched.
    ``wrt`` nodes are independent variables as in :func:`gradient` and
    :func:`tangent` (an intermediate node is held at its perturbation).
    A float64 array for scalar nodes; with blocks among ``wrt`` a list of
    floats and arrays, each shaped like its node. A block op on the way
    without a second-order rule raises ``NotImplementedError`` naming it.
    """
    storage_of(tape).refuse_while_tracing("fa.hvp")
    node = scalar_root(tape, root, "a Hessian-vector product")
    ids = wrt_ids(tape, wrt)
    return derivatives.hvp(storage_of(tape), node, ids, direction)


def hessian(tape: Tape, root: NodeRef, wrt: Iterable[NodeRef]) -> FloatArray:
    """The ``(k, k)`` Hessian of ``root`` with respect to the ``k`` scalar nodes ``wrt``.

    One backward sweep, then per node of ``wrt`` a tangent sweep and the
    backward sweep's tangent: row ``t`` is ``H e_t`` (:func:`hvp`), so
    the result is symmetric up to rounding. For blocks use :func:`hvp`.
    """
    storage = storage_of(tape)
    storage.refuse_while_tracing("fa.hessian")
    node = scalar_root(tape, root, "a Hessian")
    ids = wrt_ids(tape, wrt)
    for i in ids:
        block = storage.block_value(i)
        if block is not None:
            raise TypeError(
                f"fa.hessian takes scalar nodes; node {i} is a block of shape "
                f"{block.shape}: use fa.hvp for Hessian-vector products with blocks"
            )
    return derivatives.hessian(storage, node, ids)


def scalar_root(tape: Tape, root: NodeRef, what: str) -> int:
    """The id of ``root``, which must be a scalar node (a block has no one derivative)."""
    node = tape.node_id(root, "output")
    block = storage_of(tape).blocks.values.get(node)  # a checked id
    if block is not None:
        raise TypeError(
            f"{what} needs a scalar output; node {node} is a block of shape "
            f"{block.shape}: reduce it first (e.g. Y.sum())"
        )
    return node


def wrt_ids(tape: Tape, wrt: Iterable[NodeRef]) -> list[int]:
    """The ids of a list of wrt nodes; a single node is refused (a block would be
    iterated row by row, recording an index node per row)."""
    if isinstance(wrt, Node):
        raise TypeError(
            f"wrt is one node, {wrt!r}: pass a list of nodes ([x]); fa.grad takes one node"
        )
    return [tape.node_id(i, "wrt") for i in wrt]
