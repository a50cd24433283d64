"""Failing points of a compiled batch: ``errors="raise" | "mask"`` and ``check=True``.

A batch of 10^6 points should not fail as a whole for one point whose traced
branch goes the other way: ``errors="mask"`` gives ``nan`` at such points and
a boolean mask of them. ``check=True`` looks for the first point whose
finite inputs gave a non-finite value or derivative and replays that one
point eagerly, on a private copy of the traced tape, to name the node that
made the ``nan``/``inf`` (its op, label and, for functions compiled with
``debug=True``, the source line that recorded it, which pickles and files
keep).
The batch itself runs at full speed either way: the check reads the results
afterwards and replays at most one point.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from fastad.eager.handle import storage_of
from fastad.eager.tape import Tape
from fastad.kernels import lane_sweeps, optable
from fastad.util.errors import BranchError, NonFiniteError, NonFiniteOrigin

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, IdArray

ERRORS = ("raise", "mask")
NO_FAILED_GUARD = lane_sweeps.NO_FAILED_GUARD


def check_errors(errors: object) -> None:
    """Refuse an ``errors=`` that is not one of :data:`ERRORS`."""
    if errors not in ERRORS:
        raise ValueError(f'errors must be "raise" or "mask", got {errors!r}')


def branch_error(tape: Tape, guards: IdArray, points: FloatArray, status: IdArray) -> BranchError:
    """The error for the points whose ``status`` names a failed guard (some do).

    ``guards`` are the program's rows ``(node id, truth)``; the error names the
    first failing point's comparison, then the other failing comparisons.
    """
    failing = np.flatnonzero(status != NO_FAILED_GUARD)
    found, first = np.unique(status[failing], return_index=True)
    described = [describe_guard(tape, int(guards[guard, 0])) for guard in found[np.argsort(first)]]
    truth = bool(guards[int(status[failing[0]]), 1])
    return BranchError(
        described[0],
        truth,
        failing,
        tuple(points[failing[0]].tolist()),
        points.shape[0],
        tuple(described[1:]),
    )


def describe_guard(tape: Tape, node: int) -> str:
    """A guard node as its comparison reads (``x > 0.0``), or ``bool(...)`` of the node."""
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


def mask_failed(values: FloatArray, derivatives: FloatArray, status: IdArray) -> NDArray[np.bool_]:
    """Set the rows of points whose guard failed to ``nan``; return their mask."""
    if status.size == 0:  # a program without guards: no point can fail
        return np.zeros(values.shape[0], np.bool_)
    failed = status != NO_FAILED_GUARD
    values[failed] = np.nan
    derivatives[failed] = np.nan
    return failed


def first_nonfinite_point(
    points: FloatArray,
    directions: FloatArray | None,
    values: FloatArray,
    derivatives: FloatArray | None,
    failed: NDArray[np.bool_] | None,
) -> int | None:
    """The first point whose finite inputs (and direction) gave a non-finite result, or None.

    A value counts where the point is finite, a derivative where the point
    and its direction (tangent, cotangent) are.

    Points masked as ``failed`` (a guard went the other way) do not count:
    their ``nan`` is the mask's, not a computation's.
    """
    finite_points = np.isfinite(points).all(axis=1)
    bad = ~np.isfinite(values).all(axis=1)  # the values do not read the directions
    if derivatives is not None:
        finite_both = finite_points
        if directions is not None:
            finite_both = finite_points & np.isfinite(directions).all(axis=1)
        bad |= ~np.isfinite(derivatives).all(axis=1) & finite_both
    bad &= finite_points
    if failed is not None:
        bad &= ~failed
    found = np.flatnonzero(bad)
    return int(found[0]) if found.size else None


class Diagnosis:
    """Replays single points of a traced program eagerly, to name where a ``nan`` was made.

    Holds a private debug copy of the tape (built on first use, with the
    source lines the trace recorded), so the compiled function's own tape is
    never changed. Calls are serialised: the copy holds one point at a time.
    """

    def __init__(
        self,
        tape: Tape,
        inputs: IdArray,
        outputs: IdArray,
        sources: Mapping[int, tuple[str, int]],
    ) -> None:
        self._tape = tape
        self._inputs = inputs
        self._outputs = outputs
        self._sources = dict(sources)
        self._copy: Tape | None = None
        self._lock = threading.Lock()

    def error(
        self, points: FloatArray, index: int, values_bad: bool, derivatives: bool
    ) -> NonFiniteError:
        """The ``NonFiniteError`` for point ``index`` of ``points``.

        ``values_bad``: an output value is non-finite there (else only a
        derivative is); ``derivatives``: the call computed derivatives.
        """
        point = points[index]
        with self._lock:
            tape = self._replayed(point)
            origin = self._origin(tape, values_bad, derivatives)
        hint = ""
        if origin.node >= 0 and not self._sources:
            hint = " (compile with fa.compile(..., debug=True) to see the line that recorded it)"
        return NonFiniteError(origin, index, tuple(point.tolist()), points.shape[0], hint)

    def _replayed(self, point: FloatArray) -> Tape:
        tape = self._copy
        if tape is None:
            source = self._tape
            tape = Tape(capacity=max(len(source), 1), debug=True)
            storage = storage_of(tape)
            storage.fill(source.opcode, source.in0, source.in1, source.val)
            for node, label in source.labels.items():
                tape.set_label(node, label)
            for node, location in self._sources.items():
                storage.set_source(node, location)
            self._copy = tape
        for node, value in zip(self._inputs.tolist(), point.tolist(), strict=True):
            storage_of(tape).set_leaf_value(node, value)
        tape.forward()
        return tape

    def _origin(self, tape: Tape, values_bad: bool, derivatives: bool) -> NonFiniteOrigin:
        outputs = self._outputs.tolist()
        if values_bad:
            for output in outputs:
                origin = tape.first_nonfinite(output)
                if origin is not None:
                    return origin
        if derivatives:
            for output in outputs:
                try:
                    tape.backward(output, check=True)
                except NonFiniteError as error:
                    return error.origin
        # Every value and first-order adjoint is finite at this point: the
        # non-finite number came from a tangent or second-order rule, which
        # the eager check does not trace edge by edge.
        return NonFiniteOrigin(
            phase="derivative", node=-1, op="", label=None, inputs=(), value=float("nan")
        )
