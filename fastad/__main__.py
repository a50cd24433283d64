"""Command line: ``python -m fastad demo``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fastad import demo
from fastad.demo.checks import verdict


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
        passed, final_line = verdict(demo.main(draw_dir=args.draw))
        print(final_line)
        if not passed:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
