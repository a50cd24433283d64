"""Reach of block products: the exact zeros of BLAS products of adjoints with values.

``fastad/core/reach.py`` multiplies adjoints (or tangents) by values with
BLAS and then settles what BLAS cannot tell: which zeros were reached and
which lines hold a term the scalar rule never sends. These kernels are its
passes over the product and its factors.
"""

from __future__ import annotations

from math import fabs, isfinite

import numpy as np

from .arrays import BoolArray, FloatArray, IdArray
from .jit import kernel
from .strong_zeros import UNREACHED, contribution, reached

FLOAT_MAX = np.finfo(np.float64).max


@kernel
def zeros_and_nonfinite(out: FloatArray) -> tuple[int, int]:
    """How many elements of the 2-D ``out`` are zero and how many non-finite.

    ``nonfinite_lines``'s count alone, with nothing to mark: the one read a
    product of finite data without zeros needs (``fastad/core/reach.py``).
    """
    zeros = nonfinite = 0
    for i in range(out.shape[0]):
        for k in range(out.shape[1]):
            value = out[i, k]
            zeros += value == 0.0
            nonfinite += not (fabs(value) <= FLOAT_MAX)  # inf, -inf and nan
    return zeros, nonfinite


@kernel
def nonfinite_lines(
    out: FloatArray, rows: BoolArray, columns: BoolArray, zero_rows: IdArray
) -> tuple[int, int]:
    """Mark in ``rows`` and ``columns`` each row and column of ``out`` holding a non-finite value.

    The first read of a BLAS product of adjoints (or tangents) with values
    (``fastad/core/reach.py``). A term the scalar rule never sends (an unreached
    ``-0.0`` adjoint times an ``inf`` value, an ``inf`` or ``nan`` adjoint
    times a zero value) is a ``nan`` in BLAS's sum (BLAS multiplies every
    term, zero factors included), so every element such a term touches is
    non-finite: the marked rows, or the marked columns, are all that may
    need the term-by-term product (``exact_lines``). Counts each row's
    exact zeros into ``zero_rows`` (their value is right, but whether any
    term reached them is still to be settled: ``settle_zeros``). Returns how
    many elements are zero and how many non-finite.

    One branch-free read counts both (integer sums, which LLVM vectorises);
    only a product holding a non-finite element is read again to mark it.
    """
    zeros = nonfinite = 0
    for i in range(out.shape[0]):
        row_zeros = 0
        for k in range(out.shape[1]):
            value = out[i, k]
            row_zeros += value == 0.0
            nonfinite += not (fabs(value) <= FLOAT_MAX)  # inf, -inf and nan
        zero_rows[i] = row_zeros
        zeros += row_zeros
    if nonfinite:
        for i in range(out.shape[0]):
            for k in range(out.shape[1]):
                if not isfinite(out[i, k]):
                    rows[i] = True
                    columns[k] = True
    return zeros, nonfinite


# What a line (a row of a product's left factor, a column of its right one)
# lets through, read at most once per product by ``settle_zeros``.
UNREAD, SENDS, SENDS_NOTHING = np.int8(0), np.int8(1), np.int8(2)


@kernel
def _sends(x: float, adjoint: bool) -> bool:
    """Whether a product's factor lets its term through: a reached adjoint, a non-zero value."""
    return reached(x) if adjoint else x != 0.0


@kernel
def _line_state(x: FloatArray, adjoint: bool) -> np.int8:
    """``SENDS`` if some element of the 1-D ``x`` lets a term through, else ``SENDS_NOTHING``."""
    for t in range(x.size):
        if _sends(x[t], adjoint):
            return SENDS
    return SENDS_NOTHING


@kernel
def settle_zeros(
    out: FloatArray,
    left: FloatArray,
    right: FloatArray,
    left_is_adjoint: bool,
    exact: BoolArray,
    by_row: bool,
    zero_rows: IdArray,
) -> int:
    """Give each zero of the BLAS product ``out = left @ right`` its reach, in place.

    One factor holds adjoints (or tangents), the other values; ``zero_rows``
    counts each row's zeros (``nonfinite_lines``). Outside the rows (if
    ``by_row``) or columns that ``exact`` marks, which were recomputed term
    by term, ``out`` is finite, so every term BLAS summed is finite and a
    zero element has the right value; it is +0.0 if some term reached it (a
    reached adjoint times a non-zero value) and ``UNREACHED`` if none did.

    A row of ``left`` that lets no term through (a zero input feature, a
    sample whose units are all dead) makes its whole row of ``out``
    ``UNREACHED``, exact lines included (no term reaches them either), at
    the cost of one read; a column of ``right`` likewise its column's zeros.
    The remaining zeros of a row scan only the terms its ``left`` row lets
    through (gathered once per row), stopping at the first one sent. Each
    row's zeros are gathered without a branch, so their scattered positions
    cost no mispredicted jumps. Returns how many zeros needed a scan.
    """
    m, n = out.shape
    inner = left.shape[1]
    right_columns = np.zeros(n, np.int8)
    positions = np.empty(n, np.int64)
    through = np.empty(inner, np.int64)
    scanned = 0
    for i in range(m):
        if zero_rows[i] == 0 or (by_row and exact[i]):
            continue
        senders = 0
        for k in range(inner):
            through[senders] = k
            senders += _sends(left[i, k], left_is_adjoint)
        if senders == 0:
            out[i, :] = UNREACHED
            continue
        count = 0
        for j in range(n):
            positions[count] = j
            count += out[i, j] == 0.0
        for c in range(count):
            j = positions[c]
            if not by_row and exact[j]:
                continue
            if right_columns[j] == UNREAD:
                right_columns[j] = _line_state(right[:, j], not left_is_adjoint)
            if right_columns[j] == SENDS_NOTHING:
                out[i, j] = UNREACHED
                continue
            scanned += 1
            total = UNREACHED
            for t in range(senders):
                if _sends(right[through[t], j], not left_is_adjoint):
                    total = 0.0
                    break
            out[i, j] = total
    return scanned


@kernel
def settle_zero_signs(x: FloatArray) -> None:
    """Make every zero of the 1-D ``x`` a +0.0, in place: an adjoint handed out, whose
    UNREACHED (-0.0) elements mean "no gradient" and read as an ordinary 0."""
    for t in range(x.size):
        if x[t] == 0.0:
            x[t] = 0.0


@kernel
def any_reached(x: FloatArray) -> bool:
    """Whether any element of a (C-contiguous) adjoint or tangent array was reached."""
    flat = x.reshape(x.size)
    for t in range(flat.size):
        if reached(flat[t]):
            return True
    return False


@kernel
def exact_lines(
    left: FloatArray,
    right: FloatArray,
    left_is_adjoint: bool,
    lines: IdArray,
    by_row: bool,
    out: FloatArray,
) -> None:
    """Recompute the rows (``by_row``) or columns ``lines`` of ``out = left @ right`` term by term.

    One factor holds adjoints (or tangents), the other values. Each term is
    ``contribution(value, adjoint)``: nothing from an unreached adjoint or a
    zero value, so each element gets exactly the reach and the value of its
    scalar-node expansion, summed in the order of the inner index whichever
    lines are recomputed.
    """
    m, n = out.shape
    for line in range(lines.size):
        first = lines[line]
        for other in range(n if by_row else m):
            i, j = (first, other) if by_row else (other, first)
            total = UNREACHED
            for k in range(left.shape[1]):
                if left_is_adjoint:
                    total += contribution(right[k, j], left[i, k])
                else:
                    total += contribution(left[i, k], right[k, j])
            out[i, j] = total
