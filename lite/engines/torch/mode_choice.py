"""Mode ``auto``: per input shape, time the candidate modes' artifacts and keep the faster one.

No one Inductor mode is fastest at every batch size: max-autotune's kernel choices win at large
batches, while at batch 1 its ResNet-50 replayed in 0.52 ms against reduce-overhead's 0.39 ms on
an H200. So in ``auto``, the first time a shape is compiled, every candidate
(:data:`~lite.engines.torch.inductor_modes.AUTO_CANDIDATES`) is compiled and captured, the graphs are
replayed on the same inputs in interleaved rounds, and the faster one serves.

The choice is a small record (the mode and each candidate's milliseconds per call) named by the
shape's ``auto`` key (:meth:`AotCompiled.key` with ``mode="auto"``): kept in memory, in the cache
(``<cache>/torch/choices/<key>.json``) and in ``lite compile``'s package manifest, so a later
process loads the winning artifact directly, neither compiling the other nor timing again.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from lite.engines.torch.compiler import AotCompiled

log = logging.getLogger("lite.engines.torch")

FOLDER = "choices"
ROUNDS = 5
ROUND_SECONDS = 0.02  # the calls of one candidate in one round take about this long


def known_choice(runner: AotCompiled, args: tuple[torch.Tensor, ...]) -> str | None:
    """The mode timed fastest for ``args``' shapes, from memory, the package or the cache; None
    when the candidates have not been timed for them."""
    key = runner.key(args, "auto")
    record = runner.choices.get(key)
    if record is None and runner.package is not None:
        record = runner.package.choice(key)
    if record is None and runner.folder is not None:
        try:
            record = json.loads((runner.folder / FOLDER / f"{key}.json").read_text())
        except (OSError, ValueError):
            record = None
    if not isinstance(record, dict) or record.get("mode") not in runner.candidates:
        record = _packaged_mode(runner, args)
        if record is None:
            return None  # none, unreadable, or made for other candidates: time them again
    runner.choices[key] = record
    return record["mode"]


def _packaged_mode(runner: AotCompiled, args: tuple[torch.Tensor, ...]) -> dict[str, Any] | None:
    """A package compiled in one named mode (``lite compile --mode max-autotune``) has no choice
    to read: its artifact serves as it is, untimed, rather than compiling the candidates anew."""
    if runner.package is None or not runner.package.applies:
        return None
    for mode in runner.candidates:
        if runner.package.artifact(runner.key(args, mode)) is not None:
            return {"mode": mode, "ms_per_call": None, "shapes": [list(a.shape) for a in args],
                    "failed": {}, "why": "the package's only artifact for these shapes; not timed"}
    return None


def choose_mode(runner: AotCompiled, args: tuple[torch.Tensor, ...], capture_lock: Any) -> tuple[str, Callable]:
    """Compile and capture every candidate for ``args``, time them, record the faster one and
    return it with its runner. A candidate that cannot be compiled drops out (said in the log);
    when none can, the first one's error is raised."""
    runners: dict[str, Callable] = {}
    errors: dict[str, Exception] = {}
    for mode in runner.candidates:
        try:
            runners[mode] = runner.mode_runner(args, mode, capture_lock)
        except Exception as err:  # noqa: BLE001 - an AotUnavailable or a capture failure drops the mode
            errors[mode] = err
            log.warning("mode %s could not be compiled for input shapes %s: %s: %s", mode,
                        [tuple(a.shape) for a in args], type(err).__name__, err)
    if not runners:
        raise next(iter(errors.values()))
    timings: dict[str, float | None] = {mode: None for mode in runners}
    untimed = None
    if len(runners) > 1:
        try:
            timings = dict(time_calls(runners, args))
        except Exception as err:  # noqa: BLE001 - a replay that fails while timed: the first candidate serves
            untimed = f"{type(err).__name__}: {err}"[:300]
            log.warning("timing the modes for input shapes %s failed, %s serves: %s", [tuple(a.shape) for a in args],
                        next(iter(runners)), untimed)
    mode = min(runners, key=lambda m: timings[m] or 0.0)
    record = {"mode": mode, "ms_per_call": timings, "shapes": [list(a.shape) for a in args],
              "failed": {m: f"{type(e).__name__}: {e}"[:300] for m, e in errors.items()}}
    if untimed is not None:
        record["untimed"] = untimed
    key = runner.key(args, "auto")
    runner.choices[key] = record
    if untimed is None:  # a choice made without timing is this process's only
        _save(runner, key, record)
    log.info("input shapes %s: mode %s chosen (ms per call: %s)", [tuple(a.shape) for a in args], mode, timings)
    return mode, runners[mode]


def time_calls(runners: dict[str, Callable], args: tuple[torch.Tensor, ...]) -> dict[str, float]:
    """Milliseconds per call of each runner on ``args``: calls queued back to back and one wait
    at the end (the device's time per call, or the host's where the host is the slower), the
    median of interleaved rounds, the order reversed every other round."""
    cuda = bool(args) and args[0].is_cuda
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        for run in runners.values():
            for _ in range(3):
                run(*args)
        sync()
        started = time.perf_counter()
        next(iter(runners.values()))(*args)
        sync()
        calls = max(3, min(500, int(ROUND_SECONDS / max(time.perf_counter() - started, 1e-6))))
        samples: dict[str, list[float]] = {mode: [] for mode in runners}
        order = list(runners.items())
        for round_ in range(ROUNDS):
            for mode, run in order if round_ % 2 == 0 else order[::-1]:
                sync()
                started = time.perf_counter()
                for _ in range(calls):
                    run(*args)
                sync()
                samples[mode].append((time.perf_counter() - started) / calls)
    return {mode: round(statistics.median(values) * 1e3, 4) for mode, values in samples.items()}


def _save(runner: AotCompiled, key: str, record: dict[str, Any]) -> None:
    if runner.folder is None:
        return
    folder = runner.folder / FOLDER
    staging = folder / f".{key}.{os.getpid()}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps(record, indent=1))
        os.replace(staging, folder / f"{key}.json")
    except OSError as err:  # a read-only or full cache: the next process times again
        log.warning("could not save the mode choice to %s (%s); the next start times the modes again", folder, err)
        staging.unlink(missing_ok=True)
