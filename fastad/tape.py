"""The tape: a structure-of-arrays record of scalar operations.

Five parallel NumPy arrays hold the nodes: ``opcode`` (uint8), ``in0`` and
``in1`` (int32 operand ids, -1 where unused) and ``val`` and ``grad``
(float64). They grow by amortised doubling while recording. Node ids grow
monotonically and every node references only smaller ids, so reverse id
order is a reverse topological order and the compiled sweeps in
``fastad.kernels.sweeps`` are flat loops. Labels live in a dict beside the
hot arrays.

Which tape records: the innermost ``with fa.Tape():`` block of the current
thread, otherwise the thread's default tape (``fa.current_tape()``).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import pathlib
import sys
import threading
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, NoReturn, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad import npz
from fastad.errors import NonFiniteError, NonFiniteOrigin, TraceError
from fastad.kernels import optable, sweeps
from fastad.node import Node, Var, check_live, is_number

if TYPE_CHECKING:
    from types import FrameType

    from fastad._typing import (
        FloatArray,
        IndexArray,
        NumericArray,
        OpcodeArray,
        RealNumber,
        RuleValue,
        StrPath,
    )
    from fastad.blocks import Block
    from fastad.node import NodeRef

OPCODE_DTYPE = np.uint8
INDEX_DTYPE = np.int32
VALUE_DTYPE = np.float64
ARITY = np.array([op.arity for op in optable.OPS], dtype=np.int8)
SAVE_FORMAT = "fastad-tape-1"
_INITIAL_CAPACITY = 64
# Recording appends rows to a Python list, which costs a fraction of four
# NumPy scalar writes; the list is moved into the arrays in bulk before any
# sweep or read, and at least every _STAGE_ROWS nodes to bound its memory.
_STAGE_MASK = (1 << 14) - 1
GROWTH_WARNING_BYTES = 1 << 30
"""A tape holding more than this (node arrays and block arrays) warns once."""
# Adjoint and tangent buffers start at UNREACHED (-0.0), the sweeps' mark of
# a node no contribution reached (see kernels/sweeps.py); every result handed
# out has 0.0 added, which turns it into an ordinary +0.0.
UNREACHED = sweeps.UNREACHED
_reached = sweeps.reached


class Tape:
    """A recording of scalar operations, swept by compiled kernels.

    Use ``with fa.Tape() as t:`` to record into a fresh tape; nodes created
    in the block (``fa.var`` and every operation on them) live on ``t`` and
    stay usable after the block. ``t.reset()`` empties the tape but keeps its
    memory, which is the cheap way to run a training loop; nodes recorded
    before a reset raise :class:`fastad.StaleNodeError` when used.

    The arrays ``opcode``, ``in0``, ``in1``, ``val`` and ``grad`` are
    read-only views of the first ``len(t)`` rows.
    """

    def __init__(
        self, capacity: int = _INITIAL_CAPACITY, trace: bool = False, debug: bool = False
    ) -> None:
        capacity = max(int(capacity), 1)
        # Debug recording keeps (file, line) of the user's code for every node.
        # It swaps in a recording method of its own so that ordinary tapes pay
        # nothing for it on the hot path.
        self._sources: dict[int, tuple[str, int] | None] | None = {} if debug else None
        if debug:
            self.append = self._append_with_source  # type: ignore[method-assign]
        # (node id, truth) of every bool() taken of a node while tracing for
        # fa.compile; None on ordinary tapes.
        self._guards: list[tuple[int, bool]] | None = [] if trace else None
        self._owner: str | None = None  # what a frozen tape belongs to (see freeze)
        self._opcode: OpcodeArray = np.zeros(capacity, OPCODE_DTYPE)
        self._in0: IndexArray = np.zeros(capacity, INDEX_DTYPE)
        self._in1: IndexArray = np.zeros(capacity, INDEX_DTYPE)
        self._val: FloatArray = np.zeros(capacity, VALUE_DTYPE)
        self._grad: FloatArray = np.zeros(capacity, VALUE_DTYPE)
        self._n = 0
        # Rows not yet in the arrays, one list per column: appending to four
        # lists allocates nothing the garbage collector tracks (a row tuple
        # would), and the collector's passes were the largest recording cost.
        self._staged_opcode: list[int] = []
        self._staged_in0: list[int] = []
        self._staged_in1: list[int] = []
        self._staged_val: list[float] = []
        self._push_opcode = self._staged_opcode.append  # bound once: the hot path
        self._push_in0 = self._staged_in0.append
        self._push_in1 = self._staged_in1.append
        self._push_val = self._staged_val.append
        self._generation = 0
        self._labels: dict[int, str] = {}
        self._constants: dict[float | tuple[str, float], Var] = {}
        # Blocks (fastad/blocks.py): array values by node id; the ids of nodes
        # whose rule is a block rule (in recording order, so sorted) and their
        # parameters; block adjoints after a backward sweep.
        self._blocks: dict[int, FloatArray] = {}
        self._block_ops: list[int] = []
        self._block_op_ids = np.empty(0, np.int64)  # _block_ops as an array, grown lazily
        self._block_bytes = 0  # held by the arrays in _blocks
        self._warned_growth = False
        self._block_params: dict[int, object] = {}
        self._block_grads: dict[int, FloatArray] = {}

    # -- scope -----------------------------------------------------------------
    def __enter__(self) -> Tape:
        _tape_stack().append(self)
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        stack = _tape_stack()
        if not stack or stack[-1] is not self:
            raise RuntimeError("fa.Tape scopes must be exited in the order they were entered")
        stack.pop()
        return False

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"<fastad.Tape: {self._n} nodes, {len(self.inputs)} inputs>"

    def reset(self) -> None:
        """Forget every node but keep the allocated memory.

        Nodes recorded before the reset become stale: using one raises
        :class:`fastad.StaleNodeError` instead of silently naming whatever
        node now has its id.
        """
        if self._owner is not None:
            self._refuse("reset")
        self._sync()
        self._grad[: self._n] = 0.0
        self._n = 0
        self._generation += 1
        self._labels.clear()
        self._constants.clear()
        self._blocks.clear()
        self._block_ops.clear()
        self._block_op_ids = np.empty(0, np.int64)
        self._block_bytes = 0
        self._block_params.clear()
        self._block_grads.clear()
        if self._sources is not None:
            self._sources.clear()
        if self._guards is not None:
            self._guards.clear()

    # -- recording -------------------------------------------------------------
    def append(self, code: int, in0: int, in1: int, value: float) -> Var:
        """Append one node and return its ``Var``; operands must already exist.

        This is the recorder's primitive; the operators of ``Var`` and the
        functions of ``fastad`` call it after computing ``value``.
        """
        n = self._n
        self._push_opcode(code)
        self._push_in0(in0)
        self._push_in1(in1)
        self._push_val(value)
        self._n = n + 1
        if n & _STAGE_MASK == _STAGE_MASK:
            self._sync()
        return Var(self, n, value)

    def freeze(self, owner: str) -> None:
        """Make the recording final: no more nodes, no reset.

        ``fa.compile`` freezes the tape it keeps (``f.tape``), which users may
        read, print, draw and replay but not change under the compiled
        function: a reset or a new node would leave it answering, or saving,
        something other than what it traced. ``owner`` names it in errors.
        """
        self._sync()
        self._owner = owner
        self.append = self._refuse_append  # type: ignore[method-assign]

    @property
    def has_blocks(self) -> bool:
        """True when the tape holds block (array) nodes."""
        return bool(self._blocks)

    @property
    def frozen(self) -> bool:
        """True for a tape kept by a compiled function (see :meth:`freeze`)."""
        return self._owner is not None

    def _refuse_append(self, code: int, in0: int, in1: int, value: float) -> NoReturn:
        self._refuse("record new nodes on")

    def _refuse_while_tracing(self, what: str) -> NoReturn:
        raise TraceError(
            f"{what} while fa.compile traces the function: the derivative would be a number "
            "computed at the traced point and frozen into every replay. Differentiate the "
            "compiled function instead (f.grad, f.jvp, f.vjp); derivatives of derivatives "
            "inside a trace are not supported yet."
        )

    def _refuse(self, action: str) -> NoReturn:
        raise ValueError(
            f"cannot {action} this tape: it belongs to {self._owner}, which replays it as "
            "traced. Record on a new fa.Tape(), or compile the function again."
        )

    def _append_with_source(self, code: int, in0: int, in1: int, value: float) -> Var:
        node = Tape.append(self, code, in0, in1, value)
        assert self._sources is not None  # debug tapes keep sources
        self._sources[node._id] = _user_location()
        return node

    def source(self, node_id: NodeRef) -> tuple[str, int] | None:
        """``(file, line)`` of the user code that recorded the node (debug tapes), or None."""
        node_id = self.node_id(node_id)
        return self._sources.get(node_id) if self._sources is not None else None

    def _sync(self) -> None:
        """Move the staged rows into the arrays (growing them by doubling)."""
        staged = self._staged_opcode
        if not staged:
            return
        n, start = self._n, self._n - len(staged)
        if n > self._opcode.size:
            self._grow(n)
        for array, column in (
            (self._opcode, self._staged_opcode),
            (self._in0, self._staged_in0),
            (self._in1, self._staged_in1),
            (self._val, self._staged_val),
        ):
            array[start:n] = column
            column.clear()

    @overload
    def input(self, value: RealNumber, name: str | None = None) -> Var: ...
    @overload
    def input(
        self, value: NumericArray | list[Any] | tuple[Any, ...], name: str | None = None
    ) -> Block: ...
    def input(
        self,
        value: RealNumber | NumericArray | list[Any] | tuple[Any, ...],
        name: str | None = None,
    ) -> Var | Block:
        """Record a leaf (an independent variable) holding ``value``.

        A real number gives a scalar node (``Var``); an array gives a block
        node (``Block``), stored as a float64 copy.
        """
        node: Var | Block
        if _is_array_like(value):
            node = self._append_block_leaf(optable.INPUT, value)
        else:
            node = self.append(optable.INPUT, -1, -1, _as_float(value, "fa.var"))
        if name is not None:
            self._labels[node._id] = str(name)
        return node

    def constant(self, value: RealNumber) -> Var:
        """The constant node holding ``value``; repeated constants share one node."""
        value = _as_float(value, "a constant")
        # 0.0 and -0.0 compare equal but are different constants (1/-0.0 = -inf).
        key: float | tuple[str, float] = (
            value if value != 0.0 else ("zero", math.copysign(1.0, value))
        )
        node = self._constants.get(key)
        if node is None:
            node = self._constants[key] = self.append(optable.CONST, -1, -1, value)
        return node

    # -- blocks ------------------------------------------------------------------
    def _append_block_leaf(self, code: int, value: object) -> Block:
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or array.ndim == 0:
            raise TypeError(
                f"a block needs a real array of at least one dimension, got "
                f"{type(value).__name__} of dtype {array.dtype} and shape {array.shape}"
            )
        array = np.array(array, dtype=np.float64)  # a private copy
        array.flags.writeable = False
        row = self.append(code, -1, -1, 0.0)
        self._store_block(row._id, array)
        return _block_handle(self, row._id)

    def _store_block(self, node_id: int, array: FloatArray) -> None:
        self._blocks[node_id] = array
        self._block_bytes += array.nbytes
        if self._block_bytes > GROWTH_WARNING_BYTES:
            self._warn_growth()

    def _warn_growth(self) -> None:
        """Say once that this tape keeps growing: nothing on a live tape is freed."""
        columns = (self._opcode, self._in0, self._in1, self._val, self._grad)
        held = sum(column.nbytes for column in columns) + self._block_bytes  # no _sync here
        if self._warned_growth or held <= GROWTH_WARNING_BYTES:
            return
        self._warned_growth = True
        warnings.warn(
            f"this fastad tape holds {self._n} nodes and {held / 2**30:.1f} GiB: a tape keeps "
            "every node (and array) recorded on it for as long as it lives. In a loop, record "
            "each step on a fresh tape (`with fa.Tape():`) or call tape.reset() after the "
            "optimiser step, and memory stays flat.",
            RuntimeWarning,
            stacklevel=4,
        )

    def block_constant(self, value: NumericArray | list[Any] | tuple[Any, ...]) -> Block:
        """A constant block node holding a copy of the array ``value``."""
        return self._append_block_leaf(optable.CONST, value)

    @overload
    def append_block_op(
        self, code: int, in0: int, in1: int, value: NDArray[Any], params: object
    ) -> Block: ...
    @overload
    def append_block_op(
        self, code: int, in0: int, in1: int, value: float | np.floating[Any] | None, params: object
    ) -> Var: ...
    def append_block_op(
        self,
        code: int,
        in0: int,
        in1: int,
        value: NDArray[Any] | float | np.floating[Any] | None,
        params: object,
    ) -> Var | Block:
        """Append a node computed by a block rule (``fastad.blocks.RULES``).

        ``value`` is an array (the node is a ``Block``), a float (a scalar
        node such as a sum, with its value in ``val`` like any scalar), or
        None for a ``pair`` node that only bundles two operands.
        """
        node: Var | Block
        if isinstance(value, np.ndarray):
            row = self.append(code, in0, in1, 0.0)
            value = np.ascontiguousarray(value, dtype=np.float64)
            value.flags.writeable = False
            self._store_block(row._id, value)
            node = _block_handle(self, row._id)
        else:
            node = self.append(code, in0, in1, 0.0 if value is None else float(value))
        self._block_ops.append(node._id)
        if params is not None:
            self._block_params[node._id] = params
        return node

    def block_adjoint(self, node_id: int) -> FloatArray:
        """The adjoint array of a block node (zeros before any backward)."""
        if self._guards is not None:
            self._refuse_while_tracing("a block gradient")
        gradient = self._block_grads.get(node_id)
        if gradient is None:
            return np.zeros(self._blocks[node_id].shape)
        return gradient + 0.0  # a copy, with no -0.0 (UNREACHED) elements

    def _operand_value(self, node_id: int) -> RuleValue:
        if node_id < 0:
            return None
        if self._opcode[node_id] == _PAIR:
            return (
                self._operand_value(self._in0[node_id]),
                self._operand_value(self._in1[node_id]),
            )
        block = self._blocks.get(node_id)
        return block if block is not None else float(self._val[node_id])

    def _block_ops_reaching(self, root: int) -> tuple[list[int], int]:
        """The block-op nodes ``root`` depends on (ascending), and the lowest id it depends on.

        Sweeps visit only these, so the history of a long-lived tape (a
        PyTorch-style loop recording every step on one tape) costs a
        compiled pass over the ids, not a Python step per earlier block.
        The scalar runs between them may cross block nodes ``root`` does not
        depend on: nothing reaches those, so the compiled sweeps skip them
        (or, in forward mode, fill their unused scalar slot).
        """
        ops = self._block_ops
        if self._block_op_ids.size != len(ops):
            new = np.array(ops[self._block_op_ids.size :], np.int64)
            self._block_op_ids = np.concatenate([self._block_op_ids, new])
        ids = self._block_op_ids[: np.searchsorted(self._block_op_ids, root, side="right")]
        mark = np.zeros(root + 1, np.bool_)
        sweeps.mark_ancestors(self._in0, self._in1, root, mark)
        return ids[mark[ids]].tolist(), int(np.argmax(mark))

    def _sweep_blocks_backward(
        self,
        root: int,
        adjoints: FloatArray,
        block_adjoints: dict[int, FloatArray],
        check: bool = False,
    ) -> tuple[int, int] | None:
        """Backward over a tape with blocks: compiled runs of scalar nodes, block rules between.

        ``adjoints`` (scalars) is seeded by the caller; ``block_adjoints``
        collects the arrays. Decreasing id order throughout, as the scalar
        sweep. With ``check``, returns ``(node, slot)`` of the first node (in
        sweep order) that turned a finite adjoint into a non-finite
        contribution, else None; the sweep still completes.
        """
        from fastad import blocks

        found: tuple[int, int] | None = None

        def run(stop: int, start: int) -> None:
            nonlocal found
            origin = sweeps.backward_range(
                self._opcode, self._in0, self._in1, self._val, adjoints, stop, start, check
            )
            if found is None and origin != sweeps.NO_ORIGIN:
                found = (origin // 2, origin % 2)

        relevant, lowest = self._block_ops_reaching(root)
        stop = root + 1
        for node in reversed(relevant):
            run(stop, node + 1)
            stop = node
            code = int(self._opcode[node])
            if code == _PAIR:
                continue
            g: FloatArray | float | None
            if node in self._blocks:
                g = block_adjoints.get(node)
                if g is None or not blocks.any_reached(g):
                    continue  # strong zero: nothing reached this block
            else:
                g = float(adjoints[node])
                if not _reached(g):
                    continue
            j, k = int(self._in0[node]), int(self._in1[node])
            a, b = self._operand_value(j), self._operand_value(k)
            out = self._blocks.get(node, self._val[node])
            da, db = blocks.vjp_rule(code, a, b, out, g, self._block_params.get(node), k < 0)
            if check and found is None and np.isfinite(g).all():
                for slot, contribution in enumerate((da, db)):
                    if contribution is not None and not _all_finite(contribution):
                        found = (node, slot)
                        break
            self._add_adjoint(j, da, adjoints, block_adjoints)
            if k >= 0:
                self._add_adjoint(k, db, adjoints, block_adjoints)
        run(stop, lowest)
        return found

    def _add_adjoint(
        self,
        node: int,
        contribution: RuleValue,
        adjoints: FloatArray,
        block_adjoints: dict[int, FloatArray],
    ) -> None:
        if self._opcode[node] == _PAIR:
            self._add_adjoint(int(self._in0[node]), contribution[0], adjoints, block_adjoints)
            self._add_adjoint(int(self._in1[node]), contribution[1], adjoints, block_adjoints)
        elif node in self._blocks:
            current = block_adjoints.get(node)
            if current is None:
                block_adjoints[node] = _owned(contribution, block_adjoints.values())
            else:
                current += contribution
        else:
            adjoints[node] += float(contribution)

    def _forward_blocks(self) -> None:
        """Recompute every value on a tape with blocks, in id order."""
        from fastad import blocks

        start = 0
        for node in self._block_ops:
            sweeps.forward_sweep(self._opcode, self._in0, self._in1, self._val, start, node)
            start = node + 1
            code = int(self._opcode[node])
            if code == _PAIR:
                continue
            a = self._operand_value(int(self._in0[node]))
            k = int(self._in1[node])
            b = self._operand_value(k) if k >= 0 else None
            value = blocks.forward_rule(code, a, b, self._block_params.get(node))
            if node in self._blocks:
                value = np.ascontiguousarray(value, dtype=np.float64)
                value.flags.writeable = False
                self._blocks[node] = value
            else:
                self._val[node] = value
        sweeps.forward_sweep(self._opcode, self._in0, self._in1, self._val, start, self._n)

    def _require_scalar_tape(self, what: str) -> None:
        if self._blocks:
            raise NotImplementedError(f"{what} is not available for tapes with blocks yet")

    def _grow(self, needed: int) -> None:
        capacity = self._opcode.size
        while capacity < needed:
            capacity *= 2
        for name in ("_opcode", "_in0", "_in1", "_val", "_grad"):
            old = getattr(self, name)
            new = np.zeros(capacity, old.dtype)
            new[: old.size] = old
            setattr(self, name, new)
        self._warn_growth()

    def node(self, node_id: NodeRef) -> Var:
        """A ``Var`` handle for an existing node id (e.g. on a loaded tape)."""
        node_id = self.node_id(node_id)
        return Var(self, node_id, float(self._val[node_id]))

    # -- the arrays ------------------------------------------------------------
    def adjoint(self, node_id: NodeRef) -> float:
        """The adjoint of one node (what ``Var.grad`` returns)."""
        if self._guards is not None:
            self._refuse_while_tracing("a gradient (.grad)")
        return float(self._grad[self.node_id(node_id)])

    def op_name(self, node_id: NodeRef) -> str:
        """The op-table name of one node."""
        return optable.ALL[self._opcode[self.node_id(node_id)]].name

    def _view(self, name: str) -> Any:
        self._sync()
        view = getattr(self, name)[: self._n]
        view.flags.writeable = False
        return view

    @property
    def opcode(self) -> OpcodeArray:
        """Opcodes (uint8)."""
        return self._view("_opcode")

    @property
    def in0(self) -> IndexArray:
        """First operand ids (int32)."""
        return self._view("_in0")

    @property
    def in1(self) -> IndexArray:
        """Second operand ids (int32)."""
        return self._view("_in1")

    @property
    def val(self) -> FloatArray:
        """Node values (float64).

        Not available while ``fa.compile`` traces a function: a value read
        then would be frozen into every replay (see :class:`fastad.TraceError`).
        """
        if self._guards is not None:
            raise TraceError(
                "tape.val while fa.compile traces the function: the values would be frozen "
                "into every replay. Keep computing with fastad operations."
            )
        return self._view("_val")

    @property
    def grad(self) -> FloatArray:
        """Node adjoints (float64)."""
        if self._guards is not None:
            self._refuse_while_tracing("tape.grad")
        return self._view("_grad")

    @property
    def inputs(self) -> NDArray[np.intp]:
        """Ids of the leaves (``fa.var`` nodes) in the order they were recorded."""
        self._sync()
        return np.flatnonzero(self._opcode[: self._n] == optable.INPUT)

    @property
    def labels(self) -> dict[int, str]:
        """A copy of the ``{node id: label}`` mapping."""
        return dict(self._labels)

    @property
    def nbytes(self) -> int:
        """Bytes held by the five node arrays (capacity, not just length)."""
        self._sync()
        return sum(a.nbytes for a in (self._opcode, self._in0, self._in1, self._val, self._grad))

    def trim(self) -> Tape:
        """Release the spare capacity: 25 bytes per node on a finished tape."""
        self._sync()
        for name in ("_opcode", "_in0", "_in1", "_val", "_grad"):
            setattr(self, name, getattr(self, name)[: max(self._n, 1)].copy())
        return self

    # -- sweeps ----------------------------------------------------------------
    def node_id(self, node: object, what: str = "node id") -> int:
        """The id of ``node`` (a live handle of this tape, or an id), validated.

        Ids are integers (Python or NumPy; not bool or float: ``1.5`` is not
        silently node 1) in ``[0, len(tape))``: ``-1`` does not wrap around
        to the last node. Raises ``TypeError`` or ``IndexError`` naming
        ``what`` and the value; a handle of another tape raises
        ``ValueError``, a stale one :class:`fastad.StaleNodeError`.
        """
        self._sync()
        if isinstance(node, Node):
            if node._tape is not self:
                raise ValueError(f"{what}: {node!r} was not recorded on this tape")
            check_live(node)
            return node._id
        if isinstance(node, (bool, np.bool_)) or not isinstance(
            node, (numbers.Integral, np.integer)
        ):
            raise TypeError(f"{what} must be an integer, got {type(node).__name__} {node!r}")
        node = int(node)
        if not 0 <= node < self._n:
            raise IndexError(
                f"{what} {node} is out of range for a tape of {self._n} nodes "
                f"(ids are 0..{self._n - 1}; negative ids do not wrap around)"
            )
        return node

    def _sweep_into(self, root: int, adjoints: FloatArray, check: bool) -> int:
        return sweeps.backward_sweep(
            self._opcode, self._in0, self._in1, self._val, adjoints, root, check
        )

    def forward(self) -> None:
        """Recompute every node value from the current leaf and constant values."""
        self._sync()
        if self._block_ops:
            return self._forward_blocks()
        sweeps.forward_sweep(self._opcode, self._in0, self._in1, self._val, 0, self._n)

    def zero_grad(self) -> None:
        """Set every adjoint to zero, scalar and block (the start of an accumulation)."""
        self._sync()
        self._grad[: self._n] = 0.0
        self._block_grads = {}

    def backward(self, root: NodeRef, accumulate: bool = False, check: bool = False) -> None:
        """Reverse sweep from node ``root`` (a ``Var`` or an id); see ``Var.backward``.

        Without ``accumulate`` every adjoint on the tape is replaced by
        d root / d node (zero for nodes after ``root`` or not reaching it).
        With ``accumulate`` d root / d node is added to the existing
        adjoints instead; nothing is ever "sometimes zeroed".
        """
        if self._guards is not None:
            self._refuse_while_tracing("backward()")
        root = self._scalar_root(root, "backward")
        if check:
            origin = self.first_nonfinite(root)
            if origin is not None:
                raise NonFiniteError(origin)
        if self._block_ops:
            bad_edge = self._backward_with_blocks(root, accumulate, check)
            if bad_edge is not None:
                raise NonFiniteError(self._backward_origin(*bad_edge))
            return
        if accumulate:
            adjoints = np.full(root + 1, UNREACHED)
            found = self._sweep_into(root, adjoints, check)
            self._grad[: root + 1] += adjoints
        else:
            self._grad[: self._n] = UNREACHED
            found = self._sweep_into(root, self._grad, check)
            self._grad[: self._n] += 0.0
        if check and found != sweeps.NO_ORIGIN:
            raise NonFiniteError(self._backward_origin(found // 2, found % 2))

    def _backward_with_blocks(
        self, root: int, accumulate: bool, check: bool = False
    ) -> tuple[int, int] | None:
        adjoints = np.full(self._n, UNREACHED)
        adjoints[root] = 1.0
        block_adjoints: dict[int, FloatArray] = {}
        found = self._sweep_blocks_backward(root, adjoints, block_adjoints, check)
        adjoints += 0.0
        if accumulate:
            self._grad[: self._n] += adjoints
            for node, gradient in block_adjoints.items():
                if node in self._block_grads:
                    self._block_grads[node] = self._block_grads[node] + gradient
                else:
                    self._block_grads[node] = gradient
        else:
            self._grad[: self._n] = adjoints
            self._block_grads = block_adjoints
        return found

    def _scalar_root(self, root: NodeRef, what: str) -> int:
        """The id of ``root``, which must be a scalar node (a block has no one derivative)."""
        node = self.node_id(root, "output")
        if node in self._blocks:
            raise TypeError(
                f"{what} needs a scalar output; node {node} is a block of shape "
                f"{self._blocks[node].shape}: reduce it first (e.g. Y.sum())"
            )
        return node

    def gradient(
        self, root: NodeRef, wrt: Iterable[NodeRef]
    ) -> FloatArray | list[float | FloatArray]:
        """d root / d node for each node id in ``wrt``, leaving ``grad`` untouched.

        A float64 array for scalar nodes; with blocks among ``wrt``, a list
        of floats and arrays.
        """
        if self._guards is not None:
            self._refuse_while_tracing("fa.grad")
        root = self._scalar_root(root, "a gradient")
        ids = [self.node_id(i, "wrt") for i in wrt]
        adjoints = np.full(self._n, UNREACHED)
        if not self._block_ops:
            self._sweep_into(root, adjoints, False)
            return adjoints[np.asarray(ids, dtype=np.intp)] + 0.0
        adjoints[root] = 1.0
        block_adjoints: dict[int, FloatArray] = {}
        self._sweep_blocks_backward(root, adjoints, block_adjoints)
        if not any(i in self._blocks for i in ids):
            return adjoints[np.asarray(ids, dtype=np.intp)] + 0.0
        return [
            (block_adjoints[i] + 0.0 if i in block_adjoints else np.zeros(self._blocks[i].shape))
            if i in self._blocks
            else float(adjoints[i]) + 0.0
            for i in ids
        ]

    def tangent(
        self, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
    ) -> float:
        """Forward mode: d root along ``direction`` (one entry per node id in ``wrt``).

        The nodes in ``wrt`` are perturbed as independent variables (an
        intermediate node is held at its perturbation, not recomputed from
        its inputs; a node listed twice gets the sum), all other leaves hold
        still: ``tangent(root, wrt, v) == gradient(root, wrt) @ v`` when no
        node of ``wrt`` depends on another (each adjoint is a total
        derivative through everything downstream of its node). This is ``J v`` for one output,
        computed by the compiled tangent sweep from the same local partials
        as ``backward``.
        """
        if self._guards is not None:
            self._refuse_while_tracing("fa.jvp")
        root = self._scalar_root(root, "forward mode (a tangent)")
        ids = [self.node_id(i, "wrt") for i in wrt]
        if self._block_ops:
            return self._tangent_with_blocks(root, ids, list(direction))
        nodes = np.asarray(ids, dtype=np.intp)
        along = np.asarray(direction, dtype=VALUE_DTYPE)
        if along.shape != nodes.shape:
            raise ValueError(f"direction shape {along.shape} != wrt shape {nodes.shape}")
        tangents = np.full(root + 1, UNREACHED)
        seeded = np.zeros(root + 1, np.bool_)
        inside = nodes <= root
        moved = inside & (along != 0.0)  # a zero direction is a strong zero
        np.add.at(tangents, nodes[moved], along[moved])  # a node listed twice adds
        seeded[nodes[inside]] = True
        sweeps.tangent_sweep(
            self._opcode, self._in0, self._in1, self._val, tangents, seeded, 0, root + 1
        )
        return float(tangents[root]) + 0.0

    def _tangent_with_blocks(self, root: int, wrt: list[int], direction: list[Any]) -> float:
        """Forward mode over a tape with blocks: compiled scalar runs, block JVP rules between.

        ``direction`` holds a float for each scalar node of ``wrt`` and an
        array shaped like the block for each block node.
        """
        from fastad import blocks

        if len(direction) != len(wrt):
            raise ValueError(f"{len(direction)} directions for {len(wrt)} nodes")
        tangents = np.full(root + 1, UNREACHED)
        block_tangents: dict[int, FloatArray] = {}
        seeded = np.zeros(root + 1, np.bool_)
        for node, d in zip(wrt, direction, strict=True):
            if node > root:
                continue
            seeded[node] = True
            if node in self._blocks:
                d = np.asarray(d, dtype=VALUE_DTYPE)
                if d.shape != self._blocks[node].shape:
                    raise ValueError(
                        f"direction for node {node} has shape {d.shape}, the block has "
                        f"{self._blocks[node].shape}"
                    )
                d = np.where(d == 0.0, UNREACHED, d)  # zero directions are strong zeros
                block_tangents[node] = block_tangents.get(node, UNREACHED) + d
            elif float(d) != 0.0:
                tangents[node] += float(d)

        def tangent_of(node: int) -> RuleValue:
            if node < 0:
                return None
            if self._opcode[node] == _PAIR:
                parts = (tangent_of(int(self._in0[node])), tangent_of(int(self._in1[node])))
                return None if parts[0] is None and parts[1] is None else parts
            if node in self._blocks:
                tangent = block_tangents.get(node)
                return tangent if tangent is not None and blocks.any_reached(tangent) else None
            value = float(tangents[node])
            return value if _reached(value) else None

        relevant, start = self._block_ops_reaching(root)
        for node in relevant:
            sweeps.tangent_sweep(
                self._opcode, self._in0, self._in1, self._val, tangents, seeded, start, node
            )
            start = node + 1
            code = int(self._opcode[node])
            if seeded[node] or code == _PAIR:
                continue
            j, k = int(self._in0[node]), int(self._in1[node])
            ta, tb = tangent_of(j), tangent_of(k)
            if ta is None and tb is None:
                continue  # strong zero: nothing moves this node
            out = self._blocks.get(node, self._val[node])
            a, b = self._operand_value(j), self._operand_value(k)
            tangent = blocks.jvp_rule(code, a, b, out, ta, tb, self._block_params.get(node), k < 0)
            if node in self._blocks:
                block_tangents[node] = np.asarray(tangent, dtype=VALUE_DTYPE)
            else:
                tangents[node] = float(tangent)
        sweeps.tangent_sweep(
            self._opcode, self._in0, self._in1, self._val, tangents, seeded, start, root + 1
        )
        return float(tangents[root]) + 0.0

    # -- finding where nan/inf came from ---------------------------------------
    def first_nonfinite(self, root: NodeRef | None = None) -> NonFiniteOrigin | None:
        """The first node whose value is ``nan``/``inf`` while its inputs are finite.

        Only nodes whose values ``root``'s value depends on are considered
        (all nodes when ``root`` is None): the side of ``fa.where`` not taken
        is not, since the select never reads it. Returns a :class:`fastad.NonFiniteOrigin`, or
        None when every such value is finite. A leaf or constant holding
        ``nan``/``inf`` is its own origin. ``jax_debug_nans`` and
        ``detect_anomaly`` point at where a ``nan`` is first *noticed*; this
        points at where it was *made*.
        """
        self._sync()
        stop = self._n if root is None else self.node_id(root) + 1
        bad = ~np.isfinite(self._val[:stop])
        for node in self._blocks:
            if node < stop:
                bad[node] = not np.isfinite(self._blocks[node]).all()
        for node in self._block_ops:  # a pair is as bad as what it bundles
            if node < stop and self._opcode[node] == _PAIR:
                bad[node] = bad[self._in0[node]] or bad[self._in1[node]]
        if root is not None and bad.any():
            relevant = np.zeros(stop, np.bool_)
            is_block = np.zeros(stop, np.bool_)
            is_block[[node for node in self._block_ops if node < stop]] = True
            sweeps.mark_value_ancestors(
                self._opcode, self._in0, self._in1, self._val, is_block, stop - 1, relevant
            )
            bad &= relevant
        if not bad.any():
            return None
        in0, in1 = self._in0[:stop], self._in1[:stop]
        fed_bad = ((in0 >= 0) & bad[in0]) | ((in1 >= 0) & bad[in1])
        node = int(np.flatnonzero(bad & ~fed_bad)[0])
        return NonFiniteOrigin(
            phase="forward",
            node=node,
            op=optable.ALL[self._opcode[node]].name,
            label=self._labels.get(node),
            inputs=self._operand_values(node),
            value=self._first_value(node),
            source=self.source(node),
        )

    def _first_value(self, node: int) -> float:
        """A node's value, or for a block its first non-finite element."""
        block = self._blocks.get(node)
        if block is None:
            return float(self._val[node])
        flat = block.ravel()
        bad = np.flatnonzero(~np.isfinite(flat))
        return float(flat[bad[0]]) if bad.size else float(flat[0])

    def _operand_values(self, node: int) -> tuple[object, ...]:
        operands = (self._in0[node], self._in1[node])
        return tuple(self._describe_value(int(j)) for j in operands if j >= 0)

    def _describe_value(self, node: int) -> float | _ArraySummary | tuple[object, object]:
        block = self._blocks.get(node)
        if block is not None:
            return _ArraySummary(block)
        if self._opcode[node] == _PAIR:
            return (
                self._describe_value(int(self._in0[node])),
                self._describe_value(int(self._in1[node])),
            )
        return float(self._val[node])

    def local_partials(self, nodes: NodeRef | Iterable[NodeRef]) -> FloatArray:
        """Local partial derivatives ``(d/d in0, d/d in1)`` of the given nodes.

        Returns an array of shape ``(len(nodes), 2)``; zero where a node has
        fewer operands. This is the edge label of a drawing: the number a
        node's adjoint is multiplied by on its way to each operand.
        """
        if self._guards is not None:
            self._refuse_while_tracing("local partials")
        nodes = np.array(
            [self.node_id(i) for i in np.asarray(nodes).reshape(-1).tolist()], np.int64
        )
        partials = np.zeros((nodes.size, 2), VALUE_DTYPE)
        sweeps.evaluate_partials(self._opcode, self._in0, self._in1, self._val, nodes, partials)
        return partials

    def _backward_origin(self, node: int, slot: int) -> NonFiniteOrigin:
        return NonFiniteOrigin(
            phase="backward",
            node=node,
            op=optable.ALL[self._opcode[node]].name,
            label=self._labels.get(node),
            inputs=self._operand_values(node),
            value=float(self._val[node]),
            slot=slot,
            partial=(
                float("nan")
                if node in self._block_ops
                else float(self.local_partials([node])[0, slot])
            ),
            source=self.source(node),
            block_rule=node in self._block_ops,
        )

    # -- printing --------------------------------------------------------------
    def table(
        self,
        grad: bool = False,
        start: int = 0,
        stop: int | None = None,
        max_rows: int = 60,
        around: NodeRef | None = None,
        context: int = 5,
    ) -> str:
        """The node table in the articles' form: id, op, value, inputs (and label).

        ``grad=True`` adds each node's adjoint. Rows ``start:stop`` are shown;
        past ``max_rows`` the middle is elided. ``around=node`` shows the
        ``context`` rows on each side of one node and marks it with ``>``
        (for instance the origin a checked backward reported). Debug tapes
        add the file and line that recorded each node.
        """
        self._sync()
        if around is not None:
            around = self.node_id(around)
            start, stop = max(around - context, 0), around + context + 1
        stop = self._n if stop is None else min(stop, self._n)
        ids: list[int | None] = list(range(max(start, 0), stop))
        if len(ids) > max_rows:
            half = max_rows // 2
            ids = ids[:half] + [None] + ids[-half:]
        header = f"{'id':>7}  {'op':<8} {'value':>12}" + (f" {'grad':>14}" if grad else "")
        header += f"  {'inputs':<14} label"
        rows = [header + ("  where" if self._sources is not None else "")]
        for i in ids:
            if i is None:
                rows.append(f"{'...':>7}  ({stop - start - 2 * half} rows not shown)")
                continue
            operands = [f"#{j}" for j in (self._in0[i], self._in1[i]) if j >= 0]
            mark = ">" if i == around else " "
            row = f"{mark}{i:>6}  {optable.ALL[self._opcode[i]].symbol:<8} "
            block = self._blocks.get(i)
            if block is not None:
                row += f"{'block' + str(block.shape):>12}"
                if grad:
                    row += f" {'(array)':>14}"
            else:
                row += f"{_fmt(self._val[i], 4):>12}"
                if grad:
                    row += f" {_fmt(self._grad[i], 8):>14}"
            row += f"  {', '.join(operands) or '-':<14} {self._labels.get(i, ''):<5}"
            source = self.source(i)
            if source is not None:
                row += f"  {os.path.basename(source[0])}:{source[1]}"
            rows.append(row.rstrip())
        return "\n".join(rows)

    def to_dot(self, root: NodeRef | None = None, max_nodes: int = 200, grad: bool = True) -> str:
        """Graphviz DOT source of the tape; see :func:`fastad.draw.to_dot`."""
        from fastad import draw

        return draw.to_dot(self, root, max_nodes, grad)

    def render(
        self,
        path: StrPath,
        root: NodeRef | None = None,
        max_nodes: int = 200,
        grad: bool = True,
    ) -> pathlib.Path:
        """Render the drawing to an .svg/.png/.pdf file; see :func:`fastad.draw.render`."""
        from fastad import draw

        return draw.render(self, path, root, max_nodes, grad)

    # -- building from arrays, saving, loading ---------------------------------
    @classmethod
    def from_arrays(
        cls,
        opcode: ArrayLike,
        in0: ArrayLike,
        in1: ArrayLike,
        val: ArrayLike,
        labels: dict[int, str] | dict[str, str] | None = None,
    ) -> Tape:
        """Build a tape from raw arrays, validating every invariant first.

        Operand ids must precede their node (``0 <= in0[i] < i`` where the
        op has an operand, ``-1`` where it has not), opcodes must exist,
        all arrays must be one-dimensional of one length, ids integer and
        values floating point. Values of operation nodes are recomputed from
        the leaves and constants by the forward sweep. Raises ``ValueError``
        naming the first offending node: the compiled kernels do no bounds
        checks, so this is what keeps bad data from crashing them.
        """
        opcode, in0, in1, val = _validated_arrays(opcode, in0, in1, val)
        tape = cls(capacity=max(opcode.size, 1))
        n = opcode.size
        tape._opcode[:n], tape._in0[:n], tape._in1[:n], tape._val[:n] = opcode, in0, in1, val
        tape._n = n
        if not isinstance(labels or {}, dict):
            raise TypeError(
                f"labels must be a dict {{node id: label}}, got {type(labels).__name__}"
            )
        for key, label in (labels or {}).items():
            # Keys are ids, or their decimal text (JSON object keys are strings).
            node_id = int(key) if isinstance(key, str) and key.isdecimal() else key
            try:
                node_id = tape.node_id(node_id, "label key")
            except (TypeError, IndexError) as error:
                raise ValueError(f"label {label!r}: {error}") from None
            if not isinstance(label, str):
                raise TypeError(f"label of node {node_id} must be a str, got {label!r}")
            tape._labels[node_id] = label
        tape.forward()
        return tape

    def save(self, path: StrPath) -> None:
        """Write the tape to a NumPy ``.npz`` file (no pickle inside)."""
        self._require_scalar_tape("saving")
        np.savez(
            path,
            format=np.array(SAVE_FORMAT),
            opcode=self.opcode,
            in0=self.in0,
            in1=self.in1,
            val=self.val,
            labels=np.array(json.dumps({str(k): v for k, v in self._labels.items()})),
        )

    @classmethod
    def load(cls, path: StrPath) -> Tape:
        """Read a tape written by :meth:`save`; validated like :meth:`from_arrays`."""
        data = npz.read_npz(path, "tape")
        # save() always writes labels: a file without them is damaged, not unlabelled.
        missing = {"format", "opcode", "in0", "in1", "val", "labels"} - set(data)
        if missing:
            raise ValueError(f"{path}: not a fastad tape, missing {sorted(missing)}")
        found = npz.text_field(data, "format", str(path))
        if found != SAVE_FORMAT:
            raise ValueError(f"{path}: format {found!r}, expected {SAVE_FORMAT!r}")
        text = npz.text_field(data, "labels", str(path))
        labels: dict[str, Any] = npz.json_object(text, f"{path}: labels")
        try:
            return cls.from_arrays(data["opcode"], data["in0"], data["in1"], data["val"], labels)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from None


_PAIR = optable.BLOCK_BY_NAME["pair"].code


class _ArraySummary:
    """How a block operand appears in a non-finite report: shape and finiteness."""

    def __init__(self, array: FloatArray) -> None:
        self.shape, self.nonfinite = array.shape, int(np.count_nonzero(~np.isfinite(array)))

    def __repr__(self) -> str:
        return f"array of shape {self.shape}" + (
            f" with {self.nonfinite} non-finite" if self.nonfinite else ""
        )


def _all_finite(value: ArrayLike) -> bool:
    return bool(np.isfinite(value).all())


def _is_array_like(value: object) -> bool:
    # A 0-d array is a number (fa.var(np.array(3.0)) is a scalar leaf).
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0)


def _owned(array: ArrayLike, adopted: Iterable[FloatArray]) -> FloatArray:
    """``array`` itself when it owns fresh writable float64 data, else a copy.

    Block rules return fresh arrays: NumPy's own (``base`` None) or a Numba
    kernel's (``base`` is the kernel's memory record, which no other array
    views). Adopting them saves a copy per rule (about 2 ms of a 10 ms
    (64, 512, 1024) layer step). A view of another array, or an array this
    sweep has adopted already (one of ``adopted``), is copied: an adjoint
    must never alias another array, since it is accumulated in place.
    """
    if (
        isinstance(array, np.ndarray)
        and (array.base is None or type(array.base).__name__ == "_MemInfo")
        and array.dtype == np.float64
        and array.flags.writeable
        and array.flags.c_contiguous
        and all(array is not other for other in adopted)
    ):
        return array
    return np.array(array, dtype=np.float64)


def _block_handle(tape: Tape, node_id: int) -> Block:
    from fastad.blocks import Block

    return Block(tape, node_id)


def _fmt(x: float, digits: int) -> str:
    x = float(x)
    if x == 0.0 or not math.isfinite(x) or 1e-4 <= abs(x) < 1e7:
        return f"{x:.{digits}f}"
    return f"{x:.{digits}e}"


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return float(value)
    if isinstance(value, Var):
        raise TypeError(f"{what} expects a number, got the node {value!r}")
    if not is_number(value) or isinstance(value, complex):
        shape = f" of shape {value.shape}" if hasattr(value, "shape") else ""
        raise TypeError(f"{what} expects a real number, got {type(value).__name__}{shape}")
    return float(value)


def _validated_arrays(
    opcode: ArrayLike, in0: ArrayLike, in1: ArrayLike, val: ArrayLike
) -> tuple[OpcodeArray, IndexArray, IndexArray, FloatArray]:
    given = {"opcode": opcode, "in0": in0, "in1": in1, "val": val}
    arrays = {name: np.asarray(a) for name, a in given.items()}
    for name, a in arrays.items():
        if a.ndim != 1:
            raise ValueError(f"tape array {name} must be one-dimensional, got shape {a.shape}")
        kind_ok = a.dtype.kind == "f" if name == "val" else a.dtype.kind in "iu"
        if not kind_ok:
            wanted = "floating point" if name == "val" else "integer"
            raise ValueError(f"tape array {name} must be {wanted}, got dtype {a.dtype}")
    lengths = {name: a.size for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"tape arrays must have equal lengths, got {lengths}")
    codes = arrays["opcode"]
    bad = np.flatnonzero((codes < 0) | (codes >= optable.NUM_OPS))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"node {i}: invalid opcode {codes[i]} (valid: 0..{optable.NUM_OPS - 1})")
    arity = ARITY[codes.astype(np.intp)]
    ids = np.arange(codes.size)
    for slot, name in enumerate(("in0", "in1")):
        operand = arrays[name].astype(np.int64)
        used = arity > slot
        wrong = np.flatnonzero(np.where(used, (operand < 0) | (operand >= ids), operand != -1))
        if wrong.size:
            i = int(wrong[0])
            op = optable.ALL[codes[i]]
            rule = f"an id in [0, {i})" if used[i] else "-1 (unused operand)"
            raise ValueError(
                f"node {i} ({op.name}, arity {op.arity}): {name} = {operand[i]}, "
                f"expected {rule}; operands must be earlier nodes"
            )
    return (
        np.ascontiguousarray(codes, OPCODE_DTYPE),
        np.ascontiguousarray(arrays["in0"], INDEX_DTYPE),
        np.ascontiguousarray(arrays["in1"], INDEX_DTYPE),
        np.ascontiguousarray(arrays["val"], VALUE_DTYPE),
    )


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_location() -> tuple[str, int] | None:
    """(file, line) of the innermost caller outside the fastad package."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


# -- the current tape -------------------------------------------------------------
_local = threading.local()


def _tape_stack() -> list[Tape]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = [Tape()]
    return stack


def current_tape() -> Tape:
    """The tape new leaves are recorded on: the innermost ``with fa.Tape()``
    of this thread, or the thread's default tape."""
    return _tape_stack()[-1]
