"""Model inputs that are maps read by ai.onnx.ml's DictVectorizer, taken as the tensor it makes.

https://onnx.ai/onnx/operators/onnx_aionnxml_DictVectorizer.html

scikit-learn pipelines that start with a ``DictVectorizer`` (features given as ``{"name": value}``)
export, through skl2onnx, to a graph whose input is a map (one sample) or a sequence of maps,
vectorized by a DictVectorizer node into a ``(N, len(vocabulary))`` tensor with one column per key
of its vocabulary, 0 for keys a sample lacks. Neither the lite format nor the serving protocols
hold maps (KServe v2 has none), so such a model stopped at import. Here an input that only
DictVectorizer nodes with one vocabulary read becomes that tensor under the input's name: the
converted model takes the vectorized features, and keeps the column order in its
``feature_names`` metadata (JSON: input name -> keys). Verification runs the same rewrite of the
original. Vectorizing a dict is one line for the caller: ``[[d.get(k, 0) for k in keys]]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import onnx

FEATURE_NAMES_KEY = "feature_names"
_ML_DOMAINS = ("ai.onnx.ml",)


@dataclass(frozen=True)
class VectorizedInput:
    """A graph input that was a map read by a DictVectorizer, now the tensor it makes."""

    name: str
    keys: tuple[int | str, ...]
    value_type: int  # onnx.TensorProto element type of the map's values and of the tensor

    def note(self) -> str:
        shown = ", ".join(map(repr, self.keys[:8])) + (", ..." if len(self.keys) > 8 else "")
        kind = onnx.TensorProto.DataType.Name(self.value_type).lower()
        return (f"input {self.name!r} was a map read by DictVectorizer; it takes the {kind} tensor the node makes, "
                f"(N, {len(self.keys)}), one column per key in the order [{shown}] (0 for a missing key), kept in "
                f"the metadata {FEATURE_NAMES_KEY!r}")


def vectorize_inputs(proto: onnx.ModelProto) -> list[VectorizedInput]:
    """Rewrite, in ``proto``, each main-graph map input read only by DictVectorizer nodes of one
    vocabulary into the tensor they make, under the input's name (see the module docstring)."""
    graph = proto.graph
    vectorized = []
    for graph_input in graph.input:
        map_type = _map_type(graph_input.type)
        readers = [node for node in graph.node if graph_input.name in node.input]
        if map_type is None or not readers or any(not _is_vectorizer(node) for node in readers):
            continue
        vocabularies = {_vocabulary(node) for node in readers}
        value_type = map_type.value_type.tensor_type.elem_type
        if len(vocabularies) != 1 or None in vocabularies or not value_type:
            continue
        keys = vocabularies.pop()
        graph_input.type.CopyFrom(onnx.helper.make_tensor_type_proto(value_type, ["N", len(keys)]))
        for node in readers:
            node.op_type, node.domain = "Identity", ""
            del node.attribute[:]
        vectorized.append(VectorizedInput(graph_input.name, keys, value_type))
    return vectorized


def feature_names_metadata(vectorized: list[VectorizedInput]) -> dict[str, str]:
    """The converted model's metadata entry for ``vectorized`` (none when empty)."""
    if not vectorized:
        return {}
    return {FEATURE_NAMES_KEY: json.dumps({item.name: list(item.keys) for item in vectorized})}


def _map_type(value_type: onnx.TypeProto) -> onnx.TypeProto.Map | None:
    """The map of a map or sequence-of-maps type whose values are tensors, else None."""
    kind = value_type.WhichOneof("value")
    if kind == "sequence_type":
        value_type = value_type.sequence_type.elem_type
        kind = value_type.WhichOneof("value")
    if kind != "map_type" or value_type.map_type.value_type.WhichOneof("value") != "tensor_type":
        return None
    return value_type.map_type


def _is_vectorizer(node: onnx.NodeProto) -> bool:
    return node.op_type == "DictVectorizer" and node.domain in _ML_DOMAINS and len(node.input) == 1


def _vocabulary(node: onnx.NodeProto) -> tuple[int | str, ...] | None:
    for attribute in node.attribute:
        if attribute.name == "string_vocabulary" and attribute.strings:
            return tuple(key.decode("utf-8", "replace") for key in attribute.strings)
        if attribute.name == "int64_vocabulary" and attribute.ints:
            return tuple(int(key) for key in attribute.ints)
    return None
