"""The forward pass of a generated kernel: each live node's value, in node order.

An elementwise op is one loop nest over its output (its op-table
expression), a product one BLAS call, the softmax family and the
cross-entropy row loops, the reductions NumPy's own summation order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from .array_program import BAD_LABEL, Node, Unsupported, loop_indices, reduced_axes
from .array_writer import WriterBase
from .fused import ROW_LANES_FROM


class ForwardWriter(WriterBase):
    """The values: ``forward_<op>`` per kind of node."""

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
        if shape and not self.viewed(i, node):
            self.parameter(f"v{i}", "value", i, shape)
        getattr(self, f"forward_{op}")(i, node)

    def viewed(self, i: int, node: Node) -> bool:
        """Whether node ``i``'s value (and tangent) is a view of its operand's, not a buffer:
        a reshape of an array, unless it is the output (a fresh array). Its literal shape
        never holds the rows under ``batch=``: the tracer refuses a reshape of the batch."""
        return (
            node.op == "reshape" and i != self.program.output and bool(self.shape(node.operands[0]))
        )

    def scalar_names(self, i: int, node: Node) -> dict[str, str]:
        a = node.operands[0]
        b = node.operands[1] if len(node.operands) > 1 else a
        return {"a": f"v{a}", "b": f"v{b}", "out": f"v{i}"}

    def element_names(self, i: int, node: Node) -> dict[str, str]:
        a = node.operands[0]
        b = node.operands[1] if len(node.operands) > 1 else a
        index = ", ".join(loop_indices(len(node.shape)))
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
        self.emit_product(node, f"v{a}", f"v{b}", f"v{i}")

    def emit_product(self, node: Node, x: str, y: str, target: str) -> None:
        """``target = x @ y`` for matmul ``node``'s operand ranks, by the BLAS routine
        ``np.matmul`` picks (``x``, ``y``: its operands or their tangents); a stack of
        matrices one ``gemm`` per matrix, as ``np.matmul`` loops over a stack."""
        a, b = node.operands
        ranks = (len(self.shape(a)), len(self.shape(b)))
        if ranks == (2, 2):
            self.emit(f"gemm(False, False, {x}, {y}, {target})")
        elif ranks == (2, 1):
            self.emit(f"gemv(False, {x}, {y}, {target})")
        elif ranks == (1, 2):
            self.emit(f"gemv(True, {y}, {x}, {target})")
        elif ranks == (1, 1):
            self.emit(f"{target} = dot({x}, {y})")
        elif self.stacked(node):
            left, right = self.per_matrix(node, x, y)
            self.emit(f"for b_ in range({target}.shape[0]):")
            self.emit(f"gemm(False, False, {left}, {right}, {target}[b_])", 2)

    def per_matrix(self, node: Node, x: str, y: str) -> tuple[str, str]:
        """A stacked product's operands (or what stands for them) at matrix ``b_`` of the
        stack: a matrix, or a stack of one that broadcasts, is itself at every ``b_``."""
        a, b = node.operands
        return self.at_matrix(node, a, x), self.at_matrix(node, b, y)

    def at_matrix(self, node: Node, j: int, name: str) -> str:
        """Operand ``j`` of stacked product ``node`` (``name``: its values, tangents or
        adjoint) at matrix ``b_``: a matrix is itself, a stack of one its only matrix."""
        if len(self.shape(j)) == 2:
            return name
        return f"{name}[0]" if self.broadcast_stack(node, j) else f"{name}[b_]"

    def broadcast_stack(self, node: Node, j: int) -> bool:
        """Whether operand ``j`` of stacked product ``node`` is a stack of one matrix
        against a longer stack: NumPy's matmul broadcasts it."""
        own = self.shape(j)
        return len(own) == 3 and own[0] == 1 and node.shape[0] != 1

    def stacked(self, node: Node) -> bool:
        """Whether matmul ``node`` is a stack of matrix products (a stack of three axes by
        one of the same length or of one matrix, or by a matrix that broadcasts against
        it, either side); :class:`Unsupported` for any other shapes."""
        a, b = (self.shape(j) for j in node.operands)
        if (len(a), len(b)) in ((3, 2), (2, 3)):
            return True
        if len(a) == 3 and len(b) == 3 and (a[0] == b[0] or 1 in (a[0], b[0])):
            return True
        raise Unsupported(
            f"generated code has no rule for a product of operands of shapes {a} and {b} "
            "(matrices, vectors, stacks of matrices, a stack by a matrix)"
        )

    def forward_reshape(self, i: int, node: Node, prefix: str = "v") -> None:
        """The operand's elements (``prefix`` ``t``: its tangent's) in the node's shape: a
        view where :meth:`viewed`, else a copy in C order, the two buffers read flat."""
        (a,) = node.operands
        if self.viewed(i, node):
            self.emit(f"{prefix}{i} = {prefix}{a}.reshape({tuple(node.shape)})")
            return
        self.copy_flat(f"{prefix}{a}", f"{prefix}{i}", f"{prefix}r{i}")

    def copy_flat(self, source: str, target: str, tag: str) -> None:
        """``target``'s elements, read flat in C order, set to ``source``'s."""
        self.emit(f"{tag}_to = {target}.reshape({target}.size)")
        self.emit(f"{tag}_from = {source}.reshape({source}.size)")
        self.emit(f"for i0 in range({tag}_to.size):")
        self.emit(f"{tag}_to[i0] = {tag}_from[i0]", 2)

    def gather(self, i: int, node: Node) -> str:
        """Index node ``i``'s gather map (a kernel parameter): the operand's flat position
        of each of its elements."""
        return self.parameter(f"gm{i}", "gather", i, (max(1, math.prod(node.shape)),))

    def forward_index(self, i: int, node: Node, prefix: str = "v") -> None:
        """The operand's elements (``prefix`` ``t``: its tangent's) at the gather map's
        positions, in C order."""
        (a,) = node.operands
        source = f"{prefix}{a}.reshape({prefix}{a}.size)"
        position = self.strided(i, node)
        if position is not None:  # a slice: strided reads
            tag = f"{prefix}ix{i}"
            self.emit(f"{tag}_from = {source}")
            depth = self.loops(f"{prefix}{i}", len(node.shape))
            element = ", ".join(loop_indices(len(node.shape)))
            self.emit(f"{prefix}{i}[{element}] = {tag}_from[{position}]", depth)
            return
        gather = self.gather(i, node)
        if not node.shape:
            self.emit(f"{prefix}{i} = {source}[{gather}[0]]")
            return
        tag = f"{prefix}ix{i}"
        self.emit(f"{tag}_to = {prefix}{i}.reshape({prefix}{i}.size)")
        self.emit(f"{tag}_from = {source}")
        self.emit(f"for i0 in range({tag}_to.size):")
        self.emit(f"{tag}_to[i0] = {tag}_from[{gather}[i0]]", 2)

    def pieces(self, node: Node) -> list[tuple[int, str, str]]:
        """A concatenate's operands: ``(operand, its element, the result's element)`` at the
        loop indices over the operand, the result's shifted along the axis by the lengths
        of the operands before it."""
        axis = cast("int", node.params[0])
        names = loop_indices(len(node.shape))
        found, offset = [], 0
        for j in node.operands:
            moved = list(names)
            if offset:
                moved[axis] = f"{names[axis]} + {offset}"
            found.append((j, ", ".join(names), ", ".join(moved)))
            offset += self.shape(j)[axis]
        return found

    def forward_concatenate(self, i: int, node: Node, prefix: str = "v") -> None:
        """Each operand's elements (``prefix`` ``t``: its tangent's, or -0.0, unreached,
        where it does not move) at their place in the result, a loop nest per operand."""
        rank = len(node.shape)
        for j, theirs, mine in self.pieces(node):
            moving = prefix == "v" or self.moves[j]
            read = f"{prefix}{j}[{theirs}]" if moving else "-0.0"
            self.unmerged(f"v{j}", rank, f"{prefix}{i}[{mine}] = {read}")

    @staticmethod
    def transposed_index(node: Node) -> tuple[str, str]:
        """``(result's element, operand's element)`` at the loop indices over the result:
        result axis ``t`` is operand axis ``axes[t]``."""
        axes = cast("tuple[int, ...]", node.params[0])
        names = loop_indices(len(node.shape))
        operand = [""] * len(names)
        for t, axis in enumerate(axes):
            operand[int(axis)] = names[t]
        return ", ".join(names), ", ".join(operand)

    def forward_transpose(self, i: int, node: Node, prefix: str = "v") -> None:
        """The operand's elements (``prefix`` ``t``: its tangent's) with the axes permuted."""
        (a,) = node.operands
        mine, theirs = self.transposed_index(node)
        self.unmerged(f"v{i}", len(node.shape), f"{prefix}{i}[{mine}] = {prefix}{a}[{theirs}]")

    def unmerged(self, array: str, rank: int, statement: str) -> None:
        """A loop nest of its own over ``array``'s elements, never merged with a neighbour:
        a permuted read merges only where the traced shapes happen to agree (a square
        matrix, or a batch of as many rows as columns), so the text would change with the
        number of rows."""
        depth = self.loops(array, rank)
        self.emit(statement, depth)

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
        axes = reduced_axes(node)
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
            total = f"(0.0 + pairwise({x}.reshape({x}.size), np.int64(0), {x}.size))"
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
            self.row_sums(x, out, len(node.shape))
            if mean:
                self.emit(f"for i0 in range({x}.shape[0]):")
                self.emit(f"{element} = {element}{scale}", 2)

    def row_sums(self, x: str, out: str, rank: int, start: str = "0.0") -> None:
        """``out`` (one axis, or two with keepdims: ``rank``) gets ``start`` plus NumPy's
        pairwise sum of each row of the matrix ``x``: 0.0 as NumPy adds it, -0.0 as
        ``reach_sum`` does."""
        target = out if rank == 1 else f"{out}.reshape({out}.size)"
        self.emit(f"pairwise_rows({x}, {target}, {start})")

    @staticmethod
    def reduced_index(kind: str, node: Node) -> str:
        """The element of a sum over the ``columns`` or ``rows`` of a matrix at the loop's
        indices (``node.shape``: one axis, or two with keepdims)."""
        if kind == "columns":
            return "i1" if len(node.shape) == 1 else "0, i1"
        return "i0" if len(node.shape) == 1 else "i0, 0"

    def forward_mean(self, i: int, node: Node) -> None:
        self.forward_sum(i, node, mean=True)

    def slices(self, i: int, node: Node, start: int = 0) -> tuple[str, list[str], str, str]:
        """A max or min's slices of its operand: ``(kind, the loop over the slices (none for
        all), the loop over one slice's elements from ``start``, the element at the loop
        indices)``."""
        (a,) = node.operands
        kind = self.reduction(i, node)
        x = f"v{a}"
        if kind == "all":
            self.emit(f"xf{i} = {x}.reshape({x}.size)")
            return kind, [], f"for i0 in range({start}, xf{i}.size):", f"xf{i}[i0]"
        if kind == "rows":
            outer, inner = (
                f"for i0 in range({x}.shape[0]):",
                f"for i1 in range({start}, {x}.shape[1]):",
            )
        else:
            outer, inner = (
                f"for i1 in range({x}.shape[1]):",
                f"for i0 in range({start}, {x}.shape[0]):",
            )
        return kind, [outer], inner, f"{x}[i0, i1]"

    def reduced(self, i: int, node: Node, kind: str, prefix: str = "v") -> str:
        """A max or min's (``prefix`` ``t``: its tangent's) element of the current slice."""
        if kind != "all":
            return f"{prefix}{i}[{self.reduced_index(kind, node)}]"
        return f"{prefix}{i}.reshape({prefix}{i}.size)[0]" if node.shape else f"{prefix}{i}"

    def forward_max(self, i: int, node: Node) -> None:
        """NumPy's maximum (minimum) of each slice: a nan anywhere in it makes it nan (a
        later element replaces the best where it is better or a nan; nothing beats a nan);
        a tie of -0.0 and +0.0 is +0.0 (min: -0.0)."""
        kind, outer, inner, element = self.slices(i, node, start=1)
        better = ">" if node.op == "max" else "<"
        # A tie of -0.0 and +0.0: +0.0 for max, -0.0 for min, as the interpreter's rule.
        signed = f"(e == 0.0 and e == best and copysign(1.0, e) {better} 0.0)"
        depth = 1 + len(outer)
        for line in outer:
            self.emit(line)
        first = {"all": "0", "rows": "i0, 0", "columns": "0, i1"}[kind]
        self.emit(f"best = {element.split('[')[0]}[{first}]", depth)
        self.emit(inner, depth)
        self.emit(f"e = {element}", depth + 1)
        self.emit(f"if e {better} best or e != e or {signed}:", depth + 1)
        self.emit("best = e", depth + 2)
        self.emit(f"{self.reduced(i, node, kind)} = best", depth)

    def forward_min(self, i: int, node: Node) -> None:
        self.forward_max(i, node)

    def forward_prod(self, i: int, node: Node) -> None:
        """NumPy's product of each slice: its elements multiplied in order (from 1.0,
        which the first leaves as it is; an empty slice gives 1.0)."""
        kind, outer, inner, element = self.slices(i, node)
        depth = 1 + len(outer)
        for line in outer:
            self.emit(line)
        self.emit("total = 1.0", depth)
        self.emit(inner, depth)
        self.emit(f"total = total * {element}", depth + 1)
        self.emit(f"{self.reduced(i, node, kind)} = total", depth)

    def others_loops(
        self, i: int, node: Node, statement: Callable[[str], str], tangent: bool = False
    ) -> str:
        """Per slice of a prod: per element ``others``, the product of the other elements
        as the interpreter makes it (the product of those before it times that of those
        after it, each multiplied in order from 1.0; exactly 0.0 where another element is
        0.0 and none is nan), then ``statement(position)``. With ``tangent`` (mode hvp's
        second pass), also ``d_others``, its tangent along the operand's: the prefix and
        suffix products carried with their tangents, exactly 0.0 where two others are
        0.0 and none is nan. Returns the reduction's kind."""
        (a,) = node.operands
        kind = self.reduction(i, node)
        after = self.scratch(f"{i}_after", self.shape(a))
        d_after = self.scratch(f"{i}_d_after", self.shape(a)) if tangent else ""
        x, t = f"v{a}", f"t{a}"
        if kind == "all":
            self.emit(f"xf{i} = {x}.reshape({x}.size)")
            self.emit(f"af{i} = {after}.reshape({after}.size)")
            x, after = f"xf{i}", f"af{i}"
            if tangent:
                self.emit(f"tf{i} = {t}.reshape({t}.size)")
                self.emit(f"daf{i} = {d_after}.reshape({d_after}.size)")
                t, d_after = f"tf{i}", f"daf{i}"
            outer: list[str] = []
            walk, at, following = "i0", "i0", "i0 + 1"
            length = f"{x}.size"
        elif kind == "rows":
            outer = [f"for i0 in range({x}.shape[0]):"]
            walk, at, following = "i1", "i0, i1", "i0, i1 + 1"
            length = f"{x}.shape[1]"
        else:
            outer = [f"for i1 in range({x}.shape[1]):"]
            walk, at, following = "i0", "i0, i1", "i0 + 1, i1"
            length = f"{x}.shape[0]"
        depth = 1 + len(outer)
        for line in outer:
            self.emit(line)
        self.emit("zeros = 0", depth)
        self.emit("nans = 0", depth)
        self.emit(f"for {walk} in range({length}):", depth)
        self.emit(f"e = {x}[{at}]", depth + 1)
        self.emit("if e == 0.0:", depth + 1)
        self.emit("zeros += 1", depth + 2)
        self.emit("if e != e:", depth + 1)
        self.emit("nans += 1", depth + 2)
        self.emit(f"for {walk} in range({length} - 1, -1, -1):", depth)
        last = f"{walk} == {length} - 1"
        self.emit(
            f"{after}[{at}] = 1.0 if {last} else {after}[{following}] * {x}[{following}]",
            depth + 1,
        )
        if tangent:
            self.emit(
                f"{d_after}[{at}] = 0.0 if {last} else {d_after}[{following}] * "
                f"{x}[{following}] + {after}[{following}] * {t}[{following}]",
                depth + 1,
            )
            self.emit("d_before = 0.0", depth)
        self.emit("before = 1.0", depth)
        self.emit(f"for {walk} in range({length}):", depth)
        self.emit(f"e = {x}[{at}]", depth + 1)
        self.emit(f"others = before * {after}[{at}]", depth + 1)
        clean = "nans - (1 if e != e else 0) == 0"
        self.emit(f"if zeros - (1 if e == 0.0 else 0) > 0 and {clean}:", depth + 1)
        self.emit("others = 0.0", depth + 2)
        if tangent:
            self.emit(f"d_others = d_before * {after}[{at}] + before * {d_after}[{at}]", depth + 1)
            self.emit(f"if zeros - (1 if e == 0.0 else 0) > 1 and {clean}:", depth + 1)
            self.emit("d_others = 0.0", depth + 2)
        self.emit(statement(at), depth + 1)
        if tangent:
            self.emit(f"d_before = d_before * e + before * {t}[{at}]", depth + 1)
        self.emit("before = before * e", depth + 1)
        return kind

    def running(self, array: str, node: Node, backwards: bool = False) -> tuple[str, str, str, int]:
        """A loop nest over ``array`` for a running sum along a cumsum's axis, that axis
        walked from its end where ``backwards``: ``(the element at the loop indices, its
        neighbour before it along the walk, whether it is the walk's first, the body's
        depth)``."""
        axis = cast("int", node.params[0])
        names = loop_indices(len(node.shape))
        for t, index in enumerate(names):
            if t == axis and backwards:
                header = f"for {index} in range({array}.shape[{t}] - 1, -1, -1):"
            else:
                header = f"for {index} in range({array}.shape[{t}]):"
            self.emit(header, 1 + t)
        before = list(names)
        before[axis] = f"{names[axis]} {'+' if backwards else '-'} 1"
        first = (
            f"{names[axis]} == {array}.shape[{axis}] - 1" if backwards else f"{names[axis]} == 0"
        )
        return ", ".join(names), ", ".join(before), first, 1 + len(names)

    def forward_cumsum(self, i: int, node: Node, prefix: str = "v") -> None:
        """NumPy's running sums along the axis (``prefix`` ``t``: of the tangent), each the
        one before plus the element."""
        (a,) = node.operands
        here, before, first, depth = self.running(f"v{a}", node)
        out, x = f"{prefix}{i}", f"{prefix}{a}"
        self.emit(
            f"{out}[{here}] = {x}[{here}] if {first} else {out}[{before}] + {x}[{here}]", depth
        )

    def share_loops(self, i: int, node: Node, statement: Callable[[str], str]) -> str:
        """Per slice of a max or min: ``share``, 1 / the number of elements equal to its
        result (the nan elements where it is nan), then per element ``statement(position)``
        with ``hit``, whether it is one of them (``position``: the operand's element at the
        loop indices, flat for all). Returns the reduction's kind."""
        kind, outer, inner, element = self.slices(i, node)
        depth = 1 + len(outer)
        for line in outer:
            self.emit(line)
        self.emit(f"best = {self.reduced(i, node, kind)}", depth)
        self.emit("hits = 0", depth)
        self.emit(inner, depth)
        self.emit(f"e = {element}", depth + 1)
        self.emit("if e == best or (e != e and best != best):", depth + 1)
        self.emit("hits += 1", depth + 2)
        self.emit("share = 1.0 / hits", depth)
        self.emit(inner, depth)
        self.emit(f"e = {element}", depth + 1)
        self.emit("hit = e == best or (e != e and best != best)", depth + 1)
        self.emit(statement("i0" if kind == "all" else "i0, i1"), depth + 1)
        return kind

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
        if node.op != "cross_entropy" and reduced_axes(node) != (1,):
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
        # The interpreter's maximum, bit for bit: row_max's running maxima on long rows,
        # the scan in order here on short ones, where the call would cost more.
        self.emit(f"for i0 in range({a}.shape[0]):")
        self.emit(f"if {a}.shape[1] >= {ROW_LANES_FROM}:", 2)
        self.emit(f"m = row_max({a}, i0)", 3)
        self.emit("else:", 2)
        self.emit("m = -inf", 3)
        self.emit(f"for i1 in range({a}.shape[1]):", 3)
        self.emit(f"x = {a}[i0, i1]", 4)
        self.emit("if x != x:", 4)
        self.emit("m = x", 5)
        self.emit("break", 5)
        self.emit("if x > m:", 4)
        self.emit("m = x", 5)
        # The exponentials in a loop of their own, which LLVM vectorises (a sum in
        # order cannot be; ``row_exp`` is libmvec's exp where the host has it), then
        # their sum in order, as the interpreter's.
        self.emit(f"for i1 in range({a}.shape[1]):", 2)
        self.emit(f"{E}[i0, i1] = row_exp({a}[i0, i1] - m)", 3)
        self.emit("total = 0.0", 2)
        self.emit(f"for i1 in range({a}.shape[1]):", 2)
        self.emit(f"total += {E}[i0, i1]", 3)
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
            total = f"(0.0 - (0.0 + pairwise({picked}, np.int64(0), {picked}.size)))"
        else:
            self.emit("row = 0.0", 2)
            self.emit(f"for i1 in range({a}.shape[1]):", 2)
            self.emit(f"t = v{T}[i0, i1]", 3)
            self.emit("if t != 0.0:", 3)
            self.emit(f"row -= t * (({a}[i0, i1] - s_{i}_max[i0]) - s_{i}_log[i0])", 4)
            self.emit(f"{picked}[i0] = row", 2)
            total = f"(0.0 + pairwise({picked}, np.int64(0), {picked}.size))"
        self.emit(f"v{i} = {total} * {weight}")
