"""The PyTorch-Inductor engine: .lite graphs lowered to torch operations and compiled.

    from lite.engines.torch import TorchEngine
    engine = TorchEngine(model_ir, device="cuda", mode="max-autotune")
    outputs = engine.run({"input": x})          # numpy or CUDA (DLPack) arrays

PyTorch is the optional extra ``torch`` (``pip install 'lite-toolchain[torch]'``); importing this
package without it raises :class:`lite.errors.EngineUnavailableError`. Only this package imports
torch. See :mod:`.engine` (partition, precision, data path), :mod:`.lowering` (the FX module),
:mod:`.ops` (the table of lowerings), :mod:`.inductor_modes` (the modes) and :mod:`.compiler` (artifacts
compiled ahead of time and their on-disk cache).
"""

from __future__ import annotations

import inspect
from typing import Any

from lite.errors import EngineUnavailableError

try:
    import torch  # noqa: F401  (the optional extra; every module of this package needs it)
except ImportError as err:
    raise EngineUnavailableError("the torch engine needs PyTorch: pip install 'lite-toolchain[torch]'") from err

from lite.engines.torch.compiler import STARTUP_POLICIES
from lite.engines.torch.engine import PRECISIONS, TorchEngine
from lite.engines.torch.inductor_modes import MODES
from lite.format import ir

__all__ = ["MODES", "PRECISIONS", "STARTUP_POLICIES", "TorchEngine", "create_engine"]

# lite.engines precision policies -> TorchEngine precision ("bf16" allows fp16 arithmetic too).
_PRECISION = {None: "auto", "exact": "fp32", "fp16": "fp16", "bf16": "auto"}


def create_engine(model: ir.Model, request: Any) -> TorchEngine:
    """The factory of ``lite.engines.ENGINES["torch"]`` (a :class:`lite.engines.EngineRequest`).

    ``request.device``: "auto" (CUDA when torch sees a GPU, else the CPU), "cuda", "cuda:N" or
    "cpu". ``request.options``: TorchEngine's keyword arguments (``mode``, ``channels_last``,
    ``dynamic``, ``freezing``, ``fallback``, ``cache_dir``, ``aot``, ``inductor_options``,
    ``startup``, ``precompiled``: a package folder, "auto" or None). ``request.threads`` is not applied:
    torch's thread count is process-wide (``torch.set_num_threads``).
    """
    import torch

    device = request.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not (device == "cpu" or device.startswith("cuda")):
        raise EngineUnavailableError(f"engine 'torch' runs on 'cuda' or 'cpu'; got device={request.device!r}")
    options = dict(request.options)
    valid = [name for name, parameter in inspect.signature(TorchEngine).parameters.items()
             if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("precision", "custom_ops")]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TypeError(f"unknown torch engine option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}")
    options.setdefault("cache_dir", request.cache_dir)
    precision = _PRECISION[request.precision]
    if precision == "fp16" and device == "cpu":
        precision = "fp32"
    options["precompiled"] = _package(options.get("precompiled", "auto"), request.identity, device)
    return TorchEngine(model, device, precision=precision, custom_ops=request.custom_ops, **options)


def _package(choice: Any, identity: str | None, device: str) -> Any:
    """``precompiled=``: "auto" (the package ``lite compile`` writes beside the model file, if
    there is one), a path (which must exist), or None (none)."""
    import logging
    from pathlib import Path

    import torch

    from lite.engines.torch import precompiled

    if choice is None or device == "cpu":
        return None
    if isinstance(choice, precompiled.Package):
        return choice
    model_path = None if identity is None else identity.rsplit(":", 3)[0]  # file_identity: path:size:mtime:inode
    if choice == "auto":
        if model_path is None or not precompiled.default_location(model_path).is_dir():
            return None
        folder = precompiled.default_location(model_path)
    else:
        folder = Path(choice)
        if not (folder / precompiled.MANIFEST).is_file():
            raise FileNotFoundError(f"precompiled={str(choice)!r}: no {precompiled.MANIFEST} there; "
                                    "write a package with lite compile MODEL --device cuda --batch-sizes ...")
    digest = precompiled.file_digest(model_path) if model_path is not None else None
    package = precompiled.open_package(folder, torch.device(device), digest)
    if package.mismatch is not None:
        logging.getLogger("lite.engines.torch").warning(
            "the precompiled package %s does not apply, artifacts are compiled here instead: %s", folder,
            package.mismatch)
    return package
