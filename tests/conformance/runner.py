"""Runs ONNX backend test cases through convert -> .lite bytes -> verified load -> numpy engine.

Two sources, both offline: the node cases that ``onnx.backend.test.case.node.collect_testcases()``
builds in memory (1,884 with onnx 1.23), and the model sets the onnx wheel ships as data
(``simple``, ``pytorch-converted``, ``pytorch-operator``: ``model.onnx`` plus
``test_data_set_N/{input,output}_K.pb``).
"""

from __future__ import annotations

import functools
import glob
import os
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

import lite
from converter import convert_model
from lite.format import load, to_bytes

DATA_SETS = ("simple", "pytorch-converted", "pytorch-operator")


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list, list]]
    rtol: float
    atol: float


@functools.lru_cache(maxsize=1)
def node_cases() -> dict[str, Case]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    return {c.name: Case(c.name, c.model, c.data_sets, c.rtol, c.atol) for c in cases}


def data_set_names(set_name: str) -> list[str]:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", set_name)
    return sorted(name for name in os.listdir(folder) if os.path.isfile(os.path.join(folder, name, "model.onnx")))


def data_case(set_name: str, name: str) -> Case:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", set_name, name)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    data_sets = []
    for data_dir in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        inputs = [_read_pb(p) for p in sorted(glob.glob(os.path.join(data_dir, "input_*.pb")), key=_index)]
        outputs = [_read_pb(p) for p in sorted(glob.glob(os.path.join(data_dir, "output_*.pb")), key=_index)]
        data_sets.append((inputs, outputs))
    # The tolerances onnx's own runner uses for these sets.
    return Case(f"{set_name}/{name}", model, data_sets, rtol=1e-3, atol=1e-7)


def _index(path: str) -> int:
    return int(os.path.basename(path).split("_")[1].split(".")[0])


def _read_pb(path: str):
    with open(path, "rb") as handle:
        data = handle.read()
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    if tensor.data_type or tensor.dims:
        return numpy_helper.to_array(tensor)
    sequence = onnx.SequenceProto()
    sequence.ParseFromString(data)
    return numpy_helper.to_list(sequence)


def all_case_names() -> list[str]:
    """Node cases by name, then ``<set>/<name>`` for the shipped data sets."""
    return [*node_cases(), *(f"{s}/{n}" for s in DATA_SETS for n in data_set_names(s))]


def load_case(name: str) -> Case:
    if "/" in name:
        set_name, case_name = name.split("/", 1)
        return data_case(set_name, case_name)
    return node_cases()[name]


def to_array(value):
    """Test data as the runtime takes it: arrays; sequences as lists; empty optionals as None."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, onnx.SequenceProto):
        return numpy_helper.to_list(value)
    if isinstance(value, onnx.OptionalProto):
        return numpy_helper.to_optional(value)
    if value is None or isinstance(value, list):
        return value
    return np.asarray(value)


def run_case(case: Case, device: str = "numpy") -> None:
    """Convert, write, load and run ``case``; assert every output of every data set matches."""
    model_ir = convert_model(case.model, optimize=False)
    model = lite.Model.load(to_bytes(model_ir), device=device)
    initializers = {i.name for i in case.model.graph.initializer}
    input_names = [i.name for i in case.model.graph.input if i.name not in initializers]
    output_names = [o.name for o in case.model.graph.output]
    for inputs, expected in case.data_sets:
        feeds = {name: to_array(value) for name, value in zip(input_names, inputs)}
        got = model.predict(feeds)
        for name, want in zip(output_names, expected):
            compare(case, name, got[name], to_array(want))


def compare(case: Case, name: str, got, want) -> None:
    if isinstance(want, (list, tuple)) or want is None:  # a sequence or optional value
        if want is None:
            assert got is None, f"{case.name} output {name}: expected an empty optional, got {type(got)}"
            return
        assert isinstance(got, (list, tuple)) and len(got) == len(want), \
            f"{case.name} output {name}: expected a sequence of {len(want)}, got {type(got).__name__}"
        for index, (g, w) in enumerate(zip(got, want)):
            compare(case, f"{name}[{index}]", g, to_array(w))
        return
    got = np.asarray(got)
    assert got.shape == want.shape, f"{case.name} output {name}: shape {got.shape}, expected {want.shape}"
    if want.dtype == object:
        np.testing.assert_array_equal(_as_text(got), _as_text(want), err_msg=f"{case.name} output {name}")
        return
    assert got.dtype == want.dtype, f"{case.name} output {name}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True,
                                   err_msg=f"{case.name} output {name}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{case.name} output {name}")


def _as_text(array: np.ndarray) -> np.ndarray:
    decode = np.frompyfunc(lambda v: v.decode() if isinstance(v, bytes) else str(v), 1, 1)
    return decode(array) if array.size else array


def round_trips(case: Case) -> bool:
    """The converted model survives write -> verified read -> write unchanged."""
    data = to_bytes(convert_model(case.model, optimize=False))
    return to_bytes(load(data)) == data
