"""``fa.gradcheck``: first-order checks of compiled functions and plain callables.

"Gradient checking is the only thing you can trust when writing autodiff:
don't trust your own formulas" (the source articles). ``fa.gradcheck``
checks a compiled fastad function (of scalars or of arrays), or any Python
callable together with a hand-written gradient or Jacobian, against central
differences (:mod:`fastad.derivative_checks.differences`), on the flat view of
:mod:`fastad.derivative_checks.problems`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

from numpy.typing import ArrayLike

from fastad.derivative_checks.checks import check_options, run_check
from fastad.derivative_checks.problems import Function, Jvp, Vjp, problem_for

if TYPE_CHECKING:
    from fastad.compiled import BlockFunction, CompiledFunction
    from fastad.derivative_checks.result import GradcheckResult


@overload
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: Literal[True] = True,
) -> Literal[True]: ...
@overload
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: Literal[False],
) -> GradcheckResult: ...
@overload
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: bool = True,
) -> Literal[True] | GradcheckResult: ...
def gradcheck(
    function: CompiledFunction | BlockFunction | Function,
    x: ArrayLike | Sequence[ArrayLike],
    grad: Function | None = None,
    *,
    vjp: Vjp | None = None,
    jvp: Jvp | None = None,
    mode: Literal["full", "fast"] = "full",
    eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    richardson: bool = False,
    n_directions: int = 4,
    seed: int = 0,
    raise_exception: bool = True,
) -> Literal[True] | GradcheckResult:
    """Check a gradient or a full Jacobian against central differences.

    Parameters
    ----------
    function : fastad.CompiledFunction, fastad.BlockFunction or callable
        What to check:

        - a compiled function of scalars, ``fa.compile(fn)``: its
          ``jacobian`` (the gradient for a scalar output), and the
          dot-product test between its ``jvp`` and ``vjp``;
        - a compiled function of arrays, ``fa.compile(fn, example=(X, W,
          b))``: the derivative of every ``wrt`` argument (the others held
          as data), from ``value_and_grad`` for a scalar output and
          ``jacobian`` for an array output, and the dot-product test
          between its ``jvp`` and ``vjp``;
        - any callable ``f(x)`` returning a real number or an array of shape
          ``S``, given with ``grad``.
    x : array_like or sequence of array_like
        The point. For a plain callable, a real scalar or array of any shape
        (``f`` and ``grad`` are called with float64 arrays of that shape);
        for a compiled function of ``k`` scalars, shape ``(k,)``; for a
        function of arrays, its arguments like the example, ``(X, W, b)``.
    grad : callable, optional
        ``grad(x)`` returning the analytic derivative of a plain callable:
        shaped like ``x`` for a scalar output, and for an output of shape
        ``S`` the Jacobian of shape ``S + x.shape``, ``J[i..., j...] =
        d f(x)[i...] / d x[j...]`` (the layout of PyTorch's and JAX's
        ``jacobian``). Required for a plain callable, refused for a compiled
        one (it brings its own).
    vjp, jvp : callable, optional
        For a plain callable, both or neither: ``jvp(x, v)`` with ``v``
        shaped like ``x`` returns ``J v`` shaped like ``f(x)``;
        ``vjp(x, u)`` with ``u`` shaped like ``f(x)`` (a float for a scalar
        output) returns ``u^T J`` shaped like ``x``. They get the
        dot-product test ``<u, J v> == <J^T u, v>`` that compiled functions
        of scalars always get.
    mode : {"full", "fast"}
        "full" checks every Jacobian element (``2 n`` function values for
        ``n`` input elements). "fast" compares ``u^T J v`` with a central
        difference along random directions ``v`` (and random output
        weights ``u``; two function values each, and one Jacobian); on
        failure a full check locates the wrong elements. One number per
        direction: an error far below ``rtol * |u^T J v|`` (a wrong small
        entry beside a large one) can pass, so "full" is the complete check.
    eps : float, optional
        Override the relative step (the step is ``eps * max(1, |x_j|)``).
    rtol, atol : float, optional
        Tolerances; per-dtype defaults in ``DEFAULT_TOLERANCES``, for the
        point's dtype (float64 for a function of arrays, which computes in
        float64 whatever its arguments' dtype).
    richardson : bool
        Use Richardson extrapolation of steps h and h/2 for the reference.
    n_directions : int
        Random directions in fast mode.
    seed : int
        Seed of the random directions (checks are reproducible).
    raise_exception : bool
        True: return True or raise :class:`GradcheckError`. False: return a
        :class:`GradcheckResult`.

    Returns
    -------
    True or GradcheckResult
        See ``raise_exception``.

    Raises
    ------
    GradcheckError
        The check failed (and ``raise_exception`` is True). The message
        names the worst element: "input 2" (a scalar output of a 1-D
        point), "input (1, 2) of output 0", "argument 1 element (0, 2)";
        1-D positions print as integers, n-D ones as tuples.
    TypeError, ValueError
        A malformed call: not a callable, a missing or superfluous ``grad``,
        a complex, empty or non-finite point, ``f`` returning something that
        is not real, a gradient of the wrong shape (the message gives the
        expected and the received shape).

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> f = fa.compile(lambda x, y: fa.sin(x) * y)
    >>> fa.gradcheck(f, np.array([0.3, 2.0]))
    True

    A function from ``(2, 3)`` arrays to ``(2,)`` vectors and its
    Jacobian of shape ``(2, 2, 3)``:

    >>> def rows(x):
    ...     return np.sin(x).sum(axis=1)
    >>> def jacobian(x):
    ...     J = np.zeros((2, 2, 3))
    ...     J[0, 0], J[1, 1] = np.cos(x[0]), np.cos(x[1])
    ...     return J
    >>> fa.gradcheck(rows, np.arange(6.0).reshape(2, 3), grad=jacobian)
    True
    """
    check_options(mode, eps, rtol, atol, n_directions, seed)
    problem = problem_for(function, x, grad, vjp, jvp)
    return run_check(
        problem, mode, eps, rtol, atol, richardson, n_directions, seed, raise_exception
    )
