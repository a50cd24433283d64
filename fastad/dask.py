"""``fastad.dask``: a compiled function's values and derivatives over a dask array of points.

The same code runs on a laptop and on a cluster: ``X`` is a dask array of
shape ``(N, k)`` chunked along its points only, and every function here
returns dask arrays whose chunks follow ``X``'s, one task per chunk::

    import dask
    import fastad.dask

    values, gradients = fastad.dask.value_and_grad(f, X)
    values, gradients = dask.compute(values, gradients)  # one kernel call per chunk

How the work travels:

- **The function, once.** ``f`` goes into the graph as its pickled tape
  program (a few KB to 100 KB), in one key that every chunk's task depends
  on, so a scheduler sends it to each worker once, however many chunks
  there are. A worker process unpickles it once and keeps it in a cache
  keyed by the SHA-256 of the bytes (:func:`worker_stats` counts the
  builds); the compiled kernels are on Numba's disk cache, so a machine
  compiles them once.
- **Threads.** Each task runs its chunk on one Numba thread by default
  (``threads=1``): a Dask worker already runs one task per core on its own
  threads, and Numba threads times Dask threads should not exceed the
  cores. Pass ``threads=`` to change it, e.g. ``threads=4`` on workers
  started with one Dask thread on four cores.
- **Errors name global points.** A :class:`fastad.BranchError` (or a
  :class:`fastad.NonFiniteError` from ``check=True``) raised by a chunk
  reaches the caller with the failing point's index in ``X``, not in the
  chunk: the index of the first failing point of the chunk that failed
  first (other chunks may hold failing points too).
- **Bit for bit.** Each point is evaluated by the same operations whatever
  its chunk, so the results equal ``f.value_and_grad(X.compute())`` (and
  so on) exactly, whatever the chunking.

The function must be traced before its graph is built (call it once, or
pass ``example=`` to :func:`fastad.compile`): tracing at a row of ``X``
would compute part of ``X`` while the graph is being built.
"""

from __future__ import annotations

import collections
import hashlib
import pickle
import threading
import weakref
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
from dask.delayed import delayed

from fastad.compiled import CompiledFunction
from fastad.util.errors import BranchError, NonFiniteError, flag, is_real_dtype, not_real

if TYPE_CHECKING:
    from dask.delayed import Delayed

    from fastad.util.hints import FloatArray

__all__ = ["grad", "jvp", "value", "value_and_grad", "vjp", "worker_stats"]

# The most functions a worker process keeps built at once: a long-lived
# worker serving many functions drops the least recently used.
CACHE_SIZE = 32


class _WorkerCache:
    """This process's functions, built from their bytes once: ``{sha256: CompiledFunction}``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.functions: collections.OrderedDict[str, CompiledFunction] = collections.OrderedDict()
        self.builds = 0
        self.chunks = 0

    def function(self, digest: str, payload: bytes) -> CompiledFunction:
        with self.lock:
            function = self.functions.get(digest)
            if function is not None:
                self.functions.move_to_end(digest)
                return function
            function = pickle.loads(payload)
            if not isinstance(function, CompiledFunction):
                raise TypeError(f"the payload {digest[:12]} is not a fastad compiled function")
            self.functions[digest] = function
            self.builds += 1
            if len(self.functions) > CACHE_SIZE:
                self.functions.popitem(last=False)
            return function

    def count_chunk(self) -> None:
        with self.lock:
            self.chunks += 1


_CACHE = _WorkerCache()


def worker_stats() -> dict[str, int]:
    """What this process has done for ``fastad.dask``: functions built, chunks evaluated.

    Run it on every worker with ``client.run(fastad.dask.worker_stats)``. A
    worker builds each function once (``functions_built``), however many of
    its chunks (``chunks``) it evaluates.

    Returns
    -------
    dict
        ``{"functions_built": int, "functions_cached": int, "chunks": int}``.
    """
    with _CACHE.lock:
        return {
            "functions_built": _CACHE.builds,
            "functions_cached": len(_CACHE.functions),
            "chunks": _CACHE.chunks,
        }


# -- the public functions ---------------------------------------------------------------
def value(
    f: CompiledFunction, X: da.Array, *, threads: int | None = 1, check: bool = False
) -> da.Array:
    """The outputs of ``f`` at every point of ``X``: ``f(X)`` chunk by chunk.

    Parameters
    ----------
    f : CompiledFunction
        A traced compiled function of ``k`` scalar inputs.
    X : dask.array.Array of shape (N, k)
        The points, chunked along axis 0 only; real numbers (converted to
        float64).
    threads : int or None
        Numba threads per task (default 1: Dask's threads fill the cores);
        None uses every Numba thread of the worker.
    check : bool
        Raise :class:`fastad.NonFiniteError` where finite inputs give a
        non-finite result, naming the point's index in ``X``.

    Returns
    -------
    dask.array.Array
        ``(N,)`` for a scalar output, ``(N, m)`` for ``m`` outputs; float64,
        chunked like ``X`` along axis 0.

    Examples
    --------
    >>> import dask.array as da, numpy as np, fastad as fa, fastad.dask
    >>> f = fa.compile(lambda x, y: x * y, example=[1.0, 2.0])
    >>> X = da.from_array(np.arange(8.0).reshape(4, 2), chunks=(2, 2))
    >>> fastad.dask.value(f, X).compute()
    array([ 0.,  6., 20., 42.])
    """
    plan = _Plan(f, X, "value", threads, check)
    return plan.run([plan.output_shape])[0]


def grad(
    f: CompiledFunction, X: da.Array, *, threads: int | None = 1, check: bool = False
) -> da.Array:
    """The gradient of a scalar-output ``f`` at every point of ``X``: ``(N, k)``.

    Parameters and chunking as :func:`value`; see :func:`value_and_grad`
    for the values with the gradients in one pass.
    """
    plan = _Plan(f, X, "grad", threads, check)
    plan.require_scalar_output()
    return plan.run([(plan.k,)])[0]


def value_and_grad(
    f: CompiledFunction, X: da.Array, *, threads: int | None = 1, check: bool = False
) -> tuple[da.Array, da.Array]:
    """Values ``(N,)`` and gradients ``(N, k)`` of a scalar-output ``f``, from one pass.

    Each chunk's task computes both (one kernel call), so
    ``dask.compute(values, gradients)`` evaluates each chunk once; computing
    them one after the other evaluates the chunks twice.

    Parameters and chunking as :func:`value`.

    Returns
    -------
    values, gradients : dask.array.Array
        float64, chunked like ``X`` along axis 0.
    """
    plan = _Plan(f, X, "value_and_grad", threads, check)
    plan.require_scalar_output()
    values, gradients = plan.run([(), (plan.k,)])
    return values, gradients


def jvp(
    f: CompiledFunction,
    X: da.Array,
    V: da.Array,
    *,
    threads: int | None = 1,
    check: bool = False,
) -> tuple[da.Array, da.Array]:
    """``(values, J v)`` at every point: the outputs and their derivatives along ``V``.

    Parameters
    ----------
    f, X, threads, check
        As :func:`value`.
    V : dask.array.Array of shape (N, k)
        One tangent per point. Rechunked to ``X``'s chunks when its own
        differ (the results follow ``X``).

    Returns
    -------
    values, tangents : dask.array.Array
        Each ``(N,)`` for a scalar output, ``(N, m)`` for ``m`` outputs;
        float64, from one task per chunk.
    """
    plan = _Plan(f, X, "jvp", threads, check)
    plan.add_direction(V, "V (the tangents)", (plan.n_points, plan.k))
    values, tangents = plan.run([plan.output_shape, plan.output_shape])
    return values, tangents


def vjp(
    f: CompiledFunction,
    X: da.Array,
    U: da.Array,
    *,
    threads: int | None = 1,
    check: bool = False,
) -> tuple[da.Array, da.Array]:
    """``(values, u^T J)`` at every point: the outputs and the cotangents ``U`` pulled back.

    Parameters
    ----------
    f, X, threads, check
        As :func:`value`.
    U : dask.array.Array
        One cotangent per point, shaped like the outputs: ``(N,)`` for a
        scalar output, ``(N, m)`` for ``m`` outputs. Rechunked to ``X``'s
        chunks along axis 0 when its own differ.

    Returns
    -------
    values : dask.array.Array
        ``(N,)`` or ``(N, m)``, float64.
    pulled : dask.array.Array
        ``(N, k)``, float64; both from one task per chunk.
    """
    plan = _Plan(f, X, "vjp", threads, check)
    plan.add_direction(U, "U (the cotangents)", (plan.n_points, *plan.output_shape))
    values, pulled = plan.run([plan.output_shape, (plan.k,)])
    return values, pulled


# -- building the graph ---------------------------------------------------------------------
# Each function's pickled bytes and their graph key, made once per function
# object (a traced CompiledFunction never changes).
_PAYLOADS: weakref.WeakKeyDictionary[CompiledFunction, tuple[str, Delayed]] = (
    weakref.WeakKeyDictionary()
)
_PAYLOADS_LOCK = threading.Lock()


def _payload(f: CompiledFunction) -> tuple[str, Delayed]:
    """``(sha256 of f's pickle, a graph key holding the pickle)``, the same key every call."""
    with _PAYLOADS_LOCK:
        known = _PAYLOADS.get(f)
        if known is None:
            payload = pickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL)
            digest = hashlib.sha256(payload).hexdigest()
            known = digest, delayed(payload, name=f"fastad-function-{digest}", pure=True)
            _PAYLOADS[f] = known
        return known


class _Plan:
    """One call's checked inputs and the graph that evaluates them chunk by chunk."""

    def __init__(self, f: object, X: object, kind: str, threads: int | None, check: bool) -> None:
        self.f = _checked_function(f, kind)
        self.X = _checked_points(X, self.f.num_inputs)
        self.kind = kind
        self.k = self.f.num_inputs
        self.n_points = int(self.X.shape[0])
        # The outputs of an empty batch: (0,) for a scalar output, (0, m) for m.
        self.output_shape: tuple[int, ...] = np.shape(self.f(np.empty((0, self.k)), threads=1))[1:]
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(f"threads must be a positive int or None, got {threads!r}")
        self.threads, self.check = threads, flag(check, "check")
        self.direction: da.Array | None = None
        self.column = False  # the direction is a scalar output's cotangents, as one column

    def require_scalar_output(self) -> None:
        if self.output_shape:
            raise ValueError(
                f"fastad.dask.{self.kind} needs a scalar output; this function returns "
                f"{self.output_shape[0]} outputs per point: use fastad.dask.vjp or jvp"
            )

    def add_direction(self, array: object, what: str, shape: tuple[int, ...]) -> None:
        """A tangent or cotangent per point, as a dask array chunked like ``X``."""
        if not isinstance(array, da.Array):
            raise TypeError(
                f"{what} must be a dask array of shape {shape}, got {type(array).__name__}: "
                "wrap a NumPy array with dask.array.from_array(array, chunks=X.chunksize[0])"
            )
        if array.shape != shape:
            raise ValueError(f"{what} has shape {array.shape}; expected {shape}")
        _require_real(array, what)
        _require_known_chunks(array, what)
        chunks = (self.X.chunks[0],) + tuple((size,) for size in shape[1:])
        chunked: da.Array = array if array.chunks == chunks else array.rechunk(chunks)
        # One column for a scalar output's cotangents, so map_blocks aligns its
        # axis 0 with the points' (it aligns trailing axes).
        self.column = chunked.ndim == 1
        self.direction = chunked[:, None] if self.column else chunked

    def run(self, shapes: list[tuple[int, ...]]) -> list[da.Array]:
        """The results of one pass, ``shapes`` per point: one task per chunk, sliced apart."""
        digest, payload = _payload(self.f)
        widths = [int(np.prod(shape)) for shape in shapes]
        arrays = [self.X] if self.direction is None else [self.X, self.direction]
        options = dict(
            kind=self.kind,
            digest=digest,
            payload=payload,
            threads=self.threads,
            check=self.check,
            total=self.n_points,
            column=self.column,
        )
        if len(shapes) == 1 and not shapes[0]:
            # One value per point: the tasks return it as it is, (n,).
            flat = da.map_blocks(
                _evaluate_chunk,
                *arrays,
                chunks=(self.X.chunks[0],),
                drop_axis=1,
                dtype=np.float64,
                meta=np.empty((0,)),
                token=f"fastad-{self.kind}",
                **options,
            )
            return [flat]
        # Otherwise every result side by side, (n, sum of widths), then sliced.
        stacked = da.map_blocks(
            _evaluate_chunk,
            *arrays,
            chunks=(self.X.chunks[0], (sum(widths),)),
            dtype=np.float64,
            meta=np.empty((0, 0)),
            token=f"fastad-{self.kind}",
            **options,
        )
        if len(shapes) == 1:
            return [stacked]
        results, start = [], 0
        for shape, width in zip(shapes, widths, strict=True):
            results.append(stacked[:, start] if not shape else stacked[:, start : start + width])
            start += width
        return results


def _checked_function(f: object, kind: str) -> CompiledFunction:
    if not isinstance(f, CompiledFunction):
        raise TypeError(
            f"fastad.dask.{kind} needs a fastad.CompiledFunction of scalar inputs "
            f"(fa.compile(fn)), got {type(f).__name__}"
        )
    if f.num_outputs is None:
        raise ValueError(
            f"{f!r} has not been traced yet, and its graph needs the traced program: call it "
            "once (f(X[0].compute())) or pass example= to fa.compile"
        )
    return f


def _checked_points(X: object, k: int) -> da.Array:
    if not isinstance(X, da.Array):
        raise TypeError(
            f"X must be a dask array of shape (N, {k}), got {type(X).__name__}: call the "
            "compiled function on a NumPy array directly, or wrap it with "
            f"dask.array.from_array(X, chunks=(n, {k}))"
        )
    if X.ndim != 2 or X.shape[1] != k:
        raise ValueError(
            f"X has shape {X.shape}; a function of {k} inputs takes points of shape (N, {k})"
        )
    _require_real(X, "X")
    _require_known_chunks(X, "X")
    if len(X.chunks[1]) != 1:
        raise ValueError(
            f"X is chunked along axis 1 (chunks {X.chunks[1]}): each point must lie in one "
            "chunk. Chunk along the points only: X.rechunk({1: -1})"
        )
    return X


def _require_real(array: da.Array, what: str) -> None:
    if not is_real_dtype(array.dtype):
        raise not_real(np.empty(0, array.dtype), what)


def _require_known_chunks(array: da.Array, what: str) -> None:
    if any(np.isnan(size) for sizes in array.chunks for size in sizes):
        raise ValueError(
            f"{what} has chunks of unknown size ({array.chunks}): call "
            f"{what.split()[0]}.compute_chunk_sizes() first"
        )


# -- on the worker ---------------------------------------------------------------------------
def _evaluate_chunk(
    points: FloatArray,
    direction: FloatArray | None = None,
    *,
    kind: str,
    digest: str,
    payload: bytes,
    threads: int | None,
    check: bool,
    total: int,
    column: bool,
    block_info: dict[Any, Any] | None = None,
) -> FloatArray:
    """One chunk's results, side by side in columns; errors name the points' global indices."""
    function = _CACHE.function(digest, payload)
    assert block_info is not None  # map_blocks passes it
    start = int(block_info[0]["array-location"][0][0])
    options: dict[str, Any] = {"threads": threads, "check": check}
    if column:  # a scalar output's cotangents, sent as one column
        direction = direction[:, 0] if direction is not None else None
    try:
        results = _call(function, kind, points, direction, options)
    except (BranchError, NonFiniteError) as error:
        raise error.at_offset(start, total) from None
    _CACHE.count_chunk()
    if len(results) == 1:
        return np.asarray(results[0])
    return np.column_stack(results)


def _call(
    function: CompiledFunction,
    kind: str,
    points: FloatArray,
    direction: FloatArray | None,
    options: dict[str, Any],
) -> tuple[Any, ...]:
    if kind == "value":
        return (function(points, **options),)
    if kind == "grad":
        return (function.grad(points, **options),)
    if kind == "value_and_grad":
        return function.value_and_grad(points, **options)
    assert direction is not None
    if kind == "jvp":
        return function.jvp(points, direction, **options)
    return function.vjp(points, direction, **options)
