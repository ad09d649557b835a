"""``lite serve``: the subcommand contributed to the ``lite`` command through the ``lite.commands``
entry points (see pyproject.toml). The load tool is a plug-in of the runtime's ``lite bench``
(``lite bench --grpc``, entry point group ``lite.bench_backends``): see :mod:`serving.bench`."""

from __future__ import annotations

import argparse
import sys

from .errors import ServingError


def register(subparsers: argparse._SubParsersAction) -> None:
    from .settings import add_arguments

    parser = subparsers.add_parser(
        "serve",
        help="serve a model repository over KServe v2 gRPC",
        description="Serve DIR/<model>/<version>/model.lite over the KServe v2 / Open Inference Protocol "
        "(gRPC), with health, reflection and Prometheus metrics. Every flag also reads LITE_<FLAG>.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from .logs import configure_logging
    from .settings import Settings

    try:
        settings = Settings.from_sources(args)
    except ServingError as err:
        print(f"lite serve: {err}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    from .eventloop import run
    from .grpc.server import serve  # imports grpc and the generated code only when serving
    from .workers import run_workers

    try:
        if settings.workers > 1:
            return run_workers(settings)
        return run(serve(settings), settings.event_loop)
    except ServingError as err:
        print(f"lite serve: {err}", file=sys.stderr)
        return 1
