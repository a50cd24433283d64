"""The interpreted tier of a function of arrays: its tape replayed at new arguments,
then the tape's own sweeps (gradient, JVP, VJP, HVP) on that replay.

The registry's block rules run with the exact rules for strong zeros, so
this tier is the reference the generated tier falls back to
(:mod:`fastad.compiled.array_dispatch`). The tape then holds the last
call's values (and, after a gradient without ``wrt``, its adjoints).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fastad.compiled.batch_errors import describe_guard
from fastad.compiled.definition import ArrayDefinition
from fastad.core.storage import as_stored
from fastad.eager.handle import storage_of
from fastad.eager.node import Block, Var
from fastad.util.errors import BranchError, NonFiniteError

if TYPE_CHECKING:
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray


def replay(
    tape: Tape,
    inputs: Sequence[Var | Block],
    guards: Sequence[tuple[int, bool]],
    output: Var | Block,
    arguments: Sequence[Any],
    check: bool = False,
) -> None:
    """Replay ``tape`` at ``arguments`` (checked: one per input, of its kind).

    Raises :class:`fastad.NonFiniteError` (with ``check``) naming the node that
    made the output non-finite, and :class:`fastad.BranchError` for a guard
    that goes the other way. A refused call leaves the tape as the last good
    call had it.
    """
    storage = storage_of(tape)
    kept = [tape.value(node.id) for node in inputs]
    for node, array in zip(inputs, arguments, strict=True):
        if isinstance(node, Block):  # a private float64 copy, the one copy made
            storage.set_leaf_value(node.id, as_stored(np.array(array, dtype=np.float64)))
        else:
            storage.set_leaf_value(node.id, float(array))
    try:
        tape.forward()
        if check:
            origin = tape.first_nonfinite(output.id)
            if origin is not None:
                raise NonFiniteError(origin)
        for guard, truth in guards:
            if (tape.value(guard) != 0.0) != truth:
                raise BranchError(describe_guard(tape, guard), bool(truth))
    except BaseException:
        # A refused call (a bad label, a branch the other way, a non-finite value
        # in checked mode) leaves the tape as the last good call had it: a save or
        # pickle afterwards must load and replay again.
        for node, value in zip(inputs, kept, strict=True):
            storage.set_leaf_value(node.id, value)
        tape.forward()
        raise


def unit(index: int, shapes: Sequence[tuple[int, ...]]) -> list[FloatArray]:
    """The unit direction along flat element ``index`` of arrays of ``shapes``, one per shape."""
    flat = np.zeros(sum(math.prod(shape) for shape in shapes))
    flat[index] = 1.0
    parts = np.split(flat, np.cumsum([math.prod(shape) for shape in shapes])[:-1])
    return [part.reshape(shape) for part, shape in zip(parts, shapes, strict=True)]


class Interpreter:
    """A function of arrays' tape, replayed and swept; calls serialised by ``lock``.

    Parameters
    ----------
    definition : ArrayDefinition
        The traced function.
    lock : threading.Lock
        The function's lock: the tape holds one call's values at a time.
    """

    def __init__(self, definition: ArrayDefinition, lock: threading.Lock) -> None:
        self._tape = definition.tape
        self._inputs = definition.inputs
        self._output = definition.output
        self._guards = definition.guards
        self._wrt = definition.wrt
        self._lock = lock

    def replay(self, checked: Sequence[Any], check: bool = False) -> None:
        """:func:`replay` of this function's tape at checked arguments (the caller locks)."""
        replay(self._tape, self._inputs, self._guards, self._output, checked, check)

    def output_value(self) -> float | FloatArray:
        """The output of the last replay: a copy of an array, or a float."""
        node = self._output.id
        block = self._tape.block_value(node)
        return block.copy() if block is not None else float(self._tape.value(node))

    def value(self, checked: Sequence[Any], check: bool) -> float | FloatArray:
        """The output at checked arguments (the caller locks)."""
        self.replay(checked, check)
        return self.output_value()

    def gradients(self, checked: Sequence[Any], check: bool) -> tuple[float, list[Any]]:
        """``(value, gradients)`` of a scalar output, one per ``wrt`` position (the caller
        locks); without ``wrt`` the tape's ``.grad`` holds the adjoints after."""
        self.replay(checked, check)
        value = cast(float, self.output_value())  # a scalar output: a float
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

    def swept(self, checked: Sequence[Any], sweep: Callable[[list[int]], Any]) -> Any:
        """``(output value, sweep(ids))``: the tape replayed at ``checked`` arguments, then
        ``sweep`` of the differentiated arguments' node ids, under the lock."""
        positions = list(range(len(self._inputs))) if self._wrt is None else self._wrt[0]
        with self._lock:
            self.replay(checked)
            return self.output_value(), sweep([self._inputs[i].id for i in positions])

    def hvp(self, checked: Sequence[Any], along: Sequence[Any]) -> tuple[Any, Any]:
        """``(value, H v)`` by the tape's forward-over-reverse sweep."""
        return self.swept(checked, lambda ids: self._tape.hvp(self._output, ids, along))

    def jvp(self, checked: Sequence[Any], along: Sequence[Any]) -> tuple[Any, Any]:
        """``(value, J v)`` by the tape's tangent sweep (no ``-0.0``)."""
        value, tangent = self.swept(
            checked, lambda ids: self._tape.tangent(self._output, ids, along)
        )
        if isinstance(tangent, np.ndarray) and tangent.ndim:
            return value, tangent + 0.0
        return value, float(tangent) + 0.0

    def vjp(self, checked: Sequence[Any], cotangent: FloatArray) -> tuple[Any, Any]:
        """``(value, u^T J)`` by the tape's backward sweep seeded with ``cotangent``."""
        return self.swept(checked, lambda ids: self._tape.vjp(self._output, ids, cotangent))

    def jacobian(
        self,
        checked: Sequence[Any],
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
                    pulled = tape.vjp(self._output, ids, unit(row, [output])[0])
                    matrix[row] = np.concatenate([np.reshape(g, -1) for g in pulled])
            else:  # a column per input element
                for column in range(n):
                    tangent = tape.tangent(self._output, ids, unit(column, shapes))
                    matrix[:, column] = np.reshape(tangent, -1)

        self.swept(checked, sweeps)

    def hessian(
        self, checked: Sequence[Any], rows: FloatArray, shapes: list[tuple[int, ...]]
    ) -> None:
        """Fill ``rows`` by the interpreter's Hessian-vector products: one replay, a
        product per row."""

        def sweeps(ids: list[int]) -> None:
            for row in range(rows.shape[0]):
                product = self._tape.hvp(self._output, ids, unit(row, shapes))
                rows[row] = np.concatenate([np.reshape(p, -1) for p in product])

        self.swept(checked, sweeps)
