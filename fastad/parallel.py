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

import numba

_THREAD_SAFE_LAYERS = frozenset({"tbb", "omp", "omp-intel"})
_FORK_SAFE_LAYERS = frozenset({"tbb", "workqueue", "omp-intel"})


class _State:
    """What this process knows about its threading layer (one instance, below)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.layer: str | None = None  # known once a parallel region has run
        self.started = False  # a parallel region ran in this process
        self.forked_unsafe = False  # a child of a process whose layer is not fork-safe


_STATE = _State()


def _after_fork_in_child() -> None:
    # The lock may have been held by a thread the child does not have.
    _STATE.lock = threading.Lock()
    if _STATE.started and _STATE.layer not in _FORK_SAFE_LAYERS:
        _STATE.forked_unsafe = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def threads_allowed() -> bool:
    """False in a child forked after the parent ran regions on a layer that is not fork-safe.

    Batches then run on the calling thread: a parallel region there would
    kill the process (GNU OpenMP) or hang it.
    """
    return not _STATE.forked_unsafe


@contextlib.contextmanager
def threaded_region() -> Iterator[None]:
    """Run one parallel kernel call inside this block.

    Serialised under a process-wide lock unless the threading layer is known
    to be thread-safe (known after the first region; the first region is
    serialised too, which also keeps two threads from starting Numba's pool
    at once). Callers check :func:`threads_allowed` first.
    """
    state = _STATE
    state.started = True  # before the region: a fork meanwhile must count it
    if state.layer in _THREAD_SAFE_LAYERS:
        yield
        return
    with state.lock:
        yield
        if state.layer is None:
            state.layer = _loaded_layer()


def layer() -> str | None:
    """The threading layer fastad's threaded kernels ran on in this process, or None yet."""
    return _STATE.layer


def _loaded_layer() -> str:
    try:
        name = str(numba.threading_layer())  # type: ignore[attr-defined]
    except ValueError:  # no parallel region has launched the pool (cannot happen here)
        return "unknown"
    if name == "omp":
        # Intel's OpenMP is fork-safe; GNU's, which Linux wheels load, is not
        # (others are taken as GNU's: unknown means unsafe).
        omppool = importlib.import_module("numba.np.ufunc.omppool")
        if getattr(omppool, "openmp_vendor", "GNU") == "Intel":
            return "omp-intel"
    return name
