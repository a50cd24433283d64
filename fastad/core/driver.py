"""The sweep driver: one segment walker for every sweep over a tape.

A tape is a sequence of scalar nodes, swept by compiled kernels, with block
ops (array rules) between them. Every sweep (forward replay, backward, the
tangent sweep of forward mode, checked mode) is the same walk: the compiled
kernel over each run of scalar nodes, and at each block op that node's
rule, in increasing id order (forward, tangent) or decreasing (backward).
:func:`walk` is that walk; each sweep gives it what to do on a run and at a
block op. A second-order sweep is one more pair of those, not a fourth copy.

The rules come from the caller (``fastad/core/block_rules.py`` provides them): this
layer knows how to walk and accumulate, not what any op computes.

Only nodes the root depends on are visited (:func:`plan`),
so the history of a long-lived tape costs nothing per backward step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fastad.core.block_table import fresh
from fastad.core.graph import FEW_OPS, reaching
from fastad.core.reach import UNREACHED, Need, any_reached
from fastad.core.storage import as_stored
from fastad.kernels import optable, strong_zeros, tape_sweeps

CONST, INPUT = optable.CONST, optable.INPUT

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray, RuleValue


class Rule(Protocol):
    """What the driver needs of a block op's registry entry."""

    saves: bool

    def forward(self, values: tuple[RuleValue, ...], params: object) -> RuleValue: ...

    def vjp(
        self,
        values: tuple[RuleValue, ...],
        out: RuleValue,
        g: RuleValue,
        params: object,
        needs: tuple[int, ...] | None = None,
    ) -> tuple[RuleValue, ...]: ...

    def vjp_saved(
        self,
        values: tuple[RuleValue, ...],
        out: RuleValue,
        g: RuleValue,
        params: object,
        needs: tuple[int, ...] | None,
        saved: tuple[object, ...],
    ) -> tuple[RuleValue, ...]: ...

    def jvp(
        self,
        values: tuple[RuleValue, ...],
        out: RuleValue,
        tangents: tuple[RuleValue, ...],
        params: object,
    ) -> RuleValue: ...

    def second_vjp(
        self,
        values: tuple[RuleValue, ...],
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: tuple[RuleValue, ...],
        params: object,
        needs: tuple[int, ...] | None = None,
    ) -> tuple[RuleValue, ...]: ...


def ieee() -> np.errstate:
    """Every sweep runs its rules under this: IEEE results (inf - inf is nan), no
    warnings, as the compiled kernels give them; checked mode finds where a nan was made."""
    return np.errstate(invalid="ignore", over="ignore", divide="ignore")


Rules = Callable[[int], Rule]
"""Opcode -> its rule; raises ``NotImplementedError`` naming an op without one."""


def walk(
    block_ops: Sequence[int],
    start: int,
    stop: int,
    reverse: bool,
    run: Callable[[int, int], None],
    step: Callable[[int], None],
) -> None:
    """Call ``run(lo, hi)`` on each range of scalar nodes in ``[start, stop)`` and
    ``step(node)`` on each of ``block_ops`` (ascending, inside the range) between them.

    In increasing id order, or decreasing with ``reverse``. Empty runs are skipped.
    """
    if reverse:
        hi = stop
        for node in reversed(block_ops):
            if hi > node + 1:
                run(node + 1, hi)
            step(node)
            hi = node
        if hi > start:
            run(start, hi)
    else:
        lo = start
        for node in block_ops:
            if node > lo:
                run(lo, node)
            step(node)
            lo = node + 1
        if stop > lo:
            run(lo, stop)


_FEW_NODES = 8
"""A run of scalar-sweep nodes this short is checked in Python for holding only array nodes."""

_SHORT = 4096
"""On a tape this short with this few block ops, a sweep visits everything up to its root."""

Plan = tuple[list[int], int]
"""What a sweep from a root visits: block ops (ascending) and the lowest id."""


def plan(tape: TapeStorage, root: int) -> Plan:
    """The block ops ``root`` depends on (ascending), and the lowest id it depends on.

    Sweeps visit only these, so the history of a long-lived tape (every
    step of a PyTorch-style loop on one tape) costs nothing per sweep: one
    compiled pass marks the ancestors, stopping at the lowest. On a short
    tape with few block ops (a fresh tape per step), finding them costs more
    than visiting everything: then all block ops up to ``root``, and 0; one
    that nothing reaches is skipped by its step.

    The scalar runs between the block ops may cross block nodes ``root`` does
    not depend on: nothing reaches those, so the compiled sweeps skip them
    (or, in forward mode, fill their unused scalar slot).
    """
    ops = tape.blocks.ops
    if root < _SHORT and len(ops) <= FEW_OPS:
        return [node for node in ops if node <= root], 0
    return reaching(tape, root)


def replay(tape: TapeStorage, rules: Rules) -> None:
    """Recompute every value, in id order, from the leaves and constants."""
    opcode, in0, in1, val, _ = tape.columns()
    blocks = tape.blocks

    def run(lo: int, hi: int) -> None:
        tape_sweeps.forward_sweep(opcode, in0, in1, val, lo, hi)

    def step(node: int) -> None:
        values = tuple(tape.value(j) for j in blocks.operands(node))
        rule = rules(int(opcode[node]))
        value = rule.forward(values, blocks.params(node))
        if rule.saves:
            value, saved = value
            blocks.keep_saved(node, saved)
        if node in blocks.values:
            blocks.store(node, as_stored(value))
        else:
            val[node] = value

    with ieee():
        walk(blocks.ops, 0, len(tape), False, run, step)


def backward(
    tape: TapeStorage,
    rules: Rules,
    root: int,
    adjoints: FloatArray,
    block_adjoints: dict[int, FloatArray],
    check: bool = False,
    visits: Plan | None = None,
    needed: NDArray[np.bool_] | None = None,
    seed: float | None = None,
) -> tuple[int, int] | None:
    """Reverse sweep from ``root`` into ``adjoints`` (scalars) and ``block_adjoints``.

    Seeds ``adjoints[root] += 1`` (``seed`` instead, for a VJP: a block root's
    cotangent goes into ``block_adjoints[root]`` before the call, with
    ``seed`` 0.0); the caller fills ``adjoints[lowest:root + 1]``
    (``visits``, from :func:`plan`, computed here when not given) with
    UNREACHED (-0.0) first unless it means to accumulate. With ``check``,
    returns ``(node, slot)`` of the first node (in sweep order) that turned
    a finite adjoint into a non-finite contribution, else None; the sweep
    still completes.

    ``needed`` (from ``graph.descendants``): only the adjoints of
    these nodes are wanted (a gradient with respect to some leaves). A
    block op outside it is skipped, and its rule computes no contribution
    for an operand outside it (the data ``X`` of a layer): other adjoints
    are then incomplete, and the caller reads none of them. Without it,
    every adjoint is computed except those of array constants (data): a
    block constant gets no gradient (``Tape.block_adjoint`` refuses it).
    """
    opcode, in0, in1, val, _ = tape.columns()
    blocks = tape.blocks
    block_values = blocks.values
    found: tuple[int, int] | None = None

    def run(lo: int, hi: int) -> None:
        nonlocal found
        if hi - lo <= _FEW_NODES and all([j in block_values for j in range(lo, hi)]):
            # Array leaves and constants between block ops (a layer's W, the
            # data X): a block node's scalar adjoint slot is never read, so
            # the compiled sweep would do nothing here but cost its call.
            return
        origin = tape_sweeps.backward_range(opcode, in0, in1, val, adjoints, hi, lo, check)
        if found is None and origin != tape_sweeps.NO_ORIGIN:
            found = (origin // 2, origin % 2)

    operands_of, params_of, saved_of = blocks.operands_table, blocks.params_table, blocks.saved
    value_of, adjoint_of, code_of, scalar_of = (
        block_values.get,
        block_adjoints.get,
        opcode.item,
        val.item,
    )
    adopted_ids: set[int] = set()  # ids of the arrays adopted as adjoints in this sweep

    def step(node: int) -> None:
        # The per-op cost of every eager backward: plain dict and list reads,
        # no helper calls but the rule itself and the delivery.
        nonlocal found
        g: RuleValue
        out: RuleValue = value_of(node)
        if out is not None:
            g = adjoint_of(node)
            if g is None:
                return
            first = g.item(0) if g.size else UNREACHED
            if first == 0.0 and math.copysign(1.0, first) < 0.0 and not any_reached(g):
                # Strong zero: nothing reached this block. Rules would map an
                # all-UNREACHED adjoint to UNREACHED again, but at a cost (a
                # product rechecked row by row); the scan stops at the first
                # reached element, which in the common case is the first.
                return
        else:
            g = adjoints.item(node)
            if g == 0.0 and math.copysign(1.0, g) < 0.0:  # UNREACHED: not strong_zeros.reached
                return
            out = scalar_of(node)
        if needed is not None and not needed[node]:
            return  # it depends on no wanted node, and neither do its operands
        operands = operands_of[node]
        if needed is None:
            # Nothing to array constants (data), values only to leaves (see operand_needs).
            needs = tuple(
                [
                    _VALUES
                    if (code := code_of(j)) == INPUT
                    else _NOTHING
                    if code == CONST and j in block_values
                    else _ALL
                    for j in operands
                ]
            )
        else:
            needs = operand_needs(operands, opcode, block_values, needed)
        values = tuple([v if (v := value_of(j)) is not None else scalar_of(j) for j in operands])
        rule, saved = rules(code_of(node)), saved_of.get(node)
        if saved is None:
            partials = rule.vjp(values, out, g, params_of.get(node), needs)
        else:
            partials = rule.vjp_saved(values, out, g, params_of.get(node), needs, saved)
        if check and found is None and np.isfinite(g).all():
            # As in the scalar sweep, a constant's adjoint reaches nothing
            # (X ** 3.0 at X < 0 sends nan to its exponent): only others count.
            for slot, (j, contribution, want) in enumerate(
                zip(operands, partials, needs, strict=True)
            ):
                if (
                    want
                    and contribution is not None
                    and opcode[j] != optable.CONST
                    and not np.isfinite(contribution).all()
                ):
                    found = (node, slot)
                    break
        deliver(operands, partials, adjoints, block_adjoints, block_values, adopted_ids, needs)

    relevant, lowest = plan(tape, root) if visits is None else visits
    if lowest == 0 and not blocks.ops and seed is None:  # one compiled sweep, seed included
        origin = tape_sweeps.backward_sweep(opcode, in0, in1, val, adjoints, root, check)
        return None if origin == tape_sweeps.NO_ORIGIN else (origin // 2, origin % 2)
    if seed is None:
        adjoints[root] += 1.0
    elif seed != 0.0:  # a zero cotangent is a strong zero: nothing is sent
        adjoints[root] += seed
    with ieee():
        walk(relevant, lowest, root + 1, True, run, step)
    return found


def operand_needs(
    operands: Sequence[int],
    opcode: NDArray[np.uint8],
    block_values: dict[int, FloatArray],
    needed: NDArray[np.bool_] | None,
) -> tuple[Need, ...]:
    """What a block op's VJP must send each of its ``operands`` (``reach.Need``).

    Nothing to an operand outside ``needed`` when it is given (a gradient
    asked for some nodes, array constants among them), else nothing to an
    array constant: data such as a layer's ``X`` gets no gradient, as a
    tensor without ``requires_grad`` in PyTorch (no ``dX`` product). Values only to
    a leaf: its adjoint goes no further, so a product need not settle the
    reach of its zeros. Everything to the rest.
    """
    if needed is None:
        codes = [opcode.item(j) for j in operands]
        return tuple(
            [
                _NOTHING
                if code == CONST and j in block_values
                else _VALUES
                if code == INPUT
                else _ALL
                for j, code in zip(operands, codes, strict=True)
            ]
        )
    return tuple(
        [
            _NOTHING if not needed[j] else _VALUES if opcode.item(j) == INPUT else _ALL
            for j in operands
        ]
    )


_NOTHING, _VALUES, _ALL = Need.NOTHING, Need.VALUES, Need.ALL


def deliver(
    operands: Sequence[int],
    contributions: Sequence[RuleValue],
    adjoints: FloatArray,
    block_adjoints: dict[int, FloatArray],
    block_values: dict[int, FloatArray],
    adopted_ids: set[int],
    needs: Sequence[int],
) -> None:
    """Add a block rule's contribution for each operand (None, or a false entry of
    ``needs``: nothing) to its adjoint."""
    for j, contribution, want in zip(operands, contributions, needs, strict=True):
        if contribution is None or not want:
            continue
        if j not in block_values:
            adjoints[j] += float(contribution)
            continue
        held = block_adjoints.get(j)
        if held is not None:
            held += contribution  # in place: the table holds this array
        else:  # a block's first contribution is adopted, not copied
            block_adjoints[j] = adopted = owned(contribution, adopted_ids)
            adopted_ids.add(id(adopted))


def second_backward(
    tape: TapeStorage,
    rules: Rules,
    root: int,
    first: tuple[FloatArray, dict[int, FloatArray]],
    tangents: tuple[FloatArray, dict[int, FloatArray]],
    second: FloatArray,
    block_second: dict[int, FloatArray],
    visits: Plan,
    needed: NDArray[np.bool_] | None = None,
) -> None:
    """Forward-over-reverse: the tangent of a finished backward sweep from ``root``.

    ``first`` holds that sweep's adjoints (scalars and blocks), ``tangents``
    a finished tangent sweep along a direction (the same pairs); ``second``
    (UNREACHED on ``visits``' range) and ``block_second`` accumulate the
    tangents of the adjoints, ``H v`` at the nodes the direction moved.
    ``needed`` as in :func:`backward`. Scalar runs use the compiled
    ``second_backward_range``; a block op its rule's ``second_vjp`` (the
    JVP of its VJP), which raises ``NotImplementedError`` naming an op
    without one.
    """
    opcode, in0, in1, val, _ = tape.columns()
    blocks = tape.blocks
    block_values = blocks.values
    adjoints, block_adjoints = first
    scalar_tangents, block_tangents = tangents
    adopted_ids: set[int] = set()

    def run(lo: int, hi: int) -> None:
        tape_sweeps.second_backward_range(
            opcode, in0, in1, val, adjoints, scalar_tangents, second, hi, lo
        )

    def reached_value(node: int, scalars: FloatArray, arrays: dict[int, FloatArray]) -> RuleValue:
        return _reached(node, scalars, arrays, block_values)

    def step(node: int) -> None:
        g = reached_value(node, adjoints, block_adjoints)
        h = reached_value(node, second, block_second)
        if g is None and h is None:
            return
        if needed is not None and not needed[node]:
            return
        operands = blocks.operands(node)
        needs = None if needed is None else tuple([bool(needed[j]) for j in operands])
        moved = tuple(reached_value(j, scalar_tangents, block_tangents) for j in operands)
        values = tuple([tape.value(j) for j in operands])
        out = tape.value(node)
        rule = rules(int(opcode[node]))
        sent = rule.second_vjp(values, out, g, h, moved, blocks.params(node), needs)
        wanted = (True,) * len(operands) if needs is None else needs  # deliver skips the rest
        deliver(operands, sent, second, block_second, block_values, adopted_ids, wanted)

    relevant, lowest = visits
    with ieee():
        walk(relevant, lowest, root + 1, True, run, step)


def tangent(
    tape: TapeStorage,
    rules: Rules,
    root: int,
    tangents: FloatArray,
    block_tangents: dict[int, FloatArray],
    seeded: np.ndarray,
    visits: Plan | None = None,
) -> float | FloatArray:
    """Forward mode: the tangent of ``root`` (an array for a block) from the seeded ones.

    ``tangents`` (UNREACHED where unseeded, length ``root + 1``),
    ``block_tangents`` and ``seeded`` (True for the nodes held at their seed,
    not recomputed) are set up by the caller.
    """
    opcode, in0, in1, val, _ = tape.columns()
    blocks = tape.blocks

    def run(lo: int, hi: int) -> None:
        tape_sweeps.tangent_sweep(opcode, in0, in1, val, tangents, seeded, lo, hi)

    def tangent_of(node: int) -> RuleValue:
        return _reached(node, tangents, block_tangents, blocks.values)

    def step(node: int) -> None:
        if seeded[node]:
            return
        operands = blocks.operands(node)
        moved = tuple(tangent_of(j) for j in operands)
        if all(t is None for t in moved):
            return  # strong zero: nothing moves this node
        values = tuple(tape.value(j) for j in operands)
        out = tape.value(node)
        t = rules(int(opcode[node])).jvp(values, out, moved, blocks.params(node))
        if node in blocks.values:
            block_tangents[node] = np.asarray(t, dtype=np.float64)
        else:
            tangents[node] = float(t)

    relevant, lowest = plan(tape, root) if visits is None else visits
    with ieee():
        walk(relevant, lowest, root + 1, False, run, step)
    block = blocks.values.get(root)
    if block is None:
        return float(tangents[root]) + 0.0
    found = block_tangents.get(root)  # a block root: its tangent array, zeros if unreached
    return np.zeros(block.shape) if found is None else np.asarray(found, np.float64) + 0.0


def _reached(
    node: int,
    scalars: FloatArray,
    arrays: dict[int, FloatArray],
    block_values: dict[int, FloatArray],
) -> RuleValue:
    """A node's adjoint or tangent (an array for a block), None where nothing reached it."""
    if node in block_values:
        found = arrays.get(node)
        return found if found is not None and any_reached(found) else None
    value = float(scalars[node])
    return value if strong_zeros.reached(value) else None


def owned(array: RuleValue, adopted: set[int]) -> FloatArray:
    """``array`` itself when it owns fresh writable float64 data, else a copy.

    Block rules return fresh arrays: NumPy's own (``base`` None) or a Numba
    kernel's (``base`` is the kernel's memory record, which no other array
    views). Adopting them saves a copy per rule (about 2 ms of a 10 ms
    (64, 512, 1024) layer step). A view of another array, or an array this
    sweep has adopted already (its ``id`` is in ``adopted``), is copied: an adjoint
    must never alias another array, since it is accumulated in place.
    """
    if type(array) is np.ndarray and array.dtype == _FLOAT64:
        flags = array.flags
        if flags.writeable and flags.c_contiguous and fresh(array):
            return array.copy() if id(array) in adopted else array
    return np.array(array, dtype=np.float64, order="C")


_FLOAT64 = np.dtype(np.float64)


__all__ = [
    "UNREACHED",
    "Rule",
    "Rules",
    "backward",
    "deliver",
    "replay",
    "second_backward",
    "tangent",
    "walk",
]
