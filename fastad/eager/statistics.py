"""NumPy's order statistics, weighted means, truth reductions and running products on nodes.

``np.median`` and ``np.ptp`` are sorts, indexing and reductions of the block;
``np.average`` is sums of products; ``np.all``, ``np.any`` and
``np.count_nonzero`` reduce the comparison node ``x != 0`` (1.0 or 0.0,
gradient 0), so ``if np.all(x > 0):`` is a branch ``fa.compile`` guards;
``np.cumprod`` is the running product, one recorded product per element of
the axis. ``np.argmax``, ``np.argmin`` and ``np.argsort`` return NumPy's
integers of the node's values: a position has no derivative, and
``fa.compile`` refuses them while tracing (the integers would be frozen into
every replay), as it refuses ``np.sort``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from fastad.eager import blocks, functions
from fastad.eager.array_functions import along, operand, other_dtype, permuted, refuse_options, sort
from fastad.eager.block_params import normal_axis
from fastad.eager.handle import values_of
from fastad.eager.node import Block, Var


def _positions(name: str) -> Callable[..., Any]:
    """``np.argmax``, ``np.argmin``, ``np.argsort``: NumPy's integers of the values."""
    rule = getattr(np, name)

    def positions(a: Any, axis: Any = -1 if name == "argsort" else None, **options: Any) -> Any:
        refuse_options(name, out=options.pop("out", None))
        values = values_of(a, f"np.{name}")
        if axis is not None:
            normal_axis(np.shape(values), axis, a)
        return rule(values, axis, **options)

    return positions


def median(
    a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False, keepdims: bool = False
) -> Any:
    """The middle of the sorted values (the mean of the two middle ones for an even count)
    over ``axis`` (one, several, or None: all); nan where a nan is among them, as NumPy."""
    refuse_options("median", out=out)
    if isinstance(a, Var) and axis in (None, ()) and not keepdims:
        return a  # the median of one number
    x = operand(a, "median")
    values_of(x, "np.median")  # refused by name while tracing, before np.sort's refusal
    given = tuple(range(x.ndim)) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    axes = [normal_axis(x.shape, ax, x) for ax in given]
    if len(set(axes)) != len(axes):
        raise ValueError(f"np.median: axis {axis!r} names an axis twice")
    kept = [n for n in range(x.ndim) if n not in axes]
    count = math.prod(x.shape[n] for n in axes)
    lined = permuted(x, kept + axes).reshape(tuple(x.shape[n] for n in kept) + (count,))
    if lined.size == 0:
        # No results (an empty axis kept): an empty block. Or a median of nothing: nan,
        # as NumPy gives it (with its warning), with no element to take a gradient.
        if count == 0:
            warnings.warn("Mean of empty slice", RuntimeWarning, stacklevel=2)
        result = lined.sum(axis=-1) + (np.nan if count == 0 else 0.0)
    else:
        ordered = sort(lined, axis=-1)
        middle = [count // 2] if count % 2 else [count // 2 - 1, count // 2]
        is_nan = (lined != lined).max(axis=-1)
        result = functions.where(is_nan, np.nan, ordered[..., middle].mean(-1))
    if keepdims:
        return np.reshape(result, tuple(1 if n in axes else x.shape[n] for n in range(x.ndim)))
    return result


def average(
    a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *, keepdims: bool = False
) -> Any:
    x = operand(a, "average")
    if weights is None:
        mean = x.mean(axis, keepdims=keepdims)
        count = float(x.size / (mean.size if isinstance(mean, Block) else 1))
        return (mean, _like_result(count, mean)) if returned else mean
    w = operand(weights, "average")
    if w.shape != x.shape:
        if axis is None or w.ndim != 1 or isinstance(axis, tuple):
            raise ValueError(
                f"np.average: weights of shape {w.shape} for an array of shape {x.shape} "
                "need axis= (one axis, weights along it) or the array's shape"
            )
        ax = normal_axis(x.shape, axis, x)
        if w.shape[0] != x.shape[ax]:
            raise ValueError(f"np.average: {w.shape[0]} weights along axis {ax} of shape {x.shape}")
        w = w.reshape(tuple(-1 if n == ax else 1 for n in range(x.ndim)))
    total = (x * w).sum(axis, keepdims=keepdims)
    scale = (w * np.ones(x.shape)).sum(axis, keepdims=keepdims)  # the weights, as broadcast
    if not isinstance(scale, (Var, Block)) and np.any(scale == 0.0):
        raise ZeroDivisionError("np.average: the weights sum to zero, can't be normalized")
    mean = total / scale
    return (mean, scale) if returned else mean


def _like_result(count: float, mean: Any) -> Any:
    """``returned=True`` without weights: the count, shaped as the mean (as NumPy)."""
    return np.full(mean.shape, count) if isinstance(mean, Block) else count


def ptp(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    refuse_options("ptp", out=out)
    x = operand(a, "ptp")
    return x.max(axis, keepdims=keepdims) - x.min(axis, keepdims=keepdims)


def _truth(name: str) -> Callable[..., Any]:
    """``np.all``/``np.any``/``np.count_nonzero`` as comparison nodes of counts: the zeros
    counted (all: none), the others (any: some; count_nonzero: how many). An empty axis
    counts nothing, so ``all`` is 1.0 and ``any`` 0.0 there, as NumPy's True and False;
    nan is not zero, as in NumPy."""

    def reduce(
        a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, **options: Any
    ) -> Any:
        refuse_options(name, out=out, **options)
        if name == "all":
            zeros = a == 0.0
            return (zeros if isinstance(zeros, Var) else zeros.sum(axis, keepdims=keepdims)) == 0.0
        nonzero = a != 0.0
        count = nonzero if isinstance(nonzero, Var) else nonzero.sum(axis, keepdims=keepdims)
        return count if name == "count_nonzero" else count > 0.0

    return reduce


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """The running product along ``axis``: one recorded product per element of it."""
    refuse_options("cumprod", out=out, dtype=other_dtype(dtype))
    x, ax = along(operand(a, "cumprod"), axis)
    running: list[Any] = []
    for k in range(x.shape[ax]):
        element = x[tuple(slice(k, k + 1) if n == ax else slice(None) for n in range(x.ndim))]
        running.append(element if k == 0 else running[-1] * element)
    if not running:
        return x
    return blocks.concatenate(running, axis=ax)


HANDLED: dict[Callable[..., Any], Callable[..., Any]] = {
    np.argmax: _positions("argmax"),
    np.argmin: _positions("argmin"),
    np.argsort: _positions("argsort"),
    np.median: median,
    np.average: average,
    np.ptp: ptp,
    np.all: _truth("all"),
    np.any: _truth("any"),
    np.count_nonzero: _truth("count_nonzero"),
    np.cumprod: cumprod,
}
"""NumPy function -> its composition on nodes (``numpy_protocol`` dispatches to them)."""
