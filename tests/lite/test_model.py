"""lite.Model: loading, signatures, input validation, concurrency, the edge install."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, save, to_bytes


def matmul_model(tmp_path=None):
    b = GraphBuilder("mm")
    x = b.input("x", np.float32, ["N", 4])
    w = b.constant("w", np.arange(8, dtype=np.float32).reshape(4, 2))
    y = b.node("MatMul", [x, w], outputs=["y"])
    b.output(y, np.float32, ["N", 2])
    model = b.build({"labels": '["a", "b"]'})
    if tmp_path is None:
        return to_bytes(model)
    save(model, tmp_path / "mm.lite")
    return tmp_path / "mm.lite"


def test_load_from_path_and_bytes_and_predict(tmp_path):
    for source in (matmul_model(tmp_path), matmul_model()):
        model = lite.Model.load(source)
        x = np.ones((3, 4), np.float32)
        out = model.predict({"x": x})
        np.testing.assert_allclose(out["y"], x @ np.arange(8, dtype=np.float32).reshape(4, 2))
        np.testing.assert_allclose(model(x), out["y"])
        assert model.metadata["labels"] == '["a", "b"]'


def test_signature():
    model = lite.Model.load(matmul_model())
    assert model.inputs == [lite.TensorSpec("x", np.dtype(np.float32), ("N", 4))]
    assert model.outputs == [lite.TensorSpec("y", np.dtype(np.float32), ("N", 2))]
    assert "x: float32['N', 4]" in repr(model)


@pytest.mark.parametrize(
    "feeds, message",
    [
        ({}, "missing 'x'"),
        ({"x": np.ones((1, 4), np.float32), "z": 1}, "unknown 'z'"),
        ({"x": np.ones((1, 4), np.float64)}, r"dtype float64, the model expects float32 \(convert with .astype\(np.float32\)\)"),
        ({"x": np.ones((4,), np.float32)}, "rank 1 .*expects rank 2"),
        ({"x": np.ones((1, 5), np.float32)}, "size 5 on axis 1 .*expects 4"),
        ({"x": [["a"] * 4]}, "cannot be converted to float32"),
    ],
)
def test_bad_inputs_are_typed_and_precise(feeds, message):
    model = lite.Model.load(matmul_model())
    with pytest.raises(lite.InvalidInputError, match=message):
        model.predict(feeds)


def test_numbers_given_for_a_string_input_ask_for_text():
    b = GraphBuilder("labels")
    words = b.input("words", object, ["N"])
    b.output(b.node("Identity", [words], outputs=["same"]), object, ["N"])
    model = lite.Model.load(to_bytes(b.build()))
    with pytest.raises(lite.InvalidInputError, match=r"has dtype int64, the model expects strings: pass an array of str"):
        model.predict({"words": np.array([1, 2])})
    assert model.predict({"words": np.array(["a", "b"])})["same"].tolist() == ["a", "b"]


def test_lists_are_converted_to_the_model_dtype():
    model = lite.Model.load(matmul_model())
    assert model.predict({"x": [[1, 0, 0, 0]]})["y"].dtype == np.float32


def test_inputs_may_disagree_on_a_symbolic_dimension_as_in_onnx_runtime():
    # optimum's merged decoders feed a cache of length 0 beside a mask of the real length, both
    # of one named dimension; ONNX Runtime runs them, so must lite.
    b = GraphBuilder("add")
    x = b.input("a", np.float32, ["N", 2])
    b.input("b", np.float32, ["N", 2])  # shares N with "a" but feeds nothing
    b.output(b.node("MatMul", [x, b.constant("w", np.eye(2, dtype=np.float32))]), np.float32, ["N", 2])
    model = lite.Model.load(to_bytes(b.build()))
    out = model.predict({"a": np.ones((2, 2), np.float32), "b": np.ones((3, 2), np.float32)})
    assert out[model.outputs[0].name].shape == (2, 2)


def test_a_run_that_fails_on_disagreeing_inputs_names_the_dimension():
    b = GraphBuilder("add")
    x = b.input("a", np.float32, ["N", 2])
    y = b.input("b", np.float32, ["N", 2])
    b.output(b.node("Add", [x, y]), np.float32, ["N", 2])
    model = lite.Model.load(to_bytes(b.build()))
    with pytest.raises(lite.InvalidInputError, match="dimension 'N' is 3 on input 'b' axis 0 but 2 on 'a' axis 0"):
        model.predict({"a": np.ones((2, 2), np.float32), "b": np.ones((3, 2), np.float32)})


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_an_index_past_a_table_is_the_inputs_fault_on_every_engine(device):
    # A server answers INVALID_ARGUMENT for it, not INTERNAL: the model runs on other ids.
    if device == "cpu":
        pytest.importorskip("onnxruntime")
    b = GraphBuilder("embedding")
    ids = b.input("ids", np.int64, ["N"])
    table = b.constant("table", np.arange(40, dtype=np.float32).reshape(10, 4))
    b.output(b.node("Gather", [table, ids], axis=0), np.float32, ["N", 4])
    model = lite.Model.load(to_bytes(b.build()), device=device)
    np.testing.assert_array_equal(model.predict({"ids": np.array([9])})[model.outputs[0].name][0], [36, 37, 38, 39])
    with pytest.raises(lite.InputValueError) as caught:
        model.predict({"ids": np.array([5000])})
    assert isinstance(caught.value, lite.InvalidInputError) and isinstance(caught.value, lite.KernelError)


@pytest.mark.parametrize("device", ["numpy", "auto"])
def test_a_deleted_model_frees_its_engine_and_weights_without_waiting_for_the_collector(tmp_path, device):
    # An edge app reloading a 400 MB model held every copy until a full collection: the numpy
    # engine and what it kept of its constants referred to each other.
    import gc
    import weakref

    path = matmul_model(tmp_path)
    gc.disable()
    try:
        model = lite.Model.load(path, device=device)
        model.predict({model.inputs[0].name: np.ones((1, *model.inputs[0].shape[1:]), np.float32)})
        engine, graph = weakref.ref(model.engine), weakref.ref(model.ir.main)
        del model
        assert engine() is None and graph() is None
    finally:
        gc.enable()


def test_onnx_runtime_options_are_set_aside_where_auto_finds_no_onnx_runtime(tmp_path, monkeypatch):
    # Code written for any machine (cache_dir=None, as docs/runtime.md shows) failed on the edge
    # install with "options cache_dir apply to ONNX Runtime devices, not to device='numpy'".
    import lite.model

    monkeypatch.setattr(lite.model, "_ort_device", lambda: None)
    monkeypatch.setattr(lite.model, "_best_device", lambda model: "numpy")
    model = lite.Model.load(matmul_model(tmp_path), cache_dir=None, optimization="all", int8_compute="auto")
    assert model.device == "numpy"
    with pytest.raises(TypeError, match="unknown option.*optimisation"):
        lite.Model.load(matmul_model(tmp_path), optimisation="all")


def test_bad_arguments():
    with pytest.raises(ValueError, match="device must be one of"):
        lite.Model.load(matmul_model(), device="tpu")
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        lite.Model.load(matmul_model(), threads=0)


def test_the_default_device_runs_a_text_model_with_a_node_only_onnx_runtime_has(tmp_path):
    # scikit-learn's text pipelines tokenize with com.microsoft's Tokenizer: the numpy engine,
    # where string models go by default, has no kernel for it, ONNX Runtime has.
    pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper

    import converter

    tokenize = helper.make_node("Tokenizer", ["text"], ["tokens"], domain="com.microsoft", mark=0,
                                mincharnum=1, pad_value="#", separators=[" "])
    count = helper.make_node("Shape", ["tokens"], ["shape"])
    graph = helper.make_graph([tokenize, count], "words", [helper.make_tensor_value_info("text", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, tmp_path / "m.onnx")
    converter.convert(tmp_path / "m.onnx", tmp_path / "m.lite", verify=False)
    with pytest.raises(lite.UnsupportedOpError):
        lite.Model.load(tmp_path / "m.lite", device="numpy")
    loaded = lite.Model.load(tmp_path / "m.lite")
    assert loaded.device == "cpu"
    out = loaded.predict({"text": np.array(["a bb ccc", "dd"], dtype=object)})
    assert out["shape"].tolist() == [2, 3]


def test_unsupported_ops_are_listed_all_at_once():
    b = GraphBuilder("custom")
    x = b.input("x", np.float32, [2])
    y = b.node("Frobnicate", [x], domain="com.example")
    z = b.node("Twiddle", [y], domain="com.example")
    b.output(z)
    model = b.build()
    model.opset_imports["com.example"] = 1
    with pytest.raises(lite.UnsupportedOpError, match=r"2 node\(s\)(.|\n)*Frobnicate(.|\n)*Twiddle"):
        lite.Model.load(to_bytes(model))


def test_concurrent_predict_is_safe():
    model = lite.Model.load(matmul_model())
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(64)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda x: model.predict({"x": x})["y"], batches))
    w = np.arange(8, dtype=np.float32).reshape(4, 2)
    for x, y in zip(batches, results):
        # float32 (a GPU sums in another order: an ulp of the terms, where they cancel; TF32
        # arithmetic would be 1e-3 off)
        np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_import_lite_pulls_in_no_heavy_dependency():
    code = ("import sys, lite\n"
            "heavy = [m for m in ('onnx', 'onnxruntime', 'grpc', 'google.protobuf') if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class FakeCudaTensor:
    """Speaks the DLPack device protocol as a CUDA tensor does (shape, dtype, device type 2)."""

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype

    def __dlpack_device__(self):
        return (2, 0)


def test_device_arrays_are_recognised_and_validated_without_copies():
    from lite.device_arrays import device_array_spec, is_device_array

    assert not is_device_array(np.ones(3))
    assert is_device_array(FakeCudaTensor((2, 4), "torch.float32"))
    assert device_array_spec(FakeCudaTensor((2, 4), "torch.float16")) == ((2, 4), np.dtype(np.float16))
    model = lite.Model.load(matmul_model(), device="numpy")
    with pytest.raises(lite.InvalidInputError, match="on the GPU.*float16, the model expects float32"):
        model.predict({"x": FakeCudaTensor((2, 4), "torch.float16")})
    with pytest.raises(lite.InvalidInputError, match="size 5 on axis 1"):
        model.predict({"x": FakeCudaTensor((2, 5), np.float32)})


def test_weight_only_dequantization_and_fp16_casts_run_once_at_load():
    rng = np.random.default_rng(5)
    b = GraphBuilder("int8_weight", opset=21)
    x = b.input("x", np.float32, ["N", 4])
    w = b.node("DequantizeLinear", [b.constant("w_q", rng.integers(-127, 128, (4, 3)).astype(np.int8)),
                                   b.constant("w_scale", np.float32(0.05))])
    h = b.node("MatMul", [x, w])
    v = b.node("Cast", [b.constant("v_fp16", rng.standard_normal((3, 2)).astype(np.float16))], to=1)
    y = b.node("MatMul", [h, v], outputs=["y"])
    b.output(y, np.float32, ["N", 2])
    model = lite.Model.load(to_bytes(b.build()), device="numpy")
    assert [s.node.op_type for s in model.engine.plans[0].steps] == ["MatMul", "MatMul"]
    xs = rng.standard_normal((2, 4)).astype(np.float32)
    tensors = {t.name: t.data for t in b.graph.tensors}
    weights = tensors["w_q"].astype(np.float32) * np.float32(0.05)
    expected = xs @ weights @ tensors["v_fp16"].astype(np.float32)
    np.testing.assert_allclose(model(xs), expected, rtol=1e-5)


def test_pinned_empty_needs_a_cuda_library_and_says_so():
    try:
        array = lite.pinned_empty((2, 3), "float16")
    except lite.EngineUnavailableError as err:
        assert "PyTorch or CuPy" in str(err)
    else:  # a machine with CUDA: a writable numpy array of the asked shape and type
        assert array.shape == (2, 3) and array.dtype == np.float16 and array.flags.writeable
        array[:] = 1


def test_an_arena_too_large_to_allocate_does_not_fail_a_finished_run(monkeypatch):
    """After a run the numpy engine plans one arena for the next; when that allocation fails the
    run's outputs are still returned and later runs use fresh buffers (a bare MemoryError once
    escaped predict here)."""
    from lite.engines import arena
    from tests.lite.engines.models import cnn

    model = lite.Model.load(cnn(), device="numpy")
    real_empty = np.empty

    def refuse_arenas(shape, dtype=float, *args, **kwargs):
        if sys._getframe(1).f_code.co_name == "replan":  # the arena only, not the kernels' buffers
            raise MemoryError("refused for the test")
        return real_empty(shape, dtype, *args, **kwargs)

    data = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = model(data)  # planned once already, before the arena allocation fails
    monkeypatch.setattr(arena.np, "empty", refuse_arenas)
    model.engine.pool = arena.BufferPool()  # a fresh plan to make: the next run records, then plans
    for _ in range(3):
        np.testing.assert_allclose(model(data), expected, rtol=1e-6)


def test_numpy_engine_outputs_never_alias_the_callers_inputs():
    """An output passed through (Identity, Reshape) is a copy: refilling the input buffer for the
    next call does not change an answer already returned, as on ONNX Runtime."""
    b = GraphBuilder("pass", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    b.output(b.node("Identity", [x], outputs=["y"]), np.float32, ["N", 4])
    b.output(b.node("Reshape", [x, b.constant("s", np.array([-1], np.int64))], outputs=["z"]), np.float32, ["M"])
    model = lite.Model.load(to_bytes(b.build()), device="numpy")
    frame = np.ones((2, 4), np.float32)
    out = model.predict({"x": frame})
    frame[...] = 5
    assert out["y"].max() == 1 and out["z"].max() == 1
