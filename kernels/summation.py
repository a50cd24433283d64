"""NumPy's pairwise summation, in its order, compiled once.

NumPy sums a contiguous run of float64 numbers pairwise: blocks of up to 128
terms with eight running sums, halves above. Generated code restates it
(:func:`pairwise`, :func:`pairwise_rows`) so that its sums are NumPy's bit
for bit, and the array rules call :func:`pairwise_rows` for sums over short
last axes, where NumPy's reduction costs more per row than its additions
(``fastad.core.reach.add_reduce``).

Kernels trust their input: C-contiguous float64 arrays.
"""

from __future__ import annotations

import numpy as np

from .arrays import FloatArray
from .jit import kernel


# Inlined where it is called: as a call, a row of 32 cost about 6 ns more than its
# additions (the array's fields passed and its reference counted), 3x the sum itself.
@kernel(inline="always")
def pairwise_block(a: FloatArray, start: int, n: int) -> float:
    """NumPy's sum of ``a[start:start + n]`` for ``n <= 128``: in order below 8 terms,
    from -0.0 as NumPy starts them (a run of -0.0 sums to -0.0, nothing to -0.0: the
    caller's start decides), else eight running sums, combined as a tree, then the rest
    in order."""
    if n < 8:
        res = -0.0
        for i in range(start, start + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[start], a[start + 1], a[start + 2], a[start + 3]
    r4, r5, r6, r7 = a[start + 4], a[start + 5], a[start + 6], a[start + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        k = start + i
        r0 += a[k]
        r1 += a[k + 1]
        r2 += a[k + 2]
        r3 += a[k + 3]
        r4 += a[k + 4]
        r5 += a[k + 5]
        r6 += a[k + 6]
        r7 += a[k + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[start + i]
        i += 1
    return res


@kernel
def pairwise(a: FloatArray, start: int, n: int) -> float:
    """NumPy's pairwise summation of ``a[start:start + n]``, in its order (NumPy adds the
    result to 0.0): blocks of up to 128 (:func:`pairwise_block`), halves (rounded down to
    a multiple of 8) above, added as NumPy's recursion adds them. Written with a stack,
    not recursion: Numba cannot load a cached recursive function."""
    if n <= 128:
        return pairwise_block(a, start, n)
    starts = np.empty(64, np.int64)  # frames: 64 halvings reach past any array's size
    counts = np.empty(64, np.int64)
    stages = np.empty(64, np.int64)
    results = np.empty(64)
    top, held = 0, 0
    starts[0], counts[0], stages[0] = start, n, 0
    while top >= 0:
        first, count = starts[top], counts[top]
        if count <= 128:
            results[held] = pairwise_block(a, first, count)
            held += 1
            top -= 1
            continue
        half = count // 2
        half -= half % 8
        if stages[top] == 0:  # the left half first
            stages[top] = 1
            top += 1
            starts[top], counts[top], stages[top] = first, half, 0
        elif stages[top] == 1:  # then the right
            stages[top] = 2
            top += 1
            starts[top], counts[top], stages[top] = first + half, count - half, 0
        else:  # both done: left + right
            held -= 1
            results[held - 1] = results[held - 1] + results[held]
            top -= 1
    return results[0]


@kernel
def pairwise_rows(X: FloatArray, sums: FloatArray, start: float) -> None:
    """``sums[i] = start + pairwise(X[i])`` for each row of the matrix ``X``: NumPy's
    ``X.sum(axis=1)`` with ``start`` 0.0, ``reach_sum``'s with -0.0.

    One call for the whole matrix: generated code calling :func:`pairwise` once per
    row paid two calls and a row view a row, 7.9 us against 1.8 for 256 rows of 32.
    """
    n = X.shape[1]
    flat = X.reshape(X.size)
    for i in range(X.shape[0]):
        at = i * n
        sums[i] = start + (pairwise_block(flat, at, n) if n <= 128 else pairwise(flat, at, n))
