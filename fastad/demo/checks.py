"""The demo's check machinery and printing: tolerances, ``Check``, comparisons, the verdict.

Each comparison prints its line (``ok`` or ``FAILED``, what was compared, and
how well) and returns a :class:`Check`; :func:`verdict` turns a list of them
into the final line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray

    Output = Callable[[str], object]
    """Where the demo prints its lines (``print``, or a list's ``append`` in tests)."""

# -- tolerances, and why ----------------------------------------------------------------
# Central differences with step h = 1e-6 (scaled by max(1, |x|)) are off by the
# truncation error h^2 |f'''| / 6 (~1e-12 here) plus rounding eps |f| / h (~1e-10
# for |f| <= 100): measured 1e-11 to 1e-9. 1e-6 leaves three orders of margin,
# while the bugs the articles warn about (`=` instead of `+=` gives 48 for 64)
# are errors of 10% and more.
CENTRAL_DIFFERENCE_TOLERANCE = 1e-6
# The same formula evaluated by different code (BLAS vs a kernel, NumPy vs the
# sweep, another summation order) differs by rounding only: ~1e-16 relative per
# operation, ~1e-14 after sums of 10^3 terms. 1e-10 is far above that and far
# below any wrong rule.
ROUNDING_TOLERANCE = 1e-10
# Replay of a compiled function equals eager recording bit for bit (documented in
# the README and pinned by tests/test_compiled.py). The demo asks only for agreement
# to rounding, so a difference in the last bit on some platform's libm does not read
# as a wrong gradient.
REPLAY_TOLERANCE = 1e-12
# Numbers the articles give exactly (small integers and halves): rounding only.
EXACT_TOLERANCE = 1e-12
# Example 6 must not build a Jacobian: the whole step may use at most 1% of the
# memory that Jacobian would need (it uses a fraction of a percent).
MEMORY_FRACTION = 0.01


# -- checks ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Check:
    """One comparison of a result with an independent reference."""

    what: str
    passed: bool
    detail: str
    section: str = ""  # set by ``main``: which example the check belongs to

    def line(self) -> str:
        """The printed line: ``ok`` or ``FAILED``, what was compared, and how well."""
        return f"  {'ok' if self.passed else 'FAILED':<6} {self.what}: {self.detail}"


def relative_error(got: ArrayLike, want: ArrayLike) -> float:
    """``max |got - want|`` over all elements, relative to the larger of ``max |got|, max |want|``.

    0 when they are equal. For one number this is the articles' relative error
    (to within its own size). Relative to the larger side, a result that is 0
    where it should not be (or the reverse) gives 1, not a division by zero.
    ``nan`` anywhere gives ``nan``, which fails every check.
    """
    a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if np.array_equal(a, b):
        return 0.0
    scale = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    return float(np.max(np.abs(a - b)) / scale)


def check_that(out: Output, what: str, passed: object, detail: str) -> Check:
    """Print and return a check decided by ``passed``."""
    result = Check(what, bool(passed), detail)
    out(result.line())
    return result


def check_error(out: Output, what: str, error: float, tolerance: float) -> Check:
    """Print and return a check that passes when ``error <= tolerance`` (``nan`` fails)."""
    passed = error <= tolerance
    return check_that(
        out, what, passed, f"relative error {error:.1e} {'<=' if passed else '>'} {tolerance:.0e}"
    )


def check_close(out: Output, what: str, got: ArrayLike, want: ArrayLike, tolerance: float) -> Check:
    """Print and return a check that ``got`` equals ``want`` to ``tolerance`` (relative)."""
    if np.shape(got) != np.shape(want):
        return check_that(out, what, False, f"shape {np.shape(got)}, expected {np.shape(want)}")
    return check_error(out, what, relative_error(got, want), tolerance)


def check_digits(out: Output, what: str, got: ArrayLike, want: ArrayLike, decimals: int) -> Check:
    """Print and return a check that ``got`` rounds to the article's ``decimals`` digits."""
    if np.shape(got) != np.shape(want):
        return check_that(out, what, False, f"shape {np.shape(got)}, expected {np.shape(want)}")
    error = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
    half_unit = 0.5 * 10.0**-decimals  # what rounding to the printed digits may hide
    passed = error <= half_unit * (1 + 1e-9)
    return check_that(
        out, what, passed, f"max |difference| {error:.1e} {'<=' if passed else '>'} {half_unit:.0e}"
    )


def verdict(checks: Sequence[Check]) -> tuple[bool, str]:
    """``(passed, final line)`` for a list of checks."""
    failed = [check for check in checks if not check.passed]
    if failed:
        names = "; ".join(f"{check.section}: {check.what}" for check in failed)
        return False, f"FAILED: {len(failed)} of {len(checks)} checks disagree: {names}"
    return True, f"all {len(checks)} checks agree with their independent references"


def flatten(arrays: Iterable[ArrayLike]) -> FloatArray:
    """Several arrays as one flat vector, for one check over all of them."""
    return np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in arrays])


def describe_ops(ops: Sequence[str]) -> str:
    """The nodes a computation recorded: their ops if few, else how many."""
    return ", ".join(ops) if len(ops) <= 4 else f"{len(ops):,} nodes"


def header(out: Output, title: str) -> None:
    """A section title and its underline."""
    out(title)
    out("-" * len(title))


def as_list(array: ArrayLike) -> object:
    """An array as nested Python lists: ``[4.0, 1.0, 2.0]``, the way the articles write it."""
    return np.asarray(array).tolist()
