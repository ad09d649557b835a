"""Conversion time and peak memory for a ~100 MB model (ResNet-50 with BatchNormalization).

Targets: ≤ 5 s on 2 cores, peak memory ≤ 2.5× the model size. The conversion runs in a
fresh process; peak memory is that process's peak RSS (VmHWM) minus its RSS after imports (the cost of
the conversion itself). Verification is off: it is a separate check, not the conversion.

    python bench/converter_large_model.py [--format lite|onnx]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
import converter, onnx, onnx_ir, numpy, lite.format
def status_kb(key):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(key + ':'):
                return int(line.split()[1])
baseline = status_kb('VmRSS')
start = time.perf_counter()
report = converter.convert(sys.argv[1], sys.argv[2], verify=False)
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: the latter keeps the parent's high-water mark across fork + exec.
peak = status_kb('VmHWM')
print(json.dumps({"seconds": seconds, "baseline_kb": baseline, "peak_kb": peak,
                  "nodes_before": report.before.nodes, "nodes_after": report.after.nodes}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", choices=["lite", "onnx"], default="lite")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    import onnx
    from models import resnet50

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "resnet50.onnx"
        onnx.save(resnet50("legacy"), source)
        size = source.stat().st_size
        output = Path(tmp) / f"resnet50.{args.format}"
        done = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(output)], capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        out_size = output.stat().st_size
    extra = (result["peak_kb"] - result["baseline_kb"]) * 1024
    print(f"ResNet-50 (legacy exporter shape): {size / 1e6:.1f} MB, {result['nodes_before']} → {result['nodes_after']} nodes, "
          f"output {out_size / 1e6:.1f} MB (.{args.format})")
    print(f"  conversion time: {result['seconds']:.2f} s   (target <= 5 s) {'PASS' if result['seconds'] <= 5 else 'MISS'}")
    ratio = extra / size
    print(f"  peak memory    : {extra / 1e6:.0f} MB above baseline = {ratio:.2f}x model size "
          f"(target <= 2.5x) {'PASS' if ratio <= 2.5 else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
