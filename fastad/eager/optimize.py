"""Tape optimiser: dead-node elimination, constant folding, common subexpressions.

The shape of a recorded graph depends on how the expression was written:
``(a+b)*(a+b)`` records two add nodes where ``s = a+b; s*s`` records one.
The optimiser rewrites a tape into an equivalent, smaller one:

- **dead nodes**: nodes no output (or guard) depends on are dropped; inputs
  are always kept, they are the function's signature;
- **constant folding**: an operation whose operands are all constants
  becomes a constant holding its recorded value (computed by the same rule,
  so nothing changes by a single bit);
- **common subexpressions**: nodes are hashed by ``(op, in0, in1)`` after
  their operands have been renamed, with the operands of commutative ops
  sorted, so a repeated computation maps to its first occurrence; equal
  constants (bit for bit) merge too.

Values are identical before and after, bit for bit: every surviving node is
computed by the same rule from the same values. Gradients are identical up
to rounding: a merged node's adjoint is the sum its copies would have
received, multiplied by the local derivative once instead of per copy, so
the last bit can differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.graph import ancestors
from fastad.core.storage import ARITY
from fastad.eager.handle import storage_of
from fastad.eager.tape import Tape
from fastad.kernels import optable

if TYPE_CHECKING:
    from fastad.eager.node import NodeRef
    from fastad.util.hints import IdArray


@dataclass(frozen=True)
class OptimizationReport:
    """What the optimiser did.

    ``dead``: nodes of the original tape that are gone because no output
    needs them (after folding too); ``folded``: operations replaced by a
    constant; ``common``: nodes merged into an identical earlier node;
    ``constants_merged``: repeated constants merged.
    """

    nodes_before: int
    nodes_after: int
    dead: int
    folded: int
    common: int
    constants_merged: int

    def __str__(self) -> str:
        return (
            f"{self.nodes_before} -> {self.nodes_after} nodes: {self.dead} dead, "
            f"{self.folded} constant-folded, {self.common} common subexpressions, "
            f"{self.constants_merged} duplicate constants"
        )


@dataclass(frozen=True)
class Optimized:
    """The optimised tape, where each old node went (-1: removed), and the report."""

    tape: Tape
    new_ids: IdArray
    report: OptimizationReport


def optimize(tape: Tape, outputs: Iterable[NodeRef], keep: Iterable[NodeRef] = ()) -> Optimized:
    """Return an equivalent smaller tape computing ``outputs``.

    Parameters
    ----------
    tape : fastad.Tape
    outputs : sequence of node ids or Vars
        The nodes that must survive (their new ids are ``new_ids[old]``).
    keep : sequence of node ids
        More nodes to keep alive, e.g. guard nodes.

    Examples
    --------
    >>> import fastad as fa
    >>> with fa.Tape() as t:
    ...     a, b = fa.var(1.0), fa.var(2.0)
    ...     y = (a + b) * (a + b)
    >>> result = fa.optimize(t, [y])
    >>> len(t), len(result.tape), result.report.common
    (5, 4, 1)
    """
    if not isinstance(tape, Tape):
        raise TypeError(f"fa.optimize needs a fastad.Tape, got {type(tape).__name__}")
    if tape.has_blocks:
        raise ValueError(
            "fa.optimize rewrites scalar tapes; this tape holds block (array) nodes, which it "
            "cannot rewrite yet. Use the tape as it is (fa.compile does not optimise functions "
            "of arrays either)."
        )
    opcode, in0, in1, val = tape.opcode, tape.in0, tape.in1, tape.val
    n = opcode.size
    roots = [tape.node_id(node, "output") for node in outputs]
    roots += [tape.node_id(node, "kept node") for node in keep]
    alive = np.zeros(n, np.bool_)
    for root in roots:
        if not alive[root]:
            alive[: root + 1] |= ancestors(storage_of(tape), root)[0]
    alive |= opcode == optable.INPUT

    new_ids = np.full(n, -1, np.int64)
    rows: dict[str, list[float]] = {"opcode": [], "in0": [], "in1": [], "val": []}
    is_constant: list[bool] = []
    seen: dict[tuple[object, ...], int] = {}  # (op, in0, in1) or ("const", bits) -> new id
    labels: dict[int, str] = {}
    old_labels = tape.labels
    folded = common = merged_constants = 0

    def emit(code: int, a: int, b: int, value: float) -> int:
        rows["opcode"].append(code)
        rows["in0"].append(a)
        rows["in1"].append(b)
        rows["val"].append(value)
        is_constant.append(code == optable.CONST)
        return len(rows["opcode"]) - 1

    for i in np.flatnonzero(alive).tolist():
        code = int(opcode[i])
        value = float(val[i])
        arity = ARITY[code]
        new: int | None
        if code == optable.INPUT:
            new = emit(code, -1, -1, value)
        else:
            operands = [int(new_ids[in0[i]]), int(new_ids[in1[i]])][:arity]
            folds = bool(arity > 0 and all(is_constant[j] for j in operands))
            key: tuple[Any, ...]
            if code == optable.CONST or folds:
                key = ("const", np.float64(value).tobytes())
                folded += folds
            else:
                if code in optable.COMMUTATIVE:  # bit for bit, signed zeros too
                    operands.sort()
                operands += [-1] * (2 - arity)
                key = (code, *operands)
            new = seen.get(key)
            if new is None:
                if key[0] == "const":
                    new = seen[key] = emit(optable.CONST, -1, -1, value)
                else:
                    new = seen[key] = emit(code, key[1], key[2], value)
            elif key[0] == "const" and not folds:
                merged_constants += 1
            elif key[0] != "const":
                common += 1
        new_ids[i] = new
        label = old_labels.get(i)
        if label is not None:
            labels.setdefault(new, label)

    optimized = Tape.from_arrays(
        np.array(rows["opcode"], np.uint8),
        np.array(rows["in0"], np.int32),
        np.array(rows["in1"], np.int32),
        np.array(rows["val"], np.float64),
        labels,
    )
    if folded:
        # Constants that only fed folded nodes are dead now: one more pass
        # drops them (folding and merging find nothing new the second time).
        again = optimize(optimized, [new_ids[root] for root in roots])
        composed = np.where(new_ids >= 0, again.new_ids[np.maximum(new_ids, 0)], -1)
        report = OptimizationReport(
            nodes_before=n,
            nodes_after=again.report.nodes_after,
            dead=int(np.count_nonzero(composed < 0)),
            folded=folded,
            common=common,
            constants_merged=merged_constants,
        )
        return Optimized(again.tape, composed, report)
    report = OptimizationReport(
        nodes_before=n,
        nodes_after=len(optimized),
        dead=int(n - alive.sum()),
        folded=folded,
        common=common,
        constants_merged=merged_constants,
    )
    return Optimized(optimized, new_ids, report)
