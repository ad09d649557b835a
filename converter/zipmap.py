"""Classifier outputs made by ai.onnx.ml's ZipMap, written as the tensor of probabilities they zip.

https://onnx.ai/onnx/operators/onnx_aionnxml_ZipMap.html

skl2onnx, onnxmltools (LightGBM, XGBoost, CatBoost) and sklearn-onnx pipelines end every
classifier by default with a ZipMap: its input is the float tensor of class probabilities
``(N, classes)``, its output a sequence of N maps from class label to probability. The lite format
holds tensors and sequences of tensors, and so do the serving protocols (KServe v2 has no map
type): such a model stopped at import, and the user had to re-export it with
``options={'zipmap': False}``. Here a ZipMap whose sequence is a graph output and read by no node
becomes an Identity of its input: the output keeps its name and holds the same numbers as a
tensor, one column per class in the order of the node's labels, which the converted model keeps
in its ``class_labels`` metadata (JSON: output name -> labels). Verification compares the same
rewrite of the original, run by ONNX Runtime.

A ZipMap read by another node, or maps anywhere else (DictVectorizer's or CastMap's inputs),
are left alone: the import then names them and says what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import onnx

CLASS_LABELS_KEY = "class_labels"
_ML_DOMAINS = ("ai.onnx.ml",)


@dataclass(frozen=True)
class ZippedOutput:
    """A graph output that was a ZipMap's sequence of maps, now the tensor of its probabilities."""

    name: str
    labels: tuple[int | str, ...]

    def note(self) -> str:
        shown = ", ".join(map(repr, self.labels[:8])) + (", ..." if len(self.labels) > 8 else "")
        return (f"output {self.name!r} was a sequence of maps (ZipMap); it is written as the float tensor of "
                f"its probabilities, (N, {len(self.labels)}), one column per class label in the order "
                f"[{shown}], kept in the metadata {CLASS_LABELS_KEY!r}")


def unzip_outputs(proto: onnx.ModelProto) -> list[ZippedOutput]:
    """Rewrite, in ``proto``, each main-graph output made by a ZipMap that no node reads into
    the ZipMap's input tensor under the output's name (see the module docstring); return them."""
    graph = proto.graph
    read = {name for node in graph.node for name in node.input}
    producers = {output: node for node in graph.node for output in node.output}
    known = {value.name: value for value in [*graph.value_info, *graph.input, *graph.output]}
    zipped = []
    for output in graph.output:
        node = producers.get(output.name)
        if (node is None or node.op_type != "ZipMap" or node.domain not in _ML_DOMAINS
                or len(node.input) != 1 or output.name in read):
            continue
        labels = _labels(node)
        if labels is None:
            continue
        source = known.get(node.input[0])
        output.type.CopyFrom(_probabilities_type(source, len(labels)))
        node.op_type, node.domain = "Identity", ""
        del node.attribute[:]
        zipped.append(ZippedOutput(output.name, labels))
    if zipped:
        _import_default_domain(proto)
    return zipped


def _import_default_domain(proto: onnx.ModelProto) -> None:
    """Give ``proto`` an ai.onnx opset for the Identity nodes written here, where it imports
    only ai.onnx.ml (CatBoost's classifiers do: every node of theirs is in that domain), so the
    import does not refuse a node the file never had. The version is the one ONNX released
    alongside the model's ai.onnx.ml version, so nothing in the model is newer than its pair."""
    if any(entry.domain in ("", "ai.onnx") for entry in proto.opset_import):
        return
    ml = max((entry.version for entry in proto.opset_import if entry.domain in _ML_DOMAINS), default=1)
    paired = [row[2] for row in onnx.helper.VERSION_TABLE if row[3] == ml]
    proto.opset_import.append(onnx.helper.make_opsetid("", min(paired) if paired else 13))


def class_labels_metadata(zipped: list[ZippedOutput]) -> dict[str, str]:
    """The converted model's metadata entry for ``zipped`` (none when empty)."""
    if not zipped:
        return {}
    return {CLASS_LABELS_KEY: json.dumps({output.name: list(output.labels) for output in zipped})}


def _labels(node: onnx.NodeProto) -> tuple[int | str, ...] | None:
    for attribute in node.attribute:
        if attribute.name == "classlabels_int64s" and attribute.ints:
            return tuple(int(label) for label in attribute.ints)
        if attribute.name == "classlabels_strings" and attribute.strings:
            return tuple(label.decode("utf-8", "replace") for label in attribute.strings)
    return None


def _probabilities_type(source: onnx.ValueInfoProto | None, classes: int) -> onnx.TypeProto:
    """The ZipMap input's declared tensor type where the graph gives one of rank 2, else
    float (N, classes)."""
    if (source is not None and source.type.WhichOneof("value") == "tensor_type"
            and source.type.tensor_type.HasField("shape") and len(source.type.tensor_type.shape.dim) == 2):
        return source.type
    return onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, ["N", classes])
