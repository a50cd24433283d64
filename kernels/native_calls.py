"""Calls of generated machine code: Numba kernels that jump to a function's address.

The generated tier compiles each program to native functions itself
(``scalar_ir`` writes their LLVM IR; ``fastad.compiled.native_code``
compiles and loads it). These kernels are how Python reaches them: each
takes the function's address as an int64 and calls it with its arrays'
data pointers (and a 2-D array's row stride, in elements), so the batch
and one-point calls cost what a call of any Numba kernel costs, the
threaded batch runs on Numba's threading layer as every other threaded
kernel does, and the kernels compile once for every program.

The functions at these addresses have the signatures ``scalar_ir.BATCH``
and ``scalar_ir.POINT`` give, then a work buffer (``scalar_ir.spill_plan``):
each call allocates its own, of the size the loaded code names. Kernels
trust their input: the address is one the front end got from the loaded
code, the arrays are the shapes and types those signatures name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import kernel
from .lane_sweeps import NO_FAILED_GUARD

_I64 = ir.IntType(64)


def _pointers(context: Any, builder: Any, array_types: Any, arrays: Any) -> list[Any]:
    """Each array's data pointer, and after a 2-D array's its row stride in elements."""
    pieces = []
    for array_type, value in zip(array_types, arrays, strict=True):
        array = context.make_array(array_type)(context, builder, value)
        pieces.append(array.data)
        if array_type.ndim == 2:
            stride = cgutils.unpack_tuple(builder, array.strides)[0]  # type: ignore[no-untyped-call]
            pieces.append(builder.sdiv(stride, ir.Constant(_I64, 8)))
    return pieces


def _call(builder: Any, address: Any, returned: Any, arguments: list[Any]) -> Any:
    function_type = ir.FunctionType(returned, [argument.type for argument in arguments])
    function = builder.inttoptr(address, function_type.as_pointer())
    return builder.call(function, arguments)


@intrinsic
def _call_batch(
    typingctx: Any,
    address: Any,
    work: Any,
    points: Any,
    directions: Any,
    values: Any,
    derivatives: Any,
    status: Any,
    recheck: Any,
    constants: Any,
    start: Any,
    stop: Any,
) -> Any:
    arrays = (points, directions, values, derivatives, status, recheck, constants)
    signature = types.int64(address, work, *arrays, start, stop)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        pieces = _pointers(context, builder, sig.args[2:9], args[2:9])
        (buffer,) = _pointers(context, builder, sig.args[1:2], args[1:2])
        return _call(builder, args[0], _I64, [*pieces, args[9], args[10], buffer])

    return signature, codegen


@intrinsic
def _call_point(
    typingctx: Any,
    address: Any,
    work: Any,
    point: Any,
    direction: Any,
    gradient: Any,
    constants: Any,
) -> Any:
    signature = types.Tuple((types.float64, types.int64))(  # type: ignore[no-untyped-call]
        address, work, point, direction, gradient, constants
    )

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        failed = cgutils.alloca_once_value(  # type: ignore[no-untyped-call]
            builder, ir.Constant(_I64, NO_FAILED_GUARD)
        )
        pieces = _pointers(context, builder, (*sig.args[2:], sig.args[1]), (*args[2:], args[1]))
        value = _call(builder, args[0], ir.DoubleType(), [*pieces, failed])
        return context.make_tuple(builder, sig.return_type, [value, builder.load(failed)])

    return signature, codegen


@kernel
def run_batch(  # type: ignore[no-untyped-def]
    address, work, points, directions, values, derivatives, status, recheck, constants, start, stop
):
    """Points ``start:stop`` of the generated batch function at ``address``, whose work
    buffer holds ``work`` doubles: how many points it flagged for the exact rules."""
    arrays = (points, directions, values, derivatives, status, recheck, constants)
    return _call_batch(address, np.empty(work), *arrays, start, stop)  # type: ignore[call-arg]


@kernel(parallel=True)  # the one threaded call of generated code
def run_parallel(  # type: ignore[no-untyped-def]
    address, work, points, directions, values, derivatives, status, recheck, constants, threads
):
    """All points on ``threads`` workers, a contiguous range each (every point is
    independent, so the results do not depend on the split), each with its own work
    buffer of ``work`` doubles."""
    total = points.shape[0]
    workers = max(1, min(threads, total))
    chunk = (total + workers - 1) // workers
    flagged = 0
    for worker in prange(workers):
        start = worker * chunk
        stop = min(total, start + chunk)
        arrays = (points, directions, values, derivatives, status, recheck, constants)
        flagged += _call_batch(address, np.empty(work), *arrays, start, stop)  # type: ignore[call-arg]
    return flagged


@kernel
def _buffer(work, constants):  # type: ignore[no-untyped-def]
    """A work buffer of ``work`` doubles; a short program's (0) allocates nothing: its
    code never touches the buffer, so ``constants`` stands in."""
    return np.empty(work) if work > 0 else constants


# The one-point calls (the latency path), one kernel per parameter list and per kind of
# result: the value alone for a program without guards, else (value, failed guard).
@kernel
def point_values(address, work, point, constants):  # type: ignore[no-untyped-def]
    return _call_point(address, _buffer(work, constants), point, point, point, constants)[0]  # type: ignore[call-arg]


@kernel
def point_values_guarded(address, work, point, constants):  # type: ignore[no-untyped-def]
    return _call_point(address, _buffer(work, constants), point, point, point, constants)  # type: ignore[call-arg]


@kernel
def point_grad(address, work, point, gradient, constants):  # type: ignore[no-untyped-def]
    return _call_point(address, _buffer(work, constants), point, point, gradient, constants)[0]  # type: ignore[call-arg]


@kernel
def point_grad_guarded(address, work, point, gradient, constants):  # type: ignore[no-untyped-def]
    return _call_point(address, _buffer(work, constants), point, point, gradient, constants)  # type: ignore[call-arg]


@kernel
def point_hvp(address, work, point, direction, gradient, constants):  # type: ignore[no-untyped-def]
    return _call_point(address, _buffer(work, constants), point, direction, gradient, constants)[0]  # type: ignore[call-arg]


@kernel
def point_hvp_guarded(address, work, point, direction, gradient, constants):  # type: ignore[no-untyped-def]
    return _call_point(address, _buffer(work, constants), point, direction, gradient, constants)  # type: ignore[call-arg]


POINT_KERNELS: dict[tuple[str, bool], Any] = {
    ("values", False): point_values,
    ("values", True): point_values_guarded,
    ("grad", False): point_grad,
    ("grad", True): point_grad_guarded,
    ("hvp", False): point_hvp,
    ("hvp", True): point_hvp_guarded,
}
"""The one-point kernel of each ``(mode, has guards)``: called as the generated
``point`` kernel of that mode, with the address first."""
