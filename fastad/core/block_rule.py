"""The base of the block-op registry: what one rule on arrays gives.

A :class:`BlockRule` gives a block op's shape rule, its forward (the one
function that computes the op's value, both while recording and in a
replay, so the two agree bit for bit), its vector-Jacobian product, its
Jacobian-vector product and, where it has one, its second-order rule.
Operands are a tuple of any length (``matmul`` takes ``(A, B)``). The
rules themselves live by family (``elementwise_rules``, ``product_rules``,
``reduction_rules``, ``shape_rules``, ``loss_rules``); ``block_rules`` is the
registry that maps opcodes to them.

Rules keep strong zeros (``fastad/core/reach.py``): an adjoint or tangent
element nothing reached is ``UNREACHED`` (-0.0) and sends nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastad.core.reach import add_sent
from fastad.kernels import optable

if TYPE_CHECKING:
    from fastad.util.hints import RuleValue

Shape = tuple[int, ...]
Values = tuple[Any, ...]
Needs = tuple[int, ...] | None
"""Per operand, a ``reach.Need`` (or a bool: True is ``ALL``): whether its
contribution is wanted (None: all are, with their reach). A VJP may skip the
work for an operand that is not (the driver discards what it sends), and a
product may leave a leaf's zeros unsettled (``Need.VALUES``)."""

SECOND_ORDER: list[str] = []
"""The block ops with a second-order rule, by name (the elementwise ops as one entry),
filled by the registry (``fastad/core/block_rules.py``) from its rules."""


class BlockRule:
    """One block op: shape rule, forward, VJP and JVP.

    ``values`` are the operands' values (arrays, or floats for scalar
    nodes), ``out`` the node's value, ``params`` what the recorder stored
    (an axis, a shape, an index key; None for most ops). A shape of ``()``
    means the node is a scalar (a ``Var``): its value is a float.
    """

    name: str
    code: int
    arity: int

    def __init__(self, name: str) -> None:
        op = optable.BLOCK_BY_NAME.get(name) or optable.BY_NAME[name]
        self.name, self.code, self.arity = op.name, op.code, op.arity

    def __repr__(self) -> str:
        return f"<block rule {self.name!r} (opcode {self.code})>"

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        """The output shape for operands of ``shapes``; raise ``ValueError`` if they do not fit."""
        raise NotImplementedError

    def forward(self, values: Values, params: object) -> RuleValue:
        """The node's value; with :attr:`saves`, ``(value, saved)``."""
        raise NotImplementedError

    saves = False
    """The forward returns ``(value, saved)``: what the VJP would otherwise
    compute again (a cross-entropy's log-softmax), kept beside the node for
    the backward sweep (:meth:`vjp_saved`)."""

    def value_of(self, values: Values, params: object) -> RuleValue:
        """The node's value alone, what :meth:`forward` gives without what it saves."""
        result = self.forward(values, params)
        return result[0] if self.saves else result

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        """One contribution per operand (None: nothing for it), from the output adjoint ``g``.

        ``needs`` says which operands' contributions are wanted (None: all);
        the work for the others may be skipped (their entry is then None).
        """
        raise NotImplementedError

    def vjp_saved(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        params: object,
        needs: Needs,
        saved: tuple[Any, ...],
    ) -> Values:
        """:meth:`vjp` reading what the forward saved (a rule with :attr:`saves`).

        The same contributions, bit for bit: ``saved`` is what the VJP would
        compute again. A rule that saves nothing has only :meth:`vjp`.
        """
        raise NotImplementedError(f"the block op {self.name!r} saves nothing for its VJP")

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        """The output tangent from the operands' (None: nothing reached that operand)."""
        raise NotImplementedError

    linear_adjoint = False
    """The VJP is linear in ``g`` and locally constant in the values (a reshape,
    a sum, an index): its tangent is the VJP of ``h``, and that is its
    second-order rule."""

    def second_vjp(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: Values,
        params: object,
        needs: Needs = None,
    ) -> Values:
        """The tangent of :meth:`vjp` (forward-over-reverse), one contribution per operand.

        ``g`` is the output's adjoint and ``h`` that adjoint's tangent,
        ``tangents`` the operands' tangents (None for any of them: nothing
        reached it). The tangent of ``vjp(values, out, g)`` along them:
        ``vjp(values, out, h)`` plus the VJP's own change with the values,
        :meth:`vjp_change` (nothing for a :attr:`linear_adjoint` rule).
        """
        if not self.linear_adjoint and type(self).vjp_change is BlockRule.vjp_change:
            raise NotImplementedError(
                f"the block op {self.name!r} (opcode {self.code}) has no second-order rule "
                "yet, so no Hessian-vector product can pass through it: record this part "
                "with scalar ops or with blocks that have one "
                f"({', '.join(SECOND_ORDER)})"
            )
        sent = self.vjp(values, out, h, params, needs) if h is not None else (None,) * len(values)
        if self.linear_adjoint or g is None or all(t is None for t in tangents):
            return sent
        changes = self.vjp_change(values, out, g, tangents, params)
        return tuple(add_sent(s, c) for s, c in zip(sent, changes, strict=True))

    def vjp_change(
        self, values: Values, out: RuleValue, g: RuleValue, tangents: Values, params: Any
    ) -> Values:
        """How :meth:`vjp`'s contributions at the adjoint ``g`` move with the values along
        ``tangents`` (some of them given): one per operand, None for nothing. With
        :meth:`vjp`, it is the rule's second-order rule (:meth:`second_vjp`)."""
        raise NotImplementedError
