"""Graph queries over a tape's storage: what a node depends on, and what depends on it.

Each function validates the ids it is given, reads the node arrays
(``fastad/core/node_arrays.py``) and the block table's extra operands
(``fastad/core/block_table.py``) of a ``TapeStorage`` and marks nodes with the kernels of
``fastad/kernels/graph_marks.py``; ``local_partials`` evaluates the scalar
rules' partials with ``fastad/kernels/tape_sweeps.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from fastad.core.node_arrays import VALUE_DTYPE
from fastad.kernels import graph_marks, tape_sweeps

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray

FEW_OPS = 32
"""Up to this many block ops, picking those a root depends on is a Python loop."""


def ancestors(storage: TapeStorage, root: int) -> tuple[NDArray[np.bool_], int]:
    """A mask of ``root`` and every node it depends on, and the lowest such id."""
    root = storage.check_id(root, "root")
    _, in0, in1, _, _ = storage.columns()
    mark = np.zeros(root + 1, np.bool_)
    lowest = graph_marks.mark_ancestors(in0, in1, *storage.blocks.extra_edges(), root, mark)
    return mark, lowest


def reaching(storage: TapeStorage, root: int) -> tuple[list[int], int]:
    """The block ops ``root`` depends on (ascending), and the lowest id it depends on.

    What a sweep from ``root`` must visit. The marks go into a scratch
    mask kept with the tape (``storage.scratch``) and cleared again over the
    span they used, so the cost is that span, not the tape's length.
    """
    root = storage.check_id(root, "root")
    _, in0, in1, _, _ = storage.columns()
    if storage.scratch.size <= root:
        storage.scratch = np.zeros(max(root + 1, storage.capacity), np.bool_)
    mark = storage.scratch
    blocks = storage.blocks
    lowest = graph_marks.mark_ancestors(in0, in1, *blocks.extra_edges(), root, mark)
    ops = blocks.ops
    if len(ops) <= FEW_OPS:
        picked = [node for node in ops if lowest <= node <= root and mark[node]]
    else:
        ids = blocks.op_ids()
        ids = ids[np.searchsorted(ids, lowest) : np.searchsorted(ids, root, side="right")]
        picked = ids[mark[ids]].tolist()
    mark[lowest : root + 1] = False
    return picked, lowest


def descendants(
    storage: TapeStorage, sources: list[int], lowest: int, root: int
) -> NDArray[np.bool_]:
    """A mask over ``[0, root]``: ``sources`` and the nodes in ``[lowest, root]``
    that depend on one of them (the nodes whose adjoints a gradient wrt ``sources`` uses)."""
    root = storage.check_id(root, "root")
    sources = [storage.check_id(node, "source") for node in sources]
    if not (isinstance(lowest, (int, np.integer)) and 0 <= lowest <= root):
        raise ValueError(f"lowest must be an id in [0, root {root}], got {lowest!r}")
    _, in0, in1, _, _ = storage.columns()
    mark = np.zeros(root + 1, np.bool_)
    mark[[node for node in sources if node <= root]] = True
    graph_marks.mark_descendants(in0, in1, *storage.blocks.extra_edges(), lowest, root, mark)
    return mark


def value_ancestors(storage: TapeStorage, root: int) -> NDArray[np.bool_]:
    """As :func:`ancestors`, without the side of ``fa.where`` not taken."""
    root = storage.check_id(root, "root")
    opcode, in0, in1, val, _ = storage.columns()
    mark = np.zeros(root + 1, np.bool_)
    is_block = np.zeros(root + 1, np.bool_)
    is_block[[node for node in storage.blocks.ops if node <= root]] = True
    graph_marks.mark_value_ancestors(
        opcode, in0, in1, val, is_block, *storage.blocks.extra_edges(), root, mark
    )
    return mark


def local_partials(storage: TapeStorage, ids: NDArray[np.int64]) -> FloatArray:
    """``(d/d in0, d/d in1)`` of the scalar nodes ``ids`` (valid ids), zero past their arity."""
    partials = np.zeros((ids.size, 2), VALUE_DTYPE)
    opcode, in0, in1, val, _ = storage.columns()
    tape_sweeps.evaluate_partials(opcode, in0, in1, val, ids, partials)
    return partials
