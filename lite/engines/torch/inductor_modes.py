"""The compilation modes of the torch engine, and the Inductor settings each compiles with.

Modes are torch's (https://pytorch.org/docs/stable/generated/torch.compile.html):

| mode | what Inductor does |
|---|---|
| ``eager`` | no compilation: the FX module runs op by op (lite's own name, for debugging) |
| ``default`` | fused Triton / C++ kernels |
| ``reduce-overhead`` | as default, plus CUDA graphs (one per input shape) |
| ``max-autotune`` | benchmarks matmul/conv implementations at compile time, plus CUDA graphs |
| ``max-autotune-no-cudagraphs`` | the same without CUDA graphs |
| ``auto`` | lite's: per input shape, the faster of max-autotune and reduce-overhead, timed |

``auto`` (the default on CUDA) exists because no one mode is fastest at every batch size:
max-autotune's kernel choices win at large batches, and at batch 1 the same network ran 0.52 ms
against reduce-overhead's 0.39 ms (ResNet-50 fp16, H200, docs/benchmarks.md). Timing two modes
per shape needs lite's own artifacts (:class:`lite.engines.torch.compiler.AotCompiled`); without
ahead-of-time compilation ``auto`` is max-autotune. Users' ``inductor_options`` go over a mode's
settings, and are checked against ``torch._inductor.config`` when the engine is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

MODES = ("auto", "eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# The modes ``auto`` times against each other on CUDA, in the order they are compiled.
AUTO_CANDIDATES = ("max-autotune", "reduce-overhead")


def uses_cuda_graphs(mode: str, device: torch.device) -> bool:
    return device.type == "cuda" and mode in ("reduce-overhead", "max-autotune", "auto")


def mode_settings(mode: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Inductor settings an ahead-of-time artifact of ``mode`` is compiled with (``options`` over them)."""
    settings = dict(torch._inductor.list_mode_options(mode))
    settings.pop("triton.cudagraphs", None)  # graphs are captured by lite, around the artifact
    # No coordinate-descent tuning of kernel launch parameters: a kernel loaded from a saved
    # artifact checks its recorded tuning against its one compiled configuration, misses, and
    # tunes again in every process (torch 2.11): ResNet-50's warm start took 10.0 s instead
    # of 3.9 s, for no gain in throughput (30,270 vs 30,450 images/s at batch 256, H200,
    # bench/gpu_warm_start.py). ``inductor_options`` can turn it back on.
    settings["coordinate_descent_tuning"] = False
    settings.update(options or {})
    return settings


def check_inductor_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as a dict, every name a setting of ``torch._inductor.config``."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"inductor_options must be a dict of torch._inductor.config settings; got {type(options).__name__}")
    known = torch._inductor.config._config
    unknown = sorted(str(name) for name in options if name not in known)
    if unknown:
        raise ValueError(f"inductor_options: {', '.join(unknown)} not setting(s) of torch._inductor.config "
                         f"(torch {torch.__version__}); see torch/_inductor/config.py for the names")
    return dict(options)


def compile_module(module: torch.nn.Module, mode: str, *, dynamic: bool | None, freezing: bool,
                   options: Mapping[str, Any] | None = None) -> Callable:
    """``module`` compiled by Inductor in ``mode`` (or itself for ``eager``), with ``options``
    (Inductor settings) over the mode's."""
    if mode == "eager":
        return module
    if mode == "auto":  # timing two modes per shape needs lite's own artifacts (AotCompiled)
        mode = "max-autotune"
    settings = dict(torch._inductor.list_mode_options(mode))
    # Freezing folds the weights into the compiled graph as constants (conv+bn folding,
    # weight layout and prepacking for the CPU's oneDNN kernels): right for inference.
    settings["freezing"] = freezing
    settings.update(options or {})
    return torch.compile(module, backend="inductor", options=settings, dynamic=dynamic)
