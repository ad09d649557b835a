#!/usr/bin/env python3
"""Which CUDA provider options make ResNet-50 fp16 fastest, on top of ONNX Runtime's best configuration.

Every variant is ONNX Runtime's best configuration (NHWC preferred, CUDA graph, IOBinding with
fixed buffers, the peer of bench/gpu_resnet50.py) plus the options named; each is also run
through ``lite.Model(device="cuda", cuda_options=...)`` with PyTorch tensors in. All sessions are
built first, then measured in interleaved rounds (rotating order); medians over rounds.

    python bench/gpu_ort_options.py --batches 1 256 --rounds 3 --seconds 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_resnet50 import export, ort_best_session, timed  # the same network, exports and peer

VARIANTS = {
    "best": {},
    "fuse_conv_bias": {"fuse_conv_bias": "1"},
    "conv1x1_pointwise": {"cudnn_conv1x1_use_pointwise": "1"},
    "both": {"fuse_conv_bias": "1", "cudnn_conv1x1_use_pointwise": "1"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import onnxruntime as ort
    import torch

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    import lite
    from converter import convert_model
    from lite.format import save

    workdir = Path(tempfile.mkdtemp())
    _, fp32_path, fp16_path = export(workdir)
    lite_path = workdir / "resnet50_fp16.lite"
    save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), lite_path)
    sync = torch.cuda.synchronize
    results: dict = {"onnxruntime": ort.__version__, "gpu": torch.cuda.get_device_name(0), "rows": {}}
    for batch in args.batches:
        x_dev = torch.randn(batch, 3, 224, 224, device="cuda").half()
        x_host = x_dev.cpu().numpy()
        runners, keep, errors = {}, [], {}
        reference = None
        for name, extra in VARIANTS.items():
            try:
                session, binding, y_fixed = ort_best_session(ort, fp16_path, x_host, extra)
                session.run_with_iobinding(binding)
                got = y_fixed.numpy().astype(np.float32)
                reference = got if reference is None else reference
                results.setdefault("max_abs_diff_vs_best", {})[name] = float(np.abs(got - reference).max())
                keep.append((session, binding))
                runners[f"ort_{name}"] = lambda s=session, b=binding: s.run_with_iobinding(b)
                model = lite.Model.load(lite_path, device="cuda", cache_dir=None, cuda_options=extra)
                model.predict({"input": x_dev})
                keep.append(model)
                runners[f"lite_{name}"] = lambda m=model, x=x_dev: m.predict({"input": x})
            except Exception as err:  # an option this build does not know: recorded, the run goes on
                errors[name] = f"{type(err).__name__}: {err}"[:300]
                traceback.print_exc()
        samples: dict[str, list[float]] = {label: [] for label in runners}
        labels = list(runners)
        for round_index in range(args.rounds):
            shift = round_index % len(labels)
            for label in labels[shift:] + labels[:shift]:
                samples[label].append(timed(runners[label], sync, args.seconds))
        row = {label: {"ms_per_batch": float(np.median(v)) * 1e3, "images_per_s": batch / float(np.median(v))}
               for label, v in samples.items()}
        row["errors"] = errors
        results["rows"][str(batch)] = row
        print(f"batch {batch}: images/s")
        for label in labels:
            print(f"  {label:<26} {row[label]['images_per_s']:>10,.0f}  {row[label]['ms_per_batch']:.4f} ms/batch")
        for name, error in errors.items():
            print(f"  {name}: error {error}")
        del runners, keep
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
