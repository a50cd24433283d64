"""Machine code for generated programs: LLVM IR compiled with llvmlite, cached as objects.

:mod:`fastad.kernels.scalar_ir` lowers a program's generated kernels to
LLVM IR (a long program as several modules); this module optimises it,
emits the object files (the modules of one program on several threads at
once), keeps them in the cache as one file and loads them into one
process-wide MCJIT engine, whose functions
:mod:`fastad.kernels.native_calls` then calls by address.

The cache lives in ``cache_directory()/native``: one file per module,
named by a hash of the kernels' text, the IR lowering (every kernel file's
contents), llvmlite's and LLVM's versions and the host CPU's name and
features, so an entry made by another version or on another CPU is never
even looked up. A file starts with that name and a SHA-256 of the object
bytes; a file whose key or digest does not match (corrupt, truncated,
foreign) is a miss: the code is compiled again and the file rewritten.
Writes go to a temporary file renamed into place.

Loaded code stays loaded for the life of the process (as Numba's does),
so each module is loaded once: a second program with the same structure
gets the same addresses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import struct
import threading
import uuid
import warnings
from functools import partial
from pathlib import Path
from typing import NamedTuple

import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi

from fastad.kernels import scalar_source, vector_ir, vector_math
from fastad.kernels.jit import cache_directory, kernels_source_stamp
from fastad.util.threads import on_threads

_MAGIC = b"fastad native code 2\n"  # a container of object files (``_pack``)
LARGE_IR_LINES = 2_000
"""Code of up to this many lines of IR gets LLVM's ``-O2`` (the scalar passes, the
inliner, instruction selection with the full scheduler); longer code skips the IR
passes and is selected at ``-O1``. Measured on the gradient's batch kernel of random
programs of sin, tanh and arithmetic: at 400 nodes (3,200 lines) ``-O2`` took
1.4 s against 0.15 s and ran 1.2x faster, at 1,600 nodes 1.5 s against 0.37 s for
1.04x; a long program's time goes to libm and memory, not to arithmetic the passes
could fold. ``-O0`` selection, three times faster again, gave code 1.45x slower."""


class GenerationError(RuntimeError):
    """Generated code that could not be built: the IR failed to lower or verify.

    The interpreter keeps running the program; ``f.tier(...)`` gives the reason.
    """


class Native(NamedTuple):
    """One loaded kernel: its function's address and the size of the work buffer it
    takes, in doubles."""

    address: int
    work: int


@functools.cache
def _host() -> tuple[str, str, str]:
    """The target triple, the host CPU's name and its features, LLVM initialised."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return (
        llvm.get_process_triple(),
        llvm.get_host_cpu_name(),
        llvm.get_host_cpu_features().flatten(),
    )


def _target_machine(level: int = 2) -> llvm.TargetMachine:
    """A target machine for the host CPU selecting at ``-O<level>`` (a new one each time:
    an engine owns its own)."""
    triple, cpu, features = _host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=level, jit=True)


@functools.cache
def version_key() -> str:
    """Everything besides the kernels' text that the machine code depends on: the
    lowering (every kernel file), how it is compiled (this file), LLVM, the CPU."""
    triple, cpu, features = _host()
    compiler = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return (
        f"kernels {kernels_source_stamp()}; compiled by {compiler}; "
        f"llvmlite {llvmlite.__version__}; "
        f"llvm {'.'.join(map(str, llvm.llvm_version_info))}; {triple}; {cpu}; {features}; "
        f"O2 up to {LARGE_IR_LINES} lines"
    )


def module_name(source: str) -> str:
    """The name of the module whose kernels' text is ``source``: a hash of the text and
    of :func:`version_key`, so code made by another version or CPU is another module."""
    digest = hashlib.sha256(f"{version_key()}\0{source}".encode())
    return f"fastad_{digest.hexdigest()[:32]}"


class Vectors(NamedTuple):
    """How generated code runs on vectors (``vector_ir``, ``vector_math``): doubles per
    vector, and the math functions that call glibc's libmvec there (fast math: those
    libmvec has at that width and every narrower one). Every other math function runs
    libm's scalar function on each lane, the scalar code's bits: outside fast math, all
    of them."""

    lanes: int
    functions: tuple[str, ...]


def host_lanes() -> int:
    """Doubles per vector on this CPU: eight with AVX-512, four with AVX2, two with SSE2
    (every x86-64 CPU); 0 on other CPUs, whose batches run a point at a time."""
    triple, _, features = _host()
    if not triple.startswith("x86_64"):
        return 0
    flags = set(features.split(","))
    return 8 if "+avx512f" in flags else 4 if "+avx2" in flags else 2


@functools.cache
def default_vectors() -> Vectors | None:
    """The vectors of points a batch kernel of generated code may run on outside fast
    math: the host's widest, libm's math on each lane; None where it has none."""
    lanes = host_lanes()
    return Vectors(lanes, ()) if lanes else None


def fast_math() -> Vectors:
    """The host's fast math: eight lanes with AVX-512, four with AVX2, two with SSE2;
    libmvec loaded into the process, so the code that calls it links.

    Raises
    ------
    RuntimeError
        Not an x86-64 machine, or no libmvec (glibc before 2.22, or not glibc), named.
    """
    found = _fast_math()
    if isinstance(found, str):
        raise RuntimeError(found)
    return found


def row_exp_lanes() -> int:
    """The widest vectors of doubles on which this process can call libmvec's ``exp``
    (:func:`fast_math`'s lanes); 0 without it.

    Generated code for functions of arrays runs the softmax family's
    exponentials with it in every mode: those ops are within rounding of the
    interpreter's (NumPy's vectorised ``exp``) either way, and libm's scalar
    ``exp`` made a compiled cross-entropy over 1,000 classes slower than the
    interpreter."""
    try:
        found = fast_math()
    except RuntimeError:
        return 0
    return found.lanes if "exp" in found.functions else 0


def fast_math_for(name: str, stacklevel: int = 2) -> Vectors | None:
    """:func:`fast_math` for the function ``name``, compiled with ``fast_math=True``;
    None, with a warning, on a machine without it (a function saved where it was,
    loaded where it is not): its generated code then runs libm's math.
    ``stacklevel`` counts from the caller, as :func:`warnings.warn`'s."""
    try:
        return fast_math()
    except RuntimeError as error:
        warnings.warn(
            f"fastad: {name!r} was compiled with fast_math=True, but {error}; its "
            "generated code runs libm's math",
            RuntimeWarning,
            stacklevel=stacklevel + 1,
        )
        return None


@functools.cache
def _fast_math() -> Vectors | str:
    """:func:`fast_math`'s answer, or why not: looked up once per process."""
    lanes = host_lanes()
    if not lanes:
        return f"fast math needs an x86-64 CPU (glibc's libmvec); this is {_host()[0]}"
    # find_library asks ldconfig or a compiler; glibc's soname is the fallback.
    path = ctypes.util.find_library("mvec") or "libmvec.so.1"
    try:
        library = ctypes.CDLL(path)
        llvm.load_library_permanently(path)
    except (OSError, RuntimeError) as error:
        return f"fast math needs glibc's libmvec, and {path} did not load ({error})"
    functions = tuple(  # those at every width up to the lanes: LLVM may pick any
        name
        for name in scalar_source.MATH_NAMES
        if name not in vector_ir.EXACT
        and all(
            hasattr(library, vector_ir.vector_symbol(name, width))
            for width in vector_math.widths(lanes)
        )
    )
    return Vectors(lanes, functions)


def compiling_threads() -> int:
    """How many modules of one program LLVM compiles at once: the CPUs this process may
    use (LLVM runs outside the GIL, each module in its own context)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def compile_object(source: str, name: str) -> bytes:
    """The object code of the generated module ``source``, its functions named ``name_*``:
    a container of object files (a long kernel's parts are compiled as several modules,
    on :func:`compiling_threads` threads: ``scalar_ir.module_irs``).

    Raises :class:`GenerationError` when anything fails on the way: the text
    does not lower to IR, the IR does not parse or verify, LLVM cannot
    optimise or emit it.
    """
    try:
        threads = compiling_threads()
        # Twice as many modules of parts as threads: a thread parses its next module
        # (under llvmlite's lock) while another emits (outside it), and they end together.
        texts, lines = vector_ir.module_irs(source, name, 2 * threads)
        compile_one = partial(_compile_module, large=lines > LARGE_IR_LINES)
        objects = [b""] * len(texts)

        def compile_share(share: range) -> None:
            for index in share:
                objects[index] = compile_one(texts[index])

        # A thread per CPU, the modules dealt out among them in turn.
        shares = [range(start, len(texts), threads) for start in range(min(threads, len(texts)))]
        on_threads(compile_share, shares, "fastad-llvm")
        return _pack(objects)
    except Exception as error:  # noqa: BLE001  (named in the error; the interpreter stays)
        raise GenerationError(f"{type(error).__name__}: {error}") from error


def _compile_module(text: str, large: bool) -> bytes:
    """One module's object file, in an LLVM context of its own (contexts are not shared
    between threads); ``large``: no IR passes, ``-O1`` selection (``LARGE_IR_LINES``).

    The module and its context are closed here, module first: left to the garbage
    collector (a traceback in a cycle keeps them), the context could go first and take
    the module with it, and the module's own disposal would then crash.
    """
    with (
        llvm.create_context() as context,
        llvm.parse_assembly(text, context=context) as module,
    ):
        module.verify()
        if large:
            return _emit_object(_target_machine(1), module)
        machine = _target_machine(2)
        tuning = llvm.create_pipeline_tuning_options(speed_level=2)
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        return _emit_object(machine, module)


def _emit_object(machine: llvm.TargetMachine, module: llvm.ModuleRef) -> bytes:
    """``machine.emit_object(module)``, outside llvmlite's process-wide lock.

    llvmlite serialises every call into LLVM under one lock; emitting a module
    that has its own context and target machine shares nothing with other
    threads, and is where a long program's time goes, so the modules of one
    program are emitted at once. (Through llvmlite's own entry point, as
    ``TargetMachine._emit_to_memory`` makes the call, with the lock's wrapper
    skipped; where a llvmlite version has no such wrapper, the locked call.)
    """
    emit = ffi.lib.LLVMPY_TargetMachineEmitToMemory
    emit = getattr(emit, "_cfn", emit)
    with ffi.OutputString() as problem:
        buffer = emit(machine, module, 1, problem)
        if not buffer:
            raise RuntimeError(str(problem))
    try:
        start = ffi.lib.LLVMPY_GetBufferStart(buffer)
        return ctypes.string_at(start, ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


_LENGTH = struct.Struct("<Q")


def _pack(objects: list[bytes]) -> bytes:
    """Object files as one ``bytes``: each after its length (8 bytes, little-endian)."""
    return b"".join(_LENGTH.pack(len(data)) + data for data in objects)


def _unpack(code: bytes) -> list[bytes]:
    """The object files :func:`_pack` put in ``code``; ValueError when it is not such."""
    objects, position = [], 0
    while position < len(code):
        if position + _LENGTH.size > len(code):
            raise ValueError("a truncated container of object files")
        (length,) = _LENGTH.unpack_from(code, position)
        position += _LENGTH.size
        if position + length > len(code):
            raise ValueError("a truncated container of object files")
        objects.append(code[position : position + length])
        position += length
    if not objects:
        raise ValueError("an empty container of object files")
    return objects


# -- the cache ---------------------------------------------------------------------------
def _path(name: str) -> Path | None:
    root = cache_directory()
    return None if root is None else root / "native" / f"{name}.o"


def _header(name: str, code: bytes) -> bytes:
    return _MAGIC + f"{name}\n{hashlib.sha256(code).hexdigest()}\n".encode()


def read_cached(name: str) -> bytes | None:
    """The cached object code of module ``name``, or None: absent, or not exactly what
    was written (a wrong key or digest is a miss, never loaded)."""
    path = _path(name)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    lines = data.split(b"\n", 3)
    if len(lines) != 4 or lines[0] + b"\n" != _MAGIC or lines[1] != name.encode():
        return None
    code = lines[3]
    return code if hashlib.sha256(code).hexdigest().encode() == lines[2] else None


def is_cached(name: str) -> bool:
    """Whether module ``name``'s object code is in the cache (checked again when loaded)."""
    path = _path(name)
    try:
        return path is not None and path.is_file()
    except OSError:  # an unreadable cache folder: nothing is cached
        return False


def write_cached(name: str, code: bytes) -> None:
    """Keep ``code`` for module ``name`` (a warning, never an error, if it cannot)."""
    path = _path(name)
    if path is None:
        return
    temporary = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            temporary.write_bytes(_header(name, code) + code)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    except OSError as error:
        warnings.warn(
            f"fastad: cannot cache generated code in {path.parent} ({error}); it will be "
            "compiled afresh in every process",
            RuntimeWarning,
            stacklevel=3,
        )


# -- loading -----------------------------------------------------------------------------
_LOCK = threading.Lock()
_ENGINE: llvm.ExecutionEngine | None = None
_LOADED: dict[str, Native] = {}


def load(name: str, kernel: str, code: bytes) -> Native:
    """Load module ``name``'s object code (once per process) and return its ``kernel``."""
    global _ENGINE
    with _LOCK:
        found = _LOADED.get(name)
        if found is not None:
            return found
        try:
            if _ENGINE is None:
                _ENGINE = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
            _fast_math()  # libmvec in the process where there is one: fast math's calls link
            objects = [llvm.ObjectFileRef.from_data(data) for data in _unpack(code)]
            for found_object in objects:  # all read first: a bad one adds none
                _ENGINE.add_object_file(found_object)
            _ENGINE.finalize_object()
        except Exception as error:  # noqa: BLE001  (named in the error; the interpreter stays)
            raise GenerationError(
                f"{name} did not load ({type(error).__name__}: {error})"
            ) from error
        symbol = f"{name}_{kernel}"
        address = _ENGINE.get_function_address(symbol)
        work_size = _ENGINE.get_global_value_address(f"{symbol}_work")
        if not address or not work_size:
            raise GenerationError(f"the object code of {name} has no {kernel} function")
        found = _LOADED[name] = Native(address, ctypes.c_int64.from_address(work_size).value)
        return found


def native(source: str, name: str, kernel: str) -> Native:
    """The ``kernel`` of module ``name`` (whose text is ``source``), loaded from the cache
    or compiled (and cached)."""
    with _LOCK:
        found = _LOADED.get(name)
    if found is not None:
        return found
    code = read_cached(name)
    if code is None:
        code = compile_object(source, name)
        write_cached(name, code)
    return load(name, kernel, code)
