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

from collections.abc import Callable
from typing import Any

import numpy as np

from fastad.eager import blocks
from fastad.eager.array_functions import operand, other_dtype, refuse_options, sort
from fastad.eager.block_params import normal_axis
from fastad.eager.handle import values_of
from fastad.eager.node import Block, Var


def _flat(x: Any, axis: Any) -> tuple[Any, int]:
    """``x`` (flattened where ``axis`` is None) and the axis, normalised."""
    if axis is None:
        return x.reshape((-1,)), 0
    return x, normal_axis(x.shape, axis, x)


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
    refuse_options("median", out=out)
    x, ax = _flat(operand(a, "median"), axis)
    values_of(x, "np.median")  # refused by name while tracing, before np.sort's refusal
    ordered = sort(x, axis=ax)
    count = x.shape[ax]
    if count == 0:
        raise ValueError(f"np.median of an empty axis (shape {x.shape})")
    middle = [count // 2] if count % 2 else [count // 2 - 1, count // 2]
    key = tuple(middle if n == ax else slice(None) for n in range(x.ndim))
    result = ordered[key].mean(axis=ax, keepdims=True)
    return _kept(result, x, a, axis, ax, keepdims)


def _kept(result: Any, x: Any, a: Any, axis: Any, ax: int, keepdims: bool) -> Any:
    """A reduction's ``result`` (its axis kept, size one) in NumPy's shape for ``keepdims``."""
    if keepdims:
        return result.reshape((1,) * np.ndim(np.empty(_shape(a)))) if axis is None else result
    shape = tuple(n for i, n in enumerate(x.shape) if i != ax)
    return result.reshape(shape) if shape else result.sum()


def _shape(x: Any) -> tuple[int, ...]:
    return x.shape if isinstance(x, Block) else np.shape(x)


def average(
    a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *, keepdims: bool = False
) -> Any:
    x = operand(a, "average")
    if weights is None:
        mean = x.mean(axis, keepdims=keepdims)
        count = x.size / (np.size(mean) if isinstance(mean, Block) else 1)
        return (mean, count) if returned else mean
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
    mean = total / scale
    return (mean, scale) if returned else mean


def ptp(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    refuse_options("ptp", out=out)
    x = operand(a, "ptp")
    return x.max(axis, keepdims=keepdims) - x.min(axis, keepdims=keepdims)


def _truth(name: str) -> Callable[..., Any]:
    """``np.all``/``np.any``/``np.count_nonzero`` of the comparison node ``a != 0``."""

    def reduce(
        a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, **options: Any
    ) -> Any:
        refuse_options(name, out=out, **options)
        nonzero = a != 0.0
        if isinstance(nonzero, Var):
            return nonzero
        reduce_by = {"all": nonzero.min, "any": nonzero.max, "count_nonzero": nonzero.sum}[name]
        return reduce_by(axis, keepdims=keepdims)

    return reduce


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """The running product along ``axis``: one recorded product per element of it."""
    refuse_options("cumprod", out=out, dtype=other_dtype(dtype))
    x, ax = _flat(operand(a, "cumprod"), axis)
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
