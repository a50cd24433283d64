"""NumPy's own BLAS, callable from compiled code.

Generated code for functions of arrays (``fastad/compiled/array_kernel.py``) makes its
matrix products inside one compiled call. Numba's ``np.dot`` would call
SciPy's copy of OpenBLAS, a second BLAS beside NumPy's, and two OpenBLAS
thread pools spinning on the same cores made threaded steps 10-80x slower
(``bench/threads.py``). So this module finds the BLAS library NumPy itself
loaded and registers its ``cblas_dgemm``, ``cblas_dgemv`` and ``cblas_ddot`` with LLVM
under the names in ``SYMBOLS``; ``array_helpers.py`` declares those names
as external functions, so cached machine code refers to the symbol by name
and each process resolves it anew. The routine
np.matmul picks for the shapes, with the arguments it passes: a product in
generated code is NumPy's, bit for bit, and it runs on NumPy's thread pool (``threadpoolctl`` and
``OPENBLAS_NUM_THREADS`` set its size as they do for NumPy).

NumPy's wheels bundle ``scipy-openblas`` (64-bit integers, symbols
``scipy_cblas_dgemm64_``); other builds (a distribution's NumPy, Accelerate)
are not found, and :func:`unavailable` says why, which keeps functions of
arrays on the interpreter.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import llvmlite.binding as llvm
import numba
import numpy as np

SYMBOLS = {
    "dgemm": "fastad_cblas_dgemm",
    "dgemv": "fastad_cblas_dgemv",
    "ddot": "fastad_cblas_ddot",
}
"""The names under which NumPy's ``cblas_dgemm``, ``cblas_dgemv`` and ``cblas_ddot`` are
registered."""

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enum values

# The names a 64-bit-integer OpenBLAS gives the routines: NumPy's wheels
# bundle scipy-openblas64 (the first); a plain ILP64 build has the second.
_NAMES = ("scipy_cblas_{}64_", "cblas_{}64_")


@functools.cache
def _register() -> str | None:
    """Register NumPy's routines with LLVM; None on success, else why not."""
    folder = os.path.dirname(os.path.abspath(np.__file__))
    candidates = sorted(
        glob.glob(os.path.join(folder, os.pardir, "numpy.libs", "*openblas*"))
        + glob.glob(os.path.join(folder, ".dylibs", "*openblas*"))
    )
    if not candidates:
        return (
            f"NumPy's BLAS was not found beside {folder} (fastad calls the OpenBLAS that "
            "NumPy's wheels bundle; this NumPy was built another way)"
        )
    for path in candidates:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern in _NAMES:
            names = {routine: pattern.format(routine) for routine in SYMBOLS}
            if all(hasattr(library, name) for name in names.values()):
                for routine, name in names.items():
                    address = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                    llvm.add_symbol(SYMBOLS[routine], address)
                return None
    return (
        f"NumPy's BLAS in {', '.join(candidates)} has no 64-bit-integer cblas_dgemm "
        "(fastad calls scipy_cblas_dgemm64_)"
    )


def unavailable() -> str | None:
    """None when the routines are registered (done once) and compiled code can call
    them; else the reason not (``NUMBA_DISABLE_JIT`` runs kernels as Python, where an
    external function is only its declaration)."""
    if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]  # set at import
        return "NUMBA_DISABLE_JIT is set: generated code calls NumPy's BLAS from compiled code"
    return _register()


# At import: a generated module imports this one, so its kernels (compiled or loaded
# from the cache) always find the symbols registered.
_register()
