#!/usr/bin/env python3
"""Does PyTorch's AOTInductor work on this GPU machine? (the warm-start path of issue 11)

Compiles a two-layer convolutional network (fp16, CUDA) with ``aoti_compile_and_package`` and
loads the package with ``aoti_load_package``, in this process (``inproc``) and in a fresh one
(``child``), which is what ``lite.Model.load(..., engine="torch", aot=True)`` does with
ResNet-50. Prints each step, or the fault (faulthandler) where the load crashes.

    python bench/gpu_aoti_check.py child inproc            # on the GPU machine
    python bench/gpu_aoti_check.py --device cpu child      # the same steps on the CPU (float32)
"""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import faulthandler, sys, torch
faulthandler.enable()
run = torch._inductor.aoti_load_package(sys.argv[1])
x = torch.randn(2, 3, 16, 16, device=sys.argv[2])
print("child load ok", tuple(run(x.half() if sys.argv[2] == "cuda" else x).shape))
"""


def main() -> int:
    faulthandler.enable()
    import torch

    arguments = sys.argv[1:]
    device = "cuda"
    if arguments[:1] == ["--device"]:
        device, arguments = arguments[1], arguments[2:]
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "device", device, flush=True)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).to(device).eval()
    x = torch.randn(2, 3, 16, 16, device=device)
    if device == "cuda":
        net, x = net.half(), x.half()
    folder = tempfile.mkdtemp()
    for variant in arguments or ["child", "inproc"]:
        path = os.path.join(folder, f"{variant}.pt2")
        with torch.no_grad():
            program = torch.export.export(net, (x,), strict=False)
            start = time.perf_counter()
            torch._inductor.aoti_compile_and_package(program, package_path=path)
            print(variant, "compiled in", round(time.perf_counter() - start, 1), "s", flush=True)
            if variant == "inproc":
                run = torch._inductor.aoti_load_package(path)
                print("inproc load ok, max error", (run(x) - net(x)).abs().max().item(), flush=True)
            else:
                out = subprocess.run([sys.executable, "-c", CHILD, path, device], capture_output=True, text=True,
                                     check=False)
                print("child exited with", out.returncode, out.stdout[-300:], out.stderr[-1500:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
