"""The demo's sections past the articles: a compiled batch and a fused-layer cross-check.

``show_compiled_batch`` replays example 2 at a million points in compiled
code; ``show_layer_cross_check`` records one linear+ReLU layer fused, unfused,
as scalar nodes and compiled to one kernel, and compares them.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

import fastad as fa
from fastad.demo.checks import (
    REPLAY_TOLERANCE,
    ROUNDING_TOLERANCE,
    Check,
    as_list,
    check_close,
    check_that,
    describe_ops,
    flatten,
    header,
)
from fastad.demo.examples import EXAMPLE_2_NAMES, EXAMPLE_2_POINT, record_scalars
from fastad.demo.models import example_2, fused_layer
from fastad.demo.references import example_2_numpy, layer_numpy

if TYPE_CHECKING:
    from fastad.demo.checks import Output
    from fastad.demo.models import Model
    from fastad.util.hints import FloatArray


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
