"""Requests whose bytes are not a valid message reach the servicer as :class:`Undecodable`.

gRPC decodes a request before the servicer sees it, and answers a decode failure itself with
``UNKNOWN "Unexpected <class DecodeError>"`` (unary calls) or, on a stream, an iterator that raises
inside the servicer's reader. A request that is not a valid protobuf message (corrupt wire
format, a string field that is not UTF-8) is the client's mistake, so the servicer turns the
sentinel into an ``InvalidRequestError`` (``INVALID_ARGUMENT``) naming the message type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from ..errors import InvalidRequestError

SERVICE_PREFIX = "/inference.GRPCInferenceService/"


class Undecodable:
    """Stands for a request that could not be decoded; ``error()`` says why."""

    def __init__(self, method: str, reason: str) -> None:
        self.method = method
        self.reason = reason

    def error(self) -> InvalidRequestError:
        return InvalidRequestError(
            f"{self.method}: the request is not a valid protobuf message of the KServe v2 protocol "
            f"({self.reason}); send a serialized inference.{self.method}Request with UTF-8 strings"
        )


def _lenient(deserialize: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except (DecodeError, ValueError) as err:
            return Undecodable(method, str(err).split(": ", 1)[-1][:200])

    return decode


class DecodeErrorInterceptor(grpc.aio.ServerInterceptor):
    """Gives the inference service's handlers a deserializer that never raises (see the module docstring)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None or not details.method.startswith(SERVICE_PREFIX):
            return handler
        method = details.method[len(SERVICE_PREFIX):]
        return handler._replace(request_deserializer=_lenient(handler.request_deserializer, method))
