"""The contenders of bench/gpu_engines.py and how each is made and called: the network (torchvision's,
or a tiny stand-in for checking the script on a CPU) with random weights, its .lite conversion and
ONNX exports, and one call of lite's engine, of ``torch.compile`` on the original network (marking
each CUDA-graph step) and of ONNX Runtime's best CUDA configuration (bench/gpu_resnet50.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gpu_resnet50 import ort_best_session


def build_network(name: str):
    import torch

    torch.manual_seed(0)
    if name == "tiny":  # a stand-in without torchvision, for checking this script on a CPU
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1), torch.nn.Conv2d(8, 16, 3, 1, 1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
        ).eval()
    import torchvision

    return getattr(torchvision.models, name)(weights=None).eval()


def export_models(net, workdir: Path, image_size: int, device: str) -> tuple[Path, Path]:
    """The .lite file (fp16 weights and I/O, dynamic batch) and the ONNX file ONNX Runtime runs."""
    import torch

    from converter import convert_model
    from lite.format import save

    example = torch.randn(1, 3, image_size, image_size)
    axes = {"input": {0: "N"}, "logits": {0: "N"}}
    fp32_path = workdir / "model.onnx"
    torch.onnx.export(net, (example,), str(fp32_path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"], dynamic_axes=axes)
    lite_path = workdir / "model_fp16.lite"
    save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), lite_path)
    if device != "cuda":
        return lite_path, fp32_path
    fp16_path = workdir / "model_fp16.onnx"
    half = copy_of(net).half().cuda()
    torch.onnx.export(half, (example.half().cuda(),), str(fp16_path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"], dynamic_axes=axes)
    return lite_path, fp16_path


def copy_of(net):
    import copy

    return copy.deepcopy(net)


def lite_runner(engine, x):
    name = "input"
    return lambda: engine.run({name: x})


def peer_runner(compiled, x, cuda_graphs: bool):
    torch = sys.modules["torch"]

    def run():
        if cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    return run


def ort_best_runner(onnx_path: Path, x_host: np.ndarray, device: str):
    """ONNX Runtime's best CUDA configuration (bench/gpu_resnet50.py): NHWC, CUDA graph, fixed buffers."""
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls") and device == "cuda":
        ort.preload_dlls()
    if device != "cuda":
        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        return lambda: session.run(None, {"input": x_host})
    best, binding, _ = ort_best_session(ort, onnx_path, x_host)
    return lambda: best.run_with_iobinding(binding)
