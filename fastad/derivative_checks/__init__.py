"""Gradient checking: compare analytic derivatives with finite differences.

``fa.gradcheck`` checks a compiled fastad function (of scalars or of arrays),
or any Python callable with a hand-written gradient or Jacobian, against
central differences; ``fa.hesscheck`` checks a compiled function's Hessian
against central differences of its gradient.

Everything runs on a flat view. The point (an array of any shape, or a
function of arrays' argument list) is a flat vector ``z`` of ``n`` numbers,
the output a flat vector of ``m`` numbers (``m = 1`` for a scalar), and the
analytic derivative an ``(m, n)`` matrix; a layout maps flat indices back to
what the user wrote. So kinks, Richardson extrapolation and the
worst-element report are written once and hold for every shape.

Modules, from the bottom: ``layout`` (the flat view and the user's names),
``result`` (``GradcheckResult``, ``GradcheckError``, ``DEFAULT_TOLERANCES``),
``problems`` (every kind of function as one flat problem; malformed calls
fail there), ``differences`` (the numeric reference, kinks, jumps),
``checks`` (full, fast and dot-product checks, and the run of a check),
``first_order`` (``gradcheck``) and ``hessian`` (``hesscheck``).
"""

from fastad.derivative_checks.first_order import gradcheck
from fastad.derivative_checks.hessian import hesscheck
from fastad.derivative_checks.result import DEFAULT_TOLERANCES, GradcheckError, GradcheckResult

__all__ = ["DEFAULT_TOLERANCES", "GradcheckError", "GradcheckResult", "gradcheck", "hesscheck"]
