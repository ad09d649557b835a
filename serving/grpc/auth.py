"""Bearer-token authentication for every RPC (``authorization: Bearer <token>`` metadata)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from ..bearer import carries_token
from ..errors import UnauthenticatedError
from .status import status_of

HEALTH_PREFIX = "/grpc.health.v1.Health/"
TOKEN_MESSAGE = "missing or invalid bearer token (metadata 'authorization: Bearer <token>')"


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without the token; with ``exempt_health``, health checks of the
    ``public_services`` (the server's own names, what probes ask for) pass without it. A check of
    any other name needs the token whether or not a model of that name exists: the health
    service answers per model, and its answer would tell a caller without the token which
    models the server holds."""

    def __init__(self, token: str, exempt_health: bool, public_services: frozenset[str]) -> None:
        self._token = token.encode()
        self._exempt_health = exempt_health
        self._public_services = public_services

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or self._carries_token(details):
            return handler
        if self._exempt_health and details.method.startswith(HEALTH_PREFIX):
            return _public_only(handler, self._public_services)
        return _deny(handler, TOKEN_MESSAGE)

    def _carries_token(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                if carries_token(given, self._token):
                    return True
        return False


def _public_only(handler: grpc.RpcMethodHandler, public: frozenset[str]) -> grpc.RpcMethodHandler:
    """``handler`` (a health Check or Watch) for a call without the token: it answers for the
    ``public`` service names and refuses any other (a model's name) as UNAUTHENTICATED."""
    code = status_of(UnauthenticatedError(TOKEN_MESSAGE))
    message = (f"health of a model needs the bearer token; without it ask for "
               f"{' or '.join(repr(name) for name in sorted(public))} ({TOKEN_MESSAGE})")
    behaviour = handler.unary_stream if handler.response_streaming else handler.unary_unary

    async def checked(request, context):
        if request.service not in public:
            await context.abort(code, message)
        return await behaviour(request, context)

    make = grpc.unary_stream_rpc_method_handler if handler.response_streaming else grpc.unary_unary_rpc_method_handler
    return make(checked, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


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
