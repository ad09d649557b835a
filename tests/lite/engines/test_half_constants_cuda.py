"""Half-precision compute on CUDA keeps constants float16 cannot hold usable (skips without a GPU):
a decomposed LayerNorm's 1e-12 epsilon and an attention mask's -3.4e38, both engines."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from tests.lite.half_models import norm_then_masked_softmax

torch = pytest.importorskip("torch", reason="the check runs on a CUDA GPU through PyTorch's driver")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("engine", ["onnxruntime", "torch"])
def test_fp16_compute_gives_no_nan_from_flushed_constants(engine):
    if engine == "onnxruntime":
        ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime-gpu")
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            pytest.skip("needs onnxruntime-gpu")
    model = lite.Model.load(norm_then_masked_softmax(), device="cuda", engine=engine, precision="fp16")
    x = np.array([[1, 1, 1, 1], [0, 1, 2, 3]], np.float32)
    y = model.predict({"x": x})["y"]
    y = y.cpu().numpy() if hasattr(y, "cpu") else np.asarray(y)
    # Row 0 is constant: a flushed epsilon made it 0/0. Every row is fully masked: an infinite
    # mask made it NaN. How a kernel adds the clamped mask (in float16, or in float32 inside
    # ONNX Runtime's fused bias softmax) decides whether row 1 stays uniform, so only its sum is
    # checked.
    assert np.isfinite(y).all(), y
    np.testing.assert_allclose(y[0], np.full(4, 0.25), atol=2e-3)
    np.testing.assert_allclose(y.sum(axis=-1), np.ones(2), atol=2e-3)
