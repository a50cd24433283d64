"""How a compiled function's program runs: the interpreter or generated code.

A :class:`Replay` holds one traced program in the two forms the replay
tiers take: the packed program of the lanes interpreter
(``sweeps.sweep_block``: one opcode dispatch per node serves a row of
points) and, made on demand, the straight-line kernels of
:mod:`fastad.codegen` (one module per mode). Both give the same bits (a
nan's sign and payload aside); the tier only changes the time. ``backend`` chooses:

- ``"interpret"``: always the interpreter (no compile step per program);
- ``"codegen"``: always generated code, however long it takes to compile;
- ``"auto"``: the interpreter first; once a kind of call (a mode) has done
  ``HOT_NODE_POINTS`` of work, its generated code compiles in a background
  thread and takes over (at once, if an earlier process left it in the
  cache). Never for code of more than ``codegen.BUDGET_ROWS`` rows (nodes
  times passes), where Numba's compile time would outweigh what it saves.
  A tiered JIT, as HotSpot's: one-off uses never wait for a compile.

Everything here trusts its arguments: :class:`fastad.CompiledFunction`
validates points, directions and shapes first.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

import numba
import numpy as np

from fastad import codegen
from fastad.kernels import sweeps
from fastad.storage import ARITY

if TYPE_CHECKING:
    from fastad._typing import FloatArray, IdArray, IndexArray
    from fastad.tape import Tape

BACKENDS = ("auto", "interpret", "codegen")

VALUES, VJP, JVP, GRAD = sweeps.VALUES, sweeps.VJP, sweeps.JVP, sweeps.GRAD
JACOBIAN_REV, JACOBIAN_FWD = sweeps.JACOBIAN_REV, sweeps.JACOBIAN_FWD
MODE_NAMES = {
    VALUES: "values",
    GRAD: "grad",
    VJP: "vjp",
    JVP: "jvp",
    JACOBIAN_FWD: "jacobian_fwd",
    JACOBIAN_REV: "jacobian_rev",
}
NO_FAILED_GUARD = sweeps.NO_FAILED_GUARD
_NO_STATUS = np.empty(0, np.int64)  # programs without guards never write status

# Lanes per block: enough points that one dispatch per node is amortised,
# few enough that the work space (4 rows of 8 bytes per node and lane) stays
# in the per-core cache.
_WORK_BUDGET_BYTES = 256 * 1024
_MAX_LANES = 256
_MIN_LANES = 32
_MAX_WORK_BYTES = 64 * 1024 * 1024
# Batches smaller than this run on the calling thread: starting the thread
# pool costs more than it saves.
PARALLEL_MIN_POINTS = 4096


_INTERPRET, _COUNTING, _BUILDING, _READY = "interpret", "counting", "building", "ready"
HOT_NODE_POINTS = 50_000_000
"""``backend="auto"``: the interpreted work (nodes times points, summed over
calls of one kind) after which generated code is compiled in the background:
about a quarter of a second of interpreter time, so a function used once
never waits for Numba and one used in earnest soon runs generated code."""


_BUILDS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
"""The background builds running, so that a fork can wait for them."""


def _finish_builds_before_fork() -> None:
    # A build holds Numba's compiler lock; a child forked meanwhile inherits
    # it held, by a thread the child does not have, and any compile there
    # hangs for good. So fork waits for the builds (seconds at most).
    for thread in list(_BUILDS):
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_finish_builds_before_fork)


def _threads_available() -> bool:
    return numba.get_num_threads() > 1


class Tier(NamedTuple):
    """Which replay tier runs a mode, and why."""

    name: str  # "codegen" or "interpret"
    reason: str


def lane_count(n: int) -> int:
    """Points per block for a program of ``n`` nodes.

    As many as fit the per-core cache budget, but at least 32 (one lane per
    block costs ~27 ns per node and point on a 2,000-node DAG, 32 lanes
    ~10) unless the work space would pass ``_MAX_WORK_BYTES``.
    """
    row_bytes = 32 * (n + 1)  # 4 float64 rows of n + 1 per lane
    lanes = _WORK_BUDGET_BYTES // row_bytes
    floor = min(_MIN_LANES, max(1, _MAX_WORK_BYTES // row_bytes))
    return int(min(_MAX_LANES, max(floor, lanes)))


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
    ) -> None:
        n = len(tape)
        in1 = np.append(tape.in1, -1)
        in1[:n][ARITY[tape.opcode] == 1] = n  # unary ops read the scratch row
        header = [n, inputs.size, outputs.size, guards.shape[0]]
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
            ]
        ).astype(np.int32)
        self.template = np.append(tape.val, 0.0)
        self.k, self.m, self.g = inputs.size, outputs.size, guards.shape[0]
        self.backend = backend
        self._lanes = lane_count(n)
        self._local = threading.local()
        self._generated = codegen.GeneratedCode(
            codegen.Program(
                tape.opcode.copy(),
                tape.in0.copy(),
                tape.in1.copy(),
                tape.val.copy(),
                inputs.copy(),
                outputs.copy(),
                guards.copy(),
            ),
            title,
        )
        self._n = n
        self._lock = threading.Lock()
        self._states: dict[int, tuple[str, str]] = {}
        self._work: dict[int, int] = {}  # node-points interpreted per mode (auto)
        self._point_kernels: dict[int, Any] = {}  # generated one-point kernels, compiled
        self.fast_points: dict[int, Any] = {}
        """The generated one-point kernels a caller may call directly: only for a
        program without guards, filled as modes come to run generated code.
        ``kernel(point, gradient, constants)`` (GRAD) or ``kernel(point,
        constants)`` returns the value, with :attr:`constants`."""
        self.constants = self._generated.constants

    # -- tiers -----------------------------------------------------------------------
    # Per mode, one of: _INTERPRET (for good), _COUNTING (auto: interpreting
    # and counting the work done), _BUILDING (auto: generated code compiling
    # in a background thread), _READY (generated code runs), with a reason.
    def tier(self, mode: int) -> Tier:
        """The tier that runs ``mode`` now, and why (a question: it starts nothing)."""
        state, reason = self._states.get(mode) or self._first_state(mode)
        if state == _BUILDING and mode not in self._states:
            reason = (
                'backend="auto": generated code is in the cache; it loads in a background '
                "thread at the first call"
            )
        if state == _COUNTING:  # the count moves on
            size = codegen.rows(self._generated.program, MODE_NAMES[mode])
            reason = self._counting_reason(mode, size)
        return Tier("codegen" if state == _READY else "interpret", reason)

    def _state(self, mode: int) -> tuple[str, str]:
        found = self._states.get(mode)
        if found is None:
            with self._lock:
                found = self._states.get(mode)
                if found is None:
                    found = self._states[mode] = self._first_state(mode)
                    if found[0] == _BUILDING:  # stored first: the thread replaces it
                        self._start_build(mode, "loaded from the cache")
        return found

    def _first_state(self, mode: int) -> tuple[str, str]:
        if self.backend == "interpret":
            return _INTERPRET, 'backend="interpret"'
        name = MODE_NAMES[mode]
        size = codegen.rows(self._generated.program, name)
        if self.backend == "codegen":  # compiled by the first call that needs it
            return _READY, f'backend="codegen": generated code, {size:,} rows'
        if size > codegen.BUDGET_ROWS:
            seconds = codegen.expected_compile_seconds(size)
            return _INTERPRET, (
                f'backend="auto": {size:,} rows of code would take about {seconds:.0f} s to '
                f"compile, above the budget of {codegen.BUDGET_ROWS:,} rows; "
                'backend="codegen" compiles them anyway'
            )
        if self._generated.is_cached(name):  # a load, not a compile: in the background now
            return _BUILDING, (
                'backend="auto": generated code is loading from the cache in a background '
                "thread; interpreted meanwhile"
            )
        return _COUNTING, self._counting_reason(mode, size)

    def _counting_reason(self, mode: int, size: int) -> str:
        return (
            f'backend="auto": interpreted until these calls have done {HOT_NODE_POINTS:,} '
            f"node-points of work ({self._work.get(mode, 0):,} so far); then its generated "
            f"code ({size:,} rows, about {codegen.expected_compile_seconds(size):.0f} s) "
            "compiles in a background thread and takes over"
        )

    def _generated_ready(self, mode: int, node_points: int) -> bool:
        """Whether generated code runs this call; counts the work while interpreting."""
        state, _ = self._state(mode)
        if state != _COUNTING:
            return state == _READY
        with self._lock:
            done = self._work[mode] = self._work.get(mode, 0) + node_points
            if done < HOT_NODE_POINTS or self._states[mode][0] != _COUNTING:
                return False
            self._states[mode] = (
                _BUILDING,
                f'backend="auto": generated code is compiling in a background thread after '
                f"{done:,} node-points of work; interpreted meanwhile",
            )
        self._start_build(mode, f"compiled in the background after {done:,} node-points of work")
        return False

    def _start_build(self, mode: int, how: str) -> None:
        thread = threading.Thread(
            target=self._build, args=(mode, how), name="fastad-codegen", daemon=True
        )
        _BUILDS.add(thread)
        thread.start()

    def _build(self, mode: int, how: str) -> None:
        """The background thread: compile or load ``mode``'s kernels, then switch to them."""
        name = MODE_NAMES[mode]
        size = codegen.rows(self._generated.program, name)
        failed: BaseException | None = None
        try:
            # Quiet: nobody waits for it.
            self._generated.prepare(name, parallel=_threads_available(), report=False)
        except BaseException as error:  # noqa: BLE001  (reported; the interpreter stays)
            failed = error
        if failed is None:
            self._states[mode] = (_READY, f'backend="auto": generated code, {size:,} rows, {how}')
            return
        reason = f"generated code failed to compile ({type(failed).__name__}: {failed})"
        self._states[mode] = (_INTERPRET, f'backend="auto": {reason}; interpreted')
        warnings.warn(f"fastad: {reason}; the interpreter runs it", RuntimeWarning, stacklevel=1)

    def derivative_width(self, mode: int) -> int:
        """Derivative numbers per point in ``mode``."""
        if mode in (VJP, GRAD):
            return self.k
        if mode == JVP:
            return self.m
        if mode == VALUES:
            return 0
        return self.m * self.k

    # -- evaluation ------------------------------------------------------------------
    def run(
        self, points: FloatArray, mode: int, directions: FloatArray | None, threads: int
    ) -> tuple[FloatArray, FloatArray, IdArray]:
        """``(values (N, m), derivatives (N, width), status)`` at every point.

        ``status`` holds each point's first failing guard or
        ``NO_FAILED_GUARD`` (an empty array for a program without guards).
        Generated code flags the points whose fast derivatives hold a nan;
        the interpreter gives those again, so either tier's bits come out.
        """
        n_points = points.shape[0]
        if not self._generated_ready(mode, n_points * self._n):
            return self._interpret(points, mode, directions, threads)
        values, derivatives, status = self._outputs(n_points, mode)
        recheck = np.zeros(n_points, np.bool_)
        flagged = self._generated.run(
            MODE_NAMES[mode],
            points,
            values if directions is None else directions,  # not read without directions
            values,
            derivatives,
            status,
            recheck,
            threads,
            threads > 1 and n_points >= PARALLEL_MIN_POINTS,
        )
        if flagged:
            rows = np.flatnonzero(recheck)
            again = self._interpret(
                points[rows], mode, None if directions is None else directions[rows], threads
            )
            values[rows], derivatives[rows] = again[0], again[1]
            if self.g:
                status[rows] = again[2]
        return values, derivatives, status

    def _outputs(self, n_points: int, mode: int) -> tuple[FloatArray, FloatArray, IdArray]:
        values = np.empty((n_points, self.m))
        derivatives = np.empty((n_points, max(1, self.derivative_width(mode))))
        status = np.full(n_points, NO_FAILED_GUARD, np.int64) if self.g else _NO_STATUS
        return values, derivatives, status

    def _interpret(
        self, points: FloatArray, mode: int, directions: FloatArray | None, threads: int
    ) -> tuple[FloatArray, FloatArray, IdArray]:
        """The lanes interpreter over every point: ``run``'s result."""
        n_points = points.shape[0]
        values, derivatives, status = self._outputs(n_points, mode)
        if directions is None:
            directions = values  # not read in this mode; any float64 2-D array
        if threads > 1 and n_points >= PARALLEL_MIN_POINTS:
            sweeps.sweep_points_parallel(
                self.program,
                self.template,
                points,
                directions,
                values,
                derivatives,
                status,
                mode,
                self._lanes,
                threads,
            )
        else:
            work = getattr(self._local, "work", None)
            if work is None:  # one work space per thread: calls never share buffers
                work = self._local.work = sweeps.new_work(self.template, self._lanes)
            sweeps.sweep_points(
                self.program, work, points, directions, values, derivatives, status, mode
            )
        return values, derivatives, status

    def point(self, point: FloatArray, mode: int, gradient: FloatArray) -> tuple[float, int]:
        """One point of a scalar-output program, VALUES or GRAD: ``(value, failed guard)``.

        GRAD writes the gradient into ``gradient`` (shape ``(k,)``). This is
        the latency path: no allocation, one kernel call.
        """
        generated = self._point_kernels.get(mode)
        if generated is not None:
            constants = self.constants
            if mode == GRAD:
                result = generated(point, gradient, constants)
            else:
                result = generated(point, constants)
            return result if self.g else (result, NO_FAILED_GUARD)
        if self._generated_ready(mode, self._n):
            kernel = self._generated.point(MODE_NAMES[mode])
            self._point_kernels[mode] = kernel
            if not self.g:
                self.fast_points[mode] = kernel
            return self.point(point, mode, gradient)
        try:
            work = self._local.point_work
        except AttributeError:  # per thread: concurrent calls never share a work space
            work = self._local.point_work = np.zeros((4, self.template.size))
            work[0] = self.template
        return sweeps.sweep_point(self.program, work, point, gradient, mode)
