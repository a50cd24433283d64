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

from fastad.eager.functions import abs as fa_abs
from fastad.eager.functions import sqrt
from fastad.eager.handle import Node, tape_of
from fastad.eager.node import Block, Var, compute_block, record_block_on
from fastad.kernels import optable
from fastad.util.errors import flag

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
    operands = tuple(  # nested lists of numbers are arrays, as NumPy reads them
        np.asarray(x, dtype=np.float64) if isinstance(x, (list, tuple)) else x for x in operands
    )
    for operand in operands:
        if isinstance(operand, Var):
            raise TypeError(
                f"fa.linalg.{name} takes blocks or arrays, got the scalar node {operand!r}"
            )
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


def solve_triangular(A: Block | ArrayLike, B: Block | ArrayLike, lower: bool = False) -> Any:
    """``X`` with ``A X = B`` for a triangular ``A`` (``scipy.linalg.solve_triangular``): only
    the ``lower`` (or upper) triangle of ``A`` is read, and only it gets a gradient.

    ``np.linalg.LinAlgError`` where the diagonal holds a zero.
    """
    return _op(SOLVE_TRIANGULAR, "solve_triangular", (A, B), flag(lower, "lower"))


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


def norm(x: Block | ArrayLike, ord: None = None, axis: None = None) -> Any:  # noqa: A002
    """The 2-norm of a vector, or the Frobenius norm of a matrix (``np.linalg.norm`` with
    ``ord`` and ``axis`` None): ``sqrt(sum(x * x))``. Other orders and axes are refused."""
    if ord is not None or axis is not None:
        raise TypeError(
            f"fa.linalg.norm computes the 2-norm or Frobenius norm of the whole array "
            f"(ord=None, axis=None); got ord={ord!r}, axis={axis!r}: write it from "
            "fa.sqrt, fa.abs and .sum(axis=...)"
        )
    if isinstance(x, Var):
        return fa_abs(x)
    if not isinstance(x, Node):
        return float(np.linalg.norm(np.asarray(x, dtype=np.float64)))
    return sqrt((x * x).sum())


__all__ = ["cholesky", "det", "eigh", "inv", "norm", "slogdet", "solve", "solve_triangular"]
