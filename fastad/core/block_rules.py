"""The block-op registry: opcode -> its rule on arrays.

:func:`rule` is the lookup the sweep driver uses; an opcode without an
entry raises ``NotImplementedError`` naming it, never a silent zero
gradient. The rules live by family: ``block_rule`` (the base class),
``elementwise_rules``, ``product_rules``, ``reduction_rules``,
``shape_rules``, ``loss_rules``, ``linalg_rules``.

Adding a block op: its ``BlockOp`` row in ``kernels/optable.py``, a class
in the module of its family registered in ``RULES``, a recording function
(``fastad/eager/blocks.py`` or a ``Block`` method) and a row in
``tests/test_registry.py``'s table.
"""

from __future__ import annotations

from fastad.core.block_rule import SECOND_ORDER, BlockRule
from fastad.core.elementwise_rules import Elementwise
from fastad.core.linalg_rules import Cholesky, Det, Eigh, Inv, SignDet, Solve, SolveTriangular
from fastad.core.loss_rules import CrossEntropy, MseLoss, Softmax
from fastad.core.product_rules import Linear, Matmul
from fastad.core.reduction_rules import Cumsum, Extremum, Prod, Reduce
from fastad.core.shape_rules import Concatenate, Index, Reshape, Transpose
from fastad.kernels import optable

RULES: dict[int, BlockRule] = {
    entry.code: entry
    for entry in (
        *(Elementwise(op.name) for op in optable.OPS if op.arity > 0),
        Matmul("matmul"),
        Reduce("sum"),
        Reduce("mean"),
        Extremum("max"),
        Extremum("min"),
        Prod("prod"),
        Cumsum("cumsum"),
        Reshape("reshape"),
        Transpose("transpose"),
        Concatenate("concatenate"),
        Index("index"),
        Linear("linear"),
        Linear("linear_relu"),
        MseLoss("mse_loss"),
        Softmax("logsumexp"),
        Softmax("softmax"),
        Softmax("log_softmax"),
        CrossEntropy("cross_entropy"),
        Cholesky("cholesky"),
        Solve("solve"),
        SolveTriangular("solve_triangular"),
        Inv("inv"),
        Det("det"),
        Det("logabsdet"),
        SignDet("sign_det"),
        Eigh("eigh"),
    )
}
"""Opcode -> its block rule: every scalar op with operands (elementwise) and every block op."""


def rule(code: int) -> BlockRule:
    """The block rule of ``code``; ``NotImplementedError`` naming the op if it has none."""
    entry = RULES.get(code)
    if entry is None:
        op = optable.ALL.get(code)
        name = op.name if op is not None else "unknown"
        raise NotImplementedError(
            f"no block rule for the op {name!r} (opcode {code}): add its entry to "
            "fastad/core/block_rules.py's RULES"
        )
    return entry


def second_order_ops() -> list[str]:
    """The block ops that have a second-order rule, by name (the elementwise ops as one
    entry), read from the registry."""
    found = [
        rule.name
        for rule in RULES.values()
        if not isinstance(rule, Elementwise)
        and (
            rule.linear_adjoint
            or type(rule).second_vjp is not BlockRule.second_vjp
            or type(rule).vjp_change is not BlockRule.vjp_change
        )
    ]
    return ["elementwise ops", *found]


SECOND_ORDER.extend(second_order_ops())
