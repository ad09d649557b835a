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
from ..errors import ModelNotReadyError, RegionNotFoundError, ServingError, UnsupportedError
from . import converters
from .decoding import Undecodable
from .status import details_of, status_of

log = logging.getLogger("serving.grpc")
_NO_CUDA = ("this server does not offer CUDA shared memory; pass tensors in system shared memory "
            "(SystemSharedMemoryRegister) or in the request")


def _answer_errors(method: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
    """Turn a ServingError into the status code of its class; anything else into INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        try:
            if isinstance(request, Undecodable):
                raise request.error()
            return await method(self, request, context)
        except ServingError as err:
            await context.abort(status_of(err), details_of(self._dataplane.client_text(str(err))))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug in the server must cost one call, never the process
            log.exception("%s failed", method.__name__)
            message = self._dataplane.client_text(f"internal error: {type(err).__name__}: {err}")
            await context.abort(grpc.StatusCode.INTERNAL, details_of(message))

    return wrapper


# Work on a request's or answer's bytes above this size runs in a worker thread, not on the event
# loop that serves every client: a copy out of a shared-memory region, BYTES elements split one by
# one, an output copied into its message or region. Below it the thread hop (about 50 µs) would
# cost more than the work.
_OFF_LOOP_BYTES = 1 << 20


async def _request_of(request: pb.ModelInferRequest, time_remaining: float | None, dataplane: DataPlane):
    """converters.to_request, in a worker thread where the request reads shared memory or holds
    BYTES inputs (or more inputs than the server takes, which are counted there and refused)."""
    inputs = request.inputs
    if len(inputs) > converters.MAX_REQUEST_ENTRIES or any(t.datatype == "BYTES" or t.parameters for t in inputs):
        return await asyncio.to_thread(converters.to_request, request, time_remaining, dataplane.shared_memory)
    return converters.to_request(request, time_remaining, dataplane.shared_memory)


async def _answer_of(response, parameters, requested) -> pb.ModelInferResponse:
    """converters.from_response, in a worker thread where outputs go to shared memory or the
    outputs' bytes are many or BYTES."""
    heavy = any(o.shared_memory is not None for o in requested) if requested else False
    if not heavy:
        heavy = sum(array.nbytes for _, array in response.outputs) > _OFF_LOOP_BYTES or any(
            array.dtype.kind == "O" for _, array in response.outputs)
    if heavy:
        return await asyncio.to_thread(converters.from_response, response, parameters, requested)
    return converters.from_response(response, parameters, requested)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, dataplane: DataPlane, stream_concurrency: int) -> None:
        self._dataplane = dataplane
        self._stream_concurrency = stream_concurrency
        self._streams: set[InferStream] = set()
        self._closing = False
        self._no_streams: asyncio.Event | None = None  # set when closing and no stream is left

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
        inference = await _request_of(request, context.time_remaining(), self._dataplane)
        response = await self._dataplane.infer(inference)
        return await _answer_of(response, request.parameters, inference.outputs)

    async def ModelStreamInfer(self, request_iterator, context) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of one stream run concurrently; each answer carries its request's id, so the
        client matches them up. See :class:`InferStream` for the bounds and for shutdown."""
        stream = InferStream(self._dataplane, request_iterator, context, self._stream_concurrency)
        if self._closing:
            stream.close()
        self._streams.add(stream)
        try:
            async for answer in stream.answers():
                yield answer
        finally:
            self._streams.discard(stream)
            if not self._streams and self._no_streams is not None:
                self._no_streams.set()

    def close_streams(self) -> None:
        """Shutdown: every stream, open or opened from now on, stops reading requests and ends
        (UNAVAILABLE) once the answers of the requests it has read are sent."""
        self._closing = True
        self._no_streams = asyncio.Event()
        if not self._streams:
            self._no_streams.set()
        for stream in self._streams:
            stream.close()

    async def streams_closed(self) -> None:
        if self._no_streams is not None:
            await self._no_streams.wait()

    @_answer_errors
    async def RepositoryIndex(self, request, context):
        return converters.repository_index(self._dataplane.repository_index(request.ready))

    @_answer_errors
    async def RepositoryModelLoad(self, request, context):
        await self._dataplane.load(request.model_name, converters.load_overrides(request))
        return pb.RepositoryModelLoadResponse()

    @_answer_errors
    async def RepositoryModelUnload(self, request, context):
        await self._dataplane.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    @_answer_errors
    async def SystemSharedMemoryStatus(self, request, context):
        return converters.shared_memory_status(self._dataplane.shared_memory_status(request.name))

    @_answer_errors
    async def SystemSharedMemoryRegister(self, request, context):
        self._dataplane.register_shared_memory(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_answer_errors
    async def SystemSharedMemoryUnregister(self, request, context):
        self._dataplane.unregister_shared_memory(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # CUDA shared memory is not offered. Status and unregistering everything succeed with nothing
    # to report, as perf_analyzer and tritonclient call them to clean up whatever the memory kind.

    @_answer_errors
    async def CudaSharedMemoryStatus(self, request, context):
        if request.name:
            raise RegionNotFoundError(f"no CUDA shared-memory region named {request.name!r}: {_NO_CUDA}")
        return pb.CudaSharedMemoryStatusResponse()

    @_answer_errors
    async def CudaSharedMemoryRegister(self, request, context):
        raise UnsupportedError(_NO_CUDA)

    @_answer_errors
    async def CudaSharedMemoryUnregister(self, request, context):
        if request.name:
            raise RegionNotFoundError(f"no CUDA shared-memory region named {request.name!r}: {_NO_CUDA}")
        return pb.CudaSharedMemoryUnregisterResponse()


class InferStream:
    """One ModelStreamInfer call.

    Its requests run concurrently, but at most ``limit`` of them are held at once: a request is
    held from the moment it is read until its answer is handed to gRPC. While ``limit`` are
    held, no further request is read, so a client that sends without reading its answers is
    held back by HTTP/2 flow control instead of making the server keep every answer.

    ``close`` (shutdown) stops the reading; the answers of requests already read still go out,
    then the stream ends with UNAVAILABLE, so the client knows to go elsewhere.
    """

    def __init__(self, dataplane: DataPlane, requests: AsyncIterator, context, limit: int) -> None:
        self._dataplane = dataplane
        self._requests = requests
        self._context = context
        self._slots = asyncio.Semaphore(limit)
        self._answers: asyncio.Queue = asyncio.Queue()  # never more than ``limit`` (plus the end mark)
        self._held = 0  # requests read whose answers are not yet handed to gRPC
        self._running: set[asyncio.Task] = set()
        self._reader: asyncio.Task | None = None
        self._closed = False

    def close(self) -> None:
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()

    async def answers(self) -> AsyncIterator[pb.ModelStreamInferResponse]:
        self._reader = asyncio.get_running_loop().create_task(self._read())
        # Whichever way the reader ends (even cancelled before it ran), the writer learns of it.
        self._reader.add_done_callback(lambda _: self._answers.put_nowait(_END))
        if self._closed:
            self._reader.cancel()
        try:
            reading = True
            while reading or self._held:
                out = await self._answers.get()
                if out is _END:
                    reading = False
                    continue
                yield out
                self._held -= 1
                self._slots.release()
            await self._end()
        finally:
            self._reader.cancel()
            for task in list(self._running):
                task.cancel()

    async def _end(self) -> None:
        """End the call: an error of the request stream itself, or shutdown, becomes its status."""
        if self._reader.cancelled():  # only close() cancels it before the writer is done
            err: BaseException | None = ModelNotReadyError(
                "the server is shutting down: this stream takes no more requests; send them to another server"
            )
        else:
            err = self._reader.exception()
        if isinstance(err, ServingError):
            await self._context.abort(status_of(err), details_of(self._dataplane.client_text(str(err))))
        elif err is not None:
            raise err

    async def _read(self) -> None:
        iterator = aiter(self._requests)
        while True:
            await self._slots.acquire()  # before reading: a full stream reads nothing more
            try:
                request = await anext(iterator)
            except StopAsyncIteration:
                return
            if isinstance(request, Undecodable):
                raise request.error()  # the stream's framing is lost: end the whole call
            self._held += 1
            task = asyncio.get_running_loop().create_task(self._answer(request))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _answer(self, request: pb.ModelInferRequest) -> None:
        try:
            inference = await _request_of(request, self._context.time_remaining(), self._dataplane)
            response = await self._dataplane.infer(inference)
            answer = await _answer_of(response, request.parameters, inference.outputs)
            out = pb.ModelStreamInferResponse(infer_response=answer)
        except ServingError as err:
            out = _stream_error(request, self._dataplane.client_text(str(err)))
        except Exception as err:  # a bug costs this request, not the stream
            log.exception("stream request failed")
            out = _stream_error(request, self._dataplane.client_text(f"internal error: {type(err).__name__}: {err}"))
        if _wants_final_flag(request):
            out.infer_response.parameters[FINAL_RESPONSE].bool_param = True
        self._answers.put_nowait(out)


_END = object()  # the reader is done: no request will be read any more

# Triton's stream flags: a request with ENABLE_FINAL_RESPONSE true learns which answer is its last
# from FINAL_RESPONSE true on it (tritonclient's ``enable_empty_final_response``; clients written
# for decoupled models read answers until they see it). Every request here has one answer, so that
# answer, or its error, is the final one; without the flag such a client waits for ever.
ENABLE_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"


def _wants_final_flag(request: pb.ModelInferRequest) -> bool:
    if not request.parameters or ENABLE_FINAL_RESPONSE not in request.parameters:
        return False
    flag = request.parameters[ENABLE_FINAL_RESPONSE]
    return flag.WhichOneof("parameter_choice") == "bool_param" and flag.bool_param


def _stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )
