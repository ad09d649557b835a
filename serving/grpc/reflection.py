"""Server reflection, v1 and v1alpha: what grpcurl and other tools ask before they call.

grpcio-reflection implements ``grpc.reflection.v1alpha.ServerReflection`` only; grpcurl and
newer clients ask for ``grpc.reflection.v1.ServerReflection`` first. The two services are the same
protocol under two package names (grpc/grpc-proto ``reflection/v1/reflection.proto`` and
``v1alpha``): same messages, same field numbers, so the same bytes on the wire. The v1 service is
therefore the v1alpha servicer registered a second time under the v1 name.

A client that lists the services then asks for the file defining each one (grpcurl describe,
grpc-js-reflection-client), ``grpc.reflection.v1.ServerReflection`` among them, and the servicer
answers from protobuf's default descriptor pool, where no installed package puts the v1 file: it is
added there, built from the v1alpha file with the package renamed (:func:`_add_v1_descriptor`),
unless an installed grpcio-reflection ships the v1 module, whose own file is then used.

A method is a symbol too (``grpcurl describe inference.GRPCInferenceService.ModelInfer`` asks for
the file containing it), which protobuf's pool does not look up: :class:`_MethodsFound` answers
it with its service's file.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

SERVICE_NAME_V1 = "grpc.reflection.v1.ServerReflection"
SERVICE_NAME_V1ALPHA = reflection.SERVICE_NAME
V1_FILE = "grpc/reflection/v1/reflection.proto"  # its path in grpc/grpc-proto
V1_MODULE = "grpc_reflection.v1.reflection_pb2"  # where a grpcio-reflection with v1 would put it


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Answer reflection for ``service_names`` (and both reflection services) on ``server``."""
    _add_v1_descriptor(descriptor_pool.Default())
    names = (*service_names, SERVICE_NAME_V1, SERVICE_NAME_V1ALPHA)
    servicer = reflection.aio.ReflectionServicer(names, pool=_MethodsFound(descriptor_pool.Default()))
    for service in (SERVICE_NAME_V1, SERVICE_NAME_V1ALPHA):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Put the file defining the v1 service in ``pool`` (once: a pool refuses a second copy),
    unless a package already has: the v1alpha file with package and type names renamed.

    A grpcio-reflection that ships the v1 module is imported first: its file goes into the pool
    under the same name, and importing it after a renamed copy was added would fail (a pool
    refuses a second, different file of one name)."""
    try:
        importlib.import_module(V1_MODULE)
    except ImportError:
        pass
    try:
        pool.FindFileContainingSymbol(SERVICE_NAME_V1)
        return
    except KeyError:
        pass
    v1alpha = reflection_pb2.DESCRIPTOR.package
    v1 = SERVICE_NAME_V1.rsplit(".", 1)[0]
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = V1_FILE
    proto.package = v1
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = _renamed(field.type_name, v1alpha, v1)
    for service in proto.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type, v1alpha, v1)
            method.output_type = _renamed(method.output_type, v1alpha, v1)
    pool.AddSerializedFile(proto.SerializeToString())


def _renamed(type_name: str, package: str, new_package: str) -> str:
    """``type_name`` (``.package.Message``) in ``new_package`` when it is in ``package``."""
    prefix = f".{package}."
    return f".{new_package}.{type_name[len(prefix):]}" if type_name.startswith(prefix) else type_name


class _MethodsFound:
    """``pool``, whose FindFileContainingSymbol also finds a service's method (``package.Service.Method``)."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def __getattr__(self, name: str):
        return getattr(self._pool, name)

    def FindFileContainingSymbol(self, symbol: str):  # noqa: N802 (the pool's own name)
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service_name, _, method = symbol.rpartition(".")
            try:
                service = self._pool.FindServiceByName(service_name)
            except KeyError:
                service = None
            if service is None or method not in service.methods_by_name:
                raise
            return service.file
