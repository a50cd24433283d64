"""What every node handle is: a tape, an id, a generation; and the checks on handles.

``Node`` is the base of ``Var`` and ``Block`` (``fastad/eager/node.py``): its
tape, its node id and the tape generation it was recorded in, so a handle of
a reset tape is refused (:func:`check_live`). Beside it: the NumPy protocol's
handler table, the one tape of several operands (:func:`tape_of`), and the
error for a number taken out of a tape while ``fa.compile`` traces.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard, overload

import numpy as np

from fastad.util.errors import StaleNodeError, TraceError, is_real_dtype

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.eager.tape import Tape
    from fastad.util.hints import NumericArray


def storage_of(tape: Tape) -> TapeStorage:
    """The storage ``tape`` holds: its arrays, staging, block table, guards and lock.

    The one way fastad's own modules reach a tape's storage (the sweeps, compiled
    functions, checks and files); not part of ``fa``'s namespace, since its
    methods trust their callers more than the tape's do (``push`` appends a row
    unchecked). The handles' recording path reads the same slot directly, one
    attribute read per node.
    """
    try:
        return tape._storage
    except AttributeError:
        raise TypeError(f"expected a fastad Tape, got {type(tape).__name__}") from None


NUMPY_HANDLERS: dict[str, Callable[..., Any]] = {}
"""``"ufunc"`` and ``"function"``: the NumPy protocol's handlers
(``fastad/eager/numpy_protocol.py``)."""


def check_live(node: Node) -> None:
    """Raise ``StaleNodeError`` if ``node``'s tape (a Var's or a Block's) was reset since."""
    if node._generation != node._tape._storage.generation:
        raise StaleNodeError(
            f"{node!r} belongs to a tape that was reset after the node was "
            f"recorded; its id may now name a different node. Record it again."
        )


class Node:
    """What every node handle has: its tape, its id, and the tape generation
    it was recorded in (a reset tape makes older handles stale)."""

    __slots__ = ("_tape", "_id", "_generation")
    _tape: Tape
    _id: int
    _generation: int

    # The NumPy protocol: `np.sin(node)`, `array * node`, `np.sum(block)`
    # record fastad ops instead of building object arrays of nodes behind
    # our back; what fastad has no op for raises a TypeError naming what to
    # use. The handlers live in fastad/eager/numpy_protocol.py, above the public
    # functions they call, and register themselves in NUMPY_HANDLERS.
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return NUMPY_HANDLERS["ufunc"](ufunc, method, inputs, kwargs)

    def __array_function__(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return NUMPY_HANDLERS["function"](func, types, args, kwargs)

    def __init__(self, tape: Tape, node_id: int) -> None:
        self._tape = tape
        self._id = node_id
        self._generation = tape._storage.generation

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
        return self._tape._storage.label(self._id)

    @name.setter
    def name(self, label: str) -> None:
        check_live(self)
        self._tape._storage.set_label(self._id, label)


def refuse_escape(node: Node, how: str) -> NoReturn:
    """Raise ``TraceError``: ``how`` would take a number out of ``node`` while tracing."""
    raise TraceError(
        f"{how} of {node!r} while fa.compile traces the function: the number "
        "would be frozen into every replay. Keep computing with fastad "
        "operations; branch with `if` on a comparison (recorded as a guard) "
        "or use fa.where."
    )


def values_of(x: object, how: str) -> Any:
    """The numbers of ``x`` (a node's value, else ``x`` itself) for ``how``, a function whose
    result depends on them as a constant (an order, a rounding); ``TraceError`` naming ``how``
    while ``fa.compile`` traces, where they would be frozen into every replay."""
    if not isinstance(x, Node):
        return x
    if x._tape._storage.guards is not None:
        refuse_escape(x, how)
    check_live(x)
    return x.value  # type: ignore[attr-defined]


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


def is_array(x: object) -> TypeGuard[NumericArray]:
    """True for a real NumPy array (what becomes a block constant beside a node)."""
    return isinstance(x, np.ndarray) and is_real_dtype(x.dtype)


@overload
def tape_of(first: Node, /, *others: object) -> Tape: ...
@overload
def tape_of(*operands: object) -> Tape | None: ...
def tape_of(*operands: object) -> Tape | None:
    """The one tape of the nodes among ``operands`` (None without any); raise if two or stale."""
    tape = None
    for x in operands:
        if isinstance(x, Node):
            if tape is None:
                tape = x._tape
            elif x._tape is not tape:
                raise ValueError(
                    "cannot combine nodes of two different tapes: "
                    + ", ".join(repr(y) for y in operands if isinstance(y, Node))
                )
            if x._generation != tape._storage.generation:
                raise StaleNodeError(
                    f"{x!r} belongs to a tape that was reset after it was recorded"
                )
    return tape


class ScalarNode(Node):
    """A node handle holding its value as a Python float (``Var``), with Python's
    number protocol on it.

    ``float``, ``int``, ``round``, ``math.trunc``/``floor``/``ceil`` and format
    specs give numbers computed from the value, and raise ``TraceError`` while
    ``fa.compile`` traces (the number would be frozen into every replay);
    ``bool`` is the Python truth, recorded as a guard while tracing.
    """

    __slots__ = ("_value",)
    _value: float

    def __float__(self) -> float:
        if self._tape._storage.guards is not None:
            refuse_escape(self, "float()")
        return self._value

    def __int__(self) -> int:
        if self._tape._storage.guards is not None:
            refuse_escape(self, "int()")
        return int(self._value)

    @overload
    def __round__(self, ndigits: None = None) -> int: ...
    @overload
    def __round__(self, ndigits: int) -> float: ...
    def __round__(self, ndigits: int | None = None) -> int | float:
        if self._tape._storage.guards is not None:
            refuse_escape(self, "round()")
        return round(self._value, ndigits)

    def __trunc__(self) -> int:
        if self._tape._storage.guards is not None:
            refuse_escape(self, "math.trunc()")
        return math.trunc(self._value)

    def __floor__(self) -> int:
        if self._tape._storage.guards is not None:
            refuse_escape(self, "math.floor()")
        return math.floor(self._value)

    def __ceil__(self) -> int:
        if self._tape._storage.guards is not None:
            refuse_escape(self, "math.ceil()")
        return math.ceil(self._value)

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        if self._tape._storage.guards is not None:
            refuse_escape(self, f"format spec {spec!r}")
        return format(self._value, spec)

    def __bool__(self) -> bool:
        # `if x > 0:` lands here. While fa.compile traces, the outcome is
        # recorded as a guard that every replay re-checks.
        truth = self._value != 0.0
        guards = self._tape._storage.guards
        if guards is not None:
            guards.append((self._id, truth))
        return truth
