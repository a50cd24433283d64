"""Generated code for functions of arrays: one kernel per traced program and kind of call.

A traced function of arrays (``fa.compile(fn, example=(X, W, b))``) is
replayed by the interpreter op by op: a Python call, a registry rule and an
allocation per block op, each way. This module writes instead the source of
a module with one ``@kernel`` that runs the whole program: the forward pass,
and for ``grad`` the backward pass from the scalar output (for ``vjp`` from
the caller's cotangent of the output, a float or an array; for ``jvp`` the
tangents beside the values; for ``hvp`` those, then the backward pass and
its tangent), as loops and BLAS calls in one compiled function. Each elementwise op is one loop (its
rule's expression from the op table, broadcasting by index), each product one call of NumPy's own
``cblas_dgemm`` or ``cblas_dgemv`` (``kernels/blas.py``; transposes are BLAS
arguments, never copies), the softmax family and the cross-entropy row loops,
the reductions NumPy's own summation order. Every array the kernel writes is
a buffer the caller passes (:func:`parameters` lists them), so a call
allocates nothing.

**Plain derivatives, exact results.** The backward pass is *plain*: an edge
sends ``partial * incoming`` without the strong-zero tests of the exact
rules, and every product multiplies every term. Where the plain gradients
hold no nan they equal the exact ones up to the sign of a zero, by the
scalar tier's induction (``kernels/scalar_source.py``): a term the exact rules drop
is a signed zero or a nan in plain code, a nan reaches every gradient element
downstream of it (every step multiplies, and BLAS multiplies zero factors
too), and the ``+ 0.0`` on the way out makes every zero +0.0. So the kernel
flags a call whose gradients hold a nan, and the caller computes that call
again with the exact rules (the interpreter). A gradient that one BLAS
product makes by itself is not read again where its factors are smaller:
they are read instead (:func:`bounded` in the text, integer passes), and finite
factors whose products cannot overflow give no nan; such a product has no
-0.0 either (BLAS sums start at +0.0: a test checks it).

**Bits.** Values and gradients are the interpreter's bit for bit where the
same operations run in the same order: the products (the BLAS routine
np.matmul picks for the shapes, ``ddot``, ``dgemv`` or ``dgemm``, with the
arguments it passes), elementwise ops and their partials (the same
expressions, the same libm), the sums (NumPy's pairwise summation, restated
in ``summation.pairwise``; sums over the first of two axes row by row, as NumPy
adds them), the fused layers' passes. They differ in the softmax family and
the cross-entropy, whose interpreter takes NumPy's vectorised ``exp`` (not
libm's, a last-bit difference per element) and reads the softmax as
``exp(log_softmax)`` where generated code divides by the row's sum, and
where a product of an adjoint holds an inf or a nan in a row or column (the
interpreter sums that line term by term; the kernel keeps BLAS's sum). The
tests bound those differences at 1e-13 relative.

Kernels trust their input: the front end (``fastad/compiled/array_kernel.py``) passes
C-contiguous float64 arrays of the traced shapes (class labels may be
int64) and validates everything before the call. The text holds only the
program's structure (ops, ranks, which axes broadcast): no names, no values,
and no sizes but the literal shapes of reshapes (views of their operands,
never of the rows under ``batch=``) and the offsets of concatenates; the
loops read the rest from the arrays, and an index's positions are a kernel
argument.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import jit, scalar_source, vector_math
from .array_program import MODES, OK, SUPPORTED, BlockProgram, Parameter, Unsupported
from .array_second import SecondWriter
from .array_tangent import TangentWriter

ENTRY_DECORATOR = "@kernel(no_cfunc_wrapper=True)"
"""The decorator of a module's kernel: fastad's options (``jit.py``), without the C
wrapper that only a call from C or a first-class function value would need."""


class KernelWriter(SecondWriter, TangentWriter):
    """Writes one kernel in one mode: the passes in order, then its results."""

    # -- the kernel ------------------------------------------------------------------------
    def write(self) -> str:
        program = self.program
        for i, node in enumerate(self.nodes):
            if self.live[i]:
                self.forward(i, node)
                if self.mode == "jvp" and self.moves[i]:
                    self.tangent(i, node)
                elif self.mode == "hvp" and self.moves[i] and i != program.output:
                    self.tangent(i, node)  # what the second pass reads
        for index, (guard, truth) in enumerate(program.guards):
            test = "==" if truth else "!="
            self.emit(f"if v{guard} {test} 0.0:")  # the traced outcome no longer holds
            self.emit(f"return {self.failure(index)}", 2)
        output = program.output
        if self.mode in ("grad", "vjp", "hvp"):
            if self.mode in ("grad", "hvp"):
                self.emit(f"g{output} = 1.0")
            elif output in program.inputs:
                raise Unsupported("the output is an argument: its VJP is the cotangent itself")
            elif not self.shape(output):
                self.parameter("cotangent", "cotangent", output, ())
                self.emit(f"g{output} = cotangent")
            else:  # the caller's cotangent is the output's adjoint (no rule writes it)
                self.parameter(f"d{output}", "cotangent", output, self.shape(output))
            self.written[output] = True
            for i in reversed(range(len(self.nodes))):
                node = self.nodes[i]
                if not self.second.needs[i] or node.op in ("input", "constant", "array"):
                    continue
                if self.mode == "hvp":
                    self.second_order(i, node)
                else:
                    self.backward(i, node)
            self.p = self.second
            self.finish_gradients()
            scalar = f"v{output}" if not self.shape(output) else "0.0"
            returned = f"{scalar}, {OK}, flagged"
        elif self.mode == "jvp":
            if output in program.inputs:
                raise Unsupported("the output is an argument: its tangent is the direction itself")
            self.finish_tangent()
            returned = f"{'v' + str(output) if not self.shape(output) else '0.0'}, {OK}, flagged"
        else:
            returned = f"{'v' + str(output) if not self.shape(output) else '0.0'}, {OK}, False"
        self.emit(f"return {returned}")
        self.flush()
        self.locals_for_buffers()
        signature = ", ".join(p.name for p in self.parameters)
        # Called from Python only, so without the C-callable wrapper Numba makes for every
        # function (for first-class function use): 5-10% less compile time a module.
        return (
            f"{ENTRY_DECORATOR}\ndef {self.mode}({signature}):\n"
            f'    """The program in mode {self.mode}: returns (value, status, flagged)."""\n'
            + "\n".join(self.lines)
        )

    def locals_for_buffers(self) -> None:
        """A buffer that only one loop nest reads and writes, element by element, becomes a
        local of that loop (no store, no parameter): the values and adjoints a merged
        chain of elementwise ops hands from one op to the next and nothing else reads."""
        removed = set()
        for start, end, loop in self.spans:
            for name in loop.writes:
                parameter = next((p for p in self.parameters if p.name == name), None)
                if parameter is None or parameter.role not in (
                    "adjoint",
                    "scratch",
                    "value",
                    "tangent",
                ):
                    continue
                if parameter.node == self.program.output and parameter.role == "value":
                    continue  # the result
                pattern = re.compile(rf"\b{name}\b")
                if any(pattern.search(line) for line in self.lines[:start] + self.lines[end:]):
                    continue
                element = f"{name}[{loop.full}]"
                inside = self.lines[start:end]
                if sum(len(pattern.findall(line)) for line in inside) != sum(
                    line.count(element) for line in inside
                ):
                    continue  # read at another element, or the loop's own range
                self.lines[start:end] = [line.replace(element, f"e_{name}") for line in inside]
                removed.add(name)
        self.parameters = [p for p in self.parameters if p.name not in removed]

    def finish_tangent(self) -> None:
        """The output's tangent (zeros where nothing moves it), ``+ 0.0``, and the nan flag."""
        output = self.program.output
        shape = self.shape(output)
        self.emit("flagged = False")
        if not shape:
            self.parameter("output_tangent", "output_tangent", output, (1,))
            self.emit(f"output_tangent[0] = {f't{output} + 0.0' if self.moves[output] else '0.0'}")
            self.emit("flagged = output_tangent[0] != output_tangent[0]")
            return
        T = self.parameter(f"t{output}", "output_tangent", output, shape)
        self.emit(f"f{output} = {T}.reshape({T}.size)")
        if not self.moves[output]:
            self.emit(f"f{output}[:] = 0.0")
            return
        self.emit(f"for i0 in range(f{output}.size):")
        self.emit(f"x = f{output}[i0] + 0.0", 2)
        self.emit(f"f{output}[i0] = x", 2)
        self.emit("flagged |= x != x", 2)

    def finish_gradients(self) -> None:
        """Zero gradients nothing reached, ``+ 0.0`` on the way out, and the nan flag."""
        program = self.program
        self.emit("flagged = False")
        for slot, position in enumerate(program.wrt):
            j = program.inputs[position]
            if not self.shape(j):
                self.parameter("scalar_gradients", "scalar_gradients", -1, (len(program.wrt),))
                value = f"{self.p.scalar}{j} + 0.0" if self.written[j] else "0.0"
                self.emit(f"scalar_gradients[{slot}] = {value}")
                self.emit(f"flagged |= scalar_gradients[{slot}] != scalar_gradients[{slot}]")
                continue
            target = self.adjoint(j)
            self.emit(f"f{j} = {target}.reshape({target}.size)")
            if not self.written[j]:
                self.emit(f"f{j}[:] = 0.0")
                continue
            depth = 1
            factors = self.products.get(j)
            if factors is not None:  # one product: its factors bound it, no pass over it
                self.emit(
                    f"if {factors[0]}.size + {factors[1]}.size >= f{j}.size or not "
                    f"bounded({factors[0]}, {factors[1]}):"
                )
                depth = 2
            self.emit(f"for i0 in range(f{j}.size):", depth)
            self.emit(f"x = f{j}[i0] + 0.0", depth + 1)
            self.emit(f"f{j}[i0] = x", depth + 1)
            self.emit("flagged |= x != x", depth + 1)


def kernel_source(program: BlockProgram, mode: str) -> tuple[str, list[Parameter]]:
    """The kernel's source and its parameters, in order."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    for node in program.nodes:
        if node.op not in SUPPORTED:
            raise Unsupported(f"generated code has no rule for the op {node.op!r}")
    writer = KernelWriter(program, mode)
    return writer.write(), writer.parameters


def module_source(
    program: BlockProgram,
    mode: str,
    lanes: int = 0,
    vector_math: Sequence[str] = (),
    row_exp_lanes: int = 0,
) -> tuple[str, list[Parameter]]:
    """The text of the generated module for ``program`` in ``mode`` (one kernel named
    ``mode``), and that kernel's parameters in order: what the caller passes.

    With ``lanes`` (fast math), the math functions named in ``vector_math`` are
    :func:`fastad.kernels.vector_math.libmvec`'s, which LLVM may vectorise up to
    ``lanes`` doubles; the rest stay :mod:`math`'s.

    ``row_exp`` is the ``exp`` of the softmax family's rows (``E = exp(x - m)``;
    the only math function those ops call per element): libmvec's at up to
    ``row_exp_lanes`` doubles in every mode, or :mod:`math`'s with 0. Those ops
    are within rounding of the interpreter's, not bit for bit, in any case (it
    runs NumPy's own vectorised ``exp``); every other op keeps ``math``'s
    functions outside fast math, and with them the interpreter's bits."""
    text, parameters = kernel_source(program, mode)
    header = [
        f'"""Generated by fastad: a function of arrays of {len(program.nodes)} nodes, mode {mode}.',
        "",
        "Do not edit: fastad writes this file from the traced program and checks",
        'it, character for character, before every use."""',
        "",
        "from math import (  # noqa: F401",
        "    " + ", ".join(sorted(scalar_source.MATH_NAMES)) + ",",
        ")",
        *_vector_math(lanes, vector_math, row_exp_lanes if "row_exp(" in text else None),
        "",
        "import numpy as np  # noqa: F401",
        "",
        "# NumPy's summation order, BLAS calls and the softmax family's row maxima, compiled",
        f"# once in fastad's kernel cache; this text changes with them (kernels "
        f"{jit.kernels_source_stamp()[:16]}).",
        "from fastad.kernels.array_helpers import bounded, dot, gemm, gemv  # noqa: F401",
        "from fastad.kernels.summation import pairwise, pairwise_rows  # noqa: F401",
        "from fastad.kernels.fused import row_max  # noqa: F401",
        "from fastad.kernels.jit import kernel",
        "",
        "UNREACHED = -0.0",
    ]
    sections = ["\n".join(header), *scalar_source.helper_sources(), text]
    return "\n\n\n".join(sections) + "\n", parameters


def _vector_math(lanes: int, names: Sequence[str], row_exp_lanes: int | None) -> list[str]:
    """The header lines that replace ``names`` by their vectorisable forms (none
    without ``lanes``) and define ``row_exp`` (see :func:`module_source`; None:
    the kernel does not call it); the stamp makes a change to those forms a new
    module."""
    lines = []
    if lanes or row_exp_lanes:
        stamp = vector_math.stamp()
        lines += ["", f"from fastad.kernels.vector_math import libmvec  # vector math {stamp}"]
    if lanes:
        lines += ["", *(f"{name} = libmvec({name!r}, {lanes})" for name in sorted(names))]
    if row_exp_lanes is not None:
        row_exp = f"libmvec('exp', {row_exp_lanes})" if row_exp_lanes else "exp"
        lines += ["", f"row_exp = {row_exp}  # the softmax family's exp"]
    return lines


def describe_products(module: str) -> list[str]:
    """The BLAS calls of the kernel in the text ``module_source`` wrote, one line each."""
    kernel = module.rsplit(f"{ENTRY_DECORATOR}\ndef ", 1)[1]  # the helpers come before it
    found = []
    for line in kernel.splitlines():
        stripped = line.strip()
        if stripped.startswith(("gemm(", "gemv(")) or "dot(" in stripped:
            found.append(stripped)
    return found
