"""Command line: ``python -m fastad demo``."""

import argparse
import sys

import fastad
from fastad._install_check import require_regular_package

# A folder named fastad without __init__.py ahead of an editable install is
# imported as an empty namespace package, and this module still loads (through
# the editable finder): say so before anything fails obscurely.
require_regular_package(fastad)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fastad", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_command = commands.add_parser(
        "demo", help="record the articles' examples 1 and 2 and check them"
    )
    demo_command.add_argument(
        "--draw",
        metavar="DIR",
        help="also write drawings of both examples to DIR (DOT; SVG with Graphviz)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from fastad import demo

        worst = demo.main(draw_dir=args.draw)
        # Central differences with h = 1e-6 agree to ~1e-9 relative (SPEC);
        # anything above 1e-6 means a wrong rule, not rounding.
        if worst > 1e-6:
            print(f"FAILED: gradients disagree with central differences ({worst:.1e})")
            return 1
        print("all gradients agree with central differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
