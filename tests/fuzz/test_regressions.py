"""Regression tests for the bugs the fuzzers found: each input once crashed a loader with an
untyped exception (or made the converter write a .lite file the runtime refuses). Each now gets
a typed error that names what is wrong, or is declined by the pass that used to crash."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.errors import ModelImportError, PassError
from converter.passes import run_passes


def model_bytes(nodes, inputs, outputs, initializers=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])


def add_model(weight: onnx.TensorProto) -> bytes:
    return model_bytes([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [weight])


def rejected(data: bytes, *texts: str) -> str:
    with pytest.raises(ModelImportError) as info:
        converter.convert_model(data)
    for text in texts:
        assert text in str(info.value), str(info.value)
    return str(info.value)


def test_initializer_bytes_not_matching_dims():
    weight = numpy_helper.from_array(np.zeros(2, np.float32), "w")
    weight.raw_data = weight.raw_data[:7]  # was: ValueError "buffer size must be a multiple of element size"
    rejected(add_model(weight), "tensor 'w'", "does not match its type and dims")


def test_initializer_value_count_not_matching_dims():
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], float_data=[1.0, 2.0])
    # was: ValueError "cannot reshape array of size 2 into shape (4,)"
    rejected(add_model(weight), "tensor 'w'", "dims [4]")


def test_initializer_of_undefined_type():
    weight = numpy_helper.from_array(np.zeros(2, np.float32), "w")
    weight.data_type = TensorProto.UNDEFINED  # was: ValueError "Cannot convert UNDEFINED tensor"
    rejected(add_model(weight), "tensor 'w'", "UNDEFINED")


def test_string_initializer_with_raw_bytes():
    # strings belong in string_data; was: ValueError in constant folding
    weight = onnx.TensorProto(name="w", data_type=TensorProto.STRING, dims=[2], raw_data=b"\x00" * 16)
    rejected(add_model(weight), "tensor 'w'", "STRING")


def test_negative_initializer_dims():
    weight = numpy_helper.from_array(np.zeros((2, 4), np.float32), "w")
    weight.dims[0] = -2  # was: a .lite constant of shape (-2, 4) the writer refused
    rejected(add_model(weight), "initializer 'w'", "negative dimension")


def test_negative_value_dims_are_unknown_sizes():
    """Once a .lite file the reader refused, then refused at import; PaddlePaddle's exporter
    writes -1 for dynamic sizes, so a negative declared size now reads as unknown."""
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-5])
    data = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [value], [Y])
    model = converter.convert_model(data)
    (index,) = model.main.inputs
    assert not isinstance(model.main.tensors[index].shape[0], int)


def test_names_that_are_not_utf8():
    data = model_bytes([helper.make_node("Relu", ["x"], ["yyy"], name="relu")], [X],
                       [helper.make_tensor_value_info("yyy", TensorProto.FLOAT, [2])])
    rejected(data.replace(b"yyy", b"y\xffy"), "not valid UTF-8")  # was: a .lite file the reader refused


def test_a_name_defined_twice():
    data = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [X, X], [Y])  # the fuzzers' form: an input twice
    rejected(data, "value name 'x' is defined twice")


def test_an_empty_op_type():
    rejected(model_bytes([helper.make_node("", ["x"], ["y"])], [X], [Y]), "empty op_type")


def test_nodes_out_of_topological_order_are_sorted_as_onnx_runtime_does():
    """onnxruntime's float16 converter (keep_io_types) appends the inputs' Casts after their readers."""
    data = model_bytes([helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Neg", ["x"], ["t"])], [X], [Y])
    model = converter.convert_model(data, optimize=False)
    assert [node.op_type for node in model.main.nodes] == ["Neg", "Relu"]


def test_a_cycle_is_refused_naming_the_value_read_before_it_is_made():
    nodes = [helper.make_node("Add", ["x", "u"], ["t"]), helper.make_node("Neg", ["t"], ["u"]),
             helper.make_node("Relu", ["t"], ["y"])]
    rejected(model_bytes(nodes, [X], [Y]), "reads 'u'", "topological order")


def test_input_count_outside_the_schema():
    bn = helper.make_node("BatchNormalization", [], ["y"])  # was: IndexError in fold_batchnorm's match
    rejected(model_bytes([bn], [X], [Y]), "has 0 inputs", "BatchNormalization (opset 17) takes 5 to 5")


def test_attribute_of_the_wrong_type():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=b"last")
    rejected(model_bytes([node], [X], [Y]), "attribute 'axis' is STRING", "declares it INT")


def test_opset_version_out_of_range():
    data = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [X], [Y], opset=1 << 40)
    rejected(data, "opset version 1099511627776")  # was: TypeError from onnx.defs.get_schema


def test_batchnorm_statistics_of_different_lengths_are_declined():
    """fold_batchnorm used to raise ValueError broadcasting scale (4,) against var (72,)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])
    initializers = [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w"),
                    numpy_helper.from_array(np.ones(4, np.float32), "s"),
                    numpy_helper.from_array(np.zeros(4, np.float32), "b"),
                    numpy_helper.from_array(np.zeros(4, np.float32), "m"),
                    numpy_helper.from_array(np.ones(72, np.float32), "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
    model = converter.convert_model(model_bytes(nodes, [x], [y], initializers))
    assert "BatchNormalization" in [node.op_type for node in model.main.nodes]


def test_negative_inferred_size_is_a_pass_error():
    """A kernel larger than its padded input: ONNX shape inference gives a negative size."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weight = numpy_helper.from_array(np.ones((1, 1, 5, 5), np.float32), "w")
    data = model_bytes([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[5, 5])], [x], [y], [weight])
    with pytest.raises(PassError) as info:
        converter.convert_model(data)
    assert "negative dimension" in str(info.value) and "'y'" in str(info.value)


def test_if_branch_without_outputs_is_rejected_before_shape_inference():
    """A 190-byte model whose else_branch has no outputs made ONNX's shape inference allocate
    until memory ran out (the fuzzers' per-input peak check caught it under the address-space cap)."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    then_branch = helper.make_graph([helper.make_node("Add", ["a", "a"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph([helper.make_node("Mul", ["a", "a"], ["e"])], "else", [], [])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)
    rejected(model_bytes([node], [cond, a], [Y]), "else_branch has 0 outputs, the If node 1")


def test_standard_op_without_a_default_domain_opset_is_rejected():
    """No opset_import at all: the schema checks were skipped and fold_batchnorm met a
    BatchNormalization without inputs (IndexError)."""
    nodes = [helper.make_node("BatchNormalization", [], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "g", [X], [Y])
    model = helper.make_model(graph)
    del model.opset_import[:]
    rejected(model.SerializeToString(), "imports no opset for the default domain")


def test_a_long_declared_vector_does_not_size_shape_inference_memory():
    """ONNX's data propagation holds every element of a vector it considers (~140 bytes each): an
    If over a declared [2**40] input took all memory. Shape inference now runs without data
    propagation for such models. 10**7 elements would have cost about 1.4 GB."""
    import resource

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [10**7])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    then_branch = helper.make_graph([helper.make_node("Add", ["a", "a"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_branch = helper.make_graph([helper.make_node("Mul", ["a", "a"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = converter.convert_model(model_bytes([node], [cond, a], [Y]))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert [n.op_type for n in model.main.nodes] == ["If"]
    assert grown_mib < 200, f"peak RSS grew by {grown_mib:.0f} MiB"


def test_checkpoint_tensor_with_more_dims_than_numpy_allows(tmp_path):
    """87 dims (numpy 2.x allows 64) escaped as ValueError from reshape."""
    from train._generated import checkpoint_pb2
    from train.checkpoint import CheckpointError, load_checkpoint

    message = checkpoint_pb2.Checkpoint()
    item = message.value.add()
    item.tag = "conv.weight"
    item.tensor.CopyFrom(checkpoint_pb2.TensorProto(dims=[1] * 87, tensor_type="Float32",
                                                    tensor_content=np.zeros(1, "<f4").tobytes()))
    path = tmp_path / "deep.ckpt"
    path.write_bytes(message.SerializeToString())
    with pytest.raises(CheckpointError, match="87 dims"):
        load_checkpoint(str(path))


def test_folded_value_of_another_type_than_declared_is_not_folded():
    """A Softmax over an int64 constant, declared float (a mutated MINDIR): constant folding's
    internal check escaped as ValueError. Folding asks ONNX shape inference for the output size
    before evaluating a node; inference rejects the int64 input, so the node is left as it is and
    the report says why. The conversion as a whole refuses the model: an input outside its op's
    type constraint makes it invalid (ONNX Runtime refuses it too)."""
    from converter.passes import PASSES

    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    nodes = [helper.make_node("Softmax", ["c"], ["y"])]
    constant = numpy_helper.from_array(np.arange(3, dtype=np.int64), "c")
    model = ir.serde.deserialize_model(onnx.load_from_string(model_bytes(nodes, [], [y], [constant])))
    [folding] = run_passes(model, (PASSES["fold_constants"],))
    assert folding.changed == 0
    assert "ONNX shape inference rejects it" in folding.declined[0]
    with pytest.raises(ModelImportError, match=r"model is invalid: .*Softmax.*tensor\(int64\)"):
        converter.convert_model(model_bytes(nodes, [], [y], [constant]))


def test_malformed_conv_attribute_on_a_prepared_kernel_is_a_typed_error():
    """A fuzzed .lite Conv whose kernel_shape is a plain int: the Winograd weight preparation
    at load raised TypeError ('int' object is not iterable) out of Model.load; now preparing is
    skipped and running the node gives a typed error that names it."""
    import lite
    from lite.format import GraphBuilder, to_bytes

    b = GraphBuilder("conv", opset=17)
    x = b.input("x", np.float32, [1, 16, 8, 8])
    w = b.constant("w", np.ones((16, 16, 3, 3), np.float32))
    b.output(b.node("Conv", [x, w], outputs=["y"], kernel_shape=3, pads=[1, 1, 1, 1]), np.float32, [1, 16, 8, 8])
    model = lite.Model.load(to_bytes(b.build()), device="numpy")
    with pytest.raises(lite.LiteError, match="Conv"):
        model(np.ones((1, 16, 8, 8), np.float32))


@pytest.mark.parametrize("attributes", [
    {"auto_pad": b"\xac\xff"},  # not UTF-8: onnx keeps the bytes
    {"strides": [0, 0]},
    {"kernel_shape": [0, 2]},
])
def test_global_pool_declines_windows_it_cannot_read(attributes):
    """seed 2, index 4036 of the onnx run: an AveragePool whose auto_pad is invalid UTF-8 made the
    global_pool pass raise UnicodeDecodeError; zero strides would divide by zero."""
    from converter.passes import global_pool, infer_shapes

    node = helper.make_node("AveragePool", ["x"], ["y"], **{"kernel_shape": [2, 2], **attributes})
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = ir.serde.deserialize_model(onnx.load_from_string(model_bytes([node], [x], [y])))
    [_, result] = run_passes(model, (infer_shapes, global_pool))
    assert result.changed == 0
    assert result.declined, result


def test_a_long_vector_that_only_inference_reveals_turns_data_propagation_off():
    """seed 2, index 46253 of the onnx run: a Reshape to [2**20 + 3, 4] reduced to a 1-D value of
    2**20 + 3 elements. No declared shape is that long, so ONNX's data propagation ran and held it
    element by element: 79 MiB for a 337-byte file."""
    from converter.passes import infer_shapes

    shape = numpy_helper.from_array(np.array([(1 << 20) + 3, 4], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("ReduceMax", ["r"], ["m"], axes=[1], keepdims=0),
             helper.make_node("Shape", ["m"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    model = ir.serde.deserialize_model(onnx.load_from_string(model_bytes(nodes, [x], [y], [shape], opset=17)))
    [result] = run_passes(model, (infer_shapes,))
    assert any("'m' is a vector of more than" in line for line in result.declined), result.declined


@pytest.mark.parametrize("case", ["matmul-one-input", "add-one-input", "matmul-three-inputs", "reducemean-no-input"])
def test_damaged_nodes_around_the_numpy_engines_fusions_are_kernel_errors(case, tmp_path):
    # Found by the loader fuzzer: the fusions planned at load read a MatMul's second input.
    import lite
    from lite.errors import KernelError
    from lite.format import GraphBuilder, save

    b = GraphBuilder("m", opset=17)  # ReduceMean's axes an attribute
    x = b.input("x", np.float32, [1, 4, 2, 2])
    flat = b.node("Reshape", [x, b.constant("s", np.array([2, 8], np.int64))], outputs=["flat"])
    w, bias = b.constant("w", np.ones((8, 3), np.float32)), b.constant("b", np.ones(3, np.float32))
    if case == "matmul-one-input":
        y = b.node("Add", [b.node("MatMul", [flat], outputs=["p"]), bias], outputs=["y"])
    elif case == "add-one-input":
        y = b.node("Add", [b.node("MatMul", [flat, w], outputs=["p"])], outputs=["y"])
    elif case == "matmul-three-inputs":
        y = b.node("MatMul", [flat, w, bias], outputs=["y"])
    else:
        mean = b.node("ReduceMean", [], outputs=["mean"], axes=[2, 3])
        weights = b.constant("cw", np.ones((4, 4, 1, 1), np.float32))
        gate = b.node("Conv", [b.node("Conv", [mean, weights], outputs=["c1"]), weights], outputs=["g"])
        y = b.node("Mul", [x, gate], outputs=["y"])
    b.output(y, np.float32, None)
    save(b.build(), tmp_path / "m.lite")
    with pytest.raises(KernelError):
        lite.Model.load(tmp_path / "m.lite", device="numpy").predict({"x": np.ones((1, 4, 2, 2), np.float32)})
