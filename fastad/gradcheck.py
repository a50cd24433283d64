"""Gradient checking: compare analytic derivatives with finite differences.

"Gradient checking is the only thing you can trust when writing autodiff:
don't trust your own formulas" (the source articles). ``fa.gradcheck``
checks a compiled fastad function, or any Python callable together with a
hand-written gradient, against central differences.

Numeric reference. The step for input ``i`` is ``h_i = cbrt(eps) *
max(1, |x_i|)`` (``eps`` of the input's dtype), rounded so that ``x_i + h_i``
is exact; it balances the truncation error ``O(h^2)`` of central
differences against the rounding error ``O(eps / h)``. ``richardson=True``
combines steps ``h`` and ``h/2`` into an ``O(h^4)`` estimate, with
``eps^(1/5)`` in place of ``cbrt(eps)``.

Pass criterion, per element: ``|analytic - numeric| <= atol + rtol *
|numeric|`` with per-dtype defaults (``DEFAULT_TOLERANCES``).

Kinks. Where an element fails, the two one-sided differences are compared
at ``h`` and ``h/4``: at a kink their gap stays put as the step shrinks,
for a smooth function it shrinks with the step. A kink is reported as a
non-differentiable point, not a mismatch, and passes if the analytic value
is a subgradient (lies between the one-sided derivatives).
"""

from dataclasses import dataclass, field

import numpy as np

from fastad.compiled import CompiledFunction

DEFAULT_TOLERANCES = {
    # dtype: (rtol, atol). float64 central differences are good to ~1e-9
    # relative on smooth functions; 1e-6 leaves room for curvature, not bugs.
    np.dtype(np.float64): (1e-6, 1e-8),
    np.dtype(np.float32): (1e-2, 1e-3),
}


class GradcheckError(AssertionError):
    """The analytic gradient disagrees with finite differences; ``.result`` has details."""

    def __init__(self, result):
        self.result = result
        super().__init__(result.message)


@dataclass
class GradcheckResult:
    """What ``fa.gradcheck`` found. True in a boolean context when it passed.

    ``analytic``, ``numeric``, ``tolerance`` are per input element (full
    mode) or per direction (fast mode, where ``failures`` then names the
    elements located by a full check of the failing function).
    """

    passed: bool
    mode: str
    analytic: np.ndarray
    numeric: np.ndarray
    tolerance: np.ndarray
    failures: list = field(default_factory=list)
    kinks: list = field(default_factory=list)
    dot_product: tuple | None = None
    message: str = ""

    def __bool__(self):
        return self.passed


@dataclass
class _Problem:
    """A scalar function of a 1-D array, its analytic derivatives and its dtype."""

    value: object  # x -> float, or (m,) array for vector outputs
    gradient: object  # x -> analytic (k,) or (m, k) Jacobian
    vjp: object = None  # (x, u) -> u^T J, if available
    jvp: object = None  # (x, v) -> J v, if available


def gradcheck(
    function,
    x,
    grad=None,
    *,
    mode="full",
    eps=None,
    rtol=None,
    atol=None,
    richardson=False,
    n_directions=4,
    seed=0,
    raise_exception=True,
):
    """Check a gradient against central differences.

    Parameters
    ----------
    function : fastad.CompiledFunction or callable
        A compiled function (its ``grad``/``jacobian``, ``jvp`` and ``vjp``
        are checked), or any callable ``f(x) -> float`` given with ``grad``.
    x : array_like, shape (k,)
        The point.
    grad : callable, optional
        ``grad(x)`` returning the analytic gradient shaped like ``x``; needed
        for a plain callable.
    mode : {"full", "fast"}
        "full" checks every element (2k function values). "fast" compares
        ``u^T J v`` with a central difference along random directions ``v``
        (two function values and one gradient each); on failure a full check
        locates the wrong elements. One number per direction: an error far
        below ``rtol * |u^T J v|`` (a wrong small entry beside a large one)
        can pass, so "full" is the complete check.
    eps : float, optional
        Override the relative step (the step is ``eps * max(1, |x_i|)``).
    rtol, atol : float, optional
        Tolerances; per-dtype defaults in ``DEFAULT_TOLERANCES``.
    richardson : bool
        Use Richardson extrapolation of steps h and h/2 for the reference.
    n_directions : int
        Random directions in fast mode.
    seed : int
        Seed of the random directions (checks are reproducible).
    raise_exception : bool
        True: return True or raise :class:`GradcheckError`. False: return a
        :class:`GradcheckResult`.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> f = fa.compile(lambda x, y: fa.sin(x) * y)
    >>> fa.gradcheck(f, np.array([0.3, 2.0]))
    True
    """
    x = _as_point(x)
    problem = _problem(function, grad, x)
    dtype_rtol, dtype_atol = DEFAULT_TOLERANCES.get(
        x.dtype, DEFAULT_TOLERANCES[np.dtype(np.float64)]
    )
    rtol = dtype_rtol if rtol is None else rtol
    atol = dtype_atol if atol is None else atol
    if eps is None:
        # Central differences balance O(h^2) truncation against O(eps/h)
        # rounding at h ~ eps^(1/3); Richardson's O(h^4) at h ~ eps^(1/5).
        eps = np.finfo(x.dtype).eps ** (0.2 if richardson else 1.0 / 3.0)
    relative_step = eps
    x = x.astype(np.float64)
    if mode == "full":
        result = _full(problem, x, relative_step, rtol, atol, richardson)
    elif mode == "fast":
        result = _fast(problem, x, relative_step, rtol, atol, richardson, n_directions, seed)
    else:
        raise ValueError(f"mode must be 'full' or 'fast', got {mode!r}")
    if problem.jvp is not None and problem.vjp is not None:
        result = _dot_product(problem, x, result, seed, atol)
    if raise_exception:
        if not result.passed:
            raise GradcheckError(result)
        return True
    return result


# -- the pieces ----------------------------------------------------------------------------
def _as_point(x):
    array = np.asarray(x)
    if array.dtype.kind in "biu":
        array = array.astype(np.float64)
    if array.dtype.kind != "f":
        raise TypeError(f"gradcheck needs a real point, got dtype {array.dtype}")
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"gradcheck needs a point of shape (k,), got shape {array.shape}")
    return array


def _problem(function, grad, x):
    if isinstance(function, CompiledFunction):
        if grad is not None:
            raise TypeError("a compiled function brings its own gradient: drop grad=")
        return _Problem(
            value=lambda p: function(p),
            gradient=function.jacobian,
            vjp=lambda p, u: function.vjp(p, u)[1],
            jvp=lambda p, v: function.jvp(p, v)[1],
        )
    if not callable(function):
        raise TypeError(f"gradcheck needs a callable, got {type(function).__name__}")
    if grad is None:
        raise TypeError(
            "a plain callable needs its analytic gradient: gradcheck(f, x, grad=g); "
            "or check fa.compile(f)"
        )

    def gradient(p):
        g = np.asarray(grad(p), dtype=np.float64)
        if g.shape != x.shape:
            raise ValueError(f"grad(x) has shape {g.shape}, expected {x.shape} like x")
        return g

    def value(p):
        v = function(p)
        if np.ndim(v) != 0:
            raise ValueError(f"f(x) must return a scalar, got shape {np.shape(v)}")
        return float(v)

    return _Problem(value=value, gradient=gradient)


def _steps(x, relative_step):
    h = relative_step * np.maximum(1.0, np.abs(x))
    return (x + h) - x  # exactly representable: x + h - h == x


def _central(value, x, i, h):
    hi, lo = x.copy(), x.copy()
    hi[i] += h
    lo[i] -= h
    return (np.asarray(value(hi)) - np.asarray(value(lo))) / (2.0 * h)


def _reference(value, x, i, h, richardson):
    coarse = _central(value, x, i, h)
    if not richardson:
        return coarse
    fine = _central(value, x, i, h / 2.0)
    return (4.0 * fine - coarse) / 3.0


def _one_sided_gap(value, x, i, h):
    hi, lo = x.copy(), x.copy()
    hi[i] += h
    lo[i] -= h
    f0 = np.asarray(value(x))
    forward = (np.asarray(value(hi)) - f0) / h
    backward = (f0 - np.asarray(value(lo))) / h
    return forward, backward


def _kink(value, x, i, h, tolerance):
    """One-sided derivatives if element ``i`` sits on a kink, else None.

    At a kink the two one-sided derivatives differ, and each stays put as the
    step shrinks (h to h/4). For a smooth function their gap is ~h f'' and
    shrinks 4x; for a noisy one (rounding, a float32 computation) they jump
    about. Only the first case is a kink: the others stay mismatches.
    """
    forward, backward = _one_sided_gap(value, x, i, h)
    gap = np.max(np.abs(forward - backward))
    if gap <= tolerance:
        return None
    small_forward, small_backward = _one_sided_gap(value, x, i, h / 4.0)
    keeps_gap = np.max(np.abs(small_forward - small_backward)) > 0.5 * gap
    stable = (
        max(np.max(np.abs(small_forward - forward)), np.max(np.abs(small_backward - backward)))
        < 0.1 * gap
    )
    return (small_forward, small_backward) if keeps_gap and stable else None


def _full(problem, x, relative_step, rtol, atol, richardson):
    analytic = np.asarray(problem.gradient(x), dtype=np.float64)
    steps = _steps(x, relative_step)
    numeric = np.empty_like(analytic)
    for i in range(x.size):
        numeric[..., i] = _reference(problem.value, x, i, steps[i], richardson)
    tolerance = atol + rtol * np.abs(numeric)
    error = np.abs(analytic - numeric)
    bad = ~(error <= tolerance)  # nan counts as bad
    failures, kinks = [], []
    for flat in np.flatnonzero(bad):
        index = tuple(int(i) for i in np.unravel_index(flat, analytic.shape))
        i = index[-1]
        kink = _kink(problem.value, x, i, steps[i], tolerance[index])
        if kink is None:
            failures.append(index)
            continue
        forward, backward = (np.asarray(side)[index[:-1]] for side in kink)
        low, high = min(forward, backward), max(forward, backward)
        is_subgradient = low - tolerance[index] <= analytic[index] <= high + tolerance[index]
        kinks.append((index, float(forward), float(backward), bool(is_subgradient)))
        if not is_subgradient:
            failures.append(index)
    result = GradcheckResult(
        passed=not failures,
        mode="full",
        analytic=analytic,
        numeric=numeric,
        tolerance=tolerance,
        failures=failures,
        kinks=kinks,
    )
    result.message = _full_message(result, x, steps)
    return result


def _fast(problem, x, relative_step, rtol, atol, richardson, n_directions, seed):
    rng = np.random.default_rng(seed)
    gradient = np.asarray(problem.gradient(x), dtype=np.float64)
    step = relative_step * max(1.0, float(np.max(np.abs(x))))
    analytic, numeric = [], []
    for _ in range(n_directions):
        v = rng.standard_normal(x.size)
        v /= np.linalg.norm(v)
        u = rng.standard_normal(gradient.shape[:-1]) if gradient.ndim == 2 else 1.0
        analytic.append(float(np.dot(np.atleast_1d(u), np.atleast_2d(gradient) @ v)))

        def along(t, v=v):
            return problem.value(x + t * v)

        coarse = (np.asarray(along(step)) - np.asarray(along(-step))) / (2 * step)
        if richardson:
            fine = (np.asarray(along(step / 2)) - np.asarray(along(-step / 2))) / step
            coarse = (4 * fine - coarse) / 3
        numeric.append(float(np.dot(np.atleast_1d(u), np.atleast_1d(coarse))))
    analytic, numeric = np.array(analytic), np.array(numeric)
    tolerance = atol + rtol * np.abs(numeric)
    passed = bool(np.all(np.abs(analytic - numeric) <= tolerance))
    if passed:
        return GradcheckResult(
            True, "fast", analytic, numeric, tolerance, message="fast gradcheck passed"
        )
    # Locate the wrong elements with a full check (costs 2k evaluations, only on failure).
    located = _full(problem, x, relative_step, rtol, atol, richardson)
    worst = int(np.argmax(np.abs(analytic - numeric) - tolerance))
    located.mode = "fast"
    located.passed = False
    located.message = (
        f"fast gradcheck failed: along random direction {worst}, u^T J v = "
        f"{float(analytic[worst])!r} but the central difference gives {float(numeric[worst])!r} "
        f"(tolerance {tolerance[worst]:.3g}). " + located.message
    )
    return located


def _dot_product(problem, x, result, seed, atol):
    """Check <u, J v> == <J^T u, v>: forward and reverse mode must agree."""
    rng = np.random.default_rng(seed + 1)
    v = rng.standard_normal(x.size)
    jv = np.atleast_1d(np.asarray(problem.jvp(x, v), dtype=np.float64))
    u = rng.standard_normal(jv.shape)
    jtu = np.asarray(problem.vjp(x, u if u.size > 1 else float(u[0])), dtype=np.float64)
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
        note = (
            f"forward and reverse mode disagree: <u, J v> = {forward!r} but "
            f"<J^T u, v> = {reverse!r}"
        )
        result.message = note if "passed" in result.message else result.message + "; " + note
    return result


def _full_message(result, x, steps):
    if result.passed:
        kinks = f" ({len(result.kinks)} kink(s) with valid subgradients)" if result.kinks else ""
        return f"gradcheck passed{kinks}"
    error = np.abs(result.analytic - result.numeric)
    excess = np.where(np.isnan(error), np.inf, error - result.tolerance)
    worst = max(result.failures, key=lambda index: excess[index])
    name = f"input {worst[-1]}" + (f" of output {worst[0]}" if len(worst) > 1 else "")
    kink = next((k for k in result.kinks if k[0] == worst), None)
    if kink is not None:
        return (
            f"gradcheck failed for {len(result.failures)} of {result.analytic.size} elements; "
            f"worst is {name} at a non-differentiable point (x = {float(x[worst[-1]])!r}): "
            f"one-sided derivatives {kink[1]!r} and {kink[2]!r}, and the analytic "
            f"{float(result.analytic[worst])!r} is not between them"
        )
    return (
        f"gradcheck failed for {len(result.failures)} of {result.analytic.size} elements; "
        f"worst is {name}: analytic {float(result.analytic[worst])!r}, numeric "
        f"{float(result.numeric[worst])!r} (|difference| {error[worst]:.3g} > tolerance "
        f"{result.tolerance[worst]:.3g} = atol + rtol * |numeric|; step {steps[worst[-1]]:.3g})"
    )
