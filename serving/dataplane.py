"""The data plane: every operation of the KServe v2 protocol (and Triton's extensions that this
server implements), free of any transport. The gRPC servicer converts messages to these calls
and back; a REST front end could do the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
from collections.abc import Sequence

import lite

from .errors import ModelNotFoundError, ModelNotReadyError, RepositoryControlDisabledError, UnsupportedError
from .limits import RequestLimits
from .manager import ModelManager
from .model import PLATFORM, ServedModel
from .repository import check_model_name
from .settings import Settings
from .shared_memory import Region, SharedMemoryRegistry
from .statistics import StatisticsSnapshot
from .types import InferenceRequest, InferenceResponse, ModelIndexEntry

# What ServerMetadata advertises (Triton's extension names, for what this server implements).
EXTENSIONS = (
    "classification",
    "model_repository",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
)
SHARED_MEMORY_EXTENSION = "system_shared_memory"


class DataPlane:
    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings
        self.started = False  # startup models loaded
        self.stopping = False  # SIGTERM received: draining
        self._in_flight = 0  # infer calls past the checks, not yet answered
        self._idle: asyncio.Event | None = None  # while draining: set once none is in flight
        self._limits = RequestLimits(settings.tensor_elements_limit, settings.max_message_bytes)
        refusal = ""
        if settings.shared_memory and settings.workers > 1:
            # A region registered on one connection would be known only to the worker that took
            # it, and a client's other connections land on other workers.
            refusal = (f"system shared memory is off on a server of {settings.workers} worker processes: a region "
                       "registered with one worker is unknown to the others; serve with --workers 1")
        self.shared_memory = SharedMemoryRegistry(
            settings.max_shared_memory_regions, settings.max_shared_memory_bytes, settings.tensor_elements_limit,
            settings.max_message_bytes, enabled=settings.shared_memory and settings.workers == 1, refusal=refusal,
        )

    # ----- health and metadata ----------------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.started and not self.stopping

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the model (version) can serve now. A model that is unknown, unloaded or failed
        to load is simply not ready, as Triton answers (tritonclient's is_model_ready() expects
        a boolean, not NOT_FOUND); a malformed name or version is still INVALID_ARGUMENT."""
        try:
            model = self.manager.get(name, version)
        except ModelNotFoundError:
            return False
        return model.state == "READY" and not self.stopping

    def server_metadata(self) -> tuple[str, str, tuple[str, ...]]:
        extensions = EXTENSIONS + (SHARED_MEMORY_EXTENSION,) if self.shared_memory.enabled else EXTENSIONS
        return self.settings.server_name, lite.__version__, extensions

    def model(self, name: str, version: str = "") -> ServedModel:
        """The served model behind metadata and config answers."""
        return self.manager.get(name, version)

    def model_versions(self, name: str) -> list[str]:
        return [m.version for m in self.manager.versions(name)]

    @property
    def platform(self) -> str:
        return PLATFORM

    # ----- inference ---------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self.stopping:
            raise ModelNotReadyError("the server is shutting down")
        if not self.started:
            # Listening already (health says NOT_SERVING) but startup models still load: a
            # retryable UNAVAILABLE, not "unknown model", so clients may retry or go elsewhere.
            raise ModelNotReadyError("the server is starting: its models are still loading; retry shortly")
        model = self.manager.get(request.model_name, request.model_version)
        self._limits.check(model, request.inputs, request.outputs)
        self._in_flight += 1
        try:
            return await model.infer(request, self._limits)
        finally:
            self._in_flight -= 1
            if self._idle is not None and not self._in_flight:
                self._idle.set()

    async def drain(self, timeout: float) -> bool:
        """Refuse new requests from now on (UNAVAILABLE) and wait, up to ``timeout`` seconds, for
        the ones in flight to be answered; whether they all were."""
        self.stopping = True
        self._idle = asyncio.Event()
        if not self._in_flight:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def statistics(self, name: str = "", version: str = "") -> list[StatisticsSnapshot]:
        if not name:
            return [m.stats.snapshot() for m in self.manager.loaded()]
        if not version:
            return [m.stats.snapshot() for m in self.manager.versions(name)]
        return [self.manager.get(name, version).stats.snapshot()]

    # ----- system shared memory -----------------------------------------------------------------

    def register_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    def unregister_shared_memory(self, name: str = "") -> None:
        self.shared_memory.unregister(name)

    def shared_memory_status(self, name: str = "") -> list[Region]:
        return self.shared_memory.status(name)

    # ----- repository ----------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return [dataclasses.replace(e, reason=self.client_text(e.reason)) for e in self.manager.index(ready_only)]

    def client_text(self, text: str) -> str:
        """``text`` (an error, a load failure) as a client may read it: paths inside the model
        repository relative to it (``resnet/1/model.lite``), the repository's own path as
        ``<repository>``. Clients learn what is wrong with a model without learning where the
        server keeps its files; the server's log keeps the full paths."""
        root = re.escape(str(self.manager.repository.root))
        # the root itself only where its name ends ("/srv/models", not "/srv/models2/...")
        return re.sub(root + r"(?![\w.-])", "<repository>", re.sub(root + re.escape(os.sep), "", text))

    async def load(self, name: str, overrides: Sequence[str] = ()) -> None:
        """Load or reload ``name`` from the repository. ``overrides``: the request's parameters that
        would replace the repository's configuration or files (Triton's ``config`` and
        ``file:<path>``), which this server refuses: loading the files on disk instead would tell
        the client its configuration took effect when it did not."""
        self._check_control("load")
        check_model_name(name)
        if overrides:
            raise UnsupportedError(
                f"model {name}: the load parameters {list(overrides)[:8]} would replace its configuration or files; "
                "this server loads models only from its repository (<model>/config.json, <model>/<version>/"
                "model.lite): write them there and load without these parameters"
            )
        await self.manager.load(name)

    async def unload(self, name: str) -> None:
        self._check_control("unload")
        await self.manager.unload(name)

    def _check_control(self, action: str) -> None:
        if self.settings.workers > 1:
            raise RepositoryControlDisabledError(
                f"model {action} is disabled on a server of {self.settings.workers} worker processes: it "
                "would reach only the worker that took the call; change the repository and let the "
                "workers reload it (--poll-interval-s), or serve with --workers 1"
            )
        if not self.settings.repository_control:
            raise RepositoryControlDisabledError(
                f"model {action} is disabled on this server (started with --no-repository-control)"
            )
