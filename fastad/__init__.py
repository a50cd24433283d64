"""fastad: compiled reverse-mode automatic differentiation.

Record scalar expressions with ordinary Python operators onto a
structure-of-arrays tape; Numba-compiled sweeps compute values and
gradients. See README.md and docs/design.md.
"""

# The kernels first: in a checkout whose fastad/kernels link git wrote as a
# plain file, the bare ModuleNotFoundError would not say why (see
# fastad/_install_check.py).
try:
    import fastad.kernels as _kernels  # noqa: F401
except ModuleNotFoundError as _error:
    if _error.name != "fastad.kernels":
        raise
    from fastad._install_check import kernels_missing_error

    raise kernels_missing_error(__path__, _error) from _error

import fastad.eager.numpy_protocol  # noqa: F401  (registers the NumPy protocol on nodes)
import fastad.util.allocator  # noqa: F401  (large temporaries reused: its docstring says how)
from fastad.compiled import BlockFunction, CompiledFunction, compile, load
from fastad.compiled.transforms import grad, hessian, hvp, jacfwd, jacrev, value_and_grad
from fastad.derivative_checks import GradcheckError, GradcheckResult, gradcheck, hesscheck
from fastad.eager import linalg
from fastad.eager.blocks import (
    Block,
    concatenate,
    cross_entropy,
    linear,
    linear_relu,
    log_softmax,
    logsumexp,
    matmul,
    mse_loss,
    scalar_nodes,
    softmax,
    stack,
)
from fastad.eager.functions import (
    abs,
    arctan,
    arctan2,
    clip,
    cos,
    cosh,
    erf,
    exp,
    expm1,
    jvp,
    log,
    log1p,
    maximum,
    minimum,
    relu,
    sigmoid,
    sign,
    sin,
    sinh,
    softplus,
    sqrt,
    stop_gradient,
    tan,
    tanh,
    var,
    where,
)
from fastad.eager.node import Var
from fastad.eager.optimize import OptimizationReport, optimize
from fastad.eager.tape import Tape, current_tape
from fastad.util.errors import (
    BranchError,
    ConcurrentRecordingError,
    NodeIdError,
    NonFiniteError,
    NonFiniteOrigin,
    StaleNodeError,
    TraceError,
)

__version__ = "0.1.0"

__all__ = [
    "Block",
    "BlockFunction",
    "linear",
    "linear_relu",
    "mse_loss",
    "scalar_nodes",
    "BranchError",
    "ConcurrentRecordingError",
    "CompiledFunction",
    "GradcheckError",
    "GradcheckResult",
    "gradcheck",
    "hesscheck",
    "TraceError",
    "compile",
    "load",
    "where",
    "NonFiniteError",
    "OptimizationReport",
    "optimize",
    "NonFiniteOrigin",
    "NodeIdError",
    "StaleNodeError",
    "Tape",
    "Var",
    "abs",
    "cos",
    "current_tape",
    "exp",
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacrev",
    "jvp",
    "linalg",
    "value_and_grad",
    "log",
    "maximum",
    "minimum",
    "relu",
    "sigmoid",
    "sin",
    "sqrt",
    "tanh",
    "var",
    "log1p",
    "expm1",
    "tan",
    "arctan",
    "arctan2",
    "sinh",
    "cosh",
    "erf",
    "softplus",
    "sign",
    "stop_gradient",
    "clip",
    "concatenate",
    "stack",
    "matmul",
    "logsumexp",
    "softmax",
    "log_softmax",
    "cross_entropy",
]
