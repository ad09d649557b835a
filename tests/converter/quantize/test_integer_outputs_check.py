"""The int8 accuracy check on integer and boolean outputs (ArgMax ids, masks): scored by the
share of elements that match, not by cosine, and a classifier's top-1 drop feeds the verdict."""

from __future__ import annotations

import numpy as np

from converter.quantize.evaluate import compare
from converter.quantize.pipeline import accuracy_warnings


def ids_with_changes(changed: int):
    rng = np.random.default_rng(3)
    reference = rng.integers(1, 18000, (8, 125)).astype(np.int64)
    quantized = reference.copy()
    quantized.reshape(-1)[:changed] += 1  # a neighbouring id: cosine barely moves
    return {"ids": reference}, {"ids": quantized}


def test_changed_ids_warn_though_their_cosine_is_high():
    reference, quantized = ids_with_changes(26)  # 2.6 % of 1000 ids
    evaluation = compare(reference, quantized)
    assert evaluation.outputs[0].cosine > 0.99
    assert evaluation.outputs[0].exact == 1 - 26 / 1000
    assert evaluation.top1_agreement is None  # ids are not class scores
    assert abs(evaluation.drop - 2.6) < 1e-9
    warnings = accuracy_warnings(reference, quantized, evaluation, "8 calibration samples", "advice")
    assert len(warnings) == 1 and "'ids' matches the float model's in 97.40%" in warnings[0]


def test_ids_that_all_match_pass():
    reference, quantized = ids_with_changes(0)
    evaluation = compare(reference, quantized)
    assert accuracy_warnings(reference, quantized, evaluation, "8 calibration samples", "advice") == []
    assert evaluation.to_dict()["outputs"][0]["exact_match_pct"] == 100.0


def test_a_changed_top1_class_warns():
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((8, 10)).astype(np.float32)
    scores[0, :2] = 3.0, 2.9999
    flipped = scores.copy()
    flipped[0, 1] = 3.0001  # one sample's runner-up just wins
    evaluation = compare({"logits": scores}, {"logits": flipped})
    assert evaluation.outputs[0].cosine > 0.99
    warnings = accuracy_warnings({"logits": scores}, {"logits": flipped}, evaluation, "8 samples", "advice")
    assert len(warnings) == 1 and "top-1 class differs from the float model's on 12.50%" in warnings[0]
