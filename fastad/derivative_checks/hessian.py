"""``fa.hesscheck``: the gradient check one order up, plus the Hessian's own tests.

The checked function is ``f.grad``, its Jacobian ``f.hessian``, and its JVP and
VJP both ``f.hvp`` (the dot-product test is then ``<u, H v> == <H u, v>``);
further tests: the Hessian is symmetric, and ``f.hvp(x, v) == f.hessian(x) @ v``
along a random ``v``. Messages say "hesscheck".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from fastad.compiled import BlockFunction, CompiledFunction
from fastad.derivative_checks.checks import check_options, run_check
from fastad.derivative_checks.layout import Layout
from fastad.derivative_checks.problems import (
    Problem,
    block_point,
    compiled_point,
    require_finite,
)
from fastad.derivative_checks.result import fail

if TYPE_CHECKING:
    from fastad.derivative_checks.result import GradcheckResult
    from fastad.util.hints import FloatArray


def hesscheck(
    function: CompiledFunction | BlockFunction,
    x: ArrayLike | Sequence[ArrayLike],
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

    :func:`fastad.gradcheck` applied one order up: the "function" is ``f.grad`` and
    its "Jacobian" ``f.hessian`` (element ``(i, j)`` is ``d2 f / dx_i
    dx_j``, reported as "input j of output i"), with the same steps,
    tolerances, kink handling, fast mode and worst-element report. Two more
    tests: the Hessian must be symmetric (``|H[i, j] - H[j, i]| <= atol +
    rtol * |H[i, j]|``), and ``f.hvp`` must agree with it: ``f.hvp(x, v) ==
    f.hessian(x) @ v`` to rounding along a random ``v``, and ``<u, H v> ==
    <H u, v>`` (the dot-product test). ``function`` is ``fa.compile(fn)`` with a scalar
    output: of scalars, checked at one point ``x`` of shape ``(k,)``; or of arrays,
    checked at its arguments ``x`` (a tuple like its example), its ``wrt`` arguments
    varying as one flat point. Options and the result are :func:`fastad.gradcheck`'s.

    >>> import numpy as np, fastad as fa
    >>> f = fa.compile(lambda x, y: fa.sin(x) * y**2.0)
    >>> fa.hesscheck(f, np.array([0.3, 2.0]))
    True
    """
    check_options(mode, eps, rtol, atol, n_directions, seed)
    if isinstance(function, BlockFunction):
        problem = block_hessian_problem(function, x)
    elif isinstance(function, CompiledFunction):
        problem = hessian_problem(function, x)
    else:
        raise TypeError(
            f"hesscheck checks a compiled function, fa.compile(fn); got {type(function).__name__}"
        )
    return run_check(
        problem, mode, eps, rtol, atol, richardson, n_directions, seed, raise_exception
    )


def hessian_problem(function: CompiledFunction, x: object) -> Problem:
    """The gradient as the function, the Hessian as its Jacobian, ``hvp`` both ways."""
    point = compiled_point(function, x).astype(np.float64)  # it computes in float64
    first = np.asarray(function(point), dtype=np.float64)
    if first.ndim != 0:
        raise ValueError(
            f"hesscheck needs a scalar output; this function returns shape {first.shape}"
        )
    require_finite(first, "f(x)", "output", "hesscheck")
    k = function.num_inputs
    require_finite(np.asarray(function.grad(point)), "the gradient", "element", "hesscheck")

    def products(z: FloatArray, v: FloatArray) -> FloatArray:
        return function.hvp(z, v)

    return Problem(
        point,
        np.dtype(np.float64),
        Layout([(k,)], (k,), arguments=False),
        value=lambda z: np.asarray(function.grad(z), dtype=np.float64).reshape(-1),
        jacobian=lambda z: np.asarray(function.hessian(z), dtype=np.float64).reshape(k, k),
        vjp=products,
        jvp=products,
        check="hesscheck",
        further_tests=hessian_tests,
    )


def block_hessian_problem(function: BlockFunction, x: object) -> Problem:
    """:func:`hessian_problem` for a function of arrays: its ``wrt`` arguments as one flat
    point, the gradients flattened beside each other, the Hessian's blocks assembled."""
    point, shapes, positions, call, _ = block_point(function, x)
    first = np.asarray(function(call(point)), dtype=np.float64)
    if first.ndim != 0:
        raise ValueError(
            f"hesscheck needs a scalar output; this function returns shape {first.shape}"
        )
    require_finite(first, "f(x)", "output", "hesscheck")
    sizes = [math.prod(shape) for shape in shapes]
    n = sum(sizes)

    def listed(results: Any) -> list[Any]:
        return [results] if function.single_wrt else list(results)

    def gradient(z: FloatArray) -> FloatArray:
        found = listed(function.grad(call(z)))
        return np.concatenate([np.reshape(np.asarray(g, dtype=np.float64), -1) for g in found])

    def hessian(z: FloatArray) -> FloatArray:
        rows = [[function.hessian(call(z))]] if function.single_wrt else function.hessian(call(z))
        return np.block(
            [
                [np.reshape(block, (sizes[i], sizes[j])) for j, block in enumerate(band)]
                for i, band in enumerate(rows)
            ]
        )

    layout = Layout(shapes, (n,), arguments=True, positions=positions)

    def products(z: FloatArray, v: FloatArray) -> FloatArray:
        parts = layout.split(v)
        along = parts[0] if function.single_wrt else parts
        return np.concatenate([np.reshape(p, -1) for p in listed(function.hvp(call(z), along))])

    require_finite(gradient(point), "the gradient", "element", "hesscheck")
    return Problem(
        point,
        np.dtype(np.float64),
        layout,
        value=gradient,
        jacobian=hessian,
        vjp=products,
        jvp=products,
        check="hesscheck",
        further_tests=hessian_tests,
    )


def hessian_tests(
    problem: Problem, result: GradcheckResult, rtol: float, atol: float, seed: int
) -> GradcheckResult:
    """The Hessian's symmetry, then ``f.hvp`` against ``f.hessian``, on one Hessian."""
    hessian = problem.jacobian(problem.point)  # once, for both tests
    result = symmetry_test(hessian, result, rtol, atol)
    return products_test(problem, hessian, result, seed, atol)


def symmetry_test(
    hessian: FloatArray, result: GradcheckResult, rtol: float, atol: float
) -> GradcheckResult:
    """Fail the result, naming the worst pair, where ``H[i, j]`` and ``H[j, i]`` differ."""
    gap = np.abs(hessian - hessian.T)
    tolerance = atol + rtol * np.maximum(np.abs(hessian), np.abs(hessian.T))
    bad = ~(gap <= tolerance)  # nan counts as bad
    if bad.any():
        i, j = np.unravel_index(int(np.argmax(np.where(bad, gap - tolerance, -np.inf))), bad.shape)
        note = (
            f"the Hessian is not symmetric: H[{i}, {j}] = {float(hessian[i, j])!r} but "
            f"H[{j}, {i}] = {float(hessian[j, i])!r} ({int(bad.sum()) // 2 or 1} pair(s) differ)"
        )
        fail(result, note)
    return result


def products_test(
    problem: Problem, hessian: FloatArray, result: GradcheckResult, seed: int, atol: float
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
        note = (
            f"f.hvp disagrees with f.hessian: along a random v, (H v)[{i}] = "
            f"{float(product[i])!r} but (f.hessian(x) @ v)[{i}] = {float(expected[i])!r}"
        )
        fail(result, note)
    return result
