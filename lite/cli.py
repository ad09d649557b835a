"""The ``lite`` command.

The runtime owns the entry point and its own subcommands (``inspect``, ``run``, ``bench``).
Packages above it (converter, serving, train) contribute theirs through the ``lite.commands``
entry-point group declared in ``pyproject.toml``: each entry point names a ``register(subparsers)``
function that adds an argparse subparser and sets ``handler=fn(args) -> int``. The runtime
never imports those packages; a command whose package cannot be imported (its extra is not
installed) still shows up and says which extra to install.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from lite import __version__
from lite.errors import LiteError

# Commands contributed by other packages, and the extra that provides each.
CONTRIBUTED = {
    "convert": "convert",
    "serve": "serve",
    "quickstart": "all",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lite", description="Convert, inspect, run, benchmark and serve .lite models.")
    parser.add_argument("--version", action="version", version=f"lite {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    from lite.commands import bench, inspect, run

    for command in (inspect, run, bench):
        command.register(subparsers)
    registered = set(subparsers.choices)
    for entry in sorted(entry_points(group="lite.commands"), key=lambda e: e.name):
        if entry.name in registered:
            continue
        try:
            entry.load()(subparsers)
        except ImportError as err:
            _add_unavailable(subparsers, entry.name, CONTRIBUTED.get(entry.name, "all"), err)
        registered.add(entry.name)
    for name, extra in CONTRIBUTED.items():
        if name not in registered:
            _add_unavailable(subparsers, name, extra, None)
    return parser


def _add_unavailable(subparsers, name: str, extra: str, error: ImportError | None) -> None:
    reason = f" ({error})" if error else ""
    parser = subparsers.add_parser(name, help=f"(not installed: pip install 'lite-toolchain[{extra}]')", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)

    def handler(args: argparse.Namespace) -> int:
        print(f"lite {name}: this command needs the '{extra}' extra: pip install 'lite-toolchain[{extra}]'{reason}",
              file=sys.stderr)
        return 2

    parser.set_defaults(handler=handler)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except (LiteError, ValueError, OSError) as err:
        # User-facing failures: one line, no traceback.
        message = str(err).strip().replace("\n", " ")
        print(f"lite {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"lite {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
