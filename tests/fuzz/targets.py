"""The four fuzz targets: what is mutated, which public loader reads it, which errors it may raise.

Each target has small valid seed files (built here, or the MindSpore fixtures), a field-level
mutator where the format has a structure worth mutating below the wire format, a ``run`` that
feeds one input through the public loader, and ``expected``: the documented typed errors. Any
other exception, a crash of the process, an input running past the deadline or an allocation
past the memory cap is a finding. What a target is (:class:`Seed`, :class:`Target`) is in
:mod:`tests.fuzz.fuzz_target`.

=======  ==========================================  ===================================
format   loader                                       documented errors
=======  ==========================================  ===================================
lite     ``lite.Model.load(data, device="numpy")``    ``ModelFormatError``, ``UnsupportedOpError``
onnx     ``converter.convert_model(data)``, then      ``ConverterError`` (all leaves)
         the result written and read back
mindir   ``converter.convert_model(path)``            ``ConverterError`` (all leaves)
ckpt     ``train.checkpoint.load_checkpoint(path)``   ``CheckpointError``
=======  ==========================================  ===================================
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.fuzz.fuzz_target import FIXTURES, Scratch, Seed, Target
from tests.fuzz.mutate import INTERESTING_INTS, mutate_message

# ----- .lite -------------------------------------------------------------------------------------


def _lite_seeds() -> list[Seed]:
    import converter
    from lite.format import GraphBuilder, ir, to_bytes
    from lite.format.dtypes import DataType

    seeds = []
    b = GraphBuilder("matmul")
    x = b.input("x", np.float32, ["N", 4])
    w = b.constant("w", np.arange(8, dtype=np.float32).reshape(4, 2))
    y = b.node("MatMul", [x, w], outputs=["y"])
    b.output(b.node("Relu", [y], outputs=["z"]), np.float32, ["N", 2])
    seeds.append(Seed("matmul", to_bytes(b.build({"producer": "fuzz"}))))

    b = GraphBuilder("conv")
    x = b.input("image", np.float32, [1, 2, 5, 5])
    w = b.constant("weight", np.ones((3, 2, 3, 3), np.float32))
    bias = b.constant("bias", np.zeros(3, np.float32))
    y = b.node("Conv", [x, w, bias], outputs=["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = b.node("MaxPool", [y], outputs=["pool"], kernel_shape=[2, 2], strides=[2, 2])
    shape = b.constant("shape", np.array([1, -1], np.int64))
    y = b.node("Reshape", [y, shape], outputs=["flat"])
    b.output(b.node("Softmax", [y], outputs=["probs"], axis=-1), np.float32, [1, 12])
    seeds.append(Seed("conv", to_bytes(b.build())))

    # Quantized and string constants, and a subgraph: the parts of the schema a plain graph lacks.
    quant = ir.QuantParams(np.array([0.5, 0.25], np.float32), np.array([0, 3], np.int64), axis=0, bits=8)
    weights = ir.Tensor("q", DataType.INT8, (2, 3), np.arange(6, dtype=np.int8).reshape(2, 3), quant)
    labels = ir.Tensor("labels", DataType.STRING, (2,), np.array([b"cat", b"dog"], dtype=object))
    cond = ir.Tensor("cond", DataType.BOOL, ())
    then_out = ir.Tensor("then_y", DataType.INT8, (2, 3))
    branch = ir.Graph("then", tensors=[weights, then_out], nodes=[ir.Node("Identity", [0], [1])], outputs=[1])
    out = ir.Tensor("y", DataType.INT8, (2, 3))
    main = ir.Graph("main", tensors=[cond, out, labels], inputs=[0], outputs=[1, 2], nodes=[
        ir.Node("If", [0], [1], {"then_branch": ir.Attribute(ir.AttributeType.GRAPH, 1),
                                 "else_branch": ir.Attribute(ir.AttributeType.GRAPH, 1)}),
    ])
    seeds.append(Seed("quant_if", to_bytes(ir.Model([main, branch], metadata={"labels": "cat,dog"}))))

    # Format 2.0's compact quantization: tensors with implied QDQ nodes, zero points left out.
    from tests.format.models import conv_qdq_model

    seeds.append(Seed("implied_qdq", to_bytes(conv_qdq_model())))

    onnx_seed = (FIXTURES / "ops_conv.onnx").read_bytes()
    seeds.append(Seed("ops_conv", to_bytes(converter.convert_model(onnx_seed))))
    return seeds


def _mutate_lite(data: bytes, rng: random.Random) -> bytes | None:
    """Decode the seed, change one thing the verifier or the engine must check, write it again."""
    from lite.format import ir, load, to_bytes
    from lite.format.dtypes import DataType

    model = load(bytes(data))
    graph = rng.choice(model.graphs)
    choice = rng.randrange(9)
    if choice == 0 and graph.tensors:
        tensor = rng.choice(graph.tensors)
        dims = list(tensor.shape or ())
        if dims and rng.random() < 0.7:
            dims[rng.randrange(len(dims))] = rng.choice([v for v in INTERESTING_INTS if v >= 0] + ["N", None])
        else:
            dims.append(rng.choice((0, 1, 3, 1 << 40)))
        tensor.shape = tuple(dims)
    elif choice == 1 and graph.tensors:
        rng.choice(graph.tensors).dtype = rng.choice(list(DataType))
    elif choice == 2 and graph.nodes:
        node = rng.choice(graph.nodes)
        indices = node.inputs if rng.random() < 0.5 or not node.outputs else node.outputs
        if indices:
            indices[rng.randrange(len(indices))] = rng.randint(-1, len(graph.tensors) - 1)
        else:
            indices.append(rng.randint(-1, len(graph.tensors) - 1))
    elif choice == 3 and graph.nodes:
        rng.choice(graph.nodes).op_type = rng.choice((
            "Conv", "MatMul", "Gemm", "Reshape", "Softmax", "If", "Loop", "Scan", "MaxPool", "Concat",
            "Split", "Gather", "Slice", "Resize", "QuantizeLinear", "Cast", "NoSuchOp", "Identity"))
    elif choice == 4 and graph.nodes:
        node = rng.choice(graph.nodes)
        name = rng.choice(list(node.attributes) + ["axis", "kernel_shape", "pads", "perm", "to", "body"])
        node.attributes[name] = rng.choice((
            ir.Attribute(ir.AttributeType.INT, rng.choice(INTERESTING_INTS[:19])),
            ir.Attribute(ir.AttributeType.INTS, [rng.choice(INTERESTING_INTS[:19]) for _ in range(rng.randint(0, 5))]),
            ir.Attribute(ir.AttributeType.FLOAT, float("nan")),
            ir.Attribute(ir.AttributeType.STRING, b"\xff\xfe"),
            ir.Attribute(ir.AttributeType.GRAPH, rng.randint(1, 3)),
            ir.Attribute(ir.AttributeType.STRINGS, []),
        ))
    elif choice == 5 and graph.nodes:
        position = rng.randrange(len(graph.nodes))
        if rng.random() < 0.5:
            del graph.nodes[position]
        else:
            graph.nodes.insert(rng.randrange(len(graph.nodes) + 1), graph.nodes[position])
    elif choice == 6:
        target = rng.choice((graph.inputs, graph.outputs))
        if target and rng.random() < 0.5:
            del target[rng.randrange(len(target))]
        else:
            target.append(rng.randrange(len(graph.tensors)) if graph.tensors else 0)
    elif choice == 7:
        constants = [t for t in graph.tensors if t.quant is not None or t.data is not None]
        if constants:
            tensor = rng.choice(constants)
            if tensor.quant is not None:
                tensor.quant.axis = rng.choice((None, -5, -1, 0, 1, 7))
                tensor.quant.block_size = rng.choice((0, 0, 1, 2, -1, 1 << 30))
            else:
                tensor.data = None  # an initializer turned into a value nobody produces
    else:
        model.opset_imports[""] = rng.choice((1, 6, 11, 13, 17, 21, 23, 99, -1, 1 << 40))
    try:
        return to_bytes(model)
    except Exception:  # noqa: BLE001 - the writer refuses the edit (trusted input): use a byte-level edit
        return None


def _run_lite(data: bytes, options: dict[str, Any]) -> None:
    import lite

    lite.Model.load(data, device="numpy")


# ----- ONNX ---------------------------------------------------------------------------------------


def _onnx_seeds() -> list[Seed]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def model(nodes, inputs, outputs, initializers, opset=17) -> bytes:
        graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()

    def init(name: str, array: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(array, name)

    conv_bn = model(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
         helper.make_node("Relu", ["n"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
         helper.make_node("Softmax", ["logits"], ["y"], axis=-1)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [init("w", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)),
         init("s", np.ones(4, np.float32)), init("b", np.zeros(4, np.float32)),
         init("m", np.full(4, 0.1, np.float32)), init("v", np.full(4, 2.0, np.float32)),
         init("fw", rng.standard_normal((3, 4)).astype(np.float32)), init("fb", np.zeros(3, np.float32))],
    )
    shapes = model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
         helper.make_node("Slice", ["t", "starts", "ends", "axes"], ["s"]),
         helper.make_node("Concat", ["s", "s"], ["c"], axis=0),
         helper.make_node("Cast", ["c"], ["i"], to=TensorProto.INT64),
         helper.make_node("ReduceSum", ["i", "axes"], ["y"], keepdims=1)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [init("shape", np.array([3, 4], np.int64)), init("starts", np.array([1], np.int64)),
         init("ends", np.array([3], np.int64)), init("axes", np.array([0], np.int64))],
    )
    branch = lambda op, name: helper.make_graph(
        [helper.make_node(op, ["a", "a"], [name])], f"{name}_graph", [],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])])
    subgraph = model(
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch("Add", "t"), else_branch=branch("Mul", "e"))],
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [],
    )
    return [Seed("conv_bn", conv_bn), Seed("shapes", shapes), Seed("if", subgraph),
            Seed("ops_conv", (FIXTURES / "ops_conv.onnx").read_bytes())]


def _mutate_protobuf(message_type: Callable[[], Any]) -> Callable[[bytes, random.Random], bytes | None]:
    def mutate(data: bytes, rng: random.Random) -> bytes | None:
        message = message_type()
        message.ParseFromString(data)
        mutate_message(message, rng, edits=rng.choice((1, 1, 1, 2, 3)))
        return message.SerializePartialToString()

    return mutate


def _onnx_model() -> Any:
    import onnx

    return onnx.ModelProto()


def _run_onnx(data: bytes, options: dict[str, Any]) -> None:
    import converter
    from lite.format import load, to_bytes

    model = converter.convert_model(data)
    load(to_bytes(model))  # whatever the converter accepts, it writes as a file the runtime reads


# ----- MINDIR ------------------------------------------------------------------------------------


def _mindir_seeds() -> list[Seed]:
    import json

    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    key = bytes.fromhex(manifest.get("aes_key_hex", "000102030405060708090a0b0c0d0e0f"))
    seeds = [Seed(name, (FIXTURES / f"{name}.mindir").read_bytes())
             for name in ("ops_activations", "ops_shapes", "ops_conv", "ops_transformer", "ops_unet", "ops_pad",
                          "ops_lstm")]
    seeds.append(Seed("ops_conv_cbc", (FIXTURES / "ops_conv_cbc.mindir").read_bytes(), {"dec_key": key}))
    return seeds


def _mindir_model() -> Any:
    from train._generated import mind_ir_pb2

    return mind_ir_pb2.ModelProto()


def _mutate_mindir(data: bytes, rng: random.Random) -> bytes | None:
    from converter.mindspore.encryption import encryption_mode

    if encryption_mode(data) is not None:
        return None  # field-level edits need the plaintext; encrypted seeds get byte-level edits
    return _mutate_protobuf(_mindir_model)(data, rng)


def _run_mindir(data: bytes, options: dict[str, Any]) -> None:
    import converter

    path = Scratch.path("input.mindir")
    path.write_bytes(data)
    converter.convert_model(str(path), **options)


# ----- .ckpt -------------------------------------------------------------------------------------


def _ckpt_seeds() -> list[Seed]:
    from train.checkpoint import serialize

    entries = [
        ("conv.weight", np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)),
        ("bn.moving_mean", np.zeros(3, np.float16)),
        ("step", np.array(7, np.int32)),
        ("ids", np.arange(5, dtype=np.int64)),
        ("mask", np.array([True, False])),
        ("note", "epoch 3"),
    ]
    sliced = [("big", np.arange(40, dtype=np.float64).reshape(5, 8))]
    resnet = (FIXTURES / "resnet.ckpt").read_bytes()
    return [
        Seed("mixed", serialize(entries)),
        Seed("mixed_crc", serialize(entries, crc_check=True)),
        Seed("sliced", serialize(sliced, slice_bytes=64)),
        Seed("resnet_plain", resnet[:-17] if resnet[-17:-10] == b"crc_num" else resnet),
    ]


def _mutate_ckpt(data: bytes, rng: random.Random) -> bytes | None:
    """Field-level edits of the messages; a CRC appendix is recomputed so the edit reaches the decoder."""
    import zlib

    from train._generated import checkpoint_pb2
    from train.checkpoint import CRC_BYTES, CRC_MARK

    has_crc = data[-17:-10] == CRC_MARK
    body = data[:-17] if has_crc else data
    body = _mutate_protobuf(checkpoint_pb2.Checkpoint)(body, rng)
    if has_crc:
        body += CRC_MARK + zlib.crc32(body).to_bytes(CRC_BYTES, "big")
    return body


def _run_ckpt(data: bytes, options: dict[str, Any]) -> None:
    from train.checkpoint import load_checkpoint

    path = Scratch.path("input.ckpt")
    path.write_bytes(data)
    load_checkpoint(path)


# ----- registry ----------------------------------------------------------------------------------


def _lite_target() -> Target:
    from lite.errors import ModelFormatError, UnsupportedOpError

    return Target("lite", _lite_seeds(), _run_lite, (ModelFormatError, UnsupportedOpError), _mutate_lite)


def _onnx_target() -> Target:
    from converter.errors import ConverterError

    return Target("onnx", _onnx_seeds(), _run_onnx, (ConverterError,), _mutate_protobuf(_onnx_model))


def _mindir_target() -> Target:
    from converter.errors import ConverterError

    return Target("mindir", _mindir_seeds(), _run_mindir, (ConverterError,), _mutate_mindir)


def _ckpt_target() -> Target:
    from train.errors import CheckpointError

    return Target("ckpt", _ckpt_seeds(), _run_ckpt, (CheckpointError,), _mutate_ckpt)


def _surface(name: str) -> Callable[[], Target]:
    def target() -> Target:
        from tests.fuzz import surfaces

        return getattr(surfaces, name)()

    return target


TARGETS: dict[str, Callable[[], Target]] = {
    "lite": _lite_target,
    "onnx": _onnx_target,
    "mindir": _mindir_target,
    "ckpt": _ckpt_target,
    "lite-path": _surface("lite_path_target"),  # tests/fuzz/surfaces.py
    "lite-run": _surface("lite_run_target"),
    "lite-cli": _surface("lite_cli_target"),
}
