"""Run one ONNX node two ways: through onnx.reference (the oracle) and through our kernel.

Shared by the kernel tests. ``None`` in an input list is an omitted optional input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from lite.ops import KERNELS


def one_node_model(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: dict[str, Any],
    opset: int,
    output_count: int = 1,
    domain: str = "",
) -> onnx.ModelProto:
    names = [f"in{i}" if value is not None else "" for i, value in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    outputs = [f"out{i}" for i in range(output_count)]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
        for name, value in zip(names, inputs)
        if name
    ]
    graph_outputs = [onnx.ValueInfoProto(name=name) for name in outputs]
    graph = helper.make_graph([node], "one_node", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 10  # readable by the installed onnxruntime too
    return model


def reference_outputs(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: dict[str, Any],
    opset: int,
    output_count: int = 1,
) -> list[np.ndarray]:
    model = one_node_model(op_type, inputs, attributes, opset, output_count)
    feeds = {f"in{i}": value for i, value in enumerate(inputs) if value is not None}
    return list(ReferenceEvaluator(model).run(None, feeds))


def kernel_outputs(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: dict[str, Any],
    opset: int,
    output_count: int = 1,
) -> list[np.ndarray]:
    chosen = KERNELS.select(op_type, "", opset)
    assert chosen is not None, f"no kernel for {op_type} at opset {opset}"
    unknown = set(attributes) - chosen.attribute_names
    assert not unknown, f"{op_type}-{chosen.since_version} does not take attributes {unknown}"
    kwargs = dict(attributes)
    if chosen.wants_output_count:
        kwargs["output_count"] = output_count
    result = chosen.fn(*[_read_only(value) for value in inputs], **kwargs)
    results = list(result) if isinstance(result, tuple) else [result]
    return results[:output_count]


def _read_only(value: np.ndarray | None) -> np.ndarray | None:
    """A locked copy: kernels must never write into inputs (weights may be mmap views)."""
    if value is None:
        return None
    locked = np.array(value)
    locked.flags.writeable = False
    return locked


def assert_same(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str) -> None:
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), f"{what}: kernel returned {type(actual).__name__}, not an array"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != expected {expected.dtype}"
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def check_against_reference(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: dict[str, Any] | None = None,
    opset: int = 21,
    output_count: int = 1,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> list[np.ndarray]:
    """Assert our kernel matches onnx.reference on every output; returns our outputs."""
    attributes = attributes or {}
    expected = reference_outputs(op_type, inputs, attributes, opset, output_count)
    actual = kernel_outputs(op_type, inputs, attributes, opset, output_count)
    assert len(actual) == len(expected), f"{op_type}: {len(actual)} outputs, expected {len(expected)}"
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_same(got, want, rtol, atol, f"{op_type}-{opset} output {index} {attributes}")
    return actual


def check_against_onnxruntime(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: dict[str, Any] | None = None,
    opset: int = 21,
    output_count: int = 1,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> list[np.ndarray]:
    """Like check_against_reference, with ONNX Runtime as the oracle (where onnx.reference errs)."""
    import onnxruntime

    attributes = attributes or {}
    model = one_node_model(op_type, inputs, attributes, opset, output_count)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {f"in{i}": value for i, value in enumerate(inputs) if value is not None}
    expected = session.run(None, feeds)
    actual = kernel_outputs(op_type, inputs, attributes, opset, output_count)
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_same(got, want, rtol, atol, f"{op_type}-{opset} output {index} {attributes} (vs onnxruntime)")
    return actual


def assert_same_across_threads(model, inputs: Sequence[np.ndarray], threads: int = 4, repeats: int = 3) -> None:
    """Each of ``inputs`` (fed as "x", output "y") gives the same answer from ``threads`` threads
    at once as from one: per-thread scratch (arena, kernel buffers) is not shared by mistake."""
    from concurrent.futures import ThreadPoolExecutor

    expected = [model.predict({"x": x})["y"] for x in inputs]
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda x: model.predict({"x": x})["y"], list(inputs) * repeats))
    for index, result in enumerate(results):
        np.testing.assert_array_equal(result, expected[index % len(inputs)])


def channels_last(x: np.ndarray) -> np.ndarray:
    """``x`` copied into a channels-last array of its shape (what the engine's kernels pass along)."""
    from lite.ops._layout import empty_channels_last

    y = empty_channels_last(x.shape, x.dtype)
    y[...] = x
    return y
