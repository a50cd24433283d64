"""``Var``: a handle to one node of a tape, with Python operator overloading.

A ``Var`` holds its tape, its node id and its value (a Python float, so
arithmetic and comparisons on ``.value`` cost nothing extra). Every
arithmetic operator records one node on the tape and computes its value at
once, micrograd style; there is no separate graph-building step.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, cast, overload

import numpy as np

from fastad import rules
from fastad.errors import StaleNodeError, TraceError
from fastad.kernels import optable

if TYPE_CHECKING:
    from fastad._typing import NumericArray, ObjectArray, RealNumber
    from fastad.blocks import Block
    from fastad.tape import Tape

    ScalarOperand: TypeAlias = "Var | RealNumber"
    """What combines with a ``Var`` into a ``Var``."""
    ArrayOperand: TypeAlias = "Block | NumericArray"
    """What combines with a ``Var`` into a ``Block`` (the scalar is broadcast)."""
    NodeRef: TypeAlias = "Node | int | np.integer[Any]"
    """A node handle or a node id, where the tape takes either (``Tape.node_id``)."""

_op = optable.BY_NAME
ADD, SUB, MUL, DIV = _op["add"].code, _op["sub"].code, _op["mul"].code, _op["div"].code
NEG, POW, ABS = _op["neg"].code, _op["pow"].code, _op["abs"].code
LT, LE, GT, GE = _op["lt"].code, _op["le"].code, _op["gt"].code, _op["ge"].code
EQ, NE = _op["eq"].code, _op["ne"].code


def is_number(x: object) -> bool:
    """True for real Python/NumPy scalars (0-d arrays too) that may appear beside a node."""
    return (
        type(x) is float
        or type(x) is int
        or isinstance(x, numbers.Real)
        or (isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf")
    )


def check_live(node: Node) -> None:
    """Raise ``StaleNodeError`` if ``node``'s tape (a Var's or a Block's) was reset since."""
    if node._generation != node._tape._generation:
        raise StaleNodeError(
            f"{node!r} belongs to a tape that was reset after the node was "
            f"recorded; its id may now name a different node. Record it again."
        )


def _check_operands(x: Node, y: Node | None) -> None:
    # Only reached when a cheap test in `record` failed: say exactly what is wrong.
    check_live(x)
    if y is not None:
        check_live(y)
        if x._tape is not y._tape:
            raise ValueError(
                f"cannot combine nodes of two different tapes: {x!r} and {y!r}. "
                "Record every node of one computation on one tape."
            )


# Only ops with operands record through here, and each has an eager rule.
_eager = cast("Sequence[Callable[[float, float], float]]", rules.EAGER)
_ieee_value = rules.ieee_value


def record_unary(code: int, x: Var) -> Var:
    """Record unary op ``code`` on the node ``x``; the value is computed now."""
    tape = x._tape
    if x._generation != tape._generation:
        _check_operands(x, None)
    a = x._value
    try:
        value = _eager[code](a, 0.0)
    except (ArithmeticError, ValueError):
        value = _ieee_value(code, a, 0.0)
    return tape.append(code, x._id, -1, value)


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
    if type(x) is Var:
        tape = x._tape
        if type(y) is not Var:
            if not is_number(y):
                return _other_operand(code, x, y, y)
            y = tape.constant(y)
    else:
        tape = y._tape
        if not is_number(x):
            return _other_operand(code, x, y, x)
        x = tape.constant(x)
    generation = tape._generation
    if x._generation != generation or y._generation != generation or y._tape is not tape:
        _check_operands(x, y)
    a, b = x._value, y._value
    try:
        value = _eager[code](a, b)
    except (ArithmeticError, ValueError):
        value = _ieee_value(code, a, b)
    return tape.append(code, x._id, y._id, value)


def _other_operand(code: int, x: Any, y: Any, other: object) -> Var | Block | ObjectArray:
    """A node meets something that is not a node or a number: ``other``.

    Arrays and blocks make the operation a block node (broadcasting the
    scalar); object arrays (of nodes) apply it per element, which is how the
    scalar-node path records array expressions. Anything else is Python's
    business: ``NotImplemented``, so its ``TypeError`` names both types.
    """
    from fastad import blocks

    if isinstance(other, blocks.Block) or (
        isinstance(other, np.ndarray) and other.dtype.kind in "biuf"
    ):
        return blocks.elementwise(code, x, y)
    if isinstance(other, np.ndarray) and other.dtype == object:
        with np.errstate(all="ignore"):  # IEEE values per element, as for one node
            return np.frompyfunc(lambda a, b: record(code, a, b), 2, 1)(as_object(x), as_object(y))
    if isinstance(other, np.ndarray):
        raise TypeError(
            f"cannot combine a fastad Var with a NumPy ndarray of dtype {other.dtype} "
            f"and shape {other.shape}"
        )
    return NotImplemented


def as_object(x: object) -> object:
    """``x`` for NumPy's object-array machinery: a node becomes a 0-d object array.

    Handed to ``np.frompyfunc`` as it is, a node is refused (its
    ``__array_ufunc__ = None`` keeps NumPy from building object arrays
    behind our back), so ``scalar_nodes(X) * s`` needs it wrapped.
    """
    if isinstance(x, Node):
        wrapped = np.empty((), dtype=object)
        wrapped[()] = x
        return wrapped
    return x


class Node:
    """What every node handle has: its tape, its id, and the tape generation
    it was recorded in (a reset tape makes older handles stale)."""

    __slots__ = ("_tape", "_id", "_generation")
    _tape: Tape
    _id: int
    _generation: int

    # Let NumPy defer to us: `array * node` comes to our reflected operators
    # instead of building an object array of nodes behind our back.
    __array_ufunc__ = None

    def __init__(self, tape: Tape, node_id: int) -> None:
        self._tape = tape
        self._id = node_id
        self._generation = tape._generation

    @property
    def id(self) -> int:
        """The node id: its row in the tape's arrays."""
        return self._id

    @property
    def tape(self) -> Tape:
        """The :class:`fastad.Tape` this node was recorded on."""
        return self._tape

    @property
    def op(self) -> str:
        """The op's name in the op table (``'input'`` for a leaf)."""
        check_live(self)
        return self._tape.op_name(self._id)

    @property
    def name(self) -> str | None:
        """The label shown in tables and drawings, or None."""
        check_live(self)
        return self._tape._labels.get(self._id)

    @name.setter
    def name(self, label: str) -> None:
        check_live(self)
        self._tape._labels[self._id] = str(label)


class Var(Node):
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

    __slots__ = ("_value",)
    _value: float

    def __init__(self, tape: Tape, node_id: int, value: float) -> None:
        # Node.__init__ written out: this runs once per recorded node.
        self._tape = tape
        self._id = node_id
        self._value = value
        self._generation = tape._generation

    # -- what a node is -------------------------------------------------
    @property
    def value(self) -> float:
        """The value computed when the node was recorded (a Python float).

        Not available while ``fa.compile`` traces a function: a value read
        then would be frozen into the replay (see :class:`fastad.TraceError`).
        """
        if self._tape._guards is not None:
            _escape(self, ".value")
        return self._value

    @property
    def grad(self) -> float:
        """This node's adjoint from the last ``backward`` (0.0 before any)."""
        check_live(self)
        return self._tape.adjoint(self._id)

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

    # -- Python protocol --------------------------------------------------
    def __float__(self) -> float:
        if self._tape._guards is not None:
            _escape(self, "float()")
        return self._value

    def __int__(self) -> int:
        if self._tape._guards is not None:
            _escape(self, "int()")
        return int(self._value)

    @overload
    def __round__(self, ndigits: None = None) -> int: ...
    @overload
    def __round__(self, ndigits: int) -> float: ...
    def __round__(self, ndigits: int | None = None) -> int | float:
        if self._tape._guards is not None:
            _escape(self, "round()")
        return round(self._value, ndigits)

    def __trunc__(self) -> int:
        if self._tape._guards is not None:
            _escape(self, "math.trunc()")
        return math.trunc(self._value)

    def __floor__(self) -> int:
        if self._tape._guards is not None:
            _escape(self, "math.floor()")
        return math.floor(self._value)

    def __ceil__(self) -> int:
        if self._tape._guards is not None:
            _escape(self, "math.ceil()")
        return math.ceil(self._value)

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        if self._tape._guards is not None:
            _escape(self, f"format spec {spec!r}")
        return format(self._value, spec)

    def __bool__(self) -> bool:
        # `if x > 0:` lands here. While fa.compile traces, the outcome is
        # recorded as a guard that every replay re-checks.
        truth = self._value != 0.0
        guards = self._tape._guards
        if guards is not None:
            guards.append((self._id, truth))
        return truth

    def __repr__(self) -> str:
        # Never raises: error messages use it. While tracing it shows no
        # value, so str(x) cannot smuggle the traced number into the replay.
        value = "traced" if self._tape._guards is not None else repr(self._value)
        if self._generation != self._tape._generation:
            return f"Var({value}, id={self._id}, stale)"
        label = self._tape._labels.get(self._id)
        named = f", name={label!r}" if label else ""
        return f"Var({value}{named}, id={self._id})"

    def __hash__(self) -> int:
        return id(self)

    # Comparisons record a node worth 1.0 or 0.0 (zero derivative): `bool()`
    # of it drives Python control flow, and `fa.where` takes it as a condition.
    @overload
    def __eq__(self, other: ScalarOperand) -> Var: ...  # type: ignore[overload-overlap]
    @overload
    def __eq__(self, other: ArrayOperand) -> Block: ...  # type: ignore[overload-overlap]
    @overload
    def __eq__(self, other: object) -> bool: ...  # Python's fallback: identity
    def __eq__(self, other: object) -> Var | Block | ObjectArray | bool:
        return record(EQ, self, other)

    @overload
    def __ne__(self, other: ScalarOperand) -> Var: ...  # type: ignore[overload-overlap]
    @overload
    def __ne__(self, other: ArrayOperand) -> Block: ...  # type: ignore[overload-overlap]
    @overload
    def __ne__(self, other: object) -> bool: ...  # Python's fallback: identity
    def __ne__(self, other: object) -> Var | Block | ObjectArray | bool:
        return record(NE, self, other)

    @overload
    def __lt__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __lt__(self, other: ArrayOperand) -> Block: ...
    def __lt__(self, other: object) -> Var | Block | ObjectArray:
        return record(LT, self, other)

    @overload
    def __le__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __le__(self, other: ArrayOperand) -> Block: ...
    def __le__(self, other: object) -> Var | Block | ObjectArray:
        return record(LE, self, other)

    @overload
    def __gt__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __gt__(self, other: ArrayOperand) -> Block: ...
    def __gt__(self, other: object) -> Var | Block | ObjectArray:
        return record(GT, self, other)

    @overload
    def __ge__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __ge__(self, other: ArrayOperand) -> Block: ...
    def __ge__(self, other: object) -> Var | Block | ObjectArray:
        return record(GE, self, other)

    # -- arithmetic: one node per operator --------------------------------
    @overload
    def __add__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __add__(self, other: ArrayOperand) -> Block: ...
    def __add__(self, other: object) -> Var | Block | ObjectArray:
        return record(ADD, self, other)

    @overload
    def __radd__(self, other: RealNumber) -> Var: ...
    @overload
    def __radd__(self, other: NumericArray) -> Block: ...
    def __radd__(self, other: object) -> Var | Block | ObjectArray:
        return record(ADD, other, self)

    @overload
    def __sub__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __sub__(self, other: ArrayOperand) -> Block: ...
    def __sub__(self, other: object) -> Var | Block | ObjectArray:
        return record(SUB, self, other)

    @overload
    def __rsub__(self, other: RealNumber) -> Var: ...
    @overload
    def __rsub__(self, other: NumericArray) -> Block: ...
    def __rsub__(self, other: object) -> Var | Block | ObjectArray:
        return record(SUB, other, self)

    @overload
    def __mul__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __mul__(self, other: ArrayOperand) -> Block: ...
    def __mul__(self, other: object) -> Var | Block | ObjectArray:
        return record(MUL, self, other)

    @overload
    def __rmul__(self, other: RealNumber) -> Var: ...
    @overload
    def __rmul__(self, other: NumericArray) -> Block: ...
    def __rmul__(self, other: object) -> Var | Block | ObjectArray:
        return record(MUL, other, self)

    @overload
    def __truediv__(self, other: ScalarOperand) -> Var: ...
    @overload
    def __truediv__(self, other: ArrayOperand) -> Block: ...
    def __truediv__(self, other: object) -> Var | Block | ObjectArray:
        return record(DIV, self, other)

    @overload
    def __rtruediv__(self, other: RealNumber) -> Var: ...
    @overload
    def __rtruediv__(self, other: NumericArray) -> Block: ...
    def __rtruediv__(self, other: object) -> Var | Block | ObjectArray:
        return record(DIV, other, self)

    @overload
    def __pow__(self, exponent: ScalarOperand, modulo: None = None) -> Var: ...
    @overload
    def __pow__(self, exponent: ArrayOperand, modulo: None = None) -> Block: ...
    def __pow__(self, exponent: object, modulo: object = None) -> Var | Block | ObjectArray:
        if modulo is not None:
            return NotImplemented
        # x ** 2 records x * x: one node instead of a constant and a pow, and
        # the article's graph (its node 12 is d * d).
        if type(exponent) is not Var and is_number(exponent) and exponent == 2:
            return record(MUL, self, self)
        return record(POW, self, exponent)

    @overload
    def __rpow__(self, base: RealNumber) -> Var: ...
    @overload
    def __rpow__(self, base: NumericArray) -> Block: ...
    def __rpow__(self, base: object) -> Var | Block | ObjectArray:
        return record(POW, base, self)

    def __neg__(self) -> Var:
        return record_unary(NEG, self)

    def __pos__(self) -> Var:
        return self

    def __abs__(self) -> Var:
        return record_unary(ABS, self)


def _escape(node: Node, how: str) -> NoReturn:
    raise TraceError(
        f"{how} of {node!r} while fa.compile traces the function: the number "
        "would be frozen into every replay. Keep computing with fastad "
        "operations; branch with `if` on a comparison (recorded as a guard) "
        "or use fa.where."
    )
