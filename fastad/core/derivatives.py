"""Derivative sweeps a tape asks for, on its storage: seeds, results, second order.

``fastad.Tape``'s methods check their arguments (node ids, directions'
types) and hand over to these functions, which plan a sweep
(``driver.plan``), seed its buffers, run the driver with the block-op
registry's rules and read the results out with 0.0 added (``UNREACHED``
becomes +0.0). Second derivatives are forward-over-reverse: a tangent sweep,
the backward sweep, and the tangent of the backward sweep.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.core import block_rules, diagnose, driver
from fastad.core.graph import descendants
from fastad.core.node_arrays import VALUE_DTYPE
from fastad.kernels import strong_zeros
from fastad.util.errors import NonFiniteError, is_real_dtype, not_real

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray

UNREACHED = strong_zeros.UNREACHED


def real_direction(direction: object, what: str) -> FloatArray:
    """``direction`` as float64, refusing what is not real (a complex part would be dropped)."""
    array = np.asarray(direction)
    if not is_real_dtype(array.dtype):
        raise not_real(direction, what)
    return array.astype(VALUE_DTYPE)


def result(
    storage: TapeStorage, node: int, adjoints: FloatArray, block_adjoints: dict[int, FloatArray]
) -> float | FloatArray:
    block = storage.block_value(node)
    if block is None:
        return float(adjoints[node]) + 0.0
    found = block_adjoints.get(node)
    return found + 0.0 if found is not None else np.zeros(block.shape)


def seed_tangents(
    storage: TapeStorage,
    root: int,
    ids: list[int],
    direction: Iterable[ArrayLike],
    visits: driver.Plan,
) -> tuple[FloatArray, dict[int, FloatArray], NDArray[np.bool_]]:
    """The buffers of a tangent sweep from ``root``, seeded along ``direction`` at ``ids``."""
    tangents = np.zeros(root + 1)  # only [lowest, root] is swept and read
    tangents[visits[1] :] = UNREACHED
    block_tangents: dict[int, FloatArray] = {}
    seeded = np.zeros(root + 1, np.bool_)
    if not storage.has_blocks:
        nodes = np.asarray(ids, dtype=np.intp)
        along = real_direction(direction, "the direction")
        if along.shape != nodes.shape:
            raise ValueError(f"direction shape {along.shape} != wrt shape {nodes.shape}")
        inside = nodes <= root
        moved = inside & (along != 0.0)  # a zero direction is a strong zero
        np.add.at(tangents, nodes[moved], along[moved])  # a node listed twice adds
        seeded[nodes[inside]] = True
    else:
        seed_blocks(storage, root, ids, list(direction), tangents, block_tangents, seeded)
    return tangents, block_tangents, seeded


def second_order_adjoints(
    storage: TapeStorage, root: int, ids: list[int], visits: driver.Plan, what: str
) -> tuple[tuple[FloatArray, dict[int, FloatArray]], NDArray[np.bool_] | None]:
    """The backward sweep a second-order pass differentiates, and what it needs.

    Refuses a node of ``ids`` that depends on another: second derivatives
    hold each as an independent variable, and a gradient (a total
    derivative through everything downstream) would not be consistent
    with that. The nodes downstream of ``ids`` serve both that check and,
    with block ops on the way, the sweep (nothing for what none of
    ``ids`` feeds, a layer's data X, as for a gradient).
    """
    inside = sorted({i for i in ids if i <= root})
    downstream = None
    if visits[0] or len(inside) > 1:
        lowest = min(visits[1], inside[0]) if inside else visits[1]
        downstream = descendants(storage, inside, lowest, root)
    if len(inside) > 1:
        assert downstream is not None  # computed above for two or more
        for i in inside:
            for j in storage.operands(i):
                if downstream[j]:
                    source = next(w for w in inside if w <= j and reaches(storage, w, j))
                    raise ValueError(
                        f"{what}: wrt node {i} depends on wrt node {source}; second "
                        "derivatives take every wrt node as an independent variable, "
                        "which one computed from another is not: pass independent "
                        "nodes (the leaves, for example)"
                    )
    needed = downstream if visits[0] else None
    adjoints = np.zeros(len(storage))
    adjoints[visits[1] : root + 1] = UNREACHED
    block_adjoints: dict[int, FloatArray] = {}
    driver.backward(
        storage, block_rules.rule, root, adjoints, block_adjoints, False, visits, needed
    )
    return (adjoints, block_adjoints), needed


def reaches(storage: TapeStorage, source: int, node: int) -> bool:
    """Whether ``node`` is ``source`` or depends on it."""
    return bool(descendants(storage, [source], source, node)[node])


def second_pass(
    storage: TapeStorage,
    root: int,
    ids: list[int],
    direction: Iterable[ArrayLike],
    visits: driver.Plan,
    first: tuple[FloatArray, dict[int, FloatArray]],
    needed: NDArray[np.bool_] | None,
) -> tuple[FloatArray, dict[int, FloatArray]]:
    """A tangent sweep along ``direction``, then the tangent of the backward sweep."""
    tangents, block_tangents, seeded = seed_tangents(storage, root, ids, direction, visits)
    driver.tangent(storage, block_rules.rule, root, tangents, block_tangents, seeded, visits)
    second = np.zeros(len(storage))
    second[visits[1] : root + 1] = UNREACHED
    block_second: dict[int, FloatArray] = {}
    driver.second_backward(
        storage,
        block_rules.rule,
        root,
        first,
        (tangents, block_tangents),
        second,
        block_second,
        visits,
        needed,
    )
    return second, block_second


def seed_blocks(
    storage: TapeStorage,
    root: int,
    wrt: list[int],
    direction: list[Any],
    tangents: FloatArray,
    block_tangents: dict[int, FloatArray],
    seeded: NDArray[np.bool_],
) -> None:
    """Seed a tangent sweep: a float for each scalar node of ``wrt``, an array per block."""
    if len(direction) != len(wrt):
        raise ValueError(
            f"{len(direction)} directions for {len(wrt)} wrt nodes: give one direction "
            "per node, in a list (a float for a scalar node, an array of its shape for "
            "a block)"
        )
    for node, d in zip(wrt, direction, strict=True):
        block = storage.block_value(node)
        d = real_direction(d, f"the direction for node {node}")
        if block is not None and d.shape != block.shape:
            raise ValueError(
                f"direction for node {node} has shape {d.shape}, the block has {block.shape}"
            )
        if block is None and d.ndim:
            raise ValueError(
                f"the direction for node {node}, a scalar node, must be a number; got "
                f"an array of shape {d.shape}"
            )
        if node > root:  # recorded after the root: it moves nothing (checked all the same)
            continue
        seeded[node] = True
        if block is not None:
            d = np.where(d == 0.0, UNREACHED, d)  # zero directions are strong zeros
            block_tangents[node] = block_tangents.get(node, UNREACHED) + d
        elif float(d) != 0.0:
            tangents[node] += float(d)


def backward_into(storage: TapeStorage, node: int, accumulate: bool, check: bool) -> None:
    """Reverse sweep from the scalar node ``node`` into the tape's own adjoints.

    Without ``accumulate`` they are replaced by d node / d other; with it that
    is added to them. ``check`` raises ``NonFiniteError`` at the first node
    that made a ``nan``/``inf`` from finite inputs, in the values or the
    adjoints.
    """
    if check:
        origin = diagnose.first_nonfinite(storage, node + 1, node)
        if origin is not None:
            raise NonFiniteError(origin)
    grad = storage.columns()[4]
    block_adjoints: dict[int, FloatArray] = {}
    visits = driver.plan(storage, node)
    lowest, stop = visits[1], node + 1  # the sweep touches adjoints[lowest:stop] only
    if accumulate:
        adjoints = np.empty(stop)
        adjoints[lowest:] = UNREACHED
        found = driver.backward(
            storage, block_rules.rule, node, adjoints, block_adjoints, check, visits
        )
        with driver.ieee():  # inf + -inf is nan, silently, as within the sweep
            grad[lowest:stop] += adjoints[lowest:]
            storage.widen_adjoints(lowest, stop)
            for i, gradient in block_adjoints.items():
                held = storage.blocks.adjoints.get(i)
                storage.blocks.adjoints[i] = gradient if held is None else held + gradient
    else:  # sweep straight into the tape's adjoints: no buffer, no copy
        storage.clear_adjoints()  # the last sweep's span, not the whole tape
        grad[lowest:stop] = UNREACHED
        storage.widen_adjoints(lowest, stop)
        try:
            found = driver.backward(
                storage, block_rules.rule, node, grad, block_adjoints, check, visits
            )
        except BaseException:  # never half a sweep beside the last one's block adjoints
            storage.clear_adjoints()
            storage.blocks.adjoints = {}
            raise
        grad[lowest:stop] += 0.0
        storage.blocks.adjoints = block_adjoints
    if found is not None:
        raise NonFiniteError(diagnose.backward_origin(storage, *found))


def gradient(
    storage: TapeStorage, node: int, ids: list[int]
) -> FloatArray | list[float | FloatArray]:
    """d node / d i for each i of ``ids``, leaving the tape's adjoints untouched."""
    visits = driver.plan(storage, node)
    adjoints = np.zeros(len(storage))  # what the sweep does not touch stays zero
    adjoints[visits[1] : node + 1] = UNREACHED
    block_adjoints: dict[int, FloatArray] = {}
    # With block ops on the way, compute no more than the gradient needs:
    # no contribution to what none of `wrt` feeds (a layer's data X).
    needed = descendants(storage, ids, visits[1], node) if visits[0] else None
    driver.backward(
        storage, block_rules.rule, node, adjoints, block_adjoints, False, visits, needed
    )
    if not any(storage.block_value(i) is not None for i in ids):
        return adjoints[np.asarray(ids, dtype=np.intp)] + 0.0
    return [result(storage, i, adjoints, block_adjoints) for i in ids]


def vjp(storage: TapeStorage, node: int, ids: list[int], u: FloatArray) -> list[float | FloatArray]:
    """``u^T J``: the cotangent ``u`` (checked: ``node``'s shape, finite) pulled back to ``ids``."""
    block = storage.block_value(node)
    visits = driver.plan(storage, node)
    adjoints = np.zeros(len(storage))
    adjoints[visits[1] : node + 1] = UNREACHED
    block_adjoints: dict[int, FloatArray] = {}
    seed = float(u) if block is None else 0.0
    if block is not None:
        block_adjoints[node] = np.where(u == 0.0, UNREACHED, u)
    needed = descendants(storage, ids, visits[1], node) if visits[0] else None
    driver.backward(
        storage,
        block_rules.rule,
        node,
        adjoints,
        block_adjoints,
        False,
        visits,
        needed,
        seed,
    )
    return [result(storage, i, adjoints, block_adjoints) for i in ids]


def hvp(
    storage: TapeStorage, node: int, ids: list[int], direction: Iterable[ArrayLike]
) -> FloatArray | list[float | FloatArray]:
    """``H v`` of the scalar node ``node`` with respect to ``ids`` along ``direction``."""
    visits = driver.plan(storage, node)
    first, needed = second_order_adjoints(storage, node, ids, visits, "fa.hvp")
    second, block_second = second_pass(storage, node, ids, direction, visits, first, needed)
    if not any(storage.block_value(i) is not None for i in ids):
        return second[np.asarray(ids, dtype=np.intp)] + 0.0
    return [result(storage, i, second, block_second) for i in ids]


def hessian(storage: TapeStorage, node: int, ids: list[int]) -> FloatArray:
    """The Hessian of the scalar node ``node`` with respect to the scalar nodes ``ids``."""
    visits = driver.plan(storage, node)
    first, needed = second_order_adjoints(storage, node, ids, visits, "fa.hessian")
    nodes = np.asarray(ids, dtype=np.intp)
    rows = np.empty((len(ids), len(ids)))
    for t, unit in enumerate(np.eye(len(ids))):
        second, _ = second_pass(storage, node, ids, unit, visits, first, needed)
        rows[t] = second[nodes] + 0.0
    return rows
