"""Decoding a request and encoding an answer run off the event loop where their bytes are heavy
(BYTES elements, shared memory, large outputs), so one client's copy does not hold the others.

Checked in a subprocess: the server's protocol module and tritonclient's (imported by the other
tests) register the same protobuf names, which one process cannot hold twice."""

from __future__ import annotations

import subprocess
import sys

_CHECK = r'''
import asyncio, threading
import numpy as np
from serving._generated import inference_pb2 as pb
from serving.grpc import servicer
from serving.types import InferenceResponse

threads = []
for name in ("to_request", "from_response"):
    real = getattr(servicer.converters, name)
    def recording(*args, real=real):
        threads.append(threading.current_thread().name)
        return real(*args)
    setattr(servicer.converters, name, recording)

class NoSharedMemory:
    shared_memory = None

def off_loop(call):
    async def main():
        result = await call()
        return threads.pop() != threading.current_thread().name, result
    return asyncio.run(main())

text = pb.ModelInferRequest(model_name="m")
text.inputs.add(name="t", datatype="BYTES", shape=[2]).contents.bytes_contents.extend([b"a", b"bc"])
numbers = pb.ModelInferRequest(model_name="m")
numbers.inputs.add(name="x", datatype="FP32", shape=[2])
numbers.raw_input_contents.append(np.ones(2, np.float32).tobytes())
large = InferenceResponse("m", "1", "", [("y", np.arange(1 << 19, dtype=np.float32))])
small = InferenceResponse("m", "1", "", [("y", np.arange(4, dtype=np.float32))])
moved, request = off_loop(lambda: servicer._request_of(text, None, NoSharedMemory()))
assert moved and list(request.inputs["t"].ravel()) == [b"a", b"bc"], request.inputs
assert not off_loop(lambda: servicer._request_of(numbers, None, NoSharedMemory()))[0]
moved, answer = off_loop(lambda: servicer._answer_of(large, {}, None))
assert moved and answer.raw_output_contents[0] == large.outputs[0][1].tobytes()
assert not off_loop(lambda: servicer._answer_of(small, {}, None))[0]
print("ok")
'''


def test_heavy_requests_and_answers_are_converted_off_the_loop_and_light_ones_on_it():
    done = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
