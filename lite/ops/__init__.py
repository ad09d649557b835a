"""numpy kernels, one ONNX operator per module, registered in ``lite.ops.registry.KERNELS``.

Each module below registers its kernels when imported; the list is explicit on purpose (no
scanning of globals), so a kernel exists exactly when its module is named here.
"""

from lite.ops.registry import KERNELS, Kernel, KernelRegistry, kernel

# --- elementwise, activations, reductions, shape, indexing, math (group A) ---
import lite.ops.activations
import lite.ops.arg_max
import lite.ops.arithmetic
import lite.ops.cast
import lite.ops.clip
import lite.ops.comparison
import lite.ops.compress
import lite.ops.concat
import lite.ops.constant
import lite.ops.cum_sum
import lite.ops.depth_to_space
import lite.ops.det
import lite.ops.dropout
import lite.ops.einsum
import lite.ops.elementwise_unary
import lite.ops.erf
import lite.ops.expand
import lite.ops.eye_like
import lite.ops.gather
import lite.ops.gather_nd
import lite.ops.logical
import lite.ops.non_zero
import lite.ops.one_hot
import lite.ops.pad
import lite.ops.range
import lite.ops.reduce
import lite.ops.reshape
import lite.ops.reverse_sequence
import lite.ops.scatter_elements
import lite.ops.scatter_nd
import lite.ops.shape
import lite.ops.slice
import lite.ops.softmax
import lite.ops.split
import lite.ops.squeeze
import lite.ops.tile
import lite.ops.top_k
import lite.ops.transpose
import lite.ops.trilu
import lite.ops.unique
import lite.ops.variadic

# --- convolution, pooling, normalization, matmul, resize, recurrent, control flow, quantized (group B) ---
# (each import registers that module's kernels)
import lite.ops.average_pool  # noqa: F401
import lite.ops.batch_normalization  # noqa: F401
import lite.ops.center_crop_pad  # noqa: F401
import lite.ops.col2im  # noqa: F401
import lite.ops.conv  # noqa: F401
import lite.ops.conv_integer  # noqa: F401
import lite.ops.conv_transpose  # noqa: F401
import lite.ops.dequantize_linear  # noqa: F401
import lite.ops.dynamic_quantize_linear  # noqa: F401
import lite.ops.gemm  # noqa: F401
import lite.ops.global_pool  # noqa: F401
import lite.ops.gru  # noqa: F401
import lite.ops.group_normalization  # noqa: F401
import lite.ops.grid_sample  # noqa: F401
import lite.ops.if_  # noqa: F401
import lite.ops.instance_normalization  # noqa: F401
import lite.ops.layer_normalization  # noqa: F401
import lite.ops.lp_normalization  # noqa: F401
import lite.ops.loop  # noqa: F401
import lite.ops.lp_pool  # noqa: F401
import lite.ops.lrn  # noqa: F401
import lite.ops.lstm  # noqa: F401
import lite.ops.mat_mul  # noqa: F401
import lite.ops.mat_mul_integer  # noqa: F401
import lite.ops.max_pool  # noqa: F401
import lite.ops.max_roi_pool  # noqa: F401
import lite.ops.mean_variance_normalization  # noqa: F401
import lite.ops.non_max_suppression  # noqa: F401
import lite.ops.qlinear_conv  # noqa: F401
import lite.ops.qlinear_mat_mul  # noqa: F401
import lite.ops.quantize_linear  # noqa: F401
import lite.ops.resize  # noqa: F401
import lite.ops.rnn  # noqa: F401
import lite.ops.roi_align  # noqa: F401
import lite.ops.scan  # noqa: F401
import lite.ops.upsample  # noqa: F401

# --- group C: attention, losses, signal, sequences, strings, ml ---
import lite.ops.attention  # noqa: F401
import lite.ops.negative_log_likelihood_loss  # noqa: F401
import lite.ops.softmax_cross_entropy_loss  # noqa: F401
import lite.ops.rms_normalization  # noqa: F401
import lite.ops.rotary_embedding  # noqa: F401
import lite.ops.swiglu  # noqa: F401
import lite.ops.cum_prod  # noqa: F401
import lite.ops.bit_cast  # noqa: F401
import lite.ops.dft  # noqa: F401
import lite.ops.stft  # noqa: F401
import lite.ops.window_functions  # noqa: F401
import lite.ops.mel_weight_matrix  # noqa: F401
import lite.ops.max_unpool  # noqa: F401
import lite.ops.affine_grid  # noqa: F401
import lite.ops.tensor_scatter  # noqa: F401
import lite.ops.linear_attention  # noqa: F401
import lite.ops.causal_conv_with_state  # noqa: F401
import lite.ops.flex_attention  # noqa: F401
import lite.ops.sequence_ops  # noqa: F401
import lite.ops.optional_ops  # noqa: F401
import lite.ops.string_ops  # noqa: F401
import lite.ops.tf_idf_vectorizer  # noqa: F401
import lite.ops.binarizer  # noqa: F401
import lite.ops.array_feature_extractor  # noqa: F401
import lite.ops.label_encoder  # noqa: F401
import lite.ops.tree_ensemble  # noqa: F401

__all__ = ["KERNELS", "Kernel", "KernelRegistry", "kernel"]
