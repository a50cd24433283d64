"""``python -m fastad demo``: the articles' worked examples 1 and 2.

Each example is recorded eagerly, its node table printed in the article's
form (id, op, value, inputs), and every gradient compared with a central
difference computed by re-running the same Python function on a fresh tape
(no shared code with the backward sweep).
"""

import pathlib

import fastad as fa


def example_1(x, y):
    """z = (x*y + x)**2: x reaches z along two paths, so its adjoints must add."""
    return (x * y + x) ** 2


def example_2(w1, x1, w2, x2, b, y):
    """L = (sigmoid(w1*x1 + w2*x2 + b) - y)**2: one neuron, squared error."""
    return (fa.sigmoid(w1 * x1 + w2 * x2 + b) - y) ** 2


def central_difference(function, point, index, step=1e-6):
    """(f(p + h e_i) - f(p - h e_i)) / 2h, each side recorded on its own tape."""

    def at(offset):
        shifted = list(point)
        shifted[index] += offset
        with fa.Tape():
            return function(*(fa.var(v) for v in shifted)).value

    return (at(step) - at(-step)) / (2.0 * step)


def run_example(title, function, names, point, out=print, draw_to=None):
    """Record ``function`` at ``point``, print its table and checked gradients.

    With ``draw_to`` (a path without suffix) also writes the drawing: DOT
    text always, SVG when Graphviz is installed. Returns the worst relative
    difference between the reverse-mode gradient and the central difference.
    """
    out(f"=== {title} ===")
    with fa.Tape() as tape:
        inputs = [fa.var(v, name=n) for n, v in zip(names, point, strict=True)]
        output = function(*inputs)
        output.backward()
    out(tape.table())
    out(f"output = {output.value:.10g}")
    worst = 0.0
    for i, (name, node) in enumerate(zip(names, inputs, strict=True)):
        numeric = central_difference(function, point, i)
        relative = abs(node.grad - numeric) / max(abs(numeric), 1e-12)
        if node.grad == numeric:
            relative = 0.0
        worst = max(worst, relative)
        out(
            f"  d/d{name:<3} = {node.grad: .8f}   central difference {numeric: .8f}"
            f"   relative error {relative:.1e}"
        )
    out(f"worst relative error {worst:.1e}\n")
    if draw_to is not None:
        draw(tape, draw_to, out)
    return worst


def draw(tape, stem, out=print):
    """Write ``stem.dot`` and, if Graphviz is available, ``stem.svg``."""
    stem = pathlib.Path(stem)
    stem.with_suffix(".dot").write_text(tape.to_dot())
    try:
        tape.render(stem.with_suffix(".svg"))
        out(f"drew {stem.with_suffix('.dot')} and {stem.with_suffix('.svg')}\n")
    except RuntimeError as missing:
        out(f"drew {stem.with_suffix('.dot')}; no SVG: {missing}\n")


def main(out=print, draw_dir=None):
    """Run both examples; return the worst relative error seen.

    ``draw_dir``: also write drawings of examples 1 and 2 there.
    """
    folder = None
    if draw_dir is not None:
        folder = pathlib.Path(draw_dir)
        folder.mkdir(parents=True, exist_ok=True)
    worst = run_example(
        "Example 1: z = (x*y + x)^2 at x=2, y=3",
        example_1,
        ["x", "y"],
        [2.0, 3.0],
        out,
        draw_to=folder / "example1" if folder else None,
    )
    worst = max(
        worst,
        run_example(
            "Example 1 at x=0, y=-1 (both gradients are 0)",
            example_1,
            ["x", "y"],
            [0.0, -1.0],
            out,
        ),
    )
    worst = max(
        worst,
        run_example(
            "Example 2: L = (sigmoid(w1*x1 + w2*x2 + b) - y)^2",
            example_2,
            ["w1", "x1", "w2", "x2", "b", "y"],
            [0.5, 1.2, -0.3, 0.8, 0.1, 1.0],
            out,
            draw_to=folder / "example2" if folder else None,
        ),
    )
    return worst
