"""Graph passes over a tape's operand ids: which nodes a root depends on, and
which depend on chosen nodes.

The optimiser, the drawings and the gradient's pruning mark ancestors and
descendants; checked mode marks the nodes a root's *value* reads.
"""

from __future__ import annotations

from .arrays import BoolArray, FloatArray, IndexArray, OpcodeArray
from .jit import kernel
from .optable import BY_NAME

PICK, PICK_NOT = BY_NAME["pick"].code, BY_NAME["pick_not"].code


@kernel
def mark_descendants(
    in0: IndexArray,
    in1: IndexArray,
    extra_nodes: IndexArray,
    extra_start: IndexArray,
    extra_ids: IndexArray,
    lo: int,
    hi: int,
    mark: BoolArray,
) -> None:
    """Extend ``mark`` (set for some nodes) to every node in ``[lo, hi]`` that
    depends on a marked one, in one pass up the ids.

    Operands past the second are read from the CSR arrays, as in
    :func:`mark_ancestors`. A gradient needs the adjoints of these nodes only.
    """
    p = 0
    while p < extra_nodes.size and extra_nodes[p] < lo:
        p += 1
    for i in range(lo, hi + 1):
        if not mark[i]:
            j, k = in0[i], in1[i]
            hit = (j >= 0 and mark[j]) or (k >= 0 and mark[k])
            if not hit and p < extra_nodes.size and extra_nodes[p] == i:
                for e in range(extra_start[p], extra_start[p + 1]):
                    if mark[extra_ids[e]]:
                        hit = True
                        break
            mark[i] = hit
        if p < extra_nodes.size and extra_nodes[p] == i:
            p += 1


@kernel
def mark_ancestors(
    in0: IndexArray,
    in1: IndexArray,
    extra_nodes: IndexArray,
    extra_start: IndexArray,
    extra_ids: IndexArray,
    root: int,
    mark: BoolArray,
) -> int:
    """Set ``mark[i]`` for ``root`` and every node it depends on; return the lowest.

    ``in0``/``in1`` hold the first two operands of every node; a block op
    with more (``fa.linear(X, W, b)``) lists the rest in ``extra_ids``: node
    ``extra_nodes[p]`` (ascending) has ``extra_ids[extra_start[p]:extra_start[p + 1]]``.
    The walk stops once no marked node is left below, so an ancestor set
    costs its own span of ids, not the whole tape (a long-lived tape).
    """
    mark[root] = True
    pending = 1  # marked nodes not yet visited
    p = extra_nodes.size - 1
    while p >= 0 and extra_nodes[p] > root:
        p -= 1
    i = root
    while i >= 0:
        if mark[i]:
            pending -= 1
            j = in0[i]
            if j >= 0 and not mark[j]:
                mark[j] = True
                pending += 1
            k = in1[i]
            if k >= 0 and not mark[k]:
                mark[k] = True
                pending += 1
            if p >= 0 and extra_nodes[p] == i:
                for e in range(extra_start[p], extra_start[p + 1]):
                    m = extra_ids[e]
                    if not mark[m]:
                        mark[m] = True
                        pending += 1
            if pending == 0:
                return i
        if p >= 0 and extra_nodes[p] == i:
            p -= 1
        i -= 1
    return 0


@kernel
def mark_value_ancestors(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    is_block: BoolArray,
    extra_nodes: IndexArray,
    extra_start: IndexArray,
    extra_ids: IndexArray,
    root: int,
    mark: BoolArray,
) -> None:
    """Set ``mark[i]`` for ``root`` and every node its *value* depends on.

    As ``mark_ancestors``, except that the side of ``fa.where`` not taken is
    left out: ``pick(c, x)`` with ``c == 0`` (and ``pick_not(c, x)`` with
    ``c != 0``) does not read ``x``'s value at all. Checked mode uses this, so
    a ``nan`` on the untaken side (``sqrt(x)`` at ``x < 0``) is no alarm.
    ``is_block`` marks block nodes, whose ``val`` holds no condition.
    """
    mark[root] = True
    p = extra_nodes.size - 1
    while p >= 0 and extra_nodes[p] > root:
        p -= 1
    for i in range(root, -1, -1):
        listed = p >= 0 and extra_nodes[p] == i
        if listed:
            p -= 1
        if not mark[i]:
            continue
        j = in0[i]
        if j >= 0:
            mark[j] = True
        k = in1[i]
        if k >= 0:
            op = opcode[i]
            untaken = not is_block[i] and (
                (op == PICK and val[j] == 0.0) or (op == PICK_NOT and val[j] != 0.0)
            )
            if not untaken:
                mark[k] = True
        if listed:
            for e in range(extra_start[p + 1], extra_start[p + 2]):
                mark[extra_ids[e]] = True
