"""The block side of a tape: array values, block ops and their operands, block adjoints.

``BlockTable`` keeps, beside a tape's node arrays (``fastad/core/node_arrays.py``),
the float64 arrays of block nodes, the operand ids and parameters of block ops
(operands past the second in CSR form for the ancestry kernels) and the block
adjoints of the last backward sweep. It knows ids and arrays only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, IndexArray

INDEX_DTYPE = np.int32
"""The dtype of node ids (the tape's ``in0``/``in1``)."""


class _Growing:
    """A 1-D array appended to in place, by amortised doubling (views of it stay cheap).

    Nothing is allocated until the first append: a fresh tape per step makes
    several of these, most of which stay empty.
    """

    def __init__(self, dtype: Any) -> None:
        # A shared empty read-only start, replaced (never written) on the first append.
        self._array = _EMPTY[dtype]
        self.size = 0

    def extend(self, values: list[int] | tuple[int, ...]) -> None:
        end = self.size + len(values)
        if end > self._array.size or not self._array.flags.writeable:
            grown = np.empty(max(end, 2 * self._array.size, 16), self._array.dtype)
            grown[: self.size] = self._array[: self.size]
            self._array = grown
        self._array[self.size : end] = values
        self.size = end

    def view(self) -> NDArray[Any]:
        return self._array[: self.size]

    def clear(self) -> None:
        self.size = 0


_EMPTY: dict[Any, NDArray[Any]] = {dtype: np.empty(0, dtype) for dtype in (np.int64, INDEX_DTYPE)}
for _array in _EMPTY.values():
    _array.flags.writeable = False


class BlockTable:
    """The block side of a tape: array values, block ops and block adjoints.

    ``values`` maps a block node's id to its read-only float64 array. Block
    ops (nodes computed by a registry rule, ``fastad/core/block_rules.py``) are
    listed in id order with their operand ids (any number: ``in0``/``in1``
    of the tape hold the first two) and their parameters (an axis, a key).
    ``adjoints`` holds the block adjoints of the last backward sweep. A leaf's
    zeros there may carry either sign (its reach is never settled: see
    ``reach.Need.VALUES``), so read them with 0.0 added, as every public
    accessor does, never as strong zeros.
    """

    def __init__(self) -> None:
        self.values: dict[int, FloatArray] = {}
        self.adjoints: dict[int, FloatArray] = {}
        # What a rule's forward kept for its VJP (``BlockRule.saves``), by block op id.
        self.saved: dict[int, tuple[Any, ...]] = {}
        self.nbytes = 0  # held by the arrays in values
        self.ops: list[int] = []
        """Ids of the block-op nodes, ascending (read it; ``add_op`` appends)."""
        self._op_ids = _Growing(np.int64)  # ops as an array, extended lazily
        self._operands: dict[int, tuple[int, ...]] = {}
        self._params: dict[int, object] = {}
        # Operands past the second, in CSR form: node _extra_nodes[p] has
        # _extra_ids[_extra_start[p]:_extra_start[p + 1]]. Recording appends
        # to lists; the arrays the kernels read catch up with them in place
        # when a sweep asks (a long-lived tape must not rebuild them per step).
        self._extra_lists: tuple[list[int], list[int], list[int]] = ([], [0], [])
        self._extra_nodes = _Growing(INDEX_DTYPE)
        self._extra_start = _Growing(INDEX_DTYPE)
        self._extra_ids = _Growing(INDEX_DTYPE)

    def clear(self) -> None:
        self.values.clear()
        self.adjoints.clear()
        self.saved.clear()
        self.nbytes = 0
        self.ops.clear()
        self._op_ids.clear()
        self._operands.clear()
        self._params.clear()
        nodes, start, ids = self._extra_lists
        nodes.clear()
        del start[1:]
        ids.clear()
        self._extra_nodes.clear()
        self._extra_start.clear()
        self._extra_ids.clear()

    def add_value(self, node: int, array: FloatArray) -> None:
        """``store`` for a node that has no value yet (one just pushed)."""
        self.values[node] = array
        self.nbytes += _owned_bytes(array)

    def store(self, node: int, array: FloatArray) -> None:
        """Keep ``array`` (read-only float64, owned by the table) as the value of ``node``."""
        old = self.values.get(node)
        if old is not None:
            self.nbytes -= _owned_bytes(old)
        self.values[node] = array
        self.nbytes += _owned_bytes(array)

    def keep_saved(self, node: int, saved: tuple[Any, ...]) -> None:
        """Keep what block op ``node``'s forward saved for its VJP (arrays it owns)."""
        for old in self.saved.get(node, ()):
            if isinstance(old, np.ndarray):
                self.nbytes -= _owned_bytes(old)
        self.saved[node] = saved
        for array in saved:
            if isinstance(array, np.ndarray):
                self.nbytes += _owned_bytes(array)  # a view of a value is counted there

    def add_op(self, node: int, operands: tuple[int, ...], params: object) -> None:
        """List a block op; ids must rise (``TapeStorage.push_block_op`` checks it first)."""
        self.ops.append(node)
        self._operands[node] = operands
        if params is not None:
            self._params[node] = params
        if len(operands) > 2:
            nodes, start, ids = self._extra_lists
            nodes.append(node)
            ids.extend(operands[2:])
            start.append(len(ids))

    def operands(self, node: int) -> tuple[int, ...]:
        return self._operands[node]

    @property
    def operands_table(self) -> dict[int, tuple[int, ...]]:
        """Block op id -> its operand ids (the dict itself, for the sweeps' hot loop:
        do not change it)."""
        return self._operands

    @property
    def params_table(self) -> dict[int, object]:
        """Block op id -> its parameters, absent where None (the dict itself: do not
        change it)."""
        return self._params

    def params(self, node: int) -> object:
        return self._params.get(node)

    def is_op(self, node: int) -> bool:
        return node in self._operands

    def op_ids(self) -> NDArray[np.int64]:
        """``ops`` as an int64 array."""
        if self._op_ids.size != len(self.ops):
            self._op_ids.extend(self.ops[self._op_ids.size :])
        return self._op_ids.view()

    def extra_edges(self) -> tuple[IndexArray, IndexArray, IndexArray]:
        """Operands past the second, for the ancestry kernels (``graph_marks.mark_ancestors``)."""
        for array, source in zip(
            (self._extra_nodes, self._extra_start, self._extra_ids), self._extra_lists, strict=True
        ):
            if array.size != len(source):
                array.extend(source[array.size :])
        return self._extra_nodes.view(), self._extra_start.view(), self._extra_ids.view()


def _owned_bytes(array: FloatArray) -> int:
    # A reshape's value is a view of its operand's array: count memory once.
    return array.nbytes if fresh(array) else 0


def fresh(array: NDArray[Any]) -> bool:
    """True for an array that owns its memory: NumPy's own new array (no base)
    or a Numba kernel's (its base is the kernel's memory record, viewed by nothing else)."""
    base = array.base
    return base is None or type(base).__name__ == "_MemInfo"
