"""Compiled functions' interpreter: a traced program replayed at many points in lanes.

The batch kernel (``sweep_points``; threaded batches run it on Python
threads, a range of points each: ``fastad.compiled.replay``) and the
one-point latency paths (``sweep_point``, ``sweep_point_hvp``) of
``fastad.compiled``: values, VJP, gradient, JVP, Jacobians, and the
second-order modes, with the rules of ``lane_rules.py``,
``lane_second_rules.py`` and ``point_rules.py`` (generated).
"""

from __future__ import annotations

import numpy as np

from .arrays import FloatArray, IdArray, IndexArray
from .jit import kernel
from .lane_rules import values_and_partials_lanes, values_lanes
from .lane_second_rules import second_partials_lanes
from .point_rules import forward_value, second_partials, values_and_partials
from .strong_zeros import UNREACHED, contribution, reached

# -- Compiled functions: replay in lanes ------------------------------------------
#
# A compiled function packs everything about its tape into one int32 array,
# ``program`` (fewer arguments make a faster call from Python):
#
#   [n, k, m, g,
#    opcode (n + 1), in0 (n + 1), in1 (n + 1),
#    input ids (k), output ids (m), guard node ids (g), guard truths (g),
#    depends (n + 1): 1 for a node that depends on an input]
#
# Row ``n`` is a scratch row: unary ops point ``in1`` at it so every op reads
# two rows. The work space ``work`` (float64, shape (4, n + 1, lanes)) holds
# values, the two local partials saved by the forward pass, and adjoints or
# tangents; column ``lane`` belongs to one evaluation point. Constants' rows
# are filled once from ``template``. The second-order modes' work space has
# SECOND_PLANES planes: also the three second partials, tangents and the
# tangents of the adjoints.
#
# Modes: VALUES (outputs only), VJP (outputs and cotangent^T J), GRAD (VJP
# with every cotangent 1, without reading one), JVP (outputs and J tangent),
# JACOBIAN_REV / JACOBIAN_FWD (outputs and the whole (m, k) Jacobian, row
# by row, from one forward pass: m adjoint or k tangent passes), and the
# second-order modes of a scalar output: HVP (H v for a direction v per
# point: one tangent pass, one adjoint pass and the tangent of the adjoint
# pass, forward-over-reverse) and HESSIAN (the (k, k) Hessian row by row:
# one adjoint pass, then per input a tangent pass and its second pass).

VALUES, VJP, JVP, GRAD, JACOBIAN_REV, JACOBIAN_FWD, HVP, HESSIAN = 0, 1, 2, 3, 4, 5, 6, 7
PLANES = 4
"""Work-space planes of the first-order modes: values, the two partials, adjoints."""
SECOND_PLANES = 9
"""Of HVP and HESSIAN: also the three second partials, tangents, and their adjoints."""
NO_FAILED_GUARD = -1
HEADER = 4


@kernel
def unpack(
    program: IndexArray,
) -> tuple[int, int, int, int, IndexArray, IndexArray, IndexArray, IndexArray]:
    """Views of a packed program: (n, k, m, g, opcode, in0, in1, io)."""
    n, k, m, g = program[0], program[1], program[2], program[3]
    rows = n + 1
    opcode = program[HEADER : HEADER + rows]
    in0 = program[HEADER + rows : HEADER + 2 * rows]
    in1 = program[HEADER + 2 * rows : HEADER + 3 * rows]
    io = program[HEADER + 3 * rows :]
    return n, k, m, g, opcode, in0, in1, io


@kernel
def pull(target: FloatArray, partial: FloatArray, incoming: FloatArray, count: int) -> None:
    """``target += partial * incoming`` over lanes, with strong zeros: one edge's VJP.

    One operand per loop over 1-D rows vectorises better than both operands
    in one loop over 2-D indices (measured 40.6 -> 33.8 ns/point on example 2).
    """
    for lane in range(count):
        target[lane] += contribution(partial[lane], incoming[lane])


@kernel
def sweep_block(
    program: IndexArray,
    work: FloatArray,
    points: FloatArray,
    directions: FloatArray,
    values: FloatArray,
    derivatives: FloatArray,
    status: IdArray,
    mode: int,
    start: int,
    count: int,
) -> None:
    """Evaluate points ``start:start + count`` in lanes ``0:count`` of ``work``.

    Writes ``values[p]`` (m outputs), ``derivatives[p]`` (k for VJP and
    HVP, m for JVP, the ``m * k`` Jacobian row by row for the JACOBIAN
    modes, the ``k * k`` Hessian for HESSIAN) and
    ``status[p]`` (index of the first guard whose truth differs from the
    traced one; the caller fills ``status`` with ``NO_FAILED_GUARD``).
    """
    n, k, m, g, opcode, in0, in1, io = unpack(program)
    val, d0, d1, adj = work[0], work[1], work[2], work[3]
    for t in range(k):
        row = io[t]
        for lane in range(count):
            val[row, lane] = points[start + lane, t]
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        if count == 1:  # one point (the latency path): no lane loop at all
            if mode == VALUES:
                val[i, 0] = forward_value(opcode[i], val[j, 0], val[c, 0])
            else:
                val[i, 0], d0[i, 0], d1[i, 0] = values_and_partials(opcode[i], val[j, 0], val[c, 0])
        elif mode == VALUES:
            values_lanes(opcode[i], val, i, j, c, count)
        else:
            values_and_partials_lanes(opcode[i], val, d0, d1, i, j, c, count)
        if mode >= HVP:
            s0, s1, s2 = work[4], work[5], work[6]
            if count == 1:
                s0[i, 0], s1[i, 0], s2[i, 0] = second_partials(
                    opcode[i], val[j, 0], val[c, 0], val[i, 0]
                )
            else:
                depends = io[k + m + 2 * g :]  # 1 for a node that depends on an input
                need_a, need_b = depends[j] != 0, depends[c] != 0
                if need_a or need_b:
                    second_partials_lanes(
                        opcode[i], val, s0, s1, s2, i, j, c, count, need_a, need_b
                    )
    for q in range(g):
        node = io[k + m + q]
        expected = io[k + m + g + q] != 0
        for lane in range(count):
            if (val[node, lane] != 0.0) != expected and status[start + lane] == NO_FAILED_GUARD:
                status[start + lane] = q
    for r in range(m):
        row = io[k + r]
        for lane in range(count):
            values[start + lane, r] = val[row, lane]
    if mode == VJP or mode == GRAD:
        adj[:, :count] = UNREACHED
        for r in range(m):
            row = io[k + r]
            for lane in range(count):
                # A zero cotangent is a strong zero: the Jacobian's row r is
                # never touched by the other outputs' paths.
                seed = 1.0 if mode == GRAD else directions[start + lane, r]
                if seed != 0.0:
                    adj[row, lane] += seed
        adjoint_pass(in0, in1, d0, d1, adj, n, count)
        for t in range(k):
            row = io[t]
            for lane in range(count):
                derivatives[start + lane, t] = adj[row, lane] + 0.0  # no -0.0 out
    elif mode == JVP:
        adj[:, :count] = UNREACHED
        for t in range(k):
            row = io[t]
            for lane in range(count):
                seed = directions[start + lane, t]
                if seed != 0.0:  # a zero tangent is a strong zero, as in VJP
                    adj[row, lane] = seed
        tangent_pass(in0, in1, d0, d1, adj, n, count)
        for r in range(m):
            row = io[k + r]
            for lane in range(count):
                derivatives[start + lane, r] = adj[row, lane] + 0.0
    elif mode == JACOBIAN_REV:  # row r of each point's Jacobian: a VJP with cotangent e_r
        for r in range(m):
            adj[:, :count] = UNREACHED
            adj[io[k + r], :count] += 1.0
            adjoint_pass(in0, in1, d0, d1, adj, n, count)
            for t in range(k):
                row = io[t]
                for lane in range(count):
                    derivatives[start + lane, r * k + t] = adj[row, lane] + 0.0
    elif mode == JACOBIAN_FWD:  # column t: a JVP with tangent e_t
        for t in range(k):
            adj[:, :count] = UNREACHED
            adj[io[t], :count] = 1.0
            tangent_pass(in0, in1, d0, d1, adj, n, count)
            for r in range(m):
                row = io[k + r]
                for lane in range(count):
                    derivatives[start + lane, r * k + t] = adj[row, lane] + 0.0
    elif mode == HVP or mode == HESSIAN:  # a scalar output (the front end checks)
        s0, s1, s2, tan, tadj = work[4], work[5], work[6], work[7], work[8]
        depends = io[k + m + 2 * g :]
        adj[:, :count] = UNREACHED
        adj[io[k], :count] = 1.0
        adjoint_pass(in0, in1, d0, d1, adj, n, count)
        for t in range(k if mode == HESSIAN else 1):  # row t of the Hessian: H e_t
            tan[:, :count] = UNREACHED
            if mode == HESSIAN:
                tan[io[t], :count] = 1.0
            else:
                for u in range(k):
                    row = io[u]
                    for lane in range(count):
                        seed = directions[start + lane, u]
                        if seed != 0.0:  # a zero direction is a strong zero
                            tan[row, lane] = seed
            tangent_pass(in0, in1, d0, d1, tan, n, count)
            tadj[:, :count] = UNREACHED
            second_pass(in0, in1, depends, d0, d1, s0, s1, s2, adj, tan, tadj, n, count)
            for u in range(k):
                row = io[u]
                for lane in range(count):
                    derivatives[start + lane, t * k + u] = tadj[row, lane] + 0.0


@kernel
def adjoint_pass(
    in0: IndexArray,
    in1: IndexArray,
    d0: FloatArray,
    d1: FloatArray,
    adj: FloatArray,
    n: int,
    count: int,
) -> None:
    """Seeded adjoints in lanes ``0:count`` pulled back through nodes ``n - 1 .. 0``."""
    for i in range(n - 1, -1, -1):
        j = in0[i]
        if j < 0:
            continue
        pull(adj[j], d0[i], adj[i], count)
        c = in1[i]
        if c != n:  # unary ops read the scratch row: nothing to send there
            pull(adj[c], d1[i], adj[i], count)


@kernel
def tangent_pass(
    in0: IndexArray,
    in1: IndexArray,
    d0: FloatArray,
    d1: FloatArray,
    adj: FloatArray,
    n: int,
    count: int,
) -> None:
    """Seeded tangents in lanes ``0:count`` pushed through nodes ``0 .. n - 1``."""
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        for lane in range(count):
            adj[i, lane] = contribution(d0[i, lane], adj[j, lane]) + contribution(
                d1[i, lane], adj[c, lane]
            )


@kernel
def second_pass(
    in0: IndexArray,
    in1: IndexArray,
    depends: IndexArray,
    d0: FloatArray,
    d1: FloatArray,
    s0: FloatArray,
    s1: FloatArray,
    s2: FloatArray,
    adj: FloatArray,
    tan: FloatArray,
    tadj: FloatArray,
    n: int,
    count: int,
) -> None:
    """The tangent of an adjoint pass in lanes ``0:count``: ``second_backward_range``'s rule.

    ``adj`` and ``tan`` hold finished adjoint and tangent passes; ``tadj``
    starts at UNREACHED. Only nodes that depend on an input (``depends``)
    send, and only to operands that do: the others' tangents are UNREACHED
    and their sums reach no input. Unary ops read the scratch row, which
    depends on nothing.
    """
    for i in range(n - 1, -1, -1):
        j = in0[i]
        if j < 0 or depends[i] == 0:
            continue
        c = in1[i]
        if depends[j] != 0:
            pull_second(tadj[j], d0[i], tadj[i], s0[i], tan[j], s1[i], tan[c], adj[i], count)
        if depends[c] != 0:
            pull_second(tadj[c], d1[i], tadj[i], s1[i], tan[j], s2[i], tan[c], adj[i], count)


@kernel
def pull_second(
    target: FloatArray,
    partial: FloatArray,
    incoming: FloatArray,
    second_a: FloatArray,
    tangent_a: FloatArray,
    second_b: FloatArray,
    tangent_b: FloatArray,
    adjoint: FloatArray,
    count: int,
) -> None:
    """One edge of ``second_pass`` over lanes, on 1-D rows (they vectorise, as ``pull``).

    ``target += partial * incoming + (second_a * tangent_a + second_b *
    tangent_b) * adjoint``, each product with strong zeros: the edge's
    adjoint-tangent term, then its partial's tangent times the adjoint.
    """
    for lane in range(count):
        moved = contribution(second_a[lane], tangent_a[lane]) + contribution(
            second_b[lane], tangent_b[lane]
        )
        target[lane] += contribution(partial[lane], incoming[lane]) + contribution(
            moved, adjoint[lane]
        )


@kernel
def work_planes(mode: int) -> int:
    """Work-space planes the sweeps need in ``mode``: PLANES, SECOND_PLANES for HVP, HESSIAN."""
    return SECOND_PLANES if mode >= HVP else PLANES


@kernel
def new_work(template: FloatArray, lanes: int, planes: int) -> FloatArray:
    """A work space of ``planes`` planes of ``lanes`` columns, values from ``template``."""
    work = np.zeros((planes, template.size, lanes))
    for i in range(template.size):
        work[0, i, :] = template[i]
    return work


@kernel
def sweep_points(
    program: IndexArray,
    work: FloatArray,
    points: FloatArray,
    directions: FloatArray,
    values: FloatArray,
    derivatives: FloatArray,
    status: IdArray,
    mode: int,
) -> None:
    """All points, block after block, in the caller's work space (any lane count)."""
    lanes = work.shape[2]
    total = points.shape[0]
    for start in range(0, total, lanes):
        count = min(lanes, total - start)
        sweep_block(
            program, work, points, directions, values, derivatives, status, mode, start, count
        )


@kernel
def sweep_point(
    program: IndexArray, work: FloatArray, point: FloatArray, gradient: FloatArray, mode: int
) -> tuple[float, int]:
    """The latency path: one point of a scalar-output function, on 1-D rows.

    ``work`` has shape (4, n + 1): values, the two saved partials, adjoints.
    Mode VALUES or GRAD; GRAD writes d output / d inputs into ``gradient``.
    Returns ``(value, failed guard or NO_FAILED_GUARD)``. Four arrays and an
    int: each array argument costs ~100 ns in Numba's dispatcher.
    """
    n, k, m, g, opcode, in0, in1, io = unpack(program)
    val, d0, d1, adj = work[0], work[1], work[2], work[3]
    for t in range(k):
        val[io[t]] = point[t]
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        if mode == VALUES:
            val[i] = forward_value(opcode[i], val[j], val[c])
        else:
            val[i], d0[i], d1[i] = values_and_partials(opcode[i], val[j], val[c])
    failed = NO_FAILED_GUARD
    for q in range(g):
        if (val[io[k + m + q]] != 0.0) != (io[k + m + g + q] != 0):
            failed = q
            break
    root = io[k]
    if mode == GRAD:
        adj[:] = UNREACHED
        adj[root] = 1.0
        for i in range(n - 1, -1, -1):
            gi = adj[i]
            j = in0[i]
            if j < 0 or not reached(gi):
                continue
            adj[j] += contribution(d0[i], gi)
            c = in1[i]
            if c != n:
                adj[c] += contribution(d1[i], gi)
        for t in range(k):
            gradient[t] = adj[io[t]] + 0.0
    return val[root], failed


@kernel
def sweep_point_hvp(
    program: IndexArray,
    work: FloatArray,
    point: FloatArray,
    direction: FloatArray,
    product: FloatArray,
) -> tuple[float, int]:
    """The second order's latency path: ``H v`` at one point into ``product``, on 1-D rows.

    ``work`` has shape (SECOND_PLANES, n + 1). ``sweep_point`` gives the
    values, partials, guards and adjoints (its gradient lands in
    ``product`` and is overwritten); then the second partials, the tangent
    pass and the second pass of ``sweep_block``'s HVP mode, statement for
    statement on one point, so the bits are the batch's (the tests compare
    them). Returns ``(value, failed guard or NO_FAILED_GUARD)``.
    """
    value, failed = sweep_point(program, work, point, product, GRAD)
    n, k, m, g, opcode, in0, in1, io = unpack(program)
    depends = io[k + m + 2 * g :]
    val, d0, d1, adj = work[0], work[1], work[2], work[3]
    s0, s1, s2, tan, tadj = work[4], work[5], work[6], work[7], work[8]
    tan[:] = UNREACHED
    for t in range(k):
        if direction[t] != 0.0:  # a zero direction is a strong zero
            tan[io[t]] = direction[t]
    for i in range(n):
        j = in0[i]
        if j < 0:
            continue
        c = in1[i]
        s0[i], s1[i], s2[i] = second_partials(opcode[i], val[j], val[c], val[i])
        tan[i] = contribution(d0[i], tan[j]) + contribution(d1[i], tan[c])
    tadj[:] = UNREACHED
    for i in range(n - 1, -1, -1):
        j = in0[i]
        if j < 0 or depends[i] == 0:
            continue
        c = in1[i]
        gi, hi = adj[i], tadj[i]
        if depends[j] != 0:
            moved = contribution(s0[i], tan[j]) + contribution(s1[i], tan[c])
            tadj[j] += contribution(d0[i], hi) + contribution(moved, gi)
        if depends[c] != 0:
            moved = contribution(s1[i], tan[j]) + contribution(s2[i], tan[c])
            tadj[c] += contribution(d1[i], hi) + contribution(moved, gi)
    for t in range(k):
        product[t] = tadj[io[t]] + 0.0
    return value, failed
