"""Compiled sweeps over a structure-of-arrays tape.

A tape of ``n`` nodes is five parallel arrays: ``opcode`` (uint8), ``in0``
and ``in1`` (int32 operand ids, -1 where the op has fewer operands), ``val``
and ``grad`` (float64). Every operand id is smaller than the id of the node
that uses it, so increasing id order is a topological order and decreasing
id order is a reverse one: the sweeps are flat loops, with no DFS, no
recursion and no per-node allocation.

These kernels trust their input (see ``jit.py``): the arrays are
C-contiguous with the dtypes above and the tape invariants hold. The front
end (``fastad.tape``) validates every tape before it gets here.

The block between the GENERATED markers is produced from ``optable.py``;
everything else in this file is written by hand.
"""

from math import cos, exp, fabs, isfinite, log, pow, sin, sqrt, tanh  # noqa: F401

from .jit import kernel

NO_ORIGIN = -1


# BEGIN GENERATED RULES: made from kernels/optable.py by
# `python -m fastad.kernels._generate`. Do not edit by hand.


@kernel
def sigmoid(a):
    # Two branches so exp never overflows: exp(-a) for a >= 0, exp(a) otherwise.
    if a >= 0.0:
        return 1.0 / (1.0 + exp(-a))
    e = exp(a)
    return e / (1.0 + e)


@kernel
def relu(a):
    # Written so that nan propagates (nan <= 0 is False), as NumPy's maximum.
    return 0.0 if a <= 0.0 else a


@kernel
def relu_partial(a):
    # relu'(0) = 0 by convention (SPEC); nan in, nan out.
    return 1.0 if a > 0.0 else (0.0 if a <= 0.0 else a)


@kernel
def sign(a):
    # abs'(0) = 0: the minimum-norm subgradient. nan in, nan out.
    if a > 0.0:
        return 1.0
    if a < 0.0:
        return -1.0
    return 0.0 if a == 0.0 else a


@kernel
def maximum(a, b):
    # NumPy semantics: a nan in either operand gives nan.
    return a if (a > b or a != a) else b


@kernel
def minimum(a, b):
    return a if (a < b or a != a) else b


@kernel
def max_partial(a, b):
    # d maximum(a, b) / d a; ties split the gradient evenly.
    return 1.0 if a > b else (0.5 if a == b else 0.0)


@kernel
def pow_partial_base(a, b):
    # d a**b / d a = b * a**(b-1); exactly 0 for b == 0 (a**0 is constant),
    # where the formula would give 0 * inf = nan at a = 0.
    return 0.0 if b == 0.0 else b * pow(a, b - 1.0)


@kernel
def pow_partial_exponent(a, b, out):
    # d a**b / d b = a**b * log(a); at a == 0 with b > 0 the function is
    # constant 0 in b, where the formula would give 0 * -inf = nan.
    return 0.0 if (a == 0.0 and b > 0.0) else out * log(a)


@kernel
def forward_value(op, a, b):
    """Value of a node with opcode ``op`` and operand values ``a``, ``b``.

    ``b`` is ignored by unary ops. Leaves and constants never reach this
    function: the sweeps keep their stored values.
    """
    if op == 2:  # add
        return a + b
    if op == 3:  # sub
        return a - b
    if op == 4:  # mul
        return a * b
    if op == 5:  # div
        return a / b
    if op == 6:  # neg
        return -a
    if op == 7:  # pow
        return pow(a, b)
    if op == 8:  # exp
        return exp(a)
    if op == 9:  # log
        return log(a)
    if op == 10:  # sqrt
        return sqrt(a)
    if op == 11:  # sin
        return sin(a)
    if op == 12:  # cos
        return cos(a)
    if op == 13:  # tanh
        return tanh(a)
    if op == 14:  # sigmoid
        return sigmoid(a)
    if op == 15:  # relu
        return relu(a)
    if op == 16:  # abs
        return fabs(a)
    if op == 17:  # maximum
        return maximum(a, b)
    if op == 18:  # minimum
        return minimum(a, b)
    return a


@kernel
def local_partials(op, a, b, out):
    """Local partial derivatives ``(d out/d a, d out/d b)`` of one node.

    ``out`` is the node value saved by the forward sweep. Unary ops give
    0.0 for the second partial.
    """
    if op == 2:  # add
        return 1.0, 1.0
    if op == 3:  # sub
        return 1.0, -1.0
    if op == 4:  # mul
        return b, a
    if op == 5:  # div
        return 1.0 / b, -out / b
    if op == 6:  # neg
        return -1.0, 0.0
    if op == 7:  # pow
        return pow_partial_base(a, b), pow_partial_exponent(a, b, out)
    if op == 8:  # exp
        return out, 0.0
    if op == 9:  # log
        return 1.0 / a, 0.0
    if op == 10:  # sqrt
        return 0.5 / out, 0.0
    if op == 11:  # sin
        return cos(a), 0.0
    if op == 12:  # cos
        return -sin(a), 0.0
    if op == 13:  # tanh
        return 1.0 - out * out, 0.0
    if op == 14:  # sigmoid
        return out * (1.0 - out), 0.0
    if op == 15:  # relu
        return relu_partial(a), 0.0
    if op == 16:  # abs
        return sign(a), 0.0
    if op == 17:  # maximum
        return max_partial(a, b), max_partial(b, a)
    if op == 18:  # minimum
        return max_partial(b, a), max_partial(a, b)
    return 0.0, 0.0


# END GENERATED RULES


@kernel
def forward_sweep(opcode, in0, in1, val, start, stop):
    """Recompute ``val[start:stop]`` from the values of earlier nodes.

    Leaves and constants (no operands) keep the values stored in ``val``;
    this is the replay path: write new leaf values, sweep, read the outputs.
    """
    for i in range(start, stop):
        j = in0[i]
        if j < 0:
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        val[i] = forward_value(opcode[i], val[j], b)


@kernel
def backward_sweep(opcode, in0, in1, val, grad, root, check):
    """Accumulate the adjoints of ``root`` into ``grad[:root + 1]``.

    Seeds ``grad[root] += 1`` and applies each node's local rule in
    decreasing id order, adding (never assigning) the contribution of every
    edge, so a node used twice (``d * d``) or on several paths gets the sum.
    The caller zeroes ``grad`` first unless it means to accumulate.

    A node whose adjoint is exactly zero sends nothing to its operands. That
    is what keeps nodes that do not reach ``root`` out of the result, and it
    means an exact-zero adjoint never multiplies an infinite local partial
    into ``nan`` (the untaken side of a branch cannot poison the gradient).

    With ``check`` set, returns ``2 * node + slot`` for the first node (in
    sweep order) whose finite adjoint times its local partial for operand
    ``slot`` is not finite, or ``NO_ORIGIN``; the sweep still completes.
    """
    origin = NO_ORIGIN
    grad[root] += 1.0
    for i in range(root, -1, -1):
        g = grad[i]
        j = in0[i]
        if g == 0.0 or j < 0:
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        grad[j] += d0 * g
        if k >= 0:
            grad[k] += d1 * g
        if check and origin == NO_ORIGIN and isfinite(g):
            if not isfinite(d0 * g):
                origin = 2 * i
            elif k >= 0 and not isfinite(d1 * g):
                origin = 2 * i + 1
    return origin


@kernel
def evaluate_partials(opcode, in0, in1, val, nodes, partials):
    """Write the local partials of each node in ``nodes`` into ``partials``.

    ``partials`` has shape ``(len(nodes), 2)``; used by the front end to show
    edge labels and to report where a non-finite derivative came from.
    """
    for t in range(nodes.size):
        i = nodes[t]
        j = in0[i]
        if j < 0:
            partials[t, 0] = 0.0
            partials[t, 1] = 0.0
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        partials[t, 0] = d0
        partials[t, 1] = d1


@kernel
def value_and_grad(opcode, in0, in1, val, grad, inputs, point, root):
    """Replay the tape at a new point: value of ``root`` and its gradient.

    Writes ``point`` into the leaves ``inputs``, re-runs the forward sweep
    up to ``root``, zeroes the adjoints and runs the backward sweep. The
    gradient with respect to the leaves is left in ``grad[inputs]``.
    """
    for t in range(inputs.size):
        val[inputs[t]] = point[t]
    forward_sweep(opcode, in0, in1, val, 0, root + 1)
    grad[: root + 1] = 0.0
    backward_sweep(opcode, in0, in1, val, grad, root, False)
    return val[root]


@kernel
def mark_ancestors(in0, in1, root, mark):
    """Set ``mark[i]`` for ``root`` and every node it depends on."""
    mark[root] = True
    for i in range(root, -1, -1):
        if not mark[i]:
            continue
        j = in0[i]
        if j >= 0:
            mark[j] = True
        k = in1[i]
        if k >= 0:
            mark[k] = True
