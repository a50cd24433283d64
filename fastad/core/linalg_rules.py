"""Block rules of linear algebra: ``cholesky``, ``solve``, ``solve_triangular``, ``inv``,
``det``, ``logabsdet``, ``sign_det`` and ``eigh``, on square matrices (one, not a stack).

The derivative rules reuse the forward pass's factorisation (``solve`` saves
its LU factors; ``cholesky``'s factor is its output) and solve with it;
only ``inv`` (whose output is the inverse) and the determinants (whose
gradient is one: ``det(A) A^-T``) form an inverse. A singular matrix
gives what NumPy gives: ``np.linalg.LinAlgError`` from ``solve``, ``inv``,
``cholesky`` (not positive definite) and ``solve_triangular`` (a zero on the
diagonal), ``det(A) = 0`` and ``logabsdet = -inf``, whose gradients then
raise ``LinAlgError``. These rules track no reach: their contributions are
plain arrays (an unreached element reads as zero).
"""

from __future__ import annotations

import math
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.core.block_rule import BlockRule, Needs, Shape, Values

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue


def _scipy() -> ModuleType:
    """``scipy.linalg``, imported at the first linear-algebra rule that runs: ``import
    fastad`` does not pay its 0.1 s for programs that never factorise a matrix."""
    import scipy.linalg

    return scipy.linalg


def square(shape: Shape, op: str) -> int:
    """The order of a square matrix of ``shape``; ``ValueError`` naming the op otherwise."""
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(
            f"{op} needs a square matrix (n, n), got shape {shape} (stacks of matrices are "
            "not supported: loop over them)"
        )
    return shape[0]


def right_hand_side(a: Shape, b: Shape, op: str) -> Shape:
    """The shape of ``solve(A, B)``: B's, which must be (n,) or (n, k)."""
    n = square(a, op)
    if len(b) not in (1, 2) or b[0] != n:
        raise ValueError(
            f"{op}: the right-hand side must have shape ({n},) or ({n}, k) for a matrix of "
            f"shape {a}, got shape {b}"
        )
    return b


def _outer(u: FloatArray, v: FloatArray) -> FloatArray:
    """``u v^T`` for vectors, ``u @ v.T`` for matrices (the gradient's shape of A)."""
    return np.outer(u, v) if u.ndim == 1 else u @ v.T


def _symmetric(x: FloatArray) -> FloatArray:
    return (x + x.T) * 0.5


def _inverse(a: FloatArray, op: str) -> FloatArray:
    """``A^-1``, or ``LinAlgError`` naming ``op`` where A is singular."""
    try:
        return np.linalg.inv(a).astype(np.float64, copy=False)
    except np.linalg.LinAlgError:
        raise np.linalg.LinAlgError(
            f"the derivative of {op} at a singular matrix needs its adjugate, not an "
            "inverse; it is not computed"
        ) from None


def _lower_transposed_times(L: FloatArray, G: FloatArray) -> FloatArray:
    """``L^T G`` for a lower triangular ``L`` by BLAS ``trmm``: half a product's work,
    and the upper triangle's zeros are never multiplied. Computed as ``(G^T L)^T``
    on the transposed views, so C-ordered operands are not copied."""
    from scipy.linalg import blas

    product = blas.dtrmm(1.0, L.T, np.asarray(G, dtype=np.float64).T, side=1, lower=0, trans_a=1)
    return product.T


class Cholesky(BlockRule):
    """``L`` with ``L L^T = (A + A^T) / 2``, lower triangular (as ``jax.numpy.linalg.cholesky``:
    the input is symmetrised first, so its gradient is symmetric).

    VJP: ``S = L^-T Phi(L^T G) L^-1``, ``A_bar = (S + S^T) / 2``, with ``Phi`` the lower
    triangle, its diagonal halved; JVP: ``L Phi(L^-1 sym(tA) L^-T)``.
    """

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        square(shapes[0], "cholesky")
        return shapes[0]

    def forward(self, values: Values, params: object) -> RuleValue:
        return np.linalg.cholesky(_symmetric(values[0]))

    @staticmethod
    def _phi(x: FloatArray) -> FloatArray:
        lower = np.tril(x)
        lower[np.diag_indices_from(lower)] *= 0.5
        return lower

    @staticmethod
    def _left(L: FloatArray, X: FloatArray) -> FloatArray:
        """``L^-T X`` by a triangular solve."""
        return _scipy().solve_triangular(L, X, lower=True, trans="T", check_finite=False)

    def _between(self, L: FloatArray, X: FloatArray) -> FloatArray:
        """``L^-T X L^-1`` by two triangular solves."""
        return self._left(L, self._left(L, X).T).T

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        L = out
        return (_symmetric(self._between(L, self._phi(_lower_transposed_times(L, g)))),)

    def _tangent(self, L: FloatArray, tA: FloatArray) -> FloatArray:
        inner = _scipy().solve_triangular(L, _symmetric(tA), lower=True, check_finite=False)
        inner = _scipy().solve_triangular(L, inner.T, lower=True, check_finite=False).T
        return L @ self._phi(inner)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        return self._tangent(out, tangents[0])

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # S = L^-T P L^-1 with P = Phi(L^T G) moves along dL (the JVP) by
        # L^-T Phi(dL^T G) L^-1 - L^-T dL^T S - S dL L^-1.
        L = out
        dL = self._tangent(L, tangents[0])
        S = self._between(L, self._phi(_lower_transposed_times(L, g)))
        moved = self._between(L, self._phi(dL.T @ g))
        moved -= self._left(L, dL.T @ S)
        moved -= self._left(L, (S @ dL).T).T
        return (_symmetric(moved),)


class Solve(BlockRule):
    """``X = A^-1 B`` by A's LU factors, kept for the derivatives: ``B_bar = A^-T G``,
    ``A_bar = -B_bar X^T``; ``tX = A^-1 (tB - tA X)``."""

    saves = True  # the LU factors and pivots

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        return right_hand_side(shapes[0], shapes[1], "solve")

    def forward(self, values: Values, params: object) -> tuple[RuleValue, Any]:
        A, B = values
        with warnings.catch_warnings():  # an exact zero pivot: raised below, as NumPy does
            warnings.simplefilter("ignore", _scipy().LinAlgWarning)
            factors = _scipy().lu_factor(A, check_finite=False)
        if np.any(np.diag(factors[0]) == 0.0):  # as np.linalg.solve: no silent inf
            raise np.linalg.LinAlgError("Singular matrix")
        return _scipy().lu_solve(factors, B, check_finite=False), factors

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        return self.vjp_saved(values, out, g, params, needs, self.forward(values, params)[1])

    def vjp_saved(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        params: object,
        needs: Needs,
        saved: Any,
    ) -> Values:
        b_bar = _scipy().lu_solve(saved, g, trans=1, check_finite=False)
        want_a = needs is None or needs[0]
        return (-_outer(b_bar, out) if want_a else None), b_bar

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        A, B = values
        tA, tB = tangents
        moved = np.zeros(np.shape(out)) if tB is None else np.array(tB, dtype=np.float64)
        if tA is not None:
            moved -= tA @ out
        return np.linalg.solve(A, moved)

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # B_bar = A^-T G moves by -A^-T tA^T B_bar; A_bar = -B_bar X^T by
        # -(dB_bar X^T + B_bar dX^T), dX the JVP.
        A = values[0]
        tA = tangents[0]
        b_bar = np.linalg.solve(A.T, g)
        d_x = self.jvp(values, out, tangents, params)
        d_b_bar = np.zeros_like(b_bar) if tA is None else -np.linalg.solve(A.T, tA.T @ b_bar)
        return -(_outer(d_b_bar, out) + _outer(b_bar, d_x)), d_b_bar


class SolveTriangular(BlockRule):
    """``X = A^-1 B`` for a triangular ``A`` (``params``: True for lower), reading that
    triangle only (as ``scipy.linalg.solve_triangular``); ``A_bar`` is that triangle of
    ``-B_bar X^T``."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        return right_hand_side(shapes[0], shapes[1], "solve_triangular")

    def forward(self, values: Values, params: Any) -> RuleValue:
        A, B = values
        return _scipy().solve_triangular(A, B, lower=params, check_finite=False)

    @staticmethod
    def _triangle(x: FloatArray, lower: bool) -> FloatArray:
        return np.tril(x) if lower else np.triu(x)

    def _solve(self, A: FloatArray, B: FloatArray, lower: bool, trans: str = "N") -> FloatArray:
        return _scipy().solve_triangular(A, B, lower=lower, trans=trans, check_finite=False)

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: Any, needs: Needs = None
    ) -> Values:
        b_bar = self._solve(values[0], g, params, "T")
        want_a = needs is None or needs[0]
        return (self._triangle(-_outer(b_bar, out), params) if want_a else None), b_bar

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: Any) -> RuleValue:
        tA, tB = tangents
        moved = np.zeros(np.shape(out)) if tB is None else np.array(tB, dtype=np.float64)
        if tA is not None:
            moved -= self._triangle(tA, params) @ out
        return self._solve(values[0], moved, params)

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        A = values[0]
        tA = tangents[0]
        b_bar = self._solve(A, g, params, "T")
        d_x = self.jvp(values, out, tangents, params)
        d_b_bar = (
            np.zeros_like(b_bar)
            if tA is None
            else -self._solve(A, self._triangle(tA, params).T @ b_bar, params, "T")
        )
        moved = -(_outer(d_b_bar, out) + _outer(b_bar, d_x))
        return self._triangle(moved, params), d_b_bar


class Inv(BlockRule):
    """``Y = A^-1`` (``np.linalg.inv``): ``A_bar = -Y^T G Y^T``, ``tY = -Y tA Y``."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        square(shapes[0], "inv")
        return shapes[0]

    def forward(self, values: Values, params: object) -> RuleValue:
        return np.linalg.inv(values[0])

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        return (-(out.T @ g @ out.T),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        return -(out @ tangents[0] @ out)

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        d_y = self.jvp(values, out, tangents, params)
        return (-(d_y.T @ g @ out.T + out.T @ g @ d_y.T),)


class Det(BlockRule):
    """``det(A)`` (``name`` "det", ``np.linalg.det``) or ``log|det(A)|`` ("logabsdet", the
    second result of ``np.linalg.slogdet``): a scalar. Gradients ``g det(A) A^-T`` and
    ``g A^-T``; tangents ``det(A) tr(A^-1 tA)`` and ``tr(A^-1 tA)``. Where ``det(A)``
    overflows or underflows for an invertible ``A``, the first derivatives scale by it
    in logarithms (:func:`_times_det`) and stay right; the second derivative is nan
    there (``slogdet``'s derivatives stay in range)."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        square(shapes[0], self.name)
        return ()

    def forward(self, values: Values, params: object) -> RuleValue:
        with np.errstate(over="ignore", under="ignore"):  # an IEEE inf or 0, as NumPy's
            if self.name == "det":
                return float(np.linalg.det(values[0]))
            return float(np.linalg.slogdet(values[0])[1])

    def _scaled(self, a: FloatArray, out: RuleValue, terms: Any) -> Any:
        """``det(A) * terms`` for "det" (``terms`` for "logabsdet"), elementwise."""
        return _times_det(a, float(out), terms) if self.name == "det" else terms

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        inverse = _inverse(values[0], self.name)
        return (float(g) * self._scaled(values[0], out, inverse.T),)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        inverse = _inverse(values[0], self.name)
        return float(self._scaled(values[0], out, np.sum(inverse.T * tangents[0])))

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        inverse = _inverse(values[0], self.name)
        tA = tangents[0]
        moved = -(inverse @ tA @ inverse).T  # the tangent of A^-T
        if self.name == "det":  # and of det(A) itself: det(A) tr(A^-1 tA)
            if not _normal(float(out)):
                # det(A) overflowed or underflowed: the bracket then cancels between
                # terms of very different sizes (diag(1e300, 1e10) lost a whole entry),
                # so the product is not computed; nan says so.
                return (np.full(tA.shape, np.nan),)
            moved = float(out) * (moved + float(np.sum(inverse.T * tA)) * inverse.T)
        return (float(g) * moved,)


def _normal(x: float) -> bool:
    """A finite float that is neither 0 nor subnormal."""
    return math.isfinite(x) and abs(x) >= sys.float_info.min


def _times_det(a: FloatArray, det: float, terms: Any) -> Any:
    """``det * terms`` elementwise, ``det = det(A)`` for an invertible ``A``.

    Where ``det`` is a normal float this is the plain product. Where it
    overflowed to inf or underflowed (to 0 or a subnormal) although ``A`` is
    invertible, its logarithm from ``slogdet`` is added to each term's
    instead: ``det(diag(1e300, 1e10)) A^-T`` is ``diag(1e10, 1e300)``, where
    the product would give inf and nan (and 0 for ``diag(1e-200, 1e-200)``).
    """
    if _normal(det):
        return det * terms
    sign, logabsdet = np.linalg.slogdet(a)
    if sign == 0.0 or not math.isfinite(logabsdet):  # singular, or inf or nan inside
        return det * terms
    with np.errstate(divide="ignore", over="ignore"):  # log(0) = -inf: a zero term stays 0
        return sign * np.sign(terms) * np.exp(logabsdet + np.log(np.abs(terms)))


class SignDet(BlockRule):
    """The sign of ``det(A)`` (the first result of ``np.linalg.slogdet``): -1, 0 or 1, a
    scalar that is locally constant, so nothing is sent back and its tangent is 0."""

    linear_adjoint = True  # a VJP of nothing does not move

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        square(shapes[0], "slogdet")
        return ()

    def forward(self, values: Values, params: object) -> RuleValue:
        return float(np.linalg.slogdet(values[0])[0])

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        return (None,)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        return 0.0


class Eigh(BlockRule):
    """The eigenvalues and eigenvectors of ``(A + A^T) / 2`` (``np.linalg.eigh``, the input
    symmetrised as ``jax.numpy.linalg.eigh`` does), as one ``(n + 1, n)`` array: the
    eigenvalues, ascending, in row 0 and the eigenvectors (columns) below
    (``fa.linalg.eigh`` splits them).

    With ``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal (0 on it), the VJP of adjoints
    ``w_bar`` and ``V_bar`` is ``sym(V (diag(w_bar) + F * (V^T V_bar)) V^T)``, the JVP
    ``w_dot = diag(V^T S V)``, ``V_dot = V (F * (V^T S V))`` with ``S = sym(tA)``.
    At repeated eigenvalues ``F`` is infinite: the eigenvectors' derivatives are not
    defined there, and their gradients are inf or nan (as JAX's); the eigenvalues' are
    finite as long as no adjoint reaches the eigenvectors.
    """

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        n = square(shapes[0], "eigh")
        return (n + 1, n)

    def forward(self, values: Values, params: object) -> RuleValue:
        w, V = np.linalg.eigh(_symmetric(values[0]))
        return np.vstack([w[np.newaxis, :], V])

    @staticmethod
    def _weighted(F: FloatArray, x: FloatArray) -> FloatArray:
        """``F * x`` where a zero of ``x`` sends exactly nothing, even against an infinite
        ``F`` (repeated eigenvalues): the eigenvectors' tangents along a direction that
        does not mix a repeated pair, so that an eigenvalue-only function's second
        derivatives stay finite (``trace(A^2)``'s Hessian is exact at ``A = I``)."""
        with np.errstate(invalid="ignore"):
            product = F * x
        product[x == 0.0] = 0.0
        return product

    @staticmethod
    def _pulled(F: FloatArray, x: FloatArray) -> FloatArray:
        """``F * (V^T V_bar)``, the eigenvectors' adjoint pulled back: exactly nothing where
        no adjoint reaches the eigenvectors (``x`` zero throughout), so the eigenvalues'
        gradients stay finite at repeated eigenvalues; otherwise IEEE's products, inf or
        nan at a repeated pair (0 there too: a diagonal input's ``V^T V_bar`` is diagonal),
        as JAX and PyTorch give: the eigenvectors' derivatives are not defined, and a 0
        would be a silent finite answer."""
        if not x.any():
            return np.zeros_like(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            return F * x

    @staticmethod
    def _parts(out: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(w, V, F)`` from the output."""
        w, V = out[0], out[1:]
        with np.errstate(divide="ignore", invalid="ignore"):
            F = 1.0 / (w[np.newaxis, :] - w[:, np.newaxis])
        np.fill_diagonal(F, 0.0)
        return w, V, F

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        _, V, F = self._parts(out)
        inner = np.diag(g[0]) + self._pulled(F, V.T @ g[1:])
        return (_symmetric(V @ inner @ V.T),)

    def _moves(self, out: FloatArray, tA: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(w_dot, V_dot)`` along ``tA``."""
        _, V, F = self._parts(out)
        rotated = V.T @ _symmetric(tA) @ V
        return np.diag(rotated).copy(), V @ self._weighted(F, rotated)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        w_dot, V_dot = self._moves(out, tangents[0])
        return np.vstack([w_dot[np.newaxis, :], V_dot])

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        # A_bar = sym(V M V^T) with M = diag(w_bar) + F * (V^T V_bar) moves, at fixed
        # adjoints, by sym(dV M V^T + V dM V^T + V M dV^T), where
        # dM = dF * (V^T V_bar) + F * (dV^T V_bar) and dF[i, j] = -(dw[j] - dw[i]) F[i, j]^2.
        _, V, F = self._parts(out)
        d_w, d_V = self._moves(out, tangents[0])
        projected = V.T @ g[1:]
        M = np.diag(g[0]) + self._pulled(F, projected)
        d_F = -(d_w[np.newaxis, :] - d_w[:, np.newaxis]) * F * F
        d_M = self._weighted(d_F, projected) + self._weighted(F, d_V.T @ g[1:])
        return (_symmetric(d_V @ M @ V.T + V @ d_M @ V.T + V @ M @ d_V.T),)


__all__ = ["Cholesky", "Det", "Eigh", "Inv", "SignDet", "Solve", "SolveTriangular"]
