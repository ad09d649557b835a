"""A .ckpt checkpoint plus a network definition -> an ONNX model for the converter.

Steps: build the network (:mod:`converter.mindspore.network`), read the checkpoint with the train
core's reader (``train.checkpoint``: one implementation of the format, reference §2: concatenated
``Checkpoint`` messages, slices of one tensor under the same tag, ``"str"`` entries, optional
``crc_num`` appendix; encrypted files use the block format of §1.1), load it **strictly** — every
parameter of the network present and of the right shape, no unknown tensors — and export ONNX in
memory with the train core's exporter, for the converter's usual path.

Entries that are not network parameters but that MindSpore writes next to them are skipped and
reported: string entries and ``append_dict`` values (``epoch_num``, ``step_num``), and optimizer
state (``moments.*``, ``accum.*``, ``learning_rate``, ``momentum``, ``global_step``, ...).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from converter.mindspore.encryption import decrypt, encryption_mode
from converter.mindspore.errors import CheckpointImportError, EncryptedModelError, NetworkDefinitionError
from converter.mindspore.network import build_network

BOOKKEEPING_NAMES = {"learning_rate", "momentum", "global_step", "epoch_num", "step_num", "beta1_power", "beta2_power"}
OPTIMIZER_PREFIXES = ("moments.", "accum.", "moment1.", "moment2.", "adam_m.", "adam_v.", "v.", "m.")


def read_checkpoint_file(path: Path, dec_key: bytes | None, dec_mode: str | None) -> dict[str, Any]:
    """``{name: array or str}`` from a (possibly encrypted) MindSpore .ckpt file."""
    from train.checkpoint import parse
    from train.errors import CheckpointError

    try:
        content = path.read_bytes()
    except OSError as err:
        raise CheckpointImportError(f"{path}: cannot read the checkpoint ({err.strerror}); check the path") from err
    mode = encryption_mode(content)
    if mode is not None:
        if dec_key is None:
            raise EncryptedModelError(
                f"{path} is encrypted ({mode}); pass its key: --dec-key HEX --dec-mode {mode}"
            )
        content = decrypt(content, dec_key, dec_mode, str(path))
    try:
        return dict(parse(content, str(path)))
    except CheckpointError as err:
        raise CheckpointImportError(str(err)) from err


def split_entries(values: dict[str, Any], parameters: set[str]) -> tuple[dict[str, np.ndarray], list[str]]:
    """(network parameters and unknown tensors, skipped bookkeeping names)."""
    kept: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    for name, value in values.items():
        bookkeeping = (
            isinstance(value, str) or name in BOOKKEEPING_NAMES or name.startswith(OPTIMIZER_PREFIXES)
        )
        if name not in parameters and bookkeeping:
            skipped.append(name)
        else:
            kept[name] = value
    return kept, skipped


def checkpoint_to_onnx(
    ckpt: str | os.PathLike,
    network: str,
    input_shape: Sequence[int],
    *,
    dec_key: bytes | None = None,
    dec_mode: str | None = None,
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The ONNX model of ``network`` with the weights of ``ckpt``; facts about the source."""
    from train.checkpoint import load_param_into_net
    from train.errors import CheckpointError, TrainError
    from train.export.onnx_export import build_model
    from train.tensor import Tensor

    path = Path(ckpt)
    shape = [int(d) for d in input_shape]
    if not shape or any(d <= 0 for d in shape):
        raise NetworkDefinitionError(
            f"input shape {list(input_shape)} must be positive sizes, e.g. --input-shape 1,1,32,32"
        )
    net = build_network(network)
    values = read_checkpoint_file(path, dec_key, dec_mode)
    parameters, skipped = split_entries(values, set(net.parameters_dict()))
    try:
        load_param_into_net(net, parameters, strict_load=True)
    except CheckpointError as err:
        raise CheckpointImportError(f"{path} does not fit --network {network}: {err}") from err
    try:
        proto = build_model(net, [Tensor(np.zeros(shape, np.float32))])
    except TrainError as err:
        raise NetworkDefinitionError(
            f"--network {network}: the network cannot be exported on an input of shape {shape} ({err})"
        ) from err
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    facts = {
        "source": str(path),
        "sha256": digest,
        "size_bytes": str(path.stat().st_size),
        "skipped": ", ".join(skipped),
    }
    return proto, facts
