"""MindSpore ``.ckpt`` files: ``save_checkpoint``, ``load_checkpoint``, ``load_param_into_net``.

Format (``mindspore/ccsrc/utils/checkpoint.proto``; reference §2; schema/checkpoint.proto):

* the file is a concatenation of serialized ``Checkpoint`` messages, each holding one
  ``Value{tag, TensorProto{dims, tensor_type, tensor_content}}``; we write one ``Value`` per
  message as MindSpore does, and read any split since the wire format is the same;
* a tensor larger than :data:`SLICE_BYTES` is written as consecutive values with the same tag,
  which the reader concatenates;
* ``tensor_type`` is ``str(mindspore dtype)`` (``"Float32"``), or ``"str"`` for string entries
  (``dims=[0]``, UTF-32 bytes); a scalar has dims ``[]`` or ``[0]``;
* with ``crc_check`` the file ends with ``b"crc_num"`` and the crc32 of all preceding bytes as a
  10-byte big-endian integer.

:func:`read_checkpoint` is the plain reader (name -> numpy array or str) that the converter
shares. Files are written atomically (temporary file, then ``os.replace``). No pickle.
"""

from __future__ import annotations

import math
import os
import tempfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from train._generated import checkpoint_pb2
from train.errors import CheckpointError
from train.tensor import Parameter, Tensor

SLICE_BYTES = 512 * 1024 * 1024  # SLICE_SIZE = 512 * 1024 KB in serialization.py
CRC_MARK = b"crc_num"
CRC_BYTES = 10

# str(mindspore dtype) <-> numpy; BFloat16 has no numpy type and is widened to float32 on read
DTYPES: dict[str, np.dtype] = {
    "Float16": np.dtype(np.float16),
    "Float32": np.dtype(np.float32),
    "Float64": np.dtype(np.float64),
    "Int8": np.dtype(np.int8),
    "Int16": np.dtype(np.int16),
    "Int32": np.dtype(np.int32),
    "Int64": np.dtype(np.int64),
    "UInt8": np.dtype(np.uint8),
    "UInt16": np.dtype(np.uint16),
    "UInt32": np.dtype(np.uint32),
    "UInt64": np.dtype(np.uint64),
    "Bool": np.dtype(np.bool_),
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}

Value = np.ndarray | str


def _ckpt_path(name: str | os.PathLike) -> Path:
    path = Path(name)
    return path if path.suffix == ".ckpt" else path.with_name(path.name + ".ckpt")


def _entries(save_obj: Any) -> list[tuple[str, Value]]:
    """(name, array or str) pairs from a Cell, a dict, or MindSpore's list of {"name", "data"}."""
    from train.nn.cell import Cell

    if isinstance(save_obj, Cell):
        items: Iterable[tuple[str, Any]] = ((p.name, p) for p in save_obj.get_parameters())
    elif isinstance(save_obj, Mapping):
        items = save_obj.items()
    elif isinstance(save_obj, (list, tuple)):
        try:
            items = [(entry["name"], entry["data"]) for entry in save_obj]
        except (KeyError, TypeError) as err:
            raise CheckpointError(
                "save_checkpoint: a list save_obj must hold {'name': ..., 'data': ...} dicts"
            ) from err
    else:
        raise CheckpointError(
            f"save_checkpoint: cannot save a {type(save_obj).__name__}; pass a Cell, a dict "
            "of name -> array, or a list of {'name', 'data'} dicts"
        )
    return [(str(name), _to_value(name, value)) for name, value in items]


def _to_value(name: str, value: Any) -> Value:
    if isinstance(value, str):
        return value
    if isinstance(value, Tensor):
        value = value.data
    array = np.asarray(value)
    if array.dtype == np.float64 and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)  # Python floats (append_dict) become Float32 as in MindSpore
    if array.dtype not in _NAMES:
        raise CheckpointError(
            f"save_checkpoint: {name!r} has dtype {array.dtype}, which .ckpt cannot "
            f"hold; use one of {sorted(str(d) for d in _NAMES)}"
        )
    return array


def serialize(
    entries: Iterable[tuple[str, Value]], crc_check: bool = False, slice_bytes: int = SLICE_BYTES
) -> bytes:
    """The bytes of a .ckpt file holding ``entries`` in order."""
    chunks: list[bytes] = []
    for name, value in entries:
        for tensor in _tensor_protos(value, slice_bytes):
            message = checkpoint_pb2.Checkpoint()
            item = message.value.add()
            item.tag = name
            item.tensor.CopyFrom(tensor)
            chunks.append(message.SerializeToString())
    content = b"".join(chunks)
    if crc_check:
        content += CRC_MARK + zlib.crc32(content).to_bytes(CRC_BYTES, "big")
    return content


def _tensor_protos(value: Value, slice_bytes: int) -> list[checkpoint_pb2.TensorProto]:
    if isinstance(value, str):
        return [
            checkpoint_pb2.TensorProto(dims=[0], tensor_type="str", tensor_content=np.array(value).tobytes())
        ]
    raw = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tobytes()
    step = max(slice_bytes // value.dtype.itemsize, 1) * value.dtype.itemsize
    pieces = [raw[i : i + step] for i in range(0, len(raw), step)] or [b""]
    return [
        checkpoint_pb2.TensorProto(dims=list(value.shape), tensor_type=_NAMES[value.dtype], tensor_content=p)
        for p in pieces
    ]


def atomic_write(path: Path, content: bytes) -> None:
    """Write via a temporary file in the same folder and ``os.replace``: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def save_checkpoint(
    save_obj: Any,
    ckpt_file_name: str | os.PathLike,
    append_dict: Mapping[str, Any] | None = None,
    crc_check: bool = False,
    choice_func: Callable[[str], bool] | None = None,
) -> Path:
    """Save parameters (``mindspore.save_checkpoint``); adds ``.ckpt`` when missing; returns the path.

    ``append_dict`` adds extra entries (``epoch_num``, strings, arrays); ``choice_func(name)``
    keeps only the parameters it accepts.
    """
    entries = _entries(save_obj)
    if choice_func is not None:
        entries = [(n, v) for n, v in entries if choice_func(n)]
    if append_dict:
        entries += [(str(k), _to_value(k, v)) for k, v in append_dict.items()]
    path = _ckpt_path(ckpt_file_name)
    atomic_write(path, serialize(entries, crc_check))
    return path


def parse(content: bytes, source: str = "<bytes>", crc_check: bool = False) -> OrderedDict[str, Value]:
    """Decode .ckpt bytes into ``{name: array or str}`` in file order (see the module docstring)."""
    if len(content) >= len(CRC_MARK) + CRC_BYTES and content[-17:-10] == CRC_MARK:
        body, stored = content[:-17], int.from_bytes(content[-10:], "big")
        if zlib.crc32(body) != stored:
            raise CheckpointError(
                f"{source}: CRC mismatch (stored {stored}, computed {zlib.crc32(body)}); the "
                "file is damaged, save it again"
            )
        content = body
    elif crc_check:
        raise CheckpointError(
            f"{source}: crc_check=True but the file has no crc_num appendix; save it with "
            "crc_check=True or load with crc_check=False"
        )
    message = checkpoint_pb2.Checkpoint()
    try:
        message.ParseFromString(content)
    except (DecodeError, UnicodeDecodeError) as err:  # protobuf's pure-Python decoder: the latter for bad text
        raise CheckpointError(
            f"{source}: not a MindSpore checkpoint (protobuf decode failed: {err})"
        ) from err
    pieces: OrderedDict[str, list[checkpoint_pb2.TensorProto]] = OrderedDict()
    previous = None
    for item in message.value:
        if not item.HasField("tensor"):
            raise CheckpointError(f"{source}: entry {item.tag!r} is a MapTensor, which is not supported")
        if item.tag in pieces and item.tag != previous:
            raise CheckpointError(f"{source}: name {item.tag!r} appears twice, not as consecutive slices")
        pieces.setdefault(item.tag, []).append(item.tensor)
        previous = item.tag
    return OrderedDict((name, _decode(name, parts, source)) for name, parts in pieces.items())


def _decode(name: str, parts: list[checkpoint_pb2.TensorProto], source: str) -> Value:
    head = parts[0]
    raw = b"".join(p.tensor_content for p in parts)
    if head.tensor_type == "str":
        return _decode_text(name, raw, source)
    dims = tuple(head.dims)
    if dims == (0,):
        dims = ()
    if head.tensor_type == "BFloat16":
        dtype = np.dtype("<u2")
    elif head.tensor_type in DTYPES:
        dtype = DTYPES[head.tensor_type].newbyteorder("<")
    else:
        raise CheckpointError(
            f"{source}: {name!r} has tensor_type {head.tensor_type!r}, which is not supported "
            f"(known: {sorted(DTYPES)} and BFloat16)"
        )
    if any(d < 0 for d in dims):
        raise CheckpointError(f"{source}: {name!r} has negative dims {dims}")
    if len(dims) > _MAX_RANK:
        raise CheckpointError(
            f"{source}: {name!r} has {len(dims)} dims; tensors have at most {_MAX_RANK} (the file is damaged)"
        )
    expected = math.prod(dims) * dtype.itemsize  # Python ints: damaged dims cannot overflow
    if expected != len(raw):
        raise CheckpointError(
            f"{source}: {name!r} has dims {dims} ({head.tensor_type}) = {expected} bytes, "
            f"but {len(raw)} bytes of content; the file is damaged or truncated"
        )
    array = np.frombuffer(raw, dtype=dtype).reshape(dims)
    if head.tensor_type == "BFloat16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(dtype.newbyteorder("="))


_MAX_RANK = 32  # numpy 1.x's limit (2.x allows 64); MindSpore's tensors stay far below it


def _decode_text(name: str, raw: bytes, source: str) -> str:
    """A "str" entry: numpy's UTF-32 (little-endian, 4 bytes per character)."""
    if len(raw) % 4:
        raise CheckpointError(
            f"{source}: string entry {name!r} has {len(raw)} bytes, not a multiple of 4 (UTF-32); "
            "the file is damaged"
        )
    try:
        return raw.decode("utf-32-le").rstrip("\x00")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{source}: string entry {name!r} is not valid UTF-32; the file is damaged") from err


def read_checkpoint(ckpt_file_name: str | os.PathLike, crc_check: bool = False) -> OrderedDict[str, Value]:
    """Read a .ckpt file into ``{name: numpy array or str}`` (the converter's entry point)."""
    path = Path(ckpt_file_name)
    try:
        content = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err.strerror}; check the path") from err
    return parse(content, str(path), crc_check)


def load_checkpoint(
    ckpt_file_name: str | os.PathLike,
    net: Any = None,
    strict_load: bool = False,
    filter_prefix: str | Iterable[str] | None = None,
    specify_prefix: str | Iterable[str] | None = None,
    choice_func: Callable[[str], bool] | None = None,
    crc_check: bool = False,
) -> dict[str, Any]:
    """``mindspore.load_checkpoint``: ``{name: Parameter}`` (string entries stay ``str``).

    ``filter_prefix`` drops names starting with it, ``specify_prefix`` keeps only those, and
    ``choice_func(name)`` keeps the accepted ones. With ``net``, the values are loaded into it.
    """
    values = read_checkpoint(ckpt_file_name, crc_check)
    drop = (filter_prefix,) if isinstance(filter_prefix, str) else tuple(filter_prefix or ())
    keep = (specify_prefix,) if isinstance(specify_prefix, str) else tuple(specify_prefix or ())
    result: dict[str, Any] = OrderedDict()
    for name, value in values.items():
        if (drop and name.startswith(drop)) or (keep and not name.startswith(keep)):
            continue
        if choice_func is not None and not choice_func(name):
            continue
        result[name] = value if isinstance(value, str) else Parameter(value, name)
    if net is not None:
        load_param_into_net(net, result, strict_load)
    return result


def load_param_into_net(
    net: Any, parameter_dict: Mapping[str, Any], strict_load: bool = False
) -> tuple[list[str], list[str]]:
    """Copy values into ``net``'s parameters by name; return ``(param_not_load, ckpt_not_load)``.

    A shape mismatch is always an error. With ``strict_load=True``, missing and extra names
    are errors too; the message lists every missing, extra and mis-shaped name at once.
    """
    params = net.parameters_dict()
    missing = [name for name in params if name not in parameter_dict]
    extra = [name for name in parameter_dict if name not in params]
    mis_shaped = []
    for name, param in params.items():
        if name in parameter_dict:
            value = parameter_dict[name]
            shape = np.shape(value.data if isinstance(value, Tensor) else value)
            if shape != param.shape:
                mis_shaped.append(f"{name} (checkpoint {shape}, network {param.shape})")
    if mis_shaped or (strict_load and (missing or extra)):
        lines = [f"cannot load the checkpoint into {type(net).__name__}:"]
        if missing:
            lines.append(f"  missing from the checkpoint: {', '.join(missing)}")
        if extra:
            lines.append(f"  not in the network: {', '.join(extra)}")
        if mis_shaped:
            lines.append(f"  mis-shaped: {', '.join(mis_shaped)}")
        lines.append("  check that the checkpoint was saved from the same network definition")
        raise CheckpointError("\n".join(lines))
    for name, param in params.items():
        if name in parameter_dict:
            value = parameter_dict[name]
            array = np.asarray(value.data if isinstance(value, Tensor) else value)
            param.set_data(array.astype(param.dtype, copy=True))
    return missing, extra
