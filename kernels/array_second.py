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
        if op not in ("scalar", "elementwise", "matmul", "linear", "linear_relu", *linear):
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
