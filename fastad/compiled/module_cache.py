"""The code-generation tier of compiled functions, and the module cache of generated text.

:class:`GeneratedCode` is the second tier of compiled functions of scalars:
:mod:`fastad.kernels.scalar_source` writes the text of a program's kernels,
:mod:`fastad.compiled.native_code` lowers it to LLVM IR, compiles it and
caches the object code, and :mod:`fastad.kernels.native_calls` calls it.

The rest of this module keeps generated *Numba* modules on disk for the
generated kernels of functions of arrays (:mod:`fastad.compiled.array_kernel`):
Numba caches machine code only for functions whose source is a file
(functions made with ``exec`` cannot use ``cache=True``). Those files live in
``cache_directory()/generated`` (``$FASTAD_CACHE_DIR`` or the per-user cache
folder, never inside ``site-packages``; Numba's files for these modules go
beside fastad's own, under ``numba/``). A module's file name is a hash of its
text and of the fastad, Numba and Python versions and fastad's Numba options.
Before a module is used its file is read back and compared with the text
generated now, character for character: a corrupt, truncated or foreign file
is rewritten, never trusted. Writes go to a temporary file in the same folder
and are renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import sys
import threading
import types
import uuid
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from fastad.compiled import native_code
from fastad.compiled.parallel import threaded_region
from fastad.kernels import native_calls
from fastad.kernels import scalar_source as generator
from fastad.kernels.jit import JIT_OPTIONS, cache_directory
from fastad.util.progress import progress

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from fastad.util.hints import FloatArray, IdArray

Program = generator.Program
MODES = generator.MODES

# The compile time of generated code, measured on the CI-sized machine (2 cores;
# `python bench/codegen_curve.py`, the table in docs/compiled.md): linear in the
# code, about COMPILE_SECONDS_PER_ROW per row (a row: one node in one pass) plus a
# fixed cost: 0.4 s at 50 rows, 1.6 s at 20,000 (a gradient of 10^4 nodes), 4.7 s
# at 60,000 (a long program's modules compile on both cores). `auto` generates code
# up to BUDGET_ROWS rows (about 3 s in a
# background thread, once per machine thanks to the cache): at 20,000 rows
# generated code ran 1.15x the interpreter's speed on a program of sin and tanh
# and 2.4x on the RK4 pendulum's arithmetic (16,800 rows), but at 60,000 rows the
# sin-and-tanh program ran 0.96x: past the budget the interpreter is as fast.
COMPILE_SECONDS_FIXED = 0.2
COMPILE_SECONDS_PER_ROW = 0.000075
BUDGET_ROWS = 40_000
# A batch kernel runs on the host's vectors of points outside fast math (libm on each
# lane) where at most this share of its rows calls libm: measured on the 2-core AVX-512
# machine with eight lanes, an RK4 pendulum (0.095 calls a row) ran 0.78x its scalar
# kernel's time, example 2 (0.04) 0.85x, random programs of sin and tanh 0.5-0.9x at
# 0.15 and 1.0-1.5x from 0.33 (each lane's call after the other's, the vectors spilled
# around them). Vector code compiles as one module (scalar code's parts are shared
# out among threads) with a call per lane: about twice the scalar code's time (the
# pendulum's 16,796 rows in 1.4 s against 0.6-0.8 with fastad's kernels warm), so only
# kernels of up to VECTOR_ROWS rows run on vectors, within the compile time of
# BUDGET_ROWS of scalar code.
VECTOR_CALLS_PER_ROW = 0.2
VECTOR_ROWS = 20_000
VECTOR_COMPILE_FACTOR = 2.0


def configured_threads() -> int:
    """Numba's configured number of threads, read without starting its thread pool.

    ``numba.get_num_threads()`` launches the pool on first use, holding a
    lock meanwhile; a fork at that moment leaves the child that lock held.
    """
    return int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # set at import


def rows(program: Program, mode: str) -> int:
    """The size of ``mode``'s generated code for ``program``: nodes times passes."""
    return int(program.opcode.size) * generator.passes(program, mode)


def expected_compile_seconds(size: int) -> float:
    """The cold compile time the measured curve predicts for ``size`` rows."""
    return COMPILE_SECONDS_FIXED + COMPILE_SECONDS_PER_ROW * size


@cache
def _version_key() -> str:
    try:
        fastad_version = importlib.metadata.version("fastad")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        fastad_version = "source"
    return (
        f"fastad {fastad_version}; numba {numba.__version__}; python {sys.version}; "
        f"options {sorted(JIT_OPTIONS.items())}"
    )


def module_key(source: str) -> str:
    """The cache key of a generated module: its text and every version it depends on."""
    digest = hashlib.sha256()
    digest.update(_version_key().encode())
    digest.update(b"\0")
    digest.update(source.encode())
    return digest.hexdigest()[:32]


def load_module(source: str, name: str) -> types.ModuleType:
    """The module ``source`` defines, from its cached file (written if need be).

    ``name`` is the module's name (``__name__``). Without a writable cache
    folder the module is built from the text directly: it works, and its
    kernels compile afresh in every process (fastad's cache warning says so).
    """
    with _MODULES_LOCK:  # one process-wide lock: sys.modules is shared by all programs
        known = sys.modules.get(name)
        if known is not None and getattr(known, "__fastad_source__", None) == source:
            return known
        path = _cached_file(source, name)
        module = types.ModuleType(name)
        module.__file__ = str(path) if path is not None else f"<{name}>"
        # Compiled from the text just checked, not imported: an import would
        # trust a bytecode file in __pycache__ that is keyed by timestamp only.
        code = compile(source, module.__file__, "exec")
        # Registered before it runs: Numba finds a kernel's module by name
        # (inspect.getmodule), and a module it cannot find is never cached.
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)  # noqa: S102  (fastad's own generated code)
        except BaseException:
            del sys.modules[name]
            raise
        module.__dict__["__fastad_source__"] = source  # complete: others may use it
        return module


_MODULES_LOCK = threading.Lock()
_COMPILING = threading.Lock()
"""Held while generated kernels compile, in whatever thread (a background
build or a user's). A compile holds Numba's compiler lock, and a child
forked meanwhile would inherit it held by a thread it does not have: its
first compile would hang for good. So a fork waits for the compile to end
(``os.register_at_fork`` below), and for any module being built."""


def _before_fork() -> None:
    _MODULES_LOCK.acquire()
    _COMPILING.acquire()


def _after_fork() -> None:
    _COMPILING.release()
    _MODULES_LOCK.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork
    )


def _cached_file(source: str, name: str) -> Path | None:
    root = cache_directory()
    if root is None:
        return None
    folder = root / "generated"
    path = folder / f"{name}.py"
    try:
        if path.is_file() and not path.is_symlink() and path.read_text("utf-8") == source:
            return path
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            temporary.write_text(source, "utf-8")
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    except (OSError, UnicodeDecodeError) as error:
        warnings.warn(
            f"fastad: cannot cache generated code in {folder} ({error}); it will be compiled "
            "afresh in every process",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return path


_typeof: Callable[[object], Any] = numba.typeof  # Numba's types, for compile()


_KERNEL_NAMES = {"batch": "batch", "parallel": "threaded", "point": "one point"}


def compile_kernels(
    kernels: list[tuple[Any, tuple[Any, ...]]],
    what: Callable[[str], str],
    expected: float,
    report: bool,
) -> None:
    """Compile each dispatcher for its arguments' types, without calling it.

    One compile at a time in the process (``_COMPILING``: a fork waits for
    it); a kernel another thread compiled meanwhile is skipped. ``what``
    turns the names of the kernels to compile into the progress message,
    shown on stderr with ``report`` when the compile takes over a second.
    """
    with _COMPILING:
        missing = [(kernel, args) for kernel, args in kernels if uncompiled(kernel)]
        if not missing:
            return
        names = ", ".join(
            _KERNEL_NAMES.get(kernel.__name__, kernel.__name__) for kernel, _ in missing
        )
        with progress(what(names), expected=expected) if report else _quiet():
            for kernel, arguments in missing:
                kernel.compile(tuple(_typeof(argument) for argument in arguments))


def is_compiled(text: str, name: str) -> bool:
    """Whether module ``name`` holds exactly ``text`` in the cache and its kernels compiled
    there before (:func:`mark_compiled`): a later process only loads them."""
    root = cache_directory()
    if root is None:
        return False
    folder = root / "generated"
    try:
        return (folder / f"{name}.compiled").is_file() and (folder / f"{name}.py").read_text(
            "utf-8"
        ) == text
    except (OSError, UnicodeDecodeError):
        return False


def mark_compiled(name: str) -> None:
    """Note beside module ``name``'s file that its kernels compiled (a hint, never trusted)."""
    root = cache_directory()
    if root is not None:
        marker = root / "generated" / f"{name}.compiled"
        with contextlib.suppress(OSError):
            marker.touch()


def uncompiled(kernel: Any) -> bool:
    """A dispatcher that has no compiled signature yet (False under NUMBA_DISABLE_JIT)."""
    return hasattr(kernel, "signatures") and not kernel.signatures


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    yield


class Modules:
    """One program's generated modules, each loaded once (:func:`load_module`), from
    ``source(mode)``'s ``(text, module name)``. Safe to use from several threads."""

    def __init__(self, source: Callable[[str], tuple[str, str]]) -> None:
        self._source = source
        self._loaded: dict[str, types.ModuleType] = {}
        self._lock = threading.Lock()

    def get(self, mode: str) -> types.ModuleType:
        """``mode``'s module, loaded by the first call that asks."""
        module = self._loaded.get(mode)
        if module is None:
            with self._lock:
                module = self._loaded.get(mode)
                if module is None:
                    module = self._loaded[mode] = load_module(*self._source(mode))
        return module


class GeneratedCode:
    """The generated code of one program, one native module per mode, made when first asked
    for: the kernels' text (``scalar_source``) lowered to LLVM IR and compiled by
    :mod:`fastad.compiled.native_code`, or loaded from its cache; called through the
    kernels of :mod:`fastad.kernels.native_calls`.

    Safe to use from several threads: a module is built once, under a lock.
    """

    def __init__(
        self, program: Program, title: str, fast_math: native_code.Vectors | None = None
    ) -> None:
        self._program = program
        self._title = title  # for progress reports only: never part of the code
        self.fast_math = fast_math  # batch kernels on vectors of points (``vector_ir``)
        # Every node's traced value: the kernels read the constants from it.
        self.constants = np.append(program.values, 0.0)
        self._sources: dict[tuple[str, str], tuple[str, str]] = {}
        self._batch_vectors: dict[str, native_code.Vectors | None] = {}  # by mode
        self._vector_failures: dict[str, str] = {}  # why a mode's vector code did not build
        self._natives: dict[tuple[str, str], native_code.Native] = {}
        self._prepared: set[tuple[str, str, bool]] = set()  # (mode, kernel, parallel) ready

    @property
    def program(self) -> Program:
        """The program the kernels evaluate."""
        return self._program

    def _source(self, mode: str, kernel: str = "batch") -> tuple[str, str]:
        """``(text, module name)`` of ``mode``'s ``kernel`` (``"batch"`` or ``"point"``),
        generated once; the name is a hash of the text and of everything else the
        machine code depends on."""
        found = self._sources.get((mode, kernel))
        if found is None:
            with progress(f"generating code for {self._title} ({mode}, {kernel})"):
                text = generator.module_source(self._program, mode, (kernel,))
                if kernel == "batch":
                    vectors = self._batch_vectors[mode] = self._vectors(mode, text)
                    if vectors is not None:
                        text = generator.on_vectors(text, *vectors)
            found = self._sources[mode, kernel] = (text, native_code.module_name(text))
        return found

    def _vectors(self, mode: str, text: str) -> native_code.Vectors | None:
        """The vectors of points ``mode``'s batch kernel (``text``) runs on, or None: one
        point at a time.

        Fast math's, where asked for. Else the host's, with libm on each lane (the
        scalar kernel's bits), for a kernel of at most ``VECTOR_ROWS`` rows that calls
        libm in at most ``VECTOR_CALLS_PER_ROW`` of them: its arithmetic then runs on
        vectors. Where calls are denser a point at a time is faster, a math function's
        lanes running one after another.
        """
        if self.fast_math is not None:
            return self.fast_math
        host = native_code.default_vectors()
        size = rows(self._program, mode)
        if host is None or size > VECTOR_ROWS:
            return None
        return host if generator.libm_calls(text) <= VECTOR_CALLS_PER_ROW * size else None

    def vectors_reason(self, mode: str) -> str | None:
        """How ``mode``'s batches run on vectors of points, for ``f.tier``: fast math's
        always; the host's vectors once the batch kernel's code was made (its first
        batch, or its build in the background). None: a point at a time, or not
        known yet."""
        if self.fast_math is not None:
            return (
                f"batches in fast math, {self.fast_math.lanes} points per vector (glibc's "
                "libmvec; a single point runs libm)"
            )
        if mode in self._vector_failures:
            return (
                f"batches a point at a time: vector code not built ({self._vector_failures[mode]})"
            )
        vectors = self._batch_vectors.get(mode)
        if vectors is None:
            return None
        return f"batches on vectors of {vectors.lanes} points (libm on each lane)"

    def is_cached(self, mode: str) -> bool:
        """Whether ``mode``'s batch code is in the cache: a load, not a compile."""
        return native_code.is_cached(self._source(mode)[1])

    def _native(self, mode: str, kernel: str, report: bool) -> native_code.Native:
        found = self._natives.get((mode, kernel))
        if found is not None:
            return found
        text, name = self._source(mode, kernel)  # before any lock: a duplicate is harmless
        size = rows(self._program, mode)
        message = f"compiling generated code for {self._title} ({mode}, {size:,} rows)"
        expected = (
            self.expected_seconds(mode) if kernel == "batch" else expected_compile_seconds(size)
        )
        # One build at a time, under the lock a fork waits for (LLVM's locks would not be
        # the child's); the progress report's thread ends outside it.
        with (
            progress(message, expected=expected)
            if report and not native_code.is_cached(name)
            else _quiet()
        ):
            with _COMPILING:
                found = self._natives.get((mode, kernel))
                if found is None:
                    try:
                        found = native_code.native(text, name, kernel)
                    except native_code.GenerationError as error:
                        if kernel != "batch" or self.fast_math or not self._batch_vectors.get(mode):
                            raise
                        found = self._scalar_instead(mode, error)
                    self._natives[mode, kernel] = found
        return found

    def _scalar_instead(self, mode: str, error: Exception) -> native_code.Native:
        """``mode``'s batch kernel a point at a time, where its vector code (outside fast
        math) did not build: the same bits, slower. Says so in a warning and in
        ``f.tier``; the scalar code's own failure is the call's."""
        self._vector_failures[mode] = str(error)  # a GenerationError names its cause
        warnings.warn(
            f"fastad: the vector code of {self._title} ({mode}) could not be built "
            f"({self._vector_failures[mode]}); its batches run a point at a time",
            RuntimeWarning,
            stacklevel=2,
        )
        text = generator.module_source(self._program, mode, ("batch",))
        name = native_code.module_name(text)
        self._batch_vectors[mode] = None
        self._sources[mode, "batch"] = (text, name)
        return native_code.native(text, name, "batch")

    def prepare_latency(self, mode: str) -> None:
        """Compile (or load) ``mode``'s one-point kernel, where it has one: the background
        build does this too, so a one-point call never waits for a compile."""
        if self._program.outputs.size == 1 and mode in generator.POINT_MODES:
            self.prepare(mode, parallel=False, report=False, kernel="point")

    def prepare(
        self, mode: str, parallel: bool, report: bool = True, kernel: str = "batch"
    ) -> None:
        """Compile (or load from the cache) ``mode``'s ``kernel`` and the kernels that call it.

        The calling kernels are fastad's own (cached once per machine); they
        are compiled for the argument types of the real calls, without being
        called (a call of the threaded kernel could meet another thread's
        parallel region, which Numba's workqueue threading layer does not
        survive). With ``report``, a slow compile reports progress on stderr
        (a background compile keeps quiet). Raises
        :class:`~fastad.compiled.native_code.GenerationError` when the code
        cannot be built.
        """
        if (mode, kernel, parallel) in self._prepared or (mode, kernel, True) in self._prepared:
            return
        found = self._native(mode, kernel, report)
        program = self._program
        k, m = program.inputs.size, program.outputs.size
        kernels: list[tuple[Any, tuple[Any, ...]]] = []
        if kernel == "batch":
            width = max(1, generator.derivative_width(program, mode))
            arrays = (
                np.empty((0, k)),
                np.empty((0, max(k, m))),
                np.empty((0, m)),
                np.empty((0, width)),
                np.empty(0, np.int64),
                np.zeros(0, np.bool_),
                self.constants,
            )
            kernels.append((native_calls.run_batch, (*found, *arrays, 0, 0)))
            if parallel:
                kernels.append((native_calls.run_parallel, (*found, *arrays, 1)))
        else:
            point = native_calls.POINT_KERNELS[mode, bool(program.guards.shape[0])]
            vectors = [np.zeros(k) for _ in generator.POINT_PARAMETERS[mode].split(", ")[:-1]]
            kernels.append((point, (*found, *vectors, self.constants)))
        if any(uncompiled(dispatcher) for dispatcher, _ in kernels):
            compile_kernels(
                kernels,
                lambda names: f"compiling fastad's calls of generated code ({names})",
                expected_compile_seconds(0),
                report,
            )
        self._prepared.add((mode, kernel, parallel))

    @property
    def budget_rows(self) -> int:
        """``auto`` builds no code of more rows than this (``BUDGET_ROWS``)."""
        return BUDGET_ROWS

    def rows(self, mode: str) -> int:
        """The size of ``mode``'s code: nodes times passes."""
        return rows(self._program, mode)

    def expected_seconds(self, mode: str) -> float:
        """The cold compile time of ``mode``'s batch code: the measured curve's for its
        rows, ``VECTOR_COMPILE_FACTOR`` times that for vector code (known once its text
        was made: ``is_cached`` makes it)."""
        seconds = expected_compile_seconds(self.rows(mode))
        return seconds * VECTOR_COMPILE_FACTOR if self._batch_vectors.get(mode) else seconds

    def run(
        self,
        mode: str,
        points: FloatArray,
        directions: FloatArray,
        values: FloatArray,
        derivatives: FloatArray,
        status: IdArray,
        recheck: NDArray[np.bool_],
        threads: int,
        parallel: bool,
    ) -> int:
        """Evaluate every point in ``mode`` (the arrays as the interpreter's batch takes them).

        Returns how many points it flagged in ``recheck`` (a zeroed array of
        one flag per point): their derivatives hold a nan, and the exact
        rules must give them again (see ``fastad.kernels.scalar_source``).
        """
        self.prepare(mode, parallel)
        batch = self._natives[mode, "batch"]
        arrays = (points, directions, values, derivatives, status, recheck, self.constants)
        if parallel:
            with threaded_region():
                return int(native_calls.run_parallel(*batch, *arrays, threads))
        return int(native_calls.run_batch(*batch, *arrays, 0, points.shape[0]))

    def point(self, mode: str) -> tuple[Callable[..., Any], int, int]:
        """The one-point call of a scalar-output program in ``mode``: ``(kernel, address,
        work)``.

        Called as ``kernel(address, work, *arguments)`` with
        ``generator.POINT_PARAMETERS[mode]``: ``(point, constants)``, ``(point,
        gradient, constants)`` or ``(point, direction, gradient, constants)``, with
        :attr:`constants`; it returns the value, or ``(value, failed guard)`` for a
        program with guards. (Three items rather than a ``functools.partial``, which
        cost 0.2 us a call on the latency path.)
        """
        self.prepare(mode, parallel=False, kernel="point")
        kernel: Callable[..., Any] = native_calls.POINT_KERNELS[
            mode, bool(self._program.guards.shape[0])
        ]
        return (kernel, *self._natives[mode, "point"])
