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
scalar tier's induction (``kernels/codegen.py``): a term the exact rules drop
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
in :data:`PAIRWISE`; sums over the first of two axes row by row, as NumPy
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
no sizes (the loops read them from the arrays).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from . import blas, codegen

MODES = ("values", "grad", "vjp", "jvp", "hvp")
"""``values``: the output (a scalar returned, an array written into its
buffer). ``grad``: a scalar output and the gradients of the ``wrt`` inputs.
``vjp``: the gradients from the caller's cotangent of the output. ``jvp``:
the output and its tangent along the caller's directions of the ``wrt``
inputs (forward mode, one pass)."""

OK = -1
"""Status: the call ran; a guard's index says that guard failed instead."""
BAD_LABEL = -2
"""Status: a cross-entropy label is not a class; the exact rules say which."""

SUPPORTED = (
    "input constant array scalar elementwise matmul sum mean linear linear_relu "
    "cross_entropy log_softmax softmax logsumexp mse_loss"
).split()
"""The node kinds generated code has rules for; a program with another op
(reshape, transpose, index, concatenate, max, min, prod, stacked products)
stays on the interpreter."""


class Node(NamedTuple):
    """One node as the generator reads it.

    ``op``: a kind of :data:`SUPPORTED` (``input``: an argument; ``constant``
    and ``array``: a scalar or array constant; ``scalar``: a scalar op of the
    op table on scalars; ``elementwise``: one on arrays; else the block op's
    name). ``code``: the opcode. ``shape``: ``()`` for a scalar. ``params``:
    ``(axes, keepdims)`` for reductions and the softmax family (axes None:
    all), ``(labels, mean)`` for the cross-entropy, else ``()``.
    """

    op: str
    code: int
    operands: tuple[int, ...]
    shape: tuple[int, ...]
    params: tuple[object, ...]


class BlockProgram(NamedTuple):
    """A traced function of arrays: its nodes in id order, the argument nodes,
    the output node, the argument positions to differentiate (``wrt``) and
    the guards as ``(node, traced truth)``."""

    nodes: tuple[Node, ...]
    inputs: tuple[int, ...]
    output: int
    wrt: tuple[int, ...]
    guards: tuple[tuple[int, bool], ...]


class Parameter(NamedTuple):
    """One parameter of a generated kernel, in order.

    ``role``: ``argument`` (the caller's argument ``position``), ``constants``
    (every node's traced value, float64), ``array`` (an array constant's
    value), ``value`` (a buffer for a node's value; the output's is the
    result), ``scratch`` (a buffer of ``shape``), ``adjoint`` (a buffer for a
    node's adjoint), ``gradient`` (the gradient of argument ``position``, an
    array of its shape), ``scalar_gradients`` (one float per ``wrt``
    position; the scalar arguments' gradients land there), ``cotangent``
    (mode ``vjp``: the caller's cotangent of the output, a float or an
    array of its shape, read as the output's adjoint); in mode ``jvp``
    ``direction`` (the caller's direction for argument ``position``),
    ``scalar_directions`` (one float per ``wrt`` position, read for the
    scalar arguments), ``tangent`` (a buffer for a node's tangent) or
    ``output_tangent`` (the result: the output's tangent, an array of its
    shape, ``(1,)`` for a scalar output).
    """

    name: str
    role: str
    node: int
    shape: tuple[int, ...]
    position: int


class Unsupported(NotImplementedError):
    """The program holds an op (or a form of one) that generated code has no rule for."""


def _axes(node: Node) -> tuple[int, ...] | None:
    """The reduced axes of a reduction or softmax node (None: all of them)."""
    axes = node.params[0]
    return None if axes is None else tuple(int(a) for a in axes)  # type: ignore[attr-defined]


def _indices(rank: int) -> list[str]:
    return [f"i{t}" for t in range(rank)]


MAX_STREAMS = 10
"""The most arrays one merged loop nest reads and writes: past about this many
streams per element the hardware prefetchers lose track and the caches thrash
(a merged chain of 40 elementwise ops ran 2.3x slower than the op-by-op
interpreter), and LLVM's compile time grows with the body."""

_ACCESS = re.compile(r"\b([A-Za-z_]\w*)\[([^\[\]]*)\]")
_NAME = re.compile(r"\b([A-Za-z_]\w*)\b")


class _Loop:
    """A loop nest over the elements of one shape, kept open so the next one can join it.

    Two consecutive loop nests over arrays of one traced shape run as one when
    that changes no value: each array the first writes, the second reads or
    writes only at the loop's own element (so it reads what the first wrote
    there), never one the first sums into (a partial sum); the second writes
    nothing the first reads or writes; the second's ``before`` statements touch
    nothing the first does. Per element, the statements then run in the same
    order as before, and every sum adds its terms in the same order.
    """

    def __init__(self, array: str, shape: tuple[int, ...], before: list[str], body: list[str]):
        self.array, self.shape, self.before, self.body = array, shape, before, body
        self.full = ", ".join(_indices(len(shape)))
        self.reads: dict[str, set[str]] = {}
        self.writes: dict[str, set[str]] = {}
        self.sums: set[str] = set()  # written with +=: partial until the loop ends
        self._scan(body)

    def _scan(self, body: list[str]) -> None:
        for line in body:
            target, _, rest = line.partition("=")
            adding = target.endswith("+")
            for name, index in _ACCESS.findall(target):
                self.writes.setdefault(name, set()).add(index.strip())
                if adding or index.strip() != self.full:
                    self.sums.add(name)
            for name, index in _ACCESS.findall(rest if _ACCESS.search(target) else line):
                self.reads.setdefault(name, set()).add(index.strip())

    def _touches(self) -> set[str]:
        return set(self.reads) | set(self.writes)

    def absorb(self, other: _Loop) -> bool:
        """Join ``other`` to this loop nest if that changes no value; whether it did."""
        if other.shape != self.shape:
            return False
        mine = self._touches()
        if len(mine | other._touches()) > MAX_STREAMS:
            return False
        for name in self.writes:
            if name in self.sums and name in other._touches():
                return False
            if any(index != self.full for index in other.reads.get(name, ())):
                return False
            if any(index != self.full for index in other.writes.get(name, ())):
                return False
        if any(name in mine for name in other.writes):
            return False
        before_names = {name for line in other.before for name in _NAME.findall(line)}
        if before_names & mine:
            return False
        self.before += other.before
        self.body += other.body
        self._scan(other.body)
        return True


class _Pass:
    """One backward pass's state: its names (adjoints of scalars ``<scalar><id>``, of
    arrays ``<array><id>``; scratch buffers and loop locals tagged ``tag``), the nodes
    it sends to, those written so far, and whether the inputs' adjoints are results."""

    def __init__(self, scalar: str, array: str, tag: str, needs: list[bool], results: bool):
        self.scalar, self.array, self.tag = scalar, array, tag
        self.needs = needs
        self.results = results
        self.written = [False] * len(needs)  # adjoints written so far (backward order)
        # Gradients made by one BLAS product alone, straight into them: (factor, factor).
        self.products: dict[int, tuple[str, str]] = {}


class _Writer:
    """Writes one kernel: its parameters and its lines."""

    def __init__(self, program: BlockProgram, mode: str) -> None:
        self.program = program
        self.mode = mode
        self.nodes = program.nodes
        self.lines: list[str] = []
        self.parameters: list[Parameter] = []
        self._names: set[str] = set()
        self.rules = codegen.rule_templates()
        n = len(self.nodes)
        # Live: what the output and the guards read.
        live = [False] * n
        live[program.output] = True
        for node, _ in program.guards:
            live[node] = True
        for i in reversed(range(n)):
            if live[i]:
                for j in self.nodes[i].operands:
                    live[j] = True
        self.live = live
        # Adjoints: nodes the output depends on that depend on a wrt input.
        depends = [False] * n
        for position in program.wrt:
            depends[program.inputs[position]] = True
        for i in range(n):
            depends[i] = depends[i] or any(depends[j] for j in self.nodes[i].operands)
        needs = [live[i] and depends[i] for i in range(n)]
        # The backward pass: the gradients (mode hvp: the adjoints its second pass reads,
        # so not the inputs'), and mode hvp's second pass, their tangents, whose inputs'
        # are the products H v.
        if mode == "hvp":
            inner = [needs[i] and self.nodes[i].op != "input" for i in range(n)]
            self.p = self.first = _Pass("g", "d", "", inner, results=False)
            self.second = _Pass("k", "k", "h", needs, results=True)
        else:
            self.p = self.first = self.second = _Pass("g", "d", "", needs, results=True)
        # Tangents (mode jvp): nodes the output itself reads that depend on a wrt input
        # (a guard reads values only).
        feeds = [False] * n
        feeds[program.output] = True
        for i in reversed(range(n)):
            if feeds[i]:
                for j in self.nodes[i].operands:
                    feeds[j] = True
        self.moves = [feeds[i] and depends[i] for i in range(n)]
        self.pending: _Loop | None = None  # the last loop nest, still open to merging
        self.spans: list[tuple[int, int, _Loop]] = []  # lines of each loop nest written

    @property
    def needs(self) -> list[bool]:
        """The nodes the current backward pass sends to."""
        return self.p.needs

    @property
    def written(self) -> list[bool]:
        """The current pass's adjoints written so far."""
        return self.p.written

    @property
    def products(self) -> dict[int, tuple[str, str]]:
        """The current pass's results made by one BLAS product alone: (factor, factor)."""
        return self.p.products

    def own(self, i: int) -> str:
        """Node ``i``'s adjoint in the current pass (a local for a scalar, else a buffer)."""
        return f"{self.p.scalar if not self.shape(i) else self.p.array}{i}"

    # -- parameters and lines -----------------------------------------------------------
    def parameter(
        self, name: str, role: str, node: int, shape: tuple[int, ...], position: int = -1
    ) -> str:
        if name not in self._names:
            self._names.add(name)
            self.parameters.append(Parameter(name, role, node, shape, position))
        return name

    def scratch(self, tag: str, shape: tuple[int, ...]) -> str:
        return self.parameter(f"s_{self.p.tag}{tag}", "scratch", -1, shape)

    def emit(self, line: str, depth: int = 1) -> None:
        self.flush()
        self.lines.append("    " * depth + line)

    def loops(self, array: str, rank: int, depth: int = 1) -> int:
        """Nested loops over ``array``'s elements (indices ``i0``, ``i1``...); the body's depth."""
        for t, index in enumerate(_indices(rank)):
            self.emit(f"for {index} in range({array}.shape[{t}]):", depth + t)
        return depth + rank

    def loop(
        self, array: str, shape: tuple[int, ...], body: list[str], before: Sequence[str] = ()
    ) -> None:
        """A loop nest over the elements of ``array`` (of the traced ``shape``) running
        ``body`` per element, after the statements ``before``; merged into the loop
        before it where that changes no value (:class:`_Loop`)."""
        loop = _Loop(array, shape, list(before), list(body))
        if self.pending is not None and self.pending.absorb(loop):
            return
        self.flush()
        self.pending = loop

    def flush(self) -> None:
        """Write out the loop waiting to be merged."""
        loop, self.pending = self.pending, None
        if loop is None:
            return
        start = len(self.lines) + len(loop.before)
        self.spans.append((start, start + len(loop.shape) + len(loop.body), loop))
        for line in loop.before:
            self.lines.append("    " + line)
        rank = len(loop.shape)
        for t, index in enumerate(_indices(rank)):
            self.lines.append("    " * (1 + t) + f"for {index} in range({loop.array}.shape[{t}]):")
        for line in loop.body:
            self.lines.append("    " * (1 + rank) + line)

    def shape(self, i: int) -> tuple[int, ...]:
        return self.nodes[i].shape

    def value(self, i: int) -> str:
        return f"v{i}"

    def read(self, j: int, shape: tuple[int, ...], prefix: str = "v") -> str:
        """Node ``j``'s element (its value; its tangent for ``prefix`` ``t``) at the loop
        indices over ``shape``, broadcasting as NumPy."""
        own = self.shape(j)
        if not own:
            return f"{prefix}{j}"
        return f"{prefix}{j}[{', '.join(self.broadcast_index(own, shape))}]"

    @staticmethod
    def broadcast_index(own: tuple[int, ...], shape: tuple[int, ...]) -> list[str]:
        names = _indices(len(shape))
        offset = len(shape) - len(own)
        return [
            "0" if own[t] == 1 and shape[offset + t] != 1 else names[offset + t]
            for t in range(len(own))
        ]

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
        return (
            f"@kernel\ndef {self.mode}({signature}):\n"
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

    def failure(self, status: int) -> str:
        return f"nan, {status}, False"

    # -- forward ---------------------------------------------------------------------------
    def forward(self, i: int, node: Node) -> None:
        op, shape = node.op, node.shape
        if op == "input":
            position = self.program.inputs.index(i)
            self.parameter(f"v{i}", "argument", i, shape, position)
            return
        if op == "constant":
            self.parameter("constants", "constants", -1, ())
            self.emit(f"v{i} = constants[{i}]")
            return
        if op == "array":
            self.parameter(f"v{i}", "array", i, shape)
            return
        if op == "scalar":
            self.emit(f"v{i} = {self.expression(node, 'value', self.scalar_names(i, node))}")
            return
        if shape:
            self.parameter(f"v{i}", "value", i, shape)
        getattr(self, f"forward_{op}")(i, node)

    def scalar_names(self, i: int, node: Node) -> dict[str, str]:
        a = node.operands[0]
        b = node.operands[1] if len(node.operands) > 1 else a
        return {"a": f"v{a}", "b": f"v{b}", "out": f"v{i}"}

    def element_names(self, i: int, node: Node) -> dict[str, str]:
        a = node.operands[0]
        b = node.operands[1] if len(node.operands) > 1 else a
        index = ", ".join(_indices(len(node.shape)))
        return {
            "a": self.read(a, node.shape),
            "b": self.read(b, node.shape),
            "out": f"v{i}[{index}]",
        }

    def expression(self, node: Node, part: str, names: dict[str, str], slot: int = 0) -> str:
        rule = self.rules[node.code]
        template = rule.value if part == "value" else rule.partials[slot]
        return template.format(**names)

    def forward_elementwise(self, i: int, node: Node) -> None:
        names = self.element_names(i, node)
        self.loop(
            f"v{i}", node.shape, [f"{names['out']} = {self.expression(node, 'value', names)}"]
        )

    def forward_matmul(self, i: int, node: Node) -> None:
        a, b = node.operands
        self.emit(self.product_call(node, f"v{a}", f"v{b}", f"v{i}"))

    def product_call(self, node: Node, x: str, y: str, target: str) -> str:
        """The statement ``target = x @ y`` for matmul ``node``'s operand ranks, by the BLAS
        routine ``np.matmul`` picks (``x``, ``y``: its operands or their tangents)."""
        a, b = node.operands
        ranks = (len(self.shape(a)), len(self.shape(b)))
        if ranks == (2, 2):
            return f"gemm(False, False, {x}, {y}, {target})"
        if ranks == (2, 1):
            return f"gemv(False, {x}, {y}, {target})"
        if ranks == (1, 2):
            return f"gemv(True, {y}, {x}, {target})"
        if ranks == (1, 1):
            return f"{target} = dot({x}, {y})"
        raise Unsupported(
            f"generated code has no rule for a product of operands of {ranks[0]} and "
            f"{ranks[1]} axes (matrices and vectors only)"
        )

    def forward_linear(self, i: int, node: Node, relu: bool = False) -> None:
        X, W, b = node.operands
        self.emit(f"gemm(False, False, v{X}, v{W}, v{i})")
        # relu as the fused kernel's: nan propagates (nan <= 0 is False)
        finish = f"v{i}[i0, i1] = (0.0 if z <= 0.0 else z)" if relu else f"v{i}[i0, i1] = z"
        self.loop(f"v{i}", node.shape, [f"z = v{i}[i0, i1] + v{b}[i1]", finish])

    def forward_linear_relu(self, i: int, node: Node) -> None:
        self.forward_linear(i, node, relu=True)

    def reduction(self, i: int, node: Node) -> str:
        """Which sum a reduction is: over ``all`` axes, the ``columns`` or the ``rows``."""
        axes = _axes(node)
        (a,) = node.operands
        own = self.shape(a)
        if axes is None or axes == tuple(range(len(own))):
            return "all"
        if len(own) == 2 and axes == (0,) and own[1] == 1:
            return "all"  # one column: NumPy sums it as one run, pairwise
        if len(own) == 2 and axes == (0,):
            return "columns"
        if len(own) == 2 and axes == (1,):
            return "rows"
        raise Unsupported(
            f"generated code reduces all axes, or one of two; not axes {axes} of a shape {own}"
        )

    def forward_sum(self, i: int, node: Node, mean: bool = False, prefix: str = "v") -> None:
        """The sum (``mean``: the mean) of the operand's values, or (``prefix`` ``t``) of
        its tangents: a sum's tangent is the sum of the tangents."""
        (a,) = node.operands
        kind = self.reduction(i, node)
        own = self.shape(a)
        x, out = f"{prefix}{a}", f"{prefix}{i}"
        count = f"{x}.size" if kind == "all" else f"{x}.shape[{0 if kind == 'columns' else 1}]"
        scale = f" / {count}" if mean else ""
        if kind == "all":
            total = f"(0.0 + pairwise({x}.reshape({x}.size), 0, {x}.size))"
            if node.shape:  # keepdims: an array of ones
                self.emit(f"{out}.reshape({out}.size)[0] = {total}{scale}")
            else:
                self.emit(f"{out} = {total}{scale}")
            return
        element = f"{out}[{self.reduced_index(kind, node)}]"
        if kind == "columns":  # NumPy adds the rows in order: in the loop making them
            # The result written by name, never through a view: the loop merging
            # must see that it is a partial sum until this loop ends.
            self.loop(x, own, [f"{element} += {x}[i0, i1]"], [f"{out}[:] = 0.0"])
            if mean:
                self.emit(f"for i1 in range({x}.shape[1]):")
                self.emit(f"{element} = {element}{scale}", 2)
        else:  # each row pairwise
            self.emit(f"for i0 in range({x}.shape[0]):")
            self.emit(f"{element} = (0.0 + pairwise({x}[i0], 0, {x}.shape[1])){scale}", 2)

    @staticmethod
    def reduced_index(kind: str, node: Node) -> str:
        """The element of a sum over the ``columns`` or ``rows`` of a matrix at the loop's
        indices (``node.shape``: one axis, or two with keepdims)."""
        if kind == "columns":
            return "i1" if len(node.shape) == 1 else "0, i1"
        return "i0" if len(node.shape) == 1 else "i0, 0"

    def forward_mean(self, i: int, node: Node) -> None:
        self.forward_sum(i, node, mean=True)

    def forward_mse_loss(self, i: int, node: Node) -> None:
        Y, T = node.operands
        self.emit(f"y{i} = v{Y}.reshape(v{Y}.size)")
        self.emit(f"q{i} = v{T}.reshape(v{T}.size)")
        self.emit("total = 0.0")
        self.emit(f"for i0 in range(y{i}.size):")
        self.emit(f"d = y{i}[i0] - q{i}[i0]", 2)
        self.emit("total += d * d", 2)
        self.emit(f"v{i} = total / y{i}.size")

    def rows(self, i: int, node: Node) -> int:
        """The operand of a row op (the softmax family, the cross-entropy): a matrix."""
        a = node.operands[0]
        own = self.shape(a)
        if len(own) != 2:
            raise Unsupported(
                f"generated code runs {node.op} over the rows of a matrix, not over an array "
                f"of shape {own}"
            )
        if node.op != "cross_entropy" and _axes(node) != (1,):
            raise Unsupported(
                f"generated code runs {node.op} along the last of two axes, not axes "
                f"{node.params[0]}"
            )
        return a

    def log_softmax_rows(self, i: int, operand: int) -> None:
        """Per row: ``m`` (the maximum), ``E = exp(x - m)``, ``total``, ``lt = log(total)``.

        As the interpreter's ``log_softmax_rows``: a row whose maximum is not
        finite has a nan ``total`` (``exp(inf - inf)``), so its log-softmax
        ``(x - m) - lt`` and its softmax ``E / total`` are nan throughout, and
        its logsumexp is ``m``. Leaves ``m``, ``total`` and ``lt`` in scratch
        rows for the backward pass.
        """
        a, shape = f"v{operand}", self.shape(operand)
        E = self.scratch(f"{i}_exp", shape)
        M = self.scratch(f"{i}_max", shape[:1])
        S = self.scratch(f"{i}_total", shape[:1])
        L = self.scratch(f"{i}_log", shape[:1])
        self.emit(f"for i0 in range({a}.shape[0]):")
        self.emit("m = -inf", 2)
        self.emit(f"for i1 in range({a}.shape[1]):", 2)
        self.emit(f"x = {a}[i0, i1]", 3)
        self.emit("if x != x:", 3)
        self.emit("m = x", 4)
        self.emit("break", 4)
        self.emit("if x > m:", 3)
        self.emit("m = x", 4)
        self.emit("total = 0.0", 2)
        self.emit(f"for i1 in range({a}.shape[1]):", 2)
        self.emit(f"e = exp({a}[i0, i1] - m)", 3)
        self.emit(f"{E}[i0, i1] = e", 3)
        self.emit("total += e", 3)
        self.emit(f"{M}[i0] = m", 2)
        self.emit(f"{S}[i0] = total", 2)
        self.emit(f"{L}[i0] = log(total)", 2)

    def forward_log_softmax(self, i: int, node: Node) -> None:
        operand = self.rows(i, node)
        self.log_softmax_rows(i, operand)
        a = f"v{operand}"
        depth = self.loops(a, 2)
        if node.op == "log_softmax":
            self.emit(f"v{i}[i0, i1] = ({a}[i0, i1] - s_{i}_max[i0]) - s_{i}_log[i0]", depth)
        elif node.op == "softmax":
            self.emit(f"v{i}[i0, i1] = s_{i}_exp[i0, i1] / s_{i}_total[i0]", depth)

    def forward_softmax(self, i: int, node: Node) -> None:
        self.forward_log_softmax(i, node)

    def forward_logsumexp(self, i: int, node: Node) -> None:
        operand = self.rows(i, node)
        self.log_softmax_rows(i, operand)
        a = f"v{operand}"
        self.emit(f"o{i} = v{i}.reshape(v{i}.size)")
        self.emit(f"for i0 in range({a}.shape[0]):")
        self.emit(f"m = s_{i}_max[i0]", 2)
        self.emit(f"o{i}[i0] = m + s_{i}_log[i0] if isfinite(m) else m", 2)

    def forward_cross_entropy(self, i: int, node: Node) -> None:
        X, T = node.operands
        labels, mean = node.params
        operand = self.rows(i, node)
        self.log_softmax_rows(i, operand)
        a = f"v{operand}"
        picked = self.scratch(f"{i}_picked", self.shape(X)[:1])
        weight = f"(1.0 / {a}.shape[0])" if mean else "1.0"
        self.emit(f"for i0 in range({a}.shape[0]):")
        if labels:
            self.emit(f"label = v{T}[i0]", 2)
            self.emit(
                f"if not (label >= 0 and label < {a}.shape[1] and label == np.floor(label)):", 2
            )
            self.emit(f"return {self.failure(BAD_LABEL)}", 3)
            self.emit("c = int(label)", 2)
            self.emit(f"{picked}[i0] = ({a}[i0, c] - s_{i}_max[i0]) - s_{i}_log[i0]", 2)
            total = f"(0.0 - (0.0 + pairwise({picked}, 0, {picked}.size)))"
        else:
            self.emit("row = 0.0", 2)
            self.emit(f"for i1 in range({a}.shape[1]):", 2)
            self.emit(f"t = v{T}[i0, i1]", 3)
            self.emit("if t != 0.0:", 3)
            self.emit(f"row -= t * (({a}[i0, i1] - s_{i}_max[i0]) - s_{i}_log[i0])", 4)
            self.emit(f"{picked}[i0] = row", 2)
            total = f"(0.0 + pairwise({picked}, 0, {picked}.size))"
        self.emit(f"v{i} = {total} * {weight}")

    # -- backward --------------------------------------------------------------------------
    def adjoint(self, j: int) -> str:
        """The name of node ``j``'s adjoint (registering its buffer): ``g<j>`` or ``d<j>``."""
        p = self.p
        if not self.shape(j):
            return f"{p.scalar}{j}"
        node = self.nodes[j]
        if node.op == "input" and p.results:
            position = self.program.inputs.index(j)
            return self.parameter(f"{p.array}{j}", "gradient", j, node.shape, position)
        return self.parameter(f"{p.array}{j}", "adjoint", j, node.shape)

    def sink(self, j: int, tag: str) -> tuple[str, bool]:
        """Where a contribution to array ``j`` goes: ``(buffer, add it to j's adjoint after)``.

        The first contribution (in backward order) goes straight into the
        adjoint; a later one into a scratch buffer that is then added, as
        the interpreter adds a rule's fresh contribution to what arrived.
        """
        target = self.adjoint(j)
        self.products.pop(j, None)  # a second contribution: the sum is scanned
        if not self.written[j]:
            self.written[j] = True
            return target, False
        return self.scratch(tag, self.shape(j)), True

    def product(self, call: str, target: str, j: int, factors: tuple[str, str]) -> None:
        """Emit a BLAS ``call`` whose result goes straight into ``j``'s adjoint ``target``."""
        self.emit(call)
        if target == self.adjoint(j):
            self.products[j] = factors

    def add_into(self, j: int, source: str) -> None:
        target = self.adjoint(j)
        self.emit(f"a{j} = {target}.reshape({target}.size)")
        self.emit(f"b{j} = {source}.reshape({source}.size)")
        self.emit(f"for i0 in range(a{j}.size):")
        self.emit(f"a{j}[i0] += b{j}[i0]", 2)

    def add_scalar(self, j: int, value: str) -> None:
        if self.written[j]:
            self.emit(f"{self.p.scalar}{j} += {value}")
        else:
            self.written[j] = True
            self.emit(f"{self.p.scalar}{j} = {value}")

    def backward(self, i: int, node: Node) -> None:
        if not self.written[i]:  # nothing the output reads came through this node
            return
        if node.op == "scalar":
            names = self.scalar_names(i, node)
            for slot, j in enumerate(node.operands):
                if self.needs[j]:
                    partial = self.expression(node, "partial", names, slot)
                    self.add_scalar(j, f"({partial}) * {self.own(i)}")
            return
        getattr(self, f"backward_{node.op}")(i, node)

    def backward_elementwise(self, i: int, node: Node) -> None:
        shape = node.shape
        names = self.element_names(i, node)
        index = ", ".join(_indices(len(shape)))
        before: list[str] = []
        inside: list[str] = []
        after: list[tuple[str, int]] = []
        for slot, j in enumerate(node.operands):
            if not self.needs[j]:
                continue
            term = self.elementwise_term(i, node, names, slot)
            if not term:
                continue
            own = self.shape(j)
            if own == shape:
                target, added = self.sink(j, f"{i}_{slot}")
                inside.append(f"{target}[{index}] = {term}")
                if added:
                    after.append((target, j))
                continue
            one_column = len(shape) == 2 and shape[1] == 1 and own in ((1,), (1, 1))
            if not own or one_column or (len(shape) == 2 and own == (shape[0], 1)):
                # Sums of whole rows, or of the one column (NumPy's pairwise runs).
                full = self.scratch(f"{i}_{slot}_terms", shape)
                inside.append(f"{full}[{index}] = {term}")
                after.append((full, -1 - j))
                continue
            if len(shape) == 2 and own in ((shape[1],), (1, shape[1])):  # column sums
                target, added = self.sink(j, f"{i}_{slot}")
                element = f"{target}[i1]" if len(own) == 1 else f"{target}[0, i1]"
                before.append(f"{target}[:] = 0.0")
                inside.append(f"{element} += {term}")
                if added:
                    after.append((target, j))
                continue
            raise Unsupported(f"generated code has no rule for broadcasting shape {own} to {shape}")
        self.loop(f"v{i}", shape, inside, before)
        for source, j in after:
            if j >= 0:
                self.add_into(j, source)
                continue
            j = -1 - j
            whole = f"(0.0 + pairwise({source}.reshape({source}.size), 0, {source}.size))"
            if not self.shape(j):
                self.add_scalar(j, whole)
                continue
            if self.shape(j) in ((1,), (1, 1)):  # the sum of a one-column array
                target, added = self.sink(j, f"{i}_column")
                self.emit(f"{target}.reshape({target}.size)[0] = {whole}")
                if added:
                    self.add_into(j, target)
                continue
            target, added = self.sink(j, f"{i}_rows")
            self.emit(f"for i0 in range({source}.shape[0]):")
            self.emit(f"{target}[i0, 0] = 0.0 + pairwise({source}[i0], 0, {source}.shape[1])", 2)
            if added:
                self.add_into(j, target)

    def backward_matmul(self, i: int, node: Node) -> None:
        a, b = node.operands
        for slot, (j, other) in enumerate(((a, f"v{b}"), (b, f"v{a}"))):
            if self.needs[j]:
                G = self.own(i)
                self.contribute(j, f"{i}_{'ab'[slot]}", [self.matmul_adjoint(node, slot, G, other)])

    def matmul_adjoint(self, node: Node, slot: int, G: str, other: str) -> Callable[[str], None]:
        """What writes the contribution of matmul ``node``'s adjoint ``G`` (a buffer, or
        a local for a scalar product) to operand ``slot`` into a target: ``G B^T`` or
        ``A^T G`` by rank, ``other`` the other operand's values (or tangents)."""
        a, b = node.operands
        j = node.operands[slot]
        ranks = (len(self.shape(a)), len(self.shape(b)))

        def first(target: str) -> None:
            if ranks == (2, 2):
                self.product(f"gemm(False, True, {G}, {other}, {target})", target, j, (G, other))
            elif ranks == (1, 1):  # one term per element
                self.emit(f"for i0 in range({target}.size):")
                self.emit(f"{target}[i0] = {G} * {other}[i0]", 2)
            elif ranks == (2, 1):  # dA = outer(G, x): one term per element
                self.emit(f"for i0 in range({target}.shape[0]):")
                self.emit(f"for i1 in range({target}.shape[1]):", 2)
                self.emit(f"{target}[i0, i1] = {G}[i0] * {other}[i1]", 3)
            else:  # x @ B: dx = B @ G
                self.product(f"gemv(False, {other}, {G}, {target})", target, j, (other, G))

        def second(target: str) -> None:
            if ranks == (2, 2):
                self.product(f"gemm(True, False, {other}, {G}, {target})", target, j, (other, G))
            elif ranks == (1, 1):
                self.emit(f"for i0 in range({target}.size):")
                self.emit(f"{target}[i0] = {other}[i0] * {G}", 2)
            elif ranks == (2, 1):  # A @ x: dx = A^T G
                self.product(f"gemv(True, {other}, {G}, {target})", target, j, (other, G))
            else:  # dB = outer(x, G)
                self.emit(f"for i0 in range({target}.shape[0]):")
                self.emit(f"for i1 in range({target}.shape[1]):", 2)
                self.emit(f"{target}[i0, i1] = {other}[i0] * {G}[i1]", 3)

        return first if slot == 0 else second

    def contribute(self, j: int, tag: str, parts: Sequence[Callable[[str], None]]) -> None:
        """Send array ``j`` one contribution, the sum of ``parts`` in order (each writes a
        whole term into the buffer it is given), as the interpreter adds a rule's terms
        before delivering them."""
        target, added = self.sink(j, tag)
        parts[0](target)
        for n, part in enumerate(parts[1:]):
            extra = self.scratch(f"{tag}_{n}", self.shape(j))
            part(extra)
            self.emit(f"xa = {target}.reshape({target}.size)")
            self.emit(f"xb = {extra}.reshape({extra}.size)")
            self.emit("for i0 in range(xa.size):")
            self.emit("xa[i0] += xb[i0]", 2)
            self.products.pop(j, None)  # a sum: no longer one product's
        if added:
            self.add_into(j, target)

    def backward_linear(
        self,
        i: int,
        node: Node,
        relu: bool = False,
        moved: tuple[list[Callable[[str], None]], list[Callable[[str], None]]] = ([], []),
    ) -> None:
        """``dX = dZ W^T``, ``dW = X^T dZ``, ``db`` the rows of ``dZ`` summed, with ``dZ`` the
        adjoint through the ReLU's mask; ``moved``: terms added to ``dX`` and ``dW``
        before they are sent (mode hvp's second pass)."""
        X, W, b = node.operands
        G = self.own(i)
        dZ = self.scratch(f"{i}_dz", node.shape) if relu else G
        bias = self.sink(b, f"{i}_db") if self.needs[b] else None
        if relu or bias is not None:  # one pass: the ReLU mask and the bias sum
            body = []
            if relu:  # dZ = G relu'(Z), relu'(z) from the saved output as the fused kernel's
                body.append(f"h = v{i}[i0, i1]")
                body.append(
                    f"{dZ}[i0, i1] = (1.0 if h > 0.0 else (h if h != h else 0.0)) * {G}[i0, i1]"
                )
            if bias is not None:  # the rows in order, as the fused kernel adds them
                body.append(f"{bias[0]}[i1] += {dZ}[i0, i1]")
            self.loop(G, node.shape, body, [f"{bias[0]}[:] = 0.0"] if bias is not None else [])
        if bias is not None and bias[1]:
            self.add_into(b, bias[0])

        def dx(target: str) -> None:
            self.product(f"gemm(False, True, {dZ}, v{W}, {target})", target, X, (dZ, f"v{W}"))

        def dw(target: str) -> None:
            self.product(f"gemm(True, False, v{X}, {dZ}, {target})", target, W, (f"v{X}", dZ))

        if self.needs[X]:
            self.contribute(X, f"{i}_dx", [dx, *moved[0]])
        if self.needs[W]:
            self.contribute(W, f"{i}_dw", [dw, *moved[1]])

    def backward_linear_relu(self, i: int, node: Node) -> None:
        self.backward_linear(i, node, relu=True)

    def spread(self, i: int, node: Node, scale: str) -> None:
        """Sum and mean: the adjoint ``g * scale`` repeated over the reduced axes."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        kind = self.reduction(i, node)
        own = self.shape(a)
        target, added = self.sink(a, f"{i}_spread")
        index = ", ".join(_indices(len(own)))
        if kind == "all":
            g = f"{self.own(i)}.reshape({self.own(i)}.size)[0]" if node.shape else f"{self.own(i)}"
            self.loop(
                f"v{a}",
                own,
                [f"{target}[{index}] = spread{self.p.tag}{i}"],
                [f"spread{self.p.tag}{i} = {g}{scale}"],
            )
        else:  # the reduced adjoint read by name (it may be a sum the loop before makes)
            reduced = f"{self.own(i)}[{self.reduced_index(kind, node)}]"
            self.loop(f"v{a}", own, [f"{target}[i0, i1] = {reduced}{scale}"])
        if added:
            self.add_into(a, target)

    def backward_sum(self, i: int, node: Node) -> None:
        self.spread(i, node, "")

    def backward_mean(self, i: int, node: Node) -> None:
        (a,) = node.operands
        kind = self.reduction(i, node)
        count = f"v{a}.size" if kind == "all" else f"v{a}.shape[{0 if kind == 'columns' else 1}]"
        self.spread(i, node, f" * (1.0 / {count})")

    def backward_mse_loss(self, i: int, node: Node) -> None:
        Y, T = node.operands
        self.emit(f"scale = 2.0 * {self.own(i)} / y{i}.size")
        sinks = []  # named by slot: Y and T may be one node (mse_loss(X, X))
        for slot, (j, sign) in enumerate(((Y, ""), (T, "-"))):
            if self.needs[j]:
                target, added = self.sink(j, f"{i}_{slot}")
                self.emit(f"m{slot}_{i} = {target}.reshape({target}.size)")
                sinks.append((slot, j, target, added, sign))
        self.emit(f"for i0 in range(y{i}.size):")
        self.emit(f"d = y{i}[i0] - q{i}[i0]", 2)
        for slot, _, _, _, sign in sinks:
            self.emit(f"m{slot}_{i}[i0] = {sign}(scale * d)", 2)
        for _, j, target, added, _ in sinks:
            if added:
                self.add_into(j, target)

    def softmax_of(self, i: int) -> str:
        return f"(s_{i}_exp[i0, i1] / s_{i}_total[i0])"

    def backward_log_softmax(self, i: int, node: Node) -> None:
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_dx")
        G, P = self.own(i), self.softmax_of(i)
        self.emit(f"for i0 in range({G}.shape[0]):")
        self.emit("s = 0.0", 2)
        self.emit(f"for i1 in range({G}.shape[1]):", 2)
        if node.op == "log_softmax":  # dX = G - P sum(G)
            self.emit(f"s += {G}[i0, i1]", 3)
            self.emit(f"for i1 in range({G}.shape[1]):", 2)
            self.emit(f"{target}[i0, i1] = {G}[i0, i1] - {P} * s", 3)
        else:  # softmax: dX = P (G - sum(G P))
            self.emit(f"s += {G}[i0, i1] * {P}", 3)
            self.emit(f"for i1 in range({G}.shape[1]):", 2)
            self.emit(f"{target}[i0, i1] = {P} * ({G}[i0, i1] - s)", 3)
        if added:
            self.add_into(a, target)

    def backward_softmax(self, i: int, node: Node) -> None:
        self.backward_log_softmax(i, node)

    def backward_logsumexp(self, i: int, node: Node) -> None:
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_dx")
        if node.shape:
            self.emit(f"r{i} = {self.own(i)}.reshape({self.own(i)}.size)")
        g = f"r{i}[i0]" if node.shape else f"{self.own(i)}"
        depth = self.loops(target, 2)
        self.emit(f"{target}[i0, i1] = {g} * {self.softmax_of(i)}", depth)
        if added:
            self.add_into(a, target)

    def backward_cross_entropy(self, i: int, node: Node) -> None:
        X, T = node.operands
        labels, mean = node.params
        a = f"v{X}"
        weight = f" * (1.0 / {a}.shape[0])" if mean else ""
        self.emit(f"w = {self.own(i)}{weight}")
        P = self.softmax_of(i)
        if self.needs[X]:
            target, added = self.sink(X, f"{i}_dx")
            self.emit(f"for i0 in range({a}.shape[0]):")
            if labels:  # dX = w (P - onehot)
                self.emit(f"c = int(v{T}[i0])", 2)
                self.emit(f"for i1 in range({a}.shape[1]):", 2)
                self.emit(f"p = {P}", 3)
                self.emit(f"{target}[i0, i1] = w * (p - 1.0) if i1 == c else w * p", 3)
            else:  # dX = w (P sum(T) - T)
                self.emit("total = 0.0", 2)
                self.emit(f"for i1 in range({a}.shape[1]):", 2)
                self.emit(f"total += v{T}[i0, i1]", 3)
                self.emit(f"for i1 in range({a}.shape[1]):", 2)
                self.emit(f"{target}[i0, i1] = w * ({P} * total - v{T}[i0, i1])", 3)
            if added:
                self.add_into(X, target)
        if not labels and self.needs[T]:  # dT = -w log_softmax(X)
            target, added = self.sink(T, f"{i}_dt")
            depth = self.loops(a, 2)
            self.emit(
                f"{target}[i0, i1] = -(({a}[i0, i1] - s_{i}_max[i0]) - s_{i}_log[i0]) * w", depth
            )
            if added:
                self.add_into(T, target)

    # -- second order (mode hvp) ---------------------------------------------------------
    # Forward-over-reverse, node by node: the gradient's step (the first pass, adjoints
    # g<i> and d<i>), then that step's tangent (the second pass, k<i>): each operand gets
    # partial * k<i> plus the partial's tangent times the adjoint, the interpreter's
    # second_vjp, summed in its order; the inputs' k are the products H v.
    def second_order(self, i: int, node: Node) -> None:
        self.p = self.first
        if self.needs[i]:
            self.backward(i, node)
        self.p = self.second
        op = node.op
        if op not in ("scalar", "elementwise", "matmul", "linear", "linear_relu", "sum", "mean"):
            raise Unsupported(f"the block op {op!r} has no second-order rule")
        if not (self.first.written[i] or self.second.written[i]):
            return
        if op == "scalar":
            self.second_scalar(i, node)
        elif op == "elementwise":
            self.backward_elementwise(i, node)  # its terms by elementwise_term
        elif op == "matmul":
            self.second_matmul(i, node)
        elif op in ("linear", "linear_relu"):
            self.second_linear(i, node, op == "linear_relu")
        elif self.written[i]:  # sum, mean: linear, their VJP of k
            getattr(self, f"backward_{op}")(i, node)

    def first_own(self, i: int) -> str:
        """Node ``i``'s adjoint in the first pass (the gradient's)."""
        return f"{self.first.scalar if not self.shape(i) else self.first.array}{i}"

    def second_terms(
        self, node: Node, names: dict[str, str], slot: int, shape: tuple[int, ...] | None
    ) -> str:
        """The tangent of the partial for operand ``slot``: ``d2/da2 ta + d2/da db tb``
        (``d2/da db ta + d2/db2 tb`` for the second), zero second partials and operands
        that do not move left out; empty where nothing is left."""
        second = self.rules[node.code].second
        pairs = ((0, 0), (1, 1)) if slot == 0 else ((1, 0), (2, 1))
        terms = []
        for which, other in pairs:
            if which >= len(second) or other >= len(node.operands):
                continue
            expression = second[which].format(**names)
            j = node.operands[other]
            if expression == "0.0" or not self.moves[j]:
                continue
            moved = f"t{j}" if shape is None else self.read(j, shape, "t")
            terms.append(f"({expression}) * {moved}")
        return " + ".join(terms)

    def elementwise_term(self, i: int, node: Node, names: dict[str, str], slot: int) -> str:
        """What elementwise node ``i`` sends operand ``slot`` per element in the current
        pass: ``partial * d<i>``, or in the second ``partial * k<i> + (tangent of the
        partial) * d<i>`` (empty where nothing is sent)."""
        index = ", ".join(_indices(len(node.shape)))
        partial = self.expression(node, "partial", names, slot)
        if self.p is self.first:
            return f"({partial}) * {self.own(i)}[{index}]"
        terms = [f"({partial}) * {self.own(i)}[{index}]"] if self.written[i] else []
        if self.first.written[i]:
            moved = self.second_terms(node, names, slot, node.shape)
            if moved:
                terms.append(f"({moved}) * {self.first_own(i)}[{index}]")
        return " + ".join(terms)

    def second_scalar(self, i: int, node: Node) -> None:
        names = self.scalar_names(i, node)
        for slot, j in enumerate(node.operands):
            if not self.needs[j]:
                continue
            partial = self.expression(node, "partial", names, slot)
            terms = [f"({partial}) * {self.own(i)}"] if self.written[i] else []
            if self.first.written[i]:
                moved = self.second_terms(node, names, slot, None)
                if moved:
                    terms.append(f"({moved}) * {self.first_own(i)}")
            if terms:
                self.add_scalar(j, " + ".join(terms))

    def second_matmul(self, i: int, node: Node) -> None:
        """``(K B^T + G tB^T, A^T K + tA^T G)``: the VJP of k, plus the VJP of g with the
        other operand's tangent."""
        a, b = node.operands
        for slot, (j, other) in enumerate(((a, b), (b, a))):
            if not self.needs[j]:
                continue
            parts = []
            if self.written[i]:
                parts.append(self.matmul_adjoint(node, slot, self.own(i), f"v{other}"))
            if self.first.written[i] and self.moves[other]:
                parts.append(self.matmul_adjoint(node, slot, self.first_own(i), f"t{other}"))
            if parts:
                self.contribute(j, f"{i}_{'ab'[slot]}", parts)

    def second_linear(self, i: int, node: Node, relu: bool) -> None:
        """As matmul's, through the ReLU's mask (``relu'' = 0``: the mask has no tangent)
        and the bias (linear: only k reaches it). ``dZ`` of the gradient is the first
        pass's (its scratch buffer, or ``d<i>``)."""
        X, W, _ = node.operands
        dZ = f"s_{self.first.tag}{i}_dz" if relu else self.first_own(i)
        on = self.first.written[i]

        def dx(target: str) -> None:
            self.emit(f"gemm(False, True, {dZ}, t{W}, {target})")

        def dw(target: str) -> None:
            self.emit(f"gemm(True, False, t{X}, {dZ}, {target})")

        Parts = list[Callable[[str], None]]
        moved: tuple[Parts, Parts] = (
            [dx] if on and self.moves[W] else [],
            [dw] if on and self.moves[X] else [],
        )
        if self.written[i]:
            self.backward_linear(i, node, relu, moved)
            return
        for j, tag, parts in ((X, "dx", moved[0]), (W, "dw", moved[1])):
            if self.needs[j] and parts:
                self.contribute(j, f"{i}_{tag}", parts)

    # -- tangents (mode jvp) ---------------------------------------------------------------
    # Forward mode, plain as the backward pass: node i's tangent t<i> is the sum
    # of every operand's term (partial * tangent), in the interpreter's order, so
    # the kernel flags a nan in the output's tangent and the exact rules compute
    # that call again. A tangent is a local for a scalar, else a buffer.
    def tangent(self, i: int, node: Node) -> None:
        """Node ``i``'s tangent ``t<i>``, after its value, from its operands' tangents."""
        shape = node.shape
        if node.op == "input":
            position = self.program.inputs.index(i)
            if shape:
                self.parameter(f"t{i}", "direction", i, shape, position)
            else:
                wrt = self.program.wrt
                self.parameter("scalar_directions", "scalar_directions", -1, (len(wrt),))
                self.emit(f"t{i} = scalar_directions[{wrt.index(position)}]")
            return
        if shape:
            role = "output_tangent" if i == self.program.output else "tangent"
            self.parameter(f"t{i}", role, i, shape)
        getattr(self, f"tangent_{node.op}")(i, node)

    def terms(self, node: Node, names: dict[str, str], shape: tuple[int, ...] | None) -> str:
        """``partial * tangent`` summed over the operands that move, in operand order
        (``shape``: the loop's, None for scalar nodes)."""
        terms = []
        for slot, j in enumerate(node.operands):
            if self.moves[j]:
                moved = f"t{j}" if shape is None else self.read(j, shape, "t")
                terms.append(f"({self.expression(node, 'partial', names, slot)}) * {moved}")
        return " + ".join(terms)

    def tangent_scalar(self, i: int, node: Node) -> None:
        self.emit(f"t{i} = {self.terms(node, self.scalar_names(i, node), None)}")

    def tangent_elementwise(self, i: int, node: Node) -> None:
        index = ", ".join(_indices(len(node.shape)))
        terms = self.terms(node, self.element_names(i, node), node.shape)
        self.loop(f"v{i}", node.shape, [f"t{i}[{index}] = {terms}"])

    def tangent_matmul(self, i: int, node: Node) -> None:
        """``tA @ B + A @ tB``: the first product into the tangent, the second added."""
        a, b = node.operands
        factors = [(f"t{a}", f"v{b}")] if self.moves[a] else []
        if self.moves[b]:
            factors.append((f"v{a}", f"t{b}"))
        first, *rest = factors
        self.emit(self.product_call(node, *first, f"t{i}"))
        for x, y in rest:
            if not node.shape:
                self.emit(f"t{i} = t{i} + dot({x}, {y})")
                continue
            second = self.scratch(f"{i}_tb", node.shape)
            self.emit(self.product_call(node, x, y, second))
            index = ", ".join(_indices(len(node.shape)))
            self.loop(f"t{i}", node.shape, [f"t{i}[{index}] = t{i}[{index}] + {second}[{index}]"])

    def tangent_linear(self, i: int, node: Node, relu: bool = False) -> None:
        """``(tX @ W + X @ tW) + tb``, through the ReLU's mask for ``linear_relu``."""
        X, W, b = node.operands
        T = f"t{i}"
        summed = []
        if self.moves[X]:
            self.emit(f"gemm(False, False, t{X}, v{W}, {T})")
            summed.append(f"{T}[i0, i1]")
        if self.moves[W]:
            target = T if not summed else self.scratch(f"{i}_tw", node.shape)
            self.emit(f"gemm(False, False, v{X}, t{W}, {target})")
            summed.append(f"{target}[i0, i1]")
        if self.moves[b]:
            summed.append(f"t{b}[i1]")
        body = [f"z = {' + '.join(summed)}"]
        if relu:  # relu'(z) from the output, as the backward pass reads it
            body.append(f"h = v{i}[i0, i1]")
            body.append(f"{T}[i0, i1] = (1.0 if h > 0.0 else (h if h != h else 0.0)) * z")
        else:
            body.append(f"{T}[i0, i1] = z")
        self.loop(T, node.shape, body)

    def tangent_linear_relu(self, i: int, node: Node) -> None:
        self.tangent_linear(i, node, relu=True)

    def tangent_sum(self, i: int, node: Node) -> None:
        self.forward_sum(i, node, prefix="t")

    def tangent_mean(self, i: int, node: Node) -> None:
        self.forward_sum(i, node, mean=True, prefix="t")

    def tangent_mse_loss(self, i: int, node: Node) -> None:
        """``sum(p tY + (-p) tT)`` with ``p = 2 (Y - T) / size``, summed pairwise."""
        Y, T = node.operands
        terms = self.scratch(f"{i}_terms", self.shape(Y))
        self.emit(f"w{i} = {terms}.reshape({terms}.size)")
        moved = []
        for j, sign, name in ((Y, "", f"ty{i}"), (T, "-", f"tt{i}")):
            if self.moves[j]:
                self.emit(f"{name} = t{j}.reshape(t{j}.size)")
                moved.append(f"({sign}p) * {name}[i0]")
        self.emit(f"for i0 in range(y{i}.size):")
        self.emit(f"p = 2.0 * (y{i}[i0] - q{i}[i0]) / y{i}.size", 2)
        self.emit(f"w{i}[i0] = {' + '.join(moved)}", 2)
        self.emit(f"t{i} = 0.0 + pairwise(w{i}, 0, w{i}.size)")

    def moved_by_softmax(self, i: int, a: int) -> str:
        """Per row, ``P tX`` into a scratch buffer and ``inner``, its sum (pairwise)."""
        moved = self.scratch(f"{i}_moved", self.shape(a))
        self.emit(f"for i0 in range(v{a}.shape[0]):")
        self.emit(f"for i1 in range(v{a}.shape[1]):", 2)
        self.emit(f"{moved}[i0, i1] = {self.softmax_of(i)} * t{a}[i0, i1]", 3)
        self.emit(f"inner = 0.0 + pairwise({moved}[i0], 0, {moved}.shape[1])", 2)
        return moved

    def tangent_log_softmax(self, i: int, node: Node) -> None:
        """log_softmax: ``tX - inner``; softmax: ``P tX + (-P) inner``, per row."""
        (a,) = node.operands
        self.rows(i, node)
        moved = self.moved_by_softmax(i, a)
        self.emit(f"for i1 in range(v{a}.shape[1]):", 2)
        if node.op == "log_softmax":
            self.emit(f"t{i}[i0, i1] = t{a}[i0, i1] + (-1.0) * inner", 3)
        else:
            self.emit(f"t{i}[i0, i1] = {moved}[i0, i1] + (-{self.softmax_of(i)}) * inner", 3)

    def tangent_softmax(self, i: int, node: Node) -> None:
        self.tangent_log_softmax(i, node)

    def tangent_logsumexp(self, i: int, node: Node) -> None:
        """The row sums of ``P tX``."""
        (a,) = node.operands
        self.rows(i, node)
        self.emit(f"ot{i} = t{i}.reshape(t{i}.size)")
        self.moved_by_softmax(i, a)
        self.emit(f"ot{i}[i0] = inner", 2)

    def tangent_cross_entropy(self, i: int, node: Node) -> None:
        """``sum(dX tX)``, plus ``sum(dT tT)`` for probability targets, each pairwise, with
        ``dX``, ``dT`` the backward pass's (the gradients of the loss)."""
        X, T = node.operands
        labels, mean = node.params
        a = f"v{X}"
        self.emit(f"w = {f'(1.0 / {a}.shape[0])' if mean else '1.0'}")
        P = self.softmax_of(i)
        sums = []
        if self.moves[X]:
            terms = self.scratch(f"{i}_tx", self.shape(X))
            self.emit(f"for i0 in range({a}.shape[0]):")
            if labels:
                self.emit(f"c = int(v{T}[i0])", 2)
                self.emit(f"for i1 in range({a}.shape[1]):", 2)
                self.emit(f"p = {P}", 3)
                self.emit("dx = w * (p - 1.0) if i1 == c else w * p", 3)
            else:
                self.emit("total = 0.0", 2)
                self.emit(f"for i1 in range({a}.shape[1]):", 2)
                self.emit(f"total += v{T}[i0, i1]", 3)
                self.emit(f"for i1 in range({a}.shape[1]):", 2)
                self.emit(f"dx = w * ({P} * total - v{T}[i0, i1])", 3)
            self.emit(f"{terms}[i0, i1] = dx * t{X}[i0, i1]", 3)
            sums.append(terms)
        if not labels and self.moves[T]:
            terms = self.scratch(f"{i}_tt", self.shape(X))
            depth = self.loops(a, 2)
            self.emit(
                f"{terms}[i0, i1] = (-(({a}[i0, i1] - s_{i}_max[i0]) - s_{i}_log[i0]) * w) "
                f"* t{T}[i0, i1]",
                depth,
            )
            sums.append(terms)
        self.emit(
            f"t{i} = " + " + ".join(f"pairwise({x}.reshape({x}.size), 0, {x}.size)" for x in sums)
        )

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


PAIRWISE = '''\
@kernel
def pairwise_block(a, start, n):
    """NumPy's sum of ``a[start:start + n]`` for ``n <= 128``: in order below 8 terms,
    else eight running sums, combined as a tree, then the rest in order."""
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[start], a[start + 1], a[start + 2], a[start + 3]
    r4, r5, r6, r7 = a[start + 4], a[start + 5], a[start + 6], a[start + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        k = start + i
        r0 += a[k]
        r1 += a[k + 1]
        r2 += a[k + 2]
        r3 += a[k + 3]
        r4 += a[k + 4]
        r5 += a[k + 5]
        r6 += a[k + 6]
        r7 += a[k + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[start + i]
        i += 1
    return res


@kernel
def pairwise(a, start, n):
    """NumPy's pairwise summation of ``a[start:start + n]``, in its order (NumPy adds the
    result to 0.0): blocks of up to 128 (:func:`pairwise_block`), halves (rounded down to
    a multiple of 8) above, added as NumPy's recursion adds them. Written with a stack,
    not recursion: Numba cannot load a cached recursive function."""
    if n <= 128:
        return pairwise_block(a, start, n)
    starts = np.empty(64, np.int64)  # frames: 64 halvings reach past any array's size
    counts = np.empty(64, np.int64)
    stages = np.empty(64, np.int64)
    results = np.empty(64)
    top, held = 0, 0
    starts[0], counts[0], stages[0] = start, n, 0
    while top >= 0:
        first, count = starts[top], counts[top]
        if count <= 128:
            results[held] = pairwise_block(a, first, count)
            held += 1
            top -= 1
            continue
        half = count // 2
        half -= half % 8
        if stages[top] == 0:  # the left half first
            stages[top] = 1
            top += 1
            starts[top], counts[top], stages[top] = first, half, 0
        elif stages[top] == 1:  # then the right
            stages[top] = 2
            top += 1
            starts[top], counts[top], stages[top] = first + half, count - half, 0
        else:  # both done: left + right
            held -= 1
            results[held - 1] = results[held - 1] + results[held]
            top -= 1
    return results[0]'''

PRODUCTS = f'''\
@kernel
def gemm(trans_a, trans_b, A, B, C):
    """``C = op(A) @ op(B)`` for C-contiguous matrices, op a transpose where asked, with
    the BLAS routine np.matmul picks: ``ddot`` when ``C`` is one element, ``dgemv`` when
    it is one row or one column, else ``dgemm``; the vectors are passed with their
    strides, as NumPy passes them."""
    m = A.shape[1] if trans_a else A.shape[0]
    k = A.shape[0] if trans_a else A.shape[1]
    n = B.shape[0] if trans_b else B.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        C[:, :] = 0.0
        return
    a_step = A.shape[1] if trans_a else 1  # along a row of op(A)
    b_step = 1 if trans_b else B.shape[1]  # along a column of op(B)
    if m == 1 and n == 1:
        C[0, 0] = ddot(k, A.ctypes, a_step, B.ctypes, b_step)
    elif n == 1:  # op(A) times a column
        dgemv(
            {blas.ROW_MAJOR}, {blas.TRANS} if trans_a else {blas.NO_TRANS}, A.shape[0],
            A.shape[1], 1.0, A.ctypes, A.shape[1], B.ctypes, b_step, 0.0, C.ctypes, 1,
        )
    elif m == 1:  # a row times op(B): op(B)^T times the row
        dgemv(
            {blas.ROW_MAJOR}, {blas.NO_TRANS} if trans_b else {blas.TRANS}, B.shape[0],
            B.shape[1], 1.0, B.ctypes, B.shape[1], A.ctypes, a_step, 0.0, C.ctypes, 1,
        )
    else:
        dgemm(
            {blas.ROW_MAJOR}, {blas.TRANS} if trans_a else {blas.NO_TRANS},
            {blas.TRANS} if trans_b else {blas.NO_TRANS}, m, n, k, 1.0, A.ctypes, A.shape[1],
            B.ctypes, B.shape[1], 0.0, C.ctypes, n,
        )


@kernel
def gemv(trans, A, x, y):
    """``y = op(A) @ x`` for a C-contiguous matrix: NumPy's cblas_dgemv, or ``ddot``
    where ``y`` is one element."""
    rows, columns = A.shape
    if y.size == 0:
        return
    if x.size == 0:
        y[:] = 0.0
        return
    if y.size == 1:
        y[0] = ddot(x.size, A.ctypes, columns if trans else 1, x.ctypes, 1)
        return
    dgemv(
        {blas.ROW_MAJOR}, {blas.TRANS} if trans else {blas.NO_TRANS}, rows, columns, 1.0,
        A.ctypes, max(1, columns), x.ctypes, 1, 0.0, y.ctypes, 1,
    )


@kernel
def magnitude(a):
    """The bits of the largest ``|element|`` of ``a`` (an int64, ordered as the magnitudes
    are): at least those of inf where ``a`` holds an inf or a nan. One integer pass."""
    bits = a.reshape(a.size).view(np.int64)
    top = 0
    for i in range(bits.size):
        top = max(top, bits[i] & 0x7FFFFFFFFFFFFFFF)
    return top


@kernel
def bounded(P, Q):
    """Whether every sum of products of an element of ``P`` and one of ``Q`` (at most
    ``P.size + Q.size`` terms) stays far below overflow, so the product BLAS makes of
    them holds no nan and no inf: both finite, and the count times the two largest
    magnitudes under 2^1000 (rounding can at most double a sum's bound)."""
    found = np.empty(2, np.int64)
    found[0], found[1] = magnitude(P), magnitude(Q)
    if found[0] >= 0x7FF0000000000000 or found[1] >= 0x7FF0000000000000:
        return False
    largest = found.view(np.float64)
    return (P.size + Q.size) * largest[0] * largest[1] < 2.0**1000


@kernel
def dot(x, y):
    """``x @ y`` for two vectors: NumPy's cblas_ddot."""
    if x.size == 0:
        return 0.0
    return ddot(x.size, x.ctypes, 1, y.ctypes, 1)'''


def kernel_source(program: BlockProgram, mode: str) -> tuple[str, list[Parameter]]:
    """The kernel's source and its parameters, in order."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    for node in program.nodes:
        if node.op not in SUPPORTED:
            raise Unsupported(f"generated code has no rule for the op {node.op!r}")
    writer = _Writer(program, mode)
    return writer.write(), writer.parameters


def _helpers() -> Iterator[str]:
    yield from codegen.helper_sources()
    yield PAIRWISE
    yield PRODUCTS


def module_source(program: BlockProgram, mode: str) -> tuple[str, list[Parameter]]:
    """The text of the generated module for ``program`` in ``mode`` (one kernel named
    ``mode``), and that kernel's parameters in order: what the caller passes."""
    text, parameters = kernel_source(program, mode)
    header = [
        f'"""Generated by fastad: a function of arrays of {len(program.nodes)} nodes, mode {mode}.',
        "",
        "Do not edit: fastad writes this file from the traced program and checks",
        'it, character for character, before every use."""',
        "",
        "from math import (  # noqa: F401",
        "    " + ", ".join(sorted(codegen.MATH_NAMES)) + ",",
        ")",
        "",
        "import numpy as np  # noqa: F401",
        "from numba import types",
        "",
        "import fastad.kernels.blas  # noqa: F401  (registers the BLAS routines)",
        "from fastad.kernels.jit import kernel",
        "",
        "UNREACHED = -0.0",
        "",
        blas.DECLARATIONS,
    ]
    return "\n\n\n".join(["\n".join(header), *_helpers(), text]) + "\n", parameters


def describe_products(module: str) -> list[str]:
    """The BLAS calls of the kernel in the text ``module_source`` wrote, one line each."""
    kernel = module.rsplit("@kernel\ndef ", 1)[1]  # the helpers come before it
    found = []
    for line in kernel.splitlines():
        stripped = line.strip()
        if stripped.startswith(("gemm(", "gemv(")) or "dot(" in stripped:
            found.append(stripped)
    return found
