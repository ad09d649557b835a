"""The OpenVINO engine (optional extra ``openvino``): see :mod:`lite.engines.openvino.engine`.

Importing this package does not import OpenVINO; building an engine does.
"""

from __future__ import annotations

from typing import Any

from lite.engines.openvino.engine import PRECISIONS, OpenVinoEngine, OpenVinoRejected, check_supported
from lite.format import ir

__all__ = ["PRECISIONS", "OpenVinoEngine", "OpenVinoRejected", "check_supported", "create_engine"]


def create_engine(model: ir.Model, request: Any) -> OpenVinoEngine:
    """The factory of ``lite.engines.ENGINES["openvino"]``: CPU only, options ``cache_dir``."""
    from lite.errors import EngineUnavailableError

    if request.device not in ("auto", "cpu"):
        raise EngineUnavailableError(f"engine 'openvino' runs on the CPU here; got device={request.device!r}")
    options = dict(request.options)
    cache_dir = options.pop("cache_dir", request.cache_dir)
    if options:
        raise TypeError(f"options {', '.join(sorted(options))} do not apply to engine 'openvino' "
                        "(it takes precision and cache_dir)")
    # An fp16 policy forbids bf16 (fewer mantissa bits); OpenVINO's CPU plugin then computes in f32.
    precision = "bf16" if request.precision == "bf16" else "exact"
    return OpenVinoEngine(model, precision=precision, threads=request.threads, cache_dir=cache_dir,
                          weights_identity=request.identity, custom_ops=request.custom_ops)
