"""Forward mode in a generated kernel: each moving node's tangent after its value.

The interpreter's JVP rules, plain, in their order (``tA @ B`` then ``+ A @
tB``; a linear layer's ``(tX @ W + X @ tW) + tb`` through the ReLU's mask;
the sums of tangents pairwise). Mode hvp reads the same tangents.
"""

from __future__ import annotations

from .array_backward import BackwardWriter
from .array_program import Node, loop_indices


class TangentWriter(BackwardWriter):
    """The tangents (modes jvp and hvp): ``tangent_<op>`` per kind of node."""

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
        if shape and not self.viewed(i, node):
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
        index = ", ".join(loop_indices(len(node.shape)))
        terms = self.terms(node, self.element_names(i, node), node.shape)
        self.loop(f"v{i}", node.shape, [f"t{i}[{index}] = {terms}"])

    def tangent_matmul(self, i: int, node: Node) -> None:
        """``tA @ B + A @ tB``: the first product into the tangent, the second added."""
        a, b = node.operands
        factors = [(f"t{a}", f"v{b}")] if self.moves[a] else []
        if self.moves[b]:
            factors.append((f"v{a}", f"t{b}"))
        first, *rest = factors
        self.emit_product(node, *first, f"t{i}")
        for x, y in rest:
            if not node.shape:
                self.emit(f"t{i} = t{i} + dot({x}, {y})")
                continue
            second = self.scratch(f"{i}_tb", node.shape)
            self.emit_product(node, x, y, second)
            index = ", ".join(loop_indices(len(node.shape)))
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

    def tangent_reshape(self, i: int, node: Node) -> None:
        self.forward_reshape(i, node, prefix="t")

    def tangent_max(self, i: int, node: Node) -> None:
        """The tangents of the elements equal to each slice's result, each times its share
        (-0.0 at the others), summed as the interpreter's ``reach_sum``: from -0.0,
        pairwise along a row or the whole array, row after row for the columns."""
        (a,) = node.operands
        shares = self.scratch(f"{i}_shares", self.shape(a))
        kind = self.reduction(i, node)
        moved, written = f"t{a}", shares
        if kind == "all":
            moved, written = f"tf{i}", f"sf{i}"
            self.emit(f"{moved} = t{a}.reshape(t{a}.size)")
            self.emit(f"{written} = {shares}.reshape({shares}.size)")
        self.share_loops(
            i, node, lambda at: f"{written}[{at}] = share * {moved}[{at}] if hit else -0.0"
        )
        self.reach_sum(i, node, kind, shares, written)

    def tangent_min(self, i: int, node: Node) -> None:
        self.tangent_max(i, node)

    def tangent_prod(self, i: int, node: Node) -> None:
        """The tangents times the products of the other elements of their slices, summed
        as the interpreter's ``reach_sum`` (as :meth:`tangent_max`'s)."""
        (a,) = node.operands
        terms = self.scratch(f"{i}_terms", self.shape(a))
        kind = self.reduction(i, node)
        moved, written = f"t{a}", terms
        if kind == "all":
            moved, written = f"tf{i}", f"sf{i}"
            self.emit(f"{moved} = t{a}.reshape(t{a}.size)")
            self.emit(f"{written} = {terms}.reshape({terms}.size)")
        self.others_loops(i, node, lambda at: f"{written}[{at}] = others * {moved}[{at}]")
        self.reach_sum(i, node, kind, terms, written)

    def reach_sum(self, i: int, node: Node, kind: str, terms: str, flat: str) -> None:
        """Node ``i``'s tangent: the sum of each slice of ``terms`` (``flat``: read flat) as
        ``reach_sum`` adds them, from -0.0: pairwise along a row or over the whole array,
        row after row down the columns."""
        if kind == "all":
            total = f"-0.0 + pairwise({flat}, np.int64(0), {flat}.size)"
            self.emit(f"{self.reduced(i, node, kind, 't')} = {total}")
        elif kind == "rows":
            self.row_sums(terms, f"t{i}", len(node.shape), start="-0.0")
        else:
            self.emit(f"t{i}[:] = -0.0")
            self.emit(f"for i0 in range({terms}.shape[0]):")
            self.emit(f"for i1 in range({terms}.shape[1]):", 2)
            self.emit(f"{self.reduced(i, node, kind, 't')} += {terms}[i0, i1]", 3)

    def tangent_cumsum(self, i: int, node: Node) -> None:
        self.forward_cumsum(i, node, prefix="t")

    def tangent_concatenate(self, i: int, node: Node) -> None:
        self.forward_concatenate(i, node, prefix="t")

    def tangent_index(self, i: int, node: Node) -> None:
        self.forward_index(i, node, prefix="t")

    def tangent_transpose(self, i: int, node: Node) -> None:
        self.forward_transpose(i, node, prefix="t")

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
        self.emit(f"t{i} = 0.0 + pairwise(w{i}, np.int64(0), w{i}.size)")

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
        totals = [f"pairwise({x}.reshape({x}.size), np.int64(0), {x}.size)" for x in sums]
        self.emit(f"t{i} = " + " + ".join(totals))
