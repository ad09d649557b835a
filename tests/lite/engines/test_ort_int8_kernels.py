"""int8 on ONNX Runtime is exact on every x86 CPU: uint8 weights where U8S8 kernels saturate.

The models here are built so that two adjacent u8 x s8 products exceed int16 (2 x 255 x 127):
ONNX Runtime's U8S8 kernels on x86 without VNNI saturate on them, the numpy engine does not.
"""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite import cpu
from lite.format import GraphBuilder, to_bytes

ort = pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
onnx = pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")

from lite.engines.ort.unsigned import unsigned_weights
from lite.format import load
from lite.format.onnx.lower import lower_model


def _saturating_conv(activation_type=np.uint8) -> bytes:
    """QDQ Conv: inputs quantize to the top of the range, weights are ±127, per channel."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("saturating_conv", opset=17)
    x = b.input("x", np.float32, [1, 4, 8, 8])
    zero = 0 if activation_type == np.uint8 else -128
    scale_x, zero_x = b.constant("sx", np.float32(0.02)), b.constant("zx", activation_type(zero))
    xd = b.node("DequantizeLinear", [b.node("QuantizeLinear", [x, scale_x, zero_x]), scale_x, zero_x])
    weights = np.where(rng.random((6, 4, 3, 3)) < 0.9, 127, -127).astype(np.int8)
    scale_w = b.constant("sw", np.full(6, 0.01, np.float32))
    wd = b.node("DequantizeLinear", [b.constant("w", weights), scale_w, b.constant("zw", np.zeros(6, np.int8))],
                axis=0)
    y = b.node("Conv", [xd, wd], pads=[1, 1, 1, 1])
    scale_y, zero_y = b.constant("sy", np.float32(1.0)), b.constant("zy", activation_type(zero))
    out = b.node("DequantizeLinear", [b.node("QuantizeLinear", [y, scale_y, zero_y]), scale_y, zero_y],
                 outputs=["y"])
    b.output(out, np.float32, [1, 6, 8, 8])
    return to_bytes(b.build())


def _saturating_matmul() -> bytes:
    """int8-dynamic's form: DynamicQuantizeLinear → MatMulInteger with int8 weights and zero point."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("saturating_matmul", opset=17)
    x = b.input("x", np.float32, [4, 64])
    quantized = b.node("DynamicQuantizeLinear", [x], outputs=["xq", "xs", "xz"])
    weights = np.where(rng.random((64, 16)) < 0.9, 127, -127).astype(np.int8)
    product = b.node("MatMulInteger", [quantized[0], b.constant("w", weights), quantized[2],
                                       b.constant("wz", np.int8(0))])
    scale = b.node("Mul", [quantized[1], b.constant("ws", np.float32(0.01))])
    y = b.node("Mul", [b.node("Cast", [product], to=1), scale], outputs=["y"])
    b.output(y, np.float32, [4, 16])
    return to_bytes(b.build())


def _inputs(shape) -> np.ndarray:
    # Non-negative values near the top of the uint8 range: the worst case for vpmaddubsw.
    return np.random.default_rng(2).uniform(4.0, 5.1, shape).astype(np.float32)


def _session(lowered):
    options = ort.SessionOptions()
    names = list(lowered.external)
    values = [ort.OrtValue.ortvalue_from_numpy(lowered.external[n]) for n in names]
    if names:
        options.add_external_initializers(names, values)
    return ort.InferenceSession(lowered.model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("build, shape", [(_saturating_conv, (1, 4, 8, 8)), (_saturating_matmul, (4, 64))])
def test_uint8_weights_compute_what_the_numpy_engine_does(build, shape):
    data, x = build(), _inputs(shape)
    model = load(data)
    lowered = unsigned_weights(lower_model(model, external_weights=False))
    weights = [init for init in lowered.model.graph.initializer if init.data_type == onnx.TensorProto.UINT8]
    assert any(init.name.startswith("w_as_uint8") for init in weights)
    assert not any(init.name == "w" for init in lowered.model.graph.initializer)  # the int8 copy is gone
    expected = lite.Model.load(data, device="numpy")(x)
    (got,) = _session(lowered).run(None, {"x": x})
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("build, shape", [(_saturating_conv, (1, 4, 8, 8)), (_saturating_matmul, (4, 64))])
def test_onnx_runtime_engine_agrees_with_numpy_on_this_cpu(build, shape):
    data, x = build(), _inputs(shape)
    on_cpu = lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="int8")  # the int8 kernels
    assert on_cpu.engine.unsigned_weights == cpu.int8_products_saturate()
    np.testing.assert_array_equal(on_cpu(x), lite.Model.load(data, device="numpy")(x))


def test_int8_activations_keep_int8_weights():
    """ONNX Runtime has no S8U8 kernel: layers with int8 activations are left as they are."""
    lowered = unsigned_weights(lower_model(load(_saturating_conv(np.int8)), external_weights=False))
    assert not [init for init in lowered.model.graph.initializer if init.data_type == onnx.TensorProto.UINT8]


def test_cpu_facts_are_consistent():
    assert isinstance(cpu.flags(), frozenset)
    assert cpu.signature().startswith(cpu.platform.machine())
    if not cpu.is_x86():
        assert not cpu.int8_products_saturate()


def _microsoft_layer(op_type: str):
    """ONNX Runtime's own integer layers (com.microsoft), as its QOperator and dynamic quantizers
    write them, with weights of ±127 and activations at the top of uint8; and the exact result."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weights = np.where(rng.random((64, 16)) < 0.9, 127, -127).astype(np.int8)
    w_scale = np.float32(0.01)
    initializers = [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.array(w_scale), "ws"),
                    numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
                    numpy_helper.from_array(np.array(0, np.uint8), "xz"), numpy_helper.from_array(np.array(0, np.int8), "wz")]
    x_float = _inputs((4, 64))
    if op_type == "DynamicQuantizeMatMul":
        node = helper.make_node(op_type, ["x", "w", "ws", "wz"], ["y"], domain="com.microsoft")
        x_type, x = TensorProto.FLOAT, x_float
        scale = np.float32(x_float.max()) / np.float32(255)  # DynamicQuantizeLinear of non-negative values
        quantized = np.clip(np.rint(x_float / scale), 0, 255)
        expected = (quantized.astype(np.float64) @ weights.astype(np.float64)) * float(scale) * float(w_scale)
    else:
        x = np.clip(np.rint(x_float / 0.02), 0, 255).astype(np.uint8)
        x_type = TensorProto.UINT8
        inputs = (["x", "xs", "xz", "w", "ws", "wz"] if op_type == "QGemm" else ["x", "w", "xs", "ws", "xz", "wz"])
        node = helper.make_node(op_type, inputs, ["y"], domain="com.microsoft")
        expected = (x.astype(np.float64) @ weights.astype(np.float64)) * 0.02 * float(w_scale)
    graph = helper.make_graph([node], op_type, [helper.make_tensor_value_info("x", x_type, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return proto, x, expected


@pytest.mark.parametrize("op_type", ["QGemm", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"])
def test_onnx_runtime_s_own_integer_layers_get_uint8_weights(op_type):
    """Written by ONNX Runtime's quantizers: on a CPU without VNNI a QGemm read 43 % of its peak
    off before these layers were rewritten too; with uint8 weights every x86 CPU is exact."""
    from lite.format.onnx.lower import Lowered

    proto, x, expected = _microsoft_layer(op_type)
    lowered = unsigned_weights(Lowered(proto))
    assert [init.data_type for init in lowered.model.graph.initializer if init.name.startswith("w_as_uint8")] == [
        onnx.TensorProto.UINT8]
    assert "w" not in {init.name for init in lowered.model.graph.initializer}
    (got,) = _session(lowered).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)


def test_lite_bench_says_how_an_int8_model_runs(monkeypatch):
    """Which kernels ran and why, and the uint8 weights where this CPU saturates: said, not only
    held in ``model.engine.decision``."""
    from lite.commands.bench import int8_kernels
    from lite.engines.ort import engine as ort_engine

    data = _saturating_matmul()
    monkeypatch.setattr(ort_engine, "int8_products_saturate", lambda: True)
    said = int8_kernels(lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="int8"))
    assert said.startswith("the int8 kernels (") and "weights as uint8" in said
    monkeypatch.setattr(ort_engine, "int8_products_saturate", lambda: False)
    assert "uint8" not in int8_kernels(lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="int8"))
    floated = int8_kernels(lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="float"))
    assert floated.startswith("the float form (")
    assert int8_kernels(lite.Model.load(data, device="numpy")) is None
