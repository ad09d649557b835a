"""``python -m serving ...``: the same as ``lite serve ...``."""

import argparse
import sys

from lite.cli import standard_streams

from .cli import register


def main(argv: list[str] | None = None) -> int:
    standard_streams()
    parser = argparse.ArgumentParser(prog="python -m serving")
    subparsers = parser.add_subparsers(dest="command")
    register(subparsers)
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
