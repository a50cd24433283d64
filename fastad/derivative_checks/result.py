"""What a gradient check returns or raises, and the tolerances it passes with.

Pass criterion, per Jacobian element: ``|analytic - numeric| <= atol + rtol
* |numeric|`` with per-dtype defaults (``DEFAULT_TOLERANCES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray

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
        Elements checked against a better difference than the central one
        at ``h``, listed here: where the function is smooth to first order
        only (its derivative has a kink there, as ``relu(x)**2`` at 0), so
        the central difference errs by ``O(h)``, differences at ``h`` and
        ``h/4`` extrapolated to ``h = 0``; where it changes faster than
        ``h`` resolves (a steep stretch, a kink or a jump within ``h`` of the
        point), the central difference at a finer step.
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


def fail(result: GradcheckResult, note: str) -> None:
    """Mark ``result`` failed by a further test, ``note`` saying why: the note replaces a
    message that said the check passed, and follows one that already names a failure."""
    result.passed = False
    result.message = note if "passed" in result.message else result.message + "; " + note
