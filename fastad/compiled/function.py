"""``fa.compile`` and ``fa.load``: trace a function once, replay it in compiled code anywhere.

``fa.compile`` traces a function of scalars into a :class:`CompiledFunction`
(:mod:`fastad.compiled.compiled_function`) or, given an example of arrays,
a function of arrays into a :class:`BlockFunction`
(:mod:`fastad.compiled.block_function`); ``fa.load`` reads either kind back
from a file (:mod:`fastad.compiled.files`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.compiled import files
from fastad.compiled.block_function import BlockFunction
from fastad.compiled.compiled_function import CompiledFunction
from fastad.compiled.definition import ScalarDefinition
from fastad.compiled.trace import check_backend
from fastad.util.errors import flag

if TYPE_CHECKING:
    from fastad.util.hints import RealNumber, StrPath

    Traceable = Callable[..., Any]
    """The Python function ``fa.compile`` traces: scalar (or array) arguments, fastad nodes
    while tracing, returning a node or number, or a tuple or list of them."""


# The kind of function follows from the example: arrays in it make a
# BlockFunction (a sequence of numbers matches the first overload).
@overload
def compile(
    function: Traceable,
    *,
    num_inputs: int | None = None,
    example: NDArray[Any] | Sequence[RealNumber] | RealNumber | None = None,
    optimize: bool = True,
    backend: str = "auto",
    debug: bool = False,
    fast_math: bool = False,
) -> CompiledFunction: ...
@overload
def compile(
    function: Traceable,
    *,
    num_inputs: int | None = None,
    example: Sequence[ArrayLike],
    optimize: bool = True,
    wrt: int | Sequence[int] | None = None,
    batch: int | Sequence[int] | None = None,
    backend: str = "auto",
    debug: bool = False,
    fast_math: bool = False,
) -> BlockFunction: ...
@overload
def compile(
    function: None = None,
    *,
    num_inputs: int | None = None,
    example: NDArray[Any] | Sequence[RealNumber] | RealNumber | None = None,
    optimize: bool = True,
    backend: str = "auto",
    debug: bool = False,
    fast_math: bool = False,
) -> Callable[[Traceable], CompiledFunction]: ...
@overload
def compile(
    function: None = None,
    *,
    num_inputs: int | None = None,
    example: Sequence[ArrayLike],
    optimize: bool = True,
    wrt: int | Sequence[int] | None = None,
    batch: int | Sequence[int] | None = None,
    backend: str = "auto",
    debug: bool = False,
    fast_math: bool = False,
) -> Callable[[Traceable], BlockFunction]: ...
def compile(  # noqa: A001
    function: Traceable | None = None,
    *,
    num_inputs: int | None = None,
    example: Any = None,
    optimize: bool = True,
    wrt: int | Sequence[int] | None = None,
    batch: int | Sequence[int] | None = None,
    backend: str = "auto",
    debug: bool = False,
    fast_math: bool = False,
) -> CompiledFunction | BlockFunction | Callable[[Traceable], CompiledFunction | BlockFunction]:
    """Trace ``function`` once and return a :class:`CompiledFunction`.

    Parameters
    ----------
    function : callable
        Takes ``k`` scalar arguments (fastad nodes while tracing) and returns
        a node or number (scalar output) or a tuple/list of them (``m``
        outputs).
    num_inputs : int, optional
        ``k``; read from the signature when omitted.
    example : array_like of shape (k,), or a sequence of arrays, optional
        Point to trace at. By default tracing happens at the first point
        the compiled function is called with. A sequence holding arrays
        (one value per argument, e.g. ``(X, W, b)``) compiles a function of
        arrays: see :class:`BlockFunction`.
    optimize : bool
        Run the tape optimiser (:func:`fastad.optimize`: dead nodes, constant
        folding, common subexpressions) on the traced tape; values are
        identical either way, gradients agree to rounding (merged nodes sum
        their adjoints before the multiply). ``f.optimization`` reports
        what it removed.
    wrt : int or sequence of ints, optional
        For a function of arrays: the positions of the arguments to
        differentiate (JAX's ``argnums``); the others are data, and no
        gradient is computed for them (a layer's ``X @ W`` then costs one
        product backward, not two). An int gives one gradient, a sequence
        a list; by default every argument gets one.
    batch : int or sequence of ints, optional
        For a function of arrays: the positions of the arguments whose
        first axis holds the examples (the data ``X``, the labels ``y``).
        Calls may give them any number of rows, the same in each, without
        a new trace: the last, smaller batch of an epoch runs the same
        program. The function is traced twice (the second time with one
        row more) and refused, naming the node, where anything but the
        rows changes (``L / X.shape[0]`` freezes a length: ``.mean()``
        divides by the rows of each call).
    backend : {"auto", "interpret", "codegen"}
        How a function of scalars is replayed; the results are the same bit
        for bit (a nan's sign and payload aside), only the time differs. ``"interpret"``: the lanes
        interpreter (one opcode dispatch per node serves a row of points; no
        compile step). ``"codegen"``: generated straight-line kernels, one
        module per kind of call (value, gradient, VJP, JVP, Jacobian),
        lowered to LLVM IR and compiled when first used (0.2 s for a small
        program, seconds for a large one, reported on stderr) and cached on
        disk, so later processes load them in milliseconds. ``"auto"``
        (default): the interpreter first; once a kind of call has done
        ``fastad.compiled.tiers.HOT_NODE_POINTS`` of work its generated code
        compiles in a background thread and takes over (at once when an
        earlier process cached it, and from the first call while fastad's
        interpreter kernels are not compiled on this machine: they take
        about 25 s, once), never for code of more than
        ``fastad.compiled.module_cache.BUDGET_ROWS`` rows (nodes times passes).
        ``f.tier("grad")`` tells which tier runs and why. A function of
        arrays has the same three (see :class:`BlockFunction`): its
        generated code is one kernel per kind of call, with NumPy's BLAS
        for the products.
    fast_math : bool
        Off by default. Generated code calls glibc's vector math functions
        (libmvec), accurate to a few units in the last place instead of
        libm's results bit for bit: for a function of scalars, batches run
        several points at once (eight with AVX-512, four with AVX2, two with
        SSE2); for a function of arrays, the elementwise loops that LLVM
        vectorises call them on as many elements at once. Arithmetic,
        comparisons, strong zeros, guards and the recheck of non-finite
        derivatives are unchanged; a single point, the interpreter and the
        recheck still run libm. x86-64 with glibc only (an error says what
        is missing). See the "Fast math" section of the compiled-function docs.
        (A function of arrays' softmax family, within rounding of the
        interpreter in any case, runs its ``exp`` with libmvec in every mode.)
    debug : bool
        Trace on a debug tape (``fa.Tape(debug=True)``): every node keeps the
        file and line of your function that recorded it, so a checked call
        (``check=True``) names the line that made a ``nan``; the lines travel
        with pickles and saved files. It makes tracing 2-4x slower (a frame
        walk per node), so it is off by default.

    Examples
    --------
    >>> import numpy as np, fastad as fa
    >>> f = fa.compile(lambda x, y: (x * y + x) ** 2)
    >>> f.value_and_grad(np.array([2.0, 3.0]))
    (64.0, array([64., 32.]))
    """
    if function is None:
        return lambda f: compile(
            f,
            num_inputs=num_inputs,
            example=example,
            optimize=optimize,
            wrt=wrt,
            batch=batch,
            backend=backend,
            debug=debug,
            fast_math=fast_math,
        )
    check_backend(backend)
    flag(optimize, "optimize")
    flag(debug, "debug")
    if _has_arrays(example):
        return BlockFunction(function, example, wrt, debug, backend, batch, fast_math)
    if batch is not None:
        raise TypeError(
            "batch= names arguments of a function of arrays (example=(X, W, ...)); a "
            "compiled function of scalars already evaluates a batch of points: f(P), P (N, k)"
        )
    if wrt is not None:
        raise TypeError(
            "wrt= chooses arguments of a function of arrays (example=(X, W, ...)); a "
            "function of scalars computes its whole gradient in one compiled sweep: index it"
        )
    return CompiledFunction(
        function,
        num_inputs=num_inputs,
        example=example,
        optimize=optimize,
        backend=backend,
        debug=debug,
        fast_math=fast_math,
    )


def _has_arrays(example: Any) -> TypeGuard[Sequence[ArrayLike]]:
    if example is None or isinstance(example, np.ndarray):
        return False
    try:
        return any(np.ndim(value) >= 1 for value in example)
    except TypeError:
        return False


def load(path: StrPath) -> CompiledFunction | BlockFunction:
    """Read a compiled function written by :meth:`CompiledFunction.save` or
    :meth:`BlockFunction.save` (a function of arrays).

    The tape is validated like :meth:`fastad.Tape.from_arrays` (for a
    function of arrays, every block op's shape rule runs on its operands'
    shapes), and input, output and guard ids are checked, before any kernel
    sees them.
    """
    definition = files.read(path)
    if isinstance(definition, ScalarDefinition):
        compiled = CompiledFunction.__new__(CompiledFunction)
        compiled._setup(definition)  # the one constructor, as tracing and unpickling use
        return compiled
    function = BlockFunction.__new__(BlockFunction)
    function._setup(definition)
    return function
