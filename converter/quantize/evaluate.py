"""Comparing a float and a quantized model on evaluation data.

Per output: cosine similarity and signal-to-noise ratio ``SNR = 10 log10(Σ f² / Σ (f − q)²)`` dB
over all samples (what MindSpore Lite's debug mode and ONNX Runtime's ``qdq_loss_debug`` report).
For a classifier (first output a float array of shape [N, classes]): top-1 agreement between the
two models, and the accuracy of each when labels are given. Integer and boolean outputs (ArgMax
ids, lengths, masks) are labels, not magnitudes: their cosine says little (a recognizer's ids kept
0.996 with 2.6 % of them changed), so they get the share of elements that match exactly.

The *accuracy drop* that ``max_accuracy_drop`` bounds is, in percentage points, the float
accuracy minus the quantized accuracy when labels are given, else the share of samples whose
top-1 class changed (100 − agreement); for models that are not classifiers, ``100 × (1 − cosine)``
of the first output, or ``100 × (1 − exact match)`` when it is integer or boolean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from converter.quantize.data import Batch
from converter.quantize.errors import QuantizedModelRejectedError
from converter.quantize.runner import Runner
from lite.engines.ort.sessions import OrtRejected
from lite.format import ir as lite_ir


@dataclass
class OutputMetrics:
    name: str
    cosine: float
    snr_db: float
    max_abs: float
    exact: float | None = None  # integer/boolean outputs: the share of elements equal to the float model's

    def to_dict(self) -> dict[str, Any]:
        described = {"name": self.name, "cosine": round(self.cosine, 6), "snr_db": round(self.snr_db, 2),
                     "max_abs": float(self.max_abs)}
        if self.exact is not None:
            described["exact_match_pct"] = round(100.0 * self.exact, 3)
        return described


@dataclass
class Evaluation:
    samples: int
    outputs: list[OutputMetrics] = field(default_factory=list)
    top1_agreement: float | None = None  # fraction
    float_accuracy: float | None = None
    quantized_accuracy: float | None = None

    @property
    def drop(self) -> float:
        """The accuracy drop in percentage points (see the module docstring)."""
        if self.float_accuracy is not None and self.quantized_accuracy is not None:
            return 100.0 * (self.float_accuracy - self.quantized_accuracy)
        if self.top1_agreement is not None:
            return 100.0 * (1.0 - self.top1_agreement)
        if not self.outputs:
            return 0.0
        first = self.outputs[0]
        return 100.0 * (1.0 - (first.cosine if first.exact is None else first.exact))

    def to_dict(self) -> dict[str, Any]:
        def pct(value):
            return None if value is None else round(100.0 * value, 3)

        return {
            "samples": self.samples,
            "top1_agreement_pct": pct(self.top1_agreement),
            "float_accuracy_pct": pct(self.float_accuracy),
            "quantized_accuracy_pct": pct(self.quantized_accuracy),
            "accuracy_drop_pp": round(self.drop, 3),
            "outputs": [o.to_dict() for o in self.outputs],
        }


class EvalSet:
    """Evaluation batches held in memory (at most ``eval_size`` samples) with the float outputs."""

    def __init__(self, float_model: lite_ir.Model, batches: list[Batch], engine: str = "auto") -> None:
        self.batches = batches
        self.engine = engine
        self.samples = sum(b.size for b in batches)
        self.labels = None
        if batches and all(b.labels is not None for b in batches):
            self.labels = np.concatenate([b.labels for b in batches])
        self.float_outputs = self._outputs(float_model)

    def run(self, model: lite_ir.Model, limit: int | None = None) -> dict[str, np.ndarray]:
        """The outputs of ``model``, a quantized variant of the float model, on the held batches.

        ONNX Runtime ran the float model, so its refusing to load this one is the quantization's
        fault (two nodes named alike, say): the file would fail on device='cpu'. That is raised as
        :class:`QuantizedModelRejectedError`, never left as a note.
        """
        try:
            return self._outputs(model, limit)
        except OrtRejected as err:
            raise QuantizedModelRejectedError(
                f"ONNX Runtime runs the float model but refuses the quantized one ({err}): a defect of lite's "
                "quantization, which would make the file fail on device='cpu'. Please report "
                "it with the model; --quant int8-dynamic or int8-weight may avoid it"
            ) from err

    def _outputs(self, model: lite_ir.Model, limit: int | None = None) -> dict[str, np.ndarray]:
        runner = Runner(model, engine=self.engine)
        collected: dict[str, list[np.ndarray]] = {name: [] for name in runner.output_names}
        seen = 0
        for batch in self.batches:
            if limit is not None and seen >= limit:
                break
            outputs = runner.run(batch.feeds)
            for name in runner.output_names:
                output = np.asarray(outputs[name])  # a padded batch's extra rows repeat its last sample
                collected[name].append(output[: batch.size] if batch.padded and output.ndim else output)
            seen += batch.size
        return {name: _joined(parts) for name, parts in collected.items() if parts}

    def evaluate(self, model: lite_ir.Model, limit: int | None = None) -> Evaluation:
        quantized = self.run(model, limit)
        count = next(iter(quantized.values())).shape[0] if quantized else 0
        reference = {name: array[:count] for name, array in self.float_outputs.items()}
        labels = None if self.labels is None else self.labels[:count]
        evaluation = compare(reference, quantized, labels)
        # samples, not output rows: an input fed whole (a sequence) answers with many rows
        evaluation.samples = self.samples if limit is None else min(limit, self.samples)
        return evaluation


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One output's batches as one array: along the batch axis; a rank-0 output (a quality score)
    one value per batch; outputs of sequences fed whole, of different lengths, flattened end to end."""
    if not parts[0].ndim:
        return np.stack(parts)
    if any(part.shape[1:] != parts[0].shape[1:] for part in parts):
        return np.concatenate([part.reshape(-1) for part in parts])
    return np.concatenate(parts)


def compare(reference: dict[str, np.ndarray], quantized: dict[str, np.ndarray],
            labels: np.ndarray | None = None) -> Evaluation:
    names = list(reference)
    count = reference[names[0]].shape[0] if names else 0
    evaluation = Evaluation(samples=count)
    for name in names:
        evaluation.outputs.append(_metrics(name, np.asarray(reference[name]), np.asarray(quantized[name])))
    first_f, first_q = (reference[names[0]], quantized[names[0]]) if names else (None, None)
    if first_f is not None and first_f.ndim == 2 and first_f.shape[1] > 1 and not is_discrete(first_f):
        top_f, top_q = first_f.argmax(axis=1), first_q.argmax(axis=1)
        evaluation.top1_agreement = float(np.mean(top_f == top_q))
        if labels is not None:
            evaluation.float_accuracy = float(np.mean(top_f == labels))
            evaluation.quantized_accuracy = float(np.mean(top_q == labels))
    return evaluation


def is_discrete(values: np.ndarray) -> bool:
    """Whether an output holds integers or booleans (ids, counts, masks), compared exactly."""
    return np.asarray(values).dtype.kind in "iub"


def _metrics(name: str, reference: np.ndarray, quantized: np.ndarray) -> OutputMetrics:
    f = reference.astype(np.float64).reshape(-1)
    q = quantized.astype(np.float64).reshape(-1)
    metrics = OutputMetrics(name, cosine(f, q), snr_db(f, q), float(np.max(np.abs(f - q))) if f.size else 0.0)
    if is_discrete(reference):
        same = reference.shape == quantized.shape
        metrics.exact = float(np.mean(reference == quantized)) if same and reference.size else float(same)
    return metrics


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0.0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.dot(a, b) / norm)


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference - other) ** 2))
    signal = float(np.sum(reference**2))
    if noise == 0.0:
        return float("inf")
    if signal == 0.0:
        return float("-inf")
    return 10.0 * np.log10(signal / noise)
