"""The ``inference.GRPCInferenceService`` servicer: convert -> call the data plane -> convert back.

Errors from the core reach the client as a gRPC status (``status.status_of``), except on the
stream, where the protocol puts them in ``error_message`` and keeps the stream open.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from .._generated import inference_pb2 as pb
from .._generated import inference_pb2_grpc as pb_grpc
from ..dataplane import DataPlane
from ..errors import ServingError
from . import converters
from .decoding import Undecodable
from .status import status_of

log = logging.getLogger("serving.grpc")


def _answer_errors(method: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
    """Turn a ServingError into the status code of its class; anything else into INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        try:
            if isinstance(request, Undecodable):
                raise request.error()
            return await method(self, request, context)
        except ServingError as err:
            await context.abort(status_of(err), str(err))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug in the server must cost one call, never the process
            log.exception("%s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(err).__name__}: {err}")

    return wrapper


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, dataplane: DataPlane, stream_concurrency: int) -> None:
        self._dataplane = dataplane
        self._stream_concurrency = stream_concurrency

    @_answer_errors
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=self._dataplane.live())

    @_answer_errors
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self._dataplane.ready())

    @_answer_errors
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=self._dataplane.model_ready(request.name, request.version))

    @_answer_errors
    async def ServerMetadata(self, request, context):
        name, version, extensions = self._dataplane.server_metadata()
        return pb.ServerMetadataResponse(name=name, version=version, extensions=extensions)

    @_answer_errors
    async def ModelMetadata(self, request, context):
        model = self._dataplane.model(request.name, request.version)
        return converters.model_metadata(model, self._dataplane.model_versions(request.name))

    @_answer_errors
    async def ModelConfig(self, request, context):
        return converters.model_config(self._dataplane.model(request.name, request.version))

    @_answer_errors
    async def ModelStatistics(self, request, context):
        return converters.model_statistics(self._dataplane.statistics(request.name, request.version))

    @_answer_errors
    async def ModelInfer(self, request, context):
        inference = converters.to_request(request, context.time_remaining())
        response = await self._dataplane.infer(inference)
        return converters.from_response(response, inference.parameters)

    async def ModelStreamInfer(self, request_iterator, context) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of one stream run concurrently (up to ``stream_concurrency``); each answer
        carries its request's id, so the client matches them up."""
        answers: asyncio.Queue = asyncio.Queue()
        slots = asyncio.Semaphore(self._stream_concurrency)
        running: set[asyncio.Task] = set()

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                inference = converters.to_request(request, context.time_remaining())
                response = await self._dataplane.infer(inference)
                out = pb.ModelStreamInferResponse(
                    infer_response=converters.from_response(response, inference.parameters)
                )
            except ServingError as err:
                out = _stream_error(request, str(err))
            except Exception as err:  # a bug costs this request, not the stream
                log.exception("stream request failed")
                out = _stream_error(request, f"internal error: {type(err).__name__}: {err}")
            finally:
                slots.release()
            await answers.put(out)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    if isinstance(request, Undecodable):
                        raise request.error()  # the stream's framing is lost: end the whole call
                    await slots.acquire()
                    task = asyncio.get_running_loop().create_task(answer(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                await asyncio.gather(*running, return_exceptions=True)
            finally:
                await answers.put(None)  # a failed reader must not leave the writer waiting

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (out := await answers.get()) is not None:
                yield out
            try:
                await reader  # surfaces an error of the request stream itself
            except ServingError as err:
                await context.abort(status_of(err), str(err))
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()

    @_answer_errors
    async def RepositoryIndex(self, request, context):
        return converters.repository_index(self._dataplane.repository_index(request.ready))

    @_answer_errors
    async def RepositoryModelLoad(self, request, context):
        await self._dataplane.load(request.model_name)
        return pb.RepositoryModelLoadResponse()

    @_answer_errors
    async def RepositoryModelUnload(self, request, context):
        await self._dataplane.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()


def _stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )
