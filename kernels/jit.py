"""The one place where fastad's Numba options are set, and where its cache lives.

Every compiled function in ``fastad.kernels`` is decorated with :func:`kernel`.
The options and why:

- ``error_model="numpy"``: division by zero and domain errors give IEEE
  values (``1/0 = inf``, ``log(0) = -inf``, ``sqrt(-1) = nan``) instead of
  raising, as IEEE and NumPy do; it also removes the zero-division checks from
  the hot loops.
- ``boundscheck=False``: kernels trust their input. The front end validates
  every tape (operand index < node id, opcodes, lengths, dtypes) before a
  kernel sees it, so the checks would only cost time.
- ``fastmath=False``: results must match eager evaluation and NumPy to the
  last bit; reassociation would break that and ``nnan``/``ninf`` would break
  IEEE propagation.
- ``cache=True``: compiled code is saved so a warm import does not
  recompile. It goes to a per-user cache folder (:func:`cache_directory`),
  never next to the source: files written into ``site-packages`` belong to no
  installed package, so pip leaves them behind on uninstall, and the
  leftover ``site-packages/fastad/`` folder (no ``__init__.py``) then hides a
  later editable install as an empty namespace package. Numba stamps each
  entry with its *defining file* only (its size and timestamp before Numba
  0.64, its content hash since), so a kernel calling a helper from another
  module would keep stale machine code when only the helper's file
  changed. fastad's kernels live in several modules (sweeps, generated
  rules, lane kernels...), so :class:`KernelCacheLocator` stamps a kernel
  of the ``fastad.kernels`` folder with a hash of the contents of every
  ``*.py`` file there (:func:`kernels_source_stamp`): a change to any kernel
  file, a generated rule included, invalidates every entry, and a package
  upgrade that changes any file can never hit a stale one. Kernels defined
  elsewhere (the generated modules of compiled functions) keep Numba's
  stamp of their own file; a module whose kernels call fastad's (the array
  helpers, the fast-math functions) names this stamp in its text, so its
  file, and its cache key, change with them. The folder
  is also keyed by the source folder's absolute path, so two installs never
  share entries.
- ``nogil=True``: compiled calls release the GIL so Python threads can run
  kernels concurrently.

A kernel that calls another with an int or bool constant (``f(a, 0)``) makes
Numba compile the callee for that literal value (``Literal[int](0)``), a
second compile beside the one for the ``int64`` that a call from Python
gives: 0.1-0.3 s each on a cold cache. The kernels here pass ``np.int64(0)``
and ``np.bool_(False)`` instead (a test scans for such calls), and so do
generated modules' sums; their ``gemm``/``gemv`` calls still pass the
transposes as literals, one compile per combination, once per machine.

Only the dispatchers made here use fastad's cache folder: each gets its own
:class:`numba.core.caching.FunctionCache` subclass whose one locator points
there, instead of a change to Numba's global locator list, so other
libraries' ``cache=True`` functions are untouched. ``NUMBA_CACHE_DIR`` does
not move fastad's cache; ``FASTAD_CACHE_DIR`` does. (Numba's own
``NUMBA_CACHE_LOCATOR_CLASSES`` override, where a Numba version has it,
still takes precedence, as it does for every Numba function.)
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FunctionType
from typing import Any, ParamSpec, TypeVar, overload

import numba
from numba import njit
from numba.core import caching
from numba.core.dispatcher import Dispatcher

JIT_OPTIONS: dict[str, Any] = dict(
    cache=True,
    error_model="numpy",
    boundscheck=False,
    fastmath=False,
    nogil=True,
)

CACHE_DIR_VARIABLE = "FASTAD_CACHE_DIR"

KERNELS_FOLDER = os.path.dirname(os.path.abspath(__file__))
"""The ``fastad.kernels`` folder, whose kernels share one source stamp."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


# A kernel is called like the Python function it is compiled from, so the
# hints keep that function's signature (the object is a Numba dispatcher).
@overload
def kernel(function: Callable[_P, _R]) -> Callable[_P, _R]: ...
@overload
def kernel(
    function: None = None, *, signatures: tuple[Any, ...] = (), **overrides: Any
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...
def kernel(
    function: Callable[_P, _R] | None = None,
    *,
    signatures: tuple[Any, ...] = (),
    **overrides: Any,
) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Compile ``function`` with fastad's Numba options.

    Use bare (``@kernel``) or with overrides for a single kernel that needs
    something different (``@kernel(parallel=True)``); overrides are the
    exception and should say why at the call site. With ``cache=True`` (the
    default) the compiled code is cached under :func:`cache_directory`.

    ``signatures`` (Numba types) compiles those at once (or loads them from the
    cache) and no others: a call converts its arguments to one of them, so a
    kernel whose operands may come read-only or writable compiles once, for
    read-only arrays, instead of once per combination (a few tenths of a second
    each on a cold cache).
    """
    options = {**JIT_OPTIONS, **overrides}
    cached = options.pop("cache")

    def compile_with_options(python_function: Callable[_P, _R]) -> Callable[_P, _R]:
        # Built with Numba's cache off, then given fastad's cache: the same
        # thing ``Dispatcher.enable_caching`` does with Numba's default one.
        dispatcher = njit(cache=False, **options)(python_function)
        if isinstance(dispatcher, Dispatcher):  # not NUMBA_DISABLE_JIT
            if cached:
                _attach_cache(dispatcher)
            if signatures:  # as njit(signatures) does, with the cache attached first
                for signature in signatures:
                    dispatcher.compile(signature)
                dispatcher.disable_compile()
        return dispatcher

    if function is None:
        return compile_with_options
    return compile_with_options(function)


def default_cache_directory() -> Path:
    """The configured root of fastad's per-user cache; nothing is created.

    ``$FASTAD_CACHE_DIR`` if set (a relative path is taken from the current
    directory), else the platform's user cache folder plus ``fastad``:
    ``$XDG_CACHE_HOME/fastad`` or ``~/.cache/fastad`` on Linux,
    ``~/Library/Caches/fastad`` on macOS, ``%LOCALAPPDATA%\\fastad`` on
    Windows.

    Returns
    -------
    pathlib.Path
        An absolute path; it may not exist (see :func:`cache_directory`).
    """
    configured = os.environ.get(CACHE_DIR_VARIABLE, "")
    if configured:
        return Path(configured).expanduser().absolute()
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA", "")
        base = Path(local) if local else Path.home() / "AppData" / "Local"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        # The XDG spec says a relative XDG_CACHE_HOME is invalid and ignored.
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base.absolute() / "fastad"


def cache_directory() -> Path | None:
    """The root folder fastad writes its caches to in this process, or None.

    The first of these that can be created and written:
    :func:`default_cache_directory` (``$FASTAD_CACHE_DIR`` or the user cache
    folder), then a per-user folder under :func:`tempfile.gettempdir`
    (``fastad-<uid>``, private to the user). Compiled kernels live in its
    ``numba/`` subfolder. If neither works, returns None after one
    ``RuntimeWarning``: kernels then compile afresh every run. The answer is
    computed once per configured root.

    Examples
    --------
    >>> from fastad.kernels.jit import cache_directory
    >>> cache_directory()  # doctest: +SKIP
    PosixPath('/home/ada/.cache/fastad')
    """
    explicit = bool(os.environ.get(CACHE_DIR_VARIABLE, ""))
    try:
        configured = default_cache_directory()
    except RuntimeError as error:  # Path.home() with no HOME and no user entry
        return _usable_root(None, explicit, f"no home folder: {error}")
    return _usable_root(configured, explicit, None)


@functools.cache
def _usable_root(
    configured: Path | None, explicit: bool, configured_problem: str | None
) -> Path | None:
    """Resolve the cache root once per configured root (see cache_directory)."""
    if configured is not None:
        configured_problem = _writable_folder_problem(configured)
        if configured_problem is None:
            return configured
    name = CACHE_DIR_VARIABLE if explicit else "the user cache folder"
    tried = f"{name} {configured or ''}".rstrip() + f" ({configured_problem})"
    fallback = _temp_root()
    fallback_problem = _writable_folder_problem(fallback, private=True)
    if fallback_problem is None:
        if explicit:
            # The user asked for this folder; using another one silently
            # would hide the mistake.
            warnings.warn(
                f"fastad: cannot use {tried}; caching compiled kernels in {fallback} "
                f"instead. Set {CACHE_DIR_VARIABLE} to a writable folder.",
                RuntimeWarning,
                stacklevel=2,
            )
        return fallback
    _warn_uncached(f"no writable cache folder: {tried}; {fallback} ({fallback_problem})")
    return None


def _temp_root() -> Path:
    """Per-user fallback root under the temporary folder."""
    if hasattr(os, "getuid"):
        user = str(os.getuid())
    else:
        user = os.environ.get("USERNAME") or os.environ.get("USER") or "user"
    return Path(tempfile.gettempdir()).absolute() / f"fastad-{user}"


def _writable_folder_problem(folder: Path, private: bool = False) -> str | None:
    """None if ``folder`` exists (created if need be) and takes a new file, else why not.

    ``private``: the folder lies in a place every user can write (the
    temporary folder), so on POSIX it must be owned by this user and closed
    to others. Numba's cache files are pickles and loading them runs code, so
    a folder another user could write into must never be read.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
        if private and hasattr(os, "getuid"):
            status = folder.stat()
            if status.st_uid != os.getuid():
                return f"owned by another user (uid {status.st_uid})"
            if status.st_mode & 0o022:
                return f"writable by other users (mode {oct(status.st_mode & 0o777)})"
        # As Numba's own check: a directory can exist and still refuse files.
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"
    return None


@functools.cache
def kernels_source_stamp(folder: str = KERNELS_FOLDER) -> str:
    """The source stamp of every cached kernel defined in ``folder``.

    A SHA-256 over the name and contents of each ``*.py`` file of ``folder``,
    in name order, read once per process. Numba stores it with each cache
    entry and discards an entry whose stamp differs, so changing any one
    kernel file (a helper another module's kernel calls, a generated rule)
    recompiles every kernel, while rewriting a file with the same content
    (a reinstall, a checkout) keeps the cache.

    Parameters
    ----------
    folder : str
        Absolute path of a folder of kernel modules (default: this one).

    Returns
    -------
    str
        The hexadecimal digest.

    Examples
    --------
    >>> from fastad.kernels.jit import kernels_source_stamp
    >>> len(kernels_source_stamp())
    64
    """
    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.py")):
        contents = path.read_bytes()
        digest.update(f"{path.name}\0{len(contents)}\0".encode())
        digest.update(contents)
    return digest.hexdigest()


@functools.cache
def _numba_cache_folder(source_folder: str, root: Path) -> Path | None:
    """Folder for the Numba cache files of kernels defined in ``source_folder``."""
    # The same key Numba's own user-wide locators use: the folder's name plus
    # a hash of its absolute path, so two installs never collide.
    subpath = _LOCATOR_BASE.get_suitable_cache_subpath(os.path.join(source_folder, "x.py"))
    folder = root / "numba" / subpath
    problem = _writable_folder_problem(folder)
    if problem is not None:
        _warn_uncached(f"cannot write {folder} ({problem})")
        return None
    return folder


def _kernel_cache_folder(source_file: str) -> Path | None:
    root = cache_directory()
    if root is None:
        return None
    return _numba_cache_folder(os.path.dirname(os.path.abspath(source_file)), root)


_warned_uncached = False


def _warn_uncached(
    reason: str, advice: str = f"Set {CACHE_DIR_VARIABLE} to a writable folder."
) -> None:
    """The one warning for 'kernels are compiled without a cache' (per process)."""
    global _warned_uncached
    if _warned_uncached:
        return
    _warned_uncached = True
    warnings.warn(
        f"fastad: {reason}. Compiled kernels are not cached and will recompile on every "
        f"run (seconds at each start). {advice}",
        RuntimeWarning,
        stacklevel=2,
    )


def _numba_class(*names: str) -> Any:
    """A class of ``numba.core.caching`` under the first name this Numba version has.

    Numba 0.59 to 0.6x name some of them with a leading underscore.
    """
    for name in names:
        found = getattr(caching, name, None)
        if found is not None:
            return found
    return None


# Any: found by name at run time, so the classes below subclass them unchecked.
_LOCATOR_BASE: Any = _numba_class("_CacheLocator", "CacheLocator")
_SOURCE_FILE_BACKED: Any = _numba_class(
    "_SourceFileBackedLocatorMixin", "SourceFileBackedLocatorMixin"
)
_RESULT_CACHE_IMPL: Any = _numba_class("CompileResultCacheImpl", "_CompileResultCacheImpl")
_FUNCTION_CACHE: Any = _numba_class("FunctionCache", "_FunctionCache")
_NUMBA_CACHE_API = None not in (
    _LOCATOR_BASE,
    _SOURCE_FILE_BACKED,
    _RESULT_CACHE_IMPL,
    _FUNCTION_CACHE,
)


if _NUMBA_CACHE_API:

    class KernelCacheLocator(_SOURCE_FILE_BACKED, _LOCATOR_BASE):  # type: ignore[misc]
        """Numba cache locator: fastad's kernels cache under ``cache_directory()/numba``.

        The disambiguator comes from Numba's source-file-backed mixin, as
        for Numba's own locators. The source stamp of a kernel defined in
        the ``fastad.kernels`` folder is :func:`kernels_source_stamp` (every
        kernel file's contents, since kernels call helpers in other files);
        any other file keeps the mixin's stamp of that file alone.
        """

        def __init__(self, py_func: FunctionType, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(_kernel_cache_folder(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

        def get_source_stamp(self) -> Any:
            folder = os.path.dirname(os.path.abspath(self._py_file))
            if folder == KERNELS_FOLDER:
                return ("fastad.kernels", kernels_source_stamp(folder))
            return super().get_source_stamp()

        @classmethod
        def from_function(cls, py_func: FunctionType, py_file: str) -> KernelCacheLocator | None:
            # None (no locator) for a source file that is not on disk (a zip
            # import) or when no cache folder is writable.
            if not os.path.exists(py_file) or _kernel_cache_folder(py_file) is None:
                return None
            return cls(py_func, py_file)

    class _KernelCacheImpl(_RESULT_CACHE_IMPL):  # type: ignore[misc]
        _locator_classes = [KernelCacheLocator]

    class KernelCache(_FUNCTION_CACHE):  # type: ignore[misc]
        """Numba's function cache with :class:`KernelCacheLocator` as its only locator.

        An entry that cannot be loaded (a truncated or corrupt file, one
        written for a module Numba cannot find again) is a cache miss, not a
        crash: Numba's own loader raises on such files. The index is emptied
        so the fresh compile overwrites the entry, and one warning says so.
        """

        _impl_class = _KernelCacheImpl

        def load_overload(self, sig: Any, target_context: Any) -> Any:
            try:
                return super().load_overload(sig, target_context)
            except Exception as error:  # noqa: BLE001  (any unreadable entry is a miss)
                self.flush()
                warnings.warn(
                    f"fastad: discarded an unreadable compiled-kernel cache entry for "
                    f"{self._name} ({type(error).__name__}: {error}); compiling it afresh",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return None

        def holds_entry_for(self, target_context: Any) -> bool:
            """Whether the index lists a compiled entry for this machine (a stale index
            lists none). Read only: nothing loads."""
            try:
                index = self._cache_file._load_index()
                magic = target_context.codegen().magic_tuple()
            except Exception:  # noqa: BLE001  (an unreadable index holds nothing usable)
                return False
            return any(isinstance(key, tuple) and magic in key for key in index)


def is_warm(dispatcher: Any) -> bool:
    """Whether calling ``dispatcher`` costs no compile: it has a compiled signature in this
    process, or fastad's cache holds an entry for this machine. True where nothing
    compiles at all (``NUMBA_DISABLE_JIT``: no dispatcher).

    A hint for choosing what to run first, not a promise: any signature counts (fastad's
    callers pass one set of argument types), and an entry whose data file is gone or
    damaged still counts (that call compiles, with the cache's warning)."""
    if not hasattr(dispatcher, "signatures"):
        return True
    if dispatcher.signatures:
        return True
    cache = getattr(dispatcher, "_cache", None)
    if not _NUMBA_CACHE_API or not isinstance(cache, KernelCache):
        return False
    return bool(cache.holds_entry_for(dispatcher.targetctx))


def _attach_cache(dispatcher: Any) -> None:
    """Give ``dispatcher`` fastad's cache, or leave it uncached with the one warning."""
    if not _NUMBA_CACHE_API:
        _warn_uncached(
            f"Numba {numba.__version__} lacks the caching classes fastad uses "
            "(numba.core.caching.FunctionCache and its locators); please report this"
        )
        return
    source_file = inspect.getfile(dispatcher.py_func)
    if not os.path.exists(source_file):
        _warn_uncached(
            f"the kernels' source file {source_file} is not on disk (imported from a zip "
            "archive?), and Numba caches only kernels whose source is a file",
            "Install fastad as files (pip install) to have them cached.",
        )
        return
    if _kernel_cache_folder(source_file) is None:
        return  # the one warning has been given
    try:
        dispatcher._cache = KernelCache(dispatcher.py_func)
    except (OSError, RuntimeError) as error:
        _warn_uncached(f"cannot cache {dispatcher.py_func.__qualname__} ({error})")
