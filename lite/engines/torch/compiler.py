"""``torch.compile`` for lowered graphs, and where Inductor keeps its on-disk caches.

Modes are torch's (https://pytorch.org/docs/stable/generated/torch.compile.html):

| mode | what Inductor does |
|---|---|
| ``eager`` | no compilation: the FX module runs op by op (lite's own name, for debugging) |
| ``default`` | fused Triton / C++ kernels |
| ``reduce-overhead`` | as default, plus CUDA graphs (one per input shape) |
| ``max-autotune`` | benchmarks matmul/conv implementations at compile time, plus CUDA graphs |
| ``max-autotune-no-cudagraphs`` | the same without CUDA graphs |

Compilation is specialised per input shape by default (``dynamic=False``): each batch size is a
bucket compiled (and on CUDA captured) once, like the ONNX Runtime engine's CUDA graphs; torch
recompiles at most ``torch._dynamo.config.recompile_limit`` (8) times per graph, then runs it
uncompiled.

Caches: the FX graph cache, the AOTAutograd cache, autotuning results and Triton kernels all
live under ``TORCHINDUCTOR_CACHE_DIR``; :func:`configure_cache` points it at lite's cache root
(``<cache_dir>/torch``) so a second process finds the compiled kernels instead of recompiling.
Inductor reads that variable process-wide: the first engine that names a folder sets it, and a
variable the user set before wins.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import torch

MODES = ("eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
_cache_lock = threading.Lock()


def configure_cache(cache_dir: Path | None) -> Path | None:
    """Point Inductor's caches at ``cache_dir / "torch"``; returns the folder in use (None: torch's default)."""
    with _cache_lock:
        current = os.environ.get(CACHE_VARIABLE)
        if current is None and cache_dir is not None:
            folder = Path(cache_dir) / "torch"
            folder.mkdir(parents=True, exist_ok=True)
            os.environ[CACHE_VARIABLE] = str(folder)
            current = str(folder)
        # On by default in torch ≥ 2.4; stated here because a restart without them recompiles everything.
        torch._inductor.config.fx_graph_cache = True
        torch._functorch.config.enable_autograd_cache = True
        return None if current is None else Path(current)


def uses_cuda_graphs(mode: str, device: torch.device) -> bool:
    return device.type == "cuda" and mode in ("reduce-overhead", "max-autotune")


def compile_module(module: torch.nn.Module, mode: str, *, dynamic: bool | None, freezing: bool) -> Callable:
    """``module`` compiled by Inductor in ``mode`` (or itself for ``eager``)."""
    if mode == "eager":
        return module
    options = dict(torch._inductor.list_mode_options(mode))
    # Freezing folds the weights into the compiled graph as constants (conv+bn folding,
    # weight layout and prepacking for the CPU's oneDNN kernels): right for inference.
    options["freezing"] = freezing
    return torch.compile(module, backend="inductor", options=options, dynamic=dynamic)
