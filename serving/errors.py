"""Typed errors of the serving core.

Every error the data plane raises derives from :class:`ServingError`; the leaves also subclass
the builtin they refine. The transport maps each leaf to a status code in one place
(``serving.grpc.status``), so the core never speaks gRPC.
"""

from __future__ import annotations


class ServingError(Exception):
    """Base of every error raised by the ``serving`` package."""


class ModelNotFoundError(ServingError, LookupError):
    """No model (or no such version of it) is known to the server."""


class ModelNotReadyError(ServingError, RuntimeError):
    """The model exists but cannot serve now (loading, unloading, or shutting down)."""


class InvalidRequestError(ServingError, ValueError):
    """The request does not match the protocol or the model's signature."""


class ResourceExhaustedError(ServingError, RuntimeError):
    """A bounded resource is full: the model's queue, or a size limit."""


class DeadlineExceededError(ServingError, TimeoutError):
    """The request's deadline passed before it could be executed."""


class RegionNotFoundError(ServingError, LookupError):
    """No shared-memory region (or shared-memory object) of that name exists."""


class RegionExistsError(ServingError, ValueError):
    """A shared-memory region of that name is already registered."""


class UnsupportedError(ServingError, NotImplementedError):
    """The request uses a protocol feature this server does not implement."""


class RepositoryControlDisabledError(ServingError, PermissionError):
    """Repository load/unload was requested while the server runs with it disabled."""


class UnauthenticatedError(ServingError, PermissionError):
    """The call carries no valid bearer token."""


class ModelLoadError(ServingError, RuntimeError):
    """A model in the repository could not be loaded (bad file, bad config, engine failure)."""


class ConfigError(ServingError, ValueError):
    """A model's config file or a server setting is invalid; the message names the key."""


class ListenError(ServingError, OSError):
    """The server cannot listen on its address (the port is taken, or the host is not one of
    this machine's addresses)."""


class InferenceFailedError(ServingError, RuntimeError):
    """The model failed while running a valid request (an engine or kernel error)."""
