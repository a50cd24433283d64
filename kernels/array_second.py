"""Forward-over-reverse in a generated kernel (mode hvp): the gradient's tangent.

Per node in reverse, the gradient's step (adjoints ``g<i>``/``d<i>``) and its
tangent (``k<i>``: ``partial * k + (s_aa ta + s_ab tb) * g`` per element,
``K B^T + G tB^T`` and ``A^T K + tA^T G`` for products, a rule's terms summed
before they are sent, as ``second_vjp`` does), whose inputs' values are ``H v``.
"""

from __future__ import annotations

from collections.abc import Callable

from .array_backward import BackwardWriter
from .array_program import Node, Unsupported


class SecondWriter(BackwardWriter):
    """The second pass (mode hvp): ``second_order`` per node, beside the backward step."""

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
        linear = (
            *("sum", "mean", "reshape", "transpose", "index", "concatenate", "max", "min"),
            "cumsum",
        )
        rows = ("log_softmax", "softmax", "logsumexp", "cross_entropy")
        own_rules = ("scalar", "elementwise", "matmul", "linear", "linear_relu", "mse_loss", "prod")
        if op not in (*own_rules, *linear, *rows):
            raise Unsupported(
                f"the block op {op!r} has no second-order rule in generated code (the "
                "interpreter's runs)"
            )
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
        elif op == "mse_loss":
            self.second_mse_loss(i, node)
        elif op == "prod":
            self.second_prod(i, node)
        elif op == "cross_entropy":
            self.second_cross_entropy(i, node)
        elif op in rows:
            self.second_softmax(i, node)
        elif self.written[i]:  # linear ops: their VJP of k
            getattr(self, f"backward_{op}")(i, node)

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

    def second_mse_loss(self, i: int, node: Node) -> None:
        """``dY = sk d + m`` and ``dT = -(sk d) + (-1) m``, with ``d = Y - T``, ``sk = 2 k /
        size`` and ``m = sg tY + (-sg) tT`` (``sg = 2 g / size``): the VJP of k, then the
        change of the VJP of g, in the interpreter's order."""
        Y, T = node.operands
        on_k = self.written[i]
        moving = [(j, sign) for j, sign in ((Y, ""), (T, "-")) if self.moves[j]]
        on_g = self.first.written[i] and bool(moving)
        sinks = []  # named by slot: Y and T may be one node (mse_loss(X, X))
        for slot, (j, sign) in enumerate(((Y, ""), (T, "-"))):
            if self.needs[j] and (on_k or on_g):
                target, added = self.sink(j, f"{i}_{slot}")
                self.emit(f"n{slot}_{i} = {target}.reshape({target}.size)")
                sinks.append((slot, j, target, added, sign))
        if not sinks:
            return
        if on_k:
            self.emit(f"sk = 2.0 * {self.own(i)} / y{i}.size")
        if on_g:
            self.emit(f"sg = 2.0 * {self.first_own(i)} / y{i}.size")
            for j, _ in moving:
                self.emit(f"u{j}_{i} = t{j}.reshape(t{j}.size)")
        self.emit(f"for i0 in range(y{i}.size):")
        if on_g:
            terms = [f"({sign}sg) * u{j}_{i}[i0]" for j, sign in moving]
            self.emit(f"m = {' + '.join(terms)}", 2)
        if on_k:
            self.emit(f"d = y{i}[i0] - q{i}[i0]", 2)
        for slot, _, _, _, sign in sinks:
            parts = [f"{sign}(sk * d)"] if on_k else []
            if on_g:
                parts.append("m" if slot == 0 else "(-1.0) * m")
            self.emit(f"n{slot}_{i}[i0] = {' + '.join(parts)}", 2)
        for _, j, target, added, _ in sinks:
            if added:
                self.add_into(j, target)

    def second_prod(self, i: int, node: Node) -> None:
        """Each element's ``others * k + d(others) * g`` per slice, ``d(others)`` the
        tangent of the product of the other elements: prefix and suffix products carried
        with their tangents (dual numbers), never a division; exactly 0 where two others
        are zero and none is nan (the interpreter's ``vjp_change``)."""
        (a,) = node.operands
        on_k = self.written[i]
        on_g = self.first.written[i] and self.moves[a]
        if not self.needs[a] or not (on_k or on_g):
            return
        target, added = self.sink(a, f"{i}_prod")
        kind = self.reduction(i, node)
        written = target
        if kind == "all":
            written = f"bp{self.p.tag}{i}"
            self.emit(f"{written} = {target}.reshape({target}.size)")
        parts = []
        if on_k:
            k = self.reduced(i, node, kind, self.p.array) if node.shape else self.own(i)
            parts.append(f"others * {k}")
        if on_g:
            g = self.reduced(i, node, kind, self.first.array) if node.shape else self.first_own(i)
            parts.append(f"d_others * {g}")
        self.others_loops(i, node, lambda at: f"{written}[{at}] = {' + '.join(parts)}", on_g)
        if added:
            self.add_into(a, target)

    # The softmax family and the cross-entropy, per row of the logits X: the VJP of k
    # (the backward step with k for g) plus the change of the VJP of g along X's tangent,
    # which moves the softmax P by tP = P tX + (-P) sum(P tX) (the interpreter's
    # ``vjp_change``). Plain, as the rest of the pass; a row's sums run in order.
    def softmax_rows(self, i: int, a: int, tangent: bool) -> str | None:
        """Opens the loop over the rows (``i0``); with ``tangent``, the row's ``tP`` into
        a scratch buffer first (its name; None without)."""
        if not tangent:
            self.emit(f"for i0 in range(v{a}.shape[0]):")
            return None
        moved = self.moved_by_softmax(i, a)  # P tX, and its sum ``inner``
        tP = self.scratch(f"{i}_tp", self.shape(a))
        self.emit(f"for i1 in range(v{a}.shape[1]):", 2)
        self.emit(f"{tP}[i0, i1] = {moved}[i0, i1] + (-{self.softmax_of(i)}) * inner", 3)
        return tP

    def row_contribution(
        self, j: int, rows: str, target: str, added: bool, parts: list[str]
    ) -> None:
        """Inside the loop over the rows of ``rows``: ``target``'s row, the sum of
        ``parts``; then, where ``target`` is a scratch buffer, added to ``j``'s adjoint."""
        self.emit(f"for i1 in range({rows}.shape[1]):", 2)
        self.emit(f"{target}[i0, i1] = {' + '.join(parts)}", 3)
        if added:
            self.add_into(j, target)

    def row_sum(self, name: str, a: int, term: str) -> None:
        """``name``: the sum of ``term`` over the row ``i0`` (in order), inside its loop."""
        self.emit(f"{name} = 0.0", 2)
        self.emit(f"for i1 in range(v{a}.shape[1]):", 2)
        self.emit(f"{name} += {term}", 3)

    def second_softmax(self, i: int, node: Node) -> None:
        """``dX`` of log_softmax ``K - P sum(K)`` plus ``-tP sum(G)``; of softmax
        ``P (K - sum(K P))`` plus ``tP (G - sum(G P)) + (-P) sum(G tP)``; of logsumexp
        ``k P`` plus ``g tP``, per row."""
        (a,) = node.operands
        on_k = self.written[i]
        on_g = self.first.written[i] and self.moves[a]
        if not self.needs[a] or not (on_k or on_g):
            return
        target, added = self.sink(a, f"{i}_dx")
        K, G, P = self.own(i), self.first_own(i), self.softmax_of(i)
        if node.op == "logsumexp":  # one adjoint per row: (rows,) or (rows, 1)
            for on, name, adjoint in ((on_k, "rk", K), (on_g, "rg", G)):
                if on:
                    self.emit(f"{name}{i} = {adjoint}.reshape({adjoint}.size)")
        tP = self.softmax_rows(i, a, on_g)
        parts = []
        if node.op == "logsumexp":
            if on_k:
                parts.append(f"rk{i}[i0] * {P}")
            if on_g:
                parts.append(f"rg{i}[i0] * {tP}[i0, i1]")
        elif node.op == "log_softmax":
            if on_k:
                self.row_sum("sk", a, f"{K}[i0, i1]")
                parts.append(f"({K}[i0, i1] - {P} * sk)")
            if on_g:
                self.row_sum("sg", a, f"{G}[i0, i1]")
                parts.append(f"(-sg) * {tP}[i0, i1]")
        else:  # softmax
            if on_k:
                self.row_sum("sk", a, f"{K}[i0, i1] * {P}")
                parts.append(f"{P} * ({K}[i0, i1] - sk)")
            if on_g:
                self.row_sum("sgp", a, f"{G}[i0, i1] * {P}")
                self.row_sum("sgt", a, f"{G}[i0, i1] * {tP}[i0, i1]")
                parts.append(f"(({G}[i0, i1] - sgp) * {tP}[i0, i1] + (-{P}) * sgt)")
        self.row_contribution(a, f"v{a}", target, added, parts)

    def second_cross_entropy(self, i: int, node: Node) -> None:
        """With ``wk``, ``wg`` the weights of k and g per sample: labels, ``dX = wk (P -
        onehot) + wg tP``; probabilities T, ``dX = wk (P sum(T) - T) + wg sum(T) tP + wg
        (P sum(tT) - tT)`` and ``dT = -wk log_softmax(X) + (-wg) (tX - sum(P tX))``."""
        X, T = node.operands
        labels, mean = node.params
        a = f"v{X}"
        on_k, on_g = self.written[i], self.first.written[i]
        moves_x = on_g and self.moves[X]
        moves_t = on_g and not labels and self.moves[T]
        weight = f" * (1.0 / {a}.shape[0])" if mean else ""
        if on_k:
            self.emit(f"wk = {self.own(i)}{weight}")
        if on_g:
            self.emit(f"wg = {self.first_own(i)}{weight}")
        P = self.softmax_of(i)
        if self.needs[X] and (on_k or moves_x or moves_t):
            target, added = self.sink(X, f"{i}_dx")
            tP = self.softmax_rows(i, X, moves_x)
            parts = []
            if labels:
                self.emit(f"c = int(v{T}[i0])", 2)
                if on_k:
                    parts.append(f"(wk * ({P} - 1.0) if i1 == c else wk * {P})")
                if moves_x:
                    parts.append(f"wg * {tP}[i0, i1]")
            else:
                self.row_sum("total", X, f"v{T}[i0, i1]")
                if on_k:
                    parts.append(f"wk * ({P} * total - v{T}[i0, i1])")
                if moves_x:
                    parts.append(f"(wg * total) * {tP}[i0, i1]")
                if moves_t:
                    self.row_sum("stt", X, f"t{T}[i0, i1]")
                    parts.append(f"wg * ({P} * stt + (-1.0) * t{T}[i0, i1])")
            self.row_contribution(X, a, target, added, parts)
        if not labels and self.needs[T] and (on_k or moves_x):
            target, added = self.sink(T, f"{i}_dt")
            if moves_x:
                self.moved_by_softmax(i, X)
            else:
                self.emit(f"for i0 in range({a}.shape[0]):")
            parts = []
            if on_k:
                parts.append(f"-(({a}[i0, i1] - s_{i}_max[i0]) - s_{i}_log[i0]) * wk")
            if moves_x:
                parts.append(f"(-wg) * (t{X}[i0, i1] + (-1.0) * inner)")
            self.row_contribution(T, a, target, added, parts)
