"""The articles' six worked examples as demo sections, each printed and checked.

Each ``show_example_*`` records its example (the ``model``, by default the
one in :mod:`fastad.demo.models`), prints what the articles print (node
tables, values, gradients) and returns its checks against central
differences, NumPy by hand and the articles' own numbers.
"""

from __future__ import annotations

import math
import pathlib
import time
import tracemalloc
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

import fastad as fa
from fastad.demo.checks import (
    CENTRAL_DIFFERENCE_TOLERANCE,
    EXACT_TOLERANCE,
    MEMORY_FRACTION,
    ROUNDING_TOLERANCE,
    Check,
    as_list,
    check_close,
    check_digits,
    check_error,
    check_that,
    flatten,
    header,
    relative_error,
)
from fastad.demo.models import (
    example_1,
    example_2,
    example_3,
    example_4,
    example_5,
    example_6,
)
from fastad.demo.references import central_difference, central_differences, example_6_numpy

if TYPE_CHECKING:
    from fastad.demo.checks import Output
    from fastad.demo.models import Model
    from fastad.util.hints import FloatArray, StrPath


def record_scalars(
    function: Model, names: Sequence[str], point: Iterable[float]
) -> tuple[fa.Tape, list[fa.Var], fa.Var]:
    """Record ``function`` at ``point`` on a fresh tape and run backward: (tape, leaves, out)."""
    with fa.Tape() as tape:
        leaves = [fa.var(v, name=n) for n, v in zip(names, point, strict=True)]
        output = function(*leaves)
        output.backward()
    return tape, leaves, output


def gradients_against_central_differences(
    out: Output,
    function: Model,
    names: Sequence[str],
    point: Sequence[float],
    leaves: Sequence[fa.Var],
) -> Check:
    """Print each gradient beside its central difference; return the check of the worst."""
    analytic: list[float] = []
    numeric: list[float] = []
    for i, (name, leaf) in enumerate(zip(names, leaves, strict=True)):
        difference = central_difference(function, point, i)
        analytic.append(leaf.grad)
        numeric.append(difference)
        out(
            f"  d/d{name:<3} = {leaf.grad: .8f}   central difference {difference: .8f}"
            f"   relative error {relative_error(leaf.grad, difference):.1e}"
        )
    # The worst of the per-gradient relative errors printed above (the articles' measure).
    worst = max(relative_error(a, n) for a, n in zip(analytic, numeric, strict=True))
    return check_error(
        out, "gradients vs central differences (fresh tapes)", worst, CENTRAL_DIFFERENCE_TOLERANCE
    )


def contributions_to(tape: fa.Tape, leaf: fa.Var) -> list[tuple[int, float]]:
    """(consumer id, adjoint of consumer * local derivative) for every edge out of ``leaf``."""
    contributions = []
    consumers = np.flatnonzero((tape.in0 == leaf.id) | (tape.in1 == leaf.id))
    partials = tape.local_partials(consumers)
    for consumer, (d0, d1) in zip(consumers, partials, strict=True):
        for slot, local in ((0, d0), (1, d1)):
            if (tape.in0, tape.in1)[slot][consumer] == leaf.id:
                contributions.append((int(consumer), float(tape.grad[consumer] * local)))
    return contributions


def show_example_1(
    out: Output = print, model: Model | None = None, draw_to: StrPath | None = None
) -> list[Check]:
    """Example 1 teaches fan-out: a node used twice collects the sum of its edges.

    z = (x*y + x)^2 at x=2, y=3 gives z = 64, dz/dx = 64, dz/dy = 32; x gets
    16 along the direct edge and 48 through x*y. Writing `=` for `+=` keeps
    only one of them (48 or 16). At x=0, y=-1 both gradients are 0.
    """
    model = model or example_1
    header(out, "Example 1: z = (x*y + x)^2 at x=2, y=3")
    out("  x reaches z twice (through x*y and directly), so its adjoint is a sum.")
    tape, (x, y), z = record_scalars(model, ["x", "y"], [2.0, 3.0])
    out(tape.table(grad=True))
    parts = " + ".join(
        f"{g:g} via #{node} ({tape.node(node).op})" for node, g in contributions_to(tape, x)
    )
    out(f"  z = {z.value:g}; dz/dx = {x.grad:g} = {parts}; dz/dy = {y.grad:g}")
    checks = [gradients_against_central_differences(out, model, ["x", "y"], [2.0, 3.0], [x, y])]
    checks.append(
        check_close(
            out,
            "z, dz/dx, dz/dy = the article's 64, 64, 32",
            [z.value, x.grad, y.grad],
            [64.0, 64.0, 32.0],
            EXACT_TOLERANCE,
        )
    )
    _, (x0, y0), z0 = record_scalars(model, ["x", "y"], [0.0, -1.0])
    out(f"  at x=0, y=-1: z = {z0.value:g}, dz/dx = {x0.grad:g}, dz/dy = {y0.grad:g}")
    checks.append(
        gradients_against_central_differences(out, model, ["x", "y"], [0.0, -1.0], [x0, y0])
    )
    checks.append(
        check_close(
            out,
            "at x=0, y=-1: z, dz/dx, dz/dy = the article's 0, 0, 0",
            [z0.value, x0.grad, y0.grad],
            [0.0, 0.0, 0.0],
            EXACT_TOLERANCE,
        )
    )
    if draw_to is not None:
        draw(tape, draw_to, out)
    out("")
    return checks


EXAMPLE_2_NAMES = ["w1", "x1", "w2", "x2", "b", "y"]
EXAMPLE_2_POINT = [0.5, 1.2, -0.3, 0.8, 0.1, 1.0]
# The article's table (nodes 6..12, 4 decimals) and gradients (8 decimals).
EXAMPLE_2_NODE_VALUES = [0.6000, -0.2400, 0.3600, 0.4600, 0.6130, -0.3870, 0.1498]
EXAMPLE_2_GRADIENTS = [
    -0.22032911,
    -0.09180379,
    -0.14688607,
    0.05508228,
    -0.18360759,
    0.77397165,
]


def show_example_2(
    out: Output = print, model: Model | None = None, draw_to: StrPath | None = None
) -> list[Check]:
    """Example 2 teaches the node table and the chain rule through a sigmoid.

    One neuron with squared error: 13 nodes (6 leaves, 7 operations), the last
    one d*d with the same node on both edges; one backward sweep gives all six
    gradients at once.
    """
    model = model or example_2
    header(out, "Example 2: L = (sigmoid(w1*x1 + w2*x2 + b) - y)^2")
    out("  The node table in the article's form: id, op, value, inputs.")
    tape, leaves, loss = record_scalars(model, EXAMPLE_2_NAMES, EXAMPLE_2_POINT)
    out(tape.table())
    out(f"  L = {loss.value:.10g}")
    checks = [
        gradients_against_central_differences(out, model, EXAMPLE_2_NAMES, EXAMPLE_2_POINT, leaves),
        check_that(out, "13 nodes, as the article's table", len(tape) == 13, f"{len(tape)} nodes"),
    ]
    if len(tape) == 13:
        checks.append(
            check_digits(
                out,
                "node values 6..12 = the article's table",
                tape.val[6:],
                EXAMPLE_2_NODE_VALUES,
                4,
            )
        )
    checks.append(
        check_digits(
            out,
            "gradients = the article's 8 decimals",
            [leaf.grad for leaf in leaves],
            EXAMPLE_2_GRADIENTS,
            8,
        )
    )
    if draw_to is not None:
        draw(tape, draw_to, out)
    out("")
    return checks


def show_example_3(out: Output = print, model: Model | None = None) -> list[Check]:
    """Example 3 teaches broadcasting: a copied operand sums its gradient back.

    b (3,) is copied onto both rows of X (2, 3) on the way forward, so on the
    way back db is dY summed over the rows, and has b's shape again.
    """
    model = model or example_3
    header(out, "Example 3: broadcasting, Y = X + b with X (2, 3) and b (3,)")
    out("  b is copied onto every row of X, so db sums dY over the rows: db has b's shape.")
    X0 = np.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    b0 = np.array([1.0, 2.0, 3.0])
    upstream = np.array([[1.0, 0.0, 2.0], [3.0, 1.0, 0.0]])

    def loss(X: fa.Block, b: fa.Block) -> fa.Var:  # L = sum(Y * dY): dL/dY is dY
        return (model(X, b) * upstream).sum()

    with fa.Tape():
        X, b = fa.var(X0, name="X"), fa.var(b0, name="b")
        Y = model(X, b)
        (Y * upstream).sum().backward()
    out(f"  X = {as_list(X0)},  b = {as_list(b0)}")
    out(f"  Y = X + b = {as_list(Y.value)}")
    out(f"  upstream dY = {as_list(upstream)}")
    out(f"  db = {as_list(b.grad)}  (shape {np.shape(b.grad)}),  dX = {as_list(X.grad)}")
    numeric = central_differences(loss, [X0, b0])
    checks = [
        check_close(
            out,
            "dX, db vs central differences (fresh tapes)",
            flatten([X.grad, b.grad]),
            flatten(numeric),
            CENTRAL_DIFFERENCE_TOLERANCE,
        ),
        check_close(
            out,
            "Y = the article's [[11, 22, 33], [41, 52, 63]]",
            Y.value,
            [[11.0, 22.0, 33.0], [41.0, 52.0, 63.0]],
            EXACT_TOLERANCE,
        ),
        check_close(out, "db = the article's [4, 1, 2]", b.grad, [4.0, 1.0, 2.0], EXACT_TOLERANCE),
        check_close(out, "dX = dY, as the article", X.grad, upstream, EXACT_TOLERANCE),
    ]
    out("")
    return checks


def show_example_4(out: Output = print, model: Model | None = None) -> list[Check]:
    """Example 4 teaches the two VJPs of one linear layer y = W x.

    With L = 0.5 ||y - t||^2 the upstream gradient is y - t, and the same
    vector serves both: dL/dW = (y - t) x^T has W's shape (the update is
    elementwise), dL/dx = W^T (y - t). No Jacobian appears.
    """
    model = model or example_4
    header(out, "Example 4: one linear layer, L = 0.5 * ||W x - t||^2")
    out("  One upstream gradient dL/dy = y - t feeds both VJPs: dL/dW = dL/dy x^T,")
    out("  dL/dx = W^T dL/dy. dL/dW has W's shape, so the update W - eta dL/dW is elementwise.")
    W0 = np.array([[1.0, 2.0], [3.0, 4.0]])
    x0 = np.array([1.0, 0.5])
    t = np.array([1.0, 1.0])

    def loss(W: fa.Block, x: fa.Block) -> fa.Var:
        r = model(W, x) - t
        return 0.5 * (r * r).sum()

    with fa.Tape():
        W, x = fa.var(W0, name="W"), fa.var(x0, name="x")
        y = model(W, x)
        r = y - t
        L = 0.5 * (r * r).sum()
        L.backward()
    out(f"  W = {as_list(W0)},  x = {as_list(x0)},  t = {as_list(t)}")
    out(f"  y = W x = {as_list(y.value)},  dL/dy = y - t = {as_list(y.grad)},  L = {L.value:g}")
    out(f"  dL/dW = {as_list(W.grad)},  dL/dx = {as_list(x.grad)}")
    numeric = central_differences(loss, [W0, x0])
    checks = [
        check_close(
            out,
            "dL/dW, dL/dx vs central differences (fresh tapes)",
            flatten([W.grad, x.grad]),
            flatten(numeric),
            CENTRAL_DIFFERENCE_TOLERANCE,
        ),
        check_close(out, "y = the article's [2, 5]", y.value, [2.0, 5.0], EXACT_TOLERANCE),
        check_close(
            out,
            "dL/dW = the article's [[1, 0.5], [4, 2]]",
            W.grad,
            [[1.0, 0.5], [4.0, 2.0]],
            EXACT_TOLERANCE,
        ),
        check_close(out, "dL/dx = the article's [13, 18]", x.grad, [13.0, 18.0], EXACT_TOLERANCE),
    ]
    out("")
    return checks


def show_example_5(
    out: Output = print, model: Model | None = None, learning_rate: float = 0.1
) -> list[Check]:
    """Example 5 teaches that backward only computes gradients; the step is separate.

    L(w) = (w - 3)^2 at w0 = 0: backward gives dL/dw = -6, and the optimiser
    step w1 = w0 - eta dL/dw = 0.6 solves the sub-problem
    min_d L(w0) + dL/dw d + d^2 / (2 eta), here 9 - 6 d + 5 d^2.
    """
    model = model or example_5
    header(out, "Example 5: one gradient-descent step, L(w) = (w - 3)^2 from w0 = 0, eta = 0.1")
    out("  Backward only computes dL/dw; the update is a separate step, after it.")
    w0 = 0.0
    _, (w,), L0 = record_scalars(model, ["w"], [w0])
    w1 = w0 - learning_rate * w.grad  # the optimiser step, outside the tape
    penalty = 1.0 / (2.0 * learning_rate)
    out(f"  L(w0) = {L0.value:g},  dL/dw(w0) = {w.grad:g}")
    out(f"  w1 = w0 - eta * dL/dw = {w1:.12g}")
    out(
        f"  the same step solves min_d {L0.value:g} + ({w.grad:g}) d + {penalty:g} d^2:"
        f" the parabola's vertex is d = {-w.grad / (2.0 * penalty):.12g}"
    )
    with fa.Tape():
        L1 = model(fa.var(w1)).value
    out(f"  L(w1) = {L1:.12g} < L(w0) = {L0.value:g}")
    checks = [
        gradients_against_central_differences(out, model, ["w"], [w0], [w]),
        check_close(out, "w1 = the article's 0.6", w1, 0.6, EXACT_TOLERANCE),
    ]
    out("")
    return checks


def show_example_6(
    out: Output = print,
    model: Model | None = None,
    sizes: tuple[int, int, int, int] = (64, 512, 1024, 10),
    seed: int = 6,
) -> list[Check]:
    """Example 6 teaches that backpropagation never builds a Jacobian.

    A two-layer network at the articles' size B=64, n=512, h=1024 (m=10
    outputs): every backward step is a VJP with the weights (dX = dZ1 W1^T,
    dW1 = X^T dZ1), every gradient has its parameter's shape, and the
    (B h) x (B n) Jacobian dZ1/dX is never formed. Checked against the
    article's table of VJPs written in NumPy and a directional central
    difference.
    """
    model = model or example_6
    B, n, h, m = sizes
    header(out, f"Example 6: a two-layer network at B={B}, n={n}, h={h}, m={m}")
    out("  X (B, n) -> W1, b1 -> Z1 -> sigmoid -> H -> W2, b2 -> Z2,  L = 0.5 * ||Z2 - T||^2")
    rng = np.random.default_rng(seed)
    parameters = {
        "X": rng.normal(size=(B, n)),
        "W1": rng.normal(size=(n, h)) / np.sqrt(n),
        "b1": rng.normal(size=h) * 0.1,
        "W2": rng.normal(size=(h, m)) / np.sqrt(h),
        "b2": rng.normal(size=m) * 0.1,
    }
    T = rng.normal(size=(B, m))

    def loss(X: fa.Block, W1: fa.Block, b1: fa.Block, W2: fa.Block, b2: fa.Block) -> fa.Var:
        return model(X, W1, b1, W2, b2, T)

    def step() -> tuple[fa.Tape, fa.Var, list[FloatArray]]:
        with fa.Tape() as tape:
            nodes = [fa.var(a, name=name) for name, a in parameters.items()]
            L = loss(*nodes)
            L.backward()
        return tape, L, [node.grad for node in nodes]

    tape, L, gradients = step()
    # Time a second, identical step: the first also loads kernels from Numba's cache.
    started = time.perf_counter()
    step()
    elapsed = time.perf_counter() - started
    out(f"  forward + backward: {len(tape)} nodes, {elapsed * 1e3:.1f} ms; L = {L.value:.6f}")
    # And a third under tracemalloc, which counts every NumPy array the step allocates.
    tracemalloc.start()
    try:
        step()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    X, W1, b1, W2, b2 = parameters.values()
    by_hand = example_6_numpy(X, W1, b1, W2, b2, T)
    out(f"  {'parameter':<10} {'shape':<13} {'gradient shape':<15} relative error vs NumPy by hand")
    for (name, value), gradient, reference in zip(
        parameters.items(), gradients, by_hand, strict=True
    ):
        error = (
            relative_error(gradient, reference) if np.shape(gradient) == value.shape else math.nan
        )
        out(f"  {name:<10} {str(value.shape):<13} {str(np.shape(gradient)):<15} {error:.1e}")
    shapes_match = [
        np.shape(g) == a.shape for g, a in zip(gradients, parameters.values(), strict=True)
    ]
    numbers = (B * h) * (B * n)
    out(
        f"  The Jacobian dZ1/dX would be (B h) x (B n) = {B * h} x {B * n} = {numbers:.2e} numbers:"
    )
    out(
        f"  {numbers * 4 / 1e9:.1f} GB in float32, {numbers * 8 / 1e9:.1f} GB in float64."
        " No Jacobian is built: every backward"
    )
    out(
        "  step is a VJP with the weights (dX = dZ1 @ W1.T, dW1 = X.T @ dZ1);"
        f" the step peaked at {peak / 1e6:.1f} MB."
    )
    checks = [
        check_that(
            out,
            "every gradient has its parameter's shape",
            all(shapes_match),
            f"{sum(shapes_match)} of {len(shapes_match)}",
        )
    ]
    if all(shapes_match):
        checks.append(
            check_close(
                out,
                "gradients vs the article's VJP table in NumPy",
                flatten(gradients),
                flatten(by_hand),
                ROUNDING_TOLERANCE,
            )
        )
        checks.append(directional_check(out, loss, list(parameters.values()), gradients, rng))
    fraction = peak / (numbers * 4)
    checks.append(
        check_that(
            out,
            "no Jacobian: peak memory of the step vs the float32 Jacobian",
            fraction <= MEMORY_FRACTION,
            f"{fraction:.1e} of it (at most {MEMORY_FRACTION:g})",
        )
    )
    out("")
    return checks


def directional_check(
    out: Output,
    loss: Model,
    arrays: Sequence[FloatArray],
    gradients: Sequence[FloatArray],
    rng: np.random.Generator,
    step: float = 1e-4,
) -> Check:
    """<gradient, v> against (L(p + h v) - L(p - h v)) / 2h along one random unit direction v.

    The first article's check for large models: one pair of evaluations tests
    every gradient entry at once (though it cannot say which one is wrong).
    """
    unnormalised = [rng.normal(size=np.shape(a)) for a in arrays]
    norm = math.sqrt(sum(float(np.sum(v * v)) for v in unnormalised))
    directions = [v / norm for v in unnormalised]

    def at(offset: float) -> float:
        with fa.Tape():
            shifted = [fa.var(a + offset * v) for a, v in zip(arrays, directions, strict=True)]
            return loss(*shifted).value

    numeric = (at(step) - at(-step)) / (2.0 * step)
    analytic = sum(float(np.sum(g * v)) for g, v in zip(gradients, directions, strict=True))
    out(f"  along a random unit direction v: <grad, v> = {analytic:.10f}, central {numeric:.10f}")
    return check_close(
        out,
        "<grad, v> vs a central difference along v",
        analytic,
        numeric,
        CENTRAL_DIFFERENCE_TOLERANCE,
    )


def draw(tape: fa.Tape, stem: StrPath, out: Output = print) -> None:
    """Write ``stem.dot`` and, if Graphviz is available, ``stem.svg``."""
    stem = pathlib.Path(stem)
    stem.with_suffix(".dot").write_text(tape.to_dot())
    try:
        tape.render(stem.with_suffix(".svg"))
        out(f"  drew {stem.with_suffix('.dot')} and {stem.with_suffix('.svg')}")
    except RuntimeError as missing:
        out(f"  drew {stem.with_suffix('.dot')}; no SVG: {missing}")
