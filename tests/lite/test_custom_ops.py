"""Custom operators: a Python kernel and a compiled C kernel (MindSpore AOT signature) in a network."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes

C_SOURCE = r"""
#include <stdint.h>
#include <string.h>
/* out = (x + y) * scale; the scale attribute arrives as a trailing 0-d input. */
int ScaledAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
              void *stream, void *extra) {
    if (nparam != 4) return 1;
    for (int i = 0; i < 4; ++i) {
        if (strcmp(dtypes[i], "float32") != 0) return 2;
    }
    const float *x = params[0], *y = params[1], *scale = params[2];
    float *out = params[3];
    int64_t n = 1;
    for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] + y[i]) * scale[0];
    return 0;
}
int AlwaysFails(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                void *stream, void *extra) { return 7; }
"""


def network(custom_op: str) -> bytes:
    """MatMul -> custom op (in domain com.example) -> Relu: the custom node sits mid-network."""
    b = GraphBuilder("net")
    x = b.input("x", np.float32, ["N", 3])
    h = b.node("MatMul", [x, b.constant("w", np.eye(3, dtype=np.float32) * 2)])
    h = b.node(custom_op, [h, x], domain="com.example", scale=0.5)
    y = b.node("Relu", [h], outputs=["y"])
    b.output(y, np.float32, ["N", 3])
    model = b.build()
    model.opset_imports["com.example"] = 1
    return to_bytes(model)


def expected(x: np.ndarray) -> np.ndarray:
    return np.maximum((2 * x + x) * 0.5, 0)


def test_python_custom_op():
    ops = lite.CustomOps()

    @ops.python("ScaledAdd", domain="com.example")
    def scaled_add(x, y, *, scale=1.0):
        return (x + y) * np.float32(scale)

    model = lite.Model.load(network("ScaledAdd"), custom_ops=ops)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(model(x), expected(x), rtol=1e-6)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    folder = tmp_path_factory.mktemp("aot")
    source = folder / "scaled_add.c"
    source.write_text(C_SOURCE)
    target = folder / "libscaled_add.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(target), str(source)], check=True)
    return target


def test_compiled_aot_custom_op(library):
    ops = lite.CustomOps()
    ops.library("ScaledAdd", library, "ScaledAdd", domain="com.example",
                output_shapes=lambda x, y: [x.shape], output_dtypes=lambda x, y: [x.dtype],
                attributes_as_inputs=["scale"])
    model = lite.Model.load(network("ScaledAdd"), custom_ops=ops)
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(model(x), expected(x), rtol=1e-6)


def test_compiled_kernel_error_code_is_reported(library):
    ops = lite.CustomOps()
    ops.library("ScaledAdd", library, "AlwaysFails", domain="com.example",
                output_shapes=lambda x, y: [x.shape], output_dtypes=[np.float32])
    model = lite.Model.load(network("ScaledAdd"), custom_ops=ops)
    with pytest.raises(lite.KernelError, match="AlwaysFails.*returned error code 7"):
        model(np.ones((1, 3), np.float32))


def test_missing_library_and_function(library, tmp_path):
    ops = lite.CustomOps()
    with pytest.raises(FileNotFoundError, match="cannot load library"):
        ops.library("X", tmp_path / "nope.so", "X", output_shapes=[[1]], output_dtypes=[np.float32])
    with pytest.raises(LookupError, match="exports no function 'Nope'"):
        ops.library("X", library, "Nope", output_shapes=[[1]], output_dtypes=[np.float32])


def test_custom_node_without_kernel_is_unsupported():
    with pytest.raises(lite.UnsupportedOpError, match="com.example::ScaledAdd.*no kernel"):
        lite.Model.load(network("ScaledAdd"))


def test_a_cuda_kernel_is_kept_for_the_gpu_engines_and_refused_where_no_gpu_runs_it(library):
    """device="cuda": the torch engine calls it on device tensors; on the numpy engine it needs
    PyTorch with a GPU to stage the arrays, and says so (the kernel itself is never handed host memory)."""
    ops = lite.CustomOps()
    with pytest.raises(ValueError, match="device must be one of cpu, cuda; got 'gpu'"):
        ops.library("ScaledAdd", library, "ScaledAdd", domain="com.example", output_shapes=lambda x, y: [x.shape],
                    output_dtypes=lambda x, y: [x.dtype], device="gpu")
    ops.library("ScaledAdd", library, "ScaledAdd", domain="com.example", output_shapes=lambda x, y: [x.shape],
                output_dtypes=lambda x, y: [x.dtype], attributes_as_inputs=["scale"], device="cuda")
    kernel = ops.device_kernel("ScaledAdd", "com.example")
    assert kernel is not None and ops.device_kernel("ScaledAdd", "") is None
    x = np.ones((2, 3), np.float32)
    assert kernel.output_specs([x, x]) == [((2, 3), np.dtype(np.float32))]
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        model = lite.Model.load(network("ScaledAdd"), device="numpy", custom_ops=ops)
        with pytest.raises(lite.EngineUnavailableError, match="is a CUDA kernel"):
            model(x)


def onnxruntime_network() -> bytes:
    """MatMul -> com.microsoft Inverse: an op of ONNX Runtime's own that the numpy engine has no
    kernel for."""
    b = GraphBuilder("net")
    x = b.input("x", np.float32, [3, 3])
    h = b.node("MatMul", [x, b.constant("w", np.eye(3, dtype=np.float32) * 2)])
    y = b.node("Inverse", [h], domain="com.microsoft", outputs=["y"])
    b.output(y, np.float32, [3, 3])
    model = b.build()
    model.opset_imports["com.microsoft"] = 1
    return to_bytes(model)


def test_an_onnxruntime_op_without_a_kernel_points_to_the_onnxruntime_engine():
    with pytest.raises(lite.UnsupportedOpError) as raised:
        lite.Model.load(onnxruntime_network(), device="numpy")
    message = str(raised.value)
    assert "com.microsoft::Inverse): no kernel" in message
    assert "1 of them are ONNX Runtime's own ops" in message and "device='cpu'" in message
    x = np.array([[2, 1, 0], [0, 1, 0], [1, 0, 3]], np.float32)
    y = lite.Model.load(onnxruntime_network(), device="cpu").predict({"x": x})["y"]
    np.testing.assert_allclose(y, np.linalg.inv(2 * x), rtol=1e-5)


def test_a_custom_op_without_a_kernel_points_to_custom_kernels_alone():
    with pytest.raises(lite.UnsupportedOpError) as raised:
        lite.Model.load(network("ScaledAdd"), device="numpy")
    assert "custom_ops=lite.CustomOps" in str(raised.value) and "device='cpu'" not in str(raised.value)
