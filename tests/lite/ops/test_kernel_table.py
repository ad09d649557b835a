"""lite.ops.MODULES, the on-demand table, names exactly what the kernel modules register."""

from __future__ import annotations

import importlib
import subprocess
import sys

import lite.ops.registry as registry
from lite.ops import MODULES


def test_table_matches_the_registrations(monkeypatch):
    registered: dict[tuple[str, str], set[str]] = {}
    current = [""]

    class Recording(registry.KernelRegistry):
        def add(self, kernel):
            registered.setdefault((kernel.domain, kernel.op_type), set()).add(current[0])

    registry.KERNELS.load_all()  # modules that import others then find them already loaded
    recording = Recording()
    monkeypatch.setattr(registry, "kernel", recording.register)
    for module in sorted(set(MODULES.values())):
        current[0] = module
        name = f"lite.ops.{module}"
        saved = sys.modules.pop(name, None)
        try:
            importlib.import_module(name)  # re-run the module's registrations into `recording`
        finally:
            if saved is not None:
                sys.modules[name] = saved
    assert {key: {module} for key, module in MODULES.items()} == registered


def test_import_lite_loads_no_kernel_module():
    code = ("import sys, lite\n"
            "print(sorted(m for m in sys.modules if m.startswith('lite.ops.') and m not in "
            "('lite.ops.registry', 'lite.ops.fused_activation')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_model_loads_only_the_kernels_it_uses():
    code = ("import sys, numpy as np, lite\n"
            "from lite.format import GraphBuilder, to_bytes\n"
            "b = GraphBuilder('m'); x = b.input('x', np.float32, [2]); b.output(b.node('Relu', [x]))\n"
            "lite.Model.load(to_bytes(b.build()), device='numpy')\n"
            "print(sorted(m for m in sys.modules if m.startswith('lite.ops.') and m not in "
            "('lite.ops.registry', 'lite.ops.fused_activation', 'lite.ops._blas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = eval(out.stdout)  # a printed list of module names
    assert "lite.ops.activations" in loaded and "lite.ops.conv" not in loaded and len(loaded) <= 3, loaded
