"""The parameters of block ops, checked as a user gives them: axes, ``keepdims``, index keys.

What the recorders (``Block`` methods, ``fastad/eager/blocks.py``) store as a
block op's parameter, normalised as the registry's rules take it; errors
name the operand and its shape.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.reduction_rules import Reduction

if TYPE_CHECKING:
    pass


def reduction(shape: tuple[int, ...], axis: object, keepdims: object, owner: object) -> Reduction:
    """``axis`` and ``keepdims`` checked for an operand of ``shape`` and normalised
    as the registry's reductions take them (``owner`` names the operand in errors)."""
    if axis is None and keepdims is False:  # ``X.sum()``, the common case
        return _EVERY_AXIS
    if not isinstance(keepdims, (bool, np.bool_)) and not (
        isinstance(keepdims, (int, np.integer)) and keepdims in (0, 1)
    ):
        raise TypeError(f"keepdims must be True or False, got {keepdims!r}")
    if axis is None:
        return Reduction(None, bool(keepdims))
    axes = axis if isinstance(axis, tuple) else (axis,)
    normalised = tuple(sorted(normal_axis(shape, a, owner) for a in axes))
    if len(set(normalised)) != len(normalised):
        raise ValueError(f"axis {axis!r} names an axis twice (for {owner!r})")
    return Reduction(normalised, bool(keepdims))


_EVERY_AXIS = Reduction(None, False)


def normal_axis(shape: tuple[int, ...], axis: object, owner: object) -> int:
    """``axis`` as an index in ``range(len(shape))``; errors name ``owner`` and its shape."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (numbers.Integral, np.integer)):
        raise TypeError(
            f"axis must be an integer, a tuple of them, or None; got {type(axis).__name__} "
            f"{axis!r} (for {owner!r} of shape {shape})"
        )
    axis = int(axis)
    if not -len(shape) <= axis < len(shape):
        # NumPy's AxisError: a ValueError and an IndexError, as NumPy raises it
        raise np.exceptions.AxisError(f"axis {axis} is out of range for {owner!r} of shape {shape}")
    return axis % len(shape)


def frozen_key(key: Any) -> Any:
    """An index key the caller can no longer change: arrays and lists become read-only copies.

    The key is kept as the index op's parameter for every backward and
    replay, so a caller's array that changed later must not change them.
    """
    if isinstance(key, tuple):
        return tuple(frozen_key(part) for part in key)
    if isinstance(key, (list, np.ndarray)):
        frozen = np.array(key)
        if frozen.size == 0 and frozen.dtype.kind == "f":  # [] indexes nothing, as in NumPy
            frozen = frozen.astype(np.intp)
        frozen.flags.writeable = False
        return frozen
    return key
