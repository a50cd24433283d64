"""A function of scalars that records blocks, traced as a scalar program.

A function of scalar arguments may build small arrays from them
(``fa.stack([a, b])``, a product with a constant matrix, a sum): its traced
tape then holds block ops, which the lanes interpreter and the scalar tier's
generated code do not run. :func:`expand_blocks` rewrites that tape into a
scalar tape with a node per element of every block, so the compiled function
runs at the scalar tier's speed at any number of points:

- an elementwise op is its scalar rule per element (broadcast as NumPy does):
  the block's values bit for bit;
- ``@``, ``sum``, ``mean``, ``cumsum``, ``linear`` and ``mse_loss`` are
  chains of multiplies and adds, left to right (NumPy's order on object
  arrays, not its pairwise sums or BLAS): their values differ from the
  block's by rounding;
- ``reshape``, ``transpose``, indexing and ``concatenate`` choose elements;
- ``logsumexp``, ``softmax`` and ``log_softmax`` are their formulas shifted
  by the maximum of each slice, the shift held out of the derivatives
  (``stop_gradient``: the formulas do not depend on it).

Ops whose scalar form would change their derivative's meaning (``max``,
``min`` and ``prod`` at ties and zeros, the cross-entropy's labels, the
linear algebra) raise ``NotImplementedError`` naming the op: compile such a
function as a function of arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.graph import ancestors
from fastad.eager.handle import storage_of
from fastad.eager.tape import Tape
from fastad.kernels import optable

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import IdArray

_CODE = {op.name: op.code for op in optable.OPS}
_PICK, _PICK_NOT, _ADD = _CODE["pick"], _CODE["pick_not"], _CODE["add"]


MAX_EXPANDED_NODES = 4_000_000
"""The most scalar nodes an expansion may make (each costs a few hundred bytes of Python
objects while it runs); a larger one raises, pointing to a function of arrays."""


class _Rows:
    """The expanded tape's nodes as they are emitted: opcode, operands, leaf values."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.opcode: list[int] = []
        self.in0: list[int] = []
        self.in1: list[int] = []
        self.val: list[float] = []
        self._constants: dict[bytes, int] = {}
        self.constant_values: dict[int, float] = {}

    def emit(self, code: int, a: int = -1, b: int = -1, value: float = 0.0) -> int:
        if len(self.opcode) >= MAX_EXPANDED_NODES:
            raise ValueError(
                f"{self.name} builds arrays whose ops expand to more than "
                f"{MAX_EXPANDED_NODES:,} scalar ops: compile it as a function of arrays, "
                "fa.compile(fn, example=(array, ...))"
            )
        self.opcode.append(code)
        self.in0.append(a)
        self.in1.append(b)
        self.val.append(value)
        return len(self.opcode) - 1

    def constant(self, value: float) -> int:
        key = np.float64(value).tobytes()
        found = self._constants.get(key)
        if found is None:
            found = self._constants[key] = self.emit(optable.CONST, value=float(value))
            self.constant_values[found] = float(value)
        return found

    def scalar_op(self, code: int, a: int, b: int) -> int:
        """Scalar op ``code`` of nodes ``a`` and ``b`` (-1: none), folded where its result is
        an operand or a constant bit for bit: a pick by a constant condition, an addition
        of -0.0 (the identity of +). ``fa.stack`` of ``k`` scalars then costs ``k`` nodes."""
        known = self.constant_values
        if code in (_PICK, _PICK_NOT) and a in known:
            taken = (known[a] != 0.0) == (code == _PICK)
            return b if taken else self.constant(-0.0)
        if code == _ADD:
            if _is_negative_zero(known.get(a)):
                return b
            if _is_negative_zero(known.get(b)):
                return a
        return self.emit(code, a, b)

    def node(self, x: Any) -> _Scalar:
        """``x`` as a node: itself, or a constant for a number."""
        return x if isinstance(x, _Scalar) else _Scalar(self, self.constant(float(x)))

    def op(self, name: str, a: Any, b: Any = None) -> _Scalar:
        """The scalar op ``name`` of ``a`` (and ``b``)."""
        first = self.node(a).id
        second = -1 if b is None else self.node(b).id
        return _Scalar(self, self.scalar_op(_CODE[name], first, second))


def _is_negative_zero(value: float | None) -> bool:
    return value == 0.0 and np.signbit(value)


class _Scalar:
    """One node of the expanded tape. Its operators record ops, so NumPy's object arrays of
    them compute products, sums and moves in NumPy's own order."""

    __slots__ = ("id", "rows")

    def __init__(self, rows: _Rows, node: int) -> None:
        self.rows = rows
        self.id = node

    def __add__(self, other: Any) -> _Scalar:
        return self.rows.op("add", self, other)

    def __radd__(self, other: Any) -> _Scalar:
        return self.rows.op("add", other, self)

    def __sub__(self, other: Any) -> _Scalar:
        return self.rows.op("sub", self, other)

    def __rsub__(self, other: Any) -> _Scalar:
        return self.rows.op("sub", other, self)

    def __mul__(self, other: Any) -> _Scalar:
        return self.rows.op("mul", self, other)

    def __rmul__(self, other: Any) -> _Scalar:
        return self.rows.op("mul", other, self)

    def __truediv__(self, other: Any) -> _Scalar:
        return self.rows.op("div", self, other)

    def __rtruediv__(self, other: Any) -> _Scalar:
        return self.rows.op("div", other, self)


Expanded = Any
"""A node's expansion: a :class:`_Scalar`, or an object array of them in the block's shape."""


def _elementwise(rows: _Rows, code: int, operands: list[Expanded]) -> Expanded:
    """A scalar op per element of its (broadcast) operands."""
    arrays = np.broadcast_arrays(*(_object_array(x) for x in operands))
    out = np.empty(arrays[0].shape, object)
    flat = out.reshape(-1)
    columns = [a.reshape(-1) for a in arrays]
    b = columns[1] if len(columns) > 1 else None
    for t, x in enumerate(columns[0]):
        second = -1 if b is None else rows.node(b[t]).id
        flat[t] = _Scalar(rows, rows.scalar_op(code, rows.node(x).id, second))
    return out[()] if out.ndim == 0 else out


def _object_array(x: Expanded) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    array = np.empty((), object)
    array[()] = x
    return array


def _each(rows: _Rows, name: str, x: Expanded) -> Expanded:
    return _elementwise(rows, _CODE[name], [x])


def _scalar_or(x: Any) -> Expanded:
    """A reduction's result: a 0-d object array is its one node."""
    return x[()] if isinstance(x, np.ndarray) and x.ndim == 0 else x


def _nodes(rows: _Rows, x: Any) -> Expanded:
    """A sum's, product's or running sum's result, any number in it a constant node."""
    if not isinstance(x, np.ndarray):
        return rows.node(x)
    flat = x.reshape(-1)
    for t, item in enumerate(flat):
        flat[t] = rows.node(item)
    return x


def _reduce(x: np.ndarray, params: Any, rows: _Rows) -> Expanded:
    """``sum`` over a :class:`Reduction`'s axes, left to right; empty slices give 0.0."""
    return _scalar_or(_nodes(rows, np.sum(x, axis=params.axes, keepdims=params.keepdims)))


def _mean(x: np.ndarray, params: Any, rows: _Rows) -> Expanded:
    total = _reduce(x, params, rows)
    count = params.count(x.shape)
    return _elementwise(rows, _CODE["div"], [total, rows.node(float(count))])


def _softmax_family(name: str, x: np.ndarray, params: Any, rows: _Rows) -> Expanded:
    """``logsumexp``, ``softmax`` or ``log_softmax`` over the axes by their formulas,
    shifted by each slice's maximum (held out of the derivatives) where it is finite.

    A slice whose maximum is not finite takes no shift: its logsumexp is then
    the maximum (inf, -inf or nan), as the block op's; its softmax and
    log-softmax are nan throughout, as the block op's, by a term ``x * nan``
    added there (-0.0, the identity of +, elsewhere), so their derivatives
    are nan too. (The logsumexp's derivative there is the formula's, where the
    block op's is nan throughout: nan at a +inf, 0 where an exponential is 0.)
    """
    if x.size == 0:
        raise NotImplementedError(
            f"{name} of an empty array in a compiled function of scalars: compile it as a "
            "function of arrays"
        )
    axes = tuple(range(x.ndim)) if params.axes is None else params.axes
    keep = type(params)(params.axes, True)
    maxima = np.apply_over_axes(lambda a, axis: _maxima(rows, a, axis), x, axes)
    finite = _elementwise(rows, _CODE["lt"], [_each(rows, "abs", maxima), rows.node(float("inf"))])
    shift = _each(rows, "stop_gradient", _elementwise(rows, _PICK, [finite, maxima]))
    shifted = _elementwise(rows, _CODE["sub"], [x, shift])
    exps = _each(rows, "exp", shifted)
    total = _reduce(np.asarray(exps, object), keep, rows)
    log_total = _each(rows, "log", total)
    if name == "logsumexp":
        result = _elementwise(rows, _ADD, [shift, log_total])
        return _scalar_or(np.asarray(result, object).reshape(params.shape(x.shape)))
    if name == "softmax":
        formula = _elementwise(rows, _CODE["div"], [exps, total])
    else:
        formula = _elementwise(rows, _CODE["sub"], [shifted, log_total])
    nan = _elementwise(rows, _CODE["mul"], [x, rows.node(float("nan"))])
    return _elementwise(rows, _ADD, [formula, _elementwise(rows, _PICK_NOT, [finite, nan])])


def _maxima(rows: _Rows, a: np.ndarray, axis: int) -> np.ndarray:
    """The maximum along ``axis`` (kept, as a length-1 axis) by the scalar ``maximum``."""
    moved = np.moveaxis(a, axis, -1)
    out = np.empty(moved.shape[:-1], object)
    for position in np.ndindex(out.shape):
        best = moved[position][0]
        for item in moved[position][1:]:
            best = rows.op("maximum", best, item)
        out[position] = best
    return np.expand_dims(out, axis)


def _linear(rows: _Rows, operands: list[Expanded], relu: bool) -> Expanded:
    X, W, b = operands
    Z = _elementwise(rows, _CODE["add"], [np.matmul(X, W), b])
    return _each(rows, "relu", Z) if relu else Z


def _mse(rows: _Rows, Y: np.ndarray, T: np.ndarray) -> Expanded:
    d = _elementwise(rows, _CODE["sub"], [Y, T])
    squares = _elementwise(rows, _CODE["mul"], [d, d])
    total = rows.node(np.sum(np.asarray(squares, object)))
    return rows.op("div", total, float(Y.size))


def _block_ops(rows: _Rows) -> dict[str, Callable[[list[Expanded], Any], Expanded]]:
    """Per block op, its expansion from the operands' expansions and the op's parameters."""
    return {
        "matmul": lambda x, p: _nodes(rows, np.matmul(x[0], x[1])),
        "sum": lambda x, p: _reduce(x[0], p, rows),
        "mean": lambda x, p: _mean(x[0], p, rows),
        "cumsum": lambda x, p: _nodes(rows, np.cumsum(x[0], axis=p)),
        "reshape": lambda x, p: np.reshape(x[0], p),
        "transpose": lambda x, p: np.transpose(x[0], p),
        "index": lambda x, p: _scalar_or(np.asarray(x[0][p], object).copy()),
        "concatenate": lambda x, p: np.concatenate([_object_array(a) for a in x], axis=p),
        "linear": lambda x, p: _linear(rows, x, relu=False),
        "linear_relu": lambda x, p: _linear(rows, x, relu=True),
        "mse_loss": lambda x, p: _mse(rows, *x),
        "logsumexp": lambda x, p: _softmax_family("logsumexp", x[0], p, rows),
        "softmax": lambda x, p: _softmax_family("softmax", x[0], p, rows),
        "log_softmax": lambda x, p: _softmax_family("log_softmax", x[0], p, rows),
    }


def expand_blocks(
    tape: Tape,
    outputs: IdArray,
    guards: list[tuple[int, bool]],
    sources: dict[int, tuple[str, int]],
    name: str,
) -> tuple[Tape, IdArray, dict[int, tuple[str, int]]]:
    """The scalar tape of a traced ``tape`` holding block ops, each old node's new id, and
    the source line of each new node (its block op's, for the nodes of its elements).

    Only the arguments and what the outputs and guards depend on are expanded. A scalar
    node maps to its new node; a block to -1 (its elements have nodes, but no one id). Raises
    ``NotImplementedError`` naming an op without an expansion, ``ValueError`` naming a
    guard that reads an array or whose outcome the expansion's rounding changes.
    """
    storage: TapeStorage = storage_of(tape)
    rows = _Rows(name)
    ops = _block_ops(rows)
    alive = storage.opcode[: len(tape)] == optable.INPUT  # every argument, used or not
    for root in [*(int(node) for node in outputs), *(node for node, _ in guards)]:
        if not alive[root]:
            alive[: root + 1] |= ancestors(storage, root)[0]
    expansions: dict[int, Expanded] = {}
    new_ids = np.full(len(tape), -1, np.int64)
    labels = tape.labels
    new_labels: dict[int, str] = {}
    new_sources: dict[int, tuple[str, int]] = {}
    for i in np.flatnonzero(alive).tolist():
        start = len(rows.opcode)
        expanded = _expand_node(storage, i, expansions, rows, ops, name, sources)
        expansions[i] = expanded
        location = sources.get(i)
        if location is not None:
            for node in range(start, len(rows.opcode)):
                new_sources[node] = location
        if isinstance(expanded, _Scalar):
            new_ids[i] = expanded.id
            label = labels.get(i)
            if label is not None:
                new_labels.setdefault(expanded.id, label)
    for node, _ in guards:
        if new_ids[node] < 0:
            raise ValueError(
                f"{name} branches on an array{_at(sources, node)}: a compiled function "
                "branches on scalar nodes only (use fa.where for an elementwise choice)"
            )
    expanded_tape = Tape.from_arrays(
        np.array(rows.opcode, np.uint8),
        np.array(rows.in0, np.int32),
        np.array(rows.in1, np.int32),
        np.array(rows.val, np.float64),
        new_labels,
    )
    for node, truth in guards:  # the values recomputed in the expansion's order
        if (expanded_tape.val[new_ids[node]] != 0.0) != truth:
            raise ValueError(
                f"{name}'s branch{_at(sources, node)} went {'True' if truth else 'False'} "
                "when traced, and the other way once its arrays' sums and products run "
                "left to right as scalar ops (the two differ by rounding at this point): "
                "trace at another point, or use fa.where"
            )
    return expanded_tape, new_ids, new_sources


def _at(sources: dict[int, tuple[str, int]], node: int) -> str:
    location = sources.get(node)
    return "" if location is None else f" at {location[0]}:{location[1]}"


def _expand_node(
    storage: TapeStorage,
    i: int,
    expansions: dict[int, Expanded],
    rows: _Rows,
    ops: dict[str, Callable[[list[Expanded], Any], Expanded]],
    name: str,
    sources: dict[int, tuple[str, int]],
) -> Expanded:
    """Node ``i``'s expansion from its operands'."""
    code = int(storage.opcode[i])
    value = storage.block_value(i)
    operands = storage.operands(i)
    if code in (optable.INPUT, optable.CONST) and value is not None:
        # An array leaf the function made: constant elements (not a traced input).
        leaf = np.empty(value.shape, object)
        for position, element in np.ndenumerate(value):
            leaf[position] = rows.node(float(element))
        return leaf
    if code == optable.INPUT:
        return _Scalar(rows, rows.emit(optable.INPUT, value=float(storage.val[i])))
    if code == optable.CONST:
        return rows.node(float(storage.val[i]))
    found = [expansions[j] for j in operands]
    if not storage.blocks.is_op(i):  # a scalar op of scalar nodes
        return rows.op(optable.ALL[code].name, *found)
    if code < optable.NUM_OPS:
        return _elementwise(rows, code, found)
    op = optable.ALL[code].name
    expand = ops.get(op)
    if expand is None:
        raise NotImplementedError(
            f"a compiled function of scalars runs its array ops as scalar ops, and {name} "
            f"calls {op!r}{_at(sources, i)}, which has no scalar form here (its "
            "derivative's meaning would change, or it is linear algebra). Compile it as a "
            "function of arrays, fa.compile(fn, example=(array, ...)), or record it with "
            "fa.Tape()"
        )
    return expand(found, storage.blocks.params(i))
