"""The NumPy protocol on nodes: NumPy functions record fastad ops, or say what to use.

``Var`` and ``Block`` define ``__array_ufunc__`` and ``__array_function__``
(``fastad/eager/node.py``), which hand over to :func:`ufunc` and :func:`function`
here. ``np.sin(block)``, ``array * node``, ``np.sum(block, axis=0)``,
``np.concatenate([A, B])``, ``np.where(X > 0, X, 0.0)``... record the
fastad op, so a NumPy-style model keeps its gradient. What fastad has no op
for raises a ``TypeError`` naming the function and what to use instead:
never a silent object array of one node per element (about a thousand
times slower, where it works at all), never a plain array that has left
the tape.

This module sits above the public functions it calls and registers its two
handlers in ``fastad.eager.handle.NUMPY_HANDLERS`` when imported (``fastad``
imports it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np

from fastad.eager import (
    array_functions,
    blocks,
    contractions,
    functions,
    linalg,
    shape_functions,
    statistics,
    ufunc_compositions,
)
from fastad.eager.array_functions import other_dtype, refuse_options
from fastad.eager.handle import NUMPY_HANDLERS, Node
from fastad.eager.node import Block, Var, matmul
from fastad.kernels import optable


def _fastad_function(name: str) -> Callable[..., Any]:
    return getattr(functions, name)


# -- ufuncs: one fastad op (or operator) each --------------------------------------------------
def _binary_operator(forward: str, reflected: str) -> Callable[[Any, Any], Any]:
    """The operator on the node operand: ``x.__add__(y)``, or ``y.__radd__(x)``.

    Node operators record directly (they never call back into NumPy), so
    ``array + node`` cannot recurse into this handler.
    """

    def apply(x: Any, y: Any) -> Any:
        if isinstance(x, Node):
            return getattr(x, forward)(y)
        return getattr(y, reflected)(x)

    return apply


_UFUNCS: dict[str, Callable[..., Any]] = {
    "add": _binary_operator("__add__", "__radd__"),
    "subtract": _binary_operator("__sub__", "__rsub__"),
    "multiply": _binary_operator("__mul__", "__rmul__"),
    "divide": _binary_operator("__truediv__", "__rtruediv__"),
    "true_divide": _binary_operator("__truediv__", "__rtruediv__"),
    "power": _binary_operator("__pow__", "__rpow__"),
    "less": _binary_operator("__lt__", "__gt__"),
    "less_equal": _binary_operator("__le__", "__ge__"),
    "greater": _binary_operator("__gt__", "__lt__"),
    "greater_equal": _binary_operator("__ge__", "__le__"),
    "equal": _binary_operator("__eq__", "__eq__"),
    "not_equal": _binary_operator("__ne__", "__ne__"),
    "matmul": matmul,
    "negative": operator.neg,
    "positive": lambda x: x,
    "square": lambda x: x * x,
    "reciprocal": lambda x: 1.0 / x,
    "fabs": functions.abs,
    "log2": lambda x: functions.log(x) * (1.0 / np.log(2.0)),
    "log10": lambda x: functions.log(x) * (1.0 / np.log(10.0)),
    "float_power": _binary_operator("__pow__", "__rpow__"),
    **ufunc_compositions.UFUNCS,
    # Every public op whose name is a NumPy ufunc's (exp, log, maximum,
    # arctan2...): a new op-table row with such a name is mapped by itself.
    # (keyed by the ufunc's own name: np.abs is np.absolute).
    **{
        getattr(np, op.name).__name__: _fastad_function(op.name)
        for op in optable.PUBLIC
        if isinstance(getattr(np, op.name, None), np.ufunc)
    },
}
"""NumPy ufunc name -> what records it on nodes (the same op as the fastad function)."""

_UFUNC_HINTS = {
    "erf": "fa.erf",
    "remainder": "x - np.floor(x / y) * y (the floor is a constant: eager tapes only)",
    "fmod": "x - np.trunc(x / y) * y (the truncation is a constant: eager tapes only)",
    "copysign": "fa.where(y < 0, -fa.abs(x), fa.abs(x)) (which reads -0.0 as +0.0)",
}


def _refuse(what: str, hint: str) -> NoReturn:
    raise TypeError(f"{what} is not recorded on fastad nodes: use {hint}")


def ufunc(ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """``__array_ufunc__`` of every node: record the ufunc's fastad op, or raise naming one."""
    name = ufunc.__name__
    if method != "__call__":
        _refuse(f"np.{name}.{method}", _method_hint(name, method))
    if kwargs.get("out") is not None:
        _refuse(
            f"np.{name}(..., out=...)",
            "the result instead: nodes are recorded, never written into (x = np.exp(x))",
        )
    extra = {key: value for key, value in kwargs.items() if key != "out"}
    if extra:
        _refuse(f"np.{name} with {sorted(extra)}", f"np.{name} without them")
    handler = _UFUNCS.get(name)
    if handler is None:
        _refuse(f"np.{name}", _UFUNC_HINTS.get(name, _suggestion(name)))
    return handler(*inputs)


_REDUCTIONS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min"}


def _method_hint(name: str, method: str) -> str:
    """What to use for ``np.<name>.<method>``, which fastad does not record."""
    if method == "outer":
        return f"np.{name}(x[:, None], y) for vectors: broadcasting makes the outer {name}"
    reduction = _REDUCTIONS.get(name)
    if reduction is None:
        return "the Block methods (sum, max, min, prod) or fastad functions"
    if method == "reduce":
        return f"np.{reduction}(x, axis) or x.{reduction}(axis)"
    if method == "accumulate" and name in ("add", "multiply"):
        return f"np.cum{reduction}(x, axis)"
    if method == "reduceat":
        return f"a {reduction} per slice, x[i:j].{reduction}(axis), joined with np.stack"
    return f"x.{reduction}(axis) per prefix, or the fastad functions"


def _suggestion(name: str) -> str:
    if name in functions.__dict__ or name in blocks.__dict__:
        return f"fa.{name}"
    return "the fastad operations (see fa.__all__), or .value for the numbers (no gradient)"


# -- array functions ---------------------------------------------------------------------------
def _one_element(
    a: Any, axis: Any, keepdims: Any, where: Any, initial: Any, function: str
) -> tuple[Any, Any]:
    """A reduction's operand and axis. A scalar node's axis is checked (it has none); the
    node stays itself where it is its own reduction, and becomes a block of its one
    element where ``where=`` or ``initial=`` takes part."""
    if not isinstance(a, Var):
        return a, axis
    a._reduced(function, axis, keepdims)  # raises naming a bad axis or keepdims
    return (a if where is True and initial is None else a.reshape(1)), None


def _mask(where: Any, block: Block, function: str) -> Any:
    """A reduction's ``where=``: a comparison node as it is, else booleans of the block's shape
    (an array of another dtype is refused, as NumPy refuses it; a list is read as truths)."""
    if isinstance(where, (Var, Block)):
        return where + np.zeros(block.shape)  # a comparison node, broadcast: 1.0 or 0.0
    if isinstance(where, (np.ndarray, np.generic)) and where.dtype != np.bool_:
        raise TypeError(
            f"np.{function}: where= of dtype {where.dtype} (NumPy takes booleans only: "
            "compare it first, e.g. where=mask != 0)"
        )
    return np.broadcast_to(np.asarray(where, dtype=np.bool_), block.shape)


def _initial(initial: Any, function: str) -> Any:
    """A reduction's ``initial=``: one number (or scalar node), as NumPy takes it."""
    if initial is not None and not isinstance(initial, Var) and np.ndim(initial) != 0:
        raise ValueError(
            f"np.{function}: initial= must be one number, got shape {np.shape(initial)}"
        )
    return initial


def _count(mask: Any, axis: Any, keepdims: Any) -> Any:
    """How many elements a ``where=`` mask keeps per result (a node for a comparison node)."""
    if isinstance(mask, Block):
        return mask.sum(axis, keepdims=keepdims)
    return np.sum(mask, axis=axis, keepdims=keepdims)


def _block(x: object, function: str) -> Block:
    if isinstance(x, Block):
        return x
    if isinstance(x, Var):
        _refuse(f"np.{function} of a scalar node ({x!r})", "the node itself")
    return _refuse(f"np.{function} of {type(x).__name__}", f"fastad Blocks for np.{function}")


# One handler per NumPy signature: the positional order differs (np.max has
# no dtype, np.var has ddof before keepdims), so a call that NumPy accepts
# means the same here.
def _sum_like(name: str) -> Callable[..., Any]:
    """``np.sum``, ``np.prod``, ``np.mean``: ``(a, axis, dtype, out, keepdims, ...)``."""

    def reduce(
        a: object,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        keepdims: Any = False,
        **options: Any,  # initial= (sum, prod), where=
    ) -> Any:
        initial, where = _initial(options.pop("initial", None), name), options.pop("where", True)
        refuse_options(name, dtype=other_dtype(dtype), out=out, **options)
        a, axis = _one_element(a, axis, keepdims, where, initial, name)
        if isinstance(a, Var):  # a scalar node reduced over its (no) axes: itself
            return a
        block: Any = _block(a, name)
        if where is not True:
            mask = _mask(where, block, name)
            if name == "mean":  # the mean of the elements where the mask holds
                total = functions.where(mask, block, 0.0).sum(axis, keepdims=keepdims)
                return total / _count(mask, axis, keepdims)
            block = functions.where(mask, block, 0.0 if name == "sum" else 1.0)
        result = getattr(block, name)(axis, keepdims=keepdims)
        if initial is None:
            return result
        return result + initial if name == "sum" else result * initial

    return reduce


def _extremum(name: str) -> Callable[..., Any]:
    """``np.max``, ``np.min``: ``(a, axis, out, keepdims, ...)``."""

    def reduce(
        a: object, axis: Any = None, out: Any = None, keepdims: Any = False, **options: Any
    ) -> Any:
        initial, where = _initial(options.pop("initial", None), name), options.pop("where", True)
        refuse_options(name, out=out, **options)
        a, axis = _one_element(a, axis, keepdims, where, initial, name)
        if isinstance(a, Var):  # a scalar node reduced over its (no) axes: itself
            return a
        block: Any = _block(a, name)
        if where is not True:
            if initial is None:  # NumPy's rule: a maximum of nothing has no value
                raise ValueError(
                    f"np.{name} with where= needs initial= (the value where nothing is left)"
                )
            # The elements left out take the value no element can beat, not initial=: they
            # would tie with it and take shares of its gradient.
            mask = _mask(where, block, name)
            block = functions.where(mask, block, -np.inf if name == "max" else np.inf)
        if initial is not None and block.size == 0:
            # NumPy's maximum of nothing is initial= itself: the bound no element can beat,
            # where the block's own maximum has no value (an empty sum gives the shape).
            nothing = -np.inf if name == "max" else np.inf
            result = block.sum(axis, keepdims=keepdims) + nothing
        else:
            result = getattr(block, name)(axis, keepdims=keepdims)
        if initial is None:
            return result
        return (functions.maximum if name == "max" else functions.minimum)(result, initial)

    return reduce


def _spread(name: str) -> Callable[..., Any]:
    """``np.var``, ``np.std``: ``(a, axis, dtype, out, ddof, keepdims, ...)``."""

    def reduce(
        a: object,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        ddof: Any = 0,
        keepdims: Any = False,
        **options: Any,  # correction= (NumPy 2's name for ddof); where=, mean=: refused
    ) -> Any:
        correction = options.pop("correction", None)
        refuse_options(name, dtype=dtype, out=out, **options)
        if correction is not None and ddof != 0:
            raise ValueError(f"np.{name}: ddof and correction are one setting: give one")
        ddof = ddof if correction is None else correction
        spread = a if isinstance(a, Var) else _block(a, name)
        return getattr(spread, name)(axis, ddof=ddof, keepdims=keepdims)

    return reduce


def _reshape(
    a: object, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> Block | Var:
    if order != "C":
        _refuse(f"np.reshape(..., order={order!r})", "order='C' (the only order of blocks)")
    wanted = shape if shape is not None else newshape
    if isinstance(a, Var):  # one number: itself for (), else a block of one element
        try:
            target = np.empty((), np.bool_).reshape(wanted).shape  # NumPy's checks and -1
        except (ValueError, TypeError) as error:
            raise type(error)(f"cannot reshape {a!r} (one number) to {wanted}: {error}") from None
        one: list[Any] = [a]
        return a if target == () else blocks.stack(one).reshape(target)
    return _block(a, "reshape").reshape(wanted)


def _node(x: object, function: str) -> Block | Var:
    """A block, or a scalar node where the function has a 0-d array's meaning for it."""
    return x if isinstance(x, Var) else _block(x, function)


def _transpose(a: object, axes: Any = None) -> Block | Var:
    node = _node(a, "transpose")
    return node.transpose() if axes is None else node.transpose(axes)


def _ravel(a: object, order: str = "C") -> Block:
    if order != "C":
        _refuse(f"np.ravel(..., order={order!r})", "order='C'")
    return _node(a, "ravel").ravel()


def _squeeze(a: object, axis: Any = None) -> Block | Var:
    return _node(a, "squeeze").squeeze(axis)


def _copy(a: object, order: str = "K", subok: bool = False) -> Block | Var:
    return _node(a, "copy").copy()


def _concatenate(arrays: Any, axis: Any = 0, out: Any = None, **options: Any) -> Any:
    refuse_options("concatenate", out=out, **options)
    return blocks.concatenate(list(arrays), axis)


def _stack(arrays: Any, axis: int = 0, out: Any = None, **options: Any) -> Any:
    refuse_options("stack", out=out, **options)
    return blocks.stack(list(arrays), axis)


def _where(condition: Any, *sides: Any) -> Any:
    if len(sides) != 2:
        _refuse("np.where with one argument (the indices)", "np.where(condition, x, y)")
    return functions.where(condition, *sides)


def _clip(a: Any, a_min: Any = None, a_max: Any = None, out: Any = None, **options: Any) -> Any:
    low, high = options.pop("min", a_min), options.pop("max", a_max)
    refuse_options("clip", out=out, **options)
    return functions.clip(a, low, high)


def _shape(a: Any) -> tuple[int, ...]:
    return a.shape if isinstance(a, Block) else ()


def _ndim(a: Any) -> int:
    return len(_shape(a))


def _size(a: Any, axis: int | None = None) -> int:
    shape = _shape(a)
    return int(np.prod(shape)) if axis is None else shape[axis]


_FUNCTIONS: dict[Callable[..., Any], Callable[..., Any]] = {
    np.sum: _sum_like("sum"),
    np.mean: _sum_like("mean"),
    np.max: _extremum("max"),
    np.min: _extremum("min"),
    np.prod: _sum_like("prod"),
    np.var: _spread("var"),
    np.std: _spread("std"),
    np.reshape: _reshape,
    np.transpose: _transpose,
    np.ravel: _ravel,
    np.squeeze: _squeeze,
    np.copy: _copy,
    np.concatenate: _concatenate,
    np.stack: _stack,
    np.where: _where,
    np.clip: _clip,
    np.shape: _shape,
    np.ndim: _ndim,
    np.size: _size,
    np.linalg.cholesky: linalg.cholesky,
    np.linalg.solve: linalg.solve,
    np.linalg.inv: linalg.inv,
    np.linalg.det: linalg.det,
    np.linalg.slogdet: linalg.slogdet,
    np.linalg.norm: linalg.norm,
    np.linalg.eigh: linalg.eigh,
    np.linalg.eigvalsh: linalg.eigvalsh,
    np.linalg.matrix_power: linalg.matrix_power,
    np.linalg.multi_dot: linalg.multi_dot,
    **array_functions.HANDLED,
    **contractions.HANDLED,
    **shape_functions.HANDLED,
    **statistics.HANDLED,
    np.round: ufunc_compositions.round_,
    np.around: ufunc_compositions.round_,
}
for _alias, _name in (("amax", "max"), ("amin", "min")):
    if hasattr(np, _alias) and getattr(np, _alias) is not getattr(np, _name):
        _FUNCTIONS[getattr(np, _alias)] = _FUNCTIONS[getattr(np, _name)]

_FUNCTION_HINTS = {
    "asarray": ".value for the numbers (no gradient), or keep the block",
    "array": ".value for the numbers (no gradient), or keep the block",
    "qr": "fa.linalg.cholesky of A.T @ A (R is its transpose, up to signs) or fa.linalg.solve",
    "svd": "fa.linalg.eigh of A.T @ A (its eigenvalues are the squared singular values)",
    "pinv": "fa.linalg.inv or fa.linalg.solve for a matrix of full rank",
    "lstsq": "fa.linalg.solve(A.T @ A, A.T @ b) for A of full column rank",
}


def function(
    func: Callable[..., Any], types: object, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """``__array_function__`` of every node: the fastad op for ``func``, or a ``TypeError``."""
    handler = _FUNCTIONS.get(func)
    if handler is None:
        name = getattr(func, "__name__", repr(func))
        module = getattr(func, "__module__", "numpy") or "numpy"
        if module.startswith("numpy"):  # as users write it: np.cumprod, np.linalg.svd
            module = "np.linalg" if "linalg" in module else "np"
        _refuse(f"{module}.{name}", _FUNCTION_HINTS.get(name, _suggestion(name)))
    return handler(*args, **kwargs)


NUMPY_HANDLERS["ufunc"] = ufunc
NUMPY_HANDLERS["function"] = function

__all__ = ["function", "ufunc"]
