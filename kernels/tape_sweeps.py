"""Compiled sweeps over a structure-of-arrays tape (``arrays.py``).

Every operand id is smaller than the id of the node that uses it, so the
sweeps are flat loops in increasing or decreasing id order, with no DFS, no
recursion and no per-node allocation: the forward sweep (replay), the
backward sweep, forward mode (``tangent_sweep``), forward-over-reverse
(``second_backward_range``), and the local partials of chosen nodes. The
per-node rules come from the op table (``point_rules.py``, generated).

These kernels trust their input (see ``jit.py``); the front end
(``fastad.eager.tape``) validates every tape before it gets here.
"""

from __future__ import annotations

from math import isfinite

import numpy as np

from .arrays import BoolArray, FloatArray, IdArray, IndexArray, OpcodeArray
from .jit import kernel
from .optable import CONST
from .point_rules import forward_value, local_partials, second_partials
from .strong_zeros import UNREACHED, contribution, reached

NO_ORIGIN = -1


@kernel
def forward_sweep(
    opcode: OpcodeArray, in0: IndexArray, in1: IndexArray, val: FloatArray, start: int, stop: int
) -> None:
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
def backward_sweep(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    grad: FloatArray,
    root: int,
    check: bool | np.bool_,
) -> int:
    """Accumulate the adjoints of ``root`` into ``grad[:root + 1]``.

    Seeds ``grad[root] += 1`` and applies each node's local rule in
    decreasing id order (``backward_range``). The caller fills ``grad``
    with ``UNREACHED`` first. Returns what ``backward_range`` returns.
    """
    grad[root] += 1.0
    # np.int64(0), not 0: the constant would be typed Literal[int](0) and compile
    # backward_range a second time, beside the driver's call with an int (jit.py).
    return backward_range(opcode, in0, in1, val, grad, root + 1, np.int64(0), check)


@kernel
def backward_range(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    grad: FloatArray,
    stop: int,
    start: int,
    check: bool | np.bool_,
) -> int:
    """The backward sweep's body over nodes ``stop - 1`` down to ``start``, no seed.

    Adds (never assigns) the contribution of every edge, so a node used
    twice (``d * d``) or on several paths gets the sum.

    Exact zeros are strong (``contribution``): a node that nothing reached
    (its adjoint is still ``UNREACHED``) sends nothing, and neither does an
    edge whose local partial is exactly zero. So nodes that do not reach the
    root contribute nothing, and the side of ``fa.where`` not taken cannot
    poison the gradient with ``0 * inf = nan``. The caller fills ``grad``
    with ``UNREACHED`` first unless it means to accumulate.

    With ``check`` set, returns ``2 * node + slot`` for the first node (in
    sweep order) whose finite adjoint times its local partial for operand
    ``slot`` is not finite, or ``NO_ORIGIN``; the sweep still completes.
    Tapes with blocks alternate this over runs of scalar nodes with the
    block nodes' rules, in decreasing id order.
    """
    origin = NO_ORIGIN
    for i in range(stop - 1, start - 1, -1):
        g = grad[i]
        j = in0[i]
        if j < 0 or not reached(g):
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        grad[j] += contribution(d0, g)
        if k >= 0:
            grad[k] += contribution(d1, g)
        # A constant's adjoint reaches nothing (x ** 3 at x < 0 has a nan
        # partial for its exponent), so only other operands are checked.
        if check and origin == NO_ORIGIN and isfinite(g):
            if opcode[j] != CONST and not isfinite(d0 * g):
                origin = 2 * i
            elif k >= 0 and opcode[k] != CONST and not isfinite(d1 * g):
                origin = 2 * i + 1
    return origin


@kernel
def second_backward_range(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    adjoint: FloatArray,
    tangent: FloatArray,
    second: FloatArray,
    stop: int,
    start: int,
) -> None:
    """Forward-over-reverse: the tangent of the backward sweep, nodes ``stop - 1 .. start``.

    ``adjoint`` holds a finished backward sweep, ``tangent`` a finished
    tangent sweep along a direction ``v``; ``second`` (UNREACHED where
    nothing arrived, as the other buffers) accumulates the tangent of each
    adjoint, so that at an input it is ``(H v)`` there. Each edge ``(i, j)``
    of the backward sweep sends ``d * adjoint[i]``; its tangent is
    ``d * second[i] + (tangent of d) * adjoint[i]``, where the tangent of a
    local partial ``d0 = d out / d a`` is ``d2/da2 * tangent[a] + d2/da db *
    tangent[b]`` (``second_partials``). Every product has the strong zeros
    of ``contribution``; the two terms are added first, then to the target,
    in the order of every tier (``sweep_block``'s lanes, generated code).
    """
    for i in range(stop - 1, start - 1, -1):
        j = in0[i]
        if j < 0:
            continue
        g = adjoint[i]
        h = second[i]
        if not reached(g) and not reached(h):
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        s0, s1, s2 = second_partials(opcode[i], val[j], b, val[i])
        tj = tangent[j]
        tk = tangent[k] if k >= 0 else UNREACHED
        dd0 = contribution(s0, tj) + contribution(s1, tk)
        second[j] += contribution(d0, h) + contribution(dd0, g)
        if k >= 0:
            dd1 = contribution(s1, tj) + contribution(s2, tk)
            second[k] += contribution(d1, h) + contribution(dd1, g)


@kernel
def evaluate_partials(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    nodes: IdArray,
    partials: FloatArray,
) -> None:
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
def value_and_grad(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    grad: FloatArray,
    inputs: IdArray,
    point: FloatArray,
    root: int,
) -> float:
    """Replay the tape at a new point: value of ``root`` and its gradient.

    Writes ``point`` into the leaves ``inputs``, re-runs the forward sweep
    up to ``root``, resets the adjoints and runs the backward sweep. The
    gradient with respect to the leaves is left in ``grad[inputs]`` (where
    a leaf that does not reach the root holds ``UNREACHED``, -0.0).
    """
    for t in range(inputs.size):
        val[inputs[t]] = point[t]
    forward_sweep(opcode, in0, in1, val, np.int64(0), root + 1)  # not literals (jit.py)
    grad[: root + 1] = UNREACHED
    backward_sweep(opcode, in0, in1, val, grad, root, np.bool_(False))
    return val[root]


@kernel
def tangent_sweep(
    opcode: OpcodeArray,
    in0: IndexArray,
    in1: IndexArray,
    val: FloatArray,
    tangent: FloatArray,
    seeded: BoolArray,
    start: int,
    stop: int,
) -> None:
    """Forward mode on a tape: ``tangent[i] = d0 * tangent[in0] + d1 * tangent[in1]``.

    The caller sets the tangents of the nodes it perturbs (the direction;
    a zero direction stays ``UNREACHED``), marks them in ``seeded`` and
    fills the rest with ``UNREACHED``; a seeded node keeps its tangent (it
    is held as an independent variable, like ``fa.grad``'s ``wrt``). Nodes
    ``0:stop`` are swept in increasing id order with the same
    ``local_partials`` the backward sweep uses, and the same strong zeros.
    Tapes with blocks run it over the runs of scalar nodes (``start:stop``).
    """
    for i in range(start, stop):
        j = in0[i]
        if j < 0 or seeded[i]:
            continue
        k = in1[i]
        b = val[k] if k >= 0 else 0.0
        d0, d1 = local_partials(opcode[i], val[j], b, val[i])
        t = contribution(d0, tangent[j])
        if k >= 0:
            t += contribution(d1, tangent[k])
        tangent[i] = t
