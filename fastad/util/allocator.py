"""Large temporaries recycled by the C allocator, not mapped afresh on every call.

A function of arrays makes and frees arrays of a few MiB on every call. glibc
serves an allocation above its mmap threshold by mapping fresh pages, and
hands free memory at the top of its heap back to the system once it exceeds
its trim threshold. Its own dynamic rule raises the mmap threshold to the
largest mapping freed so far (at most 32 MiB on 64-bit systems) and the trim
threshold to twice that. A program whose temporaries add up to more than the
trim threshold then has every page of them faulted in and zeroed by the
kernel again on every call: the marginal likelihood of a Gaussian process on
500 points took 5,200 page faults a call, a third of its time.

At import fastad fixes the two thresholds at 32 MiB and 64 MiB from the
start: the largest values that dynamic rule reaches (glibc gets there by
itself once the program has freed a mapped array of 32 MiB). Arrays below 32 MiB
then come from the heap, whose freed memory is reused by the next
allocations; the top of the heap goes back to the system once more than 64
MiB of it is free, and freed memory below a live allocation stays with the
process until that allocation is freed too (200 arrays of 2 MiB freed but
the last one made keep about 400 MiB). Only glibc (Linux) is changed;
elsewhere nothing is. To keep glibc's own settings, set
``FASTAD_MALLOC=system`` before importing fastad; glibc's
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_``, or a
``glibc.malloc`` threshold in ``GLIBC_TUNABLES``, where set, are kept as
they are.
"""

from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD = 32 * 2**20
"""Allocations below this come from the heap, where freed memory is reused."""
TRIM_THRESHOLD = 64 * 2**20
"""Free memory at the top of the heap kept for later allocations, at most."""

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3

_GLIBC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_GLIBC_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # not a GNU system
        return False


def keep_freed_memory() -> str:
    """Set glibc's thresholds as the module docstring says; returns what was done."""
    if os.environ.get("FASTAD_MALLOC", "").strip().lower() == "system":
        return "FASTAD_MALLOC=system: glibc's settings are kept"
    if any(name in os.environ for name in _GLIBC_VARIABLES):
        return "glibc's MALLOC_*_THRESHOLD_ variables are set: they are kept"
    if any(name in os.environ.get("GLIBC_TUNABLES", "") for name in _GLIBC_TUNABLES):
        return "GLIBC_TUNABLES sets a glibc.malloc threshold: it is kept"
    if not _glibc():
        return "not glibc: nothing to set"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "glibc's mallopt is not reachable: nothing set"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    mmap_set = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trim_set = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if not (mmap_set and trim_set):
        return (
            f"glibc's mallopt refused the {'trim' if mmap_set else 'mmap'} threshold "
            f"(the mmap threshold {'is' if mmap_set else 'is not'} set)"
        )
    return (
        f"glibc: arrays below {MMAP_THRESHOLD // 2**20} MiB come from the heap, whose top goes "
        f"back to the system once {TRIM_THRESHOLD // 2**20} MiB of it is free"
    )


STATE = keep_freed_memory()
"""What importing fastad did to the C allocator (``fastad.util.allocator.STATE``)."""
