"""The one place where fastad's Numba options are set.

Every compiled function in ``fastad.kernels`` is decorated with :func:`kernel`.
The options and why:

- ``error_model="numpy"``: division by zero and domain errors give IEEE
  values (``1/0 = inf``, ``log(0) = -inf``, ``sqrt(-1) = nan``) instead of
  raising, as SPEC requires; it also removes the zero-division checks from
  the hot loops.
- ``boundscheck=False``: kernels trust their input. The front end validates
  every tape (operand index < node id, opcodes, lengths, dtypes) before a
  kernel sees it, so the checks would only cost time.
- ``fastmath=False``: results must match eager evaluation and NumPy to the
  last bit; reassociation would break that and ``nnan``/``ninf`` would break
  IEEE propagation.
- ``cache=True``: compiled code is written next to the source so a warm
  import does not recompile. Numba keys the cache on the *defining file's*
  timestamp and size only, so every kernel and every helper it calls live in
  one module (``sweeps.py``); a change anywhere in that file, including the
  generated rules, invalidates all of it, and a package upgrade rewrites the
  file and so can never hit a stale entry.
- ``nogil=True``: compiled calls release the GIL so Python threads can run
  kernels concurrently.
"""

from numba import njit

JIT_OPTIONS = dict(
    cache=True,
    error_model="numpy",
    boundscheck=False,
    fastmath=False,
    nogil=True,
)


def kernel(function=None, **overrides):
    """Compile ``function`` with fastad's Numba options.

    Use bare (``@kernel``) or with overrides for a single kernel that needs
    something different (``@kernel(parallel=True)``); overrides are the
    exception and should say why at the call site.
    """
    options = {**JIT_OPTIONS, **overrides}
    if function is None:
        return lambda f: njit(**options)(f)
    return njit(**options)(function)
