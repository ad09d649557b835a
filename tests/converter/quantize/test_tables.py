"""Embedding tables and large Add/Mul constants stored as int8 (converter.quantize.tables), in
every int8 mode: the table as int8 rows with one scale per row, gathered as int8 and scaled after
the Gather; a tied table stored once with its LM head."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from passtools import make_model, rng

import converter
import lite
from converter.quantize.scheme import quantize_weight
from lite.format import load
from lite.format.onnx.lower import lower_model

VOCAB, WIDTH, LENGTH = 500, 32, 8
MODES = {"int8-dynamic": {}, "int8-weight": {}, "int8": None}  # int8: calibration data added per model


def _table(*shape, seed=0):
    return (rng(seed).normal(size=shape) * 0.05).astype(np.float32)


def _text_model():
    """Word and position embeddings added, then a dense layer (BERT's embedding block in small)."""
    return make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (int64[N, {LENGTH}] ids, int64[N, {LENGTH}] positions) => (float[N, {LENGTH}, 16] output) {{
            words = Gather (table, ids)
            where = Gather (position_table, positions)
            h = Add (words, where)
            output = MatMul (h, w)
        }}""",
        table=_table(VOCAB, WIDTH), position_table=_table(64, WIDTH, seed=1), w=_table(WIDTH, 16, seed=2) * 20,
    )


def _text_feeds(seed: int, batch: int = 4) -> dict[str, np.ndarray]:
    r = rng(seed)
    positions = np.tile(np.arange(LENGTH, dtype=np.int64), (batch, 1))
    return {"ids": r.integers(0, VOCAB, (batch, LENGTH)), "positions": positions}


def _convert(model, path, mode: str, feeds=None):
    options = {"calibration_data": [feeds]} if mode == "int8" else {}
    return converter.convert(model, path, quant=mode, **options)


def _constants(path) -> list:
    return [t for t in load(str(path)).main.tensors if t.data is not None]


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("mode", list(MODES))
def test_tables_are_stored_as_int8_rows_with_one_scale_per_row(mode, tmp_path):
    converter.convert(_text_model(), tmp_path / "float.lite")
    report = _convert(_text_model(), tmp_path / "int8.lite", mode, _text_feeds(0, batch=16))
    constants = {(t.dtype.name, tuple(t.data.shape)) for t in _constants(tmp_path / "int8.lite")}
    for rows in (VOCAB, 64):
        assert ("INT8", (rows, WIDTH)) in constants and ("FLOAT", (rows, 1)) in constants
        assert ("FLOAT", (rows, WIDTH)) not in constants
    assert not [d for d in report.quantization.declined if d[1] == "Gather"], report.quantization.declined
    expected = lite.Model.load(tmp_path / "float.lite", device="numpy").predict(_text_feeds(1))["output"]
    for device in ("numpy", "cpu"):
        got = lite.Model.load(tmp_path / "int8.lite", device=device).predict(_text_feeds(1))["output"]
        assert _cosine(got, expected) > 0.999, (device, _cosine(got, expected))


def test_gathered_rows_are_the_per_row_int8_values_exactly(tmp_path):
    table = _table(VOCAB, WIDTH)
    model = make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (int64[N, {LENGTH}] ids) => (float[N, {LENGTH}, {WIDTH}] output) {{
            output = Gather (table, ids)
        }}""", table=table)
    _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    values, params = quantize_weight(table, 0)
    ids = rng(3).integers(-VOCAB, VOCAB, (2, LENGTH))  # negative indices count from the end
    expected = values[ids].astype(np.float32) * params.scale[ids][..., None]
    for device in ("numpy", "cpu"):
        got = lite.Model.load(tmp_path / "int8.lite", device=device)(ids)
        np.testing.assert_array_equal(got, expected, err_msg=device)


def test_onnxruntime_gathers_int8_rows_instead_of_dequantizing_the_table(tmp_path):
    _convert(_text_model(), tmp_path / "int8.lite", "int8-dynamic")
    lowered = lower_model(load(str(tmp_path / "int8.lite")), external_weights=False).model
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(lowered.SerializeToString(), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(tmp_path / "optimized.onnx")).graph
    initializers = {init.name: init for init in graph.initializer}
    big = {name for name, init in initializers.items() if int(np.prod(init.dims)) >= 64 * WIDTH}
    assert not [n for n in graph.node if n.op_type == "DequantizeLinear" and set(n.input) & big]
    gathered = [initializers[n.input[0]] for n in graph.node if n.op_type == "Gather" and n.input[0] in big]
    assert len(gathered) == 2 and all(init.data_type == onnx.TensorProto.INT8 for init in gathered)


_TIED = {
    # GPT-2: the LM head multiplies by the table transposed (the converter folds the Transpose)
    "matmul": (f"""<ir_version: 8, opset_import: ["" : 17]>
        g (int64[N, {LENGTH}] ids) => (float[N, {LENGTH}, {VOCAB}] logits) {{
            h = Gather (table, ids)
            r = Relu (h)
            head = Transpose <perm: ints = [1, 0]> (table)
            logits = MatMul (r, head)
        }}""", (3, LENGTH)),
    # the same initializer read by the Gather and by a Gemm with transB
    "gemm": (f"""<ir_version: 8, opset_import: ["" : 17]>
        g (int64[N] ids) => (float[N, {VOCAB}] logits) {{
            h = Gather (table, ids)
            r = Relu (h)
            logits = Gemm <transB: int = 1> (r, table)
        }}""", (3,)),
}


@pytest.mark.parametrize("head", list(_TIED))
def test_a_tied_table_is_stored_once_with_its_lm_head(head, tmp_path):
    text, ids_shape = _TIED[head]
    model = make_model(text, table=_table(VOCAB, WIDTH))
    converter.convert(model, tmp_path / "float.lite")
    report = _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    assert len(report.quantization.quantized_nodes) == 2  # the Gather and the head
    large = [(t.dtype.name, t.data.shape) for t in _constants(tmp_path / "int8.lite") if t.data.size >= VOCAB * WIDTH]
    assert len(large) == 1 and large[0][0] == "INT8", large
    ids = rng(4).integers(0, VOCAB, ids_shape)
    expected = lite.Model.load(tmp_path / "float.lite", device="numpy")(ids)
    results = {device: lite.Model.load(tmp_path / "int8.lite", device=device)(ids) for device in ("numpy", "cpu")}
    for device, got in results.items():
        assert _cosine(got, expected) > 0.999, (device, _cosine(got, expected))
    np.testing.assert_allclose(results["numpy"], results["cpu"], atol=1e-4 * np.ptp(results["cpu"]))


def test_tables_that_stay_float(tmp_path):
    model = make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (int64[N] ids, int64[N] columns, float[{VOCAB}, {WIDTH}] x) => (float[N, {WIDTH}] a, float[{VOCAB}, N] b,
                                                                         float[N, 16] c, float[{VOCAB}, {WIDTH}] d) {{
            a = Gather (shared, ids)
            b = Gather <axis: int = 1> (by_column, columns)
            c = Gather (small, ids)
            d = Mul (x, shared)
        }}""",
        shared=_table(VOCAB, WIDTH), by_column=_table(VOCAB, WIDTH, seed=1), small=_table(10, 16, seed=2))
    report = _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    floats = {tuple(t.data.shape) for t in _constants(tmp_path / "int8.lite") if t.dtype.name == "FLOAT"}
    assert {(VOCAB, WIDTH), (10, 16)} <= floats
    assert not [t for t in _constants(tmp_path / "int8.lite") if t.dtype.name == "INT8"]
    reasons = " | ".join(reason for _, op, reason in report.quantization.declined if op == "Gather")
    assert "also read by Mul" in reasons and "axis other than 0" in reasons


def test_large_addends_are_stored_int8_per_last_axis(tmp_path):
    """A ViT's position embeddings (1, 65, 64), added to the patch embeddings."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 65, 64] x) => (float[N, 65, 64] output) {
            output = Add (x, position)
        }""", position=_table(1, 65, 64))
    x = rng(5).normal(size=(2, 65, 64)).astype(np.float32)
    for mode in MODES:
        _convert(model, tmp_path / f"{mode}.lite", mode, {"x": x})
        stored = {(t.dtype.name, t.data.shape) for t in _constants(tmp_path / f"{mode}.lite")}
        assert ("INT8", (1, 65, 64)) in stored and ("FLOAT", (1, 1, 64)) in stored, mode
        assert ("FLOAT", (1, 65, 64)) not in stored, mode
        for device in ("numpy", "cpu"):
            got = lite.Model.load(tmp_path / f"{mode}.lite", device=device)(x)
            np.testing.assert_allclose(got, x + _table(1, 65, 64), atol=0.05 * 4 / 127, err_msg=f"{mode} {device}")


def test_a_coordinate_grid_added_to_boxes_stays_float(tmp_path):
    """A detector's anchor points (YOLO's (1, 2, cells) grid of cell centres) beside a learned addend
    of the same shape: the grid keeps its exact coordinates in every int8 mode, the other is int8."""
    cells = 20
    ys, xs = np.meshgrid(np.arange(cells) + 0.5, np.arange(cells) + 0.5, indexing="ij")
    anchors = np.stack([xs.ravel(), ys.ravel()])[None].astype(np.float32)  # (1, 2, 400), 0.5 .. 19.5
    model = make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 2, {cells * cells}] x) => (float[N, 2, {cells * cells}] output) {{
            boxes = Add (x, anchors)
            output = Add (boxes, learned)
        }}""", anchors=anchors, learned=_table(1, 2, cells * cells))
    x = rng(7).normal(size=(2, 2, cells * cells)).astype(np.float32)
    for mode in MODES:
        _convert(model, tmp_path / f"{mode}.lite", mode, {"x": x})
        constants = _constants(tmp_path / f"{mode}.lite")
        assert any(t.dtype.name == "FLOAT" and np.array_equal(t.data, anchors) for t in constants), mode
        assert ("INT8", anchors.shape) in {(t.dtype.name, t.data.shape) for t in constants}, mode


def test_int8_dynamic_stores_conv_weights_int8_and_quantizes_silu_gated_matmuls(tmp_path):
    """An audio front end (Conv) and a Llama-style SiLU-gated projection, in int8-dynamic."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 16, 50] x) => (float[N, 50, 32] output) {
            c = Conv <pads: ints = [1, 1]> (x, conv_w, conv_b)
            t = Transpose <perm: ints = [0, 2, 1]> (c)
            up = MatMul (t, w1)
            gate = Sigmoid (up)
            h = Mul (up, gate)
            output = MatMul (h, w2)
        }""",
        conv_w=_table(32, 16, 3) * 10, conv_b=_table(32), w1=_table(32, 64) * 10, w2=_table(64, 32) * 10)
    converter.convert(model, tmp_path / "float.lite")
    report = _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    assert not report.quantization.declined, report.quantization.declined
    ir = lite.Model.load(tmp_path / "int8.lite", device="numpy").ir
    ops = [node.op_type for node in ir.main.nodes]
    assert ops.count("MatMulInteger") == 2 and "Sigmoid" in ops
    assert not [t for t in ir.main.tensors if t.data is not None and t.dtype.name == "FLOAT" and t.data.size >= 256]
    x = rng(6).normal(size=(2, 16, 50)).astype(np.float32)
    _close_to_float_on_both_engines(tmp_path, x, 0.999)


def test_int8_dynamic_conv_weights_are_folded_at_load_per_channel_at_any_opset(tmp_path):
    """Mul(Cast(W_q), scale) needs no per-axis DequantizeLinear (opset 13), and ONNX Runtime folds it
    into a constant weight when it loads the model, as it would not fold a DequantizeLinear."""
    model = make_model(
        """<ir_version: 7, opset_import: ["" : 12]>
        g (float[N, 16, 50] x) => (float[N, 32, 50] output) {
            output = Conv <pads: ints = [1, 1]> (x, conv_w, conv_b)
        }""", conv_w=_table(32, 16, 3) * np.linspace(0.1, 10, 32, dtype=np.float32)[:, None, None], conv_b=_table(32))
    converter.convert(model, tmp_path / "float.lite")
    _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    stored = {(t.dtype.name, t.data.shape) for t in _constants(tmp_path / "int8.lite")}
    assert ("INT8", (32, 16, 3)) in stored and ("FLOAT", (32, 1, 1)) in stored
    assert ("FLOAT", (32, 16, 3)) not in stored
    lowered = lower_model(load(str(tmp_path / "int8.lite")), external_weights=False).model
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(lowered.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node] == ["Conv"]
    x = rng(7).normal(size=(2, 16, 50)).astype(np.float32)
    _close_to_float_on_both_engines(tmp_path, x, 0.9999)


def test_an_additive_mask_of_minus_infinity_stays_float(tmp_path):
    mask = np.triu(np.full((32, 32), -np.inf, np.float32), k=1)
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 32, 32] x) => (float[N, 32, 32] output) {
            output = Add (x, mask)
        }""", mask=mask)
    _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    assert [t.dtype.name for t in _constants(tmp_path / "int8.lite")] == ["FLOAT"]


def test_int8_dynamic_stores_lstm_weights_int8_per_gate_row(tmp_path):
    hidden = 32
    model = make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[10, N, 16] x) => (float[10, 1, N, {hidden}] output) {{
            output = LSTM <hidden_size: int = {hidden}> (x, w, r, b)
        }}""",
        w=_table(1, 4 * hidden, 16) * 10, r=_table(1, 4 * hidden, hidden, seed=1) * 10, b=_table(1, 8 * hidden, seed=2))
    converter.convert(model, tmp_path / "float.lite")
    _convert(model, tmp_path / "int8.lite", "int8-dynamic")
    stored = {(t.dtype.name, t.data.shape) for t in _constants(tmp_path / "int8.lite")}
    assert {("INT8", (1, 4 * hidden, 16)), ("INT8", (1, 4 * hidden, hidden)), ("FLOAT", (1, 4 * hidden, 1))} <= stored
    x = rng(8).normal(size=(10, 3, 16)).astype(np.float32)
    _close_to_float_on_both_engines(tmp_path, x, 0.999)


def _close_to_float_on_both_engines(folder, x: np.ndarray, cosine: float) -> None:
    """int8.lite on the numpy and ONNX Runtime engines keeps ``cosine`` to float.lite (numpy) on ``x``."""
    expected = lite.Model.load(folder / "float.lite", device="numpy")(x)
    for device in ("numpy", "cpu"):
        got = lite.Model.load(folder / "int8.lite", device=device)(x)
        assert _cosine(got, expected) > cosine, (device, _cosine(got, expected))
