"""Generated code for a compiled function of arrays: the program, its buffers, its calls.

:mod:`fastad.kernels.array_source` writes the source of one kernel per kind of
call (``values``, ``grad``, ``vjp``, ``jvp``, ``hvp``) from a
:class:`~fastad.kernels.array_program.BlockProgram`; this module builds that
program from a traced tape, keeps the modules on disk and loads them
(:mod:`fastad.compiled.module_cache`'s cache, the same one functions of scalars use),
allocates the kernel's buffers once, and calls it.

A call is one kernel call. The buffers (intermediate values, adjoints,
scratch rows) belong to the :class:`BlockCode` and are reused by every call
(the caller serialises calls); gradients are fresh arrays, or the caller's
own through ``out=``; arguments are passed as they are when they are
C-contiguous float64 (class labels, as integers, too), else converted once:
integer data that is not only labels becomes float64.
"""

from __future__ import annotations

import math
import re
import threading
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from fastad.compiled import batch_axis, module_cache, native_code
from fastad.core.reduction_rules import Reduction
from fastad.kernels import array_program, array_source, blas, optable

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray

Unsupported = array_program.Unsupported
OK, BAD_LABEL = array_program.OK, array_program.BAD_LABEL
RECHECK = -3
"""Status: a gradient held a nan; the exact rules compute the call again."""
MODES = array_program.MODES

# The cold compile time of a generated kernel for a function of arrays, measured
# on the 2-core machine (`python bench/blockcode_curve.py`, the table of
# docs/performance.md): about COMPILE_SECONDS_PER_ROW per row (a node in one
# pass), 1.6-1.9 s for the 9-node MLP's gradient (18 rows) to 40 s at 204 rows,
# type inference and LLVM about half each, once the array helpers are in the
# kernel cache (about 1.5 s more, once per machine). `auto` builds code up to
# BUDGET_ROWS rows (about ten seconds in a background thread, once per machine
# thanks to the cache).
COMPILE_SECONDS_FIXED = 0.5
COMPILE_SECONDS_PER_ROW = 0.165
BUDGET_ROWS = 60

ROW_PLANS = 4
"""How many numbers of rows besides the traced one keep their buffers (``batch=``)."""

_FLOAT64 = np.dtype(np.float64)
_INT64 = np.dtype(np.int64)

_counts_lock = threading.Lock()
_counts = {"rechecked": 0}


def recheck_count() -> int:
    """How many generated calls, in this process, had a nan in their gradients and were
    computed again by the exact rules (the interpreter)."""
    with _counts_lock:
        return _counts["rechecked"]


def count_recheck() -> None:
    with _counts_lock:
        _counts["rechecked"] += 1


def program_of(
    tape: TapeStorage,
    inputs: Sequence[int],
    output: int,
    wrt: Sequence[int],
    guards: Sequence[tuple[int, bool]],
) -> array_program.BlockProgram:
    """The traced tape as the generator reads it; :class:`Unsupported` names an op it cannot run."""
    opcode = tape.opcode
    blocks = tape.blocks
    position = {node: p for p, node in enumerate(inputs)}
    nodes = []
    gathers: dict[int, NDArray[np.int64]] = {}
    for i in range(len(tape)):
        code = int(opcode[i])
        value = tape.block_value(i)
        shape = shape_of(tape, i)
        if value is not None and not shape:
            raise Unsupported(f"generated code has no rule for a 0-d array (node {i})")
        operands = tape.operands(i)
        params: tuple[object, ...] = ()
        if code in (optable.INPUT, optable.CONST):
            if i in position:
                kind = "input"
            else:  # a constant, or a leaf the function made for itself
                kind = "array" if value is not None else "constant"
        elif blocks.is_op(i):
            kind = "elementwise" if code < optable.NUM_OPS else optable.ALL[code].name
            found = blocks.params(i)
            if isinstance(found, Reduction):
                params = (found.axes, found.keepdims)
            elif kind == "cross_entropy":
                targets = tape.block_value(operands[1])
                labels = targets is None or targets.shape != shape_of(tape, operands[0])
                params = (labels, found == "mean")
            elif kind == "transpose":  # None: the axes reversed
                params = (tuple(reversed(range(len(shape)))) if found is None else found,)
            elif kind == "index":
                gathers[i] = gather_map(shape_of(tape, operands[0]), found, i)
            elif kind in ("concatenate", "cumsum"):
                params = (int(cast("int", found)),)
        else:
            kind = "scalar"
        if kind not in array_program.SUPPORTED:
            raise Unsupported(
                f"generated code has no rule for the op {optable.ALL[code].name!r} (node {i})"
            )
        nodes.append(array_program.Node(kind, code, operands, shape, params))
    return array_program.BlockProgram(
        tuple(nodes),
        tuple(int(i) for i in inputs),
        int(output),
        tuple(int(p) for p in wrt),
        tuple((int(g), bool(t)) for g, t in guards),
        gathers,
    )


def gather_map(shape: tuple[int, ...], key: Any, node: int) -> NDArray[np.int64]:
    """The flat position in an operand of ``shape`` of each element of ``operand[key]``,
    in C order (one for a single element)."""
    if not shape:
        raise Unsupported(f"generated code has no rule for an index of a scalar (node {node})")
    positions = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)[key]
    flat = np.empty(np.size(positions), np.int64)  # its own memory: not a view of the range
    flat[:] = np.reshape(positions, -1)
    return flat


def shape_of(tape: TapeStorage, node: int) -> tuple[int, ...]:
    """A node's shape: its array's, or () for a scalar."""
    value = tape.block_value(node)
    return () if value is None else tuple(value.shape)


class BlockCode:
    """The generated kernels of one traced function of arrays, one module per mode.

    Not safe to call from two threads at once (the buffers are shared): the
    :class:`fastad.BlockFunction` that owns it holds a lock around calls.
    """

    def __init__(
        self,
        program: array_program.BlockProgram,
        constants: FloatArray,
        integers: Sequence[bool],
        title: str,
        batch_axes: dict[int, tuple[int, ...]] | None = None,
        fast_math: native_code.Vectors | None = None,
    ) -> None:
        """``integers``: per argument, whether the example held integers (its class
        labels, if it is only ever labels, are compiled for int64). ``batch_axes``: per
        array node, the axes along which a call's number of rows runs (``batch=``).
        ``fast_math``: the host's vector math, which the loops' math functions may use
        where LLVM vectorises them (``fastad.kernels.vector_math``); None: libm."""
        reason = blas.unavailable()
        if reason is not None:
            raise Unsupported(reason)
        self.program = program
        self.fast_math = fast_math
        self._constants = constants
        labels = label_inputs(program)
        # Per argument: how a call passes it (a float, a float64 array, or labels,
        # which stay integers: every other integer array becomes float64, as BLAS
        # and the arithmetic read float64).
        self._kinds = [
            "scalar" if not program.nodes[node].shape else "labels" if node in labels else "array"
            for node in program.inputs
        ]
        self._integers = [
            flag and kind == "labels" for flag, kind in zip(integers, self._kinds, strict=True)
        ]
        self._title = title
        self._arrays: dict[int, FloatArray] = {}  # array constants, by node
        self._sources: dict[str, tuple[str, str]] = {}
        self._parameters: dict[str, list[array_program.Parameter]] = {}
        self._modules = module_cache.Modules(self._source)
        self._prepared: set[str] = set()
        self._plans: dict[tuple[str, int | None], _Plan] = {}
        self._ranges: dict[str, dict[str, tuple[int, int]]] = {}
        self._batch_axes = dict(batch_axes or {})
        self._rows: int | None = None  # the traced rows along the batch axes
        for node, axes in self._batch_axes.items():
            self._rows = program.nodes[node].shape[axes[0]]
            break
        for node in program.gathers:  # a gather map holds the traced rows' positions
            if program.nodes[node].operands[0] in self._batch_axes:
                raise Unsupported(
                    f"generated code has no rule for an index of an array that carries the "
                    f"batch's rows (node {node}), even along its other axes: the positions it "
                    "reads are fixed for the traced rows"
                )
        scalar_output = not program.nodes[program.output].shape
        modes: tuple[str, ...] = MODES if scalar_output else ("values", "vjp", "jvp")
        if program.output in program.inputs:  # its VJP (JVP) is the cotangent (direction)
            modes = tuple(mode for mode in modes if mode not in ("vjp", "jvp"))
        # Per mode and kernel parameter, the axes of its shape that follow the rows.
        self._parameter_axes: dict[str, list[tuple[int, ...]]] = {}
        self.unsupported: dict[str, str] = {}  # the modes past grad that generated code lacks
        for mode in modes:
            try:  # raises Unsupported now, not at the first call
                text = self._source(mode)[0]
                if self._rows is not None:
                    self._parameter_axes[mode] = self._axes_of_parameters(mode, text)
            except Unsupported as error:
                if mode in ("values", "grad"):
                    raise
                self.unsupported[mode] = str(error)
        self.modes = tuple(mode for mode in modes if mode not in self.unsupported)

    def _axes_of_parameters(self, mode: str, text: str) -> list[tuple[int, ...]]:
        """Which axes of each of ``mode``'s kernel parameters follow the rows.

        The kernel for the traced rows serves every number of rows: its text
        reads every size from its arguments. Only its buffers change shape.
        The program written for one row more must give the same text (the
        same loops, merges and parameters; else :class:`Unsupported`), and
        where a parameter's shape then differs, by one along an axis, that
        axis follows the rows. (Writing the program again for another number
        of rows can merge other loops where a shape happens to meet another,
        at one row for instance: so the shapes come from here, not from that.)
        """
        rows = cast(int, self._rows)
        other_text, other = self._source_at(mode, rows + 1)
        if other_text != text:
            raise Unsupported(
                f"the generated {mode} kernel differs at another number of rows: the traced "
                "rows choose some of its code (a stack of one matrix against another is "
                "broadcast, of two or more not); trace the example with at least two rows"
            )
        axes = []
        for traced, moved in zip(self._parameters[mode], other, strict=True):
            changed = tuple(
                t for t, (n, m) in enumerate(zip(traced.shape, moved.shape, strict=True)) if n != m
            )
            if traced.name != moved.name or any(
                traced.shape[t] != rows or moved.shape[t] != rows + 1 for t in changed
            ):
                raise Unsupported(
                    f"the {mode} kernel's buffer {traced.name} does not follow the rows"
                )
            axes.append(changed)
        return axes

    def set_array(self, node: int, value: FloatArray) -> None:
        """The value of array constant ``node`` (read-only; passed to every call)."""
        self._arrays[node] = value

    @property
    def budget_rows(self) -> int:
        """``auto`` builds no code of more rows than this (``BUDGET_ROWS``)."""
        return BUDGET_ROWS

    def rows(self, mode: str) -> int:
        """The size of ``mode``'s code, nodes times passes (the compile-time estimate's unit:
        ``hvp`` makes three, the values with their tangents and two backward)."""
        return len(self.program.nodes) * {"values": 1, "hvp": 3}.get(mode, 2)

    def expected_seconds(self, mode: str) -> float:
        """The cold compile time the measured curve predicts for ``mode``'s code."""
        return COMPILE_SECONDS_FIXED + COMPILE_SECONDS_PER_ROW * self.rows(mode)

    def _source(self, mode: str) -> tuple[str, str]:
        found = self._sources.get(mode)
        if found is None:
            text, self._parameters[mode] = array_source.module_source(
                self.program, mode, *self._vector_math()
            )
            found = self._sources[mode] = (text, f"fastad_{module_cache.module_key(text)}")
        return found

    def _source_at(self, mode: str, rows: int) -> tuple[str, list[array_program.Parameter]]:
        """The module text and parameters of the program written again with ``rows`` rows
        along its batch axes: :meth:`_axes_of_parameters` compares them with the traced
        kernel's at one row more (a call never runs this kernel)."""
        nodes = tuple(
            node._replace(shape=batch_axis.shape_at(node.shape, self._batch_axes[i], rows))
            if i in self._batch_axes
            else node
            for i, node in enumerate(self.program.nodes)
        )
        return array_source.module_source(
            self.program._replace(nodes=nodes), mode, *self._vector_math()
        )

    def _vector_math(self) -> tuple[int, tuple[str, ...], int]:
        """``(lanes, functions)`` of fast math for the module text (``(0, ())`` without),
        and the lanes of the softmax family's ``exp`` (in every mode: the host's libmvec,
        0 without it)."""
        lanes, functions = self.fast_math or (0, ())
        return lanes, functions, native_code.row_exp_lanes()

    def fast_math_reason(self) -> str | None:
        """How the loops run under fast math: None without fast math."""
        if self.fast_math is None:
            return None
        return (
            f"fast math: the loops LLVM vectorises call glibc's libmvec, up to "
            f"{self.fast_math.lanes} elements per vector"
        )

    def source(self, mode: str) -> str:
        """The text of ``mode``'s generated module."""
        return self._source(mode)[0]

    def products(self, mode: str) -> list[str]:
        """The BLAS calls of ``mode``'s kernel, one line each (see
        :meth:`fastad.BlockFunction.blas_calls`)."""
        return array_source.describe_products(self.source(mode))

    def module(self, mode: str) -> types.ModuleType:
        """The generated module for ``mode`` (written or checked on first use)."""
        return self._modules.get(mode)

    def is_cached(self, mode: str) -> bool:
        """Whether ``mode``'s kernel compiled into the cache before (a load, not a compile)."""
        return module_cache.is_compiled(*self._source(mode))

    def _live_ranges(self, mode: str) -> dict[str, tuple[int, int]]:
        """Per buffer name, the first and last statement of ``mode``'s kernel using it."""
        found = self._ranges.get(mode)
        if found is None:
            found = self._ranges[mode] = live_ranges(self._source(mode)[0], mode)
        return found

    def buffer_bytes(self, mode: str, rows: int | None = None) -> tuple[int, int]:
        """``(bytes held, bytes without sharing)`` of ``mode``'s buffers (for ``rows``)."""
        plan = self._plans.get((mode, rows)) or self._plan(mode, rows)
        seen: dict[int, int] = {}
        wanted = 0
        for item in plan.template:
            if isinstance(item, np.ndarray) and item.base is not None and item.base.ndim == 1:
                seen[id(item.base)] = item.base.nbytes
                wanted += item.nbytes
        return sum(seen.values()), wanted

    def _plan(self, mode: str, rows: int | None) -> _Plan:
        """What a call of ``mode`` passes (with ``rows`` rows along the batch axes; None:
        as traced): its buffers, allocated once, in place, the rest by slot."""
        key = (mode, rows)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        self._source(mode)
        if rows is None or rows == self._rows:
            parameters = self._parameters[mode]
        else:
            parameters = [
                parameter._replace(shape=batch_axis.shape_at(parameter.shape, axes, rows))
                for parameter, axes in zip(
                    self._parameters[mode], self._parameter_axes[mode], strict=True
                )
            ]
            other_rows = [k for k in self._plans if k[0] == mode and k[1] not in (None, self._rows)]
            if len(other_rows) >= ROW_PLANS:  # the least recently used other number goes
                del self._plans[other_rows[0]]
        buffers = shared_buffers(
            [
                parameter
                for parameter in parameters
                if parameter.role in ("scratch", "adjoint", "tangent")
                or (parameter.role == "value" and parameter.node != self.program.output)
            ],
            self._live_ranges(mode),
        )
        template: list[Any] = []
        arguments, gradients = [], []
        output = scalars = cotangent = scalar_directions = tangent = -1
        directions = []
        wrt = self.program.wrt
        for index, parameter in enumerate(parameters):
            role = parameter.role
            fixed: Any = None
            if role == "argument":
                arguments.append((index, parameter.position))
            elif role == "constants":
                fixed = self._constants
            elif role == "array":
                fixed = self._arrays[parameter.node]
            elif role == "gather":
                fixed = self.program.gathers[parameter.node]
            elif role == "value" and parameter.node == self.program.output:
                output = index  # the result: a fresh array
            elif role == "gradient":
                gradients.append((index, wrt.index(parameter.position), parameter.shape))
            elif role == "scalar_gradients":
                scalars = index
            elif role == "cotangent":
                cotangent = index
            elif role == "direction":
                directions.append((index, wrt.index(parameter.position)))
            elif role == "scalar_directions":
                scalar_directions = index
            elif role == "output_tangent":
                tangent = index  # the result: a fresh array
            else:
                fixed = buffers[parameter.name]
            template.append(fixed)
        # Per wrt position, where its gradient comes from: a kernel argument (an array)
        # or a slot of the scalar gradients.
        by_slot = {slot: index for index, slot, _ in gradients}
        returned = [(by_slot.get(slot, -1), slot) for slot in range(len(wrt))]
        output_shape = self.program.nodes[self.program.output].shape
        if rows is not None and self.program.output in self._batch_axes:
            output_shape = batch_axis.shape_at(
                output_shape, self._batch_axes[self.program.output], rows
            )
        plan = self._plans[key] = _Plan(
            getattr(self.module(mode), mode),
            template,
            arguments,
            output,
            output_shape,
            gradients,
            scalars,
            len(wrt),
            returned,
            cotangent,
            directions,
            scalar_directions,
            tangent,
            parameters[tangent].shape if tangent >= 0 else (),
        )
        return plan

    def prepare_latency(self, mode: str) -> None:
        """Nothing: a function of arrays has no separate one-point kernel."""

    def prepare(self, mode: str, parallel: bool = False, report: bool = True) -> None:
        """Compile (or load from the cache) ``mode``'s kernel for float64 arguments.

        ``parallel`` is accepted for :class:`fastad.compiled.tiers.Tiers` and ignored:
        a function of arrays runs on the calling thread (its BLAS may use
        threads of its own).
        """
        if mode in self._prepared:
            return
        module = self.module(mode)
        kernel = getattr(module, mode)
        examples: list[Any] = []
        for parameter in self._parameters[mode]:
            if parameter.role == "argument" and not parameter.shape:
                examples.append(0.0)
            elif parameter.role == "argument" and self._integers[parameter.position]:
                examples.append(np.empty((0,) * len(parameter.shape), _INT64))
            elif parameter.role == "cotangent" and not parameter.shape:
                examples.append(0.0)
            elif parameter.role == "constants":
                examples.append(self._constants)
            elif parameter.role == "array":
                examples.append(self._arrays[parameter.node])
            elif parameter.role == "gather":
                examples.append(self.program.gathers[parameter.node])
            else:
                examples.append(np.empty((0,) * max(1, len(parameter.shape))))
        if module_cache.uncompiled(kernel):
            rows = self.rows(mode)
            module_cache.compile_kernels(
                [(kernel, tuple(examples))],
                lambda names: f"compiling generated code for {self._title} ({mode}, {rows} rows)",
                self.expected_seconds(mode),
                report,
            )
            module_cache.mark_compiled(self._source(mode)[1])
        self._prepared.add(mode)

    def _output_copy(self, arguments: Sequence[Any]) -> FloatArray:
        """A fresh float64 copy of the output where it is an argument or an array constant."""
        output = self.program.output
        if output in self.program.inputs:
            return np.array(arguments[self.program.inputs.index(output)], dtype=_FLOAT64)
        return np.array(self._arrays[output], dtype=_FLOAT64)

    def run(
        self,
        mode: str,
        arguments: Sequence[Any],
        out: Sequence[Any] | None = None,
        rows: int | None = None,
        cotangent: Any = None,
        directions: Sequence[Any] | None = None,
    ) -> tuple[int, Any, Any]:
        """One call of ``mode``'s kernel at ``arguments`` (validated by the caller):
        ``(status, value, gradients)``. The status is ``OK``, a failed guard's index,
        ``BAD_LABEL`` or ``RECHECK`` (a nan gradient or tangent); the value a float, or
        the output array; the gradients arrays, floats for scalar arguments (None in
        ``values``; in ``jvp`` the output's tangent, a float or an array).

        ``out``: per ``wrt`` position, None or a float64 C-contiguous writable
        array of the argument's shape (validated by the caller) that receives
        that gradient. ``rows``: the call's number of rows along the batch axes
        (None: as traced); the buffers of the last few numbers of rows are kept.
        ``cotangent`` (mode ``vjp``): the output's cotangent, a float or a
        C-contiguous float64 array of the output's shape (validated by the
        caller), only read. ``directions`` (mode ``jvp``): per ``wrt`` position, a
        float for a scalar argument, else a C-contiguous float64 array of its shape
        (validated by the caller), only read.
        """
        if mode not in self._prepared:
            self.prepare(mode)
        plan = self._plans.get((mode, rows))
        if plan is None:
            plan = self._plan(mode, rows)
        elif rows is not None and rows != self._rows:  # most recently used: kept longest
            self._plans[(mode, rows)] = self._plans.pop((mode, rows))
        passed = plan.template.copy()
        kinds, integers = self._kinds, self._integers
        for index, position in plan.arguments:
            value = arguments[position]
            kind = kinds[position]
            if kind == "scalar":
                value = float(value)
            elif not (type(value) is np.ndarray and value.dtype is _FLOAT64):
                # Labels as the kernel was compiled for (int64 where traced as integers).
                value = kernel_argument(value, labels=integers[position])
            else:
                if not value.flags.carray:  # C-contiguous, writable and aligned
                    # The kernel is compiled for writable, aligned C arrays: a read-only
                    # one (a memory map) would compile a second kernel in the call.
                    value = np.array(value, order="C")
            passed[index] = value
        if plan.output >= 0:
            passed[plan.output] = np.empty(plan.output_shape)
        for index, slot, shape in plan.gradients:
            given = None if out is None else out[slot]
            passed[index] = np.empty(shape) if given is None else given
        if plan.scalars >= 0:
            passed[plan.scalars] = np.empty(plan.wrt)
        if plan.cotangent >= 0:
            passed[plan.cotangent] = cotangent
        if directions is not None:
            for index, slot in plan.directions:
                passed[index] = directions[slot]
            if plan.scalar_directions >= 0:
                passed[plan.scalar_directions] = np.array(
                    [d if isinstance(d, float) else 0.0 for d in directions]
                )
        if plan.tangent >= 0:
            passed[plan.tangent] = np.empty(plan.tangent_shape)
        value, status, flagged = plan.kernel(*passed)
        if status != OK:
            return int(status), None, None
        if plan.output >= 0:
            value = passed[plan.output]  # an array output
        elif plan.output_shape:  # the output is an argument or an array constant
            value = self._output_copy(arguments)
        else:
            value = float(value)
        if mode == "values":
            return OK, value, None
        if flagged:
            count_recheck()
            return RECHECK, None, None
        if mode == "jvp":  # the output's tangent: a float for a scalar output
            tangent = passed[plan.tangent]
            return OK, value, tangent if plan.output_shape else float(tangent[0])
        if plan.scalars < 0:  # arrays only
            return OK, value, [passed[index] for index, _ in plan.returned]
        gradients = [
            passed[index] if index >= 0 else float(passed[plan.scalars][slot])
            for index, slot in plan.returned
        ]
        return OK, value, gradients


class _Plan(NamedTuple):
    """One mode's call, laid out once: ``template`` holds the kernel's arguments with the
    buffers in place; the caller's arguments, the output and the gradients go into the
    slots listed (``-1``: none)."""

    kernel: Any
    template: list[Any]
    arguments: list[tuple[int, int]]  # (parameter index, argument position)
    output: int
    output_shape: tuple[int, ...]
    gradients: list[tuple[int, int, tuple[int, ...]]]  # (parameter index, wrt slot, shape)
    scalars: int
    wrt: int
    returned: list[tuple[int, int]]  # per wrt slot: (parameter index or -1, slot)
    cotangent: int  # mode vjp: where the caller's cotangent goes
    directions: list[tuple[int, int]]  # mode jvp: (parameter index, wrt slot) of arrays
    scalar_directions: int  # mode jvp: the scalar arguments' directions, by wrt slot
    tangent: int  # mode jvp: the output's tangent
    tangent_shape: tuple[int, ...]  # (1,) for a scalar output


def live_ranges(text: str, mode: str) -> dict[str, tuple[int, int]]:
    """Per name, the first and last top-level statement of kernel ``mode`` in ``text``
    that reads or writes its elements (a loop nest is one statement; reading a buffer's
    ``.shape`` or ``.size`` is no use of its memory). A name a statement assigns from
    others (``f0 = d0.reshape(d0.size)``) is an alias: its uses are theirs too."""
    lines = text[text.index(f"def {mode}(") :].splitlines()[2:]  # the body, past the docstring
    ranges: dict[str, tuple[int, int]] = {}
    aliases: dict[str, set[str]] = {}
    statement = -1
    for line in lines:
        if not line.strip():
            continue
        if not line.startswith("     "):  # four spaces: a new top-level statement
            statement += 1
        code = _SIZE_READ.sub("", line)
        used: set[str] = set()
        for name in _NAME.findall(code):
            used |= aliases.get(name, set()) | {name}
        for name in used:
            first, _ = ranges.get(name, (statement, statement))
            ranges[name] = (first, statement)
        assigned = _ASSIGNED.match(code)
        if assigned and not line.startswith("     "):
            target = assigned.group(1)
            aliases[target] = used - {target}
    return ranges


_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_SIZE_READ = re.compile(r"\b\w+\.(?:shape|size)\b")
_ASSIGNED = re.compile(r"^\s*(\w+) = ")


def shared_buffers(
    parameters: Sequence[array_program.Parameter], ranges: dict[str, tuple[int, int]]
) -> dict[str, FloatArray]:
    """One array per buffer parameter, buffers whose live ranges do not meet sharing memory.

    Greedy by first use: a buffer takes the smallest block of memory free since before
    its first statement that holds it, else grows the largest free one, else a new
    one; each is a C-contiguous view of its block's start. Two buffers sharing memory
    are never used in one statement (a loop nest, a BLAS call), so no element is read
    after another buffer wrote over it.
    """
    order = sorted(parameters, key=lambda p: ranges.get(p.name, (-1, -1))[0])
    blocks: list[list[int]] = []  # [size, last statement using it]
    placed: list[tuple[array_program.Parameter, int]] = []
    for parameter in order:
        first, last = ranges.get(parameter.name, (-1, 2**62))  # unseen: never shared
        size = math.prod(parameter.shape)
        free = [b for b, (_, until) in enumerate(blocks) if until < first]
        fits = [b for b in free if blocks[b][0] >= size]
        if fits:
            chosen = min(fits, key=lambda b: blocks[b][0])
        elif free:
            chosen = max(free, key=lambda b: blocks[b][0])
            blocks[chosen][0] = size
        else:
            chosen = len(blocks)
            blocks.append([size, last])
        blocks[chosen][1] = last
        placed.append((parameter, chosen))
    memory = [np.empty(max(size, 1)) for size, _ in blocks]
    return {
        parameter.name: memory[b][: math.prod(parameter.shape)].reshape(parameter.shape)
        for parameter, b in placed
    }


def kernel_argument(value: Any, labels: bool = False) -> Any:
    """An argument as a kernel takes it: a float, or a C-contiguous, aligned, writable
    float64 array; no copy when it is one already. With ``labels`` (class labels the
    kernel was compiled to take as integers), an integer array becomes int64 instead
    (the kernel checks each label)."""
    if labels and type(value) is np.ndarray and value.dtype is _INT64 and value.flags.carray:
        return value  # int64 labels as the kernel takes them: the common case, at once
    array = value if type(value) is np.ndarray else np.asarray(value)
    if array.ndim == 0:
        return float(array)
    kind, size = array.dtype.kind, array.dtype.itemsize
    wanted = _INT64 if labels and (kind == "i" or (kind == "u" and size < 8)) else _FLOAT64
    # Writable and aligned too: the kernels are compiled for such arrays. uint64 labels
    # become float64 (as int64 they could wrap around).
    return np.require(array, dtype=wanted, requirements=["C", "A", "W"])


def label_inputs(program: array_program.BlockProgram) -> set[int]:
    """The input nodes used only as the class labels of cross-entropies."""
    uses: dict[int, set[bool]] = {}
    for node in program.nodes:
        for slot, j in enumerate(node.operands):
            label = node.op == "cross_entropy" and slot == 1 and bool(node.params[0])
            uses.setdefault(j, set()).add(label)
    return {j for j in program.inputs if uses.get(j) == {True}}


def build(
    tape: TapeStorage,
    inputs: Sequence[int],
    output: int,
    wrt: Sequence[int],
    guards: Sequence[tuple[int, bool]],
    integers: Sequence[bool],
    title: str,
    batch_axes: dict[int, tuple[int, ...]] | None = None,
    fast_math: native_code.Vectors | None = None,
) -> BlockCode:
    """The generated code of a traced tape, its array constants in place; raises
    :class:`Unsupported` naming what it cannot run."""
    program = program_of(tape, inputs, output, wrt, guards)
    code = BlockCode(program, tape.val.copy(), integers, title, batch_axes, fast_math)
    for i, node in enumerate(program.nodes):
        value = tape.block_value(i)
        if node.op == "array" and value is not None:
            code.set_array(i, value)
    return code
