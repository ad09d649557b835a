"""Timing candidate engines against each other for autotuning (:mod:`lite.autotune`, step 3).

Rounds are short and their order rotates, so the candidates of one round see about the same load
from other processes; each is scored by its time over the round's fastest (a paired comparison).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

GIVE_UP = 3.0  # after round one, candidates this many times slower than the best are dropped
CLOSE = 0.10  # candidates this close to the best are measured longer
ONE_CALL_MS = 5.0  # a single call's time decides nothing below this (see _time_one)


@dataclass(frozen=True)
class Timing:
    """How long each round and call took, and how many calls were timed."""

    rounds: int = 6
    extra_rounds: int = 12  # more rounds between candidates within CLOSE of the best
    warmup_s: float = 0.25  # per candidate per round: ONNX Runtime's spinning threads slow the next engine
    measure_s: float = 0.15  # per candidate per round
    min_calls: int = 5
    max_calls: int = 500


def time_alternating(engines: dict[str, Any], feeds: dict[str, np.ndarray], timing: Timing,
                      entries: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each candidate's median time relative to the fastest of the same round, median over rounds.

    Rounds are short and the order rotates, so the candidates of one round see about the same
    load from other processes; comparing within rounds cancels most of it (a paired comparison).
    Candidates within :data:`CLOSE` of the best get ``extra_rounds`` more rounds between them.
    """
    rounds: dict[str, list[float]] = {label: [] for label in engines}
    active = sorted(engines, key=lambda label: label == "numpy")  # the usually slow one last
    _run_rounds(engines, active, feeds, timing, rounds, timing.rounds, first=True)
    active = [label for label in active if len(rounds[label]) == timing.rounds]
    scores = _paired(rounds, active)
    for label in set(engines) - set(active):  # dropped after round one
        scores[label] = rounds[label][0] / min(rounds[other][0] for other in active)
    best = min(scores[label] for label in active)
    close = [label for label in active if scores[label] <= (1 + CLOSE) * best]
    if len(close) > 1 and timing.extra_rounds:
        _run_rounds(engines, close, feeds, timing, rounds, timing.extra_rounds, first=False)
        scores.update(_paired(rounds, close))
    for label, values in rounds.items():
        median = statistics.median(values)
        entries[label]["ms"] = {"best_round": min(values), "median": median, "rounds": values,
                                "spread": (max(values) - min(values)) / median if median else 0.0,
                                "relative": scores[label]}
    return scores


def _run_rounds(engines: dict[str, Any], labels: list[str], feeds: dict[str, np.ndarray], timing: Timing,
                rounds: dict[str, list[float]], count: int, first: bool) -> None:
    active = list(labels)
    for round_index in range(count):
        shift = round_index % len(active)
        for label in active[shift:] + active[:shift]:
            best = min((values[0] for values in rounds.values() if values), default=None)
            ceiling = GIVE_UP * best if first and round_index == 0 and best is not None else None
            rounds[label].append(_time_one(engines[label], feeds, timing, ceiling))
        if first and round_index == 0 and len(active) > 1:
            fastest = min(rounds[label][0] for label in active)
            active = [label for label in active if rounds[label][0] <= GIVE_UP * fastest]


def _paired(rounds: dict[str, list[float]], labels: list[str]) -> dict[str, float]:
    """Median over the rounds all ``labels`` ran of each one's time over the round's fastest."""
    count = min(len(rounds[label]) for label in labels)
    fastest = [min(rounds[label][r] for label in labels) for r in range(count)]
    return {label: statistics.median(rounds[label][r] / fastest[r] for r in range(count)) for label in labels}


def _time_one(engine: Any, feeds: dict[str, np.ndarray], timing: Timing, ceiling: float | None = None) -> float:
    """Median milliseconds per call after a warm-up, for at least ``min_calls`` calls.

    A first call slower than ``ceiling`` milliseconds, and slower than ``ONE_CALL_MS``, ends the
    measurement: that candidate is out anyway (it already ran once in the agreement check, so
    this call is a warm one). Below ``ONE_CALL_MS`` one call says little (an identity model's
    numpy engine, faster per call than ONNX Runtime, lost to it on one slow call) and measuring
    properly costs little.
    """
    deadline = time.perf_counter() + timing.warmup_s
    started = time.perf_counter()
    engine.run(feeds)
    first = (time.perf_counter() - started) * 1e3
    if ceiling is not None and first > max(ceiling, ONE_CALL_MS):
        return first
    while time.perf_counter() < deadline:
        engine.run(feeds)
    times = []
    deadline = time.perf_counter() + timing.measure_s
    while len(times) < timing.min_calls or (time.perf_counter() < deadline and len(times) < timing.max_calls):
        started = time.perf_counter()
        engine.run(feeds)
        times.append((time.perf_counter() - started) * 1e3)
    return float(np.median(times))
