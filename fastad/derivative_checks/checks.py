"""The checks on the flat view: every element (full), random directions (fast), and the
dot-product test between forward and reverse mode; ``run_check`` runs them in order.

Kinks are only examined for failing elements, per output element. Fast mode
falls back to a full check only on failure, to name elements; if the full
check then passes (a direction across a kink with a valid subgradient), the
result passes. ``nan`` counts as a failure; floating-point warnings are
silenced inside the check, which reports ``nan`` and ``inf`` itself.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Literal

import numpy as np

from fastad.derivative_checks.differences import (
    finer_difference,
    kinks_along,
    reference_difference,
    rough_elements,
    step_sizes,
)
from fastad.derivative_checks.result import (
    DEFAULT_TOLERANCES,
    GradcheckError,
    GradcheckResult,
    fail,
)

if TYPE_CHECKING:
    from fastad.derivative_checks.problems import Problem
    from fastad.util.hints import FloatArray


def run_check(
    problem: Problem,
    mode: str,
    eps: float | None,
    rtol: float | None,
    atol: float | None,
    richardson: bool,
    n_directions: int,
    seed: int,
    raise_exception: bool,
) -> Literal[True] | GradcheckResult:
    """Run a check on the flat view: elements (full or fast), then the dot-product test
    and the problem's further tests where it has them.

    Parameters
    ----------
    problem : Problem
        What is checked, at which point.
    mode, eps, rtol, atol, richardson, n_directions, seed, raise_exception
        :func:`fastad.gradcheck`'s options, validated by :func:`check_options`; ``None``
        takes the per-dtype default (``eps``: ``cbrt`` of the dtype's machine epsilon, its
        fifth root with ``richardson``).

    Returns
    -------
    True or GradcheckResult
        True, or the result, as ``raise_exception`` asks.

    Raises
    ------
    GradcheckError
        The check failed and ``raise_exception`` is True.
    """
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
            result = full_check(problem, relative_step, rtol, atol, richardson)
        else:
            result = fast_check(problem, relative_step, rtol, atol, richardson, n_directions, seed)
        if problem.jvp is not None and problem.vjp is not None:
            result = dot_product_test(problem, result, seed, atol)
        if problem.further_tests is not None:
            result = problem.further_tests(problem, result, rtol, atol, seed)
    if raise_exception:
        if not result.passed:
            raise GradcheckError(result)
        return True
    return result


def check_options(
    mode: str,
    eps: float | None,
    rtol: float | None,
    atol: float | None,
    n_directions: int,
    seed: int,
) -> None:
    """Raise ``ValueError`` (``TypeError`` for a seed that is not an int) naming a malformed
    option of :func:`fastad.gradcheck` or :func:`fastad.hesscheck`."""
    if mode not in ("full", "fast"):
        raise ValueError(f"mode must be 'full' or 'fast', got {mode!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (is_real(value) and 0.0 <= value < math.inf):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if eps is not None and not (is_real(eps) and 0.0 < eps < 1.0):
        raise ValueError(f"eps must be a relative step in (0, 1), got {eps!r}")
    if not isinstance(n_directions, numbers.Integral) or n_directions < 1:
        raise ValueError(f"n_directions must be a positive int, got {n_directions!r}")
    if not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int (checks are reproducible), got {seed!r}")


def is_real(value: object) -> bool:
    """A real number, booleans excluded."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def full_check(
    problem: Problem, relative_step: float, rtol: float, atol: float, richardson: bool
) -> GradcheckResult:
    """Every Jacobian element against its reference difference (``2 n`` function values);
    failing elements are then looked at for kinks, jumps and first-order smoothness."""
    z, layout = problem.point, problem.layout
    analytic = problem.jacobian(z)
    steps = step_sizes(z, relative_step)
    numeric = np.empty_like(analytic)
    for j in range(z.size):
        numeric[:, j] = reference_difference(problem.value, z, j, steps[j], richardson)
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
    eps = float(np.finfo(problem.dtype).eps)
    fine_steps: dict[tuple[int, int], float] = {}  # elements judged at a finer step
    for j in failing_inputs.tolist():
        assert f0 is not None  # computed above, as an input fails
        is_kink, forward, backward = kinks_along(
            problem.value, z, f0, j, steps[j], bad[:, j], tolerance[:, j], eps
        )
        others = bad[:, j] & ~is_kink
        jumping, rough = rough_elements(
            problem.value, z, f0, j, steps[j], others, analytic[:, j], tolerance[:, j]
        )
        plain = others & ~jumping & ~rough
        if plain.any():
            fine, fine_tolerance, fine_step = finer_difference(
                problem.value,
                z,
                f0,
                j,
                steps[j],
                np.where(plain, analytic[:, j], np.inf),
                rtol,
                atol,
                eps,
            )
            # Judged at the finer step only where it tells another story: the function
            # changes faster than the step resolves (a smooth mismatch keeps its report).
            judged = plain & (np.abs(fine - numeric[:, j]) > fine_tolerance + tolerance[:, j])
            numeric[judged, j], tolerance[judged, j] = fine[judged], fine_tolerance[judged]
            error[judged, j] = np.abs(analytic[judged, j] - fine[judged])
            rough |= judged & (error[:, j] <= tolerance[:, j])
            fine_steps.update({(o, j): fine_step for o in np.flatnonzero(judged).tolist()})
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
    finer = sum(1 for at in refined if at in fine_steps)
    if len(refined) > finer:
        notes.append(
            f"{len(refined) - finer} element(s) smooth to first order only: checked with an "
            "extrapolated difference"
        )
    if finer:
        notes.append(
            f"{finer} element(s) where the function changes faster than the step resolves "
            "(a steep stretch, or a kink or jump near the point): checked at a finer step"
        )
    result.message = full_message(
        problem,
        failures,
        kinks,
        analytic,
        error,
        tolerance,
        numeric,
        steps,
        notes,
        fine_steps,
        f0,
        eps,
    )
    return result


def _hint(
    o: int, j: int, numeric: FloatArray, error: float, step: float, f0: FloatArray, eps: float
) -> str:
    """What to try where a failure may be the difference's, not the derivative's: a nan
    difference beside a finite value (the step leaves the function's domain), or an error
    within the difference's rounding (large values, a small derivative)."""
    if np.isnan(numeric[o, j]) and np.isfinite(f0[o]):
        return (
            f"; the difference is nan where f is {float(f0[o])!r}: a step of {step:.3g} leaves "
            "the function's domain (a point near its edge), so give a smaller eps= or "
            "check at a point further inside"
        )
    rounding = eps * max(1.0, abs(float(f0[o]))) / step
    if error <= 4.0 * rounding:
        return (
            f"; the difference is within its own rounding (about {rounding:.2g} at this "
            f"step, for values of size {abs(float(f0[o])):.3g}): a larger eps= or atol= "
            "would tell"
        )
    return ""


def fast_check(
    problem: Problem,
    relative_step: float,
    rtol: float,
    atol: float,
    richardson: bool,
    n_directions: int,
    seed: int,
) -> GradcheckResult:
    """``u^T J v`` against a central difference along ``n_directions`` random unit ``v``
    (output weights ``u``); on failure a full check names the wrong elements."""
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
    located = full_check(problem, relative_step, rtol, atol, richardson)
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


def dot_product_test(
    problem: Problem, result: GradcheckResult, seed: int, atol: float
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
    # Equal infinities agree (their difference is nan); nan against anything does not.
    agrees = forward == reverse or abs(forward - reverse) <= tolerance
    result.dot_product = (forward, reverse)
    if not agrees:
        if problem.check == "hesscheck":
            note = f"f.hvp is not symmetric: <u, H v> = {forward!r} but <H u, v> = {reverse!r}"
        else:
            note = (
                f"forward and reverse mode disagree: <u, J v> = {forward!r} but "
                f"<J^T u, v> = {reverse!r}"
            )
        fail(result, note)
    return result


def full_message(
    problem: Problem,
    failures: list[tuple[int, int]],
    kinks: list[tuple[tuple[int, int], float, float, bool]],
    analytic: FloatArray,
    error: FloatArray,
    tolerance: FloatArray,
    numeric: FloatArray,
    steps: FloatArray,
    notes: list[str],
    fine_steps: dict[tuple[int, int], float],
    f0: FloatArray | None,
    eps: float,
) -> str:
    """The full check's verdict; on failure it names the worst element (flat ``(o, j)``
    pairs in ``failures`` and ``kinks``, the matrices of shape ``(m, n)``), the finer
    step it was judged at (``fine_steps``), and what to try where the difference may be
    at fault (``f0``: the outputs at the point, computed where an element failed)."""
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
    step = f"step {steps[j]:.3g}"
    if worst in fine_steps:
        step = (
            f"plus rounding; step {fine_steps[worst]:.3g}, as the function changes faster "
            f"than the step {steps[j]:.3g} resolves"
        )
    hint = "" if f0 is None else _hint(o, j, numeric, error[worst], steps[j], f0, eps)
    return (
        f"{counted}: analytic {float(analytic[worst])!r}, numeric "
        f"{float(numeric[worst])!r} (|difference| {error[worst]:.3g} > tolerance "
        f"{tolerance[worst]:.3g} = atol + rtol * |numeric|; {step}){hint}"
    )
