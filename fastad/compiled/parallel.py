"""When fastad's threaded kernels may run, whichever Numba threading layer is loaded.

Numba runs ``parallel=True`` kernels on one of three threading layers, and
none of the two a plain ``pip install numba`` can load is safe for every use
(measured here, Numba 0.68 on Linux):

- ``omp`` (GNU OpenMP, what Linux wheels load when libgomp is present) is
  thread-safe but not fork-safe: a child forked after the parent ran a
  parallel region dies in its first one ("Terminating: fork() called from a
  process already using GNU OpenMP"), and ``multiprocessing.Pool`` then
  waits forever for the dead worker.
- ``workqueue`` (Numba's own, what Numba falls back to) survives a fork but
  is not thread-safe: two Python threads entering parallel regions at once
  abort the process ("Concurrent access has been detected").
- ``tbb`` is both, but ``pip install tbb`` puts ``libtbb.so.12`` where
  Numba does not look for it (``<venv>/lib``), so it is not a dependency
  that works as installed.

So every threaded kernel call goes through :func:`threaded_region`, which
keeps whichever layer is loaded inside what it supports: in a child forked
from a process that ran OpenMP regions, batches run on the calling thread
(one thread per worker process, which is what a process pool wants); where
the layer is not known to be thread-safe, parallel regions take turns under
one process-wide lock (each region still uses all its threads, so the
throughput of several callers is unchanged; they queue instead of aborting).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Iterator

from numba.np.ufunc import parallel as numba_parallel

_THREAD_SAFE_LAYERS = frozenset({"tbb", "omp", "omp-intel"})
_FORK_SAFE_LAYERS = frozenset({"tbb", "workqueue", "omp-intel"})


class _State:
    """The one lock of parallel regions, and whether this process is an unsafe fork."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.forked_unsafe = False  # a child of a process whose started layer is not fork-safe


_STATE = _State()


def _after_fork_in_child() -> None:
    # The lock may have been held by a thread the child does not have.
    _STATE.lock = threading.Lock()
    # Numba's own state, not fastad's: the pool is started by any
    # numba.get_num_threads() and by the user's own parallel code, and a
    # started GNU OpenMP pool is what kills a child in its first region.
    started = layer()
    if started is not None and started not in _FORK_SAFE_LAYERS:
        _STATE.forked_unsafe = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def threads_allowed() -> bool:
    """False in a child forked after the parent started a layer that is not fork-safe.

    Batches then run on the calling thread: a parallel region there would
    kill the process (GNU OpenMP) or hang it.
    """
    return not _STATE.forked_unsafe


@contextlib.contextmanager
def threaded_region() -> Iterator[None]:
    """Run one parallel kernel call inside this block.

    Serialised under a process-wide lock unless the started threading layer
    is known to be thread-safe (callers have started it: the thread count
    comes from ``numba.get_num_threads()``; an unknown layer is serialised).
    Callers check :func:`threads_allowed` first.
    """
    if layer() in _THREAD_SAFE_LAYERS:
        yield
        return
    with _STATE.lock:
        yield


def layer() -> str | None:
    """The threading layer Numba started in this process (``"omp-intel"`` for Intel's
    OpenMP), or None before Numba's thread pool started.

    Read from Numba's parallel module (``_is_initialized``, ``_threading_layer``:
    private names, read with defaults; where they are missing the answer is
    ``"unknown"``, which is treated as neither thread- nor fork-safe).
    """
    if not getattr(numba_parallel, "_is_initialized", True):
        return None
    name = getattr(numba_parallel, "_threading_layer", None)
    if not isinstance(name, str):
        return "unknown"
    if name == "omp":
        # Intel's OpenMP is fork-safe; GNU's, which Linux wheels load, is not
        # (others are taken as GNU's: unknown means unsafe).
        omppool = importlib.import_module("numba.np.ufunc.omppool")
        if getattr(omppool, "openmp_vendor", "GNU") == "Intel":
            return "omp-intel"
    return name
