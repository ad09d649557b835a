"""Pooling windows that cover the whole input become global pools.

global_pool
    An ``AveragePool`` or ``MaxPool`` (https://onnx.ai/onnx/operators/onnx__AveragePool.html)
    with one output position per spatial axis whose window spans every input cell computes what
    ``GlobalAveragePool`` / ``GlobalMaxPool`` computes. Exporters write such windows for a
    classifier head on a known feature map: transformers' EfficientNet pools its 2x2 map with a
    640x640 ceil-mode window. The global form says what is meant, runs as one reduction on every
    engine, and stays out of a quantized runtime's windowed kernels (ONNX Runtime's fused
    QLinearAveragePool returns zeros for that ceil-mode window, where its float AveragePool is
    right).

    Declines unless the input's spatial dims are static; the window is undilated, with explicit
    (``NOTSET``) or no (``VALID``) padding, and its single position covers the input; a MaxPool's
    indices output is unread; and, for an AveragePool counting pads (``count_include_pad=1``),
    there are no pads, so the denominator is the input's size.
"""

from __future__ import annotations

import onnx_ir as ir

from converter.passes.base import RewriteRule, RulePass, attribute, describe, replace_output

_GLOBAL = {"AveragePool": "GlobalAveragePool", "MaxPool": "GlobalMaxPool"}


class WholeInputWindow(RewriteRule):
    name = "global_pool"

    def match(self, node: ir.Node) -> ir.Node | None:
        return node if node.domain == "" and node.op_type in _GLOBAL else None

    def check(self, node: ir.Node) -> str | None:
        x = node.inputs[0]
        if x is None or x.shape is None or len(x.shape) < 3:
            return "the input's rank is unknown"
        spatial = list(x.shape)[2:]
        if not all(isinstance(dim, int) for dim in spatial):
            return f"the input's spatial dims {spatial} are not all static"
        if node.op_type == "MaxPool" and len(node.outputs) > 1 and (
                node.outputs[1].uses() or node.outputs[1].is_graph_output()):
            return "its indices output is read"
        auto_pad = attribute(node, "auto_pad", "NOTSET")
        auto_pad = auto_pad.decode(errors="replace") if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad not in ("NOTSET", "VALID"):
            return f"auto_pad {auto_pad} pads by the output size"
        kernel = list(attribute(node, "kernel_shape", []))
        rank = len(spatial)
        if len(kernel) != rank:
            return f"kernel_shape {kernel} does not match {rank} spatial dims"
        if any(d != 1 for d in attribute(node, "dilations", [1] * rank)):
            return "the window is dilated"
        pads = list(attribute(node, "pads", [0] * 2 * rank)) if auto_pad == "NOTSET" else [0] * 2 * rank
        strides = list(attribute(node, "strides", [1] * rank))
        ceil_mode = bool(attribute(node, "ceil_mode", 0))
        if not (all(isinstance(v, int) and v >= 1 for v in kernel + strides) and len(strides) == rank
                and all(isinstance(v, int) and v >= 0 for v in pads) and len(pads) == 2 * rank):
            return f"kernel_shape {kernel}, strides {strides} or pads {pads} are not a valid window"
        for axis, (size, k, stride) in enumerate(zip(spatial, kernel, strides)):
            begin, end = pads[axis], pads[axis + rank]
            span = size + begin + end - k
            if span < 0 and not ceil_mode:
                return f"axis {axis}: the window ({k}) is larger than the padded input ({size + begin + end})"
            positions = (-(-span // stride) if ceil_mode else span // stride) + 1
            if positions != 1:
                return f"axis {axis}: the window takes {positions} positions"
            if k - begin < size:
                return f"axis {axis}: the window ({k} from -{begin}) does not reach the input's end ({size})"
        if node.op_type == "AveragePool" and attribute(node, "count_include_pad", 0) and any(pads):
            return "it counts pads, so its denominator is not the input's size"
        return None

    def rewrite(self, node: ir.Node) -> str:
        op = _GLOBAL[node.op_type]
        graph = node.graph
        pooled = ir.node(op, [node.inputs[0]], name=node.name)
        pooled.outputs[0].dtype = node.outputs[0].dtype
        pooled.outputs[0].shape = node.outputs[0].shape
        graph.insert_before(node, [pooled])
        replace_output(node.outputs[0], pooled.outputs[0])
        graph.remove(node, safe=True)
        return f"{describe(node)} → {op}"


global_pool = RulePass("global_pool", [WholeInputWindow()], __doc__ or "")
