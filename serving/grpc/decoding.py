"""Requests whose bytes are not a valid message reach the servicer as :class:`Undecodable`.

gRPC decodes a request before the servicer sees it, and answers a decode failure itself with
``UNKNOWN "Unexpected <class DecodeError>"`` (unary calls) or, on a stream, an iterator that raises
inside the servicer's reader. A request that is not a valid protobuf message (corrupt wire
format, a string field that is not UTF-8) is the client's mistake, so the servicer turns the
sentinel into an ``InvalidRequestError`` (``INVALID_ARGUMENT``) naming the message type.

The inference service is registered here, from the service's descriptor, with deserializers
that never raise (:func:`add_inference_service`), instead of the generated
``add_GRPCInferenceServiceServicer_to_server`` plus an interceptor that would swap the
deserializer on every call: a grpc.aio server interceptor is a coroutine per RPC and takes the
server off its registered-method path, which cost about a tenth of the throughput on small
requests (measured with the interceptor switched on and off; docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from .._generated import inference_pb2 as pb
from ..errors import InvalidRequestError

SERVICE = "inference.GRPCInferenceService"


class Undecodable:
    """Stands for a request that could not be decoded; ``error()`` says why. ``message_type``:
    the full name of the message the method takes (a stream's ModelStreamInfer takes
    ``inference.ModelInferRequest``: the method's name is no guide to it)."""

    def __init__(self, method: str, message_type: str, reason: str) -> None:
        self.method = method
        self.message_type = message_type
        self.reason = reason

    def error(self) -> InvalidRequestError:
        return InvalidRequestError(
            f"{self.method}: the request is not a valid protobuf message of the KServe v2 protocol "
            f"({self.reason}); send a serialized {self.message_type} with UTF-8 strings"
        )


def _lenient(deserialize: Callable[[bytes], Any], method: str, message_type: str) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except (DecodeError, ValueError) as err:
            return Undecodable(method, message_type, str(err).split(": ", 1)[-1][:200])

    return decode


_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def inference_handlers(servicer: Any) -> dict[str, grpc.RpcMethodHandler]:
    """One handler per method of the service (all of them, from the descriptor, so that none is
    missed), each with a deserializer that yields :class:`Undecodable` instead of raising."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name[SERVICE.split(".")[1]].methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        make = _KINDS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_lenient(request_type.FromString, method.name, method.input_type.full_name),
            response_serializer=response_type.SerializeToString,
        )
    return handlers


def add_inference_service(servicer: Any, server: grpc.aio.Server) -> None:
    """Register ``servicer`` as the KServe v2 inference service of ``server``."""
    handlers = inference_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
