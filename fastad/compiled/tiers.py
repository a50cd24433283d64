"""Which replay tier runs each kind of call of a compiled function, and when it changes.

One :class:`Tiers` per compiled function decides, mode by mode (a mode is a
kind of call: ``"values"``, ``"grad"``, ...), between the lanes interpreter
and generated code, following ``backend``:

- ``"interpret"``: the interpreter, always;
- ``"codegen"``: generated code, compiled by the first call that needs it;
- ``"auto"``: a tiered JIT, as HotSpot's. A mode starts on the interpreter
  and counts its work; past ``HOT_NODE_POINTS`` node-points its generated
  code compiles in a background thread and takes over when ready (a module
  an earlier process cached loads the same way, at the first call). Code of
  more than its budget (``module_cache.BUDGET_ROWS`` rows for functions of scalars,
  ``blockcode.BUDGET_ROWS`` for functions of arrays) stays interpreted for good. One-off
  uses never wait for a program's compile, except on a machine where the
  interpreter's own kernels are not compiled yet (a cold cache: about 25 s
  for functions of scalars): there a program within the budget compiles its
  generated code at the first call, which costs a fraction of that.

Per mode the state is one of ``_INTERPRET`` (for good), ``_COUNTING``
(auto: interpreting, counting), ``_BUILDING`` (auto: a background thread
compiles or loads), ``_READY`` (generated code runs), with a reason the
user reads through ``f.tier()``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import NamedTuple, Protocol

from fastad.compiled import module_cache

BACKENDS = ("auto", "interpret", "codegen")

_INTERPRET, _COUNTING, _BUILDING, _READY = "interpret", "counting", "building", "ready"
HOT_NODE_POINTS = 50_000_000
"""``backend="auto"``: the interpreted work (nodes times points, summed over
calls of one kind) after which generated code is compiled in the background:
about a quarter of a second of interpreter time, so a function used once
never waits for a compile and one used in earnest soon runs generated code."""


INTERPRETER_COLD_SECONDS = 25
"""What compiling fastad's lanes interpreter costs on a fresh machine (2 cores), the
first time any program uses it; a program's generated code compiles in a fraction of
that (0.2 s at 50 rows, 2 s at 20,000), so ``auto`` starts there while the interpreter
is cold."""


HOT_CALLS = 64
"""``backend="auto"``, functions of arrays: a call counts at least
``HOT_NODE_POINTS / HOT_CALLS`` element operations, so a function of small
arrays used in a training loop builds its kernel by its 64th call (a large
one sooner, by its work), and one called a few times never does."""


def _threads_available() -> bool:
    return module_cache.configured_threads() > 1


class Code(Protocol):
    """The generated code a :class:`Tiers` builds.

    :class:`fastad.compiled.module_cache.GeneratedCode` for functions of scalars,
    :class:`fastad.compiled.array_kernel.BlockCode` for functions of arrays."""

    @property
    def budget_rows(self) -> int: ...  # ``auto`` builds no code of more rows

    def rows(self, mode: str) -> int: ...
    def expected_seconds(self, mode: str) -> float: ...  # a cold compile of mode's code
    def is_cached(self, mode: str) -> bool: ...
    def prepare(self, mode: str, parallel: bool, report: bool = True) -> None: ...
    def prepare_latency(self, mode: str) -> None: ...  # what one-point calls use, if any


class Tier(NamedTuple):
    """Which replay tier runs a mode, and why."""

    name: str  # "codegen" or "interpret"
    reason: str


class Tiers:
    """The tier of every mode of one program (see the module docstring).

    Safe to use from several threads: states change under a lock, and the
    background thread only ever replaces a ``_BUILDING`` state.
    """

    def __init__(
        self, backend: str, code: Code, interpreter_warm: Callable[[], bool] = lambda: True
    ) -> None:
        self.backend = backend
        self._code = code
        self._interpreter_warm = interpreter_warm
        self._lock = threading.Lock()
        self._states: dict[str, tuple[str, str]] = {}
        self._work: dict[str, int] = {}  # node-points interpreted per mode (auto)

    # Per mode, one of: _INTERPRET (for good), _COUNTING (auto: interpreting
    # and counting the work done), _BUILDING (auto: generated code compiling
    # in a background thread), _READY (generated code runs), with a reason.
    def tier(self, mode: str) -> Tier:
        """The tier that runs ``mode`` now, and why (a question: it starts nothing)."""
        state, reason = self._states.get(mode) or self._first_state(mode)
        if state == _BUILDING and mode not in self._states:
            reason = (
                'backend="auto": generated code is in the cache; it loads in a background '
                "thread at the first call"
            )
        if state == _COUNTING:  # the count moves on
            size = self._code.rows(mode)
            reason = self._counting_reason(mode, size)
        return Tier("codegen" if state == _READY else "interpret", reason)

    def _state(self, mode: str) -> tuple[str, str]:
        found = self._states.get(mode)
        if found is None:
            with self._lock:
                found = self._states.get(mode)
                if found is None:
                    found = self._states[mode] = self._first_state(mode)
                    if found[0] == _BUILDING:  # stored first: the thread replaces it
                        self._start_build(mode, "loaded from the cache")
        return found

    def _first_state(self, mode: str) -> tuple[str, str]:
        if self.backend == "interpret":
            return _INTERPRET, 'backend="interpret"'
        size = self._code.rows(mode)
        if self.backend == "codegen":  # compiled by the first call that needs it
            return _READY, f'backend="codegen": generated code, {size:,} rows'
        if size > self._code.budget_rows:
            seconds = self._code.expected_seconds(mode)
            return _INTERPRET, (
                f'backend="auto": {size:,} rows of code would take about {seconds:.0f} s to '
                f"compile, above the budget of {self._code.budget_rows:,} rows; "
                'backend="codegen" compiles them anyway'
            )
        cached = self._code.is_cached(mode)
        if not self._interpreter_warm():  # seconds of generated code, not the interpreter's
            seconds = self._code.expected_seconds(mode)
            how = "loaded from the cache" if cached else f"about {seconds:.1f} s to compile"
            return _READY, (
                f'backend="auto": generated code, {size:,} rows ({how}), from the first call: '
                "fastad's interpreter kernels were not compiled on this machine then (about "
                f"{INTERPRETER_COLD_SECONDS} s)"
            )
        if cached:  # a load, not a compile: in the background now
            return _BUILDING, (
                'backend="auto": generated code is loading from the cache in a background '
                "thread; interpreted meanwhile"
            )
        return _COUNTING, self._counting_reason(mode, size)

    def _counting_reason(self, mode: str, size: int) -> str:
        return (
            f'backend="auto": interpreted until these calls have done {HOT_NODE_POINTS:,} '
            f"node-points of work ({self._work.get(mode, 0):,} so far); then its generated "
            f"code ({size:,} rows, about {self._code.expected_seconds(mode):.0f} s) "
            "compiles in a background thread and takes over"
        )

    def ready(self, mode: str, node_points: int) -> bool:
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

    def fail(self, mode: str, error: BaseException) -> None:
        """Generated code for ``mode`` could not be built: the interpreter runs it for good,
        and ``tier`` says why (a warning says it once)."""
        reason = f"generated code could not be built ({type(error).__name__}: {error})"
        self._states[mode] = (_INTERPRET, f'backend="{self.backend}": {reason}; interpreted')
        warnings.warn(f"fastad: {reason}; the interpreter runs it", RuntimeWarning, stacklevel=3)

    def _start_build(self, mode: str, how: str) -> None:
        thread = threading.Thread(
            target=self._build, args=(mode, how), name="fastad-codegen", daemon=True
        )
        thread.start()

    def _build(self, mode: str, how: str) -> None:
        """The background thread: compile or load ``mode``'s kernels, then switch to them."""
        size = self._code.rows(mode)
        failed: BaseException | None = None
        try:
            # Quiet: nobody waits for it.
            self._code.prepare(mode, parallel=_threads_available(), report=False)
            self._code.prepare_latency(mode)
        except BaseException as error:  # noqa: BLE001  (reported; the interpreter stays)
            failed = error
        if failed is None:
            self._states[mode] = (_READY, f'backend="auto": generated code, {size:,} rows, {how}')
            return
        self.fail(mode, failed)
