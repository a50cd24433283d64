"""Command line: ``python -m fastad demo``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import fastad
from fastad._install_check import require_regular_package

# A folder named fastad without __init__.py ahead of an editable install is
# imported as an empty namespace package, and this module still loads (through
# the editable finder): say so before anything fails obscurely.
require_regular_package(fastad)

from fastad import demo  # noqa: E402  after the check: a namespace fastad has no demo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fastad", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_command = commands.add_parser(
        "demo",
        help="run the articles' six worked examples, a compiled batch and a fused layer,"
        " each checked against an independent reference",
    )
    demo_command.add_argument(
        "--draw",
        metavar="DIR",
        help="also write drawings of examples 1 and 2 to DIR (DOT; SVG with Graphviz)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        # Each check carries its own tolerance (see fastad/demo/checks.py).
        passed, final_line = demo.verdict(demo.main(draw_dir=args.draw))
        print(final_line)
        if not passed:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
