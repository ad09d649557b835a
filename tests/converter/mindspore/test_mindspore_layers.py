"""Layers of ordinary networks, as MindSpore 2.10 exports them (tests/fixtures/mindspore, see
make_mindspore_fixtures.py): each file converts and reproduces MindSpore's outputs on the numpy
engine and on ONNX Runtime (device="cpu"), within 1e-4 of each output's peak.

* ops_transformer: Gather (embedding, axis 1, batch_dims 1 on axes 1 and 2), LayerNorm (gamma
  over the normalized axes, and over fewer), SiLU;
* ops_unet: GroupNorm, SiLU, Conv2DTranspose ('same' with groups, 'valid' with dilation, 'pad'
  with asymmetric pads and output_padding);
* ops_pad: Pad, MirrorPad (REFLECT, SYMMETRIC), PadV3 (constant with a value, edge, circular,
  negative amounts);
* ops_lstm: a 2-layer bidirectional batch-first LSTM (LSTM per layer and direction, ReverseV2);
* ops_gather_d: ``ops.gather_elements`` (GatherD) along a middle axis and along -1.
"""

from __future__ import annotations

import numpy as np
import pytest

import converter
import lite
from converter.mindspore.reader import read_mindir
from tests.converter.mindspore.helpers import FIXTURES, MANIFEST, expected

pytestmark = pytest.mark.skipif(not MANIFEST, reason="tests/fixtures/mindspore is missing")

RELATIVE_TOLERANCE = 1e-4

PRIMITIVES = {
    "ops_transformer": {"Gather", "LayerNorm", "SiLU"},
    "ops_unet": {"GroupNorm", "SiLU", "Conv2DTranspose"},
    "ops_pad": {"Pad", "MirrorPad", "PadV3"},
    "ops_lstm": {"LSTM", "ReverseV2", "Gather"},
    "ops_gather_d": {"GatherD"},
}


def _convert(source, tmp_path) -> str:
    output = tmp_path / "model.lite"
    converter.convert(source, output, verify=False)
    return str(output)


def _run(path: str, x: np.ndarray, device: str) -> list[np.ndarray]:
    options = {"cache_dir": None} if device != "numpy" else {}  # no compiled-session cache between tests
    model = lite.Model.load(path, device=device, **options)
    outputs = model.predict({model.inputs[0].name: x})
    return [outputs[spec.name] for spec in model.outputs]


def _assert_near(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"output {index}: shape {a.shape} != {b.shape}"
        peak = max(float(np.abs(b).max()), 1e-6)
        error = float(np.abs(a.astype(np.float64) - b).max()) / peak
        assert error <= RELATIVE_TOLERANCE, f"output {index}: error {error:.2e} of the peak {peak:.3g}"


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_fixture_exports_the_primitives(name):
    model = read_mindir(FIXTURES / f"{name}.mindir").model
    assert PRIMITIVES[name] <= {primitive.op_type for primitive in model.primitives}


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_layer_matches_mindspore(name, device, tmp_path):
    x, outputs = expected(name)
    _assert_near(_run(_convert(FIXTURES / f"{name}.mindir", tmp_path), x, device), outputs)


def _with_attribute(name: str, primitive: str, attribute: str, **value) -> bytes:
    model = read_mindir(FIXTURES / f"{name}.mindir").model
    for proto in model.primitives:
        if proto.op_type == primitive:
            for attr in proto.attribute:
                if attr.name == attribute:
                    for field, content in value.items():
                        setattr(attr, field, content)
    return model.SerializeToString()


@pytest.mark.parametrize(
    "name, primitive, attribute, value, message",
    [
        ("ops_lstm", "LSTM", "bidirectional", {"i": 1}, "bidirectional=True in one primitive"),
        ("ops_lstm", "LSTM", "proj_size", {"i": 2}, "proj_size > 0"),
        ("ops_lstm", "LSTM", "hidden_size", {"i": 5}, "the weights hold"),
        ("ops_unet", "Conv2DTranspose", "format", {"s": b"NHWC"}, "NHWC is not translated"),
        ("ops_pad", "MirrorPad", "mode", {"s": b"EDGE"}, "not 'REFLECT' or 'SYMMETRIC'"),
    ],
)
def test_untranslatable_forms_are_named(name, primitive, attribute, value, message, tmp_path):
    source = tmp_path / "model.mindir"
    source.write_bytes(_with_attribute(name, primitive, attribute, **value))
    with pytest.raises(converter.UnsupportedOpsError, match=message) as info:
        converter.convert_model(source)
    assert primitive in str(info.value)


def test_padv3_paddings_not_contiguous(tmp_path):
    """``paddings_contiguous=False`` lists all befores, then all afters (last axis first): the
    ZeroPad2d's (1, 2, 0, 1) then pads the last axis by (1, 0) and the one before by (2, 1),
    as MindSpore's PadV3 does (checked with MindSpore 2.10)."""
    source = tmp_path / "model.mindir"
    source.write_bytes(_with_attribute("ops_pad", "PadV3", "paddings_contiguous", i=0))
    x, _ = expected("ops_pad")
    zero_padded = _run(_convert(source, tmp_path), x, "numpy")[4]
    np.testing.assert_array_equal(zero_padded, np.pad(x, ((0, 0), (0, 0), (2, 1), (1, 0))))


def test_reading_layer_norm_statistics_is_refused_by_name(tmp_path):
    """A graph that reads LayerNorm's mean (output 1, only used in training) is refused, naming
    what is not translated."""
    from converter.mindspore.values import attribute_value

    model = read_mindir(FIXTURES / "ops_transformer.mindir").model
    kinds = {f"REF::{p.name}": p.op_type for p in model.primitives}
    producers = {node.output[0]: kinds.get(node.op_type) for node in model.graph.node}
    constants = {node.output[0]: attribute_value(node.attribute[0], "", None)
                 for node in model.graph.node if node.op_type == "Constant"}
    ones = [name for name, value in constants.items() if type(value) is int and value == 1]
    getters = [node for node in model.graph.node if kinds.get(node.op_type) == "TupleGetItem"
               and producers.get(node.input[0]) == "LayerNorm"]
    getters[0].input[1] = ones[0]
    source = tmp_path / "model.mindir"
    source.write_bytes(model.SerializeToString())
    with pytest.raises(converter.UnsupportedOpsError, match="output 1 of this primitive .outputs 1 and 2: the mean"):
        converter.convert_model(source)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("name", ["ops_transformer", "ops_unet", "ops_lstm"])
def test_dynamic_batch_export_matches_mindspore(name, device, tmp_path):
    """Exported with ``Tensor(shape=[None, ...])``: LayerNorm's normalized axes are known while the
    batch is not, which is all its translation needs; Conv2dTranspose's ``input_size`` and the
    LSTM's zero initial states are computed from ``Shape`` of the input (``Zeros`` of a size read
    at run time), so a batch other than the sample's runs too (the transformer's batched gather
    pairs its batch with a constant of 2 rows)."""
    x, outputs = expected(name)
    path = _convert(FIXTURES / f"{name}_dynamic.mindir", tmp_path)
    assert lite.Model.load(path, device="numpy").inputs[0].shape[0] == "batch"
    _assert_near(_run(path, x, device), outputs)
    if name != "ops_transformer":
        first = _run(path, np.concatenate([x, x[::-1], x[:1]]), device)[0]  # batch-first in both
        _assert_near([first[: len(x)]], outputs[:1])
