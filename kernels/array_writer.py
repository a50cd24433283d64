"""What every part of a generated kernel's writer shares: loop nests, passes, lines.

:class:`WriterBase` holds the kernel being written (its parameters and
lines, the live nodes, the backward passes) and the loop nests that
consecutive elementwise statements merge into (:class:`LoopNest`). The
emitters per mode build on it: ``array_forward.py`` (values),
``array_backward.py`` (gradients, VJP), ``array_tangent.py`` (JVP),
``array_second.py`` (HVP), and ``array_source.py`` writes the whole kernel.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from . import scalar_source
from .array_program import BlockProgram, Node, Parameter, loop_indices

MAX_STREAMS = 10
"""The most arrays one merged loop nest reads and writes: past about this many
streams per element the hardware prefetchers lose track and the caches thrash
(a merged chain of 40 elementwise ops ran 2.3x slower than the op-by-op
interpreter), and LLVM's compile time grows with the body."""

_ACCESS = re.compile(r"\b([A-Za-z_]\w*)\[([^\[\]]*)\]")
_NAME = re.compile(r"\b([A-Za-z_]\w*)\b")


class LoopNest:
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
        self.full = ", ".join(loop_indices(len(shape)))
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

    def absorb(self, other: LoopNest) -> bool:
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


class BackwardPass:
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


class WriterBase:
    """Writes one kernel: its parameters and its lines (the emitters subclass it)."""

    def __init__(self, program: BlockProgram, mode: str) -> None:
        self.program = program
        self.mode = mode
        self.nodes = program.nodes
        self.lines: list[str] = []
        self.parameters: list[Parameter] = []
        self._names: set[str] = set()
        self.rules = scalar_source.rule_templates()
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
            self.p = self.first = BackwardPass("g", "d", "", inner, results=False)
            self.second = BackwardPass("k", "k", "h", needs, results=True)
        else:
            self.p = self.first = self.second = BackwardPass("g", "d", "", needs, results=True)
        # Tangents (mode jvp): nodes the output itself reads that depend on a wrt input
        # (a guard reads values only).
        feeds = [False] * n
        feeds[program.output] = True
        for i in reversed(range(n)):
            if feeds[i]:
                for j in self.nodes[i].operands:
                    feeds[j] = True
        self.moves = [feeds[i] and depends[i] for i in range(n)]
        self.pending: LoopNest | None = None  # the last loop nest, still open to merging
        self.spans: list[tuple[int, int, LoopNest]] = []  # lines of each loop nest written

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

    def strided(self, i: int, node: Node) -> str | None:
        """Index node ``i``'s operand position as an expression of the loop indices over its
        shape, where its gather map is affine in them (a basic slice or a broadcast:
        ``offset + s0 * i0 + s1 * i1...``, no map read); None for any other map."""
        shape, found = tuple(node.shape), self.program.gathers.get(i)
        if not shape or found is None or not np.size(found) or np.size(found) != math.prod(shape):
            return None  # a scalar, no map (a damaged file: refused later) or no elements
        grid = np.reshape(found, shape)
        origin = int(grid[(0,) * len(shape)])
        unit = [tuple(int(k == t) for k in range(len(shape))) for t in range(len(shape))]
        steps = [
            int(grid[u]) - origin if size > 1 else 0 for u, size in zip(unit, shape, strict=True)
        ]
        affine = origin + sum(
            step * axis for step, axis in zip(steps, np.indices(shape), strict=True)
        )
        if not np.array_equal(grid, affine):
            return None
        indices = loop_indices(len(shape))
        terms = [f"{step} * {index}" for step, index in zip(steps, indices, strict=True) if step]
        return " + ".join([str(origin)] * bool(origin) + terms) or "0"

    def emit(self, line: str, depth: int = 1) -> None:
        self.flush()
        self.lines.append("    " * depth + line)

    def loops(self, array: str, rank: int, depth: int = 1) -> int:
        """Nested loops over ``array``'s elements (indices ``i0``, ``i1``...); the body's depth."""
        for t, index in enumerate(loop_indices(rank)):
            self.emit(f"for {index} in range({array}.shape[{t}]):", depth + t)
        return depth + rank

    def loop(
        self, array: str, shape: tuple[int, ...], body: list[str], before: Sequence[str] = ()
    ) -> None:
        """A loop nest over the elements of ``array`` (of the traced ``shape``) running
        ``body`` per element, after the statements ``before``; merged into the loop
        before it where that changes no value (:class:`LoopNest`)."""
        loop = LoopNest(array, shape, list(before), list(body))
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
        for t, index in enumerate(loop_indices(rank)):
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
        names = loop_indices(len(shape))
        offset = len(shape) - len(own)
        return [
            "0" if own[t] == 1 and shape[offset + t] != 1 else names[offset + t]
            for t in range(len(own))
        ]

    def failure(self, status: int) -> str:
        return f"nan, {status}, False"
