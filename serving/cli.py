"""``lite serve`` and ``lite bench-grpc``: subcommands contributed to the ``lite`` command
through the ``lite.commands`` entry points (see pyproject.toml)."""

from __future__ import annotations

import argparse
import asyncio
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
    from .grpc.server import serve  # imports grpc and the generated code only when serving

    try:
        return asyncio.run(serve(settings))
    except ServingError as err:
        print(f"lite serve: {err}", file=sys.stderr)
        return 1


def register_bench(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench-grpc",
        help="load-test a KServe v2 gRPC server (throughput, latency percentiles, server breakdown)",
    )
    parser.add_argument("--grpc", required=True, metavar="ADDR", help="server address, e.g. 127.0.0.1:8001")
    parser.add_argument("--model", required=True, help="model name")
    parser.add_argument("--version", default="", help="model version (default: the newest)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight (default 1)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds to measure (default 10)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring (default 1)")
    parser.add_argument("--batch", type=int, default=1, help="batch size of each request (default 1)")
    parser.add_argument("--token", default="", help="bearer token (or LITE_AUTH_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    from .bench import format_report, run_bench

    try:
        report = asyncio.run(run_bench(
            args.grpc, args.model, version=args.version, concurrency=args.concurrency,
            duration=args.duration, warmup=args.warmup, batch=args.batch, token=args.token,
        ))
    except (ServingError, ValueError) as err:
        print(f"lite bench-grpc: {err}", file=sys.stderr)
        return 1
    print(format_report(report, as_json=args.json))
    return 0
