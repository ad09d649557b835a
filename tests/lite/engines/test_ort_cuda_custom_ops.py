"""ONNX Runtime's CUDA engine runs CUDA custom kernels (MindSpore's AOT signature) between its
segments on device memory and its own CUDA stream: a kernel built by nvcc here checks that every
buffer it gets is device memory and remembers the stream it was given (marked gpu; skips without
onnxruntime-gpu, a GPU or nvcc)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes

ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime-gpu")
if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip("needs onnxruntime-gpu and a CUDA GPU", allow_module_level=True)

pytestmark = pytest.mark.gpu

CUDA_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <cuda_runtime.h>
static void *last_stream = 0;
__global__ void add(const float *x, const float *y, float *out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
/* out = x + y; refuses host memory (3), a NULL stream (4) and anything but three float32 buffers. */
extern "C" int CustomAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                         void *stream, void *extra) {
    if (nparam != 3) return 1;
    for (int i = 0; i < 3; ++i) {
        if (strcmp(dtypes[i], "float32") != 0) return 2;
        cudaPointerAttributes attributes;
        if (cudaPointerGetAttributes(&attributes, params[i]) != cudaSuccess
            || attributes.type != cudaMemoryTypeDevice) return 3;
    }
    if (stream == 0) return 4;
    last_stream = stream;
    int64_t n = 1;
    for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
    add<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        (const float *)params[0], (const float *)params[1], (float *)params[2], n);
    return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
extern "C" void *LastStream(void) { return last_stream; }
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    nvcc = shutil.which("nvcc") or next((str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))), None)
    if nvcc is None:
        pytest.skip("nvcc is not installed: no CUDA kernel can be built here")
    folder = tmp_path_factory.mktemp("cuda_custom")
    (folder / "add.cu").write_text(CUDA_SOURCE)
    subprocess.run([nvcc, "--shared", "-Xcompiler", "-fPIC", "-o", str(folder / "add.so"), str(folder / "add.cu")],
                   check=True)
    return folder / "add.so"


def custom_ops(library: Path) -> lite.CustomOps:
    ops = lite.CustomOps()
    ops.library("CustomAdd", library, "CustomAdd", domain="com.example", output_shapes=lambda x, y: [x.shape],
                output_dtypes=lambda x, y: [x.dtype], device="cuda")
    return ops


def last_stream(library: Path) -> int:
    function = ctypes.CDLL(str(library)).LastStream
    function.restype = ctypes.c_void_p
    return function() or 0


def relu_add_relu() -> bytes:
    """Relu -> CustomAdd(h, x) -> Relu: the custom node between two ONNX Runtime segments."""
    b = GraphBuilder("relu_add_relu", opset=17)
    x = b.input("x", np.float32, ["N", 1000])
    h = b.node("Relu", [x])
    h = b.node("CustomAdd", [h, x], domain="com.example")
    b.output(b.node("Relu", [h], outputs=["y"]), np.float32, ["N", 1000])
    graph = b.build()
    graph.opset_imports["com.example"] = 1
    return to_bytes(graph)


def test_a_custom_cuda_node_between_segments_stays_on_the_gpu(library):
    model = lite.Model.load(relu_add_relu(), device="cuda", custom_ops=custom_ops(library), cache_dir=None)
    assert [s["engine"] for s in model.engine.describe()] == ["onnxruntime", "cuda-kernel", "onnxruntime"]
    assert model.engine.numpy_nodes == 0
    rng = np.random.default_rng(0)
    for batch in (1, 64, 3):
        x = rng.standard_normal((batch, 1000)).astype(np.float32)
        y = model(x)  # a kernel given host memory or no stream returns an error code: a KernelError
        assert isinstance(y, np.ndarray)
        np.testing.assert_array_equal(y, np.maximum(np.maximum(x, 0) + x, 0))
    assert last_stream(library) == model.engine.stream.handle != 0


def test_device_inputs_give_device_outputs(library):
    torch = pytest.importorskip("torch", reason="device arrays are made with PyTorch")
    model = lite.Model.load(relu_add_relu(), device="cuda", custom_ops=custom_ops(library), cache_dir=None)
    x = torch.randn(256, 1000, device="cuda")
    y = model.predict({"x": x * 2})["y"]  # produced on PyTorch's stream, asynchronously
    assert isinstance(y, lite.DeviceArray) and y.device == "cuda:0"
    expected = torch.relu(torch.relu(x * 2) + x * 2)
    assert torch.equal(torch.from_dlpack(y), expected)


def test_a_graph_that_is_one_custom_node(library):
    """Inputs straight from the caller to the kernel, its output straight back (host and device)."""
    b = GraphBuilder("add", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    b.output(b.node("CustomAdd", [x, x], outputs=["y"], domain="com.example"), np.float32, ["N", 4])
    graph = b.build()
    graph.opset_imports["com.example"] = 1
    model = lite.Model.load(to_bytes(graph), device="cuda", custom_ops=custom_ops(library), cache_dir=None)
    assert [s["engine"] for s in model.engine.describe()] == ["cuda-kernel"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(model(x), x + x)
