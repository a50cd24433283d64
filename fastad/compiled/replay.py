"""How a compiled function's program runs: the interpreter or generated code.

A :class:`Replay` holds one traced program in the two forms the replay
tiers take: the packed program of the lanes interpreter
(``lane_sweeps.sweep_block``: one opcode dispatch per node serves a row of
points) and, made on demand, the straight-line kernels of
:mod:`fastad.compiled.module_cache` (one module per mode). Both give the same bits (a
nan's sign and payload aside); the tier only changes the time.

``backend`` chooses (``fastad.compiled.tiers``): ``"interpret"``, ``"codegen"``, or
``"auto"``, the interpreter first and generated code once a kind of call is
hot (generated code at once while the interpreter's own kernels are not
compiled on this machine).

Everything here trusts its arguments: :class:`fastad.CompiledFunction`
validates points, directions and shapes first.
"""

from __future__ import annotations

import contextlib
import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from fastad.compiled import module_cache, native_code
from fastad.compiled.native_code import GenerationError
from fastad.compiled.parallel import threads_allowed
from fastad.compiled.tiers import Tier, Tiers
from fastad.core.graph import descendants
from fastad.core.storage import ARITY
from fastad.eager.handle import storage_of
from fastad.kernels import lane_sweeps
from fastad.kernels import scalar_source as generator
from fastad.kernels.jit import is_warm
from fastad.util.progress import progress
from fastad.util.threads import on_threads

if TYPE_CHECKING:
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, IdArray, IndexArray

VALUES, VJP, JVP, GRAD = lane_sweeps.VALUES, lane_sweeps.VJP, lane_sweeps.JVP, lane_sweeps.GRAD
JACOBIAN_REV, JACOBIAN_FWD = lane_sweeps.JACOBIAN_REV, lane_sweeps.JACOBIAN_FWD
HVP, HESSIAN = lane_sweeps.HVP, lane_sweeps.HESSIAN
MODE_NAMES = {
    VALUES: "values",
    GRAD: "grad",
    VJP: "vjp",
    JVP: "jvp",
    JACOBIAN_FWD: "jacobian_fwd",
    JACOBIAN_REV: "jacobian_rev",
    HVP: "hvp",
    HESSIAN: "hessian",
}
MODES = {name: mode for mode, name in MODE_NAMES.items()}
"""A kind of call's name (``f.tier("grad")``) to its sweep mode."""
NO_FAILED_GUARD = lane_sweeps.NO_FAILED_GUARD
_NO_STATUS = np.empty(0, np.int64)  # programs without guards never write status
Outputs = tuple["FloatArray | None", "FloatArray | None"]
"""A caller's arrays for the values ``(N, m)`` and the derivatives ``(N, width)``."""

# Lanes per block: enough points that one dispatch per node is amortised,
# few enough that the work space (4 rows of 8 bytes per node and lane)
# stays in the per-core cache.
_WORK_BUDGET_BYTES = 256 * 1024
_MAX_LANES = 256
_MIN_LANES = 32
_MAX_WORK_BYTES = 64 * 1024 * 1024
# Batches smaller than this run on the calling thread: starting the thread
# pool costs more than it saves.
PARALLEL_MIN_POINTS = 4096


def _first_use(kernel: Any) -> AbstractContextManager[None]:
    """Progress on stderr if ``kernel``'s first call may compile it (a cold Numba cache)."""
    if not module_cache.uncompiled(kernel):
        return contextlib.nullcontext()
    return progress(
        "compiling fastad's interpreter kernels (once per machine and version: later "
        "processes load them from the cache)"
    )


def _interpreter_warm() -> bool:
    """Whether the interpreter's batch kernel runs without compiling (in this process or
    fastad's cache); ``auto`` starts on generated code while it does not."""
    return is_warm(lane_sweeps.sweep_points)


def _threaded(threads: int, n_points: int) -> bool:
    """Whether a batch runs on the thread pool (else on the calling thread)."""
    return threads > 1 and n_points >= PARALLEL_MIN_POINTS and threads_allowed()


def lane_count(n: int, planes: int = lane_sweeps.PLANES) -> int:
    """Points per block for a program of ``n`` nodes and a work space of ``planes``.

    As many as a first-order work space fits in the per-core cache budget,
    but at least 32 (one lane per block costs ~27 ns per node and point on
    a 2,000-node DAG, 32 lanes ~10), and never a work space past
    ``_MAX_WORK_BYTES``. The second-order modes take the same lanes though
    their planes are 9/4 as many: the per-node dispatch weighs more than
    the cache (HVP of an 85-node Rosenbrock function at 10^5 points: 1,167
    ns a point on 32 lanes, 851 on 64, 605 on 128, 624 on 256).
    """
    lanes = _WORK_BUDGET_BYTES // (8 * lane_sweeps.PLANES * (n + 1))
    most = max(1, _MAX_WORK_BYTES // (8 * planes * (n + 1)))
    return int(min(_MAX_LANES, most, max(_MIN_LANES, lanes)))


class Replay:
    """One traced program and the tiers that replay it.

    ``derivative_width(mode)`` numbers per point come back for each mode
    (``run``); a scalar-output program also has the one-point path
    (``point``). Safe to call from several threads: work spaces are per
    thread, generated modules are made once under a lock.
    """

    def __init__(
        self,
        tape: Tape,
        inputs: IdArray,
        outputs: IdArray,
        guards: IdArray,
        backend: str,
        title: str,
        fast_math: bool = False,
    ) -> None:
        n = len(tape)
        in1 = np.append(tape.in1, -1)
        in1[:n][ARITY[tape.opcode] == 1] = n  # unary ops read the scratch row
        header = [n, inputs.size, outputs.size, guards.shape[0]]
        # Which nodes depend on an input (the scratch row does not): the
        # second-order modes compute only the second partials those need.
        depends = np.zeros(n + 1, np.bool_)
        if n:
            depends[:n] = descendants(storage_of(tape), inputs.tolist(), 0, n - 1)
        # One int32 array: each array argument costs ~100 ns in Numba's
        # dispatcher on the latency path.
        self.program: IndexArray = np.concatenate(
            [
                header,
                np.append(tape.opcode, 0),
                np.append(tape.in0, -1),
                in1,
                inputs,
                outputs,
                guards[:, 0],
                guards[:, 1],
                depends,
            ]
        ).astype(np.int32)
        self.template = np.append(tape.val, 0.0)
        self.k, self.m, self.g = inputs.size, outputs.size, guards.shape[0]
        self.backend = backend
        self._lanes = {
            count: lane_count(n, count) for count in (lane_sweeps.PLANES, lane_sweeps.SECOND_PLANES)
        }
        self._local = threading.local()
        self._generated = module_cache.GeneratedCode(
            module_cache.Program(
                tape.opcode.copy(),
                tape.in0.copy(),
                tape.in1.copy(),
                tape.val.copy(),
                inputs.copy(),
                outputs.copy(),
                guards.copy(),
            ),
            title,
            native_code.fast_math() if fast_math else None,
        )
        self._n = n
        self._tiers = Tiers(backend, self._generated, _interpreter_warm)
        self._point_kernels: dict[int, Any] = {}  # generated one-point kernels, compiled
        self.fast_points: dict[int, Any] = {}
        """The generated one-point calls a caller may make directly: only for a
        program without guards, filled as modes come to run generated code.
        ``(kernel, address, work)``: ``kernel(address, work, point, gradient,
        constants)`` (GRAD) or ``kernel(address, work, point, constants)`` returns
        the value, with :attr:`constants`."""
        self.constants = self._generated.constants

    def tier(self, mode: int) -> Tier:
        """The tier that runs ``mode`` now, and why (a question: it starts nothing)."""
        found = self._tiers.tier(MODE_NAMES[mode])
        if found.name != "codegen":
            return found
        vectors = self._generated.vectors_reason(MODE_NAMES[mode])
        return found if vectors is None else found._replace(reason=f"{found.reason}; {vectors}")

    def derivative_width(self, mode: int) -> int:
        """Derivative numbers per point in ``mode`` (the generator's rule, one place)."""
        return generator.derivative_width(self._generated.program, MODE_NAMES[mode])

    # -- evaluation ------------------------------------------------------------------
    def run(
        self,
        points: FloatArray,
        mode: int,
        directions: FloatArray | None,
        threads: int,
        outputs: Outputs = (None, None),
    ) -> tuple[FloatArray, FloatArray, IdArray]:
        """``(values (N, m), derivatives (N, width), status)`` at every point.

        ``status`` holds each point's first failing guard or
        ``NO_FAILED_GUARD`` (an empty array for a program without guards).
        ``outputs``: arrays of those shapes to write the values and the
        derivatives into (the front end checked them), or None for new ones.
        Generated code flags the points whose fast derivatives hold a nan;
        the interpreter gives those again, so either tier's bits come out.
        """
        n_points = points.shape[0]
        if not self._tiers.ready(MODE_NAMES[mode], n_points * self._n):
            return self._interpret(points, mode, directions, threads, outputs)
        values, derivatives, status = self._outputs(n_points, mode, outputs)
        recheck = np.zeros(n_points, np.bool_)
        try:
            flagged = self._generated.run(
                MODE_NAMES[mode],
                points,
                values if directions is None else directions,  # not read without directions
                values,
                derivatives,
                status,
                recheck,
                threads,
                _threaded(threads, n_points),
            )
        except GenerationError as error:  # the interpreter stays, and f.tier says why
            self._tiers.fail(MODE_NAMES[mode], error)
            return self._interpret(points, mode, directions, threads, outputs)
        if flagged:
            rows = np.flatnonzero(recheck)
            again = self._interpret(
                points[rows], mode, None if directions is None else directions[rows], threads
            )
            values[rows], derivatives[rows] = again[0], again[1]
            if self.g:
                status[rows] = again[2]
        return values, derivatives, status

    def _outputs(
        self, n_points: int, mode: int, outputs: Outputs = (None, None)
    ) -> tuple[FloatArray, FloatArray, IdArray]:
        given_values, given_derivatives = outputs
        values = np.empty((n_points, self.m)) if given_values is None else given_values
        derivatives = (
            np.empty((n_points, max(1, self.derivative_width(mode))))
            if given_derivatives is None
            else given_derivatives
        )
        status = np.full(n_points, NO_FAILED_GUARD, np.int64) if self.g else _NO_STATUS
        return values, derivatives, status

    def _interpret(
        self,
        points: FloatArray,
        mode: int,
        directions: FloatArray | None,
        threads: int,
        outputs: Outputs = (None, None),
    ) -> tuple[FloatArray, FloatArray, IdArray]:
        """The lanes interpreter over every point: ``run``'s result."""
        n_points = points.shape[0]
        values, derivatives, status = self._outputs(n_points, mode, outputs)
        if directions is None:
            directions = values  # not read in this mode; any float64 2-D array
        arrays: tuple[Any, ...] = (points, directions, values, derivatives, status)
        with _first_use(lane_sweeps.sweep_points):
            if not _threaded(threads, n_points):
                self._sweep(mode, *arrays)
                return values, derivatives, status
            # A contiguous range of points per Python thread (the kernel releases the
            # GIL), each in its own work space and writing only its own rows: nothing
            # races, and the one kernel compiled serves both paths.
            bounds = np.linspace(0, n_points, threads + 1).astype(np.int64)
            ranges: list[tuple[Any, ...]] = [
                tuple(array if array is _NO_STATUS else array[start:stop] for array in arrays)
                for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
            ]
            on_threads(lambda part: self._sweep(mode, *part), ranges, "fastad-interpreter")
        return values, derivatives, status

    def _sweep(
        self,
        mode: int,
        points: FloatArray,
        directions: FloatArray,
        values: FloatArray,
        derivatives: FloatArray,
        status: IdArray,
    ) -> None:
        """Points in order on this thread, in its work space (one per thread and size:
        calls never share buffers)."""
        spaces = getattr(self._local, "work", None)
        if spaces is None:
            spaces = self._local.work = {}
        count = lane_sweeps.work_planes(mode)
        work = spaces.get(count)
        if work is None:
            work = spaces[count] = lane_sweeps.new_work(self.template, self._lanes[count], count)
        lane_sweeps.sweep_points(
            self.program, work, points, directions, values, derivatives, status, mode
        )

    def _point_kernel(self, mode: int) -> bool:
        """Build ``mode``'s generated one-point kernel; False (the interpreter stays, and
        ``tier`` says why) when it cannot be built."""
        try:
            self._point_kernels[mode] = self._generated.point(MODE_NAMES[mode])
        except GenerationError as error:
            self._tiers.fail(MODE_NAMES[mode], error)
            return False
        return True

    def point(self, point: FloatArray, mode: int, gradient: FloatArray) -> tuple[float, int]:
        """One point of a scalar-output program, VALUES or GRAD: ``(value, failed guard)``.

        GRAD writes the gradient into ``gradient`` (shape ``(k,)``). This is
        the latency path: no allocation, one kernel call.
        """
        generated = self._point_kernels.get(mode)
        if generated is not None:
            kernel, address, work = generated
            if mode == GRAD:
                result = kernel(address, work, point, gradient, self.constants)
            else:
                result = kernel(address, work, point, self.constants)
            return result if self.g else (result, NO_FAILED_GUARD)
        if self._tiers.ready(MODE_NAMES[mode], self._n) and self._point_kernel(mode):
            kernel = self._point_kernels[mode]
            if not self.g:
                self.fast_points[mode] = kernel
            return self.point(point, mode, gradient)
        try:
            work = self._local.point_work
        except AttributeError:  # per thread: concurrent calls never share a work space
            work = self._local.point_work = np.zeros((4, self.template.size))
            work[0] = self.template
            with _first_use(lane_sweeps.sweep_point):
                return lane_sweeps.sweep_point(self.program, work, point, gradient, mode)
        return lane_sweeps.sweep_point(self.program, work, point, gradient, mode)

    def point_hvp(
        self, point: FloatArray, direction: FloatArray, product: FloatArray
    ) -> tuple[float, int]:
        """One point's ``H v`` into ``product`` (shape ``(k,)``): ``(value, failed guard)``.

        The latency path of the second order: the generated one-point kernel,
        or the interpreter's one-point sweep, in a per-thread work space.
        """
        generated = self._point_kernels.get(HVP)
        if generated is not None:
            kernel, address, work = generated
            result = kernel(address, work, point, direction, product, self.constants)
            return result if self.g else (result, NO_FAILED_GUARD)
        if self._tiers.ready(MODE_NAMES[HVP], self._n) and self._point_kernel(HVP):
            return self.point_hvp(point, direction, product)
        try:
            work = self._local.hvp_work
        except AttributeError:  # per thread, as the other work spaces
            work = self._local.hvp_work = np.zeros((lane_sweeps.SECOND_PLANES, self.template.size))
            work[0] = self.template
            with _first_use(lane_sweeps.sweep_point_hvp):
                return lane_sweeps.sweep_point_hvp(self.program, work, point, direction, product)
        return lane_sweeps.sweep_point_hvp(self.program, work, point, direction, product)
