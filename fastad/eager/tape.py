"""The tape users hold: recording scope, handles, gradients, printing and files.

``Tape`` is the public face of a recording. Its layers live below it:
``fastad/core/storage.py`` keeps the arrays (a ``Tape`` holds a ``TapeStorage``;
fastad's own layers reach it with :func:`storage_of`, users never need it),
``fastad/core/derivatives.py`` runs the derivative sweeps a tape asks for,
``fastad/core/driver.py`` walks the arrays with the block rules of
``fastad/core/block_rules.py``, ``fastad/eager/node.py`` makes the handles,
``fastad/core/diagnose.py`` finds where a ``nan`` was made, ``fastad/core/draw.py``
prints and draws, ``fastad/core/tape_file.py`` validates arrays and files. Each
method here checks its arguments and hands over.

Which tape records: the innermost ``with fa.Tape():`` block of the current
thread, otherwise the thread's default tape (``fa.current_tape()``).
"""

from __future__ import annotations

import functools
import pathlib
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.core import block_rules, derivatives, diagnose, draw, driver, tape_file
from fastad.core.storage import INITIAL_CAPACITY, TapeStorage, as_stored
from fastad.eager.handle import Node, check_live
from fastad.eager.node import Block, Var
from fastad.eager.operators import is_number
from fastad.kernels import optable
from fastad.util import npz
from fastad.util.errors import NonFiniteOrigin, flag, is_int

if TYPE_CHECKING:
    from fastad.eager.node import NodeRef
    from fastad.util.hints import (
        FloatArray,
        IndexArray,
        NumericArray,
        OpcodeArray,
        RealNumber,
        RuleValue,
        StrPath,
    )


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _holding_lock(method: _Method) -> _Method:
    """Run a sweep under the tape's lock: two threads' sweeps share its adjoint buffer."""

    @functools.wraps(method)
    def locked(self: Tape, *args: Any, **kwargs: Any) -> Any:
        with self._storage.lock:
            return method(self, *args, **kwargs)

    return cast("_Method", locked)


class Tape:
    """A recording of scalar and array operations, swept by compiled kernels.

    Use ``with fa.Tape() as t:`` to record into a fresh tape; nodes created
    in the block (``fa.var`` and every operation on them) live on ``t`` and
    stay usable after the block. ``t.reset()`` empties the tape but keeps its
    memory, which is the cheap way to run a training loop; nodes recorded
    before a reset raise :class:`fastad.StaleNodeError` when used.

    The arrays ``opcode``, ``in0``, ``in1``, ``val`` and ``grad`` are
    read-only views of the first ``len(t)`` rows. The tape holds its arrays
    in a ``TapeStorage`` (``fastad/core/storage.py``), which is not part of
    this surface: fastad's own layers reach it with :func:`storage_of`.

    Parameters
    ----------
    capacity : int
        Rows to allocate first; the tape doubles them as it needs.
    trace : bool
        Record the guards of ``bool()`` taken of a node (``fa.compile`` traces).
    debug : bool
        Keep the file and line of the user code that recorded each node.
    """

    __slots__ = ("_storage", "__weakref__")
    _storage: TapeStorage

    def __init__(
        self, capacity: int = INITIAL_CAPACITY, trace: bool = False, debug: bool = False
    ) -> None:
        self._storage = TapeStorage(capacity, trace, debug)

    def __len__(self) -> int:
        return len(self._storage)

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

    def __repr__(self) -> str:
        return f"<fastad.Tape: {len(self)} nodes, {len(self.inputs)} inputs>"

    def reset(self) -> None:
        """Forget every node but keep the allocated memory.

        Nodes recorded before the reset become stale: using one raises
        :class:`fastad.StaleNodeError` instead of silently naming whatever
        node now has its id.
        """
        self._storage.clear()

    @property
    def frozen(self) -> bool:
        """True for a tape kept by a compiled function (``f.tape``): it takes no new
        nodes and no reset."""
        return self._storage.frozen

    @property
    def debug(self) -> bool:
        """True for a tape that keeps the source line of every node (``debug=True``)."""
        return self._storage.debug

    # -- the arrays (read-only views) --------------------------------------------
    @property
    def opcode(self) -> OpcodeArray:
        """Opcodes (uint8), a read-only view of the first ``len(tape)`` rows."""
        return self._storage.opcode

    @property
    def in0(self) -> IndexArray:
        """First operand ids (int32, -1 where the op has none), read-only."""
        return self._storage.in0

    @property
    def in1(self) -> IndexArray:
        """Second operand ids (int32, -1 where the op has fewer than two), read-only."""
        return self._storage.in1

    @property
    def val(self) -> FloatArray:
        """Node values (float64), read-only.

        Not available while ``fa.compile`` traces a function: a value read
        then would be frozen into every replay (see :class:`fastad.TraceError`).
        """
        return self._storage.val

    @property
    def grad(self) -> FloatArray:
        """Node adjoints (float64) of the last backward sweep, read-only."""
        return self._storage.grad

    @property
    def inputs(self) -> NDArray[np.intp]:
        """Ids of the leaves (``fa.var`` nodes) in the order they were recorded."""
        return self._storage.inputs

    @property
    def has_blocks(self) -> bool:
        """True when the tape holds block (array) nodes."""
        return self._storage.has_blocks

    @property
    def nbytes(self) -> int:
        """Bytes held by the five node arrays (capacity, not just length)."""
        return self._storage.nbytes

    @property
    def labels(self) -> dict[int, str]:
        """A copy of the ``{node id: label}`` mapping."""
        return self._storage.labels

    @property
    def sources(self) -> dict[int, tuple[str, int]]:
        """A copy of ``{node id: (file, line)}`` for the nodes whose line is known
        (debug tapes)."""
        return self._storage.sources

    def value(self, node_id: NodeRef) -> RuleValue:
        """A node's value: its array (read-only) for a block, a float for a scalar node."""
        return self._storage.value(self.node_id(node_id))

    def block_value(self, node_id: NodeRef) -> FloatArray | None:
        """The array (read-only) of a block node, None for a scalar node."""
        return self._storage.block_value(self.node_id(node_id))

    def operands(self, node_id: NodeRef) -> tuple[int, ...]:
        """The operand ids of a node, in order (any number for a block op)."""
        return self._storage.operands(self.node_id(node_id))

    def label(self, node_id: NodeRef) -> str | None:
        """A node's label (None: it has none)."""
        return self._storage.label(self.node_id(node_id))

    def set_label(self, node_id: NodeRef, label: str) -> None:
        """Give a node a label, shown by :meth:`table` and :meth:`to_dot`."""
        self._storage.set_label(self.node_id(node_id), label)

    # -- recording -------------------------------------------------------------
    def append(self, code: int, in0: int, in1: int, value: float) -> Var:
        """Append one scalar node and return its ``Var``; checked as :meth:`push`."""
        return Var(self, self.push(code, in0, in1, value), float(value))

    def push(self, code: int, in0: int, in1: int, value: float) -> int:
        """Append one scalar node, a raw row ``(code, in0, in1, value)``, and return its id.

        Checked before anything is written: ``code`` is a scalar op of the op
        table (``fastad.kernels.optable.OPS``; block ops are recorded by their
        functions), ``in0``/``in1`` are the ids of earlier scalar nodes for
        the operands the op takes and ``-1`` for the others (a leaf takes
        none, a unary op one), ``value`` is a real number. The value is kept
        as given, as :meth:`from_arrays` keeps raw rows.
        """
        op = tape_file.scalar_op(code)
        for slot, j in enumerate((in0, in1)):
            field = ("in0", "in1")[slot]
            if slot >= op.arity:
                if not is_int(j) or j != -1:
                    raise ValueError(
                        f"{op.name} takes {op.arity} operand(s): {field} must be -1, got {j!r}"
                    )
                continue
            node = self._storage.check_id(j, f"{field} (operand {slot + 1} of {op.name})")
            if self._storage.block_value(node) is not None:
                raise ValueError(
                    f"{field} {node} is a block node: a scalar op reads scalar nodes (record "
                    "ops on blocks with fastad's functions, e.g. fa.sin(X))"
                )
        return self._storage.push(int(code), int(in0), int(in1), _as_float(value, "the value"))

    def _wrt_ids(self, wrt: Iterable[NodeRef]) -> list[int]:
        """The ids of a list of wrt nodes; a single node is refused (a block would be
        iterated row by row, recording an index node per row)."""
        if isinstance(wrt, Node):
            raise TypeError(
                f"wrt is one node, {wrt!r}: pass a list of nodes ([x]); fa.grad takes one node"
            )
        return [self.node_id(i, "wrt") for i in wrt]

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
        node (``Block``), stored as a float64 copy: changing the array
        afterwards changes nothing on the tape.
        """
        node: Var | Block
        if _is_array_like(value):
            node = Block(self, self._storage.push_block(optable.INPUT, _block_copy(value)))
        else:
            number = _as_float(value, "fa.var")
            node = Var(self, self._storage.push(optable.INPUT, -1, -1, number), number)
        if name is not None:
            self._storage.set_label(node.id, name)
        return node

    def constant(self, value: RealNumber) -> Var:
        """The constant node holding ``value``; repeated constants share one node."""
        number = _as_float(value, "a constant")
        return Var(self, self._storage.constant_id(number), number)

    def block_constant(self, value: NumericArray | list[Any] | tuple[Any, ...]) -> Block:
        """A constant block node holding a copy of the array ``value``."""
        return Block(self, self._storage.push_block(optable.CONST, _block_copy(value)))

    def node(self, node_id: NodeRef) -> Var | Block:
        """The handle of an existing node id (e.g. on a loaded tape): a ``Var``, or a
        ``Block`` for an array node."""
        node = self.node_id(node_id)
        if self._storage.block_value(node) is not None:
            return Block(self, node)
        return Var(self, node, float(self._storage.value(node)))

    def node_id(self, node: object, what: str = "node id") -> int:
        """The id of ``node`` (a live handle of this tape, or an id), validated.

        Ids are integers (Python or NumPy; not bool or float: ``1.5`` is not
        silently node 1) in ``[0, len(tape))``: ``-1`` does not wrap around
        to the last node. Raises ``TypeError`` or ``IndexError`` naming
        ``what`` and the value; a handle of another tape raises
        ``ValueError``, a stale one :class:`fastad.StaleNodeError`.
        """
        self._storage.sync()
        if type(node) is int and 0 <= node < len(self):  # the common case, first
            return node
        if isinstance(node, Node):
            if node.tape is not self:
                raise ValueError(f"{what}: {node!r} was not recorded on this tape")
            check_live(node)
            return node.id
        return self._storage.check_id(node, what)

    def source(self, node_id: NodeRef) -> tuple[str, int] | None:
        """``(file, line)`` of the user code that recorded the node (debug tapes), or None."""
        return self._storage.source(self.node_id(node_id))

    # -- reading -----------------------------------------------------------------
    def adjoint(self, node_id: NodeRef) -> float:
        """The adjoint of one node (what ``Var.grad`` returns)."""
        self._storage.refuse_while_tracing("a gradient (.grad)")
        node = self.node_id(node_id)
        if node in self._storage.blocks.values:
            raise TypeError(
                f"node {node} is a block node: its adjoint is tape.block_adjoint({node})"
            )
        return float(self._storage.columns()[4][node])

    def block_adjoint(self, node_id: NodeRef) -> FloatArray:
        """The adjoint array of a block node (zeros before any backward), read-only.

        The tape's own array, not a copy (copying a layer's weight gradient
        cost as much as its backward product): read-only, like ``.value``,
        and never changed afterwards. A later backward makes new arrays, so
        one read keeps its numbers; ``.copy()`` it to change them.
        """
        self._storage.refuse_while_tracing("a block gradient")
        node = node_id if type(node_id) is int and node_id in self._storage.blocks.values else None
        if node is None:
            node = self.node_id(node_id)
            if node not in self._storage.blocks.values:
                raise TypeError(
                    f"node {node} is a scalar node: its adjoint is tape.adjoint({node})"
                )
        if self._storage.columns()[0][node] == optable.CONST:
            raise ValueError(
                f"node {node} is an array constant (data, such as a NumPy array in an "
                "expression): constants get no gradient. Record it with fa.var(array) to "
                f"differentiate with respect to it, or use tape.gradient(L, [{node}])"
            )
        return self._storage.block_adjoint(node)

    def op_name(self, node_id: NodeRef) -> str:
        """The op-table name of one node."""
        return optable.ALL[self._storage.opcode[self.node_id(node_id)]].name

    def trim(self) -> Tape:
        """Release the spare capacity: 25 bytes per node on a finished tape."""
        self._storage.trim()
        return self

    # -- sweeps ----------------------------------------------------------------
    @_holding_lock
    def forward(self) -> None:
        """Recompute every node value from the current leaf and constant values."""
        driver.replay(self._storage, block_rules.rule)

    @_holding_lock
    def zero_grad(self) -> None:
        """Set every adjoint to zero, scalar and block (the start of an accumulation)."""
        self._storage.clear_adjoints()
        self._storage.blocks.adjoints = {}

    @_holding_lock
    def backward(self, root: NodeRef, accumulate: bool = False, check: bool = False) -> None:
        """Reverse sweep from node ``root`` (a ``Var`` or an id); see ``Var.backward``.

        Without ``accumulate`` every adjoint on the tape is replaced by
        d root / d node (zero for nodes after ``root`` or not reaching it).
        With ``accumulate`` d root / d node is added to the existing
        adjoints instead; nothing is ever "sometimes zeroed".
        """
        self._storage.refuse_while_tracing("backward()")
        node = self._scalar_root(root, "backward")
        check, accumulate = flag(check, "check"), flag(accumulate, "accumulate")
        derivatives.backward_into(self._storage, node, accumulate, check)

    def _scalar_root(self, root: NodeRef, what: str) -> int:
        """The id of ``root``, which must be a scalar node (a block has no one derivative)."""
        node = self.node_id(root, "output")
        block = self._storage.block_value(node)
        if block is not None:
            raise TypeError(
                f"{what} needs a scalar output; node {node} is a block of shape "
                f"{block.shape}: reduce it first (e.g. Y.sum())"
            )
        return node

    @_holding_lock
    def gradient(
        self, root: NodeRef, wrt: Iterable[NodeRef]
    ) -> FloatArray | list[float | FloatArray]:
        """d root / d node for each node id in ``wrt``, leaving ``grad`` untouched.

        Only what these gradients need is computed: block rules send nothing
        to operands that no node of ``wrt`` feeds (the data of a layer).

        A float64 array for scalar nodes; with blocks among ``wrt``, a list
        of floats and arrays.
        """
        self._storage.refuse_while_tracing("fa.grad")
        node = self._scalar_root(root, "a gradient")
        ids = self._wrt_ids(wrt)
        return derivatives.gradient(self._storage, node, ids)

    @_holding_lock
    def vjp(
        self, root: NodeRef, wrt: Iterable[NodeRef], cotangent: ArrayLike
    ) -> list[float | FloatArray]:
        """``u^T J``: the cotangent ``u`` of ``root`` pulled back to each node of ``wrt``.

        ``u`` has ``root``'s shape (a float for a scalar node, an array for a
        block); one backward sweep seeded with it, so a block output needs no
        reduction first. Zero entries of ``u`` are strong zeros (they send
        nothing, even against an infinite partial), as zero seeds are
        everywhere. A list of floats and arrays, shaped like the nodes;
        ``.grad`` is untouched.
        """
        self._storage.refuse_while_tracing("fa.vjp")
        node = self.node_id(root, "output")
        ids = self._wrt_ids(wrt)
        block = self._storage.block_value(node)
        u = derivatives.real_direction(cotangent, "the cotangent")
        shape = () if block is None else block.shape
        if u.shape != shape:
            raise ValueError(f"the cotangent has shape {u.shape}, the output {shape}")
        if not np.isfinite(u).all():
            found = u[~np.isfinite(u)].flat[0]
            raise ValueError(f"the cotangent must be finite, got {found} in it")
        return derivatives.vjp(self._storage, node, ids, u)

    @_holding_lock
    def tangent(
        self, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
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
        self._storage.refuse_while_tracing("fa.jvp")
        node = self.node_id(root, "output")
        ids = self._wrt_ids(wrt)
        visits = driver.plan(self._storage, node)
        tangents, block_tangents, seeded = derivatives.seed_tangents(
            self._storage, node, ids, direction, visits
        )
        return driver.tangent(
            self._storage, block_rules.rule, node, tangents, block_tangents, seeded, visits
        )

    # -- second order ------------------------------------------------------------
    @_holding_lock
    def hvp(
        self, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
    ) -> FloatArray | list[float | FloatArray]:
        """``H v``: the Hessian of ``root`` with respect to ``wrt``, times ``direction``.

        Forward-over-reverse: a tangent sweep along ``direction`` (seeded as
        in :meth:`tangent`), the backward sweep, and the tangent of the
        backward sweep; no Hessian is formed and ``.grad`` is untouched.
        ``wrt`` nodes are independent variables as in :meth:`gradient` and
        :meth:`tangent` (an intermediate node is held at its perturbation).
        A float64 array for scalar nodes; with blocks among ``wrt`` a list of
        floats and arrays, each shaped like its node. A block op on the way
        without a second-order rule raises ``NotImplementedError`` naming it.
        """
        self._storage.refuse_while_tracing("fa.hvp")
        node = self._scalar_root(root, "a Hessian-vector product")
        ids = self._wrt_ids(wrt)
        return derivatives.hvp(self._storage, node, ids, direction)

    @_holding_lock
    def hessian(self, root: NodeRef, wrt: Iterable[NodeRef]) -> FloatArray:
        """The ``(k, k)`` Hessian of ``root`` with respect to the ``k`` scalar nodes ``wrt``.

        One backward sweep, then per node of ``wrt`` a tangent sweep and the
        backward sweep's tangent: row ``t`` is ``H e_t`` (:meth:`hvp`), so
        the result is symmetric up to rounding. For blocks use :meth:`hvp`.
        """
        self._storage.refuse_while_tracing("fa.hessian")
        node = self._scalar_root(root, "a Hessian")
        ids = self._wrt_ids(wrt)
        for i in ids:
            block = self._storage.block_value(i)
            if block is not None:
                raise TypeError(
                    f"fa.hessian takes scalar nodes; node {i} is a block of shape "
                    f"{block.shape}: use fa.hvp for Hessian-vector products with blocks"
                )
        return derivatives.hessian(self._storage, node, ids)

    # -- finding where nan/inf came from ---------------------------------------
    @_holding_lock
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
        if root is None:
            return diagnose.first_nonfinite(self._storage, len(self), None)
        node = self.node_id(root)
        return diagnose.first_nonfinite(self._storage, node + 1, node)

    def local_partials(self, nodes: NodeRef | Iterable[NodeRef]) -> FloatArray:
        """Local partial derivatives ``(d/d in0, d/d in1)`` of the given nodes.

        Returns an array of shape ``(len(nodes), 2)``; zero where a node has
        fewer operands. This is the edge label of a drawing: the number a
        node's adjoint is multiplied by on its way to each operand.
        """
        self._storage.refuse_while_tracing("local partials")
        items: list[Any]
        if isinstance(nodes, Node) or not isinstance(nodes, Iterable):
            items = [nodes]  # one node (a Block handle is not a sequence of elements here)
        elif isinstance(nodes, np.ndarray):
            items = nodes.reshape(-1).tolist()
        else:
            items = list(nodes)
        ids = np.array([self.node_id(i) for i in items], np.int64)
        for node in ids.tolist():
            if self._storage.blocks.is_op(node):
                raise TypeError(
                    f"node {node} ({self.op_name(node)}) is a block op: its rule is a "
                    "vector-Jacobian product, it has no local partial per operand"
                )
        return self._storage.local_partials(ids)

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
        around_id = None if around is None else self.node_id(around)
        return draw.table(self._storage, grad, start, stop, max_rows, around_id, context)

    def to_dot(self, root: NodeRef | None = None, max_nodes: int = 200, grad: bool = True) -> str:
        """Graphviz DOT source of the tape; see :func:`fastad.core.draw.to_dot`."""
        return draw.to_dot(self._storage, self._root_id(root), max_nodes, grad)

    def render(
        self,
        path: StrPath,
        root: NodeRef | None = None,
        max_nodes: int = 200,
        grad: bool = True,
    ) -> pathlib.Path:
        """Render the drawing to an .svg/.png/.pdf file; see :func:`fastad.core.draw.render`."""
        return draw.render(self._storage, path, self._root_id(root), max_nodes, grad)

    def _root_id(self, root: NodeRef | None) -> int | None:
        return None if root is None else self.node_id(root, "root")

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
        arrays = tape_file.validated_arrays(opcode, in0, in1, val)
        tape = cls(capacity=max(arrays[0].size, 1))
        tape._storage.fill(*arrays)
        for node, label in tape_file.validated_labels(tape._storage, labels).items():
            tape.set_label(node, label)
        tape.forward()
        return tape

    def save(self, path: StrPath) -> None:
        """Write the tape to a NumPy ``.npz`` file (no pickle inside)."""
        tape_file.write(self._storage, npz.file_path(path, "Tape.save"))

    @classmethod
    def load(cls, path: StrPath) -> Tape:
        """Read a tape written by :meth:`save`; validated like :meth:`from_arrays`."""
        arrays, labels = tape_file.read(npz.file_path(path, "Tape.load"))
        try:
            return cls.from_arrays(*arrays, labels)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from None


def _is_array_like(value: object) -> bool:
    # A 0-d array is a number (fa.var(np.array(3.0)) is a scalar leaf).
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0)


def _block_copy(value: object) -> FloatArray:
    """A private read-only float64 copy of array data for a block leaf or constant."""
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" or array.ndim == 0:
        raise TypeError(
            f"a block needs a real array of at least one dimension, got "
            f"{type(value).__name__} of dtype {array.dtype} and shape {array.shape}"
        )
    return as_stored(np.array(array, dtype=np.float64))  # a copy the caller cannot change


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return float(value)
    if isinstance(value, Var):
        raise TypeError(f"{what} expects a number, got the node {value!r}")
    if not is_number(value) or isinstance(value, complex):
        shape = f" of shape {value.shape}" if hasattr(value, "shape") else ""
        raise TypeError(f"{what} expects a real number, got {type(value).__name__}{shape}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{what}: {value!r} is too large for a float64") from None


# -- the current tape -------------------------------------------------------------
_local = threading.local()


def _tape_stack() -> list[Tape]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = [Tape()]
    return stack


def storage_of(tape: Tape) -> TapeStorage:
    """The storage ``tape`` holds: its arrays, staging, block table, guards and lock.

    For fastad's own layers (the sweep driver's callers, compiled functions,
    checks and files); not part of ``fa``'s namespace. Its methods trust their
    callers more than the tape's do: ``push`` appends a row unchecked.
    """
    if not isinstance(tape, Tape):
        raise TypeError(f"expected a fastad Tape, got {type(tape).__name__}")
    return tape._storage


def tape_or_current(tape: object) -> Tape:
    """``tape`` where one is given (it must be a ``fa.Tape``), else :func:`current_tape`."""
    if tape is None:
        return current_tape()
    if not isinstance(tape, Tape):
        raise TypeError(f"tape must be a fastad.Tape, got {type(tape).__name__} {tape!r}")
    return tape


def current_tape() -> Tape:
    """The tape new leaves are recorded on: the innermost ``with fa.Tape()``
    of this thread, or the thread's default tape."""
    return _tape_stack()[-1]
