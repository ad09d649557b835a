"""Fewer ONNX Runtime threads for small calls on CPUs with many cores, chosen at load.

ONNX Runtime's default is one intra-op thread per physical core. For a model whose call takes
well under a millisecond that is too many: waking and joining the threads around every layer
costs more than the layer. On a 16-core Xeon the zoo's small CNNs (64x64 inputs, 0.2-0.8 ms a
call) ran 1.1-2.5x slower through the default session than through one with 2 threads
(docs/benchmarks.md), while large calls gain from every core.

So with ``threads=None`` on a CPU with at least :data:`MIN_CORES` usable cores, when a call of
the whole-graph session on the model's random batch-1 inputs takes under :data:`SMALL_CALL_MS`,
the engine also builds sessions with :data:`FEW` threads, times them against the default one in
alternating rounds, and keeps the fastest (by at least :data:`MARGIN`) for calls no larger than
the one it timed (inputs of at most as many elements); larger calls keep the default session,
where more threads pay. The choice is a small JSON record under ``<cache_dir>/ort/threads/`` (for
this model file, CPU, core count and ONNX Runtime), reused by later loads without timing; a
choice the rounds disagree on is used for that load only. ``threads=N`` sets the count and
measures nothing, and so do sessions on the process's shared pool (thread_pools.py).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.ort import int8_choice, thread_pools
from lite.ops._parallel import threads as usable_cores

if TYPE_CHECKING:
    from lite.engines.ort.engine import OrtEngine

MIN_CORES = 6
FEW = (2, 4)
SMALL_CALL_MS = 10.0
MARGIN = 0.95  # a smaller thread count must take at most this fraction of the default's time
DECISION_FORMAT = 2  # 2: every runner warmed up before the first round (int8_choice.FIRST_WARMUP_S)


class SizedSessions:
    """The session with fewer threads for calls of up to ``max_elements`` input elements, the
    default one for larger calls (the engine's direct session, as the engine calls it)."""

    def __init__(self, small: Any, max_elements: int, default: Any) -> None:
        self.small = small
        self.max_elements = max_elements
        self.default = default
        self.input_names = default.input_names

    def _pick(self, feeds: dict[str, np.ndarray]) -> Any:
        return self.small if sum(value.size for value in feeds.values()) <= self.max_elements else self.default

    def run_arrays(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._pick(feeds).run_arrays(output_names, feeds)

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._pick(feeds).run(output_names, feeds)


def counts(engine: OrtEngine) -> tuple[int, ...]:
    """The smaller thread counts this engine's small calls may run on: () where the choice does not
    apply (another device, a thread count the caller set, too few cores, sessions on the process's
    shared pool, whose size is the process's and not a session's to choose)."""
    cores = usable_cores()
    if engine.name != "cpu" or engine.config.threads is not None or cores < MIN_CORES or thread_pools.sharing():
        return ()
    return tuple(n for n in FEW if n < cores)


def settle(engine: OrtEngine) -> tuple[Any, dict[str, Any] | None]:
    """The engine's direct session, wrapped in :class:`SizedSessions` where fewer threads were
    timed faster, and the decision (None where nothing was to decide)."""
    direct = engine.direct
    fewer = counts(engine)
    if direct is None or not fewer:
        return direct, None
    identity = engine.identity(f"thread count|cores={usable_cores()}", engine.int8_form)
    path = None if identity is None or engine.config.cache_dir is None else \
        int8_choice.decision_path(engine.config.cache_dir, identity, kind="threads")
    labels = ("default", *(str(n) for n in fewer))
    decision = int8_choice.recorded(path, labels, DECISION_FORMAT)
    if decision is not None:
        decision["reused"] = True
    else:
        try:
            decision = _from_int8_timing(engine, labels) or _measure(engine, direct, labels)
        except Exception as err:  # noqa: BLE001 - random inputs the model rejects, a dtype they cannot be
            # made in, a session that does not build: the default serves, as without the choice
            return direct, {"chosen": "default", "why": f"not measured: {type(err).__name__}: {err}"}
        decision["reused"] = False
        if decision.get("settled", True):
            int8_choice.record(path, decision)
    if decision["chosen"] == "default":
        return direct, decision
    small = engine.whole_graph_session(int(decision["chosen"]))
    return SizedSessions(small, int(decision["max_elements"]), direct), decision


def both_forms(engine: OrtEngine, call_ms: float, float_form: str) -> dict[int, tuple[Any, Any]]:
    """An int8 model's int8 kernels and float form (``float_form``: the engine's name for it) at
    each smaller thread count this choice may take, as output-dict runners, so that
    :mod:`lite.engines.ort.int8_choice` compares the two forms where they will run; none where
    the choice does not apply or ``call_ms``, one call's time, is too long for it."""
    if call_ms >= SMALL_CALL_MS:
        return {}
    names = engine.output_names

    def runner(count: int, int8_form: str) -> Any:
        session = engine.whole_graph_session(count, int8_form)
        return lambda feeds: dict(zip(names, session.run_arrays(names, feeds)))

    return {count: (runner(count, "as stored"), runner(count, float_form)) for count in counts(engine)}


def _from_int8_timing(engine: OrtEngine, labels: tuple[str, ...]) -> dict[str, Any] | None:
    """The choice from the rounds the int8 choice has just timed (each form at each count, see
    :func:`both_forms`), for the form it kept; None where it timed no such rounds. Timing again
    would cost a second of load and could pick another count from the same sessions' noise."""
    timed = (engine.decision or {}).get("times")
    if not timed or engine.decision.get("reused"):
        return None
    form = engine.decision["chosen"]
    times = {label: timed.get(form if label == "default" else f"{form} at {label} threads") for label in labels}
    if any(values is None for values in times.values()):
        return None
    feeds = int8_choice.random_feeds(engine.model)
    return _decide({"format": DECISION_FORMAT, "cores": usable_cores(),
                    "max_elements": int(sum(value.size for value in feeds.values()))}, times, labels)


def _measure(engine: OrtEngine, direct: Any, labels: tuple[str, ...]) -> dict[str, Any]:
    feeds = int8_choice.random_feeds(engine.model)
    names = engine.output_names
    decision: dict[str, Any] = {"format": DECISION_FORMAT, "cores": usable_cores(),
                                "max_elements": int(sum(value.size for value in feeds.values()))}
    direct.run_arrays(names, feeds)
    started = time.perf_counter()
    direct.run_arrays(names, feeds)
    first_ms = (time.perf_counter() - started) * 1e3
    if first_ms >= SMALL_CALL_MS:
        decision.update(chosen="default", why=f"a call takes {first_ms:.1f} ms: large enough for every core")
        return decision
    calls = {"default": lambda f: direct.run_arrays(names, f)}
    for label in labels[1:]:
        session = engine.whole_graph_session(int(label))
        calls[label] = lambda f, s=session: s.run_arrays(names, f)
    return _decide(decision, int8_choice.alternate(calls, feeds, rounds=5, warmup_s=0.03, measure_s=0.06), labels)


def _decide(decision: dict[str, Any], times: dict[str, list[float]], labels: tuple[str, ...]) -> dict[str, Any]:
    """``decision`` completed from each count's per-round times (ms)."""
    ratios = {label: [t / d for t, d in zip(times[label], times["default"])] for label in labels[1:]}
    best = min(ratios, key=lambda label: statistics.median(ratios[label]))
    ratio = statistics.median(ratios[best])
    chosen = best if ratio <= MARGIN else "default"
    decision.update(chosen=chosen, ms={label: statistics.median(values) for label, values in times.items()},
                    rounds=ratios, settled=int8_choice.settled(ratios[best]))
    decision["why"] = (f"{best} threads took {ratio:.2f}x the default's time (median of {len(ratios[best])} rounds); "
                       + (f"{best} threads serve calls of up to {decision['max_elements']} input elements"
                          if chosen != "default" else "not enough to leave the default"))
    return decision
