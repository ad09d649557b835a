"""Bearer-token authentication for every RPC (``authorization: Bearer <token>`` metadata)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from ..bearer import carries_token
from ..errors import UnauthenticatedError
from .status import status_of

HEALTH_PREFIX = "/grpc.health.v1.Health/"


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str, exempt_health: bool) -> None:
        self._token = token.encode()
        self._exempt_health = exempt_health

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or (self._exempt_health and details.method.startswith(HEALTH_PREFIX)):
            return handler
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                if carries_token(given, self._token):
                    return handler
        return _deny(handler, "missing or invalid bearer token (metadata 'authorization: Bearer <token>')")


def _deny(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler that only answers UNAUTHENTICATED, for a call to ``handler``'s method.

    It always takes the request as a stream, and reads none of it: gRPC runs a unary handler only
    once its request message is received whole (up to max_message_bytes), so every call without
    the token could make the server hold a full message until answered. The wire format is the
    same for both kinds, so the client sees no difference but the early answer."""
    code = status_of(UnauthenticatedError(message))

    async def abort(requests, context):
        await context.abort(code, message)

    async def abort_stream(requests, context):
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream)
    return grpc.stream_unary_rpc_method_handler(abort)
