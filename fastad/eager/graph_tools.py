"""A ``Tape``'s graph tools: where a ``nan`` was made, local partials, the table, drawings.

Each function here is the body of the ``fastad.Tape`` method of its name
(``tape.table(...)`` calls ``table(tape, ...)``): it resolves handles and ids
with ``Tape.node_id`` and hands the storage to ``fastad/core/diagnose.py``,
``fastad/core/graph.py`` or ``fastad/core/draw.py``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core import diagnose, draw, graph
from fastad.eager.handle import Node, storage_of
from fastad.kernels import optable
from fastad.util.errors import NonFiniteOrigin

if TYPE_CHECKING:
    from fastad.eager.node import NodeRef
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, StrPath


def first_nonfinite(tape: Tape, root: NodeRef | None) -> NonFiniteOrigin | None:
    """The first node whose value is ``nan``/``inf`` while its inputs are finite.

    Only nodes whose values ``root``'s value depends on are considered
    (all nodes when ``root`` is None): the side of ``fa.where`` not taken
    is not, since the select never reads it. Returns a :class:`fastad.NonFiniteOrigin`, or
    None when every such value is finite. A leaf or constant holding
    ``nan``/``inf`` is its own origin. ``jax_debug_nans`` and
    ``detect_anomaly`` point at where a ``nan`` is first *noticed*; this
    points at where it was *made*.
    """
    if root is None:
        return diagnose.first_nonfinite(storage_of(tape), len(tape), None)
    node = tape.node_id(root)
    return diagnose.first_nonfinite(storage_of(tape), node + 1, node)


def local_partials(tape: Tape, nodes: NodeRef | Iterable[NodeRef]) -> FloatArray:
    """Local partial derivatives ``(d/d in0, d/d in1)`` of the given nodes.

    Returns an array of shape ``(len(nodes), 2)``; zero where a node has
    fewer operands. This is the edge label of a drawing: the number a
    node's adjoint is multiplied by on its way to each operand.
    """
    storage = storage_of(tape)
    storage.refuse_while_tracing("local partials")
    items: list[Any]
    if isinstance(nodes, Node) or not isinstance(nodes, Iterable):
        items = [nodes]  # one node (a Block handle is not a sequence of elements here)
    elif isinstance(nodes, np.ndarray):
        items = nodes.reshape(-1).tolist()
    else:
        items = list(nodes)
    ids = np.array([tape.node_id(i) for i in items], np.int64)
    for node in ids.tolist():
        if storage.blocks.is_op(node):
            name = optable.ALL[storage.opcode[node]].name
            raise TypeError(
                f"node {node} ({name}) is a block op: its rule is a "
                "vector-Jacobian product, it has no local partial per operand"
            )
    return graph.local_partials(storage, ids)


def table(
    tape: Tape,
    grad: bool,
    start: int,
    stop: int | None,
    max_rows: int,
    around: NodeRef | None,
    context: int,
) -> str:
    """:meth:`fastad.Tape.table`, with ``around`` resolved to a node id."""
    around_id = None if around is None else tape.node_id(around)
    return draw.table(storage_of(tape), grad, start, stop, max_rows, around_id, context)


def to_dot(tape: Tape, root: NodeRef | None, max_nodes: int, grad: bool) -> str:
    """Graphviz DOT source of the tape; see :func:`fastad.core.draw.to_dot`."""
    return draw.to_dot(storage_of(tape), _root_id(tape, root), max_nodes, grad)


def render(
    tape: Tape, path: StrPath, root: NodeRef | None, max_nodes: int, grad: bool
) -> pathlib.Path:
    """Render the drawing to an .svg/.png/.pdf file; see :func:`fastad.core.draw.render`."""
    return draw.render(storage_of(tape), path, _root_id(tape, root), max_nodes, grad)


def _root_id(tape: Tape, root: NodeRef | None) -> int | None:
    return None if root is None else tape.node_id(root, "root")
