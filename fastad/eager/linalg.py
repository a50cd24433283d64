"""``fa.linalg``: linear algebra on blocks, as ``np.linalg`` and ``scipy.linalg`` spell it.

``cholesky``, ``solve``, ``solve_triangular``, ``inv``, ``det``, ``slogdet``, ``eigh`` and
``norm`` take square matrices (``norm``: any block) as block nodes or plain
arrays: with a node among the operands they record one block op (its rules
in ``fastad/core/linalg_rules.py``), without one they compute the value. The
``np.linalg`` functions of the same names do the same on nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fastad.eager.block_params import normal_axis
from fastad.eager.functions import abs as fa_abs
from fastad.eager.functions import sqrt, where
from fastad.eager.handle import Node, tape_of
from fastad.eager.node import Block, Var, compute_block, record_block_on
from fastad.kernels import optable
from fastad.util.errors import as_float64, flag, is_int

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_BLOCK = optable.BLOCK_BY_NAME
CHOLESKY, SOLVE, SOLVE_TRIANGULAR = (
    _BLOCK["cholesky"].code,
    _BLOCK["solve"].code,
    _BLOCK["solve_triangular"].code,
)
INV, DET, LOGABSDET = _BLOCK["inv"].code, _BLOCK["det"].code, _BLOCK["logabsdet"].code
SIGN_DET, EIGH = _BLOCK["sign_det"].code, _BLOCK["eigh"].code


class SlogdetResult(NamedTuple):
    """``fa.linalg.slogdet``'s result, named as ``np.linalg.slogdet``'s."""

    sign: Any
    logabsdet: Any


class EighResult(NamedTuple):
    """``fa.linalg.eigh``'s result, named as ``np.linalg.eigh``'s."""

    eigenvalues: Any
    eigenvectors: Any


def _op(code: int, name: str, operands: tuple[Any, ...], params: object = None) -> Any:
    """Record op ``code`` where a node is among ``operands``, else compute it."""
    operands = tuple(_operand(x, f"fa.linalg.{name}") for x in operands)
    tape = tape_of(*operands)
    if tape is None:
        return compute_block(code, operands, params)
    return record_block_on(tape, code, operands, params, f"fa.linalg.{name} operand")


def cholesky(A: Block | ArrayLike) -> Any:
    """The lower Cholesky factor ``L`` of ``(A + A^T) / 2`` (``L L^T``), as
    ``jax.numpy.linalg.cholesky``: the input is symmetrised, so the gradient is symmetric.

    ``np.linalg.LinAlgError`` where the matrix is not positive definite.
    """
    return _op(CHOLESKY, "cholesky", (A,))


def solve(A: Block | ArrayLike, B: Block | ArrayLike) -> Any:
    """``X`` with ``A X = B`` (``np.linalg.solve``): ``B`` of shape ``(n,)`` or ``(n, k)``.

    One LU factorisation, kept for the derivatives (``A^-T`` solves with it).
    ``np.linalg.LinAlgError`` for a singular ``A``, as NumPy.
    """
    return _op(SOLVE, "solve", (A, B))


def solve_triangular(
    A: Block | ArrayLike,
    B: Block | ArrayLike,
    lower: bool = False,
    *,
    trans: int | str = 0,
    unit_diagonal: bool = False,
) -> Any:
    """``X`` with ``A X = B`` for a triangular ``A`` (``scipy.linalg.solve_triangular``): only
    the ``lower`` (or upper) triangle of ``A`` is read, and only it gets a gradient.

    As SciPy: ``trans`` 0 or ``"N"`` solves ``A X = B``, 1, 2, ``"T"`` or ``"C"``
    ``A^T X = B`` (real numbers: ``"C"`` is ``"T"``); with ``unit_diagonal`` the
    diagonal is taken to be ones, not read, and gets no gradient. They are
    keywords here (``lower`` keeps its place as the third argument).

    ``np.linalg.LinAlgError`` where the diagonal holds a zero.
    """
    lower = flag(lower, "lower")
    matrix = _operand(A, "fa.linalg.solve_triangular")
    if flag(unit_diagonal, "unit_diagonal"):
        shape = matrix.shape
        if len(shape) == 2 and shape[0] == shape[1]:  # else the op names the shapes
            matrix = where(np.eye(shape[0], dtype=np.bool_), 1.0, matrix)
    if _transposed(trans):
        matrix = matrix.T
        lower = not lower
    return _op(SOLVE_TRIANGULAR, "solve_triangular", (matrix, B), lower)


def _transposed(trans: object) -> bool:
    """Whether SciPy's ``trans`` asks for ``A^T``; anything else is refused, naming it."""
    if is_int(trans) and int(trans) in (0, 1, 2):
        return int(trans) != 0
    if isinstance(trans, str) and trans in ("N", "T", "C"):
        return trans != "N"
    raise ValueError(
        f"fa.linalg.solve_triangular: trans={trans!r}; use 0 or 'N' (A X = B), 1 or 'T' "
        "(A^T X = B), or 2 or 'C' (the same, for real numbers)"
    )


def inv(A: Block | ArrayLike) -> Any:
    """``A^-1`` (``np.linalg.inv``); prefer :func:`solve` for ``A^-1 B``."""
    return _op(INV, "inv", (A,))


def det(A: Block | ArrayLike) -> Any:
    """``det(A)`` (``np.linalg.det``), a scalar node; gradient ``det(A) A^-T``
    (``LinAlgError`` at a singular matrix, where it needs the adjugate)."""
    return _op(DET, "det", (A,))


def slogdet(A: Block | ArrayLike) -> SlogdetResult:
    """``(sign, log|det(A)|)`` as ``np.linalg.slogdet``: two scalar nodes (floats for plain
    arrays), the sign with derivative 0, the logarithm with gradient ``A^-T``;
    ``(0.0, -inf)`` at a singular matrix."""
    return SlogdetResult(_op(SIGN_DET, "slogdet", (A,)), _op(LOGABSDET, "slogdet", (A,)))


def eigh(A: Block | ArrayLike) -> EighResult:
    """``(w, V)``: the eigenvalues (ascending) and eigenvectors (columns) of ``(A + A^T) / 2``,
    as ``np.linalg.eigh`` (the input symmetrised, as ``jax.numpy.linalg.eigh``): one
    factorisation, recorded as one op whose rows are split.

    At repeated eigenvalues the eigenvectors have no derivative: their gradients are inf
    or nan there (the eigenvalues' stay finite while nothing reaches the eigenvectors).
    """
    both = _op(EIGH, "eigh", (A,))
    return EighResult(both[0], both[1:])


def norm(
    x: Block | ArrayLike,
    ord: Any = None,  # noqa: A002  (np.linalg.norm's name)
    axis: Any = None,
    keepdims: bool = False,
) -> Any:
    """``np.linalg.norm``: vector norms (``ord`` None or 2, 1, inf, -inf, 0, any p) over one
    axis, matrix norms (None or 'fro', 1, -1, inf, -inf) over two, as NumPy picks them from
    ``axis`` and the rank. The 2-norm is ``sqrt(sum(x * x))``, whose derivatives at
    ``x = 0`` are 0 (its minimum-norm subgradient), so ``norm(x) ** 2`` there has Hessian 0,
    not ``2 I``: write ``x @ x`` for the square. The spectral and nuclear norms (``ord`` 2,
    -2, 'nuc' of a matrix) need singular values and are refused."""
    if isinstance(x, Var):
        if ord is not None or axis is not None:
            raise ValueError(
                f"np.linalg.norm of the scalar node {x!r} (no axes) takes no ord or axis; "
                f"got ord={ord!r}, axis={axis!r}"
            )
        return fa_abs(x)
    if not isinstance(x, Node):
        return np.linalg.norm(_operand(x, "np.linalg.norm"), ord, axis, keepdims)
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"np.linalg.norm: keepdims must be True or False, got {keepdims!r}")
    if axis is None:
        if ord is None:  # the 2-norm of the flattened array, whatever its rank
            result: Any = sqrt((x * x).sum())
            return np.reshape(result, (1,) * x.ndim) if keepdims else result
        axis = tuple(range(x.ndim))
    axes = tuple(normal_axis(x.shape, a, x) for a in (axis if isinstance(axis, tuple) else (axis,)))
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) == 2 and axes[0] != axes[1]:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"np.linalg.norm: axis={axis!r} for shape {x.shape} (one axis or two)")


def _vector_norm(x: Any, ord: Any, axis: int, keepdims: bool) -> Any:  # noqa: A002
    if ord is None or ord == 2:
        return sqrt((x * x).sum(axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"np.linalg.norm: ord={ord!r} is a matrix norm; a vector takes a number")
    magnitude = fa_abs(x)
    if ord == np.inf:
        if x.shape[axis] == 0:  # NumPy's initial=0: an empty vector's norm is 0
            return np.max(magnitude, axis=axis, keepdims=keepdims, initial=0.0)
        # Not maximum(max, 0) otherwise: its partial would keep a nan element's nan
        # from the gradient.
        return magnitude.max(axis, keepdims=keepdims)
    if ord == -np.inf:
        return magnitude.min(axis, keepdims=keepdims)
    if ord == 0:
        return (x != 0.0).sum(axis, keepdims=keepdims)
    if ord == 1:
        return magnitude.sum(axis, keepdims=keepdims)
    return ((magnitude ** float(ord)).sum(axis, keepdims=keepdims)) ** (1.0 / float(ord))


def _matrix_norm(x: Any, ord: Any, axes: tuple[int, ...], keepdims: bool) -> Any:  # noqa: A002
    rows, columns = axes
    if ord is None or ord == "fro":
        return sqrt((x * x).sum(axes, keepdims=keepdims))
    if ord in (2, -2, "nuc"):
        raise TypeError(
            f"np.linalg.norm with ord={ord!r} of a matrix (singular values) is not recorded on "
            "fastad nodes: use ord 'fro', 1, -1, inf or -inf"
        )
    if ord not in (1, -1, np.inf, -np.inf):
        raise ValueError(  # NumPy's error
            f"np.linalg.norm: invalid norm order {ord!r} for matrices; the orders are None, "
            "'fro', 'nuc', 1, -1, 2, -2, inf and -inf"
        )
    summed, kept = (rows, columns) if abs(ord) == 1 else (columns, rows)
    sums = fa_abs(x).sum(summed, keepdims=True)
    result = sums.max(kept, keepdims=True) if ord > 0 else sums.min(kept, keepdims=True)
    if keepdims:
        return result
    shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return result.reshape(shape) if shape else result.sum()


def eigvalsh(A: Block | ArrayLike, UPLO: str = "L") -> Any:  # noqa: N803  (NumPy's name)
    """The eigenvalues of ``(A + A^T) / 2``, ascending: :func:`eigh`'s first result. Both
    triangles are read, symmetrised (as ``jax.numpy.linalg.eigvalsh``; NumPy's reads the
    ``UPLO`` triangle), so ``UPLO`` only has to be ``'L'`` or ``'U'``."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"np.linalg.eigvalsh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return eigh(A).eigenvalues


def matrix_power(a: Block | ArrayLike, n: int) -> Any:
    """``a`` to the integer power ``n`` by repeated squaring (``n < 0``: of ``inv(a)``)."""
    if not isinstance(n, (int, np.integer)):
        raise TypeError(f"np.linalg.matrix_power takes an integer power, got {n!r}")
    x = _matrix_operand(a, "matrix_power")
    shape = x.shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"np.linalg.matrix_power takes square matrices, got shape {shape}")
    if n == 0:
        return np.broadcast_to(np.eye(shape[-1]), shape).copy()
    base, power, result = (inv(x) if n < 0 else x), abs(int(n)), None
    while power:
        if power & 1:
            result = base if result is None else result @ base
        power >>= 1
        if power:
            base = base @ base
    return result


def multi_dot(arrays: Any, *, out: Any = None) -> Any:
    """``A @ B @ C ...`` in the order of fewest multiplications (NumPy's choice); a vector
    first or last is a row or a column, and is one again in the result."""
    if out is not None:
        raise TypeError("np.linalg.multi_dot(..., out=...) is not recorded: use the result")
    items = [_matrix_operand(x, "multi_dot") for x in arrays]
    if len(items) < 2:
        raise ValueError("np.linalg.multi_dot needs at least two arrays")
    ranks = [len(x.shape) for x in items]
    if any(r != 2 for r in ranks[1:-1]) or not {ranks[0], ranks[-1]} <= {1, 2}:
        raise ValueError(
            f"np.linalg.multi_dot takes matrices (the first and last may be vectors), got "
            f"shapes {[x.shape for x in items]}"
        )
    first_vector, last_vector = len(items[0].shape) == 1, len(items[-1].shape) == 1
    if first_vector:
        items[0] = items[0].reshape((1, -1))
    if last_vector:
        items[-1] = items[-1].reshape((-1, 1))
    for n in range(len(items) - 1):
        if items[n].shape[1] != items[n + 1].shape[0]:
            raise ValueError(
                f"np.linalg.multi_dot: array {n} of shape {items[n].shape} and array {n + 1} "
                f"of shape {items[n + 1].shape} do not chain"
            )
    dims = [items[0].shape[0]] + [x.shape[1] for x in items]
    result = _chain(items, _chain_order(dims), 0, len(items) - 1)
    if first_vector and last_vector:
        return result.sum()
    if first_vector or last_vector:
        return result.reshape((-1,))
    return result


def _matrix_operand(x: Any, function: str) -> Any:
    """``x`` as a block or a float64 array (:func:`_operand`), named ``np.linalg.function``."""
    return _operand(x, f"np.linalg.{function}")


def _operand(x: Any, function: str) -> Any:
    """``x`` as ``function`` takes it: a block as it is, anything else (nested lists of
    numbers too, as NumPy reads them) a float64 array. Refused, naming them: a scalar
    node, nodes inside a list or an object array (NumPy would read them as numbers:
    values without their gradient), and numbers that are not real (complex ones would
    lose their imaginary part)."""
    if isinstance(x, Var):
        raise TypeError(f"{function} takes blocks or arrays, got the scalar node {x!r}")
    if isinstance(x, Node):
        return x
    array = np.asarray(x)
    if array.dtype == object:
        node = next((item for item in array.flat if isinstance(item, Node)), None)
        if node is not None:
            raise TypeError(
                f"{function} takes blocks or arrays, got a list or object array holding the "
                f"node {node!r}, which would be read as a number (no gradient): make one "
                "block of them first, fa.stack([...])"
            )
    return as_float64(array, f"{function}'s operand")


def _chain_order(dims: list[int]) -> list[list[int]]:
    """The split of each sub-chain ``i..j`` that multiplies it with the fewest products."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j], split[i][j] = min(
                (cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k)
                for k in range(i, j)
            )
    return split


def _chain(items: list[Any], split: list[list[int]], i: int, j: int) -> Any:
    if i == j:
        return items[i]
    k = split[i][j]
    return _chain(items, split, i, k) @ _chain(items, split, k + 1, j)


__all__ = [
    "cholesky",
    "det",
    "eigh",
    "eigvalsh",
    "inv",
    "matrix_power",
    "multi_dot",
    "norm",
    "slogdet",
    "solve",
    "solve_triangular",
]
