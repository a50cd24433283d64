"""Math functions that LLVM's loop vectoriser may run on vectors, with glibc's libmvec.

The generated code of a function of arrays compiled with ``fast_math=True``
imports its math functions from here instead of from :mod:`math`:
``exp = libmvec("exp", 8)`` in its text. Each is a Numba intrinsic that
calls libm's scalar function, marked as reading no memory, with the vector
function ABI's variants named on the call: ``_ZGVbN2v_exp``,
``_ZGVdN4v_exp`` and ``_ZGVeN8v_exp`` for two, four and eight lanes (SSE,
AVX2, AVX-512), up to the host's width. Where LLVM vectorises a loop that
calls it (an elementwise op's loop, fused or not, its helper inlined), the
vector iterations call libmvec; the iterations it leaves scalar (a loop's
remainder, a loop it does not vectorise) call libm. Nothing else changes:
the loops, their order, the arithmetic and the comparisons are the default
code's, so an element differs from it only where a math function's result
does, by libmvec's few units in the last place.

The vector functions are declared in every module that calls one and kept
there (``llvm.compiler.used``) until the vectoriser has run: LLVM drops an
unused declaration, and the vectoriser only uses a variant it finds
declared. A module that calls these must be loaded where libmvec is loaded
into the process (``fastad.compiled.native_code.fast_math``), so that the
calls link.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import kernels_source_stamp
from .scalar_ir import ARITY
from .vector_ir import ISA, vector_symbol

KEPT = "llvm.compiler.used"
"""The global whose members LLVM keeps, used or not, until code generation."""


def widths(lanes: int) -> tuple[int, ...]:
    """The vector widths up to ``lanes`` doubles that libmvec serves: 2, 4, 8."""
    return tuple(width for width in ISA if width <= lanes)


def stamp() -> str:
    """A hash of fastad's kernel files (this one and those it reads its names from):
    generated code that calls these functions names it in its text, so a change to
    them is a new module (its cache key is a hash of its text)."""
    return kernels_source_stamp()[:16]


def variants(name: str, lanes: int) -> str:
    """The ``vector-function-abi-variant`` attribute's value for ``name``: per width,
    LLVM's internal name of the variant and libmvec's symbol."""
    arity = ARITY.get(name, 1)
    return ",".join(
        f"_ZGV_LLVM_N{width}{'v' * arity}_{name}({vector_symbol(name, width)})"
        for width in widths(lanes)
    )


@functools.cache
def libmvec(name: str, lanes: int) -> Callable[..., float]:
    """libm's ``name`` (one float argument, two for ``pow`` and ``atan2``) as an
    intrinsic whose calls LLVM may vectorise with libmvec, at widths up to ``lanes``.
    The same object for the same arguments, so a module's text names one function.
    Under ``NUMBA_DISABLE_JIT`` (kernels run as Python) it is :mod:`math`'s function."""
    if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]  # set at import
        return cast("Callable[..., float]", getattr(math, name))
    arity = ARITY.get(name, 1)
    attribute = f'"vector-function-abi-variant"="{variants(name, lanes)}"'

    def codegen(
        context: Any, builder: ir.IRBuilder, signature: Any, arguments: Sequence[Any]
    ) -> Any:
        module = builder.module
        double = ir.DoubleType()
        scalar = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            module, ir.FunctionType(double, [double] * arity), name
        )
        # Pure: LLVM vectorises only calls that touch no memory (libm's errno is
        # never read here).
        for flag in ("readnone", "nounwind"):
            scalar.attributes.add(flag)
        for width in widths(lanes):
            _declare(module, name, width, arity)
        _keep(module)
        floats = [
            context.cast(builder, value, kind, types.float64)
            for value, kind in zip(arguments, signature.args, strict=True)
        ]
        call = builder.call(scalar, floats)
        # llvmlite checks attribute names against its list, which has no string
        # attributes; it writes every member of the set as it is.
        set.add(call.attributes, attribute)
        return call

    def typed(*kinds: Any) -> Any:
        if all(isinstance(kind, (types.Float, types.Integer, types.Boolean)) for kind in kinds):
            return types.float64(*kinds), codegen
        return None

    if arity == 1:

        def unary(typingctx: Any, a: Any) -> Any:
            return typed(a)

        unary.__name__ = name
        return intrinsic(unary)

    def binary(typingctx: Any, a: Any, b: Any) -> Any:
        return typed(a, b)

    binary.__name__ = name
    return intrinsic(binary)


def _declare(module: ir.Module, name: str, width: int, arity: int) -> None:
    vector = ir.VectorType(ir.DoubleType(), width)
    cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
        module, ir.FunctionType(vector, [vector] * arity), vector_symbol(name, width)
    )


def _keep(module: ir.Module) -> None:
    """Make ``module``'s ``llvm.compiler.used`` name every libmvec function it declares
    (its type, which holds its length, set again each time)."""
    kept = [f for name, f in module.globals.items() if name.startswith("_ZGV")]
    pointer = ir.IntType(8).as_pointer()
    array = ir.ArrayType(pointer, len(kept))
    used = module.globals.get(KEPT)
    if used is None:
        used = ir.GlobalVariable(module, array, KEPT)
        used.linkage = "appending"
        used.section = "llvm.metadata"
    used.value_type = array
    used.initializer = ir.Constant(array, [f.bitcast(pointer) for f in kept])
