"""Running a function of scalars at points: tracing at the first one, batch and
one-point calls, their failures and the shapes of their results.

:class:`PointCalls` is the working part of :class:`fastad.CompiledFunction`:
it holds the traced program and its :class:`~fastad.compiled.replay.Replay`,
converts points (``(k,)`` one point, ``(N, k)`` a batch), runs a mode,
raises or masks the points whose traced branch goes the other way, runs
``check=True``'s diagnosis and shapes values and derivatives for the caller.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, NoReturn

import numba
import numpy as np

from fastad.compiled import native_code
from fastad.compiled.batch_errors import (
    Diagnosis,
    branch_error,
    check_errors,
    first_nonfinite_point,
    mask_failed,
)
from fastad.compiled.definition import ScalarDefinition, ScalarProgram
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
    Outputs,
    Replay,
)
from fastad.compiled.tiers import Tier
from fastad.compiled.trace import trace_scalars
from fastad.eager.handle import storage_of
from fastad.kernels import lane_sweeps
from fastad.util.errors import flag, is_int, is_real_dtype, not_real
from fastad.util.memory import check_fits

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from fastad.util.hints import FloatArray, IdArray

    Failed = NDArray[np.bool_]

NO_FAILED_GUARD = lane_sweeps.NO_FAILED_GUARD
NO_GRADIENT = np.empty(0)
FLOAT64 = np.dtype(np.float64)  # `dtype is FLOAT64`: a cheaper test than ==


class PointCalls:
    """A function of scalars' program and its calls: traced once, at the first point.

    Parameters
    ----------
    definition : ScalarDefinition
        The function; with a program (loaded, unpickled, or traced at an
        example) it is installed at once, else :meth:`points` traces it.

    Attributes
    ----------
    k : int
        The number of scalar inputs.
    point_shape : tuple of int
        ``(k,)``.
    scalar_output : bool or None
        Whether the output is one node (None before tracing).
    scalar_point_shape : tuple of int or None
        ``(k,)`` once traced with a scalar output, else None: the one test of the
        latency paths.
    """

    def __init__(self, definition: ScalarDefinition) -> None:
        self.definition = definition
        self.k = len(definition.input_names)
        self.point_shape = (self.k,)
        self.scalar_output: bool | None = None  # known once traced
        self.scalar_point_shape: tuple[int] | None = None  # (k,) once traced, scalar output
        self.traced = False
        self._lock = threading.Lock()
        if definition.program is not None:
            self._install(definition.program)

    def _install(self, program: ScalarProgram) -> None:
        """Make ``program`` this function's: freeze its tape, build its replay."""
        name = self.definition.name
        storage_of(program.tape).freeze(f"the compiled function {name!r}")
        self.definition = dataclasses.replace(self.definition, program=program)
        self.program = program
        self.tape = program.tape
        self.replay = Replay(
            program.tape,
            program.inputs,
            program.outputs,
            program.guards,
            self.definition.backend,
            repr(name),
            self._fast_math(),
        )
        self.fast_points = self.replay.fast_points
        self.constants = self.replay.constants
        self.m, self.g = program.outputs.size, program.guards.shape[0]
        self._diagnosis: Diagnosis | None = None  # check=True's eager replay, made when needed
        # Last: another thread's latency path reads these to decide it may run.
        self.scalar_output = program.scalar_output
        self.scalar_point_shape = self.point_shape if program.scalar_output else None
        self.traced = True

    def _fast_math(self) -> bool:
        """Whether batches of generated code run in fast math: asked for, and possible
        here (a function saved where it was, loaded where it is not, warns and runs libm)."""
        if not self.definition.fast_math:
            return False
        # The warning names the line that called fa.load or pickle.loads.
        return native_code.fast_math_for(self.definition.name, stacklevel=6) is not None

    def trace(self, point: FloatArray) -> None:
        """Trace the function at ``point`` (once: later calls do nothing)."""
        with self._lock:
            if not self.traced:
                self._install(trace_scalars(self.definition, point))

    def trace_at_example(self, example: ArrayLike) -> None:
        """Trace at ``fa.compile``'s ``example=`` (one point, else raises)."""
        _, single = self.points(example)  # traces at the first point
        if not single:
            raise ValueError(f"example must be one point of shape ({self.k},)")

    def tier(self, call: str) -> Tier:
        """:meth:`fastad.CompiledFunction.tier`: the tier that runs ``call`` now."""
        if call not in MODES:
            raise ValueError(f"call must be one of {', '.join(map(repr, MODES))}, got {call!r}")
        if not self.traced:
            raise ValueError("this function has not been traced yet: call it once or pass example=")
        return self.replay.tier(MODES[call])

    def summary(self) -> str:
        """What ``repr`` says: the name, the inputs, and the program once traced."""
        state = (
            f"{len(self.tape)} nodes, {self.g} guards, backend {self.definition.backend!r}"
            if self.traced
            else "not traced"
        )
        return f"{self.definition.name}: {self.k} inputs, {state}"

    # -- points in, results out ---------------------------------------------------------
    def points(self, points: ArrayLike) -> tuple[FloatArray, bool]:
        """Validate and convert points: ``(array (N, k), single point?)``.

        Traces the function at the first point if it has not been traced.
        """
        k = self.k
        if (
            type(points) is np.ndarray
            and points.dtype is FLOAT64
            and points.shape == (k,)
            and points.flags.carray
            and self.traced
        ):
            return points.reshape(1, k), True  # the latency path: no copy, no checks left
        array = real_array(points, "point")
        if array.ndim == 1 and array.shape[0] == k:
            array, single = kernel_array(array).reshape(1, k), True
        elif array.ndim == 0 and k == 1:
            array, single = kernel_array(array).reshape(1, 1), True
        elif array.ndim == 2 and array.shape[1] == k:
            array, single = kernel_array(array), False
        else:
            hint = (
                ""
                if self.traced
                else ". fastad reads a plain array as one point: the values of the "
                f"function's {k} scalar arguments. For a function of arrays, compile with "
                "one array per argument in a tuple: fa.compile(fn, example=(x,)) for fn(x)"
            )
            raise ValueError(
                f"expected one point of shape ({k},) or a batch of shape (N, {k}) for a "
                f"function of {k} inputs, got shape {array.shape}{hint}"
            )
        if not self.traced and array.shape[0]:
            self.trace(array[0])
        return array, single

    def require_traced(self) -> None:
        """Refuse what needs the traced program (its sizes) before any point traced it."""
        if not self.traced:
            raise ValueError("cannot evaluate an untraced function on an empty batch")

    def require_scalar(self, what: str) -> None:
        """Refuse ``what`` (a method's name) for a traced function with a sequence output."""
        if self.traced and not self.scalar_output:
            outputs = (
                "returns a sequence of one output, not the output itself"
                if self.m == 1
                else f"has {self.m} outputs"
            )
            raise ValueError(
                f"{what} needs a scalar output; this function {outputs}: use jacobian, vjp or jvp"
            )

    def shape_values(self, values: FloatArray, single: bool) -> float | FloatArray:
        """Output values ``(N, m)`` as returned: a float, ``(m,)``, ``(N,)`` or ``(N, m)``.

        ``values`` is this call's own new array: a batch's values are its one
        column, a view (a copy cost 0.5 ns a point, 4% of example 2's call)."""
        if self.scalar_output:
            return float(values[0, 0]) if single else values.reshape(values.shape[0])
        return values[0].copy() if single else values

    def cotangents(self, cotangents: ArrayLike, points: FloatArray, single: bool) -> FloatArray:
        """``vjp``'s cotangents as an ``(N, m)`` kernel array, else raises naming the shape."""
        self.require_traced()
        u = real_array(cotangents, "cotangent")
        expected = (points.shape[0], self.m)
        if self.scalar_output:
            if single and u.shape == (1,):
                u = u.reshape(())  # one cotangent for the one output
            u = u.reshape(-1, 1) if u.ndim == (0 if single else 1) else u
        elif single and u.shape == (self.m,):
            u = u.reshape(1, self.m)
        if u.shape != expected:
            n_points = points.shape[0]
            if self.scalar_output:
                shape = "a float" if single else f"({n_points},)"
            else:
                shape = f"({self.m},)" if single else f"({n_points}, {self.m})"
            raise ValueError(
                f"cotangent shape {np.shape(cotangents)} does not match the output: expected "
                f"{shape}"
            )
        return kernel_array(u)

    # -- the calls ----------------------------------------------------------------------
    def values(
        self,
        points: ArrayLike,
        threads: int | None,
        errors: str,
        check: bool,
        out: FloatArray | None = None,
    ) -> Any:
        """:meth:`fastad.CompiledFunction.__call__`."""
        if out is not None:
            points, _ = self.batch_points(points, "out")
            shape = (points.shape[0],) if self.scalar_output else (points.shape[0], self.m)
            given = output(out, "out", shape, [("the points", points)])
            outputs = (given.reshape(points.shape[0], self.m), None)
            _, _, failed = self.run(points, VALUES, None, threads, errors, check, outputs)
            return with_failed(given, failed, False)
        if (
            type(points) is np.ndarray
            and points.dtype is FLOAT64
            and points.shape == self.scalar_point_shape
            and points.flags.carray
            and errors == "raise"
            and not check
            and threads is None
        ):
            return self.point(points, VALUES, NO_GRADIENT)  # the latency path
        points, single = self.points(points)
        if single and self.scalar_output and errors == "raise" and not check and threads is None:
            return self.point(points[0], VALUES, NO_GRADIENT)
        values, _, failed = self.run(points, VALUES, None, threads, errors, check)
        return with_failed(self.shape_values(values, single), failed, single)

    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None,
        errors: str,
        check: bool,
        out: tuple[FloatArray | None, FloatArray | None] | None = None,
    ) -> Any:
        """:meth:`fastad.CompiledFunction.value_and_grad` past its latency path; ``out``:
        arrays for the values and the gradients (either None: a new one)."""
        if out is not None:
            return self._value_and_grad_into(points, threads, errors, check, out)
        points, single = self.points(points)
        self.require_scalar("value_and_grad")
        if single and errors == "raise" and not check and threads is None:
            gradient = np.empty(self.k)
            return self.point(points[0], GRAD, gradient), gradient
        values, gradients, failed = self.run(points, GRAD, None, threads, errors, check)
        result = (self.shape_values(values, single), gradients[0] if single else gradients)
        return with_failed(result, failed, single)

    def _value_and_grad_into(
        self,
        points: ArrayLike,
        threads: int | None,
        errors: str,
        check: bool,
        out: tuple[FloatArray | None, FloatArray | None],
    ) -> Any:
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(
                "out must be a tuple (values, gradients) of arrays or None, got "
                f"{type(out).__name__}"
            )
        points, _ = self.batch_points(points, "out")
        self.require_scalar("value_and_grad")
        n_points = points.shape[0]
        avoid = [("the points", points)]
        values = None if out[0] is None else output(out[0], "out[0]", (n_points,), avoid)
        if values is not None:
            avoid.append(("out[0]", values))
        gradients = None if out[1] is None else output(out[1], "out[1]", (n_points, self.k), avoid)
        outputs = (None if values is None else values.reshape(n_points, 1), gradients)
        found, derivatives, failed = self.run(points, GRAD, None, threads, errors, check, outputs)
        result = (
            self.shape_values(found, False) if values is None else values,
            derivatives if gradients is None else gradients,
        )
        return with_failed(result, failed, False)

    def batch_points(self, points: ArrayLike, what: str) -> tuple[FloatArray, bool]:
        """:meth:`points`, refusing one point: ``what`` writes a batch."""
        converted, single = self.points(points)
        if single:
            raise ValueError(
                f"{what}= takes the results of a batch, points of shape (N, {self.k}); "
                "one point returns a new float and gradient"
            )
        return converted, single

    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None,
        errors: str,
        check: bool,
    ) -> Any:
        """:meth:`fastad.CompiledFunction.vjp`."""
        points, single = self.points(points)
        u = self.cotangents(cotangents, points, single)
        values, pulled, failed = self.run(points, VJP, u, threads, errors, check)
        pulled = pulled[0] if single else pulled
        return with_failed((self.shape_values(values, single), pulled), failed, single)

    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None,
        errors: str,
        check: bool,
    ) -> Any:
        """:meth:`fastad.CompiledFunction.jvp`."""
        points, single = self.points(points)
        v = along_points(tangents, points, single, "tangent")
        values, pushed, failed = self.run(points, JVP, v, threads, errors, check)
        result = (self.shape_values(values, single), self.shape_values(pushed, single))
        return with_failed(result, failed, single)

    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None,
        errors: str,
        check: bool,
    ) -> Any:
        """:meth:`fastad.CompiledFunction.hvp`."""
        if (
            type(points) is np.ndarray
            and type(directions) is np.ndarray
            and points.dtype is FLOAT64
            and directions.dtype is FLOAT64
            and points.shape == self.scalar_point_shape
            and directions.shape == self.point_shape
            and points.flags.carray
            and directions.flags.carray
            and errors == "raise"
            and not check
            and threads is None
        ):
            # The latency path, as value_and_grad's: no conversion, no copy, one call.
            product = np.empty(self.k)
            _, guard = self.replay.point_hvp(points, directions, product)
            if guard != NO_FAILED_GUARD:
                self._raise_branch_error(points.reshape(1, -1), np.array([guard]))
            return product
        points, single = self.points(points)
        self.require_scalar("hvp")
        v = along_points(directions, points, single, "direction", strict=True)
        if single and errors == "raise" and not check and threads is None:
            return self.point_hvp(points[0], v[0])
        _, products, failed = self.run(points, HVP, v, threads, errors, check)
        return with_failed(products[0] if single else products, failed, single)

    def hessp_point(self, x: ArrayLike) -> FloatArray:
        """``hessp``'s one point, checked: shape ``(k,)``."""
        point = real_array(x, "x")
        if point.shape != self.point_shape:
            raise ValueError(
                f"hessp takes one point of shape {self.point_shape}, got {point.shape}"
            )
        return point

    def point(self, point: FloatArray, mode: int, gradient: FloatArray) -> float:
        """One point of a scalar-output function (VALUES or GRAD): the value."""
        value, failed = self.replay.point(point, mode, gradient)
        if failed != NO_FAILED_GUARD:
            self._raise_branch_error(point.reshape(1, -1), np.array([failed]))
        return value

    def point_hvp(self, point: FloatArray, direction: FloatArray) -> FloatArray:
        """``H v`` at one point of a scalar-output function."""
        product = np.empty(self.k)
        _, failed = self.replay.point_hvp(point, direction, product)
        if failed != NO_FAILED_GUARD:
            self._raise_branch_error(point.reshape(1, -1), np.array([failed]))
        return product

    def run(
        self,
        points: FloatArray,
        mode: int,
        directions: FloatArray | None,
        threads: int | None,
        errors: str = "raise",
        check: bool = False,
        outputs: Outputs = (None, None),
    ) -> tuple[FloatArray, FloatArray, Failed | None]:
        """``(values, derivatives, failed)``; ``failed`` is None unless ``errors="mask"``.
        ``outputs``: checked arrays to write the values and derivatives into."""
        self.require_traced()
        check_errors(errors)
        flag(check, "check")
        thread_count(threads)  # checked even where one point runs on the calling thread
        values, derivatives, status = self.replay.run(
            points, mode, directions, thread_count(threads), outputs
        )
        failed = None
        if errors == "mask":
            failed = mask_failed(values, derivatives, status)
        elif self.g and points.shape[0] and status.max() != NO_FAILED_GUARD:
            self._raise_branch_error(points, status)
        if check:
            self._check(points, mode, directions, values, derivatives, failed)
        return values, derivatives, failed

    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None,
        mode: str | None,
        errors: str,
        check: bool,
    ) -> Any:
        """:meth:`fastad.CompiledFunction.jacobian`."""
        points, single = self.points(points)
        self.require_traced()
        n_points, m, k = points.shape[0], self.m, self.k
        if mode is None:
            mode = "fwd" if k <= m else "rev"
        if mode not in ("fwd", "rev"):
            raise ValueError(f'mode must be "fwd", "rev" or None, got {mode!r}')
        check_fits(
            n_points * m * (k + 1) * 8,
            f"the Jacobian of {n_points:,} points ({m:,} outputs x {k:,} inputs each, with "
            "the values)",
            "Evaluate fewer points at a time, or use jvp / vjp for the products you need.",
        )
        sweep_mode = JACOBIAN_FWD if mode == "fwd" else JACOBIAN_REV
        if sweep_mode == JACOBIAN_REV and m == 1:
            sweep_mode = GRAD  # the same single seeded pass, and the same bits
        _, rows, failed = self.run(points, sweep_mode, None, threads, errors, check)
        jac = rows.reshape(n_points, m, k)
        if self.scalar_output:
            jac = jac[:, 0]  # like grad: (k,) or (N, k)
        return with_failed(jac[0] if single else jac, failed, single)

    def hessian(self, points: ArrayLike, threads: int | None, errors: str, check: bool) -> Any:
        """:meth:`fastad.CompiledFunction.hessian`."""
        points, single = self.points(points)
        self.require_traced()
        self.require_scalar("hessian")
        n_points, k = points.shape[0], self.k
        check_fits(
            n_points * (k * k + 1) * 8,
            f"the Hessian of {n_points:,} points ({k:,} x {k:,} each, with the values)",
            "Evaluate fewer points at a time, or use hvp for the products you need.",
        )
        _, rows, failed = self.run(points, HESSIAN, None, threads, errors, check)
        hessians = rows.reshape(n_points, k, k)
        return with_failed(hessians[0] if single else hessians, failed, single)

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
        computed = self.replay.derivative_width(mode) > 0
        index = first_nonfinite_point(
            points, directions, values, derivatives if computed else None, failed
        )
        if index is None:
            return
        program = self.program
        with self._lock:
            if self._diagnosis is None:
                self._diagnosis = Diagnosis(
                    program.tape, program.inputs, program.outputs, program.sources
                )
        values_bad = not np.isfinite(values[index]).all()
        raise self._diagnosis.error(points, index, values_bad, computed)

    def _raise_branch_error(self, points: FloatArray, status: IdArray) -> NoReturn:
        raise branch_error(self.tape, self.program.guards, points, status)


def output(
    given: object, name: str, shape: tuple[int, ...], avoid: list[tuple[str, FloatArray]]
) -> FloatArray:
    """A caller's array for results of ``shape``, checked: float64, C-contiguous, aligned
    and writeable, sharing no memory with the ``avoid`` arrays (named in the error)."""
    if not isinstance(given, np.ndarray) or given.dtype != np.float64:
        what = given.dtype if isinstance(given, np.ndarray) else type(given).__name__
        raise TypeError(f"{name} must be a float64 NumPy array, got {what}")
    if given.shape != shape:
        raise ValueError(f"{name} has shape {given.shape}; this call writes {shape}")
    if not given.flags.carray:
        raise ValueError(f"{name} must be C-contiguous, aligned and writeable (np.empty{shape} is)")
    for other_name, other in avoid:
        if np.may_share_memory(given, other):
            raise ValueError(f"{name} shares memory with {other_name}: give it an array of its own")
    return given


def with_failed(result: Any, failed: Failed | None, single: bool) -> Any:
    """``result``, or ``(result, failed)`` for ``errors="mask"`` (0-d for one point)."""
    if failed is None:
        return result
    return result, (failed.reshape(()) if single else failed)


def along_points(
    directions: ArrayLike, points: FloatArray, single: bool, what: str, strict: bool = False
) -> FloatArray:
    """Tangents or directions of the points' shape as a kernel array, else raises.

    ``strict``: a single point's direction must have one axis (``hvp``'s rule).
    """
    v = real_array(directions, what)
    v = v.reshape(1, -1) if (single and v.ndim <= 1) else v
    if v.shape != points.shape or (strict and single and np.ndim(directions) > 1):
        raise ValueError(
            f"{what} shape {np.shape(directions)} does not match the points' shape "
            f"{points.shape[1:] if single else points.shape}"
        )
    return kernel_array(v)


def kernel_array(array: FloatArray) -> FloatArray:
    """``array`` as the kernels were compiled for: C-contiguous, aligned, writeable.

    A read-only or strided array (``x[::2]``, ``np.asarray`` of another
    library's buffer) would make Numba compile the kernels again for its
    type, seconds in the foreground; a copy costs a pass over the data.
    """
    return np.require(array, np.float64, ["C", "A", "W"])


def real_array(values: ArrayLike, what: str) -> FloatArray:
    """``values`` as a float64 array (no copy when it is one), else raises naming ``what``."""
    array = np.asarray(values)
    if is_real_dtype(array.dtype):
        return array.astype(np.float64, copy=False)
    raise not_real(values, what)


def thread_count(threads: int | None) -> int:
    """``threads=`` checked: at most Numba's thread count (None: all of them)."""
    available = numba.get_num_threads()
    if threads is None:
        return available
    if not is_int(threads):
        raise TypeError(f"threads must be a positive int, got {type(threads).__name__} {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    return min(int(threads), available)
