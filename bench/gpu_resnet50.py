#!/usr/bin/env python3
"""ResNet-50 fp16 on one GPU: lite.Model(device="cuda") side by side with ONNX Runtime's CUDA provider.

The network is torchvision's ResNet-50 definition with random weights. lite runs the .lite file
that `lite convert --fp16 --fp16-io --dynamic-batch` makes from the legacy-exporter ONNX; the
peers, measured in the same process, are ONNX Runtime sessions on the same network exported in
float16 by PyTorch:

- ORT default: CUDA provider defaults, inputs and outputs bound on the GPU (IOBinding);
- ORT best: NHWC preferred + CUDA graph + IOBinding with fixed buffers (its best configuration);
- lite, device-resident: torch CUDA tensors in, DeviceArray out (DLPack, no host copies); the
  same with CuPy arrays in (the generic DLPack path, without PyTorch's allocator);
- lite, numpy: numpy arrays in and out; the same with the input array in pinned host memory
  (``lite.pinned_empty``).

Needs a CUDA GPU, torch + torchvision, and onnxruntime-gpu (see docs/benchmarks.md for the
command used on our GPU machine). Prints a table and writes JSON to --json.

    python bench/gpu_resnet50.py --batches 1 256 --seconds 2 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn, sync, seconds: float, min_iters: int = 10) -> float:
    """Median seconds per call over a timed window, after warm-up."""
    for _ in range(5):
        fn()
    sync()
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < min_iters:
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def export(workdir: Path):
    import torch
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet50(weights=None).eval()
    example = torch.randn(1, 3, 224, 224)
    fp32_path = workdir / "resnet50.onnx"
    torch.onnx.export(net, (example,), str(fp32_path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    fp16_path = workdir / "resnet50_fp16.onnx"
    torch.onnx.export(net.half().cuda(), (example.half().cuda(),), str(fp16_path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    net.float().cpu()  # .half().cuda() above converted the module in place
    return net, fp32_path, fp16_path


def ort_best_session(ort, fp16_path: Path, x_host: np.ndarray, extra_options: dict | None = None):
    """ONNX Runtime's best configuration (NHWC preferred, CUDA graph) with its input and output
    bound once to fixed device buffers: (session, binding, output OrtValue)."""
    options = {"prefer_nhwc": "1", "enable_cuda_graph": "1", **(extra_options or {})}
    session = ort.InferenceSession(str(fp16_path), providers=[("CUDAExecutionProvider", options)])
    x_fixed = ort.OrtValue.ortvalue_from_numpy(x_host, "cuda", 0)
    y_fixed = ort.OrtValue.ortvalue_from_shape_and_type([x_host.shape[0], 1000], np.float16, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input("input", x_fixed)
    binding.bind_ortvalue_output("logits", y_fixed)
    binding.keep_alive = (x_fixed, y_fixed)  # the binding refers to them; they must outlive it
    return session, binding, y_fixed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are medians")
    parser.add_argument("--lite-option", action="append", default=[], metavar="KEY=JSON",
                        help="an option of lite.Model.load, e.g. tf32=false or fuse_conv_bias=false")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import onnxruntime as ort
    import torch

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    import lite
    from converter import convert_model
    from lite.format import save

    rows: list[dict] = []
    checks: dict[str, object] = {"onnxruntime": ort.__version__, "torch": torch.__version__,
                                 "gpu": torch.cuda.get_device_name(0)}
    workdir = Path(tempfile.mkdtemp())
    net, fp32_path, fp16_path = export(workdir)
    start = time.perf_counter()
    lite_path = workdir / "resnet50_fp16.lite"
    save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), lite_path)
    checks["convert_seconds"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    options = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.lite_option)}
    model = lite.Model.load(lite_path, device="cuda", cache_dir=workdir / "cache", **options)
    checks["first_load_seconds"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    lite.Model.load(lite_path, device="cuda", cache_dir=workdir / "cache", **options)
    checks["second_load_seconds"] = round(time.perf_counter() - start, 2)
    checks["compute_precision"] = model.engine.compute_precision
    checks["cuda_graph_declined"] = model.engine.cuda_graph_declined

    sync = torch.cuda.synchronize
    # Correctness: lite (fp16 on GPU) against PyTorch fp32 on the CPU.
    x = torch.randn(8, 3, 224, 224)
    with torch.no_grad():
        reference = net(x).numpy()
    got = torch.from_dlpack(model.predict({"input": x.half().cuda()})["logits"]).float().cpu().numpy()
    cosine = float((got * reference).sum() / (np.linalg.norm(got) * np.linalg.norm(reference)))
    checks["cosine_vs_torch_fp32"] = round(cosine, 6)
    checks["top1_agreement_vs_torch_fp32"] = float(np.mean(got.argmax(1) == reference.argmax(1)))
    numpy_out = model.predict({"input": x.half().numpy()})["logits"]
    checks["numpy_io_max_abs_diff_vs_device_io"] = float(np.abs(numpy_out.astype(np.float32) - got).max())

    for batch in args.batches:
        x_dev = torch.randn(batch, 3, 224, 224, device="cuda").half()
        x_host = x_dev.cpu().numpy()
        results: dict = {"batch": batch}
        runners = {}
        # ORT default, IOBinding on the GPU.
        session = ort.InferenceSession(str(fp16_path), providers=["CUDAExecutionProvider"])
        binding = session.io_binding()
        binding.bind_input("input", "cuda", 0, np.float16, list(x_dev.shape), x_dev.data_ptr())
        binding.bind_output("logits", "cuda", 0)
        runners["ort_default"] = lambda s=session, b=binding: s.run_with_iobinding(b)
        # ORT best: NHWC + CUDA graph + fixed IOBinding buffers.
        best, best_binding, _ = ort_best_session(ort, fp16_path, x_host)
        runners["ort_best"] = lambda s=best, b=best_binding: s.run_with_iobinding(b)
        # lite: PyTorch tensors in (its fast path), any other DLPack array in (CuPy), numpy in and out.
        runners["lite_device"] = lambda: model.predict({"input": x_dev})
        try:
            import cupy

            x_cupy = cupy.from_dlpack(x_dev)
            runners["lite_device_cupy"] = lambda: model.predict({"input": x_cupy})
        except ImportError:
            pass
        runners["lite_numpy"] = lambda: model.predict({"input": x_host})
        x_pinned = lite.pinned_empty(x_host.shape, x_host.dtype)  # numpy, in page-locked memory
        x_pinned[:] = x_host
        runners["lite_numpy_pinned"] = lambda: model.predict({"input": x_pinned})
        # Interleaved rounds, rotating the order: each figure is the median over rounds.
        samples: dict[str, list[float]] = {label: [] for label in runners}
        labels_in_order = list(runners)
        for round_index in range(args.rounds):
            shift = round_index % len(labels_in_order)
            for label in labels_in_order[shift:] + labels_in_order[:shift]:
                try:
                    samples[label].append(timed(runners[label], sync, args.seconds))
                except Exception as err:  # keep the table going; the error is part of the result
                    results[label] = {"error": f"{type(err).__name__}: {err}"}
                    traceback.print_exc()
        for label, values in samples.items():
            if values and label not in results:
                seconds = float(np.median(values))
                results[label] = {"ms_per_batch": seconds * 1e3, "images_per_s": batch / seconds,
                                  "ms_per_image": seconds * 1e3 / batch,
                                  "rounds_ms": [round(v * 1e3, 4) for v in values]}
        if samples["lite_device"] and samples["ort_best"]:
            per_round = [b / a for a, b in zip(samples["lite_device"], samples["ort_best"])]
            results["lite_device_vs_ort_best_per_round"] = [round(r, 4) for r in per_round]
        rows.append(results)
        del runners, session, binding, best, best_binding

    print(json.dumps(checks, indent=2))
    labels = ["ort_default", "ort_best", "lite_device", "lite_device_cupy", "lite_numpy", "lite_numpy_pinned"]
    print(f"\n{'batch':>6} " + " ".join(f"{label:>22}" for label in labels) + "   (images/s; ms/image)")
    for row in rows:
        cells = []
        for label in labels:
            entry = row.get(label, {})
            cells.append(f"{entry['images_per_s']:>10.0f} {entry['ms_per_image']:>9.3f}ms" if "images_per_s" in entry
                         else f"{'error':>22}")
        print(f"{row['batch']:>6} " + " ".join(cells))
    for row in rows:
        if "images_per_s" in row.get("lite_device", {}) and "images_per_s" in row.get("ort_best", {}):
            row["lite_device_vs_ort_best"] = row["lite_device"]["images_per_s"] / row["ort_best"]["images_per_s"]
            print(f"batch {row['batch']}: lite device / ORT best = {row['lite_device_vs_ort_best']:.3f}")
        if "images_per_s" in row.get("lite_numpy", {}) and "images_per_s" in row.get("lite_device", {}):
            row["numpy_io_loss"] = 1 - row["lite_numpy"]["images_per_s"] / row["lite_device"]["images_per_s"]
            print(f"batch {row['batch']}: numpy I/O loses {100 * row['numpy_io_loss']:.1f}% against device-resident")
        if "images_per_s" in row.get("lite_numpy_pinned", {}) and "images_per_s" in row.get("lite_device", {}):
            row["pinned_numpy_io_loss"] = 1 - row["lite_numpy_pinned"]["images_per_s"] / row["lite_device"]["images_per_s"]
            print(f"batch {row['batch']}: numpy I/O from pinned memory loses {100 * row['pinned_numpy_io_loss']:.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps({"checks": checks, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
