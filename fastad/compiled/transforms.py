"""Function transforms, as JAX writes them: ``fa.grad(fn)``, ``fa.value_and_grad(fn)``,
``fa.jacfwd(fn)``, ``fa.jacrev(fn)``, ``fa.hessian(fn)`` and ``fa.hvp(fn)``.

Each returns a function of the same arguments as ``fn``. Its first call
with arguments of a new signature (each argument's shape and dtype; a
number is a 0-d argument) traces ``fn`` into a :class:`BlockFunction` and
keeps it; later calls with that signature replay it, on the interpreter or
in generated code (``backend="auto"``), and a new signature traces again
(as ``jax.jit`` does). ``argnums`` (an int, or a sequence of ints) picks the
arguments to differentiate; the others are data and get no derivative.

``fa.grad``, ``fa.hessian`` and ``fa.hvp`` also keep their tape forms
(``fa.grad(z, wrt)`` on recorded nodes): a callable first argument selects
the transform.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike

from fastad.compiled.block_function import BlockFunction
from fastad.eager import functions
from fastad.eager.handle import Node
from fastad.util.errors import BranchError, flag, is_int, is_long_double, is_real_dtype, not_real

if TYPE_CHECKING:
    from fastad.eager.node import Block, Var
    from fastad.util.hints import FloatArray

_T = TypeVar("_T")

BRANCH_TRACES = 16
"""The traces one signature keeps, one per way ``fn``'s branches on values went."""

SIGNATURES = 64
"""The signatures one transform keeps traces of, the least recently called dropped
first: a static argument that changes at every call (a step counter given as an
int) would otherwise keep a trace per call for as long as the function lives."""

Argnums = int | Sequence[int]
"""The positions of the arguments to differentiate: one (its derivative alone) or a
sequence of them (a tuple of derivatives, in that order)."""


class _Traced:
    """``fn`` traced once per signature of its arguments, for one transform."""

    def __init__(self, function: Callable[..., Any], argnums: object, has_aux: bool, what: str):
        if not callable(function):
            raise TypeError(
                f"{what} takes a function of numbers and arrays, got "
                f"{type(function).__name__} {function!r}"
            )
        self.function = function
        self.what = what
        self.has_aux = flag(has_aux, "has_aux")
        self.single, self.positions = _argnums(argnums, what)
        self._traced: OrderedDict[tuple[object, ...], list[BlockFunction]] = OrderedDict()
        self._lock = threading.Lock()
        self._warned = False

    @property
    def wrt(self) -> int | tuple[int, ...]:
        return self.positions[0] if self.single else self.positions

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any], call: Callable[..., _T]) -> _T:
        """``call(traced, traced_arguments)``: ``call`` on a traced function for these
        arguments, with the arguments it takes (numbers as floats, arrays as given).

        A Python int or bool (or a 0-d array of one) that is not differentiated is
        static, as in ``jax.grad``: it reaches ``fn`` as itself (an index, a count, a
        flag), and each of its values traces once. Each signature keeps the traces of
        the ways ``fn``'s branches on values have gone (``BranchError`` from the
        others' guards): these arguments run the first whose branches they take, or a
        new trace, as Python would run ``fn`` on them; up to ``BRANCH_TRACES`` per
        signature, the least recently traced going first. A kept trace that raises
        anything else is followed by a new trace too (another branch's ops run before
        its guards are checked), whose error, if any, is the call's.
        """
        key, values, moving = self._key(args, kwargs)
        traced_arguments = tuple(values[i] for i in moving)
        warning = None
        with self._lock:  # one trace of a new signature, whichever thread asks first
            traces = self._traced.get(key)
            if traces is None:
                traces = self._traced[key] = [self._trace(values, moving)]
                warning = self._drop_oldest(key)
            else:
                self._traced.move_to_end(key)
            traces = list(traces)
        if warning is not None:  # outside the lock: a warnings hook may call fn again
            warnings.warn(warning, RuntimeWarning, stacklevel=3)
        for traced in traces:
            try:
                return call(traced, traced_arguments)
            except BranchError:
                continue
            except Exception:  # noqa: BLE001
                # A trace of other branches runs their ops before its guards are checked
                # (a factorisation an `if` kept away from these arguments can fail): trace
                # again, and an error there is these arguments' own.
                break
        # A new trace, of the branches these arguments take, kept once it runs.
        traced = self._trace(values, moving)
        result = call(traced, traced_arguments)
        with self._lock:
            # Another thread may have dropped this signature meanwhile: keep it again
            # (and drop the oldest, as for any new signature).
            kept = self._traced.setdefault(key, [])
            kept.append(traced)
            del kept[:-BRANCH_TRACES]
            warning = self._drop_oldest(key)
        if warning is not None:
            warnings.warn(warning, RuntimeWarning, stacklevel=3)
        return result

    def _drop_oldest(self, key: tuple[object, ...]) -> str | None:
        """Drop the least recently called signatures while more than ``SIGNATURES`` are
        kept (the caller holds the lock); the first time, the warning to give, naming the
        arguments in which the newest signature, ``key``, differs from the one dropped."""
        oldest = None
        while len(self._traced) > SIGNATURES:
            oldest, _ = self._traced.popitem(last=False)
        if oldest is None or self._warned:
            return None
        self._warned = True
        differing = [
            i
            for i in range(max(len(oldest), len(key)))
            if i >= min(len(oldest), len(key)) or oldest[i] != key[i]
        ]
        static = [i for i in differing if i < len(key) and _is_static_key(key[i])]
        named = ", ".join(str(i) for i in static or differing)
        plural = "s" if len(static or differing) > 1 else ""
        cause = (
            f"argument{plural} {named} took other ints (ints are static: each value traces anew)"
            if static
            else f"argument{plural} {named} changed shape or dtype"
        )
        remedy = (
            "give a value that changes at every call as a float or an array (traced, not "
            "static), or bind it with functools.partial"
            if static
            else "keep the shapes fixed (pad the last batch)"
        )
        return (
            f"{self.what}: more than {SIGNATURES} signatures traced, so the least recently "
            f"called are dropped and retraced if called again; {cause}. To trace once, "
            f"{remedy}."
        )

    def _key(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[object, ...], tuple[Any, ...], list[int]]:
        """The signature of a call, its arguments as checked, and the traced positions."""
        if kwargs:
            raise TypeError(
                f"{self.what}(...) takes its arguments by position; got keywords "
                f"{sorted(kwargs)} (bind them first with functools.partial)"
            )
        for position in self.positions:
            if position >= len(args):
                raise ValueError(
                    f"{self.what}: argnums {position} is out of range for a call with "
                    f"{len(args)} argument(s)"
                )
        moving = [i for i, value in enumerate(args) if not _static(value, i in self.positions)]
        values = tuple(
            _argument(value, i, self.what, i in self.positions) if i in moving else value
            for i, value in enumerate(args)
        )
        key = tuple(
            _static_key(value) if i not in moving else _signature(value)
            for i, value in enumerate(values)
        )
        return key, values, moving

    def _trace(self, values: tuple[Any, ...], moving: list[int]) -> BlockFunction:
        """``fn`` traced at ``values``, the ``moving`` ones its arguments."""
        wrt = tuple(moving.index(p) for p in self.positions)
        return BlockFunction(
            self._with_statics(values, moving),
            tuple(values[i] for i in moving),
            wrt[0] if self.single else wrt,
            False,
            "auto",
            None,
        )

    def _with_statics(self, values: tuple[Any, ...], moving: list[int]) -> Callable[..., Any]:
        """``fn``'s output as a function of the traced arguments, the static ones bound."""
        template = list(values)

        def output(*traced: Any) -> Any:
            full = list(template)
            for position, value in zip(moving, traced, strict=True):
                full[position] = value
            return self._output(*full)

        output.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY)
                for name in self._names(moving)
            ]
        )  # the traced leaves are named as fn's parameters (errors, printed tapes)
        return output

    def _names(self, positions: list[int]) -> list[str]:
        """fn's parameter names at ``positions`` of a call; ``x<position>`` where it has
        none (``*args``, an unreadable signature)."""
        try:
            parameters = list(inspect.signature(self.function).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [
            parameters[p].name
            if p < len(parameters) and parameters[p].kind in positional
            else f"x{p}"
            for p in positions
        ]

    def _output(self, *args: Any) -> Any:
        """What is traced: ``fn``'s output (its first item with ``has_aux``)."""
        result = self.function(*args)
        return _pair(result, self.what)[0] if self.has_aux else result

    def aux(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn``'s auxiliary output, from a call on the caller's arguments as given (a
        0-d array stays one: the traced call takes it as a number)."""
        return _pair(self.function(*args, **kwargs), self.what)[1]

    def form(self, derivatives: Any) -> Any:
        """One derivative for an int ``argnums``, else a tuple (JAX's form)."""
        return derivatives if self.single else tuple(derivatives)


def _argnums(argnums: object, what: str) -> tuple[bool, tuple[int, ...]]:
    """``(single, positions)`` of an ``argnums``: checked, never wrapped around."""
    if isinstance(argnums, np.ndarray) and argnums.ndim == 0:
        argnums = argnums[()]  # a 0-d array: its one element, as NumPy reads an index
    single = is_int(argnums)
    if single:
        positions: tuple[object, ...] = (argnums,)
    elif isinstance(argnums, Iterable) and not isinstance(argnums, (str, bytes)):
        positions = tuple(argnums)
        if not positions:
            raise ValueError(f"{what}: argnums is empty; name at least one argument")
    else:
        raise TypeError(
            f"{what}: argnums must be an int or a sequence of ints, got "
            f"{type(argnums).__name__} {argnums!r}"
        )
    for position in positions:
        if not is_int(position) or int(position) < 0:
            raise ValueError(
                f"{what}: argnums holds {position!r}; positions are non-negative ints "
                "(counted from the first argument; negative ones do not wrap around)"
            )
    checked = tuple(int(position) for position in positions)  # type: ignore[call-overload]
    if len(set(checked)) != len(checked):
        raise ValueError(f"{what}: argnums {checked} names an argument twice")
    return single, checked


def _argument(value: object, position: int, what: str, differentiated: bool) -> Any:
    """An argument as the traced function takes it; a TypeError names a bad one."""
    if isinstance(value, Node):
        raise TypeError(
            f"{what}: argument {position} is a fastad node; the transformed function "
            "takes numbers and arrays (it records its own tape). Transforms do not nest "
            "(fa.grad(fa.grad(f))): for second derivatives use fa.hessian(f) or fa.hvp(f)"
        )
    if differentiated and isinstance(value, (tuple, list)):
        kind = type(value).__name__
        raise TypeError(
            f"{what}: argument {position} is a {kind}; JAX would read it as a pytree and give "
            f"a {kind} of derivatives, fastad differentiates numbers and arrays: pass the "
            f"parts as arguments of their own (argnums=(0, 1, ...)), or one array, "
            "np.asarray(...)"
        )
    array = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if is_long_double(array):
        raise not_real(value, f"{what}: argument {position}")
    if not is_real_dtype(array.dtype):
        raise TypeError(
            f"{what}: argument {position} is {type(value).__name__} of dtype {array.dtype}; "
            "the transformed function takes real numbers and arrays (bind other arguments "
            "with functools.partial)"
        )
    if differentiated and array.dtype.kind != "f":
        remedy = "a float (3.0, not 3)" if array.ndim == 0 else "a float array (.astype(float))"
        raise TypeError(
            f"{what}: argument {position} is differentiated (argnums) but holds "
            f"{array.dtype} values; give it as {remedy}"
        )
    return float(array) if array.ndim == 0 else array


def _static(value: object, differentiated: bool) -> bool:
    """A Python (or NumPy) int or bool, or a 0-d array of one, that is not
    differentiated: bound, not traced."""
    if isinstance(value, np.ndarray):
        return not differentiated and value.ndim == 0 and value.dtype.kind in "biu"
    return not differentiated and isinstance(value, (int, np.integer, np.bool_))


def _static_key(value: Any) -> tuple[Any, ...]:
    """What tells two static values apart: their type and value (a 0-d array's dtype and
    element: an array is not hashable)."""
    if isinstance(value, np.ndarray):
        return ("static", np.ndarray, value.dtype.str, value.item())
    return ("static", type(value), value)


def _is_static_key(part: object) -> bool:
    return isinstance(part, tuple) and part[:1] == ("static",)


def _signature(value: Any) -> object:
    return "number" if isinstance(value, float) else (value.shape, value.dtype.str)


def _pair(result: object, what: str) -> tuple[Any, Any]:
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise TypeError(
            f"{what} with has_aux=True needs the function to return a pair "
            f"(output, aux); it returned {type(result).__name__}"
        )
    return result[0], result[1]


def _named(transformed: Callable[..., Any], function: Callable[..., Any], what: str) -> Any:
    """``transformed`` with ``function``'s name and a docstring saying what it is."""
    name = getattr(function, "__name__", type(function).__name__)
    transformed.__name__ = transformed.__qualname__ = f"{what}({name})"
    transformed.__doc__ = f"{what} of {name}: see fastad.{what}."
    transformed.__wrapped__ = function  # type: ignore[attr-defined]
    return transformed


# -- the transforms --------------------------------------------------------------------------------
def value_and_grad(
    function: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """A function giving ``(value, gradient)`` of ``function``, as ``jax.value_and_grad``.

    ``function`` takes numbers and arrays and returns a scalar (with
    ``has_aux``, a pair ``(scalar, aux)``). The result takes the same
    arguments and returns ``(value, g)``, or ``((value, aux), g)``: ``g``
    is the gradient with respect to argument ``argnums`` (a float for a
    number, an array of its shape), or a tuple of them for a sequence.

    The first call with arguments of a new signature traces ``function``
    (``fa.compile``); later ones replay it. ``aux`` is what ``function``
    returns when called on the arguments themselves (plain arrays, no
    tape): one more forward pass in NumPy per call, so NumPy's numbers
    where NumPy defines a function differently (``eigh``, ``eigvalsh``
    and ``cholesky`` of a matrix that is not symmetric: see
    docs/transforms.md).

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> loss = lambda w, X: ((X @ w) ** 2).sum()
    >>> value, g = fa.value_and_grad(loss)(np.array([1.0, 2.0]), np.eye(2))
    >>> value, g
    (5.0, array([2., 4.]))
    """
    traced = _Traced(function, argnums, has_aux, "fa.value_and_grad")

    def transformed(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        value, gradients = traced.run(
            args, kwargs, lambda compiled, moving: compiled.value_and_grad(moving)
        )
        gradients = traced.form(gradients)
        return ((value, traced.aux(args, kwargs)) if traced.has_aux else value), gradients

    return _named(transformed, function, "value_and_grad")


def _grad(
    function: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False
) -> Callable[..., Any]:
    traced = _Traced(function, argnums, has_aux, "fa.grad")

    def transformed(*args: Any, **kwargs: Any) -> Any:
        found = traced.run(args, kwargs, lambda compiled, moving: compiled.grad(moving))
        gradients = traced.form(found)
        return (gradients, traced.aux(args, kwargs)) if traced.has_aux else gradients

    return _named(transformed, function, "grad")


def _jacobian(function: Callable[..., Any], argnums: Argnums, what: str) -> Callable[..., Any]:
    traced = _Traced(function, argnums, False, f"fa.{what}")

    def transformed(*args: Any, **kwargs: Any) -> Any:
        found = traced.run(args, kwargs, lambda compiled, moving: compiled.jacobian(moving))
        return traced.form(found)

    return _named(transformed, function, what)


def jacfwd(function: Callable[..., Any], argnums: Argnums = 0) -> Callable[..., Any]:
    """A function giving the Jacobian of ``function``, in ``jax.jacfwd``'s layout.

    For each argument of ``argnums``, d output / d argument of shape
    ``output.shape + argument.shape`` (one array for an int ``argnums``, a
    tuple for a sequence). The output is a number or one array. Built by
    forward sweeps per argument element or backward sweeps per output
    element, whichever are fewer, so :func:`jacrev` gives the same numbers
    at the same cost. Traced per signature, as :func:`value_and_grad`.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> fa.jacfwd(lambda x: x * x)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    return _jacobian(function, argnums, "jacfwd")


def jacrev(function: Callable[..., Any], argnums: Argnums = 0) -> Callable[..., Any]:
    """A function giving the Jacobian of ``function``, in ``jax.jacrev``'s layout; the same
    as :func:`jacfwd` (the direction of the sweeps is chosen by size)."""
    return _jacobian(function, argnums, "jacrev")


def _hessian(function: Callable[..., Any], argnums: Argnums) -> Callable[..., Any]:
    traced = _Traced(function, argnums, False, "fa.hessian")

    def transformed(*args: Any, **kwargs: Any) -> Any:
        rows = traced.run(args, kwargs, lambda compiled, moving: compiled.hessian(moving))
        return rows if traced.single else tuple(tuple(row) for row in rows)

    return _named(transformed, function, "hessian")


def _hvp(function: Callable[..., Any], argnums: Argnums) -> Callable[..., Any]:
    traced = _Traced(function, argnums, False, "fa.hvp")

    def transformed(primals: Sequence[Any], tangents: Any) -> Any:
        if not isinstance(primals, (tuple, list)):
            raise TypeError(
                "fa.hvp(fn)(primals, tangents): primals is a tuple of fn's arguments, got "
                f"{type(primals).__name__}"
            )
        if traced.single and isinstance(tangents, tuple) and len(tangents) == 1:
            tangents = tangents[0]  # jax.jvp's form: a tuple of one
        _check_tangents(traced, primals, tangents)
        found = traced.run(
            tuple(primals), {}, lambda compiled, moving: compiled.hvp(moving, tangents)
        )
        return traced.form(found)

    return _named(transformed, function, "hvp")


def _check_tangents(traced: _Traced, primals: Sequence[Any], tangents: Any) -> None:
    """A tangent of each differentiated argument's shape, else an error naming the
    argument by its position in the call (the traced function counts only the arguments
    it takes, static ones left out)."""
    listed = [tangents] if traced.single else tangents
    if not isinstance(listed, (list, tuple)) or len(listed) != len(traced.positions):
        return  # the traced function's own check names what is wrong with the list
    for position, tangent in zip(traced.positions, listed, strict=True):
        if position < len(primals) and not isinstance(tangent, (list, tuple)):
            if np.shape(tangent) != np.shape(primals[position]):
                raise ValueError(
                    f"{traced.what}: the tangent for argument {position} has shape "
                    f"{np.shape(tangent)}, the argument has shape {np.shape(primals[position])}"
                )


# -- the names shared with the tape functions ------------------------------------------------------
def _transform_argnums(wrt: object, argnums: Argnums | None, what: str) -> Argnums:
    """``argnums`` given by position (JAX's second argument) or by keyword, not both
    (neither: 0)."""
    if wrt is None:
        return 0 if argnums is None else argnums
    if argnums is not None:
        raise TypeError(f"{what}(fn, ...): give argnums once, by position or by keyword")
    return wrt  # type: ignore[return-value]


def _is_function(first: object) -> bool:
    return callable(first) and not isinstance(first, Node)


@overload
def grad(
    output: Callable[..., Any],
    wrt: Argnums | None = None,
    *,
    argnums: Argnums | None = None,
    has_aux: bool = False,
) -> Callable[..., Any]: ...
@overload
def grad(output: Var, wrt: Var) -> float: ...
@overload
def grad(output: Var, wrt: Block) -> FloatArray: ...
@overload
def grad(output: Var, wrt: Iterable[Var]) -> FloatArray: ...
@overload
def grad(output: Var, wrt: Iterable[Block]) -> list[FloatArray]: ...
@overload
def grad(output: Var, wrt: Iterable[Var | Block]) -> FloatArray | list[float | FloatArray]: ...
def grad(
    output: Any, wrt: Any = None, *, argnums: Argnums | None = None, has_aux: bool = False
) -> Any:
    """The gradient function of ``fn`` (``fa.grad(fn, argnums=0, has_aux=False)``, as
    ``jax.grad``), or the gradient of a recorded node (``fa.grad(z, wrt)``).

    With a function: see :func:`value_and_grad`; the result returns the
    gradient alone (``(gradient, aux)`` with ``has_aux``).

    With a scalar node ``output`` and nodes ``wrt`` of its tape: the
    gradient without touching ``.grad``. For a single node its gradient (a
    float, or an array shaped like a block); for a sequence of scalar nodes
    a float64 array of ``len(wrt)``, and with blocks among them a list.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> fa.grad(lambda x, y: x * fa.sin(y), argnums=(0, 1))(2.0, 0.0)
    (0.0, 2.0)
    """
    if _is_function(output):
        return _grad(output, _transform_argnums(wrt, argnums, "fa.grad"), has_aux)
    if wrt is None:
        raise TypeError(
            "fa.grad takes a function (fa.grad(fn) is its gradient function) or a scalar "
            f"node and the nodes to differentiate with respect to (fa.grad(z, wrt)); got "
            f"{type(output).__name__} and wrt None"
        )
    return functions.grad(output, wrt)


@overload
def hessian(
    output: Callable[..., Any], wrt: Argnums | None = None, *, argnums: Argnums | None = None
) -> Callable[..., Any]: ...
@overload
def hessian(output: Var, wrt: Var | Iterable[Var]) -> FloatArray: ...
def hessian(output: Any, wrt: Any = None, *, argnums: Argnums | None = None) -> Any:
    """The Hessian function of ``fn`` (``fa.hessian(fn, argnums=0)``, as ``jax.hessian``),
    or the Hessian of a recorded node (``fa.hessian(z, wrt)``, a ``(k, k)`` array).

    With a function of a scalar output: for an int ``argnums`` one array of
    shape ``argument.shape * 2``; for a sequence a tuple of rows,
    ``H[i][j]`` of shape ``shape_i + shape_j``. One Hessian-vector product
    per argument element (forward over reverse), symmetric to rounding.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> fa.hessian(lambda x: (x**3).sum())(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    if _is_function(output):
        return _hessian(output, _transform_argnums(wrt, argnums, "fa.hessian"))
    if wrt is None:
        raise TypeError(
            "fa.hessian takes a function (fa.hessian(fn)) or a scalar node and the scalar "
            f"nodes to differentiate with respect to (fa.hessian(z, wrt)); got "
            f"{type(output).__name__} and wrt None"
        )
    return functions.hessian(output, wrt)


@overload
def hvp(
    output: Callable[..., Any],
    wrt: Argnums | None = None,
    direction: None = None,
    *,
    argnums: Argnums | None = None,
) -> Callable[..., Any]: ...
@overload
def hvp(output: Var, wrt: Var, direction: ArrayLike) -> float: ...
@overload
def hvp(output: Var, wrt: Block, direction: ArrayLike) -> FloatArray: ...
@overload
def hvp(output: Var, wrt: Iterable[Var], direction: ArrayLike) -> FloatArray: ...
@overload
def hvp(output: Var, wrt: Iterable[Block], direction: ArrayLike) -> list[FloatArray]: ...
@overload
def hvp(
    output: Var, wrt: Iterable[Var | Block], direction: ArrayLike
) -> FloatArray | list[float | FloatArray]: ...
def hvp(
    output: Any, wrt: Any = None, direction: Any = None, *, argnums: Argnums | None = None
) -> Any:
    """The Hessian-vector product function of ``fn`` (``fa.hvp(fn, argnums=0)``), or
    ``H v`` of a recorded node (``fa.hvp(z, wrt, v)``: ``direction`` holds one entry
    per node of ``wrt``, an array of a block's shape for a block; the result has
    :func:`grad`'s form for the same ``wrt``).

    With a function of a scalar output, the result is called as
    ``h(primals, tangents)`` (``jax.jvp``'s convention): ``primals`` a
    tuple of ``fn``'s arguments, ``tangents`` shaped like the gradient (one
    array, or a number, for an int ``argnums``; a sequence for a sequence).
    It returns ``H v`` in the gradient's form, by forward over reverse
    without forming ``H``.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> h = fa.hvp(lambda x: (x**3).sum())
    >>> h((np.array([1.0, 2.0]),), np.array([1.0, 1.0]))
    array([ 6., 12.])
    """
    if _is_function(output):
        if direction is not None:
            raise TypeError(
                "fa.hvp(fn, argnums) returns h(primals, tangents); give the direction to h"
            )
        return _hvp(output, _transform_argnums(wrt, argnums, "fa.hvp"))
    if wrt is None or direction is None:
        raise TypeError(
            "fa.hvp takes a function (fa.hvp(fn)) or a scalar node, the nodes to "
            f"differentiate with respect to and a direction (fa.hvp(z, wrt, v)); got "
            f"{type(output).__name__}, wrt {wrt!r} and direction {direction!r}"
        )
    return functions.hvp(output, wrt, direction)


__all__ = ["grad", "hessian", "hvp", "jacfwd", "jacrev", "value_and_grad"]
