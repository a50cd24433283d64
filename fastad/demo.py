"""``fastad demo``: the articles' six worked examples, a compiled batch, one fused layer.

Each section records a computation, prints what the articles print (node
tables, values, gradients) and checks every result against a reference that
does not use the backward sweep under check:

- central differences, each side recorded on a fresh tape (the articles'
  "finite differences are the referee");
- a hand-written NumPy gradient (the articles' derivations, written out);
- the articles' own numbers.

``main`` returns the list of ``Check`` results; ``verdict`` turns them into
the final line and ``fastad demo`` exits non-zero if any check failed.

The computations under check are the module-level functions ``example_1``
... ``example_6`` and ``fused_layer``, looked up when a section runs. A test
can plant a wrong one (``monkeypatch.setattr(demo, "example_1", wrong)``, or
the ``model=`` argument of each ``show_*`` function) to see the demo fail.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
from numpy.typing import ArrayLike

import fastad as fa

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, StrPath

    Output = Callable[[str], object]
    """Where the demo prints its lines (``print``, or a list's ``append`` in tests)."""
    Model = Callable[..., Any]
    """A computation under check (``example_1`` ...), or a planted wrong one."""

# -- tolerances, and why ----------------------------------------------------------------
# Central differences with step h = 1e-6 (scaled by max(1, |x|)) are off by the
# truncation error h^2 |f'''| / 6 (~1e-12 here) plus rounding eps |f| / h (~1e-10
# for |f| <= 100): measured 1e-11 to 1e-9. 1e-6 leaves three orders of margin,
# while the bugs the articles warn about (`=` instead of `+=` gives 48 for 64)
# are errors of 10% and more.
CENTRAL_DIFFERENCE_TOLERANCE = 1e-6
# The same formula evaluated by different code (BLAS vs a kernel, NumPy vs the
# sweep, another summation order) differs by rounding only: ~1e-16 relative per
# operation, ~1e-14 after sums of 10^3 terms. 1e-10 is far above that and far
# below any wrong rule.
ROUNDING_TOLERANCE = 1e-10
# Replay of a compiled function equals eager recording bit for bit (documented in
# the README and pinned by tests/test_compiled.py). The demo asks only for agreement
# to rounding, so a difference in the last bit on some platform's libm does not read
# as a wrong gradient.
REPLAY_TOLERANCE = 1e-12
# Numbers the articles give exactly (small integers and halves): rounding only.
EXACT_TOLERANCE = 1e-12
# Example 6 must not build a Jacobian: the whole step may use at most 1% of the
# memory that Jacobian would need (it uses a fraction of a percent).
MEMORY_FRACTION = 0.01


# -- checks ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Check:
    """One comparison of a result with an independent reference."""

    what: str
    passed: bool
    detail: str
    section: str = ""  # set by ``main``: which example the check belongs to

    def line(self) -> str:
        """The printed line: ``ok`` or ``FAILED``, what was compared, and how well."""
        return f"  {'ok' if self.passed else 'FAILED':<6} {self.what}: {self.detail}"


def relative_error(got: ArrayLike, want: ArrayLike) -> float:
    """``max |got - want|`` over all elements, relative to the larger of ``max |got|, max |want|``.

    0 when they are equal. For one number this is the articles' relative error
    (to within its own size). Relative to the larger side, a result that is 0
    where it should not be (or the reverse) gives 1, not a division by zero.
    ``nan`` anywhere gives ``nan``, which fails every check.
    """
    a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if np.array_equal(a, b):
        return 0.0
    scale = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    return float(np.max(np.abs(a - b)) / scale)


def check_that(out: Output, what: str, passed: object, detail: str) -> Check:
    """Print and return a check decided by ``passed``."""
    result = Check(what, bool(passed), detail)
    out(result.line())
    return result


def check_error(out: Output, what: str, error: float, tolerance: float) -> Check:
    """Print and return a check that passes when ``error <= tolerance`` (``nan`` fails)."""
    passed = error <= tolerance
    return check_that(
        out, what, passed, f"relative error {error:.1e} {'<=' if passed else '>'} {tolerance:.0e}"
    )


def check_close(out: Output, what: str, got: ArrayLike, want: ArrayLike, tolerance: float) -> Check:
    """Print and return a check that ``got`` equals ``want`` to ``tolerance`` (relative)."""
    if np.shape(got) != np.shape(want):
        return check_that(out, what, False, f"shape {np.shape(got)}, expected {np.shape(want)}")
    return check_error(out, what, relative_error(got, want), tolerance)


def check_digits(out: Output, what: str, got: ArrayLike, want: ArrayLike, decimals: int) -> Check:
    """Print and return a check that ``got`` rounds to the article's ``decimals`` digits."""
    if np.shape(got) != np.shape(want):
        return check_that(out, what, False, f"shape {np.shape(got)}, expected {np.shape(want)}")
    error = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
    half_unit = 0.5 * 10.0**-decimals  # what rounding to the printed digits may hide
    passed = error <= half_unit * (1 + 1e-9)
    return check_that(
        out, what, passed, f"max |difference| {error:.1e} {'<=' if passed else '>'} {half_unit:.0e}"
    )


def verdict(checks: Sequence[Check]) -> tuple[bool, str]:
    """``(passed, final line)`` for a list of checks."""
    failed = [check for check in checks if not check.passed]
    if failed:
        names = "; ".join(f"{check.section}: {check.what}" for check in failed)
        return False, f"FAILED: {len(failed)} of {len(checks)} checks disagree: {names}"
    return True, f"all {len(checks)} checks agree with their independent references"


def flatten(arrays: Iterable[ArrayLike]) -> FloatArray:
    """Several arrays as one flat vector, for one check over all of them."""
    return np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in arrays])


def describe_ops(ops: Sequence[str]) -> str:
    """The nodes a computation recorded: their ops if few, else how many."""
    return ", ".join(ops) if len(ops) <= 4 else f"{len(ops):,} nodes"


def header(out: Output, title: str) -> None:
    """A section title and its underline."""
    out(title)
    out("-" * len(title))


def as_list(array: ArrayLike) -> object:
    """An array as nested Python lists: ``[4.0, 1.0, 2.0]``, the way the articles write it."""
    return np.asarray(array).tolist()


# -- the computations under check ---------------------------------------------------------
def example_1(x: fa.Var, y: fa.Var) -> fa.Var:
    """z = (x*y + x)**2: x reaches z along two paths, so its adjoints must add."""
    return (x * y + x) ** 2


def example_2(w1: fa.Var, x1: fa.Var, w2: fa.Var, x2: fa.Var, b: fa.Var, y: fa.Var) -> fa.Var:
    """L = (sigmoid(w1*x1 + w2*x2 + b) - y)**2: one neuron, squared error."""
    return (fa.sigmoid(w1 * x1 + w2 * x2 + b) - y) ** 2


def example_3(X: fa.Block, b: fa.Block) -> fa.Block:
    """Y = X + b: b of shape (3,) is broadcast over the rows of X of shape (2, 3)."""
    return X + b


def example_4(W: fa.Block, x: fa.Block) -> fa.Block | fa.Var:
    """y = W @ x: one linear layer without bias."""
    return W @ x


def example_5(w: fa.Var) -> fa.Var:
    """L(w) = (w - 3)**2: the loss of the gradient-descent example."""
    return (w - 3.0) ** 2


def example_6(
    X: fa.Block, W1: fa.Block, b1: fa.Block, W2: fa.Block, b2: fa.Block, T: FloatArray
) -> fa.Var:
    """L = 0.5 * ||sigmoid(X @ W1 + b1) @ W2 + b2 - T||^2: a two-layer network."""
    H = fa.sigmoid(X @ W1 + b1)
    Z2 = H @ W2 + b2
    return 0.5 * ((Z2 - T) ** 2).sum()


def fused_layer(X: fa.Block, W: fa.Block, b: fa.Block) -> fa.Block:
    """relu(X @ W + b) as one fused node with a hand-derived backward rule."""
    return fa.linear_relu(X, W, b)


# -- independent references ---------------------------------------------------------------
def central_difference(
    function: Model, point: Sequence[float], index: int, step: float = 1e-6
) -> float:
    """(f(p + h e_i) - f(p - h e_i)) / 2h, each side recorded on its own tape."""

    def at(offset: float) -> float:
        shifted = list(point)
        shifted[index] += offset
        with fa.Tape():
            return function(*(fa.var(v) for v in shifted)).value

    return (at(step) - at(-step)) / (2.0 * step)


def central_differences(
    loss: Model, arrays: Iterable[ArrayLike], step: float = 1e-6
) -> list[FloatArray]:
    """The gradient of ``loss(*arrays)`` (a scalar) by central differences, element by element.

    Every evaluation records ``loss`` on a fresh tape; the step of an element
    is ``step * max(1, |value|)`` so that large entries are not drowned in rounding.
    """
    copies = [np.array(a, dtype=np.float64) for a in arrays]

    def at(which: int, position: tuple[int, ...], offset: float) -> float:
        shifted = [a.copy() for a in copies]
        shifted[which][position] += offset
        with fa.Tape():
            return loss(*(fa.var(a) for a in shifted)).value

    gradients = []
    for which, array in enumerate(copies):
        gradient = np.empty_like(array)
        for position, value in np.ndenumerate(array):
            h = step * max(1.0, abs(value))
            gradient[position] = (at(which, position, h) - at(which, position, -h)) / (2.0 * h)
        gradients.append(gradient)
    return gradients


def example_2_numpy(P: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Example 2's value and gradient at every row of ``P`` (N, 6), by hand in NumPy.

    The article's derivation: with s = sigmoid(z), r = s - y and
    dz = 2 r s (1 - s): dL/dw1 = dz x1, dL/dx1 = dz w1, ..., dL/db = dz, dL/dy = -2 r.
    """
    w1, x1, w2, x2, b, y = (np.ascontiguousarray(column) for column in P.T)
    s = 1.0 / (1.0 + np.exp(-(w1 * x1 + w2 * x2 + b)))
    r = s - y
    dz = 2.0 * r * s * (1.0 - s)
    return r * r, np.stack([dz * x1, dz * w1, dz * x2, dz * w2, dz, -2.0 * r], axis=1)


def example_6_numpy(
    X: FloatArray, W1: FloatArray, b1: FloatArray, W2: FloatArray, b2: FloatArray, T: FloatArray
) -> list[FloatArray]:
    """Example 6's gradients (dX, dW1, db1, dW2, db2) by hand: the article's table of VJPs."""
    H = 1.0 / (1.0 + np.exp(-(X @ W1 + b1)))
    dZ2 = H @ W2 + b2 - T  # dL/dZ2 = Z2 - T
    dZ1 = (dZ2 @ W2.T) * H * (1.0 - H)  # through the sigmoid: sigma' = H (1 - H)
    return [dZ1 @ W1.T, X.T @ dZ1, dZ1.sum(axis=0), H.T @ dZ2, dZ2.sum(axis=0)]


def layer_numpy(
    X: FloatArray, W: FloatArray, b: FloatArray, upstream: FloatArray
) -> tuple[FloatArray, list[FloatArray]]:
    """relu(X @ W + b) and the gradients of sum(upstream * it) w.r.t. X, W, b, by hand."""
    Z = X @ W + b
    dZ = upstream * (Z > 0)  # relu'(0) = 0
    return np.maximum(Z, 0.0), [dZ @ W.T, X.T @ dZ, dZ.sum(axis=0)]


# -- the sections ---------------------------------------------------------------------------
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


def show_compiled_batch(
    out: Output = print,
    model: Model | None = None,
    points: int = 1_000_000,
    seed: int = 2,
    repeats: int = 3,
) -> list[Check]:
    """Trace example 2 once with ``fa.compile``, then value and gradient at a million points.

    The replay runs in compiled code with no Python per point or per node.
    Checked against eager recording at a few points and against the
    hand-written NumPy gradient at every point.
    """
    model = model or example_2
    header(out, f"Compiled batch: example 2 at {points:,} points")
    out("  fa.compile traces example 2 once; value_and_grad replays it per point in compiled code.")
    rng = np.random.default_rng(seed)
    P = np.asarray(EXAMPLE_2_POINT) + rng.normal(size=(points, 6))
    P[0] = EXAMPLE_2_POINT  # row 0 is the article's point
    f = fa.compile(model)
    started = time.perf_counter()
    values, gradients = f.value_and_grad(P)
    assert isinstance(values, np.ndarray)  # a batch of points: one value per point
    first = time.perf_counter() - started
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        f.value_and_grad(P)
        best = min(best, time.perf_counter() - started)
    out(
        f"  f.value_and_grad(P), P of shape {P.shape}: {best * 1e3:.1f} ms (best of {repeats})"
        f" on {numba.get_num_threads()} threads"
    )
    out(f"  = {best / points * 1e9:.1f} ns/point for {points:,} points")
    out(f"  the tier running it now: {f.tier('grad').name} ({f.tier('grad').reason})")
    out(
        f"  (the first call took {first:.2f} s: it traces, and compiles when Numba's cache is cold)"
    )
    out(f"  row 0, the article's point: L = {values[0]:.8f}")
    out(f"  gradient {as_list(np.round(gradients[0], 8))}")
    rows = [0, 1, points // 3, points // 2, points - 1]
    out(f"  checked against eager recording (a fresh tape per point) at rows {rows}")
    eager = [record_scalars(model, EXAMPLE_2_NAMES, P[row]) for row in rows]
    eager_values = [loss.value for _, _, loss in eager]
    eager_gradients = [[leaf.grad for leaf in leaves] for _, leaves, _ in eager]
    by_hand_values, by_hand_gradients = example_2_numpy(P)
    checks = [
        check_close(
            out,
            f"values, gradients vs eager recording at {len(rows)} rows",
            np.column_stack([values[rows], gradients[rows]]),
            np.column_stack([eager_values, eager_gradients]),
            REPLAY_TOLERANCE,
        ),
        check_close(
            out,
            f"values, gradients vs NumPy by hand at all {points:,} points",
            np.column_stack([values, gradients]),
            np.column_stack([by_hand_values, by_hand_gradients]),
            ROUNDING_TOLERANCE,
        ),
    ]
    out("")
    return checks


def show_layer_cross_check(
    out: Output = print,
    model: Model | None = None,
    sizes: tuple[int, int, int] = (8, 16, 16),
    seed: int = 3,
) -> list[Check]:
    """One linear+ReLU layer recorded three ways must give the same output and gradients.

    Fused (one node, hand-derived backward), unfused blocks (matmul, add, relu:
    three nodes, generic rules) and individual scalar nodes (every multiply and
    add of the matmul is a node: the articles' scalar graph). Also checked against
    the gradients written by hand in NumPy, and against the layer's loss compiled
    to one generated kernel (``fa.compile(..., backend="codegen")``). The scalar
    path is slow by design, hence the small layer.
    """
    model = model or fused_layer
    B, n, h = sizes
    header(out, f"Fused vs unfused vs scalar nodes: one linear+ReLU layer, (B, n, h) = {sizes}")
    rng = np.random.default_rng(seed)
    X0, W0, b0 = rng.normal(size=(B, n)), rng.normal(size=(n, h)), rng.normal(size=h)
    upstream = rng.normal(size=(B, h))  # L = sum(upstream * layer): a non-trivial dL/dlayer

    def record(way: str) -> tuple[list[str], Any, list[Any]]:
        """(ops the layer recorded, its output, [dX, dW, db]) for one way of recording it."""
        with fa.Tape() as tape:
            if way == "scalar nodes":
                nodes = [fa.scalar_nodes(a) for a in (X0, W0, b0)]
                before = len(tape)
                H = fa.relu(nodes[0] @ nodes[1] + nodes[2])
                layer_ops = [tape.node(i).op for i in range(before, len(tape))]
                (H * upstream).sum().backward()
                value = np.vectorize(lambda node: node.value)(H)
                grads = [np.vectorize(lambda node: node.grad)(part) for part in nodes]
            else:
                X, W, b = (fa.var(a) for a in (X0, W0, b0))
                before = len(tape)
                H = model(X, W, b) if way == "fused" else fa.relu(X @ W + b)
                layer_ops = [tape.node(i).op for i in range(before, len(tape))]
                (H * upstream).sum().backward()
                value, grads = H.value, [X.grad, W.grad, b.grad]
        return layer_ops, value, grads

    fused_ops, fused_value, fused_grads = record("fused")
    ways: dict[str, tuple[list[str] | None, Any, list[Any]]] = {
        "unfused blocks": record("unfused blocks"),
        "scalar nodes": record("scalar nodes"),
        "NumPy by hand": (None, *layer_numpy(X0, W0, b0, upstream)),
    }
    out(f"  {'max |difference| from fused':<36} {'output':>9} {'dX':>9} {'dW':>9} {'db':>9}")
    for way, (nodes, value, grads) in ways.items():
        differences = [
            float(np.max(np.abs(got - want))) if np.shape(got) == np.shape(want) else math.nan
            for got, want in zip([value, *grads], [fused_value, *fused_grads], strict=True)
        ]
        recorded = f" ({describe_ops(nodes)})" if nodes else ""
        out(f"  {way + recorded:<36} " + " ".join(f"{d:9.1e}" for d in differences))
    # The same layer traced once and compiled to one generated kernel: its loss (for
    # the output) and gradients against the fused layer's.
    fused_loss = float((fused_value * upstream).sum())
    compiled, why = compiled_layer(model, X0, W0, b0, upstream)
    if compiled is not None:
        loss, grads = compiled
        differences = [abs(loss - fused_loss)] + [
            float(np.max(np.abs(got - want))) for got, want in zip(grads, fused_grads, strict=True)
        ]
        out(
            f"  {'compiled to one kernel (loss)':<36} " + " ".join(f"{d:9.1e}" for d in differences)
        )
    out(f"  (the fused layer records {describe_ops(fused_ops)})")
    checks = [
        check_close(
            out,
            f"{way} = fused",
            flatten([value, *grads]),
            flatten([fused_value, *fused_grads]),
            ROUNDING_TOLERANCE,
        )
        for way, (_, value, grads) in ways.items()
    ]
    if compiled is None:
        checks.append(check_that(out, "compiled = fused", False, why))
    else:
        checks.append(
            check_close(
                out,
                "compiled = fused",
                flatten([compiled[0], *compiled[1]]),
                flatten([fused_loss, *fused_grads]),
                ROUNDING_TOLERANCE,
            )
        )
    out("")
    return checks


def compiled_layer(
    model: Model, X: FloatArray, W: FloatArray, b: FloatArray, upstream: FloatArray
) -> tuple[tuple[float, list[Any]] | None, str]:
    """``sum(model(X, W, b) * upstream)`` compiled with ``backend="codegen"``: ``((loss,
    [dX, dW, db]), "")`` from its one generated kernel, or ``(None, why)`` where it
    cannot be traced (a model that reads a value)."""

    def loss(X: fa.Block, W: fa.Block, b: fa.Block) -> Any:
        return (model(X, W, b) * upstream).sum()

    try:
        f = fa.compile(loss, example=(X, W, b), backend="codegen")
    except fa.TraceError as error:
        return None, f"the model cannot be traced: {error}"
    return f.value_and_grad((X, W, b)), ""


def draw(tape: fa.Tape, stem: StrPath, out: Output = print) -> None:
    """Write ``stem.dot`` and, if Graphviz is available, ``stem.svg``."""
    stem = pathlib.Path(stem)
    stem.with_suffix(".dot").write_text(tape.to_dot())
    try:
        tape.render(stem.with_suffix(".svg"))
        out(f"  drew {stem.with_suffix('.dot')} and {stem.with_suffix('.svg')}")
    except RuntimeError as missing:
        out(f"  drew {stem.with_suffix('.dot')}; no SVG: {missing}")


def main(out: Output = print, draw_dir: StrPath | None = None) -> list[Check]:
    """Run every section; return the list of ``Check`` results.

    ``draw_dir``: also write drawings of examples 1 and 2 there.
    """
    folder = None
    if draw_dir is not None:
        folder = pathlib.Path(draw_dir)
        folder.mkdir(parents=True, exist_ok=True)

    def drawing(stem: str) -> pathlib.Path | None:
        return folder / stem if folder else None

    # The models are looked up here, at call time, so a planted one takes effect.
    sections: dict[str, Callable[[], list[Check]]] = {
        "Example 1": lambda: show_example_1(out, example_1, draw_to=drawing("example1")),
        "Example 2": lambda: show_example_2(out, example_2, draw_to=drawing("example2")),
        "Example 3": lambda: show_example_3(out, example_3),
        "Example 4": lambda: show_example_4(out, example_4),
        "Example 5": lambda: show_example_5(out, example_5),
        "Example 6": lambda: show_example_6(out, example_6),
        "Compiled batch": lambda: show_compiled_batch(out, example_2),
        "Fused layer": lambda: show_layer_cross_check(out, fused_layer),
    }
    return [
        dataclasses.replace(check, section=name)
        for name, show in sections.items()
        for check in show()
    ]
