"""The quantization report: what was quantized, what stayed float and why, and how close it is.

It rides along the conversion report (``--report report.json`` writes it under
``"quantization"``; the CLI prints its summary after the conversion table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from converter.quantize.evaluate import Evaluation
from converter.quantize.sensitivity import FallbackStep, LayerSensitivity
from converter.report import ConversionReport


@dataclass
class QuantizationReport:
    mode: str
    options: dict[str, Any]
    quantized_nodes: list[str] = field(default_factory=list)
    declined: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, reason)
    removed_activations: list[str] = field(default_factory=list)
    kept_in_float: list[str] = field(default_factory=list)  # by the accuracy-budget fallback
    calibration_samples: int = 0
    calibration_engine: str = ""
    evaluation: Evaluation | None = None
    evaluated_on: str = "eval"  # the samples of ``evaluation``: "eval" (--eval) or "calibration" (the check without it)
    sensitivity: list[LayerSensitivity] = field(default_factory=list)
    fallback_steps: list[FallbackStep] = field(default_factory=list)
    budget_met: bool | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "options": self.options,
            "quantized_nodes": len(self.quantized_nodes),
            "quantized": self.quantized_nodes,
            "kept_in_float": self.kept_in_float,
            "declined": [{"node": n, "op_type": o, "reason": r} for n, o, r in self.declined],
            "removed_activations": self.removed_activations,
            "calibration_samples": self.calibration_samples,
            "calibration_engine": self.calibration_engine,
            "evaluation": self.evaluation.to_dict() if self.evaluation else None,
            "evaluated_on": self.evaluated_on if self.evaluation else None,
            "sensitivity": [s.to_dict() for s in self.sensitivity],
            "fallback_steps": [s.to_dict() for s in self.fallback_steps],
            "budget_met": self.budget_met,
            "warnings": self.warnings,
            "seconds": round(self.seconds, 3),
        }

    def table(self) -> str:
        lines = [f"  quantization: {self.mode}, {len(self.quantized_nodes)} nodes quantized"
                 + (f", {self.calibration_samples} calibration samples ({self.options.get('calibration_method')})"
                    if self.calibration_samples else "")]
        evaluation = self.evaluation
        if evaluation is not None:
            parts = [f"{evaluation.samples} {self.evaluated_on} samples"]
            if evaluation.top1_agreement is not None:
                parts.append(f"top-1 agreement {100 * evaluation.top1_agreement:.2f}%")
            if evaluation.float_accuracy is not None:
                parts.append(f"accuracy {100 * evaluation.float_accuracy:.2f}% → {100 * evaluation.quantized_accuracy:.2f}%")
            parts.append(f"drop {evaluation.drop:.2f} pp")
            lines.append("    " + ", ".join(parts))
            for output in evaluation.outputs:
                if output.exact is not None:
                    lines.append(f"    output {output.name!r}: exact match {100 * output.exact:.2f}%")
                else:
                    lines.append(f"    output {output.name!r}: cosine {output.cosine:.6f}, SNR {output.snr_db:.1f} dB")
        if self.sensitivity:
            worst = ", ".join(f"{s.node} ({s.snr_db:.1f} dB)" for s in self.sensitivity[:3])
            lines.append(f"    most sensitive layers: {worst}")
        if self.options.get("max_accuracy_drop") is not None:
            status = "met" if self.budget_met else "NOT met"
            kept = ", ".join(self.kept_in_float) if self.kept_in_float else "none"
            lines.append(f"    budget {self.options['max_accuracy_drop']} pp {status}; kept in float: {kept}")
        reasons = {}
        for node, op, reason in self.declined:
            reasons.setdefault(reason, []).append(node or f"(unnamed {op})")
        for reason, nodes in reasons.items():
            lines.append(f"    float ({len(nodes)}): {reason} — {', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}")
        for warning in self.warnings:
            lines.append(f"    warning: {warning}")
        return "\n".join(lines)


@dataclass
class QuantizedConversionReport(ConversionReport):
    """A conversion report with the quantization report attached."""

    quantization: QuantizationReport | None = None

    def to_dict(self) -> dict[str, Any]:
        result = super().to_dict()
        result["quantization"] = self.quantization.to_dict() if self.quantization else None
        return result

    def table(self) -> str:
        text = super().table()
        return text if self.quantization is None else f"{text}\n{self.quantization.table()}"
