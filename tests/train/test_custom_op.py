"""``train.ops.Custom``: a compiled AOT kernel (MindSpore's signature) in a Cell with ``bprop``
trains; on the host with a C kernel, on the GPU with a CUDA kernel built by nvcc (marked gpu)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from train import nn
from train.errors import CustomKernelError, GradientError
from train.grad import value_and_grad
from train.ops import Custom
from train.tensor import Parameter, Tensor

C_SOURCE = r"""
#include <stdint.h>
int CustomAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
              void *stream, void *extra) {
    const float *x = params[0], *y = params[1];
    float *out = params[2];
    int64_t n = 1;
    for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
    return 0;
}
int Fails(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
          void *stream, void *extra) { return 5; }
"""

CUDA_SOURCE = r"""
#include <stdint.h>
#include <cuda_runtime.h>
__global__ void add_kernel(const float *x, const float *y, float *out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
extern "C" int CustomAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                         void *stream, void *extra) {
    int64_t n = 1;
    for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
    add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        (const float *)params[0], (const float *)params[1], (float *)params[2], n);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def host_library(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc) is installed")
    folder = tmp_path_factory.mktemp("custom")
    (folder / "add.c").write_text(C_SOURCE)
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(folder / "add.so"), str(folder / "add.c")],
                   check=True)
    return folder / "add.so"


class AddNet(nn.Cell):
    """MindSpore's example: the custom add in a Cell whose bprop gives each input dout."""

    def __init__(self, library, device: str = "cpu") -> None:
        super().__init__()
        self.add = Custom(f"{library}:CustomAdd", out_shape=lambda x, y: x, out_dtype=lambda x, y: x,
                          func_type="aot", device=device)

    def construct(self, x, y):
        return self.add(x, y)

    def bprop(self, x, y, out, dout):
        return (dout, dout)


class Model(nn.Cell):
    """w * x through the custom add's Cell: y = add(w * x, b), trained to y = 3x + 1."""

    def __init__(self, library, device: str = "cpu") -> None:
        super().__init__()
        self.w = Parameter(np.zeros((1, 4), np.float32), name="w")
        self.b = Parameter(np.zeros((1, 4), np.float32), name="b")
        self.add = AddNet(library, device)

    def construct(self, x):
        return self.add(self.w * x, self.b + 0 * x)


def train_to_fit(library, device: str) -> float:
    rng = np.random.default_rng(0)
    net = Model(library, device)

    def loss_of(x, y):
        d = net(x) - y
        return (d * d).mean()

    step = value_and_grad(loss_of, None, net.trainable_params())
    loss = None
    for _ in range(300):
        x = Tensor(rng.standard_normal((8, 4)).astype(np.float32))
        loss, grads = step(x, Tensor(3 * x.data + 1))
        for param, grad in zip(net.trainable_params(), grads):
            param.set_data(param.data - 0.1 * grad)
    np.testing.assert_allclose(net.w.data, 3, atol=1e-2)
    np.testing.assert_allclose(net.b.data, 1, atol=1e-2)
    return float(loss.data)


def test_a_host_kernel_in_a_cell_with_bprop_trains(host_library):
    assert train_to_fit(host_library, "cpu") < 1e-4


def test_custom_forward_backward_and_errors(host_library):
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    add = Custom(f"{host_library}:CustomAdd", out_shape=lambda a, b: a, out_dtype=lambda a, b: a,
                 bprop=lambda a, b, out, dout: (dout, 2 * dout.data))
    loss, grads = value_and_grad(lambda a, b: add(a, b).sum(), (0, 1))(x, y)
    np.testing.assert_array_equal(add(x, y).data, x.data + 1)
    np.testing.assert_array_equal(grads[0], np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(grads[1], 2 * np.ones((2, 3), np.float32))
    with pytest.raises(CustomKernelError, match="returned error code 5"):
        Custom(f"{host_library}:Fails", out_shape=lambda a: a, out_dtype=lambda a: a)(x)
    with pytest.raises(CustomKernelError, match="cannot load 'Missing'"):
        Custom(f"{host_library}:Missing", out_shape=lambda a: a, out_dtype=lambda a: a)
    with pytest.raises(ValueError, match="func must be 'path/to/lib.so:FunctionName'"):
        Custom("add.so", out_shape=lambda a: a, out_dtype=lambda a: a)
    no_bprop = Custom(f"{host_library}:CustomAdd", out_shape=lambda a, b: a, out_dtype=lambda a, b: a)
    step = value_and_grad(lambda a: no_bprop(a, y).mean(), 0)
    with pytest.raises(GradientError, match="has no bprop"):
        step(x)


@pytest.mark.gpu
def test_a_cuda_kernel_in_a_cell_with_bprop_trains(tmp_path):
    torch = pytest.importorskip("torch", reason="CUDA kernels are run through PyTorch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    nvcc = shutil.which("nvcc") or next((str(p) for p in __import__("pathlib").Path("/usr/local").glob("cuda*/bin/nvcc")),
                                        None)
    if nvcc is None:
        pytest.skip("nvcc is not installed: no CUDA kernel can be built here")
    (tmp_path / "add.cu").write_text(CUDA_SOURCE)
    subprocess.run([nvcc, "--shared", "-Xcompiler", "-fPIC", "-o", str(tmp_path / "add.so"), str(tmp_path / "add.cu")],
                   check=True)
    assert train_to_fit(tmp_path / "add.so", "cuda") < 1e-4
