"""The numeric reference: central differences, and the looks at elements that fail.

The step for input element ``j`` is ``h_j = cbrt(eps) * max(1, |z_j|)``
(``eps`` of the point's dtype), rounded so that ``z_j + h_j`` is exact; it
balances the truncation error ``O(h^2)`` of central differences against the
rounding error ``O(eps / h)``. ``richardson=True`` combines steps ``h`` and
``h/2`` into an ``O(h^4)`` estimate, with ``eps^(1/5)`` in place of
``cbrt(eps)``.

Kinks. Where an element fails, the two one-sided differences of its output
along its input are compared at ``h`` and ``h/4``: at a kink their gap stays
put as the step shrinks, for a smooth function it shrinks with the step. A
kink is reported as a non-differentiable point, not a mismatch, and passes
if the analytic value is a subgradient (lies between the one-sided
derivatives). Failing elements that are not kinks may be jumps (no
derivative exists) or points smooth to first order only
(:func:`rough_elements`).

A kink or a jump is confirmed at a step ``FINE`` times ``h`` (about 6e-12
relative in float64): at the point itself it keeps its gap at any step,
while one a little way off (within ``h`` but not at the point), or a steep
but smooth stretch, looks smooth once the step is below that distance.
Such an element is then checked against the central difference at the
finer step (:func:`finer_difference`), where its rounding allows.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fastad.derivative_checks.layout import Values
    from fastad.util.hints import BoolArray, FloatArray


FINE = 2.0**-20
"""The finer step's ratio to ``h`` (see the module's note)."""


def fine_step(z_j: float, h: float) -> float:
    """``h``, rounded so that ``z_j`` plus and minus it are exact."""
    return float((z_j + h) - z_j)


def step_sizes(z: FloatArray, relative_step: float) -> FloatArray:
    """Each element's step ``relative_step * max(1, |z_j|)``, rounded so ``z_j + h_j`` is exact."""
    h = relative_step * np.maximum(1.0, np.abs(z))
    return (z + h) - z  # exactly representable: z + h - h == z


def central_difference(value: Values, z: FloatArray, j: int, h: float) -> FloatArray:
    """``(f(z + h e_j) - f(z - h e_j)) / 2h`` for every output, shape (m,)."""
    hi, lo = z.copy(), z.copy()
    hi[j] += h
    lo[j] -= h
    return (value(hi) - value(lo)) / (2.0 * h)


def reference_difference(
    value: Values, z: FloatArray, j: int, h: float, richardson: bool
) -> FloatArray:
    """The reference derivative along input ``j``: the central difference at ``h``, or with
    ``richardson`` the ``O(h^4)`` combination of steps ``h`` and ``h/2``."""
    coarse = central_difference(value, z, j, h)
    if not richardson:
        return coarse
    fine = central_difference(value, z, j, h / 2.0)
    return (4.0 * fine - coarse) / 3.0


def one_sided_differences(
    value: Values, z: FloatArray, f0: FloatArray, j: int, h: float
) -> tuple[FloatArray, FloatArray]:
    """The forward and backward differences ``(f(z + h e_j) - f0) / h`` and
    ``(f0 - f(z - h e_j)) / h``, ``f0`` the outputs at ``z``."""
    hi, lo = z.copy(), z.copy()
    hi[j] += h
    lo[j] -= h
    return (value(hi) - f0) / h, (f0 - value(lo)) / h


def kinks_along(
    value: Values,
    z: FloatArray,
    f0: FloatArray,
    j: int,
    h: float,
    bad: BoolArray,
    tolerance: FloatArray,
    eps: float,
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
    forward, backward = one_sided_differences(value, z, f0, j, h)
    gap = np.abs(forward - backward)
    is_kink = bad & (gap > tolerance)
    if not is_kink.any():
        return is_kink, forward, backward
    small_forward, small_backward = one_sided_differences(value, z, f0, j, h / 4.0)
    keeps_gap = np.abs(small_forward - small_backward) > 0.5 * gap
    drift = np.maximum(np.abs(small_forward - forward), np.abs(small_backward - backward))
    is_kink &= keeps_gap & (drift < 0.1 * gap)
    if is_kink.any():
        # At the finer step a kink at the point keeps its gap; one a little way off
        # closes it. Where the finer step's rounding could hide the gap, the coarse
        # verdict stands.
        t = fine_step(float(z[j]), FINE * h)
        fine_forward, fine_backward = one_sided_differences(value, z, f0, j, t)
        rounding = 4.0 * eps * np.maximum(1.0, np.abs(f0)) / t
        resolved = rounding < 0.25 * gap
        is_kink &= ~resolved | (np.abs(fine_forward - fine_backward) > 0.5 * gap)
    return is_kink, small_forward, small_backward


def rough_elements(
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
    ``h/4``, ``h/16`` and the finer step, far above rounding; a derivative's difference
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

    sizes = [difference(step) for step in (h, h / 4.0, h / 16.0, fine_step(float(z[j]), FINE * h))]
    scale = 1e6 * np.finfo(float).eps * np.maximum(1.0, np.abs(f0))
    jumping = candidates & (np.abs(sizes[0]) > scale)
    for size in sizes[1:]:
        jumping &= np.abs(size - sizes[0]) <= 0.1 * np.abs(sizes[0])
    coarse, fine = sizes[0] / (2.0 * h), sizes[1] / (h / 2.0)
    extrapolated = (4.0 * fine - coarse) / 3.0
    converging = np.abs(fine - analytic) <= 0.5 * np.abs(coarse - analytic)
    rough = candidates & ~jumping & converging & (np.abs(extrapolated - analytic) <= tolerance)
    return jumping, rough


def finer_difference(
    value: Values,
    z: FloatArray,
    f0: FloatArray,
    j: int,
    h: float,
    guess: FloatArray,
    rtol: float,
    atol: float,
    eps: float,
) -> tuple[FloatArray, FloatArray, float]:
    """The central difference along input ``j`` at a finer step, for outputs whose
    difference at ``h`` failed although they neither kink nor jump at the point: where
    the function changes faster than ``h`` resolves (a steep stretch, a kink or a jump
    within ``h`` of the point) it is the better reference.

    The step is the finest of ``h / 16``, ``h / 64``, ... ``FINE * h`` whose rounding
    (``2 eps |f| / t``, ``f`` the outputs at the point) stays within half the tolerance
    the outputs' ``guess`` (their analytic values) would get. Returns ``(numeric, tolerance,
    step)``; ``tolerance`` adds that rounding to ``atol + rtol * |numeric|``, and is nan
    (no verdict) where no step below ``h / 8`` keeps it small enough.
    """
    size = np.maximum(1.0, np.abs(f0))
    # Rounding at most half that tolerance, 2 eps |f| / t <= tolerance / 2, at the
    # finest step h / 4^k (k from 2 to 10) that allows it.
    with np.errstate(divide="ignore", invalid="ignore"):  # an infinite or nan guess
        needed = float(np.max(4.0 * eps * size / (atol + rtol * np.abs(guess))))
    if not needed < h:  # nan included: no verdict
        k = 0
    else:
        k = 10 if needed <= FINE * h else min(10, math.floor(math.log(h / needed, 4)))
    t = fine_step(float(z[j]), h * FINE ** (k / 10))
    if k < 2 or not 0.0 < t < h / 8.0:
        return np.full_like(f0, np.nan), np.full_like(f0, np.nan), t
    numeric = central_difference(value, z, j, t)
    return numeric, atol + rtol * np.abs(numeric) + 2.0 * eps * size / t, t
