"""The ``ops`` phase of bench/gpu_issue_check.py: a CUDA kernel with MindSpore's AOT signature,
built with nvcc, runs inside the torch engine on CUDA (device pointers, the engine's stream:
checked by a kernel that records the stream it got) and trains in a ``train`` Cell with bprop;
then the ``gpu``-marked tests of the custom ops run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

CUDA_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <cuda_runtime.h>
static intptr_t last_stream = -1;
__global__ void scaled_add(const float *x, const float *y, const float *scale, float *out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (x[i] + y[i]) * scale[0];
}
/* out = (x + y) * scale; scale arrives as a trailing device input (attributes_as_inputs). */
extern "C" int ScaledAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                         void *stream, void *extra) {
    if (nparam != 4) return 1;
    for (int i = 0; i < 4; ++i) if (strcmp(dtypes[i], "float32") != 0) return 2;
    cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, params[0]) != cudaSuccess || attributes.type != cudaMemoryTypeDevice)
        return 3;  /* not a device pointer */
    int64_t n = 1;
    for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
    last_stream = (intptr_t)stream;
    scaled_add<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        (const float *)params[0], (const float *)params[1], (const float *)params[2], (float *)params[3], n);
    return cudaGetLastError() == cudaSuccess ? 0 : 4;
}
extern "C" intptr_t LastStream(void) { return last_stream; }
"""


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))
    return str(candidates[-1]) if candidates else None


# ------------------------------------------------------------------------------------------------
# ops: CUDA custom operators in the torch engine and in training
# ------------------------------------------------------------------------------------------------
def phase_ops(out: Path, say: Callable[[str], None]) -> dict:
    """The ``ops`` phase's rows (``say``: the script's progress log)."""
    import ctypes

    import torch

    import lite
    from lite.format import GraphBuilder, to_bytes

    rows: dict = {"nvcc": find_nvcc()}
    if rows["nvcc"] is None:
        rows["skipped"] = "nvcc is not installed: no CUDA kernel can be built here"
        return rows
    folder = Path(tempfile.mkdtemp())
    (folder / "scaled_add.cu").write_text(CUDA_SOURCE)
    library = folder / "libscaled_add.so"
    started = time.perf_counter()
    subprocess.run([rows["nvcc"], "--shared", "-Xcompiler", "-fPIC", "-O2", "-o", str(library),
                    str(folder / "scaled_add.cu")], check=True)
    rows["nvcc_seconds"] = round(time.perf_counter() - started, 1)

    b = GraphBuilder("net", opset=17)
    x = b.input("x", np.float32, ["N", 64])
    h = b.node("MatMul", [x, b.constant("w", (np.eye(64, dtype=np.float32) * 2))])
    h = b.node("ScaledAdd", [h, x], domain="com.example", scale=0.5)
    b.output(b.node("Relu", [h], outputs=["y"]), np.float32, ["N", 64])
    graph = b.build()
    graph.opset_imports["com.example"] = 1
    ops = lite.CustomOps()
    ops.library("ScaledAdd", library, "ScaledAdd", domain="com.example", output_shapes=lambda a, c: [a.shape],
                output_dtypes=lambda a, c: [a.dtype], attributes_as_inputs=["scale"], device="cuda")
    model = lite.Model.load(to_bytes(graph), engine="torch", device="cuda", precision="exact", custom_ops=ops,
                            cache_dir=None, startup="fast")
    rows["partition"] = model.engine.describe()
    host = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    expected = np.maximum((2 * host + host) * 0.5, 0)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = model.predict({"x": torch.from_numpy(host).cuda()})["y"]
        stream_used = ctypes.CDLL(str(library)).LastStream
        stream_used.restype = ctypes.c_ssize_t
        rows["kernel_got_callers_stream"] = stream_used() == side.cuda_stream
    side.synchronize()
    rows["device_tensor_out"] = type(y).__name__
    rows["max_abs_error_torch_in"] = float(np.abs(y.cpu().numpy() - expected).max())
    rows["max_abs_error_numpy_in"] = float(np.abs(model.predict({"x": host})["y"] - expected).max())
    on_numpy = sum(1 for s in model.engine.segments if not s.on_torch and not s.on_device_kernels)
    rows["numpy_segments"] = on_numpy
    numpy_model = lite.Model.load(to_bytes(graph), device="numpy", custom_ops=ops)
    rows["max_abs_error_numpy_engine_staged"] = float(np.abs(numpy_model.predict({"x": host})["y"] - expected).max())
    rows["ok"] = bool(rows["kernel_got_callers_stream"] and rows["max_abs_error_torch_in"] < 1e-5
                      and rows["max_abs_error_numpy_in"] < 1e-5 and on_numpy == 0)
    say(f"ops: {rows}")
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-m", "gpu",
                            "tests/lite/engines/test_torch_startup.py", "tests/train/test_custom_op.py",
                            "tests/lite/test_custom_ops.py"], cwd=ROOT, capture_output=True, text=True, timeout=400)
    rows["gpu_tests"] = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else tests.stderr[-500:]
    if tests.returncode != 0:
        rows["gpu_tests_tail"] = tests.stdout[-3000:]
    return rows
