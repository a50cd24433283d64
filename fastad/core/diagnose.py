"""Checked mode: where a ``nan`` or ``inf`` was made, forward or backward.

``jax_debug_nans`` and ``detect_anomaly`` point at where a ``nan`` is first
*noticed*; these functions point at where it was *made*: the first node
whose value is non-finite while its inputs are finite, or the first edge
that turned a finite adjoint into a non-finite contribution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.graph import value_ancestors
from fastad.core.reach import reduce_to
from fastad.kernels import optable, tape_sweeps
from fastad.util.errors import NonFiniteOrigin

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray


def first_nonfinite(tape: TapeStorage, stop: int, root: int | None) -> NonFiniteOrigin | None:
    """The first node below ``stop`` whose value is ``nan``/``inf`` while its inputs are finite.

    With ``root``, only nodes whose values ``root``'s value depends on count
    (not the side of ``fa.where`` not taken, which the select never reads).
    A leaf or constant holding ``nan``/``inf`` is its own origin.
    """
    opcode, in0, in1, val, _ = tape.columns()
    bad = ~np.isfinite(val[:stop])
    relevant = value_ancestors(tape, root) if root is not None else None
    used = {} if root is None else _used_elements(tape, opcode, root, relevant)
    for node, block in tape.blocks.values.items():
        if node < stop and (relevant is None or relevant[node]):
            finite = np.isfinite(block)
            mask = used.get(node)
            bad[node] = not (finite.all() if mask is None else (finite | ~mask).all())
    if relevant is not None:
        bad &= relevant
    if not bad.any():
        return None
    in0, in1 = in0[:stop], in1[:stop]
    fed_bad = ((in0 >= 0) & bad[in0]) | ((in1 >= 0) & bad[in1])
    for node in tape.blocks.ops:  # operands past the second
        if node < stop and any(bad[j] for j in tape.blocks.operands(node)[2:]):
            fed_bad[node] = True
    return _origin(tape, int(np.flatnonzero(bad & ~fed_bad)[0]), "forward")


_PICK, _PICK_NOT = optable.BY_NAME["pick"].code, optable.BY_NAME["pick_not"].code


def _used_elements(tape: TapeStorage, opcode: Any, root: int, relevant: Any) -> dict[int, Any]:
    """Per block node, the elements ``root``'s value reads, where that is not all of them.

    ``fa.where`` on arrays reads each operand only where its side is taken
    (a ``pick`` of the condition), so a nan the select drops, such as
    ``sqrt(-1)`` in ``fa.where(X > 0, fa.sqrt(X), 0.0)``, is no origin: as
    for the scalar ``where``. Masks pass through elementwise ops of one
    shape, back from the root in decreasing id order (every consumer of a
    node comes after it); any other op reads all of its operands.
    """
    blocks = tape.blocks
    masks: dict[int, Any] = {}
    for node in reversed([n for n in blocks.ops if n <= root and relevant[n]]):
        mask = masks.get(node)
        if mask is not None and mask.all():
            mask = None
        operands = blocks.operands(node)
        code = int(opcode[node])
        out_shape = np.shape(tape.value(node))
        for position, j in enumerate(operands):
            value = blocks.values.get(j)
            if value is None:
                continue
            if mask is None and code not in (_PICK, _PICK_NOT):
                masks[j] = np.ones(value.shape, np.bool_)  # read whole
                continue
            reads = np.ones(out_shape, np.bool_) if mask is None else mask  # the output's shape
            if code in (_PICK, _PICK_NOT) and position == 1:
                taken = np.broadcast_to(tape.value(operands[0]), out_shape) != 0.0
                reads = reads & (taken if code == _PICK else ~taken)
            if code >= optable.NUM_OPS:
                reads = np.full(value.shape, bool(np.any(reads)))  # not elementwise: all
            elif reads.shape != value.shape:  # a broadcast operand: any of its copies
                reads = reduce_to(reads, value.shape, np.any)
            masks[j] = reads | masks[j] if j in masks else reads
    return masks


def backward_origin(tape: TapeStorage, node: int, slot: int) -> NonFiniteOrigin:
    """The report for edge ``slot`` of ``node``, found by a checked backward sweep."""
    opcode, in0, in1, val, _ = tape.columns()
    block_rule = tape.blocks.is_op(node)
    partial = float("nan")
    if not block_rule:
        partials = np.zeros((1, 2))
        tape_sweeps.evaluate_partials(opcode, in0, in1, val, np.array([node], np.int64), partials)
        partial = float(partials[0, slot])
    return _origin(tape, node, "backward", slot=slot, partial=partial, block_rule=block_rule)


def _origin(tape: TapeStorage, node: int, phase: str, **edge: Any) -> NonFiniteOrigin:
    return NonFiniteOrigin(
        phase=phase,
        node=node,
        op=optable.ALL[tape.opcode[node]].name,
        label=tape.label(node),
        inputs=operand_summaries(tape, node),
        value=_first_value(tape, node),
        source=tape.source(node),
        **edge,
    )


def operand_summaries(tape: TapeStorage, node: int) -> tuple[object, ...]:
    """How a node's operands appear in a report: floats, or shapes of arrays."""
    summaries: list[object] = []
    for j in tape.operands(node):
        block = tape.block_value(j)
        summaries.append(ArraySummary(block) if block is not None else float(tape.value(j)))
    return tuple(summaries)


def _first_value(tape: TapeStorage, node: int) -> float:
    """A node's value, or for a block its first non-finite element."""
    block = tape.block_value(node)
    if block is None:
        return float(tape.value(node))
    flat = block.ravel()
    bad = np.flatnonzero(~np.isfinite(flat))
    return float(flat[bad[0]]) if bad.size else float(flat[0])


class ArraySummary:
    """How a block operand appears in a non-finite report: shape and finiteness."""

    def __init__(self, array: FloatArray) -> None:
        self.shape, self.nonfinite = array.shape, int(np.count_nonzero(~np.isfinite(array)))

    def __repr__(self) -> str:
        return f"array of shape {self.shape}" + (
            f" with {self.nonfinite} non-finite" if self.nonfinite else ""
        )
