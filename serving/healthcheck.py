"""``python -m serving.healthcheck [ADDRESS] [--service NAME]``: exit 0 when the server is SERVING.

The container's HEALTHCHECK and anything else without a gRPC probe of its own use this; it asks
the standard ``grpc.health.v1.Health/Check`` (the server itself, or one model as a service name).
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address", nargs="?", default="127.0.0.1:8001")
    parser.add_argument("--service", default="", help="a model name; empty: the server as a whole")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    with grpc.insecure_channel(args.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.RpcError as err:
            print(f"unhealthy: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
