"""The five node arrays of a tape: their staging while recording, growth, sync and trim.

Five parallel NumPy arrays hold the nodes: ``opcode`` (uint8), ``in0`` and
``in1`` (int32 operand ids, -1 where unused), ``val`` and ``grad``
(float64). They grow by amortised doubling while recording. Node ids grow
monotonically and every node references only smaller ids, so reverse id
order is a reverse topological order and the compiled sweeps are flat loops.

``TapeStorage`` (``fastad/core/storage.py``) extends ``NodeArrays`` with
constants, labels, source lines, guards and block values; recorders call
``push`` on it, inherited from here, so the hot path is one method call. This
module knows rows only: no constants, labels, block values or graph queries.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
from numpy.typing import NDArray

from fastad.core.block_table import INDEX_DTYPE
from fastad.kernels import optable
from fastad.util.errors import ConcurrentRecordingError

if TYPE_CHECKING:
    from types import FrameType

    from fastad.core.block_table import BlockTable
    from fastad.util.hints import FloatArray, IndexArray, OpcodeArray

OPCODE_DTYPE = np.uint8
VALUE_DTYPE = np.float64
# Recording appends rows to Python lists, which costs a fraction of four
# NumPy scalar writes; the lists are moved into the arrays in bulk before any
# sweep or read, and at least every 2**14 nodes to bound their memory.
_STAGE_MASK = (1 << 14) - 1
GROWTH_WARNING_BYTES = 1 << 30
"""A tape holding more than this (node arrays and block arrays) warns once."""
_COLUMNS = ("_opcode", "_in0", "_in1", "_val", "_grad")


# fastad/ itself (this file is fastad/core/node_arrays.py), with the separator, so
# that a user's folder named fastad_something is not taken for the package.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_frame(frame: FrameType | None) -> tuple[FrameType | None, int]:
    """The innermost frame of user code (outside the fastad package) from ``frame``
    outwards, and how many frames out it is (None where there is none)."""
    hops = 0
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        hops += 1
    return frame, hops


def _user_stacklevel() -> int:
    """The ``stacklevel`` for which ``warnings.warn``, called by the caller of this
    function, names the innermost line of user code."""
    return 2 + user_frame(sys._getframe(2))[1]  # 2: the caller's caller


class NodeArrays:
    """The node arrays of one tape, the rows staged for them, and the adjoint span.

    ``len()`` counts the rows recorded (staged ones included). ``lock`` is
    held by every sweep and every move of staged rows into the arrays, so that
    no sweep of one thread meets another's growth or sweep; not by ``push``
    (see ``_synced``). It is reentrant: a sweep holds it and syncs. ``blocks``
    is the tape's block table, whose bytes count towards the growth warning.
    """

    def __init__(self, capacity: int, blocks: BlockTable) -> None:
        self.lock = threading.RLock()
        self._blocks = blocks
        self._opcode: OpcodeArray = np.zeros(capacity, OPCODE_DTYPE)
        self._in0: IndexArray = np.zeros(capacity, INDEX_DTYPE)
        self._in1: IndexArray = np.zeros(capacity, INDEX_DTYPE)
        self._val: FloatArray = np.zeros(capacity, VALUE_DTYPE)
        self._grad: FloatArray = np.zeros(capacity, VALUE_DTYPE)
        self._n = 0
        # Rows in the arrays; the staged lists hold the rest. Two threads
        # recording onto one tape at once make push lose an id increment
        # (both read the same self._n): the lists then hold more rows than
        # the ids count, which sync sees before any sweep or read, and
        # refuses. A lock in push would cost 20-53% of eager recording.
        self._synced = 0
        self._corrupted = False
        self._adjoint_span = (0, 0)  # adjoints outside [lo, hi) are zero
        self._column_views: tuple[int, OpcodeArray | None, Any] = _NO_VIEWS
        # Rows not yet in the arrays, one list per column: appending to four
        # lists allocates nothing the garbage collector tracks (a row tuple
        # would), and the collector's passes were the largest recording cost.
        self._staged_opcode: list[int] = []
        self._staged_in0: list[int] = []
        self._staged_in1: list[int] = []
        self._staged_val: list[float] = []
        self._push_opcode = self._staged_opcode.append  # bound once: the hot path
        self._push_in0 = self._staged_in0.append
        self._push_in1 = self._staged_in1.append
        self._push_val = self._staged_val.append
        self._warned_growth = False

    def __len__(self) -> int:
        return self._n

    # -- recording ---------------------------------------------------------------
    def push(self, code: int, in0: int, in1: int, value: float) -> int:
        """Append one node and return its id, unchecked: the recorders' path (operands
        must already exist; ``Tape.push`` checks what a user gives)."""
        n = self._n
        self._push_opcode(code)
        self._push_in0(in0)
        self._push_in1(in1)
        self._push_val(value)
        self._n = n + 1
        if n & _STAGE_MASK == _STAGE_MASK:
            self.sync()
        return n

    def sync(self) -> None:
        """Move the staged rows into the arrays (growing them by doubling).

        Raises :class:`fastad.ConcurrentRecordingError` if threads recorded
        onto this tape at the same time (its ids are then not to be trusted).
        """
        if not self._staged_opcode and self._n == self._synced and not self._corrupted:
            return
        with self.lock:
            staged = self._staged_opcode
            n, start = self._n, self._synced
            staged_rows = n - start
            if (
                self._corrupted
                or len(staged) != staged_rows
                or len(self._staged_in0) != staged_rows
                or len(self._staged_in1) != staged_rows
                or len(self._staged_val) != staged_rows
            ):
                self.refuse_concurrent()
            if not staged:
                return
            if n > self._opcode.size:
                self._grow(n)
            arrays: tuple[NDArray[Any], ...] = (self._opcode, self._in0, self._in1, self._val)
            columns: tuple[list[Any], ...] = self._staged_columns()
            try:
                for array, column in zip(arrays, columns, strict=True):
                    array[start:n] = column
                    column.clear()
            except ValueError:  # another thread appended rows while these moved
                self.refuse_concurrent()
            self._synced = n

    def refuse_concurrent(self) -> NoReturn:
        """Mark the rows untrustworthy (until :meth:`clear_rows`) and raise
        :class:`fastad.ConcurrentRecordingError`."""
        self._corrupted = True
        raise ConcurrentRecordingError(_CONCURRENT_RECORDING) from None

    def _staged_columns(self) -> tuple[list[int], list[int], list[int], list[float]]:
        return self._staged_opcode, self._staged_in0, self._staged_in1, self._staged_val

    def _grow(self, needed: int) -> None:
        capacity = self._opcode.size
        while capacity < needed:
            capacity *= 2
        for name in _COLUMNS:
            old = getattr(self, name)
            new = np.zeros(capacity, old.dtype)
            new[: old.size] = old
            setattr(self, name, new)
        self._column_views = _NO_VIEWS  # the old arrays go now, not at the next sweep
        self.warn_growth()

    def warn_growth(self) -> None:
        """Say once that this tape keeps growing: nothing on a live tape is freed."""
        held = sum(getattr(self, name).nbytes for name in _COLUMNS) + self._blocks.nbytes
        if self._warned_growth or held <= GROWTH_WARNING_BYTES:
            return
        self._warned_growth = True
        warnings.warn(
            f"this fastad tape holds {self._n} nodes and {held / 2**30:.1f} GiB: a tape keeps "
            "every node (and array) recorded on it for as long as it lives. In a loop, record "
            "each step on a fresh tape (`with fa.Tape():`) or call tape.reset() after the "
            "optimiser step, and memory stays flat.",
            RuntimeWarning,
            stacklevel=_user_stacklevel(),
        )

    def clear_rows(self) -> None:
        """Forget every row but keep the allocated memory (the caller holds ``lock``)."""
        for column in self._staged_columns():  # dropped unread: a reset forgets them
            column.clear()
        self.clear_adjoints()
        self._n = self._synced = 0
        self._corrupted = False

    # -- adjoints ----------------------------------------------------------------
    # Sweeps touch only the span of ids from the lowest node their root depends
    # on to the root, so zeroing adjoints zeroes that span, not the whole tape:
    # on a long-lived tape, earlier history costs nothing per backward.
    def clear_adjoints(self) -> None:
        """Zero every scalar adjoint (those outside the span written since are zero)."""
        lo, hi = self._adjoint_span
        self._grad[lo:hi] = 0.0
        self._adjoint_span = (0, 0)

    def widen_adjoints(self, lo: int, hi: int) -> None:
        """Note that a sweep writes adjoints ``[lo, hi)``."""
        if not 0 <= lo <= hi <= self._n:
            raise ValueError(f"adjoint span [{lo}, {hi}) is not within the tape's {self._n} nodes")
        old_lo, old_hi = self._adjoint_span
        self._adjoint_span = (lo, hi) if old_hi == 0 else (min(lo, old_lo), max(hi, old_hi))

    # -- reading -------------------------------------------------------------------
    def columns(self) -> tuple[OpcodeArray, IndexArray, IndexArray, FloatArray, FloatArray]:
        """``opcode, in0, in1, val, grad`` of the first ``len(tape)`` rows, writable.

        For the sweep driver and the kernels; users get read-only views.
        """
        self.sync()
        n, opcode = self._n, self._opcode
        held_n, held_opcode, views = self._column_views
        if held_n == n and held_opcode is opcode:  # every sweep reads them: make them once
            return views
        views = (opcode[:n], self._in0[:n], self._in1[:n], self._val[:n], self._grad[:n])
        self._column_views = (n, opcode, views)  # new arrays (growth, trim) are new views
        return views

    def opcode_of(self, node: int) -> int:
        """The opcode of the valid id ``node`` (unchecked), without the column views."""
        self.sync()
        return int(self._opcode.item(node))

    def _view(self, name: str) -> Any:
        self.sync()
        view = getattr(self, name)[: self._n]
        view.flags.writeable = False
        return view

    @property
    def opcode(self) -> OpcodeArray:
        """Opcodes (uint8)."""
        return self._view("_opcode")

    @property
    def in0(self) -> IndexArray:
        """First operand ids (int32)."""
        return self._view("_in0")

    @property
    def in1(self) -> IndexArray:
        """Second operand ids (int32)."""
        return self._view("_in1")

    @property
    def inputs(self) -> NDArray[np.intp]:
        """Ids of the leaves (``fa.var`` nodes) in the order they were recorded."""
        self.sync()
        return np.flatnonzero(self._opcode[: self._n] == optable.INPUT)

    @property
    def capacity(self) -> int:
        """Rows allocated."""
        return int(self._opcode.size)

    @property
    def nbytes(self) -> int:
        """Bytes held by the five node arrays (capacity, not just length)."""
        self.sync()
        return sum(getattr(self, name).nbytes for name in _COLUMNS)

    # -- resizing ------------------------------------------------------------------
    def trim(self) -> None:
        """Release the arrays' spare capacity (``Tape.trim``)."""
        self.sync()
        for name in _COLUMNS:
            setattr(self, name, getattr(self, name)[: max(self._n, 1)].copy())
        self._column_views = _NO_VIEWS

    def fill(self, opcode: Any, in0: Any, in1: Any, val: Any) -> None:
        """Replace an empty tape's rows by validated arrays (``Tape.from_arrays``)."""
        n = len(opcode)
        if n > self._opcode.size:
            self._grow(n)
        self._opcode[:n], self._in0[:n], self._in1[:n], self._val[:n] = opcode, in0, in1, val
        self._n = self._synced = n
        self._column_views = _NO_VIEWS


_NO_VIEWS: tuple[int, None, tuple[()]] = (-1, None, ())
"""``NodeArrays.columns``' cache when it holds nothing."""

_CONCURRENT_RECORDING = (
    "several threads recorded onto this tape at the same time (or one read it while "
    "another recorded, or an exception such as Ctrl-C interrupted the recording of a node), "
    "so its node ids are no longer valid and nothing computed from it could be trusted. A "
    "tape records for one thread at a time: record each thread's work "
    "on its own tape (`with fa.Tape():` inside the thread; a thread's default tape is its "
    "own already), or hold a lock of your own around recording and reading. tape.reset() "
    "makes this tape usable again."
)
