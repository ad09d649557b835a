"""``export(net, *inputs, file_name, file_format)``: ONNX (and MINDIR) files from a network."""

from train.export.api import export

__all__ = ["export"]
