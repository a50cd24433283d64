"""The op table: every scalar primitive of fastad, one row each.

A row gives the opcode, the name (``fa.<name>`` and error messages), the
symbol the node table prints, the arity, the forward rule and one
local-derivative rule per operand. Rules are expressions in a small dialect
that is valid both in Python and in Numba-compiled code:

- ``a`` and ``b`` are the operand values, ``out`` is the node's own value as
  the forward sweep saved it (rules reuse it where it is cheaper and more
  accurate: ``exp`` gives ``out``, ``tanh`` gives ``1 - out*out``);
- functions are those of :mod:`math` imported below and the helpers defined
  in this module. Helpers must be total (never raise for any float input,
  ``nan`` and ``inf`` included) and use only ``math``, so the same source
  compiles under Numba.

Everything else follows from this table: the generated modules of
``kernels/`` (``python -m fastad.kernels._generate``: ``point_rules.py``
with the compiled ``forward_value`` and ``local_partials`` dispatch, the
lane and elementwise-map rules, ``rule_helpers.py``), and the front end builds
its eager evaluators, its elementwise block rules, the public functions
(``fa.<name>`` for rows with a ``doc``), the optimiser's commutative ops and
the compiled functions' branch reports from the same rows. Adding an op is
one row here plus one row in the op test table (``tests/test_ops.py``); a
test fails if a generated module is out of date or an opcode lacks any
part.

Exact zeros are strong: a local derivative or an adjoint (or tangent) that is
exactly zero contributes exactly zero in every sweep, never ``0 * inf = nan``.

Subgradients at kinks are fixed: ``relu'(0) = 0`` and ``abs'(0) = 0`` (the
minimum-norm subgradient, as PyTorch; JAX uses 1 for abs), and at a tie
``maximum``/``minimum`` send half the gradient to each operand (as PyTorch and
JAX do).
"""

import math as _math
from collections.abc import Callable
from math import (  # noqa: F401  (rule namespace)
    atan,
    atan2,
    cos,
    cosh,
    erf,
    exp,
    expm1,
    fabs,
    inf,
    log,
    log1p,
    nan,
    pow,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)
from typing import NamedTuple

MATH_NAMES: tuple[str, ...] = tuple(
    sorted(name for name, value in dict(globals()).items() if getattr(_math, name, 0) is value)
)
"""The :mod:`math` names the rules may call: those imported above, the one list of them
(the eager rules, the compiled sweeps and generated code take theirs from it)."""


class Op(NamedTuple):
    """One primitive: everything the recorder, the sweeps and the front end need to know.

    ``commutative``: ``op(a, b) == op(b, a)`` bit for bit, signed zeros
    included (the optimiser merges ``a + b`` with ``b + a``; ``maximum`` is
    not: ``maximum(0.0, -0.0)`` is -0.0, ``maximum(-0.0, 0.0)`` is 0.0).
    ``comparison``: the op gives 1.0 or 0.0 with zero derivatives (a branch
    on it is a guard of a compiled function, reported as ``a < b``).
    ``doc``: the docstring of the public function ``fa.<name>``; ops without
    one are reached through operators only.
    ``second``: the second local partials, ``(d2/da2,)`` for a unary op and
    ``(d2/da2, d2/da db, d2/db2)`` for a binary one, in the same dialect;
    zero where the op is linear, and the documented values at kinks
    (``relu'' = abs'' = 0``, ties of ``maximum``/``minimum`` 0).
    """

    code: int
    name: str
    symbol: str
    arity: int
    value: str
    partials: tuple[str, ...]
    commutative: bool = False
    comparison: bool = False
    doc: str = ""
    second: tuple[str, ...] | None = None


def sigmoid(a: float) -> float:
    # One exp of -|a| never overflows; then 1/(1+e) for a >= 0, e/(1+e) below.
    # The select compiles without a branch around exp (measured 2x faster in
    # lanes than two branches each calling exp), and picking the numerator
    # first leaves one division, not two: the same bits, sooner.
    e = exp(-fabs(a))
    top = 1.0 if a >= 0.0 else e
    return top / (1.0 + e)


def softplus(a: float) -> float:
    # log(1 + exp(a)) = max(a, 0) + log1p(exp(-|a|)): exp never overflows, and
    # nan propagates (nan > 0 is False, then log1p(exp(nan)) is nan).
    return (a if a > 0.0 else 0.0) + log1p(exp(-fabs(a)))


def atan2_partial(top: float, a: float, b: float) -> float:
    # top / (a*a + b*b), the partials of atan2(a, b), scaled by the larger
    # operand so the squares neither overflow (|a| > 1e154) nor underflow
    # (both < 1e-154). At (0, 0) the derivative is undefined: nan.
    if a != a or b != b:
        return a + b  # nan in, nan out
    big = fabs(a) if fabs(a) >= fabs(b) else fabs(b)
    if big == 0.0:
        return nan
    if big == inf:  # the limit is 0 unless both are infinite
        if fabs(a) == inf and fabs(b) == inf:
            return nan
        return 0.0 / top if fabs(top) == inf else top / big
    x, y = a / big, b / big
    return (top / big) / (big * (x * x + y * y))


def atan2_curvature(a: float, b: float) -> float:
    # 2ab / (a*a + b*b)**2 = 2 (a / r**2) (b / r**2): d2 atan2(a, b) / db2, and
    # minus d2 / da2. From the overflow-safe a / r**2 and b / r**2 (the
    # numerator 2ab alone would overflow above 1e154); nan at (0, 0).
    return 2.0 * atan2_partial(a, a, b) * atan2_partial(b, a, b)


def atan2_second_mixed(a: float, b: float) -> float:
    # (a*a - b*b) / (a*a + b*b)**2 = (a/r**2 - b/r**2)(a/r**2 + b/r**2): d2 atan2 / da db.
    x, y = atan2_partial(a, a, b), atan2_partial(b, a, b)
    return (x - y) * (x + y)


def relu(a: float) -> float:
    # Written so that nan propagates (nan <= 0 is False), as NumPy's maximum.
    return 0.0 if a <= 0.0 else a


def relu_partial(a: float) -> float:
    # relu'(0) = 0 by convention (the minimum-norm subgradient); nan in, nan out.
    return 1.0 if a > 0.0 else (0.0 if a <= 0.0 else a)


def sign(a: float) -> float:
    # abs'(0) = 0: the minimum-norm subgradient. nan in, nan out.
    if a > 0.0:
        return 1.0
    if a < 0.0:
        return -1.0
    return 0.0 if a == 0.0 else a


def maximum(a: float, b: float) -> float:
    # NumPy semantics: a nan in either operand gives nan.
    return a if (a > b or a != a) else b


def minimum(a: float, b: float) -> float:
    return a if (a < b or a != a) else b


def max_partial(a: float, b: float) -> float:
    # d maximum(a, b) / d a; ties split the gradient evenly.
    return 1.0 if a > b else (0.5 if a == b else 0.0)


def pow_partial_base(a: float, b: float) -> float:
    # d a**b / d a = b * a**(b-1); exactly 0 for b == 0 (a**0 is constant),
    # where the formula would give 0 * inf = nan at a = 0.
    return 0.0 if b == 0.0 else b * pow(a, b - 1.0)


def pow_partial_exponent(a: float, b: float, out: float) -> float:
    # d a**b / d b = a**b * log(a). At a == 0 with b > 0 the function is
    # constant 0 in b, where the formula would give 0 * -inf = nan; at
    # a == 0, b == 0 it would give 1 * -inf. Both are 0, as in PyTorch, JAX
    # and autograd (0**b is 0 for b > 0 and 1 at b = 0: no finite slope
    # from the right, and b < 0 is inf).
    return 0.0 if (a == 0.0 and b >= 0.0) else out * log(a)


def pow_second_base(a: float, b: float) -> float:
    # d2 a**b / d a2 = b (b - 1) a**(b - 2); exactly 0 for b == 0 and b == 1,
    # where the first partial is constant in a (0 * inf = nan at a = 0). The
    # square's is 2.0 without a libm call: pow(a, 0.0) is 1.0 for every a,
    # nan included (C99 F.9.4.4), so the bits are the formula's.
    # b (b - 1) first could overflow where a**(b - 2) is 0: inf * 0 = nan.
    if b == 2.0:
        return 2.0
    return 0.0 if (b == 0.0 or b == 1.0) else b * pow(a, b - 2.0) * (b - 1.0)


def pow_second_mixed(a: float, b: float) -> float:
    # d2 a**b / d a d b = a**(b - 1) (1 + b log a). At a == 0 with b > 1 the
    # first partial b a**(b - 1) is 0 for all such b: 0, where the formula
    # would give 0 * -inf = nan; so would an a**(b - 1) that underflows to 0
    # beside a b log(a) that overflows (the product's true value is below
    # 1e-16 there).
    if a == 0.0 and b > 1.0:
        return 0.0
    power = pow(a, b - 1.0)
    return 0.0 if power == 0.0 else power * (1.0 + b * log(a))


def pow_second_exponent(a: float, b: float, out: float) -> float:
    # d2 a**b / d b2 = a**b log(a)**2; 0 at a == 0, b >= 0, as the first partial.
    return 0.0 if (a == 0.0 and b >= 0.0) else out * log(a) * log(a)


HELPERS: tuple[Callable[..., float], ...] = (
    sigmoid,
    softplus,
    atan2_partial,
    atan2_curvature,
    atan2_second_mixed,
    relu,
    relu_partial,
    sign,
    maximum,
    minimum,
    max_partial,
    pow_partial_base,
    pow_partial_exponent,
    pow_second_base,
    pow_second_mixed,
    pow_second_exponent,
)

# fmt: off
#  code  name       symbol     arity  forward          d/da                         d/db
OPS = (
    Op(0,  "input",   "leaf",    0, "",               ()),
    Op(1,  "const",   "const",   0, "",               ()),
    Op(2,  "add",     "+",       2, "a + b",          ("1.0", "1.0"), commutative=True,
       second=("0.0", "0.0", "0.0")),
    Op(3,  "sub",     "-",       2, "a - b",          ("1.0", "-1.0"),
       second=("0.0", "0.0", "0.0")),
    Op(4,  "mul",     "*",       2, "a * b",          ("b", "a"), commutative=True,
       second=("0.0", "1.0", "0.0")),
    Op(5,  "div",     "/",       2, "a / b",          ("1.0 / b", "-out / b"),
       # Divided twice, not by b * b, which under- or overflows first.
       second=("0.0", "-1.0 / b / b", "2.0 * out / b / b")),
    Op(6,  "neg",     "neg",     1, "-a",             ("-1.0",),
       second=("0.0",)),
    Op(7,  "pow",     "**",      2, "pow(a, b)",      ("pow_partial_base(a, b)",
                                                       "pow_partial_exponent(a, b, out)"),
       second=("pow_second_base(a, b)", "pow_second_mixed(a, b)",
               "pow_second_exponent(a, b, out)")),
    Op(8,  "exp",     "exp",     1, "exp(a)",         ("out",),
       doc="e**x. Derivative: the saved output.",
       second=("out",)),
    Op(9,  "log",     "log",     1, "log(a)",         ("1.0 / a",),
       doc="Natural logarithm; log(0) = -inf, log(x < 0) = nan.",
       second=("-1.0 / a / a",)),
    Op(10, "sqrt",    "sqrt",    1, "sqrt(a)",        ("0.5 / out",),
       doc="Square root; sqrt(x < 0) = nan. Derivative 0.5 / output (inf at 0).",
       second=("-0.25 / out / out / out",)),
    Op(11, "sin",     "sin",     1, "sin(a)",         ("cos(a)",), doc="Sine.",
       second=("-out",)),
    Op(12, "cos",     "cos",     1, "cos(a)",         ("-sin(a)",), doc="Cosine.",
       second=("-out",)),
    Op(13, "tanh",    "tanh",    1, "tanh(a)",        ("1.0 - out * out",),
       doc="Hyperbolic tangent. Derivative 1 - output**2, from the saved output.",
       second=("-2.0 * out * (1.0 - out * out)",)),
    Op(14, "sigmoid", "sigmoid", 1, "sigmoid(a)",     ("out * (1.0 - out)",),
       doc="Logistic function 1 / (1 + exp(-x)), overflow-free. Derivative out * (1 - out).",
       second=("out * (1.0 - out) * (1.0 - 2.0 * out)",)),
    Op(15, "relu",    "relu",    1, "relu(a)",        ("relu_partial(a)",),
       doc="max(x, 0), nan propagating. Subgradient relu'(0) = 0.",
       second=("0.0",)),
    Op(16, "abs",     "abs",     1, "fabs(a)",        ("sign(a)",),
       doc="|x|. Subgradient abs'(0) = 0 (minimum norm, as PyTorch; JAX uses 1).",
       second=("0.0",)),
    Op(17, "maximum", "maximum", 2, "maximum(a, b)",  ("max_partial(a, b)", "max_partial(b, a)"),
       doc="Maximum, NumPy nan semantics; at a tie each side gets half the gradient.",
       second=("0.0", "0.0", "0.0")),
    Op(18, "minimum", "minimum", 2, "minimum(a, b)",  ("max_partial(b, a)", "max_partial(a, b)"),
       doc="Minimum, NumPy nan semantics; at a tie each side gets half the gradient.",
       second=("0.0", "0.0", "0.0")),
    # Comparisons give 1.0 or 0.0 and have zero derivatives; `x > y` records one.
    Op(19, "lt",      "<",       2, "1.0 if a < b else 0.0",  ("0.0", "0.0"), comparison=True,
       second=("0.0", "0.0", "0.0")),
    Op(20, "le",      "<=",      2, "1.0 if a <= b else 0.0", ("0.0", "0.0"), comparison=True,
       second=("0.0", "0.0", "0.0")),
    Op(21, "gt",      ">",       2, "1.0 if a > b else 0.0",  ("0.0", "0.0"), comparison=True,
       second=("0.0", "0.0", "0.0")),
    Op(22, "ge",      ">=",      2, "1.0 if a >= b else 0.0", ("0.0", "0.0"), comparison=True,
       second=("0.0", "0.0", "0.0")),
    Op(23, "eq",      "==",      2, "1.0 if a == b else 0.0", ("0.0", "0.0"), comparison=True,
       commutative=True,
       second=("0.0", "0.0", "0.0")),
    Op(24, "ne",      "!=",      2, "1.0 if a != b else 0.0", ("0.0", "0.0"), comparison=True,
       commutative=True,
       second=("0.0", "0.0", "0.0")),
    # fa.where(c, x, y) records pick(c, x) + pick_not(c, y). The side not taken
    # is -0.0, the exact identity of +, and gets an exactly zero derivative, so
    # its value (inf, nan) never reaches the result or the gradient.
    Op(25, "pick",    "pick",    2, "b if a != 0.0 else -0.0",
                                  ("0.0", "1.0 if a != 0.0 else 0.0"),
       second=("0.0", "0.0", "0.0")),
    Op(26, "pick_not", "pick_not", 2, "-0.0 if a != 0.0 else b",
                                  ("0.0", "0.0 if a != 0.0 else 1.0"),
       second=("0.0", "0.0", "0.0")),
    Op(27, "log1p",   "log1p",   1, "log1p(a)",       ("1.0 / (1.0 + a)",),
       doc="log(1 + x), accurate near 0; log1p(-1) = -inf. Derivative 1 / (1 + x).",
       second=("-1.0 / (1.0 + a) / (1.0 + a)",)),
    Op(28, "expm1",   "expm1",   1, "expm1(a)",       ("exp(a)",),
       doc="exp(x) - 1, accurate near 0. Derivative exp(x).",
       second=("exp(a)",)),
    Op(29, "tan",     "tan",     1, "tan(a)",         ("1.0 + out * out",),
       doc="Tangent. Derivative 1 + tan(x)**2, from the saved output.",
       second=("2.0 * out * (1.0 + out * out)",)),
    Op(30, "arctan",  "arctan",  1, "atan(a)",        ("1.0 / (1.0 + a * a)",),
       doc="Inverse tangent, in (-pi/2, pi/2). Derivative 1 / (1 + x**2).",
       second=("-2.0 * a / (1.0 + a * a) / (1.0 + a * a)",)),
    Op(31, "arctan2", "arctan2", 2, "atan2(a, b)",    ("atan2_partial(b, a, b)",
                                                       "-atan2_partial(a, a, b)"),
       doc="The angle of the point (x2, x1) = atan2(x1, x2), NumPy's argument order;"
           " the derivatives are nan at (0, 0).",
       # f_aa = -2ab / r**4, f_ab = (a**2 - b**2) / r**4, f_bb = 2ab / r**4, with
       # r**2 = a**2 + b**2: products of a / r**2 and b / r**2, each from the
       # overflow-safe helper (a numerator 2ab would overflow above 1e154).
       second=("-atan2_curvature(a, b)", "atan2_second_mixed(a, b)",
               "atan2_curvature(a, b)")),
    Op(32, "sinh",    "sinh",    1, "sinh(a)",        ("cosh(a)",), doc="Hyperbolic sine.",
       second=("out",)),
    Op(33, "cosh",    "cosh",    1, "cosh(a)",        ("sinh(a)",), doc="Hyperbolic cosine.",
       second=("out",)),
    Op(34, "erf",     "erf",     1, "erf(a)",         ("1.1283791670955126 * exp(-a * a)",),
       doc="The error function. Derivative 2 / sqrt(pi) * exp(-x**2).",
       second=("-2.2567583341910252 * a * exp(-a * a)",)),
    Op(35, "softplus", "softplus", 1, "softplus(a)",  ("sigmoid(a)",),
       doc="log(1 + exp(x)), overflow-free at any x. Derivative sigmoid(x).",
       # sigmoid(a) sigmoid(-a), not sigmoid(a) (1 - sigmoid(a)), which is 0
       # for a > 37 where the true value is e**-a.
       second=("sigmoid(a) * sigmoid(-a)",)),
    Op(36, "sign",    "sign",    1, "sign(a)",        ("0.0",),
       doc="-1, 0 or 1 (nan at nan), as numpy.sign. Derivative exactly 0.",
       second=("0.0",)),
    # The value passes through; the derivative is 0 by definition, not the
    # identity's 1 that finite differences see (jax.lax.stop_gradient).
    Op(37, "stop_gradient", "stop", 1, "a",           ("0.0",),
       doc="x itself, with a derivative of exactly 0: gradients stop here"
           " (jax.lax.stop_gradient, torch's x.detach()).",
       second=("0.0",)),
)
# fmt: on


class BlockOp(NamedTuple):
    """An op on array blocks whose rules live in the block-op registry
    (``fastad/core/block_rules.py``: NumPy/BLAS or the fused kernels of
    ``kernels/fused.py``); the compiled scalar sweeps never see these
    opcodes. Elementwise ops on blocks reuse the scalar rows above (same
    opcode, same rule, applied per element). ``arity`` may exceed two: the
    tape's ``in0``/``in1`` hold the first two operands, the block table the
    rest; -1 means any number of operands (``concatenate``)."""

    code: int
    name: str
    symbol: str
    arity: int


BLOCK_OPS = (
    BlockOp(64, "matmul", "@", 2),
    BlockOp(65, "sum", "sum", 1),
    BlockOp(66, "mean", "mean", 1),
    BlockOp(67, "reshape", "reshape", 1),
    BlockOp(68, "transpose", "T", 1),
    BlockOp(69, "index", "[]", 1),
    BlockOp(71, "linear", "linear", 3),  # (X, W, b)
    BlockOp(72, "linear_relu", "linear_relu", 3),  # (X, W, b)
    BlockOp(73, "mse_loss", "mse_loss", 2),
    BlockOp(74, "max", "max", 1),
    BlockOp(75, "min", "min", 1),
    BlockOp(76, "prod", "prod", 1),
    BlockOp(77, "concatenate", "concat", -1),  # any number of operands
    BlockOp(78, "logsumexp", "logsumexp", 1),
    BlockOp(79, "softmax", "softmax", 1),
    BlockOp(80, "log_softmax", "log_softmax", 1),
    BlockOp(81, "cross_entropy", "cross_entropy", 2),  # (logits, labels or targets)
    BlockOp(82, "cholesky", "cholesky", 1),
    BlockOp(83, "solve", "solve", 2),  # (A, B)
    BlockOp(84, "solve_triangular", "solve_tri", 2),  # (A, B); params: lower
    BlockOp(85, "inv", "inv", 1),
    BlockOp(86, "det", "det", 1),
    BlockOp(87, "logabsdet", "logabsdet", 1),  # np.linalg.slogdet's second result
    BlockOp(88, "sign_det", "sign_det", 1),  # and its first: the sign, derivative 0
    BlockOp(89, "cumsum", "cumsum", 1),  # params: the axis
    BlockOp(90, "eigh", "eigh", 1),  # eigenvalues in row 0, eigenvectors below
)

BY_NAME = {op.name: op for op in OPS}
BLOCK_BY_NAME = {op.name: op for op in BLOCK_OPS}
ALL = {op.code: op for op in (*OPS, *BLOCK_OPS)}
"""Every opcode, scalar or block, to its row (for names, symbols and arity)."""
COMMUTATIVE = frozenset(op.code for op in OPS if op.commutative)
COMPARISONS = frozenset(op.code for op in OPS if op.comparison)
PUBLIC = tuple(op for op in OPS if op.doc)
"""The ops users call as ``fa.<name>`` (``fastad/eager/functions.py``)."""
INPUT = BY_NAME["input"].code
CONST = BY_NAME["const"].code
NUM_OPS = len(OPS)
