"""Per-layer sensitivity and the accuracy-budget fallback.

Sensitivity of a layer: the error it introduces when it *alone* is quantized (its weights, its
inputs and its output), measured at the model's outputs on the evaluation data as an SNR in dB
(lower is worse) — the question ONNX Runtime's ``qdq_loss_debug`` and MindSpore Lite's debug
CSVs leave to the user.

Fallback (``max_accuracy_drop``): quantize everything; while the accuracy drop exceeds the
budget, keep the next most sensitive layer in float and measure again. The layers kept in float
are named in the report. Each step rebuilds the quantized graph from the same calibrated
ranges (no new calibration), so a step costs one evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from converter.quantize.evaluate import EvalSet, Evaluation
from converter.quantize.progress import ProgressCallback
from converter.quantize.static import QuantizedGraph

# build(include, exclude) -> the quantized model (include None: every node the mode quantizes)
Build = Callable[[Collection[str] | None, Collection[str]], QuantizedGraph]


@dataclass
class LayerSensitivity:
    node: str
    op_type: str
    snr_db: float
    cosine: float
    top1_agreement: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "snr_db": round(self.snr_db, 2),
            "cosine": round(self.cosine, 6),
            "top1_agreement_pct": None if self.top1_agreement is None else round(100 * self.top1_agreement, 2),
        }


@dataclass
class FallbackStep:
    kept_in_float: list[str]
    drop: float

    def to_dict(self) -> dict[str, Any]:
        return {"kept_in_float": self.kept_in_float, "accuracy_drop_pp": round(self.drop, 3)}


def layer_sensitivity(build: Build, layers: list[tuple[str, str]], evalset: EvalSet, limit: int,
                      progress: ProgressCallback | None = None) -> list[LayerSensitivity]:
    """One entry per layer ``(node name, op type)``, most sensitive (lowest SNR) first."""
    results = []
    for position, (name, op_type) in enumerate(layers, start=1):
        evaluation = evalset.evaluate(build({name}, ()).model, limit)
        first = evaluation.outputs[0]
        results.append(LayerSensitivity(name, op_type, first.snr_db, first.cosine, evaluation.top1_agreement))
        if progress is not None:
            progress("per-layer sensitivity (layers)", position, len(layers))
    results.sort(key=lambda entry: (entry.snr_db, entry.cosine))
    return results


def fallback(build: Build, ranking: list[LayerSensitivity], evalset: EvalSet, budget: float,
             first: tuple[QuantizedGraph, Evaluation]) -> tuple[QuantizedGraph, Evaluation, list[str], list[FallbackStep]]:
    """Keep the most sensitive layers in float until the accuracy drop is within ``budget`` pp."""
    quantized, evaluation = first
    steps = [FallbackStep([], evaluation.drop)]
    kept: list[str] = []
    for entry in ranking:
        if evaluation.drop <= budget:
            break
        kept.append(entry.node)
        quantized = build(None, kept)
        evaluation = evalset.evaluate(quantized.model)
        steps.append(FallbackStep(list(kept), evaluation.drop))
    return quantized, evaluation, kept, steps
