"""Loop: run a body subgraph while a trip count and a condition allow, carrying values along.

https://onnx.ai/onnx/operators/onnx__Loop.html

``body(iteration_num, cond, *carried) -> [cond, *carried, *scan_outputs]``. Outputs are the
final carried values, then each scan output stacked over iterations along a new axis 0. An
omitted ``M`` means no trip limit and an omitted ``cond`` means true (both omitted: loop until
the body's condition turns false).

A loop the model does not bound (no trip count, or one larger than :data:`MAX_ITERATIONS`, and a
condition that stays true) would run forever and hold whatever runs it (a server's worker
thread cannot be interrupted): past :data:`MAX_ITERATIONS` iterations the kernel raises
:class:`~lite.errors.KernelError` instead.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.registry import kernel

# Generous for real models (decoding, NMS and beam-search loops run thousands of iterations, not
# millions) while bounding a runaway one: each iteration runs the body through the engine (about
# 30 us for a one-node body), so the bound is reached within a minute of CPU rather than never.
# Raise it here for a model that truly needs more.
MAX_ITERATIONS = 1_000_000


@kernel("Loop", since=1)
def Loop(M, cond, *v_initial, body=None, output_count=None):
    if body is None:
        raise UnsupportedOpError("Loop: the body graph is required")
    trip_limit = None if M is None else int(np.asarray(M).reshape(()))
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(()))
    carried = [_value(v) for v in v_initial]
    scanned: list[list[np.ndarray]] = []
    iteration = 0
    while keep_going and (trip_limit is None or iteration < trip_limit):
        if iteration == MAX_ITERATIONS:
            limit = "no trip count" if trip_limit is None else f"a trip count of {trip_limit}"
            raise KernelError(
                f"Loop: still running after {MAX_ITERATIONS:,} iterations ({limit}, and the condition stayed "
                "true); the body never stops the loop. Give the Loop a trip count or a condition that turns "
                "false (lite.ops.loop.MAX_ITERATIONS is the bound)"
            )
        outputs = body(np.array(iteration, dtype=np.int64), np.array(keep_going), *carried)
        if len(outputs) < 1 + len(carried):
            raise UnsupportedOpError(
                f"Loop: the body returned {len(outputs)} values, expected at least {1 + len(carried)} "
                "(condition and every carried value)"
            )
        keep_going = bool(np.asarray(outputs[0]).reshape(()))
        carried = [_value(v) for v in outputs[1 : 1 + len(carried)]]
        scanned.append([np.asarray(v) for v in outputs[1 + len(carried) :]])
        iteration += 1
    if scanned:
        stacked = [np.stack(values) for values in zip(*scanned)]
    else:
        # No iteration ran: the scan outputs are empty; their element shape is unknown.
        missing = 0 if output_count is None else max(output_count - len(carried), 0)
        stacked = [np.zeros((0,), dtype=np.float32) for _ in range(missing)]
    return tuple(carried + stacked)


def _value(value):
    """Loop-carried values keep their kind: sequences (lists) and empty optionals (None) as they are."""
    return value if value is None or isinstance(value, list) else np.asarray(value)
