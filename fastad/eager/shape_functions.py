"""More of NumPy's shape and selection functions on blocks, each composed of recorded ops.

``np.roll``, ``np.rot90``, ``np.repeat``, ``np.take``, ``np.broadcast_to``,
``np.split``, ``np.triu``... are indexing, reshapes, transposes,
concatenations or ``where`` selects of the block: NumPy's own index
arithmetic (``np.repeat`` of the positions, ``np.roll`` of an ``arange``)
builds the key, and the gradient of each is the recorded ops', sent back to
the elements selected. ``np.zeros_like`` and its kin read only the shape: they
return NumPy's plain arrays, constants on any tape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastad.eager import blocks, functions
from fastad.eager.array_functions import along, flip, operand, refuse_options, swapaxes
from fastad.eager.block_params import normal_axis
from fastad.eager.node import Var


def _along(rank: int, axis: int, key: Any) -> tuple[Any, ...]:
    """The index that applies ``key`` on ``axis`` and takes all of every other axis."""
    return tuple(key if n == axis else slice(None) for n in range(rank))


def roll(a: Any, shift: Any, axis: Any = None) -> Any:
    x = operand(a, "roll")
    if axis is None:
        flat = x.reshape((-1,))
        return flat[np.roll(np.arange(flat.shape[0]), shift)].reshape(x.shape)
    for s, ax in np.broadcast(np.asarray(shift), np.asarray(axis)):
        ax = normal_axis(x.shape, int(ax), x)
        x = x[_along(x.ndim, ax, np.roll(np.arange(x.shape[ax]), int(s)))]
    return x


def rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Any:
    x = operand(m, "rot90")
    first, second = (normal_axis(x.shape, ax, x) for ax in axes)
    if first == second:
        raise ValueError(f"np.rot90: axes {axes!r} name one axis twice")
    turns = k % 4
    if turns == 2:
        return flip(flip(x, first), second)
    if turns == 1:
        return swapaxes(flip(x, second), first, second)
    if turns == 3:
        return flip(swapaxes(x, first, second), second)
    return x


def fliplr(m: Any) -> Any:
    return flip(m, 1)


def flipud(m: Any) -> Any:
    return flip(m, 0)


def repeat(a: Any, repeats: Any, axis: Any = None) -> Any:
    x, ax = along(operand(a, "repeat"), axis)
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(f"np.repeat: repeats={repeats!r} must be integers >= 0")
    length = x.shape[ax]
    try:
        positions = np.repeat(np.arange(length), counts)
    except MemoryError:
        raise ValueError(
            f"np.repeat: repeats={repeats!r} of an axis of {length} elements need more "
            "memory than there is"
        ) from None
    return x[_along(x.ndim, ax, positions)]


def take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
    refuse_options("take", out=out)
    if mode != "raise":
        raise TypeError(
            f"np.take with mode={mode!r} is not recorded on fastad nodes: bring the indices "
            "into range first (np.clip(indices, 0, n - 1) or indices % n), then np.take"
        )
    if isinstance(a, Var) and axis is None:  # a 0-d array, flattened as NumPy does
        a = a.reshape(1)
    x, ax = along(operand(a, "take"), axis)
    positions = np.asarray(indices)
    if positions.size == 0 and not isinstance(indices, np.ndarray):
        positions = positions.astype(np.intp)  # [] takes nothing (np.asarray makes it float)
    if positions.dtype.kind == "b":
        positions = positions.astype(np.intp)  # as NumPy: True and False are 1 and 0 here
    if positions.dtype.kind not in "iu":
        raise TypeError(
            f"np.take: indices must be integers, got {type(indices).__name__} {indices!r} "
            f"(dtype {positions.dtype})"
        )
    return x[_along(x.ndim, ax, positions)]


def take_along_axis(arr: Any, indices: Any, axis: Any = -1) -> Any:
    x, ax = along(operand(arr, "take_along_axis"), axis)
    order = np.asarray(indices)
    if order.ndim != x.ndim:
        raise ValueError(
            f"np.take_along_axis: indices of shape {order.shape} for an array of shape "
            f"{x.shape} (as many axes)"
        )
    # NumPy's index: every other axis's positions in the array, broadcast against the
    # indices (a length of 1 in either stretches; any other mismatch raises).
    key: list[Any] = [
        np.arange(size).reshape((1,) * n + (-1,) + (1,) * (x.ndim - n - 1))
        for n, size in enumerate(x.shape)
    ]
    key[ax] = order
    try:
        np.broadcast_shapes(*(part.shape for part in key))
    except ValueError:
        raise IndexError(
            f"np.take_along_axis: indices of shape {order.shape} do not broadcast against "
            f"the array of shape {x.shape} off axis {ax}"
        ) from None
    return x[tuple(key)]


def broadcast_to(array: Any, shape: Any, subok: bool = False) -> Any:
    x = operand(array, "broadcast_to")
    positions = np.arange(int(np.prod(x.shape))).reshape(x.shape)
    return x.reshape((-1,))[np.broadcast_to(positions, shape)]


def _at_least(rank: int) -> Callable[..., Any]:
    """``np.atleast_1d``/``2d``/``3d``: NumPy's placement of the new axes of size one."""
    function = getattr(np, f"atleast_{rank}d")

    def raised(*arys: Any) -> Any:
        results = []
        for a in arys:
            x = a if isinstance(a, Var) else operand(a, function.__name__)  # a 0-d array
            results.append(x.reshape(function(np.empty(x.shape)).shape))
        return results[0] if len(results) == 1 else tuple(results)

    return raised


def column_stack(tup: Any) -> Any:
    parts = [operand(x, "column_stack") for x in tup]
    return blocks.concatenate([x.reshape((-1, 1)) if x.ndim < 2 else x for x in parts], axis=1)


def dstack(tup: Any) -> Any:
    parts = [operand(x, "dstack") for x in tup]
    shapes = [np.atleast_3d(np.empty(x.shape)).shape for x in parts]
    return blocks.concatenate([x.reshape(s) for x, s in zip(parts, shapes, strict=True)], 2)


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    x = operand(ary, "array_split")
    ax = normal_axis(x.shape, axis, x)
    pieces = np.array_split(np.arange(x.shape[ax]), indices_or_sections)
    return [
        x[_along(x.ndim, ax, slice(p[0], p[-1] + 1) if p.size else slice(0, 0))] for p in pieces
    ]


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    x = operand(ary, "split")
    if np.ndim(indices_or_sections) == 0:
        if int(indices_or_sections) <= 0:
            raise ValueError(
                f"np.split: the number of sections must be larger than 0, got "
                f"{indices_or_sections!r}"
            )
        length = x.shape[normal_axis(x.shape, axis, x)]
        if length % int(indices_or_sections):
            raise ValueError(
                f"np.split: {indices_or_sections} equal sections of an axis of {length} "
                "elements (np.array_split allows unequal ones)"
            )
    return array_split(x, indices_or_sections, axis)


def hsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    return split(ary, indices_or_sections, 1 if operand(ary, "hsplit").ndim > 1 else 0)


def vsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    x = operand(ary, "vsplit")
    if x.ndim < 2:
        raise ValueError(f"np.vsplit takes arrays of 2 or more axes, got shape {x.shape}")
    return split(x, indices_or_sections, 0)


def _triangle(name: str) -> Callable[..., Any]:
    """``np.triu``/``np.tril``: a ``where`` select of the last two axes' triangle (the
    elements outside it are exact zeros, inf or nan there included)."""
    keep = getattr(np, name)

    def triangle(m: Any, k: int = 0) -> Any:
        x = operand(m, name)  # a block: one axis at least
        # A vector is the rows of a square matrix, as NumPy broadcasts it.
        square = x.shape[-2:] if x.ndim > 1 else (x.shape[0], x.shape[0])
        mask = keep(np.ones(square, dtype=np.bool_), k)
        return functions.where(mask, x, 0.0)

    return triangle


def _like(name: str) -> Callable[..., Any]:
    """``np.zeros_like`` and its kin: NumPy's plain array of the node's shape."""
    make = getattr(np, name)

    def like(a: Any, *args: Any, **options: Any) -> Any:
        return make(np.empty(operand(a, name).shape), *args, **options)

    return like


HANDLED: dict[Callable[..., Any], Callable[..., Any]] = {
    np.roll: roll,
    np.rot90: rot90,
    np.fliplr: fliplr,
    np.flipud: flipud,
    np.repeat: repeat,
    np.take: take,
    np.take_along_axis: take_along_axis,
    np.broadcast_to: broadcast_to,
    np.atleast_1d: _at_least(1),
    np.atleast_2d: _at_least(2),
    np.atleast_3d: _at_least(3),
    np.column_stack: column_stack,
    np.dstack: dstack,
    np.split: split,
    np.array_split: array_split,
    np.hsplit: hsplit,
    np.vsplit: vsplit,
    np.triu: _triangle("triu"),
    np.tril: _triangle("tril"),
    **{getattr(np, name): _like(name) for name in ("zeros_like", "ones_like", "empty_like")},
    np.full_like: _like("full_like"),
}
"""NumPy function -> its composition on blocks (``numpy_protocol`` dispatches to them)."""
