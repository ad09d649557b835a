"""The torch engine: per-op agreement with the numpy engine, whole CNNs, partitioning, precision,
options (compilation and its caches: test_torch_compiler.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.errors import UnsupportedOpError
from lite.format import GraphBuilder, to_bytes
from tests.lite.engines.models import Const, one_node

torch = pytest.importorskip("torch", reason="the torch engine needs PyTorch (the torch extra)")

from lite.engines.torch import TorchEngine

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values: int) -> Const:
    return Const(np.array(values, np.int64))


def assert_agrees(model, feeds, rtol=1e-5, atol=1e-5, **options):
    expected = NumpyEngine(model).run(feeds)
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None, fallback=False, **options)
    got = engine.run(feeds)
    assert set(got) == set(expected)
    for name, value in expected.items():
        value = np.asarray(value)
        assert isinstance(got[name], np.ndarray), name
        assert got[name].dtype == value.dtype, (name, got[name].dtype, value.dtype)
        assert got[name].shape == value.shape, (name, got[name].shape, value.shape)
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)


X4 = f32(2, 3, 9, 9)
CASES = {
    # convolutions
    "conv": ("Conv", [X4, Const(f32(4, 3, 3, 3)), Const(f32(4))], {"pads": [1, 1, 1, 1]}),
    "conv_asymmetric_pads": ("Conv", [X4, Const(f32(4, 3, 3, 3))], {"pads": [0, 1, 2, 1], "strides": [2, 1]}),
    "conv_same_lower_dilated": ("Conv", [X4, Const(f32(4, 3, 3, 3))],
                                {"auto_pad": "SAME_LOWER", "dilations": [2, 2], "strides": [2, 2]}),
    "conv_same_upper": ("Conv", [X4, Const(f32(6, 3, 2, 2))], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "conv_groups": ("Conv", [f32(1, 4, 7, 7), Const(f32(8, 2, 3, 3))], {"group": 2}),
    "conv_depthwise_fused": ("Conv", [f32(1, 4, 7, 7), Const(f32(4, 1, 3, 3))],
                             {"group": 4, "pads": [1, 1, 1, 1], "fused_activation": "HardSwish"}),
    "conv_1d": ("Conv", [f32(2, 3, 10), Const(f32(4, 3, 3))], {"pads": [2, 0], "strides": [2]}),
    "conv_transpose": ("ConvTranspose", [f32(1, 4, 5, 5), Const(f32(4, 2, 3, 3)), Const(f32(2))],
                       {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    "conv_transpose_asymmetric": ("ConvTranspose", [f32(1, 4, 5, 5), Const(f32(4, 3, 3, 3))],
                                  {"strides": [2, 2], "pads": [0, 1, 2, 0]}),
    "conv_transpose_output_shape": ("ConvTranspose", [f32(1, 2, 4, 4), Const(f32(2, 2, 3, 3))],
                                    {"strides": [2, 2], "output_shape": [9, 8]}),
    "conv_transpose_groups": ("ConvTranspose", [f32(1, 4, 4, 4), Const(f32(4, 1, 3, 3))], {"group": 2}),
    # matrix products
    "gemm": ("Gemm", [f32(3, 5), Const(f32(4, 5)), Const(f32(4))], {"transB": 1}),
    "gemm_alpha_beta": ("Gemm", [f32(5, 3), f32(5, 4), Const(f32(3, 4))],
                        {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    "gemm_fused_leaky": ("Gemm", [f32(3, 5), Const(f32(5, 4))],
                         {"fused_activation": "LeakyRelu", "fused_activation_params": [0.1]}),
    "matmul_batched": ("MatMul", [f32(2, 3, 4, 5), f32(5, 6)], {}),
    "einsum": ("Einsum", [f32(2, 3), f32(3, 4)], {"equation": "ij,jk->ik"}),
    # pooling
    "maxpool": ("MaxPool", [X4], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "maxpool_ceil": ("MaxPool", [X4], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "maxpool_asymmetric_ceil": ("MaxPool", [f32(1, 2, 8, 8)],
                                {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1}),
    "maxpool_same_dilated": ("MaxPool", [X4], {"kernel_shape": [2, 2], "dilations": [2, 2],
                                               "auto_pad": "SAME_UPPER"}),
    "avgpool_include_pad": ("AveragePool", [X4], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                  "count_include_pad": 1}),
    "avgpool_exclude_pad_ceil": ("AveragePool", [X4], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                       "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "avgpool_asymmetric": ("AveragePool", [X4], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 2, 1]}),
    "avgpool_asymmetric_include": ("AveragePool", [X4], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                         "pads": [1, 0, 0, 1], "count_include_pad": 1,
                                                         "ceil_mode": 1}),
    "global_avgpool": ("GlobalAveragePool", [X4], {}),
    "global_maxpool": ("GlobalMaxPool", [X4], {}),
    # normalization
    "batchnorm": ("BatchNormalization", [X4, Const(f32(3)), Const(f32(3)), Const(f32(3)),
                                         Const(RNG.uniform(0.5, 2, 3).astype(np.float32))], {"epsilon": 1e-3}),
    "layernorm": ("LayerNormalization", [f32(2, 5, 8), Const(f32(8)), Const(f32(8))], {"epsilon": 1e-5}),
    "layernorm_axis": ("LayerNormalization", [f32(2, 5, 8), Const(f32(5, 8))], {"axis": 1}),
    "instancenorm": ("InstanceNormalization", [X4, Const(f32(3)), Const(f32(3))], {}),
    # activations
    "relu": ("Relu", [f32(3, 4)], {}),
    "clip": ("Clip", [f32(3, 4), Const(np.array(-0.5, np.float32)), Const(np.array(0.5, np.float32))], {}),
    "clip_min_only": ("Clip", [f32(3, 4), Const(np.array(0.0, np.float32))], {}),
    "leaky_relu": ("LeakyRelu", [f32(3, 4)], {"alpha": 0.2}),
    "sigmoid": ("Sigmoid", [f32(3, 4)], {}),
    "hard_sigmoid": ("HardSigmoid", [f32(3, 4)], {"alpha": 0.3, "beta": 0.4}),
    "hard_swish": ("HardSwish", [f32(3, 4) * 4], {}),
    "tanh": ("Tanh", [f32(3, 4)], {}),
    "gelu": ("Gelu", [f32(3, 4)], {"opset": 20}),
    "gelu_tanh": ("Gelu", [f32(3, 4)], {"approximate": "tanh", "opset": 20}),
    "erf": ("Erf", [f32(3, 4)], {}),
    "softmax": ("Softmax", [f32(2, 3, 4)], {"axis": 1}),
    "softmax_opset11_coerced": ("Softmax", [f32(2, 3, 4)], {"axis": 1, "opset": 11}),
    "log_softmax": ("LogSoftmax", [f32(2, 3, 4)], {}),
    "prelu": ("PRelu", [f32(2, 3, 4, 4), Const(f32(3, 1, 1))], {}),
    # arithmetic and logic
    "add_broadcast": ("Add", [f32(2, 3, 4), f32(4)], {}),
    "sub": ("Sub", [f32(2, 3), Const(f32(2, 3))], {}),
    "mul_scalar": ("Mul", [f32(2, 3), Const(np.array(1.5, np.float32))], {}),
    "div": ("Div", [f32(2, 3), Const(RNG.uniform(1, 2, (1, 3)).astype(np.float32))], {}),
    "div_int_truncates": ("Div", [np.array([7, -7, 9, -3], np.int64), Const(np.array([2, 2, -4, 5], np.int64))], {}),
    "pow": ("Pow", [np.abs(f32(2, 3)), Const(np.array(2.0, np.float32))], {}),
    "max_variadic": ("Max", [f32(2, 3), f32(3), f32(2, 1)], {}),
    "where": ("Where", [RNG.standard_normal((2, 3)) > 0, f32(2, 3), f32(3)], {}),
    "equal_int": ("Equal", [np.array([1, 2, 3], np.int64), Const(np.array([1, 0, 3], np.int64))], {}),
    "greater": ("Greater", [f32(2, 3), f32(2, 3)], {}),
    "cast_int": ("Cast", [f32(2, 3) * 10], {"to": 7}),
    "cast_half": ("Cast", [f32(2, 3)], {"to": 10}),
    "sqrt": ("Sqrt", [np.abs(f32(3))], {}),
    # shapes and data movement
    "flatten": ("Flatten", [X4], {"axis": 2}),
    "reshape": ("Reshape", [X4, i64(0, -1, 9)], {}),
    "transpose": ("Transpose", [X4], {"perm": [0, 2, 3, 1]}),
    "concat": ("Concat", [f32(2, 3), f32(2, 5)], {"axis": -1}),
    "squeeze": ("Squeeze", [f32(1, 3, 1, 4), i64(0, 2)], {}),
    "unsqueeze": ("Unsqueeze", [f32(3, 4), i64(0, -1)], {}),
    "unsqueeze_opset11": ("Unsqueeze", [f32(3, 4)], {"axes": [1], "opset": 11}),
    "slice": ("Slice", [X4, i64(1, 2), i64(100, -1), i64(2, 3), i64(1, 2)], {}),
    "slice_negative_step": ("Slice", [f32(5, 6), i64(-1, 4), i64(-100, 0), i64(0, 1), i64(-2, -1)], {}),
    "gather": ("Gather", [f32(5, 4), i64(0, -1, 2)], {"axis": 0}),
    "gather_2d_indices": ("Gather", [f32(3, 5), Const(np.array([[0, 4], [-2, 1]], np.int64))], {"axis": 1}),
    "gather_runtime_indices": ("Gather", [f32(5, 4), np.array([[1, -1]], np.int64)], {}),
    "shape": ("Shape", [X4], {}),
    "shape_slice": ("Shape", [X4], {"start": 1, "end": -1}),
    "identity": ("Identity", [f32(3)], {}),
    "expand": ("Expand", [f32(3, 1), i64(2, 1, 4)], {}),
    "split": ("Split", [f32(6, 2), i64(2, 4)], {"outputs": 2}),
    "split_even": ("Split", [f32(6, 2)], {"outputs": 3, "opset": 18, "num_outputs": 3}),
    "tile": ("Tile", [f32(2, 3), i64(2, 1)], {}),
    "pad_constant": ("Pad", [f32(2, 3), i64(0, 1, 2, 0), Const(np.array(1.5, np.float32))], {}),
    "pad_edge": ("Pad", [f32(1, 2, 3, 3), i64(0, 0, 1, 2, 0, 0, 2, 1)], {"mode": "edge"}),
    "pad_reflect": ("Pad", [f32(1, 2, 4, 4), i64(0, 0, 1, 2, 0, 0, 2, 1)], {"mode": "reflect"}),
    "depth_to_space_dcr": ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2}),
    "depth_to_space_crd": ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}),
    "space_to_depth": ("SpaceToDepth", [f32(1, 2, 4, 6)], {"blocksize": 2}),
    "constant_of_shape": ("ConstantOfShape", [i64(2, 3)], {"value": np.array([7], np.int64)}),
    "range": ("Range", [Const(np.array(1, np.int64)), Const(np.array(10, np.int64)), Const(np.array(3, np.int64))],
              {}),
    "topk": ("TopK", [f32(3, 6), i64(2)], {"outputs": 2, "axis": 1}),
    "argmax": ("ArgMax", [f32(3, 6)], {"axis": 1, "keepdims": 0}),
    # reductions
    "reduce_mean": ("ReduceMean", [f32(2, 3, 4)], {"axes": [1, 2]}),
    "reduce_mean_opset18": ("ReduceMean", [f32(2, 3, 4), i64(-1)], {"keepdims": 0, "opset": 18}),
    "reduce_sum": ("ReduceSum", [f32(2, 3, 4), i64(0, 2)], {}),
    "reduce_sum_all": ("ReduceSum", [f32(2, 3, 4)], {"keepdims": 0}),
    "reduce_max": ("ReduceMax", [f32(2, 3, 4)], {"axes": [1]}),
    # resize
    "resize_nearest_scales": ("Resize", [f32(1, 2, 3, 4), None, Const(np.array([1, 1, 2, 1.5], np.float32))], {}),
    "resize_nearest_asymmetric_floor": ("Resize", [f32(1, 2, 3, 4), None, Const(np.array([1, 1, 2, 2], np.float32))],
                                        {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    "resize_nearest_sizes_align": ("Resize", [f32(1, 2, 5, 4), None, None, i64(1, 2, 3, 7)],
                                   {"coordinate_transformation_mode": "align_corners"}),
    "resize_linear_half_pixel": ("Resize", [f32(1, 2, 4, 4), None, Const(np.array([1, 1, 2, 0.5], np.float32))],
                                 {"mode": "linear"}),
    "resize_linear_align_corners": ("Resize", [f32(1, 2, 4, 4), None, None, i64(1, 2, 7, 5)],
                                    {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    "resize_cubic": ("Resize", [f32(1, 1, 4, 4), None, Const(np.array([1, 1, 2, 2], np.float32))], {"mode": "cubic"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_agrees_with_the_numpy_engine(case):
    op, inputs, attributes = CASES[case]
    attributes = dict(attributes)
    outputs = attributes.pop("outputs", 1)
    opset = attributes.pop("opset", 17)
    model, feeds = one_node(op, inputs, outputs, opset, **attributes)
    assert_agrees(model, feeds, rtol=1e-4, atol=1e-5)


def shape_chain_model():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a dynamic flatten."""
    b = GraphBuilder("chain", opset=17)
    x = b.input("x", np.float32, ["N", 2, 3])
    shape = b.node("Shape", [x])
    batch = b.node("Gather", [shape, b.constant("zero", np.array(0, np.int64))], axis=0)
    batch = b.node("Unsqueeze", [batch, b.constant("axes", np.array([0], np.int64))])
    target = b.node("Concat", [batch, b.constant("rest", np.array([-1], np.int64))], axis=0)
    y = b.node("Reshape", [x, target])
    count = b.node("Cast", [b.node("ReduceProd", [shape], keepdims=0)], to=1)
    y = b.node("Div", [y, count], outputs=["y"])
    b.output(y, np.float32, ["N", 6])
    return b.build()


def test_shape_arithmetic_stays_on_the_host():
    model = shape_chain_model()
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None)
    code = engine.segments[0].module.code
    assert "Shape" in code and "c" not in [n.op for n in engine.segments[0].module.graph.nodes if n.op == "get_attr"]
    for batch in (1, 4):
        x = f32(batch, 2, 3)
        np.testing.assert_allclose(engine.run({"x": x})["y"], NumpyEngine(model).run({"x": x})["y"], rtol=1e-6)


@pytest.mark.parametrize("value", [np.array([0.5], np.float32), np.array([3], np.int64), np.array([1], np.float16)])
def test_a_tensor_attribute_of_a_node_on_a_dynamic_shape(value):
    """ConstantOfShape's ``value`` (a tensor attribute) on a shape known only at run time: the
    generated code spells it (a numpy array's repr named nothing there: NameError 'array')."""
    b = GraphBuilder("fill", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    filled = b.node("ConstantOfShape", [b.node("Shape", [x])], value=value)
    y = b.node("Add", [x, b.node("Cast", [filled], to=1)], outputs=["y"])
    b.output(y, np.float32, ["N", 4])
    model = b.build()
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None)
    for batch in (1, 3):
        x = f32(batch, 4)
        np.testing.assert_array_equal(engine.run({"x": x})["y"], NumpyEngine(model).run({"x": x})["y"])


@pytest.mark.parametrize("mode", ["eager", "default"])
def test_pytorch_s_own_refusal_is_a_kernel_error_naming_it(mode):
    from lite.errors import KernelError

    b = GraphBuilder("rows", opset=17)
    x = b.input("x", np.float32, ["N", "K"])
    y = b.node("Reshape", [x, b.constant("rows", np.array([-1, 4], np.int64))], outputs=["y"])
    b.output(y, np.float32, ["M", 4])
    engine = TorchEngine(b.build(), device="cpu", mode=mode, cache_dir=None)
    with pytest.raises(KernelError, match=r"PyTorch failed to run the model: .*invalid for input of size 3"):
        engine.run({"x": f32(1, 3)})


ACTIVATIONS = [("Relu", []), ("Clip", [0.0, 6.0]), ("LeakyRelu", [0.1]), ("HardSigmoid", [0.2, 0.5]),
               ("HardSwish", []), ("Silu", []), ("Sigmoid", []), ("Tanh", [])]


@pytest.mark.parametrize("activation, params", ACTIVATIONS)
def test_fused_activations(activation, params):
    attributes = {"fused_activation": activation, "pads": [1, 1, 1, 1]}
    if params:
        attributes["fused_activation_params"] = params
    model, feeds = one_node("Conv", [X4 * 3, Const(f32(4, 3, 3, 3)), Const(f32(4))], **attributes)
    assert_agrees(model, feeds, rtol=1e-4, atol=1e-5)


def converted_resnet18(fp16: bool):
    pytest.importorskip("onnx", reason="the converter needs onnx")
    from converter import convert_model
    from tests.converter import models

    source = models.resnet18("legacy", image_size=32, classes=10)
    return convert_model(source, fp16=fp16, fp16_io=fp16, dynamic_batch=True)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16-weights"])
def test_converted_resnet18_agrees(fp16):
    model = converted_resnet18(fp16)
    x = f32(2, 3, 32, 32).astype(np.float16 if fp16 else np.float32)
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None, fallback=False)
    # The --fp16 weights are read through Cast(to=FLOAT) constants: folded once at lowering;
    # only the Casts of the float16 input and output remain.
    assert engine.segments[0].module.code.count("_Cast(") == (2 if fp16 else 0)
    assert engine.compute_precision == "fp32"
    expected = NumpyEngine(model).run({"input": x})["output"]
    got = engine.run({"input": x})["output"]
    assert got.dtype == expected.dtype and got.shape == (2, 10)
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("fp16_io", [True, False], ids=["fp16-io", "fp32-io"])
def test_half_compute_policy(fp16_io):
    """The GPU's half-precision lowering, checked eagerly on the CPU: float16 buffers, declared output types."""
    from lite.engines.torch.lowering import Policy, build_module

    pytest.importorskip("onnx", reason="the converter needs onnx")
    from converter import convert_model
    from tests.converter import models

    model = convert_model(models.resnet18("legacy", image_size=32, classes=10), fp16=True, fp16_io=fp16_io,
                          dynamic_batch=True)
    graph = model.main
    module = build_module(model, graph.nodes, graph.inputs, graph.outputs,
                          Policy(torch.device("cpu"), torch.float16, channels_last=True))
    assert {b.dtype for b in module.buffers()} == {torch.float16}
    x = f32(2, 3, 32, 32).astype(np.float16 if fp16_io else np.float32)
    with torch.no_grad():
        (out,) = module(torch.from_numpy(x))
    assert out.dtype == (torch.float16 if fp16_io else torch.float32)
    expected = NumpyEngine(model).run({"input": x})["output"].astype(np.float32)
    np.testing.assert_allclose(out.float().numpy(), expected, rtol=2e-2, atol=5e-2)


def test_weights_share_memory_with_the_model_on_cpu():
    weight = f32(4, 3, 3, 3)
    weight.flags.writeable = False  # as the memory-mapped reader returns them
    model, _ = one_node("Conv", [X4, Const(weight)])
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None)
    buffers = list(engine.segments[0].module.buffers())
    assert len(buffers) == 1 and buffers[0].data_ptr() == weight.ctypes.data


def mixed_model():
    """Gemm -> custom op (numpy) -> Gemm: two torch segments around a numpy one."""
    b = GraphBuilder("mixed", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    h = b.node("Gemm", [x, b.constant("w1", f32(4, 4))], fused_activation="Relu")
    h = b.node("Scale", [h], domain="com.example", factor=3.0)
    y = b.node("Gemm", [h, b.constant("w2", f32(4, 2))], outputs=["y"])
    b.output(y, np.float32, ["N", 2])
    return b.build()


def test_unmapped_nodes_run_on_the_numpy_engine():
    import lite

    ops = lite.CustomOps()

    @ops.register("Scale", domain="com.example")
    def Scale(x, *, factor=1.0):
        return (x * factor).astype(x.dtype)

    model = mixed_model()
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None, custom_ops=ops)
    assert [s["engine"] for s in engine.describe()] == ["torch", "numpy", "torch"]
    x = f32(3, 4)
    np.testing.assert_allclose(engine.run({"x": x})["y"], NumpyEngine(model, ops).run({"x": x})["y"], rtol=1e-5)


def test_fallback_false_names_every_unmapped_node():
    b = GraphBuilder("unmapped", opset=17)
    x = b.input("x", np.float32, [3])
    y = b.node("Scale", [x], domain="com.example", name="scale1")
    y = b.node("Hardmax", [y], name="hardmax1", outputs=["y"])
    b.output(y, np.float32, [3])
    with pytest.raises(UnsupportedOpError, match=r"2 node\(s\)(.|\n)*scale1(.|\n)*hardmax1"):
        TorchEngine(b.build(), device="cpu", mode="eager", cache_dir=None, fallback=False)


def test_device_inputs_are_rejected_without_a_gpu_or_options_are_checked():
    model, _ = one_node("Relu", [f32(3)])
    with pytest.raises(ValueError, match="mode"):
        TorchEngine(model, device="cpu", mode="fast", cache_dir=None)
    with pytest.raises(ValueError, match="fp16"):
        TorchEngine(model, device="cpu", precision="fp16", cache_dir=None)


def test_torch_tensor_inputs_give_torch_outputs():
    model, feeds = one_node("Relu", [f32(2, 3)])
    engine = TorchEngine(model, device="cpu", mode="eager", cache_dir=None)
    out = engine.run({"in0": torch.from_numpy(feeds["in0"])})  # CPU tensors are not device arrays
    assert isinstance(out["out0"], np.ndarray)


def test_an_unknown_option_is_refused_naming_the_valid_ones():
    import lite

    model, _ = one_node("Relu", [f32(2, 3)])
    with pytest.raises(TypeError, match=r"unknown torch engine option\(s\) modee; valid options: mode, .*aot"):
        lite.Model.load(to_bytes(model), engine="torch", device="cpu", modee="default")


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.gpu
def test_cuda_device_inputs_give_device_outputs_in_half_precision():
    model = converted_resnet18(fp16=True)
    x = torch.randn(2, 3, 32, 32, device="cuda").half()
    engine = TorchEngine(model, device="cuda", mode="eager", cache_dir=None)
    assert engine.compute_precision == "fp16"
    out = engine.run({"input": x})["output"]
    assert isinstance(out, torch.Tensor) and out.is_cuda and out.dtype == torch.float16
    expected = NumpyEngine(model).run({"input": x.cpu().numpy()})["output"].astype(np.float32)
    np.testing.assert_allclose(out.float().cpu().numpy(), expected, rtol=5e-2, atol=5e-2)


@cuda
@pytest.mark.gpu
def test_an_fp16_model_loaded_on_cuda_computes_in_half_precision_ahead_of_time(tmp_path):
    """The defaults a user gets from lite.Model.load(engine="torch") on a GPU: an --fp16 model
    computes in float16, compiled ahead of time (an artifact on disk), and agrees with numpy."""
    import lite

    model = converted_resnet18(fp16=True)
    loaded = lite.Model.load(to_bytes(model), engine="torch", device="cuda", mode="default", cache_dir=tmp_path)
    assert loaded.engine.compute_precision == "fp16" and loaded.engine.aot
    x = f32(2, 3, 32, 32).astype(np.float16)
    out = np.asarray(loaded.predict({"input": x})["output"], dtype=np.float32)
    expected = NumpyEngine(model).run({"input": x})["output"].astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=5e-2, atol=5e-2)
    # On a GPU the first result comes from the quick configuration; the ahead-of-time artifact is
    # the background upgrade's, written when it is swapped in.
    assert loaded.engine.wait_until_best(timeout=600), loaded.engine.startup_state()
    assert list((tmp_path / "torch" / "compiled").glob("[!.]*")), loaded.engine.startup_state()
