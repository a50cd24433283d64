"""NumPy's products and contractions on blocks, composed of recorded ops.

``np.outer``, ``np.inner``, ``np.tensordot``, ``np.dot`` (every rank),
``np.vdot``, ``np.kron``, ``np.cross`` and ``np.einsum`` on block nodes
record reshapes, transposes, indexing, elementwise products, sums and
(stacked) matrix products, so every derivative (first and second order) is
those ops': nothing here has a rule of its own. The operands may mix blocks
and plain arrays; a scalar node is refused, naming the function.

``np.einsum`` takes the subscripts NumPy takes: ``...`` (the axes it stands
for named by letters the subscripts do not use; they must have one length
in every operand, where NumPy would also broadcast a length 1), a letter
repeated within one operand (its diagonal, taken first), implicit and
explicit outputs. The ops a call records are planned once per subscripts
and operand shapes, the order of the pairwise contractions being NumPy's
greedy path (``np.einsum_path``), and the plan is remembered: a loop
recording the same contraction at every step pays for its ops only. Each
pairwise contraction is one (stacked) matrix product (an elementwise one
beside a scalar); the last may stack one operand and broadcast the other
against it where that gives the output's order with fewer copies
(``ijk,jl->ilk`` as ``(1, l, j) @ (i, j, k)``: no copy of the 3-d operand,
where a transpose to ``(i, k, j)`` and one of the result would copy both).
"""

from __future__ import annotations

import functools
import math
import operator
import string
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from fastad.eager.array_functions import (
    axes_of,
    diagonal_last,
    moveaxis,
    operand,
    permuted,
    refuse_options,
)
from fastad.eager.block_params import normal_axis
from fastad.eager.blocks import stack
from fastad.eager.node import Var, matmul


def outer(a: Any, b: Any, out: Any = None) -> Any:
    refuse_options("outer", out=out)
    return operand(a, "outer").reshape((-1, 1)) * operand(b, "outer").reshape((1, -1))


def tensordot(a: Any, b: Any, axes: Any = 2) -> Any:
    x, y = operand(a, "tensordot"), operand(b, "tensordot")
    if isinstance(axes, (int, np.integer)):
        count = int(axes)
        if not 0 <= count <= min(x.ndim, y.ndim):
            raise ValueError(
                f"np.tensordot: axes={count} for arrays of shapes {x.shape} and {y.shape}"
            )
        left, right = list(range(x.ndim - count, x.ndim)), list(range(count))
    else:
        first, second = axes
        left = [normal_axis(x.shape, ax, x) for ax in axes_of(first)]
        right = [normal_axis(y.shape, ax, y) for ax in axes_of(second)]
    pairs = zip(left, right, strict=False)  # lengths compared first
    if len(left) != len(right) or any(x.shape[i] != y.shape[j] for i, j in pairs):
        raise ValueError(
            f"np.tensordot: axes {left} of shape {x.shape} and {right} of shape {y.shape} "
            "do not match"
        )
    free_x = [n for n in range(x.ndim) if n not in left]
    free_y = [n for n in range(y.ndim) if n not in right]
    inner_size = math.prod(x.shape[i] for i in left)
    rows = math.prod(x.shape[i] for i in free_x)
    columns = math.prod(y.shape[j] for j in free_y)
    matrix_x = _shaped(permuted(x, free_x + left), (rows, inner_size))
    matrix_y = _shaped(permuted(y, right + free_y), (inner_size, columns))
    shape = tuple(x.shape[i] for i in free_x) + tuple(y.shape[j] for j in free_y)
    product = matrix_x @ matrix_y  # (1, 1) for a full contraction: its one element
    return _shaped(product, shape) if shape else product.sum()


def inner(a: Any, b: Any) -> Any:
    x, y = operand(a, "inner"), operand(b, "inner")
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    return tensordot(x, y, ([-1], [-1]))


def dot(a: Any, b: Any, out: Any = None) -> Any:
    """``np.dot``: a product with a scalar, ``@`` up to two axes, else the sum over the last
    axis of ``a`` and the second-to-last of ``b``."""
    refuse_options("dot", out=out)
    if isinstance(a, Var) or isinstance(b, Var):
        return a * b
    x, y = operand(a, "dot"), operand(b, "dot")
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    if x.ndim <= 2 and y.ndim <= 2:
        return matmul(x, y)
    return tensordot(x, y, ([-1], [-2 if y.ndim > 1 else 0]))


def vdot(a: Any, b: Any) -> Any:
    x, y = operand(a, "vdot").reshape((-1,)), operand(b, "vdot").reshape((-1,))
    if x.shape != y.shape:
        raise ValueError(f"np.vdot: {x.shape[0]} and {y.shape[0]} elements (the same number)")
    return (x * y).sum()


def kron(a: Any, b: Any) -> Any:
    x, y = operand(a, "kron"), operand(b, "kron")
    rank = max(x.ndim, y.ndim)
    left = (1,) * (rank - x.ndim) + tuple(x.shape)
    right = (1,) * (rank - y.ndim) + tuple(y.shape)
    spread_x = x.reshape(tuple(n for size in left for n in (size, 1)))
    spread_y = y.reshape(tuple(n for size in right for n in (1, size)))
    return (spread_x * spread_y).reshape(tuple(m * n for m, n in zip(left, right, strict=True)))


def cross(
    a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None
) -> Any:
    if axis is not None:
        axisa = axisb = axisc = axis
    x = moveaxis(operand(a, "cross"), axisa, -1)
    y = moveaxis(operand(b, "cross"), axisb, -1)
    if x.shape[-1] != 3 or y.shape[-1] != 3:
        raise TypeError(
            f"np.cross of fastad blocks takes vectors of 3 components, got shapes {x.shape} and "
            f"{y.shape} (on the vectors' axis, last here)"
        )
    x0, x1, x2 = (x[..., i] for i in range(3))
    y0, y1, y2 = (y[..., i] for i in range(3))
    parts = [x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0]
    return moveaxis(stack(parts, axis=-1), -1, axisc)


def einsum(subscripts: str, *operands: Any, **options: Any) -> Any:
    """``np.einsum`` of blocks and arrays, as sums, diagonals, transposes and (stacked)
    products in the order of NumPy's greedy path; see the module's note."""
    options.pop("optimize", None)  # the order is chosen once, by NumPy's greedy path
    refuse_options("einsum", **options)
    if not isinstance(subscripts, str):
        raise TypeError("np.einsum of fastad blocks takes its subscripts as a string ('ij,jk->ik')")
    arrays = [operand(x, "einsum") for x in operands]
    return _plan(subscripts, tuple(tuple(x.shape) for x in arrays)).run(arrays)


Step = tuple[Callable[..., Any], tuple[int, ...]]
"""One op of a plan: a function and the slots of the values it is called with."""


class _Plan:
    """The ops one ``np.einsum`` call records, for one subscripts string and operand shapes.

    Slots number the values: the operands first, then each step's result.
    A step calls its function with the values in its slots; ``result`` is
    the slot of the contraction's value.
    """

    def __init__(self, steps: tuple[Step, ...], result: int) -> None:
        self.steps, self.result = steps, result

    def run(self, operands: list[Any]) -> Any:
        values = list(operands)
        for function, slots in self.steps:
            values.append(function(*[values[n] for n in slots]))
        return values[self.result]


class _Planned:
    """A value of a contraction being planned: its shape and its slot.

    The contraction's code (``_contraction``) runs on these once per
    subscripts and shapes; every op it asks for is appended to ``steps``,
    the steps of the plan that later calls run on blocks and arrays.
    """

    def __init__(self, steps: list[Step], operands: int, shape: tuple[int, ...], slot: int):
        self.steps, self.operands, self.shape, self.slot = steps, operands, shape, slot
        self.ndim = len(shape)

    def _then(
        self, function: Callable[..., Any], shape: tuple[int, ...], *others: _Planned
    ) -> _Planned:
        self.steps.append((function, (self.slot, *[other.slot for other in others])))
        return _Planned(self.steps, self.operands, shape, self.operands + len(self.steps) - 1)

    def transpose(self, order: tuple[int, ...]) -> _Planned:
        return self._then(
            operator.methodcaller("transpose", order), tuple(self.shape[n] for n in order)
        )

    def reshape(self, shape: tuple[int, ...]) -> _Planned:
        return self._then(operator.methodcaller("reshape", shape), shape)

    def __getitem__(self, key: Any) -> _Planned:
        shape = np.broadcast_to(0.0, self.shape)[key].shape  # a view: nothing allocated
        return self._then(operator.itemgetter(key), shape)

    def sum(self, axis: tuple[int, ...] | None = None) -> _Planned:
        if axis is None:
            return self._then(operator.methodcaller("sum"), ())
        kept = tuple(size for n, size in enumerate(self.shape) if n not in axis)
        return self._then(operator.methodcaller("sum", axis=axis), kept)

    def __matmul__(self, other: _Planned) -> _Planned:
        batch = np.broadcast_shapes(self.shape[:-2], other.shape[:-2])
        return self._then(operator.matmul, (*batch, self.shape[-2], other.shape[-1]), other)

    def __mul__(self, other: _Planned) -> _Planned:
        return self._then(operator.mul, np.broadcast_shapes(self.shape, other.shape), other)


@functools.lru_cache(maxsize=256)
def _plan(subscripts: str, shapes: tuple[tuple[int, ...], ...]) -> _Plan:
    """The plan of ``np.einsum(subscripts, ...)`` on operands of ``shapes``, remembered: an
    eager training loop records the same call at every step, and planning it (parsing the
    subscripts, NumPy's greedy path) costs more than recording its ops."""
    steps: list[Step] = []
    operands = [_Planned(steps, len(shapes), shape, n) for n, shape in enumerate(shapes)]
    result = _contraction(subscripts, operands).slot
    return _Plan(tuple(steps), result)


def _contraction(subscripts: str, arrays: list[Any]) -> Any:
    """``np.einsum(subscripts, *arrays)`` as sums, diagonals, transposes and products in the
    order of NumPy's greedy path, asked of ``arrays``; ``_plan`` runs it on ``_Planned``
    values."""
    groups, output = _letters(subscripts, arrays)
    terms = [_diagonals(x, group, subscripts) for x, group in zip(arrays, groups, strict=True)]
    sizes: dict[str, int] = {}
    for x, group in terms:
        for letter, size in zip(group, x.shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                if letter in subscripts:
                    raise ValueError(
                        f"np.einsum {subscripts!r}: letter {letter!r} stands for "
                        f"{sizes[letter]} and {size} elements"
                    )
                raise ValueError(
                    f"np.einsum {subscripts!r}: the axes under '...' of shapes "
                    f"{[tuple(x.shape) for x in arrays]} differ ({sizes[letter]} against "
                    f"{size}); broadcasting them is not recorded: np.broadcast_to the "
                    "operands to one shape under '...' first"
                )
    spec = ",".join(group for _, group in terms) + "->" + output
    for positions in _greedy_path(spec, [tuple(x.shape) for x, _ in terms]):
        picked = [terms[n] for n in positions]
        for n in sorted(positions, reverse=True):
            del terms[n]
        later = output + "".join(group for _, group in terms)
        x, group = picked[0]
        # NumPy's greedy path may take three or more operands in one step (where no
        # pair fits its size limit): a letter the operands still to come in the step
        # share is kept until they are in.
        for k, (y, other) in enumerate(picked[1:], start=2):
            needed = later + "".join(letters for _, letters in picked[k:])
            x, group = _sum_lone(x, group, needed + other)
            y, other = _sum_lone(y, other, needed + group)
            last = not terms and k == len(picked)  # its letters are the output's
            x, group = _contract(x, group, y, other, needed, sizes, output if last else "")
        terms.append(_sum_lone(x, group, later))
    ((x, group),) = terms
    x, group = _sum_lone(x, group, output)
    return permuted(x, [group.index(c) for c in output])


def _greedy_path(spec: str, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """NumPy's greedy contraction order for ``spec`` on operands of ``shapes``."""
    dummies = [np.broadcast_to(0.0, shape) for shape in shapes]
    return [
        tuple(positions) for positions in np.einsum_path(spec, *dummies, optimize="greedy")[0][1:]
    ]


def _letters(subscripts: str, arrays: list[Any]) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with ``...`` replaced by letters of its own
    (right-aligned, as NumPy broadcasts) and an implicit output made explicit."""
    spec = subscripts.replace(" ", "")
    inputs_spec, arrow, output = spec.partition("->")
    groups = inputs_spec.split(",")
    if len(groups) != len(arrays) or not all(
        c.isalpha() for c in "".join(groups).replace("...", "") + output.replace("...", "")
    ):
        raise ValueError(
            f"np.einsum of fastad blocks: subscripts {subscripts!r} for {len(arrays)} "
            "operand(s); give one group of letters per operand"
        )
    if any(group.count("...") > 1 for group in [*groups, output]):
        raise ValueError(
            f"np.einsum: {subscripts!r} has '...' twice in one group (once at most, as NumPy)"
        )
    free = [c for c in string.ascii_letters if c not in spec]
    spans = [x.ndim - len(g.replace("...", "")) for g, x in zip(groups, arrays, strict=True)]
    widest = max((n for g, n in zip(groups, spans, strict=True) if "..." in g), default=0)
    ellipsis = "".join(free[:widest])
    for n, (group, span) in enumerate(zip(groups, spans, strict=True)):
        if "..." in group:
            if span < 0:
                raise ValueError(
                    f"np.einsum: {group!r} names more axes than its operand of shape "
                    f"{arrays[n].shape} has"
                )
            groups[n] = group.replace("...", ellipsis[widest - span :])
    if arrow:
        if "..." in output:
            output = output.replace("...", ellipsis)
    else:  # implicit: the axes under '...', then the letters seen once, in order
        named = "".join(groups)
        once = sorted(c for c in set(named) if named.count(c) == 1 and c not in ellipsis)
        output = ellipsis + "".join(once)
    unknown = sorted(set(output) - set("".join(groups)))
    if unknown or len(set(output)) != len(output):
        raise ValueError(
            f"np.einsum: the output {output!r} of {subscripts!r} names letters that no operand "
            f"has ({unknown}) or a letter twice"
        )
    for group, x in zip(groups, arrays, strict=True):
        if len(group) != x.ndim:
            raise ValueError(
                f"np.einsum of fastad blocks: {group!r} for an operand of shape {x.shape} "
                "(one letter per axis)"
            )
    return groups, output


def _diagonals(x: Any, group: str, subscripts: str) -> tuple[Any, str]:
    """``x`` with each letter repeated in ``group`` reduced to its diagonal (last axis), as
    ``np.diagonal`` takes it."""
    while len(set(group)) != len(group):
        letter = next(c for c in group if group.count(c) > 1)
        first = group.index(letter)
        second = group.index(letter, first + 1)
        if x.shape[first] != x.shape[second]:
            raise ValueError(
                f"np.einsum {subscripts!r}: letter {letter!r} stands for {x.shape[first]} and "
                f"{x.shape[second]} elements"
            )
        x = diagonal_last(x, 0, first, second)
        group = "".join(c for n, c in enumerate(group) if n not in (first, second)) + letter
    return x, group


def _sum_lone(x: Any, group: str, kept: str) -> tuple[Any, str]:
    """``x`` summed over its letters not in ``kept``."""
    lone = tuple(n for n, c in enumerate(group) if c not in kept)
    if not lone:
        return x, group
    return x.sum(axis=lone), "".join(c for c in group if c in kept)


def _contract(
    x: Any, group: str, y: Any, other: str, later: str, sizes: dict[str, int], order: str = ""
) -> Any:
    """``x`` and ``y`` (letters ``group`` and ``other``) as one stacked product: shared letters
    needed ``later`` are its batch, the other shared ones are summed, the rest stay.

    ``order``, where given, is the order the result's letters are wanted in (the
    output's, for the last product): a product whose stack is the leading free
    letters of one operand, the other broadcast against it, may give that order
    with fewer copies (see ``_broadcast_form``).
    """
    if not group or not other:  # a scalar beside an array: their product
        return x * y, group or other
    batch = [c for c in group if c in other and c in later]
    summed = [c for c in group if c in other and c not in later]
    free_x = [c for c in group if c not in other]
    free_y = [c for c in other if c not in group]

    def size(letters: list[str]) -> int:
        return _elements(letters, sizes)

    form = _broadcast_form(x, group, y, other, summed, sizes, order) if order else None
    if form is not None:
        left, right, shape = form
        return _shaped(left @ right, shape), order
    left = permuted(x, [group.index(c) for c in batch + free_x + summed])
    right = permuted(y, [other.index(c) for c in batch + summed + free_y])
    stacked = (size(batch),) if batch else ()  # no batch: one matrix product
    left = _shaped(left, (*stacked, size(free_x), size(summed)))
    right = _shaped(right, (*stacked, size(summed), size(free_y)))
    shape = tuple(sizes[c] for c in batch + free_x + free_y)
    product = left @ right  # (1, 1) for a full contraction: its one element, a scalar
    return (_shaped(product, shape) if shape else product.sum()), "".join(batch + free_x + free_y)


BROADCAST_MIN_SIDE = 16
"""The fewest rows, columns and summed elements of each product for which
``_broadcast_form`` stacks products rather than making one. Thinner products
are many small BLAS calls, and the broadcast operand's gradient is their
stack summed: a stack of 2,000 products of (2, 64) by (64, 64) took 2.4x the
plain product's time forward and 5x with the backward pass, where (64, 48)
by (64, 32) products (64 of them) took 0.85x and 0.95x."""


def _broadcast_form(
    x: Any, group: str, y: Any, other: str, summed: list[str], sizes: dict[str, int], order: str
) -> tuple[Any, Any, tuple[int, ...]] | None:
    """``(left, right, shape)`` with ``(left @ right).reshape(shape)`` the product of ``x`` and
    ``y`` with its letters in ``order``, where that copies fewer elements than the plain
    product and its transpose to ``order`` and each product is at least
    ``BROADCAST_MIN_SIDE`` on every side; else None.

    The form: the operand holding ``order``'s leading letters is a stack over them; the
    other, a matrix of its free letters and the summed ones, is broadcast against it, on
    the left where its letters come next in ``order`` and on the right where they come
    last, as in ``ijk,jl->ilk``: ``(1, l, j) @ (i, j, k)``, with no copy of ``x``. It
    applies where the operands share no letter but the summed ones.
    """
    if any(c in other for c in group if c not in summed):
        return None  # a shared letter that stays: the plain product's batch

    def size(letters: str) -> int:
        return _elements(letters, sizes)

    def copied(letters: str, wanted: str) -> int:  # elements a transpose to wanted copies
        return 0 if letters == wanted else size(letters)

    inner = "".join(summed)
    free_x = "".join(c for c in group if c not in summed)
    free_y = "".join(c for c in other if c not in summed)
    fewest = (
        copied(group, free_x + inner)
        + copied(other, inner + free_y)
        + copied(free_x + free_y, order)
    )
    best = None
    # (the stacked operand, its letters, its free ones; the matrix, its letters, its free ones)
    for stacked, stacked_letters, rest, matrix, matrix_letters, free in (
        (x, group, free_x, y, other, free_y),
        (y, other, free_y, x, group, free_x),
    ):
        for cut in range(1, len(order)):
            leading = order[:cut]
            if not set(leading) <= set(rest):
                break
            mine = "".join(c for c in rest if c not in leading)
            if min(size(free), size(inner), size(mine)) < BROADCAST_MIN_SIDE:
                continue
            if order[cut:] == free + mine:  # (1, free, inner) @ (leading, inner, mine)
                left = (matrix, matrix_letters, free + inner, (1, size(free), size(inner)))
                right = (
                    stacked,
                    stacked_letters,
                    leading + inner + mine,
                    (size(leading), size(inner), size(mine)),
                )
            elif order[cut:] == mine + free:  # (leading, mine, inner) @ (1, inner, free)
                left = (
                    stacked,
                    stacked_letters,
                    leading + mine + inner,
                    (size(leading), size(mine), size(inner)),
                )
                right = (matrix, matrix_letters, inner + free, (1, size(inner), size(free)))
            else:
                continue
            cost = copied(left[1], left[2]) + copied(right[1], right[2])
            if cost < fewest:
                fewest, best = cost, (left, right)
    if best is None:
        return None
    left_x, right_y = (
        _shaped(permuted(value, [letters.index(c) for c in wanted]), shape)
        for value, letters, wanted, shape in best
    )
    return left_x, right_y, tuple(sizes[c] for c in order)


def _elements(letters: Iterable[str], sizes: dict[str, int]) -> int:
    """How many elements the axes named by ``letters`` span."""
    return math.prod(sizes[c] for c in letters)


def _shaped(x: Any, shape: tuple[int, ...]) -> Any:
    """``x.reshape(shape)``, or ``x`` itself where it has that shape."""
    return x if tuple(x.shape) == shape else x.reshape(shape)


HANDLED: dict[Callable[..., Any], Callable[..., Any]] = {
    np.outer: outer,
    np.inner: inner,
    np.tensordot: tensordot,
    np.dot: dot,
    np.vdot: vdot,
    np.kron: kron,
    np.cross: cross,
    np.einsum: einsum,
}
"""NumPy function -> its composition on blocks (``numpy_protocol`` dispatches to them)."""
