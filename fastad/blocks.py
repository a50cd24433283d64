"""Blocks: NumPy arrays as nodes of the same tape as scalars.

A block node is a row of the tape like any other (opcode, operand ids), so
the ordering invariant and the sweep order are unchanged; its array value
lives beside the hot arrays (``Tape._blocks``). The backward sweep walks the
tape in decreasing id order, running the compiled scalar sweep over each
run of scalar nodes and, at each block node, that node's rule below
(elementwise rules are the scalar op table's rules applied per element by
compiled kernels; matrix products go to BLAS; fused ops to
``kernels/fused.py``). No Jacobian is ever formed: every rule is a
vector-Jacobian product (``dA = G @ B.T``, ``dB = A.T @ G`` for a matmul).

Broadcasting follows NumPy (right-aligned, size-1 axes expand) and every
rule hands its gradients to :func:`unbroadcast`, which sums them back to the
operand's own shape.

``RULES`` is the one registry of block rules: opcode -> (forward, vjp).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeGuard, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.errors import StaleNodeError, TraceError
from fastad.kernels import fused, optable, sweeps
from fastad.node import Node, check_live

if TYPE_CHECKING:
    from fastad._typing import FloatArray, NumericArray, ObjectArray, RealNumber, RuleValue
    from fastad.node import Var
    from fastad.tape import Tape

    BlockOperand: TypeAlias = "Block | Var | RealNumber | NumericArray"
    """What combines with a ``Block`` elementwise (numbers and scalar nodes broadcast)."""
    ArrayInput: TypeAlias = "Block | ArrayLike"
    """An operand of the fused ops: a block node or array data."""

# The signatures of the rules in RULES and JVP_RULES (see there).
ForwardRule: TypeAlias = Callable[[Any, Any, Any], Any]
VjpRule: TypeAlias = Callable[[Any, Any, Any, Any, Any], tuple[Any, Any]]
JvpRule: TypeAlias = Callable[[Any, Any, Any, Any, Any, Any], Any]

_BLOCK = optable.BLOCK_BY_NAME
MATMUL, SUM, MEAN = _BLOCK["matmul"].code, _BLOCK["sum"].code, _BLOCK["mean"].code
RESHAPE, TRANSPOSE, INDEX = _BLOCK["reshape"].code, _BLOCK["transpose"].code, _BLOCK["index"].code
PAIR, LINEAR, LINEAR_RELU = _BLOCK["pair"].code, _BLOCK["linear"].code, _BLOCK["linear_relu"].code
MSE_LOSS = _BLOCK["mse_loss"].code
UNREACHED = sweeps.UNREACHED


class Block(Node):
    """An array node on a tape: its value now, its gradient after ``backward``.

    Create leaves with ``fa.var(array)``. Elementwise operators and the
    functions of ``fastad`` broadcast like NumPy; ``@``, ``sum``, ``mean``,
    ``reshape``, ``T``/``transpose`` and indexing record block nodes;
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

    # -- what it is --------------------------------------------------------------
    @property
    def value(self) -> FloatArray:
        """The array value (read-only).

        Not available while ``fa.compile`` traces a function: the array
        would be frozen into every replay (see :class:`fastad.TraceError`).
        """
        check_live(self)
        if self._tape._guards is not None:
            raise TraceError(
                f".value of {self!r} while fa.compile traces the function: the array would "
                "be frozen into every replay. Keep computing with fastad operations."
            )
        return self._tape._blocks[self._id]

    @property
    def shape(self) -> tuple[int, ...]:
        check_live(self)
        return self._tape._blocks[self._id].shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        check_live(self)
        return self._tape._blocks[self._id].size

    @property
    def grad(self) -> FloatArray:
        """d root / d block from the last ``backward`` (zeros before any), shaped like the value."""
        check_live(self)
        return self._tape.block_adjoint(self._id)

    def __repr__(self) -> str:
        # Never raises: error messages about stale nodes use it.
        if self._generation != self._tape._generation:
            return f"Block(id={self._id}, stale)"
        label = self._tape._labels.get(self._id)
        named = f", name={label!r}" if label else ""
        return f"Block(shape={self._tape._blocks[self._id].shape}{named}, id={self._id})"

    def __len__(self) -> int:
        return self.shape[0]

    def __bool__(self) -> NoReturn:
        raise TypeError(f"the truth value of {self!r} is ambiguous: reduce it first")

    def backward(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"backward needs a scalar output, {self!r} is an array: reduce it first "
            "(e.g. X.sum()) or use a fused loss such as fa.mse_loss"
        )

    # -- elementwise operators ---------------------------------------------------------
    def __add__(self, other: BlockOperand) -> Block:
        return elementwise(_code("add"), self, other)

    def __radd__(self, other: BlockOperand) -> Block:
        return elementwise(_code("add"), other, self)

    def __sub__(self, other: BlockOperand) -> Block:
        return elementwise(_code("sub"), self, other)

    def __rsub__(self, other: BlockOperand) -> Block:
        return elementwise(_code("sub"), other, self)

    def __mul__(self, other: BlockOperand) -> Block:
        return elementwise(_code("mul"), self, other)

    def __rmul__(self, other: BlockOperand) -> Block:
        return elementwise(_code("mul"), other, self)

    def __truediv__(self, other: BlockOperand) -> Block:
        return elementwise(_code("div"), self, other)

    def __rtruediv__(self, other: BlockOperand) -> Block:
        return elementwise(_code("div"), other, self)

    def __pow__(self, exponent: BlockOperand) -> Block:
        if isinstance(exponent, numbers.Real) and exponent == 2:
            return elementwise(_code("mul"), self, self)
        return elementwise(_code("pow"), self, exponent)

    def __rpow__(self, base: BlockOperand) -> Block:
        return elementwise(_code("pow"), base, self)

    def __neg__(self) -> Block:
        return elementwise(_code("neg"), self)

    def __pos__(self) -> Block:
        return self

    def __abs__(self) -> Block:
        return elementwise(_code("abs"), self)

    # Comparisons record blocks of 1.0/0.0 with zero derivatives, like scalar
    # nodes' (usable as fa.where conditions); hashing stays by identity. Other
    # operands raise TypeError, unlike object's ==, hence the ignored overrides.
    def __eq__(self, other: BlockOperand) -> Block:  # type: ignore[override]
        return elementwise(_code("eq"), self, other)

    def __ne__(self, other: BlockOperand) -> Block:  # type: ignore[override]
        return elementwise(_code("ne"), self, other)

    def __lt__(self, other: BlockOperand) -> Block:
        return elementwise(_code("lt"), self, other)

    def __le__(self, other: BlockOperand) -> Block:
        return elementwise(_code("le"), self, other)

    def __gt__(self, other: BlockOperand) -> Block:
        return elementwise(_code("gt"), self, other)

    def __ge__(self, other: BlockOperand) -> Block:
        return elementwise(_code("ge"), self, other)

    def __hash__(self) -> int:
        return id(self)

    # -- structure -----------------------------------------------------------------------
    def __matmul__(self, other: Block | NumericArray) -> Block | Var:
        return matmul(self, other)

    def __rmatmul__(self, other: Block | NumericArray) -> Block | Var:
        return matmul(other, self)

    def __getitem__(self, key: Any) -> Block | Var:
        return index(self, key)

    @overload
    def sum(self, axis: None = None) -> Var: ...
    @overload
    def sum(self, axis: int) -> Block | Var: ...
    def sum(self, axis: int | None = None) -> Block | Var:
        """Sum of all elements (a scalar node) or along ``axis`` (a block)."""
        return _reduce(SUM, self, axis)

    @overload
    def mean(self, axis: None = None) -> Var: ...
    @overload
    def mean(self, axis: int) -> Block | Var: ...
    def mean(self, axis: int | None = None) -> Block | Var:
        """Mean of all elements (a scalar node) or along ``axis`` (a block)."""
        return _reduce(MEAN, self, axis)

    def reshape(self, *shape: int | Sequence[int]) -> Block:
        wanted = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        try:
            new_shape = np.empty(self.shape, dtype=np.bool_).reshape(wanted).shape
        except ValueError as error:
            raise ValueError(
                f"cannot reshape {self!r} of shape {self.shape} to {wanted}"
            ) from error
        return _record(RESHAPE, self, None, np.reshape(_array(self), new_shape), new_shape)

    def transpose(self) -> Block:
        return _record(TRANSPOSE, self, None, np.ascontiguousarray(_array(self).T), None)

    @property
    def T(self) -> Block:
        return self.transpose()


def _array(block: Block) -> FloatArray:
    """A block's array for recording (``.value`` refuses while tracing; rules may read it)."""
    check_live(block)
    return block._tape._blocks[block._id]


def _code(name: str) -> int:
    return optable.BY_NAME[name].code


# -- operands ----------------------------------------------------------------------------
def _is_array(x: object) -> TypeGuard[NumericArray]:
    return isinstance(x, np.ndarray) and x.dtype.kind in "biuf"


@overload
def _tape_of(first: Node, /, *others: object) -> Tape: ...
@overload
def _tape_of(*operands: object) -> Tape | None: ...
def _tape_of(*operands: object) -> Tape | None:
    from fastad.node import Var

    tapes = {id(x._tape): x._tape for x in operands if isinstance(x, (Var, Block))}
    if len(tapes) > 1:
        raise ValueError(
            "cannot combine nodes of two different tapes: "
            + ", ".join(repr(x) for x in operands if isinstance(x, (Var, Block)))
        )
    for x in operands:
        if isinstance(x, (Var, Block)) and x._generation != x._tape._generation:
            raise StaleNodeError(f"{x!r} belongs to a tape that was reset after it was recorded")
    return next(iter(tapes.values()), None)


def as_operand(tape: Tape, x: Any, what: str = "operand") -> Var | Block:
    """A node for ``x``: nodes pass through, numbers and arrays become constants."""
    from fastad.node import Var, is_number

    if isinstance(x, (Var, Block)):
        return x
    if is_number(x):  # Python and NumPy reals, 0-d arrays included
        return tape.constant(x)
    if _is_array(x):
        return tape.block_constant(x)
    shape = f" of shape {np.shape(x)} and dtype {x.dtype}" if hasattr(x, "dtype") else ""
    raise TypeError(f"cannot use {type(x).__name__}{shape} as a fastad {what}")


def value_of(tape: Tape, node_id: int) -> RuleValue:
    """A node's value: its array for blocks, a float for scalars."""
    tape._sync()  # a scalar operand may still be in the recording stage
    return tape._operand_value(node_id)


def _shape(tape: Tape, node: Node) -> tuple[int, ...]:
    return np.shape(value_of(tape, node._id))


@overload
def _record(code: int, a: Block, b: Node | None, value: NDArray[Any], params: object) -> Block: ...
@overload
def _record(
    code: int, a: Block, b: Node | None, value: float | np.floating[Any], params: object
) -> Var: ...
def _record(
    code: int,
    a: Block,
    b: Node | None,
    value: NDArray[Any] | float | np.floating[Any],
    params: object,
) -> Block | Var:
    """Append a block-op node computing ``value`` (an array, or a scalar for reductions)."""
    tape = a.tape if b is None else _tape_of(a, b)
    return tape.append_block_op(code, a._id, -1 if b is None else b._id, value, params)


# -- elementwise -------------------------------------------------------------------------
def broadcast_shape(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(shape_a, shape_b)
    except ValueError:
        raise ValueError(
            f"shapes {shape_a} and {shape_b} cannot be broadcast together (NumPy rules: "
            "trailing axes must match or be 1)"
        ) from None


def _map(code: int, a: ArrayLike, b: ArrayLike, shape: tuple[int, ...]) -> FloatArray:
    out = np.empty(shape)
    a_full = np.ascontiguousarray(np.broadcast_to(a, shape), dtype=np.float64).ravel()
    b_full = np.ascontiguousarray(np.broadcast_to(b, shape), dtype=np.float64).ravel()
    sweeps.map_forward(code, a_full, b_full, out.reshape(-1))
    return out


@overload
def elementwise(code: int, x: Block, y: object = None) -> Block: ...
@overload
def elementwise(code: int, x: object, y: Block | Var) -> Block: ...
@overload
def elementwise(code: int, x: Var, y: object) -> Block: ...
@overload
def elementwise(code: int, x: object, y: object = None) -> Block | FloatArray | float: ...
def elementwise(code: int, x: Any, y: Any = None) -> Block | FloatArray | float:
    """Record (or compute) scalar op ``code`` elementwise, with NumPy broadcasting.

    Without any node among the operands the result is a plain array (or float).
    """
    unary = y is None
    tape = _tape_of(x) if unary else _tape_of(x, y)
    if tape is None:  # plain arrays and numbers: compute, record nothing
        a = np.asarray(x, dtype=np.float64)
        b = a if unary else np.asarray(y, dtype=np.float64)
        out = _map(code, a, b, broadcast_shape(a.shape, b.shape))
        return out if out.ndim else float(out)
    x = as_operand(tape, x)
    y = x if unary else as_operand(tape, y)
    a, b = value_of(tape, x._id), value_of(tape, y._id)
    shape = broadcast_shape(np.shape(a), np.shape(b))
    value = _map(code, a, b, shape)
    return tape.append_block_op(code, x._id, -1 if unary else y._id, value, None)


# -- strong zeros through block rules ---------------------------------------------------------
# The scalar sweeps' rule (kernels/sweeps.py), element by element: an adjoint
# or tangent element nothing reached holds UNREACHED (-0.0) and sends
# nothing; a reached one is an ordinary number. Every block rule keeps that,
# so a block computation gets the reach of its scalar-node expansion.
def reached_elements(x: ArrayLike) -> NDArray[np.bool_]:
    """True where an adjoint or tangent array was reached (anything but -0.0)."""
    x = np.asarray(x)
    return (x != 0.0) | ~np.signbit(x)


def any_reached(x: RuleValue) -> bool:
    """Whether any element of an adjoint or tangent was reached."""
    return bool(reached_elements(x).any())


def reach_sum(
    x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False
) -> Any:
    """``x.sum(axis)`` that keeps strong zeros: a sum of UNREACHED elements only is
    UNREACHED (NumPy's own sum starts at +0.0, which would mark it reached)."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is nan, as in the sweeps
        return np.sum(x, axis=axis, keepdims=keepdims, initial=UNREACHED)


def _contributions(partial: FloatArray, incoming: FloatArray) -> FloatArray:
    """``sweeps.contribution`` elementwise: ``partial * incoming``, with strong zeros."""
    with np.errstate(invalid="ignore", over="ignore"):  # discarded where unreached
        product = partial * incoming + 0.0
    return np.where((partial != 0.0) & reached_elements(incoming), product, UNREACHED)


def reach_matmul(x: FloatArray, y: FloatArray, adjoint_left: bool) -> FloatArray:
    """``x @ y`` for a VJP or JVP, where one factor holds adjoints or tangents.

    ``adjoint_left``: ``x`` holds them and ``y`` values, else the reverse.
    The result is what the scalar-node expansion of the product gives: a
    term is sent only from a reached adjoint meeting a value that is not
    exactly zero (a zero local partial is a strong zero), so an element no
    term reached is UNREACHED and an unsent term can never turn into
    ``0 * inf = nan``. BLAS computes the product; only the rows (or
    columns) holding a zero or a non-finite element, where it can differ,
    are recomputed term by term (``product_reach``). 1-D operands act as a
    row (``x``) or a column (``y``).
    """
    x2 = x[np.newaxis, :] if x.ndim == 1 else x
    y2 = y[:, np.newaxis] if y.ndim == 1 else y
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, rechecked below
        product = np.ascontiguousarray(x2 @ y2)
    out = product_reach(product, x2, y2, adjoint_left)
    return out.reshape(x.shape[:-1] + y.shape[1:])


def product_reach(
    product: FloatArray, x: FloatArray, y: FloatArray, adjoint_left: bool
) -> FloatArray:
    """``product`` (2-D, C-contiguous, ``x @ y``) made exact; see ``reach_matmul``.

    For products a fused kernel has made already. Changes ``product`` in place.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if adjoint_left:
        rows = np.zeros(product.shape[0], np.bool_)
        sweeps.rows_to_recheck(product, rows)
        if rows.any():
            sweeps.exact_rows(x, y, np.flatnonzero(rows), product)
    else:
        columns = np.zeros(product.shape[1], np.bool_)
        sweeps.columns_to_recheck(product, columns)
        if columns.any():
            sweeps.exact_columns(x, y, np.flatnonzero(columns), product)
    return product


def unbroadcast(gradient: RuleValue, shape: tuple[int, ...]) -> FloatArray | float:
    """Sum ``gradient`` back to ``shape``: the one place that undoes broadcasting.

    The sums keep strong zeros (``reach_sum``).
    """
    gradient = np.asarray(gradient)
    if gradient.shape == tuple(shape):
        return gradient
    extra = gradient.ndim - len(shape)
    if extra:
        gradient = reach_sum(gradient, axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and gradient.shape[i] != 1)
    if stretched:
        gradient = reach_sum(gradient, axis=stretched, keepdims=True)
    return gradient if shape else float(gradient)


def _elementwise_forward(code: int, a: RuleValue, b: RuleValue, params: object) -> FloatArray:
    return _map(code, a, b, broadcast_shape(np.shape(a), np.shape(b)))


def _elementwise_vjp(
    code: int,
    a: RuleValue,
    b: RuleValue,
    out: RuleValue,
    g: RuleValue,
    params: object,
    unary: bool,
) -> tuple[FloatArray | float, FloatArray | float | None]:
    shape = np.shape(out)
    a_full = np.ascontiguousarray(np.broadcast_to(a, shape), dtype=np.float64).ravel()
    b_full = a_full if unary else np.ascontiguousarray(np.broadcast_to(b, shape)).ravel()
    g_full = np.ascontiguousarray(np.broadcast_to(g, shape), dtype=np.float64).ravel()
    da, db = np.empty(a_full.size), np.empty(a_full.size)
    sweeps.map_vjp(code, a_full, b_full, np.ascontiguousarray(out).ravel(), g_full, da, db)
    da_operand = unbroadcast(da.reshape(shape), np.shape(a))
    return da_operand, (None if unary else unbroadcast(db.reshape(shape), np.shape(b)))


# -- matrix products, reductions, shapes, indexing ----------------------------------------
@overload
def matmul(x: Block, y: Block | NumericArray) -> Block | Var: ...
@overload
def matmul(x: Block | NumericArray, y: Block) -> Block | Var: ...
@overload
def matmul(x: ArrayLike, y: ArrayLike) -> Any: ...
def matmul(x: Any, y: Any) -> Any:
    """``x @ y`` for 1-D and 2-D operands; a scalar node for two vectors."""
    tape = _tape_of(x, y)
    if tape is None:
        return np.matmul(x, y)
    x, y = as_operand(tape, x, "matmul operand"), as_operand(tape, y, "matmul operand")
    a, b = value_of(tape, x._id), value_of(tape, y._id)
    if np.ndim(a) not in (1, 2) or np.ndim(b) not in (1, 2) or np.shape(a)[-1] != np.shape(b)[0]:
        raise ValueError(
            f"matmul needs 1-D or 2-D operands with matching inner dimensions, got shapes "
            f"{np.shape(a)} and {np.shape(b)}"
        )
    return tape.append_block_op(MATMUL, x._id, y._id, _matmul_forward(a, b, None), None)


def _matmul_forward(a: FloatArray, b: FloatArray, params: None) -> FloatArray | float:
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE results, like the sweeps
        out = np.matmul(a, b)
    return float(out) if np.ndim(out) == 0 else out


def _matmul_vjp(
    a: FloatArray, b: FloatArray, out: RuleValue, g: RuleValue, params: None
) -> tuple[FloatArray, FloatArray]:
    g = np.asarray(g, dtype=np.float64)
    if a.ndim == 2 and b.ndim == 2:
        return reach_matmul(g, b.T, True), reach_matmul(a.T, g, False)
    if a.ndim == 2:  # (m, k) @ (k,) -> (m,): dA = outer(g, b)
        return reach_matmul(g[:, None], b[None, :], True), reach_matmul(a.T, g, False)
    if b.ndim == 2:  # (k,) @ (k, n) -> (n,): dB = outer(a, g)
        return reach_matmul(b, g, False), reach_matmul(a[:, None], g[None, :], False)
    g = g.reshape(1)  # (k,) @ (k,) -> scalar: dA = g b, dB = g a
    return reach_matmul(g, b[None, :], True), reach_matmul(g, a[None, :], True)


def _reduce(code: int, x: Block, axis: object) -> Var | Block:
    value = _array(x)
    if axis is not None:
        if isinstance(axis, (bool, np.bool_)) or not isinstance(
            axis, (numbers.Integral, np.integer)
        ):
            raise TypeError(
                f"axis must be an integer or None, got {type(axis).__name__} {axis!r} "
                f"(for {x!r} of shape {value.shape})"
            )
        axis = int(axis)
        if not -value.ndim <= axis < value.ndim:
            raise ValueError(f"axis {axis} is out of range for {x!r} of shape {value.shape}")
        axis %= value.ndim
    return _record(code, x, None, RULES[code][0](value, None, axis), axis)


def _reduce_forward(code: int) -> ForwardRule:
    reduce = np.sum if code == SUM else np.mean

    def forward(a: FloatArray, b: None, axis: int | None) -> RuleValue:
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is nan, silently
            out = reduce(a, axis=axis)
        return float(out) if axis is None else out

    return forward


def _reduce_vjp(code: int) -> VjpRule:
    def vjp(
        a: FloatArray, b: None, out: RuleValue, g: RuleValue, axis: int | None
    ) -> tuple[FloatArray, None]:
        count = a.size if axis is None else a.shape[axis]
        scale = 1.0 if code == SUM else 1.0 / count
        g = np.asarray(g) * scale
        if axis is not None:
            g = np.expand_dims(g, axis)
        return np.broadcast_to(g, a.shape).copy(), None

    return vjp


def index(x: Block, key: Any) -> Var | Block:
    """``x[key]``: a scalar node for a single element, a block otherwise."""
    value = _array(x)
    try:
        out = value[key]
    except (IndexError, TypeError) as error:
        message = f"cannot index {x!r} of shape {value.shape} with {key!r}: {error}"
        raise type(error)(message) from None
    if np.ndim(out) == 0:
        return _record(INDEX, x, None, float(out), key)
    return _record(INDEX, x, None, np.array(out), key)


def _index_vjp(
    a: FloatArray, b: None, out: RuleValue, g: RuleValue, key: Any
) -> tuple[FloatArray, None]:
    gradient = np.full(a.shape, UNREACHED)  # elements not picked: nothing reached them
    np.add.at(gradient, key, g)
    return gradient, None


# -- fused ops ------------------------------------------------------------------------------
def _check_linear(X: ArrayLike, W: ArrayLike, b: ArrayLike, name: str) -> None:
    if np.ndim(X) != 2 or np.ndim(W) != 2 or np.ndim(b) != 1:
        raise ValueError(
            f"{name} needs X (B, n), W (n, h), b (h,); got shapes {np.shape(X)}, "
            f"{np.shape(W)}, {np.shape(b)}"
        )
    if np.shape(X)[1] != np.shape(W)[0] or np.shape(W)[1] != np.shape(b)[0]:
        raise ValueError(
            f"{name}: shapes do not chain: X {np.shape(X)} @ W {np.shape(W)} + b {np.shape(b)}"
        )


def _fused_linear(
    code: int,
    name: str,
    forward: Callable[[FloatArray, FloatArray, FloatArray], FloatArray],
    X: Any,
    W: Any,
    b: Any,
) -> Block | FloatArray:
    _refuse_scalar_nodes(
        name, "fa.relu(X @ W + b)" if code == LINEAR_RELU else "X @ W + b", X, W, b
    )
    tape = _tape_of(X, W, b)
    if tape is None:
        X, W, b = (np.ascontiguousarray(v, dtype=np.float64) for v in (X, W, b))
        _check_linear(X, W, b, name)
        return forward(X, W, b)
    X, W, b = (as_operand(tape, v, f"{name} operand") for v in (X, W, b))
    x_value, w_value, b_value = (value_of(tape, v._id) for v in (X, W, b))
    _check_linear(x_value, w_value, b_value, name)
    pair = tape.append_block_op(PAIR, W._id, b._id, None, None)
    return tape.append_block_op(code, X._id, pair._id, forward(x_value, w_value, b_value), None)


@overload
def linear(X: ArrayInput, W: Block, b: ArrayInput) -> Block: ...
@overload
def linear(X: Block, W: ArrayInput, b: ArrayInput) -> Block: ...
@overload
def linear(X: ArrayInput, W: ArrayInput, b: Block) -> Block: ...
@overload
def linear(X: ArrayLike, W: ArrayLike, b: ArrayLike) -> FloatArray: ...
def linear(X: ArrayInput, W: ArrayInput, b: ArrayInput) -> Block | FloatArray:
    """``X @ W + b`` as one fused node (see ``kernels/fused.py`` for the backward rule)."""
    return _fused_linear(LINEAR, "linear", fused.linear_forward, X, W, b)


@overload
def linear_relu(X: ArrayInput, W: Block, b: ArrayInput) -> Block: ...
@overload
def linear_relu(X: Block, W: ArrayInput, b: ArrayInput) -> Block: ...
@overload
def linear_relu(X: ArrayInput, W: ArrayInput, b: Block) -> Block: ...
@overload
def linear_relu(X: ArrayLike, W: ArrayLike, b: ArrayLike) -> FloatArray: ...
def linear_relu(X: ArrayInput, W: ArrayInput, b: ArrayInput) -> Block | FloatArray:
    """``relu(X @ W + b)`` as one fused node; ``relu'(0) = 0``.

    The same as ``fa.relu(X @ W + b)`` recorded as three block nodes (and
    checked against it in the tests), in one compiled forward and one
    hand-derived backward call, without the two (B, h) temporaries.
    """
    return _fused_linear(LINEAR_RELU, "linear_relu", fused.linear_relu_forward, X, W, b)


@overload
def mse_loss(Y: Block, T: ArrayInput) -> Var: ...
@overload
def mse_loss(Y: ArrayInput, T: Block) -> Var: ...
@overload
def mse_loss(Y: ArrayLike, T: ArrayLike) -> float: ...
def mse_loss(Y: Any, T: Any) -> Var | float:
    """Mean squared error ``mean((Y - T)**2)`` as one fused node (a scalar)."""
    _refuse_scalar_nodes("mse_loss", "((Y - T) * (Y - T)).mean()", Y, T)
    tape = _tape_of(Y, T)
    if tape is None:
        Y, T = np.ascontiguousarray(Y, np.float64), np.ascontiguousarray(T, np.float64)
        _check_same_shape(Y, T)
        return fused.mse_loss_forward(Y, T)
    Y, T = as_operand(tape, Y, "mse_loss operand"), as_operand(tape, T, "mse_loss operand")
    a, b = value_of(tape, Y._id), value_of(tape, T._id)
    _check_same_shape(a, b)
    return tape.append_block_op(MSE_LOSS, Y._id, T._id, float(fused.mse_loss_forward(a, b)), None)


def _holds_nodes(x: object) -> bool:
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype=object)
    if not (isinstance(x, np.ndarray) and x.dtype == object):
        return False
    return any(isinstance(element, Node) for element in x.flat)


def _refuse_scalar_nodes(name: str, unfused: str, *operands: object) -> None:
    # Nodes in an object array (or a list) would be read as numbers: values,
    # no gradient.
    if any(_holds_nodes(x) for x in operands):
        raise TypeError(
            f"fa.{name} takes arrays or blocks, not object arrays of scalar nodes "
            f"(fa.scalar_nodes): write it unfused, {unfused}, which records every node"
        )


def _check_same_shape(a: ArrayLike, b: ArrayLike) -> None:
    if np.shape(a) != np.shape(b) or np.ndim(a) == 0:
        raise ValueError(
            f"mse_loss needs two arrays of one shape, got {np.shape(a)} and {np.shape(b)}"
        )


def _linear_forward(
    kernel: Callable[[FloatArray, FloatArray, FloatArray], FloatArray],
) -> ForwardRule:
    def forward(X: FloatArray, pair: tuple[FloatArray, FloatArray], params: None) -> FloatArray:
        W, b = pair
        return kernel(X, W, b)

    return forward


def _linear_vjp(
    X: FloatArray, pair: tuple[FloatArray, FloatArray], out: FloatArray, G: FloatArray, params: None
) -> tuple[FloatArray, tuple[FloatArray, FloatArray]]:
    W, _ = pair
    G = np.ascontiguousarray(G)
    dX, dW, db = fused.linear_backward(X, W, G)
    return product_reach(dX, G, W.T, True), (product_reach(dW, X.T, G, False), db)


def _linear_relu_vjp(
    X: FloatArray, pair: tuple[FloatArray, FloatArray], out: FloatArray, G: FloatArray, params: None
) -> tuple[FloatArray, tuple[FloatArray, FloatArray]]:
    W, _ = pair
    dX, dW, db, dZ = fused.linear_relu_backward(X, W, out, np.ascontiguousarray(G))
    return product_reach(dX, dZ, W.T, True), (product_reach(dW, X.T, dZ, False), db)


def _mse_vjp(
    Y: FloatArray, T: FloatArray, out: float, g: float, params: None
) -> tuple[FloatArray, FloatArray]:
    return fused.mse_loss_backward(Y, T, float(g))


RULES: dict[int, tuple[ForwardRule, VjpRule]] = {
    MATMUL: (_matmul_forward, _matmul_vjp),
    SUM: (_reduce_forward(SUM), _reduce_vjp(SUM)),
    MEAN: (_reduce_forward(MEAN), _reduce_vjp(MEAN)),
    RESHAPE: (
        lambda a, b, shape: np.reshape(a, shape),
        lambda a, b, out, g, shape: (np.reshape(g, a.shape), None),
    ),
    TRANSPOSE: (lambda a, b, p: np.ascontiguousarray(a.T), lambda a, b, out, g, p: (g.T, None)),
    INDEX: (lambda a, b, key: _index_value(a, key), _index_vjp),
    LINEAR: (_linear_forward(fused.linear_forward), _linear_vjp),
    LINEAR_RELU: (_linear_forward(fused.linear_relu_forward), _linear_relu_vjp),
    MSE_LOSS: (lambda a, b, p: float(fused.mse_loss_forward(a, b)), _mse_vjp),
}
"""Block opcode -> (forward(a, b, params), vjp(a, b, out, g, params) -> (da, db))."""


def _index_value(a: FloatArray, key: Any) -> float | FloatArray:
    out = a[key]
    return float(out) if np.ndim(out) == 0 else np.array(out)


def forward_rule(code: int, a: RuleValue, b: RuleValue, params: object) -> RuleValue:
    """The value of a block-op node from its operands' values."""
    if code in RULES:
        return RULES[code][0](a, b, params)
    _require_elementwise(code, "forward")
    return _elementwise_forward(code, a, a if b is None else b, params)


def vjp_rule(
    code: int,
    a: RuleValue,
    b: RuleValue,
    out: RuleValue,
    g: RuleValue,
    params: object,
    unary: bool,
) -> tuple[RuleValue, RuleValue]:
    """Gradients for the operands of a block-op node, given its output gradient ``g``."""
    if code in RULES:
        return RULES[code][1](a, b, out, g, params)
    _require_elementwise(code, "vector-Jacobian product (VJP)")
    return _elementwise_vjp(code, a, b, out, g, params, unary)


def _require_elementwise(code: int, rule: str) -> None:
    """Raise unless ``code`` is a scalar op, whose rules serve blocks elementwise.

    A block op without its own rule must never fall through to the
    elementwise path: the generated scalar dispatch has no row for it and
    would answer 0 (a silent zero gradient).
    """
    if code >= optable.NUM_OPS or optable.OPS[code].arity == 0:
        op = optable.ALL.get(code)
        name = op.name if op is not None else "unknown"
        raise NotImplementedError(
            f"no {rule} rule for the block op {name!r} (opcode {code}): add it to "
            "fastad/blocks.py's RULES and JVP_RULES"
        )


# -- forward mode: Jacobian-vector products ----------------------------------------------------
# Each rule maps operand tangents (None: nothing reached the operand) to the
# output tangent; all are linear in the tangents, and use the same values as
# the VJPs. Elements nothing reached hold UNREACHED (-0.0), as in the sweeps.
def _unreached_if_none(tangent: RuleValue, like: RuleValue) -> RuleValue:
    return np.full(np.shape(like), UNREACHED) if tangent is None else tangent


def _elementwise_jvp(
    code: int,
    a: RuleValue,
    b: RuleValue,
    out: RuleValue,
    ta: RuleValue,
    tb: RuleValue,
    params: object,
    unary: bool,
) -> FloatArray | float:
    shape = np.shape(out)

    def flat(x: ArrayLike) -> FloatArray:
        return np.ascontiguousarray(np.broadcast_to(x, shape), dtype=np.float64).ravel()

    a_full = flat(a)
    b_full = a_full if unary else flat(b)
    ta_full = flat(UNREACHED if ta is None else ta)
    tb_full = ta_full if unary else flat(UNREACHED if tb is None else tb)
    tangent: FloatArray = np.empty(a_full.size)
    sweeps.map_jvp(code, a_full, b_full, flat(out), ta_full, tb_full, tangent)
    tangent = tangent.reshape(shape)
    return tangent if shape else float(tangent)


def _matmul_jvp(
    a: FloatArray, b: FloatArray, out: RuleValue, ta: RuleValue, tb: RuleValue, params: None
) -> FloatArray | float:
    total: FloatArray = np.full(np.shape(out), UNREACHED)
    if ta is not None:
        total = total + reach_matmul(np.asarray(ta, dtype=np.float64), b, True)
    if tb is not None:
        total = total + reach_matmul(a, np.asarray(tb, dtype=np.float64), False)
    return float(total) if np.ndim(total) == 0 else total


def _linear_jvp(relu: bool) -> JvpRule:
    def jvp(
        X: FloatArray,
        pair: tuple[FloatArray, FloatArray],
        out: FloatArray,
        tX: RuleValue,
        tpair: RuleValue,
        params: None,
    ) -> FloatArray:
        W, b = pair
        tW, tb = tpair if tpair is not None else (None, None)
        total = np.full(np.shape(out), UNREACHED)
        if tX is not None:
            total += reach_matmul(np.asarray(tX, dtype=np.float64), W, True)
        if tW is not None:
            total += reach_matmul(X, np.asarray(tW, dtype=np.float64), False)
        if tb is not None:
            total += tb  # UNREACHED + UNREACHED stays UNREACHED
        if not relu:
            return total
        # relu'(z) is 1 above 0, an exact (strong) zero at or below, nan at nan.
        partial = np.where(out > 0.0, 1.0, np.where(np.isnan(out), np.nan, 0.0))
        return _contributions(partial, total)

    return jvp


def _mse_jvp(
    Y: FloatArray, T: FloatArray, out: float, tY: RuleValue, tT: RuleValue, params: None
) -> float:
    # d/dY = 2 (Y - T) / size, d/dT its negative: exact zeros where Y == T.
    partial = 2.0 * (Y - T) / Y.size
    total = _contributions(partial, _unreached_if_none(tY, Y))
    total = total + _contributions(-partial, _unreached_if_none(tT, T))
    return float(reach_sum(total))


def _reduce_jvp(code: int) -> JvpRule:
    def jvp(
        a: FloatArray, b: None, out: RuleValue, ta: RuleValue, tb: None, axis: int | None
    ) -> RuleValue:
        value = reach_sum(ta, axis=axis)
        if code == MEAN:
            value = value / (a.size if axis is None else a.shape[axis])
        return float(value) if axis is None else value

    return jvp


JVP_RULES: dict[int, JvpRule] = {
    MATMUL: _matmul_jvp,
    SUM: _reduce_jvp(SUM),
    MEAN: _reduce_jvp(MEAN),
    RESHAPE: lambda a, b, out, ta, tb, shape: np.reshape(ta, shape),
    TRANSPOSE: lambda a, b, out, ta, tb, p: np.ascontiguousarray(np.transpose(ta)),
    INDEX: lambda a, b, out, ta, tb, key: _index_value(np.asarray(ta), key),
    LINEAR: _linear_jvp(relu=False),
    LINEAR_RELU: _linear_jvp(relu=True),
    MSE_LOSS: _mse_jvp,
}
"""Block opcode -> jvp(a, b, out, ta, tb, params): the output tangent."""


def jvp_rule(
    code: int,
    a: RuleValue,
    b: RuleValue,
    out: RuleValue,
    ta: RuleValue,
    tb: RuleValue,
    params: object,
    unary: bool,
) -> RuleValue:
    """The tangent of a block-op node's output from its operands' tangents."""
    if code in JVP_RULES:
        if code in (SUM, MEAN, RESHAPE, TRANSPOSE, INDEX):
            ta = _unreached_if_none(ta, a)
        return JVP_RULES[code](a, b, out, ta, tb, params)
    _require_elementwise(code, "Jacobian-vector product (JVP)")
    return _elementwise_jvp(code, a, b, out, ta, tb, params, unary)


# -- the scalar-node path: the same computation as individual nodes -------------------------
def scalar_nodes(
    values: ArrayLike, name: str | None = None, tape: Tape | None = None
) -> ObjectArray:
    """An object array of scalar leaves, one per element of ``values``.

    The third way to record a block computation (after fused and unfused
    blocks): NumPy's object arrays apply the nodes' operators elementwise,
    so ``scalar_nodes(X) @ scalar_nodes(W)`` records every multiply and add.
    Use the ``fastad`` functions (``fa.relu`` and co.) on object arrays too.
    """
    from fastad.tape import current_tape

    values = np.asarray(values, dtype=np.float64)
    tape = tape if tape is not None else current_tape()
    nodes = np.empty(values.shape, dtype=object)
    for position, value in np.ndenumerate(values):
        label = f"{name}[{', '.join(map(str, position))}]" if name else None
        nodes[position] = tape.input(float(value), label)
    return nodes
