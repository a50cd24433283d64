"""Node handles: ``Var`` (a scalar node) and ``Block`` (an array node), and their recorders.

A handle holds its tape, its node id and the tape generation it was
recorded in; a ``Var`` also holds its value (a Python float, so arithmetic
and comparisons on ``.value`` cost nothing extra). Every operator records
one node on the tape and computes its value at once, micrograd style; there
is no separate graph-building step.

Scalar nodes record through :func:`record` / :func:`record_unary` (the
eager rules of ``fastad/core/scalar_rules.py``); block nodes through
:func:`record_block`, which takes the op's shape rule and forward from the
registry (``fastad/core/block_rules.py``), the same forward a replay runs. The two
handle classes live in one module because each makes the other: a ``Var``
meeting an array gives a ``Block``, a ``Block``'s sum is a ``Var``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeAlias, cast, overload

import numpy as np

from fastad.core import block_rules, scalar_rules
from fastad.core.storage import as_stored
from fastad.eager.block_params import frozen_key, normal_axis, reduction
from fastad.eager.handle import (
    Node,
    ScalarNode,
    as_object,
    check_live,
    is_array,
    refuse_escape,
    tape_of,
)
from fastad.eager.operators import Operators, is_number
from fastad.kernels import optable
from fastad.util.errors import TraceError, as_float64, flag, is_int, is_long_double, not_real

if TYPE_CHECKING:
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, NumericArray, ObjectArray, RealNumber, RuleValue

    NodeRef: TypeAlias = "Node | int | np.integer[Any]"
    """A node handle or a node id, where the tape takes either (``Tape.node_id``)."""
    BlockOperand: TypeAlias = "Block | Var | RealNumber | NumericArray"
    """What combines with a ``Block`` elementwise (numbers and scalar nodes broadcast)."""
    Axes: TypeAlias = "int | tuple[int, ...] | None"
    """The axes of a reduction: one, several, or None for all."""

__all__ = ["Block", "Var", "record", "record_block", "record_unary"]

_BLOCK = optable.BLOCK_BY_NAME
MATMUL, SUM, MEAN = _BLOCK["matmul"].code, _BLOCK["sum"].code, _BLOCK["mean"].code
RESHAPE, TRANSPOSE, INDEX = _BLOCK["reshape"].code, _BLOCK["transpose"].code, _BLOCK["index"].code
MAX, MIN, PROD = _BLOCK["max"].code, _BLOCK["min"].code, _BLOCK["prod"].code
_FLOAT64 = np.dtype(np.float64)


# -- scalar nodes ------------------------------------------------------------------------------
# Only ops with operands record through here, and each has an eager rule.
_eager = cast("Sequence[Callable[[float, float], float]]", scalar_rules.EAGER)
_ieee_value = scalar_rules.ieee_value


def record_unary(code: int, x: Var) -> Var:
    """Record unary op ``code`` on the node ``x``; the value is computed now."""
    tape = x._tape
    storage = tape._storage
    if x._generation != storage.generation:
        _check_operands(x, None)
    a = x._value
    try:
        value = _eager[code](a, 0.0)
    except (ArithmeticError, ValueError):
        value = _ieee_value(code, a, 0.0)
    return Var(tape, storage.push(code, x._id, -1, value), value)


@overload
def record(code: int, x: Var, y: Var | RealNumber) -> Var: ...
@overload
def record(code: int, x: RealNumber, y: Var) -> Var: ...
@overload
def record(code: int, x: Any, y: Any) -> Var | Block | ObjectArray: ...
def record(code: int, x: Any, y: Any) -> Var | Block | ObjectArray:
    """Record binary op ``code`` on ``x`` and ``y``: nodes or numbers.

    This is the recorder's hot path (about one microsecond per node), so the
    common case is tested first and every error path is out of line.
    Numbers become constant nodes of the operand node's tape. Returns the
    new ``Var``, or ``NotImplemented`` when an operand is of an unsupported
    type so that Python raises its ``TypeError`` naming both types. NumPy
    arrays get a ``TypeError`` here: NumPy's own message would only name
    ``Var``.
    """
    # Hinted Any: one operand is a Var (the callers see to it), and narrowing
    # for the type checker here would cost the hot path a call.
    if type(x) is Var and type(y) is Var:  # the commonest case, first and straight
        tape = x._tape
        storage = tape._storage
        generation = storage.generation
        if x._generation != generation or y._generation != generation or y._tape is not tape:
            _check_operands(x, y)
        a, b = x._value, y._value
        try:
            value = _eager[code](a, b)
        except (ArithmeticError, ValueError):
            value = _ieee_value(code, a, b)
        return Var(tape, storage.push(code, x._id, y._id, value), value)
    return _record_with_number(code, x, y)


def _record_with_number(code: int, x: Any, y: Any) -> Var | Block | ObjectArray:
    """``record`` where one operand is not a ``Var``: a number becomes a constant node."""
    node = x if type(x) is Var else y
    tape = node._tape
    other = y if node is x else x
    if not is_number(other):
        return _other_operand(code, x, y, other)
    storage = tape._storage
    if node._generation != storage.generation:
        _check_operands(node, None)  # before a constant lands on the reset tape
    if node is x:
        a, b = x._value, float(y)
        i, j = x._id, storage.constant_id(b)
    else:
        a, b = float(x), y._value
        i, j = storage.constant_id(a), y._id
    try:
        value = _eager[code](a, b)
    except (ArithmeticError, ValueError):
        value = _ieee_value(code, a, b)
    return Var(tape, storage.push(code, i, j, value), value)


def _check_operands(x: Node | None, y: Node | None) -> None:
    # Only reached when a cheap test in `record` failed: say exactly what is wrong.
    for node in (x, y):
        if node is not None:
            check_live(node)
    if x is not None and y is not None and x._tape is not y._tape:
        raise ValueError(
            f"cannot combine nodes of two different tapes: {x!r} and {y!r}. "
            "Record every node of one computation on one tape."
        )


def _other_operand(code: int, x: Any, y: Any, other: object) -> Var | Block | ObjectArray:
    """A node meets something that is not a node or a number: ``other``.

    Arrays and blocks make the operation a block node (broadcasting the
    scalar); object arrays (of nodes) apply it per element, which is how the
    scalar-node path records array expressions. Anything else is Python's
    business: ``NotImplemented``, so its ``TypeError`` names both types.
    """
    if is_long_double(other):
        raise not_real(other, "an operand of a fastad node")
    if isinstance(other, Block) or (isinstance(other, np.ndarray) and other.dtype.kind in "biuf"):
        return cast("Block", elementwise(code, x, y))
    if isinstance(other, np.ndarray) and other.dtype == object:
        with np.errstate(all="ignore"):  # IEEE values per element, as for one node
            return np.frompyfunc(lambda a, b: record(code, a, b), 2, 1)(as_object(x), as_object(y))
    if isinstance(other, np.ndarray):
        raise TypeError(
            f"cannot combine a fastad Var with a NumPy ndarray of dtype {other.dtype} "
            f"and shape {other.shape}"
        )
    return NotImplemented


class Var(ScalarNode, Operators["Var", "Block"]):
    """A scalar node on a tape: its value now, its adjoint after ``backward``.

    Create leaves with :func:`fastad.var`; arithmetic between nodes and
    Python numbers records new nodes. Comparisons (``<``, ``<=``, ``==``...)
    record a node worth 1.0 or 0.0 with a zero derivative; its ``bool()`` is
    the Python truth, so ``if x > 0:`` works, and :func:`fastad.where` takes
    it as a condition. ``hash`` is identity-based, as for PyTorch tensors.

    ``float(x)``, ``int(x)``, ``round(x)``, ``math.floor(x)`` and format
    specs (``f"{x:.3f}"``) give plain numbers computed from the value: they
    carry no gradient (``math.exp(x)`` is a float, use ``fa.exp``). While
    ``fa.compile`` traces a function they raise :class:`fastad.TraceError`
    instead, and ``repr``/``str`` do not show the value, since any number
    taken out of the tape would be frozen into every replay.

    Examples
    --------
    >>> import fastad as fa
    >>> with fa.Tape():
    ...     x, y = fa.var(2.0, name="x"), fa.var(3.0, name="y")
    ...     z = (x * y + x) ** 2
    ...     z.backward()
    ...     print(z.value, x.grad, y.grad)
    64.0 64.0 32.0
    """

    __slots__ = ()
    _record = staticmethod(record)
    _record_unary = staticmethod(record_unary)
    _square_root_power = False

    def __init__(self, tape: Tape, node_id: int, value: float) -> None:
        # Node.__init__ written out: this runs once per recorded node.
        self._tape = tape
        self._id = node_id
        self._value = value
        self._generation = tape._storage.generation

    # -- what a node is -------------------------------------------------
    @property
    def value(self) -> float:
        """The value computed when the node was recorded (a Python float).

        Not available while ``fa.compile`` traces a function: a value read
        then would be frozen into the replay (see :class:`fastad.TraceError`).
        """
        if self._tape._storage.guards is not None:
            refuse_escape(self, ".value")
        return self._value

    @property
    def grad(self) -> float:
        """This node's adjoint from the last ``backward`` (0.0 before any)."""
        check_live(self)
        return self._tape.adjoint(self._id)

    def __getitem__(self, key: Any) -> Var | Block:
        """``x[()]`` and ``x[...]``: the node itself, as for a 0-d array; ``x[None]`` (and
        ``x[None, None]``, ``x[..., None]``...) a block of one element with one axis per
        ``None``. A scalar node has no axes, so any other index raises ``IndexError``."""
        parts = key if isinstance(key, tuple) else (key,)
        if all(part is None or part is Ellipsis for part in parts) and parts.count(Ellipsis) < 2:
            new_axes = parts.count(None)
            return cast("Block", _numpy.reshape(self, (1,) * new_axes)) if new_axes else self
        raise IndexError(
            f"{self!r} is a scalar node (no axes): index it with (), ... or None, not {key!r}"
        )

    # -- a 0-d array's shape and methods: what JAX gives a 0-d array argument ------------
    shape: tuple[()] = ()
    ndim = 0
    size = 1

    def reshape(self, *shape: int | Sequence[int], order: str = "C") -> Var | Block:
        """The number in ``shape``, of one element, as ``np.reshape`` of a 0-d array: the
        node itself for ``()``, else a block (``x.reshape(1)``, ``x.reshape(1, 1)``)."""
        wanted = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return cast("Var | Block", _numpy.reshape(self, wanted, order=order))

    def ravel(self) -> Block:
        """A block of the one element, shape ``(1,)``, as ``np.ravel`` of a 0-d array."""
        return cast("Block", _numpy.reshape(self, (1,)))

    flatten = ravel

    def transpose(self, *axes: Any) -> Var:
        """The node itself: a 0-d array's transpose (its axes, none, permuted)."""
        if axes not in ((), (None,), ((),)):
            raise ValueError(f"{self!r}.transpose{axes}: a scalar node has no axes to permute")
        return self

    @property
    def T(self) -> Var:
        """The node itself, as ``ndarray.T`` of a 0-d array."""
        return self

    def squeeze(self, axis: Axes = None) -> Var:
        """The node itself (no axis of length 1 to remove; any axis named is refused)."""
        return self._reduced("squeeze", axis, False)

    def item(self) -> Var:
        """The node itself, as ``Block.item`` gives the element of a block of one."""
        return self

    def copy(self) -> Var:
        """The node itself: a node's value never changes (see ``Block.copy``)."""
        return self

    def astype(self, dtype: Any) -> Var:
        """The node itself for float64; another type raises, as ``Block.astype``."""
        _float64_only(self, dtype)
        return self

    def var(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Var:
        """The variance of one number, ``(x - x)**2 / (1 - ddof)``: 0 (nan for ``ddof=1``),
        with the derivative ``Block.var`` gives a slice of one element (0)."""
        self._reduced("var", axis, keepdims)
        centred = self - self
        squares = centred * centred
        return squares if ddof == 0 else squares / float(max(1 - ddof, 0))

    def std(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Var:
        """``sqrt(var)``; see :meth:`var`."""
        return self.var(axis, ddof, keepdims) ** 0.5

    def cumsum(self, axis: int | None = None) -> Block:
        """A block of the one element, shape ``(1,)``, as ``np.cumsum`` of a 0-d array."""
        self._reduced("cumsum", axis, False)
        return self.ravel()

    # One number, not a sequence: iter() and list() raise TypeError, as for a 0-d array
    # (without this, iteration would call __getitem__(0) and stop at its IndexError).
    __iter__ = None

    # NumPy's reductions over all (none) of a scalar's axes: the node itself.
    def sum(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Var:
        """``x.sum()``: the node itself (a scalar node has no axes to reduce)."""
        return self._reduced("sum", axis, keepdims, options)

    def mean(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Var:
        """``x.mean()``: the node itself (a scalar node has no axes to reduce)."""
        return self._reduced("mean", axis, keepdims, options)

    def prod(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Var:
        """``x.prod()``: the node itself (a scalar node has no axes to reduce)."""
        return self._reduced("prod", axis, keepdims, options)

    def max(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Var:
        """``x.max()``: the node itself (a scalar node has no axes to reduce)."""
        return self._reduced("max", axis, keepdims, options)

    def min(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Var:
        """``x.min()``: the node itself (a scalar node has no axes to reduce)."""
        return self._reduced("min", axis, keepdims, options)

    def _reduced(
        self, method: str, axis: object, keepdims: object, options: dict[str, Any] | None = None
    ) -> Var:
        """A reduction over no axes; any axis, or keepdims, is refused, naming it. With
        NumPy's other keywords (``where=``, ``initial=``), ``np.<method>`` of the node."""
        if options:
            return cast("Var", getattr(_numpy, method)(self, axis, keepdims=keepdims, **options))
        if not (axis is None or (isinstance(axis, tuple) and not axis)):
            kind = np.exceptions.AxisError if is_int(axis) else TypeError  # AxisError: a ValueError
            raise kind(
                f"{self!r}.{method}(axis={axis!r}): a scalar node has no axes (axis=None or ())"
            )
        if flag(keepdims, "keepdims"):
            raise ValueError(
                f"{self!r}.{method}(keepdims=True): a scalar node has no axes to keep; "
                "the node is its own reduction"
            )
        return self

    def backward(self, accumulate: bool = False, check: bool = False) -> None:
        """Reverse sweep from this node: every node's ``.grad`` becomes d self / d node.

        Parameters
        ----------
        accumulate : bool
            False (the default): adjoints are zeroed first, so calling
            ``backward`` twice gives the same gradients twice. True: the new
            adjoints are *added* to the existing ones (gradient accumulation
            over several outputs or mini-batches); call
            ``tape.zero_grad()`` to start again.
        check : bool
            Raise :class:`fastad.NonFiniteError` naming the first node that
            made a ``nan``/``inf`` from finite inputs, in the values or in
            the gradient.
        """
        check_live(self)
        self._tape.backward(self._id, accumulate=accumulate, check=check)

    def __repr__(self) -> str:
        # Never raises: error messages use it. While tracing it shows no
        # value, so str(x) cannot smuggle the traced number into the replay.
        value = "traced" if self._tape._storage.guards is not None else repr(self._value)
        if self._generation != self._tape._storage.generation:
            return f"Var({value}, id={self._id}, stale)"
        label = self._tape._storage.label(self._id)
        named = f", name={label!r}" if label else ""
        return f"Var({value}{named}, id={self._id})"


_numpy: Any = np
"""NumPy, for its functions called on nodes (``__array_function__`` records them); its type
stubs know arrays only."""


def _float64_only(node: Var | Block, dtype: Any) -> None:
    """``node.astype(dtype)``'s check: float64, the one type fastad computes in."""
    if np.dtype(dtype) != np.float64:
        raise TypeError(
            f"fastad computes in float64 only; {node!r}.astype({np.dtype(dtype)}) is not "
            f"recorded. Use x.value.astype({np.dtype(dtype)}) for a NumPy array of the "
            "values (no gradient flows through it)"
        )


def as_operand(tape: Tape, x: Any, what: str = "operand") -> Var | Block:
    """A node for ``x``: nodes pass through, numbers and arrays become constants."""
    if isinstance(x, Node):
        return cast("Var | Block", x)
    if type(x) is np.ndarray and x.dtype == _FLOAT64 and x.ndim:  # data: the common case
        return tape.block_constant(x)
    if is_number(x):  # Python and NumPy reals, 0-d arrays included
        return tape.constant(x)
    if is_array(x):
        return tape.block_constant(x)
    if is_long_double(x):
        raise not_real(x, f"a fastad {what}")
    shape = f" of shape {np.shape(x)} and dtype {x.dtype}" if hasattr(x, "dtype") else ""
    raise TypeError(f"cannot use {type(x).__name__}{shape} as a fastad {what}")


def _append(tape: Tape, code: int, nodes: tuple[Var | Block, ...], params: object) -> Var | Block:
    """Append block op ``code`` on live nodes of ``tape``: shape rule, forward, push.

    The forward is the registry's, the one a replay runs, so recording and
    replay agree bit for bit. A shape of ``()`` gives a scalar node.
    """
    # Every block op an eager program records passes here: one pass over the
    # operands, no helper calls but the rule's own.
    storage = tape._storage
    generation, block_values = storage.generation, storage.blocks.values
    values: list[RuleValue] = []
    shapes: list[tuple[int, ...]] = []
    ids: list[int] = []
    for node in nodes:
        if node._generation != generation:
            check_live(node)  # raises: a stale handle's id names another node now
        node_id = node._id
        ids.append(node_id)
        if type(node) is Var:
            values.append(node._value)
            shapes.append(())
        else:
            value = block_values[node_id]
            values.append(value)
            shapes.append(value.shape)
    entry = block_rules.rule(code)
    operands = tuple(values)
    shape = entry.shape(tuple(shapes), params)
    result = entry.forward(operands, params)
    saved = None
    if entry.saves:
        result, saved = result
    if shape == ():
        scalar = float(result)
        return Var(tape, storage.push_block_op(code, tuple(ids), scalar, params, saved), scalar)
    array = as_stored(result)
    if array.shape != shape:
        raise AssertionError(
            f"block rule {entry.name!r} computed shape {array.shape}, its shape rule says {shape}"
        )
    return Block(tape, storage.push_block_op(code, tuple(ids), array, params, saved))


def record_block(
    code: int, operands: tuple[object, ...], params: object = None, what: str = "operand"
) -> Var | Block:
    """Record block op ``code`` on ``operands`` (nodes, numbers or arrays of one tape).

    Numbers and arrays become constants. Returns the new node: a ``Block``,
    or a ``Var`` where the op gives a scalar (a sum, a dot product, a loss).
    """
    tape = tape_of(*operands)
    if tape is None:
        raise TypeError(f"no fastad node among the operands of {optable.ALL[code].name}")
    return record_block_on(tape, code, operands, params, what)


def record_block_on(
    tape: Tape, code: int, operands: tuple[object, ...], params: object, what: str
) -> Var | Block:
    """``record_block`` where ``tape = tape_of(*operands)`` is known already."""
    nodes = tuple([as_operand(tape, x, what) for x in operands])
    return _append(tape, code, nodes, params)


def compute_block(code: int, operands: tuple[Any, ...], params: object = None) -> Any:
    """What op ``code`` gives on plain arrays and numbers: the same rule, nothing recorded."""
    entry = block_rules.rule(code)
    arrays = [as_float64(x, "an operand") for x in operands]
    values = tuple(float(x) if x.ndim == 0 else np.ascontiguousarray(x) for x in arrays)
    entry.shape(tuple(np.shape(value) for value in values), params)
    return entry.value_of(values, params)


def elementwise(code: int, *operands: Any) -> Block | Var | FloatArray | float:
    """Record (or compute) scalar op ``code`` elementwise, with NumPy broadcasting.

    ``operands`` are nodes, numbers and arrays, as many as the op takes.
    Without any node among them the result is a plain array (or float);
    with scalar nodes and numbers only, a scalar node (``record``).
    """
    arity = optable.OPS[code].arity
    if len(operands) != arity:
        raise TypeError(f"{optable.OPS[code].name} takes {arity} operand(s), got {len(operands)}")
    # The common case first, with nothing to convert: blocks of one tape (``_append``
    # checks that each is live).
    first = operands[0]
    if type(first) is Block and all(
        [type(x) is Block and x._tape is first._tape for x in operands]
    ):
        return _append(first._tape, code, operands, None)
    tape = tape_of(*operands)
    if tape is None:  # plain arrays and numbers: compute, record nothing
        out = compute_block(code, operands)
        return out if out.ndim else float(out)
    if Block not in [type(v) for v in operands]:
        # A 0-d array beside scalar nodes is a number (as_operand records it as one).
        operands = tuple([float(v) if is_array(v) and v.ndim == 0 else v for v in operands])
        if not any(map(is_array, operands)):
            # Scalar nodes and numbers only: a scalar node, not a block op with a scalar value.
            return record(code, *operands) if arity == 2 else record_unary(code, operands[0])
    nodes = tuple([as_operand(tape, v) for v in operands])
    return cast("Block", _append(tape, code, nodes, None))


# Typed as NumPy types ndarray @ ndarray: a block, though two vectors give a
# scalar node, as two 1-D arrays give a NumPy scalar; the hints cannot see ranks.
@overload
def matmul(x: Block, y: Block | NumericArray) -> Block: ...
@overload
def matmul(x: Block | NumericArray, y: Block) -> Block: ...
@overload
def matmul(x: Any, y: Any) -> Any: ...
def matmul(x: Any, y: Any) -> Any:
    """``x @ y`` with NumPy's rules (vectors, batch axes that broadcast); a scalar node
    for two vectors (typed as a block, as NumPy types a product of two arrays)."""
    if tape_of(x, y) is None:  # in float64, as fastad's other functions of plain arrays
        return np.matmul(as_float64(x, "fa.matmul's operand"), as_float64(y, "fa.matmul's operand"))
    return record_block(MATMUL, (x, y), None, "matmul operand")


# -- block nodes ---------------------------------------------------------------------------------
class Block(Node, Operators["Block", "Block"]):
    """An array node on a tape: its value now, its gradient after ``backward``.

    Create leaves with ``fa.var(array)``. Elementwise operators and the
    functions of ``fastad`` broadcast like NumPy; ``@``, ``sum``, ``mean``,
    ``max``, ``min``, ``reshape``, ``T``/``transpose`` and indexing record block nodes;
    reductions and integer indexing to a single element give scalar nodes.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> with fa.Tape():
    ...     X = fa.var(np.array([[10.0, 20, 30], [40, 50, 60]]))
    ...     b = fa.var(np.array([1.0, 2, 3]))
    ...     L = ((X + b) * np.array([[1.0, 0, 2], [3, 1, 0]])).sum()
    ...     L.backward()
    ...     print(b.grad)
    [4. 1. 2.]
    """

    __slots__ = ()
    _record = staticmethod(elementwise)
    _record_unary = staticmethod(elementwise)
    _square_root_power = True

    # -- what it is --------------------------------------------------------------
    @property
    def value(self) -> FloatArray:
        """The array value (read-only).

        Not available while ``fa.compile`` traces a function: the array
        would be frozen into every replay (see :class:`fastad.TraceError`).
        """
        if self._tape._storage.guards is not None:
            raise TraceError(
                f".value of {self!r} while fa.compile traces the function: the array would "
                "be frozen into every replay. Keep computing with fastad operations."
            )
        return _array(self)

    @property
    def shape(self) -> tuple[int, ...]:
        return _array(self).shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return _array(self).size

    @property
    def grad(self) -> FloatArray:
        """d root / d block from the last ``backward`` (zeros before any), shaped like the
        value; read-only, like ``.value`` (``.copy()`` it to change it)."""
        check_live(self)
        return self._tape.block_adjoint(self._id)

    def __repr__(self) -> str:
        # Never raises: error messages about stale nodes use it.
        if self._generation != self._tape._storage.generation:
            return f"Block(id={self._id}, stale)"
        label = self._tape._storage.label(self._id)
        named = f", name={label!r}" if label else ""
        shape = self._tape._storage.blocks.values[self._id].shape
        return f"Block(shape={shape}{named}, id={self._id})"

    def __len__(self) -> int:
        return self.shape[0]

    if TYPE_CHECKING:
        # To type checkers a block is array-like, so that NumPy's functions that
        # record on blocks through __array_function__ (np.sum(X, axis=0),
        # np.concatenate, ...) type-check; at run time the conversion itself raises.
        def __array__(self, dtype: None = None, copy: bool | None = None) -> FloatArray: ...

    else:

        def __array__(self, dtype=None, copy=None):
            # Without this NumPy would iterate the block (it has __len__ and
            # __getitem__) into an object array of one index node per element.
            raise TypeError(
                f"cannot convert {self!r} to a NumPy array: that would drop it from the tape. "
                "Use the fastad operation (np.sum, np.reshape, np.concatenate... on blocks "
                "record one), fa.stack for a list of blocks, or .value for the numbers "
                "(no gradient)"
            )

    def __bool__(self) -> NoReturn:
        raise TypeError(f"the truth value of {self!r} is ambiguous: reduce it first")

    def backward(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"backward needs a scalar output, {self!r} is an array: reduce it first "
            "(e.g. X.sum()) or use a fused loss such as fa.mse_loss; to pull a cotangent G "
            "of its shape back (PyTorch's Y.backward(G)), Y.tape.vjp(Y, [leaves...], G) "
            "returns the leaves' gradients"
        )

    # -- structure -----------------------------------------------------------------------
    def __matmul__(self, other: Block | NumericArray) -> Block:
        return matmul(self, other)

    def __rmatmul__(self, other: Block | NumericArray) -> Block:
        return matmul(other, self)

    def __getitem__(self, key: Any) -> Block | Var:
        """``x[key]``: a scalar node for a single element, a block otherwise."""
        value = _array(self)
        parts = key if isinstance(key, tuple) else (key,)
        node = next((part for part in parts if isinstance(part, Node)), None)
        if node is not None:
            raise TypeError(
                f"cannot index {self!r} with the node {node!r}: an index is fixed when the op "
                "is recorded, so it is numbers (ints, slices, integer or boolean arrays); in "
                "fa.grad and co. an int argument (a 0-d int array too) is static and indexes "
                "as itself; for class labels use fa.cross_entropy(logits, labels)"
            )
        try:
            value[key]
        except (IndexError, TypeError) as error:
            message = f"cannot index {self!r} of shape {value.shape} with {key!r}: {error}"
            raise type(error)(message) from None
        return _append(self._tape, INDEX, (self,), frozen_key(key))

    @overload
    def sum(self, axis: None = None, keepdims: Literal[False] = False, **options: Any) -> Var: ...
    @overload
    def sum(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var: ...
    def sum(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var:
        """Sum over ``axis`` (an int, a tuple of them, or None for all), as ``np.sum``.

        All axes without ``keepdims`` give a scalar node (a ``Var``).
        """
        return self._reduce(SUM, "sum", axis, keepdims, options)

    @overload
    def mean(self, axis: None = None, keepdims: Literal[False] = False, **options: Any) -> Var: ...
    @overload
    def mean(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var: ...
    def mean(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var:
        """Mean over ``axis``, as ``np.mean`` (nan, silently, for no elements); see :meth:`sum`."""
        return self._reduce(MEAN, "mean", axis, keepdims, options)

    @overload
    def max(self, axis: None = None, keepdims: Literal[False] = False, **options: Any) -> Var: ...
    @overload
    def max(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var: ...
    def max(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var:
        """Largest element over ``axis``, as ``np.max``; see :meth:`sum`.

        NumPy's value (nan if any element is nan). The gradient goes to the
        elements equal to the result, split evenly among ties, as ``torch.amax``.
        """
        return self._reduce(MAX, "max", axis, keepdims, options)

    @overload
    def min(self, axis: None = None, keepdims: Literal[False] = False, **options: Any) -> Var: ...
    @overload
    def min(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var: ...
    def min(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var:
        """Smallest element over ``axis``; see :meth:`max`."""
        return self._reduce(MIN, "min", axis, keepdims, options)

    @overload
    def prod(self, axis: None = None, keepdims: Literal[False] = False, **options: Any) -> Var: ...
    @overload
    def prod(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var: ...
    def prod(self, axis: Axes = None, keepdims: bool = False, **options: Any) -> Block | Var:
        """Product over ``axis``, as ``np.prod``; see :meth:`sum`.

        An element's derivative is the product of the others in its slice,
        exact at zeros (computed without dividing by the result).
        """
        return self._reduce(PROD, "prod", axis, keepdims, options)

    @overload
    def var(self, axis: None = None, ddof: int = 0, keepdims: Literal[False] = False) -> Var: ...
    @overload
    def var(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Block | Var: ...
    def var(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Block | Var:
        """Variance over ``axis``, as ``np.var``: ``sum((x - mean)**2) / (n - ddof)``.

        Recorded as those blocks (a mean, a subtraction, a square and a
        sum), so its gradient is theirs: ``2 (x - mean) / (n - ddof)``.
        """
        count = reduction(self.shape, axis, keepdims, self).count(self.shape)
        centred = self - self.mean(axis, keepdims=True)
        if ddof == 0:  # the count read at run time: a compiled batch= function takes any rows
            return (centred * centred).mean(axis, keepdims)
        squares = (centred * centred).sum(axis, keepdims)
        return squares / float(max(count - ddof, 0))  # as NumPy: inf or nan past n

    @overload
    def std(self, axis: None = None, ddof: int = 0, keepdims: Literal[False] = False) -> Var: ...
    @overload
    def std(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Block | Var: ...
    def std(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Block | Var:
        """Standard deviation, ``sqrt(var)``; see :meth:`var`.

        Where every element of a slice is equal the derivative is 0 (the
        squares' zero partials are strong zeros), where PyTorch gives nan.
        """
        variance = self.var(axis, ddof, keepdims)
        return variance**0.5

    @overload
    def reshape(self, shape: tuple[()], /, *, order: str = "C") -> Var: ...  # type: ignore[overload-overlap]
    @overload
    def reshape(self, *shape: int | Sequence[int], order: str = "C") -> Block: ...
    def reshape(self, *shape: int | Sequence[int], order: str = "C") -> Block | Var:
        """The same elements in ``shape`` (one ``-1`` is inferred), as ``np.reshape``.

        The shape ``()`` (one element) gives a scalar node: the element itself. Blocks
        are C-ordered: ``order="F"`` is refused.
        """
        if order != "C":
            raise TypeError(
                f"{self!r}.reshape(..., order={order!r}) is not recorded: blocks are C-ordered "
                "(order='C'); x.T.reshape(shape[::-1]).T reads the elements in Fortran order"
            )
        wanted = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        try:
            new_shape = np.empty(self.shape, dtype=np.bool_).reshape(wanted).shape
        except (ValueError, TypeError) as error:
            raise type(error)(
                f"cannot reshape {self!r} of shape {self.shape} to {wanted}: {error}"
            ) from None
        if not new_shape:
            return self._element()
        return cast("Block", _append(self._tape, RESHAPE, (self,), new_shape))

    def _element(self) -> Var:
        """The only element of a block of one element, as a scalar node (its value and
        sign of zero kept: an index, not a sum)."""
        return cast("Var", self[(0,) * self.ndim])

    def ravel(self) -> Block:
        """The elements as one axis (a copy), as ``np.ravel``."""
        return self.reshape(-1)

    flatten = ravel

    def transpose(self, *axes: int | Sequence[int] | None) -> Block:
        """The axes permuted: reversed without ``axes`` (``x.T``), else in the order given."""
        if not axes or axes == (None,):
            return cast("Block", _append(self._tape, TRANSPOSE, (self,), None))
        order = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        normalised = tuple(normal_axis(self.shape, a, self) for a in order)
        if sorted(normalised) != list(range(self.ndim)):
            raise ValueError(
                f"axes {tuple(order)} are not a permutation of the {self.ndim} axes of {self!r}"
            )
        return cast("Block", _append(self._tape, TRANSPOSE, (self,), normalised))

    @property
    def T(self) -> Block:
        """The axes reversed, as ``ndarray.T``."""
        return self.transpose()

    def squeeze(self, axis: Axes = None) -> Block | Var:
        """The block without its axes of length 1 (only ``axis``, which must have length
        1, where given), as ``np.squeeze``; a scalar node where no axis is left."""
        shape = self.shape
        if axis is None:
            dropped = {t for t, n in enumerate(shape) if n == 1}
        else:
            dropped = set(reduction(shape, axis, False, self).axes or ())
            longer = [t for t in sorted(dropped) if shape[t] != 1]
            if longer:
                raise ValueError(
                    f"cannot squeeze axis {longer[0]} (axis={axis!r}) of {self!r}: it has length "
                    f"{shape[longer[0]]}, not 1"
                )
        kept = tuple(n for t, n in enumerate(shape) if t not in dropped)
        if not kept:
            return self._element()
        return self.reshape(kept)

    def clip(self, min: Any = None, max: Any = None) -> Block:  # noqa: A002 - NumPy's names
        """The block limited to ``[min, max]`` (either or both may be None), as
        :func:`fastad.clip`: ``minimum(maximum(x, min), max)``."""
        lower = self if min is None else elementwise(_MAXIMUM, self, min)
        return cast("Block", lower if max is None else elementwise(_MINIMUM, lower, max))

    def dot(self, other: Block | NumericArray) -> Block | Var:
        """``np.dot(self, other)``, as ``ndarray.dot``."""
        return cast("Block | Var", np.dot(self, other))

    # ndarray's methods that are NumPy functions of the block: each calls the function, so
    # the method and the function are one recorded composition.
    def argmax(self, axis: int | None = None, *, keepdims: bool = False) -> Any:
        """``np.argmax(self, ...)``: NumPy's integers of the values (refused while tracing)."""
        return np.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, *, keepdims: bool = False) -> Any:
        """``np.argmin(self, ...)``: NumPy's integers of the values (refused while tracing)."""
        return np.argmin(self, axis=axis, keepdims=keepdims)

    def argsort(self, axis: int = -1, kind: Any = None) -> Any:
        """``np.argsort(self, ...)``: NumPy's integers of the values (refused while tracing)."""
        return np.argsort(self, axis=axis, kind=kind)

    def cumsum(self, axis: int | None = None) -> Block:
        """``np.cumsum(self, axis)``: the running sums."""
        return cast("Block", np.cumsum(self, axis=axis))

    def cumprod(self, axis: int | None = None) -> Block:
        """``np.cumprod(self, axis)``: the running products."""
        return cast("Block", np.cumprod(self, axis=axis))

    def repeat(self, repeats: Any, axis: int | None = None) -> Block:
        """``np.repeat(self, repeats, axis)``."""
        return cast("Block", np.repeat(self, repeats, axis=axis))

    def swapaxes(self, axis1: int, axis2: int) -> Block:
        """``np.swapaxes(self, axis1, axis2)``."""
        return cast("Block", np.swapaxes(self, axis1, axis2))

    def take(
        self, indices: Any, axis: int | None = None, out: Any = None, mode: str = "raise"
    ) -> Any:
        """``np.take(self, indices, axis)``."""
        return np.take(self, indices, axis, out, mode)  # type: ignore[call-overload]

    def _reduce(
        self, code: int, method: str, axis: Axes, keepdims: bool, options: dict[str, Any]
    ) -> Block | Var:
        """Block op ``code`` over ``axis``; with NumPy's other keywords (``where=``,
        ``initial=``, ``dtype=``, ``out=``), ``np.<method>`` of the block, which takes them."""
        if options:
            return cast(
                "Block | Var", getattr(_numpy, method)(self, axis, keepdims=keepdims, **options)
            )
        return _append(self._tape, code, (self,), reduction(self.shape, axis, keepdims, self))

    @property
    def mT(self) -> Block:  # noqa: N802 - NumPy's name
        """The last two axes swapped (a stack of matrices transposed), as ``ndarray.mT``."""
        if self.ndim < 2:
            raise ValueError(f"{self!r}.mT needs at least two axes, it has {self.ndim}")
        return self.swapaxes(-1, -2)

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Block:
        """``np.diagonal(self, ...)``."""
        return cast("Block", np.diagonal(self, offset, axis1, axis2))

    def trace(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Var:
        """``np.trace(self, ...)``."""
        return cast("Var", np.trace(self, offset, axis1, axis2))

    def item(self) -> Var:
        """The one element as a scalar node, as ``ndarray.item`` (a block of size 1)."""
        if self.size != 1:
            raise ValueError(
                f"item() needs a block of one element; {self!r} has {self.size}. "
                "Index it (X[i, j]) for one element as a scalar node"
            )
        return self.sum()

    def tolist(self) -> NoReturn:
        """Refused: a list of Python numbers leaves the tape. ``X.value.tolist()`` gives the
        numbers (no gradient)."""
        raise TypeError(
            f"{self!r}.tolist() would leave the tape: use X.value.tolist() for the numbers "
            "(no gradient flows through them)"
        )

    def copy(self) -> Block:
        """The block itself: a node's value never changes, so it needs no copy (as a
        JAX array's)."""
        return self

    def astype(self, dtype: Any) -> Block:
        """The block itself for float64, the one type fastad computes in; another type
        raises (``x.value.astype(dtype)`` gives a NumPy copy)."""
        _float64_only(self, dtype)
        return self


_MAXIMUM, _MINIMUM = optable.BY_NAME["maximum"].code, optable.BY_NAME["minimum"].code


def _array(block: Block) -> FloatArray:
    """A block's array (``.value`` refuses while tracing; recording and rules may read it)."""
    check_live(block)
    return block._tape._storage.blocks.values[block._id]
