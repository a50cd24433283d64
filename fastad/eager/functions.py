"""The public scalar API: leaves, gradients and the op table's functions.

Each function accepts a ``Var`` (and records a node) or a plain real number
(and returns a float computed by the same rule, with IEEE semantics:
``fa.log(0.0) == -inf``, no exception).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from fastad.core import scalar_rules
from fastad.eager.handle import as_object, check_live
from fastad.eager.node import Block, Var, elementwise, record, record_unary
from fastad.eager.operators import is_number
from fastad.eager.tape import tape_or_current
from fastad.kernels import optable
from fastad.util.errors import is_long_double, is_real_dtype, not_real

if TYPE_CHECKING:
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, NumericArray, ObjectArray, RealNumber


@overload
def var(
    value: RealNumber,
    name: str | None = None,
    tape: Tape | None = None,
    *,
    copy: bool | None = True,
) -> Var: ...
@overload
def var(
    value: NumericArray | list[Any] | tuple[Any, ...],
    name: str | None = None,
    tape: Tape | None = None,
    *,
    copy: bool | None = True,
) -> Block: ...
def var(
    value: RealNumber | NumericArray | list[Any] | tuple[Any, ...],
    name: str | None = None,
    tape: Tape | None = None,
    *,
    copy: bool | None = True,
) -> Var | Block:
    """Record a leaf (independent variable) holding ``value``.

    Parameters
    ----------
    value : real number, or array_like of real numbers
        A number gives a scalar leaf (``Var``, a 0-d array counts as a
        number); an array, list or tuple a block leaf (``Block``).
    name : str, optional
        Label shown in tables and drawings.
    tape : fastad.Tape, optional
        Defaults to :func:`fastad.current_tape`.
    copy : bool or None, default True
        For an array, as NumPy's ``copy=``. True: the leaf holds a private
        float64 copy, so changing the array afterwards changes nothing on
        the tape. None: the leaf holds the caller's array itself (a
        read-only view of it, as ``torch.from_numpy`` shares memory) where
        it is an aligned, C-contiguous float64 array (a subclass such as
        ``np.memmap`` too), else a copy. False: the caller's array itself,
        or ``ValueError`` saying why not. A number or a 0-d array gives a
        scalar leaf, which holds a float whatever ``copy`` says.
        Without a copy a large array costs nothing to record, but the
        caller must not change it while the tape is in use: the values
        computed from it would not follow, and a backward sweep would read
        the changed values beside the old ones.

    Examples
    --------
    >>> import fastad as fa
    >>> with fa.Tape():
    ...     x = fa.var(3.0, name="x")
    ...     (x * x).value
    9.0
    """
    return tape_or_current(tape).input(value, name, copy=copy)


def grad(
    output: Var, wrt: Var | Block | Iterable[Var | Block]
) -> float | FloatArray | list[FloatArray] | list[float | FloatArray]:
    """Gradient of ``output`` with respect to ``wrt`` without touching ``.grad``.

    Parameters
    ----------
    output : Var
        A scalar node.
    wrt : Var, Block or a sequence of them
        Nodes of the same tape.

    Returns
    -------
    For a single node its gradient (a float, or an array shaped like a
    block); for a sequence of scalar nodes a float64 array of ``len(wrt)``,
    and with blocks among them a list.
    """
    _require_node(output, "fa.grad output", blocks_allowed=False)
    single = isinstance(wrt, (Var, Block))
    nodes = _wrt_nodes(output, wrt, "fa.grad")
    gradients = output.tape.gradient(output, [node.id for node in nodes])
    if single:
        return gradients[0] if isinstance(wrt, Block) else float(gradients[0])
    return gradients


@overload
def jvp(output: Var, wrt: Var | Block | Iterable[Var | Block], direction: ArrayLike) -> float: ...
@overload
def jvp(
    output: Block, wrt: Var | Block | Iterable[Var | Block], direction: ArrayLike
) -> FloatArray: ...
def jvp(
    output: Var | Block, wrt: Var | Block | Iterable[Var | Block], direction: ArrayLike
) -> float | FloatArray:
    """Directional derivative of ``output`` along ``direction`` (forward mode).

    ``sum_i d output / d wrt[i] * direction[i]``, computed by one tangent
    sweep without touching ``.grad``; the forward-mode twin of
    :func:`grad`, so ``fa.jvp(z, xs, v) == fa.grad(z, xs) @ v`` to rounding.
    For a block in ``wrt`` its direction is an array of the block's shape.
    A block ``output`` gives an array of its shape (``J v``, one sweep).
    """
    _require_node(output, "fa.jvp output")
    nodes = _wrt_nodes(output, wrt, "fa.jvp")
    along: Iterable[ArrayLike]
    if any(isinstance(node, Block) for node in nodes):
        # One direction per node: a sequence, or the array of a single block.
        along = [direction] if isinstance(wrt, Block) else list(cast(Iterable[Any], direction))
    else:
        along = np.atleast_1d(np.asarray(direction))  # the tape checks it is real
    return output.tape.tangent(output, [node.id for node in nodes], along)


def hvp(
    output: Var, wrt: Var | Block | Iterable[Var | Block], direction: ArrayLike
) -> float | FloatArray | list[FloatArray] | list[float | FloatArray]:
    """Hessian-vector product ``H v`` of a scalar ``output`` (``jax.jvp`` of ``jax.grad``).

    ``H`` is the Hessian with respect to ``wrt`` and ``direction`` holds one
    entry per node of ``wrt`` (an array of a block's shape for a block), as
    in :func:`jvp`. Forward-over-reverse, without forming ``H`` or touching
    ``.grad``: ``fa.hvp(z, xs, v) == fa.hessian(z, xs) @ v`` to rounding.
    Returns what :func:`grad` returns for the same ``wrt``: a float for one
    scalar node, an array shaped like a block, an array of ``len(wrt)``
    for scalar nodes, a list with blocks among them.

    >>> import fastad as fa
    >>> with fa.Tape():
    ...     x, y = fa.var(1.0), fa.var(2.0)
    ...     z = x * x * y                      # H = [[2y, 2x], [2x, 0]]
    ...     fa.hvp(z, [x, y], [1.0, 0.0]).tolist()
    [4.0, 2.0]
    """
    _require_node(output, "fa.hvp output", blocks_allowed=False)
    nodes = _wrt_nodes(output, wrt, "fa.hvp")
    along: Iterable[ArrayLike]
    if isinstance(wrt, Block):
        along = [direction]
    elif any(isinstance(node, Block) for node in nodes):
        along = list(cast(Iterable[Any], direction))
    else:  # as fa.jvp: a number or an array of len(wrt)
        along = np.atleast_1d(np.asarray(direction))  # the tape checks it is real
    products = output.tape.hvp(output, [node.id for node in nodes], along)
    if isinstance(wrt, Var):
        return float(products[0])
    if isinstance(wrt, Block):
        return cast("list[FloatArray]", products)[0]
    return products


def hessian(output: Var, wrt: Var | Iterable[Var]) -> FloatArray:
    """The Hessian of a scalar ``output`` with respect to scalar nodes ``wrt``: ``(k, k)``.

    Row ``t`` is the Hessian-vector product with the unit vector ``e_t``
    (:func:`hvp`), from one backward sweep and ``k`` second-order sweeps;
    one node gives a ``(1, 1)`` array. For blocks use :func:`hvp`.
    """
    _require_node(output, "fa.hessian output", blocks_allowed=False)
    nodes = _wrt_nodes(output, wrt, "fa.hessian")
    return output.tape.hessian(output, [node.id for node in nodes])


def _wrt_nodes(output: Var | Block, wrt: object, what: str) -> list[Var | Block]:
    """``wrt`` as a list of nodes, each checked to be a node of ``output``'s tape."""
    if isinstance(wrt, (Var, Block)):
        nodes = [wrt]
    elif isinstance(wrt, Iterable):
        nodes = list(wrt)
    else:
        raise TypeError(
            f"{what} wrt must be a fastad node or a sequence of them, got {type(wrt).__name__}"
        )
    for node in nodes:
        _require_node(node, f"{what} wrt")
        if node.tape is not output.tape:
            raise ValueError(f"{node!r} is on another tape than {output!r}")
    return nodes


def _require_node(x: object, what: str, blocks_allowed: bool = True) -> None:
    kinds = (Var, Block) if blocks_allowed else Var
    if not isinstance(x, kinds):
        wanted = "a fastad Var or Block" if blocks_allowed else "a scalar fastad Var"
        raise TypeError(f"{what} must be {wanted}, got {type(x).__name__}")
    check_live(x)


def _plain_number_result(name: str, code: int, operands: tuple[Any, ...]) -> float:
    for x in operands:
        if is_long_double(x) or (isinstance(x, np.ndarray) and x.ndim):
            raise not_real(x, f"fa.{name}'s {type(x).__name__} operand")  # another dtype
        if not is_number(x):
            shape = f" of shape {np.shape(x)}" if hasattr(x, "shape") else ""
            raise TypeError(
                f"fa.{name} expects a fastad Var or a real number, got {type(x).__name__}{shape}"
            )
    return scalar_rules.value(code, *(float(x) for x in operands))


def _arrays_or_blocks(
    name: str, code: int, operands: tuple[Any, ...]
) -> Block | FloatArray | ObjectArray | float | None:
    """Blocks and numeric arrays: a block node (or plain array); object arrays: per element."""
    if any(isinstance(x, np.ndarray) and x.dtype == object for x in operands):
        function = _FUNCTIONS[name]
        with np.errstate(all="ignore"):  # IEEE values per element, as for one node
            return np.frompyfunc(function, len(operands), 1)(*(as_object(x) for x in operands))
    if any(isinstance(x, Block) or _numeric_array(x) for x in operands):
        return cast("Block | FloatArray", elementwise(code, *operands))  # an array is among them
    return None


def _numeric_array(x: object) -> bool:
    return isinstance(x, np.ndarray) and is_real_dtype(x.dtype)


class UnaryFunction(Protocol):
    """The type of ``fa.exp``, ``fa.log`` and the other one-operand functions.

    A node gives a node (``Var`` or ``Block``), a number a float, a real
    array an array (a 0-d array a float), an object array of nodes an object
    array of nodes.
    """

    __name__: str

    @overload
    def __call__(self, x: Var) -> Var: ...
    @overload
    def __call__(self, x: Block) -> Block: ...
    @overload
    def __call__(self, x: RealNumber) -> float: ...
    @overload
    def __call__(self, x: ObjectArray) -> ObjectArray: ...
    @overload
    def __call__(self, x: NumericArray) -> FloatArray: ...


class BinaryFunction(Protocol):
    """The type of ``fa.maximum`` and ``fa.minimum``.

    With a scalar node among the operands (and no block or array) the result
    is a ``Var``; with a block, or a scalar node and an array, a ``Block``;
    numbers give a float, arrays and numbers an array; an object array of
    nodes an object array of nodes.
    """

    __name__: str

    @overload
    def __call__(self, x: Var, y: Var | RealNumber) -> Var: ...
    @overload
    def __call__(self, x: RealNumber, y: Var) -> Var: ...
    @overload
    def __call__(self, x: Block, y: Block | Var | RealNumber | NumericArray) -> Block: ...
    @overload
    def __call__(self, x: Var | RealNumber | NumericArray, y: Block) -> Block: ...
    @overload
    def __call__(self, x: Var, y: NumericArray) -> Block: ...
    @overload
    def __call__(self, x: NumericArray, y: Var) -> Block: ...
    @overload
    def __call__(self, x: RealNumber, y: RealNumber) -> float: ...
    @overload
    def __call__(self, x: NumericArray, y: NumericArray | RealNumber) -> FloatArray: ...
    @overload
    def __call__(self, x: RealNumber, y: NumericArray) -> FloatArray: ...
    @overload
    def __call__(self, x: ObjectArray, y: object) -> ObjectArray: ...
    @overload
    def __call__(self, x: object, y: ObjectArray) -> ObjectArray: ...


def _unary(op: optable.Op) -> UnaryFunction:
    name, code = op.name, op.code

    def function(x: object) -> Var | Block | FloatArray | ObjectArray | float:
        if type(x) is Var:
            return record_unary(code, x)
        if type(x) is Block:
            return elementwise(code, x)
        result = _arrays_or_blocks(name, code, (x,))
        if result is not None:
            return result
        return _plain_number_result(name, code, (x,))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = op.doc
    _FUNCTIONS[name] = function
    # Its overloads (UnaryFunction) say which operand gives which result.
    return cast(UnaryFunction, function)


def _binary(op: optable.Op) -> BinaryFunction:
    name, code = op.name, op.code

    def function(x: object, y: object) -> Var | Block | FloatArray | ObjectArray | float:
        if type(x) is Var or type(y) is Var:
            recorded = record(code, x, y)
            if recorded is NotImplemented:
                kinds = f"{type(x).__name__}, {type(y).__name__}"
                raise TypeError(f"fa.{name} does not accept ({kinds}): use nodes or real numbers")
            return recorded
        result = _arrays_or_blocks(name, code, (x, y))
        if result is not None:
            return result
        return _plain_number_result(name, code, (x, y))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = op.doc
    _FUNCTIONS[name] = function
    return cast(BinaryFunction, function)


# One public function per op-table row with a doc (optable.PUBLIC), made here
# from the row. The names are bound one by one below so that type checkers
# see them; tests/test_ops.py fails when the two lists differ.
_FUNCTIONS: dict[str, Callable[..., object]] = {}
_unaries = {op.name: _unary(op) for op in optable.PUBLIC if op.arity == 1}
_binaries = {op.name: _binary(op) for op in optable.PUBLIC if op.arity == 2}

exp = _unaries["exp"]
log = _unaries["log"]
sqrt = _unaries["sqrt"]
sin = _unaries["sin"]
cos = _unaries["cos"]
tanh = _unaries["tanh"]
sigmoid = _unaries["sigmoid"]
relu = _unaries["relu"]
abs = _unaries["abs"]  # noqa: A001 (mirrors numpy.abs)
log1p = _unaries["log1p"]
expm1 = _unaries["expm1"]
tan = _unaries["tan"]
arctan = _unaries["arctan"]
sinh = _unaries["sinh"]
cosh = _unaries["cosh"]
erf = _unaries["erf"]
softplus = _unaries["softplus"]
sign = _unaries["sign"]
maximum = _binaries["maximum"]
minimum = _binaries["minimum"]
arctan2 = _binaries["arctan2"]
stop_gradient = _unaries["stop_gradient"]


_PICK, _PICK_NOT = optable.BY_NAME["pick"].code, optable.BY_NAME["pick_not"].code


@overload
def where(condition: Var, x: Var | RealNumber, y: Var | RealNumber) -> Var: ...
@overload
def where(condition: RealNumber, x: Var, y: Var | RealNumber) -> Var: ...
@overload
def where(condition: RealNumber, x: RealNumber, y: Var) -> Var: ...
@overload
def where(condition: RealNumber, x: RealNumber, y: RealNumber) -> float: ...
@overload
def where(condition: Any, x: Any, y: Any) -> Block | FloatArray: ...
def where(condition: Any, x: Any, y: Any) -> Var | Block | FloatArray | float:
    """``x`` where ``condition`` is nonzero, else ``y``: a branch-free select.

    ``condition`` is usually a comparison node (``x > 0`` records one worth
    1.0 or 0.0, elementwise for a block). Unlike ``if``, ``where`` is
    recorded as nodes, so a compiled function replays it correctly on both
    sides of the boundary. With a block or an array among the operands the
    select is elementwise, NumPy broadcasting, and the result a ``Block``.

    Guarantee: the side not taken contributes exactly nothing, to the value
    and to the gradient, even where it is ``inf`` or ``nan`` (the "double
    where" trap of JAX): ``fa.where(x > 0, fa.sqrt(x), 0.0)`` has gradient 0,
    not ``nan``, at ``x = -1``. The condition gets a zero gradient.

    Examples
    --------
    >>> import fastad as fa
    >>> with fa.Tape():
    ...     x = fa.var(-1.0)
    ...     y = fa.where(x > 0, fa.sqrt(x), 0.0)
    ...     y.backward()
    ...     print(y.value, x.grad)
    0.0 0.0
    """
    operands = {"condition": condition, "x": x, "y": y}
    if any(isinstance(v, (list, tuple)) for v in operands.values()):  # arrays, as NumPy reads them
        operands = {
            k: np.asarray(v) if isinstance(v, (list, tuple)) else v for k, v in operands.items()
        }
        condition, x, y = operands.values()
    if any(isinstance(v, Block) or _numeric_array(v) for v in operands.values()):
        return _where_elementwise(condition, x, y)
    for name, value in operands.items():
        if type(value) is not Var and not is_number(value):
            raise TypeError(
                f"fa.where {name} must be a fastad node, a real number or a real array, got "
                f"{type(value).__name__}"
            )
    nodes = [value for value in operands.values() if type(value) is Var]
    if not nodes:
        return float(x) if condition != 0 or condition != condition else float(y)
    tape = nodes[0].tape
    for node in nodes:  # before any constant lands on a tape that was reset
        check_live(node)
    condition, x, y = (
        value if isinstance(value, Var) else tape.constant(value) for value in operands.values()
    )
    return record(_PICK, condition, x) + record(_PICK_NOT, condition, y)


def _where_elementwise(condition: Any, x: Any, y: Any) -> Block | FloatArray:
    """``where`` with a block or an array among the operands: two picks and an add, per element."""
    condition = np.asarray(condition, np.float64) if _numeric_array(condition) else condition
    taken = elementwise(_PICK, condition, x)  # a scalar node where neither is an array
    return cast("Block | FloatArray", taken + elementwise(_PICK_NOT, condition, y))


@overload
def clip(x: Var, low: Var | RealNumber | None, high: Var | RealNumber | None) -> Var: ...
@overload
def clip(x: Block, low: Any, high: Any) -> Block: ...
@overload
def clip(x: Any, low: Any, high: Any) -> Any: ...
def clip(x: Any, low: Any, high: Any) -> Any:
    """``x`` limited to ``[low, high]`` (either or both may be None), as ``np.clip``.

    Recorded as ``fa.minimum(fa.maximum(x, low), high)``, as ``jnp.clip``:
    the gradient is 1 inside, 0 outside, and a half at a bound (the tie
    rule of ``maximum``; ``torch.clamp`` gives 1 there). Without bounds, ``x``.
    """
    lower = x if low is None else maximum(x, low)
    return lower if high is None else minimum(lower, high)
