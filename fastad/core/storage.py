"""Tape storage: the record of one tape, with nothing else in it.

The node arrays (``opcode``, ``in0``, ``in1``, ``val``, ``grad``), their
staging, growth and adjoint span are ``NodeArrays``
(``fastad/core/node_arrays.py``), which ``TapeStorage`` extends; the graph
queries over them are functions of ``fastad/core/graph.py``. Beside the
arrays: labels, the shared constants, source lines, trace guards and the
block table (``fastad/core/block_table.py``). This layer knows no handles (``Var``,
``Block``) and no derivative rules: it stores ids and values, and validates
ids. A ``fastad.Tape`` holds one and is the user's surface; its methods check
what users give, so the storage's writers (``push``, ``fill``,
``push_block_op``) trust their callers. fastad's own layers reach a tape's
storage with ``fastad.eager.handle.storage_of``.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from fastad.core import node_arrays
from fastad.core.block_table import INDEX_DTYPE, BlockTable, fresh
from fastad.core.node_arrays import NodeArrays
from fastad.kernels import block_reach, optable
from fastad.util.errors import NodeIdError, TraceError, flag, is_int

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue

INITIAL_CAPACITY = 64
MAX_NODES = np.iinfo(INDEX_DTYPE).max
"""The most nodes a tape holds: ids are int32."""
CONSTANT_REACH = 1 << 12
"""How far back (in nodes) a repeated constant reuses an earlier constant node."""
_NO_SCRATCH = np.zeros(0, np.bool_)  # every tape's first scratch mask: none yet
ARITY = np.array([op.arity for op in optable.OPS], dtype=np.int8)
"""Operand count per scalar opcode, for vectorised checks and rewrites of the arrays."""


def _described(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return f"{type(value).__name__} {value!r}"


class TapeStorage(NodeArrays):
    """The record of a tape: its node arrays, constants, labels and block values.

    The node arrays, their growth, ``push`` and ``lock`` are inherited from
    ``NodeArrays``; ``blocks`` is the ``BlockTable`` of the array values.
    A ``fastad.Tape`` holds one and adds handles, sweeps and printing; this
    class stores ids and values only. ``guards`` is None on ordinary tapes and, while
    ``fa.compile`` traces, the list of ``(node id, truth)`` of every
    ``bool()`` taken of a node. ``generation`` counts resets: handles keep the
    generation they were recorded in, so a stale one can be refused.
    """

    def __init__(
        self, capacity: int = INITIAL_CAPACITY, trace: bool = False, debug: bool = False
    ) -> None:
        if not is_int(capacity):
            raise TypeError(
                f"capacity must be an int (the rows to allocate first), got "
                f"{type(capacity).__name__} {capacity!r}"
            )
        if not 1 <= capacity <= MAX_NODES:
            raise ValueError(
                f"capacity must be between 1 and {MAX_NODES:,} (node ids are int32), got "
                f"{capacity:,}; the tape grows as it needs, so the default will do"
            )
        capacity = int(capacity)
        debug = flag(debug, "debug")
        self.blocks = BlockTable()
        super().__init__(capacity, self.blocks)
        # Debug recording keeps (file, line) of the user's code for every
        # node; it swaps in a push of its own so ordinary tapes pay nothing.
        self._sources: dict[int, tuple[str, int] | None] | None = {} if debug else None
        if debug:
            self.push = self._push_with_source  # type: ignore[method-assign]
        self.guards: list[tuple[int, bool]] | None = [] if trace else None
        self.generation = 0
        self._owner: str | None = None  # what a frozen tape belongs to (see freeze)
        self.scratch = _NO_SCRATCH  # all False between uses (graph.reaching), grown there
        self._labels: dict[int, str] = {}
        self._constants: dict[float | tuple[str, float], int] = {}

    # -- recording ---------------------------------------------------------------
    def _push_with_source(self, code: int, in0: int, in1: int, value: float) -> int:
        node = NodeArrays.push(self, code, in0, in1, value)
        assert self._sources is not None  # debug tapes keep sources
        self._sources[node] = _user_location()
        return node

    def constant_id(self, value: float) -> int:
        """The id of the constant node holding ``value``; repeated constants share one.

        Sharing reaches back ``CONSTANT_REACH`` nodes: past that a constant is
        recorded again. A node's ancestors then stay near it, so on a
        long-lived tape a sweep's span (from the lowest node its root depends
        on) does not stretch back to the first step that used ``2.0``.
        """
        # 0.0 and -0.0 compare equal but are different constants (1/-0.0 = -inf).
        key: float | tuple[str, float] = (
            value if value != 0.0 else ("zero", math.copysign(1.0, value))
        )
        node = self._constants.get(key)
        if node is None or node < self._n - CONSTANT_REACH:
            node = self._constants[key] = self.push(optable.CONST, -1, -1, value)
        return node

    def push_block(self, code: int, array: FloatArray) -> int:
        """Append a block leaf or constant holding ``array`` (read-only float64, kept as is)."""
        node = self.push(code, -1, -1, 0.0)
        self._add_block(node, array)
        return node

    def push_block_op(
        self,
        code: int,
        operands: tuple[int, ...],
        value: FloatArray | float,
        params: object,
        saved: tuple[Any, ...] | None = None,
    ) -> int:
        """Append a node computed by a block rule: an array value, or a float (a sum), and
        what its forward saved for the VJP (None: nothing)."""
        blocks = self.blocks
        ops = blocks.ops
        in1 = operands[1] if len(operands) > 1 else -1
        if isinstance(value, np.ndarray):
            node = self.push(code, operands[0], in1, 0.0)
            self._add_block(node, value)
        else:
            node = self.push(code, operands[0], in1, float(value))
        if ops and node <= ops[-1]:  # two threads recorded block ops at once
            self.refuse_concurrent()
        blocks.add_op(node, operands, params)
        if saved is not None:
            blocks.keep_saved(node, saved)
        return node

    def store_block(self, node: int, array: FloatArray) -> None:
        """Keep ``array`` as the value of block node ``node`` (replacing any it had)."""
        self.blocks.store(node, array)
        if self.blocks.nbytes > node_arrays.GROWTH_WARNING_BYTES:
            self.warn_growth()

    def _add_block(self, node: int, array: FloatArray) -> None:
        """``store_block`` for a node just pushed, which has no value yet."""
        blocks = self.blocks
        blocks.add_value(node, array)
        if blocks.nbytes > node_arrays.GROWTH_WARNING_BYTES:
            self.warn_growth()

    # -- state ---------------------------------------------------------------------
    def clear(self) -> None:
        """Forget every node but keep the allocated memory; older handles become stale."""
        if self._owner is not None:
            self._refuse("reset")
        with self.lock:  # never under another thread's sweep
            self.clear_rows()
            self.generation += 1
            self._labels.clear()
            self._constants.clear()
            self.blocks.clear()
            if self._sources is not None:
                self._sources.clear()
            if self.guards is not None:
                self.guards.clear()

    def freeze(self, owner: str) -> None:
        """Make the recording final: no more nodes, no reset.

        ``fa.compile`` freezes the tape it keeps (``f.tape``), which users may
        read, print, draw and replay but not change under the compiled
        function: a reset or a new node would leave it answering, or saving,
        something other than what it traced. ``owner`` names it in errors.
        """
        self.sync()
        self._owner = owner
        self.push = self._refuse_push  # type: ignore[method-assign]

    @property
    def frozen(self) -> bool:
        """True for a tape kept by a compiled function (see :meth:`freeze`)."""
        return self._owner is not None

    def end_trace(self) -> list[tuple[int, bool]]:
        """Stop tracing: return the guards recorded, and make this an ordinary tape."""
        guards, self.guards = self.guards, None
        return list(guards or ())

    def _refuse_push(self, code: int, in0: int, in1: int, value: float) -> NoReturn:
        self._refuse("record new nodes on")

    def _refuse(self, action: str) -> NoReturn:
        raise ValueError(
            f"cannot {action} this tape: it belongs to {self._owner}, which replays it as "
            "traced. Record on a new fa.Tape(), or compile the function again."
        )

    def refuse_while_tracing(self, what: str) -> None:
        """Raise ``TraceError`` if ``fa.compile`` is tracing on this tape."""
        if self.guards is not None:
            raise TraceError(
                f"{what} while fa.compile traces the function: the derivative would be a "
                "number computed at the traced point and frozen into every replay. "
                "Differentiate the compiled function instead (f.grad, f.jvp, f.vjp); "
                "derivatives of derivatives inside a trace are not supported yet."
            )

    # -- reading ---------------------------------------------------------------------
    def check_id(self, node: object, what: str = "node id") -> int:
        """``node`` as a valid id of this tape; raise naming ``what`` and the value.

        Ids are integers (Python or NumPy; not bool or float: ``1.5`` is not
        silently node 1) in ``[0, len(tape))``: ``-1`` does not wrap around.
        """
        if type(node) is int and 0 <= node < self._n:  # the common case, first
            return node
        if isinstance(node, (bool, np.bool_)) or not isinstance(
            node, (numbers.Integral, np.integer)
        ):
            raise TypeError(f"{what} must be an integer, got {type(node).__name__} {node!r}")
        node = int(node)
        if not 0 <= node < self._n:
            raise NodeIdError(
                f"{what} {node} is out of range for a tape of {self._n} nodes "
                f"(ids are 0..{self._n - 1}; negative ids do not wrap around)"
            )
        return node

    def value(self, node: int) -> RuleValue:
        """A node's value: its array for blocks, a float for scalars."""
        node = self.check_id(node)
        block = self.blocks.values.get(node)
        if block is not None:
            return block
        if node >= self._synced:  # still staged
            self.sync()  # (checks the staged rows: reading one is rare)
        return float(self._val[node])

    def block_value(self, node: int) -> FloatArray | None:
        """The array of a block node, None for a scalar node."""
        return self.blocks.values.get(self.check_id(node))

    def operands(self, node: int) -> tuple[int, ...]:
        """The operand ids of a node, in order (any number for a block op)."""
        node = self.check_id(node)
        if self.blocks.is_op(node):
            return self.blocks.operands(node)
        self.sync()
        return tuple(int(j) for j in (self._in0[node], self._in1[node]) if j >= 0)

    def set_leaf_value(self, node: int, value: FloatArray | float) -> None:
        """Give a leaf a new value (a compiled function's replay); arrays are kept as they are.

        ``node`` is an input (a constant may be shared by nodes recorded later:
        it keeps its value) and ``value`` of its kind:
        a float64 array of as many axes for a block (a compiled function with
        ``batch=`` replays at other numbers of rows), a real number for a
        scalar.
        """
        node = self.check_id(node, "leaf id")
        self.sync()
        if self._opcode[node] != optable.INPUT:
            name = optable.ALL[int(self._opcode[node])].name
            raise ValueError(f"node {node} is not an input ({name}): only inputs take new values")
        held = self.blocks.values.get(node)
        if held is not None:
            if not (
                isinstance(value, np.ndarray)
                and value.dtype == np.float64
                and value.ndim == held.ndim
            ):
                raise ValueError(
                    f"leaf {node} is a block of shape {held.shape}: its value must be a float64 "
                    f"array of {held.ndim} axes, got {_described(value)}"
                )
            self.store_block(node, value)
        else:
            if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(
                value, bool
            ):
                raise TypeError(
                    f"leaf {node} is a scalar node: its value must be a real "
                    f"number, got {_described(value)}"
                )
            if isinstance(value, int) and abs(value) > sys.float_info.max:
                raise ValueError(f"leaf {node}: {value!r} is too large for a float64")
            self._val[node] = value

    def block_adjoint(self, node: int) -> FloatArray:
        """The read-only adjoint array of the block node ``node`` (a valid block id): the
        last backward's, its unreached elements read as +0.0, or zeros before any."""
        gradient = self.blocks.adjoints.get(node)
        if gradient is None:
            gradient = np.zeros(self.blocks.values[node].shape)
        elif gradient.flags.writeable:  # its first read since the sweep that made it
            # UNREACHED (-0.0) means "no gradient": it reads as 0.0, as every
            # result handed out does. In place, once: then it is frozen.
            if not gradient.flags.c_contiguous:  # (sweeps adopt C arrays only)
                gradient = self.blocks.adjoints[node] = np.ascontiguousarray(gradient)
            block_reach.settle_zero_signs(gradient.reshape(-1))
        gradient.flags.writeable = False
        return gradient

    def label(self, node: int) -> str | None:
        """A node's label (None: it has none)."""
        return self._labels.get(self.check_id(node))

    def set_label(self, node: int, label: str) -> None:
        self._labels[self.check_id(node)] = str(label)

    @property
    def labels(self) -> dict[int, str]:
        """A copy of the ``{node id: label}`` mapping."""
        return dict(self._labels)

    def source(self, node: int) -> tuple[str, int] | None:
        """``(file, line)`` of the user code that recorded a node (debug tapes), or None."""
        return self._sources.get(node) if self._sources is not None else None

    @property
    def sources(self) -> dict[int, tuple[str, int]]:
        """A copy of ``{node id: (file, line)}`` for the nodes whose line is known (debug tapes)."""
        known = self._sources or {}
        return {node: location for node, location in known.items() if location is not None}

    def set_source(self, node: int, location: tuple[str, int]) -> None:
        """Record where ``node`` was made (a debug tape rebuilt from a trace or a file)."""
        if self._sources is None:
            raise ValueError("only a debug tape (fa.Tape(debug=True)) keeps source lines")
        node = self.check_id(node)
        if not (
            isinstance(location, tuple)
            and len(location) == 2
            and isinstance(location[0], str)
            and is_int(location[1])
        ):
            raise TypeError(f"location must be (file, line), a str and an int; got {location!r}")
        self._sources[node] = location

    @property
    def debug(self) -> bool:
        """True for a tape that keeps the source line of every node."""
        return self._sources is not None

    @property
    def val(self) -> FloatArray:
        """Node values (float64).

        Not available while ``fa.compile`` traces a function: a value read
        then would be frozen into every replay (see :class:`fastad.TraceError`).
        """
        if self.guards is not None:
            raise TraceError(
                "tape.val while fa.compile traces the function: the values would be frozen "
                "into every replay. Keep computing with fastad operations."
            )
        return self._view("_val")

    @property
    def grad(self) -> FloatArray:
        """Node adjoints (float64)."""
        self.refuse_while_tracing("tape.grad")
        return self._view("_grad")

    @property
    def has_blocks(self) -> bool:
        """True when the tape holds block (array) nodes."""
        return bool(self.blocks.values)


def as_stored(value: Any) -> FloatArray:
    """``value`` as a block value: a read-only C-contiguous float64 array.

    For arrays nobody else holds (a rule's output, a private copy): a fresh
    array is kept as it is and made read-only in place; a writable view of
    someone else's array is copied, since freezing it would freeze theirs.
    Callers storing a user's array copy it first (``Tape.input``).
    """
    if type(value) is np.ndarray and value.dtype == np.float64 and value.flags.c_contiguous:
        array = value
    else:
        array = np.ascontiguousarray(value, dtype=np.float64)
    flags = array.flags
    if flags.writeable:
        if not fresh(array):
            array = array.copy()
            flags = array.flags
        flags.writeable = False
    return array


def _user_location() -> tuple[str, int] | None:
    """(file, line) of the innermost caller outside the fastad package."""
    frame = node_arrays.user_frame(sys._getframe(2))[0]
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None
