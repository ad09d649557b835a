"""Cases where ONNX Runtime's CPU provider and the numpy engine disagree, and the numpy engine is
the one that matches onnx's reference outputs (each case passes test_case_on_the_numpy_engine).

Kept by hand: a new entry needs the case checked against the reference data first.
"""

ONNXRUNTIME_DIFFERS: dict[str, str] = {
    "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal":
        "ONNX Runtime's qk_matmul_output omits the causal mask the reference applies",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal":
        "ONNX Runtime's qk_matmul_output omits the causal mask the reference applies",
    "test_dft": "ONNX Runtime's DFT differs from the reference outputs beyond float32 rounding",
    "test_dft_axis": "ONNX Runtime's DFT differs from the reference outputs beyond float32 rounding",
    "test_dft_rfft": "ONNX Runtime's DFT differs from the reference outputs beyond float32 rounding",
    "test_dft_opset19": "ONNX Runtime's DFT differs from the reference outputs beyond float32 rounding",
    "test_dft_axis_opset19": "ONNX Runtime's DFT differs from the reference outputs beyond float32 rounding",
    "test_dft_rfft_opset19": "ONNX Runtime's DFT differs from the reference outputs beyond float32 rounding",
    "test_maxunpool_export_with_output_shape":
        "ONNX Runtime places the unpooled block differently from the reference when output_shape is larger",
    "test_resize_downsample_scales_linear_align_corners":
        "ONNX Runtime's align_corners downsampling differs from the reference output",
    "test_resize_downsample_scales_cubic_align_corners":
        "ONNX Runtime's align_corners downsampling differs from the reference output",
    # ONNX Runtime refuses these at run time (a KernelError through lite); the reference runs them.
    "test_attention_4d_diff_heads_mask4d_padded_kv":
        "ONNX Runtime rejects an attention mask padded beyond past + current sequence length",
    "test_convinteger_with_padding": "ONNX Runtime's ConvInteger supports only a per-tensor weight zero point",
    "test_reduce_max_empty_set_bool": "ONNX Runtime's ReduceMax is not defined on an empty bool set",
}
