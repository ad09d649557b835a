"""The ``lite`` command.

The runtime owns the entry point and its own subcommands (``inspect``, ``run``, ``bench``,
``compile``).
Packages above it (converter, serving, train) contribute theirs through the ``lite.commands``
entry-point group declared in ``pyproject.toml``: each entry point names a ``register(subparsers)``
function that adds an argparse subparser and sets ``handler=fn(args) -> int``. The runtime
never imports those packages.

Start-up stays at the cost of ``import lite``: only the command being run is loaded. ``lite
--help`` lists the contributed commands from :data:`CONTRIBUTED` without importing them, and
whether each is usable is read from what is installed (``importlib.util.find_spec``, which
imports nothing): a command whose extra is missing says, in one line, which extra to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points

from lite.errors import LiteError
from lite.version import __version__


@dataclass(frozen=True)
class Contributed:
    """A command another package contributes: the extra that installs it, modules that extra
    brings (all must be importable for the command to work), and its one-line help."""

    extra: str
    needs: tuple[str, ...]
    help: str


CONTRIBUTED = {
    "convert": Contributed("convert", ("onnx", "onnx_ir"),
                           "convert an ONNX or MindSpore model to .lite (or an optimized .onnx)"),
    "serve": Contributed("serve", ("grpc", "google.protobuf", "grpc_health", "grpc_reflection"),
                         "serve a model repository over KServe v2 gRPC"),
    "quickstart": Contributed("all", ("onnx", "onnxruntime", "grpc", "sklearn", "tritonclient"),
                              "train, convert, run and serve a digits model end to end"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the full subparser of ``command`` only (None: of none)."""
    parser = argparse.ArgumentParser(prog="lite", description="Convert, inspect, run, benchmark and serve .lite models.")
    parser.add_argument("--version", action="version", version=f"lite {__version__}")
    parser.unavailable = {}  # command -> what running it prints, for commands whose extra is missing
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    from lite.commands import bench, compile_model, inspect, run

    for module in (inspect, run, bench):
        module.register(subparsers)
    if _installed("torch"):  # lite compile builds PyTorch Inductor artifacts
        compile_model.register(subparsers)
    else:
        _add_unavailable(parser, subparsers, "compile", "torch", "missing: torch")
    registered = set(subparsers.choices)
    for entry in sorted(entry_points(group="lite.commands"), key=lambda e: e.name):
        if entry.name in registered:
            continue
        registered.add(entry.name)
        known = CONTRIBUTED.get(entry.name)
        missing = [name for name in known.needs if not _installed(name)] if known else []
        if missing:
            _add_unavailable(parser, subparsers, entry.name, known.extra, f"missing: {', '.join(missing)}")
        elif known is not None and entry.name != command:
            _add_placeholder(subparsers, entry.name, known.help)
        else:
            try:
                entry.load()(subparsers)
            except ImportError as err:
                _add_unavailable(parser, subparsers, entry.name, known.extra if known else "all", str(err))
    for name, known in CONTRIBUTED.items():
        if name not in registered:
            _add_unavailable(parser, subparsers, name, known.extra, "not installed")
    return parser


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def _add_placeholder(subparsers, name: str, help_text: str) -> None:
    """Lists ``name`` in ``lite --help`` without importing its package (never parsed: a run of
    ``name`` builds the parser again with its real subparser)."""
    subparsers.add_parser(name, help=help_text, add_help=False)


def _add_unavailable(parser: argparse.ArgumentParser, subparsers, name: str, extra: str, reason: str) -> None:
    """Lists ``name`` as not installed; running it, whatever its arguments, prints one line
    naming the extra (:func:`main` looks in ``parser.unavailable`` before parsing)."""
    subparsers.add_parser(name, help=f"(not installed: pip install 'lite-toolchain[{extra}]')", add_help=False)

    def unavailable() -> int:
        print(f"lite {name}: this command needs the '{extra}' extra ({reason}): "
              f"pip install 'lite-toolchain[{extra}]'", file=sys.stderr)
        return 2

    parser.unavailable[name] = unavailable


def _command_of(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level
    options take no values)."""
    return next((word for word in argv if not word.startswith("-")), None)


def one_line(message: str) -> str:
    """``message`` as one printable line: newlines become spaces, and other control characters
    (a damaged file's names can hold carriage returns or NULs) are written as escapes."""
    flat = message.strip().replace("\n", " ")
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in flat)


def standard_streams() -> None:
    """Standard streams a command can use whatever its caller left open.

    A closed descriptor 0, 1 or 2 (``<&-``, ``>&-``, a daemonizer) is reopened on /dev/null:
    otherwise the next file or socket opened takes its number (``lite serve``'s event loop took
    fd 0, and libuv aborted at exit, 134, closing what it took for standard input), and Python
    left ``sys.stdout`` None (a traceback after the work was done). An output whose encoding
    cannot spell a character (a forced ASCII locale) writes it as an escape instead of failing
    after the work was done."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, mode))  # noqa: SIM115 - the process's own stream
        elif name != "stdin" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    standard_streams()
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_of(argv)
    parser = build_parser(command)
    unavailable = getattr(parser, "unavailable", {}).get(command)
    if unavailable is not None:
        return unavailable()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # a reader gone away shows here, not at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except (LiteError, ValueError, OSError) as err:
        # User-facing failures: one line, no traceback.
        print(f"lite {args.command}: error: {one_line(str(err))}", file=sys.stderr)
        return 1
    except MemoryError as err:  # a model whose attributes ask for more than this machine has
        print(f"lite {args.command}: error: out of memory: {one_line(str(err))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"lite {args.command}: interrupted", file=sys.stderr)
        return 130


def _reader_gone() -> int:
    """The reader of our output closed it (``lite inspect m.lite | head``): stop quietly with the
    status of a Unix tool ended by SIGPIPE, 128 + 13. stdout goes to /dev/null first so that
    the interpreter's own flush at exit finds no broken pipe either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE (13), which Windows does not define


if __name__ == "__main__":
    sys.exit(main())
