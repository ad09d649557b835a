"""The one place where serving errors become gRPC status codes.

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
