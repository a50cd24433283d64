"""Command line: ``python -m fastad demo``."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fastad", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="record the articles' examples 1 and 2 and check them")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from fastad import demo

        worst = demo.main()
        # Central differences with h = 1e-6 agree to ~1e-9 relative (SPEC);
        # anything above 1e-6 means a wrong rule, not rounding.
        if worst > 1e-6:
            print(f"FAILED: gradients disagree with central differences ({worst:.1e})")
            return 1
        print("all gradients agree with central differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
