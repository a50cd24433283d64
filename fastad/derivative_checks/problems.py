"""What is being checked, at which point: every kind of function as one flat ``Problem``.

Three constructors build a :class:`Problem`: a plain callable with ``grad=``
(point of any shape, output of any shape ``S``, Jacobian ``S + x.shape``), a
:class:`fastad.CompiledFunction` (point ``(k,)``, ``f.jacobian``, ``f.jvp``,
``f.vjp``) and a :class:`fastad.BlockFunction` (its ``wrt`` arguments
concatenated). Malformed calls fail here, before the check, with the value or
shape named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.compiled import BlockFunction, CompiledFunction
from fastad.derivative_checks.layout import Layout, format_position
from fastad.derivative_checks.result import fail
from fastad.eager import Node
from fastad.util.errors import is_long_double, is_real_dtype, not_real

if TYPE_CHECKING:
    from fastad.derivative_checks.layout import Values
    from fastad.derivative_checks.result import GradcheckResult
    from fastad.util.hints import FloatArray


@dataclass
class Problem:
    """A function on the flat view: values, analytic derivatives and where things live."""

    point: FloatArray  # the flat point z, float64 of shape (n,)
    dtype: np.dtype[Any]  # decides the step and the default tolerances
    layout: Layout
    value: Values  # z -> flat outputs, shape (m,)
    jacobian: Values  # z -> analytic derivative, shape (m, n)
    vjp: Callable[[FloatArray, FloatArray], FloatArray] | None = None  # (z, u (m,)) -> u^T J (n,)
    jvp: Callable[[FloatArray, FloatArray], FloatArray] | None = None  # (z, v (n,)) -> J v (m,)
    check: str = "gradcheck"  # the check's name in its messages
    # Tests beyond the elements and the dot product, run last with (problem,
    # result, rtol, atol, seed): the Hessian's symmetry and its products.
    further_tests: (
        Callable[[Problem, GradcheckResult, float, float, int], GradcheckResult] | None
    ) = None


# The analytic derivatives of a plain callable f(x): grad(x) (the gradient or
# Jacobian), jvp(x, v) and vjp(x, u), u a float for a scalar output.
Function = Callable[[NDArray[np.float64]], ArrayLike]
Jvp = Callable[[NDArray[np.float64], NDArray[np.float64]], ArrayLike]
Vjp = Callable[[NDArray[np.float64], Any], ArrayLike]


def problem_for(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None,
    vjp: Vjp | None,
    jvp: Jvp | None,
) -> Problem:
    """The problem ``fa.gradcheck(function, x, grad, vjp=, jvp=)`` checks.

    Raises ``TypeError`` for what cannot be checked as given: not a callable, a
    plain callable without ``grad``, derivatives given to a compiled function,
    one of ``vjp``/``jvp`` without the other.
    """
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
            return block_problem(function, x)
        return compiled_problem(function, x)
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
    return plain_problem(function, x, grad, vjp, jvp)


def as_point(x: object, what: str = "x", allow_empty: bool = False) -> NDArray[Any]:
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
    if is_long_double(array):
        raise not_real(array, f"gradcheck's {what}")
    if array.dtype.kind != "f":
        hint = "; check a complex function as two real ones" if array.dtype.kind == "c" else ""
        raise TypeError(f"gradcheck needs a real point, got dtype {array.dtype} for {what}{hint}")
    if array.size == 0 and not allow_empty:
        raise ValueError(f"{what} is empty (shape {array.shape}): there is nothing to check")
    if not np.all(np.isfinite(array)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(
            f"gradcheck needs a finite point; {what} has {array[where]} at {format_position(where)}"
        )
    return array


def real_output(value: object, what: str) -> FloatArray:
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
    if array.dtype.kind == "b" or not is_real_dtype(array.dtype):
        if is_long_double(array):
            raise not_real(array, f"{what}'s result")
        described = type(value).__name__
        if array.dtype != object:
            described += f" of dtype {array.dtype}"
        raise TypeError(f"{what} must return a real number or a real array, got {described}")
    return array.astype(np.float64)


def plain_problem(
    function: Function, x: object, grad: Function, vjp: Vjp | None, jvp: Jvp | None
) -> Problem:
    """A plain callable at ``x`` of any shape; ``grad`` gives the Jacobian of shape
    ``f(x).shape + x.shape``, ``jvp`` and ``vjp`` (both or neither) the products."""
    array = as_point(x)
    dtype, shape = array.dtype, array.shape
    point = array.astype(np.float64).reshape(-1)

    def at(z: FloatArray) -> FloatArray:
        return z.reshape(shape).copy()  # a fresh array per call: f may write into it

    first = real_output(function(at(point)), "f(x)")
    output_shape = first.shape
    if first.size == 0:
        raise ValueError(f"f(x) returned an empty array of shape {output_shape}: nothing to check")
    require_finite(first, "f(x)", "output")
    layout = Layout([shape], output_shape, arguments=False)
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
        out = real_output(function(at(z)), "f(x)")
        if out.shape != output_shape:
            raise ValueError(
                f"f returned shape {out.shape} near x but {output_shape} at x: its output "
                "shape must not depend on the point"
            )
        return out.reshape(-1)

    def jacobian(z: FloatArray) -> FloatArray:
        g = real_output(grad(at(z)), "grad(x)")
        if g.shape != expected:
            raise ValueError(f"grad(x) has shape {g.shape}, expected {expected_text}")
        return g.reshape(m, n)

    problem = Problem(point, dtype, layout, value, jacobian)
    if jvp is not None and vjp is not None:  # both or neither (see problem_for)

        def pushed(z: FloatArray, v: FloatArray) -> FloatArray:
            out = real_output(jvp(at(z), v.reshape(shape)), "jvp(x, v)")
            if out.shape != output_shape:
                raise ValueError(
                    f"jvp(x, v) has shape {out.shape}, expected {output_shape} like f(x)"
                )
            return out.reshape(-1)

        def pulled(z: FloatArray, u: FloatArray) -> FloatArray:
            cotangent = float(u[0]) if not output_shape else u.reshape(output_shape)
            out = real_output(vjp(at(z), cotangent), "vjp(x, u)")
            if out.shape != shape:
                raise ValueError(f"vjp(x, u) has shape {out.shape}, expected {shape} like x")
            return out.reshape(-1)

        problem.jvp, problem.vjp = pushed, pulled
    return problem


def compiled_point(function: CompiledFunction, x: object) -> NDArray[Any]:
    """The one point of shape ``(k,)`` a compiled function is checked at."""
    k = function.num_inputs
    point = as_point(x)
    if point.shape != (k,):
        batch = point.ndim == 2 and point.shape[1] == k
        raise ValueError(
            f"a compiled function of k = {k} inputs is checked at one point of shape (k,) = "
            f"({k},), got shape {point.shape}"
            + ("; check a batch one point at a time" if batch else "")
        )
    return point


def compiled_problem(function: CompiledFunction, x: object) -> Problem:
    """A compiled function of scalars at one point: ``f.jacobian``, ``f.jvp`` and ``f.vjp``."""
    point = compiled_point(function, x).astype(np.float64)  # it computes in float64
    k = function.num_inputs
    first = np.asarray(function(point), dtype=np.float64)
    require_finite(first, "f(x)", "output")
    scalar = first.ndim == 0
    layout = Layout([(k,)], first.shape, arguments=False)
    m = layout.m
    return Problem(
        point,
        np.dtype(np.float64),
        layout,
        value=lambda z: np.asarray(function(z), dtype=np.float64).reshape(-1),
        jacobian=lambda z: np.asarray(function.jacobian(z), dtype=np.float64).reshape(m, k),
        # A scalar output takes a float cotangent; m outputs (a tuple of one
        # included) take shape (m,).
        vjp=lambda z, u: function.vjp(z, float(u[0]) if scalar else u)[1],
        jvp=lambda z, v: np.reshape(function.jvp(z, v)[1], -1),
        further_tests=gradient_calls_test(function) if scalar else None,
    )


BATCH_COPIES = 9
"""Points of the batch :func:`gradient_calls_test` sends: more than the widest vector of
points (8 lanes), so a batch kernel runs its lanes and its tail."""


def gradient_calls_test(
    function: CompiledFunction,
) -> Callable[[Problem, GradcheckResult, float, float, int], GradcheckResult]:
    """The calls a user makes for a gradient, ``f.value_and_grad`` at the point and at a
    batch of copies of it (other kernels than ``f.jacobian``'s), against the checked
    value and Jacobian: they must agree to the check's tolerance."""

    def test(
        problem: Problem, result: GradcheckResult, rtol: float, atol: float, seed: int
    ) -> GradcheckResult:
        z = problem.point
        # The value, then the gradient: what f(x) and f.jacobian(x) gave.
        want = np.concatenate([problem.value(z)[:1], problem.jacobian(z)[0]])
        batch = np.repeat(z[None, :], BATCH_COPIES, axis=0)
        values, gradients = function.value_and_grad(batch)
        value, gradient = function.value_and_grad(z)
        calls: list[tuple[str, Any, Any]] = [
            ("f.value_and_grad(x)", [value], [gradient]),
            (f"f.value_and_grad of {BATCH_COPIES} copies of x", values, gradients),
        ]
        for call, found_values, found_gradients in calls:
            for found_value, found_gradient in zip(found_values, found_gradients, strict=True):
                found = np.concatenate([[found_value], np.asarray(found_gradient, np.float64)])
                # Equal infinities agree; nan counts as bad.
                bad = ~((found == want) | (np.abs(found - want) <= atol + rtol * np.abs(want)))
                if bad.any():
                    i = int(np.argmax(bad))
                    what = "the value" if i == 0 else f"gradient element {i - 1}"
                    fail(
                        result,
                        f"{call} disagrees with f.jacobian(x) and f(x): {what} "
                        f"{float(found[i])!r} against {float(want[i])!r}",
                    )
                    return result
        return result

    return test


class BlockPoint(NamedTuple):
    """A function of arrays at its arguments, on the flat view: its ``wrt`` arguments
    vary, concatenated into ``point``; ``call(z)`` is the argument list at ``z``, the
    others held as given."""

    point: FloatArray
    shapes: list[tuple[int, ...]]  # of the varying arguments
    positions: list[int]  # their positions in the call
    call: Callable[[FloatArray], list[Any]]
    layout: Layout  # for the varying arguments, output not yet known


def block_point(function: BlockFunction, x: object) -> BlockPoint:
    """:class:`BlockPoint` of ``function`` at its arguments ``x`` (a tuple like its example)."""
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
    labels = [p for p in positions if np.asarray(given[p]).dtype.kind in "iub"]
    if labels:
        others = tuple(p for p in positions if p not in labels)
        raise ValueError(
            f"argument {labels[0]} is an array of {np.asarray(given[labels[0]]).dtype} (data "
            "such as class labels or a mask, which has no derivative and cannot be stepped "
            "by a difference): compile the function with wrt= naming the arguments to "
            f"check, fa.compile(..., wrt={others})"
        )
    # One empty argument is fine (it has no elements to check); all empty is not.
    arguments = [as_point(given[p], f"argument {p}", allow_empty=True) for p in positions]
    shapes = [a.shape for a in arguments]
    layout = Layout(shapes, (), arguments=True, positions=positions)
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

    return BlockPoint(point, shapes, positions, call, layout)


def block_problem(function: BlockFunction, x: object) -> Problem:
    """A compiled function of arrays at its arguments ``x``; its ``wrt`` arguments vary,
    concatenated into the flat point, and the others are held as given."""
    point, shapes, positions, call, layout = block_point(function, x)
    first = np.asarray(function(call(point)), dtype=np.float64)  # checks the shapes
    require_finite(first, "f(x)", "output")
    layout = Layout(shapes, first.shape, arguments=True, positions=positions)
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

    return Problem(
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


def require_finite(values: NDArray[Any], what: str, element: str, check: str = "gradcheck") -> None:
    """Raise ``ValueError`` naming the first non-finite element of ``values``."""
    if not np.all(np.isfinite(values)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
        at = f" at {element} {format_position(where)}" if where else ""
        raise ValueError(
            f"{what} is {values[where]}{at}: {check} needs a point where the function is finite"
        )
