"""The event loop a serving process runs on: uvloop where it is installed, else asyncio's own.

Every request passes through the loop several times (the gRPC poller hands it over, the servicer's
coroutine runs, the answer goes back), so the loop's own cost is a large part of a small
request's: on bench/serving.py's identity model uvloop takes lite serve from about 2,830 to 3,150
requests a second and a bare grpc.aio server from 3,460 to 3,600 (2 cores, the client on the same
machine; ``python bench/serving_overhead.py``, docs/benchmarks.md).
``--event-loop asyncio`` keeps the standard loop (for debugging tools that expect it).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import ConfigError

CHOICES = ("auto", "uvloop", "asyncio")
T = TypeVar("T")


def resolve(choice: str) -> str:
    """``uvloop`` or ``asyncio`` for a setting of ``auto``, ``uvloop`` or ``asyncio``."""
    if choice not in CHOICES:
        raise ConfigError(f"event_loop {choice!r}: expected one of {', '.join(CHOICES)}")
    available = importlib.util.find_spec("uvloop") is not None
    if choice == "uvloop" and not available:
        raise ConfigError("event_loop uvloop: uvloop is not installed (pip install uvloop, or lite-toolchain[serve]); "
                          "or serve with --event-loop asyncio")
    if choice == "auto":
        return "uvloop" if available else "asyncio"
    return choice


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """Run ``main`` to completion on a new loop of the chosen kind (see :func:`resolve`)."""
    if resolve(choice) == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)
