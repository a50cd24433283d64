"""Gradient checking: compare analytic derivatives with finite differences.

"Gradient checking is the only thing you can trust when writing autodiff:
don't trust your own formulas" (the source articles). ``fa.gradcheck``
checks a compiled fastad function (of scalars or of arrays), or any Python
callable together with a hand-written gradient or Jacobian, against central
differences.

Everything runs on a flat view. The point (an array of any shape, or a
function of arrays' argument list) is a flat vector ``z`` of ``n`` numbers,
the output a flat vector of ``m`` numbers (``m = 1`` for a scalar), and the
analytic derivative an ``(m, n)`` matrix. A :class:`_Layout` maps flat
indices back to what the user wrote: the Jacobian index ``output index +
input index`` (the layout of ``torch.autograd.functional.jacobian`` and
``jax.jacobian``), or ``(argument, element)`` for a function of arrays. So
kinks, Richardson extrapolation and the worst-element report are written
once and hold for every shape.

Numeric reference. The step for input element ``j`` is ``h_j = cbrt(eps) *
max(1, |z_j|)`` (``eps`` of the point's dtype), rounded so that ``z_j +
h_j`` is exact; it balances the truncation error ``O(h^2)`` of central
differences against the rounding error ``O(eps / h)``. ``richardson=True``
combines steps ``h`` and ``h/2`` into an ``O(h^4)`` estimate, with
``eps^(1/5)`` in place of ``cbrt(eps)``.

Pass criterion, per Jacobian element: ``|analytic - numeric| <= atol + rtol
* |numeric|`` with per-dtype defaults (``DEFAULT_TOLERANCES``).

Kinks. Where an element fails, the two one-sided differences of its output
along its input are compared at ``h`` and ``h/4``: at a kink their gap stays
put as the step shrinks, for a smooth function it shrinks with the step. A
kink is reported as a non-differentiable point, not a mismatch, and passes
if the analytic value is a subgradient (lies between the one-sided
derivatives).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.compiled import BlockFunction, CompiledFunction
from fastad.eager.node import Node

if TYPE_CHECKING:
    from fastad.util.hints import BoolArray, FloatArray

    Values = Callable[[FloatArray], FloatArray]
    """On the flat view: ``z`` of shape (n,) to the flat outputs, shape (m,)."""

DEFAULT_TOLERANCES: dict[np.dtype[Any], tuple[float, float]] = {
    # dtype: (rtol, atol). float64 central differences are good to ~1e-9
    # relative on smooth functions; 1e-6 leaves room for curvature, not bugs.
    np.dtype(np.float64): (1e-6, 1e-8),
    np.dtype(np.float32): (1e-2, 1e-3),
}


class GradcheckError(AssertionError):
    """The analytic gradient disagrees with finite differences; ``.result`` has details."""

    def __init__(self, result: GradcheckResult) -> None:
        self.result = result
        super().__init__(result.message)


@dataclass
class GradcheckResult:
    """What ``fa.gradcheck`` found. True in a boolean context when it passed.

    Attributes
    ----------
    passed : bool
        Every element (and the dot-product test, where it ran) passed.
    mode : {"full", "fast"}
        The mode that was asked for.
    analytic, numeric, tolerance : numpy.ndarray or list of numpy.ndarray
        Full mode, and fast mode once it failed: the analytic derivative, its
        central-difference reference and each element's tolerance, shaped
        like the Jacobian, ``f(x).shape + x.shape`` (``x.shape`` for a scalar
        output). For a function of arrays (:class:`fastad.BlockFunction`), a
        list of gradients shaped like the arguments. Fast mode that passed:
        one number per random direction.
    failures : list of tuple
        The failing elements as indices into ``analytic``: ``output index +
        input index`` (``(2,)`` for input 2 of a scalar output, ``(0, 1, 2)``
        for input ``(1, 2)`` of output ``0``), or ``(argument, element)``
        for a function of arrays (``(1, (0, 2))``).
    kinks : list of tuple
        ``(index, forward, backward, is_subgradient)`` for each element found
        on a kink: its one-sided derivatives and whether the analytic value
        lies between them.
    jumps : list of tuple
        Elements along whose input the function itself jumps at the point
        (``f(x + h) - f(x - h)`` keeps its size as ``h`` shrinks): no
        derivative exists there to check (the Hessian of a ReLU network at
        a ReLU's kink, ``sign`` at 0); they pass, and are listed here.
    refined : list of tuple
        Elements where the function is smooth to first order only (its
        derivative has a kink there, as ``relu(x)**2`` at 0), so the central
        difference errs by ``O(h)``: they are checked against differences at
        ``h`` and ``h/4`` extrapolated to ``h = 0`` instead, and listed here.
    dot_product : tuple of float or None
        ``(<u, J v>, <J^T u, v>)`` from forward and reverse mode, where the
        dot-product test ran.
    message : str
        The verdict; on failure it names the worst element.
    """

    passed: bool
    mode: str
    analytic: FloatArray | list[FloatArray]
    numeric: FloatArray | list[FloatArray]
    tolerance: FloatArray | list[FloatArray]
    failures: list[tuple[Any, ...]] = field(default_factory=list)
    kinks: list[tuple[tuple[Any, ...], float, float, bool]] = field(default_factory=list)
    jumps: list[tuple[Any, ...]] = field(default_factory=list)
    refined: list[tuple[Any, ...]] = field(default_factory=list)
    dot_product: tuple[float, float] | None = None
    message: str = ""

    def __bool__(self) -> bool:
        return self.passed


# The analytic derivatives of a plain callable f(x): grad(x) (the gradient or
# Jacobian), jvp(x, v) and vjp(x, u), u a float for a scalar output.
Function = Callable[[NDArray[np.float64]], ArrayLike]
Jvp = Callable[[NDArray[np.float64], NDArray[np.float64]], ArrayLike]
Vjp = Callable[[NDArray[np.float64], Any], ArrayLike]


@overload
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: Literal[True] = True,
) -> Literal[True]: ...
@overload
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: Literal[False],
) -> GradcheckResult: ...
@overload
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: bool = True,
) -> Literal[True] | GradcheckResult: ...
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: bool = True,
) -> Literal[True] | GradcheckResult:
    """Check a gradient or a full Jacobian against central differences.

    Parameters
    ----------
    function : fastad.CompiledFunction, fastad.BlockFunction or callable
        What to check:

        - a compiled function of scalars, ``fa.compile(fn)``: its
          ``jacobian`` (the gradient for a scalar output), and the
          dot-product test between its ``jvp`` and ``vjp``;
        - a compiled function of arrays, ``fa.compile(fn, example=(X, W,
          b))``: the derivative of every ``wrt`` argument (the others held
          as data), from ``value_and_grad`` for a scalar output and
          ``jacobian`` for an array output, and the dot-product test
          between its ``jvp`` and ``vjp``;
        - any callable ``f(x)`` returning a real number or an array of shape
          ``S``, given with ``grad``.
    x : array_like or sequence of array_like
        The point. For a plain callable, a real scalar or array of any shape
        (``f`` and ``grad`` are called with float64 arrays of that shape);
        for a compiled function of ``k`` scalars, shape ``(k,)``; for a
        function of arrays, its arguments like the example, ``(X, W, b)``.
    grad : callable, optional
        ``grad(x)`` returning the analytic derivative of a plain callable:
        shaped like ``x`` for a scalar output, and for an output of shape
        ``S`` the Jacobian of shape ``S + x.shape``, ``J[i..., j...] =
        d f(x)[i...] / d x[j...]`` (the layout of PyTorch's and JAX's
        ``jacobian``). Required for a plain callable, refused for a compiled
        one (it brings its own).
    vjp, jvp : callable, optional
        For a plain callable, both or neither: ``jvp(x, v)`` with ``v``
        shaped like ``x`` returns ``J v`` shaped like ``f(x)``;
        ``vjp(x, u)`` with ``u`` shaped like ``f(x)`` (a float for a scalar
        output) returns ``u^T J`` shaped like ``x``. They get the
        dot-product test ``<u, J v> == <J^T u, v>`` that compiled functions
        of scalars always get.
    mode : {"full", "fast"}
        "full" checks every Jacobian element (``2 n`` function values for
        ``n`` input elements). "fast" compares ``u^T J v`` with a central
        difference along random directions ``v`` (and random output
        weights ``u``; two function values each, and one Jacobian); on
        failure a full check locates the wrong elements. One number per
        direction: an error far below ``rtol * |u^T J v|`` (a wrong small
        entry beside a large one) can pass, so "full" is the complete check.
    eps : float, optional
        Override the relative step (the step is ``eps * max(1, |x_j|)``).
    rtol, atol : float, optional
        Tolerances; per-dtype defaults in ``DEFAULT_TOLERANCES``, for the
        point's dtype (float64 for a function of arrays, which computes in
        float64 whatever its arguments' dtype).
    richardson : bool
        Use Richardson extrapolation of steps h and h/2 for the reference.
    n_directions : int
        Random directions in fast mode.
    seed : int
        Seed of the random directions (checks are reproducible).
    raise_exception : bool
        True: return True or raise :class:`GradcheckError`. False: return a
        :class:`GradcheckResult`.

    Returns
    -------
    True or GradcheckResult
        See ``raise_exception``.

    Raises
    ------
    GradcheckError
        The check failed (and ``raise_exception`` is True). The message
        names the worst element: "input 2" (a scalar output of a 1-D
        point), "input (1, 2) of output 0", "argument 1 element (0, 2)";
        1-D positions print as integers, n-D ones as tuples.
    TypeError, ValueError
        A malformed call: not a callable, a missing or superfluous ``grad``,
        a complex, empty or non-finite point, ``f`` returning something that
        is not real, a gradient of the wrong shape (the message gives the
        expected and the received shape).

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> f = fa.compile(lambda x, y: fa.sin(x) * y)
    >>> fa.gradcheck(f, np.array([0.3, 2.0]))
    True

    A function from ``(2, 3)`` arrays to ``(2,)`` vectors and its
    Jacobian of shape ``(2, 2, 3)``:

    >>> def rows(x):
    ...     return np.sin(x).sum(axis=1)
    >>> def jacobian(x):
    ...     J = np.zeros((2, 2, 3))
    ...     J[0, 0], J[1, 1] = np.cos(x[0]), np.cos(x[1])
    ...     return J
    >>> fa.gradcheck(rows, np.arange(6.0).reshape(2, 3), grad=jacobian)
    True
    """
    _check_options(mode, eps, rtol, atol, n_directions, seed)
    problem = _problem(function, x, grad, vjp, jvp)
    return _check(problem, mode, eps, rtol, atol, richardson, n_directions, seed, raise_exception)


def hesscheck(
    function: CompiledFunction,
    x: ArrayLike,
    *,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: bool = True,
) -> Literal[True] | GradcheckResult:
    """Check a compiled function's Hessian against central differences of its gradient.

    :func:`gradcheck` applied one order up: the "function" is ``f.grad`` and
    its "Jacobian" ``f.hessian`` (element ``(i, j)`` is ``d2 f / dx_i
    dx_j``, reported as "input j of output i"), with the same steps,
    tolerances, kink handling, fast mode and worst-element report. Two more
    tests: the Hessian must be symmetric (``|H[i, j] - H[j, i]| <= atol +
    rtol * |H[i, j]|``), and ``f.hvp`` must agree with it: ``f.hvp(x, v) ==
    f.hessian(x) @ v`` to rounding along a random ``v``, and ``<u, H v> ==
    <H u, v>`` (the dot-product test). ``function`` is ``fa.compile(fn)`` with a scalar
    output; ``x`` one point of shape ``(k,)``. Options and the result are
    :func:`gradcheck`'s.

    >>> import numpy as np, fastad as fa
    >>> f = fa.compile(lambda x, y: fa.sin(x) * y**2.0)
    >>> fa.hesscheck(f, np.array([0.3, 2.0]))
    True
    """
    _check_options(mode, eps, rtol, atol, n_directions, seed)
    if not isinstance(function, CompiledFunction):
        raise TypeError(
            f"hesscheck checks a compiled function of scalars, fa.compile(fn); got "
            f"{type(function).__name__}"
        )
    problem = _hessian_problem(function, x)
    return _check(problem, mode, eps, rtol, atol, richardson, n_directions, seed, raise_exception)


def _check(
    problem: _Problem,
    mode: str,
    eps: float | None,
    rtol: float | None,
    atol: float | None,
    richardson: bool,
    n_directions: int,
    seed: int,
    raise_exception: bool,
) -> Literal[True] | GradcheckResult:
    """Run a check on the flat view: elements (full or fast), then the dot-product and
    symmetry tests where the problem has them."""
    dtype_rtol, dtype_atol = DEFAULT_TOLERANCES.get(
        problem.dtype, DEFAULT_TOLERANCES[np.dtype(np.float64)]
    )
    rtol = dtype_rtol if rtol is None else float(rtol)
    atol = dtype_atol if atol is None else float(atol)
    if eps is None:
        # Central differences balance O(h^2) truncation against O(eps/h)
        # rounding at h ~ eps^(1/3); Richardson's O(h^4) at h ~ eps^(1/5).
        eps = float(np.finfo(problem.dtype).eps ** (0.2 if richardson else 1.0 / 3.0))
    relative_step = float(eps)
    with np.errstate(invalid="ignore", over="ignore"):  # nan and inf are reported, not warned
        if mode == "full":
            result = _full(problem, relative_step, rtol, atol, richardson)
        else:
            result = _fast(problem, relative_step, rtol, atol, richardson, n_directions, seed)
        if problem.jvp is not None and problem.vjp is not None:
            result = _dot_product(problem, result, seed, atol)
        if problem.check == "hesscheck":
            hessian = problem.jacobian(problem.point)  # once, for both tests
            result = _symmetry(hessian, result, rtol, atol)
            result = _products(problem, hessian, result, seed, atol)
    if raise_exception:
        if not result.passed:
            raise GradcheckError(result)
        return True
    return result


# -- validation: what is being checked, at which point ------------------------------------
def _check_options(
    mode: str,
    eps: float | None,
    rtol: float | None,
    atol: float | None,
    n_directions: int,
    seed: int,
) -> None:
    if mode not in ("full", "fast"):
        raise ValueError(f"mode must be 'full' or 'fast', got {mode!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (_is_real(value) and 0.0 <= value < math.inf):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if eps is not None and not (_is_real(eps) and 0.0 < eps < 1.0):
        raise ValueError(f"eps must be a relative step in (0, 1), got {eps!r}")
    if not isinstance(n_directions, numbers.Integral) or n_directions < 1:
        raise ValueError(f"n_directions must be a positive int, got {n_directions!r}")
    if not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int (checks are reproducible), got {seed!r}")


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass
class _Problem:
    """A function on the flat view: values, analytic derivatives and where things live."""

    point: FloatArray  # the flat point z, float64 of shape (n,)
    dtype: np.dtype[Any]  # decides the step and the default tolerances
    layout: _Layout
    value: Values  # z -> flat outputs, shape (m,)
    jacobian: Values  # z -> analytic derivative, shape (m, n)
    vjp: Callable[[FloatArray, FloatArray], FloatArray] | None = None  # (z, u (m,)) -> u^T J (n,)
    jvp: Callable[[FloatArray, FloatArray], FloatArray] | None = None  # (z, v (n,)) -> J v (m,)
    check: str = "gradcheck"  # the check's name in its messages


def _problem(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None,
    vjp: Vjp | None,
    jvp: Jvp | None,
) -> _Problem:
    if isinstance(function, (CompiledFunction, BlockFunction)):
        superfluous = [
            name
            for name, value in (("grad", grad), ("vjp", vjp), ("jvp", jvp))
            if value is not None
        ]
        if superfluous:
            drop = ", ".join(f"{name}=" for name in superfluous)
            raise TypeError(f"a compiled function brings its own derivatives: drop {drop}")
        if isinstance(function, BlockFunction):
            return _block_problem(function, x)
        return _compiled_problem(function, x)
    if not callable(function):
        raise TypeError(
            f"gradcheck needs a callable (a function or fa.compile(...)), got "
            f"{type(function).__name__}"
        )
    if grad is None:
        raise TypeError(
            "a plain callable needs its analytic gradient: gradcheck(f, x, grad=g); "
            "or check fa.compile(f)"
        )
    for name, value in (("grad", grad), ("vjp", vjp), ("jvp", jvp)):
        if value is not None and not callable(value):
            raise TypeError(
                f"{name}= must be a callable of the point, got {type(value).__name__}; "
                f"pass the function, e.g. {name}=lambda x: ..."
            )
    if (vjp is None) != (jvp is None):
        given, missing = ("vjp", "jvp") if jvp is None else ("jvp", "vjp")
        raise TypeError(
            f"the dot-product test <u, J v> == <J^T u, v> needs both vjp= and jvp=; "
            f"got {given}= without {missing}="
        )
    return _plain_problem(function, x, grad, vjp, jvp)


def _as_point(x: object, what: str = "x", allow_empty: bool = False) -> NDArray[Any]:
    """A real, finite, non-empty array (integers become float64)."""
    try:
        array = np.asarray(x)
    except ValueError:  # ragged nested sequences, such as a tuple of differently shaped arrays
        raise ValueError(
            f"{what} must be a real number or array; got a ragged {type(x).__name__}. A plain "
            "callable takes one array (concatenate several); a compiled function of arrays, "
            "fa.compile(fn, example=(X, W, b)), is checked at a tuple of arguments"
        ) from None
    if array.dtype.kind in "biu":
        array = array.astype(np.float64)
    if array.dtype.kind != "f":
        hint = "; check a complex function as two real ones" if array.dtype.kind == "c" else ""
        raise TypeError(f"gradcheck needs a real point, got dtype {array.dtype} for {what}{hint}")
    if array.size == 0 and not allow_empty:
        raise ValueError(f"{what} is empty (shape {array.shape}): there is nothing to check")
    if not np.all(np.isfinite(array)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(
            f"gradcheck needs a finite point; {what} has {array[where]} at {_position(where)}"
        )
    return array


def _real_output(value: object, what: str) -> FloatArray:
    """``value`` as a float64 array, or a TypeError naming what came back."""
    if isinstance(value, Node):
        raise TypeError(
            f"{what} returned a fastad node ({value!r}); return a number or an array, "
            "or check the compiled function: gradcheck(fa.compile(f), x)"
        )
    try:
        array = np.asarray(value)
    except ValueError:
        array = np.asarray(None)  # ragged: reported below like any other non-array
    if array.dtype.kind not in "iuf":
        described = type(value).__name__
        if array.dtype != object:
            described += f" of dtype {array.dtype}"
        raise TypeError(f"{what} must return a real number or a real array, got {described}")
    return array.astype(np.float64)


def _plain_problem(
    function: Function, x: object, grad: Function, vjp: Vjp | None, jvp: Jvp | None
) -> _Problem:
    array = _as_point(x)
    dtype, shape = array.dtype, array.shape
    point = array.astype(np.float64).reshape(-1)

    def at(z: FloatArray) -> FloatArray:
        return z.reshape(shape).copy()  # a fresh array per call: f may write into it

    first = _real_output(function(at(point)), "f(x)")
    output_shape = first.shape
    if first.size == 0:
        raise ValueError(f"f(x) returned an empty array of shape {output_shape}: nothing to check")
    _require_finite(first, "f(x)", "output")
    layout = _Layout([shape], output_shape, arguments=False)
    m, n = layout.m, layout.n
    expected = output_shape + shape
    if output_shape:
        expected_text = (
            f"{expected}: f(x)'s shape {output_shape} followed by x's shape {shape}, "
            "J[i..., j...] = d f(x)[i...] / d x[j...]"
        )
    else:
        expected_text = f"{expected} like x (f(x) is a scalar)"

    def value(z: FloatArray) -> FloatArray:
        out = _real_output(function(at(z)), "f(x)")
        if out.shape != output_shape:
            raise ValueError(
                f"f returned shape {out.shape} near x but {output_shape} at x: its output "
                "shape must not depend on the point"
            )
        return out.reshape(-1)

    def jacobian(z: FloatArray) -> FloatArray:
        g = _real_output(grad(at(z)), "grad(x)")
        if g.shape != expected:
            raise ValueError(f"grad(x) has shape {g.shape}, expected {expected_text}")
        return g.reshape(m, n)

    problem = _Problem(point, dtype, layout, value, jacobian)
    if jvp is not None and vjp is not None:  # both or neither (see _problem)

        def pushed(z: FloatArray, v: FloatArray) -> FloatArray:
            out = _real_output(jvp(at(z), v.reshape(shape)), "jvp(x, v)")
            if out.shape != output_shape:
                raise ValueError(
                    f"jvp(x, v) has shape {out.shape}, expected {output_shape} like f(x)"
                )
            return out.reshape(-1)

        def pulled(z: FloatArray, u: FloatArray) -> FloatArray:
            cotangent = float(u[0]) if not output_shape else u.reshape(output_shape)
            out = _real_output(vjp(at(z), cotangent), "vjp(x, u)")
            if out.shape != shape:
                raise ValueError(f"vjp(x, u) has shape {out.shape}, expected {shape} like x")
            return out.reshape(-1)

        problem.jvp, problem.vjp = pushed, pulled
    return problem


def _compiled_point(function: CompiledFunction, x: object) -> NDArray[Any]:
    """The one point of shape ``(k,)`` a compiled function is checked at."""
    k = function.num_inputs
    point = _as_point(x)
    if point.shape != (k,):
        batch = point.ndim == 2 and point.shape[1] == k
        raise ValueError(
            f"a compiled function of k = {k} inputs is checked at one point of shape (k,) = "
            f"({k},), got shape {point.shape}"
            + ("; check a batch one point at a time" if batch else "")
        )
    return point


def _hessian_problem(function: CompiledFunction, x: object) -> _Problem:
    """The gradient as the function, the Hessian as its Jacobian, ``hvp`` both ways."""
    point = _compiled_point(function, x)
    dtype, point = point.dtype, point.astype(np.float64)
    first = np.asarray(function(point), dtype=np.float64)
    if first.ndim != 0:
        raise ValueError(
            f"hesscheck needs a scalar output; this function returns shape {first.shape}"
        )
    _require_finite(first, "f(x)", "output", "hesscheck")
    k = function.num_inputs
    _require_finite(np.asarray(function.grad(point)), "the gradient", "element", "hesscheck")

    def products(z: FloatArray, v: FloatArray) -> FloatArray:
        return function.hvp(z, v)

    return _Problem(
        point,
        dtype,
        _Layout([(k,)], (k,), arguments=False),
        value=lambda z: np.asarray(function.grad(z), dtype=np.float64).reshape(-1),
        jacobian=lambda z: np.asarray(function.hessian(z), dtype=np.float64).reshape(k, k),
        vjp=products,
        jvp=products,
        check="hesscheck",
    )


def _symmetry(
    hessian: FloatArray, result: GradcheckResult, rtol: float, atol: float
) -> GradcheckResult:
    """Fail the result, naming the worst pair, where ``H[i, j]`` and ``H[j, i]`` differ."""
    gap = np.abs(hessian - hessian.T)
    tolerance = atol + rtol * np.maximum(np.abs(hessian), np.abs(hessian.T))
    bad = ~(gap <= tolerance)  # nan counts as bad
    if bad.any():
        i, j = np.unravel_index(int(np.argmax(np.where(bad, gap - tolerance, -np.inf))), bad.shape)
        result.passed = False
        note = (
            f"the Hessian is not symmetric: H[{i}, {j}] = {float(hessian[i, j])!r} but "
            f"H[{j}, {i}] = {float(hessian[j, i])!r} ({int(bad.sum()) // 2 or 1} pair(s) differ)"
        )
        result.message = note if "passed" in result.message else result.message + "; " + note
    return result


def _products(
    problem: _Problem, hessian: FloatArray, result: GradcheckResult, seed: int, atol: float
) -> GradcheckResult:
    """Fail the result where ``f.hvp(x, v)`` is not ``f.hessian(x) @ v`` to rounding."""
    assert problem.jvp is not None  # a Hessian problem has its hvp
    z = problem.point
    v = np.random.default_rng(seed + 2).standard_normal(z.size)
    product = np.asarray(problem.jvp(z, v), dtype=np.float64).reshape(-1)
    expected = hessian @ v
    # The same products summed in another order; a wrong kernel is off by O(1).
    tolerance = 1024 * np.finfo(float).eps * (np.abs(hessian) @ np.abs(v)) + atol * np.abs(v).sum()
    bad = ~(np.abs(product - expected) <= tolerance)
    if bad.any():
        i = int(np.argmax(np.where(bad, np.abs(product - expected) - tolerance, -np.inf)))
        result.passed = False
        note = (
            f"f.hvp disagrees with f.hessian: along a random v, (H v)[{i}] = "
            f"{float(product[i])!r} but (f.hessian(x) @ v)[{i}] = {float(expected[i])!r}"
        )
        result.message = note if "passed" in result.message else result.message + "; " + note
    return result


def _compiled_problem(function: CompiledFunction, x: object) -> _Problem:
    point = _compiled_point(function, x)
    k = function.num_inputs
    dtype, point = point.dtype, point.astype(np.float64)
    first = np.asarray(function(point), dtype=np.float64)
    _require_finite(first, "f(x)", "output")
    scalar = first.ndim == 0
    layout = _Layout([(k,)], first.shape, arguments=False)
    m = layout.m
    return _Problem(
        point,
        dtype,
        layout,
        value=lambda z: np.asarray(function(z), dtype=np.float64).reshape(-1),
        jacobian=lambda z: np.asarray(function.jacobian(z), dtype=np.float64).reshape(m, k),
        # A scalar output takes a float cotangent; m outputs (a tuple of one
        # included) take shape (m,).
        vjp=lambda z, u: function.vjp(z, float(u[0]) if scalar else u)[1],
        jvp=lambda z, v: np.reshape(function.jvp(z, v)[1], -1),
    )


def _block_problem(function: BlockFunction, x: object) -> _Problem:
    if not isinstance(x, (tuple, list)):
        raise TypeError(
            "a compiled function of arrays is checked at its arguments, a tuple like its "
            f"example: gradcheck(f, (X, W, b)); got {type(x).__name__}"
            + (f" of shape {np.shape(x)}" if isinstance(x, np.ndarray) else "")
        )
    given = list(x)
    if len(given) != function.num_inputs:
        raise ValueError(f"expected {function.num_inputs} arguments, got {len(given)}")
    # The arguments the function differentiates (wrt=) vary; the others are data, passed
    # as given (integer labels stay integers).
    positions = list(range(len(given))) if function.wrt is None else list(function.wrt)
    # One empty argument is fine (it has no elements to check); all empty is not.
    arguments = [_as_point(given[p], f"argument {p}", allow_empty=True) for p in positions]
    shapes = [a.shape for a in arguments]
    layout = _Layout(shapes, (), arguments=True, positions=positions)
    if layout.n == 0:
        raise ValueError(
            f"the arguments have shapes {shapes}: no elements, there is nothing to check"
        )
    point = np.concatenate([a.astype(np.float64).reshape(-1) for a in arguments])

    def call(z: FloatArray) -> list[Any]:
        full = list(given)
        for position, part in zip(positions, layout.split(z), strict=True):
            full[position] = part
        return full

    first = np.asarray(function(call(point)), dtype=np.float64)  # checks the shapes
    _require_finite(first, "f(x)", "output")
    layout = _Layout(shapes, first.shape, arguments=True, positions=positions)
    n, m, output = layout.n, layout.m, first.shape

    def listed(results: Any) -> list[Any]:
        return [results] if function.single_wrt else list(results)

    def gradient(z: FloatArray) -> FloatArray:
        # A scalar output: its gradient, from value_and_grad (generated code where it runs).
        _, gradients = function.value_and_grad(call(z))
        gradients = listed(gradients)
        for position, found, shape in zip(positions, gradients, shapes, strict=True):
            if np.shape(found) != shape:
                raise ValueError(
                    f"the gradient of argument {position} has shape {np.shape(found)}, "
                    f"expected {shape} like the argument"
                )
        return np.concatenate([np.reshape(g, -1) for g in gradients]).reshape(1, n)

    def jacobian(z: FloatArray) -> FloatArray:
        blocks = listed(function.jacobian(call(z)))
        return np.concatenate([np.reshape(b, (m, -1)) for b in blocks], axis=1)

    def directions(v: FloatArray) -> Any:
        parts = layout.split(v)
        return parts[0] if function.single_wrt else parts

    return _Problem(
        point,
        np.dtype(np.float64),  # a BlockFunction computes in float64
        layout,
        value=lambda z: np.asarray(function(call(z)), dtype=np.float64).reshape(-1),
        jacobian=gradient if not output else jacobian,
        vjp=lambda z, u: np.concatenate(
            [np.reshape(g, -1) for g in listed(function.vjp(call(z), np.reshape(u, output))[1])]
        ),
        jvp=lambda z, v: np.reshape(function.jvp(call(z), directions(v))[1], -1),
    )


def _require_finite(
    values: NDArray[Any], what: str, element: str, check: str = "gradcheck"
) -> None:
    if not np.all(np.isfinite(values)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
        at = f" at {element} {_position(where)}" if where else ""
        raise ValueError(
            f"{what} is {values[where]}{at}: {check} needs a point where the function is finite"
        )


# -- the flat view and the user's names ---------------------------------------------------
def _position(index: tuple[int, ...]) -> str:
    """A multi-index as the message prints it: 1-D positions as integers."""
    return str(index[0]) if len(index) == 1 else str(index)


class _Layout:
    """Flat indices in the user's terms: Jacobian indices and element names.

    ``input_shapes`` holds the point's shape (one input) or each argument's
    shape (``arguments=True``, a function of arrays); ``output_shape`` is
    ``()`` for a scalar output.
    """

    def __init__(
        self,
        input_shapes: Iterable[tuple[int, ...]],
        output_shape: tuple[int, ...],
        arguments: bool,
        positions: list[int] | None = None,
    ) -> None:
        self.input_shapes = [tuple(shape) for shape in input_shapes]
        # The arguments' positions in the user's call (a function of arrays with wrt=).
        self.positions = positions if positions is not None else list(range(len(self.input_shapes)))
        self.output_shape = tuple(output_shape)
        self.arguments = arguments
        sizes = [math.prod(shape) for shape in self.input_shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.n = int(self.offsets[-1])
        self.m = math.prod(self.output_shape)

    @property
    def scalar_output(self) -> bool:
        return self.output_shape == ()

    def split(self, z: FloatArray) -> FloatArray | list[float | FloatArray]:
        """The user's point at flat ``z``: one array, or the argument list (floats for 0-d)."""
        parts = [
            z[start:stop].reshape(shape).copy()
            for start, stop, shape in zip(
                self.offsets[:-1], self.offsets[1:], self.input_shapes, strict=True
            )
        ]
        if not self.arguments:
            return parts[0]
        return [float(part) if part.ndim == 0 else part for part in parts]

    def _input(self, j: int) -> tuple[int, tuple[int, ...]]:
        argument = int(np.searchsorted(self.offsets, j, side="right") - 1)
        shape = self.input_shapes[argument]
        element = np.unravel_index(int(j - self.offsets[argument]), shape)
        return argument, tuple(int(i) for i in element)

    def index(self, o: int, j: int) -> tuple[Any, ...]:
        """Flat (output ``o``, input ``j``) as an index into the user's ``analytic``."""
        argument, element = self._input(j)
        output = tuple(int(i) for i in np.unravel_index(o, self.output_shape))
        if self.arguments:  # per argument, output index + element (JAX's jacobian layout)
            return (self.positions[argument], output + element)
        return output + element

    def name(self, o: int, j: int) -> str:
        """Flat (output ``o``, input ``j``) in words: "input 0", "argument 1 element (0, 2)"."""
        argument, element = self._input(j)
        if self.arguments:
            name = f"argument {self.positions[argument]}"
            name += f" element {_position(element)}" if element else ""
        else:
            name = f"input {_position(element)}" if element else "the input"
        if not self.scalar_output:
            output = tuple(int(i) for i in np.unravel_index(o, self.output_shape))
            name += f" of output {_position(output)}"
        return name

    def where(self, j: int, z: FloatArray) -> str:
        """The point's value at flat input ``j``, for a kink report."""
        return f"{'its value is' if self.arguments else 'x ='} {float(z[j])!r}"

    def unflatten(self, matrix: FloatArray) -> FloatArray | list[FloatArray]:
        """An ``(m, n)`` array in the user's form: the Jacobian, or gradients per argument."""
        if self.arguments:
            return [
                matrix[:, start:stop].reshape(self.output_shape + shape)
                for start, stop, shape in zip(
                    self.offsets[:-1], self.offsets[1:], self.input_shapes, strict=True
                )
            ]
        return matrix.reshape(self.output_shape + self.input_shapes[0])


# -- the numeric reference -------------------------------------------------------------
def _steps(z: FloatArray, relative_step: float) -> FloatArray:
    h = relative_step * np.maximum(1.0, np.abs(z))
    return (z + h) - z  # exactly representable: z + h - h == z


def _central(value: Values, z: FloatArray, j: int, h: float) -> FloatArray:
    hi, lo = z.copy(), z.copy()
    hi[j] += h
    lo[j] -= h
    return (value(hi) - value(lo)) / (2.0 * h)


def _reference(value: Values, z: FloatArray, j: int, h: float, richardson: bool) -> FloatArray:
    coarse = _central(value, z, j, h)
    if not richardson:
        return coarse
    fine = _central(value, z, j, h / 2.0)
    return (4.0 * fine - coarse) / 3.0


def _one_sided(
    value: Values, z: FloatArray, f0: FloatArray, j: int, h: float
) -> tuple[FloatArray, FloatArray]:
    hi, lo = z.copy(), z.copy()
    hi[j] += h
    lo[j] -= h
    return (value(hi) - f0) / h, (f0 - value(lo)) / h


def _kinks(
    value: Values,
    z: FloatArray,
    f0: FloatArray,
    j: int,
    h: float,
    bad: BoolArray,
    tolerance: FloatArray,
) -> tuple[BoolArray, FloatArray, FloatArray]:
    """Which outputs sit on a kink along input ``j``, and their one-sided derivatives.

    At a kink the two one-sided derivatives differ, and each stays put as the
    step shrinks (h to h/4). For a smooth function their gap is ~h f'' and
    shrinks 4x; for a noisy one (rounding, a float32 computation) they jump
    about. Only the first case is a kink: the others stay mismatches. Judged
    per output: one output's kink along ``j`` says nothing about another's.

    Returns ``(is_kink, forward, backward)``, arrays of shape (m,), the
    derivatives at the smaller step; ``is_kink`` is False outside ``bad``.
    """
    forward, backward = _one_sided(value, z, f0, j, h)
    gap = np.abs(forward - backward)
    is_kink = bad & (gap > tolerance)
    if not is_kink.any():
        return is_kink, forward, backward
    small_forward, small_backward = _one_sided(value, z, f0, j, h / 4.0)
    keeps_gap = np.abs(small_forward - small_backward) > 0.5 * gap
    drift = np.maximum(np.abs(small_forward - forward), np.abs(small_backward - backward))
    is_kink &= keeps_gap & (drift < 0.1 * gap)
    return is_kink, small_forward, small_backward


def _rough_elements(
    value: Values,
    z: FloatArray,
    f0: FloatArray,
    j: int,
    h: float,
    candidates: BoolArray,
    analytic: FloatArray,
    tolerance: FloatArray,
) -> tuple[BoolArray, BoolArray]:
    """Of the failing non-kink outputs along input ``j``: which jump, and which are
    right once the central difference's ``O(h)`` error of a first-order-smooth point
    is extrapolated away.

    A jump: ``f(z + h) - f(z - h)`` keeps its size (within 10%) at ``h``,
    ``h/4`` and ``h/16``, far above rounding; a derivative's difference
    shrinks with the step and rounding noise does not keep one size. Rough:
    the error of the central difference at ``h/4`` is at most half that at
    ``h`` and its extrapolation ``(4 c(h/4) - c(h)) / 3`` (exact for an error
    linear in ``h``) meets the tolerance. A wrong derivative fails both: its
    error does not shrink with the step.
    """
    if not candidates.any():
        return candidates, candidates

    def difference(step: float) -> FloatArray:
        hi, lo = z.copy(), z.copy()
        hi[j] += step
        lo[j] -= step
        return value(hi) - value(lo)

    sizes = [difference(step) for step in (h, h / 4.0, h / 16.0)]
    scale = 1e6 * np.finfo(float).eps * np.maximum(1.0, np.abs(f0))
    jumping = candidates & (np.abs(sizes[0]) > scale)
    for size in sizes[1:]:
        jumping &= np.abs(size - sizes[0]) <= 0.1 * np.abs(sizes[0])
    coarse, fine = sizes[0] / (2.0 * h), sizes[1] / (h / 2.0)
    extrapolated = (4.0 * fine - coarse) / 3.0
    converging = np.abs(fine - analytic) <= 0.5 * np.abs(coarse - analytic)
    rough = candidates & ~jumping & converging & (np.abs(extrapolated - analytic) <= tolerance)
    return jumping, rough


# -- the checks -------------------------------------------------------------------------
def _full(
    problem: _Problem, relative_step: float, rtol: float, atol: float, richardson: bool
) -> GradcheckResult:
    z, layout = problem.point, problem.layout
    analytic = problem.jacobian(z)
    steps = _steps(z, relative_step)
    numeric = np.empty_like(analytic)
    for j in range(z.size):
        numeric[:, j] = _reference(problem.value, z, j, steps[j], richardson)
    tolerance = atol + rtol * np.abs(numeric)
    error = np.abs(analytic - numeric)
    bad = ~(error <= tolerance)  # nan counts as bad
    # Flat (o, j) pairs; kinks with their one-sided derivatives.
    failures: list[tuple[int, int]] = []
    kinks: list[tuple[tuple[int, int], float, float, bool]] = []
    jumps: list[tuple[int, int]] = []
    refined: list[tuple[int, int]] = []
    failing_inputs = np.flatnonzero(bad.any(axis=0))
    f0 = problem.value(z) if failing_inputs.size else None
    for j in failing_inputs.tolist():
        assert f0 is not None  # computed above, as an input fails
        is_kink, forward, backward = _kinks(
            problem.value, z, f0, j, steps[j], bad[:, j], tolerance[:, j]
        )
        others = bad[:, j] & ~is_kink
        jumping, rough = _rough_elements(
            problem.value, z, f0, j, steps[j], others, analytic[:, j], tolerance[:, j]
        )
        for o in np.flatnonzero(bad[:, j]).tolist():
            if jumping[o]:
                jumps.append((o, j))
                continue
            if rough[o]:
                refined.append((o, j))
                continue
            if not is_kink[o]:
                failures.append((o, j))
                continue
            low, high = sorted((forward[o], backward[o]))
            slack = tolerance[o, j]
            is_subgradient = bool(low - slack <= analytic[o, j] <= high + slack)
            kinks.append(((o, j), float(forward[o]), float(backward[o]), is_subgradient))
            if not is_subgradient:
                failures.append((o, j))
    failures.sort()
    result = GradcheckResult(
        passed=not failures,
        mode="full",
        analytic=layout.unflatten(analytic),
        numeric=layout.unflatten(numeric),
        tolerance=layout.unflatten(tolerance),
        failures=[layout.index(o, j) for o, j in failures],
        kinks=[(layout.index(*at), fwd, bwd, ok) for at, fwd, bwd, ok in kinks],
        jumps=[layout.index(*at) for at in jumps],
        refined=[layout.index(*at) for at in refined],
    )
    notes = []
    if jumps:
        notes.append(f"{len(jumps)} element(s) where the function jumps: no derivative to check")
    if refined:
        notes.append(
            f"{len(refined)} element(s) smooth to first order only: checked with an "
            "extrapolated difference"
        )
    result.message = _full_message(
        problem, failures, kinks, analytic, error, tolerance, numeric, steps, notes
    )
    return result


def _fast(
    problem: _Problem,
    relative_step: float,
    rtol: float,
    atol: float,
    richardson: bool,
    n_directions: int,
    seed: int,
) -> GradcheckResult:
    z, layout = problem.point, problem.layout
    rng = np.random.default_rng(seed)
    jacobian = problem.jacobian(z)
    step = relative_step * max(1.0, float(np.max(np.abs(z))))
    analytic_values: list[float] = []
    numeric_values: list[float] = []
    for _ in range(n_directions):
        v = rng.standard_normal(layout.n)
        v /= np.linalg.norm(v)
        u = np.ones(1) if layout.scalar_output else rng.standard_normal(layout.m)
        analytic_values.append(float(u @ (jacobian @ v)))

        def along(t: float, v: FloatArray = v) -> FloatArray:
            return problem.value(z + t * v)

        coarse = (along(step) - along(-step)) / (2 * step)
        if richardson:
            fine = (along(step / 2) - along(-step / 2)) / step
            coarse = (4 * fine - coarse) / 3
        numeric_values.append(float(u @ coarse))
    analytic, numeric = np.array(analytic_values), np.array(numeric_values)
    tolerance = atol + rtol * np.abs(numeric)
    excess = np.abs(analytic - numeric) - tolerance
    if np.all(excess <= 0):
        return GradcheckResult(
            True, "fast", analytic, numeric, tolerance, message=f"fast {problem.check} passed"
        )
    # Locate the wrong elements with a full check (costs 2n evaluations, only on failure).
    located = _full(problem, relative_step, rtol, atol, richardson)
    located.mode = "fast"
    worst = int(np.argmax(np.where(np.isnan(excess), np.inf, excess)))
    along_worst = (
        f"along random direction {worst}, u^T J v = {float(analytic[worst])!r} but the central "
        f"difference gives {float(numeric[worst])!r} (tolerance {tolerance[worst]:.3g})"
    )
    if located.passed:
        # The full check is the complete one: a direction can fail where every
        # element passes (a kink with a valid subgradient, whose directional
        # difference is no u^T J v), and the elements decide.
        located.message += (
            f"; fast mode's directional check failed {along_worst}, but every element passes "
            "the full check"
        )
        return located
    located.message = f"fast {problem.check} failed: {along_worst}. " + located.message
    return located


def _dot_product(
    problem: _Problem, result: GradcheckResult, seed: int, atol: float
) -> GradcheckResult:
    """Check <u, J v> == <J^T u, v>: forward and reverse mode must agree."""
    assert problem.jvp is not None and problem.vjp is not None  # the caller checks
    z, layout = problem.point, problem.layout
    rng = np.random.default_rng(seed + 1)
    v = rng.standard_normal(layout.n)
    jv = np.asarray(problem.jvp(z, v), dtype=np.float64).reshape(-1)
    u = rng.standard_normal(jv.shape)
    jtu = np.asarray(problem.vjp(z, u), dtype=np.float64).reshape(-1)
    forward, reverse = float(np.dot(u, jv)), float(np.dot(jtu, v))
    scale = max(np.sum(np.abs(u) * np.abs(jv)), np.sum(np.abs(jtu) * np.abs(v)), 1e-300)
    # The two sides sum the same products in different orders: they agree to
    # rounding, which grows with the tape and with cancellation inside it
    # (x - x + cos(x) at tiny x); a wrong rule is off by O(1). The absolute
    # part is the check's own atol, scaled by the directions.
    tolerance = 1024 * np.finfo(float).eps * scale + atol * np.linalg.norm(u) * np.linalg.norm(v)
    agrees = abs(forward - reverse) <= tolerance
    result.dot_product = (forward, reverse)
    if not agrees:
        result.passed = False
        if problem.check == "hesscheck":
            note = f"f.hvp is not symmetric: <u, H v> = {forward!r} but <H u, v> = {reverse!r}"
        else:
            note = (
                f"forward and reverse mode disagree: <u, J v> = {forward!r} but "
                f"<J^T u, v> = {reverse!r}"
            )
        result.message = note if "passed" in result.message else result.message + "; " + note
    return result


def _full_message(
    problem: _Problem,
    failures: list[tuple[int, int]],
    kinks: list[tuple[tuple[int, int], float, float, bool]],
    analytic: FloatArray,
    error: FloatArray,
    tolerance: FloatArray,
    numeric: FloatArray,
    steps: FloatArray,
    notes: list[str],
) -> str:
    if not failures:
        if kinks:
            notes = [f"{len(kinks)} kink(s) with valid subgradients", *notes]
        return f"{problem.check} passed" + (f" ({'; '.join(notes)})" if notes else "")
    excess = np.where(np.isnan(error), np.inf, error - tolerance)
    worst = max(failures, key=lambda at: excess[at])
    o, j = worst
    name = problem.layout.name(o, j)
    counted = (
        f"{problem.check} failed for {len(failures)} of {analytic.size} elements; worst is {name}"
    )
    kink = next((k for k in kinks if k[0] == worst), None)
    if kink is not None:
        return (
            f"{counted} at a non-differentiable point ({problem.layout.where(j, problem.point)}): "
            f"one-sided derivatives {kink[1]!r} and {kink[2]!r}, and the analytic "
            f"{float(analytic[worst])!r} is not between them"
        )
    return (
        f"{counted}: analytic {float(analytic[worst])!r}, numeric "
        f"{float(numeric[worst])!r} (|difference| {error[worst]:.3g} > tolerance "
        f"{tolerance[worst]:.3g} = atol + rtol * |numeric|; step {steps[j]:.3g})"
    )
