"""Graph passes of the converter, and the default order in which they run.

Each pass is ``pass_(model, context) -> PassResult`` over an ``onnx_ir.Model``, rewriting in
place and reporting what it changed and, for every match it declined, why. The default list is
explicit and ordered; each step prepares the next:

1. ``infer_shapes``: types and shapes of intermediate values (the folds below read ranks and
   static dims).
2. ``constants_to_initializers``: Constant nodes become initializers, so weights look alike.
3. ``remove_identity``: Identity, inference-mode Dropout and nodes that return their input
   unchanged (a Pad by zeros, an identity Transpose, ...) are bypassed.
4. ``fold_constants``: nodes computable at conversion time (incl. Shape/Gather/Expand chains on
   static dims) become initializers; ``remove_identity`` again (a Pad's amounts folded to zeros).
5. ``remove_unused``: dead nodes and unused initializers go (e.g. what folding left behind).
6. ``fold_batchnorm``: BatchNormalization into a preceding Conv/ConvTranspose/Gemm/MatMul(+Add).
7. ``fold_mul_into_weights``: a per-channel constant Mul after a layer into its weights.
8. ``fold_add_into_bias``: a per-channel constant Add after Conv/ConvTranspose/Gemm into the bias
   (after 7, so a Mul + Add pair, e.g. a decomposed BatchNormalization, folds completely).
9. ``batchnorm_to_scale_shift``: any BatchNormalization left becomes one Mul + Add.
10. ``fold_scale_through_relu``: a positive per-channel Mul (+ Add) → Relu → Conv loses the Mul
    into the Conv's weights (after 9: DenseNet's pre-activation BatchNormalizations).
11. ``global_pool``: an AveragePool/MaxPool whose one window covers the whole (static) input
    becomes GlobalAveragePool/GlobalMaxPool.
12. ``fuse_activation``: Relu/Clip/LeakyRelu/Sigmoid/HardSigmoid/HardSwish/Silu after
    Conv/Gemm/MatMul become the node's ``fused_activation`` attribute (last: it must see the
    layers in their final form).
13. ``remove_unused`` again.

``store_weights_fp16`` is not in the default list: ``--fp16`` appends it.
"""

from __future__ import annotations

from converter.passes.base import Pass, PassContext, PassResult, RewriteRule, RulePass, model_names
from converter.passes.batchnorm import batchnorm_to_scale_shift, fold_batchnorm
from converter.passes.cleanup import remove_identity, remove_unused
from converter.passes.constants import constants_to_initializers
from converter.passes.fold_affine import fold_add_into_bias, fold_mul_into_weights
from converter.passes.fold_constants import fold_constants
from converter.passes.fp16 import store_weights_fp16
from converter.passes.fuse_activation import fuse_activation
from converter.passes.global_pool import global_pool
from converter.passes.scale_through_relu import fold_scale_through_relu
from converter.passes.shape_inference import infer_shapes

DEFAULT_PASSES: tuple[Pass, ...] = (
    infer_shapes,
    constants_to_initializers,
    remove_identity,
    fold_constants,
    remove_identity,
    remove_unused,
    fold_batchnorm,
    fold_mul_into_weights,
    fold_add_into_bias,
    batchnorm_to_scale_shift,
    fold_scale_through_relu,
    global_pool,
    fuse_activation,
    remove_unused,
)

PASSES: dict[str, Pass] = {}
for _pass in (*DEFAULT_PASSES, store_weights_fp16):
    _name = getattr(_pass, "name", None) or _pass.__name__
    if _name in PASSES and PASSES[_name] is not _pass:
        raise ValueError(f"pass {_name!r} is registered twice")
    PASSES[_name] = _pass


def pass_name(pass_: Pass) -> str:
    return getattr(pass_, "name", None) or pass_.__name__


def run_passes(model, passes: tuple[Pass, ...] = DEFAULT_PASSES, context: PassContext | None = None) -> list[PassResult]:
    """Run ``passes`` in order on ``model`` (in place); return one result per pass."""
    context = context or PassContext()
    if not context.names:
        context.names = model_names(model)
    return [pass_(model, context) for pass_ in passes]


__all__ = [
    "DEFAULT_PASSES",
    "PASSES",
    "Pass",
    "PassContext",
    "PassResult",
    "RewriteRule",
    "RulePass",
    "batchnorm_to_scale_shift",
    "constants_to_initializers",
    "fold_add_into_bias",
    "fold_batchnorm",
    "fold_constants",
    "fold_mul_into_weights",
    "fuse_activation",
    "infer_shapes",
    "pass_name",
    "remove_identity",
    "remove_unused",
    "run_passes",
    "store_weights_fp16",
]
