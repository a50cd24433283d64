"""The tape users hold: recording scope, handles, gradients, printing and files.

``Tape`` is the public face of a recording. Its layers live below it:
``fastad/core/storage.py`` keeps the arrays (a ``Tape`` holds a ``TapeStorage``;
fastad's own layers reach it with :func:`fastad.eager.handle.storage_of`, users never need it),
``fastad/eager/differentiate.py`` checks the arguments of derivative requests
and hands them to ``fastad/core/derivatives.py``, which runs the sweeps,
``fastad/core/driver.py`` walks the arrays with the block rules of
``fastad/core/block_rules.py``, ``fastad/eager/node.py`` makes the handles,
``fastad/eager/graph_tools.py`` finds where a ``nan`` was made
(``fastad/core/diagnose.py``), prints and draws (``fastad/core/draw.py``),
``fastad/core/tape_file.py`` validates raw rows, arrays and files. Each
method here checks its arguments, or has one of those modules check them, and
hands over.

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

from fastad.core import block_file, block_rules, driver, tape_file
from fastad.core.storage import INITIAL_CAPACITY, TapeStorage
from fastad.eager import differentiate, graph_tools
from fastad.eager.handle import Node, check_live
from fastad.eager.node import Block, Var
from fastad.eager.operators import is_number
from fastad.kernels import optable
from fastad.util import npz
from fastad.util.errors import NonFiniteOrigin, is_long_double, is_real_dtype, not_real

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
    this surface: fastad's own layers reach it with :func:`fastad.eager.handle.storage_of`.

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
        tape_file.check_row(self._storage, code, in0, in1)
        return self._storage.push(int(code), int(in0), int(in1), _as_float(value, "the value"))

    @overload
    def input(
        self, value: RealNumber, name: str | None = None, *, copy: bool | None = True
    ) -> Var: ...
    @overload
    def input(
        self,
        value: NumericArray | list[Any] | tuple[Any, ...],
        name: str | None = None,
        *,
        copy: bool | None = True,
    ) -> Block: ...
    def input(
        self,
        value: RealNumber | NumericArray | list[Any] | tuple[Any, ...],
        name: str | None = None,
        *,
        copy: bool | None = True,
    ) -> Var | Block:
        """Record a leaf (an independent variable) holding ``value``.

        A real number gives a scalar node (``Var``); an array gives a block
        node (``Block``). ``copy`` as in :func:`fastad.var`: by default the
        block holds a float64 copy, so changing the array afterwards changes
        nothing on the tape.
        """
        node: Var | Block
        shared = _copy_flag(copy)
        if _is_array_like(value):
            node = Block(self, self._storage.push_block(optable.INPUT, _leaf_array(value, shared)))
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
        return differentiate.adjoint(self, node_id)

    def block_adjoint(self, node_id: NodeRef) -> FloatArray:
        """The adjoint array of a block node (zeros before any backward), read-only and the
        tape's own; see :func:`fastad.eager.differentiate.block_adjoint`."""
        return differentiate.block_adjoint(self, node_id)

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
        differentiate.backward(self, root, accumulate, check)

    @_holding_lock
    def gradient(
        self, root: NodeRef, wrt: Iterable[NodeRef]
    ) -> FloatArray | list[float | FloatArray]:
        """d root / d node for each node id in ``wrt``, leaving ``grad`` untouched: a float64
        array, or with blocks among ``wrt`` a list of floats and arrays; see
        :func:`fastad.eager.differentiate.gradient`."""
        return differentiate.gradient(self, root, wrt)

    @_holding_lock
    def vjp(
        self, root: NodeRef, wrt: Iterable[NodeRef], cotangent: ArrayLike
    ) -> list[float | FloatArray]:
        """``u^T J``: the cotangent ``u`` (of ``root``'s shape) pulled back to each node of
        ``wrt``, a float or an array each; see :func:`fastad.eager.differentiate.vjp`."""
        return differentiate.vjp(self, root, wrt, cotangent)

    @_holding_lock
    def tangent(
        self, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
    ) -> float | FloatArray:
        """Forward mode: d root along ``direction`` (one entry per node id in ``wrt``, which
        are perturbed as independent variables); see :func:`fastad.eager.differentiate.tangent`."""
        return differentiate.tangent(self, root, wrt, direction)

    # -- second order ------------------------------------------------------------
    @_holding_lock
    def hvp(
        self, root: NodeRef, wrt: Iterable[NodeRef], direction: Iterable[ArrayLike]
    ) -> FloatArray | list[float | FloatArray]:
        """``H v``: the Hessian of ``root`` with respect to ``wrt``, times ``direction``
        (forward-over-reverse); see :func:`fastad.eager.differentiate.hvp`."""
        return differentiate.hvp(self, root, wrt, direction)

    @_holding_lock
    def hessian(self, root: NodeRef, wrt: Iterable[NodeRef]) -> FloatArray:
        """The ``(k, k)`` Hessian of ``root`` with respect to the ``k`` scalar nodes ``wrt``;
        see :func:`fastad.eager.differentiate.hessian`."""
        return differentiate.hessian(self, root, wrt)

    # -- finding where nan/inf came from, printing ---------------------------------
    @_holding_lock
    def first_nonfinite(self, root: NodeRef | None = None) -> NonFiniteOrigin | None:
        """The first node whose value is ``nan``/``inf`` while its inputs are finite, among
        those ``root``'s value depends on (all when None); see
        :func:`fastad.eager.graph_tools.first_nonfinite`."""
        return graph_tools.first_nonfinite(self, root)

    def local_partials(self, nodes: NodeRef | Iterable[NodeRef]) -> FloatArray:
        """Local partial derivatives ``(d/d in0, d/d in1)`` of the given nodes, shape
        ``(len(nodes), 2)``; see :func:`fastad.eager.graph_tools.local_partials`."""
        return graph_tools.local_partials(self, nodes)

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
        return graph_tools.table(self, grad, start, stop, max_rows, around, context)

    def to_dot(self, root: NodeRef | None = None, max_nodes: int = 200, grad: bool = True) -> str:
        """Graphviz DOT source of the tape; see :func:`fastad.core.draw.to_dot`."""
        return graph_tools.to_dot(self, root, max_nodes, grad)

    def render(
        self, path: StrPath, root: NodeRef | None = None, max_nodes: int = 200, grad: bool = True
    ) -> pathlib.Path:
        """Render the drawing to an .svg/.png/.pdf file; see :func:`fastad.core.draw.render`."""
        return graph_tools.render(self, path, root, max_nodes, grad)

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
        """Write the tape to a NumPy ``.npz`` file at ``path`` (no pickle inside); blocks
        included: their values, their ops and the ops' parameters."""
        path = npz.file_path(path, "Tape.save")
        if not self._storage.has_blocks:
            tape_file.write(self._storage, path)
            return
        blocks = block_file.tape_members(self._storage)
        tape_file.write(self._storage, path, tape_file.BLOCK_SAVE_FORMAT, blocks)

    @classmethod
    def load(cls, path: StrPath) -> Tape:
        """Read a tape written by :meth:`save`; validated like :meth:`from_arrays`, and
        each block op's shape rule run on its operands' shapes before any value is
        computed."""
        path = npz.file_path(path, "Tape.load")
        form, data, labels = tape_file.read(path)
        if form == tape_file.BLOCK_SAVE_FORMAT:
            tape = cls()
            params = block_file.tape_params(data, str(path))
            block_file.rebuild(tape._storage, data, data, params, labels, str(path))
            return tape
        arrays = (data["opcode"], data["in0"], data["in1"], data["val"])
        try:
            return cls.from_arrays(*arrays, labels)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from None


def _is_array_like(value: object) -> bool:
    # A 0-d array is a number (fa.var(np.array(3.0)) is a scalar leaf).
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0)


def _copy_flag(copy: object) -> bool | None:
    """``copy=`` of ``fa.var``: True, False (Python's or NumPy's) or None, else a TypeError."""
    if copy is None:
        return None
    if isinstance(copy, (bool, np.bool_)):
        return bool(copy)
    raise TypeError(f"copy must be True, False or None, got {type(copy).__name__} {copy!r}")


def _leaf_array(value: object, copy: bool | None) -> FloatArray:
    """What a block leaf holds: a private copy (``copy`` True), else the caller's own
    aligned C-contiguous float64 array (a NumPy array or a subclass, such as a memory
    map) through a read-only view, which ``copy=None`` copies when it is not one and
    ``copy=False`` refuses."""
    if copy is True:
        return _block_copy(value)
    array = _real_array(value)
    flags = array.flags
    if not isinstance(value, np.ndarray):
        found = f"got a {type(value).__name__}"  # a list or a tuple: a new array
    elif array.dtype == np.float64 and flags.c_contiguous and flags.aligned:
        view = array.view(np.ndarray)
        view.flags.writeable = False  # the tape's values are read-only; the caller's stays as it is
        return view
    else:
        found = (
            f"got an array of dtype {array.dtype} and shape {array.shape}"
            + ("" if flags.c_contiguous else ", not C-contiguous")
            + ("" if flags.aligned else ", not aligned")
        )
    if copy is None:
        return _block_copy(array)
    raise ValueError(
        "fa.var(..., copy=False) keeps the caller's own array, which must be an aligned, "
        f"C-contiguous float64 NumPy array; {found}: pass copy=None to copy it only then, "
        "or convert it once with np.ascontiguousarray(x, dtype=np.float64)"
    )


def _real_array(value: object) -> np.ndarray:
    """``value`` as a NumPy array (itself where it is one) of real numbers and at least
    one dimension, else a TypeError naming its type, dtype and shape."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if is_long_double(array):
        raise not_real(value, "a block")
    if not is_real_dtype(array.dtype) or array.ndim == 0:
        raise TypeError(
            f"a block needs a real array of at least one dimension, got "
            f"{type(value).__name__} of dtype {array.dtype} and shape {array.shape}"
        )
    return array


_FLOAT64 = np.dtype(np.float64)


def _block_copy(value: object) -> FloatArray:
    """A private read-only float64 copy of array data for a block leaf or constant."""
    float64 = type(value) is np.ndarray and value.dtype == _FLOAT64 and value.ndim
    array = value if float64 else _real_array(value)  # (checked: the common case first)
    copy = np.array(array, dtype=np.float64, order="C")  # the caller cannot change it
    copy.flags.writeable = False
    return copy


def _as_float(value: Any, what: str) -> float:
    if is_long_double(value):
        raise not_real(value, what)
    if isinstance(value, np.ndarray) and value.ndim == 0 and is_real_dtype(value.dtype):
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
