"""serving: a KServe v2 / Open Inference Protocol gRPC server for .lite models.

    lite serve --repository models/        # DIR/<model>/<version>/model.lite

The core (repository, versions, batching, statistics: :class:`DataPlane`) is free of any
transport; ``serving.grpc`` is the thin gRPC adapter. Importing ``serving`` does not import grpc
or the generated protocol code, so clients such as ``tritonclient`` (which registers the same
protobuf names) can share a process with the core.
"""

from .errors import (
    ConfigError,
    DeadlineExceededError,
    InferenceFailedError,
    InvalidRequestError,
    ListenError,
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
from .settings import Settings

__all__ = [
    "ConfigError",
    "DeadlineExceededError",
    "InferenceFailedError",
    "InvalidRequestError",
    "ListenError",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "RegionExistsError",
    "RegionNotFoundError",
    "RepositoryControlDisabledError",
    "ResourceExhaustedError",
    "ServingError",
    "Settings",
    "UnauthenticatedError",
    "UnsupportedError",
]
