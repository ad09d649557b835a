"""Scan: run a body over slices of scan inputs, carrying state, stacking per-step outputs.

https://onnx.ai/onnx/operators/onnx__Scan.html

Opset 9+: ``inputs = (*initial_states, *scan_inputs)``; ``body(*states, *slices) -> [*states,
*scan_output_elements]``; each scan input is sliced along its ``scan_input_axes`` entry
(backwards when its direction is 1) and each scan output is stacked along its
``scan_output_axes`` entry (in reverse step order when its direction is 1).
Opset 8 has a leading ``sequence_lens`` input and a batch axis 0 on every input and output.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


def _scan(states, scans, body, input_axes, input_directions, output_axes, output_directions, length=None):
    count = len(scans)
    input_axes = [a + scans[i].ndim if a < 0 else a for i, a in enumerate(input_axes or [0] * count)]
    input_directions = list(input_directions or [0] * count)
    if length is None:
        lengths = {s.shape[a] for s, a in zip(scans, input_axes)}
        if len(lengths) != 1:
            raise UnsupportedOpError(f"Scan: scan inputs disagree on the sequence length: {sorted(lengths)}")
        length = lengths.pop()
    per_step = []
    for t in range(length):
        slices = [
            np.take(s, length - 1 - t if direction else t, axis=axis)
            for s, axis, direction in zip(scans, input_axes, input_directions)
        ]
        outputs = body(*states, *slices)
        states = [np.asarray(v) for v in outputs[: len(states)]]
        per_step.append([np.asarray(v) for v in outputs[len(states) :]])
    results = []
    if per_step:
        produced = len(per_step[0])
        output_axes = list(output_axes or [0] * produced)
        output_directions = list(output_directions or [0] * produced)
        for k in range(produced):
            values = [step[k] for step in per_step]
            if output_directions[k]:
                values.reverse()
            axis = output_axes[k]
            axis = axis + values[0].ndim + 1 if axis < 0 else axis
            results.append(np.stack(values, axis=axis))
    return states, results


@kernel("Scan", since=9)
def Scan(
    *inputs,
    body=None,
    num_scan_inputs=None,
    scan_input_axes=None,
    scan_input_directions=None,
    scan_output_axes=None,
    scan_output_directions=None,
):
    if body is None or num_scan_inputs is None:
        raise UnsupportedOpError("Scan: the body graph and num_scan_inputs are required")
    state_count = len(inputs) - num_scan_inputs
    states, results = _scan(
        [np.asarray(v) for v in inputs[:state_count]],
        [np.asarray(v) for v in inputs[state_count:]],
        body,
        scan_input_axes,
        scan_input_directions,
        scan_output_axes,
        scan_output_directions,
    )
    return tuple(states + results)


@kernel("Scan", since=8)
def Scan_8(sequence_lens, *inputs, body=None, directions=None, num_scan_inputs=None):
    if body is None or num_scan_inputs is None:
        raise UnsupportedOpError("Scan-8: the body graph and num_scan_inputs are required")
    state_count = len(inputs) - num_scan_inputs
    values = [np.asarray(v) for v in inputs]
    batch = values[0].shape[0]
    full = values[state_count].shape[1]
    lengths = [full] * batch if sequence_lens is None else np.asarray(sequence_lens).tolist()
    per_batch = []
    for b in range(batch):
        states, results = _scan(
            [v[b] for v in values[:state_count]],
            [v[b] for v in values[state_count:]],
            body,
            None,
            directions,
            None,
            None,
            length=int(lengths[b]),
        )
        per_batch.append(states + results)
    return tuple(np.stack(column) for column in zip(*per_batch))
