"""Calls with an empty input axis, on models with recurrent layers: run on the numpy engine.

ONNX Runtime's CPU kernels for LSTM and GRU (1.32) end the whole process (``std::terminate``,
"terminate called without an active exception") when a batch of 0 or 0 time steps reaches them,
which a model accepts as legitimately as any other size: one such request killed a server and
every request in flight on every model. ONNX Runtime's own error handling never sees it, so the
engine does not give it the chance: a call whose inputs have an empty axis, on a model with a
recurrent layer anywhere (subgraphs included), runs on the numpy engine, which computes the
empty result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lite.format import ir

_RECURRENT = {("", "LSTM"), ("", "GRU"), ("", "RNN"), ("com.microsoft", "DynamicQuantizeLSTM")}


def has_recurrent_layers(model: ir.Model) -> bool:
    """Whether any graph of ``model`` holds an LSTM, GRU or RNN node."""
    return any(((node.domain if node.domain != "ai.onnx" else ""), node.op_type) in _RECURRENT
               for graph in model.graphs for node in graph.nodes)


def has_empty_axis(feeds: Mapping[str, Any]) -> bool:
    return any(0 in tuple(getattr(value, "shape", ()) or ()) for value in feeds.values())
