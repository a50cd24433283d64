"""NumPy's axis, joining and diagonal functions on blocks, composed of recorded ops.

``np.expand_dims``, ``np.moveaxis``, ``np.swapaxes``, ``np.flip``, ``np.trace``,
``np.diagonal``, ``np.diag``, ``np.vstack``, ``np.hstack``, ``np.tile``, ``np.pad``
(constant mode) and ``np.sort`` on block nodes record reshapes, transposes,
indexing, products, sums and concatenations, so every derivative (first and second order) is
theirs: nothing here has a rule of its own. ``np.cumsum`` records its own
block op (``reduction_rules.Cumsum``). The operands may mix blocks and
plain arrays (NumPy gives these functions to fastad when any operand is a
node); a scalar node is refused, naming the function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fastad.eager import blocks
from fastad.eager.block_params import normal_axis
from fastad.eager.handle import values_of
from fastad.eager.node import Block, Var, record_block_on
from fastad.kernels import optable
from fastad.util.errors import as_float64, is_int

CUMSUM = optable.BLOCK_BY_NAME["cumsum"].code


def operand(x: Any, function: str) -> Any:
    """``x`` as a block or a float64 array; a scalar node is refused."""
    if isinstance(x, Var):
        raise TypeError(
            f"np.{function} of the scalar node {x!r}: it takes arrays (blocks); a scalar "
            "node is one number: use fa.stack([x]) for a vector of it"
        )
    return x if isinstance(x, Block) else as_float64(x, f"np.{function}'s operand")


def axes_of(value: Any) -> tuple[Any, ...]:
    """An ``axis=`` argument as a tuple: one axis, or a tuple or list of them."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def along(x: Any, axis: Any) -> tuple[Any, int]:
    """``x`` and ``axis`` normalised, ``x`` flattened where ``axis`` is None (NumPy's rule for
    np.cumsum, np.sort, np.repeat, np.take...)."""
    if axis is None:
        return x.reshape((-1,)), 0
    return x, normal_axis(x.shape, axis, x)


def permuted(x: Any, order: Sequence[int]) -> Any:
    """``x.transpose(order)``, or ``x`` itself where the order is the identity (no op
    recorded)."""
    order = list(order)
    return x if order == list(range(len(order))) else x.transpose(tuple(order))


def expand_dims(a: Any, axis: Any) -> Any:
    x = a if isinstance(a, Var) else operand(a, "expand_dims")  # a scalar node: a 0-d array
    wanted = axes_of(axis)
    rank = x.ndim + len(wanted)
    for ax in wanted:
        if is_int(ax) and not -rank <= ax < rank:
            raise np.exceptions.AxisError(
                f"np.expand_dims: axis {ax} is out of range for the result's {rank} axes "
                f"({x!r} of shape {x.shape} and {len(wanted)} new)"
            )
    placed = sorted(normal_axis((1,) * rank, ax, x) for ax in wanted)
    if len(set(placed)) != len(placed):
        raise ValueError(f"np.expand_dims: axis {axis!r} names a position twice")
    shape = list(x.shape)
    for position in placed:
        shape.insert(position, 1)
    return x.reshape(tuple(shape))


def moveaxis(a: Any, source: Any, destination: Any) -> Any:
    x = operand(a, "moveaxis")
    sources = [normal_axis(x.shape, ax, x) for ax in axes_of(source)]
    targets = [normal_axis(x.shape, ax, x) for ax in axes_of(destination)]
    if len(sources) != len(targets):
        raise ValueError(
            f"np.moveaxis: source {source!r} and destination {destination!r} must name as many axes"
        )
    order = [n for n in range(x.ndim) if n not in sources]
    for target, axis in sorted(zip(targets, sources, strict=True)):
        order.insert(target, axis)
    return x.transpose(tuple(order))


def swapaxes(a: Any, axis1: Any, axis2: Any) -> Any:
    x = operand(a, "swapaxes")
    order = list(range(x.ndim))
    i, j = normal_axis(x.shape, axis1, x), normal_axis(x.shape, axis2, x)
    order[i], order[j] = order[j], order[i]
    return x.transpose(tuple(order))


def flip(m: Any, axis: Any = None) -> Any:
    x = operand(m, "flip")
    flipped = range(x.ndim) if axis is None else [normal_axis(x.shape, a, x) for a in axes_of(axis)]
    if len(set(flipped)) != len(flipped):
        raise ValueError(f"np.flip: axis={axis!r} names an axis twice (repeated axis)")
    key = tuple(slice(None, None, -1) if n in flipped else slice(None) for n in range(x.ndim))
    return x[key]


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """``np.diagonal``: the diagonal of the two axes as the last axis, the other axes
    kept in their order, for blocks of any rank."""
    x = operand(a, "diagonal")
    if x.ndim < 2:
        raise ValueError(
            f"np.diagonal takes at least two axes, got shape {x.shape}: np.diag of a vector "
            "makes a matrix"
        )
    first, second = normal_axis(x.shape, axis1, x), normal_axis(x.shape, axis2, x)
    if first == second:
        raise ValueError(f"np.diagonal: axis1={axis1!r} and axis2={axis2!r} are both axis {first}")
    return diagonal_last(x, integer(offset, "np.diagonal's offset"), first, second)


def diagonal_last(x: Any, offset: int, first: int, second: int) -> Any:
    """The diagonal of axes ``first`` and ``second`` of ``x`` (offset ``offset`` above it),
    as ``np.diagonal`` gives it: a transpose putting the pair last (where it is not
    there already), a slice for the offset, and every ``(columns + 1)``th element of
    the pair flattened, a strided slice. ``x`` is a block, or ``np.einsum``'s planned
    value (the ops it asks for are the plan's)."""
    rest = [n for n in range(x.ndim) if n not in (first, second)]
    x = permuted(x, (*rest, first, second))
    if offset > 0:  # the diagonal starts in column `offset`
        x = x[..., :, offset:]
    elif offset < 0:  # in row `-offset`
        x = x[..., -offset:, :]
    rows, columns = x.shape[-2:]
    count = min(rows, columns)
    flat = x.reshape((*x.shape[:-2], rows * columns))
    return flat[..., : count * (columns + 1) : columns + 1]


def trace(
    a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None
) -> Any:
    refuse_options("trace", out=out, dtype=other_dtype(dtype))
    d = diagonal(a, offset, axis1, axis2)
    return d.sum() if d.ndim == 1 else d.sum(axis=-1)


def diag(v: Any, k: int = 0) -> Any:
    x = operand(v, "diag")
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"np.diag takes a vector or a matrix, got shape {x.shape}")
    # A gather from the vector and one zero: exact zeros off the diagonal, inf and nan
    # of the vector included (a product with np.eye would put 0 * inf = nan there).
    n, k = x.shape[0], integer(k, "np.diag's k")
    positions = np.full((n + abs(k), n + abs(k)), n)  # the zero's position
    rows = np.arange(n)
    positions[rows + max(0, -k), rows + max(0, k)] = rows
    return blocks.concatenate([x, np.zeros(1)], axis=0)[positions]


def vstack(tup: Sequence[Any], **options: Any) -> Any:
    refuse_options("vstack", **options)
    parts = [_at_least_1d(operand(x, "vstack")) for x in tup]
    return blocks.concatenate([x.reshape((1, -1)) if x.ndim == 1 else x for x in parts], 0)


def hstack(tup: Sequence[Any], **options: Any) -> Any:
    refuse_options("hstack", **options)
    parts = [_at_least_1d(operand(x, "hstack")) for x in tup]
    return blocks.concatenate(parts, axis=0 if all(x.ndim == 1 for x in parts) else 1)


def _at_least_1d(x: Any) -> Any:
    return x.reshape((1,)) if x.ndim == 0 else x


def tile(A: Any, reps: Any) -> Any:
    x = operand(A, "tile")
    counts = tuple(int(r) for r in axes_of(reps))
    rank = max(x.ndim, len(counts))
    x = x.reshape((1,) * (rank - x.ndim) + tuple(x.shape))
    counts = (1,) * (rank - len(counts)) + counts
    for axis, count in enumerate(counts):
        if count < 0:
            raise ValueError(f"np.tile: negative repetitions {reps!r}")
        if count == 0:
            x = x[tuple(slice(0, 0) if n == axis else slice(None) for n in range(rank))]
        elif count != 1:
            x = blocks.concatenate([x] * count, axis=axis)
    return x


def pad(array: Any, pad_width: Any, mode: str = "constant", **options: Any) -> Any:
    x = operand(array, "pad")
    value = as_float64(options.pop("constant_values", 0.0), "np.pad's constant_values")
    refuse_options("pad", **options)
    if mode != "constant" or np.ndim(value) != 0:
        raise TypeError(
            f"np.pad of fastad blocks takes mode='constant' with one constant value, got "
            f"mode={mode!r}, constant_values={value!r}"
        )
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    if (widths < 0).any():
        raise ValueError(f"np.pad: negative pad widths {pad_width!r}")
    for axis, (before, after) in enumerate(widths.tolist()):
        shape = list(x.shape)
        parts = []
        for width in (before, after):
            shape[axis] = width
            parts.append(np.full(tuple(shape), float(value)))
        if before or after:
            x = blocks.concatenate([parts[0], x, parts[1]], axis=axis)
    return x


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """Running sums along ``axis`` (None: of the flattened array), one block op."""
    if isinstance(a, Var) and axis is None:  # a 0-d array: its one running sum
        a = a.reshape(1)
    x = operand(a, "cumsum")
    refuse_options("cumsum", out=out, dtype=other_dtype(dtype))
    if not isinstance(x, Block):
        return np.cumsum(x, axis)
    x, axis = along(x, axis)
    return record_block_on(x.tape, CUMSUM, (x,), axis, "cumsum operand")


def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, **options: Any) -> Any:
    """The sorted block by indexing with its values' order (the gradient goes back through the
    permutation); while ``fa.compile`` traces, its ``.value`` is refused, naming it."""
    x = operand(a, "sort")
    refuse_options("sort", order=order, **options)
    x, axis = along(x, axis)
    ranks = np.argsort(values_of(x, "np.sort"), axis=axis, kind=kind or "stable")
    key = list(np.indices(x.shape, sparse=True))
    key[axis] = ranks
    return x[tuple(key)]


def integer(value: Any, what: str) -> int:
    """``value`` as a Python int (NumPy's integers and bools' kin refused by name)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


def refuse_options(function: str, **options: Any) -> None:
    """Refuse NumPy options fastad does not take (``out=``, ``dtype=``, ``order=``...),
    naming each one given (not None) and its value."""
    given = sorted(key for key, value in options.items() if value is not None)
    if given:
        shown = ", ".join(f"{key}={_shown(options[key])}" for key in given)
        raise TypeError(
            f"np.{function} with {shown} is not recorded on fastad nodes: use np.{function} "
            "without them (float64)"
        )


def _shown(value: Any) -> str:
    return f"<{type(value).__name__}>" if isinstance(value, np.ndarray) else repr(value)


def other_dtype(dtype: Any) -> Any:
    """``dtype`` unless it is float64 (what blocks hold already): then None."""
    return None if dtype is None or np.dtype(dtype) == np.float64 else dtype


HANDLED: dict[Callable[..., Any], Callable[..., Any]] = {
    np.expand_dims: expand_dims,
    np.moveaxis: moveaxis,
    np.swapaxes: swapaxes,
    np.flip: flip,
    np.trace: trace,
    np.diagonal: diagonal,
    np.diag: diag,
    np.vstack: vstack,
    np.hstack: hstack,
    np.tile: tile,
    np.pad: pad,
    np.sort: sort,
    np.cumsum: cumsum,
}
"""NumPy function -> its composition on blocks (``numpy_protocol`` dispatches to them)."""
