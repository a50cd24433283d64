"""Strong zeros through array rules: which elements an adjoint or tangent reached.

The scalar sweeps' rule (``kernels/strong_zeros.py``), element by element: an
adjoint or tangent element nothing reached holds ``UNREACHED`` (-0.0) and
sends nothing; a reached one is an ordinary number. Every block rule keeps
that, so a block computation gets the reach of its scalar-node expansion: a
zero local partial is a strong zero, and an unsent term never becomes
``0 * inf = nan``.

These helpers serve the rules' VJPs and JVPs, which run inside a sweep,
under its ``sweep.ieee()`` error state (IEEE results, no warnings): they
set none of their own, which would cost a few microseconds a call.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.kernels import block_reach, strong_zeros, summation

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue

UNREACHED = strong_zeros.UNREACHED
_FLOAT64 = np.dtype(np.float64)  # (compared with ==: arrays made by Numba hold a copy)


class Need(enum.IntEnum):
    """What a block rule's VJP must send one operand (the sweep's ``needs``).

    ``NOTHING`` is false and the others true, so ``if needs[i]:`` reads as
    "is a contribution wanted"; ``True`` counts as ``ALL``.
    """

    NOTHING = 0
    """No contribution: the operand is data (an array constant) or feeds no wanted node."""
    ALL = 1
    """The contribution's values and its reach (which elements are strong zeros)."""
    VALUES = 2
    """The values only: the operand is a leaf, whose adjoint goes no further. The
    front end adds 0.0 to every gradient it hands out, so the reach of a leaf's
    zeros is never read, and a product need not settle it."""


def reached_elements(x: ArrayLike) -> NDArray[np.bool_]:
    """True where an adjoint or tangent array was reached (anything but -0.0)."""
    x = np.asarray(x)
    return (x != 0.0) | ~np.signbit(x)


def any_reached(x: RuleValue) -> bool:
    """Whether any element of an adjoint or tangent was reached."""
    if type(x) is np.ndarray and x.size:
        # The common case, without a kernel call: the first element was reached.
        first = x.item(0)
        if first != 0.0 or math.copysign(1.0, first) > 0.0:
            return True
    if type(x) is np.ndarray and x.dtype == np.float64 and x.flags.c_contiguous:
        return bool(block_reach.any_reached(x))
    if isinstance(x, float):
        return bool(strong_zeros.reached(x))
    return bool(reached_elements(x).any())


_add_reduce: Callable[..., Any] = np.add.reduce
"""What ``np.sum`` calls, without its Python wrapper (a few microseconds a call)."""

SHORT_ROWS = 128
"""The longest last axis that :func:`add_reduce` sums with one compiled call."""


def sums_short_rows(x: FloatArray, axis: int | tuple[int, ...] | None) -> bool:
    """Whether :func:`add_reduce` sums ``x`` over ``axis`` with one compiled call: its
    last axis, of 1 to ``SHORT_ROWS`` elements, of a C-contiguous float64 array of at
    least two axes."""
    last = x.ndim - 1
    return (
        (axis == (last,) or axis == last or axis == -1)
        and last > 0
        and 0 < x.shape[last] <= SHORT_ROWS
        and x.dtype == np.float64
        and x.flags.c_contiguous
    )


def add_reduce(
    x: FloatArray, axis: int | tuple[int, ...] | None, keepdims: bool, start: float = 0.0
) -> Any:
    """``np.add.reduce(x, axis, keepdims=keepdims)`` (``initial=start`` where ``start`` is
    -0.0), bit for bit.

    A sum over the last axis of at most ``SHORT_ROWS`` elements of a C-contiguous
    array is one compiled call in NumPy's order (``summation.pairwise_rows``):
    NumPy's reduction costs more per row than its additions there, 5.1 us against
    1.8 for 256 rows of 32 and 109 us against 9 for 10,000 rows of 2. On longer rows
    NumPy's own vectorised sum is the faster.
    """
    if sums_short_rows(x, axis):
        rows = x.shape[:-1]
        sums = np.empty(rows)
        summation.pairwise_rows(x.reshape(-1, x.shape[-1]), sums.reshape(-1), start)
        return sums[..., np.newaxis] if keepdims else sums
    if start == 0.0 and math.copysign(1.0, start) > 0.0:
        return _add_reduce(x, axis=axis, keepdims=keepdims)
    return _add_reduce(x, axis=axis, keepdims=keepdims, initial=start)


def reach_sum(
    x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False
) -> Any:
    """``x.sum(axis)`` that keeps strong zeros: a sum of UNREACHED elements only is
    UNREACHED (NumPy's own sum starts at +0.0, which would mark it reached)."""
    if type(x) is np.ndarray and x.ndim:
        return add_reduce(x, axis, keepdims, UNREACHED)
    return np.sum(x, axis=axis, keepdims=keepdims, initial=UNREACHED)


def add_sent(total: RuleValue, term: RuleValue) -> RuleValue:
    """``total + term`` of two contributions, where None is nothing sent (strong zeros
    add as UNREACHED does)."""
    if term is None:
        return total
    return term if total is None else total + term


def contributions(partial: FloatArray, incoming: FloatArray) -> FloatArray:
    """``strong_zeros.contribution`` elementwise: ``partial * incoming``, with strong zeros."""
    product = partial * incoming + 0.0  # discarded where unreached
    return np.where((partial != 0.0) & reached_elements(incoming), product, UNREACHED)


def reach_matmul(
    x: FloatArray, y: FloatArray, adjoint_left: bool, reach: bool = True
) -> FloatArray:
    """``x @ y`` for a VJP or JVP, where one factor holds adjoints or tangents.

    ``adjoint_left``: ``x`` holds them and ``y`` values, else the reverse.
    The result is what the scalar-node expansion of the product gives: a
    term is sent only from a reached adjoint meeting a value that is not
    exactly zero (a zero local partial is a strong zero), so an element no
    term reached is UNREACHED and an unsent term can never turn into
    ``0 * inf = nan``. BLAS computes the product; it can differ only at a
    zero element (which may be an unreached strong zero) and a non-finite
    one (``product_reach`` settles both). 1-D operands act as a
    row (``x``) or a column (``y``); operands of more than two axes are
    stacks of matrices, their leading axes broadcast as in ``np.matmul``.

    With ``reach`` False (a leaf's adjoint, ``Need.VALUES``) the values are
    as exact, but the zeros keep BLAS's signs: nothing will read their reach.
    """
    if x.ndim == 2 and y.ndim == 2:  # the common case, in as few calls as it takes
        products, left, right = blas_products(), blas_matrix(x), blas_matrix(y)
        if products is not None and left is not None and right is not None:
            product, zeros, nonfinite = products.counted_product(*left, *right)
        else:
            product = x @ y  # a new C-contiguous array of IEEE results, rechecked here
            zeros, nonfinite = block_reach.zeros_and_nonfinite(product)
        return settled(product, zeros, nonfinite, x, y, adjoint_left, reach)
    x2 = x[np.newaxis, :] if x.ndim == 1 else x
    y2 = y[:, np.newaxis] if y.ndim == 1 else y
    product = np.ascontiguousarray(x2 @ y2)  # IEEE results, rechecked below
    if product.ndim == 2:
        product_reach(product, x2, y2, adjoint_left, reach)
    elif product.size:
        # A stack: one scan finds the matrices that need work (a non-finite
        # element; a zero, where its reach is wanted).
        m, n = product.shape[-2:]
        stacked = product.reshape(-1, n)
        nonfinite_rows = np.zeros(stacked.shape[0], np.bool_)
        zero_rows = np.empty(stacked.shape[0], np.int64)
        columns = np.zeros(n, np.bool_)
        zeros, nonfinite = block_reach.nonfinite_lines(stacked, nonfinite_rows, columns, zero_rows)
        if nonfinite or (zeros and reach):
            batch = product.shape[:-2]
            count = math.prod(batch)  # not -1 in the reshapes: a factor may be empty (k = 0)
            xs = np.broadcast_to(x2, batch + x2.shape[-2:]).reshape(count, *x2.shape[-2:])
            ys = np.broadcast_to(y2, batch + y2.shape[-2:]).reshape(count, *y2.shape[-2:])
            matrices = product.reshape(count, m, n)
            suspects = nonfinite_rows | (zero_rows > 0) if reach else nonfinite_rows
            for i in np.unique(np.flatnonzero(suspects) // m):
                product_reach(matrices[i], xs[i], ys[i], adjoint_left, reach)
    # 1-D operands lose the axis they were promoted with, as in np.matmul.
    if x.ndim == 1:
        product = product[..., 0, :]
    if y.ndim == 1:
        product = product[..., 0]
    return product


def settled(
    product: FloatArray,
    zeros: int,
    nonfinite: int,
    x: FloatArray,
    y: FloatArray,
    adjoint_left: bool,
    reach: bool = True,
) -> FloatArray:
    """``product = x @ y`` made exact (see ``reach_matmul``), given its counts of zeros and
    non-finite elements: as it is where neither asks for more, the common case."""
    if nonfinite or (zeros and reach):
        product_reach(product, x, y, adjoint_left, reach)
    return product


_products: Any = None  # fastad.kernels.products once loaded; False where it cannot run


def blas_products() -> Any:
    """``fastad.kernels.products`` (block products as one compiled call each on NumPy's
    BLAS, NumPy's bits), or None where compiled code cannot call NumPy's BLAS
    (``NUMBA_DISABLE_JIT``, a NumPy without its bundled OpenBLAS): ``np.matmul`` then.

    Loaded by the first product, not by ``import fastad``: finding NumPy's BLAS takes
    about 5 ms.
    """
    global _products
    if _products is None:
        from fastad.kernels import blas

        if blas.unavailable() is None:
            from fastad.kernels import products

            _products = products
        else:
            _products = False
    return _products or None


def blas_matrix(x: Any) -> tuple[FloatArray, bool] | None:
    """A float64 matrix as BLAS reads it, ``(C-contiguous matrix, transposed)``, as
    ``np.matmul`` passes it; None for any other layout (``np.matmul`` runs those)."""
    if type(x) is not np.ndarray or x.dtype != _FLOAT64 or x.ndim != 2:
        return None
    flags = x.flags
    if flags.c_contiguous:
        return x, False
    if flags.f_contiguous:
        return x.T, True
    return None


def c_matrices(*arrays: Any) -> bool:
    """Whether every one of ``arrays`` is a C-contiguous float64 array (the products'
    kernels' operands)."""
    for x in arrays:  # a loop, not all([...]): this runs once per product on a tape
        if type(x) is not np.ndarray or x.dtype != _FLOAT64 or not x.flags.c_contiguous:
            return False
    return True


def product_reach(
    product: FloatArray, x: FloatArray, y: FloatArray, adjoint_left: bool, reach: bool = True
) -> FloatArray:
    """``product`` (2-D, C-contiguous, ``x @ y``) made exact; see ``reach_matmul``.

    Changes ``product`` in place. One read of ``product`` counts its zeros
    and non-finite elements; finite data with no zero in the product (or
    whose zeros' reach is not wanted) costs only that read, the others a
    second one that marks their lines. Where a non-finite value meets a zero or an unreached
    adjoint, BLAS's sum holds a ``nan``. So the rows or the columns holding
    a non-finite element (whichever hold fewer terms) are recomputed term by term,
    the slow path (``slow_path_counts``): a legitimate ``inf`` (an ``inf``
    adjoint times a non-zero value) sends its line there too. The other
    zeros have the right value and get their reach from
    ``block_reach.settle_zeros``, which reads a factor's line once and scans
    terms only for a zero that neither factor's line explains; without
    ``reach`` (see ``reach_matmul``) they keep BLAS's signs.
    """
    zeros, nonfinite = block_reach.zeros_and_nonfinite(product)  # no lines to mark: the common case
    if not nonfinite and not (zeros and reach):
        return product
    m, n = product.shape
    rows, columns = np.zeros(m, np.bool_), np.zeros(n, np.bool_)
    zero_rows = np.empty(m, np.int64)
    zeros, nonfinite = block_reach.nonfinite_lines(product, rows, columns, zero_rows)
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    by_row, exact = adjoint_left, rows if adjoint_left else columns
    if nonfinite:
        marked_rows, marked_columns = np.flatnonzero(rows), np.flatnonzero(columns)
        # The fewer terms: a row costs n * k of them, a column m * k.
        row_terms, column_terms = marked_rows.size * n, marked_columns.size * m
        if row_terms != column_terms:
            by_row = row_terms < column_terms
        exact, marked = (rows, marked_rows) if by_row else (columns, marked_columns)
        block_reach.exact_lines(x, y, adjoint_left, marked, by_row, product)
        _count("exact_lines", marked.size)
    if zeros and reach:
        scanned = block_reach.settle_zeros(product, x, y, adjoint_left, exact, by_row, zero_rows)
        _count("settled_zeros", zeros)
        _count("scanned_zeros", scanned)
    return product


_counts = {"exact_lines": 0, "settled_zeros": 0, "scanned_zeros": 0}
_counts_lock = threading.Lock()


def _count(name: str, amount: int) -> None:
    if amount:
        with _counts_lock:
            _counts[name] += amount


def slow_path_counts() -> dict[str, int]:
    """How often array products left their fast path, since fastad was imported.

    - ``exact_lines``: rows or columns of a product recomputed term by term
      because they hold a non-finite element: where an infinity or nan met
      a zero or an unreached adjoint, but also where one met an ordinary
      number, or a product of finite data overflowed. Finite data takes it
      only where a product overflows.
    - ``settled_zeros``: zero elements of products whose reach was settled
      (none for a leaf's adjoint, ``Need.VALUES``).
    - ``scanned_zeros``: those of them whose reach needed a scan
      of their terms, because neither factor's row or column showed at once
      that nothing reached them (a cancellation, or the sparsity patterns of
      an adjoint and a value that miss each other).

    The tests read these to show which path ran; they are not timings.
    """
    with _counts_lock:
        return dict(_counts)


def unbroadcast(gradient: RuleValue, shape: tuple[int, ...]) -> FloatArray | float:
    """Sum ``gradient`` back to ``shape``: the one place that undoes broadcasting.

    The sums keep strong zeros (``reach_sum``).
    """
    if type(gradient) is np.ndarray:
        if gradient.shape == shape:
            return gradient
        if gradient.ndim == 2 and shape == gradient.shape[1:]:
            # A bias's: a row broadcast down the rows, summed over them (the
            # general path below costs twice this sum on small arrays).
            return _add_reduce(gradient, axis=0, initial=UNREACHED)
    gradient = np.asarray(gradient)
    if gradient.shape == tuple(shape):
        return gradient
    gradient = reduce_to(gradient, shape, reach_sum)
    return gradient if shape else float(gradient)


def reduce_to(x: NDArray[Any], shape: tuple[int, ...], reduce: Callable[..., Any]) -> Any:
    """``x`` (of a broadcast result's shape) reduced to an operand's ``shape``.

    ``reduce(x, axis=..., keepdims=...)`` runs over the leading axes
    broadcasting added and over the axes it stretched from 1: ``reach_sum``
    for gradients, ``np.any`` for masks of the elements read.
    """
    extra = x.ndim - len(shape)
    if extra:
        x = reduce(x, axis=tuple(range(extra)), keepdims=False)
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    if stretched:
        x = reduce(x, axis=stretched, keepdims=True)
    return x
