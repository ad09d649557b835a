"""Large numpy inputs reach the GPU through lite.engines.host_upload, and PyTorch CUDA tensors are
recognised without DLPack calls (lite.device_arrays.torch_cuda_spec)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.device_arrays import torch_cuda_spec
from lite.engines.host_upload import STAGED_MIN_BYTES, HostUploader
from lite.engines.numpy_engine import NumpyEngine
from tests.lite.engines.models import one_node

torch = pytest.importorskip("torch", reason="the staged upload uses PyTorch")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_torch_cuda_spec_declines_what_is_not_a_cuda_tensor():
    assert torch_cuda_spec(np.zeros(3, np.float32)) is None
    assert torch_cuda_spec(torch.zeros(3)) is None  # on the CPU
    assert torch_cuda_spec([1.0, 2.0]) is None


@cuda
@pytest.mark.gpu
def test_torch_cuda_spec_reads_shape_and_numpy_dtype():
    shape, dtype = torch_cuda_spec(torch.zeros(2, 5, dtype=torch.float16, device="cuda"))
    assert tuple(shape) == (2, 5) and dtype == np.float16


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("ring_slots", [0, 1, 3])
def test_uploads_queued_back_to_back_each_arrive_whole(ring_slots):
    """No sync between uploads: a ring slot must not be restaged before the copy engine read it."""
    uploader = HostUploader(torch, "cuda", chunk_bytes=1 << 16, ring_slots=ring_slots)
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((5, 70_001)).astype(np.float32) for _ in range(4)]
    uploaded = [uploader.upload(array) for array in arrays]
    torch.cuda.current_stream().synchronize()
    for array, tensor in zip(arrays, uploaded):
        np.testing.assert_array_equal(tensor.cpu().numpy(), array)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("ring_slots", [0, 3])
def test_upload_copies_every_chunk_and_reuses_its_buffer(ring_slots):
    uploader = HostUploader(torch, "cuda", chunk_bytes=1000, ring_slots=ring_slots)  # many chunks, the last short
    rng = np.random.default_rng(0)
    for shape in ((3, 1001), (7, 999), (2, 3)):  # grows the buffer, then reuses it for less
        array = rng.standard_normal(shape).astype(np.float32)
        uploaded = uploader.upload(array)
        torch.cuda.current_stream().synchronize()
        np.testing.assert_array_equal(uploaded.cpu().numpy(), array)
    target = torch.empty(4, 5, dtype=torch.float16, device="cuda")
    array = rng.standard_normal((4, 5)).astype(np.float16)
    uploader.upload_into(array, target)
    uploader.wait()
    np.testing.assert_array_equal(target.cpu().numpy(), array)
    with pytest.raises(ValueError, match="bytes into a device tensor of"):
        uploader.upload_into(np.zeros(3, np.float16), target)


@cuda
@pytest.mark.gpu
def test_torch_engine_stages_large_numpy_inputs():
    from lite.engines.torch import TorchEngine

    rows = STAGED_MIN_BYTES // (4 * 256) + 3  # above the staging threshold
    x = np.random.default_rng(1).standard_normal((rows, 256)).astype(np.float32)
    model, feeds = one_node("Relu", [x])
    engine = TorchEngine(model, device="cuda", mode="eager", precision="fp32", cache_dir=None)
    got = engine.run(feeds)["out0"]
    assert engine._uploader is not None
    np.testing.assert_array_equal(got, NumpyEngine(model).run(feeds)["out0"])
