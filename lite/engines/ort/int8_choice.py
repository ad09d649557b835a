"""int8 kernels or the float form: which runs a static int8 model faster on this CPU.

ONNX Runtime runs a QDQ model's layers with int8 kernels (QLinearConv, QGemm, QLinearAdd ...).
Whether they beat its float kernels depends on the CPU and the layers: with AVX-512 VNNI (or
AVX-VNNI, AMX) a u8 x s8 product accumulates in one instruction; with AVX2 only they need uint8
weights to stay exact (:mod:`lite.engines.ort.unsigned`), which takes ONNX Runtime's slower U8U8
kernels, and small layers pay int8's fixed costs (requantizing, NHWC transposes) for little
arithmetic. On a 2-core AVX2 EPYC, int8 MobileNetV1/V2/V3, RegNet, PP-LCNet, BiT and ConvNeXt at
64x64 took 1.1-1.7x their float time while ResNet-18 took 0.5x; on a Xeon with AMX and AVX-512
VNNI (2 threads) the measurement kept the int8 kernels of MobileNetV2, RegNet, ResNet-18 and
GoogLeNet (0.6-0.9x float) and the float form of the others.

So with ``int8_compute="auto"`` (``lite.Model.load``'s default on the CPU) the engine measures
both at load: the model as stored, and its float form (:mod:`lite.engines.ort.dequantized`: the
same layers on weights dequantized once, no activation rounding). The float form must agree
with the int8 kernels on random inputs within :data:`TOLERANCE` (where they disagree, the numpy
engine tells which one is wrong); then the faster one is kept, timed in alternating rounds and
compared round by round.

The decision is a small JSON record, ``engine.decision``, written under
``<cache_dir>/ort/int8/`` and reused by later loads of the same file on the same CPU, ONNX
Runtime version, thread count and lowering code (the measurement costs about a second). A choice
whose rounds disagree (a busy machine) is used for that load only; the next load measures again.

``int8_compute="int8"`` keeps the int8 kernels without measuring (what quantization tools that
evaluate int8 accuracy need, and the engine's own default), ``"float"`` takes the float form.

Where the engine may then run the model on fewer threads than ONNX Runtime's default
(:mod:`lite.engines.ort.thread_choice`: a small model on a CPU with many cores), the two forms are
also timed at those thread counts, and each round compares each form at its fastest count: on a
16-core Xeon the int8 kernels' lead at 16 threads was not the lead at the 2 or 4 the thread choice
then kept.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lite import cpu
from lite.atomic import atomic_write
from lite.format import ir

_QUANTIZING = {"QuantizeLinear", "DequantizeLinear", "MatMulInteger"}
# The metadata key lite's converter writes on the files it quantizes (converter.quantize.pipeline).
QUANTIZED_BY_LITE = "quantization"
Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
# 2: turns timed by their fastest call, unsettled choices not recorded; 3: fewer threads too; 4: every
# runner warmed up before the first round
DECISION_FORMAT = 4
# Calls slower than this get fewer rounds: their times vary less, and rounds cost more.
_SLOW_CALL_MS = 20.0
_MIN_CALLS = 3
# Untimed calls of each runner, for this long each, before the first round (where turns warm up
# at all, ``warmup_s`` > 0): sessions just made run their first calls slower (buffers allocated,
# pages touched, worker threads started); on a 16-core Xeon a choice's turn of a session at 4
# threads read 0.304 ms where 200 later calls ran in 0.227.
FIRST_WARMUP_S = 0.1
# Rounds that disagree, with a median in this range, leave the choice unsettled (see settled()).
_CLOSE = (0.9, 1.1)
# The float form's largest difference from the int8 kernels, relative to an output's peak. It
# differs by int8's own rounding, which reached 0.12-0.19 of the peak on BiT and EfficientNet
# quantized with random calibration data (their float forms are the closer to the float model);
# a float form that lost an activation (a Relu the quantizer left to a zero point) was off by 4x.
TOLERANCE = 0.5


def wanted(model: ir.Model, setting: str) -> str:
    """What ``int8_compute=setting`` asks of this model: "int8" (nothing to decide), "auto" or "float".

    "auto" measures static int8 models (QuantizeLinear/DequantizeLinear pairs) that lite's converter
    quantized (metadata ``quantization``) only. int8-dynamic models (DynamicQuantizeLinear →
    MatMulInteger) keep their int8 kernels, which quantization tools compare with the numpy
    engine's int8 arithmetic. So do models that arrived quantized (ONNX Runtime's or another
    tool's QDQ files): their producers validated them on int8 kernels, and the float form, which
    drops the activations' rounding, moves their outputs from what those kernels give (a Whisper
    encoder shipped in int8: 1.2-1.8 % of the peak against 0.3-0.95 % for lite's int8 kernels, on
    log-mel inputs). ``"float"`` runs any of them in float.
    """
    ops = {node.op_type for node in model.main.nodes}
    if setting == "int8" or not ops & _QUANTIZING:
        return "int8"
    if setting == "auto" and (ops & {"DynamicQuantizeLinear", "MatMulInteger"} or QUANTIZED_BY_LITE not in model.metadata):
        return "int8"
    return setting


def kept_as_quantized(model: ir.Model, setting: str) -> dict[str, Any] | None:
    """The decision for a static int8 model quantized by another tool under ``"auto"``, which
    keeps its int8 kernels without measuring (see :func:`wanted`); None for any other model."""
    ops = {node.op_type for node in model.main.nodes}
    if (setting != "auto" or not ops & {"QuantizeLinear", "DequantizeLinear"} or QUANTIZED_BY_LITE in model.metadata
            or ops & {"DynamicQuantizeLinear", "MatMulInteger"}):
        return None
    return {"chosen": "int8", "why": "quantized by another tool: its int8 kernels, as its producer ran it "
            "(int8_compute='float' runs the float form)", "reused": False}


def decision_path(cache_dir: Path, identity: str, kind: str = "int8") -> Path:
    """The record's file for a lowered part of a model (the engine's session identity), this CPU
    and this ONNX Runtime; ``kind`` names the choice (``int8``, ``threads``)."""
    import onnxruntime

    key = hashlib.sha256(json.dumps([identity, onnxruntime.__version__, cpu.signature()]).encode()).hexdigest()[:32]
    return cache_dir / "ort" / kind / f"{key}.json"


def recorded(path: Path | None, choices: tuple = ("int8", "float"), version: int = DECISION_FORMAT) -> dict[str, Any] | None:
    """A decision written earlier, or None (none, damaged, of another format, or choosing none of ``choices``)."""
    if path is None:
        return None
    try:
        decision = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(decision, dict) or decision.get("format") != version or decision.get("chosen") not in choices:
        return None
    return decision


def record(path: Path | None, decision: dict[str, Any]) -> None:
    """Keep ``decision`` for later loads; a cache that cannot be written costs only the reuse."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            handle.write(json.dumps(decision, indent=2, sort_keys=True).encode())
    except OSError:
        decision["not_saved"] = str(path)


def measure(int8: Run, float_form: Run, feeds: dict[str, np.ndarray], reference: Callable[[], Run],
            fewer_threads: Callable[[float], dict[int, tuple[Run, Run]]] | None = None) -> dict[str, Any]:
    """Check the float form against the int8 kernels on ``feeds``, time both, and choose.

    Where the two disagree, ``reference()`` (the numpy engine, which computes what the QDQ nodes
    say) tells which is wrong: a float form that lost something keeps the int8 kernels, int8
    kernels that compute something else (ONNX Runtime 1.32's fused QDQ EfficientNet returns
    zeros) give way to the float form, whatever their times.

    ``fewer_threads(ms)``, given the time of one int8 call, returns (int8, float form) runners at
    other thread counts the engine may serve with; each round then takes each form's fastest.
    """
    from lite.compare import QUANTIZED_TOLERANCE, agreement

    decision: dict[str, Any] = {"format": DECISION_FORMAT, "cpu": cpu.name(),
                                "vnni": not cpu.int8_products_saturate(), "tolerance": TOLERANCE}
    started = time.perf_counter()
    kernels = int8(feeds)
    first_ms = (time.perf_counter() - started) * 1e3
    floated = float_form(feeds)
    error, problem = agreement(floated, kernels, TOLERANCE)
    decision["float_error"] = error
    if problem is not None:
        expected = reference()(feeds)
        int8_right = agreement(expected, kernels, QUANTIZED_TOLERANCE)[1] is None
        float_right = agreement(expected, floated, TOLERANCE)[1] is None
        chosen = "float" if float_right and not int8_right else "int8"
        wrong = "the int8 kernels" if chosen == "float" else "the float form" if int8_right else "both"
        decision.update(chosen=chosen, why=f"the float form and the int8 kernels disagree ({problem}); {wrong} "
                                           "disagree with the numpy engine")
        return decision
    fast = first_ms < _SLOW_CALL_MS
    calls = {"int8": int8, "float": float_form}
    for count, (int8_at, float_at) in (fewer_threads(first_ms) if fewer_threads else {}).items():
        calls[f"int8 at {count} threads"] = int8_at
        calls[f"float at {count} threads"] = float_at
    times = alternate(calls, feeds, rounds=5 if fast else 3,
                      warmup_s=0.03 if fast else 0.0, measure_s=0.06 if fast else 0.0)
    ratios = [f / i for f, i in zip(_fastest(times, "float"), _fastest(times, "int8"))]
    ratio = statistics.median(ratios)
    decision.update(ms={label: statistics.median(values) for label, values in times.items()}, float_over_int8=ratio,
                    rounds=ratios, settled=settled(ratios))
    if len(calls) > 2:  # the thread choice reads the kept form's rounds at each count
        decision["times"] = times
    chosen = "float" if ratio < 1.0 else "int8"
    decision["chosen"] = chosen
    decision["why"] = (f"the float form ran in {ratio:.2f}x the int8 kernels' time (median of {len(ratios)} rounds, "
                       "each timing both" + (", each at its fastest thread count" if len(calls) > 2 else "") + ")")
    if not decision["settled"]:
        decision["why"] += "; the rounds disagree, so this load's choice is not kept for the next"
    return decision


def _fastest(times: dict[str, list[float]], form: str) -> list[float]:
    """Per round, the fastest time of ``form`` ("int8" or "float") at any thread count timed."""
    return [min(round_times) for round_times in zip(*(t for label, t in times.items() if label.split()[0] == form))]


def settled(ratios: list[float]) -> bool:
    """Whether the rounds agree on the faster form: all on one side of 1, or their median clearly
    away from it. On a busy machine a round can be off by half either way; a choice the rounds
    disagree on is used for this load only and measured again by the next (a cached choice made
    under load kept int8 kernels 1.75x slower than the float form for good)."""
    if all(r < 1.0 for r in ratios) or all(r >= 1.0 for r in ratios):
        return True
    return not _CLOSE[0] <= statistics.median(ratios) <= _CLOSE[1]


def alternate(calls: dict[str, Callable[[dict[str, np.ndarray]], Any]], feeds: dict[str, np.ndarray], rounds: int,
              warmup_s: float, measure_s: float) -> dict[str, list[float]]:
    """Per round, each call's fastest time in ms (rounds are paired comparisons: all calls see
    about the same load from other processes), the order alternating. Each turn starts with
    untimed calls: the other session's worker threads spin on for a while after its last call."""
    times: dict[str, list[float]] = {label: [] for label in calls}
    order = list(calls)
    if warmup_s > 0:
        for call in calls.values():
            deadline = time.perf_counter() + FIRST_WARMUP_S
            while time.perf_counter() < deadline:
                call(feeds)
    for index in range(rounds):
        for label in order if index % 2 == 0 else order[::-1]:
            call = calls[label]
            deadline = time.perf_counter() + warmup_s
            call(feeds)
            while time.perf_counter() < deadline:
                call(feeds)
            samples = []
            deadline = time.perf_counter() + measure_s
            while len(samples) < _MIN_CALLS or time.perf_counter() < deadline:
                started = time.perf_counter()
                call(feeds)
                samples.append(time.perf_counter() - started)
            times[label].append(min(samples) * 1e3)  # other processes only ever add time
    return times


def random_feeds(model: ir.Model) -> dict[str, np.ndarray]:
    """Random inputs of batch 1 as autotuning plans them (:func:`lite.sample_inputs.random_feeds`:
    recorded sizes and values, else read from the graph), without running the model."""
    from lite.sample_inputs import random_feeds as planned

    return planned(model, 1)
