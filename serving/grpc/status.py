"""The one place where serving errors become gRPC status codes and status messages.

Codes follow Triton's mapping where it has one (INVALID_ARG -> INVALID_ARGUMENT, NOT_FOUND,
UNAVAILABLE, UNSUPPORTED -> UNIMPLEMENTED, INTERNAL), Triton's ``TRITONSERVER_Error`` codes as its
gRPC frontend reports them.
"""

from __future__ import annotations

import grpc

from ..errors import (
    ConfigError,
    DeadlineExceededError,
    InferenceFailedError,
    InvalidRequestError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    RegionExistsError,
    RegionNotFoundError,
    RepositoryControlDisabledError,
    ResourceExhaustedError,
    ServingError,
    UnauthenticatedError,
    UnsupportedError,
)

STATUS_CODES: dict[type[ServingError], grpc.StatusCode] = {
    ModelNotFoundError: grpc.StatusCode.NOT_FOUND,
    RegionNotFoundError: grpc.StatusCode.NOT_FOUND,
    RegionExistsError: grpc.StatusCode.ALREADY_EXISTS,
    InvalidRequestError: grpc.StatusCode.INVALID_ARGUMENT,
    ResourceExhaustedError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    DeadlineExceededError: grpc.StatusCode.DEADLINE_EXCEEDED,
    ModelNotReadyError: grpc.StatusCode.UNAVAILABLE,
    UnsupportedError: grpc.StatusCode.UNIMPLEMENTED,
    RepositoryControlDisabledError: grpc.StatusCode.PERMISSION_DENIED,
    UnauthenticatedError: grpc.StatusCode.UNAUTHENTICATED,
    ModelLoadError: grpc.StatusCode.FAILED_PRECONDITION,  # the repository content is wrong, not the call
    ConfigError: grpc.StatusCode.FAILED_PRECONDITION,
    InferenceFailedError: grpc.StatusCode.INTERNAL,
}


def status_of(err: ServingError) -> grpc.StatusCode:
    for cls in type(err).__mro__:
        code = STATUS_CODES.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


# A status message travels in the ``grpc-message`` trailer, percent-encoded: every byte outside
# printable ASCII becomes three, so one character can take twelve. Clients refuse trailers past
# their metadata limit (16 KiB by default in grpc's C core) and report RESOURCE_EXHAUSTED "Stream
# removed" instead of the status the server sent. Messages quote what the request named (an input
# name, a datatype, a parameter), which the client may make as long as the message limit allows,
# so every message is cut to MAX_DETAILS characters: at most 12 KiB on the wire.
MAX_DETAILS = 1024
_KEPT_TAIL = 256  # the end of a message often says what to do


def details_of(message: str) -> str:
    """``message`` as a status message: unchanged when short, else its head and tail with the
    number of characters left out between them."""
    if len(message) <= MAX_DETAILS:
        return message
    marker = f" ...[{len(message) - MAX_DETAILS} characters cut]... "
    head = MAX_DETAILS - _KEPT_TAIL - len(marker)
    return message[:head] + marker + message[-_KEPT_TAIL:]
