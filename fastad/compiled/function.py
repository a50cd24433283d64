"""``fa.compile``: trace a function once, replay it in compiled code anywhere.

Tracing runs the Python function on fastad nodes once, recording its tape.
Replays never run Python per point or per node: the compiled kernels
(``fastad.kernels.sweeps.sweep_*``) evaluate the recorded program at new
input values, many points at a time in lanes (one opcode dispatch serves a
row of points) and, for large batches, on several threads.

Data-dependent control flow is guarded: every ``bool()`` taken of a node
while tracing (``if x > 0:``) is recorded with its outcome, and every replay
re-checks it. A point where the branch would go the other way raises
:class:`fastad.BranchError` naming the comparison; it never silently returns
the traced branch's result. ``fa.where`` is the branch-free alternative.
"""

from __future__ import annotations

import inspect
import io
import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeGuard, cast, overload

import numba
import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.compiled import array_kernel, batch_axis
from fastad.compiled.batch_errors import Diagnosis, check_errors, first_nonfinite_point, mask_failed
from fastad.compiled.replay import (
    GRAD,
    HESSIAN,
    HVP,
    JACOBIAN_FWD,
    JACOBIAN_REV,
    JVP,
    MODES,
    VALUES,
    VJP,
    Replay,
)
from fastad.compiled.tiers import BACKENDS, HOT_CALLS, HOT_NODE_POINTS, Tier, Tiers
from fastad.core.storage import as_stored
from fastad.eager import block_file
from fastad.eager.node import Block, Var
from fastad.eager.operators import is_number
from fastad.eager.optimize import OptimizationReport
from fastad.eager.optimize import optimize as optimize_tape
from fastad.eager.tape import Tape, storage_of
from fastad.kernels import optable, sweeps
from fastad.util import npz
from fastad.util.errors import BranchError, NonFiniteError, flag, is_int, not_real
from fastad.util.memory import check_fits
from fastad.util.progress import progress

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, IdArray, RealNumber, StrPath

    Failed = NDArray[np.bool_]
    """``errors="mask"``'s mask: True at each point whose traced branch went the other way."""

    Traceable = Callable[..., Any]
    """The Python function ``fa.compile`` traces: scalar (or array) arguments, fastad nodes
    while tracing, returning a node or number, or a tuple or list of them."""

_NO_FAILED_GUARD = sweeps.NO_FAILED_GUARD
_NO_GRADIENT = np.empty(0)
_FLOAT64 = np.dtype(np.float64)  # `dtype is _FLOAT64`: a cheaper test than ==
_COMPILED_FORMAT = "fastad-compiled-1"
_BLOCK_FORMAT = "fastad-block-function-1"


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
        compiled by Numba when first used (seconds, reported on stderr) and
        cached on disk, so later processes load them in a fraction of a
        second. ``"auto"`` (default): the interpreter first; once a kind of
        call has done ``fastad.compiled.tiers.HOT_NODE_POINTS`` of work its generated
        code compiles in a background thread and takes over (at once when an
        earlier process cached it), never for code of more than
        ``fastad.compiled.module_cache.BUDGET_ROWS`` rows (nodes times passes).
        ``f.tier("grad")`` tells which tier runs and why. A function of
        arrays has the same three (see :class:`BlockFunction`): its
        generated code is one kernel per kind of call, with NumPy's BLAS
        for the products.
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
        )
    _check_backend(backend)
    flag(optimize, "optimize")
    flag(debug, "debug")
    if _has_arrays(example):
        return BlockFunction(function, example, wrt, debug, backend, batch)
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
    )


def _check_backend(backend: object) -> None:
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
        )


def _has_arrays(example: Any) -> TypeGuard[Sequence[ArrayLike]]:
    if example is None or isinstance(example, np.ndarray):
        return False
    try:
        return any(np.ndim(value) >= 1 for value in example)
    except TypeError:
        return False


class CompiledFunction:
    """A traced function: value, gradient, JVP, VJP at one point or many.

    Points are arrays of shape ``(k,)`` (one point) or ``(N, k)`` (a batch).
    For a scalar-output function ``f(p)`` is a float and ``f.grad(p)`` has
    shape ``(k,)``; for a batch they have shapes ``(N,)`` and ``(N, k)``.
    A function returning ``m`` outputs gives ``(m,)`` / ``(N, m)`` values and
    has ``jacobian``, ``jvp`` and ``vjp`` (``grad`` needs a scalar output).

    Instances are immutable once traced, safe to call from several threads
    at once, picklable and savable (:meth:`save`, :func:`fastad.load`).
    """

    def __init__(
        self,
        function: Traceable,
        num_inputs: int | None = None,
        example: ArrayLike | None = None,
        optimize: bool = True,
        backend: str = "auto",
        debug: bool = False,
    ) -> None:
        if not callable(function):
            raise TypeError(f"fa.compile needs a callable, got {type(function).__name__}")
        _check_backend(backend)
        self._backend = backend
        self._function = function
        self._input_names, self._num_inputs = _signature(function, num_inputs)
        self._point_shape = (self._num_inputs,)
        self._scalar_output: bool | None = None  # known once traced
        self._optimize = optimize
        self._debug = debug
        self.optimization: OptimizationReport | None = None
        self._lock = threading.Lock()
        self._traced = False
        if example is not None:
            point, single = self._points(example)
            if not single:
                raise ValueError(f"example must be one point of shape ({self._num_inputs},)")
            self._trace(point[0])

    # -- tracing -----------------------------------------------------------------
    def _trace(self, point: FloatArray) -> None:
        with self._lock:
            if self._traced:
                return
            tape = Tape(trace=True, debug=self._debug)
            name = getattr(self._function, "__name__", "function")
            with tape, progress(f"tracing {name}", lambda: f"{len(tape):,} nodes recorded"):
                inputs = [
                    tape.input(float(v), name)
                    for v, name in zip(point, self._input_names, strict=True)
                ]
                result = self._function(*inputs)
            if storage_of(tape).blocks.ops:
                raise NotImplementedError(
                    "fa.compile's batched replay runs scalar programs; this function recorded "
                    "array (block) operations. Compile it as a function of arrays, "
                    "fa.compile(fn, example=(array, ...)), or record it with fa.Tape()."
                )
            scalar_output = not isinstance(result, (tuple, list))
            outputs = [
                _output_node(tape, r, i)
                for i, r in enumerate([result] if scalar_output else result)
            ]
            if not outputs:
                raise ValueError("the traced function returned no outputs")
            # Tracing is over: the tape is an ordinary tape now.
            guards = np.array(storage_of(tape).end_trace(), dtype=np.int64).reshape(-1, 2)
            input_ids = np.array([node.id for node in inputs], np.int64)
            output_ids = np.array([node.id for node in outputs], np.int64)
            sources = tape.sources
            if self._optimize:
                with progress(f"optimising the tape of {name} ({len(tape):,} nodes)"):
                    optimized = optimize_tape(tape, output_ids, keep=guards[:, 0])
                tape, self.optimization = optimized.tape, optimized.report
                input_ids, output_ids = optimized.new_ids[input_ids], optimized.new_ids[output_ids]
                guards = np.column_stack([optimized.new_ids[guards[:, 0]], guards[:, 1]])
                sources = _renumbered(sources, optimized.new_ids)
            self._install(tape, input_ids, output_ids, guards, scalar_output, sources)

    def _install(
        self,
        tape: Tape,
        inputs: IdArray,
        outputs: IdArray,
        guards: IdArray,
        scalar_output: bool,
        sources: dict[int, tuple[str, int]],
    ) -> None:
        name = getattr(self._function, "__name__", "function")
        storage_of(tape).freeze(f"the compiled function {name!r}")
        self._tape = tape
        self._replay = Replay(tape, inputs, outputs, guards, self._backend, repr(name))
        self._fast_points = self._replay.fast_points
        self._constants = self._replay.constants
        self._inputs, self._outputs, self._guards = inputs, outputs, guards
        self._k, self._m, self._g = inputs.size, outputs.size, guards.shape[0]
        self._sources = sources  # node id: (file, line) that recorded it, where known
        self._diagnosis: Diagnosis | None = None  # check=True's eager replay, made when needed
        # Last: another thread's latency path reads these to decide it may run.
        self._scalar_output = scalar_output
        self._traced = True

    # -- what it is ------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        """``k``: the number of scalar inputs."""
        return self._num_inputs

    @property
    def num_outputs(self) -> int | None:
        """``m``: the number of outputs (None before tracing)."""
        return self._m if self._traced else None

    @property
    def tape(self) -> Tape | None:
        """The traced tape (read it, print ``tape.table()``; None before tracing)."""
        return self._tape if self._traced else None

    @property
    def backend(self) -> str:
        """The replay backend asked for: ``"auto"``, ``"interpret"`` or ``"codegen"``."""
        return self._backend

    def tier(self, call: str = "grad") -> Tier:
        """Which tier replays a kind of call, and why: ``Tier(name, reason)``.

        ``call`` names a kind of call: ``"values"`` (``f(P)``), ``"grad"``
        (``value_and_grad`` and ``grad``, and a scalar output's reverse
        ``jacobian``), ``"vjp"``, ``"jvp"``, ``"jacobian_fwd"``,
        ``"jacobian_rev"``. ``name`` is ``"codegen"`` or ``"interpret"``.
        Needs a traced function.
        """
        if call not in MODES:
            raise ValueError(f"call must be one of {', '.join(map(repr, MODES))}, got {call!r}")
        if not self._traced:
            raise ValueError("this function has not been traced yet: call it once or pass example=")
        return self._replay.tier(MODES[call])

    def __repr__(self) -> str:
        name = getattr(self._function, "__name__", "function")
        state = (
            f"{len(self._tape)} nodes, {self._g} guards, backend {self._backend!r}"
            if self._traced
            else "not traced"
        )
        return f"<fastad.CompiledFunction {name}: {self._num_inputs} inputs, {state}>"

    # -- evaluation ----------------------------------------------------------------
    @overload
    def __call__(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> float | FloatArray: ...
    @overload
    def __call__(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[float | FloatArray, Failed]: ...
    def __call__(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """Output value(s) at one point or a batch.

        Every evaluating method takes ``errors`` and ``check``:

        - ``errors="raise"`` (default): a point where a traced branch goes
          the other way raises :class:`fastad.BranchError`, which lists every
          such point (``error.indices``). ``errors="mask"``: those points get
          ``nan`` in every result and the call returns ``(result, failed)``,
          ``failed`` a boolean array over the points (0-d for one point),
          so one bad point need not fail a batch of 10^6.
        - ``check=True``: after the call, the first point whose finite inputs
          (and direction) gave a non-finite value or derivative is replayed
          eagerly, and :class:`fastad.NonFiniteError` names that point
          (``error.point``) and the node that made the ``nan``/``inf``
          (``error.origin``: op, label, and the source line that recorded it
          when traced in this process). The batch runs at full speed; the
          check reads its results.
        """
        points, single = self._points(points)
        if single and self._scalar_output and errors == "raise" and not check and threads is None:
            return self._point(points[0], VALUES, _NO_GRADIENT)
        values, _, failed = self._run(points, VALUES, None, threads, errors, check)
        return self._result(self._shape_values(values, single), failed, single)

    @overload
    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> tuple[float | FloatArray, FloatArray]: ...
    @overload
    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[tuple[float | FloatArray, FloatArray], Failed]: ...
    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``(value, gradient)``; needs a scalar output. ``errors``, ``check``: see ``__call__``."""
        if (
            type(points) is np.ndarray
            and points.dtype is _FLOAT64
            and points.shape == self._point_shape
            and points.flags.carray  # C-contiguous, aligned, writeable: the kernels' type
            and self._scalar_output
            and errors == "raise"
            and not check
            and threads is None
        ):
            # The latency path: one float64 point, no conversion or copy, and
            # for a program without guards, once generated code runs it, one
            # kernel call and nothing else.
            gradient = np.empty(self._k)
            kernel = self._fast_points.get(GRAD)
            if kernel is not None:
                return kernel(points, gradient, self._constants), gradient
            return self._point(points, GRAD, gradient), gradient
        points, single = self._points(points)
        self._require_scalar("value_and_grad")
        if single and errors == "raise" and not check and threads is None:
            gradient = np.empty(self._k)
            return self._point(points[0], GRAD, gradient), gradient
        values, gradients, failed = self._run(points, GRAD, None, threads, errors, check)
        result = (self._shape_values(values, single), gradients[0] if single else gradients)
        return self._result(result, failed, single)

    @overload
    def grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """Gradient with respect to the inputs; needs a scalar output."""
        if errors == "mask":
            (_, gradients), failed = self.value_and_grad(
                points, threads, errors="mask", check=check
            )
            return gradients, failed
        check_errors(errors)
        return self.value_and_grad(points, threads, check=check)[1]

    @overload
    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> tuple[float | FloatArray, FloatArray]: ...
    @overload
    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[tuple[float | FloatArray, FloatArray], Failed]: ...
    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``(value, u^T J)``: the outputs and the cotangent ``u`` pulled back to the inputs.

        ``u`` has the shape of the output: a float (or ``(N,)``) for a scalar
        output, ``(m,)`` (or ``(N, m)``) otherwise.
        """
        points, single = self._points(points)
        u = _real_array(cotangents, "cotangent")
        expected = (points.shape[0], self._m)
        if self._scalar_output:
            if single and u.shape == (1,):
                u = u.reshape(())  # one cotangent for the one output
            u = u.reshape(-1, 1) if u.ndim == (0 if single else 1) else u
        elif single and u.shape == (self._m,):
            u = u.reshape(1, self._m)
        if u.shape != expected:
            raise ValueError(
                f"cotangent shape {np.shape(cotangents)} does not match the output: expected "
                f"{self._output_shape(single, points.shape[0])}"
            )
        values, pulled, failed = self._run(points, VJP, _kernel_array(u), threads, errors, check)
        pulled = pulled[0] if single else pulled
        return self._result((self._shape_values(values, single), pulled), failed, single)

    @overload
    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> tuple[float | FloatArray, float | FloatArray]: ...
    @overload
    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[tuple[float | FloatArray, float | FloatArray], Failed]: ...
    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``(value, J v)``: the outputs and their directional derivative along ``v``.

        ``v`` has the shape of the points.
        """
        points, single = self._points(points)
        v = _real_array(tangents, "tangent")
        v = v.reshape(1, -1) if (single and v.ndim <= 1) else v
        if v.shape != points.shape:
            raise ValueError(
                f"tangent shape {np.shape(tangents)} does not match the points' shape "
                f"{points.shape[1:] if single else points.shape}"
            )
        values, pushed, failed = self._run(points, JVP, _kernel_array(v), threads, errors, check)
        result = (self._shape_values(values, single), self._shape_values(pushed, single))
        return self._result(result, failed, single)

    @overload
    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        mode: str | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        mode: str | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        mode: str | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``J``: shape ``(m, k)`` at one point, ``(N, m, k)`` for a batch.

        For a scalar output the gradient's shapes, ``(k,)`` and ``(N, k)``.

        Each point's Jacobian comes from one forward pass and then ``k``
        tangent passes (``mode="fwd"``, one per input) or ``m`` adjoint
        passes (``mode="rev"``, one per output); by default the cheaper:
        forward when ``k <= m``. The two agree to rounding. Nothing larger
        than the result is allocated besides the ``(N, m)`` values; a result
        that cannot fit in the memory available raises ``MemoryError``,
        naming its size, before anything is allocated.
        """
        points, single = self._points(points)
        self._require_traced()
        n_points, m, k = points.shape[0], self._m, self._k
        if mode is None:
            mode = "fwd" if k <= m else "rev"
        if mode not in ("fwd", "rev"):
            raise ValueError(f'mode must be "fwd", "rev" or None, got {mode!r}')
        check_fits(
            n_points * m * (k + 1) * 8,
            f"the Jacobian of {n_points:,} points ({m:,} outputs x {k:,} inputs each, with "
            "the values)",
            "use jvp / vjp for the products you need",
        )
        sweep_mode = JACOBIAN_FWD if mode == "fwd" else JACOBIAN_REV
        if sweep_mode == JACOBIAN_REV and m == 1:
            sweep_mode = GRAD  # the same single seeded pass, and the same bits
        _, rows, failed = self._run(points, sweep_mode, None, threads, errors, check)
        jac = rows.reshape(n_points, m, k)
        if self._scalar_output:
            jac = jac[:, 0]  # like grad: (k,) or (N, k)
        return self._result(jac[0] if single else jac, failed, single)

    # -- second order --------------------------------------------------------------
    @overload
    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``H v``: the Hessian of a scalar output times a direction, per point.

        ``directions`` has the shape of the points: ``(k,)`` for one point,
        ``(N, k)`` for a batch, and so has the result. Forward-over-reverse
        (the tangent of the gradient's sweep along ``v``), exact to rounding
        like every derivative here; no Hessian is formed. A zero direction
        is a strong zero, as in :meth:`jvp`.
        """
        if (
            type(points) is np.ndarray
            and type(directions) is np.ndarray
            and points.dtype is _FLOAT64
            and directions.dtype is _FLOAT64
            and points.shape == self._point_shape
            and directions.shape == self._point_shape
            and points.flags.carray
            and directions.flags.carray
            and self._scalar_output
            and errors == "raise"
            and not check
            and threads is None
        ):
            # The latency path, as value_and_grad's: no conversion, no copy.
            return self._point_hvp(points, directions)
        points, single = self._points(points)
        self._require_scalar("hvp")
        v = _real_array(directions, "direction")
        v = v.reshape(1, -1) if (single and v.ndim <= 1) else v
        if v.shape != points.shape or (single and np.ndim(directions) > 1):
            raise ValueError(
                f"direction shape {np.shape(directions)} does not match the points' shape "
                f"{points.shape[1:] if single else points.shape}"
            )
        v = _kernel_array(v)
        if single and errors == "raise" and not check and threads is None:
            return self._point_hvp(points[0], v[0])
        _, products, failed = self._run(points, HVP, v, threads, errors, check)
        return self._result(products[0] if single else products, failed, single)

    def _point_hvp(self, point: FloatArray, direction: FloatArray) -> FloatArray:
        product = np.empty(self._k)
        _, failed = self._replay.point_hvp(point, direction, product)
        if failed != _NO_FAILED_GUARD:
            self._raise_branch_error(point.reshape(1, -1), np.array([failed]))
        return product

    def hessp(self, x: ArrayLike, p: ArrayLike) -> FloatArray:
        """``H(x) p`` at one point, in :func:`scipy.optimize.minimize`'s argument order.

        ``minimize(f, x0, jac=f.grad, hessp=f.hessp, method="Newton-CG")``
        works as written (also ``trust-ncg``, ``trust-krylov``, ``trust-constr``).
        """
        point = _real_array(x, "x")
        if point.shape != self._point_shape:
            raise ValueError(
                f"hessp takes one point of shape {self._point_shape}, got {point.shape}"
            )
        return self.hvp(point, p)

    @overload
    def hessian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def hessian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def hessian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """The Hessian of a scalar output: ``(k, k)`` at one point, ``(N, k, k)`` for a batch.

        Built in the sweeps from ``k`` Hessian-vector products, one per
        input, after one forward and one adjoint pass per point (never from
        finite differences). Symmetric up to rounding: row ``t`` is
        ``H e_t``. ``hess=f.hessian`` with ``method="trust-constr"`` works as
        written. A result that cannot fit in the memory available raises
        ``MemoryError`` before anything is allocated.
        """
        points, single = self._points(points)
        self._require_traced()
        self._require_scalar("hessian")
        n_points, k = points.shape[0], self._k
        check_fits(
            n_points * (k * k + 1) * 8,
            f"the Hessian of {n_points:,} points ({k:,} x {k:,} each, with the values)",
            "use hvp for the products you need",
        )
        _, rows, failed = self._run(points, HESSIAN, None, threads, errors, check)
        hessians = rows.reshape(n_points, k, k)
        return self._result(hessians[0] if single else hessians, failed, single)

    # -- machinery -----------------------------------------------------------------
    def _points(self, points: ArrayLike) -> tuple[FloatArray, bool]:
        """Validate and convert points: ``(array (N, k), single point?)``.

        Traces the function at the first point if it has not been traced.
        """
        k = self._num_inputs
        if (
            type(points) is np.ndarray
            and points.dtype is _FLOAT64
            and points.shape == (k,)
            and points.flags.carray
            and self._traced
        ):
            return points.reshape(1, k), True  # the latency path: no copy, no checks left
        array = _real_array(points, "point")
        if array.ndim == 1 and array.shape[0] == k:
            array, single = _kernel_array(array).reshape(1, k), True
        elif array.ndim == 0 and k == 1:
            array, single = _kernel_array(array).reshape(1, 1), True
        elif array.ndim == 2 and array.shape[1] == k:
            array, single = _kernel_array(array), False
        else:
            hint = (
                ""
                if self._traced
                else ". fastad reads a plain array as one point: the values of the "
                f"function's {k} scalar arguments. For a function of arrays, compile with "
                "one array per argument in a tuple: fa.compile(fn, example=(x,)) for fn(x)"
            )
            raise ValueError(
                f"expected one point of shape ({k},) or a batch of shape (N, {k}) for a "
                f"function of {k} inputs, got shape {array.shape}{hint}"
            )
        if not self._traced and array.shape[0]:
            self._trace(array[0])
        return array, single

    def _require_traced(self) -> None:
        """Refuse what needs the traced program (its sizes) before any point traced it."""
        if not self._traced:
            raise ValueError("cannot evaluate an untraced function on an empty batch")

    def _require_scalar(self, what: str) -> None:
        if self._traced and not self._scalar_output:
            outputs = (
                "returns a sequence of one output, not the output itself"
                if self._m == 1
                else f"has {self._m} outputs"
            )
            raise ValueError(
                f"{what} needs a scalar output; this function {outputs}: use jacobian, vjp or jvp"
            )

    def _output_shape(self, single: bool, n_points: int) -> str:
        if self._scalar_output:
            return "a float" if single else f"({n_points},)"
        return f"({self._m},)" if single else f"({n_points}, {self._m})"

    def _shape_values(self, values: FloatArray, single: bool) -> float | FloatArray:
        if self._scalar_output:
            return float(values[0, 0]) if single else values[:, 0].copy()
        return values[0].copy() if single else values

    def _point(self, point: FloatArray, mode: int, gradient: FloatArray) -> float:
        """One point of a scalar-output function (VALUES or GRAD): the value."""
        value, failed = self._replay.point(point, mode, gradient)
        if failed != _NO_FAILED_GUARD:
            self._raise_branch_error(point.reshape(1, -1), np.array([failed]))
        return value

    def _run(
        self,
        points: FloatArray,
        mode: int,
        directions: FloatArray | None,
        threads: int | None,
        errors: str = "raise",
        check: bool = False,
    ) -> tuple[FloatArray, FloatArray, Failed | None]:
        """``(values, derivatives, failed)``; ``failed`` is None unless ``errors="mask"``."""
        self._require_traced()
        check_errors(errors)
        flag(check, "check")
        _thread_count(threads)  # checked even where one point runs on the calling thread
        values, derivatives, status = self._replay.run(
            points, mode, directions, _thread_count(threads)
        )
        failed = None
        if errors == "mask":
            failed = mask_failed(values, derivatives, status)
        elif self._g and points.shape[0] and status.max() != _NO_FAILED_GUARD:
            self._raise_branch_error(points, status)
        if check:
            self._check(points, mode, directions, values, derivatives, failed)
        return values, derivatives, failed

    def _result(self, result: Any, failed: Failed | None, single: bool) -> Any:
        """``result``, or ``(result, failed)`` for ``errors="mask"`` (0-d for one point)."""
        if failed is None:
            return result
        return result, (failed.reshape(()) if single else failed)

    def _check(
        self,
        points: FloatArray,
        mode: int,
        directions: FloatArray | None,
        values: FloatArray,
        derivatives: FloatArray,
        failed: Failed | None,
    ) -> None:
        """``check=True``: raise ``NonFiniteError`` for the first point that made a nan/inf."""
        computed = self._replay.derivative_width(mode) > 0
        index = first_nonfinite_point(
            points, directions, values, derivatives if computed else None, failed
        )
        if index is None:
            return
        with self._lock:
            if self._diagnosis is None:
                self._diagnosis = Diagnosis(self._tape, self._inputs, self._outputs, self._sources)
        values_bad = not np.isfinite(values[index]).all()
        raise self._diagnosis.error(points, index, values_bad, computed)

    def _raise_branch_error(self, points: FloatArray, status: IdArray) -> NoReturn:
        raise self._branch_error(points, status)

    def _branch_error(self, points: FloatArray, status: IdArray) -> BranchError:
        """The error for the points whose ``status`` names a failed guard (some do)."""
        failing = np.flatnonzero(status != _NO_FAILED_GUARD)
        guards, first = np.unique(status[failing], return_index=True)
        described = [
            _describe(self._tape, int(self._guards[guard, 0]))
            for guard in guards[np.argsort(first)]
        ]
        truth = bool(self._guards[int(status[failing[0]]), 1])
        return BranchError(
            described[0],
            truth,
            failing,
            tuple(points[failing[0]].tolist()),
            points.shape[0],
            tuple(described[1:]),
        )

    # -- pickling and files ----------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        if not self._traced:
            raise TypeError(
                "this compiled function has not been traced yet: call it once or pass "
                "example= to fa.compile before pickling or saving it"
            )
        files, located = _source_table(self._sources)
        return {
            "format": _COMPILED_FORMAT,
            "opcode": self._tape.opcode.copy(),
            "in0": self._tape.in0.copy(),
            "in1": self._tape.in1.copy(),
            "val": _leaf_values(self._tape),
            "inputs": self._inputs,
            "outputs": self._outputs,
            "guards": self._guards,
            "sources": located,
            "meta": json.dumps(
                {
                    "scalar_output": self._scalar_output,
                    "input_names": self._input_names,
                    "labels": {str(i): v for i, v in self._tape.labels.items()},
                    "name": getattr(self._function, "__name__", "function"),
                    "backend": self._backend,
                    "source_files": files,
                }
            ),
        }

    def __getstate__(self) -> dict[str, Any]:
        # The .npz bytes, compressed: a 10^4-node program pickles to tens of kB
        # and is validated on the way in like a file.
        return {"npz": _npz_bytes(self._state())}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping):
            raise ValueError(
                f"pickle: not a fastad compiled function (its state is {type(state).__name__})"
            )
        if set(state) == {"npz"} and isinstance(state["npz"], bytes):
            arrays = npz.read_npz(io.BytesIO(state["npz"]), "compiled function", "pickle")
        else:
            arrays = dict(state)
        self.__dict__.update(_from_state(arrays).__dict__)

    def save(self, path: StrPath) -> None:
        """Write the traced function to a compressed NumPy ``.npz`` file (no pickle inside)."""
        path = npz.file_path(path, "save")
        with open(path, "wb") as file:
            file.write(_npz_bytes(self._state()))


class BlockFunction:
    """A traced function of arrays (blocks): ``fa.compile(fn, example=(X, W, b))``.

    Calls take one value per argument, shaped like the example's:
    ``f((X, W, b))`` gives the output (a float, or an array for an array
    output); ``f.value_and_grad((X, W, b))`` gives the scalar output and a
    list of gradients shaped like the arguments. An argument of another
    shape, rank or a non-real dtype raises an error naming the argument and
    both shapes (the function is not traced again: trace one per shape),
    except along the batch axis of the arguments named by ``batch=``:
    those take any number of rows, the same in each (``f.rows`` is the
    traced number). Calls on one function are serialised by a lock.

    Two tiers run a call, as for functions of scalars (``backend``):

    - the interpreter replays the traced tape: its forward and backward
      sweeps, the registry's block rules with the exact rules for strong
      zeros; the tape then holds that call's values and gradients;
    - generated code (``fastad.kernels.blockgen``) runs the whole program
      as one compiled kernel: loops for the elementwise ops, NumPy's own
      BLAS for the products, row loops for the softmax family, buffers
      allocated once. Its gradients are computed plainly; a call whose
      gradients hold a nan is computed again by the interpreter, so both
      tiers give the exact rules' results. Values and gradients equal the
      interpreter's bit for bit except in the softmax family and the
      cross-entropy (NumPy's vectorised ``exp`` against libm's) and where
      a product's row holds an inf: within 1e-13 of the gradient's largest
      element. A call with ``check=True`` always runs the interpreter.
      ``f.tier("grad")`` says which tier runs and why; a program with an
      op generated code has no rule for stays interpreted, and the reason
      says which op.

    ``backend="auto"`` interprets first and builds the generated kernel in
    a background thread once the calls have done
    ``fastad.compiled.tiers.HOT_NODE_POINTS`` element operations, or after
    ``fastad.compiled.tiers.HOT_CALLS`` calls of a small function (at once when an
    earlier process cached it). It pickles and saves (:meth:`save`,
    :func:`fastad.load`) like a function of scalars; it is not optimised.
    """

    def __init__(
        self,
        function: Traceable,
        example: Sequence[ArrayLike],
        wrt: int | Sequence[int] | None = None,
        debug: bool = False,
        backend: str = "auto",
        batch: int | Sequence[int] | None = None,
    ) -> None:
        if not callable(function):
            raise TypeError(f"fa.compile needs a callable, got {type(function).__name__}")
        names = _argument_names(function, len(example))
        self._wrt = _positions(wrt, len(example))
        positions = () if batch is None else batch_axis.positions(batch, example)
        values = [_block_argument(v, i) for i, v in enumerate(example)]
        self._lock = threading.Lock()
        tape, self._inputs, self._output, self._guards = _trace(function, values, names, debug)
        self._batch: tuple[int, ...] = positions
        self._batch_axes: dict[int, batch_axis.Axes] = {}
        if positions:
            rows = np.shape(values[positions[0]])[0]
            probe = [
                batch_axis.with_one_more_row(v) if i in positions else v
                for i, v in enumerate(values)
            ]
            try:
                second, _, _, guards = _trace(function, probe, names, debug)
            except Exception as error:
                raise ValueError(
                    f"batch=: tracing the function again with {rows + 1} rows (the batch "
                    f"arguments' last row repeated) failed: {type(error).__name__}: {error}. "
                    "A program for any number of rows makes nothing of the batch's length "
                    "(an array of the example's rows, a length in the code)"
                ) from error
            self._batch_axes = batch_axis.batch_axes(
                storage_of(tape),
                storage_of(second),
                rows,
                (self._guards, guards),
                [node.id for node in self._inputs],
            )
        self._name = getattr(function, "__name__", "function")
        storage_of(tape).freeze(f"the compiled function of arrays {self._name!r}")
        self._tape = tape
        self._shapes = [np.shape(v) for v in values]
        self.optimization: OptimizationReport | None = None  # BlockFunction does not optimise
        integers = [np.asarray(v).dtype.kind in "iu" and np.ndim(v) > 0 for v in example]
        self._install_code(backend, integers)

    def _install_code(self, backend: str, integers: list[bool]) -> None:
        """The generated tier: its code (None where it cannot run) and the tier choice."""
        self._backend = backend
        self._integers = integers
        tape = self._tape
        elements = sum(
            math.prod(array_kernel.shape_of(storage_of(tape), i)) for i in range(len(tape))
        )  # element operations per call (a scalar counts 1): the tiers' measure of work
        self._work = max(elements, HOT_NODE_POINTS // HOT_CALLS)
        self._code: array_kernel.BlockCode | None = None
        self._tiers: Tiers | None = None
        self._no_code = ""
        if backend == "interpret":
            self._no_code = 'backend="interpret"'
            return
        try:
            code = array_kernel.build(
                storage_of(tape),
                [node.id for node in self._inputs],
                self._output.id,
                self._wrt_positions()[0],
                self._guards,
                integers,
                f"the function of arrays {self._name!r}",
                self._batch_axes,
            )
        except array_kernel.Unsupported as error:
            if backend == "codegen":
                raise NotImplementedError(
                    f'backend="codegen": {error}; use backend="auto" or "interpret", which '
                    "replay the tape"
                ) from None
            self._no_code = f'backend="auto": {error}; interpreted'
            return
        self._code = code
        self._tiers = Tiers(backend, code)

    @property
    def tape(self) -> Tape:
        """The traced tape; after an interpreted call it holds that call's values and gradients."""
        return self._tape

    @property
    def wrt(self) -> tuple[int, ...] | None:
        """The argument positions gradients are computed for (None: every argument)."""
        return None if self._wrt is None else tuple(self._wrt[0])

    @property
    def backend(self) -> str:
        """``"auto"``, ``"interpret"`` or ``"codegen"``, as compiled."""
        return self._backend

    @property
    def single_wrt(self) -> bool:
        """True when ``wrt`` was one int: gradients (and directions) come one, not as a list."""
        return self._wrt is not None and self._wrt[1]

    @property
    def num_inputs(self) -> int:
        """The number of arguments a call takes."""
        return len(self._inputs)

    @property
    def batch(self) -> tuple[int, ...]:
        """The positions of the arguments whose first axis is the batch (``batch=``)."""
        return self._batch

    @property
    def rows(self) -> int | None:
        """The number of rows traced along the batch axis (None without ``batch=``)."""
        return self._shapes[self._batch[0]][0] if self._batch else None

    def tier(self, call: str = "grad") -> Tier:
        """Which tier runs ``call`` now, and why: ``"grad"`` (:meth:`value_and_grad`,
        :meth:`grad`), ``"values"`` (:meth:`__call__`), ``"vjp"`` (:meth:`vjp`),
        ``"jvp"`` (:meth:`jvp`) or ``"hvp"`` (:meth:`hvp`, :meth:`hessian`). A question:
        it starts nothing."""
        if call not in array_kernel.MODES:
            raise ValueError(f'call must be "grad", "values", "vjp", "jvp" or "hvp", got {call!r}')
        if self._code is None or self._tiers is None:
            return Tier("interpret", self._no_code)
        if call not in self._code.modes:
            reason = self._code.unsupported.get(call)
            if reason is not None:
                return Tier("interpret", f"no generated code: {reason}")
            if call in ("grad", "hvp"):
                return Tier("interpret", "the output is an array: it has no gradient")
            if call == "jvp":
                return Tier("interpret", "the output is an argument: its JVP is the direction")
            return Tier("interpret", "the output is an argument: its VJP is the cotangent")
        return self._tiers.tier(call)

    def generated_source(self, call: str = "grad") -> str:
        """The text of the generated module for ``call`` (``"grad"`` or ``"values"``)."""
        if self._code is None or call not in self._code.modes:
            raise ValueError(f"no generated code for {call!r}: {self.tier(call).reason}")
        return self._code.source(call)

    def blas_calls(self, call: str = "grad") -> list[str]:
        """The BLAS calls of the generated kernel for ``call``, one line each, in order:
        ``gemm(trans_a, trans_b, A, B, C)`` is ``C = op(A) @ op(B)`` by ``cblas_dgemm``
        (``cblas_dgemv`` or ``cblas_ddot`` where ``C`` is one row, column or element, as
        ``np.matmul`` picks), ``gemv(trans, A, x, y)`` ``cblas_dgemv``, ``dot(x, y)``
        ``cblas_ddot``; operands are node values (``v<id>``), adjoints (``d<id>``) and
        scratch buffers (``s_...``)."""
        if self._code is None or call not in self._code.modes:
            raise ValueError(f"no generated code for {call!r}: {self.tier(call).reason}")
        return self._code.products(call)

    def __repr__(self) -> str:
        return (
            f"<fastad.BlockFunction {self._name}: inputs {self._shapes}, {len(self._tape)} nodes>"
        )

    def __call__(
        self, arguments: Iterable[ArrayLike], *, check: bool = False
    ) -> float | FloatArray:
        """The output at new argument values.

        ``check=True`` raises :class:`fastad.NonFiniteError` naming the node
        (op, label, and its line with ``debug=True``) that turned finite
        arguments into ``nan``/``inf``.
        """
        checked = self._checked(arguments)
        with self._lock:
            if not check and self._generated("values"):
                status, value, _ = cast("array_kernel.BlockCode", self._code).run(
                    "values", checked, None, self._call_rows(checked)
                )
                if status == array_kernel.OK:
                    return cast("float | FloatArray", value)
            self._replay(checked, check)  # raises what the generated call refused
            return self._output_value()

    def value_and_grad(
        self,
        arguments: Iterable[ArrayLike],
        *,
        check: bool = False,
        out: Sequence[NDArray[np.float64] | None] | NDArray[np.float64] | None = None,
    ) -> tuple[float, Any]:
        """``(value, gradients)``; needs a scalar output.

        The gradients are a list with one per argument, or per position of
        ``wrt`` (a single one for an int ``wrt``), shaped like the arguments.
        ``out`` gives arrays to write them into, in that form (a list with
        None where a fresh array will do; a single array for an int
        ``wrt``): float64, C-contiguous, writable, of the argument's shape;
        the results are those arrays. After an interpreted call without
        ``wrt`` the tape's ``.grad`` holds this call's adjoints too.
        ``check=True``: as for :meth:`__call__`, and for the gradients the
        node whose local derivative (or block rule) made a finite adjoint
        non-finite.
        """
        if isinstance(self._output, Block):
            raise ValueError("value_and_grad needs a scalar output; this function returns an array")
        checked = self._checked(arguments)
        targets = None if out is None else self._out_arrays(out, checked)
        single = self._wrt is not None and self._wrt[1]
        with self._lock:
            if not check and self._generated("grad"):
                status, value, found = cast("array_kernel.BlockCode", self._code).run(
                    "grad", checked, targets, self._call_rows(checked)
                )
                if status == array_kernel.OK:  # arrays, and floats for scalars
                    gradients = cast("list[Any]", found)
                    return value, gradients[0] if single else gradients
            value, gradients = self._interpreted_gradients(checked, check)
            if targets is not None:
                gradients = [
                    g if target is None else _copied_into(target, g)
                    for g, target in zip(gradients, targets, strict=True)
                ]
            return value, _by_argument(gradients, single)

    def _interpreted_gradients(self, checked: list[Any], check: bool) -> tuple[float, list[Any]]:
        self._replay(checked, check)
        value = cast(float, self._output_value())  # a scalar output: a float
        if self._wrt is None:
            self._tape.backward(self._output, check=check)
            # Fresh arrays, as generated code gives (a block's .grad is the tape's, read-only).
            grads = [node.grad for node in self._inputs]
            return value, [g.copy() if isinstance(g, np.ndarray) else g for g in grads]
        ids = [self._inputs[i].id for i in self._wrt[0]]
        gradients = self._tape.gradient(self._output, ids)
        if check and not all(np.isfinite(g).all() for g in gradients):
            self._tape.backward(self._output, check=True)  # raises, naming the edge
        return value, list(gradients)

    def _generated(self, mode: str) -> bool:
        """Whether generated code runs this call (counting the work while it does not)."""
        code, tiers = self._code, self._tiers
        if code is None or tiers is None or mode not in code.modes:
            return False
        return tiers.ready(mode, self._work)

    def _out_arrays(
        self, out: Any, arguments: list[Any]
    ) -> list[NDArray[np.float64] | None] | None:
        """``out`` checked: one writable float64 C-contiguous array (or None) per gradient,
        sharing memory with no argument and no other ``out`` array."""
        if out is None:
            return None
        positions, single = self._wrt or (list(range(len(self._inputs))), False)
        listed = [out] if single else out
        if not isinstance(listed, (list, tuple)) or len(listed) != len(positions):
            form = "one array" if single else f"a list of {len(positions)} (arrays or None)"
            raise TypeError(f"out must be {form}, one per gradient, got {type(out).__name__}")
        checked: list[NDArray[np.float64] | None] = []
        shapes = self._call_shapes(arguments)
        for position, array in zip(positions, listed, strict=True):
            shape = shapes[position]
            if array is None:
                checked.append(None)
                continue
            if not shape:
                raise ValueError(
                    f"out for argument {position}: a scalar argument's gradient is a float; "
                    "give None there"
                )
            if (
                not isinstance(array, np.ndarray)
                or array.dtype != np.float64
                or array.shape != shape
                or not array.flags.c_contiguous
                or not array.flags.writeable
            ):
                described = (
                    f"{array.dtype} array of shape {array.shape}"
                    + ("" if array.flags.c_contiguous else ", not C-contiguous")
                    + ("" if array.flags.writeable else ", read-only")
                    if isinstance(array, np.ndarray)
                    else type(array).__name__
                )
                raise ValueError(
                    f"out for argument {position} must be a writable C-contiguous float64 array "
                    f"of shape {shape}, got {described}"
                )
            others = [a for a in arguments if isinstance(a, np.ndarray)] + [
                a for a in checked if a is not None
            ]
            if any(np.may_share_memory(array, other) for other in others):
                raise ValueError(
                    f"out for argument {position} shares memory with an argument or another "
                    "out array: the gradients would overwrite what the call reads"
                )
            checked.append(array)
        return checked

    def grad(self, arguments: Iterable[ArrayLike], *, check: bool = False) -> Any:
        """The gradients of :meth:`value_and_grad`; needs a scalar output."""
        return self.value_and_grad(arguments, check=check)[1]

    def hvp(
        self, arguments: Iterable[ArrayLike], directions: ArrayLike | Iterable[ArrayLike]
    ) -> Any:
        """``H v`` at the arguments: one product per argument (or ``wrt`` position).

        ``directions`` holds one array per argument of :meth:`value_and_grad`'s
        gradients (a single one for an int ``wrt``), shaped like it; the
        result has the gradients' form. Forward-over-reverse: generated
        code where ``f.tier("hvp")`` says so (a result holding a nan is
        computed again by the interpreter), else through the block rules
        (:func:`fastad.hvp`) on the interpreter, where a block op without a
        second-order rule raises ``NotImplementedError`` naming it. Needs a
        scalar output.
        """
        if isinstance(self._output, Block):
            raise ValueError("hvp needs a scalar output; this function returns an array")
        checked = self._checked(arguments)
        along = self._directions(directions, self._call_shapes(checked))
        with self._lock:
            if self._generated("hvp"):
                status, _, found = self._generated_along("hvp", checked, along)
                if status == array_kernel.OK:
                    return _by_argument(cast("list[Any]", found), self._wrt_positions()[1])
        _, products = self._swept(checked, lambda ids: self._tape.hvp(self._output, ids, along))
        return _by_argument(products, self._wrt_positions()[1])

    def jvp(
        self, arguments: Iterable[ArrayLike], directions: ArrayLike | Iterable[ArrayLike]
    ) -> tuple[float | FloatArray, float | FloatArray]:
        """``(value, J v)``: the output and its derivative along ``directions``.

        ``directions`` as for :meth:`hvp`: one array per gradient's argument
        (a single one for an int ``wrt``), shaped like it; the other
        arguments hold still. ``J v`` has the output's shape (a float for a
        scalar output). One forward-mode pass: generated code where
        ``f.tier("jvp")`` says so, else the interpreter's sweep; zero
        directions are strong zeros (a generated call whose tangent holds a
        nan is computed again by the interpreter).
        """
        checked = self._checked(arguments)
        along = self._directions(directions, self._call_shapes(checked))
        with self._lock:
            if self._generated("jvp"):
                status, value, found = self._generated_along("jvp", checked, along)
                if status == array_kernel.OK:
                    return value, found
        value, tangent = self._swept(
            checked, lambda ids: self._tape.tangent(self._output, ids, along)
        )
        if isinstance(tangent, np.ndarray) and tangent.ndim:
            return value, tangent + 0.0
        return value, float(tangent) + 0.0

    def vjp(self, arguments: Iterable[ArrayLike], cotangent: ArrayLike) -> tuple[Any, Any]:
        """``(value, u^T J)``: the output and ``cotangent`` pulled back to the arguments.

        ``cotangent`` has the output's shape (a float for a scalar output);
        the result has :meth:`value_and_grad`'s form. One backward pass
        seeded with ``cotangent`` (so an array output needs no reduction):
        generated code where ``f.tier("vjp")`` says so, else the
        interpreter's sweep; its zeros are strong zeros (a generated call
        whose result holds a nan is computed again by the interpreter).
        """
        checked = self._checked(arguments)
        rows = self._call_rows(checked)
        u = np.asarray(cotangent, dtype=np.float64)
        shape = self._output_shape_at(rows)
        if u.shape != shape:
            raise ValueError(f"the cotangent has shape {u.shape}, the output {shape}")
        if not np.isfinite(u).all():
            raise ValueError("the cotangent must be finite")
        single = self._wrt_positions()[1]
        with self._lock:
            if self._generated("vjp"):
                seed = float(u) if not shape else array_kernel.kernel_argument(u)
                status, value, found = cast("array_kernel.BlockCode", self._code).run(
                    "vjp", checked, None, rows, seed
                )
                if status == array_kernel.OK:
                    return value, _by_argument(cast("list[Any]", found), single)
        value, pulled = self._swept(checked, lambda ids: self._tape.vjp(self._output, ids, u))
        return value, _by_argument(pulled, single)

    def jacobian(self, arguments: Iterable[ArrayLike]) -> Any:
        """The Jacobian at the arguments: per gradient's argument, d output / d argument
        shaped ``output.shape + argument.shape`` (JAX's ``jacobian`` layout; one array
        for an int ``wrt``, a list otherwise).

        By :meth:`vjp` per output element or :meth:`jvp` per argument element,
        whichever are fewer: generated code where ``f.tier`` says so for that
        call, else the interpreter's sweeps after one replay. The size is
        checked against the memory available first.
        """
        checked = self._checked(arguments)
        positions, single = self._wrt_positions()
        call_shapes = self._call_shapes(checked)
        shapes = [call_shapes[p] for p in positions]
        sizes = [math.prod(shape) for shape in shapes]
        output = self._output_shape_at(self._call_rows(checked))
        m, n = math.prod(output), sum(sizes)
        check_fits(
            8 * m * n,
            f"the Jacobian of {m} outputs by {n} inputs",
            "compute J v or u^T J with f.jvp / f.vjp",
        )
        matrix = np.zeros((m, n))
        if not self._generated_jacobian(checked, matrix, output, shapes):
            self._interpreted_jacobian(checked, matrix, output, shapes)
        matrix += 0.0  # no -0.0
        blocks = np.split(matrix, np.cumsum(sizes)[:-1], axis=1)
        result = [
            block.reshape(output + shape) for block, shape in zip(blocks, shapes, strict=True)
        ]
        return result[0] if single else result

    def _generated_jacobian(
        self,
        checked: list[Any],
        matrix: FloatArray,
        output: tuple[int, ...],
        shapes: list[tuple[int, ...]],
    ) -> bool:
        """Fill ``matrix`` by generated VJPs (a row each) or JVPs (a column each); False
        where that code does not run, or a call was refused or flagged (nothing kept)."""
        m, n = matrix.shape
        mode = "vjp" if m <= n else "jvp"
        code = cast("array_kernel.BlockCode", self._code)
        rows = self._call_rows(checked)
        with self._lock:
            if not self._generated(mode):
                return False
            for line in range(m if mode == "vjp" else n):
                if mode == "vjp":
                    u = _unit(line, [output])[0]
                    seed = float(u) if not output else u
                    status, _, found = code.run("vjp", checked, None, rows, seed)
                    if status != array_kernel.OK:
                        return False
                    matrix[line] = np.concatenate([np.reshape(g, -1) for g in found])
                else:
                    status, _, found = self._generated_along("jvp", checked, _unit(line, shapes))
                    if status != array_kernel.OK:
                        return False
                    matrix[:, line] = np.reshape(found, -1)
        return True

    def _generated_along(
        self, mode: str, checked: list[Any], directions: Sequence[ArrayLike]
    ) -> tuple[int, Any, Any]:
        """One generated call of ``mode`` (``jvp`` or ``hvp``) along ``directions``, one per
        ``wrt`` position (checked by the caller): :meth:`array_kernel.BlockCode.run`'s result."""
        moved = [array_kernel.kernel_argument(d) for d in directions]
        return cast("array_kernel.BlockCode", self._code).run(
            mode, checked, None, self._call_rows(checked), directions=moved
        )

    def _generated_hessian(
        self, checked: list[Any], rows: FloatArray, shapes: list[tuple[int, ...]]
    ) -> bool:
        """Fill ``rows`` by generated Hessian-vector products, one per row; False where
        that code does not run, or a call was refused or flagged (nothing kept)."""
        with self._lock:
            if not self._generated("hvp"):
                return False
            for row in range(rows.shape[0]):
                status, _, found = self._generated_along("hvp", checked, _unit(row, shapes))
                if status != array_kernel.OK:
                    return False
                rows[row] = np.concatenate([np.reshape(p, -1) for p in found])
        return True

    def _interpreted_jacobian(
        self,
        checked: list[Any],
        matrix: FloatArray,
        output: tuple[int, ...],
        shapes: list[tuple[int, ...]],
    ) -> None:
        """Fill ``matrix`` by the interpreter's sweeps, after one replay."""
        m, n = matrix.shape

        def sweeps(ids: list[int]) -> None:  # after one replay: every sweep reads its values
            tape = self._tape
            if m <= n:  # a row per output element
                for row in range(m):
                    pulled = tape.vjp(self._output, ids, _unit(row, [output])[0])
                    matrix[row] = np.concatenate([np.reshape(g, -1) for g in pulled])
            else:  # a column per input element
                for column in range(n):
                    tangent = tape.tangent(self._output, ids, _unit(column, shapes))
                    matrix[:, column] = np.reshape(tangent, -1)

        self._swept(checked, sweeps)

    def hessian(self, arguments: Iterable[ArrayLike]) -> Any:
        """The Hessian at the arguments (a scalar output): for an int ``wrt`` one array of
        shape ``argument.shape * 2``; otherwise a list of rows, ``H[i][j]`` of shape
        ``shape_i + shape_j`` (JAX's ``hessian`` layout). One :meth:`hvp` per argument
        element; symmetric to rounding.
        """
        if isinstance(self._output, Block):
            raise ValueError("hessian needs a scalar output; this function returns an array")
        checked = self._checked(arguments)
        positions, single = self._wrt_positions()
        call_shapes = self._call_shapes(checked)
        shapes = [call_shapes[p] for p in positions]
        sizes = [math.prod(shape) for shape in shapes]
        n = sum(sizes)
        check_fits(8 * n * n, f"the Hessian of {n} inputs", "compute H v with f.hvp")
        rows = np.zeros((n, n))
        if not self._generated_hessian(checked, rows, shapes):

            def sweeps(ids: list[int]) -> None:  # one replay, a product per row
                for row in range(n):
                    product = self._tape.hvp(self._output, ids, _unit(row, shapes))
                    rows[row] = np.concatenate([np.reshape(p, -1) for p in product])

            self._swept(checked, sweeps)
        cuts = np.cumsum(sizes)[:-1]
        blocks = [np.split(band, cuts, axis=1) for band in np.split(rows, cuts, axis=0)]
        result = [
            [block.reshape(shapes[i] + shapes[j]) for j, block in enumerate(band)]
            for i, band in enumerate(blocks)
        ]
        return result[0][0] if single else result

    def _swept(self, checked: list[Any], sweep: Callable[[list[int]], Any]) -> Any:
        """``(output value, sweep(ids))``: the tape replayed at ``checked`` arguments
        (from :meth:`_checked`), then ``sweep`` of the differentiated arguments' node ids,
        under the lock."""
        positions, _ = self._wrt_positions()
        with self._lock:
            self._replay(checked)
            return self._output_value(), sweep([self._inputs[i].id for i in positions])

    def _wrt_positions(self) -> tuple[list[int], bool]:
        """The differentiated arguments' positions, and whether ``wrt`` was one int."""
        if self._wrt is None:
            return list(range(len(self._inputs))), False
        return list(self._wrt[0]), self._wrt[1]

    def _output_shape_at(self, rows: int | None) -> tuple[int, ...]:
        """The output's shape in a call with ``rows`` rows (None: no batch): ``()`` for a
        scalar."""
        block = self._tape.block_value(self._output.id)
        if block is None:
            return ()
        axes = self._batch_axes.get(self._output.id, ())
        return batch_axis.shape_at(tuple(block.shape), axes, rows) if rows else tuple(block.shape)

    def _directions(
        self, directions: ArrayLike | Iterable[ArrayLike], shapes: Sequence[tuple[int, ...]]
    ) -> list[ArrayLike]:
        """One direction per differentiated argument, each of its shape in this call
        (``shapes``, from :meth:`_call_shapes`), else raises."""
        positions, single = self._wrt_positions()
        if not single and not isinstance(directions, (list, tuple)):
            raise TypeError(
                f"directions must be a list or tuple with one direction per gradient "
                f"({len(positions)}), got {type(directions).__name__}"
            )
        along: list[ArrayLike] = (
            [cast(ArrayLike, directions)] if single else list(cast(Iterable[ArrayLike], directions))
        )
        if len(along) != len(positions):
            raise ValueError(
                f"expected {len(positions)} directions, one per gradient, got {len(along)}"
            )
        for position, direction in zip(positions, along, strict=True):
            if np.shape(direction) != shapes[position]:
                raise ValueError(
                    f"the direction for argument {position} has shape {np.shape(direction)}, "
                    f"the argument has {shapes[position]}"
                )
        return along

    def _output_value(self) -> float | FloatArray:
        node = self._output.id
        block = self._tape.block_value(node)
        return block.copy() if block is not None else float(self._tape.value(node))

    def _checked(self, arguments: Iterable[ArrayLike]) -> list[Any]:
        """The arguments as arrays, each of the traced shape (any number of rows along the
        batch axis, the same in each batch argument) and a real dtype (else raises)."""
        listed = list(arguments)
        if len(listed) != len(self._inputs):
            raise ValueError(f"expected {len(self._inputs)} arguments, got {len(listed)}")
        shapes = self._shapes
        if self._batch:
            leading = np.shape(listed[self._batch[0]])[:1]
            if leading and leading[0] >= 1:
                shapes = self._shapes_at(leading[0])
        checked = []
        for position, (shape, value) in enumerate(zip(shapes, listed, strict=True)):
            if type(value) is np.ndarray and value.dtype is _FLOAT64 and value.shape == shape:
                checked.append(value)  # the common case, checked at once
                continue
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise not_real(value, f"argument {position}")
            if array.shape != shape:
                raise ValueError(self._shape_error(position, array.shape, shape))
            checked.append(array)
        return checked

    def _shape_error(self, position: int, found: tuple[int, ...], expected: tuple[int, ...]) -> str:
        if position not in self._batch:
            return (
                f"argument {position} has shape {found}, the traced function expects "
                f"{expected} (a function of arrays is traced for one shape of each argument: "
                "compile one per shape, or name the arguments whose first axis is the batch "
                "with batch=)"
            )
        traced = self._shapes[position]
        if len(found) != len(traced) or found[1:] != traced[1:] or found[0] < 1:
            return (
                f"argument {position} has shape {found}, the traced function expects "
                f"(rows,) + {traced[1:]} with at least one row (a batch argument: its first "
                "axis is the batch)"
            )
        return (
            f"argument {position} has {found[0]} rows, argument {self._batch[0]} has "
            f"{expected[0]}: the batch arguments share one number of rows"
        )

    def _shapes_at(self, rows: int) -> list[tuple[int, ...]]:
        """Every argument's shape in a call with ``rows`` rows along the batch axis."""
        return [
            (rows, *shape[1:]) if position in self._batch else shape
            for position, shape in enumerate(self._shapes)
        ]

    def _call_shapes(self, checked: Sequence[Any]) -> list[tuple[int, ...]]:
        """The shapes of checked arguments (the traced ones, but along the batch axis)."""
        if not self._batch:
            return self._shapes
        return self._shapes_at(np.shape(checked[self._batch[0]])[0])

    def _call_rows(self, checked: Sequence[Any]) -> int | None:
        """The call's number of rows along the batch axis (None without one)."""
        return np.shape(checked[self._batch[0]])[0] if self._batch else None

    def _replay(self, checked: list[Any], check: bool = False) -> None:
        tape = self._tape
        kept = [tape.value(node.id) for node in self._inputs]
        for node, shape, array in zip(self._inputs, self._shapes, checked, strict=True):
            if shape:  # a private float64 copy, the one copy made
                storage_of(tape).set_leaf_value(
                    node.id, as_stored(np.array(array, dtype=np.float64))
                )
            else:
                storage_of(tape).set_leaf_value(node.id, float(array))
        try:
            tape.forward()
        except BaseException:
            # A refused call (a bad label) leaves the tape as the last good call
            # had it: a save or pickle afterwards must load and replay again.
            for node, value in zip(self._inputs, kept, strict=True):
                storage_of(tape).set_leaf_value(node.id, value)
            tape.forward()
            raise
        if check:
            origin = tape.first_nonfinite(self._output.id)
            if origin is not None:
                raise NonFiniteError(origin)
        for guard, truth in self._guards:
            if (tape.value(guard) != 0.0) != truth:
                raise BranchError(_describe(tape, guard), bool(truth))

    # -- pickling and files ----------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        tape = self._tape
        blocks, params = block_file.block_state(tape)
        positions = None if self._wrt is None else self._wrt[0]
        return {
            "format": _BLOCK_FORMAT,
            "opcode": tape.opcode.copy(),
            "in0": tape.in0.copy(),
            "in1": tape.in1.copy(),
            "val": _leaf_values(tape),
            **blocks,
            "inputs": np.array([node.id for node in self._inputs], np.int64),
            "output": np.array([self._output.id], np.int64),
            "guards": np.array(self._guards, np.int64).reshape(-1, 2),
            "meta": json.dumps(
                {
                    "name": self._name,
                    "input_names": [tape.label(node.id) or "" for node in self._inputs],
                    "labels": {str(i): v for i, v in tape.labels.items()},
                    "params": params,
                    "wrt": positions,
                    "wrt_single": self._wrt is not None and self._wrt[1],
                    "backend": self._backend,
                    "integers": self._integers,
                    "batch": list(self._batch),
                    "rows": self.rows,
                    "batch_axes": {
                        str(node): list(axes) for node, axes in self._batch_axes.items()
                    },
                }
            ),
        }

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:  # not in the middle of another thread's call
            return {"npz": _npz_bytes(self._state())}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        if (
            not isinstance(state, Mapping)
            or set(state) != {"npz"}
            or not isinstance(state["npz"], bytes)
        ):
            raise ValueError(
                f"pickle: not a fastad function of arrays (its state is {type(state).__name__}"
                + (f" with keys {sorted(map(str, state))})" if isinstance(state, Mapping) else ")")
            )
        arrays = npz.read_npz(io.BytesIO(state["npz"]), "function of arrays", "pickle")
        self.__dict__.update(_block_function(arrays, "pickle").__dict__)

    def save(self, path: StrPath) -> None:
        """Write the traced function to a compressed NumPy ``.npz`` file (no pickle inside).

        :func:`fastad.load` reads it back, validating every node, shape and id.
        """
        with self._lock:
            data = _npz_bytes(self._state())
        path = npz.file_path(path, "save")
        with open(path, "wb") as file:
            file.write(data)


def _unit(index: int, shapes: Sequence[tuple[int, ...]]) -> list[FloatArray]:
    """The unit direction along flat element ``index`` of arrays of ``shapes``, one per shape."""
    flat = np.zeros(sum(math.prod(shape) for shape in shapes))
    flat[index] = 1.0
    parts = np.split(flat, np.cumsum([math.prod(shape) for shape in shapes])[:-1])
    return [part.reshape(shape) for part, shape in zip(parts, shapes, strict=True)]


def _copied_into(target: NDArray[np.float64], gradient: Any) -> NDArray[np.float64]:
    np.copyto(target, gradient)
    return target


def _by_argument(results: Iterable[Any], single: bool) -> Any:
    """A function of arrays' per-argument results: arrays, floats for scalars; one if ``single``."""
    listed = [r if isinstance(r, np.ndarray) and r.ndim else float(r) for r in results]
    return listed[0] if single else listed


def _positions(wrt: object, count: int) -> tuple[list[int], bool] | None:
    """``wrt`` checked against ``count`` arguments: (positions, given as one int), or None."""
    if wrt is None:
        return None
    single = not isinstance(wrt, (list, tuple))
    return batch_axis.argument_positions(wrt, count, "wrt"), single


def _argument_names(function: Traceable, count: int) -> list[str]:
    try:
        names, found = _signature(function, None)
    except TypeError:
        return [f"x{i}" for i in range(count)]
    if found != count:
        raise ValueError(f"the function takes {found} arguments, the example has {count}")
    return names


def _trace(
    function: Traceable, values: Sequence[Any], names: Sequence[str], debug: bool
) -> tuple[Tape, list[Var | Block], Var | Block, list[tuple[int, bool]]]:
    """Trace a function of arrays at ``values``: its tape, input nodes, output node, guards."""
    tape = Tape(trace=True, debug=debug)
    with tape:
        inputs: list[Var | Block] = [
            tape.input(v, name) for v, name in zip(values, names, strict=True)
        ]
        result = function(*inputs)
    guards = storage_of(tape).end_trace()
    if isinstance(result, (tuple, list)):
        raise ValueError("a function of arrays returns one output (a scalar or an array)")
    output = (
        result
        if isinstance(result, Block) and result.tape is tape
        else _output_node(tape, result, 0)
    )
    return tape, inputs, output, guards


def _block_argument(value: ArrayLike, position: int) -> FloatArray | float:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise not_real(value, f"argument {position}")
    return array.astype(np.float64) if array.ndim else float(array)


def load(path: StrPath) -> CompiledFunction | BlockFunction:
    """Read a compiled function written by :meth:`CompiledFunction.save` or
    :meth:`BlockFunction.save` (a function of arrays).

    The tape is validated like :meth:`fastad.Tape.from_arrays` (for a
    function of arrays, every block op's shape rule runs on its operands'
    shapes), and input, output and guard ids are checked, before any kernel
    sees them.
    """
    path = npz.file_path(path, "fa.load")
    arrays = npz.read_npz(path, "compiled function")
    if "format" in arrays and npz.text_field(arrays, "format", str(path)) == _BLOCK_FORMAT:
        return _block_function(arrays, str(path))
    return _from_state(arrays, source=str(path))


_BLOCK_FIELDS = {
    "format", "opcode", "in0", "in1", "val", "block_nodes", "block_ndim", "block_dims",
    "block_data", "op_nodes", "op_start", "op_operands", "inputs", "output", "guards", "meta",
}  # fmt: skip


def _block_function(state: Mapping[str, Any], source: str) -> BlockFunction:
    """A :class:`BlockFunction` from the arrays :meth:`BlockFunction._state` wrote, validated."""
    missing = _BLOCK_FIELDS - set(state)
    if missing:
        raise ValueError(f"{source}: not a fastad function of arrays, missing {sorted(missing)}")
    found = npz.text_field(dict(state), "format", source)
    if found != _BLOCK_FORMAT:
        raise ValueError(f"{source}: format {found!r}, expected {_BLOCK_FORMAT!r}")
    meta = npz.json_object(npz.text_field(dict(state), "meta", source), f"{source}: metadata")
    params, labels = meta.get("params"), meta.get("labels", {})
    if not isinstance(params, list) or not isinstance(labels, dict):
        raise ValueError(f"{source}: metadata must hold a params list and a labels object")
    tape = block_file.rebuild(state, state, params, labels, source)
    n = len(tape)
    inputs = _ids(state["inputs"], n, "inputs", source)
    output = _ids(state["output"], n, "output", source)
    guards = _guard_rows(state["guards"], n, source)
    if inputs.size == 0 or (tape.opcode[inputs] != optable.INPUT).any():
        raise ValueError(f"{source}: inputs must be leaf nodes, at least one")
    if any(tape.block_value(int(node)) is not None for node in guards[:, 0]):
        raise ValueError(f"{source}: a guard must be a scalar node (a comparison)")
    if np.unique(inputs).size != inputs.size or output.size != 1:
        raise ValueError(f"{source}: inputs must be distinct, and there must be one output")
    name, wrt, single = meta.get("name", "function"), meta.get("wrt"), meta.get("wrt_single")
    if not isinstance(name, str) or not isinstance(single, bool):
        raise ValueError(f"{source}: metadata name must be a string and wrt_single a bool")
    if wrt is not None and (not isinstance(wrt, list) or (single and len(wrt) != 1)):
        raise ValueError(f"{source}: metadata wrt must be null or a list (of one, if wrt_single)")
    function = object.__new__(BlockFunction)
    function._wrt = _positions(wrt[0] if single and wrt is not None else wrt, inputs.size)
    function._lock = threading.Lock()
    function._inputs = [tape.node(int(node)) for node in inputs]
    function._guards = [(int(node), bool(truth)) for node, truth in guards.tolist()]
    function._output = tape.node(int(output[0]))
    function._name = name
    storage_of(tape).freeze(f"the compiled function of arrays {name!r}")
    function._tape = tape
    function._shapes = [np.shape(tape.value(node.id)) for node in function._inputs]
    function.optimization = None
    backend = meta.get("backend", "auto")
    integers = meta.get("integers", [False] * inputs.size)
    if backend not in BACKENDS:
        raise ValueError(f"{source}: metadata backend must be one of {BACKENDS}, got {backend!r}")
    if (
        not isinstance(integers, list)
        or len(integers) != inputs.size
        or not all(isinstance(flag, bool) for flag in integers)
    ):
        raise ValueError(f"{source}: metadata integers must be a list of {inputs.size} bools")
    function._batch, function._batch_axes = _batch_state(meta, function, source)
    if function._batch:  # the traced number of rows (the tape holds the last call's)
        rows = meta.get("rows")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            raise ValueError(f"{source}: metadata rows must be a positive int, got {rows!r}")
        function._shapes = function._shapes_at(rows)
    function._install_code(backend, integers)
    return function


def _batch_state(
    meta: Mapping[str, Any], function: BlockFunction, source: str
) -> tuple[tuple[int, ...], dict[int, batch_axis.Axes]]:
    """The batch positions and axes a saved function of arrays names, checked against its
    tape: positions of array arguments, axes of array nodes holding the rows of the
    batch arguments, and the program replayed with one row more (a node whose shape does
    not follow is refused)."""
    positions, axes = meta.get("batch", []), meta.get("batch_axes", {})
    tape, count = function._tape, len(function._inputs)
    if (
        not isinstance(positions, list)
        or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p < count for p in positions
        )
        or len(set(positions)) != len(positions)
        or not isinstance(axes, dict)
    ):
        raise ValueError(f"{source}: metadata batch must list distinct argument positions")
    if not positions:
        if axes:
            raise ValueError(f"{source}: metadata batch_axes without batch positions")
        return (), {}
    shapes = [np.shape(tape.value(node.id)) for node in function._inputs]
    if any(not shapes[p] for p in positions) or len({shapes[p][0] for p in positions}) != 1:
        raise ValueError(f"{source}: batch arguments must be arrays with one number of rows")
    rows = shapes[positions[0]][0]
    found: dict[int, batch_axis.Axes] = {}
    for key, listed in axes.items():
        node = int(key) if isinstance(key, str) and key.isdigit() else -1
        value = tape.block_value(node) if 0 <= node < len(tape) else None
        if (
            value is None
            or not isinstance(listed, list)
            or not listed
            or not all(isinstance(a, int) and 0 <= a < value.ndim for a in listed)
            or any(value.shape[a] != rows for a in listed)
        ):
            raise ValueError(f"{source}: batch_axes entry {key!r} names no axis of {rows} rows")
        found[node] = tuple(sorted(set(listed)))
    for p in positions:
        if found.get(function._inputs[p].id, ()) != (0,):
            raise ValueError(f"{source}: batch argument {p} must have its rows along axis 0")
    # Replay with one row more: every node's shape must follow its axes.
    kept = [tape.value(node.id) for node in function._inputs]
    before = {node: array_kernel.shape_of(storage_of(tape), node) for node in range(len(tape))}
    probe = [batch_axis.with_one_more_row(v) if i in positions else v for i, v in enumerate(kept)]
    function._batch = tuple(positions)
    try:
        try:
            function._replay(probe)
        except BranchError:
            pass  # a comparison of the new row's values: the shapes are what is checked
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: the batch axes do not fit the program: {error}") from None
        for node, shape in before.items():
            now = array_kernel.shape_of(storage_of(tape), node)
            if now != batch_axis.shape_at(shape, found.get(node, ()), rows + 1):
                raise ValueError(
                    f"{source}: node {node} has shape {now} at {rows + 1} rows, not its batch "
                    f"axes' {batch_axis.shape_at(shape, found.get(node, ()), rows + 1)}"
                )
    finally:
        function._replay(kept)
    return tuple(positions), found


def _from_state(state: Mapping[str, Any], source: str = "pickle") -> CompiledFunction:
    missing = {"format", "opcode", "in0", "in1", "val", "inputs", "outputs", "guards", "meta"}
    missing -= set(state)
    if missing:
        raise ValueError(f"{source}: not a fastad compiled function, missing {sorted(missing)}")
    state = {key: np.asarray(value) for key, value in state.items()}
    found = npz.text_field(state, "format", source)
    if found != _COMPILED_FORMAT:
        raise ValueError(f"{source}: format {found!r}, expected {_COMPILED_FORMAT!r}")
    meta = _metadata(npz.text_field(state, "meta", source), source)
    try:
        tape = Tape.from_arrays(
            state["opcode"], state["in0"], state["in1"], state["val"], meta["labels"]
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from None
    n = len(tape)
    inputs = _ids(state["inputs"], n, "inputs", source)
    outputs = _ids(state["outputs"], n, "outputs", source)
    guards = _guard_rows(state["guards"], n, source)
    if (tape.opcode[inputs] != optable.INPUT).any() or np.unique(inputs).size != inputs.size:
        raise ValueError(f"{source}: inputs must be distinct leaf nodes")
    if inputs.size == 0 or outputs.size == 0:
        raise ValueError(f"{source}: a compiled function needs at least one input and output")
    if meta["scalar_output"] and outputs.size != 1:
        raise ValueError(f"{source}: a scalar-output function must have exactly one output")
    names = meta["input_names"] or [f"x{i}" for i in range(inputs.size)]
    if len(names) != inputs.size:
        raise ValueError(f"{source}: {len(names)} input names for {inputs.size} inputs")
    compiled = object.__new__(CompiledFunction)
    compiled._function = _Unavailable(meta["name"])
    compiled._input_names = names
    compiled._num_inputs = inputs.size
    compiled._point_shape = (inputs.size,)
    compiled._lock = threading.Lock()
    compiled._backend = meta["backend"]
    compiled._traced = False
    sources = _source_locations(state.get("sources"), meta["source_files"], n, source)
    compiled._optimize = False
    compiled._debug = bool(sources)
    compiled.optimization = None
    compiled._install(tape, inputs, outputs, guards, meta["scalar_output"], sources)
    return compiled


_METADATA_TYPES: dict[str, tuple[type, object, str]] = {
    # key: (type, default when absent, description for errors)
    "scalar_output": (bool, True, "true or false"),
    "input_names": (list, [], "a list of strings"),
    "labels": (dict, {}, "an object of node id: label"),
    "name": (str, "function", "a string"),
    "backend": (str, "auto", '"auto", "interpret" or "codegen"'),
    "source_files": (list, [], "a list of file names"),
}


def _leaf_values(tape: Tape) -> FloatArray:
    """The values a file must keep: leaves' and constants'. The others are zero.

    Loading recomputes every operation's value (``Tape.from_arrays``), so
    a traced value there is only noise that does not compress.
    """
    values = tape.val.copy()
    values[(tape.opcode != optable.INPUT) & (tape.opcode != optable.CONST)] = 0.0
    return values


def _npz_bytes(state: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {key: np.asarray(value) for key, value in state.items()}
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _source_table(sources: Mapping[int, tuple[str, int]]) -> tuple[list[str], IdArray]:
    """Source locations as ``(files, rows of [node, file index, line])`` for a file."""
    files: dict[str, int] = {}
    rows = [
        (node, files.setdefault(name, len(files)), line) for node, (name, line) in sources.items()
    ]
    return list(files), np.array(rows, np.int64).reshape(-1, 3)


def _source_locations(
    rows: Any, files: list[Any], n: int, source: str
) -> dict[int, tuple[str, int]]:
    """The ``{node: (file, line)}`` a file holds (none in files from before they were saved)."""
    if rows is None:
        return {}
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] != 3 or rows.dtype.kind not in "iu":
        raise ValueError(f"{source}: sources must be an integer array of shape (s, 3)")
    if not all(isinstance(name, str) for name in files):
        raise ValueError(f"{source}: metadata source_files must be strings")
    if rows.size and (
        rows[:, 0].min() < 0
        or rows[:, 0].max() >= n
        or rows[:, 1].min() < 0
        or rows[:, 1].max() >= len(files)
        or rows[:, 2].min() < 0
    ):
        raise ValueError(
            f"{source}: sources must name nodes in [0, {n}), files in [0, {len(files)}) "
            "and lines >= 0"
        )
    return {int(node): (files[int(f)], int(line)) for node, f, line in rows.tolist()}


def _metadata(text: str, source: str) -> dict[str, Any]:
    """The JSON metadata of a saved compiled function, every field type-checked."""
    meta = npz.json_object(text, f"{source}: metadata")
    checked: dict[str, Any] = {}
    for key, (kind, default, description) in _METADATA_TYPES.items():
        value = meta.get(key, default)
        if not isinstance(value, kind):
            raise ValueError(
                f"{source}: metadata field {key!r} must be {description}, got {value!r}"
            )
        checked[key] = value
    if checked["backend"] not in BACKENDS:
        raise ValueError(f"{source}: metadata field 'backend' must be one of {BACKENDS}")
    if not all(isinstance(name, str) for name in checked["input_names"]):
        raise ValueError(f"{source}: metadata input_names must be strings")
    return checked


class _Unavailable:
    """Stands in for the Python function of a loaded compiled function."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: object) -> NoReturn:
        raise RuntimeError(
            f"{self.__name__} was loaded from a file: it can be replayed, not traced"
        )


def _guard_rows(guards: ArrayLike, n: int, source: str) -> IdArray:
    """Saved guards checked: rows of (node id in [0, n), outcome 0 or 1)."""
    guards = np.asarray(guards)
    if guards.ndim != 2 or guards.shape[1] != 2 or guards.dtype.kind not in "iu":
        raise ValueError(f"{source}: guards must be an integer array of shape (g, 2)")
    _ids(guards[:, 0], n, "guard nodes", source)
    if not np.isin(guards[:, 1], (0, 1)).all():
        raise ValueError(f"{source}: guard outcomes must be 0 or 1")
    return guards.astype(np.int64)


def _ids(ids: ArrayLike, n: int, what: str, source: str) -> IdArray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"{source}: {what} must be a one-dimensional integer array")
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"{source}: {what} {ids.tolist()} must lie in [0, {n})")
    return ids.astype(np.int64)


def _signature(function: Traceable, num_inputs: int | None) -> tuple[list[str], int]:
    if num_inputs is not None:
        if not is_int(num_inputs):
            raise TypeError(
                f"num_inputs must be a positive int, got {type(num_inputs).__name__} {num_inputs!r}"
            )
        if num_inputs < 1:
            raise ValueError(f"num_inputs must be a positive int, got {num_inputs!r}")
        return [f"x{i}" for i in range(int(num_inputs))], int(num_inputs)
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as error:
        raise TypeError("cannot read the function's signature: pass num_inputs=") from error
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in positional or p.default is not p.empty for p in parameters):
        raise TypeError(
            "fa.compile reads the number of inputs from plain positional parameters "
            "(no *args, keyword-only or default arguments): pass num_inputs="
        )
    if not parameters:
        raise TypeError("the function takes no inputs")
    return [p.name for p in parameters], len(parameters)


def _output_node(tape: Tape, result: Any, position: int) -> Var:
    if isinstance(result, Var):
        if result.tape is not tape:
            raise ValueError(f"output {position} is a node of another tape: {result!r}")
        return result
    if is_number(result):
        return tape.constant(result)
    raise TypeError(
        f"output {position} of the traced function is a {type(result).__name__}; "
        "expected a fastad node or a real number"
    )


def _renumbered(
    sources: dict[int, tuple[str, int]], new_ids: IdArray
) -> dict[int, tuple[str, int]]:
    """``sources`` for the optimised tape: merged nodes keep the first location."""
    renumbered: dict[int, tuple[str, int]] = {}
    for node, location in sources.items():
        new = int(new_ids[node])
        if new >= 0:
            renumbered.setdefault(new, location)
    return renumbered


def _kernel_array(array: FloatArray) -> FloatArray:
    """``array`` as the kernels were compiled for: C-contiguous, aligned, writeable.

    A read-only or strided array (``x[::2]``, ``np.asarray`` of another
    library's buffer) would make Numba compile the kernels again for its
    type, seconds in the foreground; a copy costs a pass over the data.
    """
    return np.require(array, np.float64, ["C", "A", "W"])


def _real_array(values: ArrayLike, what: str) -> FloatArray:
    array = np.asarray(values)
    if array.dtype.kind in "biuf":
        return array.astype(np.float64, copy=False)
    raise not_real(values, what)


def _thread_count(threads: int | None) -> int:
    available = numba.get_num_threads()
    if threads is None:
        return available
    if not is_int(threads):
        raise TypeError(f"threads must be a positive int, got {type(threads).__name__} {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    return min(int(threads), available)


def _describe(tape: Tape, node: int) -> str:
    op = optable.ALL[tape.opcode[node]]
    if op.code in optable.COMPARISONS:
        a, b = tape.in0[node], tape.in1[node]
        return f"{_operand(tape, a)} {op.symbol} {_operand(tape, b)}"
    return f"bool({_operand(tape, node)})"


def _operand(tape: Tape, node: int) -> str:
    label = tape.labels.get(int(node))
    if label:
        return label
    op = optable.ALL[tape.opcode[node]]
    if op.name == "const":
        return repr(float(tape.val[node]))
    return f"node {int(node)} ({op.symbol})"
