"""Straight-line kernels generated from one traced program: the second replay tier.

The interpreter (``lane_sweeps.sweep_block``) dispatches on every node's opcode
for every row of lanes. For a program that is not too long, this module
writes instead the Python source of a module whose kernels evaluate that
one program as straight-line code, one local variable per node, with the
loop over points inside the kernel: nothing is dispatched, nothing is
stored per node, and LLVM sees the whole function.

The statements are the op table's own rule expressions (``optable.OPS``),
with the operands' variables substituted for ``a``, ``b`` and ``out``, in
the interpreter's order: values and local partials node by node, adjoints
accumulated in decreasing node order with each node's ``in0`` edge before
its ``in1`` edge, tangents in increasing order, guards compared in their
recorded order. So every result equals the interpreter's bit for bit (a
nan result is nan in both, but which nan, its sign and payload, may differ:
LLVM may order the operands of a commutative operation differently in the
two compilations, and x86 keeps the first operand's nan). What the
generator leaves out changes no bit:

- an edge whose local partial is the literal ``0.0`` (comparisons,
  ``stop_gradient``, the condition of a pick): ``contribution(0.0, g)`` is
  ``UNREACHED``, and adding ``UNREACHED`` (-0.0) changes nothing;
- an edge into a node that depends on no input (a constant, a constant
  expression): its adjoint is never read;
- every edge out of a node that nothing can reach (its adjoint or tangent
  is statically ``UNREACHED``);
- the first addition to a buffer that starts at ``UNREACHED``
  (``-0.0 + x == x`` for every ``x``), which becomes an assignment;
- ``contribution(1.0, g)``, which is ``g`` itself (``g * 1.0 + 0.0`` is
  ``g`` for every reached ``g``, and ``UNREACHED`` stays ``UNREACHED``).

Each mode and kernel (a batch of points, or one point) gets a module of its
own (``MODES``, ``KERNELS``), so a program's code is only as long as what it
is called for. ``scalar_ir`` lowers the text to LLVM IR and
``fastad.compiled.native_code`` compiles and caches it. A module holds copies
of the op table's helpers and of ``contribution``, so its text alone
determines its machine code and the cache can be keyed by that text; it
stays valid Numba source (the decorators), which can run it when debugging
the lowering.

Kernels trust their input as every kernel does: the program comes from a
validated tape, the arrays are C-contiguous float64 of the right shapes.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import re
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from . import optable, strong_zeros

MODES = ("values", "grad", "vjp", "jvp", "jacobian_fwd", "jacobian_rev", "hvp", "hessian")
"""What a module computes per point.

``values``: the outputs. ``grad``: a scalar output and its gradient (the
seed is 1). ``vjp``: outputs and ``u^T J`` for a cotangent ``u`` per point.
``jvp``: outputs and ``J v``. ``jacobian_fwd`` / ``jacobian_rev``: outputs
and the whole ``(m, k)`` Jacobian, by ``k`` tangent passes or ``m``
adjoint passes after one forward pass (``derivatives[p]`` holds it row by
row, ``m * k`` numbers). ``hvp``: a scalar output and ``H v`` for a direction
``v`` per point (forward-over-reverse: a tangent pass, the adjoint pass and
its tangent); ``hessian``: the ``(k, k)`` Hessian row by row, one adjoint
pass and then, per input, a tangent pass and the adjoint pass's tangent.
"""
POINT_MODES = ("values", "grad", "hvp")
"""Modes that also get a one-point kernel (the latency path)."""
POINT_PARAMETERS = {
    "values": "point, constants",
    "grad": "point, gradient, constants",
    "hvp": "point, direction, gradient, constants",
}
"""Each one-point kernel's parameters: ``gradient`` receives the derivatives."""
SECOND_MODES = ("hvp", "hessian")
"""Modes of a scalar output that read the second local partials."""


class Program(NamedTuple):
    """A traced program as the generator reads it (all from a validated tape).

    ``opcode``, ``in0``, ``in1``: the tape's columns (``-1`` for a missing
    operand); ``values``: the traced values (constants keep theirs);
    ``inputs``, ``outputs``: node ids; ``guards``: ``(g, 2)`` rows of
    (node id, traced truth 0 or 1).
    """

    opcode: NDArray[np.uint8]
    in0: NDArray[np.int32]
    in1: NDArray[np.int32]
    values: NDArray[np.float64]
    inputs: NDArray[np.int64]
    outputs: NDArray[np.int64]
    guards: NDArray[np.int64]


class Rule(NamedTuple):
    """One op's rule expressions as format templates with ``{a}``, ``{b}`` and ``{out}``."""

    value: str  # format template with {a}, {b}, {out}
    partials: tuple[str, ...]
    second: tuple[str, ...]  # d2/da2 (and d2/da db, d2/db2 for a binary op)


_PLACEHOLDERS = {"a": "{a}", "b": "{b}", "out": "{out}"}


def _template(expression: str) -> str:
    """``expression`` with the rule variables ``a``, ``b``, ``out`` as format fields.

    Parsed, so ``a`` inside ``atan`` or ``fabs`` is left alone; the rule
    dialect has no braces of its own (no dict or set displays).
    """
    tree = ast.parse(expression, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _PLACEHOLDERS:
            node.id = _PLACEHOLDERS[node.id]
    return ast.unparse(tree)


@functools.cache
def rule_templates() -> dict[int, Rule]:
    return {
        op.code: Rule(
            _template(op.value),
            tuple(_template(p) for p in op.partials),
            tuple(_template(p) for p in op.second or ()),
        )
        for op in optable.OPS
        if op.arity
    }


def _is_plain(expression: str) -> bool:
    """A variable or a literal: no need for a local of its own."""
    return expression.isidentifier() or expression in ("1.0", "-1.0")


class _Emitter:
    """Writes the per-point statements of one kernel, indented by ``indent``."""

    def __init__(self, program: Program, indent: str, plain: bool = False) -> None:
        self.program = program
        self.indent = indent
        self.plain = plain
        self.written: list[str] = []  # the derivative values written, for the recheck test
        self.lines: list[str] = []
        self.n = program.opcode.size
        self.arity = [optable.ALL[int(code)].arity for code in program.opcode]
        self.partials: dict[tuple[int, int], str] = {}
        self.seconds: dict[tuple[int, int], str] = {}  # (node, 0 aa | 1 ab | 2 bb), non-zero
        # Nodes that depend on an input: only their adjoints and tangents can
        # ever be reached, so only edges into them carry anything.
        depends = np.zeros(self.n, bool)
        depends[program.inputs] = True
        for i in range(self.n):
            depends[i] |= any(depends[j] for j in self.operands(i))
        self.depends = depends

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def operands(self, i: int) -> list[int]:
        return [int(self.program.in0[i]), int(self.program.in1[i])][: self.arity[i]]

    def forward(
        self, read_input: list[str], with_partials: bool, with_second: bool = False
    ) -> None:
        """Values in node order and, ``with_partials``, every live edge's local partial.

        ``with_second``: also the second local partials that a live edge's
        tangent needs (those that meet an operand depending on an input).
        """
        program = self.program
        rules = rule_templates()
        position = {int(node): t for t, node in enumerate(program.inputs)}
        for i in range(self.n):
            if i in position:
                self.emit(f"v{i} = {read_input[position[i]]}")
                continue
            if not self.arity[i]:
                # A constant (or a leaf that is not an input), read at run time:
                # a literal would let LLVM rewrite the ops it meets (pow(x, 2.0)
                # becomes x * x, pow(x, 0.5) sqrt), which moves the last bit.
                self.emit(f"v{i} = constants[{i}]")
                continue
            rule = rules[int(program.opcode[i])]
            operands = self.operands(i)
            names = {
                "a": f"v{operands[0]}",
                "b": f"v{operands[1]}" if len(operands) > 1 else "0.0",
                "out": f"v{i}",
            }
            self.emit(f"v{i} = {rule.value.format(**names)}")
            if not with_partials:
                continue
            for slot, operand in enumerate(operands):
                partial = rule.partials[slot].format(**names)
                if partial == "0.0" or not self.depends[operand]:
                    continue  # sends nothing, or to a node whose adjoint nobody reads
                if not _is_plain(partial):
                    self.emit(f"p{i}_{slot} = {partial}")
                    partial = f"p{i}_{slot}"
                self.partials[i, slot] = partial
            if with_second:
                self.second_partials(i, rule, names)

    def second_partials(self, i: int, rule: Rule, names: dict[str, str]) -> None:
        """The second partials of node ``i`` that the tangents of its live edges read."""
        operands = self.operands(i)
        for which, expression in enumerate(rule.second):
            # aa pairs edge 0 with operand 0; ab edge 0 with operand 1 and
            # edge 1 with operand 0; bb edge 1 with operand 1.
            uses = {0: [(0, 0)], 1: [(0, 1), (1, 0)], 2: [(1, 1)]}[which]
            needed = any(
                (i, slot) in self.partials and self.depends[operands[other]] for slot, other in uses
            )
            second = expression.format(**names)
            if second == "0.0" or not needed:
                continue
            if not _is_plain(second):
                self.emit(f"s{i}_{which} = {second}")
                second = f"s{i}_{which}"
            self.seconds[i, which] = second

    def guards(self, on_failure: list[str]) -> None:
        """Find the first guard whose truth differs from the traced one, then ``on_failure``."""
        if not self.program.guards.shape[0]:
            return
        self.emit("failed = -1")
        for q, (node, truth) in enumerate(self.program.guards.tolist()):
            # The interpreter's test, (value != 0.0) != truth, written out.
            fails = f"not (v{node} != 0.0)" if truth else f"v{node} != 0.0"
            self.emit(f"if failed < 0 and {fails}:")
            self.emit(f"    failed = {q}")
        for line in on_failure:
            self.emit(line)

    def term(self, i: int, slot: int, incoming: str) -> str:
        """What edge ``(i, slot)`` sends: ``contribution(partial, incoming)``."""
        return self.product(self.partials[i, slot], incoming)

    def product(self, partial: str, incoming: str) -> str:
        """``contribution(partial, incoming)``; in ``plain`` code the product alone
        (see ``module_source``)."""
        if partial == "1.0":
            return incoming
        if self.plain:
            return f"{partial} * {incoming}"
        return f"contribution({partial}, {incoming})"

    def seed(self, value: str) -> str:
        """A seed read at run time: a zero is a strong zero (in plain code, just the value)."""
        return value if self.plain else f"({value} if {value} != 0.0 else -0.0)"

    def write(self, statement: str, value: str) -> None:
        """``statement`` with a derivative ``value``, remembered for ``recheck``."""
        if value != "0.0":
            self.written.append(value.removesuffix(" + 0.0"))
        self.emit(statement.format(value))

    def recheck(self) -> None:
        """Flag the point when a derivative of plain code is nan, for the exact rules."""
        if not self.written:
            return
        # A pairwise sum: a chain of k - 1 dependent additions is k times the
        # latency; any nan among the terms makes the sum nan either way.
        terms = self.written
        while len(terms) > 1:
            pairs = [f"({a} + {b})" for a, b in zip(terms[::2], terms[1::2], strict=False)]
            terms = pairs + terms[len(pairs) * 2 :]
        self.emit(f"total = {terms[0]}")
        self.emit("if total != total:")
        self.emit("    recheck[p] = True")
        self.emit("    flagged += 1")

    def reverse(
        self,
        seeds: list[tuple[int, str]],
        write: list[str] | None,
        prefix: str = "g",
        adjoints: dict[int, str] | None = None,
        tangents: dict[int, str] | None = None,
    ) -> dict[int, str]:
        """Adjoints: the seeds in output order, then the live edges, last node first.

        ``seeds``: (output node, seed expression); an output listed twice
        adds both. ``write[t]``: a statement with ``{}`` for input ``t``'s
        derivative (None: nothing is written). Every sum gets a new name
        (``g7``, ``g7_1``, ...; each pass its own ``prefix``): code that
        assigns each variable once spares Numba's SSA reconstruction, which
        took most of the compile time of reassigned adjoints. An adjoint
        that is another's is that name. Returns each reached node's adjoint.

        With ``adjoints`` and ``tangents`` (the names of a finished adjoint
        pass and tangent pass) this is the tangent of that adjoint pass,
        forward-over-reverse: each edge also sends the tangent of its
        partial times the node's adjoint, the rule of
        ``tape_sweeps.second_backward_range``.
        """
        current: dict[int, str] = {}  # node -> the name of its adjoint so far
        versions: dict[int, int] = {}

        def accumulate(node: int, term: str) -> None:
            if node in current:
                versions[node] = versions.get(node, 0) + 1
                name = f"{prefix}{node}_{versions[node]}"
                self.emit(f"{name} = {current[node]} + {term}")
            elif term.isidentifier():
                name = term  # -0.0 + g is g: no statement at all
            else:
                name = f"{prefix}{node}"
                self.emit(f"{name} = {term}")
            current[node] = name

        for node, seed in seeds:
            accumulate(node, seed)
        first = adjoints or {}
        for i in range(self.n - 1, -1, -1):
            if i not in current and i not in first:
                continue  # statically unreached: sends nothing
            for slot, operand in enumerate(self.operands(i)):
                if (i, slot) not in self.partials:
                    continue
                terms = [self.term(i, slot, current[i])] if i in current else []
                moved = (
                    self.partial_tangent(i, slot, tangents or {}, prefix) if i in first else None
                )
                if moved is not None:
                    terms.append(self.product(moved, first[i]))
                if terms:  # both: summed first, then added, as every tier does
                    accumulate(operand, terms[0] if len(terms) == 1 else f"({' + '.join(terms)})")
        self.write_all(write, self.program.inputs.tolist(), current)
        return current

    def partial_tangent(
        self, i: int, slot: int, tangents: dict[int, str], prefix: str
    ) -> str | None:
        """The tangent of edge ``(i, slot)``'s partial, or None where it is statically unreached.

        ``d2/da2 * t_a + d2/da db * t_b`` for the first operand's edge, ``d2/da db
        * t_a + d2/db2 * t_b`` for the second's, as ``lane_sweeps.second_pass``.
        """
        pairs = [(0, 0), (1, 1)] if slot == 0 else [(1, 0), (2, 1)]
        operands = self.operands(i)
        terms = [
            self.product(self.seconds[i, which], tangents[operands[other]])
            for which, other in pairs
            if (i, which) in self.seconds and other < len(operands) and operands[other] in tangents
        ]
        if not terms:
            return None
        if len(terms) == 1 and _is_plain(terms[0]):
            return terms[0]
        name = f"{prefix}d{i}_{slot}"
        self.emit(f"{name} = {' + '.join(terms)}")
        return name

    def tangents(
        self, seeds: dict[int, str], write: list[str] | None, prefix: str = "t"
    ) -> dict[int, str]:
        """Tangents: the seeded inputs, then every node in increasing order.

        ``write[r]``: a statement with ``{}`` for output ``r``'s tangent
        (None: nothing is written). Each pass has its own ``prefix``, so
        every name is assigned once. Returns each reached node's tangent.
        """
        current: dict[int, str] = {}
        for node, seed in seeds.items():
            current[node] = f"{prefix}{node}"
            self.emit(f"{prefix}{node} = {seed}")
        for i in range(self.n):
            if i in seeds:
                continue
            terms = [
                self.term(i, slot, current[operand])
                for slot, operand in enumerate(self.operands(i))
                if (i, slot) in self.partials and operand in current
            ]
            if len(terms) == 1 and terms[0].isidentifier():
                current[i] = terms[0]  # contribution(1.0, t) is t: no statement
            elif terms:
                current[i] = f"{prefix}{i}"
                self.emit(f"{prefix}{i} = {' + '.join(terms)}")
        self.write_all(write, self.program.outputs.tolist(), current)
        return current

    def write_all(self, write: list[str] | None, nodes: list[int], names: dict[int, str]) -> None:
        """``write[t]`` for each of ``nodes``: its derivative's name, or 0.0 if unreached."""
        for statement, node in zip(write or [], nodes, strict=False):
            self.write(statement, f"{names[node]} + 0.0" if node in names else "0.0")


def _statements(
    emitter: _Emitter,
    mode: str,
    read: list[str],
    write: list[str],
    derivative: list[str],
    along: str = "directions[p, {}]",
) -> None:
    """One point's statements in ``mode``.

    ``read[t]``: where input ``t`` comes from (``points[p, 0]``);
    ``write[r]``: where output ``r`` goes (empty: the kernel returns it);
    ``derivative[d]``: where derivative slot ``d`` goes; ``along``: where
    the direction's (or cotangent's) entry ``{}`` comes from.
    """
    program = emitter.program
    k, m = program.inputs.size, program.outputs.size
    inputs, outputs = program.inputs.tolist(), program.outputs.tolist()
    emitter.forward(read, with_partials=mode != "values", with_second=mode in SECOND_MODES)
    for target, node in zip(write, outputs, strict=False):
        emitter.emit(f"{target} = v{node}")

    def assign(targets: list[str]) -> list[str]:
        return [f"{target} = {{}}" for target in targets]

    if mode == "grad":
        emitter.reverse([(outputs[0], "1.0")], assign(derivative[:k]))
    elif mode == "vjp":
        for r in range(m):
            emitter.emit(f"u{r} = {along.format(r)}")
        seeds = [(node, emitter.seed(f"u{r}")) for r, node in enumerate(outputs)]
        emitter.reverse(seeds, assign(derivative[:k]))
    elif mode == "jvp":
        for t in range(k):
            emitter.emit(f"e{t} = {along.format(t)}")
        emitter.tangents(
            {node: emitter.seed(f"e{t}") for t, node in enumerate(inputs)}, assign(derivative[:m])
        )
    elif mode == "jacobian_fwd":  # one tangent pass per input: column t
        for t, node in enumerate(inputs):
            emitter.tangents({node: "1.0"}, assign(derivative[t::k]), prefix=f"t{t}_")
    elif mode == "jacobian_rev":  # one adjoint pass per output: row r
        for r, node in enumerate(outputs):
            emitter.reverse(
                [(node, "1.0")], assign(derivative[r * k : (r + 1) * k]), prefix=f"g{r}_"
            )
    elif mode == "hvp":
        for t in range(k):
            emitter.emit(f"e{t} = {along.format(t)}")
        moved = emitter.tangents(
            {node: emitter.seed(f"e{t}") for t, node in enumerate(inputs)}, None
        )
        adjoints = emitter.reverse([(outputs[0], "1.0")], None)
        emitter.reverse([], assign(derivative[:k]), "h", adjoints, moved)
    elif mode == "hessian":  # row t: H e_t
        adjoints = emitter.reverse([(outputs[0], "1.0")], None)
        for t, node in enumerate(inputs):
            moved = emitter.tangents({node: "1.0"}, None, prefix=f"t{t}_")
            emitter.reverse([], assign(derivative[t * k : (t + 1) * k]), f"h{t}_", adjoints, moved)


def derivative_width(program: Program, mode: str) -> int:
    """Derivative numbers per point in ``mode``: ``k``, ``m``, ``m * k``, ``k * k`` or 0."""
    k, m = program.inputs.size, program.outputs.size
    return {"values": 0, "grad": k, "vjp": k, "jvp": m, "hvp": k, "hessian": k * k}.get(mode, k * m)


def passes(program: Program, mode: str) -> int:
    """Sweeps over the program per point in ``mode``: the size of its code, in programs."""
    k, m = program.inputs.size, program.outputs.size
    fixed = {"values": 1, "grad": 2, "vjp": 2, "jvp": 2, "hvp": 4}
    return fixed.get(mode, {"jacobian_fwd": 1 + k, "hessian": 2 + 2 * k}.get(mode, 1 + m))


def helper_sources() -> Iterator[str]:
    """The rule helpers and ``contribution``, as ``@kernel`` sources."""
    for helper in optable.HELPERS:
        yield "@kernel\n" + inspect.getsource(helper).rstrip()
    for kernel in (strong_zeros.reached, strong_zeros.contribution):
        function = getattr(kernel, "py_func", kernel)  # a plain function under NUMBA_DISABLE_JIT
        yield inspect.getsource(function).rstrip()


def _batch_kernels(program: Program, mode: str) -> list[str]:
    """The text of ``batch`` (see ``module_source``)."""
    k, m = program.inputs.size, program.outputs.size
    width = derivative_width(program, mode)
    batch = _Emitter(program, " " * 8, plain=True)
    _statements(
        batch,
        mode,
        [f"points[p, {t}]" for t in range(k)],
        [f"values[p, {r}]" for r in range(m)],
        [f"derivatives[p, {d}]" for d in range(width)],
    )
    batch.guards(["if failed >= 0:", "    status[p] = failed"])
    batch.recheck()
    signature = "points, directions, values, derivatives, status, recheck, constants"
    return [  # threads run it on ranges of points (``native_calls.run_parallel``)
        f"@kernel\ndef batch({signature}, start, stop):\n"
        f'    """Points ``start:stop`` in mode {mode}: returns how many to recheck."""\n'
        "    flagged = 0\n"
        "    for p in range(start, stop):\n" + "\n".join(batch.lines) + "\n    return flagged",
    ]


KERNELS = ("batch", "point")
"""The kernels a module may hold: ``batch`` (points ``start:stop``) and the one-point
``point``; a caller asks for either or both."""


def module_source(
    program: Program,
    mode: str,
    kernels: tuple[str, ...] = KERNELS,
    lanes: int = 0,
    vector_math: tuple[str, ...] = (),
) -> str:
    """The text of the generated module that evaluates ``program`` in ``mode``.

    With ``"batch"`` in ``kernels`` it defines ``batch(points, directions,
    values, derivatives, status, recheck, constants, start, stop)`` over
    points ``start:stop``; with ``"point"``, for a scalar
    output in a ``POINT_MODES`` mode, ``point`` with
    ``POINT_PARAMETERS[mode]``, which returns the value, or
    ``(value, failed guard)`` when the program has guards. ``constants`` holds every node's
    traced value (the constants' among them). The text holds nothing but
    the program's structure: no names, no values, so it can be trusted
    whatever a loaded file held, and programs that differ only in their
    constants share one module.

    ``lanes`` > 0 asks for fast math: the header sets ``LANES`` and
    ``VECTOR_MATH`` (the math functions with vector versions), and the IR
    lowering runs ``batch`` on that many points at once with those functions
    (:mod:`fastad.kernels.vector_ir`); the text itself is unchanged.

    The batch kernels' derivatives are *plain*: each edge sends ``partial *
    incoming``, without the strong-zero tests of ``contribution``, and
    seeds are taken as they are. Plain and exact sweeps give the same bits
    wherever the plain derivatives have no nan (by induction from the seeds:
    every plain adjoint or tangent equals the exact one up to the sign of a
    zero, or is nan; a term the exact rule drops is a signed zero or nan in
    plain code; the ``+ 0.0`` on the way out makes every zero +0.0). So a
    point whose plain derivatives hold a nan (any nan: a sum of them is
    tested, which also flags ``inf - inf``) is flagged in ``recheck``, the
    kernels return how many they flagged, and the caller evaluates those
    points again with the exact rules (the interpreter). The one-point
    kernels use the exact rules throughout.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    k, m, g = program.inputs.size, program.outputs.size, program.guards.shape[0]
    width = derivative_width(program, mode)
    kernels_text = _batch_kernels(program, mode) if "batch" in kernels else []
    if m == 1 and mode in POINT_MODES and "point" in kernels:
        point = _Emitter(program, " " * 4)
        _statements(
            point,
            mode,
            [f"point[{t}]" for t in range(k)],
            [],
            [f"gradient[{t}]" for t in range(width)],
            "direction[{}]",
        )
        point.guards([])
        returned = f"v{int(program.outputs[0])}" + (", failed" if g else "")
        kernels_text.append(
            f"@kernel\ndef point({POINT_PARAMETERS[mode]}):\n"
            f'    """One point in mode {mode} (the latency path)."""\n'
            + "\n".join(point.lines)
            + f"\n    return {returned}"
        )
    header = [
        f'"""Generated by fastad: a program of {program.opcode.size} nodes, mode {mode}.',
        "",
        "fastad lowers this text to LLVM IR (fastad.kernels.scalar_ir); it is also",
        'valid Numba source."""',
        "",
        "from math import (  # noqa: F401",
        "    " + ", ".join(sorted(MATH_NAMES)) + ",",
        ")",
        "",
        "from fastad.kernels.jit import kernel",
        "",
        "UNREACHED = -0.0",
    ]
    text = "\n\n\n".join(["\n".join(header), *helper_sources(), *kernels_text]) + "\n"
    return on_vectors(text, lanes, vector_math) if lanes else text


def on_vectors(text: str, lanes: int, vector_math: tuple[str, ...]) -> str:
    """``text`` (:func:`module_source`'s, without ``lanes``) with the header lines that
    run its ``batch`` kernel on ``lanes`` points at once (``LANES``), calling libmvec for
    the functions of ``vector_math`` (``VECTOR_MATH``) and libm on each lane for the
    others (:mod:`fastad.kernels.vector_ir`)."""
    header, rest = text.split("\n\n\n", 1)
    listed = "".join(f'"{name}", ' for name in vector_math)
    return f"{header}\n\nLANES = {lanes}\nVECTOR_MATH = ({listed})\n\n\n{rest}"


def libm_calls(text: str) -> int:
    """How many calls of the C library's math functions the ``batch`` kernel of
    :func:`module_source`'s ``text`` makes per point: its call sites of those functions
    (not ``fabs``, ``copysign`` and ``sqrt``, single instructions) and of the rule
    helpers that call them."""
    return len(_LIBM_CALL.findall(text, text.index("\ndef batch(")))


def _calling_libm(source: str) -> bool:
    """Whether a helper's code (not its comments) calls one of ``_LIBM``."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _LIBM
        for node in ast.walk(ast.parse(source))
    )


_LIBM = [
    name
    for name in optable.MATH_NAMES
    if callable(getattr(math, name)) and name not in {"fabs", "copysign", "sqrt"}
]
_LIBM_HELPERS = [h.__name__ for h in optable.HELPERS if _calling_libm(inspect.getsource(h))]
_LIBM_CALL = re.compile(rf"\b({'|'.join(_LIBM + _LIBM_HELPERS)})\(")


MATH_NAMES = sorted({*optable.MATH_NAMES, "copysign", "isfinite"})
"""What a generated module imports from :mod:`math`: the rules' names, and ``copysign``
and ``isfinite``, which the kernels' own code calls (the generated rule modules of
``kernels/`` import the same; a test compares them)."""
