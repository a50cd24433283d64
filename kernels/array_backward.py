"""The backward pass of a generated kernel: each node's contributions to its operands.

In decreasing node order and slot order, as the interpreter's driver: the
first contribution to an adjoint is written into it, a later one is made in
a scratch buffer and added, so the additions happen in the same order.
Derivatives are plain (no strong-zero tests; see ``array_source.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .array_forward import ForwardWriter
from .array_program import Node, Unsupported, loop_indices


class BackwardWriter(ForwardWriter):
    """The gradients (modes grad and vjp) and the backward step of mode hvp, with
    its elementwise second terms: ``backward_<op>`` per kind of node."""

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
        index = ", ".join(loop_indices(len(shape)))
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
        if inside:  # (in mode hvp's second pass no term may reach any operand)
            self.loop(f"v{i}", shape, inside, before)
        for source, j in after:
            if j >= 0:
                self.add_into(j, source)
                continue
            j = -1 - j
            whole = f"(0.0 + pairwise({source}.reshape({source}.size), np.int64(0), {source}.size))"
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
            self.row_sums(source, target, 2)
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
            B = self.at_matrix(node, b, other) if ranks[0] == 3 or ranks[1] == 3 else other
            if ranks == (2, 3) or (ranks == (3, 3) and self.broadcast_stack(node, a)):
                # a matrix (or a stack of one) times a stack: sum G B^T over the stack
                self.summed(
                    self.matrix_of(target, ranks[0], slot),
                    self.shape(j)[-2:],
                    lambda into: f"gemm(False, True, {G}[b_], {B}, {into})",
                    G,
                    node.shape[0],
                )
            elif ranks in ((3, 3), (3, 2)):  # per matrix of the stack: G B^T
                self.emit(f"for b_ in range({target}.shape[0]):")
                self.emit(f"gemm(False, True, {G}[b_], {B}, {target}[b_])", 2)
            elif ranks == (2, 2):
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
            A = self.at_matrix(node, a, other) if ranks[0] == 3 or ranks[1] == 3 else other
            if ranks == (3, 2) or (ranks == (3, 3) and self.broadcast_stack(node, b)):
                # a stack times a matrix (or a stack of one): sum A^T G over the stack
                self.summed(
                    self.matrix_of(target, ranks[1], slot),
                    self.shape(j)[-2:],
                    lambda into: f"gemm(True, False, {A}, {G}[b_], {into})",
                    G,
                    node.shape[0],
                )
            elif ranks in ((3, 3), (2, 3)):  # per matrix of the stack: A^T G
                self.emit(f"for b_ in range({target}.shape[0]):")
                self.emit(f"gemm(True, False, {A}, {G}[b_], {target}[b_])", 2)
            elif ranks == (2, 2):
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

    def matrix_of(self, target: str, rank: int, slot: int) -> str:
        """``target`` as a matrix: itself, or the only matrix of a stack of one (a name
        for the view, emitted here)."""
        if rank == 2:
            return target
        view = f"{target}_m{slot}"
        self.emit(f"{view} = {target}[0]")
        return view

    def summed(
        self,
        target: str,
        shape: tuple[int, ...],
        call: Callable[[str], str],
        stack: str,
        length: int,
    ) -> None:
        """``target`` (a matrix of ``shape``) = the products ``call(into)`` writes for each
        ``b_`` of ``stack`` (an adjoint), added in the stack's order, as the interpreter
        sums a broadcast operand's contributions (from -0.0, which the first leaves as it
        is)."""
        term = self.scratch(f"{stack}_{target}_term", shape)
        if shape == (1, 1):  # NumPy sums a (stack, 1, 1) array as one run: pairwise
            run = self.scratch(f"{stack}_{target}_run", (length,))
            self.emit(f"r_ = {run}.reshape({run}.size)")
            self.emit(f"for b_ in range({stack}.shape[0]):")
            self.emit(call(term), 2)
            self.emit(f"r_[b_] = {term}[0, 0]", 2)
            self.emit(f"{target}[0, 0] = -0.0 + pairwise(r_, np.int64(0), {stack}.shape[0])")
            return
        self.emit(f"{target}[:, :] = -0.0")  # the sum of an empty stack
        self.emit(f"for b_ in range({stack}.shape[0]):")
        self.emit("if b_ == 0:", 2)
        self.emit(call(target), 3)
        self.emit("else:", 2)
        self.emit(call(term), 3)
        self.emit(f"for i0 in range({target}.shape[0]):", 3)
        self.emit(f"for i1 in range({target}.shape[1]):", 4)
        self.emit(f"{target}[i0, i1] += {term}[i0, i1]", 5)

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
        index = ", ".join(loop_indices(len(own)))
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

    def backward_reshape(self, i: int, node: Node) -> None:
        """The adjoint's elements, in C order, in the operand's shape."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_shaped")
        self.copy_flat(self.own(i), target, f"b{self.p.tag}{i}")
        if added:
            self.add_into(a, target)

    def backward_index(self, i: int, node: Node) -> None:
        """The adjoint's elements added, in C order, at the gather map's positions of an
        unreached (-0.0) adjoint: repeated positions add up, as ``np.add.at`` does."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_picked")
        tag = f"b{self.p.tag}ix{i}"
        self.emit(f"{tag}_to = {target}.reshape({target}.size)")
        self.emit(f"for i0 in range({tag}_to.size):")
        self.emit(f"{tag}_to[i0] = -0.0", 2)
        position = self.strided(i, node)
        if position is not None:  # a slice: strided writes, in the map's order
            depth = self.loops(self.own(i), len(node.shape))
            element = ", ".join(loop_indices(len(node.shape)))
            self.emit(f"{tag}_to[{position}] += {self.own(i)}[{element}]", depth)
            if added:
                self.add_into(a, target)
            return
        gather = self.gather(i, node)
        if node.shape:
            self.emit(f"{tag}_from = {self.own(i)}.reshape({self.own(i)}.size)")
            self.emit(f"for i0 in range({tag}_from.size):")
            self.emit(f"{tag}_to[{gather}[i0]] += {tag}_from[i0]", 2)
        else:
            self.emit(f"{tag}_to[{gather}[0]] += {self.own(i)}")
        if added:
            self.add_into(a, target)

    def backward_concatenate(self, i: int, node: Node) -> None:
        """Each operand's part of the adjoint, in the order of the operands."""
        rank = len(node.shape)
        for slot, (j, theirs, mine) in enumerate(self.pieces(node)):
            if not self.needs[j]:
                continue
            target, added = self.sink(j, f"{i}_part{slot}")
            self.unmerged(f"v{j}", rank, f"{target}[{theirs}] = {self.own(i)}[{mine}]")
            if added:
                self.add_into(j, target)

    def backward_max(self, i: int, node: Node) -> None:
        """Each slice's adjoint split evenly among the elements equal to its result (the
        nan elements where it is nan), -0.0 (unreached) at the others."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_shares")
        kind = self.reduction(i, node)
        g = self.reduced(i, node, kind, self.p.array) if node.shape else self.own(i)
        written = target
        if kind == "all":  # the operand read flat
            written = f"bs{self.p.tag}{i}"
            self.emit(f"{written} = {target}.reshape({target}.size)")
        self.share_loops(i, node, lambda at: f"{written}[{at}] = share * {g} if hit else -0.0")
        if added:
            self.add_into(a, target)

    def backward_min(self, i: int, node: Node) -> None:
        self.backward_max(i, node)

    def backward_prod(self, i: int, node: Node) -> None:
        """Each element's adjoint: the product of the other elements of its slice times the
        slice's adjoint (a nan where an exact zero meets an inf sends the call back to the
        interpreter's exact rules)."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_prod")
        kind = self.reduction(i, node)
        g = self.reduced(i, node, kind, self.p.array) if node.shape else self.own(i)
        written = target
        if kind == "all":
            written = f"bp{self.p.tag}{i}"
            self.emit(f"{written} = {target}.reshape({target}.size)")
        self.others_loops(i, node, lambda at: f"{written}[{at}] = others * {g}")
        if added:
            self.add_into(a, target)

    def backward_cumsum(self, i: int, node: Node) -> None:
        """The running sums of the adjoint from the end of the axis, as the interpreter's
        cumsum of the flipped adjoint: each the one after plus the element."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_cumsum")
        here, after, last, depth = self.running(f"v{a}", node, backwards=True)
        g = self.own(i)
        self.emit(
            f"{target}[{here}] = {g}[{here}] if {last} else {target}[{after}] + {g}[{here}]",
            depth,
        )
        if added:
            self.add_into(a, target)

    def backward_transpose(self, i: int, node: Node) -> None:
        """The adjoint's elements with the permutation undone."""
        (a,) = node.operands
        if not self.needs[a]:
            return
        target, added = self.sink(a, f"{i}_moved")
        mine, theirs = self.transposed_index(node)
        self.unmerged(self.own(i), len(node.shape), f"{target}[{theirs}] = {self.own(i)}[{mine}]")
        if added:
            self.add_into(a, target)

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

    def moved_by_softmax(self, i: int, a: int) -> str:
        """Opens a loop over the rows (``i0``): per row, ``P tX`` into a scratch buffer
        and ``inner``, its sum (pairwise); the lines after it at depth 2 run per row."""
        moved = self.scratch(f"{i}_moved", self.shape(a))
        self.emit(f"for i0 in range(v{a}.shape[0]):")
        self.emit(f"for i1 in range(v{a}.shape[1]):", 2)
        self.emit(f"{moved}[i0, i1] = {self.softmax_of(i)} * t{a}[i0, i1]", 3)
        self.emit(f"inner = 0.0 + pairwise({moved}[i0], np.int64(0), {moved}.shape[1])", 2)
        return moved

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
        index = ", ".join(loop_indices(len(node.shape)))
        partial = self.expression(node, "partial", names, slot)
        if self.p is self.first:
            return f"({partial}) * {self.own(i)}[{index}]"
        terms = [f"({partial}) * {self.own(i)}[{index}]"] if self.written[i] else []
        if self.first.written[i]:
            moved = self.second_terms(node, names, slot, node.shape)
            if moved:
                terms.append(f"({moved}) * {self.first_own(i)}[{index}]")
        return " + ".join(terms)
