"""Server reflection, v1 and v1alpha: what grpcurl and other tools ask before they call.

grpcio-reflection implements ``grpc.reflection.v1alpha.ServerReflection`` only; grpcurl and
newer clients ask for ``grpc.reflection.v1.ServerReflection`` first. The two services are the same
protocol under two package names (grpc/grpc-proto ``reflection/v1/reflection.proto`` and
``v1alpha``): same messages, same field numbers, so the same bytes on the wire. The v1 service is
therefore the v1alpha servicer registered a second time under the v1 name.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

SERVICE_NAME_V1 = "grpc.reflection.v1.ServerReflection"
SERVICE_NAME_V1ALPHA = reflection.SERVICE_NAME


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Answer reflection for ``service_names`` (and both reflection services) on ``server``."""
    names = (*service_names, SERVICE_NAME_V1, SERVICE_NAME_V1ALPHA)
    servicer = reflection.aio.ReflectionServicer(names)
    for service in (SERVICE_NAME_V1, SERVICE_NAME_V1ALPHA):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )
