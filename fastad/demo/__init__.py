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

The computations under check are ``example_1`` ... ``example_6`` and
``fused_layer`` of this package, looked up when ``main`` runs a section. A
test can plant a wrong one (``monkeypatch.setattr(demo, "example_1",
wrong)``, or the ``model=`` argument of each ``show_*`` function) to see the
demo fail.

Modules: ``checks`` (tolerances, ``Check``, comparisons, printing, the
verdict), ``models`` (the computations under check), ``references`` (central
differences and NumPy by hand), ``examples`` (the six worked examples) and
``compiled_and_fused`` (the compiled batch and the fused-layer cross-check).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from fastad.demo.compiled_and_fused import show_compiled_batch, show_layer_cross_check
from fastad.demo.examples import (
    show_example_1,
    show_example_2,
    show_example_3,
    show_example_4,
    show_example_5,
    show_example_6,
)

# The computations under check, bound here so that main finds a planted one.
from fastad.demo.models import (
    example_1,
    example_2,
    example_3,
    example_4,
    example_5,
    example_6,
    fused_layer,
)

if TYPE_CHECKING:
    from fastad.demo.checks import Check, Output
    from fastad.util.hints import StrPath

__all__ = [
    "example_1",
    "example_2",
    "example_3",
    "example_4",
    "example_5",
    "example_6",
    "fused_layer",
    "main",
]


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
