"""The .lite model format: in-memory IR, writer, verified zero-copy reader, builder.

The format is defined by ``schema/model.fbs`` and described in ``docs/format.md``.
"""

from lite.format import ir
from lite.format.builder import GraphBuilder
from lite.format.dtypes import DataType
from lite.format.reader import SUPPORTED_MAJOR, load
from lite.format.writer import save, to_bytes

__all__ = ["DataType", "GraphBuilder", "SUPPORTED_MAJOR", "ir", "load", "save", "to_bytes"]
